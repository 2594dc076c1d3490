// The GPU lowering pass that writes the pipelines place_barriers chose (kiln/cuda.h).
//
// A serial loop tagged gpu_pipelined (the matmul's K loop) fills shared tiles from device
// memory at the start of each step and then computes on them (pipeline.h). It becomes
//
//   the tiles, allocated around what follows;
//   if (min < end) { the first step's fills, copied into the tiles }  barrier
//   for (k = min; k < end; k += step)     (untagged)
//     registers kiln_pfN, a thread's own (gpu_local), one array per fill
//     the body, each fill replaced by the reads of the next step's elements into the registers
//       (where there is a next step), the rest as it was (ending with the barrier
//       place_barriers put before the stores below where they need one)
//     if (k + step < end) { the registers stored into the tiles }  barrier
//
// so that the next step's loads are in flight while this step computes. Each of those copies
// is dealt out to the block's threads by rank: a loop tagged gpu_rank over the block's threads
// (gpu_block_threads(n), kiln/loop_ir.h), in which thread t copies the fill's groups t,
// t + threads, ..., each a gpu_lanes loop over 4, 2 or 1 consecutive floats (copies.h). The
// groups a thread takes are unrolled, as many as the thread loops in the loop make necessary
// (the block has at least their threads), so that each register a thread holds is known when
// the kernel is compiled; each group binds the fill's loop variables to its first element.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "block_code.h"
#include "kiln/analysis.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/simplify.h"
#include "mma.h"
#include "nests.h"
#include "pipeline.h"
#include "registers.h"

namespace kiln::cuda {
namespace {

using ir::BinaryOp;
using ir::Expr;
using ir::Stmt;

// Where a copy of a fill's groups takes its elements from and puts them.
enum class Copy {
  Direct,         // device memory into the tiles (the first step)
  IntoRegisters,  // device memory into the registers (the next step, during this one)
  FromRegisters,  // the registers into the tiles
};

class PipelineTiles : public BlockCodeMutator {
 public:
  explicit PipelineTiles(const ir::LoweredFunc& f) : BlockCodeMutator(f), fresh_(f) {}

  Stmt run(const Stmt& body) {
    return map_kernels(
        body,
        [this](const Stmt& s) {
          mma_kernel_ = has_loop(s, is_mma);
          return kernel(s);
        },
        [](const Stmt& s) { return s; });
  }

 private:
  Stmt serial_loop(const Stmt& s, const ir::For& n) override {
    if (n.tag != ir::LoopTag::GpuPipelined) return BlockCodeMutator::serial_loop(s, n);
    std::optional<Pipeline> plan = plan_pipeline(n, bufs_, lets_, mma_kernel_);
    if (!plan)
      throw CompileError(
          ErrorStage::Codegen, {},
          fmt::format("internal error: loop '{}' is tagged gpu_pipelined, but it is no pipeline "
                      "(report this to kiln's developers)",
                      n.var));
    return pipeline(n, *plan);
  }

  Stmt pipeline(const ir::For& n, const Pipeline& plan) {
    for (const ir::Alloc* a : plan.tiles)
      bufs_[a->buf] = {a->dtype, a->shape, block_code_space(a->loc), false};
    Expr next = ir::var(n.var) + ir::int_imm(n.step);
    Expr has_next = ir::binary(BinaryOp::Lt, next, n.end);
    std::vector<std::string> registers;
    for (size_t i = 0; i < plan.fills.size(); ++i) registers.push_back(fresh_("kiln_pf"));
    // the loop's body: this step's computation, with the next step's reads where the fills
    // were; then the next step's stores into the tiles and the barrier after them
    std::vector<Stmt> stores;
    for (size_t i = 0; i < plan.fills.size(); ++i)
      stores.push_back(
          copy(plan, plan.fills[i], Copy::FromRegisters, n.var, next, registers[i], nullptr));
    Stmt body = ir::block({staged(n.body, plan, registers, n.var, next, has_next),
                           std::make_shared<ir::IfThenElse>(has_next, ir::block(stores), nullptr),
                           ir::gpu_barrier()});
    for (size_t i = plan.fills.size(); i-- > 0;) {
      const PipelinedFill& f = plan.fills[i];
      body = std::make_shared<ir::Alloc>(
          registers[i], ir::DType::F32, std::vector<Expr>{ir::int_imm(f.per_thread * f.copy.width)},
          ir::MemLoc::GpuLocal, body);
    }
    // the first step's tiles, and the barrier after them
    std::vector<Stmt> first;
    for (const PipelinedFill& f : plan.fills)
      first.push_back(copy(plan, f, Copy::Direct, n.var, n.min, "", nullptr));
    Stmt out = ir::block(
        {std::make_shared<ir::IfThenElse>(ir::binary(BinaryOp::Lt, n.min, n.end), ir::block(first),
                                          nullptr),
         ir::gpu_barrier(),
         std::make_shared<ir::For>(n.var, n.min, n.end, n.step, ir::LoopTag::None, body)});
    for (size_t i = plan.tiles.size(); i-- > 0;) {
      const ir::Alloc& a = *plan.tiles[i];
      out = std::make_shared<ir::Alloc>(a.buf, a.dtype, a.shape, a.loc, out);
    }
    return out;
  }

