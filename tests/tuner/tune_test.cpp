// The tuning loop (kiln/tune.h) with a synthetic Builder and Runner
// (kiln/measure.h) and the SQLite store: every trial is a record, failures are
// counted by class and recorded too, each kind of Failure is decided on as a
// value (an illegal point rejected, a refused compile recorded, a busy
// builder waited for, a lost fleet or a stopping service interrupting the
// job), a job interrupted mid-batch resumes from its records with no trial
// lost or measured twice, and a job stops at its budget, on early stop, when
// the space runs out, or when cancelled.
#include "kiln/tune.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>

#include "kiln/stats.h"

namespace kiln::tuner {
namespace {

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

// n points: X in 0..n-1, Y and Z fixed at 0.
Space x_only(int64_t n) {
  return Space({KnobDef::values_of("X", range(n)), KnobDef::values_of("Y", range(1)),
                KnobDef::values_of("Z", range(1))});
}

Space gemm_like_space() {
  return Space({KnobDef::values_of("X", range(16)), KnobDef::values_of("Y", range(16)),
                KnobDef::values_of("Z", range(4))});
}

// Builds every point into an artifact named after it, except those `refuse`
// picks; answers Busy `busy` times first.
class SyntheticBuilder : public Builder {
 public:
  std::function<std::optional<Failure>(const Config&)> refuse = [](const Config&) {
    return std::optional<Failure>();
  };
  std::atomic<int> busy{0};
  std::atomic<int> builds{0};

  Outcome<Build> build(const BuildInput& in) override {
    if (busy > 0) {
      --busy;
      return Failure{Failure::Kind::Busy, std::nullopt, "kilnd is busy"};
    }
    if (std::optional<Failure> f = refuse(in.point)) return *f;
    ++builds;
    auto a = std::make_shared<codegen::Artifact>();
    a->name = records::config_text(in.point);
    Build b;
    b.artifact = a;
    b.compile_ms = 1;
    b.compiler_version = "synthetic 1";
    return b;
  }
  int parallelism() const override { return 2; }
};

// Measures by formula: X = 15 times out, the rest cost a bowl around (11, 4, 2).
// `fail_after`: every agent is lost once that many points were measured. A run on a named
// device is a re-timing at the job's end: kept apart, in `retimed`.
class SyntheticRunner : public Runner {
 public:
  int fail_after = -1;
  std::vector<Config> seen;     // every point measured, in order
  std::vector<Config> retimed;  // every re-timing run, in order

  Outcome<Target> target() override { return Target::host(); }
  Outcome<Measurement> run(const RunInput& in) override {
    Config c = records::parse_config(in.artifact->name);
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_after >= 0 && static_cast<int>(seen.size()) >= fail_after)
      return Failure{Failure::Kind::Unavailable, std::nullopt, "every agent of key x86 was lost"};
    if (in.device.empty()) {
      seen.push_back(c);
    } else {
      EXPECT_EQ(in.device, "synthetic");
      retimed.push_back(c);
    }
    Measurement m;
    m.device = "synthetic";
    if (c.at("X") == 15) {
      m.error = RunError::Timeout;
      m.message = "killed at the time limit of 100 ms";
    } else {
      double x = static_cast<double>(c.at("X") - 11), y = static_cast<double>(c.at("Y") - 4);
      m.median_ms = 1 + x * x + y * y + std::abs(static_cast<double>(c.at("Z") - 2));
      m.round_ms = {m.median_ms, m.median_ms};
    }
    return m;
  }

 private:
  std::mutex mu_;
};

class TuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "kiln_tune_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = records::open_sqlite_store(dir_ + "/records.db");
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  int64_t count(int64_t job) {
    records::Query q;
    q.job = job;
    return store_->count(q);
  }

  std::string dir_;
  std::unique_ptr<records::RecordStore> store_;
  records::Workload workload_{"wl-hash", "gemm", "func gemm { ... }"};

  // A task of `space` with no func: the synthetic builder needs none.
  Task task_of(Space space) const {
    Task t;
    t.workload = workload_;
    t.space = std::make_shared<const Space>(std::move(space));
    t.flops = 1'000'000;
    return t;
  }
  SyntheticBuilder builder_;
};

