// A CUDA program of kiln's, run on the CPU (cuda_emulator.h).
#include "cuda_emulator.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include "kiln/error.h"
#include "programs.h"

namespace kiln::testing {
namespace {

[[noreturn]] void refuse(const std::string& message) {
  throw CompileError(ErrorStage::Codegen, SourceLoc{}, "CUDA emulator: " + message);
}
[[noreturn]] void fail(const std::string& message) {
  throw CompileError(ErrorStage::Run, SourceLoc{}, message);
}

// What the printed source uses of CUDA, for the host, and the fibers that run a block's threads.
// Threads switch only at barriers, so a read-modify-write (the atomics) is indivisible as it is.
const char* kPrelude = R"PRELUDE(
#include <sys/mman.h>
#include <ucontext.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __constant__
#define __align__(n) alignas(n)

struct kiln_emu_dim3 { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

template <typename To, typename From> inline To kiln_emu_bits(From v) {
  To t;
  std::memcpy(&t, &v, sizeof t);
  return t;
}
inline unsigned __float_as_uint(float v) { return kiln_emu_bits<unsigned>(v); }
inline float __uint_as_float(unsigned v) { return kiln_emu_bits<float>(v); }
inline int __float_as_int(float v) { return kiln_emu_bits<int>(v); }
inline float __int_as_float(int v) { return kiln_emu_bits<float>(v); }
inline long long __double_as_longlong(double v) { return kiln_emu_bits<long long>(v); }
inline double __longlong_as_double(long long v) { return kiln_emu_bits<double>(v); }

template <typename T> inline T atomicCAS(T* p, T compare, T value) {
  T old = *p;
  if (old == compare) *p = value;
  return old;
}
template <typename T> inline T atomicAdd(T* p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}

enum { KILN_EMU_READY, KILN_EMU_AT_BARRIER, KILN_EMU_AT_WARP_BARRIER, KILN_EMU_DONE };
struct kiln_emu_fiber {
  ucontext_t ctx;
  kiln_emu_dim3 tid;
  int state;
  unsigned shared_calls;
  char* stack;
};
static kiln_emu_fiber* kiln_emu_cur;
static ucontext_t kiln_emu_main;
static kiln_emu_dim3 blockIdx, blockDim, gridDim;
#define threadIdx (kiln_emu_cur->tid)
static void (*kiln_emu_body)(void**);
static void** kiln_emu_args;

inline void __syncthreads() {
  kiln_emu_cur->state = KILN_EMU_AT_BARRIER;
  swapcontext(&kiln_emu_cur->ctx, &kiln_emu_main);
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  kiln_emu_cur->state = KILN_EMU_AT_WARP_BARRIER;
  swapcontext(&kiln_emu_cur->ctx, &kiln_emu_main);
}
static void kiln_emu_entry() {
  kiln_emu_body(kiln_emu_args);
  kiln_emu_cur->state = KILN_EMU_DONE;
}

// A block's shared memory: the k-th __shared__ array a thread declares is the k-th any thread
// of the block declared.
alignas(128) static char kiln_emu_arena[256 * 1024];
static size_t kiln_emu_offsets[64];
static unsigned kiln_emu_arrays;
static size_t kiln_emu_used;
static int kiln_emu_overflow;
inline void* kiln_emu_shared(size_t bytes, size_t align) {
  unsigned k = kiln_emu_cur->shared_calls++;
  if (k == kiln_emu_arrays) {
    size_t at = (kiln_emu_used + align - 1) / align * align;
    if (k >= 64 || at + bytes > sizeof kiln_emu_arena) {
      kiln_emu_overflow = 1;
      at = 0;
    }
    if (k < 64) kiln_emu_offsets[kiln_emu_arrays++] = at;
    kiln_emu_used = at + bytes;
  }
  return kiln_emu_arena + (k < 64 ? kiln_emu_offsets[k] : 0);
}

template <typename T> inline T kiln_emu_arg(void* p) {
  if constexpr (std::is_pointer_v<T>) {
    return static_cast<T>(*static_cast<void**>(p));
  } else {
    return *static_cast<T*>(p);
  }
}
template <typename... P, size_t... I>
inline void kiln_emu_call(void (*k)(P...), void** a, std::index_sequence<I...>) {
  k(kiln_emu_arg<P>(a[I])...);
}
template <typename... P> inline void kiln_emu_invoke(void (*k)(P...), void** a) {
  kiln_emu_call(k, a, std::index_sequence_for<P...>{});
}
)PRELUDE";

// The launcher, after the kernels and their table.
const char* kLauncher = R"LAUNCHER(
// Runs kernel `k` over the grid, each block's threads as fibers in thread order (or reverse):
// 0, or 1 with `err` saying why the block cannot go on.
extern "C" int kiln_emu_launch(int k, const unsigned* grid, const unsigned* block, void** args,
                               int reverse, char* err, int err_size) {
  kiln_emu_body = kiln_emu_kernels[k];
  kiln_emu_args = args;
  gridDim = {grid[0], grid[1], grid[2]};
  blockDim = {block[0], block[1], block[2]};
  const unsigned n = block[0] * block[1] * block[2];
  // Each stack above a page no access may touch: a thread that overflows its stack faults
  // rather than writes over another's.
  const size_t page = 4096, stack = 256 * 1024;
  kiln_emu_fiber* fibers = static_cast<kiln_emu_fiber*>(std::calloc(n, sizeof(kiln_emu_fiber)));
  for (unsigned i = 0; i < n && fibers; ++i) {
    void* m = mmap(nullptr, page + stack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      for (unsigned j = 0; j < i; ++j) munmap(fibers[j].stack - page, page + stack);
      std::free(fibers);
      fibers = nullptr;
      break;
    }
    mprotect(m, page, PROT_NONE);
    fibers[i].stack = static_cast<char*>(m) + page;
  }
  if (!fibers) {
    std::snprintf(err, err_size, "no memory for the stacks of %u threads", n);
    return 1;
  }
  int result = 0;
  for (unsigned bz = 0; bz < grid[2] && !result; ++bz)
    for (unsigned by = 0; by < grid[1] && !result; ++by)
      for (unsigned bx = 0; bx < grid[0] && !result; ++bx) {
        blockIdx = {bx, by, bz};
        std::memset(kiln_emu_arena, 0xff, sizeof kiln_emu_arena);
        kiln_emu_arrays = 0;
        kiln_emu_used = 0;
        kiln_emu_overflow = 0;
        for (unsigned i = 0; i < n; ++i) {
          kiln_emu_fiber& f = fibers[i];
          f.tid = {i % block[0], i / block[0] % block[1], i / (block[0] * block[1])};
          f.state = KILN_EMU_READY;
          f.shared_calls = 0;
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack;
          f.ctx.uc_stack.ss_size = stack;
          f.ctx.uc_link = &kiln_emu_main;
          makecontext(&f.ctx, kiln_emu_entry, 0);
        }
        for (;;) {
          for (unsigned j = 0; j < n; ++j) {
            kiln_emu_fiber& f = fibers[reverse ? n - 1 - j : j];
            if (f.state != KILN_EMU_READY) continue;
            kiln_emu_cur = &f;
            swapcontext(&kiln_emu_main, &f.ctx);
          }
          if (kiln_emu_overflow) {
            std::snprintf(err, err_size, "block (%u, %u, %u) declares more shared memory than "
                          "the emulator has (256 KiB in 64 arrays)", bx, by, bz);
            result = 1;
            break;
          }
          unsigned done = 0, at_block = 0, at_warp = 0;
          for (unsigned i = 0; i < n; ++i) {
            done += fibers[i].state == KILN_EMU_DONE;
            at_block += fibers[i].state == KILN_EMU_AT_BARRIER;
            at_warp += fibers[i].state == KILN_EMU_AT_WARP_BARRIER;
          }
          if (done == n) break;
          bool released = false;
          for (unsigned w = 0; w < n; w += 32) {  // a warp whose threads all wait at __syncwarp
            unsigned end = w + 32 < n ? w + 32 : n, waiting = 0, others = 0;
            for (unsigned i = w; i < end; ++i) {
              waiting += fibers[i].state == KILN_EMU_AT_WARP_BARRIER;
              others += fibers[i].state == KILN_EMU_AT_BARRIER;
            }
            if (waiting == 0 || others != 0) continue;
            for (unsigned i = w; i < end; ++i)
              if (fibers[i].state == KILN_EMU_AT_WARP_BARRIER) fibers[i].state = KILN_EMU_READY;
            released = true;
          }
          if (!released && at_warp == 0) {  // every thread at __syncthreads or done
            for (unsigned i = 0; i < n; ++i)
              if (fibers[i].state == KILN_EMU_AT_BARRIER) fibers[i].state = KILN_EMU_READY;
            released = true;
          }
          if (!released) {
            std::snprintf(err, err_size, "block (%u, %u, %u): its threads wait at barriers that "
                          "cannot all be reached (%u at __syncthreads, %u at __syncwarp, %u "
                          "done)", bx, by, bz, at_block, at_warp, done);
            result = 1;
            break;
          }
        }
      }
  for (unsigned i = 0; i < n; ++i) munmap(fibers[i].stack - page, page + stack);
  std::free(fibers);
  return result;
}
)LAUNCHER";

// p's source with each `__shared__ __align__(A) T name[N];` a pointer into the block's shared
// memory.
std::string with_block_shared_memory(const std::string& source) {
  static const std::regex decl(
      R"(^(\s*)__shared__ __align__\((\d+)\) ([A-Za-z_][A-Za-z_0-9 ]*?) (\w+)\[(\d+)\];$)");
  std::istringstream in(source);
  std::string out, line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, decl)) {
      out += fmt::format(
          "{0}{2}* const {3} = static_cast<{2}*>(kiln_emu_shared(sizeof({2}) * {4}, "
          "{1}));\n",
          m[1].str(), m[2].str(), m[3].str(), m[4].str(), m[5].str());
      continue;
    }
    if (line.find("__shared__") != std::string::npos)
      refuse("a __shared__ declaration it does not know: " + line);
    out += line + "\n";
  }
  return out;
}

