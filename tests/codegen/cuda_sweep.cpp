// The CUDA kiln generates for every func of the tree's .kiln files (examples/, examples/gpu/,
// compiler/library/, tests/bench/kernels/, tests/bench/polybench/): under its own schedule and
// under each of its GPU sketches, at the knob defaults, at each knob value with the others at
// their defaults, and at points drawn with a fixed seed (30 for the GPU examples, 6 for each
// sketch); the launches and the source, or the error, of each. A developer's check, not a test:
// a change to the CUDA backend that should not change its output (a pass moved out of the
// printer) is run before and after, and the two outputs compared:
//
//   build/tests/codegen/cuda_sweep > before.txt     # on the old build
//   build/tests/codegen/cuda_sweep > after.txt      # on the new one
//   cmp before.txt after.txt
//
// About a minute on one core; no GPU and no NVRTC needed.
//
// A change that should leave the generated code as it was but not its text (a construct the
// printer wrote itself now printed from the loop IR) is compared by what NVRTC makes of it:
// with --ptx each point prints the digests of its CUDA and of its PTX for sm_90 (and the PTX's
// size) instead of the source. That takes NVRTC's time for each point (about 3.5 minutes for
// the whole sweep on one core of the development VM); --shard I/N takes every N-th func from
// the I-th (0-based), so that N processes share the cores:
//
//   build/tests/codegen/cuda_sweep --ptx --shard 0/2 > before0.txt &
//   build/tests/codegen/cuda_sweep --ptx --shard 1/2 > before1.txt
//
// NVRTC's PTX is not the same from run to run for every source: with NVRTC 13.0, two runs of
// one build gave different PTX for 2 to 8 of the 2067 points that compile, different ones each
// time, with the same CUDA (the cuda digests equal). Compare the ptx lines of two runs of the
// old build first; a point whose PTX differs between them says nothing about the change.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autosched.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/digest.h"
#include "kiln/frontend.h"

namespace {

using namespace kiln;

bool ptx = false;  // --ptx

// f's CUDA at `set` (or its PTX's digest), its launches first, or the error.
std::string cuda_of(const ir::Func& f, const ir::Overrides& set) {
  try {
    CompileRequest r{.func = ir::apply_overrides(f, set)};
    r.options.target = Target{cuda::kTriple, "sm_90", ""};
    r.options.opt_level = 3;
    r.output = ptx ? CompileOutput::Assembly : CompileOutput::Cuda;
    CompileResult out = compile(r);
    std::string launches = cuda::describe_launches(*out.cuda);
    if (!ptx) return launches + out.cuda->source;
    return launches + fmt::format("cuda sha256 {}\nptx sha256 {}, {} bytes\n",
                                  sha256_hex(out.cuda->source), sha256_hex(out.text),
                                  out.text.size());
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what() + "\n";
  }
}

void sweep(const std::string& label, const ir::Func& f, int drawn) {
  std::vector<std::pair<std::string, ir::Overrides>> points = {{"defaults", {}}};
  for (const ir::Knob& k : f.knobs) {
    if (!k.tags.empty()) continue;
    for (int64_t v : k.candidates)
      if (v != k.value) points.push_back({fmt::format("{}={}", k.name, v), {{k.name, v}}});
  }
  std::mt19937_64 rng(7);
  for (int d = 0; d < drawn; ++d) {
    ir::Overrides set;
    std::string name = "drawn";
    for (const ir::Knob& k : f.knobs) {
      if (!k.tags.empty() || k.candidates.empty()) continue;
      int64_t v = k.candidates[rng() % k.candidates.size()];
      set[k.name] = v;
      name += fmt::format(" {}={}", k.name, v);
    }
    points.push_back({name, set});
  }
  for (const auto& [name, set] : points)
    std::cout << "==== " << label << " [" << name << "]\n" << cuda_of(f, set);
}

}  // namespace

int main(int argc, char** argv) {
  int shard = 0, shards = 1;
  for (int a = 1; a < argc; ++a) {
    std::string arg = argv[a];
    if (arg == "--ptx") {
      ptx = true;
    } else if (arg == "--shard" && a + 1 < argc &&
               std::sscanf(argv[++a], "%d/%d", &shard, &shards) == 2 && shards > 0 && shard >= 0 &&
               shard < shards) {
    } else {
      std::cerr << "usage: cuda_sweep [--ptx] [--shard I/N]  (0 <= I < N)\n";
      return 2;
    }
  }
  std::string why;
  if (ptx && !cuda::nvrtc_available(&why)) {
    std::cerr << "cuda_sweep --ptx needs NVRTC: " << why << "\n";
    return 2;
  }
  const std::string root = KILN_SOURCE_DIR;
  int count = 0;
  std::vector<std::string> files;
  for (const char* dir : {"examples", "examples/gpu", "compiler/library", "tests/bench/kernels",
                          "tests/bench/polybench"})
    for (const auto& e : std::filesystem::directory_iterator(root + "/" + dir))
      if (e.path().extension() == ".kiln")
        files.push_back(std::string(dir) + "/" + e.path().filename().string());
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    ir::Module m;
    try {
      m = frontend::parse_file(root + "/" + file);
    } catch (const std::exception& e) {
      std::cout << "==== " << file << ": " << e.what() << "\n";
      continue;
    }
    bool gpu = file.starts_with("examples/gpu/");
    for (const ir::Func& f : m.funcs) {
      if (count++ % shards != shard) continue;
      std::string label = file + ":" + f.name;
      sweep(label, f, gpu ? 30 : 0);
      ir::Func base = autosched::algorithm_of(f);
      std::vector<autosched::Sketch> sketches;
      try {
        sketches = autosched::sketches(base, {}, autosched::Machine::Gpu);
      } catch (const std::exception& e) {
        std::cout << "==== " << label << " sketches: " << e.what() << "\n";
      }
      for (const autosched::Sketch& s : sketches) {
        try {
          sweep(label + " sketch " + s.name, autosched::apply(base, s), 6);
        } catch (const std::exception& e) {
          std::cout << "==== " << label << " sketch " << s.name << ": " << e.what() << "\n";
        }
      }
    }
  }
}
