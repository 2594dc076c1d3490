// Schedules from the algorithm alone (DESIGN.md section 7, issue: a func with no schedule is
// tuned too): for a func without a schedule, kiln derives sketches -- schedule templates whose
// sizes and choices are knobs -- from its computations' domains, their reductions and the
// exact dependences, the way Ansor derives its CPU sketches: the innermost two data-parallel
// loops of each computation tiled, its reduction loops between the tiles and the points (the
// outermost one blocked, its outer part outside the tiles and the initialization a loop nest
// of its own before, where the dependences allow; else whole, the initialization in the same
// tile), the outer loops run in parallel and the innermost point loop vectorized; or, where
// tiling does not apply, the innermost data-parallel loop split in the same way. A reduction
// is a computation with an initialization `NAME_init` over the leading loops, or an update of
// what it stores whose trailing loops its store index does not name. An input read across the
// vector loop a
// stride apart and reused across another loop is packed (copied once, that dimension last);
// with a blocked reduction, an input a value computation selects from with zeros outside is
// copied with its zero border at each block. A scatter (a store index that reads a
// buffer) is split into chunks run in parallel under an update rule (privatize, else atomic);
// a computation none of whose cuts is legal (an inner loop whose bounds are read at run time)
// gets its outermost loop in parallel alone. The computations inside an algorithm loop
// (a stencil's time loop) are tiled in time: skewed, the time loop and their first loop
// tiled, the smallest skew the dependences allow; else each time step's first loop runs in
// parallel. Two computations of two loops that read one matrix by their iterators, one after
// the other (atax, mvt), are also sketched fused over its rows: one nest whose blocks of rows
// both compute in, so that the matrix is read once; in the same sketch, an elementwise
// computation that reads what the one before it stores only in the rows it computes itself
// (covariance's cov_scale reading cov[i, j]) is computed at the producer's block of rows. A
// sketch is schedule text (.kiln knob
// lines and commands): what a user reads and can paste is what runs. Every sketch offered has
// passed the legality check (poly::schedule) at its knobs' defaults and at their first
// candidates (the smallest sizes); a command the dependences forbid is left out of it,
// computation by computation.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/limits.h"

namespace kiln::autosched {

struct Sketch {
  std::string name;      // "tiled", "split", "fused"
  std::string schedule;  // a `schedule { ... }` block's body: knobs and constraints, then commands
};

// The machine a sketch is for. A CPU's: the structure above. A GPU's (Ansor's GPU one): each
// computation's two innermost data-parallel loops cut into blocks, the threads of a block and
// each thread's register tile (unrolled), the loops outside them over blocks too, its reduction
// stepped through with the step's inputs staged in the block's shared memory where they fit;
// or split, its innermost data-parallel loop over blocks and threads, each thread reducing (a
// scatter updating atomically). Every size list stays within a block's 1024 threads and 64 sums
// a thread on every CUDA GPU; knob constraints keep the staged inputs within 48 KiB of shared
// memory, a block's sums within its registers, and the blocks along a grid's y and z within
// 65535.
// A func with an algorithm loop (a stencil's time loop) has no GPU sketch: kernels inside a
// loop are not supported on GPUs yet.
enum class Machine { Cpu, Gpu };

// The sketches of `f` for machine `m`, which has no schedule or knobs of its own
// (std::invalid_argument when it has), each legal at its knobs' defaults; distinct; possibly
// none (a computation nested deeper than one algorithm loop, or one with nothing to tile, is
// left as the algorithm orders it).
std::vector<Sketch> sketches(const ir::Func& f, const Limits& limits = {},
                             Machine m = Machine::Cpu);

// The sketch a tuning job searches: the first of sketches(f, limits, m), computed alone; none
// when there is none.
std::optional<Sketch> first_sketch(const ir::Func& f, const Limits& limits = {},
                                   Machine m = Machine::Cpu);

// `f` as its algorithm alone: its schedule, knobs, knob splits and knob constraints taken away.
ir::Func algorithm_of(ir::Func f);

// `f` with `s` as its schedule, parsed back from text (CompileError when it does not parse).
ir::Func apply(const ir::Func& f, const Sketch& s, const Limits& limits = {});

}  // namespace kiln::autosched
