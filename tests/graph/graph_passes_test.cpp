// The graph passes, each on a small graph with the exact graph it leaves,
// and the graph pipeline's levels and names.

#include "kiln/passes/graph_passes.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "kiln/error.h"
#include "kiln/frontend.h"
#include "kiln/interp.h"
#include "kiln/ir.h"
#include "kiln/passes.h"
#include "kiln/poly.h"

namespace kiln::passes {
namespace {

constexpr const char* kOps = R"(
func add {
  param N;
  input a : f32[N];
  input b : f32[N];
  output c : f32[N];
  compute s(i) in 0 <= i < N: c[i] = a[i] + b[i];
}
func scale {
  param N;
  input a : f32[N];
  output c : f32[N];
  compute s(i) in 0 <= i < N: c[i] = 2.0 * a[i];
  schedule { s.split(i, 2, io, ii); }
}
func scale_again {
  param N;
  input x : f32[N];
  output y : f32[N];
  compute s(i) in 0 <= i < N: y[i] = 2.0 * x[i];
}
func shift_left {
  param N;
  input a : f32[N];
  output c : f32[N];
  compute s(i) in 0 <= i < N: c[i] = select(i + 1 < N, a[min(i + 1, N - 1)], 0.0);
}
func iota {
  param N;
  output c : f32[N];
  compute s(i) in 0 <= i < N: c[i] = f32(i);
}
func matvec {
  param M, K;
  input A : f32[M, K];
  input x : f32[K];
  output y : f32[M];
  compute y(i) in 0 <= i < M: y[i] = sum(k in 0 <= k < K) A[i, k] * x[k];
  schedule {
    y_init.split(i, 4, io, ii);
    y.split(i, 4, io, ii);
    y.after(y_init, ii);
    y.tag(io, parallel);
  }
}
func relu {
  param N;
  input x : f32[N];
  output y : f32[N];
  compute r(i) in 0 <= i < N: y[i] = max(x[i], 0.0);
}
func blocked {
  param N, B = 4;
  input x : f32[N];
  output y : f32[N];
  compute w(o, i) in 0 <= o < N / 4, 0 <= i < B: y[4 * o + i] = 2.0 * x[4 * o + i] - 3.0;
  schedule { w.tag(i, vectorize); }
}
)";

ir::Graph graph(const std::string& text) {
  ir::Module m = frontend::parse_module(std::string(kOps) + text, "g.kiln");
  return m.graphs.at(0);
}

TEST(FoldConstants, CallsOnConstantsBecomeConstantsInTopologicalOrder) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[4];
  const a : f32[4] = [1.0, 2.0, 3.0, 4.0];
  const b : f32[4] = fill(0.5);
  c = add(a, b);
  d = scale(c);
  e = add(d, x);
  output e;
}
)");
  int evaluated = 0;
  PassContext ctx;
  ctx.evaluate = [&](const ir::Func& op, Bindings& b) {
    ++evaluated;
    interp::run_reference(op, b);
  };
  EXPECT_EQ(ir::to_string(fold_constants(g, ctx)),
            "graph g {\n"
            "  input x : f32[4];\n"
            "  const a : f32[4] = [1.0, 2.0, 3.0, 4.0];\n"
            "  const b : f32[4] = fill(0.5);\n"
            "  const c : f32[4] = [1.5, 2.5, 3.5, 4.5];\n"
            "  const d : f32[4] = [3.0, 5.0, 7.0, 9.0];\n"
            "  e = add(d, x, N = 4);\n"
            "  output e;\n"
            "}\n");
  EXPECT_EQ(evaluated, 2);  // the evaluator the context names, once per folded call
}

TEST(FoldConstants, ACallWithoutArgumentsIsFolded) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[3];
  c = iota(N = 3);
  e = add(c, x);
  output e;
}
)");
  EXPECT_EQ(ir::to_string(fold_constants(g, {})),
            "graph g {\n"
            "  input x : f32[3];\n"
            "  const c : f32[3] = [0.0, 1.0, 2.0];\n"
            "  e = add(c, x, N = 3);\n"
            "  output e;\n"
            "}\n");
}

TEST(FoldConstants, NothingToFoldLeavesTheGraph) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[3];
  e = scale(x);
  output e;
}
)");
  EXPECT_EQ(ir::to_string(fold_constants(g, {})), ir::to_string(g));
}

