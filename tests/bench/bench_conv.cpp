// Convolution benchmark: kiln's conv2d (kernels/conv2d.kiln, NCHW fp32) and oneDNN's
// convolution_forward, side by side in one process, on the same inputs. oneDNN gets the
// layouts it prefers (format_tag::any); the reorders into them and back are not timed.
// One JSON line per case on stdout.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kiln/runtime.h"

namespace {

using kiln::bench::Options;

const char* const kUsage =
    "usage: bench_conv [--quick] [--threads N,...] [--repeat R] [--set KNOB=INT]...\n"
    "                  [--kernel FILE] [--case TEXT]\n"
    "                  [--cpu NAME] [--features F]\n"
    "\n"
    "Times kiln's conv2d (tests/bench/kernels/conv2d.kiln, func conv2d) and oneDNN's\n"
    "direct convolution_forward on the same NCHW / OIHW fp32 inputs and prints one JSON\n"
    "line per shape and thread count:\n"
    "  {\"bench\":\"conv_1x64x56x56_64x3x3_s1p1_t2\", \"kiln_gflops\":...,\n"
    "   \"baseline\":\"onednn\", \"baseline_gflops\":..., \"ratio\":...,\n"
    "   \"max_rel_error\":..., \"peak_gflops\":..., \"kiln_peak_share\":..., ...}\n"
    "peak_gflops is this host's FMA peak at the case's threads (peak_probe says how it was\n"
    "measured); the shares are each side's GFLOP/s over it.\n"
    "The sides run in turn, three blocks each (the library's first), each block warmed up\n"
    "once and followed by a pause for spinning threads; R timed runs of each side in all, whose\n"
    "median counts. host_load is other processes' CPUs during the case (/proc/stat); past 0.5,\n"
    "loaded is true and stderr says the figures are a loaded host's.\n"
    "max_rel_error is max |kiln - onednn| / max |onednn|. Exit status 1 when a case\n"
    "fails or kiln's result differs by more than 1e-4.\n"
    "\n"
    "  --quick         the batch-1 shapes only\n"
    "  --threads LIST  thread counts for both libraries (default 1,2)\n"
    "  --repeat R      timed runs (default 10, 2 for the batch-256 shape)\n"
    "  --set KNOB=INT  a schedule knob of conv2d.kiln (XR), for every shape\n"
    "  --kernel FILE   another .kiln file with a func conv2d(I, Wt, O)\n"
    "  --cpu NAME      compile kiln's kernel for this CPU (LLVM's name) instead of this\n"
    "                  machine's: an AVX2 CPU (haswell, znver3) on an AVX-512 machine\n"
    "  --features F    and these LLVM features (+avx2,-avx512f)\n"
    "  --case TEXT     only cases whose name contains TEXT\n";

struct Shape {
  int64_t n, c, h, w;  // input
  int64_t f, kh, kw;   // filters
  int64_t stride, pad;
  int repeat;  // default timed runs
  bool quick;  // part of --quick

  int64_t oh() const { return (h + 2 * pad - kh) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - kw) / stride + 1; }
  double gflop() const { return 2.0 * double(n * f * oh() * ow()) * double(c * kh * kw) * 1e-9; }
  std::string name(int threads) const {
    return "conv_" + std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" +
           std::to_string(w) + "_" + std::to_string(f) + "x" + std::to_string(kh) + "x" +
           std::to_string(kw) + "_s" + std::to_string(stride) + "p" + std::to_string(pad) + "_t" +
           std::to_string(threads);
  }
};

const Shape kShapes[] = {
    // ResNet-50 conv2_x 3x3, and its first layer (7x7, stride 2).
    {1, 64, 56, 56, 64, 3, 3, 1, 1, 10, true},
    {1, 3, 224, 224, 64, 7, 7, 2, 3, 10, true},
    // A whole batch through a 3x3 layer: about 118 GFLOP per run.
    {256, 256, 14, 14, 512, 3, 3, 1, 1, 2, false},
};

