// A model's tasks (kiln/tasks.h).
#include "kiln/tasks.h"

#include <map>
#include <optional>

#include "kiln/graph.h"
#include "kiln/job.h"
#include "kiln/run.h"

namespace kiln::tuner {

std::vector<ModelTask> model_tasks(const ir::Graph& g, const CompileOptions& options) {
  ir::Graph optimized = graph::optimize(g, options);
  std::vector<ModelTask> tasks;
  std::map<std::string, size_t> index;  // workload hash -> task
  for (const ir::GraphCall& c : optimized.calls) {
    records::Workload w = workload_of(c.op, {});
    auto [it, fresh] = index.emplace(w.hash, tasks.size());
    if (!fresh) {
      ++tasks[it->second].calls;
      continue;
    }
    ModelTask t;
    t.workload = std::move(w);
    t.op = c.op;
    t.calls = 1;
    t.first_result = c.results.empty() ? std::string() : c.results.front();
    // A tunable operator's flops and space as its task in a tuning job has them; an operator
    // without knobs (one point, not sketched) or with an empty space, its flops alone.
    std::optional<Task> prepared;
    if (!c.op.knobs.empty()) {
      try {
        prepared = prepare_model_task(c.op, Limits{});
      } catch (const TaskError&) {  // its knobs' space is empty: nothing to tune
      }
    }
    if (prepared) {
      t.points = prepared->space->size();
      t.flops = prepared->flops;
    } else {
      t.flops = std::max<int64_t>(0, algorithm_flops(c.op, {}));  // nothing to tune
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

void time_tasks(std::vector<ModelTask>& tasks, const CompileOptions& options, int repeat) {
  for (ModelTask& t : tasks) {
    RunSpec spec;
    spec.options = options;
    spec.bench = true;
    spec.repeat = repeat;
    RunOutcome r = run_kernel(t.op, spec);
    if (r.bench) t.ms = r.bench->median_s * 1e3;
  }
}

std::vector<double> task_shares(const std::vector<ModelTask>& tasks) {
  bool timed = !tasks.empty();
  for (const ModelTask& t : tasks) timed = timed && t.ms > 0;
  std::vector<double> weight;
  double total = 0;
  for (const ModelTask& t : tasks) {
    weight.push_back(t.calls * (timed ? t.ms : static_cast<double>(t.flops)));
    total += weight.back();
  }
  for (double& w : weight) w = total > 0 ? w / total : 0;
  return weight;
}

}  // namespace kiln::tuner
