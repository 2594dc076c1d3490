// A model's tasks tuned under one budget (kiln/task_scheduler.h) with a synthetic Builder and
// Runner and the SQLite store: every task gets a batch first and a task of one point is
// measured once, the budget of trials is kept exactly, the trials go where the model's time
// falls most, each task's trials are records of its own job, the predicted time is the sum of
// calls x best, and a run stopped by the service resumes from its tasks' jobs with nothing lost
// or measured twice; cancelled and out-of-time runs end so.
#include "kiln/task_scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

namespace kiln::tuner {
namespace {

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

// Builds every point into an artifact named after it.
class NamingBuilder : public Builder {
 public:
  Outcome<Build> build(const BuildInput& in) override {
    auto a = std::make_shared<codegen::Artifact>();
    a->name = records::config_text(in.point);
    Build b;
    b.artifact = a;
    return b;
  }
  int parallelism() const override { return 2; }
};

// Task t (its param "task") costs scale[t] x (1 + |X - best_x[t]|) ms a call. Counts the
// points each task measured; after `fail_after` measurements every agent is lost.
class TaskRunner : public Runner {
 public:
  std::map<int64_t, double> scale;
  std::map<int64_t, int64_t> best_x;
  std::map<int64_t, std::vector<std::string>> seen;  // by task, outside re-timing
  int fail_after = -1;

  Outcome<Target> target() override { return Target::host(); }
  Outcome<Measurement> run(const RunInput& in) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t t = in.params.at("task");
    if (fail_after >= 0 && measured_ >= fail_after)
      return Failure{Failure::Kind::Unavailable, std::nullopt, "every agent of key x86 was lost"};
    ++measured_;
    if (in.device.empty()) seen[t].push_back(in.artifact->name);
    Config c = records::parse_config(in.artifact->name);
    int64_t x = c.count("X") ? c.at("X") : best_x[t];
    Measurement m;
    m.device = "synthetic";
    m.median_ms = scale[t] * (1 + std::abs(static_cast<double>(x - best_x[t])));
    m.round_ms = {m.median_ms, m.median_ms, m.median_ms};
    return m;
  }

 private:
  std::mutex mu_;
  int measured_ = 0;
};

class TaskSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "kiln_sched_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = records::open_sqlite_store(dir_ + "/records.db");
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Task `index` with a knob X of `points` values (none: one point, nothing to tune), run
  // `calls` times by the model, costing `scale` x (1 + |X - best_x|).
  ScheduledTask task(int64_t index, int64_t points, int calls, double scale, int64_t best_x) {
    runner_.scale[index] = scale;
    runner_.best_x[index] = best_x;
    ScheduledTask s;
    s.task.workload = {"wl-" + std::to_string(index), "op" + std::to_string(index),
                       "func op" + std::to_string(index) + " { ... }"};
    std::vector<KnobDef> knobs;
    if (points > 0) knobs.push_back(KnobDef::values_of("X", range(points)));
    s.task.space = std::make_shared<const Space>(std::move(knobs));
    s.task.params = {{"task", index}};
    s.task.flops = 1'000'000;
    s.calls = calls;
    s.name = "op" + std::to_string(index);
    return s;
  }
  ScheduleSettings settings(int trials) {
    ScheduleSettings s;
    s.trials = trials;
    s.task.trials = 1'000;
    s.task.batch = 8;
    s.task.retime_top = 0;
    s.task.search.strategy = Strategy::Random;
    return s;
  }
  int64_t records_of(int64_t job) {
    records::Query q;
    q.job = job;
    return store_->count(q);
  }

  std::string dir_;
  std::unique_ptr<records::RecordStore> store_;
  NamingBuilder builder_;
  TaskRunner runner_;
};

