// Where a compilation's time goes, finer than its stages: the parts of a stage
// (building the polyhedral model, the legality check, isl's AST generation,
// LLVM's optimizer, ...) time themselves with a TimedPart, and whoever wants the
// figures installs a PartSink on the thread for the duration (kiln::compile
// does, into CompileResult::parts). Without a sink a TimedPart costs one
// thread-local read.
#pragma once

#include <chrono>
#include <vector>

namespace kiln {

// How long one part took. `part` is a string literal ("model", "legality").
struct PartTime {
  const char* part;
  double ms = 0;
};

class PartSink {
 public:
  explicit PartSink(std::vector<PartTime>& out) : outer_(current()), out_(out) { current() = this; }
  ~PartSink() { current() = outer_; }
  PartSink(const PartSink&) = delete;
  PartSink& operator=(const PartSink&) = delete;

  // The sink installed on this thread, or null.
  static PartSink*& current() {
    thread_local PartSink* sink = nullptr;
    return sink;
  }
  void add(const char* part, double ms) { out_.push_back(PartTime{part, ms}); }

 private:
  PartSink* outer_;
  std::vector<PartTime>& out_;
};

// Adds the time from its construction to its destruction to the thread's sink.
class TimedPart {
 public:
  explicit TimedPart(const char* part) : part_(part), sink_(PartSink::current()) {
    if (sink_) start_ = std::chrono::steady_clock::now();
  }
  ~TimedPart() {
    if (!sink_) return;
    std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start_;
    sink_->add(part_, ms.count());
  }
  TimedPart(const TimedPart&) = delete;
  TimedPart& operator=(const TimedPart&) = delete;

 private:
  const char* part_;
  PartSink* sink_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
