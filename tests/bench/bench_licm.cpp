// LICM + CSE benchmark: each kernel's scheduled loop nest compiled twice in one process,
// T0 with the -O2 pass pipeline less licm and cse (simplify still on) and T1 with the
// whole -O2 pipeline, both through LLVM -O3, run single-threaded on the same inputs. One
// JSON line per case with the speedup T0 / T1, then a summary line: the share of cases
// improved by more than 1%, the geometric mean and the worst case.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "kiln/interp.h"
#include "kiln/json.h"
#include "kiln/runtime.h"
#include "kiln/stats.h"

namespace {

using kiln::bench::Options;

const char* const kUsage =
    "usage: bench_licm [--quick] [--repeat R] [--case TEXT]\n"
    "\n"
    "For each example operator (examples/*.kiln) at several sizes and each LICM kernel\n"
    "(tests/bench/kernels/licm_*.kiln), compiles the same scheduled loop nest twice:\n"
    "T0 with the -O2 pass pipeline less licm and cse, T1 with the whole -O2 pipeline\n"
    "(LLVM -O3 for both). Both run on one thread on the same random inputs; their\n"
    "outputs must agree within 1e-5 (max |T0 - T1| / max |T1| per output buffer).\n"
    "Prints one JSON line per case:\n"
    "  {\"bench\":\"licm_matmul_256\", \"t0_ms\":..., \"t1_ms\":..., \"speedup\":...,\n"
    "   \"max_rel_error\":..., \"repeat\":...}\n"
    "then {\"bench\":\"licm_summary\", \"cases\":N, \"improved_over_1pct\":k,\n"
    "\"share_improved\":k/N, \"geomean_speedup\":..., \"worst_speedup\":..., \"worst_case\":...}.\n"
    "T0 and T1 alternate: one warm-up run each, then R timed runs each; the medians count.\n"
    "KILN_LICM_DUMP=1 in the environment prints both loop nests on stderr.\n"
    "Exit status 1 when a case fails or its outputs differ by more than 1e-5.\n"
    "\n"
    "  --quick      the first size of each operator only\n"
    "  --repeat R   timed runs per side (default: about 0.25 s of runs, 5 to 50)\n"
    "  --case TEXT  only cases whose name contains TEXT\n";

// The largest relative difference between T0's and T1's outputs accepted as a match.
constexpr double kLicmTolerance = 1e-5;

// One case: a func of a .kiln file with its params set.
struct Case {
  std::string name;  // "licm_matmul_256"
  std::string path;
  std::string func;
  kiln::ir::Overrides params;              // compile-time params
  std::map<std::string, int64_t> runtime;  // run-time params (Bindings params)
};

std::string example(const std::string& file) { return std::string(KILN_EXAMPLES) + "/" + file; }
std::string kernel(const std::string& file) { return std::string(KILN_BENCH_KERNELS) + "/" + file; }

// Every case, each operator's sizes smallest first.
std::vector<std::vector<Case>> all_cases() {
  std::vector<std::vector<Case>> ops;
  auto op = [&](const std::string& path, const std::string& func) {
    ops.emplace_back();
    return [&ops, path, func](const std::string& suffix, kiln::ir::Overrides params,
                              std::map<std::string, int64_t> runtime = {}) {
      ops.back().push_back(
          {"licm_" + func + "_" + suffix, path, func, std::move(params), std::move(runtime)});
    };
  };

  auto matmul = op(example("matmul.kiln"), "matmul");
  for (int64_t n : {128, 256, 512}) matmul(std::to_string(n), {{"M", n}, {"N", n}, {"K", n}});

  auto bmm = op(example("batch_matmul.kiln"), "batch_matmul");
  bmm("8x64", {{"BATCH", 8}, {"M", 64}, {"N", 64}, {"K", 64}});
  bmm("8x128", {{"BATCH", 8}, {"M", 128}, {"N", 128}, {"K", 128}});
  bmm("4x256", {{"BATCH", 4}, {"M", 256}, {"N", 256}, {"K", 256}});

  auto conv = op(example("conv2d.kiln"), "conv2d");
  conv("c16_16", {{"N", 1}, {"C", 16}, {"H", 16}, {"W", 16}, {"F", 16}});
  conv("c32_28", {{"N", 1}, {"C", 32}, {"H", 28}, {"W", 28}, {"F", 32}});
  conv("c64_56", {{"N", 1}, {"C", 64}, {"H", 56}, {"W", 56}, {"F", 64}});

  auto trmm = op(example("trmm.kiln"), "trmm");
  for (int64_t n : {128, 256, 512}) trmm(std::to_string(n), {{"M", n}, {"N", n}});

  auto heat = op(example("heat2d.kiln"), "heat2d");
  heat("t8_64", {{"T", 8}, {"N", 64}});
  heat("t16_256", {{"T", 16}, {"N", 256}});
  heat("t32_512", {{"T", 32}, {"N", 512}});

  auto spmm = op(example("spmm.kiln"), "spmm");
  spmm("256", {{"m", 256}, {"n", 64}, {"p", 256}, {"nnz", 4096}});
  spmm("1024", {{"m", 1024}, {"n", 128}, {"p", 1024}, {"nnz", 32768}});

  auto seg = op(example("segment_sum.kiln"), "segment_sum");
  seg("1000", {{"nnz", 20000}}, {{"m", 1000}});
  seg("10000", {{"nnz", 500000}}, {{"m", 10000}});

  auto dw = op(kernel("licm_depthwise.kiln"), "depthwise");
  dw("c32_56", {});
  dw("c64_112_s2", {{"C", 64}, {"H", 112}, {"W", 112}, {"S", 2}, {"OH", 56}, {"OW", 56}});

  auto c3 = op(kernel("licm_conv3d.kiln"), "conv3d");
  c3("c4_16", {});
  c3("c8_32",
     {{"C", 8}, {"D", 16}, {"H", 32}, {"W", 32}, {"F", 16}, {"OD", 16}, {"OH", 32}, {"OW", 32}});

  auto pool = op(kernel("licm_maxpool.kiln"), "maxpool");
  pool("c32_56_s2", {});
  pool("c64_112_s2", {{"C", 64}, {"H", 112}, {"W", 112}, {"OH", 56}, {"OW", 56}});
  pool("c32_56_s1", {{"S", 1}, {"OH", 56}, {"OW", 56}});

  auto rows = op(kernel("licm_rowsum.kiln"), "rowsum");
  rows("1024x1024", {});
  rows("4096x512", {{"M", 4096}, {"N", 512}});
  rows("256x8192", {{"M", 256}, {"N", 8192}});

  auto col = op(kernel("licm_im2col.kiln"), "im2col");
  col("c16_56", {});
  col("c64_28", {{"C", 64}, {"H", 28}, {"W", 28}, {"OH", 28}, {"OW", 28}});
  col("c32_56_s2", {{"C", 32}, {"S", 2}, {"OH", 28}, {"OW", 28}});
  return ops;
}

// max |got - ref| / max |ref| over each output buffer; the largest over the buffers.
double max_rel_error(const kiln::ir::Func& f, const kiln::Bindings& got,
                     const kiln::Bindings& ref) {
  double worst = 0;
  for (const kiln::ir::Buf& buf : f.bufs) {
    if (buf.kind != kiln::ir::BufKind::Output) continue;
    const kiln::HostBuffer& g = got.buffers.at(buf.name);
    const kiln::HostBuffer& r = ref.buffers.at(buf.name);
    if (g.size() != r.size()) return std::numeric_limits<double>::infinity();
    double max_diff = 0, max_ref = 0;
    for (int64_t i = 0; i < r.size(); ++i) {
      double d = std::fabs(g.get_f(i) - r.get_f(i));
      if (!(d <= max_diff)) max_diff = d;  // a NaN sticks
      max_ref = std::max(max_ref, std::fabs(r.get_f(i)));
    }
    double e = max_ref == 0 ? max_diff : max_diff / max_ref;
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

struct Timing {
  double t0_seconds = 0, t1_seconds = 0;
  int repeat = 0;
  double max_rel_error = 0;
};

double median(std::vector<double> v) { return kiln::round_stats(std::move(v)).median; }

// Compiles and times one case; throws on any failure.
Timing run_case(const Options& opts, const Case& c) {
  kiln::ir::Module m = kiln::frontend::parse_file(c.path);
  const kiln::ir::Func* found = m.find(c.func);
  if (!found) throw std::runtime_error(c.path + ": no func '" + c.func + "'");
  kiln::ir::Func f = kiln::ir::apply_overrides(*found, c.params);

  // T0 without LICM and CSE, T1 with them; the pipeline is otherwise kiln's own.
  kiln::CompileRequest r0{.func = f}, r1{.func = f};
  r0.options.passes.disabled = {"licm", "cse"};
  kiln::CompileResult c0 = kiln::compile(r0), c1 = kiln::compile(r1);
  const kiln::ir::LoweredFunc &f0 = c0.optimized, &f1 = c1.optimized;
  if (std::getenv("KILN_LICM_DUMP")) {
    std::fprintf(stderr, "--- %s T0\n%s\n--- %s T1\n%s\n", c.name.c_str(),
                 kiln::ir::to_string(f0).c_str(), c.name.c_str(), kiln::ir::to_string(f1).c_str());
  }
  const kiln::codegen::Kernel &k0 = *c0.kernel, &k1 = *c1.kernel;

  std::map<std::string, int64_t> params = kiln::interp::param_values(f, c.runtime);
  kiln::Bindings b0 = kiln::interp::random_bindings(f, params, 1);
  kiln::Bindings b1 = b0;
  std::vector<kiln_value> a0 = kiln::codegen::pack_arguments(f0, b0),
                          a1 = kiln::codegen::pack_arguments(f1, b1);
  auto call = [](const kiln::codegen::Kernel& k, const std::vector<kiln_value>& a) {
    uint64_t start = kiln_now_ns();
    int32_t status = k.call(a.data(), int32_t(a.size()));
    uint64_t end = kiln_now_ns();
    if (status != 0) throw std::runtime_error("the kernel returned " + std::to_string(status));
    return double(end - start) * 1e-9;
  };

  // Warm-up, which also sets how many timed runs fit in about a quarter second.
  double warm = call(k0, a0) + call(k1, a1);
  Timing t;
  t.max_rel_error = max_rel_error(f, b0, b1);
  t.repeat = opts.repeat ? opts.repeat : std::clamp(int(0.25 / std::max(warm, 1e-9)), 5, 50);
  std::fprintf(stderr, "bench_licm: %s (%d timed runs)\n", c.name.c_str(), t.repeat);
  std::vector<double> s0, s1;
  for (int r = 0; r < t.repeat; ++r) {  // alternating, so drift hits both sides alike
    s0.push_back(call(k0, a0));
    s1.push_back(call(k1, a1));
  }
  t.t0_seconds = median(s0);
  t.t1_seconds = median(s1);
  return t;
}

void print_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options opts = kiln::bench::parse_options(argc, argv, kUsage);
  if (!opts.threads.empty() || !opts.knobs.empty() || !opts.kernel.empty() || !opts.sizes.empty()) {
    std::fprintf(stderr, "bench_licm: --threads, --set, --kernel and --sizes do not apply\n%s",
                 kUsage);
    return 2;
  }
  if (kiln_runtime_set_threads(1) != 1) {
    std::fprintf(stderr, "bench_licm: the runtime would not run one thread\n");
    return 1;
  }

  bool ok = true;
  int cases = 0, improved = 0;
  double log_sum = 0, worst = std::numeric_limits<double>::infinity();
  std::string worst_case;
  for (const std::vector<Case>& sizes : all_cases()) {
    for (size_t i = 0; i < sizes.size() && !(opts.quick && i > 0); ++i) {
      const Case& c = sizes[i];
      if (c.name.find(opts.filter) == std::string::npos) continue;
      std::optional<Timing> t;
      try {
        t = run_case(opts, c);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_licm: %s: %s\n", c.name.c_str(), e.what());
        print_line(kiln::JsonObject().str("bench", c.name).str("error", "see stderr").done());
        ok = false;
        continue;
      }
      double speedup = t->t0_seconds / t->t1_seconds;
      if (!(t->max_rel_error <= kLicmTolerance)) {
        std::fprintf(stderr, "bench_licm: %s: T0 and T1 differ (%g)\n", c.name.c_str(),
                     t->max_rel_error);
        ok = false;
      }
      print_line(kiln::JsonObject()
                     .str("bench", c.name)
                     .num("t0_ms", t->t0_seconds * 1e3, 4)
                     .num("t1_ms", t->t1_seconds * 1e3, 4)
                     .num("speedup", speedup, 4)
                     .num("max_rel_error", t->max_rel_error, 3)
                     .integer("repeat", t->repeat)
                     .done());
      ++cases;
      if (speedup > 1.01) ++improved;
      log_sum += std::log(speedup);
      if (speedup < worst) {
        worst = speedup;
        worst_case = c.name;
      }
    }
  }
  if (cases > 0) {
    print_line(kiln::JsonObject()
                   .str("bench", "licm_summary")
                   .integer("cases", cases)
                   .integer("improved_over_1pct", improved)
                   .num("share_improved", double(improved) / cases, 4)
                   .num("geomean_speedup", std::exp(log_sum / cases), 4)
                   .num("worst_speedup", worst, 4)
                   .str("worst_case", worst_case)
                   .done());
  }
  return ok ? 0 : 1;
}
