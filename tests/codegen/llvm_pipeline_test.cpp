// LLVM's pipeline for code kiln vectorized: the passes kiln leaves out of it
// (target_machine.cpp, kIdlePasses) change nothing in the machine code of any
// example, benchmark kernel or polybench kernel, at -O2 and -O3, for an
// AVX-512 and an AVX2 CPU. A new LLVM whose passes start to find work there
// fails this test, and the list needs measuring again.
#include <string>
#include <vector>

#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "programs.h"

namespace kiln::testing {
namespace {

struct Case {
  std::string file;  // from the source root
  ir::Overrides set;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* dir : {"examples", "tests/bench/kernels", "tests/data/polybench"})
    for (const std::string& f : kiln_files(dir)) out.push_back({f, {}});
  // The benchmark's first layer: 3 channels, 7 x 7 taps, stride 2.
  out.push_back({"tests/bench/kernels/conv2d.kiln",
                 {{"C", 3},
                  {"H", 224},
                  {"W", 224},
                  {"KH", 7},
                  {"KW", 7},
                  {"S", 2},
                  {"P", 3},
                  {"OH", 112},
                  {"OW", 112}}});
  return out;
}

// Every func of `c` after kiln's passes, for `target` at `opt`.
std::vector<ir::LoweredFunc> loops(const Case& c, const Target& target, int opt) {
  ir::Module m = frontend::parse_file(std::string(KILN_SOURCE_DIR) + "/" + c.file);
  std::vector<ir::LoweredFunc> out;
  for (const ir::Func& f : m.funcs) {
    CompileRequest r;
    r.func = f;
    r.overrides = c.set;
    r.options.target = target;
    r.options.opt_level = opt;
    r.output = CompileOutput::Loops;
    out.push_back(compile(r).optimized);
  }
  return out;
}

// Their x86-64 assembly, with LLVM's pipeline as kiln runs it or with every pass.
std::string assembly(const std::vector<ir::LoweredFunc>& funcs, const Target& target, int opt,
                     bool every_pass) {
  codegen::Options o;
  o.target = target;
  o.opt_level = opt;
  o.every_llvm_pass = every_pass;
  std::string out;
  for (const ir::LoweredFunc& f : funcs) out += codegen::emit_asm(f, o);
  return out;
}

TEST(IdlePasses, LeaveTheCodeAsItWas) {
  Target avx512{"x86_64-linux-gnu", "znver5", ""};
  Target avx2{"x86_64-linux-gnu", "haswell", ""};
  int vectorized = 0;
  for (const Case& c : cases()) {
    for (const Target& t : {avx512, avx2}) {
      for (int opt : {2, 3}) {
        SCOPED_TRACE(c.file + " for " + t.cpu + " at -O" + std::to_string(opt) +
                     (c.set.empty() ? "" : " (7x7 stride 2)"));
        std::vector<ir::LoweredFunc> funcs = loops(c, t, opt);
        std::string lean = assembly(funcs, t, opt, false);
        EXPECT_EQ(lean, assembly(funcs, t, opt, true));
        if (lean.find("vfmadd") != std::string::npos || lean.find("vmulps") != std::string::npos)
          ++vectorized;
      }
    }
  }
  // The comparison covers vector code (the passes are left out of it only).
  EXPECT_GT(vectorized, 20);
}

}  // namespace
}  // namespace kiln::testing
