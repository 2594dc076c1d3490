// How `kiln run --bench` times a kernel or a graph.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

namespace kiln::cli {

// What `kiln run --bench` measured.
struct BenchResult {
  int repeat = 0, number = 0;  // repeats of `number` runs each
  int threads = 0;             // of the runtime's pool
  double median_s = 0;         // per run
  double min_s = 0;            // per run, the fastest repeat
  int64_t flops = -1;          // per run; -1 = unknown
};

// Times `run_once`: one warm-up run, then `repeat` timed repeats of `number`
// runs each (number <= 0: chosen from the warm-up so that a repeat takes about
// 50 ms).
BenchResult measure(const std::function<void()>& run_once, int repeat, int number);

// GFLOP/s, when the flop count is known.
std::optional<double> gflops(const BenchResult& b);

}  // namespace kiln::cli
