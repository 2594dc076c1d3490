// Differential tests: every example, under its own schedule, no schedule and
// several others, computes in the loop-IR interpreter exactly what the
// reference interpreter computes, for param values that leave partial tiles.
#include "example_cases.h"
#include "programs.h"

namespace kiln::testing {
namespace {

class Differential : public ::testing::TestWithParam<ExampleCase> {};

TEST_P(Differential, LoopNestMatchesReference) {
  const ExampleCase& c = GetParam();
  std::string src = read_example(c.example);
  for (const auto& sched : c.schedules) {
    std::string program = sched == "<file>" ? src : with_schedule(src, sched);
    for (const auto& params : c.params) {
      for (uint64_t seed : {1u, 2u}) {
        SCOPED_TRACE("schedule: " + (sched.empty() ? std::string("(none)") : sched) + ", seed " +
                     std::to_string(seed));
        ir::Func f = parse_one(program, params);
        interp::Mismatch mm = differential(f, c.runtime, seed);
        EXPECT_TRUE(mm.ok) << mm.describe();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, Differential, ::testing::ValuesIn(example_cases()),
                         [](const ::testing::TestParamInfo<ExampleCase>& info) {
                           return info.param.example;
                         });

// Every example also checks under no schedule at all: the algorithm's own order.
TEST(Differential, EveryExampleWithoutSchedule) {
  for (const auto& c : example_cases()) {
    SCOPED_TRACE(c.example);
    ir::Func f = parse_one(read_example(c.example), c.params.front());
    Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 7);
    Bindings expected = in, actual = in;
    interp::run_reference(f, expected);
    interp::run_loops(poly::lower(poly::schedule(f, false)), actual);
    interp::Mismatch mm = interp::compare_outputs(f, expected, actual);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

// A computation with no instance for the params at hand (lu's updates at
// N = 1) lowers to nothing, alone or beside others; it used to stop isl.
TEST(Differential, ComputationsWithNoInstance) {
  const std::string text =
      "func f {\n  param N = 4;\n  input x : f32[N];\n  output y : f32[N];\n"
      "  compute a(i) in 0 <= i < N: y[i] = x[i];\n"
      "  compute b(i) in 0 <= i < N, i >= N + 2: y[i] = 2.0 * x[i];\n"
      "  schedule {\n    b.after(a, i);\n  }\n}\n";
  interp::Mismatch mm = differential(parse_one(text));
  EXPECT_TRUE(mm.ok) << mm.describe();
  ir::Func lu = parse_one(lu_in_one_computation("", 1));
  mm = differential(lu);
  EXPECT_TRUE(mm.ok) << mm.describe();
  EXPECT_EQ(ir::to_string(poly::lower(poly::schedule(lu)).body), "");
}

}  // namespace
}  // namespace kiln::testing
