// The statistics of a measurement's rounds (kiln/stats.h).
#include "kiln/stats.h"

#include <algorithm>
#include <cmath>

namespace kiln {

RoundStats round_stats(std::vector<double> rounds) {
  RoundStats s;
  if (rounds.empty()) return s;
  std::sort(rounds.begin(), rounds.end());
  size_t n = rounds.size(), mid = n / 2;
  s.min = rounds.front();
  s.max = rounds.back();
  s.median = n % 2 ? rounds[mid] : (rounds[mid - 1] + rounds[mid]) / 2;
  if (n < 2) return s;
  double mean = 0;
  for (double v : rounds) mean += v;
  mean /= static_cast<double>(n);
  double squares = 0;
  for (double v : rounds) squares += (v - mean) * (v - mean);
  s.cv = mean > 0 ? std::sqrt(squares / static_cast<double>(n - 1)) / mean : 0;
  return s;
}

}  // namespace kiln
