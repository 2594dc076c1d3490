// What code is generated for: a triple, a CPU and its features. Data, never a
// global: the host is one value of it (Target::host(), in the codegen library).
#pragma once

#include <string>

namespace kiln {

struct Target {
  std::string triple;    // "x86_64-linux-gnu", "aarch64-linux-gnu", "nvptx64-nvidia-cuda"
  std::string cpu;       // "skylake-avx512", "neoverse-n1", "sm_90"; "" = the triple's generic CPU
  std::string features;  // "+avx2,+fma"; "" = the CPU's own

  // This machine: its triple, CPU name and features (asks LLVM; defined in kiln_codegen).
  static Target host();

  // Whether the code runs on a GPU: cost models differ (DESIGN.md section 4).
  bool is_gpu() const { return triple.starts_with("nvptx"); }

  friend bool operator==(const Target&, const Target&) = default;
};

}  // namespace kiln
