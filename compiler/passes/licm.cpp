// Loop-invariant code motion: Normalize (Algorithm 2 of seed 000), then hoisting with a cost model
// (Algorithm 1).
#include "kiln/passes/licm.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/analysis.h"

namespace kiln::passes {
namespace {

using namespace kiln::ir;  // NOLINT: a pass is all IR

// ---------------------------------------------------------------------------
// Normalize

bool reassociable(BinaryOp op, DType t) {
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Mul:
    case BinaryOp::Min:
    case BinaryOp::Max:
      return is_int(t);  // floats: IEEE arithmetic is not associative
    case BinaryOp::And:
    case BinaryOp::Or:
      return t == DType::Bool;
    default:
      return false;
  }
}

class Normalizer : public ir::StmtMutator {
 public:
  Stmt stmt(const Stmt& s) { return mutate(s); }

 protected:
  Expr mutate_stmt_expr(const Expr& e) override { return expr(e); }

  Stmt mutate_for(const Stmt& s, const For& n) override {
    Expr lo = expr(n.min), hi = expr(n.end);
    ++depth_;
    auto saved = bind(n.var, depth_);
    Stmt body = stmt(n.body);
    restore(n.var, saved);
    --depth_;
    if (lo == n.min && hi == n.end && body == n.body) return s;
    return std::make_shared<For>(n.var, lo, hi, n.step, n.tag, body);
  }

  Stmt mutate_let_stmt(const Stmt& s, const LetStmt& n) override {
    Expr v = expr(n.value);
    auto saved = bind(n.var, rank(v));
    Stmt body = stmt(n.body);
    restore(n.var, saved);
    if (v == n.value && body == n.body) return s;
    return std::make_shared<LetStmt>(n.var, v, body);
  }

  Stmt mutate_if(const Stmt& s, const IfThenElse& n) override {
    Expr c = expr(n.cond);
    Stmt t = stmt(n.then_case), e = stmt(n.else_case);
    // condCollapse on statements: if (c1) { if (c2) A } -> if (c1 && c2) A.
    const auto* inner = as<IfThenElse>(t);
    if (!e && inner && !inner->else_case && speculatable(inner->cond)) {
      return std::make_shared<IfThenElse>(reassociate(binary(BinaryOp::And, c, inner->cond)),
                                          inner->then_case, nullptr);
    }
    if (c == n.cond && t == n.then_case && e == n.else_case) return s;
    return std::make_shared<IfThenElse>(c, t, e);
  }

  Stmt mutate_block(const Stmt&, const Block& n) override {
    std::vector<Stmt> out;
    for (const Stmt& x : n.stmts) out.push_back(stmt(x));
    return block(ifconcat(std::move(out)));
  }

 private:
  std::optional<int> bind(const std::string& v, int r) {
    std::optional<int> old;
    if (auto it = rank_.find(v); it != rank_.end()) old = it->second;
    rank_[v] = r;
    return old;
  }
  void restore(const std::string& v, std::optional<int> old) {
    if (old) {
      rank_[v] = *old;
    } else {
      rank_.erase(v);
    }
  }

  // 0 for constants and free names (params), the loop depth for iterators,
  // the value's rank for let-bound names, the max of the operands otherwise.
  int rank(const Expr& e) {
    switch (e->kind) {
      case ExprKind::IntImm:
      case ExprKind::FloatImm:
        return 0;
      case ExprKind::Var: {
        auto it = rank_.find(static_cast<const Var&>(*e).name);
        return it == rank_.end() ? 0 : it->second;
      }
      case ExprKind::Let: {
        const auto& n = static_cast<const Let&>(*e);
        int rv = rank(n.value);
        auto saved = bind(n.var, rv);
        int rb = rank(n.body);
        restore(n.var, saved);
        return std::max(rv, rb);
      }
      default: {
        int r = 0;
        for_each_child(e, [&](const Expr& c) { r = std::max(r, rank(c)); });
        return r;
      }
    }
  }

  Expr expr(const Expr& e) {
    if (!e) return e;
    Expr out;
    if (const auto* l = as<Let>(e)) {
      Expr v = expr(l->value);
      auto saved = bind(l->var, rank(v));
      Expr b = expr(l->body);
      restore(l->var, saved);
      out = v == l->value && b == l->body ? e : std::make_shared<Let>(l->var, v, b, e->type);
    } else {
      out = map_children(e, [this](const Expr& c) { return expr(c); });
    }
    if (as<Select>(out)) out = cond_collapse(out);
    if (as<Binary>(out)) out = reassociate(out);
    return out;
  }

