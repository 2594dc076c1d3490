// The PassManager: which passes run at each opt level, required and disabled passes,
// unknown names, and what --print-after and --time-passes write.
#include <gtest/gtest.h>

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
  gpu.target_kind = "gpu";
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), gpu).body), normalized);
}

TEST(PassManager, RequiredRunsAtO0) {
  PassContext ctx = at(0);
  ctx.required = {"simplify"};
  EXPECT_EQ(pipeline(ctx), std::vector<std::string>{"simplify"});
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), ctx).body), kSimplified);
}

TEST(PassManager, DisabledWinsOverRequired) {
  PassContext ctx = at(3);
  ctx.required = {"simplify"};
  ctx.disabled = {"simplify"};
  for (const std::string& name : pipeline(ctx)) EXPECT_NE(name, "simplify");
  ir::LoweredFunc f = tiled_copy();
  std::vector<std::string> rest = pipeline(ctx);
  ctx.disabled.insert(rest.begin(), rest.end());
  EXPECT_EQ(run_pipeline(f, ctx).body, f.body);
}

TEST(PassManager, UnknownNamesAreCompileErrors) {
  for (auto field : {&PassContext::required, &PassContext::disabled, &PassContext::print_after}) {
    PassContext ctx;
    (ctx.*field).insert("no_such_pass");
    try {
      run_pipeline(tiled_copy(), ctx);
      ADD_FAILURE() << "no error";
    } catch (const CompileError& e) {
      EXPECT_EQ(e.stage(), "passes");
      EXPECT_NE(e.message().find("no_such_pass"), std::string::npos) << e.message();
    }
  }
}

TEST(PassManager, PrintAfterWritesTheIrAfterThePass) {
  std::ostringstream log;
  PassContext ctx = at(1);
  ctx.print_after = {"simplify"};
  ctx.log = &log;
  run_pipeline(tiled_copy(), ctx);
  EXPECT_EQ(log.str(), std::string("// after simplify\n") + kSimplified);
}

TEST(PassManager, PrintAfterAllPrintsEveryPass) {
  std::ostringstream log;
  PassContext ctx = at(3);
  ctx.print_after = {"all"};
  ctx.log = &log;
  run_pipeline(tiled_copy(), ctx);
  for (const std::string& name : pipeline(ctx)) {
    EXPECT_NE(log.str().find("// after " + name + "\n"), std::string::npos) << name;
  }
}

TEST(PassManager, TimePassesWritesOneLinePerPass) {
  std::ostringstream log;
  PassContext ctx = at(3);
  ctx.time_passes = true;
  ctx.log = &log;
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

TEST(PassManager, NoLogMeansSilence) {
  PassContext ctx = at(3);
  ctx.time_passes = true;
  ctx.print_after = {"all"};
  EXPECT_EQ(ir::to_string(run_pipeline(tiled_copy(), ctx).body).empty(), false);
}

}  // namespace
}  // namespace kiln::passes
