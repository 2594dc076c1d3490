// A tuning job's task, prepared once (kiln/job.h).
#include "kiln/job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "kiln/autosched.h"
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
  records::Config shape;
  for (const ir::Param& p : shaped.params)
    if (p.value) shape[p.name] = *p.value;
  w.shape = records::config_text(shape);
  return w;
}

// `base` at the shape `set` gives its params: sketched there, since a command legal at one
// shape may not be at another (a fuse of loops whose bounds become run-time values).
ir::Func shaped_algorithm(const ir::Func& base, const ir::Overrides& set) {
  ir::Overrides params;
  for (const auto& [name, value] : set)
    if (base.find_param(name)) params[name] = value;
  return ir::apply_overrides(base, params);
}

TaskError no_sketch(const ir::Func& base, autosched::Machine machine = autosched::Machine::Cpu) {
  return TaskError(fmt::format(
      "{} has no schedule and kiln found no loop in it to sketch one from{}: declare knobs "
      "in a schedule (knob NAME in [V, ...] = DEFAULT; docs/language.md)",
      base.name,
      machine == autosched::Machine::Gpu
          ? " for a GPU (a GPU sketch spreads a loop outside every algorithm loop over "
            "threads: kernels inside an algorithm loop are not supported on GPUs yet)"
          : ""));
}

// The task of `shaped` (an algorithm at its shape) with sketch `s` as its schedule.
Task sketch_task(const ir::Func& shaped, const autosched::Sketch& s, const ir::Overrides& set,
                 const std::map<std::string, int64_t>& runtime, const Limits& limits) {
  Task t = prepare_task(autosched::apply(shaped, s, limits), set, runtime, limits);
  t.sketch = s.schedule;
  t.sketch_name = s.name;
  return t;
}

}  // namespace

records::Workload workload_of(const ir::Func& base, const ir::Overrides& set) {
  return workload_of_shaped(ir::apply_overrides(base, knobs_and_params(base, set).second));
}

std::vector<Task> prepare_sketch_tasks(const ir::Func& base, const ir::Overrides& set,
                                       const std::map<std::string, int64_t>& runtime,
                                       const Limits& limits, autosched::Machine machine) {
  if (base.has_schedule())
    throw TaskError(
        fmt::format("{} has a schedule of its own: kiln sketches a func without one", base.name));
  ir::Func shaped = shaped_algorithm(base, set);
  std::vector<Task> out;
  for (const autosched::Sketch& s : autosched::sketches(shaped, limits, machine))
    out.push_back(sketch_task(shaped, s, set, runtime, limits));
  if (out.empty()) throw no_sketch(base, machine);
  return out;
}

std::vector<TunedWorkload> tuned_workloads(const ir::Func& base, const ir::Overrides& set,
                                           const Limits& limits, autosched::Machine machine) {
  if (base.has_schedule()) return {{workload_of(base, set)}};
  ir::Func shaped = shaped_algorithm(base, set);
  std::vector<TunedWorkload> out;
  for (const autosched::Sketch& s : autosched::sketches(shaped, limits, machine))
    out.push_back({workload_of(autosched::apply(shaped, s, limits), set), s.schedule, s.name});
  return out;
}

Task prepare_task(const ir::Func& base, const ir::Overrides& set,
                  const std::map<std::string, int64_t>& runtime, const Limits& limits) {
  if (base.knobs.empty()) {
    if (!base.schedule.empty())
      throw TaskError(
          fmt::format("{} has no knobs to tune: declare some in its schedule (knob NAME "
                      "in [V, ...] = DEFAULT; docs/language.md), or leave the schedule out for "
                      "kiln to sketch one (docs/tuning.md)",
                      base.name));
    // The algorithm alone: tuned over the first sketch kiln derives from it.
    ir::Func shaped = shaped_algorithm(base, set);
    std::optional<autosched::Sketch> sketch = autosched::first_sketch(shaped, limits);
    if (!sketch) throw no_sketch(base);
    return sketch_task(shaped, *sketch, set, runtime, limits);
  }
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

std::optional<double> shape_distance(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return std::nullopt;
  Config x, y;
  try {
    x = records::parse_config(a);
    y = records::parse_config(b);
  } catch (const records::RecordsError&) {
    return std::nullopt;
  }
  if (x.size() != y.size()) return std::nullopt;
  double d = 0;
  for (auto i = x.begin(), j = y.begin(); i != x.end(); ++i, ++j) {
    if (i->first != j->first) return std::nullopt;
    // Sizes compare by ratio; a 0 or a negative value (a flag, an offset) counts as 1 when the
    // two differ.
    if (i->second == j->second) continue;
    d += i->second > 0 && j->second > 0
             ? std::abs(std::log2(static_cast<double>(i->second) / static_cast<double>(j->second)))
             : 1.0;
  }
  return d;
}

void first_start(records::RecordStore& store, const Task& task, const std::string& key,
                 const CompileOptions& options, TuneSettings& settings, int nearest) {
  struct Neighbour {
    double distance;
    records::Record best;
    std::string shape;
  };
  std::vector<Neighbour> near;
  for (const records::Workload& w : store.workloads(task.workload.name)) {
    std::optional<double> d = w.hash == task.workload.hash
                                  ? std::optional<double>(0.0)
                                  : shape_distance(task.workload.shape, w.shape);
    if (!d) continue;
    if (std::optional<records::Record> best = store.best(w.hash, key))
      near.push_back({*d, std::move(*best), w.shape});
  }
  std::stable_sort(near.begin(), near.end(),
                   [](const Neighbour& a, const Neighbour& b) { return a.distance < b.distance; });
  if (near.size() > static_cast<size_t>(std::max(0, nearest))) near.resize(nearest);
  // A point from a record or the defaults, kept when it is a point of this task's space that
  // keeps its constraints and was not taken before.
  settings.first_points.clear();
  settings.first_shapes.clear();
  std::set<uint64_t> taken;
  auto take = [&](const std::map<std::string, int64_t>& values, const std::string& shape) {
    Config c;
    for (const KnobDef& k : task.space->knobs())
      for (const std::string& name : k.names)
        if (auto it = values.find(name); it != values.end()) c[name] = it->second;
    try {
      if (!taken.insert(task.space->index_of(c)).second || task.space->broken_constraint(c)) return;
    } catch (const std::invalid_argument&) {
      return;  // a knob without a value, or a value this space does not offer
    }
    settings.first_points.push_back(std::move(c));
    settings.first_shapes.push_back(shape);
  };
  for (const Neighbour& n : near) take(n.best.config, n.shape);
  if (!task.func) return;  // a task made by hand, with no func to take defaults from
  try {
    take(default_knobs(*task.func, options), "");
  } catch (const CompileError&) {
    // defaults that break a knob constraint: the search finds the points
  }
}

}  // namespace kiln::tuner
