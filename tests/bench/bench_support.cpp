// What the benchmarks share: options, kernel compilation, timing, arrays, JSON lines.
#include "bench_support.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>

#include "fma_peak.h"
#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "kiln/json.h"
#include "kiln/runtime.h"
#include "kiln/stats.h"

namespace kiln::bench {
namespace {

[[noreturn]] void usage_error(const std::string& problem, const std::string& usage) {
  std::fprintf(stderr, "%s\n%s", problem.c_str(), usage.c_str());
  std::exit(2);
}

int64_t parse_int(const std::string& text, const std::string& what, const std::string& usage) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    usage_error(what + ": expected an integer, found '" + text + "'", usage);
  }
  return v;
}

std::vector<int64_t> parse_list(const std::string& text, const std::string& what,
                                const std::string& usage) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    int64_t v = parse_int(item, what, usage);
    if (v <= 0) usage_error(what + ": values must be positive, found " + item, usage);
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

Options parse_options(int argc, char** argv, const std::string& usage) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value", usage);
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", usage.c_str());
      std::exit(0);
    } else if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--threads") {
      for (int64_t t : parse_list(value(), "--threads", usage)) o.threads.push_back(int(t));
    } else if (arg == "--sizes") {
      o.sizes = parse_list(value(), "--sizes", usage);
    } else if (arg == "--repeat") {
      o.repeat = int(parse_int(value(), "--repeat", usage));
      if (o.repeat < 1) usage_error("--repeat must be at least 1", usage);
    } else if (arg == "--set") {
      std::string v = value();
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) usage_error("--set: expected NAME=INT", usage);
      o.knobs[v.substr(0, eq)] = parse_int(v.substr(eq + 1), "--set " + v.substr(0, eq), usage);
    } else if (arg == "--kernel") {
      o.kernel = value();
    } else if (arg == "--cpu") {
      o.cpu = value();
    } else if (arg == "--features") {
      o.features = value();
    } else if (arg == "--case") {
      o.filter = value();
    } else {
      usage_error("unknown option '" + arg + "'", usage);
    }
  }
  return o;
}

Target target_of(const Options& opts) {
  if (opts.cpu.empty() && opts.features.empty()) return Target::host();
  return Target::named("", opts.cpu, opts.features);
}

std::string kernel_path(const Options& opts, const std::string& file) {
  if (!opts.kernel.empty()) return opts.kernel;
  return std::string(KILN_BENCH_KERNELS) + "/" + file;
}

CompiledKernel compile_kernel(const std::string& path, const std::string& func,
                              const ir::Overrides& overrides, const ir::Overrides& knobs,
                              const Target& target) {
  uint64_t start = kiln_now_ns();
  ir::Module m = frontend::parse_file(path);
  const ir::Func* f = m.find(func);
  if (!f) throw std::runtime_error(path + ": no func '" + func + "'");
  for (const auto& [name, value] : knobs) {
    if (f->find_param(name)) {
      throw std::runtime_error("--set " + name + ": '" + name +
                               "' is a param, which the benchmark sets; only knobs can be set");
    }
  }
  // The benchmark's own values first, then the command line's knobs over them.
  CompileRequest r{.func = ir::apply_overrides(*f, overrides), .overrides = knobs};
  r.options.target = target;
  codegen::Kernel kernel = *compile(r).kernel;
  return {std::move(kernel), double(kiln_now_ns() - start) * 1e-6};
}

void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

namespace {

// The busy time of every CPU since boot, and this process's CPU time, in seconds; busy < 0
// when /proc/stat cannot be read.
struct CpuSample {
  double busy = -1, self = 0;
  uint64_t wall_ns = 0;
};

CpuSample cpu_sample() {
  CpuSample c;
  c.wall_ns = kiln_now_ns();
  if (FILE* f = std::fopen("/proc/stat", "re")) {
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                       steal = 0;
    long hz = sysconf(_SC_CLK_TCK);
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle,
                    &iowait, &irq, &softirq, &steal) >= 4 &&
        hz > 0)
      c.busy = double(user + nice + system + irq + softirq + steal) / double(hz);
    std::fclose(f);
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  c.self = double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  return c;
}

}  // namespace

