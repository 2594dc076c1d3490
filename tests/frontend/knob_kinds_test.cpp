// The kinds of knob beyond a number (docs/language.md, "knob"). Tag knobs:
// `knob T = parallel in [none, parallel];` names a loop tag in `tag` commands;
// its value is the number of its tag. Knob splits: `knob split (IO, II = 16)
// of N max 64;` splits an extent into parts, the outer one derived. Both print
// and parse back, refuse what they cannot be saying where, make the schedule
// they say, and every point of their space runs and matches the reference
// interpreter. Order knobs: `knob order O of (i, j, k);` names an order of
// loops in `reorder(O)`, every permutation or a list; its value is the
// order's number
// (the tuner's space: tests/tuner/space_test.cpp; a structured operator's:
// tests/frontend/operator_def_test.cpp).
#include <gtest/gtest.h>

#include <map>
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

// Defaults by target: `knob NR = 16 in [16, 32, 64] for avx512f = 64;` is 64 where the target
// has AVX-512 and 16 elsewhere; the last listed feature the target has wins.
const char* kByTarget = R"(func scale {
  param N = 1024;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 3.0;
  schedule {
    knob V = 8 in [4, 8, 16, 32] for avx2 = 16, avx512f = 32, neon = 4;
    c.split(i, V, io, ii);
    c.tag(ii, vectorize);
  }
}
)";

int64_t knob_on(const std::string& text, const Target& target, const ir::Overrides& set = {}) {
  CompileRequest r{.func = scale(text), .overrides = set};
  r.options.target = target;
  r.output = CompileOutput::Schedule;
  return compile(r).func.find_knob("V")->value;
}

TEST(TargetDefaults, PickTheLastFeatureTheTargetHas) {
  EXPECT_EQ(knob_on(kByTarget, Target{"x86_64-linux-gnu", "haswell", ""}), 16);
  EXPECT_EQ(knob_on(kByTarget, Target{"x86_64-linux-gnu", "skylake-avx512", ""}), 32);
  EXPECT_EQ(knob_on(kByTarget, Target{"x86_64-linux-gnu", "x86-64", ""}), 8);  // SSE2 only
  // The feature list's word decides over the CPU's tables.
  EXPECT_EQ(knob_on(kByTarget, Target{"x86_64-linux-gnu", "skylake-avx512", "-avx512f"}), 16);
  EXPECT_EQ(knob_on(kByTarget, Target{"x86_64-linux-gnu", "haswell", "+avx512f"}), 32);
  EXPECT_EQ(knob_on(kByTarget, Target{"aarch64-linux-gnu", "", ""}), 4);  // neon is base
  // --set and the tuner still choose.
  EXPECT_EQ(knob_on(kByTarget, Target{"x86_64-linux-gnu", "skylake-avx512", ""}, {{"V", 4}}), 4);
  // The key follows the value chosen: the default by target and the same value set by hand
  // compile the same.
  CompileRequest a{.func = scale(kByTarget)};
  a.options.target = Target{"x86_64-linux-gnu", "haswell", ""};
  CompileRequest b = a;
  b.overrides = {{"V", 16}};
  EXPECT_EQ(cache_key(a), cache_key(b));
}

TEST(TargetDefaults, AValueSetBeforeTheTargetIsKnownIsKept) {
  // The CLI applies --set as it parses, before the compile knows its target:
  // the value set must win over the target's default all the same.
  ir::Func f = ir::apply_overrides(scale(kByTarget), {{"V", 4}});
  EXPECT_TRUE(f.find_knob("V")->target_defaults.empty());
  CompileRequest r{.func = f};
  r.options.target = Target{"x86_64-linux-gnu", "skylake-avx512", ""};
  r.output = CompileOutput::Schedule;
  EXPECT_EQ(compile(r).func.find_knob("V")->value, 4);
}