  // select(c1, select(c2, x, y), y) -> select(c1 && c2, x, y) and
  // select(c1, x, select(c2, x, y)) -> select(c1 || c2, x, y): one condition
  // in which the invariant parts can group (expression (3) -> (4) of seed 000).
  Expr cond_collapse(Expr e) {
    for (;;) {
      const auto& n = static_cast<const Select&>(*e);
      const auto* t = as<Select>(n.t);
      const auto* f = as<Select>(n.f);
      if (t && equal(t->f, n.f) && speculatable(t->cond)) {
        e = std::make_shared<Select>(reassociate(binary(BinaryOp::And, n.cond, t->cond)), t->t, n.f,
                                     n.type);
      } else if (f && equal(f->t, n.t) && speculatable(f->cond)) {
        e = std::make_shared<Select>(reassociate(binary(BinaryOp::Or, n.cond, f->cond)), n.t, f->f,
                                     n.type);
      } else {
        return e;
      }
    }
  }

  void deconstruct(const Expr& e, BinaryOp op, DType t, std::vector<Expr>* out) {
    const auto* b = as<Binary>(e);
    if (b && b->op == op && b->type == t) {
      deconstruct(b->a, op, t, out);
      deconstruct(b->b, op, t, out);
    } else {
      out->push_back(e);
    }
  }

  // deconstruct, stableSort by rank, groupExpressions, construct (Algorithm 2).
  Expr reassociate(const Expr& e) {
    const auto& n = static_cast<const Binary&>(*e);
    if (!reassociable(n.op, n.type)) return e;
    std::vector<Expr> terms;
    deconstruct(e, n.op, n.type, &terms);
    bool logical = n.op == BinaryOp::And || n.op == BinaryOp::Or;
    // && and || may guard their right side: reorder only operands that are
    // safe to evaluate anywhere.
    if (logical && !std::all_of(terms.begin(), terms.end(), speculatable)) return e;
    // Constants join the lowest-ranked group, after its other operands, so
    // that x * 4 stays x * 4 and 5 + i + j groups as i + 5 + j.
    auto is_const = [](const Expr& t) { return as<IntImm>(t) != nullptr; };
    int lowest = INT_MAX;
    for (const Expr& t : terms) {
      if (!is_const(t)) lowest = std::min(lowest, rank(t));
    }
    if (lowest == INT_MAX) return e;
    std::vector<std::pair<int, Expr>> ranked;
    for (const Expr& t : terms) ranked.emplace_back(is_const(t) ? lowest : rank(t), t);
    std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      return !is_const(a.second) && is_const(b.second);
    });
    Expr result;
    for (size_t i = 0; i < ranked.size();) {
      Expr group = ranked[i].second;
      size_t j = i + 1;
      for (; j < ranked.size() && ranked[j].first == ranked[i].first; ++j) {
        group = std::make_shared<Binary>(n.op, group, ranked[j].second, n.type);
      }
      result = result ? std::make_shared<Binary>(n.op, result, group, n.type) : group;
      i = j;
    }
    return equal(result, e) ? e : result;
  }

  // Adjacent ifs with the same condition become one. The condition reads only
  // immutable names (no loads), so the first if's body cannot change it.
  static std::vector<Stmt> ifconcat(std::vector<Stmt> stmts) {
    std::vector<Stmt> out;
    for (Stmt& s : stmts) {
      const auto* cur = as<IfThenElse>(s);
      const auto* prev = out.empty() ? nullptr : as<IfThenElse>(out.back());
      if (cur && prev && equal(cur->cond, prev->cond) && speculatable(cur->cond)) {
        Stmt else_case;
        if (prev->else_case || cur->else_case) else_case = block({prev->else_case, cur->else_case});
        out.back() = std::make_shared<IfThenElse>(
            prev->cond, block({prev->then_case, cur->then_case}), else_case);
      } else {
        out.push_back(std::move(s));
      }
    }
    return out;
  }

  std::map<std::string, int> rank_;
  int depth_ = 0;
};

// ---------------------------------------------------------------------------
// Hoisting

constexpr int kNever = INT_MAX / 2;  // the level of something that is never invariant

