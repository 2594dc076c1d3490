// What the benchmarks share: their options, compiling a .kiln kernel, timing, host
// arrays, the error against a baseline, and the one JSON line each case prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/codegen.h"
#include "kiln/ir.h"
#include "kiln/json.h"

namespace kiln::bench {

// The command line every benchmark accepts (`--help` prints it).
struct Options {
  bool quick = false;          // --quick: the smallest cases only, for smoke runs
  std::vector<int> threads;    // --threads 1,2: thread counts (empty: the benchmark's own)
  int repeat = 0;              // --repeat R: timed runs per case (0: the benchmark's own)
  ir::Overrides knobs;         // --set NAME=VALUE: applied after the benchmark's own values
  std::string kernel;          // --kernel FILE: another .kiln file with the same func
  std::string filter;          // --case TEXT: only the cases whose name contains TEXT
  std::vector<int64_t> sizes;  // --sizes 512,1024: the problem sizes, where a benchmark has them
  std::string cpu;             // --cpu NAME: compile for this CPU (of this machine's architecture)
  std::string features;        // --features F: and these LLVM features (+avx2,-avx512f)
};

// The target kiln compiles the benchmark's kernels for: this machine, or the --cpu and
// --features given (code for another CPU of the same architecture that this one can run: an
// AVX2 target on an AVX-512 machine).
Target target_of(const Options& opts);

// Parses argv. `--help` prints `usage` and exits 0; a bad option prints the problem and
// `usage` on stderr and exits 2.
Options parse_options(int argc, char** argv, const std::string& usage);

// The kernel directory of this source tree (tests/bench/kernels), or `opts.kernel`.
std::string kernel_path(const Options& opts, const std::string& file);

// A kernel compiled for this machine from a .kiln file, its params and knobs set by
// `overrides` (the benchmark's) and then its knobs by `knobs` (the command line's; a
// param there is an error, since the benchmark's arrays have the benchmark's sizes).
struct CompiledKernel {
  codegen::Kernel kernel;
  double compile_ms = 0;  // parse and kiln::compile (schedule, lower, passes, JIT)
};
CompiledKernel compile_kernel(const std::string& path, const std::string& func,
                              const ir::Overrides& overrides, const ir::Overrides& knobs,
                              const Target& target = Target::host());

// Lets another library's spinning worker threads go to sleep before the next timing.
void settle();

// Both sides of a case timed in turn, so that a change in the host's load during the case
// reaches both alike: kBlocks blocks of each, the baseline's first, `repeat` timed runs of
// each in all, each block after `prepare` for its side (its thread count), one warm-up run and
// a settle() after it. The medians of all of a side's runs, in seconds, and the host's load
// over the case: other processes' CPU time per second, in CPUs (/proc/stat's busy time less
// this process's), -1 when it cannot be read.
struct SideBySide {
  double kiln_seconds = 0, baseline_seconds = 0;
  double host_load = -1;
};
inline constexpr int kBlocks = 3;

class Floats;

// kiln's side of a case: `kernel` called on two inputs and an output (filled with NaN first, so
// that what it leaves unwritten fails the comparison), on a pool of `threads`.
class KilnSide {
 public:
  KilnSide(const codegen::Kernel& kernel, float* a, float* b, Floats& out, int threads);
  // Before each block: the pool at the case's threads, made once (a new pool's threads start
  // on their creator's CPU).
  void prepare();
  void run();
  // Why the side could not run: the pool would not have the threads, or the kernel failed.
  std::optional<std::string> error() const;

 private:
  const codegen::Kernel& kernel_;
  kiln_value args_[3];
  int threads_;
  bool threads_ok_ = true;
  int32_t status_ = 0;
};
SideBySide time_side_by_side(const std::function<void()>& prepare_kiln,
                             const std::function<void()>& kiln,
                             const std::function<void()>& prepare_baseline,
                             const std::function<void()>& baseline, int repeat);

// A 64-byte aligned float array from the runtime's allocator.
class Floats {
 public:
  explicit Floats(size_t n);
  ~Floats();
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

// Uniform values in [-1, 1), the same for the same seed.
void fill_random(Floats& a, uint64_t seed);

// Every element NaN: an output the kernel leaves unwritten then fails the comparison.
void fill_nan(Floats& a);

// max |got - ref| / max |ref| over the arrays (0 when ref is all zeros and got equals it).
double max_rel_error(const Floats& got, const Floats& ref);

// One case's result, printed as one JSON line on stdout.
struct Result {
  std::string bench;     // "gemm_512_t1"
  std::string baseline;  // "openblas", "onednn"
  // What the baseline picked for this machine ("SkylakeX" for OpenBLAS's kernels): a library
  // that misreads a virtual machine's CPU runs generic code, and the ratio means little.
  std::string baseline_kernel;
  int threads = 1;
  int repeat = 0;
  double gflop = 0;  // the work of one run
  double kiln_seconds = 0, baseline_seconds = 0;
  double compile_ms = 0;
  double max_rel_error = 0;
  double host_load = -1;             // other processes' CPUs during the case (-1: unknown)
  Target target = Target::host();    // what kiln's code was compiled for
  std::optional<std::string> error;  // why the case could not run; no timings then
};
void print_json(const Result& r);

// Adds what the figures ran on to a JSON line: "cpu" (the model name the kernel
// reports), "llvm_cpu" (the CPU kiln's code was compiled for) and "isa" (its vector
// features: avx2, fma, avx512f, ...). Ratios only mean something beside them.
void add_host(JsonObject& line, const Target& target = Target::host());

// The largest max_rel_error the benchmarks accept as a match.
inline constexpr double kTolerance = 1e-4;

// A kernel compiled once for several cases (compile_kernel), or why it could
// not be ("kiln: " and the error): each case then reports that error.
struct KernelOrError {
  std::optional<CompiledKernel> compiled;
  std::string error;
};
KernelOrError try_compile_kernel(const std::string& path, const std::string& func,
                                 const ir::Overrides& overrides, const ir::Overrides& knobs,
                                 const Target& target = Target::host());

// Finishes a case whose name, baseline, threads, repeat and gflop are set:
// times it with `time_case` (which fills the timings and max_rel_error, or
// returns why it could not run), or takes k's compile error; a result beyond
// kTolerance is reported on stderr as "PROGRAM: CASE: kiln's result differs
// from BASELINE's (ERR)". Prints the JSON line and returns whether the case
// ran and matched.
bool finish_case(
    Result& r, const KernelOrError& k,
    const std::function<std::optional<std::string>(const codegen::Kernel&, Result&)>& time_case,
    const char* program, const char* baseline_name);

}  // namespace kiln::bench
