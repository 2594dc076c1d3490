// How many floating-point operations a lowered function performs, counted on its loop nest.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "kiln/loop_ir.h"

namespace kiln::ir {
namespace {

// Loop iterations the counter may step through one by one before it gives up:
// a nest whose bounds depend on outer loops (tiles with remainders, skewed
// loops) is enumerated down to the loops whose trip counts no longer vary.
constexpr int64_t kStepBudget = int64_t{1} << 24;

// Float Add, Sub, Mul and Div nodes in e: a multiply-add counts 2.
int64_t float_ops(const Expr& e) {
  struct Count : IRVisitor {
    int64_t n = 0;
    void visit_binary(const Binary& b) override {
      if (is_float(b.type) && (b.op == BinaryOp::Add || b.op == BinaryOp::Sub ||
                               b.op == BinaryOp::Mul || b.op == BinaryOp::Div))
        ++n;
      IRVisitor::visit_binary(b);
    }
  } count;
  count.visit(e);
  return count.n;
}

// Whether `var` occurs free in e.
bool uses(const Expr& e, const std::string& var) {
  struct Uses : IRVisitor {
    const std::string* var;
    bool found = false;
    void visit_var(const Var& v) override { found = found || v.name == *var; }
  } u;
  u.var = &var;
  u.visit(e);
  return u.found;
}

// Whether the number of times something in s runs can depend on `var`: it
// appears in a loop bound, a condition or a let that s holds.
bool counts_depend_on(const Stmt& s, const std::string& var) {
  if (!s) return false;
  if (const auto* n = as<For>(s))
    return uses(n->min, var) || uses(n->end, var) || counts_depend_on(n->body, var);
  if (const auto* n = as<IfThenElse>(s))
    return uses(n->cond, var) || counts_depend_on(n->then_case, var) ||
           counts_depend_on(n->else_case, var);
  if (const auto* n = as<LetStmt>(s)) return uses(n->value, var) || counts_depend_on(n->body, var);
  if (const auto* n = as<Alloc>(s)) return counts_depend_on(n->body, var);
  if (const auto* n = as<Block>(s))
    return std::any_of(n->stmts.begin(), n->stmts.end(),
                       [&](const Stmt& x) { return counts_depend_on(x, var); });
  return false;
}

class FlopCounter {
 public:
  explicit FlopCounter(std::map<std::string, int64_t> env) : env_(std::move(env)) {}

  // nullopt: unknown (a bound read from memory, a param without a value, the
  // budget spent, or more than fits in int64).
  std::optional<int64_t> count(const Stmt& s) {
    if (!s) return 0;
    if (const auto* n = as<Store>(s))
      return float_ops(n->value) + (n->atomic && is_float(n->value->type) ? 1 : 0);
    if (const auto* n = as<Block>(s)) {
      int64_t total = 0;
      for (const Stmt& x : n->stmts) {
        std::optional<int64_t> c = count(x);
        if (!c || __builtin_add_overflow(total, *c, &total)) return std::nullopt;
      }
      return total;
    }
    if (const auto* n = as<Alloc>(s)) return count(n->body);
    if (const auto* n = as<LetStmt>(s)) {
      std::optional<int64_t> v = eval(n->value);
      auto saved =
          env_.find(n->var) == env_.end() ? std::nullopt : std::optional<int64_t>(env_[n->var]);
      if (v) {
        env_[n->var] = *v;
      } else {
        env_.erase(n->var);  // a value read from memory: counts that use it are unknown
      }
      std::optional<int64_t> c = count(n->body);
      restore(n->var, saved);
      return c;
    }
    if (const auto* n = as<IfThenElse>(s)) {
      std::optional<int64_t> cond = eval(n->cond);
      if (!cond) return std::nullopt;
      return count(*cond != 0 ? n->then_case : n->else_case);
    }
    if (const auto* n = as<For>(s)) return count_for(*n);
    return 0;  // Evaluate
  }

 private:
  std::optional<int64_t> count_for(const For& n) {
    std::optional<int64_t> lo = eval(n.min), hi = eval(n.end);
    if (!lo || !hi || n.step <= 0) return std::nullopt;
    if (*hi <= *lo) return 0;
    int64_t trips = (*hi - *lo + n.step - 1) / n.step;
    if (!counts_depend_on(n.body, n.var)) {
      std::optional<int64_t> body = count(n.body);
      int64_t total = 0;
      if (!body || __builtin_mul_overflow(trips, *body, &total)) return std::nullopt;
      return total;
    }
    auto saved =
        env_.find(n.var) == env_.end() ? std::nullopt : std::optional<int64_t>(env_[n.var]);
    int64_t total = 0;
    for (int64_t k = 0; k < trips; ++k) {
      if (++steps_ > kStepBudget) return std::nullopt;
      env_[n.var] = *lo + k * n.step;
      std::optional<int64_t> c = count(n.body);
      if (!c || __builtin_add_overflow(total, *c, &total)) return std::nullopt;
    }
    restore(n.var, saved);
    return total;
  }

  void restore(const std::string& var, std::optional<int64_t> saved) {
    if (saved) {
      env_[var] = *saved;
    } else {
      env_.erase(var);
    }
  }

  // An integer expression of known values; nullopt for anything else.
  std::optional<int64_t> eval(const Expr& e) const { return eval_int(e, env_); }

  std::map<std::string, int64_t> env_;
  int64_t steps_ = 0;
};

}  // namespace

int64_t flop_count(const LoweredFunc& f, const std::map<std::string, int64_t>& params) {
  std::map<std::string, int64_t> env;
  for (const std::string& p : f.params) {
    auto it = params.find(p);
    if (it == params.end()) return -1;
    env[p] = it->second;
  }
  std::optional<int64_t> n = FlopCounter(std::move(env)).count(f.body);
  return n ? *n : -1;
}

}  // namespace kiln::ir
