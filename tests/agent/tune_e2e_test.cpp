// Tuning end to end: kilnd with its records database and real kiln-agent
// processes on loopback. A 64-trial tune of the GEMM records every trial; the
// best record runs again when re-measured; kilnd killed with SIGKILL in the
// middle of a job and restarted resumes it with no measured record lost or
// repeated; cancelling; the errors of every tuning method; a damaged
// database refused at start and left as it was; the CLI's tune, records and
// compile --best.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "kiln/cuda.h"
#include "kiln/records.h"
#include "kiln/v1/service.grpc.pb.h"
#include "kilnd_process.h"

namespace kiln::testing {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kGemmFile = std::string(KILN_SOURCE_DIR) + "/tests/bench/kernels/gemm.kiln";

class TuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "kiln_tune_" + std::to_string(getpid()) + "/";
    std::filesystem::create_directories(dir_ + "data");
    token_ = dir_ + "token";
    std::ofstream(token_) << "tune-test-token\n";
    start_kilnd("127.0.0.1:0");
  }
  void TearDown() override {
    agents_.clear();
    stub_.reset();
    kilnd_.reset();
    std::filesystem::remove_all(dir_);
  }

  void start_kilnd(const std::string& agent_listen) {
    stub_.reset();
    kilnd_.reset();
    kilnd_ = std::make_unique<KilndProcess>(
        KILND_BINARY,
        std::vector<std::string>{"--data-dir", dir_ + "data", "--agent-token-file", token_,
                                 "--agent-listen", agent_listen, "--agent-heartbeat-ms", "300",
                                 "--agent-wait-ms", "3000"});
    std::string line = kilnd_->read_line();
    ASSERT_TRUE(line.starts_with("kilnd: agents on 127.0.0.1:")) << line;
    agents_address_ = "127.0.0.1:" + line.substr(line.rfind(':') + 1);
    stub_ = v1::Compiler::NewStub(
        grpc::CreateChannel(kilnd_->address(), grpc::InsecureChannelCredentials()));
  }
  void start_agents(int n) {
    for (int i = 0; i < n; ++i)
      agents_.push_back(std::make_unique<AgentProcess>(KILN_AGENT_BINARY, agents_address_, "x86",
                                                       token_, "agent-" + std::to_string(i)));
    wait_for_agents(n);
  }
  void wait_for_agents(int n) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      grpc::ClientContext ctx;
      v1::ListAgentsResponse out;
      if (stub_->ListAgents(&ctx, v1::ListAgentsRequest(), &out).ok() && out.agents_size() == n)
        return;
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "agents did not join";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // The GEMM at a small size, measured quickly.
  v1::TuneRequest gemm(int trials, int batch = 8) {
    v1::TuneRequest r;
    r.mutable_op()->mutable_source()->set_text(read_text(kGemmFile));
    r.mutable_op()->mutable_source()->set_filename("gemm.kiln");
    for (const char* p : {"M", "N", "K"}) (*r.mutable_options()->mutable_set())[p] = 128;
    r.set_key("x86");
    r.set_trials(trials);
    r.set_batch(batch);
    r.mutable_settings()->set_repeat(3);
    r.mutable_settings()->set_min_repeat_ms(2);
    return r;
  }

  // A tune of `text` (a matmul, at 256) on the GPU of key x86's agents.
  static v1::TuneRequest gpu_matmul(const std::string& text, int trials) {
    v1::TuneRequest r;
    r.mutable_op()->mutable_source()->set_text(text);
    r.mutable_op()->mutable_source()->set_filename("matmul.kiln");
    for (const char* p : {"M", "N", "K"}) (*r.mutable_options()->mutable_set())[p] = 256;
    r.set_key("x86");
    r.set_gpu(0);
    r.set_trials(trials);
    r.set_batch(4);
    r.mutable_settings()->set_repeat(2);
    r.mutable_settings()->set_min_repeat_ms(1);
    return r;
  }

  // Every progress message of a call, and how it ended. `stop_after`: drop
  // the call once a message reports that many trials.
  struct Stream {
    std::vector<v1::TuneProgress> messages;
    grpc::Status status;
  };
  template <typename Request>
  Stream follow(const Request& r, int stop_after = 0) {
    Stream s;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    std::unique_ptr<grpc::ClientReader<v1::TuneProgress>> reader;
    if constexpr (std::is_same_v<Request, v1::TuneRequest>) {
      reader = stub_->Tune(&ctx, r);
    } else {
      reader = stub_->ResumeTune(&ctx, r);
    }
    v1::TuneProgress p;
    while (reader->Read(&p)) {
      s.messages.push_back(p);
      if (stop_after > 0 && p.trials() >= stop_after) {
        ctx.TryCancel();
        break;
      }
    }
    s.status = reader->Finish();
    return s;
  }

  // Follows GPU job `r` into `s`. Where this machine has no GPU, the job must be refused,
  // naming what the agents have: returns why there is none (the test skips then), else "".
  std::string follow_on_gpu(const v1::TuneRequest& r, Stream& s) {
    std::string why;
    bool gpu = cuda::nvrtc_available(&why) && cuda::gpu_available(&why);
    s = follow(r);
    if (gpu) return "";
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.status.error_message().find("the agents of key x86 have 0 GPUs"), std::string::npos)
        << s.status.error_message();
    return why.empty() ? "none found" : why;
  }

  v1::QueryRecordsResponse records(int64_t job) {
    v1::QueryRecordsRequest q;
    q.mutable_filter()->set_job(job);
    q.set_limit(10'000);
    grpc::ClientContext ctx;
    v1::QueryRecordsResponse out;
    EXPECT_TRUE(stub_->QueryRecords(&ctx, q, &out).ok());
    return out;
  }
  v1::TuningJob job(int64_t id) {
    grpc::ClientContext ctx;
    v1::ListJobsResponse out;
    EXPECT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &out).ok());
    for (const v1::TuningJob& j : out.jobs())
      if (j.id() == id) return j;
    ADD_FAILURE() << "no job " << id;
    return {};
  }

  std::string dir_, token_, agents_address_;
  std::unique_ptr<KilndProcess> kilnd_;
  std::unique_ptr<v1::Compiler::Stub> stub_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
};

