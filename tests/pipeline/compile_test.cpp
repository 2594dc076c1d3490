// The compile pipeline (kiln/compile.h): where each output stops, the stage
// times, the fast-math setting an artifact records, the errors of each stage,
// and the cache key: equal for equal requests, different when any input to it
// differs.
#include "kiln/compile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/error.h"
#include "programs.h"

namespace kiln::testing {
namespace {

const char* kScale = R"(func scale {
  param N = 64;
  input x : f32[N];
  output y : f32[N];
  knob S = 8 in [4, 8, 16];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 2.0 + 1.0;
  schedule { c.split(i, S, io, ii); }
})";

CompileRequest request(CompileOutput output, const char* program = kScale) {
  return CompileRequest{.func = program ? parse_one(program) : ir::Func{}, .output = output};
}

std::vector<std::string> stages(const CompileResult& r) {
  std::vector<std::string> out;
  for (const StageTime& t : r.times) {
    EXPECT_GE(t.ms, 0) << t.stage;
    out.emplace_back(t.stage);
  }
  return out;
}

TEST(Compile, EachOutputStopsWhereItShould) {
  CompileResult s = compile(request(CompileOutput::Schedule));
  ASSERT_TRUE(s.scheduled.has_value());
  EXPECT_EQ(stages(s), (std::vector<std::string>{"overrides", "schedule"}));
  EXPECT_EQ(s.optimized.body, nullptr);

  CompileResult l = compile(request(CompileOutput::Loops));
  EXPECT_FALSE(l.scheduled.has_value());
  EXPECT_EQ(stages(l), (std::vector<std::string>{"overrides", "schedule", "lower", "passes"}));
  ASSERT_NE(l.lowered.body, nullptr);
  ASSERT_NE(l.optimized.body, nullptr);
  EXPECT_FALSE(l.kernel || l.artifact);

  std::vector<std::string> all{"overrides", "schedule", "lower", "passes", "codegen"};
  CompileResult ir = compile(request(CompileOutput::LlvmIr));
  EXPECT_NE(ir.text.find("define"), std::string::npos) << ir.text;
  EXPECT_EQ(stages(ir), all);
  CompileResult as = compile(request(CompileOutput::Assembly));
  EXPECT_NE(as.text.find(codegen::entry_symbol(as.optimized)), std::string::npos);

  CompileResult k = compile(request(CompileOutput::Kernel));
  ASSERT_TRUE(k.kernel.has_value());
  EXPECT_FALSE(k.artifact.has_value());
  EXPECT_EQ(stages(k), all);

  CompileResult a = compile(request(CompileOutput::Artifact));
  ASSERT_TRUE(a.artifact.has_value());
  EXPECT_EQ(a.artifact->key, a.key);
}

std::vector<std::string> parts(const CompileResult& r) {
  std::vector<std::string> out;
  for (const PartTime& t : r.parts) {
    EXPECT_GE(t.ms, 0) << t.part;
    out.emplace_back(t.part);
  }
  return out;
}

TEST(Compile, ThePartsOfEachStageAreTimedInTheOrderTheyRan) {
  std::vector<std::string> poly{"model",    "dependences",   "bounds", "commands",    "loop ranges",
                                "legality", "schedule tree", "ast",    "ast to loops"};
  std::vector<std::string> kernel = poly, artifact = poly;
  for (const char* p : {"llvm ir", "llvm optimize"}) {
    kernel.push_back(p);
    artifact.push_back(p);
  }
  kernel.push_back("machine code and link");
  artifact.push_back("machine code");
  artifact.push_back("link");
  EXPECT_EQ(parts(compile(request(CompileOutput::Kernel))), kernel);
  EXPECT_EQ(parts(compile(request(CompileOutput::Artifact))), artifact);
  // Outside kiln::compile nothing collects them, and a part costs nothing.
  std::vector<PartTime> outer;
  {
    PartSink sink(outer);
    { TimedPart part("outer part"); }
    compile(request(CompileOutput::Loops));  // its own sink, not this one
  }
  ASSERT_EQ(outer.size(), 1u);
  EXPECT_STREQ(outer[0].part, "outer part");
}

TEST(Compile, TheKernelComputesWhatTheReferenceDoes) {
  CompileRequest r = request(CompileOutput::Kernel);
  r.overrides = {{"S", 16}, {"N", 100}};
  CompileResult c = compile(r);
  EXPECT_EQ(c.func.find_knob("S")->value, 16);
  EXPECT_EQ(c.func.find_param("N")->value, 100);
  Bindings in = interp::random_bindings(c.func, interp::param_values(c.func), 3);
  Bindings expected = in, actual = in;
  interp::run_reference(c.func, expected);
  c.kernel->run(actual);
  interp::Mismatch mm = interp::compare_outputs(c.func, expected, actual);
  EXPECT_TRUE(mm.ok) << mm.describe();
}

