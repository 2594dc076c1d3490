// kiln_parallel_launch: every index runs exactly once, in contiguous chunks of each thread's
// share, taken by the other threads once theirs are done, under repeated, nested and concurrent
// launches and any thread count.
#include <gtest/gtest.h>
#include <kiln/runtime.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "coverage.h"

namespace kiln::testing {
namespace {

// Each test leaves the pool at its default size. Its pool waits for every thread however busy
// the host is (KILN_CONTENTION=wait): the tests check how launches split among the threads,
// and other tests run beside these.
class ParallelLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("KILN_CONTENTION", "wait", 1);
    kiln_runtime_set_threads(0);
  }
  void TearDown() override { kiln_runtime_set_threads(0); }
};

// The chunks of a launch over [0, n) on `threads` threads, in order: one contiguous share per
// thread, the first n % threads one larger, each in chunks of max(1, n / (8 * threads)).
std::vector<Chunks::Chunk> chunks_of(int64_t n, int64_t threads) {
  const int64_t grain = std::max<int64_t>(1, n / (threads * 8));
  std::vector<Chunks::Chunk> chunks;
  for (int64_t t = 0, begin = 0; t < threads; ++t) {
    const int64_t end = begin + n / threads + (t < n % threads ? 1 : 0);
    for (int64_t b = begin; b < end; b += grain)
      chunks.push_back({b, std::min(b + grain, end), {}});
    begin = end;
  }
  return chunks;
}

// Whether `done` comes true within 10 s, yielding the CPU while it waits (a
// chunk waiting there for another thread's chunk).
template <class Done>
bool within_10_s(Done done) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  return done();
}

TEST_F(ParallelLaunch, CoversEveryIndexExactlyOnce) {
  const int64_t threads = kiln_runtime_threads();
  ASSERT_GE(threads, 1);
  for (int64_t n : {int64_t{0}, int64_t{1}, threads - 1, threads, threads + 1, int64_t{1000003}}) {
    if (n < 0) continue;
    SCOPED_TRACE("n = " + std::to_string(n));
    Coverage c(n);
    ASSERT_EQ(kiln_parallel_launch(Coverage::task, &c, n), KILN_OK);
    EXPECT_EQ(c.first_wrong(), -1);
  }
}

// The iterations are split into one contiguous share per thread (the first n % threads one
// larger), and each share into chunks of one size (its last may be shorter), about eight per
// thread; the launching thread's share is the first, and its first chunk is [0, grain).
TEST_F(ParallelLaunch, SplitsIntoOneShareAThreadAndEachShareIntoChunks) {
  for (int threads : {1, 2, 3, 4}) {
    ASSERT_EQ(kiln_runtime_set_threads(threads), threads);
    for (int64_t n : {int64_t{2}, int64_t{3}, int64_t{5}, int64_t{64}, int64_t{1001}}) {
      SCOPED_TRACE("threads = " + std::to_string(threads) + ", n = " + std::to_string(n));
      Chunks chunks;
      ASSERT_EQ(kiln_parallel_launch(Chunks::task, &chunks, n), KILN_OK);
      std::vector<Chunks::Chunk> sorted = chunks.sorted();
      if (threads == 1) {
        ASSERT_EQ(sorted.size(), 1u);  // a pool of one runs the whole range at once
        EXPECT_EQ(sorted[0].end - sorted[0].begin, n);
        continue;
      }
      const std::vector<Chunks::Chunk> expected = chunks_of(n, threads);
      ASSERT_EQ(sorted.size(), expected.size());
      for (size_t c = 0; c < sorted.size(); ++c) {
        EXPECT_EQ(sorted[c].begin, expected[c].begin) << "chunk " << c;
        EXPECT_EQ(sorted[c].end, expected[c].end) << "chunk " << c;
      }
      EXPECT_TRUE(pthread_equal(sorted.front().thread, pthread_self()));
    }
  }
}