TEST(TargetDefaults, PrintAndParseBackAndAreResolvedAway) {
  ir::Func f = scale(kByTarget);
  std::string text = ir::to_string(f);
  EXPECT_NE(text.find("knob V = 8 in [4, 8, 16, 32] for avx2 = 16, avx512f = 32, neon = 4;"),
            std::string::npos)
      << text;
  EXPECT_EQ(ir::to_string(scale(text)), text);
  ir::Func resolved = ir::apply_target_defaults(
      f, {[](const std::string& feature) { return feature == "avx2"; }, {}});
  EXPECT_EQ(resolved.find_knob("V")->value, 16);
  EXPECT_TRUE(resolved.find_knob("V")->target_defaults.empty());
  EXPECT_NE(ir::to_string(resolved).find("knob V = 16 in [4, 8, 16, 32];"), std::string::npos);
}

TEST(TargetDefaults, RefuseWhatCannotBeSayingWhere) {
  auto with_defaults = [](const std::string& clause) {
    std::string s = kByTarget;
    std::string from = "for avx2 = 16, avx512f = 32, neon = 4";
    s.replace(s.find(from), from.size(), clause);
    return s;
  };
  EXPECT_EQ(error_of(with_defaults("for avx2 = 12")),
            "scale.kiln:7:45: validate error: the default 12 of knob 'V' on targets with avx2 is "
            "not one of its candidates [4, 8, 16, 32]");
  EXPECT_EQ(error_of(with_defaults("for avx2 = 16, avx2 = 32")),
            "scale.kiln:7:49: validate error: knob 'V' gives a default for avx2 twice");
  EXPECT_NE(error_of(with_defaults("for = 16")).find("a CPU feature"), std::string::npos);
  std::string tag = kScale;
  std::string from = "knob T = parallel in [none, parallel];";
  tag.replace(tag.find(from), from.size(), "knob T = parallel in [none, parallel] for avx2 = 1;");
  EXPECT_EQ(error_of(tag),
            "scale.kiln:8:47: validate error: tag knob 'T' cannot have defaults by target "
            "('for'); only number knobs can");
  // A feature no architecture knows is refused when a target is asked about it.
  try {
    knob_on(with_defaults("for avx521f = 16"), Target{"x86_64-linux-gnu", "haswell", ""});
    FAIL() << "an unknown feature was accepted";
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("'avx521f' is not a CPU feature LLVM knows"), std::string::npos)
        << e.what();
  }
}

// Defaults fitted to the target: BLIS's analytical rules as a gemm writes them. KB: the A and B
// micro-panels (MR + NR columns of KB floats) fill at most L1; MB: an MB x KB block of A half of
// L2; the register tile by the vector registers (MR x NR / lanes accumulators, NR / lanes of B
// and one broadcast).
const char* kFitted = R"(func gemm {
  param M = 512, N = 512, K = 512;
  input A : f32[M, K];
  input B : f32[K, N];
  output C : f32[M, N];
  compute C(i, j) in 0 <= i < M, 0 <= j < N: C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];
  constraint MB % MR == 0;
  schedule {
    knob NR = 16 in [16, 32, 64] fit NR / (vector_bytes / 4) <= vector_registers / 8;
    knob MR = 4 in [2, 4, 6, 8] fit MR * (NR / (vector_bytes / 4)) + NR / (vector_bytes / 4) + 1 <= vector_registers;
    knob KB = 128 in [64, 128, 256, 512] fit (MR + NR) * KB * 4 <= l1d_bytes;
    knob MB = 64 in [16, 32, 48, 64, 96, 128, 192, 256] fit MB * KB * 4 <= l2_bytes / 2;
    C.tile(i, j, MB, 64, io, jo, ib, jb);
    C.split(k, KB, ko, kb);
  }
}
)";

std::map<std::string, int64_t> fitted_on(const Target& target) {
  CompileRequest r{.func = scale(kFitted)};
  r.options.target = target;
  r.output = CompileOutput::Schedule;
  ir::Func f = compile(r).func;
  std::map<std::string, int64_t> v;
  for (const char* k : {"NR", "MR", "KB", "MB"}) v[k] = f.find_knob(k)->value;
  return v;
}

