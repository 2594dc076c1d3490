// Loop-invariant code motion with normalization and a cost model (seed 000, DESIGN.md section 4).
//
// Why kiln does this itself instead of leaving it to LLVM: tiling leaves index
// arithmetic such as xo*32768 + xi*1024 + yo*32 + yi recomputed in the
// innermost loop, and LLVM's LICM often cannot hoist it, because kiln's floor
// division and modulo lower to selects and compares that LLVM does not
// reassociate, and because the invariant part is only a subtree once the
// operands are reordered by loop depth. Doing it on the loop IR, where loops,
// scopes and conditions are still explicit, finds these cases directly.
#pragma once

#include "kiln/loop_ir.h"

namespace kiln::passes {

// Per-target cost model and threshold: an invariant expression e is hoisted
// only when cost(e) >= threshold, where cost(e) is 0 for constants and
// variables and otherwise the cost of e's operator plus its operands' costs.
struct LicmOptions {
  int threshold = 1;  // K
  int cost_add = 1;   // + and -
  int cost_mul = 2;
  int cost_div = 3;  // / and %
  int cost_min_max = 1;
  int cost_compare = 1;  // comparisons, and, or, not
  int cost_select = 1;
  int cost_cast = 1;   // casts and negation
  int cost_call = 10;  // math intrinsics
  // GPU targets: the backend compiler unrolls loops of small constant extent
  // and optimizes them itself, so an expression whose innermost loop has a
  // constant extent <= small_loop costs 0 (and is left alone).
  bool gpu = false;
  int small_loop = 8;
  // CPU targets (set by the pass pipeline): the same for serial loops (untagged
  // or tagged unroll) of constant extent <= small_loop, which LLVM unrolls
  // completely. LLVM then needs each copy's index as base + constant in the
  // copy itself: a base hoisted into a let before the loop (xo * 4 in
  // `licm_var + xi`) becomes `or disjoint C, base` after unrolling, which
  // BasicAA cannot take apart, so GVN and DSE keep every load and store of
  // neighbouring elements (maxpool: 2.3x slower).
  bool unrolled_serial_loops = false;

  friend bool operator==(const LicmOptions&, const LicmOptions&) = default;
};

// Rewrites s into a form where invariant parts are visible to licm: ranks every
// expression by loop depth (constants 0, an iterator the depth of its loop,
// outermost 1, anything else the max of its operands), stable-sorts the
// operands of integer Add/Mul/Min/Max and boolean And/Or chains by rank and
// groups equal ranks into subtrees; collapses nested selects and ifs that give
// the same result into one condition; merges adjacent ifs with the same
// condition. Float arithmetic is never reassociated.
ir::Stmt normalize(const ir::Stmt& s);

// Hoists loop invariants of s, each to the outermost loop it is invariant in:
// expressions (into `let licm_var_N = ...;` before the loop), let statements
// whose value is invariant, and invariant if-conditions that form a loop's
// whole body (for i { if (c) A else B } -> if (c) for i A else for i B).
// Never hoists a load (a store in the loop may change it) or a division whose
// divisor is not a nonzero constant (the loop may run zero times).
ir::Stmt licm(const ir::Stmt& s, const LicmOptions& options = {});

}  // namespace kiln::passes
