// Common subexpression elimination on the loop IR (DESIGN.md section 4, seed 004).
#pragma once

#include "kiln/loop_ir.h"

namespace kiln::passes {

struct CseOptions {
  // A computation is put in a variable when it is computed at least this many
  // times in one scope.
  int min_uses = 2;
  // When > 0 (CPU targets, set by the pass pipeline): a computation whose
  // innermost loop is a serial loop (untagged or tagged unroll) of constant
  // extent <= small_loop is only shared inside that loop, never through a
  // variable bound outside it. LLVM unrolls such a loop completely and needs
  // each copy's index as base + constant within the copy (see LicmOptions::
  // unrolled_serial_loops); `let cse_var = xo * 4` before the loop hides it.
  int small_loop = 0;
  // Match operands up to commutativity and associativity, so that (x + y) + z
  // and z + (x + y) are one computation (seed 004's step beyond TVM's CSE);
  // false: only structurally equal expressions are shared.
  bool commutative = true;

  friend bool operator==(const CseOptions&, const CseOptions&) = default;
};

// Puts every computation that is done at least `min_uses` times within a scope
// into a variable (`let cse_var_N = ...`, N in order of creation), placed as
// far out as the variables it reads allow, longer computations inside the lets
// of the shorter ones they contain, repeating until nothing is left to share.
//
// kiln needs its own CSE because tiling, splitting and inlining repeat the same
// index expressions (xo*32 + xi, (i*4 + j) / 8, ...) and inlined computations
// many times in one statement, and LLVM's GVN cannot see through kiln's floor
// divisions (lowered to compare-and-adjust sequences) and misses commutative
// and associative variants ((x+y)+z against z+(x+y)): kiln compares
// computations after normalizing integer +, *, min, max, &&, || chains (float
// + and * only swap the operands of one operation; they never reassociate).
//
// Only computations without side effects move: constants, variables, loads,
// calls other than the pure math intrinsics, and anything containing a load or
// such a call are never put in a variable, so no read crosses a store. A
// computation that may trap (an integer division or modulo by a value that is
// not a known constant) is only evaluated earlier when it was evaluated on
// every path anyway; branches of an if or a select, the right side of && and
// ||, and loop bodies otherwise get their own scopes.
ir::Stmt cse(const ir::Stmt& s, const CseOptions& options = {});
ir::Expr cse(const ir::Expr& e, const CseOptions& options = {});

}  // namespace kiln::passes
