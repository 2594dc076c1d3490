// The faulting kernel of GpuRun.AFaultingKernelIsSurvived (cuda_test.cpp), run in a process of
// its own: a fault leaves CUDA unusable in the process that had it. Prints what the run reported
// and exits 0 when it reported a CUDA error, 1 when it did not, 2 when it could not run.
#include <cstdio>
#include <string>

#include "kiln/cuda.h"
#include "kiln/error.h"

int main() {
  using namespace kiln;
  cuda::Program bad;
  bad.name = "bad";
  bad.source =
      "extern \"C\" __global__ void bad_k0(int* kiln_status) {\n"
      "  *(volatile int*)(0x10) = 1;\n"
      "}\n";
  bad.launches.push_back(
      {"bad_k0", {ir::int_imm(1), ir::int_imm(1), ir::int_imm(1)}, {1, 1, 1}, 0});
  try {
    cuda::Device gpu;
    cuda::Binary bin = cuda::compile(bad, gpu.arch());
    Bindings none;
    try {
      gpu.run(bad, bin, none);
    } catch (const CompileError& e) {
      std::printf("fault reported: %s\n", e.what());
      return std::string(e.what()).find("CUDA_ERROR_") != std::string::npos ? 0 : 1;
    }
    std::printf("no error\n");
    return 1;
  } catch (const CompileError& e) {
    std::printf("cannot run: %s\n", e.what());
    return 2;
  }
}