class Hoister : public ir::StmtMutator {
 public:
  Hoister(const LicmOptions& o, std::set<std::string> used) : opt_(o), used_(std::move(used)) {}

  Stmt stmt(const Stmt& s) { return mutate(s); }

 protected:
  Expr mutate_stmt_expr(const Expr& e) override { return expr(e); }

  Stmt mutate_for(const Stmt& s, const For& n) override { return loop(s, n); }

  Stmt mutate_let_stmt(const Stmt& s, const LetStmt& n) override {
    int lv = level(n.value);
    bool hoist = depth_ > 0 && lv < depth_ && !level_.count(n.var) && speculatable(n.value) &&
                 (cost(n.value) == 0 || effective_cost(n.value) >= opt_.threshold);
    if (hoist) {
      // The statement moves whole; its value's own invariant parts may go further out.
      frames_[static_cast<size_t>(lv)].emplace_back(n.var, expr_at(n.value, lv));
      level_[n.var] = lv;
      Stmt body = stmt(n.body);
      level_.erase(n.var);
      return body;
    }
    // Not moved: the name is defined here, so whatever reads it stays below.
    Expr v = expr(n.value);
    auto saved = bind(n.var, depth_);
    Stmt body = stmt(n.body);
    restore(n.var, saved);
    if (v == n.value && body == n.body) return s;
    return std::make_shared<LetStmt>(n.var, v, body);
  }

 private:
  using Lets = std::vector<std::pair<std::string, Expr>>;

  Stmt loop(const Stmt& s, const For& n) {
    Expr lo = expr(n.min), hi = expr(n.end);  // evaluated once, outside the loop
    const auto* clo = as<IntImm>(lo);
    const auto* chi = as<IntImm>(hi);
    bool serial =
        n.tag == LoopTag::None || n.tag == LoopTag::Unroll || n.tag == LoopTag::UnrollExplicit;
    bool small = clo && chi && n.step > 0 &&
                 (chi->value - clo->value + n.step - 1) / n.step <= opt_.small_loop &&
                 (opt_.gpu || (opt_.unrolled_serial_loops && serial));
    ++depth_;
    frames_.emplace_back();
    small_.push_back(small);
    auto saved = bind(n.var, depth_);
    Stmt body = stmt(n.body);
    const auto* branch = as<IfThenElse>(body);
    // Measured while the loop's own variable is bound: a condition that reads
    // it is not invariant in this loop.
    bool invariant_branch = branch != nullptr && level(branch->cond) < depth_;
    restore(n.var, saved);
    Lets lets = std::move(frames_.back());
    frames_.pop_back();
    small_.pop_back();
    --depth_;

    Stmt result;
    if (invariant_branch && !ir::is_gpu_tag(n.tag) && speculatable(branch->cond)) {
      // HoistIfThenElse: for i { if (c) A else B } -> if (c) for i A else for i B.
      auto in_loop = [&](const Stmt& b) -> Stmt {
        return b ? std::make_shared<For>(n.var, lo, hi, n.step, n.tag, b) : nullptr;
      };
      result = std::make_shared<IfThenElse>(branch->cond, in_loop(branch->then_case),
                                            in_loop(branch->else_case));
    } else if (lo == n.min && hi == n.end && body == n.body) {
      result = s;
    } else {
      result = std::make_shared<For>(n.var, lo, hi, n.step, n.tag, body);
    }
    for (auto it = lets.rbegin(); it != lets.rend(); ++it) {
      result = std::make_shared<LetStmt>(it->first, it->second, result);
    }
    return result;
  }

  // The largest loop depth whose iterator e depends on (0: invariant in every
  // loop); kNever when e reads memory.
  int level(const Expr& e) {
    switch (e->kind) {
      case ExprKind::IntImm:
      case ExprKind::FloatImm:
        return 0;
      case ExprKind::Var: {
        auto it = level_.find(static_cast<const Var&>(*e).name);
        return it == level_.end() ? 0 : it->second;
      }
      case ExprKind::Load:
      case ExprKind::Access:
        return kNever;
      case ExprKind::Let: {
        const auto& n = static_cast<const Let&>(*e);
        int lv = level(n.value);
        auto saved = bind(n.var, lv);
        int lb = level(n.body);
        restore(n.var, saved);
        return std::max(lv, lb);
      }
      default: {
        int l = 0;
        for_each_child(e, [&](const Expr& c) { l = std::max(l, level(c)); });
        return l;
      }
    }
  }

