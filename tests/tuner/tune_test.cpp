// The tuning loop (kiln/tune.h) with a synthetic measurer and the SQLite
// store: every trial is a record, failures are counted by class and recorded
// too, a job interrupted mid-batch resumes from its records with no trial lost
// or measured twice, and a job stops at its budget, on early stop, when the
// space runs out, or when cancelled.
#include "kiln/tune.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <stdexcept>

namespace kiln::tuner {
namespace {

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

Space gemm_like_space() {
  return Space({KnobDef::values_of("X", range(16)), KnobDef::values_of("Y", range(16)),
                KnobDef::values_of("Z", range(4))});
}

// Measures by formula: X = 15 times out, the rest cost a bowl around (11, 4, 2).
// `fail_after`: throws (kilnd killed) after reporting that many trials.
class SyntheticMeasurer : public Measurer {
 public:
  int fail_after = -1;
  std::vector<Config> seen;  // every point reported, in order

  void measure(const std::vector<Config>& batch,
               const std::function<void(const Trial&)>& report) override {
    for (const Config& c : batch) {
      if (fail_after >= 0 && static_cast<int>(seen.size()) >= fail_after)
        throw std::runtime_error("kilnd was killed");
      seen.push_back(c);
      Trial t;
      t.point = c;
      t.agent = "synthetic";
      t.compile_ms = 1;
      t.flops = 1'000'000;
      if (c.at("X") == 15) {
        t.error = "TIMEOUT";
        t.message = "killed at the time limit of 100 ms";
      } else {
        double x = static_cast<double>(c.at("X") - 11), y = static_cast<double>(c.at("Y") - 4);
        t.median_ms = 1 + x * x + y * y + std::abs(static_cast<double>(c.at("Z") - 2));
        t.round_ms = {t.median_ms, t.median_ms};
      }
      report(t);
    }
  }
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
};

TEST_F(TuneTest, EveryTrialIsARecordAndTheBestIsOneQueryAway) {
  Space space = gemm_like_space();
  SyntheticMeasurer m;
  TuneSettings settings;
  settings.trials = 64;
  std::vector<int> seen_progress;   // after each batch and at the end
  std::vector<int> trial_progress;  // after each trial, with the trial
  TuneProgress p =
      tune(space, m, *store_, workload_, "x86", settings, 0, [&](const TuneProgress& now) {
        (now.last ? trial_progress : seen_progress).push_back(now.trials);
        if (now.last) {
          EXPECT_EQ(count(now.job), now.trials);
        }
      });
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
  EXPECT_EQ(best->config, p.best->point);
  EXPECT_EQ(best->median_ms, p.best->median_ms);
  EXPECT_NEAR(p.best_gflops, 1e6 / (p.best->median_ms * 1e-3) * 1e-9, 1e-9);
  // Failures are records too, with their class.
  records::Query timeouts;
  timeouts.error = "TIMEOUT";
  EXPECT_EQ(store_->count(timeouts), p.errors["TIMEOUT"]);
  EXPECT_NE(store_->job(p.job)->settings.find(R"("search":"xgb-rank")"), std::string::npos);
}

TEST_F(TuneTest, AnInterruptedJobResumesWithNoTrialLostOrRepeated) {
  Space space = gemm_like_space();
  TuneSettings settings;
  settings.trials = 64;
  SyntheticMeasurer first;
  first.fail_after = 37;  // mid-batch: 32 in two batches, then 5 of the third
  int64_t job = 0;
  try {
    tune(space, first, *store_, workload_, "x86", settings, 0,
         [&](const TuneProgress& p) { job = p.job; });
    FAIL() << "the measurer's failure did not come through";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "kilnd was killed");
  }
  ASSERT_NE(job, 0);
  EXPECT_EQ(count(job), 37);  // what was reported before the failure is kept
  EXPECT_EQ(store_->job(job)->state, records::JobState::Running);

  // kilnd again, with a new store on the same file.
  store_.reset();
  store_ = records::open_sqlite_store(dir_ + "/records.db");
  SyntheticMeasurer second;
  TuneProgress p = tune(space, second, *store_, workload_, "x86", settings, job);
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
  Space space = gemm_like_space();
  SyntheticMeasurer m;
  TuneSettings settings;
  settings.trials = 16;
  TuneProgress p = tune(space, m, *store_, workload_, "x86", settings);
  EXPECT_THROW(tune(space, m, *store_, workload_, "arm", settings, p.job), records::RecordsError);
  EXPECT_THROW(tune(space, m, *store_, workload_, "x86", settings, p.job + 9),
               records::RecordsError);
}

TEST_F(TuneTest, StopsEarlyWhenNothingImproves) {
  Space space = gemm_like_space();
  class Flat : public Measurer {
   public:
    void measure(const std::vector<Config>& batch,
                 const std::function<void(const Trial&)>& report) override {
      for (const Config& c : batch) {
        Trial t;
        t.point = c;
        t.median_ms = 5;
        report(t);
      }
    }
  } flat;
  TuneSettings settings;
  settings.trials = 512;
  settings.early_stop = 40;
  TuneProgress p = tune(space, flat, *store_, workload_, "x86", settings);
  EXPECT_EQ(p.stopped, "early stop");
  EXPECT_GE(p.trials, 41);
  EXPECT_LE(p.trials, 41 + settings.batch);
}

TEST_F(TuneTest, StopsWhenTheSpaceRunsOutOrWhenCancelled) {
  Space tiny({KnobDef::values_of("X", range(5)), KnobDef::values_of("Y", range(2)),
              KnobDef::values_of("Z", range(1))});
  SyntheticMeasurer m;
  TuneSettings settings;
  settings.trials = 64;
  TuneProgress p = tune(tiny, m, *store_, workload_, "x86", settings);
  EXPECT_EQ(p.stopped, "space exhausted");
  EXPECT_EQ(p.trials, 10);

  Space space = gemm_like_space();
  int batches = 0;
  TuneProgress c = tune(
      space, m, *store_, workload_, "x86", settings, 0, [&](const TuneProgress&) { ++batches; },
      [&] { return batches >= 1; });
  EXPECT_EQ(c.stopped, "cancelled");
  EXPECT_EQ(c.trials, 16);
  EXPECT_EQ(store_->job(c.job)->state, records::JobState::Cancelled);
}

}  // namespace
}  // namespace kiln::tuner
