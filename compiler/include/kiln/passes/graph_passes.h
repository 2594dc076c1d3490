// Graph-level passes: on a graph of operators rather than on one loop nest
// (DESIGN.md section 4; seed 001 for folding and operator CSE, seed 003 for
// Relay's RemoveUnusedFunctions and EliminateCommonSubexpr).
#pragma once

#include "kiln/passes.h"

namespace kiln::passes {

// Topological constant folding (seed 001, 5.1): in call order, a call whose
// arguments are all constants (or that has none) is run at compile time by
// ctx.evaluate (the JIT in kiln; the reference interpreter when unset) and its
// results become constants with the computed values.
ir::Graph fold_constants(const ir::Graph& g, const PassContext& ctx);

// Operator CSE (seed 001, 5.2): a call of the same algorithm (same
// computations, buffers and param values; the schedule does not matter) on
// the same arguments as an earlier call is dropped, and its results are read
// from the earlier call's; equal constants (same type, shape and values) are
// merged the same way. A call or constant whose result is a graph output
// stays, so that every output keeps its name.
ir::Graph eliminate_common_operators(const ir::Graph& g);

// Removes calls none of whose results reach a graph output, and constants
// nothing reads (Relay's RemoveUnusedFunctions). Inputs stay: they are the
// graph's interface.
ir::Graph remove_unused_operators(const ir::Graph& g);

// Fuses an elementwise consumer into the operator that produces its input,
// as an epilogue (conv -> bias -> relu becomes one operator): the consumer's
// computation is appended to the producer, reading and overwriting the
// producer's output in place. Its loops get the producer's loop schedule
// (split, tile, reorder, fuse, tag, separate replayed on the matching
// dimensions) and run inside the deepest loop of the producer's writing
// computation that the dependences allow, as checked by kiln's legality
// analysis; when no shared loop is legal, after the producer's loops.
//
// An elementwise consumer has one computation that writes every element of
// its one output once, reading the fused input only at the element it
// writes; the input must have the output's type and shape, be read by no
// other call, and not be a graph output. Repeats until nothing fuses, so
// chains (conv -> batch norm -> relu) become one operator.
ir::Graph fuse_elementwise(const ir::Graph& g, const PassContext& ctx);

// Gives each operator that has neither a schedule nor knobs (a library operator without a
// hand schedule: pooling, softmax, elementwise chains, reductions; or one fused from such)
// the first sketch kiln derives from its algorithm (kiln/autosched.h), its knobs at their
// defaults: its loops tiled, parallel and vectorized where the dependences allow (on a GPU
// target, the GPU sketch: over blocks and threads), and its knobs a model's tuning job searches
// as any operator's. Equal operators get the same sketch.
ir::Graph sketch_operators(const ir::Graph& g, const PassContext& ctx);

}  // namespace kiln::passes
