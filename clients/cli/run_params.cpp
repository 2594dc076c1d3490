// Choosing and checking run-time param values against a func's constraints.
#include "run_params.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>

#include "kiln/error.h"

namespace kiln::cli {
namespace {

// Sizes tried for a run-time param left out, in order: not a multiple of the
// usual split factors first, so that remainder loops get exercised.
constexpr std::array<int64_t, 16> kTrySizes = {13, 16, 8,  12, 7,  5,   4,   3,
                                               2,  1,  24, 32, 64, 100, 128, 1024};
constexpr size_t kMaxTries = 4096;  // over all combinations of several params

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// An integer (or bool as 0/1) expression in params; nullopt when it uses
// anything else (a buffer, a float) or divides by zero.
std::optional<int64_t> eval(const ir::Expr& e, const std::map<std::string, int64_t>& params) {
  using ir::BinaryOp;
  if (const auto* n = ir::as<ir::IntImm>(e)) return n->value;
  if (const auto* n = ir::as<ir::Var>(e)) {
    auto it = params.find(n->name);
    if (it == params.end()) return std::nullopt;
    return it->second;
  }
  if (const auto* n = ir::as<ir::Cast>(e)) {
    if (ir::is_float(n->type)) return std::nullopt;
    std::optional<int64_t> v = eval(n->value, params);
    if (v && n->type == ir::DType::Bool) return *v != 0;
    return v;
  }
  if (const auto* n = ir::as<ir::Unary>(e)) {
    std::optional<int64_t> a = eval(n->a, params);
    if (!a) return std::nullopt;
    return n->op == ir::UnaryOp::Neg ? -*a : int64_t{*a == 0};
  }
  if (const auto* n = ir::as<ir::Select>(e)) {
    std::optional<int64_t> c = eval(n->cond, params);
    if (!c) return std::nullopt;
    return eval(*c != 0 ? n->t : n->f, params);
  }
  const auto* n = ir::as<ir::Binary>(e);
  if (n == nullptr) return std::nullopt;
  std::optional<int64_t> a = eval(n->a, params), b = eval(n->b, params);
  if (!a || !b) return std::nullopt;
  switch (n->op) {
    case BinaryOp::Add:
      return *a + *b;
    case BinaryOp::Sub:
      return *a - *b;
    case BinaryOp::Mul:
      return *a * *b;
    case BinaryOp::Div:
      if (*b == 0) return std::nullopt;
      return floor_div(*a, *b);
    case BinaryOp::Mod:
      if (*b == 0) return std::nullopt;
      return *a - floor_div(*a, *b) * *b;
    case BinaryOp::Min:
      return std::min(*a, *b);
    case BinaryOp::Max:
      return std::max(*a, *b);
    case BinaryOp::Lt:
      return *a < *b;
    case BinaryOp::Le:
      return *a <= *b;
    case BinaryOp::Gt:
      return *a > *b;
    case BinaryOp::Ge:
      return *a >= *b;
    case BinaryOp::Eq:
      return *a == *b;
    case BinaryOp::Ne:
      return *a != *b;
    case BinaryOp::And:
      return *a != 0 && *b != 0;
    case BinaryOp::Or:
      return *a != 0 || *b != 0;
  }
  return std::nullopt;
}

// The first constraint of f that is known to fail under `params`, or null.
const ir::Constraint* broken_constraint(const ir::Func& f,
                                        const std::map<std::string, int64_t>& params) {
  for (const ir::Constraint& c : f.constraints) {
    std::optional<int64_t> holds = eval(c.cond, params);
    if (holds && *holds == 0) return &c;
  }
  return nullptr;
}

}  // namespace

RunParams run_param_values(const ir::Func& f, const std::map<std::string, int64_t>& given) {
  RunParams out;
  std::map<std::string, int64_t> all;  // compile-time values too: constraints may mix them
  std::vector<const ir::Param*> missing;
  for (const ir::Param& p : f.params) {
    if (p.value) {
      all[p.name] = *p.value;
    } else if (auto it = given.find(p.name); it != given.end()) {
      all[p.name] = out.values[p.name] = it->second;
    } else {
      missing.push_back(&p);
    }
  }

  // Constraints on the given values alone (the others cannot be evaluated yet).
  if (const ir::Constraint* c = broken_constraint(f, all)) {
    std::vector<std::string> values;
    for (const auto& [name, value] : all) values.push_back(fmt::format("{}={}", name, value));
    throw CompileError("interp", c->where,
                       fmt::format("the constraint {} of {} does not hold for {}",
                                   ir::to_string(c->cond), f.name, fmt::join(values, ", ")));
  }
  if (missing.empty()) return out;

  // Try the sizes for every left-out param, like an odometer, first digit fastest.
  std::vector<size_t> digit(missing.size(), 0);
  for (size_t tries = 0; tries < kMaxTries; ++tries) {
    for (size_t k = 0; k < missing.size(); ++k) all[missing[k]->name] = kTrySizes[digit[k]];
    if (broken_constraint(f, all) == nullptr) {
      for (const ir::Param* p : missing) {
        out.values[p->name] = all[p->name];
        out.chosen.push_back(p->name);
      }
      return out;
    }
    size_t k = 0;
    while (k < digit.size() && ++digit[k] == kTrySizes.size()) digit[k++] = 0;
    if (k == digit.size()) break;
  }
  const ir::Param& p = *missing.front();
  throw CompileError("interp", p.where,
                     fmt::format("run-time param {} of {} needs a value: no size kiln tries "
                                 "satisfies the constraints; give one with --set {}=INT",
                                 p.name, f.name, p.name));
}

}  // namespace kiln::cli