TEST(EliminateCommonOperators, SameAlgorithmOnSameArgumentsIsComputedOnce) {
  // scale and scale_again differ in names and schedule only; add(x, w) is
  // another computation; the constants k1 and k2 are equal.
  ir::Graph g = graph(R"(
graph g {
  input x : f32[4];
  input w : f32[4];
  const k1 : f32[4] = fill(1.0);
  const k2 : f32[4] = fill(1.0);
  a = scale(x);
  b = scale_again(x);
  c = add(a, b);
  d = add(x, k1);
  e = add(x, k2);
  f = add(x, w);
  s = add(c, d);
  t = add(e, f);
  u = add(s, t);
  output u;
}
)");
  EXPECT_EQ(ir::to_string(eliminate_common_operators(g)),
            "graph g {\n"
            "  input x : f32[4];\n"
            "  input w : f32[4];\n"
            "  const k1 : f32[4] = fill(1.0);\n"
            "  a = scale(x, N = 4);\n"
            "  c = add(a, a, N = 4);\n"
            "  d = add(x, k1, N = 4);\n"
            "  f = add(x, w, N = 4);\n"
            "  s = add(c, d, N = 4);\n"
            "  t = add(d, f, N = 4);\n"
            "  u = add(s, t, N = 4);\n"
            "  output u;\n"
            "}\n");
}

TEST(EliminateCommonOperators, GraphOutputsKeepTheirNames) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[4];
  a = scale(x);
  b = scale(x);
  output a, b;
}
)");
  EXPECT_EQ(ir::to_string(eliminate_common_operators(g)), ir::to_string(g));
}

TEST(RemoveUnusedOperators, DropsWhatNoOutputNeeds) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[4];
  input unused : f32[4];
  const k : f32[4] = fill(1.0);
  const dead_k : f32[4] = fill(2.0);
  a = add(x, k);
  b = add(x, dead_k);
  c = scale(b);
  d = scale(a);
  output d;
}
)");
  EXPECT_EQ(ir::to_string(remove_unused_operators(g)),
            "graph g {\n"
            "  input x : f32[4];\n"
            "  input unused : f32[4];\n"
            "  const k : f32[4] = fill(1.0);\n"
            "  a = add(x, k, N = 4);\n"
            "  d = scale(a, N = 4);\n"
            "  output d;\n"
            "}\n");
}

// The schedule commands of the fused operator, one per line.
std::string schedule_of(const ir::Func& f) {
  std::string text = ir::to_string(f);
  size_t at = text.find("schedule {");
  return at == std::string::npos ? "" : text.substr(at);
}

TEST(FuseElementwise, ReluRunsInsideTheProducersLoops) {
  ir::Graph g = graph(R"(
graph g {
  input A : f32[8, 5];
  input x : f32[5];
  y = matvec(A, x);
  r = relu(y);
  output r;
}
)");
  std::ostringstream log;
  PassContext ctx;
  ctx.instrument = print_and_time({"fuse_elementwise"}, false, log);
  ir::Graph fused = fuse_elementwise(g, ctx);
  ASSERT_EQ(fused.calls.size(), 1u);
  EXPECT_EQ(ir::to_string(fused),
            "graph g {\n"
            "  input A : f32[8, 5];\n"
            "  input x : f32[5];\n"
            "  r = matvec_relu(A, x, M = 8, K = 5);\n"
            "  output r;\n"
            "}\n");
  const ir::Func& op = fused.calls[0].op;
  // relu reads and overwrites y in place, after the k loop of each row: it
  // takes matvec's split and parallel tag, and shares io and ii.
  EXPECT_EQ(ir::to_string(op.comps.back().value), "max(y[i], 0.0)");
  EXPECT_EQ(schedule_of(op),
            "schedule {\n"
            "    y_init.split(i, 4, io, ii);\n"
            "    y.split(i, 4, io, ii);\n"
            "    y.after(y_init, ii);\n"
            "    y.tag(io, parallel);\n"
            "    relu.split(i, 4, io, ii);\n"
            "    relu.tag(io, parallel);\n"
            "    relu.after(y, ii);\n"
            "  }\n"
            "}\n");
  EXPECT_EQ(log.str(), "// fuse_elementwise: relu into matvec (inside loop ii of y)\n");
}

