// Helpers shared by the GPU tests: a func compiled to CUDA for sm_90, the refusal of one, and a
// GPU compilation's loops and kernels against the reference interpreter.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/interp.h"
#include "programs.h"

namespace kiln::testing {

// f compiled to CUDA for sm_90 at -O`opt`.
inline CompileRequest gpu_request(const ir::Func& f, int opt = 3) {
  CompileRequest r{.func = f};
  r.options.target = Target{cuda::kTriple, "sm_90", ""};
  r.options.opt_level = opt;
  r.output = CompileOutput::Cuda;
  return r;
}
inline CompileResult gpu_compile(const ir::Func& f, int opt = 3) {
  return compile(gpu_request(f, opt));
}
inline cuda::Program gpu_program(const ir::Func& f, int opt = 3) {
  return *gpu_compile(f, opt).cuda;
}

// Why the GPU backend refuses the program `text` (with `set`), or "(accepted)".
inline std::string gpu_compile_error(const std::string& text, const ir::Overrides& set = {}) {
  try {
    gpu_program(parse_one(text, set));
  } catch (const CompileError& e) {
    return e.what();
  }
  return "(accepted)";
}

// The loops of a GPU compilation of f, run by the loop interpreter (which ignores tags and runs
// GPU loops one iteration after another), against the reference on random inputs of `seed` (the
// run-time params `runtime`, else their defaults), within `within`: as kiln's passes leave them,
// and as the GPU lowering passes leave them for the printer.
struct GpuLoopsMismatch {
  interp::Mismatch optimized, gpu_lowered;
};
inline GpuLoopsMismatch gpu_loops_against_reference(
    const ir::Func& f, const CompileResult& r, uint64_t seed, interp::Tolerance within,
    const std::map<std::string, int64_t>& runtime = {}) {
  Bindings in = interp::random_bindings(f, interp::param_values(f, runtime), seed);
  Bindings expected = in;
  interp::run_reference(f, expected);
  GpuLoopsMismatch out;
  for (auto [loops, mismatch] :
       {std::pair{&r.optimized, &out.optimized}, std::pair{&r.gpu_lowered, &out.gpu_lowered}}) {
    Bindings actual = in;
    interp::run_loops(*loops, actual);
    *mismatch = interp::compare_outputs(f, expected, actual, within.rtol, within.atol);
  }
  return out;
}

// f's program p compiled for `gpu` and run on it, on random inputs of `seed`, against the
// reference at f's tolerance (interp::tolerance_of).
inline interp::Mismatch gpu_run_against_reference(cuda::Device& gpu, const ir::Func& f,
                                                  const cuda::Program& p, uint64_t seed) {
  cuda::Binary bin = cuda::compile(p, gpu.arch());
  Bindings in = interp::random_bindings(f, interp::param_values(f), seed);
  Bindings expected = in, actual = in;
  interp::run_reference(f, expected);
  gpu.run(p, bin, actual);
  return interp::compare_outputs(f, expected, actual);
}

}  // namespace kiln::testing
