// CUDA C++ to PTX and cubin with NVRTC (kiln/cuda.h). NVRTC is optional: a build without the
// CUDA toolkit says so when asked to compile.
#include <fmt/format.h>

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
  std::vector<const char*> options = {arch_flag.c_str(), "--std=c++17", "-default-device",
                                      "--diag-suppress=177"};
  if (p.fast_math) options.push_back("--use_fast_math");
  nvrtcResult r = nvrtcCompileProgram(h.p, static_cast<int>(options.size()), options.data());
  Binary out;
  out.arch = arch;
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(h.p, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    nvrtcGetProgramLog(h.p, out.log.data());
    out.log.resize(log_size - 1);
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