TEST(FittedDefaults, TakeTheLargestCandidateThatFitsTheTargetsCachesAndRegisters) {
  // A Skylake-SP core: 32 KiB L1, 1 MiB L2, AVX-512 (64-byte vectors, 32 registers).
  Target skx{"x86_64-linux-gnu", "skylake-avx512", "", 32 << 10, 1 << 20, 32 << 20};
  std::map<std::string, int64_t> want = {{"NR", 64}, {"MR", 6}, {"KB", 64}, {"MB", 192}};
  EXPECT_EQ(fitted_on(skx), want);
  // A Haswell core: 32 KiB L1, 256 KiB L2, AVX2 (32-byte vectors, 16 registers): the 6 x 16 tile
  // BLIS uses there (12 accumulators, 2 vectors of B, 1 broadcast), KB 256, MB 96.
  Target hsw{"x86_64-linux-gnu", "haswell", "", 32 << 10, 256 << 10, 8 << 20};
  want = {{"NR", 16}, {"MR", 6}, {"KB", 256}, {"MB", 96}};
  EXPECT_EQ(fitted_on(hsw), want);
  // Caches not known (another machine named by its triple alone): the fits that read them keep
  // the written defaults, the register tile still fits the vectors, and MB moves to the
  // candidate nearest its default that MB % MR == 0 allows.
  Target bare{"x86_64-linux-gnu", "haswell", ""};
  want = {{"NR", 16}, {"MR", 6}, {"KB", 128}, {"MB", 48}};
  EXPECT_EQ(fitted_on(bare), want);
  // --set wins, and the fits after it see its value.
  CompileRequest r{.func = scale(kFitted), .overrides = {{"KB", 512}}};
  r.options.target = skx;
  r.output = CompileOutput::Schedule;
  EXPECT_EQ(compile(r).func.find_knob("KB")->value, 512);
  // The key follows the caches: the same target with another L2 compiles apart.
  CompileRequest a{.func = scale(kFitted)};
  a.options.target = skx;
  CompileRequest b = a;
  b.options.target.l2_bytes = 2 << 20;
  EXPECT_NE(cache_key(a), cache_key(b));
}

TEST(FittedDefaults, PrintParseBackAndRefuseWhatCannotBe) {
  ir::Func f = scale(kFitted);
  std::string text = ir::to_string(f);
  EXPECT_NE(text.find("knob KB = 128 in [64, 128, 256, 512] fit (MR + NR) * KB * 4 <= l1d_bytes;"),
            std::string::npos)
      << text;
  EXPECT_EQ(ir::to_string(scale(text)), text);
  std::string bad = kFitted;
  std::string from = "fit MB * KB * 4 <= l2_bytes / 2";
  bad.replace(bad.find(from), from.size(), "fit MB * KB <= l4_bytes");
  EXPECT_NE(error_of(bad).find("unknown name 'l4_bytes' in the fit of knob 'MB'"),
            std::string::npos)
      << error_of(bad);
  bad = kFitted;
  bad.replace(bad.find(from), from.size(), "fit MB * KB");
  EXPECT_NE(error_of(bad).find("the fit of knob 'MB'"), std::string::npos) << error_of(bad);
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

const char* kSplit = R"(func scale3 {
  param N = 1024;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 3.0;
  schedule {
    knob split (IO, IM = 4, II = 16) of N max 64;
    c.split(i, II, i1, ii);
    c.split(i1, IM, io, im);
    c.tag(io, parallel);
    c.tag(ii, vectorize);
  }
}
)";

ir::Func split3(const std::string& text = kSplit) {
  return frontend::parse_module(text, "split.kiln").funcs.at(0);
}

