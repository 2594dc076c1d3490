// The loop nests tagged mma, recognized as a warp's matrix multiply-accumulate (mma.h).
#include "mma.h"

#include <fmt/format.h>

#include <array>
#include <optional>

#include "kiln/analysis.h"
#include "kiln/error.h"
#include "kiln/range.h"
#include "kiln/simplify.h"
#include "registers.h"

namespace kiln::cuda {
namespace {

using ir::BinaryOp;
using ir::Expr;
using ir::Stmt;

constexpr const char* kShape =
    "three loops m, n, k around one statement C[m, n] = C[m, n] + A[m, k] * B[k, n]";

// An access of the nest as base + cm * (m - m0) + cn * (n - n0) + ck * (k - k0).
struct Affine {
  Expr base;
  ir::LinearForm base_form;       // the same, as a sum
  std::array<int64_t, 3> coef{};  // m, n, k
  bool aligned = false;           // base is a multiple of 8 for every value of its variables
};

class Matcher {
 public:
  Matcher(const ir::For& head, const std::map<std::string, Expr>& lets,
          const std::function<const std::vector<Expr>&(const std::string&)>& shape_of,
          const std::function<bool(const std::string&)>& is_fragment)
      : head_(head), lets_(lets), shape_of_(shape_of), is_fragment_(is_fragment) {}

  MmaNest run() {
    std::optional<MmaLoops> nest = mma_loops(head_);
    if (!nest) fail(fmt::format("the nest it heads is not {}", kShape));
    loops_ = nest->loops;
    for (size_t d = 1; d < loops_.size(); ++d)
      if (loops_[d]->tag != ir::LoopTag::None)
        fail(
            fmt::format("loop '{}' inside it is tagged {}: the tensor cores run the nest's "
                        "three loops as one operation, so they take no tags",
                        loops_[d]->var, ir::loop_tag_name(loops_[d]->tag)));
    for (const ir::LetStmt* l : nest->lets) {
      inner_[l->var] = expand_lets(l->value, inner_);
      lets_[l->var] = expand_lets(l->value, lets_);
    }
    const ir::Store* st = nest->store;
    MmaNest out;
    if (loops_.size() == 2) return copy(*st, out);
    bounds(out);
    if (st->atomic)
      fail("its statement updates " + st->buf +
           " atomically: an mma nest's warp owns its tile of C, so the update is a plain one");
    const ir::Binary* sum = ir::as<ir::Binary>(st->value);
    if (!sum || sum->op != BinaryOp::Add) fail(fmt::format("its statement is not {}", kShape));
    const ir::Load* acc = nullptr;
    const ir::Binary* product = nullptr;
    for (const auto& [x, y] : {std::pair{sum->a, sum->b}, std::pair{sum->b, sum->a}}) {
      const ir::Load* l = ir::as<ir::Load>(x);
      const ir::Binary* p = ir::as<ir::Binary>(y);
      if (l && l->buf == st->buf && p && p->op == BinaryOp::Mul) {
        acc = l;
        product = p;
        break;
      }
    }
    if (!acc) fail(fmt::format("its statement is not {}", kShape));
    const ir::Load* p = ir::as<ir::Load>(product->a);
    const ir::Load* q = ir::as<ir::Load>(product->b);
    if (!p || !q)
      fail(fmt::format("its product is not of two loads (A[m, k] * B[k, n]): {}",
                       ir::to_string(st->value)));

    Affine c = affine(st->buf, st->indices);
    Affine c_read = affine(acc->buf, acc->indices);
    if (!equal(c.base, c_read.base) || c.coef != c_read.coef)
      fail(fmt::format("it reads {} at another element than it writes: {}", st->buf,
                       ir::to_string(st->value)));
    Affine ap = affine(p->buf, p->indices), aq = affine(q->buf, q->indices);
    const ir::Load* a = p;
    const ir::Load* b = q;
    Affine aa = ap, ab = aq;
    if (!(ap.coef[1] == 0 && aq.coef[0] == 0)) {
      std::swap(a, b);
      std::swap(aa, ab);
    }
    if (!(aa.coef[1] == 0 && ab.coef[0] == 0))
      fail(
          fmt::format("its product is not A[m, k] * B[k, n]: one factor must not change with "
                      "loop '{}' and the other not with loop '{}' ({})",
                      loops_[1]->var, loops_[0]->var, ir::to_string(st->value)));
    if (c.coef[2] != 0)
      fail(fmt::format("the element of {} it updates changes with loop '{}', the reduction",
                       st->buf, loops_[2]->var));

    for (const auto& [l, what] : {std::pair{a, "A"}, std::pair{b, "B"}})
      if (l->type != ir::DType::F32)
        fail(
            fmt::format("its factor {} ({}) is {}: tensor cores here multiply f32 operands "
                        "(rounded to TF32)",
                        what, l->buf, ir::dtype_name(l->type)));
    if (acc->type != ir::DType::F32)
      fail(fmt::format("it accumulates in {}, which is {}: tensor cores accumulate in f32", st->buf,
                       ir::dtype_name(acc->type)));

    // C[m, n]: rows m, columns n; A[m, k]: rows m, columns k; B[k, n]: rows k, columns n.
    if (is_fragment_(a->buf) || is_fragment_(b->buf))
      fail("a factor of its product is an accumulator's fragments");
    if (is_fragment_(st->buf)) {
      out.c = fragment(st->buf, c);
      out.a = operand(a->buf, a->indices, aa, 0, 2, "A");
      out.b = operand(b->buf, b->indices, ab, 2, 1, "B");
      return out;
    }
    out.c = operand(st->buf, st->indices, c, 0, 1, "C");
    out.a = operand(a->buf, a->indices, aa, 0, 2, "A");
    out.b = operand(b->buf, b->indices, ab, 2, 1, "B");
    int64_t minor = out.c.row_major ? out.n : out.m;
    if (out.c.ld < minor)
      fail(fmt::format("the rows of its tile of {} overlap ({} elements apart, {} long)", out.c.buf,
                       out.c.ld, minor));
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw CompileError(ErrorStage::Codegen, SourceLoc{},
                       fmt::format("loop '{}' is tagged mma, but {}", head_.var, why));
  }