TEST(FuseElementwise, ReductionOutsideTheOutputLoopsFusesAfterTheLoops) {
  // k outermost: no shared loop sees a finished y[i], so relu runs after.
  std::string ops = std::string(kOps);
  ir::Graph g = graph(R"(
graph g {
  input A : f32[8, 5];
  input x : f32[5];
  y = matvec(A, x);
  r = relu(y);
  output r;
}
)");
  ir::Func& mv = g.calls[0].op;
  mv.schedule.clear();
  ir::ScheduleCommand reorder;
  reorder.target = "y";
  reorder.op = "reorder";
  for (const char* n : {"k", "i"}) {
    ir::ScheduleArg a;
    a.kind = ir::ScheduleArg::Kind::Name;
    a.text = n;
    reorder.args.push_back(a);
  }
  mv.schedule.push_back(reorder);
  std::ostringstream log;
  PassContext ctx;
  ctx.instrument = print_and_time({"all"}, false, log);
  ir::Graph fused = fuse_elementwise(g, ctx);
  ASSERT_EQ(fused.calls.size(), 1u);
  EXPECT_EQ(log.str(), "// fuse_elementwise: relu into matvec (after the loops of matvec)\n");
  EXPECT_EQ(schedule_of(fused.calls[0].op),
            "schedule {\n"
            "    y.reorder(k, i);\n"
            "  }\n"
            "}\n");
}

TEST(FuseElementwise, WhatIsNotElementwiseOrIsReadElsewhereStays) {
  const char* cases[] = {
      // reads a neighbour, not the element it writes
      "graph g {\n  input x : f32[4];\n  a = scale(x);\n  b = shift_left(a);\n  output b;\n}\n",
      // the producer's result has two readers
      "graph g {\n  input x : f32[4];\n  a = scale(x);\n  b = relu(a);\n  c = add(a, b);\n"
      "  output c;\n}\n",
      // the producer's result is a graph output
      "graph g {\n  input x : f32[4];\n  a = scale(x);\n  b = relu(a);\n  output a, b;\n}\n",
      // the consumer reads the tensor twice
      "graph g {\n  input x : f32[4];\n  a = scale(x);\n  b = add(a, a);\n  output b;\n}\n",
  };
  for (const char* text : cases) {
    SCOPED_TRACE(text);
    // `a` stays a tensor: scale is not fused with what reads it.
    ir::Graph fused = fuse_elementwise(graph(text), {});
    EXPECT_NE(fused.find_tensor("a"), nullptr) << ir::to_string(fused);
  }
}

TEST(FuseElementwise, ChainsFuseIntoOneOperator) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[6];
  input w : f32[6];
  a = scale(x);
  b = add(a, w);
  c = relu(b);
  output c;
}
)");
  ir::Graph fused = fuse_elementwise(g, {});
  ASSERT_EQ(fused.calls.size(), 1u);
  EXPECT_EQ(fused.calls[0].op.name, "scale_add_relu");
  EXPECT_EQ(fused.calls[0].args, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(fused.calls[0].results, (std::vector<std::string>{"c"}));
}

// A writer that stores each element once through `c * a + b` (a conv's
// channel-blocked write-back) takes the consumer over its whole domain, in
// its innermost loop, with its schedule.
TEST(FuseElementwise, ABlockedWriteBackTakesTheConsumerAtEachOfItsPoints) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[8];
  y = blocked(x);
  r = relu(y);
  output r;
}
)");
  std::ostringstream log;
  PassContext ctx;
  ctx.instrument = print_and_time({"fuse_elementwise"}, false, log);
  ir::Graph fused = fuse_elementwise(g, ctx);
  ASSERT_EQ(fused.calls.size(), 1u);
  const ir::Func& op = fused.calls[0].op;
  EXPECT_EQ(op.name, "blocked_relu");
  EXPECT_EQ(ir::to_string(op.comps.back().value), "max(y[4 * o + i], 0.0)");
  EXPECT_EQ(log.str(), "// fuse_elementwise: relu into blocked (inside loop i of w)\n");
  Tensors inputs = interp::random_graph_inputs(g, 3);
  Tensors want = interp::run_reference(g, inputs);
  Tensors got = interp::run_reference(fused, inputs);
  EXPECT_TRUE(interp::compare_buffers({"r"}, want, got).ok);
}

// One that leaves elements unwritten (i < 2 of 4) is not fused: the consumer
// would miss them.
TEST(FuseElementwise, AWriterThatLeavesElementsUnwrittenIsNotFused) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[8];
  y = blocked(x, B = 2);
  r = relu(y);
  output r;
}
)");
  EXPECT_EQ(fuse_elementwise(g, {}).calls.size(), 2u);
}

