// The GPU lowering pass that keeps the tiles of C an mma nest accumulates in the warp's
// registers across the loop that repeats it (kiln/cuda.h).
//
// Where a serial loop L holds one mma nest, and the nest's tile of C moves with none of L's loops
// but some serial loops with constant bounds (the fragment loops: a warp's FI x FJ tiles) and,
// for an L at block level (the K loop of a tensor-core matmul, with its cache fills and
// barriers), the thread loops between (the warps), C's tiles become an array of accumulator
// fragments: a gpu_local temporary F[count, 16, 16], filled from C before L by copy nests tagged
// mma (in the same thread loops and fragment loops), updated by the nest in L, and written back
// to C after L. An L that one thread runs (the K loop inside the warps' loops) is handled the
// same way, its copies inside those loops. The fragment loops are tagged unroll, so each
// fragment's index is a constant once keep_in_registers unrolls them. The loops stay loops of the
// IR: the loop interpreter runs them (a gpu_local temporary outside the thread loops is each
// thread's own), so the differential tests check the rewrite.
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/analysis.h"
#include "kiln/cuda.h"
#include "kiln/simplify.h"
#include "mma.h"
#include "nests.h"
#include "registers.h"

namespace kiln::cuda {
namespace {

using ir::Expr;
using ir::Stmt;

// Fragments per warp at most: 8 floats a lane each, 128 of a thread's 255 registers.
constexpr int64_t kMaxFragments = 16;

// An mma nest inside a candidate loop's body, and the way to it.
struct Found {
  std::vector<const ir::For*> path;  // the loops from the body down to the nest
  std::map<std::string, Expr> lets;  // the lets on the way, expanded
  const ir::For* head = nullptr;
  bool conditional = false;  // under an if
};

void find(const Stmt& s, std::vector<const ir::For*>& path, std::map<std::string, Expr> lets,
          bool conditional, std::vector<Found>& out) {
  if (!s) return;
  switch (s->kind) {
    case ir::StmtKind::For: {
      const auto& n = static_cast<const ir::For&>(*s);
      if (is_mma(n.tag)) {
        out.push_back({path, lets, &n, conditional});
        return;
      }
      path.push_back(&n);
      find(n.body, path, lets, conditional, out);
      path.pop_back();
      return;
    }
    case ir::StmtKind::LetStmt: {
      const auto& n = static_cast<const ir::LetStmt&>(*s);
      lets[n.var] = expand_lets(n.value, lets);
      return find(n.body, path, std::move(lets), conditional, out);
    }
    case ir::StmtKind::Block:
      for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts)
        find(c, path, lets, conditional, out);
      return;
    case ir::StmtKind::Alloc:
      return find(static_cast<const ir::Alloc&>(*s).body, path, std::move(lets), conditional, out);
    case ir::StmtKind::If: {
      const auto& n = static_cast<const ir::IfThenElse&>(*s);
      find(n.then_case, path, lets, true, out);
      find(n.else_case, path, std::move(lets), true, out);
      return;
    }
    default:
      return;
  }
}

class Accesses : public ir::StmtVisitor {
 public:
  explicit Accesses(std::string buf) : buf_(std::move(buf)) {}
  int count = 0;

 protected:
  void visit_load(const ir::Load& n) override {
    count += n.buf == buf_;
    ir::StmtVisitor::visit_load(n);
  }
  void visit_store(const ir::Store& n) override {
    count += n.buf == buf_;
    ir::StmtVisitor::visit_store(n);
  }

 private:
  std::string buf_;
};

int accesses(const Stmt& s, const std::string& buf) {
  Accesses a(buf);
  a.visit(s);
  return a.count;
}

// An expression with its loads of one buffer replaced by loads of another at other indices.
class RetargetLoads : public ir::IRMutator {
 public:
  RetargetLoads(std::string from, std::string to, std::vector<Expr> at)
      : from_(std::move(from)), to_(std::move(to)), at_(std::move(at)) {}

 protected:
  Expr mutate_load(const Expr& e, const ir::Load& n) override {
    return n.buf == from_ ? ir::load(to_, at_, n.type) : ir::IRMutator::mutate_load(e, n);
  }