  // A 16 x 16 copy of an accumulator tile between memory and a fragment array (the rewrite
  // keep_fragments makes).
  MmaNest copy(const ir::Store& st, MmaNest& out) {
    bounds(out);
    const ir::Load* from = ir::as<ir::Load>(st.value);
    if (st.atomic || !from || is_fragment_(st.buf) == is_fragment_(from->buf))
      fail(
          fmt::format("its statement is not {}, nor a copy of a tile between memory and "
                      "accumulator fragments",
                      kShape));
    if (from->type != ir::DType::F32)
      fail(fmt::format("it copies {}, which is {}: tensor cores accumulate in f32", from->buf,
                       ir::dtype_name(from->type)));
    bool load = is_fragment_(st.buf);
    const std::string& mem = load ? from->buf : st.buf;
    const std::vector<Expr>& mem_at = load ? from->indices : st.indices;
    const std::string& frag = load ? st.buf : from->buf;
    const std::vector<Expr>& frag_at = load ? st.indices : from->indices;
    out.kind = load ? MmaKind::LoadAccumulator : MmaKind::StoreAccumulator;
    out.c = operand(mem, mem_at, affine(mem, mem_at), 0, 1, "C");
    out.fragments = fragment(frag, affine(frag, frag_at));
    int64_t minor = out.c.row_major ? out.n : out.m;
    if (out.c.ld < minor)
      fail(fmt::format("the rows of its tile of {} overlap ({} elements apart, {} long)", out.c.buf,
                       out.c.ld, minor));
    return out;
  }