// A worker starts with its own share, not where the launching thread got to: launches over the
// same range give each thread the same rows while no thread is held up, and a row stays in the
// caches of the thread that touched it last (C's rows in each step of a GEMM's reduction).
// Here the launching thread waits in its first chunk until the worker has run eight chunks.
TEST_F(ParallelLaunch, AWorkerStartsWithItsOwnShare) {
  ASSERT_EQ(kiln_runtime_set_threads(2), 2);
  struct Run {
    std::atomic<int> by_worker{0};
    std::atomic<bool> waited_in_vain{false};
    Chunks chunks;
    static void task(int64_t begin, int64_t end, void* closure) {
      auto* self = static_cast<Run*>(closure);
      Chunks::task(begin, end, &self->chunks);
      if (begin == 0) {
        if (!within_10_s([&] { return self->by_worker.load() >= 8; })) self->waited_in_vain = true;
      } else if (!pthread_equal(pthread_self(), self->launcher)) {
        self->by_worker.fetch_add(1);
      }
    }
    pthread_t launcher = pthread_self();
  } run;
  ASSERT_EQ(kiln_parallel_launch(Run::task, &run, 16), KILN_OK);
  ASSERT_FALSE(run.waited_in_vain.load()) << "the worker ran fewer than 8 chunks in 10 s";
  std::vector<int64_t> worker_begins;
  for (const auto& chunk : run.chunks.chunks)  // in the order they started
    if (!pthread_equal(chunk.thread, run.launcher)) worker_begins.push_back(chunk.begin);
  ASSERT_GE(worker_begins.size(), 8u);
  for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(worker_begins[c], 8 + c) << "the worker's chunk " << c;
}

// A thread held up (here the launching one, for 200 ms in its first chunk) leaves the rest of
// its share to the others instead of holding the launch up with it.
TEST_F(ParallelLaunch, ASlowChunkLeavesTheRestToTheOtherThreads) {
  ASSERT_EQ(kiln_runtime_set_threads(2), 2);
  struct Run {
    Chunks chunks;
    static void task(int64_t begin, int64_t end, void* closure) {
      auto* self = static_cast<Run*>(closure);
      if (begin == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      Chunks::task(begin, end, &self->chunks);
    }
  } run;
  ASSERT_EQ(kiln_parallel_launch(Run::task, &run, 32), KILN_OK);
  std::vector<Chunks::Chunk> sorted = run.chunks.sorted();
  ASSERT_EQ(sorted.size(), 16u);  // chunks of 2
  int64_t by_caller = 0;
  for (const auto& chunk : sorted)
    if (pthread_equal(chunk.thread, pthread_self())) by_caller += chunk.end - chunk.begin;
  // A static split would have given each thread 16 of the 32.
  EXPECT_EQ(by_caller, 2) << "the worker should have taken every chunk after the first, its "
                             "own share's and then the rest of the launching thread's";
}

TEST_F(ParallelLaunch, TheCallingThreadTakesPart) {
  const int threads = kiln_runtime_threads();
  Chunks chunks;
  ASSERT_EQ(kiln_parallel_launch(Chunks::task, &chunks, threads), KILN_OK);
  std::vector<Chunks::Chunk> sorted = chunks.sorted();
  ASSERT_FALSE(sorted.empty());
  EXPECT_TRUE(pthread_equal(sorted.front().thread, pthread_self()));
}

TEST_F(ParallelLaunch, TenThousandRepeatedLaunches) {
  constexpr int64_t kLaunches = 10000;
  constexpr int64_t kN = 97;
  struct Sum {
    std::atomic<int64_t> indices{0};
    std::atomic<int64_t> calls{0};
  } sum;
  auto task = [](int64_t begin, int64_t end, void* closure) {
    auto* s = static_cast<Sum*>(closure);
    int64_t local = 0;
    for (int64_t i = begin; i < end; ++i) local += i;
    s->indices.fetch_add(local);
    s->calls.fetch_add(1);
  };
  kiln_pool_stats before{}, after{};
  kiln_runtime_pool_stats(&before);
  for (int64_t launch = 0; launch < kLaunches; ++launch) {
    ASSERT_EQ(kiln_parallel_launch(task, &sum, kN), KILN_OK) << "launch " << launch;
  }
  kiln_runtime_pool_stats(&after);
  EXPECT_EQ(sum.indices.load(), kLaunches * (kN * (kN - 1) / 2));
  const int64_t threads = kiln_runtime_threads();
  const int64_t chunks = threads == 1 ? 1 : static_cast<int64_t>(chunks_of(kN, threads).size());
  // A launch the pool ran alone (the host short of CPUs: other tests run beside this one) is
  // one call over the whole range.
  const auto alone = static_cast<int64_t>(after.alone_launches - before.alone_launches);
  EXPECT_EQ(sum.calls.load(), (kLaunches - alone) * chunks + alone);
}

// An inner launch from a task runs serially, on the task's thread, over its whole range.
struct Nested {
  static constexpr int64_t kRows = 37;
  static constexpr int64_t kCols = 1001;

  struct Row {
    Nested* nested;
    int64_t r;
    pthread_t outer_thread;
  };

  static void inner(int64_t begin, int64_t end, void* closure) {
    auto* row = static_cast<Row*>(closure);
    if (begin != 0 || end != kCols || !pthread_equal(pthread_self(), row->outer_thread)) {
      row->nested->not_serial.fetch_add(1);
    }
    for (int64_t j = begin; j < end; ++j) {
      row->nested->cells.hits[static_cast<size_t>(row->r * kCols + j)].fetch_add(1);
    }
  }

  static void outer(int64_t begin, int64_t end, void* closure) {
    auto* nested = static_cast<Nested*>(closure);
    for (int64_t r = begin; r < end; ++r) {
      Row row{nested, r, pthread_self()};
      if (kiln_parallel_launch(inner, &row, kCols) != KILN_OK) nested->errors.fetch_add(1);
    }
  }

  Coverage cells{kRows * kCols};
  std::atomic<int> not_serial{0};
  std::atomic<int> errors{0};
};

TEST_F(ParallelLaunch, NestedLaunchRunsSeriallyInsideTheTask) {
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads = " + std::to_string(threads));
    ASSERT_EQ(kiln_runtime_set_threads(threads), threads);
    Nested nested;
    ASSERT_EQ(kiln_parallel_launch(Nested::outer, &nested, Nested::kRows), KILN_OK);
    EXPECT_EQ(nested.errors.load(), 0);
    EXPECT_EQ(nested.not_serial.load(), 0);
    EXPECT_EQ(nested.cells.first_wrong(), -1);
  }
}

