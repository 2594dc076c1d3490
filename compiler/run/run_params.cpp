// Choosing and checking run-time param values against a func's constraints.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>

#include "kiln/error.h"
#include "kiln/run.h"

namespace kiln {
namespace {

// Sizes tried for a run-time param left out, in order: not a multiple of the
// usual split factors first, so that remainder loops get exercised.
constexpr std::array<int64_t, 16> kTrySizes = {13, 16, 8,  12, 7,  5,   4,   3,
                                               2,  1,  24, 32, 64, 100, 128, 1024};
constexpr size_t kMaxTries = 4096;  // over all combinations of several params

// The first constraint of f that is known to fail under `params`, or null.
const ir::Constraint* broken_constraint(const ir::Func& f,
                                        const std::map<std::string, int64_t>& params) {
  for (const ir::Constraint& c : f.constraints) {
    std::optional<int64_t> holds = ir::eval_int(c.cond, params);
    if (holds && *holds == 0) return &c;
  }
  return nullptr;
}

}  // namespace

RunParams run_param_values(const ir::Func& f, const std::map<std::string, int64_t>& given) {
  for (const auto& [name, value] : given) {
    const ir::Param* p = f.find_param(name);
    if (p && !p->value) continue;
    if (p)
      throw CompileError(ErrorStage::Interp, p->where,
                         fmt::format("param {} of {} is fixed when it is compiled ({} = {}): give "
                                     "it as a compile-time value (options.set, --set), not as "
                                     "a run-time one",
                                     name, f.name, name, *p->value));
    std::vector<std::string> runtime;
    for (const ir::Param& q : f.params)
      if (!q.value) runtime.push_back(q.name);
    throw CompileError(
        ErrorStage::Interp, f.where,
        fmt::format("{} has no run-time param named {} (its run-time params: {})", f.name,
                    name.substr(0, 128),
                    runtime.empty() ? "none" : fmt::format("{}", fmt::join(runtime, ", "))));
  }
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
    throw CompileError(ErrorStage::Interp, c->where,
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
  throw CompileError(ErrorStage::Interp, p.where,
                     fmt::format("run-time param {} of {} needs a value: no size kiln tries "
                                 "satisfies the constraints; give one with --set {}=INT",
                                 p.name, f.name, p.name));
}

}  // namespace kiln