 private:
  std::string from_, to_;
  std::vector<Expr> at_;
};

// The loop with the nest's store to C replaced by one to the fragments, its read of C by a read
// of them, and the fragment loops tagged unroll.
class ToFragments : public ir::StmtMutator {
 public:
  ToFragments(const ir::Store* store, std::set<const ir::For*> unrolled, std::string fragments,
              std::vector<Expr> at)
      : store_(store),
        unrolled_(std::move(unrolled)),
        fragments_(std::move(fragments)),
        at_(std::move(at)) {}

 protected:
  Stmt mutate_for(const Stmt& s, const ir::For& n) override {
    Stmt body = mutate(n.body);
    ir::LoopTag tag =
        unrolled_.count(&n) && n.tag == ir::LoopTag::None ? ir::LoopTag::Unroll : n.tag;
    if (body == n.body && tag == n.tag) return s;
    return std::make_shared<ir::For>(n.var, n.min, n.end, n.step, tag, body);
  }
  Stmt mutate_store(const Stmt& s, const ir::Store& n) override {
    if (&n != store_) return s;
    Expr value = RetargetLoads(n.buf, fragments_, at_).mutate(n.value);
    return std::make_shared<ir::Store>(fragments_, at_, value, n.comp);
  }

 private:
  const ir::Store* store_;
  std::set<const ir::For*> unrolled_;
  std::string fragments_;
  std::vector<Expr> at_;
};

class KeepFragments : public ir::StmtMutator {
 protected:
  // Block-level code inside the block loops (a kernel of one block, whose block loops lowering
  // left out, has the one map_kernels gives it back).
  Stmt mutate_for(const Stmt& s, const ir::For& n) override {
    if (ir::is_gpu_thread_tag(n.tag)) {
      ++thread_depth_;
      Stmt out = ir::StmtMutator::mutate_for(s, n);
      --thread_depth_;
      return out;
    }
    if (thread_depth_ > 0) {  // a serial loop one thread (one warp) runs
      if (n.tag == ir::LoopTag::None && has_loop(n.body, is_mma) &&
          !has_loop(n.body, ir::is_gpu_thread_tag))
        if (Stmt kept = keep(n)) return kept;
      return ir::StmtMutator::mutate_for(s, n);
    }
    if (ir::is_gpu_block_tag(n.tag)) {
      ++kernel_depth_;
      Stmt out = ir::StmtMutator::mutate_for(s, n);
      --kernel_depth_;
      return out;
    }
    if (kernel_depth_ > 0 && n.tag == ir::LoopTag::None &&
        !has_loop(n.body, ir::is_gpu_block_tag) && has_loop(n.body, ir::is_gpu_thread_tag) &&
        has_loop(n.body, is_mma))
      if (Stmt kept = keep(n)) return kept;
    return ir::StmtMutator::mutate_for(s, n);
  }

