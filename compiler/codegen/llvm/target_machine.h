// Target choice and the optimization pipeline: a kiln Target becomes an LLVM TargetMachine.
#pragma once

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "kiln/codegen.h"

namespace kiln::codegen {

// Registers LLVM's targets once per process and sets kiln's choices among
// LLVM's process-wide options (which code-generation passes run).
void initialize_llvm();

// LLVM's options are process-wide, and lld, linking in this process, resets
// every one of them to LLVM's default. Code generation holds this shared lock
// while it reads them (from building its pass pipeline to the last pass), so
// that it never sees a link's reset; with_llvm_options_reset runs a link
// under the exclusive lock and sets kiln's options again before it returns.
std::shared_lock<std::shared_mutex> llvm_options_in_use();
void with_llvm_options_reset(const std::function<void()>& run);

// t's features as LLVM is given them: on x86-64, a feature string that turns
// on an AVX-512 feature and says nothing of evex512 gains +evex512, as clang's
// -mavx512f does; without it LLVM 18 and later keep to 256-bit vectors on a
// CPU that does not imply it (x86-64-v2 +avx512f gave ymm code).
std::string llvm_features(const Target& t);

// The TargetMachine for t (position-independent code). Throws CompileError
// (stage "codegen") for a triple LLVM does not know.
std::unique_ptr<llvm::TargetMachine> make_target_machine(const Target& t, int opt_level);

// Sets m's triple and data layout for tm and runs LLVM's O<opt_level>
// pipeline on it, less the passes that change nothing in code kiln vectorized
// (on x86-64) unless every_pass.
void optimize(llvm::Module& m, llvm::TargetMachine& tm, int opt_level, bool every_pass);

// What every output of the backend starts from: f's module (build_module),
// optimized for opts.target, and the TargetMachine it was optimized for.
// optimized_module installs a diagnostic handler on the context: LLVM's
// warnings and always-shown remarks go to Options::note, and its first error
// is kept for check_llvm_errors (LLVM's own handler would print it and exit).
struct OptimizedModule {
  std::unique_ptr<llvm::Module> module;
  std::unique_ptr<llvm::TargetMachine> machine;
  std::shared_ptr<std::string> llvm_error;  // the first error LLVM reported, or empty
};
// Freestanding: the module may call no C library function of LLVM's own
// accord ("no-builtins" keeps loops from becoming memset and memcpy calls),
// for code loaded where there is no libc.
enum class Builtins : uint8_t { Allowed, Freestanding };
OptimizedModule optimized_module(const ir::LoweredFunc& f, const Options& opts,
                                 llvm::LLVMContext& ctx, Builtins builtins = Builtins::Allowed);

// Throws CompileError (stage "codegen") with the first error LLVM reported
// about m's module, if any. Called after each LLVM stage that may report one.
void check_llvm_errors(const OptimizedModule& m);

// The assembly or object file of an optimized module. Throws CompileError
// (stage Codegen) when the target cannot emit that kind of file.
std::vector<char> machine_code(OptimizedModule& m, llvm::CodeGenFileType type);

}  // namespace kiln::codegen