// A launch of one iteration takes no thread of the pool, so a launch inside it still runs on
// every thread: its first chunk waits until another thread has run the second.
TEST_F(ParallelLaunch, ALaunchInsideALaunchOfOneIterationUsesThePool) {
  ASSERT_EQ(kiln_runtime_set_threads(2), 2);
  struct Run {
    std::atomic<bool> second_ran{false};
    std::atomic<bool> waited_in_vain{false};
    Chunks chunks;
    static void inner(int64_t begin, int64_t end, void* closure) {
      auto* self = static_cast<Run*>(closure);
      Chunks::task(begin, end, &self->chunks);
      if (begin == 0) {
        if (!within_10_s([&] { return self->second_ran.load(); })) self->waited_in_vain = true;
      } else {
        self->second_ran = true;
      }
    }
    static void outer(int64_t, int64_t, void* closure) {
      EXPECT_EQ(kiln_parallel_launch(inner, closure, 2), KILN_OK);
    }
  } run;
  ASSERT_EQ(kiln_parallel_launch(Run::outer, &run, 1), KILN_OK);
  EXPECT_FALSE(run.waited_in_vain.load()) << "the inner launch ran on one thread";
  std::vector<Chunks::Chunk> sorted = run.chunks.sorted();
  ASSERT_EQ(sorted.size(), 2u);
  EXPECT_FALSE(pthread_equal(sorted[0].thread, sorted[1].thread));
}

TEST_F(ParallelLaunch, OneAndTwoThreadsGiveIdenticalResults) {
  constexpr int64_t kN = 200003;
  auto compute = [](int threads) {
    EXPECT_EQ(kiln_runtime_set_threads(threads), threads);
    EXPECT_EQ(kiln_runtime_threads(), threads);
    std::vector<double> out(kN);
    auto task = [](int64_t begin, int64_t end, void* closure) {
      auto* o = static_cast<std::vector<double>*>(closure);
      for (int64_t i = begin; i < end; ++i) {
        double x = static_cast<double>(i);
        (*o)[static_cast<size_t>(i)] = x * x / 3.0 - x * 0.25;
      }
    };
    EXPECT_EQ(kiln_parallel_launch(task, &out, kN), KILN_OK);
    return out;
  };
  std::vector<double> one = compute(1);
  std::vector<double> two = compute(2);
  EXPECT_TRUE(one == two);
}

TEST_F(ParallelLaunch, SetThreadsReportsTheCountInEffect) {
  EXPECT_EQ(kiln_runtime_set_threads(1), 1);
  EXPECT_EQ(kiln_runtime_threads(), 1);
  EXPECT_EQ(kiln_runtime_set_threads(5), 5);
  EXPECT_EQ(kiln_runtime_threads(), 5);
  EXPECT_TRUE(launch_covers_once(12345));
  const int fallback = kiln_runtime_threads();
  EXPECT_EQ(kiln_runtime_set_threads(-3), fallback) << "a negative count changes nothing";
  const int by_default = kiln_runtime_set_threads(0);
  EXPECT_GE(by_default, 1);
  EXPECT_EQ(kiln_runtime_threads(), by_default);
}

