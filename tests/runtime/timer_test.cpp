// kiln_now_ns: a monotonic clock in nanoseconds. No test asserts how fast anything runs.
#include <gtest/gtest.h>
#include <kiln/runtime.h>
#include <time.h>

#include <cstdint>

namespace kiln::testing {
namespace {

TEST(Timer, NeverGoesBackwards) {
  uint64_t last = kiln_now_ns();
  EXPECT_GT(last, 0u);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t now = kiln_now_ns();
    ASSERT_GE(now, last) << "at call " << i;
    last = now;
  }
}

TEST(Timer, CountsAtLeastTheTimeSlept) {
  const uint64_t before = kiln_now_ns();
  const timespec two_ms = {0, 2000000};
  nanosleep(&two_ms, nullptr);
  EXPECT_GE(kiln_now_ns() - before, 2000000u);
}

TEST(Timer, IsClockMonotonic) {
  timespec ts;
  ASSERT_EQ(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
  const uint64_t reference =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
  const uint64_t ours = kiln_now_ns();
  ASSERT_EQ(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
  const uint64_t after =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
  EXPECT_GE(ours, reference);
  EXPECT_LE(ours, after);
}

}  // namespace
}  // namespace kiln::testing
