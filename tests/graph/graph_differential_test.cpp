// Differential: graphs compiled at -O0..-O3 (graph passes with the JIT
// folding constants, every operator through the whole pipeline) compute what
// the reference interpreter computes on the graph as written.
#include <gtest/gtest.h>

#include <string>

#include "kiln/frontend.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "programs.h"

namespace kiln {
namespace {

void expect_same_at_every_level(const ir::Graph& g, size_t calls_at_o2) {
  Tensors inputs = interp::random_graph_inputs(g, 11);
  Tensors expected = interp::run_reference(g, inputs);
  for (int level = 0; level <= 3; ++level) {
    SCOPED_TRACE("-O" + std::to_string(level));
    CompileOptions opts;
    opts.opt_level = level;
    graph::CompiledGraph cg = graph::compile(g, opts);
    if (level >= 2) {
      EXPECT_EQ(cg.graph().calls.size(), calls_at_o2);
    }
    if (level == 0) {
      EXPECT_EQ(cg.graph().calls.size(), g.calls.size());
    }
    interp::Mismatch mm = interp::compare_buffers(g.outputs, expected, cg.run(inputs));
    EXPECT_TRUE(mm.ok) << mm.describe() << "\n" << ir::to_string(cg.graph());
  }
}

TEST(GraphDifferential, ConvBatchNormReluExample) {
  ir::Module m = frontend::parse_module(testing::read_example("conv_bn_relu"), "example.kiln");
  // bn_coefficients folds; channel_affine and relu fuse into conv2d.
  expect_same_at_every_level(m.graphs.at(0), 1);
}

TEST(GraphDifferential, FoldingCseRemovalAndFusionTogether) {
  ir::Module m = frontend::parse_module(R"(
func matmul {
  param M, N, K;
  input A : f32[M, K];
  input B : f32[K, N];
  output C : f32[M, N];
  compute C(i, j) in 0 <= i < M, 0 <= j < N: C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];
  schedule {
    C.tile(i, j, 4, 8, io, jo, ii, ji);
    C.reorder(io, jo, k, ii, ji);
    C.tag(io, parallel);
    C.tag(ji, vectorize);
  }
}
func transpose {
  param M, N;
  input X : f32[M, N];
  output Y : f32[N, M];
  compute t(j, i) in 0 <= j < N, 0 <= i < M: Y[j, i] = X[i, j];
}
func bias_tanh {
  param M, N;
  input X : f32[M, N];
  input b : f32[N];
  output Y : f32[M, N];
  compute t(i, j) in 0 <= i < M, 0 <= j < N: Y[i, j] = tanh(X[i, j] + b[j]);
}
func add2 {
  param M, N;
  input X : f32[M, N];
  input Z : f32[M, N];
  output Y : f32[M, N];
  compute t(i, j) in 0 <= i < M, 0 <= j < N: Y[i, j] = X[i, j] + Z[i, j];
}
graph mlp {
  input x : f32[12, 20];
  const wt : f32[16, 20] = random(3);
  const b : f32[16] = random(4, -0.1, 0.1);
  w = transpose(wt);                 # folded: its input is a constant
  h1 = matmul(x, w);
  h2 = matmul(x, w);                 # the same call: shared
  a1 = bias_tanh(h1, b);             # fused into the first matmul
  a2 = bias_tanh(h2, b);             # the same as a1 once h2 is h1
  dead = add2(a1, a1);               # nothing reads it
  y = add2(a1, a2);
  output y;
}
)",
                                        "mlp.kiln");
  // After the passes: one matmul with bias_tanh fused, and the final add.
  expect_same_at_every_level(m.graphs.at(0), 2);
}

// Starts with a newline, so that the graph after it begins on line 8.
constexpr const char* kRelu = R"(
func relu {
  param N;
  input x : f32[N];
  output y : f32[N];
  compute r(i) in 0 <= i < N: y[i] = max(x[i], 0.0);
}
)";

// One operator called with two sets of params is two kernels of one name,
// alive together (the JIT refused the second as a duplicate symbol before).
TEST(GraphDifferential, OneOperatorWithTwoSetsOfParams) {
  ir::Module m = frontend::parse_module(R"(
func scale {
  param N, K;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * f32(K);
}
graph g {
  input x : f32[8];
  a = scale(x, N = 8, K = 2);
  b = scale(a, N = 8, K = 3);
  output b;
}
)",
                                        "twice.kiln");
  // -O2 folds the two scales into one operator; -O0 and -O1 keep two kernels.
  expect_same_at_every_level(m.graphs.at(0), 1);
  CompileOptions o0;
  o0.opt_level = 0;
  EXPECT_EQ(graph::compile(m.graphs.at(0), o0).kernel_count(), 2u);
}

TEST(GraphDifferential, IdenticalOperatorsShareOneKernel) {
  ir::Module m = frontend::parse_module(std::string(kRelu) + R"(graph g {
  input a : f32[64];
  input b : f32[64];
  ra = relu(a);
  rb = relu(b);
  output ra, rb;
}
)",
                                        "g.kiln");
  graph::CompiledGraph cg = graph::compile(m.graphs[0], {});
  EXPECT_EQ(cg.graph().calls.size(), 2u);
  EXPECT_EQ(cg.kernel_count(), 1u);
}

TEST(GraphDifferential, AMissingOrMistypedInputIsAnError) {
  ir::Module m = frontend::parse_module(std::string(kRelu) + R"(graph g {
  input a : f32[8];
  r = relu(a);
  output r;
}
)",
                                        "g.kiln");
  graph::CompiledGraph cg = graph::compile(m.graphs[0], {});
  try {
    cg.run({});
    FAIL() << "ran without its input";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()), "g.kiln:9:9: interp error: graph g: no value for input a");
  }
  Tensors wrong;
  wrong["a"] = HostBuffer(ir::DType::F32, {9});
  try {
    cg.run(wrong);
    FAIL() << "ran with a wrong input";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "g.kiln:9:9: interp error: graph g: input a must be f32[8], got f32[9]");
  }
}

}  // namespace
}  // namespace kiln