TEST(TaskGainTest, IsTheWeightedFallOfTheBest) {
  // No time yet: infinite, so that it is measured before anything else.
  EXPECT_TRUE(std::isinf(task_gain(1, {std::numeric_limits<double>::infinity()}, {0}, 0.2, 3)));
  // One batch: only the average fall since the start, best / trials.
  EXPECT_DOUBLE_EQ(task_gain(2, {10.0}, {8}, 0.2, 3), 2 * 0.8 * (10.0 / 8));
  // Batches: the fall over the last `window` of them per trial, weighted 0.2.
  std::vector<double> best = {20, 12, 10, 9};
  std::vector<int> trials = {8, 16, 24, 32};
  EXPECT_DOUBLE_EQ(task_gain(3, best, trials, 0.2, 2), 3 * (0.2 * (12.0 - 9) / 16 + 0.8 * 9 / 32));
  EXPECT_DOUBLE_EQ(task_gain(3, best, trials, 0.2, 9), 3 * (0.2 * (20.0 - 9) / 24 + 0.8 * 9 / 32));
  // Twice the calls, twice the gain.
  EXPECT_DOUBLE_EQ(task_gain(6, best, trials, 0.2, 2), 2 * task_gain(3, best, trials, 0.2, 2));
}

TEST_F(TaskSchedulerTest, TheBudgetGoesWhereTheModelsTimeFallsMost) {
  // op0: run 10 times, a space of 64 points with a deep bowl; op1: once, 64 points, cheap;
  // op2: once, no knobs (measured once, its default).
  std::vector<ScheduledTask> tasks = {task(0, 64, 10, 1.0, 40), task(1, 64, 1, 0.01, 3),
                                      task(2, 0, 1, 0.5, 0)};
  std::vector<ScheduleProgress> seen;
  ScheduleHooks hooks;
  hooks.progress = [&](const ScheduleProgress& p) { seen.push_back(p); };
  ScheduleProgress p = tune_tasks(tasks, builder_, runner_, *store_, "x86", settings(64), hooks);

  EXPECT_TRUE(p.done);
  EXPECT_EQ(p.stopped, "trials");
  EXPECT_EQ(p.trials, 64);
  ASSERT_EQ(p.tasks.size(), 3u);
  EXPECT_EQ(runner_.seen[2].size(), 1u);  // one point: measured once
  EXPECT_GE(runner_.seen[1].size(), 8u);  // a batch each first
  // The heavy task gets most of the budget; the cheap one no more than its first batch and a
  // little.
  EXPECT_GT(runner_.seen[0].size(), 3 * runner_.seen[1].size());
  EXPECT_EQ(runner_.seen[0].size() + runner_.seen[1].size() + runner_.seen[2].size(), 64u);
  for (const auto& [t, points] : runner_.seen)
    EXPECT_EQ(std::set<std::string>(points.begin(), points.end()).size(), points.size())
        << "task " << t << " measured a point twice";

  // Each task's trials are records of its own job, of its workload.
  std::set<int64_t> jobs;
  for (size_t i = 0; i < 3; ++i) {
    const TuneProgress& t = p.tasks[i];
    EXPECT_TRUE(t.done);
    jobs.insert(t.job);
    EXPECT_EQ(records_of(t.job),
              static_cast<int64_t>(runner_.seen[static_cast<int64_t>(i)].size()));
    std::optional<records::Job> j = store_->job(t.job);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->workload, tasks[i].task.workload.hash);
    EXPECT_EQ(j->state, records::JobState::Done);
    ASSERT_TRUE(t.best);
  }
  EXPECT_EQ(jobs.size(), 3u);
  // The model's predicted time: calls x best, summed.
  double predicted = 0;
  for (size_t i = 0; i < 3; ++i) predicted += tasks[i].calls * p.tasks[i].best->median_ms;
  EXPECT_DOUBLE_EQ(p.predicted_ms, predicted);

  // One message a trial, naming its task and carrying its record; the prediction falls.
  int with_trial = 0;
  double last_prediction = std::numeric_limits<double>::infinity();
  for (const ScheduleProgress& m : seen) {
    if (!m.last) continue;
    ++with_trial;
    ASSERT_GE(m.task, 0);
    EXPECT_EQ(m.last->workload, tasks[static_cast<size_t>(m.task)].task.workload.hash);
    if (m.predicted_ms > 0) {
      EXPECT_LE(m.predicted_ms, last_prediction);
      last_prediction = m.predicted_ms;
    }
  }
  EXPECT_EQ(with_trial, 64);
  EXPECT_TRUE(seen.back().done);
}

