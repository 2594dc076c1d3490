// The statistics of a measurement's rounds (each round's time per call, in any one unit): what
// every part of kiln that times a kernel (kiln run --bench, kilnd's Measure, the tuner and its
// records, the benchmarks) reports from them, computed one way.
#pragma once

#include <vector>

namespace kiln {

struct RoundStats {
  double median = 0, min = 0, max = 0;
  double cv = 0;  // the sample standard deviation over the mean; 0 with fewer than two rounds
};
// None: all 0.
RoundStats round_stats(std::vector<double> rounds);

}  // namespace kiln
