// CUDA C++ to PTX and cubin with NVRTC (kiln/cuda.h). NVRTC is optional: a build without the
// CUDA toolkit says so when asked to compile.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "kiln/cuda.h"
#include "kiln/error.h"

#if KILN_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace kiln::cuda {

namespace {

bool is_arch(const std::string& arch) {
  return arch.size() >= 5 && arch.compare(0, 3, "sm_") == 0 &&
         arch.find_first_not_of("0123456789", 3) == std::string::npos;
}

}  // namespace

std::string arch_of(int major, int minor) { return fmt::format("sm_{}{}", major, minor); }

int64_t block_registers(int registers, int64_t threads) {
  const int64_t warps = (threads + 31) / 32;
  const int64_t per_warp = (int64_t{registers} * 32 + kRegisterUnit - 1) / kRegisterUnit;
  return warps * per_warp * kRegisterUnit;
}

std::vector<KernelResources> parse_ptxas_info(const std::string& log, std::string* rest) {
  std::vector<KernelResources> out;
  std::string others;
  // The number before `word` on the line ("Used 64 registers", "8192 bytes smem").
  auto number_before = [](const std::string& line, const std::string& word) -> int64_t {
    size_t at = line.find(word);
    if (at == std::string::npos || at < 2) return 0;
    size_t end = at - 1;  // the space before the word
    size_t start = end;
    while (start > 0 && std::isdigit(static_cast<unsigned char>(line[start - 1]))) --start;
    return start < end ? std::stoll(line.substr(start, end - start)) : 0;
  };
  size_t pos = 0;
  while (pos < log.size()) {
    size_t eol = log.find('\n', pos);
    if (eol == std::string::npos) eol = log.size();
    std::string line = log.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.compare(0, 5, "ptxas") != 0) {
      others += line + "\n";
      continue;
    }
    // ptxas info    : Function properties for K  /  Compiling entry function 'K' for 'sm_90'
    if (size_t at = line.find("Compiling entry function '"); at != std::string::npos) {
      size_t from = at + 26;
      size_t to = line.find('\'', from);
      if (to != std::string::npos) out.push_back({line.substr(from, to - from)});
      continue;
    }
    if (out.empty()) continue;
    KernelResources& k = out.back();
    if (line.find("bytes stack frame") != std::string::npos) {
      k.stack_bytes = number_before(line, "bytes stack frame");
      k.spilled_bytes = number_before(line, "bytes spill stores");
    } else if (line.find("Used ") != std::string::npos) {
      k.registers = static_cast<int>(number_before(line, "registers"));
      k.shared_bytes = number_before(line, "bytes smem");
    }
  }
  if (rest) *rest = others;
  return out;
}

void check_target(const Target& t) {
  if (t.triple != kTriple)
    throw CompileError(ErrorStage::Codegen, SourceLoc{},
                       fmt::format("'{}' is not a GPU target kiln generates code for (GPU code "
                                   "is for {})",
                                   t.triple, kTriple));
  if (!is_arch(t.cpu))
    throw CompileError(ErrorStage::Codegen, SourceLoc{},
                       fmt::format("GPU target {} needs its architecture as the CPU, sm_XY for "
                                   "compute capability X.Y (--cpu sm_90 for an H100 or H200){}",
                                   kTriple, t.cpu.empty() ? "" : ", not '" + t.cpu + "'"));
  if (!t.features.empty())
    throw CompileError(ErrorStage::Codegen, SourceLoc{},
                       "GPU targets take no features ('" + t.features +
                           "'): the architecture "
                           "(" +
                           t.cpu + ") says what the code may use");
}

#if KILN_HAVE_NVRTC

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw CompileError(ErrorStage::Codegen, SourceLoc{}, message);
}

void check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) fail(fmt::format("{}: {}", call, nvrtcGetErrorString(r)));
}

// Refuses a launch whose block needs more registers than a block has (cuLaunchKernel would
// say CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on every device), and notes the kernels that spill.
void check_registers(const Program& p, const std::string& arch, Binary& bin) {
  for (const KernelResources& k : bin.resources) {
    if (k.spilled_bytes > 0)
      bin.notes.push_back(fmt::format(
          "kernel {} spills {} bytes per thread to local memory ({} registers of 255 used); a "
          "smaller register tile keeps it in registers",
          k.kernel, k.spilled_bytes, k.registers));
    for (const Launch& l : p.launches) {
      if (l.kernel != k.kernel) continue;
      const int64_t threads = l.block[0] * l.block[1] * l.block[2];
      const int64_t need = block_registers(k.registers, threads);
      if (need > kRegistersPerBlock)
        fail(fmt::format(
            "kernel {} needs {} registers per block ({} per thread for {} threads, block ({}, "
            "{}, {})), more than the {} a block has on {}: the launch would fail on every such "
            "GPU; use fewer threads per block or a smaller register tile",
            k.kernel, need, k.registers, threads, l.block[0], l.block[1], l.block[2],
            kRegistersPerBlock, arch));
    }
  }
}