KilnSide::KilnSide(const codegen::Kernel& kernel, float* a, float* b, Floats& out, int threads)
    : kernel_(kernel), threads_(threads) {
  args_[0].ptr = a;
  args_[1].ptr = b;
  args_[2].ptr = out.data();
  fill_nan(out);
}

void KilnSide::prepare() {
  if (kiln_runtime_threads() != threads_)
    threads_ok_ &= kiln_runtime_set_threads(threads_) == threads_;
}

void KilnSide::run() { status_ |= kernel_.call(args_, 3); }

std::optional<std::string> KilnSide::error() const {
  if (!threads_ok_)
    return "kiln: the runtime would not run " + std::to_string(threads_) + " threads";
  if (status_ != 0) return "kiln: the kernel returned " + std::to_string(status_);
  return std::nullopt;
}

SideBySide time_side_by_side(const std::function<void()>& prepare_kiln,
                             const std::function<void()>& kiln,
                             const std::function<void()>& prepare_baseline,
                             const std::function<void()>& baseline, int repeat) {
  std::vector<double> kiln_s, baseline_s;
  auto block = [](const std::function<void()>& prepare, const std::function<void()>& fn, int runs,
                  std::vector<double>& out) {
    prepare();
    fn();  // warm-up
    for (int i = 0; i < runs; ++i) {
      uint64_t start = kiln_now_ns();
      fn();
      out.push_back(double(kiln_now_ns() - start) * 1e-9);
    }
    settle();
  };
  CpuSample before = cpu_sample();
  for (int b = 0; b < kBlocks; ++b) {
    int runs = repeat / kBlocks + (b < repeat % kBlocks ? 1 : 0);
    if (runs == 0) runs = 1;
    block(prepare_baseline, baseline, runs, baseline_s);
    block(prepare_kiln, kiln, runs, kiln_s);
  }
  CpuSample after = cpu_sample();
  SideBySide out;
  out.kiln_seconds = round_stats(kiln_s).median;
  out.baseline_seconds = round_stats(baseline_s).median;
  double wall = double(after.wall_ns - before.wall_ns) * 1e-9;
  if (before.busy >= 0 && after.busy >= 0 && wall > 0)
    out.host_load = std::max(0.0, ((after.busy - before.busy) - (after.self - before.self)) / wall);
  return out;
}

Floats::Floats(size_t n) : size_(n) {
  data_ = static_cast<float*>(kiln_alloc(std::max<size_t>(n, 1) * sizeof(float), 64));
  if (!data_) throw std::bad_alloc();
}

Floats::~Floats() { kiln_free(data_); }

void fill_random(Floats& a, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < a.size(); ++i) a.data()[i] = dist(rng);
}

void fill_nan(Floats& a) {
  std::fill(a.data(), a.data() + a.size(), std::numeric_limits<float>::quiet_NaN());
}

double max_rel_error(const Floats& got, const Floats& ref) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = std::fabs(double(got.data()[i]) - double(ref.data()[i]));
    if (!(d <= max_diff)) max_diff = d;  // a NaN sticks
    max_ref = std::max(max_ref, std::fabs(double(ref.data()[i])));
  }
  if (max_ref == 0) return max_diff;
  return max_diff / max_ref;
}

KernelOrError try_compile_kernel(const std::string& path, const std::string& func,
                                 const ir::Overrides& overrides, const ir::Overrides& knobs,
                                 const Target& target) {
  KernelOrError k;
  try {
    k.compiled = compile_kernel(path, func, overrides, knobs, target);
  } catch (const std::exception& e) {
    k.error = "kiln: " + std::string(e.what());
  }
  return k;
}