TEST(Compile, OptLevelZeroLeavesTheLoopsAsLowered) {
  CompileRequest r = request(CompileOutput::Loops);
  r.options.opt_level = 0;
  CompileResult c = compile(r);
  EXPECT_EQ(c.optimized.body, c.lowered.body);
}

TEST(Compile, ArtifactRecordsTheFastMathTheFuncUses) {
  std::string fast = kScale;
  fast.insert(fast.find('{') + 1, "\n  option fast_math;");
  for (bool fast_math : {false, true}) {
    CompileRequest r{.func = parse_one(fast_math ? fast : std::string(kScale)),
                     .output = CompileOutput::Artifact};
    r.options.target = Target{"aarch64-linux-gnu", "", ""};
    codegen::Artifact a = *compile(r).artifact;
    EXPECT_EQ(a.fast_math, fast_math);
    std::string json = a.metadata_json();
    EXPECT_NE(json.find(fast_math ? R"("fast_math":true)" : R"("fast_math":false)"),
              std::string::npos)
        << json;
  }
}

TEST(Compile, EachStageReportsItsOwnErrors) {
  auto stage_of = [](const CompileRequest& r) {
    try {
      compile(r);
    } catch (const CompileError& e) {
      return e.stage();
    }
    ADD_FAILURE() << "no error";
    return ErrorStage::Output;
  };
  CompileRequest bad_knob = request(CompileOutput::Kernel);
  bad_knob.overrides = {{"S", 5}};
  EXPECT_EQ(stage_of(bad_knob), ErrorStage::Validate);

  CompileRequest bad_loop{.func = parse_one(with_schedule(kScale, "c.split(j, 4, jo, ji);"))};
  EXPECT_EQ(stage_of(bad_loop), ErrorStage::Schedule);

  CompileRequest bad_pass = request(CompileOutput::Loops);
  bad_pass.options.passes.disabled = {"no_such_pass"};
  EXPECT_EQ(stage_of(bad_pass), ErrorStage::Passes);

  CompileRequest foreign_jit = request(CompileOutput::Kernel);
  foreign_jit.options.target = Target{
      Target::host().triple.starts_with("aarch64") ? "x86_64-linux-gnu" : "aarch64-linux-gnu", "",
      ""};
  EXPECT_EQ(stage_of(foreign_jit), ErrorStage::Codegen);
}

// The polyhedral work of a compilation is bounded: past max_isl_operations
// isl stops, and the error names the limit; the same request with the
// default limits compiles, and the limits are not part of the key.
TEST(Compile, IslWorkStopsAtTheLimitWithAClearError) {
  CompileRequest r = request(CompileOutput::Loops, nullptr);
  r.func = parse_one(read_example("matmul"));
  CompileResult full = compile(r);
  for (uint64_t ops : {uint64_t{2000}, uint64_t{20000}}) {
    CompileRequest tight = r;
    tight.options.limits.max_isl_operations = ops;
    EXPECT_EQ(cache_key(tight), full.key);
    try {
      compile(tight);
      ADD_FAILURE() << "compiled within " << ops << " isl operations";
    } catch (const CompileError& e) {
      EXPECT_TRUE(e.stage() == ErrorStage::Schedule || e.stage() == ErrorStage::Lower) << e.what();
      EXPECT_NE(std::string(e.what()).find("isl needs more than " + std::to_string(ops) +
                                           " operations to "),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("(max_isl_operations, docs/limits.md)"),
                std::string::npos)
          << e.what();
    }
  }
}

// A stage stops at its first step that ends past max_stage_ms: with a limit
// of 0 ms, the schedule stage right after building the model, and the pass
// pipeline after its first pass. The limit is not part of the key.
TEST(Compile, AStageStopsAtItsWallTimeLimit) {
  CompileRequest r = request(CompileOutput::Kernel);
  r.options.limits.max_stage_ms = 0;
  EXPECT_EQ(cache_key(r), cache_key(request(CompileOutput::Kernel)));
  try {
    compile(r);
    ADD_FAILURE() << "compiled within 0 ms";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Schedule);
    EXPECT_EQ(e.loc().line, 1);
    EXPECT_TRUE(e.message().starts_with(
        "the schedule stage ran past its limit of 0 ms (max_stage_ms, docs/limits.md), after "
        "building the model of scale ("))
        << e.message();
  }
  CompileResult loops = compile(request(CompileOutput::Loops));
  CompileOptions o;
  o.limits.max_stage_ms = 0;
  try {
    passes::run_pipeline(loops.lowered, pass_context(o));
    ADD_FAILURE() << "ran the passes within 0 ms";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Passes);
    EXPECT_TRUE(e.message().starts_with(
        "the passes stage ran past its limit of 0 ms (max_stage_ms, docs/limits.md), after pass "
        "simplify on scale ("))
        << e.message();
  }
  // A negative limit is none.
  r.options.limits.max_stage_ms = -1;
  EXPECT_TRUE(compile(r).kernel.has_value());
}