TEST_F(TuneTest, EveryTrialIsARecordAndTheBestIsOneQueryAway) {
  Task task = task_of(gemm_like_space());
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 64;
  std::vector<int> seen_progress;               // after each batch and at the end
  std::vector<int> trial_progress;              // after each trial, with the trial
  std::map<int64_t, records::Record> streamed;  // what the progress said, by record id
  TuneHooks hooks;
  hooks.progress = [&](const TuneProgress& now) {
    (now.last ? trial_progress : seen_progress).push_back(now.trials);
    if (now.last) {
      EXPECT_EQ(count(now.job), now.trials);
      EXPECT_EQ(now.last->job, now.job);
      EXPECT_EQ(now.last->workload, "wl-hash");
      EXPECT_EQ(now.last->key, "x86");
      EXPECT_GT(now.last->id, 0);
      streamed[now.last->id] = *now.last;
    }
  };
  TuneProgress p = tune(task, builder_, m, *store_, "x86", settings, 0, hooks);
  // Each trial's progress carries the record as stored: its id, and when it arrived.
  records::Query all;
  all.job = p.job;
  all.limit = 1000;
  std::vector<records::Record> stored = store_->query(all);
  ASSERT_EQ(stored.size(), streamed.size());
  for (const records::Record& r : stored) {
    ASSERT_TRUE(streamed.count(r.id)) << r.id;
    EXPECT_GT(r.unix_ms, 0);
    EXPECT_EQ(streamed[r.id].unix_ms, r.unix_ms);
    EXPECT_EQ(streamed[r.id].config, r.config);
    EXPECT_EQ(streamed[r.id].median_ms, r.median_ms);
  }
  EXPECT_TRUE(p.done);
  EXPECT_EQ(p.stopped, "trials");
  EXPECT_EQ(p.trials, 64);
  EXPECT_EQ(m.seen.size(), 64u);
  EXPECT_EQ(count(p.job), 64);
  EXPECT_EQ(store_->job(p.job)->state, records::JobState::Done);
  EXPECT_EQ(seen_progress, (std::vector<int>{16, 32, 48, 64}));
  ASSERT_EQ(trial_progress.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(trial_progress[static_cast<size_t>(i)], i + 1);
  std::optional<records::Record> best = store_->best("wl-hash", "x86");
  ASSERT_TRUE(best && p.best);
  EXPECT_EQ(best->config, p.best->config);
  EXPECT_EQ(best->id, p.best->id);
  EXPECT_EQ(best->median_ms, p.best->median_ms);
  EXPECT_EQ(best->retimed_ms, p.best->retimed_ms);
  // The three fastest were re-timed, three passes each, and the best is one of them.
  EXPECT_EQ(p.retimed, 3);
  EXPECT_EQ(m.retimed.size(), 9u);
  ASSERT_TRUE(best->retimed_ms);
  EXPECT_EQ(best->retime_round_ms.size(), 6u);  // 3 passes of the runner's 2 rounds
  EXPECT_EQ(best->compiler_version, "synthetic 1");
  EXPECT_EQ(best->agent, "synthetic");
  EXPECT_EQ(best->flops, 1'000'000);
  EXPECT_NEAR(p.best_gflops, 1e6 / (*p.best->retimed_ms * 1e-3) * 1e-9, 1e-9);
  // Failures are records too, with their class.
  records::Query timeouts;
  timeouts.error = "TIMEOUT";
  EXPECT_EQ(store_->count(timeouts), p.errors["TIMEOUT"]);
  for (const records::Record& r : store_->query(timeouts)) {
    EXPECT_EQ(r.median_ms, 0);
    EXPECT_EQ(r.message, "killed at the time limit of 100 ms");
  }
  EXPECT_NE(store_->job(p.job)->settings.find(R"("search":"xgb-rank")"), std::string::npos);
}

// A new job's first points: the best records of related shapes and the defaults. Once the
// warm start has trained the model, it orders them (the job's own shape, measured by another
// job, stays first), and trial 0 says where the first came from.
TEST_F(TuneTest, TheModelOrdersTheFirstPointsAndTrialZeroSaysWhereItCameFrom) {
  Task task = task_of(gemm_like_space());
  workload_.shape = "M=64";
  task.workload.shape = "M=64";
  auto first_of = [&](TuneSettings settings) {
    settings.trials = 1;
    settings.batch = 1;
    settings.retime_top = 0;
    SyntheticRunner m;
    TuneProgress p = tune(task, builder_, m, *store_, "x86", settings);
    EXPECT_EQ(m.seen.size(), 1u);
    EXPECT_TRUE(p.first);
    return std::make_tuple(m.seen.empty() ? Config{} : m.seen.front(), p.first_from, p.first_shape);
  };
  // Other shapes' records: X = 11 (the synthetic optimum) is fast everywhere, X = 2 slow.
  TuneSettings settings;
  for (int64_t y = 0; y < 16; ++y) {
    for (int64_t x : {2, 11}) {
      settings.warm_points.push_back({{"X", x}, {"Y", y}, {"Z", 2}});
      settings.warm_cost.push_back(x == 11 ? 1.0 + 0.01 * y : 4.0 + 0.01 * y);
    }
  }
  Config slow{{"X", 2}, {"Y", 4}, {"Z", 2}}, fast{{"X", 11}, {"Y", 4}, {"Z", 2}};
  settings.first_points = {slow, fast};
  settings.first_shapes = {"M=128", ""};  // the nearest shape's best, then the defaults
  auto [point, from, shape] = first_of(settings);
  EXPECT_EQ(point, fast);
  EXPECT_EQ(from, "defaults");
  EXPECT_EQ(shape, "");

  // The job's own shape, measured by another job, is not reordered.
  settings.first_shapes = {"M=64", ""};
  std::tie(point, from, shape) = first_of(settings);
  EXPECT_EQ(point, slow);
  EXPECT_EQ(from, "transfer");
  EXPECT_EQ(shape, "M=64");

  // Without a warm start the model knows nothing: the points keep their order.
  settings.warm_points.clear();
  settings.warm_cost.clear();
  settings.first_shapes = {"M=128", ""};
  std::tie(point, from, shape) = first_of(settings);
  EXPECT_EQ(point, slow);
  EXPECT_EQ(from, "transfer");
  EXPECT_EQ(shape, "M=128");
}

TEST_F(TuneTest, AnInterruptedJobResumesWithNoTrialLostOrRepeated) {
  Task task = task_of(gemm_like_space());
  TuneSettings settings;
  settings.trials = 64;
  SyntheticRunner first;
  first.fail_after = 37;  // mid-batch: 32 in two batches, then 5 of the third
  int64_t job = 0;
  TuneHooks hooks;
  hooks.progress = [&](const TuneProgress& p) { job = p.job; };
  try {
    tune(task, builder_, first, *store_, "x86", settings, 0, hooks);
    FAIL() << "the runner's failure did not come through";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.failure().kind, Failure::Kind::Unavailable);
    EXPECT_EQ(e.failure().message, "every agent of key x86 was lost");
  }
  ASSERT_NE(job, 0);
  EXPECT_EQ(count(job), 37);  // what was reported before the failure is kept
  EXPECT_EQ(store_->job(job)->state, records::JobState::Running);

  // kilnd again, with a new store on the same file.
  store_.reset();
  store_ = records::open_sqlite_store(dir_ + "/records.db");
  SyntheticRunner second;
  TuneProgress p = tune(task, builder_, second, *store_, "x86", settings, job);
  EXPECT_EQ(p.trials, 64);
  EXPECT_EQ(second.seen.size(), 64u - 37u);
  EXPECT_EQ(count(job), 64);
  std::set<std::string> all;
  for (const Config& c : first.seen) all.insert(records::config_text(c));
  for (const Config& c : second.seen)
    EXPECT_TRUE(all.insert(records::config_text(c)).second)
        << records::config_text(c) << " measured twice";
  EXPECT_EQ(store_->job(job)->state, records::JobState::Done);
}

