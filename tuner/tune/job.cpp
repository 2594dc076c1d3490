// A tuning job's task, prepared once (kiln/job.h).
#include "kiln/job.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiln/cost_model.h"
#include "kiln/digest.h"
#include "kiln/error.h"
#include "kiln/interp.h"
#include "kiln/run.h"
#include "kiln/tune.h"

namespace kiln::tuner {
namespace {

// `set` split into the func's knobs and everything else (its params).
std::pair<ir::Overrides, ir::Overrides> knobs_and_params(const ir::Func& f,
                                                         const ir::Overrides& set) {
  std::set<std::string> knob_names;
  for (const ir::Knob& k : f.knobs) knob_names.insert(k.name);
  ir::Overrides knobs, params;
  for (const auto& [name, value] : set) (knob_names.count(name) ? knobs : params)[name] = value;
  return {knobs, params};
}

// The workload of a func whose params' values are set: its canonical text and its hash.
records::Workload workload_of_shaped(const ir::Func& shaped) {
  records::Workload w;
  w.definition = ir::to_string(shaped);
  w.hash = workload_hash(shaped);
  w.name = shaped.name;
  return w;
}

}  // namespace

records::Workload workload_of(const ir::Func& base, const ir::Overrides& set) {
  return workload_of_shaped(ir::apply_overrides(base, knobs_and_params(base, set).second));
}

Task prepare_task(const ir::Func& base, const ir::Overrides& set,
                  const std::map<std::string, int64_t>& runtime, const Limits& limits) {
  if (base.knobs.empty())
    throw TaskError(
        fmt::format("{} has no knobs to tune: declare some in its schedule (knob NAME "
                    "in [V, ...] = DEFAULT; docs/language.md)",
                    base.name));
  auto [knobs, params] = knobs_and_params(base, set);
  ir::Func shaped = ir::apply_overrides(base, params);
  Task t;
  t.workload = workload_of_shaped(shaped);
  t.fixed = Config(knobs.begin(), knobs.end());
  auto func = std::make_shared<ir::Func>(ir::apply_overrides(shaped, knobs));
  std::set<std::string> fixed;
  for (const auto& [name, value] : t.fixed) fixed.insert(name);
  try {
    t.space = std::make_shared<const Space>(space_of(*func, fixed));
  } catch (const std::invalid_argument& e) {
    throw TaskError(fmt::format("{}: {}", base.name, e.what()));
  }
  if (t.space->size() == 0) throw TaskError("the knobs' space is empty");
  // Every param's value at run time, and a call's flops from the algorithm's loops at them.
  t.params = interp::param_values(*func, run_param_values(*func, runtime).values);
  t.flops = std::max<int64_t>(0, algorithm_flops(*func, t.params, limits));
  t.func = std::move(func);
  return t;
}

Task prepare_model_task(const ir::Func& op, const Limits& limits) {
  if (!op.knobs.empty()) return prepare_task(op, {}, {}, limits);
  Task t;
  t.workload = workload_of_shaped(op);
  t.space = std::make_shared<const Space>(std::vector<KnobDef>{});
  auto func = std::make_shared<ir::Func>(op);
  t.params = interp::param_values(*func, run_param_values(*func, {}).values);
  t.flops = std::max<int64_t>(0, algorithm_flops(*func, t.params, limits));
  t.func = std::move(func);
  return t;
}

FeatureFn iter_features_of(const Task& task, const CompileOptions& options) {
  std::shared_ptr<const ir::Func> func = task.func;
  std::map<std::string, int64_t> params = task.params;
  return [func, options, params](const Space&, const Config& point) {
    try {
      CompileResult r = kiln::compile(CompileRequest{
          .func = *func, .overrides = point, .options = options, .output = CompileOutput::Loops});
      return iter_features(r.optimized, params);
    } catch (const CompileError&) {
      return std::vector<float>(kIterFeatureLength, 0.0f);
    }
  };
}

void warm_start(records::RecordStore& store, const records::Workload& workload,
                const std::string& key, TuneSettings& settings) {
  records::Query q;
  q.name = workload.name;
  q.key = key;
  q.error = "";
  q.order = records::Query::Order::Fastest;  // the most telling ones, and not too many
  q.limit = 512;
  std::map<std::string, std::vector<records::Record>> by_workload;
  for (records::Record& r : store.query(q))
    if (r.workload != workload.hash && r.median_ms > 0)
      by_workload[r.workload].push_back(std::move(r));
  for (const auto& [hash, rs] : by_workload) {
    double best = rs.front().median_ms;
    for (const records::Record& r : rs) best = std::min(best, r.median_ms);
    for (const records::Record& r : rs) {
      settings.warm_points.push_back(r.config);
      settings.warm_cost.push_back(r.median_ms / best);
    }
  }
}

}  // namespace kiln::tuner
