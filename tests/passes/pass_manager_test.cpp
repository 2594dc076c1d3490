// The PassManager: which passes run at each opt level, required and disabled passes,
// unknown names, and what --print-after and --time-passes write.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <regex>
#include <sstream>

#include "kiln/error.h"
#include "kiln/loop_ir.h"
#include "kiln/passes.h"

namespace kiln::passes {
namespace {

using ir::Expr;

ir::LoweredFunc tiled_copy() {
  Expr idx = ir::int_imm(4) * ir::var("io") + ir::var("ii");
  ir::Stmt store = std::make_shared<ir::Store>(
      "B", std::vector<Expr>{idx},
      ir::load("A", {ir::binary(ir::BinaryOp::Div, idx, ir::int_imm(4))}, ir::DType::F32));
  auto inner =
      std::make_shared<ir::For>("ii", ir::int_imm(0), ir::int_imm(4), 1, ir::LoopTag::None, store);
  ir::LoweredFunc f;
  f.name = "copy";
  f.body =
      std::make_shared<ir::For>("io", ir::int_imm(0), ir::int_imm(2), 1, ir::LoopTag::None, inner);
  return f;
}

const char* kSimplified =
    "for (io = 0; io < 2; io += 1) {\n"
    "  for (ii = 0; ii < 4; ii += 1) {\n"
    "    B[4 * io + ii] = A[io];\n"
    "  }\n"
    "}\n";

PassContext at(int level) {
  PassContext ctx;
  ctx.opt_level = level;
  return ctx;
}

TEST(PassManager, RegistryListsSimplify) {
  ASSERT_FALSE(registry().empty());
  EXPECT_EQ(registry().front().name, "simplify");
  EXPECT_EQ(registry().front().opt_level, 1);
}

TEST(PassManager, O0RunsNothing) {
  EXPECT_TRUE(pipeline(at(0)).empty());
  ir::LoweredFunc f = tiled_copy();
  EXPECT_EQ(run_pipeline(f, at(0)).body, f.body);
}

TEST(PassManager, O1AndAboveSimplify) {
  for (int level : {1, 2, 3}) {
    std::vector<std::string> p = pipeline(at(level));
    ASSERT_FALSE(p.empty());
    EXPECT_EQ(p.front(), "simplify");
  }
  EXPECT_EQ(pipeline(at(1)), std::vector<std::string>{"simplify"});
  EXPECT_EQ(pipeline(at(2)), (std::vector<std::string>{"simplify", "licm", "cse"}));
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), at(1)).body), kSimplified);
  // At -O2 LICM normalizes the index but leaves the outer loop's part of it in
  // the 4-iteration loop, which LLVM unrolls completely (LicmOptions::
  // unrolled_serial_loops); on a GPU target it is left there too.
  const char* normalized =
      "for (io = 0; io < 2; io += 1) {\n  for (ii = 0; ii < 4; ii += 1) {\n"
      "    B[io * 4 + ii] = A[io];\n  }\n}\n";
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), at(2)).body), normalized);
  PassContext gpu = at(2);
  gpu.target = Target{"nvptx64-nvidia-cuda", "sm_90", ""};
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), gpu).body), normalized);
}

TEST(PassManager, RequiredRunsAtO0) {
  PassContext ctx = at(0);
  ctx.options.required = {"simplify"};
  EXPECT_EQ(pipeline(ctx), std::vector<std::string>{"simplify"});
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), ctx).body), kSimplified);
}

TEST(PassManager, DisabledWinsOverRequired) {
  PassContext ctx = at(3);
  ctx.options.required = {"simplify"};
  ctx.options.disabled = {"simplify"};
  for (const std::string& name : pipeline(ctx)) EXPECT_NE(name, "simplify");
  ir::LoweredFunc f = tiled_copy();
  std::vector<std::string> rest = pipeline(ctx);
  ctx.options.disabled.insert(rest.begin(), rest.end());
  EXPECT_EQ(run_pipeline(f, ctx).body, f.body);
}

TEST(PassManager, UnknownNamesAreCompileErrors) {
  auto expect_error = [](const std::function<void()>& fn) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const CompileError& e) {
      EXPECT_EQ(e.stage(), ErrorStage::Passes);
      EXPECT_NE(e.message().find("no_such_pass"), std::string::npos) << e.message();
    }
  };
  for (auto field : {&PassOptions::required, &PassOptions::disabled}) {
    PassContext ctx;
    (ctx.options.*field).insert("no_such_pass");
    expect_error([&] { run_pipeline(tiled_copy(), ctx); });
  }
  std::ostringstream log;
  expect_error([&] { print_and_time({"no_such_pass"}, false, log); });
}