TEST(SketchOperators, AnOperatorWithoutAScheduleGetsItsFirstSketchTheOthersStay) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[37];
  input y : f32[37];
  s = add(x, y);
  t = scale(s);
  u = relu(t);
  v = relu(x);
  w = add(u, v);
  output w;
}
)");
  std::ostringstream log;
  PassContext ctx;
  ctx.instrument = print_and_time({"sketch_operators"}, false, log);
  ir::Graph sketched = sketch_operators(g, ctx);
  ASSERT_EQ(sketched.calls.size(), 5u);
  const ir::Func& add = sketched.calls[0].op;
  EXPECT_EQ(schedule_of(add),
            "schedule {\n"
            "    s.split(i, split_s_i, i_o, i_i);\n"
            "    s.tag(i_o, par_s);\n"
            "    s.tag(i_i, vectorize);\n"
            "  }\n"
            "}\n");
  ASSERT_EQ(add.knobs.size(), 2u);
  EXPECT_EQ(add.knobs[0].name, "split_s_i");
  // scale has a schedule of its own; equal operators (the two relus, the two adds) get the
  // same sketch.
  EXPECT_EQ(ir::to_string(sketched.calls[1].op), ir::to_string(g.calls[1].op));
  EXPECT_EQ(ir::to_string(sketched.calls[2].op), ir::to_string(sketched.calls[3].op));
  EXPECT_EQ(ir::to_string(sketched.calls[4].op), ir::to_string(add));
  EXPECT_EQ(log.str(),
            "// sketch_operators: add: sketched, knobs split_s_i, par_s\n"
            "// sketch_operators: relu: sketched, knobs split_r_i, par_r\n");
  // Each sketched operator computes what its algorithm does, at its knobs' defaults.
  for (const ir::GraphCall& c : sketched.calls) {
    SCOPED_TRACE(ir::to_string(c.op));
    Bindings expected = interp::random_bindings(c.op, interp::param_values(c.op), 3);
    Bindings actual = expected;
    interp::run_reference(c.op, expected);
    interp::run_loops(poly::lower(poly::schedule(c.op)), actual);
    EXPECT_TRUE(interp::compare_outputs(c.op, expected, actual).ok);
  }
  // On a GPU target, the GPU sketch: the elements over blocks and threads.
  ctx.target.triple = "nvptx64-nvidia-cuda";
  const ir::Func gpu_add = sketch_operators(g, ctx).calls[0].op;
  EXPECT_EQ(schedule_of(gpu_add),
            "schedule {\n"
            "    s.split(i, thread_s_i, i_o, i_t);\n"
            "    s.tag(i_o, gpu_block_x);\n"
            "    s.tag(i_t, gpu_thread_x);\n"
            "  }\n"
            "}\n");
  ASSERT_EQ(gpu_add.knobs.size(), 1u);
  EXPECT_EQ(gpu_add.knobs[0].candidates, (std::vector<int64_t>{32, 64}));
}

TEST(GraphPipeline, LevelsAndPrerequisites) {
  PassContext ctx;
  ctx.opt_level = 0;
  EXPECT_TRUE(graph_pipeline(ctx).empty());
  ctx.opt_level = 1;
  EXPECT_EQ(graph_pipeline(ctx), (std::vector<std::string>{"remove_unused_operators"}));
  ctx.opt_level = 2;
  EXPECT_EQ(graph_pipeline(ctx),
            (std::vector<std::string>{"fold_constants", "eliminate_common_operators",
                                      "remove_unused_operators", "fuse_elementwise",
                                      "sketch_operators"}));
  ctx.opt_level = 0;
  ctx.options.required = {"fuse_elementwise"};
  EXPECT_EQ(graph_pipeline(ctx),
            (std::vector<std::string>{"remove_unused_operators", "fuse_elementwise"}));
  // One context serves both pipelines: a graph pass's name is known to the
  // loop pipeline and the other way round.
  ctx.options.disabled = {"cse"};
  EXPECT_NO_THROW(graph_pipeline(ctx));
  ctx.options.disabled = {"fold_constants"};
  EXPECT_NO_THROW(pipeline(ctx));
  ctx.options.disabled = {"fold_constant"};
  EXPECT_THROW(graph_pipeline(ctx), CompileError);
}

TEST(GraphPipeline, PrintAfterShowsTheGraphAndTimesThePasses) {
  ir::Graph g = graph(R"(
graph g {
  input x : f32[4];
  const k : f32[4] = fill(1.0);
  a = add(k, k);
  b = add(a, x);
  output b;
}
)");
  std::ostringstream log;
  PassContext ctx;
  ctx.instrument = print_and_time({"fold_constants"}, true, log);
  run_graph_pipeline(g, ctx);
  std::string text = log.str();
  EXPECT_NE(text.find("// after fold_constants\ngraph g {\n"), std::string::npos) << text;
  EXPECT_NE(text.find("const a : f32[4] = [2.0, 2.0, 2.0, 2.0];"), std::string::npos) << text;
  EXPECT_NE(text.find("pass fuse_elementwise: "), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln::passes
