// Simplify: constant folding, algebraic identities, bounds-aware division and modulo, dead code.
#include "kiln/passes/simplify.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

namespace kiln::passes {

namespace {

using ir::BinaryOp;
using ir::DType;
using ir::Expr;
using ir::ExprKind;
using ir::Stmt;
using ir::UnaryOp;

// ---------------------------------------------------------------------------
// Small queries

std::optional<int64_t> int_value(const Expr& e) {
  const auto* n = ir::as<ir::IntImm>(e);
  if (n == nullptr || !ir::is_int(n->type)) return std::nullopt;
  return n->value;
}

std::optional<bool> bool_value(const Expr& e) {
  const auto* n = ir::as<ir::IntImm>(e);
  if (n == nullptr || n->type != DType::Bool) return std::nullopt;
  return n->value != 0;
}

class LoadCounter : public ir::StmtVisitor {
 public:
  int count = 0;

 protected:
  void visit_load(const ir::Load& n) override {
    ++count;
    ir::StmtVisitor::visit_load(n);
  }
};

int count_loads(const Expr& e) {
  LoadCounter c;
  c.visit(e);
  return c.count;
}

// Every name a statement or expression mentions (shadowing ignored, so a
// name reported unused is certainly unused).
class NameCollector : public ir::StmtVisitor {
 public:
  std::set<std::string> names;