 private:
  // L rewritten, or null where it does not qualify.
  Stmt keep(const ir::For& loop) {
    std::vector<const ir::For*> path;
    std::vector<Found> found;
    find(loop.body, path, {}, false, found);
    if (found.size() != 1 || found[0].conditional) return nullptr;
    const Found& f = found[0];
    std::optional<MmaLoops> nest = mma_loops(*f.head);
    if (!nest || nest->loops.size() != 3) return nullptr;
    const ir::Store* st = nest->store;
    // C is read and written by the nest's statement alone (not also a factor of its product)
    if (st->atomic || accesses(loop.body, st->buf) != 2 || accesses(f.head->body, st->buf) != 2)
      return nullptr;
    // thread loops, then serial ones
    size_t threads = 0;
    while (threads < f.path.size() && ir::is_gpu_thread_tag(f.path[threads]->tag)) ++threads;
    if ((threads == 0) != (thread_depth_ > 0)) return nullptr;
    for (size_t i = threads; i < f.path.size(); ++i) {
      ir::LoopTag t = f.path[i]->tag;
      if (t != ir::LoopTag::None && t != ir::LoopTag::Unroll && t != ir::LoopTag::UnrollExplicit)
        return nullptr;
    }
    std::map<std::string, Expr> lets = f.lets;
    for (const ir::LetStmt* l : nest->lets) lets[l->var] = expand_lets(l->value, lets);
    auto expand = [&](const Expr& e) { return ir::simplify(expand_lets(e, lets)); };

    // C's tile moves with the thread loops, the fragment loops and the nest's m and n, not with
    // L or the other serial loops (the reduction's steps)
    std::vector<Expr> c_at;
    std::set<std::string> used;
    for (const Expr& i : st->indices) {
      c_at.push_back(expand(i));
      for (const std::string& v : ir::free_vars(c_at.back())) used.insert(v);
    }
    std::set<std::string> inside = {loop.var};
    for (const ir::For* p : f.path) inside.insert(p->var);
    std::vector<const ir::For*> fragment_loops;
    for (size_t i = threads; i < f.path.size(); ++i)
      if (used.count(f.path[i]->var)) fragment_loops.push_back(f.path[i]);
    if (used.count(loop.var) || used.count(nest->loops[2]->var)) return nullptr;
    // Bounds the copies before and after L can compute: no variable bound inside L but the
    // thread loops' (the copies have the same) and the fragment loops'.
    std::set<std::string> unavailable = inside;
    for (size_t i = 0; i < threads; ++i) unavailable.erase(f.path[i]->var);
    auto available = [&](const Expr& e) {
      for (const std::string& v : ir::free_vars(e))
        if (unavailable.count(v)) return false;
      return true;
    };
    std::vector<int64_t> lo, extent;
    int64_t count = 1;
    for (const ir::For* fl : fragment_loops) {
      std::optional<int64_t> a = constant(expand(fl->min)), b = constant(expand(fl->end));
      if (!a || !b || *b <= *a || fl->step != 1) return nullptr;
      lo.push_back(*a);
      extent.push_back(*b - *a);
      count *= *b - *a;
      if (count > kMaxFragments) return nullptr;
    }
    for (size_t i = 0; i < threads; ++i)
      if (!available(expand(f.path[i]->min)) || !available(expand(f.path[i]->end))) return nullptr;
    for (const ir::For* l : fragment_loops) unavailable.erase(l->var);
    const ir::For& m = *nest->loops[0];
    const ir::For& n = *nest->loops[1];
    Expr m_lo = expand(m.min), m_end = expand(m.end), n_lo = expand(n.min), n_end = expand(n.end);
    for (const Expr& e : {m_lo, m_end, n_lo, n_end})
      if (!available(e)) return nullptr;
    // a nest the printer refuses is left as it is, for it to say why
    const ir::For& k = *nest->loops[2];
    if (constant(m_end - m_lo) != 16 || constant(n_end - n_lo) != 16 ||
        constant(expand(k.end) - expand(k.min)) != 8 || m.step != 1 || n.step != 1)
      return nullptr;
    for (const Expr& e : c_at)
      if (!available(e)) return nullptr;

    // F[fragment, m - m0, n - n0], the fragment numbered by the fragment loops, last fastest
    if (!private_tiles(c_at, m.var, n.var, m_lo, n_lo, f.path, threads, fragment_loops, lo, extent,
                       expand))
      return nullptr;
    std::string fragments = fmt::format("{}{}", kFragmentArrayPrefix, count_++);
    Expr index = ir::int_imm(0);
    for (size_t d = 0; d < fragment_loops.size(); ++d)
      index =
          index * ir::int_imm(extent[d]) + (ir::var(fragment_loops[d]->var) - ir::int_imm(lo[d]));
    std::vector<Expr> f_at = {ir::simplify(index), ir::simplify(ir::var(m.var) - m_lo),
                              ir::simplify(ir::var(n.var) - n_lo)};
    auto copy = [&](bool load) -> Stmt {
      Stmt body = load ? std::make_shared<ir::Store>(
                             fragments, f_at, ir::load(st->buf, c_at, ir::DType::F32), st->comp)
                       : std::make_shared<ir::Store>(
                             st->buf, c_at, ir::load(fragments, f_at, ir::DType::F32), st->comp);
      body = std::make_shared<ir::For>(n.var, n_lo, n_end, 1, ir::LoopTag::None, body);
      body = std::make_shared<ir::For>(m.var, m_lo, m_end, 1, ir::LoopTag::Mma, body);
      for (size_t d = fragment_loops.size(); d-- > 0;)
        body =
            std::make_shared<ir::For>(fragment_loops[d]->var, ir::int_imm(lo[d]),
                                      ir::int_imm(lo[d] + extent[d]), 1, ir::LoopTag::Unroll, body);
      for (size_t i = threads; i-- > 0;) {
        const ir::For& t = *f.path[i];
        body = std::make_shared<ir::For>(t.var, expand(t.min), expand(t.end), t.step, t.tag, body);
      }
      return body;
    };
    std::set<const ir::For*> unrolled(fragment_loops.begin(), fragment_loops.end());
    Stmt body = ToFragments(st, unrolled, fragments, f_at).mutate(loop.body);
    Stmt kept = std::make_shared<ir::For>(loop.var, loop.min, loop.end, loop.step, loop.tag, body);
    return std::make_shared<ir::Alloc>(
        fragments, ir::DType::F32,
        std::vector<Expr>{ir::int_imm(count), ir::int_imm(16), ir::int_imm(16)},
        ir::MemLoc::GpuLocal, ir::block({copy(true), kept, copy(false)}));
  }

