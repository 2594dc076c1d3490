// A run of a func on this machine, as `kiln run` makes it and kilnd's runner
// makes it for the Run method: values for the run-time params (given, or test
// sizes that satisfy the constraints), inputs (given and checked, or
// seeded-random), the kernel compiled through the pipeline and called, the
// comparison with the reference interpreter and the benchmark. One
// implementation, so that the CLI and the service report the same results.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/buffers.h"
#include "kiln/compile.h"
#include "kiln/interp.h"
#include "kiln/ir.h"

namespace kiln {

// ---------------------------------------------------------------------------
// Run-time params

struct RunParams {
  std::map<std::string, int64_t> values;  // every run-time param of the func
  std::vector<std::string> chosen;        // those kiln picked (not given)
};

// Run-time params not in `given` get the first of a few small sizes (13, 16,
// 8, ..., chosen so that remainder loops run too) under which every
// constraint of f holds. Throws CompileError (stage "interp") when `given`
// names something that is not a run-time param of f (a compile-time param, an
// unknown name), when a given value breaks a constraint, or when no size tried
// satisfies them all.
// Constraints this cannot evaluate are left to the compiler.
RunParams run_param_values(const ir::Func& f, const std::map<std::string, int64_t>& given);

// ---------------------------------------------------------------------------
// Outputs and timings

// The sum of an output's elements: a cheap fingerprint of a run.
struct OutputSum {
  std::string buf;
  std::vector<int64_t> shape;
  double checksum = 0;
};

// The checksums of the buffers named, in order.
std::vector<OutputSum> checksums(const std::vector<std::string>& names,
                                 const std::map<std::string, HostBuffer>& buffers);
// The checksums of f's outputs.
std::vector<OutputSum> checksums(const ir::Func& f, const Bindings& b);

// What a benchmark measured.
struct BenchResult {
  int repeat = 0, number = 0;   // repeats of `number` runs each
  int threads = 0;              // of the runtime's pool
  std::string device;           // "" on the CPU; a GPU run's device ("NVIDIA H100 (sm_90)")
  double median_s = 0;          // per run
  double min_s = 0;             // per run, the fastest repeat
  int64_t flops = -1;           // per run; -1 = unknown
  std::vector<double> round_s;  // each repeat's time per run, in order
};

// Times `run_once`: one warm-up run, then `repeat` timed repeats of `number`
// runs each (number <= 0: chosen from the warm-up so that a repeat takes about
// 50 ms).
BenchResult measure(const std::function<void()>& run_once, int repeat, int number);

// GFLOP/s, when the flop count is known.
std::optional<double> gflops(const BenchResult& b);

// The floating-point operations one run of f performs (ir::flop_count), counted
// on the algorithm's own loops, not on a schedule's: the work is the same, and
// the algorithm's loops are boxes where a tiled or skewed schedule's bounds
// depend on the loops around them and must be stepped through. `params` gives
// the run-time params' values. -1 when unknown (data-dependent bounds).
int64_t algorithm_flops(const ir::Func& f, const std::map<std::string, int64_t>& params,
                        const Limits& limits = {});

// ---------------------------------------------------------------------------
// One run of a compiled func

struct RunSpec {
  CompileOptions options{};                         // for the host: the kernel runs in this process
  std::map<std::string, int64_t> runtime_params{};  // given values; the rest chosen
  // Given inputs by name; every other input is seeded-random. Each must be an
  // input of the func with its dtype and shape, and meet its value spec.
  Tensors inputs{};
  uint64_t seed = 0;
  bool check = false;  // also run the reference interpreter and compare
  bool bench = false;  // then time the kernel (skipped when the check failed)
  // >= 0: compile for GPU `gpu` of this machine (its architecture read from the device; the
  // target in `options` is replaced) and run there; the bench times each run of all its
  // kernels with CUDA events (`number` is 1).
  int gpu = -1;
  int repeat = 5, number = 0;
  // Told the name and duration of each step (compile, random inputs,
  // reference interpreter, compiled run, benchmark), for logging.
  std::function<void(std::string_view step, double ms)> on_step{};
};

struct RunOutcome {
  std::map<std::string, int64_t> params;  // every param's value in this run
  std::vector<std::string> chosen;        // run-time params kiln gave a value
  std::vector<std::string> notes;         // the compiler's warnings
  Bindings bindings;                      // the inputs and outputs after the run
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;  // with check
  std::optional<BenchResult> bench;          // with bench
};

// Compiles f (its compile-time values already set) for this machine with
// spec.options and runs it in this process. Throws CompileError: from the
// pipeline; stage "interp" for run-time params or a given input that does
// not fit ("input x is f32[4] but f declares it f32[5]", a broken value spec
// naming the element); stage "run" for a status the kernel returned.
RunOutcome run_kernel(const ir::Func& f, const RunSpec& spec);

// One run of a graph compiled for this machine, as `kiln run` makes it.
struct GraphRunOutcome {
  size_t calls_before = 0, calls_after = 0;  // calls as written, and after the graph passes
  size_t kernels = 0;                        // distinct operators compiled
  std::vector<std::string> notes;            // the compiler's warnings
  Tensors tensors;                           // the graph's outputs by name
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;  // with check (below)
  // With check, what was compared: "the whole graph as written", or, for a graph whose
  // reference run would take long, each call's kernel against its operator (below).
  std::string check_scope;
  bool per_call_check = false;
  std::optional<BenchResult> bench;
};

// A graph is checked whole (the reference interpreter runs the graph as written, and its
// outputs are compared) while its calls do at most this many floating-point operations as
// written; past it, each call's kernel is checked against the reference interpreter running
// the call's operator on the very inputs the kernel was given, at kCheckPointsPerOutput points
// of each output (every point of an output that has fewer, and every output whole whose
// operator cannot be traced back: interp::run_reference_at).
inline constexpr int64_t kWholeGraphCheckFlops = 50'000'000;
inline constexpr int64_t kCheckPointsPerOutput = 256;

// Runs the graph passes on g and compiles every operator into this process
// with spec.options, then runs g on its inputs: spec.inputs by tensor name
// (checked against the tensor's dtype and shape), the others seeded-random,
// each honoring the value spec of the first operator that reads it. With
// spec.check, the reference interpreter runs the graph as written first, or
// each call is checked as it runs (kWholeGraphCheckFlops).
// spec.runtime_params is not used: a graph binds its operators' params.
GraphRunOutcome run_graph(const ir::Graph& g, const RunSpec& spec);

// Checks given inputs against f under `params`: each one an input of f, of
// its dtype and shape, meeting its value spec. "" when they fit, else the
// first problem, naming the buffer (and for a value, its index and value).
std::string given_input_error(const ir::Func& f, const Tensors& inputs,
                              const std::map<std::string, int64_t>& params);

}  // namespace kiln
