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

void clear_environment() {
  unsetenv("KILN_NUM_THREADS");
  unsetenv("KILN_USE_HYPERTHREADS");
  unsetenv("KILN_CPUS");
}

// The affinity mask of the thread that ran each chunk of a launch over [0, threads).
std::vector<cpu_set_t> masks_of_threads() {
  const int threads = kiln_runtime_threads();
  std::vector<cpu_set_t> masks(static_cast<size_t>(threads));
  auto task = [](int64_t begin, int64_t end, void* closure) {
    auto* out = static_cast<std::vector<cpu_set_t>*>(closure);
    for (int64_t i = begin; i < end; ++i) {
      CPU_ZERO(&(*out)[static_cast<size_t>(i)]);
      pthread_getaffinity_np(pthread_self(), sizeof(cpu_set_t), &(*out)[static_cast<size_t>(i)]);
    }
  };
  kiln_parallel_launch(task, &masks, threads);
  return masks;
}

// Pinned: every worker (chunk 1 on) is pinned to one CPU of its own. Unpinned: every worker may
// run anywhere the process may. The launching thread (chunk 0) is never pinned by kiln.
int check_pinning_is_consistent(const cpu_set_t& allowed) {
  std::vector<cpu_set_t> masks = masks_of_threads();
  CHILD_CHECK(CPU_EQUAL(&masks[0], &allowed));
  cpu_set_t used;
  CPU_ZERO(&used);
  for (size_t i = 1; i < masks.size(); ++i) {
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
  CHILD_CHECK(!kiln_runtime_pinned() || CPU_COUNT(&used) > 0);
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
              Chunks chunks;
              CHILD_CHECK(kiln_parallel_launch(Chunks::task, &chunks, 300) == KILN_OK);
              CHILD_CHECK(chunks.sorted().size() == 3);
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
