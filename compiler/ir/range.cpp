// Integer sums as linear forms, and the ranges of integer expressions by
// interval arithmetic (kiln/range.h).
#include "kiln/range.h"

#include <algorithm>

#include "kiln/loop_ir.h"

namespace kiln::ir {
namespace {

// Checked integer arithmetic on optional values (absent = unknown or overflowed).
using Opt = std::optional<int64_t>;

Opt add(Opt a, Opt b) {
  int64_t r = 0;
  if (!a || !b || __builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
Opt mul(Opt a, int64_t c) {
  int64_t r = 0;
  if (!a || __builtin_mul_overflow(*a, c, &r)) return std::nullopt;
  return r;
}

Interval scale(const Interval& i, int64_t c) {
  if (c >= 0) return {mul(i.min, c), mul(i.max, c)};
  return {mul(i.max, c), mul(i.min, c)};
}
Interval plus(const Interval& a, const Interval& b) {
  return {add(a.min, b.min), add(a.max, b.max)};
}
Opt opt_min(Opt a, Opt b) { return a && b ? Opt(std::min(*a, *b)) : std::nullopt; }
Opt opt_max(Opt a, Opt b) { return a && b ? Opt(std::max(*a, *b)) : std::nullopt; }
Interval hull(const Interval& a, const Interval& b) {
  return {opt_min(a.min, b.min), opt_max(a.max, b.max)};
}

}  // namespace

LinearForm linearize(const Expr& e, bool distribute) {
  LinearForm l;
  if (auto v = int_value(e)) {
    l.constant = *v;
    return l;
  }
  if (const auto* b = ir::as<ir::Binary>(e); b != nullptr && ir::is_int(e->type)) {
    if (b->op == BinaryOp::Add || b->op == BinaryOp::Sub) {
      l = linearize(b->a, distribute);
      l.add_linear(linearize(b->b, distribute), b->op == BinaryOp::Add ? 1 : -1);
      return l;
    }
    if (b->op == BinaryOp::Mul) {
      LinearForm la = linearize(b->a, distribute);
      LinearForm lb = linearize(b->b, distribute);
      if (la.is_constant() || lb.is_constant()) {
        const LinearForm& k = la.is_constant() ? la : lb;
        const LinearForm& x = la.is_constant() ? lb : la;
        if (distribute || x.is_constant() || x.is_monomial() || k.constant == 0) {
          l.add_linear(x, k.constant);
          l.ok = l.ok && la.ok && lb.ok;
          return l;
        }
        if (x.ok) {
          l.add_term(
              ir::binary(BinaryOp::Mul, ir::int_imm(k.constant, e->type), linear_expr(x, e->type)),
              1);
          return l;
        }
      }
    }
  }
  if (const auto* u = ir::as<ir::Unary>(e);
      u != nullptr && u->op == UnaryOp::Neg && ir::is_int(e->type)) {
    l.add_linear(linearize(u->a, distribute), -1);
    return l;
  }
  l.add_term(e, 1);
  return l;
}

namespace {

Expr term_expr(const LinearTerm& t, DType type) {
  int64_t c = t.coeff < 0 ? -t.coeff : t.coeff;
  return c == 1 ? t.atom : ir::binary(BinaryOp::Mul, ir::int_imm(c, type), t.atom);
}

}  // namespace

Expr linear_expr(const LinearForm& l, DType type) {
  std::vector<LinearTerm> order;
  for (const LinearTerm& t : l.terms) {
    if (t.coeff > 0) order.push_back(t);
  }
  for (const LinearTerm& t : l.terms) {
    if (t.coeff < 0) order.push_back(t);
  }
  Expr acc;
  for (const LinearTerm& t : order) {
    if (!acc) {
      acc = t.coeff > 0     ? term_expr(t, type)
            : t.coeff == -1 ? ir::unary(UnaryOp::Neg, t.atom)
                            : ir::binary(BinaryOp::Mul, ir::int_imm(t.coeff, type), t.atom);
    } else {
      acc = ir::binary(t.coeff > 0 ? BinaryOp::Add : BinaryOp::Sub, acc, term_expr(t, type));
    }
  }
  if (!acc) return ir::int_imm(l.constant, type);
  if (l.constant > 0) return ir::binary(BinaryOp::Add, acc, ir::int_imm(l.constant, type));
  if (l.constant < 0 && l.constant != INT64_MIN) {
    return ir::binary(BinaryOp::Sub, acc, ir::int_imm(-l.constant, type));
  }
  if (l.constant < 0) return ir::binary(BinaryOp::Add, acc, ir::int_imm(l.constant, type));
  return acc;
}

// ---------------------------------------------------------------------------
// Ranges of integer expressions, by interval arithmetic

namespace {

Interval bounds_of(const Expr& e, const Bounds& known);

Interval atom_bounds(const Expr& e, const Bounds& known) {
  if (auto v = int_value(e)) return {*v, *v};
  switch (e->kind) {
    case ExprKind::Var: {
      auto it = known.find(ir::as<ir::Var>(e)->name);
      return it == known.end() ? Interval{} : it->second;
    }
    case ExprKind::Cast: {
      const auto& c = static_cast<const ir::Cast&>(*e);
      if (c.type == DType::I64 && ir::is_int(c.value->type)) return bounds_of(c.value, known);
      return {};
    }
    case ExprKind::Select: {
      const auto& s = static_cast<const ir::Select&>(*e);
      return hull(bounds_of(s.t, known), bounds_of(s.f, known));
    }
    case ExprKind::Binary: {
      const auto& b = static_cast<const ir::Binary&>(*e);
      if (!ir::is_int(e->type)) return {};
      if (b.op == BinaryOp::Min || b.op == BinaryOp::Max) {
        Interval x = bounds_of(b.a, known), y = bounds_of(b.b, known);
        if (b.op == BinaryOp::Min) {
          return {opt_min(x.min, y.min), x.max && y.max ? opt_min(x.max, y.max)
                                         : x.max        ? x.max
                                                        : y.max};
        }
        return {x.min && y.min ? opt_max(x.min, y.min)
                : x.min        ? x.min
                               : y.min,
                opt_max(x.max, y.max)};
      }
      auto c = int_value(b.b);
      if (!c || *c <= 0) return {};
      Interval x = bounds_of(b.a, known);
      if (b.op == BinaryOp::Div) {
        return {x.min ? Opt(ir::floor_div(*x.min, *c)) : std::nullopt,
                x.max ? Opt(ir::floor_div(*x.max, *c)) : std::nullopt};
      }
      if (b.op == BinaryOp::Mod) {
        if (x.min && x.max && ir::floor_div(*x.min, *c) == ir::floor_div(*x.max, *c)) {
          return {ir::floor_mod(*x.min, *c), ir::floor_mod(*x.max, *c)};
        }
        return {0, *c - 1};
      }
      return {};
    }
    case ExprKind::Call:  // a GPU block's threads (kiln/loop_ir.h)
      if (std::optional<int64_t> n = gpu_block_threads_at_least(e))
        return {std::max<int64_t>(*n, 1), std::max(*n, kMaxBlockThreads)};
      return {};
    default:
      return {};
  }
}

}  // namespace

std::optional<int64_t> int_value(const Expr& e) {
  const auto* n = ir::as<ir::IntImm>(e);
  if (n == nullptr || !ir::is_int(n->type)) return std::nullopt;
  return n->value;
}

Interval range_of(const Expr& e, const Bounds& known) { return bounds_of(e, known); }

namespace {

Interval bounds_of(const Expr& e, const Bounds& known) {
  if (!ir::is_int(e->type)) return {};
  LinearForm l = linearize(e, true);
  if (!l.ok) return {};
  if (l.terms.size() == 1 && l.terms[0].coeff == 1 && l.constant == 0) {
    return atom_bounds(l.terms[0].atom, known);
  }
  Interval r{l.constant, l.constant};
  for (const LinearTerm& t : l.terms) r = plus(r, scale(bounds_of(t.atom, known), t.coeff));
  return r;
}

}  // namespace
}  // namespace kiln::ir
