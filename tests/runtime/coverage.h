// Helpers for runtime tests: a task that counts how often each index runs, and one that records
// the chunks a launch made and the thread that ran each.
#pragma once

#include <kiln/runtime.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace kiln::testing {

// Counts runs per index of [0, n).
struct Coverage {
  explicit Coverage(int64_t n) : hits(static_cast<size_t>(n)) {}

  static void task(int64_t begin, int64_t end, void* closure) {
    auto* self = static_cast<Coverage*>(closure);
    for (int64_t i = begin; i < end; ++i) {
      self->hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    }
  }

  // The first index not run exactly once, or -1.
  int64_t first_wrong() const {
    for (size_t i = 0; i < hits.size(); ++i) {
      if (hits[i].load(std::memory_order_relaxed) != 1) return static_cast<int64_t>(i);
    }
    return -1;
  }

  std::vector<std::atomic<uint8_t>> hits;
};

// Launches over [0, n) and says whether every index ran exactly once.
inline bool launch_covers_once(int64_t n) {
  Coverage c(n);
  return kiln_parallel_launch(Coverage::task, &c, n) == KILN_OK && c.first_wrong() == -1;
}

// The chunks a launch made, sorted by their start, with the thread that ran each.
struct Chunks {
  struct Chunk {
    int64_t begin;
    int64_t end;
    pthread_t thread;
  };

  static void task(int64_t begin, int64_t end, void* closure) {
    auto* self = static_cast<Chunks*>(closure);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->chunks.push_back({begin, end, pthread_self()});
  }

  std::vector<Chunk> sorted() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<Chunk> out = chunks;
    std::sort(out.begin(), out.end(),
              [](const Chunk& a, const Chunk& b) { return a.begin < b.begin; });
    return out;
  }

  std::mutex mutex;
  std::vector<Chunk> chunks;
};

}  // namespace kiln::testing
