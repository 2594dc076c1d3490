// Pipelined tiles (pipeline.h): which serial loops at block level are written as a pipeline.
#include "pipeline.h"

#include <algorithm>
#include <array>
#include <functional>
#include <set>

#include "kiln/analysis.h"
#include "kiln/cuda.h"
#include "mma.h"
#include "nests.h"
#include "registers.h"

namespace kiln::cuda {
namespace {

// The loops of a statement tagged gpu_thread_x/y/z.
class ThreadLoops : public ir::StmtVisitor {
 public:
  std::vector<const ir::For*> loops;

 protected:
  void visit_for(const ir::For& n) override {
    if (ir::is_gpu_thread_tag(n.tag)) loops.push_back(&n);
    ir::StmtVisitor::visit_for(n);
  }
};

}  // namespace

std::optional<Pipeline> plan_pipeline(const ir::For& n, const BufTable& known,
                                      const std::map<std::string, ir::Expr>& lets,
                                      bool mma_kernel) {
  if (n.step <= 0) return std::nullopt;
  Pipeline plan;
  std::vector<PipelinedFill>& fills = plan.fills;
  BufTable bufs = known;  // and the loop's tiles
  std::map<std::string, ir::Expr> values = lets;
  std::set<std::string> body_lets;  // defined in the loop: not in scope before it
  std::array<int64_t, 3> threads{mma_kernel ? kWarp : 1, 1, 1};
  bool computing = false, ok = true;
  // the widest thread loop on each axis of a nest: the block has at least its threads
  auto widths = [&](const ir::Stmt& s) {
    ThreadLoops loops;
    loops.visit(s);
    for (const ir::For* f : loops.loops) {
      std::optional<int64_t> e = ir::eval_int(expand_lets(extent_of(*f), values), {});
      if (!e) {
        ok = false;
        return;
      }
      int a = ir::gpu_tag_axis(f->tag);
      threads[a] = std::max(threads[a], *e);
    }
  };
  std::function<void(const ir::Stmt&)> walk = [&](const ir::Stmt& s) {
    if (!s || !ok || ir::is_gpu_barrier(s)) return;
    switch (s->kind) {
      case ir::StmtKind::Block:
        for (const ir::Stmt& c : static_cast<const ir::Block&>(*s).stmts) walk(c);
        return;
      case ir::StmtKind::LetStmt: {
        const auto& l = static_cast<const ir::LetStmt&>(*s);
        body_lets.insert(l.var);
        LetScope let(values, l.var, l.value);  // for its body only
        return walk(l.body);
      }
      case ir::StmtKind::Alloc: {
        const auto& a = static_cast<const ir::Alloc&>(*s);
        if (computing || bufs.count(a.buf) || block_code_space(a.loc) != Space::Shared) {
          ok = false;
          return;
        }
        bufs[a.buf] = {a.dtype, a.shape, Space::Shared, false};
        plan.tiles.push_back(&a);
        return walk(a.body);
      }
      case ir::StmtKind::For: {
        const auto& f = static_cast<const ir::For&>(*s);
        if (ir::is_gpu_thread_tag(f.tag) || has_loop(f.body, ir::is_gpu_thread_tag)) {
          computing = true;
          return widths(s);
        }
        std::vector<const ir::Store*> stores = stores_of(s);
        if (computing || stores.empty() || !is_fill(stores)) {
          ok = false;  // a fill after the computation, or code for one thread
          return;
        }
        CopyNest nest = copy_nest(s);
        PipelinedFill p;
        p.nest = &f;
        p.chain = nest.chain;
        p.lanes = ir::as<ir::For>(nest.body);  // there is one where the copy has a width
        p.copy = fill_copy(nest, values, bufs);
        if (p.copy.width == 0 || space_of(bufs, p.copy.to) != Space::Shared) {
          ok = false;
          return;
        }
        for (size_t k = 0; k < p.chain.size(); ++k) {
          std::optional<int64_t> e = ir::eval_int(expand_lets(extent_of(*p.chain[k]), values), {});
          if (!e || *e <= 0) {
            ok = false;
            return;
          }
          p.extents.push_back(*e);
          p.groups *= *e;
          p.mins.push_back(expand_lets(p.chain[k]->min, values));
        }
        fills.push_back(std::move(p));
        return;
      }
      default:
        ok = false;  // a store or a branch at block level
        return;
    }
  };
  walk(n.body);
  if (!ok || fills.empty() || !computing) return std::nullopt;
  // Read early, the sources must not change in the loop; only the fills write the tiles; and
  // every index must be computable before the loop.
  std::vector<const ir::Store*> stores = stores_of(n.body);
  int64_t floats = 0, block = threads[0] * threads[1] * threads[2];
  for (PipelinedFill& f : fills) {
    for (const ir::Store* st : stores)
      if (st->buf == f.copy.from || (st->buf == f.copy.to && !is_fill({st}))) return std::nullopt;
    std::vector<ir::Expr> all = f.copy.from_at;
    all.insert(all.end(), f.copy.to_at.begin(), f.copy.to_at.end());
    all.insert(all.end(), f.mins.begin(), f.mins.end());
    for (const ir::Expr& e : all)
      for (const std::string& v : ir::free_vars(e))
        if (body_lets.count(v)) return std::nullopt;
    f.per_thread = (f.groups + block - 1) / block;
    floats += f.per_thread * f.copy.width;
  }
  if (floats > kPipelineRegisters) return std::nullopt;
  plan.threads = block;
  return plan;
}

}  // namespace kiln::cuda