TEST_F(TuneTest, AResumeOfAnotherWorkloadOrNoJobIsRefused) {
  Task task = task_of(gemm_like_space());
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 16;
  TuneProgress p = tune(task, builder_, m, *store_, "x86", settings);
  EXPECT_THROW(tune(task, builder_, m, *store_, "arm", settings, p.job), records::RecordsError);
  EXPECT_THROW(tune(task, builder_, m, *store_, "x86", settings, p.job + 9), records::RecordsError);
}

TEST_F(TuneTest, StopsEarlyWhenNothingImproves) {
  Task task = task_of(gemm_like_space());
  class Flat : public Runner {
   public:
    Outcome<Target> target() override { return Target::host(); }
    Outcome<Measurement> run(const RunInput&) override {
      Measurement m;
      m.median_ms = 5;
      return m;
    }
  } flat;
  TuneSettings settings;
  settings.trials = 512;
  settings.early_stop = 40;
  TuneProgress p = tune(task, builder_, flat, *store_, "x86", settings);
  EXPECT_EQ(p.stopped, "early stop");
  EXPECT_GE(p.trials, 41);
  EXPECT_LE(p.trials, 41 + settings.batch);
}

TEST_F(TuneTest, StopsWhenTheSpaceRunsOutOrWhenCancelled) {
  Space tiny({KnobDef::values_of("X", range(5)), KnobDef::values_of("Y", range(2)),
              KnobDef::values_of("Z", range(1))});
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 64;
  TuneProgress p = tune(task_of(tiny), builder_, m, *store_, "x86", settings);
  EXPECT_EQ(p.stopped, "space exhausted");
  EXPECT_EQ(p.trials, 10);

  int batches = 0;
  TuneHooks hooks;
  hooks.progress = [&](const TuneProgress& now) { batches += !now.last; };
  hooks.cancelled = [&] { return batches >= 1; };
  TuneProgress c =
      tune(task_of(gemm_like_space()), builder_, m, *store_, "x86", settings, 0, hooks);
  EXPECT_EQ(c.stopped, "cancelled");
  EXPECT_EQ(c.trials, 16);
  EXPECT_EQ(store_->job(c.job)->state, records::JobState::Cancelled);
}

