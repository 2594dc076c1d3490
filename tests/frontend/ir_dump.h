// Typed S-expressions of IR expressions, so that tests see every type and cast.
#pragma once

#include <string>

#include "kiln/ir.h"

namespace kiln::testing {

// 3:i64, 0.5:f32, true, i, (i64 x), (neg:f32 a), (+:f32 a b), (and a b), (select:f32 c a b),
// (exp:f32 a), (access:f32 pad i j), (load:f32 A i k). Vars print bare (their
// type is checked separately).
inline std::string sexpr(const ir::Expr& e) {
  using namespace ir;
  if (!e) return "<null>";
  std::string t = dtype_name(e->type);
  auto list = [](const std::vector<Expr>& es) {
    std::string s;
    for (const Expr& x : es) s += " " + sexpr(x);
    return s;
  };
  switch (e->kind) {
    case ExprKind::IntImm: {
      const auto& n = static_cast<const IntImm&>(*e);
      if (n.type == DType::Bool) return n.value ? "true" : "false";
      return std::to_string(n.value) + ":" + t;
    }
    case ExprKind::FloatImm:
      return to_string(e) + ":" + t;
    case ExprKind::Var:
      return static_cast<const Var&>(*e).name;
    case ExprKind::Cast:
      return "(" + t + " " + sexpr(static_cast<const Cast&>(*e).value) + ")";
    case ExprKind::Unary: {
      const auto& n = static_cast<const Unary&>(*e);
      return n.op == UnaryOp::Not ? "(not " + sexpr(n.a) + ")"
                                  : "(neg:" + t + " " + sexpr(n.a) + ")";
    }
    case ExprKind::Binary: {
      const auto& n = static_cast<const Binary&>(*e);
      // and/or are always bool: no type shown.
      std::string op = n.op == BinaryOp::And  ? "and"
                       : n.op == BinaryOp::Or ? "or"
                                              : std::string(binary_op_symbol(n.op)) + ":" + t;
      return "(" + op + " " + sexpr(n.a) + " " + sexpr(n.b) + ")";
    }
    case ExprKind::Select: {
      const auto& n = static_cast<const Select&>(*e);
      return "(select:" + t + " " + sexpr(n.cond) + " " + sexpr(n.t) + " " + sexpr(n.f) + ")";
    }
    case ExprKind::Call: {
      const auto& n = static_cast<const Call&>(*e);
      return "(" + n.name + ":" + t + list(n.args) + ")";
    }
    case ExprKind::Access: {
      const auto& n = static_cast<const Access&>(*e);
      return "(access:" + t + " " + n.comp + list(n.indices) + ")";
    }
    case ExprKind::Load: {
      const auto& n = static_cast<const Load&>(*e);
      return "(load:" + t + " " + n.buf + list(n.indices) + ")";
    }
    case ExprKind::Let: {
      const auto& n = static_cast<const Let&>(*e);
      return "(let " + n.var + " " + sexpr(n.value) + " " + sexpr(n.body) + ")";
    }
  }
  return "?";
}

}  // namespace kiln::testing
