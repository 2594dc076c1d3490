// The shapes of loop nests the CUDA backend recognizes (internal to it): which statements hold
// GPU loops, which nests are cache fills, and the perfect nest a fill's iterations are dealt
// out over. The lowering passes and the printer decide by the same tests.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "kiln/loop_ir.h"

namespace kiln::cuda {

// The first loop of s (in the order the statements are written) with a tag that satisfies pred,
// or null; and whether there is one.
const ir::For* first_loop(const ir::Stmt& s, bool (*pred)(ir::LoopTag));
bool has_loop(const ir::Stmt& s, bool (*pred)(ir::LoopTag));

// What a loop, store or evaluation at the top level of a GPU func is: a kernel over blocks and
// threads (its outermost loops tagged gpu_block, or thread loops with no block loop around them),
// a kernel of one thread (no GPU tag in it), or a nest the printer refuses (block loops inside
// another loop).
enum class TopLevel { Kernel, OneThread, Refused };
TopLevel top_level(const ir::Stmt& s);

// The top level of a GPU func's body with `kernel` applied to each kernel over blocks and threads,
// `one_thread` to each kernel of one thread, and a nest the printer refuses left as it is (for it
// to say why): the walk of the lowering passes that rewrite kernels. Thread loops with no block
// loop around them (where the schedule's block loops have one iteration, lowering leaves those
// out) reach `kernel` inside a gpu_block_x loop of one iteration, so that every kernel it sees
// starts with its block loops and whatever it makes of the block's code (temporaries around the
// thread loops, a K loop's steps) stays inside that one kernel; and where `one_thread` makes more
// than one statement of a kernel of one thread, those go inside a loop of one iteration, untagged,
// which keeps them one kernel.
ir::Stmt map_kernels(const ir::Stmt& s, const std::function<ir::Stmt(const ir::Stmt&)>& kernel,
                     const std::function<ir::Stmt(const ir::Stmt&)>& one_thread);

// The names a lowering pass makes for what it adds (a temporary, a loop variable): a prefix and
// a number, none that f uses (its arguments, the buffers its body allocates, reads and writes,
// its loop variables and lets) or that were made before.
class FreshNames {
 public:
  explicit FreshNames(const ir::LoweredFunc& f);
  std::string operator()(const std::string& prefix);

 private:
  std::set<std::string> used_;
  int count_ = 0;
};

// Loop n with another body.
ir::Stmt with_body(const ir::For& n, ir::Stmt body);

// The iterations of loop n: (end - min) / step rounded up, simplified.
ir::Expr extent_of(const ir::For& n);

// s with f applied to each statement it holds, for a Block, a LetStmt, an Alloc or an If (an
// absent else too); s itself for the others.
ir::Stmt with_children(const ir::Stmt& s, const std::function<ir::Stmt(const ir::Stmt&)>& f);

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
// The copy nest at the top of s, a loop that is not tagged parallel. A loop tagged gpu_lanes
// (distribute_fills) is not one of its loops: it is (the start of) the body.
CopyNest copy_nest(const ir::Stmt& s);

}  // namespace kiln::cuda
