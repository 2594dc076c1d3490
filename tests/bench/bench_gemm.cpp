// GEMM benchmark: kiln's hand-scheduled fp32 matmul (kernels/gemm.kiln) and OpenBLAS's
// cblas_sgemm, side by side in one process, on the same inputs, for square sizes and
// thread counts. One JSON line per case on stdout.
#include <cblas.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kiln/runtime.h"

// OpenBLAS's own; declared again for a cblas.h from another BLAS, which lacks it.
extern "C" void openblas_set_num_threads(int num_threads);

namespace {

using kiln::bench::Options;

const char* const kUsage =
    "usage: bench_gemm [--quick] [--sizes 512,1024,2048] [--threads 1,2] [--repeat R]\n"
    "                  [--set KNOB=INT]... [--kernel FILE] [--case TEXT]\n"
    "                  [--cpu NAME] [--features F]\n"
    "\n"
    "Times kiln's matmul (tests/bench/kernels/gemm.kiln, func gemm) and OpenBLAS's\n"
    "cblas_sgemm on the same row-major fp32 inputs, C = A * B with M = N = K, and prints\n"
    "one JSON line per size and thread count:\n"
    "  {\"bench\":\"gemm_512_t1\", \"kiln_gflops\":..., \"baseline\":\"openblas\",\n"
    "   \"baseline_kernel\":\"Zen\", \"baseline_gflops\":..., \"ratio\":..., ...}\n"
    "baseline_kernel is the CPU OpenBLAS chose its kernels for; on a virtual machine that\n"
    "hides the CPU model it may be a generic one (Prescott), and the ratio flatters kiln:\n"
    "set OPENBLAS_CORETYPE then.\n"
    "peak_gflops is this host's FMA peak at the case's threads, measured at start by a loop of\n"
    "independent FMAs on the widest vectors kiln's target may use (peak_probe says which);\n"
    "kiln_peak_share and baseline_peak_share are each side's GFLOP/s over it.\n"
    "The sides run in turn, three blocks each (the library's first), each block warmed up\n"
    "once and followed by a pause for spinning threads; R timed runs of each side in all, whose\n"
    "median counts. host_load is other processes' CPUs during the case (/proc/stat); past 0.5,\n"
    "loaded is true and stderr says the figures are a loaded host's.\n"
    "max_rel_error is max |kiln - openblas| / max |openblas|. Exit status 1 when a\n"
    "case fails or kiln's result differs by more than 1e-4.\n"
    "\n"
    "  --quick         the smallest size only\n"
    "  --sizes LIST    the sizes M = N = K (default 512,1024,2048)\n"
    "  --threads LIST  thread counts for both libraries (default 1,2)\n"
    "  --repeat R      timed runs (default 20 up to 512, 10 up to 1024, 5 above)\n"
    "  --set KNOB=INT  a schedule knob of gemm.kiln (MB, NB, KB, MR, NR)\n"
    "  --kernel FILE   another .kiln file with a func gemm(A, B, C)\n"
    "  --cpu NAME      compile kiln's kernel for this CPU (LLVM's name) instead of this\n"
    "                  machine's: an AVX2 CPU (haswell, znver3) on an AVX-512 machine\n"
    "  --features F    and these LLVM features (+avx2,-avx512f)\n"
    "  --case TEXT     only cases whose name contains TEXT\n";

int default_repeat(int64_t n) { return n <= 512 ? 20 : n <= 1024 ? 10 : 5; }

// The arrays of one size: inputs, and each side's output.
struct Arrays {
  kiln::bench::Floats a, b, c_kiln, c_blas;
  explicit Arrays(int64_t n)
      : a(size_t(n * n)), b(size_t(n * n)), c_kiln(size_t(n * n)), c_blas(size_t(n * n)) {
    kiln::bench::fill_random(a, 1);
    kiln::bench::fill_random(b, 2);
  }
};

// Times both sides of one case into r; returns why it could not, if it could not.
std::optional<std::string> time_case(int64_t n, const kiln::codegen::Kernel& kernel, Arrays& arrays,
                                     kiln::bench::Result& r) {
  std::fprintf(stderr, "bench_gemm: %s (%d timed runs)\n", r.bench.c_str(), r.repeat);
  int blas_n = int(n);
  kiln::bench::KilnSide side(kernel, arrays.a.data(), arrays.b.data(), arrays.c_kiln, r.threads);
  // OpenBLAS's threads spin a while after a call: each block ends with a settle.
  kiln::bench::SideBySide t = kiln::bench::time_side_by_side(
      [&] { side.prepare(); }, [&] { side.run(); }, [&] { openblas_set_num_threads(r.threads); },
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_n, blas_n, blas_n, 1.0f,
                    arrays.a.data(), blas_n, arrays.b.data(), blas_n, 0.0f, arrays.c_blas.data(),
                    blas_n);
      },
      r.repeat);
  if (std::optional<std::string> e = side.error()) return e;
  r.kiln_seconds = t.kiln_seconds;
  r.baseline_seconds = t.baseline_seconds;
  r.host_load = t.host_load;

  r.max_rel_error = kiln::bench::max_rel_error(arrays.c_kiln, arrays.c_blas);
  return std::nullopt;
}

