// Differential: every example under every schedule the poly tests use, lowered,
// simplified and run in the loop interpreter, computes exactly what the
// unsimplified loop nest computes.
#include "example_cases.h"
#include "kiln/passes.h"
#include "kiln/passes/simplify.h"
#include "programs.h"

namespace kiln::testing {
namespace {

class SimplifyDifferential : public ::testing::TestWithParam<ExampleCase> {};

TEST_P(SimplifyDifferential, SameResultsAsTheUnsimplifiedLoops) {
  const ExampleCase& c = GetParam();
  std::string src = read_example(c.example);
  for (const auto& sched : c.schedules) {
    std::string program = sched == "<file>" ? src : with_schedule(src, sched);
    for (const auto& params : c.params) {
      SCOPED_TRACE("schedule: " + (sched.empty() ? std::string("(none)") : sched));
      ir::Func f = parse_one(program, params);
      ir::LoweredFunc plain = poly::lower(poly::schedule(f, true));
      ir::LoweredFunc simple = plain;
      simple.body = passes::simplify(plain.body);
      Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 3);
      Bindings expected = in, actual = in;
      interp::run_loops(plain, expected);
      interp::run_loops(simple, actual);
      interp::Mismatch mm = interp::compare_outputs(f, expected, actual, 0.0, 0.0);
      EXPECT_TRUE(mm.ok) << mm.describe() << "\nbefore:\n"
                         << ir::to_string(plain.body) << "after:\n"
                         << ir::to_string(simple.body);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, SimplifyDifferential, ::testing::ValuesIn(example_cases()),
                         [](const ::testing::TestParamInfo<ExampleCase>& info) {
                           return info.param.example;
                         });

// The whole pipeline at every opt level, too.
TEST(PipelineDifferential, EveryOptLevelMatches) {
  for (const auto& c : example_cases()) {
    SCOPED_TRACE(c.example);
    ir::Func f = parse_one(read_example(c.example), c.params.front());
    ir::LoweredFunc plain = poly::lower(poly::schedule(f, true));
    Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 5);
    Bindings expected = in;
    interp::run_loops(plain, expected);
    for (int level = 0; level <= 3; ++level) {
      passes::PassContext ctx;
      ctx.opt_level = level;
      Bindings actual = in;
      interp::run_loops(passes::run_pipeline(plain, ctx), actual);
      interp::Mismatch mm = interp::compare_outputs(f, expected, actual, 0.0, 0.0);
      EXPECT_TRUE(mm.ok) << "-O" << level << ": " << mm.describe();
    }
  }
}

}  // namespace
}  // namespace kiln::testing