  // An operand in an array of accumulator fragments, [fragment, 16, 16]: which fragment.
  MmaOperand fragment(const std::string& buf, const Affine& a) const {
    MmaOperand out;
    out.buf = buf;
    out.offset = a.base;
    out.ld = 16;
    int64_t tile = 16 * 16;
    bool whole = a.coef[0] == 16 && a.coef[1] == 1 && a.base_form.constant % tile == 0;
    ir::LinearForm index;
    index.constant = a.base_form.constant / tile;
    for (const ir::LinearTerm& t : a.base_form.terms) {
      whole = whole && t.coeff % tile == 0;
      index.add_term(t.atom, t.coeff / tile);
    }
    if (!whole)
      fail(
          fmt::format("its access to the accumulator fragments {} is not one whole fragment", buf));
    out.fragment = ir::simplify(ir::linear_expr(index, ir::kIndexType));
    return out;
  }

  void bounds(const MmaNest& want) {
    std::array<int64_t, 3> extents{};
    for (size_t d = 0; d < loops_.size(); ++d) {
      const ir::For& f = *loops_[d];
      Expr lo = expand_lets(f.min, lets_), hi = expand_lets(f.end, lets_);
      for (size_t e = 0; e < d; ++e)
        if (ir::free_vars(lo).count(loops_[e]->var) || ir::free_vars(hi).count(loops_[e]->var))
          fail(
              fmt::format("the bounds of loop '{}' change with loop '{}': the tile is a "
                          "rectangle",
                          f.var, loops_[e]->var));
      std::optional<int64_t> extent = constant(hi - lo);
      if (f.step != 1 || !extent)
        fail(fmt::format("loop '{}' does not run a constant number of times by steps of 1", f.var));
      extents[d] = *extent;
      mins_[d] = lo;
    }
    if (loops_.size() == 2) {
      if (extents[0] != want.m || extents[1] != want.n)
        fail(fmt::format("its loops run {} x {} times ({}, {}); an accumulator tile is {} x {}",
                         extents[0], extents[1], loops_[0]->var, loops_[1]->var, want.m, want.n));
      return;
    }
    if (extents != std::array<int64_t, 3>{want.m, want.n, want.k})
      fail(fmt::format(
          "its loops run {} x {} x {} times ({}, {}, {}); a TF32 tensor-core tile is "
          "{} x {} x {} (m, n, k): split and order the loops so that the nest is that tile",
          extents[0], extents[1], extents[2], loops_[0]->var, loops_[1]->var, loops_[2]->var,
          want.m, want.n, want.k));
  }

  static bool equal(const Expr& x, const Expr& y) { return constant(x - y) == 0; }

  Affine affine(const std::string& buf, const std::vector<Expr>& indices) const {
    Expr off = expand_lets(flat_offset(indices, shape_of_(buf)), lets_);
    ir::LinearForm l = ir::linearize(off, true);
    if (!l.ok) fail(fmt::format("the offset of its access to {} overflows", buf));
    Affine out;
    ir::LinearForm base;
    base.constant = l.constant;
    const int loops = static_cast<int>(loops_.size());
    for (const ir::LinearTerm& t : l.terms) {
      const ir::Var* v = ir::as<ir::Var>(t.atom);
      int d = 0;
      while (d < loops && !(v && v->name == loops_[d]->var)) ++d;
      if (d < loops) {
        out.coef[d] += t.coeff;
        base.add_linear(ir::linearize(mins_[d], true), t.coeff);
        continue;
      }
      for (const ir::For* f : loops_)
        if (ir::free_vars(t.atom).count(f->var))
          fail(fmt::format("the offset of its access to {} ({}) is not affine in loop '{}'", buf,
                           ir::to_string(ir::simplify(off)), f->var));
      base.add_term(t.atom, t.coeff);
    }
    if (!base.ok) fail(fmt::format("the offset of its access to {} overflows", buf));
    out.base = ir::simplify(ir::linear_expr(base, ir::kIndexType));
    out.base_form = base;
    out.aligned = base.constant % 8 == 0;
    for (const ir::LinearTerm& t : base.terms) out.aligned = out.aligned && t.coeff % 8 == 0;
    return out;
  }