// A request's deadline (Limits::deadline, kilnd's) stops the pipeline before
// a stage that would start past it, and the pass pipeline between passes; the
// error is a DeadlineExceeded, which kilnd answers DEADLINE_EXCEEDED.
TEST(Compile, APassedDeadlineStopsThePipeline) {
  CompileRequest r = request(CompileOutput::Kernel);
  r.options.limits.deadline = std::chrono::steady_clock::now();
  EXPECT_EQ(cache_key(r), cache_key(request(CompileOutput::Kernel)));
  try {
    compile(r);
    ADD_FAILURE() << "compiled past the deadline";
  } catch (const DeadlineExceeded& e) {
    EXPECT_EQ(e.message(), "the request's deadline passed before the overrides stage of scale");
  }
  CompileOptions o;
  o.limits.deadline = std::chrono::steady_clock::now();
  try {
    passes::run_pipeline(compile(request(CompileOutput::Loops)).lowered, pass_context(o));
    ADD_FAILURE() << "ran the passes past the deadline";
  } catch (const DeadlineExceeded& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Passes);
    EXPECT_EQ(e.message(),
              "the request's deadline passed during the passes stage, after pass simplify on "
              "scale");
  }
}

// A loop tagged vectorize whose body kiln cannot vectorize (it holds a loop)
// is left to LLVM with a hint, and LLVM cannot vectorize an outer loop: it
// says so as a note of the result, naming the kernel and the loop, in every
// output that runs LLVM's optimizer, and nothing reaches stderr.
TEST(Compile, WhatLlvmSaysAboutAKernelIsANoteOfTheResult) {
  const char* program = R"(func tri {
  param N = 64;
  input a : f32[N, N];
  output y : f32[N, N];
  compute c(i, j) in 0 <= i < N, 0 <= j <= i: y[i, j] = a[i, j] / a[j, i];
  schedule { c.tag(i, vectorize); }
})";
  const std::string note =
      "tri, loop 'i': loop not vectorized: the optimizer was unable to perform the requested "
      "transformation; the transformation might be disabled or specified as part of an "
      "unsupported transformation ordering (LLVM)";
  for (CompileOutput output : {CompileOutput::LlvmIr, CompileOutput::Assembly,
                               CompileOutput::Kernel, CompileOutput::Artifact}) {
    SCOPED_TRACE(compile_output_name(output));
    ::testing::internal::CaptureStderr();
    CompileResult r = compile(request(output, program));
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_EQ(r.notes, std::vector<std::string>{note});
  }
  // Without the hint LLVM has nothing to say.
  CompileRequest plain = request(CompileOutput::Kernel, program);
  plain.func.schedule.clear();
  EXPECT_EQ(compile(plain).notes, std::vector<std::string>{});
}

