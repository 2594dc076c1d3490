// The expression simplifier: constant folding, algebraic identities, and the division and
// modulo rewrites that known ranges allow. The simplify pass (kiln/passes/simplify.h) runs it
// over a whole loop nest; the backends run it on the indices they build.
#pragma once

#include "kiln/ir.h"
#include "kiln/range.h"

namespace kiln::ir {

// Tiling and splitting leave index expressions such as (4 * io + ii) / 4 and
// 4 * io + ii - 4 * io behind; they cost a division or a dead add per
// iteration unless someone who knows 0 <= ii < 4 removes them, and they hide
// the invariant and common parts that LICM and CSE look for. Integer sums are
// rebuilt in canonical form: terms in order of first appearance, positive
// ones first, coefficients in front (4 * io), the constant last. Floats fold
// only where the result is exact (two constants, x * 1.0). A Load that
// executes is never dropped. `known`: the ranges of the integer variables in scope.
Expr simplify(const Expr& e, const Bounds& known = {});

}  // namespace kiln::ir