TEST_F(TuneTest, AnIllegalPointIsRejectedAndARefusedCompileIsARecord) {
  Task task = task_of(gemm_like_space());
  builder_.refuse = [](const Config& c) -> std::optional<Failure> {
    if (c.at("Z") == 0)
      return Failure{Failure::Kind::Compile, ErrorStage::Legality,
                     "a.kiln:3:5: legality error: C.reorder breaks C -> C"};
    if (c.at("Z") == 1)
      return Failure{Failure::Kind::Compile, ErrorStage::Codegen,
                     "a.kiln: codegen error: unknown CPU"};
    return std::nullopt;
  };
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 48;
  settings.search.strategy = Strategy::Random;
  TuneProgress p = tune(task, builder_, m, *store_, "x86", settings);
  // Illegal points are counted, never recorded, never measured.
  int64_t illegal = p.rejected["illegal schedule"];
  EXPECT_GT(illegal, 0);
  records::Query q;
  q.job = p.job;
  q.limit = -1;
  int compile_errors = 0;
  for (const records::Record& r : store_->query(q)) {
    EXPECT_NE(r.config.at("Z"), 0) << records::config_text(r.config);
    if (r.config.at("Z") != 1) continue;
    ++compile_errors;
    EXPECT_EQ(r.error, kCompileErrorClass);
    EXPECT_EQ(r.message, "a.kiln: codegen error: unknown CPU");
    EXPECT_EQ(r.flops, 1'000'000);
    EXPECT_TRUE(r.round_ms.empty());
  }
  EXPECT_GT(compile_errors, 0);
  EXPECT_EQ(p.errors[kCompileErrorClass], compile_errors);
  for (const Config& c : m.seen) EXPECT_GE(c.at("Z"), 2);
  EXPECT_EQ(count(p.job), p.trials);
}

TEST_F(TuneTest, ABusyBuilderIsWaitedForNotCountedAgainstThePoint) {
  Task task = task_of(gemm_like_space());
  builder_.busy = 3;
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 16;
  TuneProgress p = tune(task, builder_, m, *store_, "x86", settings);
  EXPECT_EQ(p.stopped, "trials");
  EXPECT_EQ(p.trials, 16);
  EXPECT_EQ(m.seen.size(), 16u);
  EXPECT_EQ(p.errors.count(kCompileErrorClass), 0u);
}

TEST_F(TuneTest, AFailureOfTheBuilderItselfInterruptsTheJobAndKeepsItRunning) {
  Task task = task_of(gemm_like_space());
  builder_.refuse = [](const Config& c) -> std::optional<Failure> {
    if (c.at("X") == 3) return Failure{Failure::Kind::Internal, std::nullopt, "a bug in kiln"};
    return std::nullopt;
  };
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 256;
  settings.search.strategy = Strategy::Grid;  // X = 3 comes in the first batch
  int64_t job = 0;
  TuneHooks hooks;
  hooks.progress = [&](const TuneProgress& p) { job = p.job; };
  try {
    tune(task, builder_, m, *store_, "x86", settings, 0, hooks);
    FAIL() << "the builder's failure did not come through";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.failure().kind, Failure::Kind::Internal);
    EXPECT_STREQ(e.what(), "a bug in kiln");
  }
  ASSERT_NE(job, 0);
  EXPECT_EQ(store_->job(job)->state, records::JobState::Running);
  // The batch's other points were measured and kept.
  EXPECT_EQ(count(job), static_cast<int64_t>(m.seen.size()));
  EXPECT_GT(count(job), 0);
}