// kilnd compiles on several workers at once: compilations in parallel give
// what they give one at a time (isl contexts, LLVM contexts and the linker
// are per compilation or locked).
TEST(Compile, CompilationsInParallelGiveWhatTheyGiveAlone) {
  std::vector<CompileRequest> requests;
  for (int64_t s : {4, 8, 16}) {
    for (const char* triple : {"x86_64-linux-gnu", "aarch64-linux-gnu"}) {
      CompileRequest r = request(CompileOutput::Artifact);
      r.overrides = {{"S", s}};
      r.options.target = Target{triple, "", ""};
      requests.push_back(r);
    }
  }
  std::vector<codegen::Artifact> alone;
  for (const CompileRequest& r : requests) alone.push_back(*compile(r).artifact);
  std::vector<codegen::Artifact> together(requests.size());
  std::vector<std::string> errors(requests.size());
  std::vector<std::thread> workers;
  for (size_t k = 0; k < requests.size(); ++k) {
    workers.emplace_back([&, k] {
      try {
        together[k] = *compile(requests[k]).artifact;
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (size_t k = 0; k < requests.size(); ++k) {
    EXPECT_EQ(errors[k], "") << k;
    EXPECT_EQ(together[k].key, alone[k].key) << k;
    EXPECT_EQ(together[k].code, alone[k].code) << k;
  }
}

// ---------------------------------------------------------------------------
// The cache key

TEST(CacheKey, IsKnownBeforeCompilingAndIsTheResultsKey) {
  CompileRequest r = request(CompileOutput::Artifact);
  std::string key = cache_key(r);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  EXPECT_EQ(compile(r).key, key);
}

TEST(CacheKey, EqualRequestsHaveEqualKeys) {
  EXPECT_EQ(cache_key(request(CompileOutput::Kernel)), cache_key(request(CompileOutput::Kernel)));
  // The canonical text, not the file's spelling: spacing and comments do not count.
  std::string spaced = kScale;
  spaced.insert(spaced.find("input"), "// a comment\n\n   ");
  EXPECT_EQ(cache_key(request(CompileOutput::Kernel)),
            cache_key(request(CompileOutput::Kernel, spaced.c_str())));
  // An override given to compile and one applied beforehand are the same request.
  CompileRequest given = request(CompileOutput::Kernel);
  given.overrides = {{"S", 4}};
  CompileRequest applied{.func = ir::apply_overrides(parse_one(kScale), {{"S", 4}})};
  EXPECT_EQ(cache_key(given), cache_key(applied));
  // What only watches the compilation is not part of the key.
  CompileRequest watched = request(CompileOutput::Kernel);
  watched.options.instrument = [](const passes::PassEvent&) {};
  EXPECT_EQ(cache_key(watched), cache_key(request(CompileOutput::Kernel)));
}

TEST(CacheKey, DiffersWhenAnyInputDiffers) {
  using Change = std::function<void(CompileRequest&)>;
  std::vector<std::pair<std::string, Change>> changes = {
      {"knob value",
       [](CompileRequest& r) {
         r.overrides = {{"S", 16}};
       }},
      {"param value",
       [](CompileRequest& r) {
         r.overrides = {{"N", 65}};
       }},
      {"algorithm",
       [](CompileRequest& r) {
         r.func = parse_one(std::string(kScale).replace(std::string(kScale).find("2.0"), 3, "3.0"));
       }},
      {"schedule", [](CompileRequest& r) { r.func.schedule.clear(); }},
      {"func name", [](CompileRequest& r) { r.func.name = "scale2"; }},
      {"fast math", [](CompileRequest& r) { r.func.fast_math = true; }},
      {"triple", [](CompileRequest& r) { r.options.target.triple = "aarch64-linux-gnu"; }},
      {"cpu", [](CompileRequest& r) { r.options.target.cpu = "x86-64-v2"; }},
      {"features", [](CompileRequest& r) { r.options.target.features += ",-avx2"; }},
      {"opt level", [](CompileRequest& r) { r.options.opt_level = 2; }},
      {"no schedule", [](CompileRequest& r) { r.options.apply_schedule = false; }},
      {"required pass", [](CompileRequest& r) { r.options.passes.required = {"simplify"}; }},
      {"disabled pass", [](CompileRequest& r) { r.options.passes.disabled = {"licm"}; }},
      {"licm options",
       [](CompileRequest& r) {
         passes::LicmOptions o;
         o.cost_div = 4;
         r.options.passes.licm = o;
       }},
      {"cse options",
       [](CompileRequest& r) {
         passes::CseOptions o;
         o.min_uses = 3;
         r.options.passes.cse = o;
       }},
      {"cse commutativity",
       [](CompileRequest& r) {
         passes::CseOptions o;
         o.commutative = false;
         r.options.passes.cse = o;
       }},
      {"output", [](CompileRequest& r) { r.output = CompileOutput::Artifact; }},
  };
  std::string base = cache_key(request(CompileOutput::Kernel));
  std::set<std::string> seen{base};
  for (const auto& [what, change] : changes) {
    CompileRequest r = request(CompileOutput::Kernel);
    change(r);
    std::string key = cache_key(r);
    EXPECT_NE(key, base) << what;
    EXPECT_TRUE(seen.insert(key).second) << what << " collides with another change";
  }
}

TEST(CacheKey, NamesTheCompilerVersion) {
  std::string v = compiler_version();
  EXPECT_NE(v.find("kiln "), std::string::npos) << v;
  EXPECT_NE(v.find("LLVM "), std::string::npos) << v;
  // The isl the process calls, which generates the loop nests.
  EXPECT_NE(v.find(", isl-"), std::string::npos) << v;
  EXPECT_EQ(v.find('\n'), std::string::npos) << v;
}

}  // namespace
}  // namespace kiln::testing
