// `kiln tasks MODEL`: a model's tasks (kiln/tasks.h), a table or JSON lines.
#include "kiln/tasks.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "commands.h"
#include "kiln/json.h"
#include "kiln/runtime.h"
#include "report.h"
#include "selection.h"

namespace kiln::cli {

namespace {

std::string task_json(const std::string& file, const std::string& graph, size_t n,
                      const tuner::ModelTask& t, double share) {
  JsonObject o;
  o.str("file", file)
      .str("graph", graph)
      .integer("task", static_cast<int64_t>(n))
      .str("operator", t.op.name)
      .str("workload", t.workload.hash)
      .integer("calls", t.calls)
      .integer("flops", t.flops)
      .integer("points", static_cast<int64_t>(t.points))
      .str("first_result", t.first_result)
      .num("share", share, 4);
  if (t.ms > 0) o.num("ms", t.ms, 4);
  return o.done();
}

void print_table(const ir::Graph& g, const std::vector<tuner::ModelTask>& tasks,
                 const std::vector<double>& shares, bool timed) {
  size_t calls = 0, tunable = 0;
  double gflop = 0;
  for (const tuner::ModelTask& t : tasks) {
    calls += static_cast<size_t>(t.calls);
    tunable += t.points > 1 ? 1 : 0;
    gflop += static_cast<double>(t.calls) * static_cast<double>(t.flops) * 1e-9;
  }
  fmt::print("graph {}: {} after the graph passes, {} ({} tunable), {:.3g} GFLOP a run\n", g.name,
             count(calls, "call"), count(tasks.size(), "task"), tunable, gflop);
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"#", "CALLS", "OPERATOR", "GFLOP", timed ? "MS" : "", "SHARE", "POINTS",
                  "WORKLOAD", "FIRST CALL"});
  for (size_t k = 0; k < tasks.size(); ++k) {
    const tuner::ModelTask& t = tasks[k];
    rows.push_back({std::to_string(k + 1), std::to_string(t.calls), t.op.name,
                    fmt::format("{:.4f}", static_cast<double>(t.flops) * 1e-9),
                    timed ? fmt::format("{:.3f}", t.ms) : "",
                    fmt::format("{:.1f}%", 100 * shares[k]),
                    t.points > 1 ? std::to_string(t.points) : "-", t.workload.hash.substr(0, 12),
                    t.first_result});
  }
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      if (width[c] == 0) continue;
      bool number = c == 0 || c == 1 || c == 3 || c == 4 || c == 5 || c == 6;
      line += c + 1 == r.size() ? r[c]
              : number          ? fmt::format("{:>{}}  ", r[c], width[c])
                                : fmt::format("{:<{}}  ", r[c], width[c]);
    }
    fmt::print("{}\n", line);
  }
  fmt::print("SHARE: of the model's {} (one call's, times its calls); POINTS: its knobs' space\n",
             timed ? "kernel time on this machine" : "floating-point operations");
}

}  // namespace

int run_tasks(const Options& o) {
  if (o.threads) kiln_runtime_set_threads(*o.threads);
  CompileOptions options = compile_options(o);
  return for_each_func(
      o, [](const Prepared&, bool) { return true; }, print_error,
      [&](const GraphJob& j, bool) {
        std::vector<tuner::ModelTask> tasks = tuner::model_tasks(*j.graph, options);
        if (o.bench) tuner::time_tasks(tasks, options, o.repeat);
        std::vector<double> shares = tuner::task_shares(tasks);
        if (o.json) {
          for (size_t k = 0; k < tasks.size(); ++k)
            fmt::print("{}\n", task_json(j.file, j.graph->name, k + 1, tasks[k], shares[k]));
        } else {
          print_table(*j.graph, tasks, shares, o.bench);
        }
        return true;
      },
      true);
}

}  // namespace kiln::cli