// On a machine with a GPU: a short tune of the GPU matmul on the agent's GPU, every trial a
// record under the key "x86/gpu0". With no GPU: the job is refused, naming what the agents
// have.
TEST_F(TuneTest, AShortTuneOfTheGpuMatmulOnTheAgentsGpu) {
  start_agents(1);
  v1::TuneRequest r =
      gpu_matmul(read_text(std::string(KILN_SOURCE_DIR) + "/examples/gpu/matmul.kiln"), 12);
  r.set_search("random");
  Stream s;
  if (std::string none = follow_on_gpu(r, s); !none.empty())
    GTEST_SKIP() << "no GPU here (" << none << "): GPU tuning checked up to its refusal";
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_FALSE(s.messages.empty());
  const v1::TuneProgress& last = s.messages.back();
  EXPECT_TRUE(last.done());
  EXPECT_EQ(last.key(), "x86/gpu0");
  EXPECT_EQ(last.trials(), 12);
  ASSERT_TRUE(last.has_best());
  EXPECT_GT(last.best().median_ms(), 0);
  v1::QueryRecordsResponse recs = records(last.job());
  EXPECT_EQ(recs.records_size(), 12);
  int measured = 0;
  for (const v1::TuningRecord& rec : recs.records()) {
    EXPECT_EQ(rec.key(), "x86/gpu0");
    if (rec.error().empty()) ++measured;
  }
  EXPECT_GT(measured, 0);
}

// The GPU matmul's algorithm alone (its schedule taken out), tuned on the agent's GPU: one job
// over kiln's GPU sketches, the fastest kept, and BestConfig's sketch a GPU one. With no GPU:
// the job is refused as a scheduled func's is.
TEST_F(TuneTest, AFuncWithoutAScheduleIsTunedOverItsGpuSketchesOnTheAgentsGpu) {
  start_agents(1);
  std::string text = read_text(std::string(KILN_SOURCE_DIR) + "/examples/gpu/matmul.kiln");
  text = text.substr(0, text.find("  schedule {")) + "}\n";
  v1::TuneRequest r = gpu_matmul(text, 16);
  Stream s;
  if (std::string none = follow_on_gpu(r, s); !none.empty())
    GTEST_SKIP() << "no GPU here (" << none << "): GPU sketches' tuning checked up to its refusal";
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_FALSE(s.messages.empty());
  const v1::TuneProgress& last = s.messages.back();
  EXPECT_TRUE(last.done());
  EXPECT_TRUE(last.alternatives());
  EXPECT_EQ(last.key(), "x86/gpu0");
  ASSERT_TRUE(last.has_best());
  EXPECT_GT(last.best().median_ms(), 0);
  v1::BestConfigRequest b;
  *b.mutable_op() = r.op();
  *b.mutable_options() = r.options();
  b.set_key("x86/gpu0");
  v1::BestConfigResponse best;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->BestConfig(&ctx, b, &best).ok());
  EXPECT_NE(best.sketch().find("gpu_thread_x"), std::string::npos) << best.sketch();
  EXPECT_EQ(best.record().config_text(), last.best().config_text());
}