 protected:
  void visit_var(const ir::Var& n) override { names.insert(n.name); }
  void visit_let(const ir::Let& n) override {
    names.insert(n.var);
    ir::StmtVisitor::visit_let(n);
  }
  void visit_for(const ir::For& n) override {
    names.insert(n.var);
    ir::StmtVisitor::visit_for(n);
  }
  void visit_let_stmt(const ir::LetStmt& n) override {
    names.insert(n.var);
    ir::StmtVisitor::visit_let_stmt(n);
  }
};

bool mentions(const Stmt& s, const std::string& name) {
  NameCollector c;
  c.visit(s);
  return c.names.count(name) != 0;
}
bool mentions(const Expr& e, const std::string& name) {
  NameCollector c;
  c.visit(e);
  return c.names.count(name) != 0;
}

// ---------------------------------------------------------------------------
// Integer sums and ranges (kiln/range.h)

using Opt = std::optional<int64_t>;
using ir::Bounds;
using ir::Interval;
using Term = ir::LinearTerm;
using Linear = ir::LinearForm;
using ir::linearize;

Opt add(Opt a, Opt b) {
  int64_t r = 0;
  if (!a || !b || __builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
Expr rebuild(const Linear& l, DType t) { return ir::linear_expr(l, t); }
Interval bounds_of(const Expr& e, const Bounds& known) { return ir::range_of(e, known); }

// ---------------------------------------------------------------------------
// The expression simplifier

class ExprSimplifier : public ir::IRMutator {
 public:
  explicit ExprSimplifier(const Bounds& known) : known_(known) {}

 protected:
  Expr mutate_cast(const Expr& e, const ir::Cast& n) override {
    Expr v = mutate(n.value);
    if (ir::is_int(n.type) && (int_value(v) || bool_value(v))) {
      if (auto r = ir::eval_int(ir::cast(n.type, v), {})) return ir::int_imm(*r, n.type);
    }
    if (v == n.value) return e;
    return ir::cast(n.type, v);
  }

  Expr mutate_unary(const Expr& e, const ir::Unary& n) override {
    Expr a = mutate(n.a);
    if (n.op == UnaryOp::Not) {
      if (auto b = bool_value(a)) return ir::bool_imm(!*b);
      if (const auto* inner = ir::as<ir::Unary>(a); inner != nullptr && inner->op == UnaryOp::Not) {
        return inner->a;
      }
    } else if (ir::is_int(n.type)) {
      return linear_form(e, ir::unary(UnaryOp::Neg, a));
    } else if (const auto* f = ir::as<ir::FloatImm>(a)) {
      return ir::float_imm(-f->value, n.type);
    }
    if (a == n.a) return e;
    return ir::unary(n.op, a);
  }

  Expr mutate_binary(const Expr& e, const ir::Binary& n) override {
    Expr a = mutate(n.a);
    Expr b = mutate(n.b);
    Expr same = (a == n.a && b == n.b) ? e : ir::binary(n.op, a, b);
    if (ir::is_int(a->type) || a->type == DType::Bool) {
      if (auto r = fold_int(n.op, a, b)) return r;
    } else if (auto r = fold_float(n.op, a, b)) {
      return r;
    }
    if (n.op == BinaryOp::And || n.op == BinaryOp::Or) return logic(n.op, a, b, same);
    if (ir::is_comparison(n.op)) return compare(n.op, a, b, same);
    if (!ir::is_int(a->type)) {
      if (is_float_one(b) && n.op == BinaryOp::Mul) return a;
      if (is_float_one(a) && n.op == BinaryOp::Mul) return b;
      return same;
    }
    switch (n.op) {
      case BinaryOp::Add:
      case BinaryOp::Sub:
      case BinaryOp::Mul:
        return linear_form(e, same);
      case BinaryOp::Div:
      case BinaryOp::Mod:
        return div_mod(n.op, a, b, same);
      case BinaryOp::Min:
      case BinaryOp::Max:
        return min_max(n.op, a, b, same);
      default:
        return same;
    }
  }

  Expr mutate_select(const Expr& e, const ir::Select& n) override {
    Expr c = mutate(n.cond);
    if (auto v = bool_value(c)) return mutate(*v ? n.t : n.f);
    Expr t = mutate(n.t);
    Expr f = mutate(n.f);
    if (ir::equal(t, f) && count_loads(c) == 0) return t;
    if (c == n.cond && t == n.t && f == n.f) return e;
    return ir::select(c, t, f);
  }

  Expr mutate_let(const Expr& e, const ir::Let& n) override {
    Expr v = mutate(n.value);
    if (int_value(v) || bool_value(v) || ir::as<ir::FloatImm>(v) != nullptr ||
        (ir::as<ir::Var>(v) != nullptr && !rebinds(n.body, ir::as<ir::Var>(v)->name))) {
      return mutate(ir::substitute(n.body, {{n.var, v}}));
    }
    Expr body = mutate(n.body);
    if (!mentions(body, n.var) && count_loads(v) == 0) return body;
    if (v == n.value && body == n.body) return e;
    return ir::let(n.var, v, body);
  }

 private:
  static bool rebinds(const Expr& body, const std::string& name) {
    class Finder : public ir::IRVisitor {
     public:
      std::string name;
      bool found = false;

     protected:
      void visit_let(const ir::Let& n) override {
        if (n.var == name) found = true;
        ir::IRVisitor::visit_let(n);
      }
    } f;
    f.name = name;
    f.visit(body);
    return f.found;
  }

  static bool is_float_one(const Expr& e) {
    const auto* f = ir::as<ir::FloatImm>(e);
    return f != nullptr && f->value == 1.0;
  }

  static Expr fold_int(BinaryOp op, const Expr& a, const Expr& b) {
    bool ka = int_value(a) || bool_value(a), kb = int_value(b) || bool_value(b);
    if (!ka || !kb) return nullptr;
    auto r = ir::eval_int(ir::binary(op, a, b), {});
    if (!r) return nullptr;  // division by zero stays for run time to report
    if (ir::is_comparison(op) || a->type == DType::Bool) return ir::bool_imm(*r != 0);
    return ir::int_imm(*r, a->type);
  }

  static Expr fold_float(BinaryOp op, const Expr& a, const Expr& b) {
    const auto* x = ir::as<ir::FloatImm>(a);
    const auto* y = ir::as<ir::FloatImm>(b);
    if (x == nullptr || y == nullptr) return nullptr;
    double p = x->value, q = y->value;
    bool f32 = a->type == DType::F32;
    auto num = [&](double v) {
      return ir::float_imm(f32 ? static_cast<double>(static_cast<float>(v)) : v, a->type);
    };
    if (is_comparison(op)) return ir::bool_imm(ir::compare(op, p, q));
    switch (op) {
      case BinaryOp::Add:
        return num(p + q);
      case BinaryOp::Sub:
        return num(p - q);
      case BinaryOp::Mul:
        return num(p * q);
      case BinaryOp::Div:
        return num(p / q);
      default:
        return nullptr;  // fmod, and min/max of signed zeros and NaNs, are left to run time
    }
  }

  static Expr logic(BinaryOp op, const Expr& a, const Expr& b, const Expr& same) {
    bool is_and = op == BinaryOp::And;
    // The absorbing constant decides the result; only drop a side without loads.
    for (const auto& [k, other] : {std::pair{a, b}, std::pair{b, a}}) {
      auto v = bool_value(k);
      if (!v) continue;
      if (*v == is_and) return other;                             // true and x, false or x
      if (count_loads(other) == 0) return ir::bool_imm(!is_and);  // false and x, true or x
    }
    if (ir::equal(a, b)) return a;
    return same;
  }

  Expr compare(BinaryOp op, const Expr& a, const Expr& b, const Expr& same) const {
    if (!ir::is_int(a->type) || count_loads(a) + count_loads(b) != 0) return same;
    Linear d = linearize(a, true);
    d.add_linear(linearize(b, true), -1);
    if (!d.ok) return same;
    Interval r = bounds_of(rebuild(d, a->type), known_);
    auto lt0 = [&] { return r.max && *r.max < 0; };
    auto ge0 = [&] { return r.min && *r.min >= 0; };
    auto le0 = [&] { return r.max && *r.max <= 0; };
    auto gt0 = [&] { return r.min && *r.min > 0; };
    switch (op) {
      case BinaryOp::Lt:
        if (lt0()) return ir::bool_imm(true);
        if (ge0()) return ir::bool_imm(false);
        break;
      case BinaryOp::Le:
        if (le0()) return ir::bool_imm(true);
        if (gt0()) return ir::bool_imm(false);
        break;
      case BinaryOp::Gt:
        if (gt0()) return ir::bool_imm(true);
        if (le0()) return ir::bool_imm(false);
        break;
      case BinaryOp::Ge:
        if (ge0()) return ir::bool_imm(true);
        if (lt0()) return ir::bool_imm(false);
        break;
      case BinaryOp::Eq:
      case BinaryOp::Ne: {
        bool eq = ge0() && le0();
        bool ne = lt0() || gt0();
        if (eq || ne) return ir::bool_imm((op == BinaryOp::Eq) == eq);
        break;
      }
      default:
        break;
    }
    return same;
  }

  // Rebuilds an integer sum in canonical form, unless that would drop a load.
  static Expr linear_form(const Expr& original, const Expr& e) {
    Linear l = linearize(e, false);
    if (!l.ok) return e;
    Expr r = rebuild(l, e->type);
    if (count_loads(r) != count_loads(e)) return e;
    return ir::equal(r, original) ? original : r;
  }

  // a = g * x + r with g > 1 dividing c and 0 <= r < g: then a / c = x / (c / g) and
  // a % c = g * (x % (c / g)) + r (floor semantics). The index of a fused loop split again
  // (f = 8 * nf + fi over 64 filters: f / 64 = nf / 8) is the common case.
  struct CommonFactor {
    int64_t g;
    Expr x;    // the terms divisible by g, divided by it
    Linear r;  // the rest, within [0, g)
  };
  std::optional<CommonFactor> common_factor(const Linear& a, int64_t c) const {
    if (!a.ok || a.terms.empty()) return std::nullopt;
    std::set<int64_t, std::greater<>> factors;  // the largest first
    for (const Term& term : a.terms)
      if (term.coeff != std::numeric_limits<int64_t>::min())
        factors.insert(std::gcd(c, term.coeff));
    for (int64_t g : factors) {
      if (g <= 1 || g >= c) continue;
      Linear x, r;
      r.constant = a.constant;
      for (const Term& term : a.terms) {
        if (term.coeff % g == 0)
          x.add_term(term.atom, term.coeff / g);
        else
          r.add_term(term.atom, term.coeff);
      }
      if (x.terms.empty()) continue;
      Interval range = bounds_of(rebuild(r, a.terms.front().atom->type), known_);
      if (range.min && range.max && *range.min >= 0 && *range.max < g)
        return CommonFactor{g, rebuild(x, a.terms.front().atom->type), r};
    }
    return std::nullopt;
  }

  // (c * q + r) / c = q + r / c and (c * q + r) % c = r % c; r / c and r % c
  // are decided when the range of r lies within one multiple of c.
  Expr div_mod(BinaryOp op, const Expr& a, const Expr& b, const Expr& same) const {
    auto c = int_value(b);
    if (!c || *c <= 0) return same;
    DType t = a->type;
    Linear l = linearize(a, true);
    if (!l.ok) return same;
    Linear q, r;
    bool factored = false;
    for (const Term& term : l.terms) {
      if (term.coeff == 0) continue;
      if (term.coeff % *c == 0) {
        q.add_term(term.atom, term.coeff / *c);
        factored = true;
      } else {
        r.add_term(term.atom, term.coeff);
      }
    }
    q.constant = ir::floor_div(l.constant, *c);
    r.constant = ir::floor_mod(l.constant, *c);
    if (!factored) {  // nothing to take out: only a decided range helps
      r = l;
      q = Linear{};
    }
    Expr rest = rebuild(r, t);
    Interval range = bounds_of(rest, known_);
    Expr result;
    if (range.min && range.max && ir::floor_div(*range.min, *c) == ir::floor_div(*range.max, *c)) {
      int64_t m = ir::floor_div(*range.min, *c);
      if (op == BinaryOp::Div) {
        q.constant += m;
        result = rebuild(q, t);
      } else {
        r.constant -= m * *c;
        result = rebuild(r, t);
      }
    } else if (std::optional<CommonFactor> f = common_factor(r, *c)) {
      if (op == BinaryOp::Div) {
        q.add_term(ir::binary(BinaryOp::Div, f->x, ir::int_imm(*c / f->g, t)), 1);
        result = rebuild(q, t);
      } else {
        Linear m = f->r;
        m.add_term(ir::binary(BinaryOp::Mod, f->x, ir::int_imm(*c / f->g, t)), f->g);
        result = rebuild(m, t);
      }
    } else if (!factored) {
      return same;
    } else if (op == BinaryOp::Div) {
      q.add_term(ir::binary(BinaryOp::Div, rest, b), 1);
      result = rebuild(q, t);
    } else {
      result = ir::binary(BinaryOp::Mod, rest, b);
    }
    if (count_loads(result) != count_loads(same)) return same;
    return ir::equal(result, same) ? same : result;
  }

  Expr min_max(BinaryOp op, const Expr& a, const Expr& b, const Expr& same) const {
    if (ir::equal(a, b)) return a;
    if (count_loads(a) + count_loads(b) != 0) return same;
    Linear d = linearize(a, true);
    d.add_linear(linearize(b, true), -1);
    if (!d.ok) return same;
    Interval r = bounds_of(rebuild(d, a->type), known_);  // the range of a - b
    bool a_le_b = r.max && *r.max <= 0;
    bool a_ge_b = r.min && *r.min >= 0;
    if (op == BinaryOp::Min) {
      if (a_le_b) return a;
      if (a_ge_b) return b;
    } else {
      if (a_ge_b) return a;
      if (a_le_b) return b;
    }
    return same;
  }

  const Bounds& known_;
};

// ---------------------------------------------------------------------------
// The statement simplifier: carries the ranges of the enclosing loops

bool is_empty(const Stmt& s) {
  if (!s) return true;
  const auto* b = ir::as<ir::Block>(s);
  return b != nullptr && b->stmts.empty();
}

class StmtSimplifier {
 public:
  Stmt run(const Stmt& s) {
    if (!s) return s;
    switch (s->kind) {
      case ir::StmtKind::For:
        return simplify_for(s, static_cast<const ir::For&>(*s));
      case ir::StmtKind::If:
        return simplify_if(s, static_cast<const ir::IfThenElse&>(*s));
      case ir::StmtKind::LetStmt:
        return simplify_let(s, static_cast<const ir::LetStmt&>(*s));
      case ir::StmtKind::Store:
        return simplify_store(s, static_cast<const ir::Store&>(*s));
      case ir::StmtKind::Alloc:
        return simplify_alloc(s, static_cast<const ir::Alloc&>(*s));
      case ir::StmtKind::Block:
        return simplify_block(s, static_cast<const ir::Block&>(*s));
      case ir::StmtKind::Evaluate: {
        const auto& n = static_cast<const ir::Evaluate&>(*s);
        Expr v = expr(n.value);
        return v == n.value ? s : std::make_shared<ir::Evaluate>(v);
      }
    }
    return s;
  }

 private:
  Expr expr(const Expr& e) { return e ? simplify(e, known_) : e; }

  std::vector<Expr> exprs(const std::vector<Expr>& es, bool* changed) {
    std::vector<Expr> out;
    out.reserve(es.size());
    for (const Expr& e : es) {
      out.push_back(expr(e));
      if (out.back() != e) *changed = true;
    }
    return out;
  }

  // Runs body with `var` known to lie in `range`, restoring what was known before.
  Stmt with_range(const std::string& var, const Interval& range, const Stmt& body) {
    auto it = known_.find(var);
    std::optional<Interval> saved;
    if (it != known_.end()) saved = it->second;
    known_[var] = range;
    Stmt out = run(body);
    if (saved) {
      known_[var] = *saved;
    } else {
      known_.erase(var);
    }
    return out;
  }

  Stmt simplify_for(const Stmt& s, const ir::For& n) {
    Expr lo = expr(n.min);
    Expr hi = expr(n.end);
    Linear extent = linearize(hi, true);
    extent.add_linear(linearize(lo, true), -1);
    // A bound read from a buffer still executes: such loops keep their bounds.
    bool bounds_load = count_loads(lo) + count_loads(hi) != 0;
    if (extent.ok && extent.is_constant() && n.step > 0 && !bounds_load) {
      if (extent.constant <= 0) return ir::block({});
      if (extent.constant <= n.step && !ir::is_gpu_tag(n.tag)) {
        return run(std::make_shared<ir::LetStmt>(n.var, lo, n.body));
      }
    }
    Interval range{bounds_of(lo, known_).min, add(bounds_of(hi, known_).max, -1)};
    Stmt body = with_range(n.var, range, n.body);
    if (is_empty(body)) return ir::block({});
    if (lo == n.min && hi == n.end && body == n.body) return s;
    return std::make_shared<ir::For>(n.var, lo, hi, n.step, n.tag, body);
  }

  Stmt simplify_if(const Stmt& s, const ir::IfThenElse& n) {
    Expr c = expr(n.cond);
    if (auto v = bool_value(c)) {
      const Stmt& taken = *v ? n.then_case : n.else_case;
      return taken ? run(taken) : ir::block({});
    }
    Stmt t = run(n.then_case);
    Stmt e = n.else_case ? run(n.else_case) : nullptr;
    if (e && is_empty(e)) e = nullptr;
    if (is_empty(t) && !e && count_loads(c) == 0) return ir::block({});
    if (c == n.cond && t == n.then_case && e == n.else_case) return s;
    return std::make_shared<ir::IfThenElse>(c, t, e);
  }

  Stmt simplify_let(const Stmt& s, const ir::LetStmt& n) {
    Expr v = expr(n.value);
    if (int_value(v) || bool_value(v) || ir::as<ir::FloatImm>(v) != nullptr ||
        ir::as<ir::Var>(v) != nullptr) {
      bool safe = true;
      if (const auto* x = ir::as<ir::Var>(v)) safe = !rebinds(n.body, x->name);
      if (safe) return run(ir::substitute(n.body, {{n.var, v}}));
    }
    Stmt body = ir::is_int(v->type) ? with_range(n.var, bounds_of(v, known_), n.body)
                                    : with_range(n.var, Interval{}, n.body);
    if (!mentions(body, n.var) && count_loads(v) == 0) return body;
    if (v == n.value && body == n.body) return s;
    return std::make_shared<ir::LetStmt>(n.var, v, body);
  }

  // Whether any scope inside s binds `name` (substituting it there would capture).
  static bool rebinds(const Stmt& s, const std::string& name) {
    class Finder : public ir::StmtVisitor {
     public:
      std::string name;
      bool found = false;

     protected:
      void visit_let(const ir::Let& n) override {
        found = found || n.var == name;
        ir::StmtVisitor::visit_let(n);
      }
      void visit_for(const ir::For& n) override {
        found = found || n.var == name;
        ir::StmtVisitor::visit_for(n);
      }
      void visit_let_stmt(const ir::LetStmt& n) override {
        found = found || n.var == name;
        ir::StmtVisitor::visit_let_stmt(n);
      }
    } f;
    f.name = name;
    f.visit(s);
    return f.found;
  }

  Stmt simplify_store(const Stmt& s, const ir::Store& n) {
    bool changed = false;
    std::vector<Expr> idx = exprs(n.indices, &changed);
    Expr v = expr(n.value);
    if (!changed && v == n.value) return s;
    return std::make_shared<ir::Store>(n.buf, std::move(idx), v, n.comp, n.instance, n.atomic);
  }

  Stmt simplify_alloc(const Stmt& s, const ir::Alloc& n) {
    bool changed = false;
    std::vector<Expr> shape = exprs(n.shape, &changed);
    Stmt body = run(n.body);
    if (is_empty(body)) return ir::block({});
    if (!changed && body == n.body) return s;
    return std::make_shared<ir::Alloc>(n.buf, n.dtype, std::move(shape), n.loc, body);
  }

  Stmt simplify_block(const Stmt& s, const ir::Block& n) {
    std::vector<Stmt> out;
    bool changed = false;
    for (const Stmt& x : n.stmts) {
      Stmt y = run(x);
      if (y != x) changed = true;
      if (!is_empty(y)) out.push_back(y);
    }
    if (!changed) return s;
    return ir::block(std::move(out));
  }

  Bounds known_;
};

}  // namespace

ir::Expr simplify(const ir::Expr& e, const Bounds& known) {
  return ExprSimplifier(known).mutate(e);
}

ir::Stmt simplify(const ir::Stmt& s) {
  Stmt out = StmtSimplifier().run(s);
  return out ? out : ir::block({});
}

}  // namespace kiln::passes