TEST_F(TuneTest, AStoppingServiceInterruptsTheJobWhereItIs) {
  Task task = task_of(gemm_like_space());
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 64;
  int trials = 0;
  int64_t job = 0;
  TuneHooks hooks;
  hooks.progress = [&](const TuneProgress& p) {
    job = p.job;
    trials = p.trials;
  };
  hooks.stopping = [&] { return trials >= 20; };
  try {
    tune(task, builder_, m, *store_, "x86", settings, 0, hooks);
    FAIL() << "the job did not stop";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.failure().kind, Failure::Kind::Stopped);
  }
  EXPECT_EQ(store_->job(job)->state, records::JobState::Running);
  EXPECT_GE(count(job), 20);
  EXPECT_LT(count(job), 64);
  EXPECT_EQ(count(job), static_cast<int64_t>(m.seen.size()));
}

TEST_F(TuneTest, WorkStoppedWhileTheJobRunsInterruptsItAndLosesNoPoint) {
  Task task = task_of(gemm_like_space());
  builder_.refuse = [](const Config& c) -> std::optional<Failure> {
    if (c.at("X") == 2) return Failure{Failure::Kind::Stopped, std::nullopt, "deadline passed"};
    return std::nullopt;
  };
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 256;
  settings.search.strategy = Strategy::Grid;  // X = 2 comes in the first batch
  try {
    tune(task, builder_, m, *store_, "x86", settings);
    FAIL() << "a stopped build that nobody asked for went unnoticed";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.failure().kind, Failure::Kind::Stopped);
    EXPECT_STREQ(e.what(), "deadline passed");
  }
}

TEST_F(TuneTest, AWrongAnswerKeepsItsRoundsAndHasNoTime) {
  Task task = task_of(gemm_like_space());
  class Wrong : public Runner {
   public:
    Outcome<Target> target() override { return Target::host(); }
    Outcome<Measurement> run(const RunInput&) override {
      Measurement m;
      m.round_ms = {2, 3, 4};
      m.median_ms = 3;
      m.error = RunError::WrongAnswer;
      m.message = "C[0, 1] is 2, not 3";
      m.device = "agent-1";
      return m;
    }
  } wrong;
  TuneSettings settings;
  settings.trials = 4;
  settings.batch = 4;
  TuneProgress p = tune(task, builder_, wrong, *store_, "x86", settings);
  EXPECT_FALSE(p.best);
  EXPECT_EQ(p.errors["WRONG_ANSWER"], 4);
  records::Query q;
  q.job = p.job;
  for (const records::Record& r : store_->query(q)) {
    EXPECT_EQ(r.error, "WRONG_ANSWER");
    EXPECT_EQ(r.median_ms, 0);
    EXPECT_EQ(r.round_ms, (std::vector<double>{2, 3, 4}));
    EXPECT_EQ(r.agent, "agent-1");
    EXPECT_EQ(r.compile_ms, 1);
  }
}

// Answers each point with the next of its scripted measurements (the last one again when they
// run out), and writes down every run: the point and the device it was pinned to.
class ScriptedRunner : public Runner {
 public:
  std::map<std::string, std::vector<Measurement>> script;  // by config text
  std::vector<std::pair<std::string, std::string>> runs;   // config text, device
  std::map<std::string, double> stop_above;                // each point's last RunInput's

  Outcome<Target> target() override { return Target::host(); }
  Outcome<Measurement> run(const RunInput& in) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string& c = in.artifact->name;
    runs.emplace_back(c, in.device);
    std::vector<Measurement>& next = script.at(c);
    Measurement m = next.front();
    if (next.size() > 1) next.erase(next.begin());
    stop_above[c] = in.stop_above_ms;
    // As the agent does: a first round past the limit is the only one.
    if (in.stop_above_ms > 0 && !m.round_ms.empty() && m.round_ms.front() > in.stop_above_ms) {
      m.round_ms.resize(1);
      m.stopped_early = true;
    }
    m.median_ms = round_stats(m.round_ms).median;
    m.device = "agent-7";
    return m;
  }
  int runs_of(const std::string& c) const {
    int n = 0;
    for (const auto& [config, device] : runs) n += config == c;
    return n;
  }

 private:
  std::mutex mu_;
};