  int op_cost(const Expr& e) const {
    switch (e->kind) {
      case ExprKind::Cast:
        return opt_.cost_cast;
      case ExprKind::Unary:
        return static_cast<const Unary&>(*e).op == UnaryOp::Not ? opt_.cost_compare
                                                                : opt_.cost_cast;
      case ExprKind::Select:
        return opt_.cost_select;
      case ExprKind::Call:
        return opt_.cost_call;
      case ExprKind::Binary:
        switch (static_cast<const Binary&>(*e).op) {
          case BinaryOp::Add:
          case BinaryOp::Sub:
            return opt_.cost_add;
          case BinaryOp::Mul:
            return opt_.cost_mul;
          case BinaryOp::Div:
          case BinaryOp::Mod:
            return opt_.cost_div;
          case BinaryOp::Min:
          case BinaryOp::Max:
            return opt_.cost_min_max;
          default:
            return opt_.cost_compare;
        }
      default:
        return 0;
    }
  }

  // cost(e) = 0 for constants and names, cost(op) + the operands' costs otherwise.
  int cost(const Expr& e) const {
    int c = op_cost(e);
    for_each_child(e, [&](const Expr& x) { c += cost(x); });
    return c;
  }
  int effective_cost(const Expr& e) const {
    if (!small_.empty() && small_.back()) return 0;  // the backend unrolls it
    return cost(e);
  }

  bool hoistable(const Expr& e) {
    if (e->kind == ExprKind::IntImm || e->kind == ExprKind::FloatImm || e->kind == ExprKind::Var) {
      return false;
    }
    return depth_ > 0 && level(e) < depth_ && speculatable(e) &&
           effective_cost(e) >= opt_.threshold;
  }

  // Replaces the largest invariant subexpressions of e by names bound before
  // the outermost loop each is invariant in.
  Expr expr(const Expr& e) {
    if (!e) return e;
    if (hoistable(e)) {
      int target = level(e);
      Expr value = expr_at(e, target);
      Lets& frame = frames_[static_cast<size_t>(target)];
      for (const auto& [name, v] : frame) {
        if (equal(v, value)) return var(name, value->type);
      }
      std::string name = fresh();
      frame.emplace_back(name, value);
      level_[name] = target;
      return var(name, value->type);
    }
    if (const auto* l = as<Let>(e)) {
      Expr v = expr(l->value);
      auto saved = bind(l->var, kNever);  // nothing that reads it may leave the let
      Expr b = expr(l->body);
      restore(l->var, saved);
      return v == l->value && b == l->body ? e : std::make_shared<Let>(l->var, v, b, e->type);
    }
    return map_children(e, [this](const Expr& c) { return expr(c); });
  }

  // e processed as if it stood at loop depth `target`, where it is about to
  // move: its own invariant parts are hoisted further out.
  Expr expr_at(const Expr& e, int target) {
    int saved_depth = depth_;
    std::vector<bool> saved_small(small_.begin() + target, small_.end());
    depth_ = target;
    small_.resize(static_cast<size_t>(target));
    Expr value = expr(e);
    depth_ = saved_depth;
    small_.insert(small_.end(), saved_small.begin(), saved_small.end());
    return value;
  }

  std::string fresh() {
    for (;;) {
      std::string n = "licm_var_" + std::to_string(++counter_);
      if (used_.insert(n).second) return n;
    }
  }

  std::optional<int> bind(const std::string& v, int l) {
    std::optional<int> old;
    if (auto it = level_.find(v); it != level_.end()) old = it->second;
    level_[v] = l;
    return old;
  }
  void restore(const std::string& v, std::optional<int> old) {
    if (old) {
      level_[v] = *old;
    } else {
      level_.erase(v);
    }
  }

  const LicmOptions& opt_;
  std::set<std::string> used_;
  int counter_ = 0;
  int depth_ = 0;
  std::vector<Lets> frames_;  // frames_[k]: lets placed just before the loop at depth k + 1
  std::vector<bool> small_;   // small_[k]: the loop at depth k + 1 is one the backend unrolls
  std::map<std::string, int> level_;
};

}  // namespace

Stmt normalize(const Stmt& s) { return Normalizer().stmt(s); }

Stmt licm(const Stmt& s, const LicmOptions& options) {
  return Hoister(options, names_in(s)).stmt(s);
}

}  // namespace kiln::passes
