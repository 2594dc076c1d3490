// What code is generated for: a triple, a CPU and its features. Data, never a
// global: the host is one value of it (Target::host(), in the codegen library).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

struct Target {
  std::string triple;    // "x86_64-linux-gnu", "aarch64-linux-gnu", "nvptx64-nvidia-cuda"
  std::string cpu;       // "skylake-avx512", "neoverse-n1", "sm_90"; "" = the triple's generic CPU
  std::string features;  // "+avx2,+fma"; "" = the CPU's own
  // The caches a core of the machine sees, in bytes (0: not known): its L1 data cache, its L2,
  // and the L3 it shares with others. Knob defaults that fit blocks to caches (`fit`, see
  // docs/language.md) read them; the host reads its own, an agent reports its machine's.
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;

  // This machine: its triple, CPU name and features (asks LLVM; defined in kiln_codegen), and
  // its caches (host_caches).
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

// The caches of the CPU this process runs on, as Linux describes them in
// /sys/devices/system/cpu/cpu0/cache (0 for a level it does not describe).
void host_caches(Target& t);

// Reads a cache size as Linux and `--caches` write it: "48K", "1024K", "32M", "65536".
// nullopt for anything else.
std::optional<int64_t> parse_cache_size(std::string_view text);

}  // namespace kiln