std::string override_error(const ir::Func& f, const ir::Overrides& set) {
  try {
    ir::apply_overrides(f, set);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

TEST(KnobSplits, DeriveTheOuterPartAndPrintAsWritten) {
  ir::Func f = split3();
  ASSERT_EQ(f.knob_splits.size(), 1u);
  EXPECT_EQ(f.knob_splits[0].parts, (std::vector<std::string>{"IO", "IM", "II"}));
  EXPECT_EQ(f.knob_splits[0].extent, 1024);
  EXPECT_EQ(f.find_knob("IO")->value, 16);  // 1024 / (4 * 16)
  std::string text = ir::to_string(f);
  EXPECT_NE(text.find("knob split (IO, IM = 4, II = 16) of N max 64;"), std::string::npos) << text;
  EXPECT_EQ(ir::to_string(split3(text)), text);
  ir::Func other = ir::apply_overrides(f, {{"IM", 2}, {"II", 64}});
  EXPECT_EQ(other.find_knob("IO")->value, 8);
  EXPECT_NE(ir::to_string(other).find("knob split (IO, IM = 2, II = 64) of N max 64;"),
            std::string::npos);
  // A param's new value is a new extent.
  EXPECT_EQ(ir::apply_overrides(f, {{"N", 2048}}).find_knob("IO")->value, 32);
}

TEST(KnobSplits, RefuseWhatDoesNotSplitSayingWhichRule) {
  ir::Func f = split3();
  EXPECT_EQ(override_error(f, {{"II", 3}}),
            "split.kiln:7:29: validate error: II=3 does not split 1024 (IO, IM, II): a part "
            "divides what the parts outside it leave (256)");
  EXPECT_EQ(override_error(f, {{"II", 128}, {"IM", 1}}),
            "split.kiln:7:29: validate error: II=128 does not split 1024 (IO, IM, II): a part is "
            "at most 64 (max)");
  EXPECT_EQ(override_error(f, {{"IO", 5}}),
            "split.kiln:7:17: validate error: IO is the outer part of knob split (IO, IM, II) of "
            "1024: it is what the inner parts leave (16 here), not set");
  EXPECT_EQ(override_error(f, {{"IO", 16}}), "");
  EXPECT_EQ(override_error(f, {{"N", 1000}}),
            "split.kiln:7:29: validate error: II=16 does not split 1000 (IO, IM, II): a part "
            "divides what the parts outside it leave (250)");
  std::string pow2 = kSplit;
  pow2.replace(pow2.find("max 64;"), 7, "max 64 pow2;");
  ir::Func p = split3(pow2);
  EXPECT_EQ(override_error(p, {{"N", 1000}}), "");  // 1000 = 16 x 4 x 16 with a tail
  EXPECT_EQ(ir::apply_overrides(p, {{"N", 1000}}).find_knob("IO")->value, 16);
  EXPECT_EQ(override_error(p, {{"II", 12}}),
            "split.kiln:7:29: validate error: II=12 does not split 1024 (IO, IM, II): a part is "
            "a power of two (pow2)");
  auto parse_error = [](const std::string& text) {
    try {
      split3(text);
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string bad = kSplit;
  bad.replace(bad.find("(IO, IM"), 7, "(IO = 2, IM");
  EXPECT_NE(parse_error(bad).find("the outer part of a split is what the inner ones leave"),
            std::string::npos)
      << parse_error(bad);
  bad = kSplit;
  bad.replace(bad.find("of N"), 4, "of Q");
  EXPECT_EQ(parse_error(bad),
            "split.kiln:7:41: validate error: the extent 'Q' of a knob split is not a param of "
            "'scale3'");
  bad = kSplit;
  bad.replace(bad.find("max 64"), 6, "most 64");
  EXPECT_NE(parse_error(bad).find("expected 'max N', 'pow2' or ';' after the extent"),
            std::string::npos)
      << parse_error(bad);
}

TEST(KnobSplits, EveryPointOfTheirSpaceRunsAndMatchesTheReference) {
  ir::Func f = split3(std::string(kSplit).replace(std::string(kSplit).find("1024"), 4, "192"));
  int ran = 0;
  const int64_t divisors[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};  // of 192, at most 64
  for (int64_t im : divisors)
    for (int64_t ii : divisors) {
      if (((192 / im) % ii) != 0) continue;
      RunSpec spec;
      spec.check = true;
      RunOutcome out = run_kernel(ir::apply_overrides(f, {{"IM", im}, {"II", ii}}), spec);
      ASSERT_TRUE(out.mismatch && out.mismatch->ok)
          << "IM=" << im << " II=" << ii << ": " << out.mismatch->describe();
      ++ran;
    }
  EXPECT_EQ(ran, 78);  // (IM, II) with IM * II dividing 192, each at most 64
}

const char* kOrder = R"(func add3 {
  param A = 8, B = 12, C = 16;
  input x : f32[A, B, C];
  output y : f32[A, B, C];
  compute c(i, j, k) in 0 <= i < A, 0 <= j < B, 0 <= k < C: y[i, j, k] = x[i, j, k] + 1.0;
  schedule {
    knob order O of (i, j, k);
    knob order P of (i, j) in [(i, j), (j, i)] = (j, i);
    c.reorder(O);
  }
}
)";

ir::Func add3(const std::string& text = kOrder) {
  return frontend::parse_module(text, "order.kiln").funcs.at(0);
}

TEST(OrderKnobs, NumberTheirOrdersAndPrintAsWritten) {
  ir::Func f = add3();
  const ir::Knob* o = f.find_knob("O");
  ASSERT_NE(o, nullptr);
  ASSERT_EQ(o->orders.size(), 6u);
  EXPECT_EQ(o->orders[0], (std::vector<std::string>{"i", "j", "k"}));
  EXPECT_EQ(o->orders[5], (std::vector<std::string>{"k", "j", "i"}));
  EXPECT_EQ(o->value, 0);
  EXPECT_EQ(f.find_knob("P")->value, 1);
  std::string text = ir::to_string(f);
  EXPECT_NE(text.find("knob order O of (i, j, k);"), std::string::npos) << text;
  EXPECT_NE(text.find("knob order P of (i, j) in [(i, j), (j, i)] = (j, i);"), std::string::npos)
      << text;
  EXPECT_EQ(ir::to_string(add3(text)), text);
}

TEST(OrderKnobs, EveryOrderRunsAndMatchesTheReference) {
  ir::Func f = add3();
  for (int64_t v = 0; v < 6; ++v) {
    std::string nest = loops(f, {{"O", v}});
    const std::vector<std::string>& order = f.find_knob("O")->orders[static_cast<size_t>(v)];
    size_t first = nest.find("for (" + order[0]), second = nest.find("for (" + order[1]),
           third = nest.find("for (" + order[2]);
    EXPECT_TRUE(first < second && second < third) << v << ":\n" << nest;
    RunSpec spec;
    spec.check = true;
    RunOutcome out = run_kernel(ir::apply_overrides(f, {{"O", v}}), spec);
    ASSERT_TRUE(out.mismatch && out.mismatch->ok) << "O=" << v << ": " << out.mismatch->describe();
  }
}

TEST(OrderKnobs, RefuseWhatIsNotAnOrderSayingWhere) {
  auto parse_error = [](std::string from, std::string to) {
    std::string text = kOrder;
    text.replace(text.find(from), from.size(), to);
    try {
      add3(text);
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(parse_error("in [(i, j), (j, i)]", "in [(i, j), (j, k)]"),
            "order.kiln:8:41: validate error: order knob 'P': (j, k) is not an order of its loops "
            "(i, j)");
  EXPECT_EQ(parse_error("in [(i, j), (j, i)]", "in [(i, j), (i, j)]"),
            "order.kiln:8:41: validate error: order knob 'P' lists the order (i, j) twice");
  EXPECT_EQ(parse_error("= (j, i)", "= (k, i)"),
            "order.kiln:8:51: validate error: the default (k, i) of order knob 'P' is not one of "
            "its orders");
  EXPECT_EQ(parse_error("of (i, j, k)", "of (i, i, k)"),
            "order.kiln:7:22: validate error: order knob 'O' names a loop twice");
  ir::Func f = add3();
  try {
    ir::apply_overrides(f, {{"O", 6}});
    ADD_FAILURE() << "O=6 was taken";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "order.kiln:7:16: validate error: value 6 for order knob O is not the number of one "
              "of its 6 orders (0 is (i, j, k))");
  }
  try {
    loops(add3(std::string(kOrder).replace(std::string(kOrder).find("c.reorder(O);"), 13,
                                           "c.reorder(A);")),
          {});
    ADD_FAILURE() << "a param reordered loops";
  } catch (const CompileError&) {
  }
}

}  // namespace
}  // namespace kiln
