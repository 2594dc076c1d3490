// What code is generated for: a triple, a CPU and its features. Data, never a
// global: the host is one value of it (Target::host(), in the codegen library).
#pragma once

#include <string>
#include <string_view>

namespace kiln {

struct Target {
  std::string triple;    // "x86_64-linux-gnu", "aarch64-linux-gnu", "nvptx64-nvidia-cuda"
  std::string cpu;       // "skylake-avx512", "neoverse-n1", "sm_90"; "" = the triple's generic CPU
  std::string features;  // "+avx2,+fma"; "" = the CPU's own

  // This machine: its triple, CPU name and features (asks LLVM; defined in kiln_codegen).
  static Target host();

  // The target a command line or a request names, "" meaning not given: a
  // triple gives the whole target (its generic CPU unless one is given);
  // without one it is this machine's, with its CPU replaced (and then that
  // CPU's own features, unless given) or with features added to its own.
  static Target named(std::string_view triple, std::string_view cpu, std::string_view features);

  // Whether the code runs on a GPU: cost models differ (DESIGN.md section 4).
  bool is_gpu() const { return triple.starts_with("nvptx"); }

  friend bool operator==(const Target&, const Target&) = default;
};

}  // namespace kiln
