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

// A func f of x's elements into y and z: `computes` as its computations,
// a's loop split as io, ii and b's as `b_loops`, then `schedule`.
std::string two_splits(const std::string& x, const std::string& z, const std::string& computes,
                       const std::string& b_loops, const std::string& schedule) {
  return "func f {\n  param N = 4;\n  input x : f32[" + x + "];\n  output y : f32[N];\n" +
         "  output z : f32[" + z + "];\n" + computes +
         "  schedule {\n    a.split(i, 8, io, ii);\n" + "    b.split(" + b_loops + ");\n" +
         schedule + "  }\n}\n";
}

// A loop of one iteration whose value is the same for every computation
// (a split whose block holds the whole extent) is left out of isl's schedule
// tree, and what is under it keeps its order: here b after a inside io, and b
// reads what a wrote, reversed. Where the computations' one values differ, the
// loop still orders them: b's io is 0 and a's is 1, so b runs first although
// it comes after a inside io.
TEST(Differential, LoopsOfOneIterationKeepTheOrderTheirValuesGive) {
  const std::string same = two_splits("N", "N",
                                      "  compute a(i) in 0 <= i < N: y[i] = x[i] + 1.0;\n"
                                      "  compute b(i) in 0 <= i < N: z[i] = y[N - 1 - i] * 2.0;\n",
                                      "i, 8, io, ii", "    b.after(a, io);\n");
  for (int n : {4, 8, 1}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    interp::Mismatch mm = differential(parse_one(same, {{"N", n}}));
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
  const std::string apart = two_splits("12", "N",
                                       "  compute a(i) in 8 <= i < 12: y[i - 8] = x[i] + 1.0;\n"
                                       "  compute b(i) in 0 <= i < N: z[i] = x[i] * 2.0;\n",
                                       "i, 8, io, ii", "    b.after(a, io);\n");
  ir::Func f = parse_one(apart);
  std::string loops = ir::to_string(poly::lower(poly::schedule(f)).body);
  ASSERT_NE(loops.find("z["), std::string::npos) << loops;
  ASSERT_NE(loops.find("y["), std::string::npos) << loops;
  EXPECT_LT(loops.find("z["), loops.find("y[")) << loops;
  interp::Mismatch mm = differential(f);
  EXPECT_TRUE(mm.ok) << mm.describe();
}

// The loops of one iteration left out differ from path to path: b's jo has
// one value, a's io four, so b's loop ji is at depth 0 of its path and a's io
// at depth 0 of its own. Each loop keeps its name and tag.
TEST(Differential, LoopsOfOneIterationLeftOutOnOnePathOnly) {
  const std::string text =
      two_splits("N", "4",
                 "  compute a(i) in 0 <= i < N: y[i] = x[i] + 1.0;\n"
                 "  compute b(j) in 0 <= j < 4: z[j] = x[j] * 2.0;\n",
                 "j, 8, jo, ji", "    a.tag(io, parallel);\n    b.tag(ji, vectorize);\n");
  ir::Func f = parse_one(text, {{"N", 32}});
  std::string loops = ir::to_string(poly::lower(poly::schedule(f)).body);
  EXPECT_NE(loops.find("for (io = 0; io < 4; io += 1) {  // parallel"), std::string::npos) << loops;
  EXPECT_NE(loops.find("for (ji = 0; ji < 4; ji += 1) {  // vectorize"), std::string::npos)
      << loops;
  EXPECT_EQ(loops.find("jo"), std::string::npos) << loops;
  interp::Mismatch mm = differential(f);
  EXPECT_TRUE(mm.ok) << mm.describe();
}

}  // namespace
}  // namespace kiln::testing