Measurement rounds(std::vector<double> ms, std::optional<double> load = 0.0,
                   std::optional<double> pressure = 0.0) {
  Measurement m;
  m.round_ms = std::move(ms);
  m.host_load = load;
  m.cpu_pressure = pressure;
  return m;
}

TEST_F(TuneTest, ANoisyMeasurementIsTakenAgainAndKeptOnlyOnceQuietOrMarked) {
  Space three = x_only(3);
  ScriptedRunner r;
  // X=0: another process took a core during the first measurement, the second was quiet.
  r.script["X=0,Y=0,Z=0"] = {rounds({1.0, 1.0, 1.0}, 1.0), rounds({2.0, 2.0, 2.0}, 0.02)};
  // X=1: its rounds vary by far more than 10% every time: three attempts, the fastest kept.
  r.script["X=1,Y=0,Z=0"] = {rounds({3.0, 5.0, 4.0}), rounds({2.5, 4.0, 3.0}),
                             rounds({3.5, 6.0, 5.0})};
  // X=2: quiet at once; a host with no load information is not taken for a noisy one.
  r.script["X=2,Y=0,Z=0"] = {rounds({6.0, 6.0, 6.1}, std::nullopt, std::nullopt)};
  TuneSettings settings;
  settings.trials = 3;
  settings.retime_top = 0;
  TuneProgress p = tune(task_of(three), builder_, r, *store_, "x86", settings);
  EXPECT_EQ(p.trials, 3);
  EXPECT_EQ(p.remeasured, 2);
  EXPECT_EQ(r.runs_of("X=0,Y=0,Z=0"), 2);
  EXPECT_EQ(r.runs_of("X=1,Y=0,Z=0"), 3);
  EXPECT_EQ(r.runs_of("X=2,Y=0,Z=0"), 1);
  records::Query q;
  q.job = p.job;
  std::map<int64_t, records::Record> by_x;
  for (const records::Record& rec : store_->query(q)) by_x[rec.config.at("X")] = rec;
  ASSERT_EQ(by_x.size(), 3u);
  EXPECT_EQ(by_x[0].median_ms, 2.0);  // the quiet one, not the lucky-looking first
  EXPECT_EQ(by_x[0].attempts, 2);
  EXPECT_FALSE(by_x[0].noisy);
  EXPECT_EQ(by_x[0].host_load, 0.02);
  EXPECT_EQ(by_x[1].median_ms, 3.0);  // noisy in every attempt: the fastest, marked
  EXPECT_EQ(by_x[1].attempts, 3);
  EXPECT_TRUE(by_x[1].noisy);
  EXPECT_EQ(by_x[2].attempts, 1);
  EXPECT_FALSE(by_x[2].noisy);
  EXPECT_FALSE(by_x[2].host_load);
  EXPECT_FALSE(by_x[2].cpu_pressure);

  // With re-measuring off, the first measurement is kept, marked.
  ScriptedRunner once;
  once.script = {{"X=0,Y=0,Z=0", {rounds({1.0, 1.0, 1.0}, 0.0, 0.9)}},
                 {"X=1,Y=0,Z=0", {rounds({3.0, 3.0, 3.0})}},
                 {"X=2,Y=0,Z=0", {rounds({6.0, 6.0, 6.0})}}};
  settings.noise.remeasure = 0;
  settings.noise.max_cpu_pressure = 0.25;  // no limit by default
  p = tune(task_of(three), builder_, once, *store_, "x86", settings);
  EXPECT_EQ(once.runs.size(), 3u);
  EXPECT_EQ(p.remeasured, 0);
  ASSERT_TRUE(p.best);
  EXPECT_TRUE(p.best->noisy);  // waiting tasks 90% of the time
  EXPECT_EQ(p.best->attempts, 1);
}

