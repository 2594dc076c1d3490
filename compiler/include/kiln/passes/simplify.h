// Simplify: constant folding, algebraic identities, and the division and modulo
// rewrites that known loop bounds allow.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::passes {

// A closed integer range [min, max]; an absent end is unbounded.
struct Interval {
  std::optional<int64_t> min, max;
};
// What is known about the integer variables in scope.
using Bounds = std::map<std::string, Interval>;

// Tiling and splitting leave index expressions such as (4 * io + ii) / 4 and
// 4 * io + ii - 4 * io behind; they cost a division or a dead add per
// iteration unless someone who knows 0 <= ii < 4 removes them, and they hide
// the invariant and common parts that LICM and CSE look for. Integer sums are
// rebuilt in canonical form: terms in order of first appearance, positive
// ones first, coefficients in front (4 * io), the constant last. Floats fold
// only where the result is exact (two constants, x * 1.0). A Load that
// executes is never dropped.
ir::Expr simplify(const ir::Expr& e, const Bounds& known = {});

// The range an integer expression takes when its variables stay in `known`
// (a variable not in it is unbounded): what Simplify itself uses, for code
// generators that need a constant bound (a GPU block's thread count).
Interval range_of(const ir::Expr& e, const Bounds& known);

// Simplifies every expression with the ranges of the loops around it, and
// removes dead code: ifs with a constant condition, loops with an empty
// range; a loop of one iteration becomes a let of its variable.
ir::Stmt simplify(const ir::Stmt& s);

}  // namespace kiln::passes
