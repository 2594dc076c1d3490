// The GPU lowering pass that puts values in each thread's registers (kiln/cuda.h): loops tagged
// unroll in the code a thread runs are unrolled, and accumulators are kept in one-element
// gpu_local temporaries across the loops that update them (registers.h has the rewrites).
//
// The walk follows the nest the way the printer reads it (kernels at the top level, code that
// runs once per block inside the gpu_block loops, code one thread runs inside the gpu_thread
// loops), and the rewrites apply where the printer would run the code: a nest it refuses is left
// as it is, for the printer to say why.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "block_code.h"
#include "kiln/cuda.h"
#include "mma.h"
#include "nests.h"
#include "registers.h"
#include "spaces.h"

namespace kiln::cuda {
namespace {

using ir::Stmt;

class KeepInRegisters : public BlockCodeMutator {
 public:
  explicit KeepInRegisters(const ir::LoweredFunc& f) : BlockCodeMutator(f), names_(f) {}

  Stmt run(const Stmt& body) {
    return map_kernels(
        body, [this](const Stmt& s) { return blocks_kernel(s); },
        [this](const Stmt& s) { return one_thread_kernel(s); });
  }

 private:
  // A nest with no GPU tag, run by one thread. Its outermost loop stays a loop even where it is
  // tagged unroll: its copies would be kernels of their own.
  Stmt one_thread_kernel(const Stmt& s) {
    const ir::For* n = ir::as<ir::For>(s);
    if (!n) return thread(unroll_constant_loops(s));

    return thread(with_body(*n, unroll_constant_loops(n->body)));
  }

  // A kernel over blocks and threads. The buffers its mma nests use stay in memory: the tensor
  // cores load their tiles from there.
  Stmt blocks_kernel(const Stmt& s) {
    mma_bufs_ = mma_buffers(s);
    return kernel(s);
  }

  // Elements the threads keep updating across the loop stay in their registers.
  Stmt serial_loop(const Stmt& s, const ir::For& n) override {
    if (Stmt kept = keep_accumulators_across_block_loop(s, eligible(), fresh()); kept != s)
      return block(kept);
    return with_body(n, block(n.body));
  }

  // A nest with no thread loop at block level: a cache fill's iterations are dealt out to the
  // block's threads, other code runs in every thread or in the first.
  Stmt block_nest(const Stmt& s) override {
    if (!shared_fill(s)) return thread(s);
    CopyNest nest = copy_nest(s);
    return with_inner_body(s, nest.chain.back(), thread(unroll_constant_loops(nest.body)));
  }

  // s with the body of `inner`, a loop inside it along a chain of loops and lets, replaced.
  static Stmt with_inner_body(const Stmt& s, const ir::For* inner, const Stmt& body) {
    if (const ir::LetStmt* l = ir::as<ir::LetStmt>(s))
      return std::make_shared<ir::LetStmt>(l->var, l->value, with_inner_body(l->body, inner, body));
    const auto& n = static_cast<const ir::For&>(*s);
    return with_body(n, &n == inner ? body : with_inner_body(n.body, inner, body));
  }

  Stmt thread_loop(const Stmt&, const ir::For& n) override {
    return with_body(n, thread(unroll_constant_loops(n.body)));
  }

  // Code one thread runs.
  Stmt thread(const Stmt& s) {
    if (!s) return s;
    switch (s->kind) {
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        bufs_[n.buf] = {n.dtype, n.shape, thread_code_space(n.loc)};
        return with_children(s, [this](const Stmt& c) { return thread(c); });
      }
      case ir::StmtKind::Block:
      case ir::StmtKind::LetStmt:
      case ir::StmtKind::If:
        return with_children(s, [this](const Stmt& c) { return thread(c); });
      case ir::StmtKind::For: {
        const auto& n = static_cast<const ir::For&>(*s);
        if (ir::is_gpu_thread_tag(n.tag)) return thread_loop(s, n);
        if (n.tag == ir::LoopTag::Parallel || ir::is_gpu_block_tag(n.tag))
          return s;                   // refused by the printer
        if (is_mma(n.tag)) return s;  // the tensor cores' (mma.h)
        // Elements the loop keeps updating stay in registers while it runs.
        if (Stmt kept = keep_accumulators_in_registers(s, eligible(), fresh()); kept != s)
          return thread(kept);
        return with_body(n, thread(n.body));
      }
      case ir::StmtKind::Store:
      case ir::StmtKind::Evaluate:
        return s;
    }
    return s;
  }

  // The type of a buffer whose elements may be kept in registers (not already a thread's own).
  std::function<std::optional<ir::DType>(const std::string&)> eligible() const {
    return [this](const std::string& b) {
      auto it = bufs_.find(b);
      return it == bufs_.end() || it->second.space == Space::Local || mma_bufs_.count(b)
                 ? std::nullopt
                 : std::optional<ir::DType>(it->second.dtype);
    };
  }
  // A name for an accumulator that the func does not use.
  std::function<std::string()> fresh() {
    return [this] { return names_("kiln_acc"); };
  }

  FreshNames names_;
  std::set<std::string> mma_bufs_;  // those the kernel's mma nests use
};

}  // namespace

ir::LoweredFunc keep_in_registers(const ir::LoweredFunc& f) {
  ir::LoweredFunc out = f;
  out.body = KeepInRegisters(f).run(f.body);
  return out;
}

}  // namespace kiln::cuda
