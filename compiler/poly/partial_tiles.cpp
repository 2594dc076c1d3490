// Partial tiles: loops whose trip count varies within a constant bound (the last
// register tile of a block that is not a multiple of it). The loop around one that
// decides its trip count is split into the full case, where the loop has its bound as a
// constant extent, and the rest. In the rest, an unroll_explicit loop is unrolled to the
// bound with a guard per copy; a vectorize loop stays (codegen masks the lanes past its
// end, or runs vectors of 8 and a scalar rest); and where the sizes are known when
// compiling, the partial extent and place become constants.
#include <algorithm>
#include <optional>
#include <set>

#include "kiln/analysis.h"
#include "model.h"

namespace kiln::poly {
namespace {

// Constant bounds on the values of e, whatever its variables, where the
// expression's shape gives them (a min with a constant arm: isl's
// `min(6, -96 * io - 6 * ir + 1024)` is at most 6).
struct Range {
  std::optional<int64_t> lo, hi;
};

Range range_of(const ir::Expr& e) {
  if (const auto* i = ir::as<ir::IntImm>(e)) return {i->value, i->value};
  const auto* b = ir::as<ir::Binary>(e);
  if (!b) return {};
  Range x = range_of(b->a), y = range_of(b->b);
  // A bound of both arms, combined by f; for min and max one arm's bound
  // alone is enough on the side it caps (`either`).
  auto both = [](std::optional<int64_t> p, std::optional<int64_t> q, auto f,
                 bool either) -> std::optional<int64_t> {
    if (p && q) return f(*p, *q);
    return either ? (p ? p : q) : std::nullopt;
  };
  auto smaller = [](int64_t p, int64_t q) { return std::min(p, q); };
  auto larger = [](int64_t p, int64_t q) { return std::max(p, q); };
  auto checked = [](std::optional<int64_t> p, std::optional<int64_t> q, bool minus) {
    int64_t out = 0;
    if (!p || !q) return std::optional<int64_t>();
    bool overflow =
        minus ? __builtin_sub_overflow(*p, *q, &out) : __builtin_add_overflow(*p, *q, &out);
    return overflow ? std::optional<int64_t>() : std::optional<int64_t>(out);
  };
  switch (b->op) {
    case ir::BinaryOp::Min:
      return {both(x.lo, y.lo, smaller, false), both(x.hi, y.hi, smaller, true)};
    case ir::BinaryOp::Max:
      return {both(x.lo, y.lo, larger, true), both(x.hi, y.hi, larger, false)};
    case ir::BinaryOp::Add:
      return {checked(x.lo, y.lo, false), checked(x.hi, y.hi, false)};
    case ir::BinaryOp::Sub:
      return {checked(x.lo, y.hi, true), checked(x.hi, y.lo, true)};
    default:
      return {};
  }
}

// A loop tagged unroll_explicit or vectorize with a constant start and a
// varying end that a constant bounds: `full` runs all `trips` iterations, as
// a constant extent, for where they all run (`all_run`); `rest` is the loop
// for the other cases: for unroll_explicit the trips, each under
// `var < end`; for vectorize null: the loop as it is.
struct Tail {
  const ir::For* loop;  // as lowering made it
  int64_t trips;
  ir::Stmt rest, full;
  ir::Expr all_run;  // the condition under which every one of the trips runs
};

std::optional<Tail> tail_of(const ir::For& n) {
  bool unrolled = n.tag == ir::LoopTag::UnrollExplicit && n.step > 0;
  bool vector = n.tag == ir::LoopTag::Vectorize && n.step == 1;
  if (!unrolled && !vector) return std::nullopt;
  const auto* lo = ir::as<ir::IntImm>(n.min);
  if (!lo || ir::as<ir::IntImm>(n.end)) return std::nullopt;
  std::optional<int64_t> hi = range_of(n.end).hi;
  if (!hi || *hi <= lo->value) return std::nullopt;
  Tail t;
  t.loop = &n;
  t.trips = (*hi - lo->value + n.step - 1) / n.step;
  int64_t last = lo->value + (t.trips - 1) * n.step;
  ir::Expr end = ir::int_imm(last + 1);
  ir::Expr v = ir::var(n.var);
  if (!vector)
    t.rest = std::make_shared<ir::For>(
        n.var, n.min, end, n.step, n.tag,
        std::make_shared<ir::IfThenElse>(ir::binary(ir::BinaryOp::Lt, v, n.end), n.body, nullptr));
  t.full = std::make_shared<ir::For>(n.var, n.min, end, n.step, n.tag, n.body);
  t.all_run = ir::binary(ir::BinaryOp::Lt, ir::int_imm(last), n.end);
  return t;
}

// Replaces one loop node (by identity) with another.
class Replace : public ir::StmtMutator {
 public:
  Replace(const ir::For* from, ir::Stmt to) : from_(from), to_(std::move(to)) {}

 protected:
  ir::Stmt mutate_for(const ir::Stmt& s, const ir::For& n) override {
    if (&n == from_) return to_;
    return ir::StmtMutator::mutate_for(s, n);
  }

