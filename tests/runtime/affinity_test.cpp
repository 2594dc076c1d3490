// The pool's threads and CPUs: one thread per physical core allowed to the process, the
// environment's overrides, pinning, and the unpinned fallback when pinning is not allowed. Each
// test runs in a forked child, so that its environment and affinity mask are its own and the
// pool is built afresh there.
#include <gtest/gtest.h>
#include <kiln/runtime.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "coverage.h"

namespace kiln::testing {
namespace {

// Checks inside a child: report and fail the child, since gtest's own checks cannot cross fork.
#define CHILD_CHECK(cond)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "child: check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

// Runs body in a forked child (killed after 120 s) and returns how it ended, as a message:
// empty when it exited with 0.
std::string run_in_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    alarm(120);
    setenv("KILN_CONTENTION", "wait", 1);
    int code = body();
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status)) return "child killed by signal " + std::to_string(WTERMSIG(status));
  if (WEXITSTATUS(status) != 0) return "child exited with " + std::to_string(WEXITSTATUS(status));
  return "";
}

cpu_set_t process_mask() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  sched_getaffinity(0, sizeof mask, &mask);
  return mask;
}

int lowest_cpu(const cpu_set_t& mask) {
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) return cpu;
  }
  return -1;
}

// Restricts the calling (only) thread of a child, and so the pool it builds, to one CPU.
bool restrict_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof one, &one) == 0;
}

// Clears what the pool reads from the environment, but KILN_CONTENTION=wait, which
// run_in_child sets: masks_of_threads needs every thread in one launch, and a host busy with
// other tests would otherwise send its launch to the launching thread alone.
void clear_environment() {
  unsetenv("KILN_PIN");
  unsetenv("KILN_NUM_THREADS");
  unsetenv("KILN_USE_HYPERTHREADS");
  unsetenv("KILN_CPUS");
}

// The affinity mask of each thread of the pool, the launching thread's first: a launch over
// [0, threads) whose chunks (one index each) wait for one another, so that no thread can take a
// second. (Chunks go to whichever thread asks; a thread held at the barrier cannot ask.)
std::vector<cpu_set_t> masks_of_threads() {
  const int threads = kiln_runtime_threads();
  struct Run {
    std::vector<cpu_set_t> masks;
    std::vector<pthread_t> who;
    std::atomic<int> arrived{0};
    int threads = 0;
  } run;
  run.masks.resize(static_cast<size_t>(threads));
  run.who.resize(static_cast<size_t>(threads));
  run.threads = threads;
  auto task = [](int64_t begin, int64_t end, void* closure) {
    auto* r = static_cast<Run*>(closure);
    for (int64_t i = begin; i < end; ++i) {
      auto k = static_cast<size_t>(i);
      CPU_ZERO(&r->masks[k]);
      pthread_getaffinity_np(pthread_self(), sizeof(cpu_set_t), &r->masks[k]);
      r->who[k] = pthread_self();
      r->arrived.fetch_add(1);
      while (r->arrived.load() < r->threads) sched_yield();
    }
  };
  kiln_parallel_launch(task, &run, threads);
  return run.masks;
}

// Pinned: every thread, the launching one (chunk 0) included, is pinned to one CPU of its own.
// Unpinned: every thread may run anywhere the process may.
int check_pinning_is_consistent(const cpu_set_t& allowed) {
  std::vector<cpu_set_t> masks = masks_of_threads();
  cpu_set_t used;
  CPU_ZERO(&used);
  for (size_t i = 0; i < masks.size(); ++i) {
    if (kiln_runtime_pinned()) {
      if (CPU_COUNT(&masks[i]) != 1) continue;  // a thread beyond the CPU list runs unpinned
      cpu_set_t overlap;
      CPU_AND(&overlap, &used, &masks[i]);
      CHILD_CHECK(CPU_COUNT(&overlap) == 0);
      CPU_OR(&used, &used, &masks[i]);
    } else {
      CHILD_CHECK(CPU_EQUAL(&masks[i], &allowed));
    }
  }
  CHILD_CHECK(!kiln_runtime_pinned() || CPU_COUNT(&masks[0]) == 1);
  return 0;
}

TEST(Affinity, DefaultIsOneThreadPerPhysicalCoreAllowed) {
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              const cpu_set_t allowed = process_mask();
              const int planned = kiln_runtime_default_threads();
              const int threads = kiln_runtime_threads();
              CHILD_CHECK(planned == threads);
              CHILD_CHECK(threads >= 1);
              CHILD_CHECK(threads <= CPU_COUNT(&allowed));
              CHILD_CHECK(launch_covers_once(1000003));
              return check_pinning_is_consistent(allowed);
            }),
            "");
}

// Unless asked, nothing is pinned: two kiln processes on one machine would otherwise pin their
// threads to the same CPUs (each plans from the same list) and stack there while others idle.
TEST(Affinity, NothingIsPinnedUnlessAsked) {
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              const cpu_set_t allowed = process_mask();
              CHILD_CHECK(kiln_runtime_set_threads(2) == 2);
              CHILD_CHECK(kiln_runtime_pinned() == 0);
              return check_pinning_is_consistent(allowed);
            }),
            "");
}

