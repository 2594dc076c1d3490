// The GPU lowering pass that places the barriers between a block's steps (kiln/cuda.h).
//
// Inside a kernel's block loops and outside its thread loops, the code runs once per block: a
// step is a thread loop (each thread its iteration), a fill shared among the threads, or code
// one thread runs. The threads meet at a barrier before a step that reads memory they share
// (shared tiles, device memory; not a thread's registers) which a step since the last barrier
// wrote, or writes memory one read. A serial loop around thread loops (the matmul's K loop) is
// run by every thread, so its body's steps are placed the same way, and a barrier ends its
// body where the next iteration's first steps would overtake this one's last. The pass decides
// which such loops are pipelines (pipeline.h) and marks them gpu_pipelined; pipeline_tiles
// writes those as pipelines, with barriers of their own after the prologue and after the stores
// into the tiles. Such a loop gets one before it where its fills conflict with what came before,
// and one after its computation where the stores into its tiles do.
//
// The walk follows the nest the way the printer reads it (kernels at the top level, code once
// per block inside the gpu_block loops, thread code inside the gpu_thread loops); a nest the
// printer refuses is left for it to say why.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "block_code.h"
#include "kiln/analysis.h"
#include "kiln/cuda.h"
#include "mma.h"
#include "nests.h"
#include "pipeline.h"
#include "registers.h"
#include "spaces.h"

namespace kiln::cuda {
namespace {

using ir::Expr;
using ir::Stmt;

// The buffers a statement reads and writes.
struct Effects {
  std::set<std::string> reads, writes;
  // Whether `later` must wait for these: it reads or writes what they wrote, or writes what
  // they read.
  bool conflicts(const Effects& later) const {
    for (const std::string& w : writes)
      if (later.reads.count(w) || later.writes.count(w)) return true;
    for (const std::string& r : reads)
      if (later.writes.count(r)) return true;
    return false;
  }
  void add(const Effects& o) {
    reads.insert(o.reads.begin(), o.reads.end());
    writes.insert(o.writes.begin(), o.writes.end());
  }
};

class EffectsCollector : public ir::StmtVisitor {
 public:
  Effects fx;

 protected:
  void visit_load(const ir::Load& n) override {
    fx.reads.insert(n.buf);
    ir::StmtVisitor::visit_load(n);
  }
  void visit_store(const ir::Store& n) override {
    fx.writes.insert(n.buf);
    if (n.atomic) fx.reads.insert(n.buf);
    ir::StmtVisitor::visit_store(n);
  }
};

Stmt barrier_then(const Stmt& s) { return ir::block({ir::gpu_barrier(), s}); }
Stmt then_barrier(const Stmt& s) { return ir::block({s, ir::gpu_barrier()}); }

class PlaceBarriers : public BlockCodeMutator {
 public:
  explicit PlaceBarriers(const ir::LoweredFunc& f) : BlockCodeMutator(f) {}

  Stmt run(const Stmt& body) {
    // a kernel of one thread has no barriers
    return map_kernels(
        body, [this](const Stmt& s) { return blocks_kernel(s); },
        [this](const Stmt& s) { return thread_code(s); });
  }

 private:
  // A kernel over blocks and threads: its block loops and the lets between them, then what runs
  // once per block.
  Stmt blocks_kernel(const Stmt& s) {
    pending_ = {};
    mma_kernel_ = has_loop(s, is_mma);
    return kernel(s);
  }

  // Code each thread runs, or one thread.
  Stmt thread_code(const Stmt& s) {
    note_thread_temps(s);
    return s;
  }

  // What s does to memory more than one thread of the block sees.
  Effects shared_effects(const Stmt& s) const {
    EffectsCollector c;
    c.visit(s);
    Effects out;
    for (const std::string& r : c.fx.reads)
      if (space_of(bufs_, r) != Space::Local) out.reads.insert(r);
    for (const std::string& w : c.fx.writes)
      if (space_of(bufs_, w) != Space::Local) out.writes.insert(w);
    return out;
  }

  // Whether a step with effects fx needs a barrier before it; fx joins what the threads did
  // since the last one.
  bool sync_before(const Effects& fx) {
    bool sync = pending_.conflicts(fx);
    if (sync) pending_ = {};
    pending_.add(fx);
    return sync;
  }

  // A step of the block; s with a barrier before it where it needs one.
  Stmt step(const Stmt& s, const Effects& fx) {
    bool sync = sync_before(fx);
    Stmt out = thread_code(s);
    return sync ? barrier_then(out) : out;
  }

