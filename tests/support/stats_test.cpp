// The statistics of a measurement's rounds: median, fastest, slowest and spread, one way for
// every part of kiln that times a kernel.
#include "kiln/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln {
namespace {

TEST(RoundStats, TheMedianExtremesAndSpreadOfRounds) {
  RoundStats none = round_stats({});
  EXPECT_EQ(none.median, 0);
  EXPECT_EQ(none.cv, 0);
  RoundStats one = round_stats({2.0});
  EXPECT_EQ(one.min, 2.0);
  EXPECT_EQ(one.max, 2.0);
  EXPECT_EQ(one.cv, 0);
  RoundStats s = round_stats({3.0, 1.0, 2.0, 4.0});
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 4.0);
  EXPECT_EQ(s.median, 2.5);
  EXPECT_NEAR(s.cv, std::sqrt(5.0 / 3.0) / 2.5, 1e-12);  // sample standard deviation / mean
  EXPECT_EQ(round_stats({5.0, 1.0, 3.0}).median, 3.0);   // an odd count: the middle one
}

}  // namespace
}  // namespace kiln