  // The pipelined loop's body s: its tiles' allocations left out (they are around the loop),
  // each fill the reads of the next step's elements into its registers, the rest the block's
  // code as it was (a pipeline inside written too).
  Stmt staged(const Stmt& s, const Pipeline& plan, const std::vector<std::string>& registers,
              const std::string& loop_var, const Expr& next, const Expr& has_next) {
    if (!s) return s;
    auto again = [&](const Stmt& c) {
      return staged(c, plan, registers, loop_var, next, has_next);
    };
    switch (s->kind) {
      case ir::StmtKind::Block:
        return with_children(s, again);
      case ir::StmtKind::LetStmt: {
        const auto& l = static_cast<const ir::LetStmt&>(*s);
        LetScope let(lets_, l.var, l.value);
        return std::make_shared<ir::LetStmt>(l.var, l.value, again(l.body));
      }
      case ir::StmtKind::Alloc:  // a tile
        return again(static_cast<const ir::Alloc&>(*s).body);
      default:
        break;
    }
    for (size_t i = 0; i < plan.fills.size(); ++i)
      if (s.get() == plan.fills[i].nest)
        return copy(plan, plan.fills[i], Copy::IntoRegisters, loop_var, next, registers[i],
                    has_next);
    return block(s);
  }

  // The fill f's copy at step `at` of the pipelined loop (its variable loop_var), where `cond`
  // holds (if given): each thread its groups, as `how` says. `registers`: the fill's.
  Stmt copy(const Pipeline& plan, const PipelinedFill& f, Copy how, const std::string& loop_var,
            const Expr& at, const std::string& registers, const Expr& cond) {
    const VectorCopy& c = f.copy;
    const ir::For& inner = *f.chain.back();
    const ir::For* lanes = f.lanes;
    std::string rank = fresh_("kiln_t");
    Expr threads = ir::gpu_block_threads(plan.threads);
    auto at_step = [&](const std::vector<Expr>& indices, const Expr& element) {
      std::vector<Expr> out;
      for (const Expr& i : indices)
        out.push_back(ir::simplify(ir::substitute(i, {{loop_var, at}, {c.var, element}})));
      return out;
    };
    std::vector<Stmt> groups;
    for (int64_t j = 0; j < f.per_thread; ++j) {
      // this thread's j-th group: its number, and the fill's loop variables at its first
      // element (the innermost loop's steps are groups)
      std::string g = fresh_("kiln_g");
      std::vector<std::pair<std::string, Expr>> lets;
      int64_t below = 1;  // the groups of the loops inside loop k
      for (size_t k = f.chain.size(); k-- > 0;) {
        const ir::For& loop = *f.chain[k];
        Expr first = ir::simplify(ir::substitute(f.mins[k], {{loop_var, at}}));
        Expr digit = ir::binary(BinaryOp::Div, ir::var(g), ir::int_imm(below));
        if (k > 0) digit = ir::binary(BinaryOp::Mod, digit, ir::int_imm(f.extents[k]));
        lets.emplace_back(loop.var, first + digit * ir::int_imm(loop.step));
        below *= f.extents[k];
      }
      // the group's elements, one lane each
      Expr lane = ir::var(lanes->var), start = ir::var(inner.var);
      std::vector<Expr> slot{ir::simplify(ir::int_imm(j * c.width) + (lane - start))};
      Expr from = ir::load(c.from, at_step(c.from_at, lane), ir::DType::F32);
      std::vector<Expr> to = at_step(c.to_at, lane);
      Stmt element;
      switch (how) {
        case Copy::Direct:
          element = std::make_shared<ir::Store>(c.to, to, from);
          break;
        case Copy::IntoRegisters:
          element = std::make_shared<ir::Store>(registers, slot, from);
          break;
        case Copy::FromRegisters:
          element =
              std::make_shared<ir::Store>(c.to, to, ir::load(registers, slot, ir::DType::F32));
          break;
      }
      Expr exists = ir::binary(BinaryOp::Lt, ir::var(g), ir::int_imm(f.groups));
      if (cond) exists = ir::binary(BinaryOp::And, cond, exists);
      Stmt group = std::make_shared<ir::IfThenElse>(
          exists,
          std::make_shared<ir::For>(lanes->var, start, start + ir::int_imm(c.width), 1,
                                    ir::LoopTag::GpuLanes, element),
          nullptr);
      for (size_t k = lets.size(); k-- > 0;)
        group = std::make_shared<ir::LetStmt>(lets[k].first, lets[k].second, group);
      groups.push_back(
          std::make_shared<ir::LetStmt>(g, ir::var(rank) + ir::int_imm(j) * threads, group));
    }
    return std::make_shared<ir::For>(rank, ir::int_imm(0), threads, 1, ir::LoopTag::GpuRank,
                                     ir::block(groups));
  }

  FreshNames fresh_;  // registers, ranks, groups
  bool mma_kernel_ = false;
};

}  // namespace

ir::LoweredFunc pipeline_tiles(const ir::LoweredFunc& f) {
  ir::LoweredFunc out = f;
  out.body = PipelineTiles(f).run(f.body);
  return out;
}

}  // namespace kiln::cuda
