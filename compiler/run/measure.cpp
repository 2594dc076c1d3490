// The benchmark loop of kiln/run.h.
#include <algorithm>
#include <vector>

#include "kiln/run.h"
#include "kiln/runtime.h"
#include "kiln/stats.h"

namespace kiln {

BenchResult measure(const std::function<void()>& run_once, int repeat, int number) {
  constexpr uint64_t kRepeatTargetNs = 50'000'000;
  uint64_t start = kiln_now_ns();
  run_once();
  uint64_t warm = std::max<uint64_t>(kiln_now_ns() - start, 1);

  BenchResult r;
  r.repeat = repeat;
  r.number = number > 0
                 ? number
                 : static_cast<int>(std::clamp<uint64_t>(kRepeatTargetNs / warm, 1, 1'000'000));
  std::vector<double> per_run;
  for (int rep = 0; rep < r.repeat; ++rep) {
    uint64_t t0 = kiln_now_ns();
    for (int n = 0; n < r.number; ++n) run_once();
    per_run.push_back(static_cast<double>(kiln_now_ns() - t0) * 1e-9 / r.number);
  }
  r.round_s = per_run;
  RoundStats stats = round_stats(std::move(per_run));
  r.median_s = stats.median;
  r.min_s = stats.min;
  r.threads = kiln_runtime_threads();
  return r;
}

std::optional<double> gflops(const BenchResult& b) {
  if (b.flops < 0 || b.median_s <= 0) return std::nullopt;
  return static_cast<double>(b.flops) / b.median_s * 1e-9;
}

}  // namespace kiln