// The kernels in the order of their first launch.
std::vector<std::string> kernels_of(const cuda::Program& p) {
  std::vector<std::string> out;
  for (const cuda::Launch& l : p.launches)
    if (std::find(out.begin(), out.end(), l.kernel) == out.end()) out.push_back(l.kernel);
  return out;
}

using LaunchFn = int (*)(int, const unsigned*, const unsigned*, void**, int, char*, int);

}  // namespace

CudaEmulator::CudaEmulator(const cuda::Program& p, const std::string& dir) : p_(p) {
  const std::string cxx = KILN_TEST_CXX;
  if (p.tensor_cores) refuse(p.name + " runs on tensor cores (mma), which it does not emulate");
  static std::atomic<int> count{0};
  // The process in the name: ctest runs each test in a process of its own, side by side.
  base_ = fmt::format("{}/emulated_{}_{}_{}", dir, getpid(), p.name, count++);
  const std::string& base = base_;
  std::string text = kPrelude + with_block_shared_memory(p.source);
  text += "\nstatic void (*const kiln_emu_kernels[])(void**) = {\n";
  for (const std::string& k : kernels_of(p))
    text += fmt::format("    [](void** a) {{ kiln_emu_invoke(&{}, a); }},\n", k);
  text += "};\n";
  text += kLauncher;
  {
    std::ofstream out(base + ".cpp");
    out << text;
    if (!out) refuse("cannot write " + base + ".cpp");
  }
  std::string command =
      fmt::format("'{}' -std=c++17 -O1 -fPIC -shared -w -o '{}.so' '{}.cpp' > '{}.log' 2>&1", cxx,
                  base, base, base);
  if (std::system(command.c_str()) != 0)
    refuse(fmt::format("{} refused the emulated source of {} ({}.cpp):\n{}", cxx, p.name, base,
                       read_file(base + ".log")));
  handle_ = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) refuse(std::string("cannot load ") + base + ".so: " + dlerror());
}