TEST(PassManager, PrintAfterWritesTheIrAfterThePass) {
  std::ostringstream log;
  PassContext ctx = at(1);
  ctx.instrument = print_and_time({"simplify"}, false, log);
  run_pipeline(tiled_copy(), ctx);
  EXPECT_EQ(log.str(), std::string("// after simplify\n") + kSimplified);
}

TEST(PassManager, PrintAfterAllPrintsEveryPass) {
  std::ostringstream log;
  PassContext ctx = at(3);
  ctx.instrument = print_and_time({"all"}, false, log);
  run_pipeline(tiled_copy(), ctx);
  for (const std::string& name : pipeline(ctx)) {
    EXPECT_NE(log.str().find("// after " + name + "\n"), std::string::npos) << name;
  }
}

TEST(PassManager, TimePassesWritesOneLinePerPass) {
  std::ostringstream log;
  PassContext ctx = at(3);
  ctx.instrument = print_and_time({}, true, log);
  run_pipeline(tiled_copy(), ctx);
  std::istringstream lines(log.str());
  std::string line;
  size_t n = 0;
  while (std::getline(lines, line)) {
    EXPECT_TRUE(std::regex_match(line, std::regex(R"(pass [a-z_]+: [0-9]+\.[0-9]{2} ms)"))) << line;
    ++n;
  }
  EXPECT_EQ(n, pipeline(ctx).size());
}

TEST(PassManager, TheInstrumentSeesEveryPassAndItsIr) {
  PassContext ctx = at(3);
  std::vector<std::string> seen;
  ctx.instrument = [&](const PassEvent& e) {
    ASSERT_NE(e.func, nullptr);
    EXPECT_EQ(e.graph, nullptr);
    EXPECT_GE(e.ms, 0);
    seen.emplace_back(e.pass);
  };
  ir::LoweredFunc out = run_pipeline(tiled_copy(), ctx);
  EXPECT_EQ(seen, pipeline(ctx));
}

// Every variable must be bound where it is used, before the pipeline and after
// every pass: an unbound one is an error naming where it came from, never code.
TEST(PassManager, AVariableNothingBindsIsAnError) {
  ir::LoweredFunc f = tiled_copy();
  f.body = std::make_shared<ir::For>("io", ir::int_imm(0), ir::var("q"), 1, ir::LoopTag::None,
                                     std::make_shared<ir::Evaluate>(ir::var("io")));
  try {
    run_pipeline(f, at(0));
    ADD_FAILURE() << "accepted";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Passes);
    EXPECT_EQ(e.message(), "the loops of copy use 'q' where nothing binds it");
  }
  f.params = {"q"};
  EXPECT_NO_THROW(run_pipeline(f, at(3)));
}

TEST(PassManager, NoInstrumentMeansSilence) {
  PassContext ctx = at(3);
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), ctx).body).empty(), false);
}

TEST(PassManager, LicmAndCseOptionsComeFromTheTargetUnlessGiven) {
  PassContext cpu = at(2), gpu = at(2);
  gpu.target = Target{"nvptx64-nvidia-cuda", "sm_90", ""};
  EXPECT_FALSE(cpu.licm().gpu);
  EXPECT_TRUE(cpu.licm().unrolled_serial_loops);
  EXPECT_GT(cpu.cse().small_loop, 0);
  EXPECT_TRUE(gpu.licm().gpu);
  EXPECT_FALSE(gpu.licm().unrolled_serial_loops);
  EXPECT_EQ(gpu.cse().small_loop, 0);
  LicmOptions tuned;
  tuned.threshold = 5;
  cpu.options.licm = tuned;
  EXPECT_EQ(cpu.licm(), tuned);
  // Options given win over the target's: without unrolled_serial_loops, LICM
  // takes the outer loop's part of the index out of the 4-iteration loop,
  // which the CPU default leaves inside (O1AndAboveSimplify).
  cpu.options.licm = LicmOptions{};
  cpu.options.disabled = {"cse"};
  std::string hoisted = ir::to_string(run_pipeline(tiled_copy(), cpu).body);
  EXPECT_NE(hoisted.find("io * 4"), std::string::npos) << hoisted;
  EXPECT_EQ(hoisted.find("B[io * 4 + ii]"), std::string::npos) << hoisted;
}

}  // namespace
}  // namespace kiln::passes
