// A model's tasks (kiln/tasks.h): the distinct operators of a graph after its passes, each with
// its calls, flops, space and share.
#include "kiln/tasks.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "kiln/frontend.h"

namespace kiln::tuner {
namespace {

// Two calls of `scale` at one shape, one at another, and a `shift` (no knobs) between them.
const char* kGraph = R"(func scale {
  param N = 64;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 3.0;
  schedule {
    knob V = 8 in [4, 8, 16];
    c.split(i, V, io, ii);
    c.tag(ii, vectorize);
  }
}

func shift {
  param N = 64;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] + 1.0;
}

graph g {
  input a : f32[64];
  input b : f32[128];
  p = scale(a, N = 64);
  q = shift(p, N = 64);
  r = scale(q, N = 64);
  s = scale(b, N = 128);
  output r;
  output s;
}
)";

TEST(ModelTasks, AreTheDistinctOperatorsWithTheirCallsCostsAndSpaces) {
  ir::Module m = frontend::parse_module(kGraph, "g.kiln");
  CompileOptions options;
  options.opt_level = 0;  // no fusion: the calls as written
  std::vector<ModelTask> tasks = model_tasks(m.graphs.at(0), options);
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].op.name, "scale");
  EXPECT_EQ(tasks[0].calls, 2);
  EXPECT_EQ(tasks[0].first_result, "p");
  EXPECT_EQ(tasks[0].flops, 64);
  EXPECT_EQ(tasks[0].points, 3u);
  EXPECT_EQ(tasks[1].op.name, "shift");
  EXPECT_EQ(tasks[1].points, 0u);  // nothing to tune
  EXPECT_EQ(tasks[2].calls, 1);
  EXPECT_EQ(tasks[2].flops, 128);
  EXPECT_NE(tasks[0].workload.hash, tasks[2].workload.hash);  // another shape

  // Shares by flops: 2 x 64, 64, 128 of 320.
  std::vector<double> shares = task_shares(tasks);
  EXPECT_DOUBLE_EQ(shares[0], 128.0 / 320);
  EXPECT_DOUBLE_EQ(shares[1], 64.0 / 320);
  EXPECT_DOUBLE_EQ(std::accumulate(shares.begin(), shares.end(), 0.0), 1.0);

  // Timed here: every task has a time, and the shares are of calls x time.
  time_tasks(tasks, options, 1);
  double total = 0;
  for (const ModelTask& t : tasks) {
    EXPECT_GT(t.ms, 0) << t.op.name;
    total += t.calls * t.ms;
  }
  shares = task_shares(tasks);
  EXPECT_DOUBLE_EQ(shares[0], 2 * tasks[0].ms / total);
}

}  // namespace
}  // namespace kiln::tuner