TEST_F(TuneTest, TheFinalistsAreRetimedInTurnOnOneAgentAndALuckyOneLosesItsPlace) {
  Space four = x_only(4);
  ScriptedRunner r;
  // X=0 is measured once at a lucky 1.0 ms and is really 3 ms; X=1 is a steady 2 ms.
  r.script["X=0,Y=0,Z=0"] = {rounds({1.0, 1.0, 1.0}), rounds({3.0, 3.0, 3.0})};
  r.script["X=1,Y=0,Z=0"] = {rounds({2.0, 2.0, 2.0})};
  r.script["X=2,Y=0,Z=0"] = {rounds({2.5, 2.5, 2.5})};
  r.script["X=3,Y=0,Z=0"] = {rounds({9.0, 9.0, 9.0})};
  TuneSettings settings;
  settings.trials = 4;
  settings.retime_top = 3;
  settings.retime_passes = 3;
  TuneProgress p = tune(task_of(four), builder_, r, *store_, "x86", settings);
  EXPECT_EQ(p.retimed, 3);
  ASSERT_TRUE(p.best);
  EXPECT_EQ(p.best->config.at("X"), 1);
  EXPECT_EQ(p.best->retimed_ms, 2.0);
  EXPECT_NEAR(p.best_gflops, 1e6 / 2e-3 * 1e-9, 1e-9);
  // The re-timing runs, after the 4 trials: the three fastest, on the best one's agent, in
  // turn, the order reversed every pass.
  ASSERT_EQ(r.runs.size(), 4u + 9u);
  std::vector<std::string> order;
  for (size_t i = 4; i < r.runs.size(); ++i) {
    EXPECT_EQ(r.runs[i].second, "agent-7");
    order.push_back(r.runs[i].first.substr(0, 3));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"X=0", "X=1", "X=2", "X=2", "X=1", "X=0", "X=0", "X=1",
                                             "X=2"}));
  records::Query q;
  q.job = p.job;
  std::map<int64_t, records::Record> by_x;
  for (const records::Record& rec : store_->query(q)) by_x[rec.config.at("X")] = rec;
  EXPECT_EQ(by_x[0].median_ms, 1.0);  // both kept
  EXPECT_EQ(by_x[0].retimed_ms, 3.0);
  EXPECT_EQ(by_x[0].retime_round_ms.size(), 9u);
  EXPECT_FALSE(by_x[3].retimed_ms);
  // The store's best is the re-timed winner too.
  std::optional<records::Record> best = store_->best("wl-hash", "x86");
  ASSERT_TRUE(best);
  EXPECT_EQ(best->config.at("X"), 1);
}

TEST_F(TuneTest, ACancelledJobIsNotRetimedAndAFailingRetimeKeepsTheSingleTimings) {
  Space four = x_only(4);
  SyntheticRunner m;
  TuneSettings settings;
  settings.trials = 64;
  settings.batch = 2;
  int batches = 0;
  TuneHooks hooks;
  hooks.progress = [&](const TuneProgress& now) { batches += !now.last; };
  hooks.cancelled = [&] { return batches >= 1; };
  TuneProgress c = tune(task_of(four), builder_, m, *store_, "x86", settings, 0, hooks);
  EXPECT_EQ(c.stopped, "cancelled");
  EXPECT_EQ(c.retimed, 0);
  EXPECT_TRUE(m.retimed.empty());

  // Every agent lost once the trials are done: the job is done, nothing re-timed.
  SyntheticRunner lost;
  lost.fail_after = 4;
  TuneProgress p = tune(task_of(four), builder_, lost, *store_, "x86", settings);
  EXPECT_EQ(p.stopped, "space exhausted");
  EXPECT_EQ(p.retimed, 0);
  ASSERT_TRUE(p.best);
  EXPECT_FALSE(p.best->retimed_ms);
  EXPECT_EQ(store_->job(p.job)->state, records::JobState::Done);
}

