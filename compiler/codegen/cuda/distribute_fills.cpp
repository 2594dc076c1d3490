// The GPU lowering pass that deals a block's cache fills out to its threads (kiln/cuda.h).
//
// Inside a kernel's block loops and outside its thread loops, a nest with no thread loop that
// only copies into temporaries (a cache fill) is shared among the block's threads: its outermost
// loop is tagged gpu_distributed, and the printer deals the iterations of the perfect nest it
// heads (copy_nest) out to the threads in turn. Where the nest copies floats, the innermost
// loop's body becomes a loop tagged gpu_lanes over the group of consecutive elements one
// iteration copies as one value (copies.h: 4 or 2 aligned floats, else 1), and the innermost
// loop steps by the group.
//
// The walk follows the nest the way the printer reads it; a nest the printer refuses, code for
// one thread, and a fill into a thread's own temporaries are left as they are.
#include <algorithm>
#include <string>
#include <vector>

#include "block_code.h"
#include "copies.h"
#include "kiln/analysis.h"
#include "kiln/cuda.h"
#include "mma.h"
#include "nests.h"
#include "spaces.h"

namespace kiln::cuda {
namespace {

using ir::Stmt;

class DistributeFills : public BlockCodeMutator {
 public:
  explicit DistributeFills(const ir::LoweredFunc& f) : BlockCodeMutator(f), fresh_(f) {}

  Stmt run(const Stmt& body) {
    return map_kernels(
        body, [this](const Stmt& s) { return kernel(s); }, [](const Stmt& s) { return s; });
  }

 private:
  // A nest with no thread loop at block level: a cache fill that does not write only a thread's
  // own temporaries is dealt out to the block's threads.
  Stmt block_nest(const Stmt& s) override {
    if (has_loop(s, is_mma)) return s;  // refused by the printer: a warp runs an mma nest
    if (!shared_fill(s)) return BlockCodeMutator::block_nest(s);
    CopyNest nest = copy_nest(s);
    VectorCopy copy = vector_copy(nest.chain, nest.lets, nest.body, lets_, bufs_);
    return rebuild(s, nest, copy);
  }

  // The nest at s (its loops nest.chain from `k` on) with the outermost loop tagged
  // gpu_distributed and, for a copy of floats, the innermost loop's body a lanes loop.
  Stmt rebuild(const Stmt& s, const CopyNest& nest, const VectorCopy& copy, size_t k = 0) {
    if (const ir::LetStmt* l = ir::as<ir::LetStmt>(s))
      return std::make_shared<ir::LetStmt>(l->var, l->value, rebuild(l->body, nest, copy, k));
    const ir::For& n = static_cast<const ir::For&>(*s);
    ir::LoopTag tag = k == 0 ? ir::LoopTag::GpuDistributed : n.tag;
    if (k + 1 < nest.chain.size())
      return std::make_shared<ir::For>(n.var, n.min, n.end, n.step, tag,
                                       rebuild(n.body, nest, copy, k + 1));
    if (copy.width == 0) return std::make_shared<ir::For>(n.var, n.min, n.end, n.step, tag, n.body);
    // the group of `width` elements starting at n.var, one iteration of the loop
    std::string lane = fresh_("kiln_lane");
    Stmt lanes = std::make_shared<ir::For>(
        lane, ir::var(n.var), ir::var(n.var) + ir::int_imm(copy.width), 1, ir::LoopTag::GpuLanes,
        ir::substitute(n.body, {{n.var, ir::var(lane)}}));
    return std::make_shared<ir::For>(n.var, n.min, n.end, n.step * copy.width, tag, lanes);
  }

  FreshNames fresh_;  // the lanes loops' variables
};

}  // namespace

ir::LoweredFunc distribute_fills(const ir::LoweredFunc& f) {
  ir::LoweredFunc out = f;
  out.body = DistributeFills(f).run(f.body);
  return out;
}

}  // namespace kiln::cuda