// Asked (KILN_PIN=1), the launching thread is pinned like the workers, each to a CPU of its own.
TEST(Affinity, PinnedOnRequestTheLaunchingThreadToo) {
  const cpu_set_t allowed = process_mask();
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "needs two CPUs";
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              setenv("KILN_PIN", "1", 1);
              CHILD_CHECK(kiln_runtime_set_threads(2) == 2);
              std::vector<cpu_set_t> masks = masks_of_threads();
              if (kiln_runtime_pinned()) {  // a seccomp policy may still refuse it
                CHILD_CHECK(CPU_COUNT(&masks[0]) == 1 && CPU_COUNT(&masks[1]) == 1);
                CHILD_CHECK(!CPU_EQUAL(&masks[0], &masks[1]));
              }
              return check_pinning_is_consistent(process_mask());
            }),
            "");
}

TEST(Affinity, HyperthreadsCountWhenAskedFor) {
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              setenv("KILN_USE_HYPERTHREADS", "1", 1);
              const cpu_set_t allowed = process_mask();
              CHILD_CHECK(kiln_runtime_threads() == CPU_COUNT(&allowed));
              CHILD_CHECK(launch_covers_once(100003));
              return 0;
            }),
            "");
}

TEST(Affinity, NumThreadsFromTheEnvironment) {
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              setenv("KILN_NUM_THREADS", "3", 1);
              CHILD_CHECK(kiln_runtime_default_threads() == 3);
              CHILD_CHECK(kiln_runtime_threads() == 3);
              // Three threads take part: each waits in its chunk until all three have one.
              CHILD_CHECK(masks_of_threads().size() == 3);
              CHILD_CHECK(launch_covers_once(1000003));
              // set_threads(0) goes back to the environment's count.
              CHILD_CHECK(kiln_runtime_set_threads(1) == 1);
              CHILD_CHECK(kiln_runtime_set_threads(0) == 3);
              return check_pinning_is_consistent(process_mask());
            }),
            "");
}

TEST(Affinity, MalformedNumThreadsIsIgnored) {
  for (const char* value : {"", "zero", "0", "-2", "3x"}) {
    SCOPED_TRACE(std::string("KILN_NUM_THREADS=") + value);
    EXPECT_EQ(run_in_child([value] {
                clear_environment();
                setenv("KILN_NUM_THREADS", value, 1);
                const int threads = kiln_runtime_threads();
                unsetenv("KILN_NUM_THREADS");
                CHILD_CHECK(kiln_runtime_set_threads(0) == threads);
                return 0;
              }),
              "");
  }
}

TEST(Affinity, RespectsAnAffinityMaskOfOneCpu) {
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              CHILD_CHECK(restrict_to(lowest_cpu(process_mask())));
              CHILD_CHECK(kiln_runtime_threads() == 1);
              CHILD_CHECK(launch_covers_once(1000003));
              // More threads than CPUs still complete, pinned or not, consistently.
              CHILD_CHECK(kiln_runtime_set_threads(3) == 3);
              CHILD_CHECK(launch_covers_once(1000003));
              return check_pinning_is_consistent(process_mask());
            }),
            "");
}

TEST(Affinity, FallsBackToUnpinnedWhenACpuIsNotAllowed) {
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              const int cpu = lowest_cpu(process_mask());
              CHILD_CHECK(restrict_to(cpu));
              // The second CPU named is outside the mask (it may not even exist): pinning the
              // worker to it must fail, and the pool must run unpinned instead.
              const std::string cpus = std::to_string(cpu) + "," + std::to_string(cpu + 1);
              setenv("KILN_CPUS", cpus.c_str(), 1);
              CHILD_CHECK(kiln_runtime_threads() == 2);
              CHILD_CHECK(kiln_runtime_pinned() == 0);
              CHILD_CHECK(launch_covers_once(1000003));
              for (int i = 0; i < 1000; ++i) CHILD_CHECK(launch_covers_once(17));
              return check_pinning_is_consistent(process_mask());
            }),
            "");
}

TEST(Affinity, PinsWorkersToTheCpusNamed) {
  const cpu_set_t allowed = process_mask();
  if (CPU_COUNT(&allowed) < 2) GTEST_SKIP() << "needs two CPUs";
  EXPECT_EQ(run_in_child([] {
              clear_environment();
              const cpu_set_t allowed = process_mask();
              std::string cpus;
              int named = 0;
              for (int cpu = 0; cpu < CPU_SETSIZE && named < 2; ++cpu) {
                if (!CPU_ISSET(cpu, &allowed)) continue;
                cpus += (named++ ? "," : "") + std::to_string(cpu);
              }
              setenv("KILN_CPUS", cpus.c_str(), 1);
              CHILD_CHECK(kiln_runtime_threads() == 2);
              CHILD_CHECK(launch_covers_once(1000003));
              // Pinning to an allowed CPU may still be refused (a seccomp policy): either way the
              // pool must say which it is.
              return check_pinning_is_consistent(allowed);
            }),
            "");
}

TEST(Affinity, AForkedChildBuildsItsOwnPool) {
  ASSERT_TRUE(launch_covers_once(100003));  // the parent's pool exists before the fork
  EXPECT_EQ(run_in_child([] {
              CHILD_CHECK(kiln_runtime_threads() >= 1);
              CHILD_CHECK(launch_covers_once(1000003));
              for (int i = 0; i < 1000; ++i) CHILD_CHECK(launch_covers_once(33));
              return 0;
            }),
            "");
  EXPECT_TRUE(launch_covers_once(100003));
}

}  // namespace
}  // namespace kiln::testing
