// CPU code generation: loop IR to LLVM IR, optimized for a target CPU, run
// in-process through ORC's LLJIT. No LLVM type appears in this header.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/artifact.h"
#include "kiln/buffers.h"
#include "kiln/loop_ir.h"
#include "kiln/runtime.h"
#include "kiln/target.h"

namespace kiln::codegen {

using kiln::Target;

// How LLVM compiles. Whether float arithmetic may be reassociated is the
// func's own `option fast_math` (LoweredFunc::fast_math), decided nowhere else.
struct Options {
  Target target = Target::host();
  int opt_level = 3;  // 0..3: LLVM's O0..O3 pipeline
  // Receives LLVM's warnings about the kernel, and the remarks it always
  // shows (a loop tagged vectorize or unroll that it could not transform), as
  // "FUNC, loop 'L': what LLVM said"; without it they are dropped. They never
  // go to stderr. An error from LLVM is a CompileError (stage "codegen").
  std::function<void(const std::string&)> note{};
  // Runs every pass of LLVM's pipeline, even those kiln leaves out of code it
  // vectorized itself because they change nothing there (for the tests that
  // check they do not).
  bool every_llvm_pass = false;
};

// The symbol every kernel is entered through, with kiln's packed-argument ABI
// (runtime/include/kiln/runtime.h): int32_t NAME(const kiln_value* args, int32_t nargs),
// args = run-time params (i64) in order, then one pointer per buffer argument.
std::string entry_symbol(const ir::LoweredFunc& f);

// The LLVM IR of f, after the optimization pipeline (`kiln emit --stage llvm`).
std::string emit_llvm(const ir::LoweredFunc& f, const Options& opts = {});
// The target's assembly for f (`kiln emit --stage asm`).
std::string emit_asm(const ir::LoweredFunc& f, const Options& opts = {});
// A relocatable object file for f, for any target LLVM was built with.
std::vector<char> emit_object(const ir::LoweredFunc& f, const Options& opts = {});

// The packed arguments of f's entry point for the params and buffers of `b`:
// run-time params (i64) in order, then one pointer per buffer argument,
// pointing into b's buffers. Throws CompileError (stage "codegen") for a
// missing param or buffer, or a buffer whose shape or type is not f's.
std::vector<kiln_value> pack_arguments(const ir::LoweredFunc& f, Bindings& b);

// A kernel compiled into this process. Its code is freed when the last copy
// of the handle goes away.
class Kernel {
 public:
  // Calls the entry point with packed arguments; returns its status (0 = ok).
  int32_t call(const void* args, int32_t nargs) const;
  // Calls it with pack_arguments(func(), b); a status other than 0 is a CompileError.
  void run(Bindings& b) const;
  const ir::LoweredFunc& func() const;

  struct State;
  explicit Kernel(std::shared_ptr<const State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<const State> state_;
};

// Compiles f for the host with LLVM's ORC LLJIT. One JIT engine serves every
// compilation in the process. Throws CompileError (stage "codegen") when f
// uses something the CPU backend cannot generate.
Kernel jit_compile(const ir::LoweredFunc& f, const Options& opts = {});

// ---------------------------------------------------------------------------
// Shared objects and artifacts: code for any target, to be loaded elsewhere.

// A position-independent shared object holding f's entry point, for
// opts.target (any triple LLVM was built with: x86_64-linux-gnu,
// aarch64-linux-gnu, ...), linked in-process with lld. It needs no library:
// it has no DT_NEEDED entry, and its only undefined symbols are the
// runtime's (kiln_parallel_launch, kiln_alloc, kiln_free) and, for a kernel
// whose math intrinsics LLVM turns into calls, libm's (expf, logf, ...),
// which shared_object_imports lists. Throws CompileError (stage "link")
// when lld fails or the result would need anything else.
std::vector<char> compile_shared_object(const ir::LoweredFunc& f, const Options& opts = {});

// A whole model's shared object (kiln/graph.h, graph::compile_model): the kernels, each under
// entry_symbol(f) (their names must differ), and two symbols its loader (kiln_model_open in
// runtime/include/kiln/runtime.h) reads: `kiln_model_plan`, the text `plan` and a NUL, and
// `kiln_model_kernels`, the kernels' entry points in order. Imports what compile_shared_object
// allows, nothing more; throws CompileError as it does.
std::vector<char> compile_model_shared_object(const std::vector<ir::LoweredFunc>& kernels,
                                              const std::string& name, const std::string& plan,
                                              const Options& opts = {});

// The undefined symbols of a shared object made by compile_shared_object,
// sorted: what whoever loads it must provide.
std::vector<std::string> shared_object_imports(const std::vector<char>& so);

// Compiles f to a shared object for opts.target and describes it; `key` is
// the cache key of the request it answers (kiln::compile sets it).
Artifact compile_artifact(const ir::LoweredFunc& f, const Options& opts, std::string key);

// Throws CompileError (stage Codegen) unless kiln generates code for t: an
// x86-64 or aarch64 Linux triple LLVM knows, a CPU LLVM knows for it (or
// none), and features LLVM knows, none of which takes x86-64 out of 64-bit
// mode. Every code generation checks this before LLVM sees the target.
void check_target(const Target& t);

// Whether t has a CPU feature (LLVM's name: avx2, avx512f, fma, neon, sve, ...):
// as its feature list says (+NAME or -NAME, the last word), else as its CPU
// has it (LLVM's CPU tables; "generic" has only the architecture's base). A
// feature only the other architecture knows is false; one neither x86-64 nor
// aarch64 knows is a CompileError. t must be a target check_target accepts.
bool target_has_feature(const Target& t, const std::string& feature);

// What knob defaults read of t (ir::apply_target_defaults): its features, its widest vector
// register and their count (AVX-512: 64 bytes, 32; AVX: 32, 16; SSE: 16, 16; aarch64's
// NEON: 16, 32), and the caches it names (those that are 0 are not known).
ir::TargetFacts target_facts(const Target& t);

// The code generator and its version ("LLVM 19.1.7"): part of every cache key.
std::string backend_version();

}  // namespace kiln::codegen