// After the first batch, a candidate's first round past 4x the best median so far is its only
// one; it is recorded so, and counted.
TEST_F(TuneTest, ACandidateFarSlowerThanTheBestIsTimedForOneRound) {
  ScriptedRunner r;
  r.script["X=0,Y=0,Z=0"] = {rounds({1.0, 1.0, 1.0})};
  r.script["X=1,Y=0,Z=0"] = {rounds({3.0, 3.0, 3.0})};   // 3x the best: timed fully
  r.script["X=2,Y=0,Z=0"] = {rounds({9.0, 9.0, 9.0})};   // 9x: one round
  r.script["X=3,Y=0,Z=0"] = {rounds({20.0, 1.0, 1.0})};  // its first round only counts
  TuneSettings settings;
  settings.trials = 4;
  settings.batch = 1;
  settings.retime_top = 0;
  settings.search.strategy = Strategy::Grid;  // X = 0 first
  TuneProgress p = tune(task_of(x_only(4)), builder_, r, *store_, "x86", settings);
  EXPECT_EQ(r.stop_above["X=0,Y=0,Z=0"], 0);  // no best yet
  EXPECT_EQ(r.stop_above["X=2,Y=0,Z=0"], 4.0);
  EXPECT_EQ(p.stopped_early, 2);
  records::Query q;
  q.job = p.job;
  std::map<int64_t, records::Record> by_x;
  for (const records::Record& rec : store_->query(q)) by_x[rec.config.at("X")] = rec;
  EXPECT_FALSE(by_x[1].stopped_early);
  EXPECT_EQ(by_x[1].round_ms.size(), 3u);
  EXPECT_TRUE(by_x[2].stopped_early);
  EXPECT_EQ(by_x[2].round_ms, (std::vector<double>{9.0}));
  EXPECT_EQ(by_x[2].median_ms, 9.0);
  EXPECT_EQ(by_x[2].message,
            "timed for one round: 9 ms a call, more than 4 ms (4x the job's best so far)");
  EXPECT_TRUE(by_x[3].stopped_early);
  EXPECT_FALSE(by_x[3].noisy);  // one round has no spread to judge
  EXPECT_EQ(by_x[3].attempts, 1);

  // Off: every candidate gets its rounds.
  ScriptedRunner all;
  all.script = r.script;
  settings.stop_slower_than = 0;
  p = tune(task_of(x_only(4)), builder_, all, *store_, "x86", settings);
  EXPECT_EQ(p.stopped_early, 0);
  for (const auto& [config, limit] : all.stop_above) EXPECT_EQ(limit, 0) << config;
}

// A batch is streamed: a point goes to the Runner as soon as it is built, so the next points
// compile while it is measured. This Builder builds one point at a time, and holds every point
// after the first until a run has started: were the batch built whole before anything is
// measured, the second build would wait for its deadline and the test fail.
TEST_F(TuneTest, APointIsMeasuredWhileTheNextAreBuilt) {
  class Held : public Builder {
   public:
    std::mutex mu;
    std::condition_variable cv;
    bool run_started = false;
    int built = 0, built_before_first_run = -1;
    Outcome<Build> build(const BuildInput& in) override {
      std::unique_lock<std::mutex> lock(mu);
      if (built > 0 && !cv.wait_for(lock, std::chrono::seconds(20), [&] { return run_started; }))
        return Failure{Failure::Kind::Internal, std::nullopt, "no point was measured while built"};
      ++built;
      auto a = std::make_shared<codegen::Artifact>();
      a->name = records::config_text(in.point);
      Build b;
      b.artifact = a;
      return b;
    }
    int parallelism() const override { return 1; }
  } held;
  class Noting : public SyntheticRunner {
   public:
    explicit Noting(Held& h) : h_(h) {}
    Outcome<Measurement> run(const RunInput& in) override {
      {
        std::lock_guard<std::mutex> lock(h_.mu);
        if (!h_.run_started) h_.built_before_first_run = h_.built;
        h_.run_started = true;
        h_.cv.notify_all();
      }
      return SyntheticRunner::run(in);
    }

   private:
    Held& h_;
  } runner(held);
  TuneSettings settings;
  settings.trials = 8;
  settings.batch = 8;
  settings.retime_top = 0;
  TuneProgress p = tune(task_of(gemm_like_space()), held, runner, *store_, "x86", settings);
  EXPECT_EQ(p.stopped, "trials");
  EXPECT_EQ(p.trials, 8);
  EXPECT_EQ(held.built, 8);
  EXPECT_EQ(held.built_before_first_run, 1);
  EXPECT_EQ(runner.seen.size(), 8u);
}

TEST(RunErrorTest, EachClassHasTheNameRecordsKeep) {
  EXPECT_STREQ(run_error_name(RunError::LoadError), "LOAD_ERROR");
  EXPECT_STREQ(run_error_name(RunError::RuntimeCrash), "RUNTIME_CRASH");
  EXPECT_STREQ(run_error_name(RunError::Timeout), "TIMEOUT");
  EXPECT_STREQ(run_error_name(RunError::WrongAnswer), "WRONG_ANSWER");
  EXPECT_STREQ(run_error_name(RunError::OutOfMemory), "OUT_OF_MEMORY");
  EXPECT_STREQ(run_error_name(RunError::Unsupported), "UNSUPPORTED");
  EXPECT_STREQ(run_error_name(RunError::KernelError), "KERNEL_ERROR");
  EXPECT_STREQ(run_error_name(RunError::BadJob), "BAD_JOB");
}

}  // namespace
}  // namespace kiln::tuner