// Runs one size at every thread count; returns false when a case failed.
bool run_size(const Options& opts, int64_t n, const std::vector<int>& threads) {
  auto name = [n](int t) { return "gemm_" + std::to_string(n) + "_t" + std::to_string(t); };
  std::vector<int> todo;
  for (int t : threads) {
    if (name(t).find(opts.filter) != std::string::npos) todo.push_back(t);
  }
  if (todo.empty()) return true;

  Arrays arrays(n);
  kiln::bench::KernelOrError k = kiln::bench::try_compile_kernel(
      kiln::bench::kernel_path(opts, "gemm.kiln"), "gemm", {{"M", n}, {"N", n}, {"K", n}},
      opts.knobs, kiln::bench::target_of(opts));

  bool ok = true;
  for (int t : todo) {
    kiln::bench::Result r;
    r.bench = name(t);
    r.target = kiln::bench::target_of(opts);
    r.baseline = "openblas";
    r.baseline_kernel = openblas_get_corename();
    r.threads = t;
    r.repeat = opts.repeat ? opts.repeat : default_repeat(n);
    r.gflop = 2.0 * double(n) * double(n) * double(n) * 1e-9;
    auto time = [&](const kiln::codegen::Kernel& kernel, kiln::bench::Result& res) {
      return time_case(n, kernel, arrays, res);
    };
    ok = kiln::bench::finish_case(r, k, time, "bench_gemm", "OpenBLAS") && ok;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts = kiln::bench::parse_options(argc, argv, kUsage);
  // OpenBLAS reads the CPU itself; under a hypervisor that hides the model it may fall back to
  // its generic kernels (seen: "Prescott" on a Sapphire Rapids VM, a third of the speed).
  std::string core = openblas_get_corename();
  if (core == "Prescott" || core == "Core2" || core == "Nehalem" || core == "Generic" ||
      core == "Katmai" || core == "Barcelona")
    std::fprintf(stderr,
                 "bench_gemm: OpenBLAS runs its %s kernels here, not this CPU's vector ones; "
                 "set OPENBLAS_CORETYPE (SkylakeX, Haswell, Zen) for a fair baseline\n",
                 core.c_str());
  std::vector<int64_t> sizes = opts.sizes;
  if (sizes.empty())
    sizes = opts.quick ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 1024, 2048};
  std::vector<int> threads = opts.threads.empty() ? std::vector<int>{1, 2} : opts.threads;

  bool ok = true;
  for (int64_t n : sizes) ok = run_size(opts, n, threads) && ok;
  return ok ? 0 : 1;
}
