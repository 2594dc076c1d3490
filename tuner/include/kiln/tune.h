// A tuning job (DESIGN.md section 7): batches of points proposed by the
// search, compiled and measured by a Measurer (kilnd's agents, or a test's
// function), every trial recorded the moment it is reported, the model
// retrained after each batch, until the trial budget is spent, the search
// stops improving, the space runs out or the job is cancelled. A job that was
// interrupted (kilnd killed) resumes from its records: the model is retrained
// on them and no point is measured again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/records.h"
#include "kiln/search.h"
#include "kiln/space.h"

namespace kiln::tuner {

// One point measured: its timing, or why it has none.
struct Trial {
  Config point;
  std::vector<double> round_ms;
  double median_ms = 0;
  std::string error;  // "" when it ran; else the class: TIMEOUT, RUNTIME_CRASH, COMPILE_ERROR, ...
  std::string message;  // what went wrong, for a person
  double compile_ms = 0;
  int64_t flops = 0;  // a call's floating-point operations, 0 when unknown
  std::string agent;
  std::string compiler_version;
  // Set when the point was refused before anything measured it (its schedule
  // is illegal): counted under this reason, never recorded, not a trial.
  std::string rejected;
};

// Compiles and measures points. measure() reports each point of the batch
// exactly once, as its measurement arrives, through `report`; it may throw
// (kilnd stopping), and the trials reported until then are kept.
class Measurer {
 public:
  virtual ~Measurer() = default;
  virtual void measure(const std::vector<Config>& batch,
                       const std::function<void(const Trial&)>& report) = 0;
};

struct TuneSettings {
  int trials = 64;     // measured points in all, those of earlier runs of the job included
  int batch = 16;      // points proposed at once
  int early_stop = 0;  // stop after this many trials without a better one (0: never)
  SearchOptions search;
  FeatureFn features;  // the model's (empty: knob_features)
  // Transfer: points measured on the same operator at other shapes, and
  // their cost relative to the best there (Searcher::warm_start).
  std::vector<Config> warm_points;
  std::vector<double> warm_cost;
  std::string json() const;  // the settings above but the warm start, as JSON
};

struct TuneProgress {
  int64_t job = 0;
  int trials = 0, target = 0;
  std::optional<Trial> best;
  double best_gflops = 0;                   // of the best, when its flops are known
  std::map<std::string, int64_t> errors;    // failed trials by class
  std::map<std::string, int64_t> rejected;  // points refused before compiling, by constraint
  std::optional<Trial> last;                // the trial just reported (none at a batch's end)
  double elapsed_s = 0, eta_s = 0;          // of this run of the job
  bool done = false;
  std::string stopped;  // when done: "trials", "early stop", "space exhausted", "cancelled"
};

// Runs (job 0: starts; else resumes) the tuning job of `workload` on device
// class `key`. `progress` is called after every trial (from the thread that
// reported it, one call at a time), after every batch and at the end;
// `cancelled` is asked between batches. Returns the final progress; throws
// what the Measurer or the store throws (the job stays running in the
// store, to be resumed).
TuneProgress tune(const Space& space, Measurer& measurer, records::RecordStore& store,
                  const records::Workload& workload, const std::string& key,
                  const TuneSettings& settings, int64_t job = 0,
                  const std::function<void(const TuneProgress&)>& progress = {},
                  const std::function<bool()>& cancelled = {});

}  // namespace kiln::tuner