// oneDNN's side of one shape: primitives and memories in its preferred layouts.
class OneDnnConv {
 public:
  OneDnnConv(const Shape& s, kiln::bench::Floats& input, kiln::bench::Floats& weights,
             kiln::bench::Floats& output)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::dims src{s.n, s.c, s.h, s.w}, wei{s.f, s.c, s.kh, s.kw},
        dst{s.n, s.f, s.oh(), s.ow()};
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        dnnl::memory::desc(src, dt::f32, tag::any), dnnl::memory::desc(wei, dt::f32, tag::any),
        dnnl::memory::desc(dst, dt::f32, tag::any), {s.stride, s.stride}, {s.pad, s.pad},
        {s.pad, s.pad});
    dnnl::convolution_forward::primitive_desc pd(desc, engine_);
    conv_ = dnnl::convolution_forward(pd);

    user_dst_ = dnnl::memory({dst, dt::f32, tag::nchw}, engine_, output.data());
    src_ = to_layout(dnnl::memory({src, dt::f32, tag::nchw}, engine_, input.data()), pd.src_desc());
    wei_ = to_layout(dnnl::memory({wei, dt::f32, tag::oihw}, engine_, weights.data()),
                     pd.weights_desc());
    dst_ = pd.dst_desc() == user_dst_.get_desc() ? user_dst_ : dnnl::memory(pd.dst_desc(), engine_);
    implementation_ = pd.impl_info_str();
  }

  void run() {
    conv_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

  // Brings the last result into the caller's NCHW output array.
  void fetch_output() {
    if (dst_ != user_dst_) {
      dnnl::reorder(dst_, user_dst_).execute(stream_, dst_, user_dst_);
      stream_.wait();
    }
  }

  const std::string& implementation() const { return implementation_; }

 private:
  dnnl::memory to_layout(dnnl::memory user, const dnnl::memory::desc& want) {
    if (user.get_desc() == want) return user;
    dnnl::memory m(want, engine_);
    dnnl::reorder(user, m).execute(stream_, user, m);
    stream_.wait();
    return m;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::convolution_forward conv_;
  dnnl::memory src_, wei_, dst_, user_dst_;
  std::string implementation_;
};

// The arrays of one shape: inputs, and each side's output in NCHW.
struct Arrays {
  kiln::bench::Floats input, weights, out_kiln, out_dnnl;
  explicit Arrays(const Shape& s)
      : input(size_t(s.n * s.c * s.h * s.w)),
        weights(size_t(s.f * s.c * s.kh * s.kw)),
        out_kiln(size_t(s.n * s.f * s.oh() * s.ow())),
        out_dnnl(out_kiln.size()) {
    kiln::bench::fill_random(input, 1);
    kiln::bench::fill_random(weights, 2);
  }
};

// Times both sides of one case into r; returns why it could not, if it could not.
std::optional<std::string> time_case(const Shape& s, const kiln::codegen::Kernel& kernel,
                                     Arrays& arrays, kiln::bench::Result& r) {
  kiln::bench::KilnSide side(kernel, arrays.input.data(), arrays.weights.data(), arrays.out_kiln,
                             r.threads);
  try {
    omp_set_num_threads(r.threads);
    OneDnnConv dnnl_conv(s, arrays.input, arrays.weights, arrays.out_dnnl);
    std::fprintf(stderr, "bench_conv: %s (%d timed runs, oneDNN: %s)\n", r.bench.c_str(), r.repeat,
                 dnnl_conv.implementation().c_str());
    // oneDNN's OpenMP threads spin a while after a call: each block ends with a settle.
    kiln::bench::SideBySide t = kiln::bench::time_side_by_side(
        [&] { side.prepare(); }, [&] { side.run(); }, [&] { omp_set_num_threads(r.threads); },
        [&] { dnnl_conv.run(); }, r.repeat);
    dnnl_conv.fetch_output();
    r.kiln_seconds = t.kiln_seconds;
    r.baseline_seconds = t.baseline_seconds;
    r.host_load = t.host_load;
  } catch (const dnnl::error& e) {
    return "onednn: " + std::string(e.what());
  }
  if (std::optional<std::string> e = side.error()) return e;

  r.max_rel_error = kiln::bench::max_rel_error(arrays.out_kiln, arrays.out_dnnl);
  return std::nullopt;
}

// Runs one shape at every thread count; returns false when a case failed.
bool run_shape(const Options& opts, const Shape& s, const std::vector<int>& threads) {
  std::vector<int> todo;
  for (int t : threads) {
    if (s.name(t).find(opts.filter) != std::string::npos) todo.push_back(t);
  }
  if (todo.empty()) return true;

  Arrays arrays(s);
  kiln::bench::KernelOrError k =
      kiln::bench::try_compile_kernel(kiln::bench::kernel_path(opts, "conv2d.kiln"), "conv2d",
                                      {{"N", s.n},
                                       {"C", s.c},
                                       {"H", s.h},
                                       {"W", s.w},
                                       {"F", s.f},
                                       {"KH", s.kh},
                                       {"KW", s.kw},
                                       {"S", s.stride},
                                       {"P", s.pad},
                                       {"OH", s.oh()},
                                       {"OW", s.ow()}},
                                      opts.knobs, kiln::bench::target_of(opts));

  bool ok = true;
  for (int t : todo) {
    kiln::bench::Result r;
    r.bench = s.name(t);
    r.target = kiln::bench::target_of(opts);
    r.baseline = "onednn";
    r.threads = t;
    r.repeat = opts.repeat ? opts.repeat : s.repeat;
    r.gflop = s.gflop();
    auto time = [&](const kiln::codegen::Kernel& kernel, kiln::bench::Result& res) {
      return time_case(s, kernel, arrays, res);
    };
    ok = kiln::bench::finish_case(r, k, time, "bench_conv", "oneDNN") && ok;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts = kiln::bench::parse_options(argc, argv, kUsage);
  if (!opts.sizes.empty()) {
    std::fprintf(stderr, "bench_conv: --sizes does not apply; the shapes are fixed\n%s", kUsage);
    return 2;
  }
  std::vector<int> threads = opts.threads.empty() ? std::vector<int>{1, 2} : opts.threads;

  bool ok = true;
  for (const Shape& s : kShapes) {
    if (opts.quick && !s.quick) continue;
    ok = run_shape(opts, s, threads) && ok;
  }
  return ok ? 0 : 1;
}
