// Tuning a model (DESIGN.md section 7b): one budget of trials and wall time
// shared among its tasks (kiln/tasks.h), each a tuning job of its own
// (kiln/tune.h's TuneJob) with its own records, so that a task's best is
// found again by whatever needs that workload, in this model or another.
// After one batch each, the next batch goes to the task whose next trials are
// expected to shorten the model's end-to-end time most: Ansor's gradient
// (Zheng et al., OSDI 2020, section 6), the task's weight (its calls in the
// model) times a mix of how fast its best fell over its last batches and how
// fast it fell on average since its first.
//
// The same scheduler chooses among alternatives: the sketches kiln derives for
// a func without a schedule (kiln/autosched.h), each a task, of which only the
// fastest counts. There the next batch goes to the task whose best, as that
// mix projects it over the batch, would lie furthest below the fastest best so
// far: the fastest task itself as long as it falls, another while its early
// fall promises to overtake it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/job.h"
#include "kiln/measure.h"
#include "kiln/records.h"
#include "kiln/tune.h"

namespace kiln::tuner {

struct ScheduledTask {
  Task task;
  int calls = 1;     // how many of the model's calls run it: its weight
  std::string name;  // for a person: the operator and where the model first calls it
  int64_t job = 0;   // the task's tuning job to resume; 0: a new one
};

struct ScheduleSettings {
  int trials = 0;       // trials over all tasks in this run; 0: no limit but the time
  double budget_s = 0;  // wall-clock seconds: no batch starts after; 0: no limit but trials
  TuneSettings task;    // each task's job (its `trials`: the most one task may take)
  // A task that has measured nothing starts from the records of its operator on the key as
  // they are when its first batch comes (the model's tasks before it included; kiln/job.h):
  // its first points are the best of the nearest shapes and its defaults (first_start), and
  // its model learns the other shapes' records (warm_start).
  bool transfer = true;
  // The weight of a task's recent improvement (over its last `window` batches) against its
  // average improvement since its first trial, in the expected gain of its next trials.
  double backward_weight = 0.2;
  int window = 3;
  // The tasks are alternatives (a func's sketches): the result is the fastest task's best, not
  // the calls-weighted sum, and batches go by alternative_gain instead of task_gain.
  bool alternatives = false;
};

struct ScheduleProgress {
  std::vector<TuneProgress> tasks;      // each task's job as it stands, in the tasks' order
  int trials = 0;                       // measured in this run, over all tasks
  int target = 0;                       // ScheduleSettings::trials
  int task = -1;                        // the task of `last`
  std::optional<records::Record> last;  // the trial just recorded (none between batches)
  // The model's time from the tasks' best records: calls times the best's time, summed; 0
  // until every task has one that ran. For alternatives: the fastest task's best; 0 until one
  // ran.
  double predicted_ms = 0;
  // For alternatives: the task whose best ranks first (records::ranks_before), what the job
  // keeps; -1 until one ran.
  int fastest = -1;
  double elapsed_s = 0, eta_s = 0;
  bool done = false;
  std::string stopped;  // when done: "trials", "budget", "tasks exhausted", "cancelled"
};

struct ScheduleHooks {
  // After every trial (one call at a time), after every batch and at the end.
  std::function<void(const ScheduleProgress&)> progress{};
  // Asked between batches: the run ends "cancelled", every task's job cancelled.
  std::function<bool()> cancelled{};
  // Asked between points and batches: the service is stopping; the tasks' jobs stay running
  // in the store, to be resumed, and tune_tasks throws Interrupted.
  std::function<bool()> stopping{};
};

// The expected gain, in milliseconds of the model's time per trial, of giving task i more
// trials: calls x (w x (best `window` batches ago - best now) / trials since then + (1 - w) x
// best now / trials so far), w the backward weight. `history` is the task's best time after
// each of its batches (+infinity before any ran); a task with no time yet has an infinite
// gain. Exposed for its test.
double task_gain(int calls, const std::vector<double>& history, const std::vector<int>& trials,
                 double backward_weight, int window);

// For alternatives: how far below `fastest` (the fastest best of all the tasks) task i's best
// would lie after `batch` more trials, projected at task_gain's rate (with one call). The
// fastest task's is its rate times the batch; another's is negative until its projection
// passes the fastest. A task with no time yet: +infinity before its first batch, -infinity
// after it (every point it measured failed: the others go first). Exposed for its test.
double alternative_gain(const std::vector<double>& history, const std::vector<int>& trials,
                        double fastest, int batch, double backward_weight, int window);

// Tunes `tasks` on `key` under `settings`' budget: one batch each first (tasks of one point
// first, then the others in their order, each a batch or its share of the trials left; a
// resumed task that measured before skips it), then batch by batch to the task of the largest
// task_gain, until the trials or the time are spent, every task's job has no more to do, or
// the run is cancelled (for alternatives: by alternative_gain); then each job is finished (its
// finalists re-timed). Each trial is
// added to `store` as it arrives. Throws Interrupted as tune() does (every job left running,
// to be resumed), and what the store throws.
ScheduleProgress tune_tasks(const std::vector<ScheduledTask>& tasks, Builder& builder,
                            Runner& runner, records::RecordStore& store, const std::string& key,
                            const ScheduleSettings& settings, const ScheduleHooks& hooks = {});

}  // namespace kiln::tuner