TEST(AlternativeGainTest, IsHowFarTheProjectedBestFallsBelowTheFastest) {
  const double inf = std::numeric_limits<double>::infinity();
  // Before its first batch: first; after a first batch that all failed: last.
  EXPECT_EQ(alternative_gain({inf}, {0}, 1.0, 8, 0.2, 3), inf);
  EXPECT_EQ(alternative_gain({inf, inf}, {0, 8}, 1.0, 8, 0.2, 3), -inf);
  // The fastest task: its rate (task_gain with one call) times the batch.
  std::vector<double> best = {20, 12, 10, 9};
  std::vector<int> trials = {8, 16, 24, 32};
  EXPECT_DOUBLE_EQ(alternative_gain(best, trials, 9, 8, 0.2, 2),
                   8 * task_gain(1, best, trials, 0.2, 2));
  // A slower one: below zero until its projection passes the fastest.
  double rate = task_gain(1, best, trials, 0.2, 2);
  EXPECT_DOUBLE_EQ(alternative_gain(best, trials, 5, 8, 0.2, 2), 5 - (9 - 8 * rate));
  EXPECT_LT(alternative_gain(best, trials, 5, 8, 0.2, 2), 0);
  EXPECT_GT(alternative_gain(best, trials, 8, 8, 0.2, 2), 0);  // 9 - 8 x 0.2625 is below 8
}

// Alternatives (a func's sketches): a batch each, then the next goes to the fastest (with as
// many trials as the others, a slower one's projection never passes it; the model's sum would
// have picked the slowest); the result is the fastest's best.
TEST_F(TaskSchedulerTest, AlternativesGiveTheNextBatchToTheFastestAndKeepItsBest) {
  std::vector<ScheduledTask> tasks = {task(0, 16, 1, 10.0, 8), task(1, 16, 1, 1.0, 8),
                                      task(2, 16, 1, 100.0, 8)};
  ScheduleSettings s = settings(32);
  s.alternatives = true;
  std::vector<ScheduleProgress> seen;
  ScheduleHooks hooks;
  hooks.progress = [&](const ScheduleProgress& p) { seen.push_back(p); };
  ScheduleProgress p = tune_tasks(tasks, builder_, runner_, *store_, "x86", s, hooks);
  EXPECT_EQ(p.trials, 32);
  EXPECT_EQ(runner_.seen[0].size(), 8u);
  EXPECT_EQ(runner_.seen[1].size(), 16u);
  EXPECT_EQ(runner_.seen[2].size(), 8u);
  double fastest = std::numeric_limits<double>::infinity();
  for (const TuneProgress& t : p.tasks) {
    ASSERT_TRUE(t.best);
    fastest = std::min(fastest, t.best->median_ms);
  }
  EXPECT_DOUBLE_EQ(p.predicted_ms, fastest);
  EXPECT_DOUBLE_EQ(p.predicted_ms, p.tasks[1].best->median_ms);
  // From the first trial that ran on, the prediction is the fastest so far: it never rises.
  double last = std::numeric_limits<double>::infinity();
  for (const ScheduleProgress& m : seen) {
    if (m.predicted_ms <= 0) continue;
    EXPECT_LE(m.predicted_ms, last);
    last = m.predicted_ms;
  }
}

// A budget smaller than a batch a task: the task of one point is measured first, and the
// others share what is left, so that every task has a time and the model a prediction.
TEST_F(TaskSchedulerTest, ASmallBudgetStillMeasuresEveryTask) {
  std::vector<ScheduledTask> tasks = {task(0, 64, 1, 1.0, 3), task(1, 64, 2, 1.0, 5),
                                      task(2, 64, 1, 1.0, 7), task(3, 0, 1, 0.5, 0)};
  ScheduleProgress p = tune_tasks(tasks, builder_, runner_, *store_, "x86", settings(10));
  EXPECT_EQ(p.trials, 10);
  EXPECT_EQ(runner_.seen[3].size(), 1u);
  for (int64_t t = 0; t < 3; ++t) EXPECT_EQ(runner_.seen[t].size(), 3u) << "task " << t;
  EXPECT_GT(p.predicted_ms, 0);
}

