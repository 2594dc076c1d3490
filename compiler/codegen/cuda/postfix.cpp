// Launch expressions in postfix (kiln/cuda.h): how an artifact's grid and temporary sizes travel
// to whoever launches its kernels.
#include <fmt/format.h>

#include <charconv>
#include <map>

#include "kiln/cuda.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

void emit(const ir::Expr& e, std::vector<std::string>& out) {
  switch (e->kind) {
    case ir::ExprKind::IntImm:
      out.push_back(std::to_string(static_cast<const ir::IntImm&>(*e).value));
      return;
    case ir::ExprKind::Var:
      out.push_back(static_cast<const ir::Var&>(*e).name);
      return;
    case ir::ExprKind::Cast:
      if (ir::is_int(e->type)) return emit(static_cast<const ir::Cast&>(*e).value, out);
      break;
    case ir::ExprKind::Unary: {
      const auto& u = static_cast<const ir::Unary&>(*e);
      if (u.op != ir::UnaryOp::Neg) break;
      emit(u.a, out);
      out.push_back("neg");
      return;
    }
    case ir::ExprKind::Binary: {
      const auto& b = static_cast<const ir::Binary&>(*e);
      const char* op = nullptr;
      switch (b.op) {
        case ir::BinaryOp::Add:
          op = "+";
          break;
        case ir::BinaryOp::Sub:
          op = "-";
          break;
        case ir::BinaryOp::Mul:
          op = "*";
          break;
        case ir::BinaryOp::Div:
          op = "/";
          break;
        case ir::BinaryOp::Mod:
          op = "%";
          break;
        case ir::BinaryOp::Min:
          op = "min";
          break;
        case ir::BinaryOp::Max:
          op = "max";
          break;
        default:
          break;
      }
      if (!op || !ir::is_int(b.a->type)) break;
      emit(b.a, out);
      emit(b.b, out);
      out.push_back(op);
      return;
    }
    default:
      break;
  }
  throw CompileError(ErrorStage::Codegen, SourceLoc{},
                     "launch expression " + ir::to_string(e) +
                         " uses an operation a launch cannot evaluate (only integer +, -, *, /, "
                         "%, min and max of the run-time params)");
}

}  // namespace

std::vector<std::string> postfix(const ir::Expr& e) {
  std::vector<std::string> out;
  emit(e, out);
  return out;
}

std::optional<ir::Expr> expr_of_postfix(const std::vector<std::string>& tokens) {
  static const std::map<std::string, ir::BinaryOp> ops = {
      {"+", ir::BinaryOp::Add},  {"-", ir::BinaryOp::Sub}, {"*", ir::BinaryOp::Mul},
      {"/", ir::BinaryOp::Div},  {"%", ir::BinaryOp::Mod}, {"min", ir::BinaryOp::Min},
      {"max", ir::BinaryOp::Max}};
  std::vector<ir::Expr> stack;
  for (const std::string& t : tokens) {
    if (t.empty()) return std::nullopt;
    if (t == "neg") {
      if (stack.empty()) return std::nullopt;
      stack.back() = ir::unary(ir::UnaryOp::Neg, stack.back());
      continue;
    }
    if (auto op = ops.find(t); op != ops.end()) {
      if (stack.size() < 2) return std::nullopt;
      ir::Expr b = stack.back();
      stack.pop_back();
      stack.back() = ir::binary(op->second, stack.back(), b);
      continue;
    }
    if (t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
      stack.push_back(ir::int_imm(v));
      continue;
    }
    stack.push_back(ir::var(t));
  }
  if (stack.size() != 1) return std::nullopt;
  return stack.back();
}

std::optional<int64_t> eval_postfix(const std::vector<std::string>& tokens,
                                    const std::map<std::string, int64_t>& params) {
  std::vector<int64_t> stack;
  for (const std::string& t : tokens) {
    if (t.empty()) return std::nullopt;
    if (t == "neg") {
      if (stack.empty() || stack.back() == INT64_MIN) return std::nullopt;
      stack.back() = -stack.back();
      continue;
    }
    bool op = t == "+" || t == "-" || t == "*" || t == "/" || t == "%" || t == "min" || t == "max";
    if (op) {
      if (stack.size() < 2) return std::nullopt;
      int64_t b = stack.back();
      stack.pop_back();
      int64_t& a = stack.back();
      int64_t r = 0;
      if (t == "+") {
        if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
      } else if (t == "-") {
        if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
      } else if (t == "*") {
        if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
      } else if (t == "/" || t == "%") {
        if (b == 0 || (a == INT64_MIN && b == -1)) return std::nullopt;
        r = t == "/" ? ir::floor_div(a, b) : ir::floor_mod(a, b);
      } else {
        r = t == "min" ? std::min(a, b) : std::max(a, b);
      }
      a = r;
      continue;
    }
    if (t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
      stack.push_back(v);
      continue;
    }
    auto it = params.find(t);
    if (it == params.end()) return std::nullopt;
    stack.push_back(it->second);
  }
  if (stack.size() != 1) return std::nullopt;
  return stack.back();
}

}  // namespace kiln::cuda
