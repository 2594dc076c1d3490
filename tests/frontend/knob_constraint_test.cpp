// Knob constraints (docs/language.md, "constraint"): a condition that names a
// knob is kept apart from the facts about params, may come before the knobs
// it reads, and refuses knob values that break it with the values it read.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "kiln/frontend.h"

namespace kiln {
namespace {

const char* kTiles = R"(func tiles {
  param N = 64, n;
  constraint N > 0, MB % MR == 0;
  constraint MB * MR <= 256;
  input x : f32[N];
  output y : f32[N];
  knob MB = 32 in [16, 32, 48];
  compute c(i) in 0 <= i < N: y[i] = x[i];
  schedule {
    knob MR = 4 in [4, 6, 8];
  }
}
)";

ir::Func tiles() { return frontend::parse_module(kTiles, "tiles.kiln").funcs.at(0); }

std::string refusal(const ir::Func& f, const ir::Overrides& set) {
  try {
    ir::apply_overrides(f, set);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

TEST(KnobConstraints, AreKeptApartFromTheFactsAboutParams) {
  ir::Func f = tiles();
  ASSERT_EQ(f.constraints.size(), 1u);
  EXPECT_EQ(ir::to_string(f.constraints[0].cond), "N > 0");
  ASSERT_EQ(f.knob_constraints.size(), 2u);
  EXPECT_EQ(ir::to_string(f.knob_constraints[0].cond), "MB % MR == 0");
  EXPECT_EQ(ir::to_string(f.knob_constraints[1].cond), "MB * MR <= 256");
  EXPECT_EQ(f.knob_constraints[0].where.line, 3);
}

TEST(KnobConstraints, RefuseKnobValuesThatBreakThemNamingTheValues) {
  ir::Func f = tiles();
  EXPECT_EQ(refusal(f, {}), "");
  EXPECT_EQ(refusal(f, {{"MB", 32}, {"MR", 8}}), "");
  EXPECT_EQ(refusal(f, {{"MB", 16}, {"MR", 6}}),
            "tiles.kiln:3:21: validate error: MB=16, MR=6 break the knob constraint MB % MR == 0");
  EXPECT_EQ(
      refusal(f, {{"MB", 48}, {"MR", 6}}),
      "tiles.kiln:4:14: validate error: MB=48, MR=6 break the knob constraint MB * MR <= 256");
}

TEST(KnobConstraints, MayReadParamsWithAValueOnly) {
  ir::Module m = frontend::parse_module(R"(func f {
  param N = 64, n;
  input x : f32[n];
  output y : f32[n];
  knob T = 8 in [8, 16, 128];
  constraint T <= N, T <= n;
  compute c(i) in 0 <= i < n: y[i] = x[i];
}
)",
                                        "f.kiln");
  const ir::Func& f = m.funcs.at(0);
  EXPECT_EQ(refusal(f, {{"N", 64}, {"T", 128}}),
            "f.kiln:6:14: validate error: N=64, T=128 break the knob constraint T <= N");
  EXPECT_EQ(refusal(f, {}),
            "f.kiln:6:22: validate error: the knob constraint T <= n cannot be decided when "
            "compiling (T=8, n (a run-time param)): it may read only knobs and params with values");
}

// A knob constraint may stand in the schedule block beside the knobs it reads (as kiln's
// sketches write it): the same constraint, at its place there, kept when the func is printed
// and parsed again.
TEST(KnobConstraints, MayStandInTheScheduleBlock) {
  const char* text = R"(func f {
  param N = 64;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i];
  schedule {
    knob T = 8 in [4, 8, 16];
    knob U = 2 in [1, 2, 4];
    constraint T * U <= 32, T >= U;
    c.split(i, T, io, ii);
  }
}
)";
  ir::Func f = frontend::parse_module(text, "f.kiln").funcs.at(0);
  ASSERT_EQ(f.knob_constraints.size(), 2u);
  EXPECT_TRUE(f.constraints.empty());
  EXPECT_EQ(refusal(f, {{"T", 16}, {"U", 4}}),
            "f.kiln:9:16: validate error: T=16, U=4 break the knob constraint T * U <= 32");
  EXPECT_EQ(refusal(f, {{"T", 4}, {"U", 2}}), "");
  ir::Func again = frontend::parse_module(ir::to_string(f), "again.kiln").funcs.at(0);
  ASSERT_EQ(again.knob_constraints.size(), 2u);
  EXPECT_EQ(ir::to_string(again.knob_constraints[1].cond), "T >= U");
  try {
    frontend::parse_module(
        "func f { output y : f32[4]; compute c(i) in 0 <= i < 4: y[i] = 0.0;\n"
        "  schedule { constraint 1 < 2 c.tag(i, parallel); } }\n",
        "g.kiln");
    ADD_FAILURE() << "parsed";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "g.kiln:2:31: parse error: expected ',' or ';' after a constraint, found 'c'");
  }
  // A fact about params there would change the algorithm: refused.
  try {
    frontend::parse_module(
        "func f { param N = 4; output y : f32[N]; compute c(i) in 0 <= i < N: y[i] = 0.0;\n"
        "  schedule { knob T = 2 in [1, 2]; constraint T <= N, N > 2; } }\n",
        "h.kiln");
    ADD_FAILURE() << "parsed";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "h.kiln:2:55: validate error: a constraint in the schedule block names no knob: a "
              "fact about params goes at the func's level (constraint ...; beside the params), a "
              "knob constraint in the block");
  }
}

TEST(KnobConstraints, NameOnlyWhatTheFuncHas) {
  try {
    frontend::parse_module(
        "func f { output y : f32[4]; knob T = 1 in [1, 2];\n"
        "  constraint T < Q;\n"
        "  compute c(i) in 0 <= i < 4: y[i] = 0.0; }",
        "f.kiln");
    FAIL() << "an unknown name was taken";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("f.kiln:2:18: validate error: unknown name 'Q' in a knob "
                                         "constraint"),
              std::string::npos)
        << e.what();
  }
}

TEST(KnobConstraints, PrintAndParseBackTheSame) {
  ir::Func f = tiles();
  std::string printed = ir::to_string(f);
  EXPECT_NE(printed.find("  constraint MB % MR == 0, MB * MR <= 256;\n"), std::string::npos)
      << printed;
  ir::Func again = frontend::parse_module(printed, "again.kiln").funcs.at(0);
  ASSERT_EQ(again.knob_constraints.size(), 2u);
  EXPECT_EQ(ir::to_string(again), printed);
}

}  // namespace
}  // namespace kiln
