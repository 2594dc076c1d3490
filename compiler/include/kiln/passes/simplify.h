// Simplify: constant folding, algebraic identities, and the division and modulo
// rewrites that known loop bounds allow.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kiln/ir.h"
#include "kiln/loop_ir.h"
#include "kiln/range.h"

namespace kiln::passes {

// What is known about the integer variables in scope (kiln/range.h).
using Bounds = ir::Bounds;

// Tiling and splitting leave index expressions such as (4 * io + ii) / 4 and
// 4 * io + ii - 4 * io behind; they cost a division or a dead add per
// iteration unless someone who knows 0 <= ii < 4 removes them, and they hide
// the invariant and common parts that LICM and CSE look for. Integer sums are
// rebuilt in canonical form: terms in order of first appearance, positive
// ones first, coefficients in front (4 * io), the constant last. Floats fold
// only where the result is exact (two constants, x * 1.0). A Load that
// executes is never dropped.
ir::Expr simplify(const ir::Expr& e, const Bounds& known = {});

// Simplifies every expression with the ranges of the loops around it, and
// removes dead code: ifs with a constant condition, loops with an empty
// range; a loop of one iteration becomes a let of its variable.
ir::Stmt simplify(const ir::Stmt& s);

}  // namespace kiln::passes
