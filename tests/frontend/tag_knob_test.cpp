// Tag knobs (docs/language.md, "knob"): `knob T = parallel in [none, parallel];`
// names a loop tag in `tag` commands; its value is the number of its tag. They
// print and parse back, refuse what is not a tag, pick the tag in the schedule,
// and every point of their space runs and matches the reference interpreter
// (the tuner's space: tests/tuner/space_test.cpp; a structured operator's:
// tests/frontend/operator_def_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/frontend.h"
#include "kiln/run.h"

namespace kiln {
namespace {

const char* kScale = R"(func scale {
  param N = 1000;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 3.0;
  schedule {
    knob V = 16 in [8, 16];
    knob T = parallel in [none, parallel];
    knob U = vectorize in [none, vectorize, unroll];
    c.split(i, V, io, ii);
    c.tag(io, T);
    c.tag(ii, U);
  }
}
)";

ir::Func scale(const std::string& text = kScale) {
  return frontend::parse_module(text, "scale.kiln").funcs.at(0);
}

std::string error_of(const std::string& text) {
  try {
    scale(text);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

std::string with(const std::string& from, const std::string& to) {
  std::string s = kScale;
  s.replace(s.find(from), from.size(), to);
  return s;
}

std::string loops(const ir::Func& f, const ir::Overrides& set) {
  CompileRequest r{.func = f, .overrides = set};
  return kiln::emit(r, EmitStage::Loops, false).text;
}

TEST(TagKnobs, HoldTheNumberOfTheirTagAndPrintAsTheyWereWritten) {
  ir::Func f = scale();
  const ir::Knob* t = f.find_knob("T");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->tags, (std::vector<std::string>{"none", "parallel"}));
  EXPECT_EQ(t->value, 1);
  EXPECT_EQ(t->candidates, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(*t->tag(), "parallel");
  std::string text = ir::to_string(f);
  EXPECT_NE(text.find("knob T = parallel in [none, parallel];"), std::string::npos) << text;
  EXPECT_NE(text.find("knob U = vectorize in [none, vectorize, unroll];"), std::string::npos);
  EXPECT_EQ(ir::to_string(scale(text)), text);
}

TEST(TagKnobs, PickTheTagOfTheirValue) {
  ir::Func f = scale();
  std::string defaults = loops(f, {});
  EXPECT_NE(defaults.find("// parallel"), std::string::npos) << defaults;
  EXPECT_NE(defaults.find("// vectorize"), std::string::npos) << defaults;
  std::string other = loops(f, {{"T", 0}, {"U", 2}});
  EXPECT_EQ(other.find("// parallel"), std::string::npos) << other;
  EXPECT_NE(other.find("// unroll"), std::string::npos) << other;
}

TEST(TagKnobs, RefuseWhatIsNotATagSayingWhere) {
  EXPECT_EQ(error_of(with("[none, parallel]", "[none, paralel]")),
            "scale.kiln:8:33: validate error: tag knob 'T': 'paralel' is not a tag (none, "
            "parallel, vectorize, unroll, unroll_explicit, gpu_block_x/y/z, gpu_thread_x/y/z)");
  EXPECT_EQ(error_of(with("[none, parallel]", "[parallel, parallel]")),
            "scale.kiln:8:37: validate error: tag knob 'T' lists the tag parallel twice");
  EXPECT_EQ(error_of(with("T = parallel in", "T = vectorize in")),
            "scale.kiln:8:14: validate error: the default vectorize of tag knob 'T' is not one "
            "of its tags [none, parallel]");
  EXPECT_NE(error_of(with("[none, parallel]", "[none, 3]")).find("a tag candidate for tag knob"),
            std::string::npos);
  ir::Func f = scale();
  try {
    ir::apply_overrides(f, {{"U", 3}});
    ADD_FAILURE() << "U=3 was taken";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "scale.kiln:9:10: validate error: value 3 for tag knob U is not the number of one "
              "of its tags (0 none, 1 vectorize, 2 unroll)");
  }
  // A tag knob where a number goes, and a number knob where a tag goes.
  try {
    loops(scale(with("c.split(i, V, io, ii);", "c.split(i, T, io, ii);")), {});
    ADD_FAILURE() << "a tag knob split a loop";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("'T' is a tag knob"), std::string::npos) << e.what();
  }
  try {
    loops(scale(with("c.tag(io, T);", "c.tag(io, V);")), {});
    ADD_FAILURE() << "a number knob tagged a loop";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("knob 'V' is a number"), std::string::npos) << e.what();
  }
}

TEST(TagKnobs, EveryPointRunsAndMatchesTheReference) {
  ir::Func f = scale();
  for (int64_t v : {8, 16})
    for (int64_t t : {0, 1})
      for (int64_t u : {0, 1, 2}) {
        RunSpec spec;
        spec.check = true;
        RunOutcome out = run_kernel(ir::apply_overrides(f, {{"V", v}, {"T", t}, {"U", u}}), spec);
        ASSERT_TRUE(out.mismatch && out.mismatch->ok)
            << "V=" << v << " T=" << t << " U=" << u << ": " << out.mismatch->describe();
      }
}

}  // namespace
}  // namespace kiln
