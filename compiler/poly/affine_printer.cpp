// AffinePrinter: IR integer expressions and conditions as isl text.
#include "affine_printer.h"

#include <algorithm>

namespace kiln::poly {

namespace {

std::string num(int64_t v) { return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v); }

}  // namespace

std::optional<std::string> AffinePrinter::expr(const ir::Expr& e) {
  if (auto c = const_value(e, m_.constants)) return num(*c);
  if (auto* v = ir::as<ir::Var>(e)) {
    if (iters_.count(v->name)) return isl_name(v->name);
    if (std::find(m_.runtime_params.begin(), m_.runtime_params.end(), v->name) !=
        m_.runtime_params.end())
      return isl_name(v->name);
    return std::nullopt;
  }
  if (auto* c = ir::as<ir::Cast>(e)) {
    if (!ir::is_int(c->type) || !ir::is_int(c->value->type)) return std::nullopt;
    return expr(c->value);
  }
  if (auto* u = ir::as<ir::Unary>(e)) {
    if (u->op != ir::UnaryOp::Neg) return std::nullopt;
    auto a = expr(u->a);
    if (!a) return std::nullopt;
    return "(-" + *a + ")";
  }
  if (ir::as<ir::Load>(e)) {
    // Only an integer read can stand where a param could.
    if (!data_ || !ir::is_int(e->type)) return std::nullopt;
    ir::Expr value = ir::cast(ir::kIndexType, e);
    for (const auto& p : *data_)
      if (ir::equal(p.value, value)) return p.name;
    std::string name = "_" + owner_ + "_" + std::to_string(data_->size());
    data_->push_back({name, value});
    return name;
  }
  auto* b = ir::as<ir::Binary>(e);
  if (!b || !ir::is_int(b->type)) return std::nullopt;
  auto cb = const_value(b->b, m_.constants);
  auto ca = const_value(b->a, m_.constants);
  switch (b->op) {
    case ir::BinaryOp::Add:
    case ir::BinaryOp::Sub: {
      auto x = expr(b->a), y = expr(b->b);
      if (!x || !y) return std::nullopt;
      return "(" + *x + (b->op == ir::BinaryOp::Add ? " + " : " - ") + *y + ")";
    }
    case ir::BinaryOp::Mul: {
      if (cb) {
        auto x = expr(b->a);
        if (!x) return std::nullopt;
        return "(" + std::to_string(*cb) + " * " + *x + ")";
      }
      if (ca) {
        auto y = expr(b->b);
        if (!y) return std::nullopt;
        return "(" + std::to_string(*ca) + " * " + *y + ")";
      }
      return std::nullopt;
    }
    case ir::BinaryOp::Div:
    case ir::BinaryOp::Mod: {
      if (!cb || *cb <= 0) return std::nullopt;
      auto x = expr(b->a);
      if (!x) return std::nullopt;
      if (b->op == ir::BinaryOp::Div) return "floor(" + *x + " / " + std::to_string(*cb) + ")";
      return "(" + *x + " mod " + std::to_string(*cb) + ")";
    }
    default:
      return std::nullopt;
  }
}

std::optional<std::string> AffinePrinter::cond(const ir::Expr& e) {
  if (auto* i = ir::as<ir::IntImm>(e)) return i->value ? "1 = 1" : "1 = 0";
  if (auto* u = ir::as<ir::Unary>(e)) {
    if (u->op != ir::UnaryOp::Not) return std::nullopt;
    auto a = cond(u->a);
    if (!a) return std::nullopt;
    return "not (" + *a + ")";
  }
  auto* b = ir::as<ir::Binary>(e);
  if (!b) return std::nullopt;
  if (b->op == ir::BinaryOp::And || b->op == ir::BinaryOp::Or) {
    auto x = cond(b->a), y = cond(b->b);
    if (!x || !y) return std::nullopt;
    return "((" + *x + (b->op == ir::BinaryOp::And ? ") and (" : ") or (") + *y + "))";
  }
  if (!ir::is_comparison(b->op)) return std::nullopt;
  auto x = expr(b->a), y = expr(b->b);
  if (!x || !y) return std::nullopt;
  switch (b->op) {
    case ir::BinaryOp::Lt:
      return *x + " < " + *y;
    case ir::BinaryOp::Le:
      return *x + " <= " + *y;
    case ir::BinaryOp::Gt:
      return *x + " > " + *y;
    case ir::BinaryOp::Ge:
      return *x + " >= " + *y;
    case ir::BinaryOp::Eq:
      return *x + " = " + *y;
    case ir::BinaryOp::Ne:
      return "(" + *x + " < " + *y + " or " + *x + " > " + *y + ")";
    default:
      return std::nullopt;
  }
}

}  // namespace kiln::poly
