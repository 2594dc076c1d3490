// The limits kiln enforces on what it is given, so that no input can make it
// use unbounded memory or time (docs/limits.md lists each, its default and
// the error it gives). Each exceeded limit is an error naming the limit, its
// value and where.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiln/error.h"

namespace kiln {

struct Limits {
  // Bytes of one .kiln source (a file, or a request's text).
  size_t max_source_bytes = size_t{16} << 20;
  // Computations in one func, the ones reductions make included.
  size_t max_computations = 256;
  // Iterators of one computation, a reduction's included.
  size_t max_domain_dims = 16;
  // Expression nodes of one computation's value as written, and once the
  // value computations it reads are inlined into it.
  size_t max_expression_nodes = 65536;
  // isl operations (isl_ctx_set_max_operations) to schedule one func, and
  // again to lower it: the bound on the polyhedral work of a compilation.
  uint64_t max_isl_operations = 10'000'000;
  // Wall-clock milliseconds one stage of a compilation may take (schedule,
  // lower, passes); negative: no limit. A stage checks it between its steps
  // (schedule commands, passes), so it stops at the first step that ends
  // past the limit. kilnd's request deadlines are checked the same way.
  int64_t max_stage_ms = 60'000;
  // Bytes one call may take for the graph constant folder to evaluate it at
  // compile time: its constant arguments, and its results (kept as values in
  // the graph, 8 bytes an element, besides their own). A call past it is left
  // in the graph to run with it, and a remark says so.
  size_t max_fold_bytes = size_t{64} << 20;
  // The request's deadline (kilnd): the pipeline stops before a stage that
  // would start past it, and a stage at its first step past it. Not a limit
  // of the input, so not in docs/limits.md's table; absent: none.
  std::optional<std::chrono::steady_clock::time_point> deadline{};
  // Whether the request was cancelled (kilnd: its client went away), asked
  // wherever the deadline is checked; absent: never.
  std::function<bool()> cancelled{};
};

// What a stage throws when the request's deadline has passed: a CompileError,
// so that callers that do not care tell it from no other error, and its own
// type, so that kilnd can answer DEADLINE_EXCEEDED.
class DeadlineExceeded : public CompileError {
 public:
  using CompileError::CompileError;
};

// What a check throws once Limits::cancelled says so.
class Cancelled : public CompileError {
 public:
  using CompileError::CompileError;
};

// The wall-clock time one stage has used, against Limits::max_stage_ms.
class StageTimer {
 public:
  StageTimer(ErrorStage stage, const Limits& limits)
      : stage_(stage),
        limit_ms_(limits.max_stage_ms),
        deadline_(limits.deadline),
        cancelled_(limits.cancelled),
        start_(std::chrono::steady_clock::now()) {}

  // Throws CompileError (the timer's stage, at `where`) once the stage has run
  // for max_stage_ms or longer; `done` says what it had finished, as in
  // "after c.split(i, 4, io, ii)".
  void check(const SourceLoc& where, const std::string& done) const {
    auto now = std::chrono::steady_clock::now();
    if (cancelled_ && cancelled_())
      throw Cancelled(stage_, where,
                      "the request was cancelled during the " +
                          std::string(error_stage_name(stage_)) + " stage, " + done);
    if (deadline_ && now >= *deadline_)
      throw DeadlineExceeded(stage_, where,
                             "the request's deadline passed during the " +
                                 std::string(error_stage_name(stage_)) + " stage, " + done);
    if (limit_ms_ < 0) return;
    auto used = now - start_;
    if (used < std::chrono::milliseconds(limit_ms_)) return;
    throw CompileError(
        stage_, where,
        "the " + std::string(error_stage_name(stage_)) + " stage ran past its limit of " +
            std::to_string(limit_ms_) + " ms (max_stage_ms, docs/limits.md), " + done + " (" +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(used).count()) +
            " ms)");
  }

 private:
  ErrorStage stage_;
  int64_t limit_ms_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::function<bool()> cancelled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
