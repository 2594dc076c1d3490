// A tuning job (DESIGN.md sections 7 and 7a): batches of points proposed by
// the search, each compiled by a Builder and measured by a Runner
// (kiln/measure.h: kilnd's compile cache and agents, or a test's formula),
// every trial recorded the moment it is measured, the model retrained after
// each batch, until the trial budget is spent, the search stops improving,
// the space runs out or the job is cancelled. A job that was interrupted
// (kilnd killed or stopped) resumes from its records: the model is retrained
// on them and no point is measured again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/job.h"
#include "kiln/measure.h"
#include "kiln/records.h"
#include "kiln/search.h"
#include "kiln/space.h"

namespace kiln::tuner {

using records::Trial;

// When a measurement is too noisy to learn from: its rounds' coefficient of variation past
// max_cv, or other processes taking more than max_host_load CPUs, or some task waiting for a
// CPU more than max_cpu_pressure of the time (each 0: not a limit; pressure is none by
// default: a kernel that keeps every CPU busy makes any task that wakes wait). Such a point is
// measured again, up to `remeasure` more times: the first quiet measurement is kept; when none
// is, the fastest (interference only adds time), marked noisy.
struct NoiseLimits {
  double max_cv = 0.1;
  double max_host_load = 0.5;
  double max_cpu_pressure = 0;
  int remeasure = 2;
};

struct TuneSettings {
  int trials = 64;     // measured points in all, those of earlier runs of the job included
  int batch = 16;      // points proposed at once
  int early_stop = 0;  // stop after this many trials without a better one (0: never)
  NoiseLimits noise;
  // At the end (not when cancelled), the `retime_top` fastest configurations are measured
  // again on the best one's device, `retime_passes` times each, one after the other in turn
  // (the order reversed every pass), so that each sees the same conditions; each keeps every
  // round and their median (records::Record::retimed_ms), and the job's best is the fastest
  // re-timed. 0: none.
  int retime_top = 3;
  int retime_passes = 3;
  // A candidate whose first round takes more than this many times the job's best median so
  // far is timed no further: recorded with that round (and says so), its time clear enough
  // for the model. 0: every candidate gets all its rounds.
  double stop_slower_than = 4;
  SearchOptions search;
  FeatureFn features;  // the model's (empty: knob_features)
  // Transfer: points measured on the same operator at other shapes, and
  // their cost relative to the best there (Searcher::warm_start).
  std::vector<Config> warm_points;
  std::vector<double> warm_cost;
  // The points a new job measures first (first_start) and where each came from: the best record
  // of that shape of the same operator ("" in first_shapes: the defaults). The job's own shape,
  // when another job measured it, comes first; the model, once the warm start has trained it,
  // orders the others (TuneJob::start_from). The job's trial 0 is the first of them, a guess
  // from what is known, and its quality is reported.
  std::vector<Config> first_points;
  std::vector<std::string> first_shapes;
  // How points are compiled: the target is what the Runner's devices run.
  CompileOptions compile;
  std::string json() const;  // the settings above but the warm start and first points, as JSON
};

struct TuneProgress {
  int64_t job = 0;
  int trials = 0, target = 0;
  std::optional<records::Record> best;
  double best_gflops = 0;                   // of the best, when its flops are known
  std::map<std::string, int64_t> errors;    // failed trials by class
  std::map<std::string, int64_t> rejected;  // points refused before compiling, by constraint
  std::optional<records::Record> last;      // the trial just recorded (none at a batch's end)
  // The job's first trial (trial 0, measured before the job knew anything of its own), and
  // where it came from: "defaults", or "transfer" (the best record of first_shape); "" when
  // not told or the job was resumed.
  std::optional<records::Record> first;
  std::string first_from, first_shape;
  double elapsed_s = 0, eta_s = 0;  // of this run of the job
  int remeasured = 0;               // points measured again because they were noisy
  int stopped_early = 0;            // points timed for one round (stop_slower_than)
  int retimed = 0;                  // finalists re-timed at the end
  bool done = false;
  std::string stopped;  // when done: "trials", "early stop", "space exhausted", "cancelled"
};

// What stopped a job before its end, as a value: a Failure of the service
// (no device, every device lost, a bug) rather than of a point, or the
// service stopping. The job stays running in the store, to be resumed.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(Failure f);
  const Failure& failure() const { return failure_; }