 private:
  const ir::For* from_;
  ir::Stmt to_;
};

class PartialTiles : public ir::StmtMutator {
 protected:
  ir::Stmt mutate_for(const ir::Stmt& s, const ir::For& n) override {
    // A tail loop below this one that decides its trip count with this
    // loop's variable and outer ones only: the body is split here into the
    // case where every trip runs, a constant extent, and the rest, so that no
    // guard sits inside the loops between (the reduction loop around a
    // register tile keeps its accumulators in registers only without one,
    // and only when its vectors are straight-line code).
    ir::Stmt body = n.body;
    if (std::optional<Tail> t = tail_below(body, n.var)) {
      std::optional<Partial> partial = partial_of(n, *t);
      if (partial && partial->at.empty()) {
        body = Replace(t->loop, t->full).mutate(body);  // never partial
      } else {
        // Where the partial case has one extent, the rest has it as a
        // constant; where it is one iteration, that iteration's value too
        // (a partial register tile at a constant place: LLVM keeps its
        // accumulators in registers only when their addresses differ by
        // constants).
        ir::Stmt rest = t->rest;
        if (partial && partial->extent) {
          const ir::For& l = *t->loop;
          rest = std::make_shared<ir::For>(l.var, l.min, ir::int_imm(*partial->extent), l.step,
                                           l.tag, l.body);
        }
        ir::Stmt rest_body = rest ? Replace(t->loop, rest).mutate(body) : body;
        if (partial && partial->extent && partial->at.size() == 1)
          rest_body = ir::substitute(rest_body, {{n.var, ir::int_imm(partial->at.front())}});
        body = std::make_shared<ir::IfThenElse>(t->all_run, Replace(t->loop, t->full).mutate(body),
                                                rest_body);
      }
    }
    body = mutate(body);
    if (body == n.body) {
      std::optional<Tail> t = tail_of(n);
      return t && t->rest ? t->rest : s;  // nowhere to split it
    }
    auto out = std::make_shared<ir::For>(n.var, n.min, n.end, n.step, n.tag, body);
    std::optional<Tail> t = tail_of(*out);
    return t && t->rest ? t->rest : out;
  }

 private:
  // Where `around` has constant bounds and t's end reads no other variable:
  // the values of around's variable where not every trip of t's loop runs,
  // and the end t's loop has there when that is one constant (isl's
  // min(64, 1000 - 64 * jr) is 40 at jr = 15, the only partial tile).
  struct Partial {
    std::vector<int64_t> at;
    std::optional<int64_t> extent;
  };
  static std::optional<Partial> partial_of(const ir::For& around, const Tail& t) {
    const auto* lo = ir::as<ir::IntImm>(around.min);
    const auto* hi = ir::as<ir::IntImm>(around.end);
    if (!lo || !hi || around.step <= 0 || (hi->value - lo->value) / around.step > 4096)
      return std::nullopt;
    for (const std::string& v : ir::free_vars(t.loop->end))
      if (v != around.var) return std::nullopt;
    Partial p;
    bool one_extent = true;
    for (int64_t v = lo->value; v < hi->value; v += around.step) {
      std::optional<int64_t> all = ir::eval_int(t.all_run, {{around.var, v}});
      std::optional<int64_t> end = ir::eval_int(t.loop->end, {{around.var, v}});
      if (!all || !end) return std::nullopt;
      if (*all) continue;
      if (p.extent && *p.extent != *end) one_extent = false;
      p.extent = *end;
      p.at.push_back(v);
    }
    if (!one_extent) p.extent.reset();
    return p;
  }

  // The first tail loop in s whose end reads `var` and no variable bound
  // inside s above it.
  std::optional<Tail> tail_below(const ir::Stmt& s, const std::string& var) {
    struct Find : ir::StmtVisitor {
      const std::string* var;
      std::set<std::string> inner;  // bound inside s, around the point visited
      std::optional<Tail> found;
      void visit_for(const ir::For& n) override {
        if (found) return;
        if (std::optional<Tail> t = tail_of(n)) {
          std::set<std::string> reads = ir::free_vars(n.end);
          bool mine = reads.count(*var) > 0;
          for (const std::string& r : reads) mine = mine && inner.count(r) == 0;
          if (mine) {
            found = t;
            return;
          }
        }
        bool fresh = inner.insert(n.var).second;
        ir::StmtVisitor::visit_for(n);
        if (fresh) inner.erase(n.var);
      }
      void visit_let_stmt(const ir::LetStmt& n) override {
        bool fresh = inner.insert(n.var).second;
        ir::StmtVisitor::visit_let_stmt(n);
        if (fresh) inner.erase(n.var);
      }
    } find;
    find.var = &var;
    find.visit(s);
    return find.found;
  }
};

}  // namespace

ir::Stmt split_partial_tiles(const ir::Stmt& body) {
  if (!body) return body;
  return PartialTiles().mutate(body);
}

}  // namespace kiln::poly
