// A model's tasks (DESIGN.md section 7b): the distinct workloads its graph runs
// after the graph passes, each with how many of its calls run it, what one call
// costs and how much there is to tune. What `kiln tasks MODEL` lists, and what
// a model's tuning gives its trials to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/ir.h"
#include "kiln/records.h"

namespace kiln::tuner {

struct ModelTask {
  records::Workload workload;  // the operator with its params' values (kiln/job.h)
  ir::Func op;                 // as the graph calls it: params bound, knobs at their defaults
  int calls = 0;               // how many of the graph's calls run it
  int64_t flops = 0;           // one call's floating-point operations (0: not known)
  uint64_t points = 0;         // its knobs' space (0: nothing to tune)
  std::string
      first_result;  // the first call's result tensor, as `kiln emit --stage graph` names it
  double ms = 0;     // one call on this host, when time_tasks measured it (0: not)
};

// The tasks of g once graph::optimize (with `options`) has run, in the order their first
// calls come. Throws CompileError as optimize does.
std::vector<ModelTask> model_tasks(const ir::Graph& g, const CompileOptions& options);

// Times each task's kernel here: compiled with `options` (for this host), run on seeded
// inputs, `repeat` rounds; its median fills `ms`. Throws CompileError for a kernel that does
// not compile or run.
void time_tasks(std::vector<ModelTask>& tasks, const CompileOptions& options, int repeat);

// Each task's share of the model's work: calls x ms when every task was timed, else
// calls x flops. In tasks' order; they add to 1 (all 0 when nothing is known).
std::vector<double> task_shares(const std::vector<ModelTask>& tasks);

}  // namespace kiln::tuner