 private:
  Failure failure_;
};

// What the job's owner tells it while it runs.
struct TuneHooks {
  // After every trial (from the thread that measured it, one call at a
  // time), after every batch and at the end.
  std::function<void(const TuneProgress&)> progress{};
  // Asked between batches: the job ends "cancelled"; the measurements in
  // flight are recorded.
  std::function<bool()> cancelled{};
  // Asked between points and batches: the service is stopping. The job ends
  // where it is, running in the store, and tune throws Interrupted.
  std::function<bool()> stopping{};
};

// A tuning job a batch at a time, for whoever shares trials among several
// (kiln/task_scheduler.h); tune() below runs one to its end. Its arguments
// are tune()'s, and outlive it.
class TuneJob {
 public:
  // Starts (job 0) or resumes job `job` in `store`: a resumed job's model
  // learns what it measured before, and its points are never proposed again.
  // Throws records::RecordsError for a job of another workload or key, or none.
  TuneJob(const Task& task, Builder& builder, Runner& runner, records::RecordStore& store,
          const std::string& key, const TuneSettings& settings, int64_t job = 0,
          const TuneHooks& hooks = {});
  ~TuneJob();
  TuneJob(const TuneJob&) = delete;
  TuneJob& operator=(const TuneJob&) = delete;

  // Proposes, builds and measures one batch of at most `n` points (0: the
  // settings' batch), each trial recorded (and reported to hooks.progress) as
  // it arrives, and retrains the model. False, with nothing measured, when
  // the job has no more to do: over() says why. Throws Interrupted as tune()
  // does.
  bool step(int n = 0);
  // "" while step() may measure more; else "trials", "early stop", "space
  // exhausted" or "cancelled".
  const std::string& over() const;
  // The progress so far (the trials of earlier runs of the job included).
  const TuneProgress& progress() const;
  // Whether the job was resumed with trials measured before.
  bool measured_before() const;
  // Before its first step: `transfer`'s warm start and first points (and where they came
  // from), as if the settings it was made with had held them: what the records say once
  // other jobs have measured (a model's earlier tasks).
  void start_from(const TuneSettings& transfer);
  // Ends the job: unless it is cancelled (or `cancelled`), its finalists are
  // re-timed (TuneSettings::retime_top); marked done or cancelled in the
  // store, the final progress reported and returned.
  TuneProgress finish(bool cancelled = false);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Runs (job 0: starts; else resumes) the tuning job of `task` on device
// class `key`: each point built by `builder` and measured by `runner`, every
// trial added to `store`. Returns the final progress; throws Interrupted
// when the Builder or Runner fails for a reason not the point's (no device,
// every device lost, kiln's bug) or the service stops, and what the store
// throws (the job stays running in the store, to be resumed).
TuneProgress tune(const Task& task, Builder& builder, Runner& runner, records::RecordStore& store,
                  const std::string& key, const TuneSettings& settings, int64_t job = 0,
                  const TuneHooks& hooks = {});

// Re-times `records` (those that ran, of task's workload): each built once more (a cache hit,
// in kilnd) and measured `passes` times on the device that measured the first, one after the
// other in turn, the order reversed every pass, so that each sees the same conditions. Each
// keeps every round and their median in the store (RecordStore::set_retime). Returns how many
// were re-timed: a record whose build or run fails is left out, and a failure of the service
// (the device gone) ends the re-timing with nothing kept. Throws Interrupted when `stopping`
// says so.
int retime(const Task& task, Builder& builder, Runner& runner, records::RecordStore& store,
           const std::vector<records::Record>& records, const CompileOptions& options, int passes,
           const std::function<bool()>& stopping = {});

}  // namespace kiln::tuner