TEST_F(TaskSchedulerTest, ANewTaskStartsFromTheBestRecordOfTheNearestShape) {
  // op0 at C=64 tuned first, as another model would; then op0 at C=128 (another shape of the
  // same operator, the same best) and at C=64 again (the same workload, a new job).
  ScheduledTask c64 = task(0, 64, 1, 1.0, 37);
  c64.task.workload.shape = "C=64";
  ScheduleSettings s = settings(48);
  ScheduleProgress first = tune_tasks({c64}, builder_, runner_, *store_, "x86", s);
  ASSERT_TRUE(first.tasks[0].best);
  EXPECT_EQ(first.tasks[0].first_from, "");  // nothing known, and no func to take defaults of

  ScheduledTask c128 = task(1, 64, 1, 1.0, 37);
  c128.task.workload = {"wl-c128", "op0", "func op0 { ... 128 }", "C=128"};
  ScheduledTask again = task(2, 64, 1, 1.0, 37);
  again.task.workload = c64.task.workload;
  ScheduleProgress p = tune_tasks({c128, again}, builder_, runner_, *store_, "x86", settings(16));
  const std::string best = records::config_text(first.tasks[0].best->config);
  for (int64_t t : {1, 2}) {
    // Measured in its first batch (whose points reach the runner in whatever order the
    // builder's threads finish them), and trial 0, the first proposed.
    const std::vector<std::string>& seen = runner_.seen[t];
    ASSERT_FALSE(seen.empty());
    auto first_batch = seen.begin() + std::min<std::ptrdiff_t>(8, std::ssize(seen));
    EXPECT_NE(std::find(seen.begin(), first_batch, best), first_batch) << "task " << t;
    const TuneProgress& tp = p.tasks[static_cast<size_t>(t - 1)];
    EXPECT_EQ(tp.first_from, "transfer");
    EXPECT_EQ(tp.first_shape, "C=64");
    ASSERT_TRUE(tp.first);
    EXPECT_EQ(records::config_text(tp.first->config), best);
  }

  // Without transfer, a new task's first point is the search's own.
  s.transfer = false;
  ScheduledTask cold = task(3, 64, 1, 1.0, 37);
  cold.task.workload = {"wl-c256", "op0", "func op0 { ... 256 }", "C=256"};
  ScheduleProgress q = tune_tasks({cold}, builder_, runner_, *store_, "x86", s);
  EXPECT_EQ(q.tasks[0].first_from, "");
}

TEST_F(TaskSchedulerTest, AModelsLaterTaskStartsFromWhatItsEarlierTasksMeasured) {
  // Two shapes of one operator in one model: the second's first batch comes after the first's,
  // and starts from its best.
  ScheduledTask small = task(0, 64, 1, 1.0, 11);
  small.task.workload = {"wl-small", "op", "func op { ... 8 }", "C=8"};
  ScheduledTask large = task(1, 64, 1, 1.0, 11);
  large.task.workload = {"wl-large", "op", "func op { ... 16 }", "C=16"};
  ScheduleProgress p = tune_tasks({small, large}, builder_, runner_, *store_, "x86", settings(16));
  ASSERT_EQ(runner_.seen[0].size(), 8u);
  ASSERT_TRUE(store_->best("wl-small", "x86"));
  const std::string best = records::config_text(store_->best("wl-small", "x86")->config);
  // Trial 0, the first proposed, and measured in its first batch (in whatever order the
  // builder's threads finish that batch's points).
  const std::vector<std::string>& seen = runner_.seen[1];
  ASSERT_FALSE(seen.empty());
  auto first_batch = seen.begin() + std::min<std::ptrdiff_t>(8, std::ssize(seen));
  EXPECT_NE(std::find(seen.begin(), first_batch, best), first_batch);
  ASSERT_TRUE(p.tasks[1].first);
  EXPECT_EQ(records::config_text(p.tasks[1].first->config), best);
  EXPECT_EQ(p.tasks[1].first_from, "transfer");
  EXPECT_EQ(p.tasks[1].first_shape, "C=8");
  EXPECT_EQ(p.tasks[0].first_from, "");  // nothing was known, and it has no func for defaults
}

