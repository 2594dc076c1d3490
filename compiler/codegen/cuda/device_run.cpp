// Running a CUDA program on a GPU through the driver (kiln/cuda.h, kiln/cuda_driver.h).
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "kiln/cuda.h"
#include "kiln/cuda_driver.h"
#include "kiln/error.h"

namespace kiln::cuda {

struct Device::State {
  kiln_cuda* cuda = nullptr;
};

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw CompileError(ErrorStage::Run, SourceLoc{}, message);
}

// Device memory that goes back when the run ends, whatever happens.
class DeviceBuffers {
 public:
  explicit DeviceBuffers(kiln_cuda* c) : c_(c) {}
  ~DeviceBuffers() {
    for (uint64_t p : ptrs_) kiln_cuda_free(c_, p);
  }
  uint64_t alloc(size_t bytes, const std::string& what) {
    char err[512];
    uint64_t p = 0;
    if (kiln_cuda_alloc(c_, bytes, &p, err, sizeof err) != 0)
      fail(fmt::format("cannot allocate {} bytes of GPU memory for {}: {}", bytes, what, err));
    ptrs_.push_back(p);
    return p;
  }

 private:
  kiln_cuda* c_;
  std::vector<uint64_t> ptrs_;
};

class Module {
 public:
  Module(kiln_cuda* c, const Binary& bin) : c_(c) {
    char err[512];
    const void* image = bin.cubin.empty() ? static_cast<const void*>(bin.ptx.c_str())
                                          : static_cast<const void*>(bin.cubin.data());
    if (kiln_cuda_load(c_, image, &m_, err, sizeof err) != 0)
      fail(fmt::format("the GPU cannot load the code compiled for {}: {}", bin.arch, err));
  }
  ~Module() { kiln_cuda_unload(c_, m_); }
  void* handle() const { return m_; }
  void* function(const std::string& name) {
    char err[512];
    void* fn = nullptr;
    if (kiln_cuda_function(c_, m_, name.c_str(), &fn, err, sizeof err) != 0) fail(err);
    return fn;
  }

 private:
  kiln_cuda* c_;
  void* m_ = nullptr;
};

}  // namespace

Device::Device(int ordinal) : state_(new State) {
  char err[512];
  state_->cuda = kiln_cuda_open(ordinal, err, sizeof err);
  if (!state_->cuda) {
    delete state_;
    fail(err);
  }
}

Device::~Device() {
  kiln_cuda_close(state_->cuda);
  delete state_;
}

std::string Device::name() const { return kiln_cuda_device(state_->cuda)->name; }
std::string Device::arch() const {
  const kiln_cuda_info* i = kiln_cuda_device(state_->cuda);
  return arch_of(i->compute_major, i->compute_minor);
}

