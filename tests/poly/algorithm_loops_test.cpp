// Algorithm loops (`for t in ... { ... }`): PolyBench kernels written as
// PolyBench writes them (tests/data/polybench), under their own order and
// skewed, tiled and parallel schedules, against the reference interpreter;
// the interleavings the dependences forbid, refused; the IR printed back as
// text that parses to the same IR; and the language's errors about loops.
#include "programs.h"

namespace kiln::testing {
namespace {

std::string polybench(const std::string& name) {
  return read_source("tests/data/polybench/" + name + ".kiln");
}

struct Kernel {
  std::string name;
  std::vector<std::string> schedules;
  std::vector<ir::Overrides> params;
};

void PrintTo(const Kernel& k, std::ostream* os) { *os << k.name; }

const std::vector<Kernel>& kernels() {
  static const std::vector<Kernel> all = {
      {"lu",
       {"", "s1.tag(k, unroll);", "s3.split(k, 4, ko, ki);"},
       {{{"N", 1}}, {{"N", 2}}, {{"N", 23}}}},
      {"jacobi2d",
       {"", "s1.tag(i, parallel); s2.tag(i, parallel);",
        // Time tiles: both statements skewed by 2t, s2 one further, and
        // fused inside the tiles.
        "s1.skew(t, i, 2); s1.skew(t, j, 2); s2.skew(t, i, 2); s2.skew(t, j, 2); "
        "s2.shift(i, 1); s2.shift(j, 1); s1.tile(t, i, 4, 16, to, io, ti, ii); "
        "s2.tile(t, i, 4, 16, to, io, ti, ii); s2.after(s1, ii);"},
       {{}, {{"T", 1}, {"N", 3}}, {{"T", 7}, {"N", 37}}}},
      {"heat3d",
       {"", "s1.tag(i, parallel); s2.tag(i, parallel); s1.split(k, 4, ko, ki);",
        "s1.skew(t, i, 2); s2.skew(t, i, 2); s2.shift(i, 1); s1.skew(t, j, 2); "
        "s2.skew(t, j, 2); s2.shift(j, 1); s1.tile(t, i, 2, 4, to, io, ti, ii); "
        "s2.tile(t, i, 2, 4, to, io, ti, ii); s2.after(s1, ii);"},
       {{}, {{"T", 3}, {"N", 9}}}},
      {"seidel2d",
       {"", "s.skew(t, i, 1); s.skew(t, j, 2); s.skew(i, j, 1);",
        "s.skew(t, i, 1); s.skew(t, j, 2); s.skew(i, j, 1); s.tile(t, i, 2, 8, to, io, ti, ii);"},
       {{}, {{"T", 2}, {"N", 19}}}},
      {"fdtd2d",
       {"", "s2.tag(i, parallel); s3.tag(i, parallel); s4.tag(i, parallel);",
        "s3.reorder(t, j, i);"},
       {{}, {{"T", 3}, {"NX", 2}, {"NY", 7}}}},
      {"adi",
       {"", "c4.tag(i, parallel); r4.tag(i, parallel);", "c5.after(c4, j); r5.after(r4, j);"},
       {{}, {{"T", 2}, {"N", 3}}}},
  };
  return all;
}

class PolyBench : public ::testing::TestWithParam<Kernel> {};

TEST_P(PolyBench, EveryScheduleMatchesTheReference) {
  const Kernel& k = GetParam();
  for (const auto& sched : k.schedules) {
    for (const auto& params : k.params) {
      SCOPED_TRACE("schedule: " + (sched.empty() ? std::string("(none)") : sched));
      ir::Func f = parse_one(with_schedule(polybench(k.name), sched), params);
      interp::Mismatch mm = differential(f);
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, PolyBench, ::testing::ValuesIn(kernels()),
                         [](const ::testing::TestParamInfo<Kernel>& info) {
                           return info.param.name;
                         });

// The IR prints back as the loops and computations it came from.
TEST(AlgorithmLoops, PrintBackAsTheyWereWritten) {
  for (const auto& k : kernels()) {
    SCOPED_TRACE(k.name);
    ir::Func f = parse_one(polybench(k.name));
    std::string text = ir::to_string(f);
    EXPECT_EQ(ir::to_string(parse_one(text)), text);
  }
  std::string lu = ir::to_string(parse_one(polybench("lu")));
  EXPECT_NE(lu.find("  for i in 0 <= i, i < N {\n"
                    "    for j in 0 <= j, j < i {\n"
                    "      compute s1(k) in 0 <= k, k < j: A[i, j] = A[i, j] - A[i, k] * A[k, j];\n"
                    "      compute s2(): A[i, j] = A[i, j] / A[j, j];\n"
                    "    }\n"
                    "    for j in i <= j, j < N {\n"),
            std::string::npos)
      << lu;
}

// The computations of a loop share its iterator, and their original order
// interleaves them inside it.
TEST(AlgorithmLoops, ShareTheLoopInTheOriginalSchedule) {
  std::string s = poly::schedule(parse_one(polybench("lu")), false).describe_schedule();
  EXPECT_NE(s.find("s1[i, j, k] -> [1, i, 0, j, 0, k, 0]"), std::string::npos) << s;
  EXPECT_NE(s.find("s2[i, j] -> [1, i, 0, j, 1]"), std::string::npos) << s;
  EXPECT_NE(s.find("s3[i, j, k] -> [1, i, 1, j, 0, k, 0]"), std::string::npos) << s;
  // jacobi's s1 reads what s2 wrote in the step before: a later statement
  // of the loop is a source too.
  s = poly::schedule(parse_one(polybench("jacobi2d")), false).describe_schedule();
  EXPECT_NE(s.find("flow through A: { s2[t, i, j] -> s1[t' = 1 + t, i' = i, j' = 1 + j]"),
            std::string::npos)
      << s;
}

struct Refused {
  std::string kernel, schedule, message;
};

TEST(AlgorithmLoops, InterleavingsTheDependencesForbidAreRefused) {
  const std::vector<Refused> cases = {
      {"jacobi2d", "s2.after(s1, root);",
       "breaks the flow (read after write) dependence from s2 to s1: s1(t=5, i=28, j=28) reads A "
       "written by s2(t=4, i=28, j=27)"},
      {"jacobi2d", "s1.tag(t, parallel);", "loop 't' of s1 is tagged parallel"},
      {"jacobi2d", "s1.skew(t, i, 2); s2.skew(t, i, 2); s1.tile(t, i, 4, 16, to, io, ti, ii);",
       "dependence from s2 to s1"},
      {"seidel2d", "s.tag(i, parallel);", "loop 'i' of s is tagged parallel"},
      {"lu", "s2.after(s3, root);",
       "breaks the flow (read after write) dependence from s2 to s1: s1(i=2, j=1, k=0) reads A "
       "written by s2(i=2, j=0)"},
      {"fdtd2d", "s4.after(s2, i);", "breaks the flow (read after write) dependence from s3 to s4"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.kernel + ": " + c.schedule);
    std::string e = schedule_error(parse_one(with_schedule(polybench(c.kernel), c.schedule)));
    EXPECT_NE(e.find("legality error: "), std::string::npos) << e;
    EXPECT_NE(e.find(c.message), std::string::npos) << e;
  }
}

std::string loop_error(const std::string& body) {
  try {
    parse_one("func f {\n  param N = 8;\n  input A : f32[N];\n  output y : f32[N];\n" + body +
              "\n}\n");
  } catch (const CompileError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(AlgorithmLoops, MistakesAreNamed) {
  EXPECT_EQ(loop_error("  for t 0 <= t < N { }"),
            "test.kiln:5:9: parse error: expected 'in' and the range of 'for t' (as in 'for t in "
            "0 <= t < T { ... }'), found '0'");
  EXPECT_EQ(loop_error("  for t in 0 <= t < N {\n    param M = 3;\n  }"),
            "test.kiln:6:5: parse error: expected a computation or a 'for' inside 'for t' "
            "(params, buffers, knobs and the schedule go outside loops), found 'param'");
  EXPECT_EQ(loop_error("  for t in 0 <= t < N {\n    compute v(i) in 0 <= i < N = A[i];\n  }"),
            "test.kiln:6:13: validate error: value computation 'v' is inside 'for t' (at 5:7): "
            "only computations that store may be; declare it outside the loop, with 't' as an "
            "iterator of its own");
  EXPECT_EQ(
      loop_error("  for i in 0 <= i < N {\n    compute c(i) in 0 <= i < N: y[i] = A[i];\n  }"),
      "test.kiln:6:15: validate error: iterator 'i' is declared twice in 'c' (first at 5:7)");
  EXPECT_EQ(loop_error("  for t in 0 <= t {\n    compute c(i) in 0 <= i < N: y[i] = A[i];\n  }"),
            "test.kiln:5:7: validate error: iterator 't' of 'for t' has no upper bound; add a "
            "condition such as 't < N' to its domain");
  std::string deep;
  for (int k = 0; k < 70; ++k) deep += "for a" + std::to_string(k) + " in 0 <= a < 2 {\n";
  EXPECT_NE(loop_error(deep).find("parse error: 'for' loops are nested too deeply (the limit is "
                                  "64 levels)"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::testing