TEST_F(ParallelLaunch, SetThreadsFromInsideATaskChangesNothing) {
  ASSERT_EQ(kiln_runtime_set_threads(2), 2);
  std::atomic<int> answered{-1};
  auto task = [](int64_t, int64_t, void* closure) {
    static_cast<std::atomic<int>*>(closure)->store(kiln_runtime_set_threads(7));
  };
  ASSERT_EQ(kiln_parallel_launch(task, &answered, 2), KILN_OK);
  EXPECT_EQ(answered.load(), 2);
  EXPECT_EQ(kiln_runtime_threads(), 2);
}

TEST_F(ParallelLaunch, ConcurrentLaunchesFromTwoThreadsBothComplete) {
  std::atomic<int> failures{0};
  auto client = [&failures] {
    for (int i = 0; i < 500; ++i) {
      if (!launch_covers_once(1000 + i)) failures.fetch_add(1);
    }
  };
  std::thread a(client);
  std::thread b(client);
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
}

// Threads runnable on the host now besides the caller (/proc/loadavg's fourth field, less one),
// or -1.
int others_runnable() {
  FILE* f = std::fopen("/proc/loadavg", "re");
  if (!f) return -1;
  double a, b, c;
  int running = 0, total = 0;
  int n = std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total);
  std::fclose(f);
  return n == 5 ? running - 1 : -1;
}

// With a busy thread on every CPU the process may use, a 2-thread pool finds itself short of
// CPUs, stops waiting on threads that lost theirs, and runs launches on the launching thread
// alone; every index still runs exactly once, and once the busy threads stop the pool runs on
// both threads again. Counted, not timed.
TEST_F(ParallelLaunch, UnderContentionLaunchesRunAloneAndEveryIndexStillRunsOnce) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpus = CPU_COUNT(&allowed);
  if (cpus < 2 || others_runnable() < 0)
    GTEST_SKIP() << "needs 2 CPUs and /proc/loadavg (this host: " << cpus << " CPUs)";
  unsetenv("KILN_CONTENTION");
  ASSERT_EQ(kiln_runtime_set_threads(2), 2);
  struct Work {
    std::atomic<int64_t> indices{0};
    static void task(int64_t begin, int64_t end, void* closure) {
      auto* w = static_cast<Work*>(closure);
      for (int64_t i = begin; i < end; ++i) {
        volatile double x = 1;  // about 10 us of arithmetic an index
        for (int k = 0; k < 4000; ++k) x = x * 1.0000001 + 1e-9;
        w->indices.fetch_add(i + 1, std::memory_order_relaxed);
      }
    }
  };
  constexpr int64_t kN = 32;
  auto launches = [](int count, Work& w) {
    for (int i = 0; i < count; ++i) ASSERT_EQ(kiln_parallel_launch(Work::task, &w, kN), KILN_OK);
  };

  kiln_pool_stats before{}, during{}, after{};
  kiln_runtime_pool_stats(&before);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int c = 0; c < cpus; ++c)
    busy.emplace_back([&stop] {
      volatile uint64_t spin = 0;
      while (!stop.load(std::memory_order_relaxed)) spin = spin + 1;
    });
  Work loaded;
  launches(3000, loaded);
  stop = true;
  for (std::thread& t : busy) t.join();
  kiln_runtime_pool_stats(&during);
  EXPECT_EQ(loaded.indices.load(), int64_t{3000} * kN * (kN + 1) / 2);
  EXPECT_GT(during.contended, before.contended) << "the pool never noticed it lost a CPU";
  EXPECT_GT(during.alone_launches, before.alone_launches);

  // Quiet again: the pool looks at the host every millisecond and goes back to both threads
  // (unless something else on this host still keeps its CPUs busy).
  Work quiet;
  for (int round = 0; round < 100; ++round) {
    launches(100, quiet);
    kiln_runtime_pool_stats(&after);
    if (after.parallel_launches > during.parallel_launches) break;
  }
  EXPECT_EQ(quiet.indices.load() % (kN * (kN + 1) / 2), 0);
  if (after.parallel_launches == during.parallel_launches) {
    int others = others_runnable();
    EXPECT_GT(others, cpus - 2) << "the host has room for both threads and the pool stays alone";
  }
}

TEST_F(ParallelLaunch, BadArgumentsAreRefused) {
  EXPECT_EQ(kiln_parallel_launch(nullptr, nullptr, 10), KILN_ERR_ARGS);
  std::atomic<int> calls{0};
  auto task = [](int64_t, int64_t, void* closure) {
    static_cast<std::atomic<int>*>(closure)->fetch_add(1);
  };
  EXPECT_EQ(kiln_parallel_launch(task, &calls, -1), KILN_ERR_ARGS);
  EXPECT_EQ(kiln_parallel_launch(task, &calls, 0), KILN_OK);
  EXPECT_EQ(calls.load(), 0) << "an empty range runs no task";
}

}  // namespace
}  // namespace kiln::testing