TEST_F(TuneTest, SixtyFourTrialsOfTheGemmAreEachARecordAndTheBestReproduces) {
  start_agents(2);
  Stream s = follow(gemm(64));
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_FALSE(s.messages.empty());
  const v1::TuneProgress& end = s.messages.back();
  EXPECT_TRUE(end.done());
  EXPECT_EQ(end.stopped(), "trials");
  EXPECT_EQ(end.trials(), 64);
  // One message a trial, each with the trial it reports, then the end.
  int with_trial = 0;
  for (const v1::TuneProgress& p : s.messages) with_trial += p.has_last() ? 1 : 0;
  EXPECT_EQ(with_trial, 64);
  // Points breaking MB % MR == 0 or NB % NR == 0 were never measured.
  EXPECT_GT(end.rejected().size(), 0u);

  v1::QueryRecordsResponse all = records(end.job());
  ASSERT_EQ(all.total(), 64);
  std::set<std::string> configs;
  std::set<std::string> agents;
  for (const v1::TuningRecord& r : all.records()) {
    configs.insert(r.config_text());
    agents.insert(r.agent());
    EXPECT_EQ(r.config().at("MB") % r.config().at("MR"), 0) << r.config_text();
    EXPECT_EQ(r.config().at("NB") % r.config().at("NR"), 0) << r.config_text();
    if (r.error().empty()) {
      EXPECT_GT(r.median_ms(), 0);
      // A candidate far slower than the best so far is timed for one round; the others for
      // 3 rounds, and more (at most 30) while they last less than the default 30 ms in all.
      if (r.stopped_early()) {
        EXPECT_EQ(r.round_ms_size(), 1) << r.config_text();
      } else {
        EXPECT_GE(r.round_ms_size(), 3) << r.config_text();
        EXPECT_LE(r.round_ms_size(), 30) << r.config_text();
      }
      EXPECT_EQ(r.flops(), 2 * 128 * 128 * 128);
    }
  }
  EXPECT_EQ(configs.size(), 64u) << "a point was measured twice";
  EXPECT_EQ(agents.size(), 2u) << "the batch was not spread over both agents";

  // The stream's best is the database's best, and it re-measures in its class.
  v1::BestConfigRequest b;
  b.set_workload(end.workload());
  b.set_key("x86");
  v1::BestConfigResponse best;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->BestConfig(&ctx, b, &best).ok());
  }
  EXPECT_EQ(best.record().config_text(), end.best().config_text());
  // The three fastest were re-timed on one agent, three passes of three rounds each, and the
  // best is the fastest by re-timed median.
  EXPECT_EQ(end.retimed(), 3);
  all = records(end.job());
  std::vector<double> speeds, medians;  // re-timed; of every record that ran
  int retimed = 0;
  for (const v1::TuningRecord& r : all.records()) {
    if (!r.error().empty()) continue;
    medians.push_back(r.median_ms());
    EXPECT_GE(r.attempts(), 1);
    EXPECT_LE(r.min_ms(), r.median_ms());
    EXPECT_GE(r.max_ms(), r.median_ms());
    if (!r.has_retimed_ms()) continue;
    ++retimed;
    speeds.push_back(r.retimed_ms());
    EXPECT_GE(r.retime_round_ms_size(), 9) << r.config_text();  // 3 passes of 3 rounds or more
  }
  EXPECT_EQ(retimed, 3);
  std::sort(speeds.begin(), speeds.end());
  std::sort(medians.begin(), medians.end());
  ASSERT_TRUE(best.record().has_retimed_ms());
  EXPECT_EQ(best.record().retimed_ms(), speeds.front());

  v1::MeasureRequest m;
  *m.mutable_op() = gemm(1).op();
  *m.mutable_options() = gemm(1).options();
  for (const auto& [k, v] : best.record().config()) (*m.mutable_options()->mutable_set())[k] = v;
  m.set_key("x86");
  *m.mutable_settings() = gemm(1).settings();
  v1::MeasureResponse again;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Measure(&ctx, m, &again).ok());
  }
  // Its class: it runs again (tests assert no time: the machine is shared).
  EXPECT_EQ(again.result().error(), v1::MeasureResult::OK) << again.result().message();
  EXPECT_EQ(again.result().round_ms_size(), 3);
  std::printf(
      "best %s: recorded %.4f ms, re-timed %.4f ms, measured again %.4f ms (median of "
      "all: %.4f ms)\n",
      best.record().config_text().c_str(), best.record().median_ms(), best.record().retimed_ms(),
      again.median_ms(), medians[medians.size() / 2]);

  v1::TuningJob j = job(end.job());
  EXPECT_EQ(j.state(), "done");
  EXPECT_EQ(j.records(), 64);
  EXPECT_EQ(j.name(), "gemm");
}

