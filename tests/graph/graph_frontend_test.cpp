// Graphs in the .kiln language: what the frontend builds, and every error it
// reports, with its position.
#include <gtest/gtest.h>

#include <string>

#include "kiln/error.h"
#include "kiln/frontend.h"
#include "kiln/ir.h"

namespace kiln {
namespace {

// Two operators for the graphs below.
constexpr const char* kOps =
    "func add {\n"                                                    // 1
    "  param N;\n"                                                    // 2
    "  input a : f32[N];\n"                                           // 3
    "  input b : f32[N];\n"                                           // 4
    "  output c : f32[N];\n"                                          // 5
    "  compute s(i) in 0 <= i < N: c[i] = a[i] + b[i];\n"             // 6
    "}\n"                                                             // 7
    "func tile2 {\n"                                                  // 8
    "  param N, R = 2;\n"                                             // 9
    "  constraint R > 0;\n"                                           // 10
    "  input x : f32[N];\n"                                           // 11
    "  output y : f32[R, N];\n"                                       // 12
    "  compute t(r, i) in 0 <= r < R, 0 <= i < N: y[r, i] = x[i];\n"  // 13
    "}\n";                                                            // 14

ir::Module parse(const std::string& graph) {
  return frontend::parse_module(std::string(kOps) + graph, "g.kiln");
}

TEST(GraphFrontend, BuildsTensorsCallsAndOutputs) {
  ir::Module m = parse(
      "graph g {\n"
      "  input x : f32[4];\n"
      "  const k : f32[4] = [1.0, 2.0, 3.0, -4];\n"
      "  s = add(x, k);\n"
      "  t = tile2(s, R = 3);\n"
      "  output t;\n"
      "}\n");
  ASSERT_EQ(m.graphs.size(), 1u);
  const ir::Graph& g = m.graphs[0];
  ASSERT_EQ(g.calls.size(), 2u);
  // N comes from the extent of the arguments, R from the binding.
  EXPECT_EQ(*g.calls[0].op.find_param("N")->value, 4);
  EXPECT_EQ(*g.calls[1].op.find_param("R")->value, 3);
  EXPECT_EQ(g.find_tensor("t")->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(g.find_tensor("t")->kind, ir::TensorKind::Value);
  EXPECT_EQ(ir::to_string(g),
            "graph g {\n"
            "  input x : f32[4];\n"
            "  const k : f32[4] = [1.0, 2.0, 3.0, -4.0];\n"
            "  s = add(x, k, N = 4);\n"
            "  t = tile2(s, N = 4, R = 3);\n"
            "  output t;\n"
            "}\n");
}

TEST(GraphFrontend, PrintedGraphParsesBack) {
  std::string graph =
      "graph g {\n"
      "  input x : f32[4];\n"
      "  const k : f32[4] = fill(0.5);\n"
      "  const r : f32[4] = random(7, -2.0, 2.0);\n"
      "  s = add(x, k, N = 4);\n"
      "  u = add(s, r, N = 4);\n"
      "  output u, s;\n"
      "}\n";
  EXPECT_EQ(ir::to_string(parse(graph).graphs[0]), graph);
}

struct BadGraph {
  const char* name;
  const char* text;   // follows kOps, so its first line is line 15
  const char* error;  // the whole what()
};

// clang-format off
const BadGraph kBad[] = {
    {"UnknownOperator",
     "graph g {\n  input x : f32[4];\n  y = mul(x, x);\n  output y;\n}\n",
     "g.kiln:17:7: validate error: unknown operator 'mul': the funcs of this file are add, tile2"},
    {"TooFewArguments",
     "graph g {\n  input x : f32[4];\n  y = add(x);\n  output y;\n}\n",
     "g.kiln:17:7: validate error: 'add' takes 2 inputs (a, b), given 1"},
    {"TooManyResults",
     "graph g {\n  input x : f32[4];\n  y, z = add(x, x);\n  output y;\n}\n",
     "g.kiln:17:3: validate error: 'add' has 1 output (c), but 2 names are given"},
    {"UndefinedTensor",
     "graph g {\n  input x : f32[4];\n  y = add(x, w);\n  output y;\n}\n",
     "g.kiln:17:14: validate error: tensor 'w' is not defined before this call"},
    {"TensorDefinedTwice",
     "graph g {\n  input x : f32[4];\n  x = add(x, x);\n  output x;\n}\n",
     "g.kiln:17:3: validate error: tensor 'x' is already defined at 16:9 (a graph's tensors are defined once)"},
    {"ShapeMismatch",
     "graph g {\n  input x : f32[4];\n  input z : f32[5];\n  y = add(x, z);\n  output y;\n}\n",
     "g.kiln:18:14: validate error: argument 2 of 'add' (its input b) must be f32[4] with N = 4; tensor 'z' is f32[5]"},
    {"DtypeMismatch",
     "graph g {\n  input x : f32[4];\n  input z : i32[4];\n  y = add(x, z);\n  output y;\n}\n",
     "g.kiln:18:14: validate error: argument 2 of 'add' (its input b) must be f32[4] with N = 4; tensor 'z' is i32[4]"},
    {"UnknownParamBinding",
     "graph g {\n  input x : f32[4];\n  y = tile2(x, K = 2);\n  output y;\n}\n",
     "g.kiln:17:16: validate error: 'tile2' has no param 'K' (its params: N, R)"},
    {"ParamBoundTwice",
     "graph g {\n  input x : f32[4];\n  y = tile2(x, R = 2, R = 3);\n  output y;\n}\n",
     "g.kiln:17:23: validate error: param 'R' is bound twice"},
    {"ConstraintBroken",
     "graph g {\n  input x : f32[4];\n  y = tile2(x, R = 0);\n  output y;\n}\n",
     "g.kiln:17:7: validate error: this call of 'tile2' breaks its constraint R > 0 (with N = 4, R = 0)"},
    {"WrongNumberOfValues",
     "graph g {\n  const k : f32[2, 2] = [1.0, 2.0, 3.0];\n  y = add(k, k);\n  output y;\n}\n",
     "g.kiln:16:25: validate error: const 'k' : f32[2, 2] has 4 elements but 3 values are given"},
    {"EmptyRandomRange",
     "graph g {\n  const k : f32[2] = random(1, 2.0, 1.0);\n  y = add(k, k);\n  output y;\n}\n",
     "g.kiln:16:22: validate error: random values of 'k' need LO < HI, got [2, 1)"},
    {"NegativeExtent",
     "graph g {\n  input x : f32[-1];\n  output x;\n}\n",
     "g.kiln:16:17: validate error: extent -1 of tensor 'x' is negative"},
    {"NoOutput",
     "graph g {\n  input x : f32[4];\n  y = add(x, x);\n}\n",
     "g.kiln:15:7: validate error: graph 'g' returns nothing: name its results with `output NAME;`"},
    {"OutputNotDefined",
     "graph g {\n  input x : f32[4];\n  output y;\n}\n",
     "g.kiln:17:10: validate error: output 'y' is not a tensor of graph 'g' defined before this line"},
    {"OutputTwice",
     "graph g {\n  input x : f32[4];\n  output x, x;\n}\n",
     "g.kiln:17:13: validate error: output 'x' given twice"},
    {"GraphNamedLikeAFunc",
     "graph add {\n  input x : f32[4];\n  output x;\n}\n",
     "g.kiln:15:7: validate error: duplicate name 'add': already declared at 1:6 (funcs and graphs share one namespace)"},
    {"TensorAfterBinding",
     "graph g {\n  input x : f32[4];\n  y = tile2(R = 2, x);\n  output y;\n}\n",
     "g.kiln:17:20: parse error: tensor argument 'x' after a param binding: tensors come first"},
    {"ShapeIsNotAnInteger",
     "graph g {\n  input x : f32[N];\n  output x;\n}\n",
     "g.kiln:16:17: parse error: expected an integer extent in the shape of tensor 'x', found 'N'"},
    {"BadInitializer",
     "graph g {\n  const k : f32[2] = zeros();\n  output k;\n}\n",
     "g.kiln:16:22: parse error: expected the values of const 'k': a number, fill(V), random(SEED), random(SEED, LO, HI) or [V, ...], found 'zeros'"},
    {"UnclosedGraph",
     "graph g {\n  input x : f32[4];\n",
     "g.kiln:17:1: parse error: expected '}' to close graph 'g' (opened at 15:9), found end of file"},
};
// clang-format on

class GraphErrors : public ::testing::TestWithParam<BadGraph> {};

TEST_P(GraphErrors, ExactMessage) {
  const BadGraph& c = GetParam();
  try {
    parse(c.text);
    FAIL() << "accepted:\n" << c.text;
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()), c.error);
  }
}

INSTANTIATE_TEST_SUITE_P(Graph, GraphErrors, ::testing::ValuesIn(kBad),
                         [](const ::testing::TestParamInfo<BadGraph>& info) {
                           return std::string(info.param.name);
                         });

TEST(GraphFrontend, RunTimeParamThatNothingDeterminesIsAnError) {
  try {
    frontend::parse_module(
        "func gen {\n  param N;\n  output y : f32[N];\n"
        "  compute s(i) in 0 <= i < N: y[i] = 1.0;\n}\n"
        "graph g {\n  y = gen();\n  output y;\n}\n",
        "g.kiln");
    FAIL() << "accepted";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "g.kiln:7:7: validate error: param 'N' of 'gen' has no value: it is not an extent "
              "of an input and has no default; bind it, as in gen(..., N = 16)");
  }
}

}  // namespace
}  // namespace kiln