Device::Timing Device::run(const Program& p, const Binary& bin, Bindings& b, int repeat) {
  kiln_cuda* c = state_->cuda;
  const kiln_cuda_info* info = kiln_cuda_device(c);
  char err[512];
  // Inputs are checked where the data arrives, as the CPU kernels' callers do.
  for (const ir::Buf& buf : p.args) {
    HostBuffer& h = bound_buffer(b, buf, p.name, ErrorStage::Run);
    if (buf.kind == ir::BufKind::Input) {
      std::string bad = value_spec_error(buf, h, b.params);
      if (!bad.empty()) throw CompileError(ErrorStage::Run, buf.where, bad);
    }
  }
  DeviceBuffers mem(c);
  std::vector<long long> params;
  for (const std::string& name : p.params) {
    auto it = b.params.find(name);
    if (it == b.params.end()) fail(fmt::format("no value given for param {} of {}", name, p.name));
    params.push_back(it->second);
  }
  std::vector<uint64_t> ptrs;
  std::vector<size_t> bytes;
  for (const ir::Buf& buf : p.args) {
    HostBuffer& h = b.buffers.at(buf.name);
    size_t n = static_cast<size_t>(h.size()) * ir::dtype_bytes(h.dtype());
    uint64_t d = mem.alloc(n, buf.name);
    if (kiln_cuda_copy_to_device(c, d, h.data(), n, err, sizeof err) != 0) fail(err);
    ptrs.push_back(d);
    bytes.push_back(n);
  }
  for (const DeviceTemp& t : p.temps) {
    uint64_t count = 1;
    for (const ir::Expr& e : t.shape) {
      std::optional<int64_t> v = ir::eval_int(e, b.params);
      if (!v || *v < 0)
        fail(
            fmt::format("temporary {} of {} has size {}, which the params do not make a "
                        "non-negative number",
                        t.name, p.name, ir::to_string(e)));
      count *= static_cast<uint64_t>(*v);
    }
    uint64_t n = count * ir::dtype_bytes(t.dtype);
    if (n > info->memory_bytes)
      fail(fmt::format("temporary {} of {} needs {} bytes, more than the GPU's {}", t.name, p.name,
                       n, info->memory_bytes));
    uint64_t d = mem.alloc(n, t.name);
    if (kiln_cuda_zero(c, d, n, err, sizeof err) != 0) fail(err);
    ptrs.push_back(d);
  }
  uint64_t status = mem.alloc(sizeof(int32_t), "the status");
  if (kiln_cuda_zero(c, status, sizeof(int32_t), err, sizeof err) != 0) fail(err);
  std::vector<void*> args;
  for (long long& v : params) args.push_back(&v);
  for (uint64_t& d : ptrs) args.push_back(&d);
  args.push_back(&status);

  Module module(c, bin);
  // the inputs the kernels read from constant memory, copied there once
  for (const ConstantBuffer& k : p.constants) {
    auto arg = std::find_if(p.args.begin(), p.args.end(),
                            [&](const ir::Buf& a) { return a.name == k.buffer; });
    if (arg == p.args.end()) fail(fmt::format("{} has no buffer {}", p.name, k.buffer));
    size_t i = static_cast<size_t>(arg - p.args.begin());
    if (kiln_cuda_copy_to_global(c, module.handle(), k.symbol.c_str(), ptrs[i], bytes[i], err,
                                 sizeof err) != 0)
      fail(fmt::format("buffer {} into constant memory: {}", k.buffer, err));
  }
  struct Ready {
    void* fn;
    unsigned grid[3], block[3];
  };
  std::vector<Ready> ready;
  for (const Launch& l : p.launches) {
    Ready r{module.function(l.kernel), {1, 1, 1}, {1, 1, 1}};
    bool empty = false;
    int64_t threads = 1;
    for (int d = 0; d < 3; ++d) {
      std::optional<int64_t> g = ir::eval_int(l.grid[d], b.params);
      if (!g)
        fail(fmt::format("the grid of {} ({}) cannot be evaluated", l.kernel,
                         ir::to_string(l.grid[d])));
      if (*g <= 0) empty = true;
      if (*g > info->max_grid_dim[d])
        fail(fmt::format("{} needs {} blocks along {}, more than the GPU's {}", l.kernel, *g,
                         "xyz"[d], info -> max_grid_dim[d]));
      r.grid[d] = static_cast<unsigned>(std::max<int64_t>(*g, 0));
      if (l.block[d] > info->max_block_dim[d])
        fail(fmt::format("{} needs {} threads along {}, more than the GPU's {}", l.kernel,
                         l.block[d], "xyz"[d], info -> max_block_dim[d]));
      r.block[d] = static_cast<unsigned>(l.block[d]);
      threads *= l.block[d];
    }
    if (threads > info->max_threads_per_block)
      fail(fmt::format("{} needs {} threads per block, more than the GPU's {}", l.kernel, threads,
                       info->max_threads_per_block));
    if (l.shared_bytes > info->max_shared_per_block)
      fail(fmt::format("{} needs {} bytes of shared memory per block, more than the GPU's {}",
                       l.kernel, l.shared_bytes, info->max_shared_per_block));
    if (!empty) ready.push_back(r);
  }
  auto launch_all = [&] {
    for (Ready& r : ready)
      // The kernels' shared memory is all static (declared in the source), so the launch asks
      // for no dynamic shared memory: asking for shared_bytes again would double a block's
      // share, halve how many blocks fit on a multiprocessor, and fail past 48 KiB in all.
      if (kiln_cuda_launch(c, r.fn, r.grid, r.block, 0, args.data(), err, sizeof err) != 0)
        fail(err);
  };
  auto finish = [&](const char* what) {
    if (kiln_cuda_sync(c, err, sizeof err) != 0)
      fail(
          fmt::format("a kernel of {} failed on the GPU{}: {} (a fault ends this process's use "
                      "of the GPU: CUDA refuses every later call)",
                      p.name, what, err));
  };
  launch_all();
  finish("");
  int32_t code = 0;
  if (kiln_cuda_copy_to_host(c, &code, status, sizeof code, err, sizeof err) != 0) fail(err);
  if (code != 0) {
    ir::LoweredFunc f;
    f.name = p.name;
    f.checks = p.checks;
    throw ir::status_error(f, code);
  }
  for (size_t k = 0; k < p.args.size(); ++k) {
    if (p.args[k].kind != ir::BufKind::Output) continue;
    HostBuffer& h = b.buffers.at(p.args[k].name);
    if (kiln_cuda_copy_to_host(c, h.data(), ptrs[k], bytes[k], err, sizeof err) != 0) fail(err);
  }
  Timing t;
  if (repeat > 0) {
    launch_all();  // warm-up
    finish(" (warm-up)");
    for (int r = 0; r < repeat; ++r) {
      if (kiln_cuda_mark(c, err, sizeof err) != 0) fail(err);
      launch_all();
      float ms = 0;
      if (kiln_cuda_elapsed_ms(c, &ms, err, sizeof err) != 0)
        fail(fmt::format("a kernel of {} failed on the GPU (timed run): {}", p.name, err));
      t.ms.push_back(ms);
    }
  }
  return t;
}

bool gpu_available(std::string* why, int ordinal) {
  char err[512];
  kiln_cuda* c = kiln_cuda_open(ordinal, err, sizeof err);
  if (!c) {
    if (why) *why = err;
    return false;
  }
  kiln_cuda_close(c);
  return true;
}

}  // namespace kiln::cuda