  // Whether every warp (every value of the thread loops) and every value of the fragment loops
  // has a tile of C of its own: the 16 x 16 tiles at their values do not overlap.
  template <typename Expand>
  static bool private_tiles(const std::vector<Expr>& c_at, const std::string& m,
                            const std::string& n, const Expr& m_lo, const Expr& n_lo,
                            const std::vector<const ir::For*>& path, size_t threads,
                            const std::vector<const ir::For*>& fragment_loops,
                            const std::vector<int64_t>& lo, const std::vector<int64_t>& extent,
                            const Expand& expand) {
    std::vector<std::string> vars;
    std::vector<int64_t> from, count;
    for (size_t i = 0; i < threads; ++i) {
      std::optional<int64_t> a = constant(expand(path[i]->min)), b = constant(expand(path[i]->end));
      if (!a || !b || *b - *a > 1024 || path[i]->step != 1) return false;
      vars.push_back(path[i]->var);
      from.push_back(*a);
      count.push_back(std::max<int64_t>(*b - *a, 0));
    }
    for (size_t d = 0; d < fragment_loops.size(); ++d) {
      vars.push_back(fragment_loops[d]->var);
      from.push_back(lo[d]);
      count.push_back(extent[d]);
    }
    int64_t total = 1;
    for (int64_t c : count) total *= c;
    if (total > 4096) return false;
    // the tile's first element at each point, less the first point's: constants
    std::map<std::string, Expr> at = {{m, m_lo}, {n, n_lo}};
    for (size_t v = 0; v < vars.size(); ++v) at[vars[v]] = ir::int_imm(from[v]);
    std::vector<Expr> origin;
    for (const Expr& e : c_at) origin.push_back(ir::simplify(ir::substitute(e, at)));
    size_t row = c_at.size(), col = c_at.size();
    for (size_t d = 0; d < c_at.size(); ++d) {
      std::set<std::string> fv = ir::free_vars(c_at[d]);
      if (fv.count(m)) row = row == c_at.size() ? d : c_at.size() + 1;
      if (fv.count(n)) col = col == c_at.size() ? d : c_at.size() + 1;
    }
    if (row >= c_at.size() || col >= c_at.size() || row == col) return false;
    std::vector<std::vector<int64_t>> points;
    for (int64_t p = 0; p < total; ++p) {
      int64_t rest = p;
      for (size_t v = vars.size(); v-- > 0;) {
        at[vars[v]] = ir::int_imm(from[v] + rest % count[v]);
        rest /= count[v];
      }
      std::vector<int64_t> delta;
      for (size_t d = 0; d < c_at.size(); ++d) {
        std::optional<int64_t> x = constant(ir::substitute(c_at[d], at) - origin[d]);
        if (!x) return false;
        delta.push_back(*x);
      }
      for (const std::vector<int64_t>& q : points) {
        bool overlap = true;
        for (size_t d = 0; d < delta.size(); ++d)
          overlap =
              overlap && (d == row || d == col ? std::abs(delta[d] - q[d]) < 16 : delta[d] == q[d]);
        if (overlap) return false;
      }
      points.push_back(std::move(delta));
    }
    return true;
  }

  int kernel_depth_ = 0;  // block loops around
  int thread_depth_ = 0;  // thread loops around
  int count_ = 0;
};

}  // namespace

ir::LoweredFunc keep_fragments(const ir::LoweredFunc& f) {
  ir::LoweredFunc out = f;
  KeepFragments keep;
  out.body = map_kernels(
      f.body, [&](const Stmt& s) { return keep.mutate(s); }, [](const Stmt& s) { return s; });
  return out;
}

}  // namespace kiln::cuda
