// The expression simplifier (kiln/simplify.h): constant folding, algebraic identities, integer
// sums in canonical form, and the division and modulo rewrites that known ranges allow.
#include "kiln/simplify.h"

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "kiln/analysis.h"
#include "kiln/loop_ir.h"

namespace kiln::ir {

namespace {

// ---------------------------------------------------------------------------
// Small queries

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

// ---------------------------------------------------------------------------
// Integer sums and ranges (kiln/range.h)

using Term = ir::LinearTerm;
using Linear = ir::LinearForm;

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
    if (!ir::names_in(body).count(n.var) && count_loads(v) == 0) return body;
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

}  // namespace

Expr simplify(const Expr& e, const Bounds& known) { return ExprSimplifier(known).mutate(e); }

}  // namespace kiln::ir
