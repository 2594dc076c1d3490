// A CUDA program of kiln's, run on the CPU: the printed source compiled by the host's C++
// compiler with host definitions of what it uses of CUDA, and each block's threads run as
// fibers that switch at __syncthreads() and __syncwarp(). It checks, on a machine with no GPU,
// what the loop interpreter cannot: that the printed kernels mean what the loops they print mean
// (the launches, which temporaries are shared and which are a thread's own, the distributed
// fills, vector copies, pipelined tiles and the barriers between them).
//
// Within a block the threads run one after another from one barrier to the next, in thread order
// or in reverse, so a read that a missing barrier leaves unordered after another thread's write
// sees the value either before or after it; shared memory starts each block filled with NaN
// bytes (0xff), so a read of a tile nobody filled shows. Blocks run one after another. Not
// emulated: the tensor cores (a program with mma nests is refused), memory faults, and the
// interleavings inside a stretch between barriers.
#pragma once

#include <string>

#include "kiln/buffers.h"
#include "kiln/cuda.h"
#include "kiln/interp.h"

namespace kiln::testing {

enum class ThreadOrder { Forward, Reverse };

class CudaEmulator {
 public:
  // Compiles p's source with the C++ compiler kiln was built with into a shared object in `dir`
  // (removed with the emulator, unless KILN_EMULATOR_KEEP is set in the environment).
  // Throws CompileError (stage Codegen) for a program it does not emulate or a source the
  // compiler refuses, with the compiler's output.
  CudaEmulator(const cuda::Program& p, const std::string& dir);
  ~CudaEmulator();
  CudaEmulator(const CudaEmulator&) = delete;
  CudaEmulator& operator=(const CudaEmulator&) = delete;

  // Runs the program's launches in order on b's buffers and params, as cuda::Device::run does:
  // its outputs written back, a failed check's status thrown as the CPU kernels' callers do (a
  // CompileError of stage Run), and so is a block whose threads wait at barriers that can never
  // all be reached.
  void run(Bindings& b, ThreadOrder order = ThreadOrder::Forward);

 private:
  const cuda::Program p_;
  std::string base_;  // its files: base_.cpp, .so and .log, removed with it
  void* handle_ = nullptr;
};

// f's program p emulated, its threads in `order`, on random inputs of `seed` (the run-time params
// `runtime`, else their defaults), against the reference at f's tolerance.
interp::Mismatch emulated_against_reference(const ir::Func& f, const cuda::Program& p,
                                            uint64_t seed, ThreadOrder order,
                                            const std::map<std::string, int64_t>& runtime = {});

}  // namespace kiln::testing