TEST_F(TuneTest, KilledMidJobTheJobResumesWithNoRecordLostOrRepeated) {
  // Agents on a fixed port, so that they find the restarted kilnd.
  std::string port = agents_address_.substr(agents_address_.rfind(':') + 1);
  start_agents(2);
  v1::TuneRequest r = gemm(40, 4);
  r.set_detach(true);
  Stream first = follow(r, 12);
  ASSERT_FALSE(first.messages.empty());
  int64_t id = first.messages.front().job();
  // The job goes on without its client (detach) until kilnd is killed.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kilnd_->kill_now();

  // What the database holds, read from the file with kilnd gone.
  std::vector<records::Record> before;
  {
    auto store = records::open_sqlite_store(dir_ + "data/records.db");
    records::Query q;
    q.job = id;
    q.limit = -1;
    before = store->query(q);
    ASSERT_TRUE(store->job(id).has_value());
    EXPECT_EQ(store->job(id)->state, records::JobState::Running);
  }
  ASSERT_GE(before.size(), 12u);
  ASSERT_LT(before.size(), 40u) << "the job finished before kilnd was killed";

  start_kilnd("127.0.0.1:" + port);
  wait_for_agents(2);
  EXPECT_EQ(job(id).state(), "running");
  EXPECT_FALSE(job(id).live()) << "an interrupted job is not running in the new kilnd";
  v1::ResumeTuneRequest resume;
  resume.set_job(id);
  // Two clients resume it at once: one runs it, the other follows it or is
  // told it runs; it never runs twice.
  Stream rest, other;
  std::thread second([&] { other = follow(resume); });
  rest = follow(resume);
  second.join();
  if (!rest.status.ok()) std::swap(rest, other);
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  EXPECT_TRUE(other.status.ok() ||
              other.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
      << other.status.error_message();
  ASSERT_FALSE(rest.messages.empty());
  EXPECT_GE(rest.messages.front().trials(), static_cast<int>(before.size()));
  EXPECT_TRUE(rest.messages.back().done());
  EXPECT_EQ(rest.messages.back().trials(), 40);

  v1::QueryRecordsResponse after = records(id);
  ASSERT_EQ(after.total(), 40);
  std::set<std::string> configs;
  for (const v1::TuningRecord& rec : after.records()) configs.insert(rec.config_text());
  EXPECT_EQ(configs.size(), 40u) << "a point was measured twice";
  // Every record committed before the kill is there, unchanged.
  std::map<int64_t, const v1::TuningRecord*> by_id;
  for (const v1::TuningRecord& rec : after.records()) by_id[rec.id()] = &rec;
  for (const records::Record& old : before) {
    ASSERT_TRUE(by_id.count(old.id)) << "record " << old.id << " was lost";
    EXPECT_EQ(by_id[old.id]->config_text(), records::config_text(old.config));
    EXPECT_EQ(by_id[old.id]->median_ms(), old.median_ms);
    EXPECT_EQ(by_id[old.id]->unix_ms(), old.unix_ms);
  }
  EXPECT_EQ(job(id).state(), "done");

  // Done: resuming again needs a larger budget.
  Stream again = follow(resume);
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(again.status.error_message().find("is done (40 records)"), std::string::npos)
      << again.status.error_message();
  resume.set_trials(44);
  Stream more = follow(resume);
  ASSERT_TRUE(more.status.ok()) << more.status.error_message();
  EXPECT_EQ(records(id).total(), 44);
}

TEST_F(TuneTest, StoppedWithSigtermMidJobKilndEndsPromptlyAndTheJobResumes) {
  std::string port = agents_address_.substr(agents_address_.rfind(':') + 1);
  start_agents(1);
  v1::TuneRequest r = gemm(40, 4);
  Stream first;
  std::thread client([&] { first = follow(r); });
  // Wait for some records, then SIGTERM.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (records(1).total() < 8) {
    ASSERT_LT(std::chrono::steady_clock::now(), until);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto asked = std::chrono::steady_clock::now();
  kilnd_->terminate();
  int status = kilnd_->wait();
  double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  client.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::printf("kilnd stopped %.2f s after SIGTERM\n", stop_s);
  // The client was told the job is kept, and how to go on.
  EXPECT_EQ(first.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << first.status.error_message();
  EXPECT_NE(first.status.error_message().find("kiln tune --resume 1"), std::string::npos)
      << first.status.error_message();
  int64_t kept = 0;
  {
    auto store = records::open_sqlite_store(dir_ + "data/records.db");
    EXPECT_EQ(store->job(1)->state, records::JobState::Running);
    records::Query q;
    q.job = 1;
    kept = store->count(q);
  }
  ASSERT_GE(kept, 8);

  start_kilnd("127.0.0.1:" + port);
  wait_for_agents(1);
  v1::ResumeTuneRequest resume;
  resume.set_job(1);
  Stream rest = follow(resume);
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  EXPECT_EQ(rest.messages.front().trials(), kept);
  EXPECT_EQ(records(1).total(), 40);
}

TEST_F(TuneTest, IterFeaturesFromEachPointsLoopsDriveTheSearch) {
  start_agents(1);
  v1::TuneRequest r = gemm(40);
  r.set_features("iter");
  Stream s = follow(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const v1::TuneProgress& end = s.messages.back();
  EXPECT_TRUE(end.done());
  EXPECT_EQ(end.trials(), 40);
  v1::QueryRecordsResponse all = records(end.job());
  std::set<std::string> configs;
  for (const v1::TuningRecord& rec : all.records()) configs.insert(rec.config_text());
  EXPECT_EQ(configs.size(), 40u);
  EXPECT_NE(job(end.job()).settings_json().find("\"features\":\"iter\""), std::string::npos)
      << job(end.job()).settings_json();
}

// Only S = 0 keeps a before b in the fused loop: the other shifts are illegal
// schedules, refused by the legality check before code generation.
const char* kShifted = R"(
func shifted {
  param N = 256;
  input x : f32[N];
  temp t : f32[N];
  output y : f32[N];
  compute a(i) in 0 <= i < N: t[i] = x[i] * 2.0;
  compute b(i) in 0 <= i < N: y[i] = t[i] + 1.0;
  schedule {
    knob S = 0 in [-2, -1, 0, 1, 2];
    a.shift(i, S);
    b.after(a, i);
    b.tag(i, vectorize);
  }
}
)";

TEST_F(TuneTest, PointsWithIllegalSchedulesAreRejectedAndCountedNotMeasured) {
  start_agents(1);
  v1::TuneRequest r = gemm(10);
  r.mutable_op()->mutable_source()->set_text(kShifted);
  r.mutable_options()->clear_set();
  Stream s = follow(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const v1::TuneProgress& end = s.messages.back();
  EXPECT_TRUE(end.done());
  EXPECT_EQ(end.stopped(), "space exhausted");
  EXPECT_EQ(end.trials(), 1);
  ASSERT_EQ(end.rejected().count("illegal schedule"), 1u);
  EXPECT_EQ(end.rejected().at("illegal schedule"), 4);
  v1::QueryRecordsResponse all = records(end.job());
  ASSERT_EQ(all.total(), 1);
  EXPECT_EQ(all.records(0).config_text(), "S=0");
  EXPECT_EQ(all.records(0).error(), "");
}

TEST_F(TuneTest, AClientThatGoesAwayCancelsItsJobAndCancelTuneStopsADetachedOne) {
  start_agents(1);
  Stream s = follow(gemm(64, 2), 3);
  ASSERT_FALSE(s.messages.empty());
  int64_t id = s.messages.front().job();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (job(id).state() == "running") {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the job was not cancelled";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(job(id).state(), "cancelled");
  EXPECT_LT(records(id).total(), 64);

  v1::TuneRequest r = gemm(64, 2);
  r.set_detach(true);
  Stream d = follow(r, 2);
  int64_t detached = d.messages.front().job();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(job(detached).state(), "running") << "a detached job stops with its client";
  v1::ResumeTuneRequest more;
  more.set_job(detached);
  more.set_trials(100);
  Stream refused = follow(more);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << refused.status.error_message();
  v1::CancelTuneRequest c;
  c.set_job(detached);
  v1::CancelTuneResponse out;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->CancelTune(&ctx, c, &out).ok());
  EXPECT_EQ(out.job().state(), "cancelled");
  EXPECT_FALSE(out.job().live());
  int64_t kept = records(detached).total();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(records(detached).total(), kept) << "measured after the cancel";
}

// CancelTune withdraws the job's measurements in flight: its agent kills them, and the job is
// cancelled in about a second, not when their time limit (60 s here) runs out.
TEST_F(TuneTest, CancelTuneWithdrawsTheMeasurementsInFlight) {
  start_agents(1);
  v1::TuneRequest r;
  r.mutable_op()->mutable_source()->set_text(
      "func endless { param n; constraint n > 0; input x : f32[1]; output y : f32[1];\n"
      "  compute c(i, j, k) in 0 <= i < n, 0 <= j < n, 0 <= k < n: y[0] += x[0];\n"
      "  schedule { knob S = 1 in [1, 2, 4]; c.split(i, S, io, ii); } }");
  (*r.mutable_runtime_params())["n"] = 1 << 20;
  r.set_key("x86");
  r.set_trials(3);
  r.set_batch(1);
  r.set_detach(true);
  int64_t id = 0;
  {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::TuneProgress>> reader = stub_->Tune(&ctx, r);
    v1::TuneProgress first;
    ASSERT_TRUE(reader->Read(&first));
    id = first.job();
    ctx.TryCancel();  // detached: the job goes on
    reader->Finish();
  }
  auto running = [&] {
    grpc::ClientContext ctx;
    v1::ListAgentsResponse out;
    EXPECT_TRUE(stub_->ListAgents(&ctx, v1::ListAgentsRequest(), &out).ok());
    return out.agents_size() == 1 ? out.agents(0).running() : -1;
  };
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (running() != 1) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the job's first trial never ran";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto start = std::chrono::steady_clock::now();
  v1::CancelTuneRequest c;
  c.set_job(id);
  v1::CancelTuneResponse out;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->CancelTune(&ctx, c, &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(out.job().state(), "cancelled");
  EXPECT_EQ(records(id).total(), 0);  // what was in flight is not a record
  // The agent's CANCELLED answer frees the slot moments after the job ends.
  auto freed = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (running() != 0 && std::chrono::steady_clock::now() < freed)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(running(), 0);
}

// A job tuned without re-timing, re-timed afterwards through BestConfig: its three fastest
// get their interleaved rounds, and the answer is the fastest re-timed.
TEST_F(TuneTest, BestConfigRetimesTheFastestOnRequest) {
  start_agents(1);
  v1::TuneRequest r = gemm(8);
  r.set_retime(0);
  Stream s = follow(r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  const v1::TuneProgress& end = s.messages.back();
  EXPECT_EQ(end.retimed(), 0);
  v1::BestConfigRequest b;
  b.set_workload(end.workload());
  b.set_key("x86");
  b.set_retime(3);
  v1::BestConfigResponse best;
  {
    grpc::ClientContext ctx;
    grpc::Status status = stub_->BestConfig(&ctx, b, &best);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  ASSERT_TRUE(best.record().has_retimed_ms());
  int retimed = 0;
  double fastest = 0;
  const v1::QueryRecordsResponse all = records(end.job());
  for (const v1::TuningRecord& rec : all.records()) {
    if (!rec.has_retimed_ms()) continue;
    EXPECT_GE(rec.retime_round_ms_size(), 9) << rec.config_text();
    fastest = retimed++ == 0 ? rec.retimed_ms() : std::min(fastest, rec.retimed_ms());
  }
  EXPECT_EQ(retimed, 3);
  EXPECT_EQ(best.record().retimed_ms(), fastest);

  auto expect = [&](v1::BestConfigRequest req, grpc::StatusCode code, const std::string& words) {
    grpc::ClientContext ctx;
    v1::BestConfigResponse out;
    grpc::Status st = stub_->BestConfig(&ctx, req, &out);
    EXPECT_EQ(st.error_code(), code) << st.error_message();
    EXPECT_NE(st.error_message().find(words), std::string::npos) << st.error_message();
  };
  b.set_retime(101);
  expect(b, grpc::StatusCode::INVALID_ARGUMENT, "retime: 101 is more than the 100");
  b.set_retime(2);
  b.set_key("arm-board");
  expect(b, grpc::StatusCode::FAILED_PRECONDITION, "retime: no tuning job of workload");
}

TEST_F(TuneTest, EveryTuningMethodRefusesWhatItCannotDoSayingWhy) {
  start_agents(1);
  auto expect = [](const grpc::Status& s, grpc::StatusCode code, const std::string& words) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(words), std::string::npos) << s.error_message();
  };
  v1::TuneRequest r = gemm(8);
  r.clear_key();
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "key: name the device class");
  r = gemm(8);
  r.set_key("arm-board");
  expect(follow(r).status, grpc::StatusCode::UNAVAILABLE, "no agent of key arm-board");
  r = gemm(8);
  r.set_search("genetic");
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "'genetic' is not a strategy");
  r = gemm(8);
  r.mutable_options()->mutable_target()->set_triple("aarch64-linux-gnu");
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "leave it unset");
  r = gemm(8);
  r.mutable_op()->mutable_source()->set_text(
      "func scale { param n = 8; input x : f32[n]; output y : f32[n];\n"
      "  compute c(i) in 0 <= i < n: y[i] = x[i] * 3.0; schedule { c.tag(i, vectorize); } }");
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "scale has no knobs to tune");
  r = gemm(8);
  (*r.mutable_options()->mutable_set())["MR"] = 5;
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "MR");
  r = gemm(8);
  r.mutable_op()->mutable_source()->set_text("func broken {");
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "gemm.kiln:1:");
  r = gemm(8);
  r.set_retime(101);
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT,
         "retime: 101 is more than the 100 a job may ask for");
  r = gemm(8);
  r.set_remeasure(-1);
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "remeasure: -1 is negative");
  r = gemm(8);
  r.set_max_cv(-0.5);
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT,
         "max_cv: -0.5 is not a limit (a number, 0 or more)");
  r = gemm(8);
  r.set_max_host_load(std::numeric_limits<double>::quiet_NaN());
  expect(follow(r).status, grpc::StatusCode::INVALID_ARGUMENT, "max_host_load: nan is not a limit");

  v1::ResumeTuneRequest resume;
  resume.set_job(999);
  expect(follow(resume).status, grpc::StatusCode::NOT_FOUND, "no tuning job 999");
  v1::CancelTuneRequest cancel;
  cancel.set_job(999);
  {
    grpc::ClientContext ctx;
    v1::CancelTuneResponse out;
    expect(stub_->CancelTune(&ctx, cancel, &out), grpc::StatusCode::NOT_FOUND, "no tuning job");
  }
  {
    v1::BestConfigRequest b;
    *b.mutable_op() = gemm(1).op();
    *b.mutable_options() = gemm(1).options();
    b.set_key("x86");
    grpc::ClientContext ctx;
    v1::BestConfigResponse out;
    expect(stub_->BestConfig(&ctx, b, &out), grpc::StatusCode::NOT_FOUND, "tune it first");
  }
  {
    v1::QueryRecordsRequest q;
    q.set_limit(100'000);
    grpc::ClientContext ctx;
    v1::QueryRecordsResponse out;
    expect(stub_->QueryRecords(&ctx, q, &out), grpc::StatusCode::INVALID_ARGUMENT, "limit");
  }
}

