// Name look-up helpers for the checker: built-in names, iterator positions, near-miss suggestions.
#include "scope.h"

#include <algorithm>

namespace kiln::frontend {

namespace {

constexpr const char* kBuiltins[] = {
    "select", "min",  "max",   "sum",  "prod", "exp",  "log", "sqrt", "abs", "sin",
    "cos",    "tanh", "floor", "ceil", "pow",  "bool", "i32", "i64",  "f32", "f64",
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const char* decl_kind_name(Decl::Kind k) {
  switch (k) {
    case Decl::Kind::Param:
      return "a param";
    case Decl::Kind::Buffer:
      return "a buffer";
    case Decl::Kind::Knob:
      return "a knob";
    case Decl::Kind::Comp:
      return "a computation";
  }
  return "?";
}

bool is_builtin_name(const std::string& n) {
  return std::any_of(std::begin(kBuiltins), std::end(kBuiltins),
                     [&](const char* b) { return n == b; });
}

std::optional<size_t> Scope::iter(const std::string& n) const {
  for (size_t k = 0; k < iters_.size(); ++k) {
    if (iters_[k].name == n) return k;
  }
  return std::nullopt;
}

std::string Scope::suggest(const std::string& n) const {
  if (n.size() < 2 || n.size() > 64) return "";  // a one-letter name is near everything
  std::string best;
  size_t best_d = n.size() <= 4 ? 1 : 2;
  auto consider = [&](const std::string& c) {
    if (c.size() > 64) return;
    size_t d = edit_distance(n, c);
    if (d > 0 && d <= best_d && (best.empty() || d < best_d || c < best)) {
      best = c;
      best_d = d;
    }
  };
  for (const auto& [c, d] : names_) consider(c);
  for (const auto& [c, d] : comps_) consider(c);
  for (const Ident& i : iters_) consider(i.name);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string Scope::unknown_hint(const std::string& n, Pos at) const {
  auto [b, e] = future_.equal_range(n);
  for (auto it = b; it != e; ++it) {
    if (it->second.offset > at.offset) {
      return " (it is declared later, at " + std::to_string(it->second.line) + ":" +
             std::to_string(it->second.col) + "; names must be declared before they are used)";
    }
  }
  return suggest(n);
}

}  // namespace kiln::frontend