  // rows/cols: which loops (0 m, 1 n, 2 k) run along the operand's rows and columns.
  MmaOperand operand(const std::string& buf, const std::vector<Expr>& indices, const Affine& a,
                     int rows, int cols, const char* what) const {
    MmaOperand out;
    out.buf = buf;
    out.offset = a.base;
    std::map<std::string, Expr> first;
    for (size_t d = 0; d < loops_.size(); ++d)
      first[loops_[d]->var] = expand_lets(mins_[d], inner_);
    for (const Expr& i : indices)
      out.first.push_back(ir::simplify(ir::substitute(expand_lets(i, inner_), first)));
    int64_t r = a.coef[rows], c = a.coef[cols];
    if (c == 1 && r != 1) {
      out.row_major = true;
      out.ld = r;
    } else if (r == 1 && c != 1) {
      out.row_major = false;
      out.ld = c;
    } else {
      fail(
          fmt::format("neither the rows nor the columns of its tile of {} ({}) are consecutive "
                      "elements (loop '{}' moves it by {}, loop '{}' by {})",
                      buf, what, loops_[rows]->var, r, loops_[cols]->var, c));
    }
    if (out.ld <= 0 || out.ld % 4 != 0)
      fail(
          fmt::format("its tile of {} ({}) has rows {} elements apart; warp matrix loads and "
                      "stores need a positive multiple of 4 (16 bytes): pad the rows",
                      buf, what, out.ld));
    if (!a.aligned && constant(ir::binary(BinaryOp::Mod, out.offset, ir::int_imm(8))) != 0)
      fail(
          fmt::format("its tile of {} ({}) starts at element {}, which is not a multiple of 8 "
                      "for every value of the loops around it (32 bytes, as warp matrix loads "
                      "and stores need)",
                      buf, what, ir::to_string(out.offset)));
    return out;
  }

  const ir::For& head_;
  std::map<std::string, Expr> lets_;   // every let in scope, expanded
  std::map<std::string, Expr> inner_;  // the lets inside the nest, expanded
  const std::function<const std::vector<Expr>&(const std::string&)>& shape_of_;
  const std::function<bool(const std::string&)>& is_fragment_;
  std::vector<const ir::For*> loops_;
  std::array<Expr, 3> mins_;
};

class MmaBuffers : public ir::StmtVisitor {
 public:
  std::set<std::string> bufs;

 protected:
  void visit_for(const ir::For& n) override {
    depth_ += is_mma(n.tag);
    ir::StmtVisitor::visit_for(n);
    depth_ -= is_mma(n.tag);
  }
  void visit_load(const ir::Load& n) override {
    if (depth_ > 0) bufs.insert(n.buf);
    ir::StmtVisitor::visit_load(n);
  }
  void visit_store(const ir::Store& n) override {
    if (depth_ > 0) bufs.insert(n.buf);
    ir::StmtVisitor::visit_store(n);
  }

 private:
  int depth_ = 0;
};

}  // namespace

MmaNest match_mma(const ir::For& head, const std::map<std::string, Expr>& lets,
                  const std::function<const std::vector<Expr>&(const std::string&)>& shape_of,
                  const std::function<bool(const std::string&)>& is_fragment) {
  return Matcher(head, lets, shape_of, is_fragment).run();
}

std::optional<MmaLoops> mma_loops(const ir::For& head) {
  MmaLoops out;
  out.loops.push_back(&head);
  const Stmt* at = &head.body;
  for (;;) {
    while (const ir::LetStmt* l = ir::as<ir::LetStmt>(*at)) {
      out.lets.push_back(l);
      at = &l->body;
    }
    if (const ir::Store* st = ir::as<ir::Store>(*at); st && out.loops.size() >= 2) {
      out.store = st;
      return out;
    }
    const ir::For* f = ir::as<ir::For>(*at);
    if (!f || out.loops.size() == 3) return std::nullopt;
    out.loops.push_back(f);
    at = &f->body;
  }
}

std::set<std::string> mma_buffers(const Stmt& s) {
  MmaBuffers v;
  if (s) v.visit(s);
  return std::move(v.bufs);
}

}  // namespace kiln::cuda