bool finish_case(
    Result& r, const KernelOrError& k,
    const std::function<std::optional<std::string>(const codegen::Kernel&, Result&)>& time_case,
    const char* program, const char* baseline_name) {
  bool ok = true;
  if (k.compiled) {
    r.compile_ms = k.compiled->compile_ms;
    r.error = time_case(k.compiled->kernel, r);
  } else {
    r.error = k.error;
  }
  if (r.error) {
    ok = false;
  } else if (!(r.max_rel_error <= kTolerance)) {
    std::fprintf(stderr, "%s: %s: kiln's result differs from %s's (%g)\n", program, r.bench.c_str(),
                 baseline_name, r.max_rel_error);
    ok = false;
  }
  print_json(r);
  return ok;
}

void add_host(JsonObject& line, const Target& target) {
  static const std::string model = [] {
    std::FILE* f = std::fopen("/proc/cpuinfo", "r");
    std::string name;
    if (!f) return name;
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) {
      std::string l = buf;
      // x86 says "model name", aarch64 kernels "CPU part" at best.
      if (l.rfind("model name", 0) == 0 && l.find(':') != std::string::npos) {
        name = l.substr(l.find(':') + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        name.erase(name.find_last_not_of(" \t\n") + 1);
        break;
      }
    }
    std::fclose(f);
    return name;
  }();
  const char* const wanted[] = {"sse4.2",   "avx",      "avx2",       "fma",        "avx512f",
                                "avx512bw", "avx512vl", "avx512vnni", "avx512bf16", "avx512fp16",
                                "amx-tile", "neon",     "sve",        "sve2"};
  std::string isa;
  for (const char* w : wanted) {
    if (codegen::target_has_feature(target, w)) isa += (isa.empty() ? "" : ",") + std::string(w);
  }
  line.str("cpu", model.empty() ? "unknown" : model);
  line.str("llvm_cpu", target.cpu).str("isa", isa);
}

void print_json(const Result& r) {
  JsonObject line;
  line.str("bench", r.bench);
  add_host(line, r.target);
  if (r.error) {
    line.str("baseline", r.baseline).str("error", *r.error);
  } else {
    double kiln_gflops = r.gflop / r.kiln_seconds;
    double baseline_gflops = r.gflop / r.baseline_seconds;
    line.num("kiln_gflops", kiln_gflops, 4);
    line.str("baseline", r.baseline);
    if (!r.baseline_kernel.empty()) line.str("baseline_kernel", r.baseline_kernel);
    line.num("baseline_gflops", baseline_gflops, 4);
    line.num("ratio", kiln_gflops / baseline_gflops, 3);
    line.num("max_rel_error", r.max_rel_error, 3);
    line.integer("threads", r.threads).integer("repeat", r.repeat);
    line.num("kiln_ms", r.kiln_seconds * 1e3, 4);
    line.num("baseline_ms", r.baseline_seconds * 1e3, 4);
    line.num("compile_ms", r.compile_ms, 4);
    // This host's FMA peak for the vectors kiln's code may use, at the case's threads: how much
    // of the machine each side used.
    const FmaPeak& peak = fma_peak(fma_width(codegen::target_has_feature(r.target, "avx512f"),
                                             codegen::target_has_feature(r.target, "avx2") &&
                                                 codegen::target_has_feature(r.target, "fma")),
                                   r.threads);
    if (r.host_load >= 0) {
      // Other processes' CPUs while the case ran: past half a CPU, its figures are a loaded
      // host's (both sides saw the same load, block by block).
      line.num("host_load", r.host_load, 3).boolean("loaded", r.host_load > 0.5);
      if (r.host_load > 0.5)
        std::fprintf(stderr,
                     "%s: the host was loaded (other processes took %.2f CPUs while it ran): "
                     "these figures are a loaded host's\n",
                     r.bench.c_str(), r.host_load);
    }
    line.num("peak_gflops", peak.gflops, 4);
    line.num("kiln_peak_share", kiln_gflops / peak.gflops, 3);
    line.num("baseline_peak_share", baseline_gflops / peak.gflops, 3);
    line.str("peak_probe", peak.probe);
  }
  std::printf("%s\n", line.done().c_str());
  std::fflush(stdout);
}

}  // namespace kiln::bench
