// run_child, what kilnd runs kernels in: input reaches the child and its
// output comes back, its exit status and a signal that ended it are told
// apart, the wall-clock limit and the stop callback kill it, and it works
// when kilnd's own standard input is closed (a pipe then lands on fd 0).
#include "child_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

namespace kiln::testing {
namespace {

using server::ChildLimits;
using server::ChildResult;
using server::run_child;

TEST(RunChild, InputReachesTheChildAndItsOutputComesBack) {
  ChildResult r = run_child("/bin/cat", {}, "hello, child", {});
  EXPECT_EQ(r.end, ChildResult::End::Exited);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "hello, child");
}

TEST(RunChild, ALargeInputAndOutputDoNotDeadlock) {
  std::string big(8 << 20, 'k');  // far more than a pipe holds
  ChildResult r = run_child("/bin/cat", {}, big, {});
  EXPECT_EQ(r.end, ChildResult::End::Exited);
  EXPECT_EQ(r.out.size(), big.size());
}

TEST(RunChild, ExitStatusAndStandardErrorAreKept) {
  ChildResult r = run_child("/bin/sh", {"-c", "echo oops >&2; exit 3"}, "", {});
  EXPECT_EQ(r.end, ChildResult::End::Exited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.err, "oops\n");
}

TEST(RunChild, ASignalThatEndsTheChildIsReported) {
  ChildResult r = run_child("/bin/sh", {"-c", "kill -SEGV $$"}, "", {});
  EXPECT_EQ(r.end, ChildResult::End::Signaled);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(server::signal_description(SIGSEGV), "SIGSEGV (Segmentation fault)");
}

TEST(RunChild, AMissingProgramExits127) {
  ChildResult r = run_child("/nonexistent/kiln-runner", {}, "", {});
  EXPECT_EQ(r.end, ChildResult::End::Exited);
  EXPECT_EQ(r.exit_code, 127);
}

TEST(RunChild, TheWallClockLimitKillsTheWholeGroup) {
  ChildLimits limits;
  limits.wall = std::chrono::milliseconds(200);
  // The grandchild holds the output pipe open: it must die with the group,
  // or run_child would wait for it.
  ChildResult r = run_child("/bin/sh", {"-c", "sleep 30 & sleep 30"}, "", limits);
  EXPECT_EQ(r.end, ChildResult::End::TimedOut);
  EXPECT_LT(r.ms, 10'000);
}

TEST(RunChild, TheStopCallbackKillsTheChild) {
  ChildLimits limits;
  auto start = std::chrono::steady_clock::now();
  limits.stop = [&] {
    return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(100);
  };
  ChildResult r = run_child("/bin/sleep", {"30"}, "", limits);
  EXPECT_EQ(r.end, ChildResult::End::Stopped);
}

TEST(RunChild, WorksWithStandardInputAndOutputClosed) {
  // With 0 and 1 closed, the pipes take them: each end must still land on
  // the right descriptor in the child, without CLOEXEC.
  int saved_in = dup(0), saved_out = dup(1);
  ASSERT_GE(saved_in, 0);
  ASSERT_GE(saved_out, 0);
  close(0);
  close(1);
  ChildResult r = run_child("/bin/cat", {}, "through fd 0", {});
  dup2(saved_in, 0);
  dup2(saved_out, 1);
  close(saved_in);
  close(saved_out);
  EXPECT_EQ(r.end, ChildResult::End::Exited);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "through fd 0");
}

}  // namespace
}  // namespace kiln::testing