// Owns one nvrtcProgram.
struct ProgramHandle {
  nvrtcProgram p = nullptr;
  ~ProgramHandle() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

}  // namespace

bool nvrtc_available(std::string* why) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) {
    if (why) *why = "NVRTC does not answer";
    return false;
  }
  return true;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "no NVRTC";
  return fmt::format("NVRTC {}.{}", major, minor);
}

Binary compile(const Program& p, const std::string& arch) {
  if (!is_arch(arch))
    fail(
        fmt::format("'{}' is not a GPU architecture kiln compiles for: name one as sm_XY "
                    "(sm_90 for compute capability 9.0: H100, H200)",
                    arch));
  ProgramHandle h;
  std::string file = p.name + ".cu";
  check(nvrtcCreateProgram(&h.p, p.source.c_str(), file.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  std::string arch_flag = "--gpu-architecture=" + arch;
  // 177: a variable declared but never referenced. kiln's rewrites (accumulators kept in
  // registers) leave some lets of the loop IR unused; they are not the user's to fix.
  // ptxas -v: each kernel's registers, shared memory and spills, in the log. --no-cache (NVRTC
  // 12.9 and later, which have the cache): where the driver is installed, NVRTC otherwise takes a
  // cubin it made before (in this process or an earlier one) from the driver's compute cache and
  // runs no ptxas, leaving no report to read (seen with NVRTC 13.0 on an H200 machine).
  std::vector<const char*> options = {arch_flag.c_str(), "--std=c++17", "-default-device",
                                      "--diag-suppress=177", "--ptxas-options=-v"};
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS && (major > 12 || (major == 12 && minor >= 9)))
    options.push_back("--no-cache");
  if (p.fast_math) options.push_back("--use_fast_math");
  // Tensor cores (mma nests): sm_80 or later for TF32, and the toolkit's mma.h.
  std::string include_flag = std::string("--include-path=") + KILN_CUDA_INCLUDE_DIR;
  if (p.tensor_cores) {
    if (std::strtol(arch.c_str() + 3, nullptr, 10) < 80)  // digits (is_arch); saturates
      fail(
          fmt::format("{} has loops tagged mma, which run on TF32 tensor cores: those need "
                      "sm_80 or later (an A100, H100 or H200), not {}",
                      p.name, arch));
    std::string header = std::string(KILN_CUDA_INCLUDE_DIR) + "/mma.h";
    if (!std::filesystem::exists(header))
      fail(
          fmt::format("{} has loops tagged mma, whose code includes CUDA's mma.h, but {} is "
                      "missing: install the CUDA toolkit's headers where kiln was built with it",
                      p.name, header));
    options.push_back(include_flag.c_str());
  }
  nvrtcResult r = nvrtcCompileProgram(h.p, static_cast<int>(options.size()), options.data());
  Binary out;
  out.arch = arch;
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(h.p, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    nvrtcGetProgramLog(h.p, out.log.data());
    // NUL-terminated, and with ptxas's output, a NUL between NVRTC's part and ptxas's.
    out.log.erase(std::remove(out.log.begin(), out.log.end(), '\0'), out.log.end());
  }
  if (r != NVRTC_SUCCESS)
    fail(fmt::format("NVRTC refused the CUDA source of {} for {}: {}\n{}", p.name, arch,
                     nvrtcGetErrorString(r), out.log));
  size_t size = 0;
  check(nvrtcGetPTXSize(h.p, &size), "nvrtcGetPTXSize");
  out.ptx.resize(size);
  check(nvrtcGetPTX(h.p, out.ptx.data()), "nvrtcGetPTX");
  if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  check(nvrtcGetCUBINSize(h.p, &size), "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(h.p, out.cubin.data()), "nvrtcGetCUBIN");
  std::string warnings;
  out.resources = parse_ptxas_info(out.log, &warnings);
  out.log = warnings.find_first_not_of(" \n") == std::string::npos ? "" : warnings;
  check_registers(p, arch, out);
  return out;
}

#else

bool nvrtc_available(std::string* why) {
  if (why) *why = "kiln was built without the CUDA toolkit (no NVRTC at /usr/local/cuda)";
  return false;
}

std::string nvrtc_version() { return "no NVRTC"; }

Binary compile(const Program& p, const std::string&) {
  throw CompileError(ErrorStage::Codegen, SourceLoc{},
                     "cannot compile " + p.name +
                         " for a GPU: kiln was built without the CUDA toolkit (no NVRTC at "
                         "/usr/local/cuda); rebuild with CUDA installed");
}

#endif

}  // namespace kiln::cuda