TEST_F(TaskSchedulerTest, AStoppedRunResumesFromItsTasksJobsWithNothingLostOrRepeated) {
  std::vector<ScheduledTask> tasks = {task(0, 64, 4, 1.0, 20), task(1, 32, 1, 1.0, 5)};
  runner_.fail_after = 20;  // in op1's first batch... after op0's and part of op1's
  std::vector<int64_t> jobs(2, 0);
  ScheduleHooks hooks;
  hooks.progress = [&](const ScheduleProgress& p) {
    for (size_t i = 0; i < 2; ++i) jobs[i] = p.tasks[i].job;
  };
  EXPECT_THROW(tune_tasks(tasks, builder_, runner_, *store_, "x86", settings(48), hooks),
               Interrupted);
  ASSERT_GT(jobs[0], 0);
  ASSERT_GT(jobs[1], 0);
  int64_t before = records_of(jobs[0]) + records_of(jobs[1]);
  EXPECT_GE(before, 8);  // at least op0's batch
  EXPECT_LE(before, 20);
  EXPECT_EQ(store_->job(jobs[0])->state, records::JobState::Running);

  runner_.fail_after = -1;
  for (size_t i = 0; i < 2; ++i) tasks[i].job = jobs[i];
  ScheduleProgress p =
      tune_tasks(tasks, builder_, runner_, *store_, "x86", settings(48), ScheduleHooks{});
  EXPECT_EQ(p.stopped, "trials");
  EXPECT_EQ(p.trials, 48);  // this run's budget
  EXPECT_EQ(p.tasks[0].job, jobs[0]);
  EXPECT_EQ(p.tasks[1].job, jobs[1]);
  EXPECT_EQ(records_of(jobs[0]) + records_of(jobs[1]), before + 48);
  for (const auto& [t, points] : runner_.seen)
    EXPECT_EQ(std::set<std::string>(points.begin(), points.end()).size(), points.size())
        << "task " << t << " measured a point twice";
}

TEST_F(TaskSchedulerTest, CancelledOutOfTimeAndExhaustedRunsEndSo) {
  std::vector<ScheduledTask> tasks = {task(0, 16, 1, 1.0, 3), task(1, 8, 1, 1.0, 2)};
  int trials = 0;
  ScheduleHooks hooks;
  hooks.progress = [&](const ScheduleProgress& p) { trials = p.trials; };
  hooks.cancelled = [&] { return trials >= 8; };
  ScheduleProgress p = tune_tasks(tasks, builder_, runner_, *store_, "x86", settings(0), hooks);
  EXPECT_EQ(p.stopped, "cancelled");
  EXPECT_EQ(p.trials, 8);
  for (const TuneProgress& t : p.tasks)
    EXPECT_EQ(store_->job(t.job)->state, records::JobState::Cancelled);

  ScheduleSettings out_of_time = settings(0);
  out_of_time.budget_s = 1e-9;
  p = tune_tasks(tasks, builder_, runner_, *store_, "x86", out_of_time);
  EXPECT_EQ(p.stopped, "budget");
  EXPECT_EQ(p.trials, 0);

  // No limit but the spaces: 16 + 8 points, then nothing is left.
  p = tune_tasks(tasks, builder_, runner_, *store_, "x86", settings(0));
  EXPECT_EQ(p.stopped, "tasks exhausted");
  EXPECT_EQ(p.trials, 24);
  EXPECT_EQ(p.tasks[0].stopped, "space exhausted");
  EXPECT_EQ(p.predicted_ms, 2.0);  // each at its best: 1 x 1 ms + 1 x 1 ms
}

}  // namespace
}  // namespace kiln::tuner
