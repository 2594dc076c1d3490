// The simplify pass: the expression simplifier (kiln/simplify.h) over a whole loop nest, and
// dead code removed.
#pragma once

#include "kiln/loop_ir.h"

namespace kiln::passes {

// Simplifies every expression with the ranges of the loops around it, and
// removes dead code: ifs with a constant condition, loops with an empty
// range; a loop of one iteration becomes a let of its variable.
ir::Stmt simplify(const ir::Stmt& s);

}  // namespace kiln::passes