  // Inside the block loops, outside the thread loops: each step with a barrier before it where
  // it needs one.
  Stmt block(const Stmt& s) override {
    if (!s) return s;
    switch (s->kind) {
      case ir::StmtKind::Block:
        return with_children(s, [this](const Stmt& c) { return block(c); });
      case ir::StmtKind::LetStmt: {
        const auto& n = static_cast<const ir::LetStmt&>(*s);
        LetScope let(lets_, n.var, n.value);
        return std::make_shared<ir::LetStmt>(n.var, n.value, block(n.body));
      }
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        bufs_[n.buf] = {n.dtype, n.shape, block_code_space(n.loc), false};
        return with_children(s, [this](const Stmt& c) { return block(c); });
      }
      case ir::StmtKind::If: {
        const auto& n = static_cast<const ir::IfThenElse&>(*s);
        EffectsCollector cond;
        cond.visit(n.cond);
        bool sync = sync_before(Effects{cond.fx.reads, {}});
        // after the branch, what either branch may have done
        Effects before = pending_;
        Stmt then_case = block(n.then_case);
        Effects after = pending_;
        Stmt else_case;
        if (n.else_case) {
          pending_ = before;
          else_case = block(n.else_case);
          after.add(pending_);
        } else {
          after.add(before);
        }
        pending_ = after;
        Stmt out = std::make_shared<ir::IfThenElse>(n.cond, then_case, else_case);
        return sync ? barrier_then(out) : out;
      }
      case ir::StmtKind::For: {
        const auto& n = static_cast<const ir::For&>(*s);
        if (!ir::is_gpu_thread_tag(n.tag) && has_loop(n.body, ir::is_gpu_thread_tag))
          return structural_loop(n);
        // a thread loop, or a nest at block level: a fill, or code for one thread
        return step(s, shared_effects(s));
      }
      case ir::StmtKind::Store:
        return step(s, shared_effects(s));
      case ir::StmtKind::Evaluate:
        if (ir::is_gpu_barrier(s)) {
          pending_ = {};
          return s;
        }
        return step(s, shared_effects(s));
    }
    return s;
  }

  // A serial loop with thread loops inside: every thread runs it, and the block's threads meet
  // at its barriers (its bounds depend on block indices only, so they agree).
  Stmt structural_loop(const ir::For& n) {
    if (std::optional<Pipeline> plan = plan_pipeline(n, bufs_, lets_, mma_kernel_))
      return pipelined_loop(n, *plan);
    Effects body_fx = shared_effects(n.body);
    Effects before = pending_;
    Stmt body = block(n.body);
    // The next iteration's first steps must not overtake this one's last.
    bool end_sync = pending_.conflicts(body_fx);
    if (end_sync) body = then_barrier(body);
    pending_ = before;
    if (!end_sync) pending_.add(body_fx);
    return with_body(n, body);
  }

  // pipeline_tiles writes the loop as a pipeline: the first step's tiles filled before it and a
  // barrier, then in each iteration the next step's elements read into registers, the
  // computation, the stores into the tiles, and a barrier.
  Stmt pipelined_loop(const ir::For& n, const Pipeline& plan) {
    for (const ir::Alloc* a : plan.tiles)
      bufs_[a->buf] = {a->dtype, a->shape, Space::Shared, false};
    Effects fills;
    for (const PipelinedFill& f : plan.fills) {
      fills.reads.insert(f.copy.from);
      fills.writes.insert(f.copy.to);
    }
    bool sync = sync_before(fills);
    pending_ = {};  // the barrier after the first step's tiles
    Stmt body = pipelined_body(n.body, plan);
    // the stores of the next step's elements into the tiles, once every thread is done with
    // this step's
    if (sync_before(Effects{{}, fills.writes})) body = then_barrier(body);
    // and the barrier after them (the next iteration reads them)
    pending_ = {};
    // marked, so that pipeline_tiles writes this loop as a pipeline, and no other
    Stmt out =
        std::make_shared<ir::For>(n.var, n.min, n.end, n.step, ir::LoopTag::GpuPipelined, body);
    return sync ? barrier_then(out) : out;
  }

  // The loop's body: its fills (read into registers, which is no step of the block) as they
  // are, the rest a block's steps.
  Stmt pipelined_body(const Stmt& s, const Pipeline& plan) {
    if (!s) return s;
    switch (s->kind) {
      case ir::StmtKind::Block:
      case ir::StmtKind::Alloc:  // a tile
        return with_children(s, [&](const Stmt& c) { return pipelined_body(c, plan); });
      case ir::StmtKind::LetStmt: {
        const auto& n = static_cast<const ir::LetStmt&>(*s);
        LetScope let(lets_, n.var, n.value);
        return std::make_shared<ir::LetStmt>(n.var, n.value, pipelined_body(n.body, plan));
      }
      default:
        break;
    }
    for (const PipelinedFill& f : plan.fills)
      if (s.get() == f.nest) return thread_code(s);
    return block(s);
  }

  Effects pending_;  // what the block's threads did since the last barrier
  bool mma_kernel_ = false;
};

}  // namespace

ir::LoweredFunc place_barriers(const ir::LoweredFunc& f) {
  ir::LoweredFunc out = f;
  out.body = PlaceBarriers(f).run(f.body);
  return out;
}

}  // namespace kiln::cuda
