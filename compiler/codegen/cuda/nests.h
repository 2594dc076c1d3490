// The shapes of loop nests the CUDA backend recognizes (internal to it): which statements hold
// GPU loops, which nests are cache fills, and the perfect nest a fill's iterations are dealt
// out over. The lowering passes and the printer decide by the same tests.
#pragma once

#include <vector>

#include "kiln/loop_ir.h"

namespace kiln::cuda {

// The first loop of s (in the order the statements are written) with a tag that satisfies pred,
// or null; and whether there is one.
const ir::For* first_loop(const ir::Stmt& s, bool (*pred)(ir::LoopTag));
bool has_loop(const ir::Stmt& s, bool (*pred)(ir::LoopTag));

// The stores of a statement, in the order they appear.
std::vector<const ir::Store*> stores_of(const ir::Stmt& s);

// Whether the stores are those of a cache fill (a copy into a temporary) only.
bool is_fill(const std::vector<const ir::Store*>& stores);

// A perfect nest of loops, each with bounds the nest does not change, the lets between them,
// and the innermost loop's body (with the lets after the last loop).
struct CopyNest {
  std::vector<const ir::For*> chain;
  std::vector<const ir::LetStmt*> lets;  // bound once the indices are known
  ir::Stmt body;
};
// The copy nest at the top of s, a loop that is not tagged parallel.
CopyNest copy_nest(const ir::Stmt& s);

}  // namespace kiln::cuda
