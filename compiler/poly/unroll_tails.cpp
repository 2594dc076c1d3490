// unroll_explicit over a loop whose trip count varies (the last register tile of a block
// that is not a multiple of it): unrolled to the largest trip count with a guard per copy,
// and the loop around it that decides the trip count split into the full case, unguarded,
// and the rest.
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

// An unroll_explicit loop with a constant start and a varying end that a
// constant bounds: the loop `guarded` runs its `trips` iterations, each under
// `var < end`; `full` runs them all, unguarded, for where they all run.
struct Tail {
  const ir::For* loop;  // as lowering made it
  int64_t trips;
  ir::Stmt guarded, full;
  ir::Expr all_run;  // the condition under which every one of the trips runs
};

std::optional<Tail> tail_of(const ir::For& n) {
  if (n.tag != ir::LoopTag::UnrollExplicit || n.step <= 0) return std::nullopt;
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
  t.guarded = std::make_shared<ir::For>(
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

class UnrollTails : public ir::StmtMutator {
 protected:
  ir::Stmt mutate_for(const ir::Stmt& s, const ir::For& n) override {
    // A tail loop below this one that decides its trip count with this
    // loop's variable and outer ones only: the body is split here into the
    // case where every trip runs, unguarded, and the rest, so that no guard
    // sits inside the loops between (the reduction loop around a register
    // tile keeps its accumulators in registers only without one).
    ir::Stmt body = n.body;
    if (std::optional<Tail> t = tail_below(body, n.var)) {
      body = std::make_shared<ir::IfThenElse>(t->all_run, Replace(t->loop, t->full).mutate(body),
                                              Replace(t->loop, t->guarded).mutate(body));
    }
    body = mutate(body);
    if (body == n.body) {
      if (std::optional<Tail> t = tail_of(n)) return t->guarded;  // nowhere to split it
      return s;
    }
    auto out = std::make_shared<ir::For>(n.var, n.min, n.end, n.step, n.tag, body);
    if (std::optional<Tail> t = tail_of(*out)) return t->guarded;
    return out;
  }

 private:
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

ir::Stmt unroll_tails(const ir::Stmt& body) {
  if (!body) return body;
  return UnrollTails().mutate(body);
}

}  // namespace kiln::poly