CudaEmulator::~CudaEmulator() {
  if (handle_) dlclose(handle_);
  if (std::getenv("KILN_EMULATOR_KEEP")) return;  // to read or rerun what was emulated
  for (const char* ext : {".cpp", ".so", ".log"}) std::remove((base_ + ext).c_str());
}

void CudaEmulator::run(Bindings& b, ThreadOrder order) {
  auto launch = reinterpret_cast<LaunchFn>(dlsym(handle_, "kiln_emu_launch"));
  if (!launch) refuse("the emulated program has no launcher");
  for (const ir::Buf& buf : p_.args) {
    HostBuffer& h = bound_buffer(b, buf, p_.name, ErrorStage::Run);
    if (buf.kind == ir::BufKind::Input) {
      std::string bad = value_spec_error(buf, h, b.params);
      if (!bad.empty()) throw CompileError(ErrorStage::Run, buf.where, bad);
    }
  }
  std::vector<long long> params;
  for (const std::string& name : p_.params) {
    auto it = b.params.find(name);
    if (it == b.params.end()) fail(fmt::format("no value given for param {} of {}", name, p_.name));
    params.push_back(it->second);
  }
  // The buffers in place, each temporary zeroed, as the GPU run has them.
  std::vector<void*> ptrs;
  for (const ir::Buf& buf : p_.args) ptrs.push_back(b.buffers.at(buf.name).data());
  std::vector<std::vector<unsigned char>> temps;
  for (const cuda::DeviceTemp& t : p_.temps) {
    uint64_t count = 1;
    for (const ir::Expr& e : t.shape) {
      std::optional<int64_t> v = ir::eval_int(e, b.params);
      if (!v || *v < 0) fail(fmt::format("temporary {} has size {}", t.name, ir::to_string(e)));
      count *= static_cast<uint64_t>(*v);
    }
    temps.emplace_back(count * ir::dtype_bytes(t.dtype), 0);
    ptrs.push_back(temps.back().data());
  }
  int32_t status = 0;
  void* status_ptr = &status;
  std::vector<void*> args;
  for (long long& v : params) args.push_back(&v);
  for (void*& d : ptrs) args.push_back(&d);
  args.push_back(&status_ptr);
  for (const cuda::ConstantBuffer& k : p_.constants) {
    void* symbol = dlsym(handle_, k.symbol.c_str());
    if (!symbol) refuse(fmt::format("no constant array {} in {}", k.symbol, p_.name));
    const HostBuffer& h = b.buffers.at(k.buffer);
    std::memcpy(symbol, h.data(), static_cast<size_t>(h.size()) * ir::dtype_bytes(h.dtype()));
  }
  std::vector<std::string> kernels = kernels_of(p_);
  for (const cuda::Launch& l : p_.launches) {
    unsigned grid[3], block[3];
    bool empty = false;
    for (int d = 0; d < 3; ++d) {
      std::optional<int64_t> g = ir::eval_int(l.grid[d], b.params);
      if (!g)
        fail(fmt::format("the grid of {} ({}) cannot be evaluated", l.kernel,
                         ir::to_string(l.grid[d])));
      empty = empty || *g <= 0;
      grid[d] = static_cast<unsigned>(std::max<int64_t>(*g, 0));
      block[d] = static_cast<unsigned>(l.block[d]);
    }
    if (empty) continue;
    if (l.shared_bytes > 256 * 1024)
      refuse(fmt::format("{} needs {} bytes of shared memory, more than the emulator's 256 KiB",
                         l.kernel, l.shared_bytes));
    int k = static_cast<int>(std::find(kernels.begin(), kernels.end(), l.kernel) - kernels.begin());
    char err[512] = {0};
    if (launch(k, grid, block, args.data(), order == ThreadOrder::Reverse, err, sizeof err) != 0)
      fail(fmt::format("kernel {} of {}: {}", l.kernel, p_.name, err));
  }
  if (status != 0) {
    ir::LoweredFunc f;
    f.name = p_.name;
    f.checks = p_.checks;
    throw ir::status_error(f, status);
  }
}

interp::Mismatch emulated_against_reference(const ir::Func& f, const cuda::Program& p,
                                            uint64_t seed, ThreadOrder order,
                                            const std::map<std::string, int64_t>& runtime) {
  CudaEmulator emulated(p, ::testing::TempDir());
  Bindings in = interp::random_bindings(f, interp::param_values(f, runtime), seed);
  Bindings expected = in, actual = in;
  interp::run_reference(f, expected);
  emulated.run(actual, order);
  return interp::compare_outputs(f, expected, actual);
}

}  // namespace kiln::testing