// `kiln` run with arguments: its exit status and what it printed (both streams).
struct CliRun {
  int status;
  std::string out;
};
CliRun run_binary(const std::string& binary, const std::vector<std::string>& args) {
  std::string command = binary;
  for (const std::string& a : args) command += " '" + a + "'";
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  CliRun r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
CliRun kiln_cli(const std::vector<std::string>& args) { return run_binary(KILN_BINARY, args); }

TEST_F(TuneTest, ADamagedRecordsDatabaseStopsKilndAtStartAndIsLeftAsItWas) {
  kilnd_.reset();
  std::string db = dir_ + "data/records.db";
  std::filesystem::remove(db);
  std::string garbage(8192, 'x');
  std::ofstream(db, std::ios::binary) << garbage;
  CliRun k = run_binary(KILND_BINARY, {"--listen", "127.0.0.1:0", "--data-dir", dir_ + "data"});
  EXPECT_EQ(k.status, 1) << k.out;
  EXPECT_NE(k.out.find("kilnd: records database " + db + ": not a SQLite database"),
            std::string::npos)
      << k.out;
  EXPECT_EQ(read_text(db), garbage);

  // Cut short: the first 3000 bytes of a real one.
  std::filesystem::remove(db);
  records::open_sqlite_store(db)->put_target({"x86", "x86_64-linux-gnu", "", ""});
  std::string whole = read_text(db);
  std::ofstream(db, std::ios::binary | std::ios::trunc) << whole.substr(0, 3000);
  k = run_binary(KILND_BINARY, {"--listen", "127.0.0.1:0", "--data-dir", dir_ + "data"});
  EXPECT_EQ(k.status, 1) << k.out;
  EXPECT_NE(k.out.find("kilnd: records database " + db), std::string::npos) << k.out;
  EXPECT_EQ(read_text(db), whole.substr(0, 3000));
}

TEST_F(TuneTest, TheCliTunesQueriesExportsPlotsAndCompilesTheBest) {
  start_agents(1);
  std::string server = kilnd_->address();
  std::vector<std::string> gemm_args = {"--set", "M=128", "--set", "N=128", "--set", "K=128"};
  std::vector<std::string> tune = {"tune", kGemmFile,         "--key", "x86",      "--trials",
                                   "12",   "--min-repeat-ms", "2",     "--server", server};
  tune.insert(tune.end(), gemm_args.begin(), gemm_args.end());
  CliRun t = kiln_cli(tune);
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("tuning job 1: gemm on x86"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("trial 12/12: "), std::string::npos) << t.out;  // not a terminal: lines
  EXPECT_NE(t.out.find("tuning job 1 done: 12 trials"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("RANK"), std::string::npos) << t.out;

  CliRun jobs = kiln_cli({"records", "jobs", "--server", server});
  ASSERT_EQ(jobs.status, 0) << jobs.out;
  EXPECT_NE(jobs.out.find("gemm"), std::string::npos) << jobs.out;
  EXPECT_NE(jobs.out.find("done"), std::string::npos) << jobs.out;

  CliRun q = kiln_cli({"records", "query", "--name", "gemm", "--sort", "fastest", "--limit", "3",
                       "--server", server});
  ASSERT_EQ(q.status, 0) << q.out;
  EXPECT_NE(q.out.find("3 of 12 records (more: --offset 3)"), std::string::npos) << q.out;

  std::string lines = dir_ + "records.jsonl";
  CliRun e = kiln_cli({"records", "export", "--job", "1", "--out", lines, "--server", server});
  ASSERT_EQ(e.status, 0) << e.out;
  std::ifstream in(lines);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    EXPECT_TRUE(line.starts_with("{\"id\":")) << line;
    EXPECT_NE(line.find("\"config\":{\"KB\":"), std::string::npos) << line;
  }
  EXPECT_EQ(n, 12);

  std::vector<std::string> best = {"records", "best",     kGemmFile, "--key",
                                   "x86",     "--server", server};
  best.insert(best.end(), gemm_args.begin(), gemm_args.end());
  CliRun b = kiln_cli(best);
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_NE(b.out.find("best gemm on x86"), std::string::npos) << b.out;
  // Another shape has no record.
  best.back() = "K=256";
  CliRun none = kiln_cli(best);
  EXPECT_EQ(none.status, 1) << none.out;
  EXPECT_NE(none.out.find("tune it first"), std::string::npos) << none.out;

  std::string so = dir_ + "best.so";
  std::vector<std::string> compile = {"compile", kGemmFile, "--best",   "--key", "x86",
                                      "-o",      so,        "--server", server};
  compile.insert(compile.end(), gemm_args.begin(), gemm_args.end());
  CliRun c = kiln_cli(compile);
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_NE(c.out.find("best gemm on x86: KB="), std::string::npos) << c.out;
  EXPECT_TRUE(std::filesystem::exists(so));
  CliRun offline = kiln_cli({"compile", kGemmFile, "--best", "-o", so});
  EXPECT_EQ(offline.status, 2) << offline.out;
  EXPECT_NE(offline.out.find("--best reads kilnd's tuning records"), std::string::npos)
      << offline.out;

  std::string png = dir_ + "curve.png";
  CliRun p = kiln_cli({"records", "plot", "--out", png, "--server", server});
  ASSERT_EQ(p.status, 0) << p.out;
  std::string picture = read_text(png);
  ASSERT_GT(picture.size(), 1000u);
  EXPECT_EQ(picture.substr(1, 3), "PNG");

  CliRun usage = kiln_cli({"tune", kGemmFile, "--server", server});
  EXPECT_EQ(usage.status, 2);
  EXPECT_NE(usage.out.find("missing --key"), std::string::npos) << usage.out;
}

}  // namespace
}  // namespace kiln::testing
