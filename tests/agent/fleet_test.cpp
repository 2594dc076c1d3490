// kilnd with real kiln-agent processes on loopback: agents register and are
// listed, every example is measured on them and checked against the reference
// interpreter, a wrong token is refused, a job past its time or memory limit
// gets its error class and the agent serves the next, and a job whose agent
// is killed mid-job completes on the other agent.
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "example_cases.h"
#include "kiln/codegen.h"
#include "kiln/cuda.h"
#include "kiln/target.h"
#include "kiln/v1/service.grpc.pb.h"
#include "kilnd_process.h"
#include "programs.h"
#include "test_certs.h"

namespace kiln::testing {
namespace {

std::string temp_dir() {
  std::string dir = ::testing::TempDir() + "kiln_fleet_" + std::to_string(getpid()) + "/";
  std::filesystem::create_directories(dir);
  return dir;
}

// kiln-agent of this build, for this machine.
class HostAgent : public AgentProcess {
 public:
  HostAgent(const std::string& server, const std::string& key, const std::string& token_file,
            const std::string& id, std::vector<std::string> extra = {})
      : AgentProcess(KILN_AGENT_BINARY, server, key, token_file, id, std::move(extra)) {}
};

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir();
    token_ = dir_ + "token";
    std::ofstream(token_) << "fleet-test-token\n";
    start_kilnd("127.0.0.1:0");
  }
  // kilnd with agents on `agent_listen`; agents_ is where they are.
  void start_kilnd(const std::string& agent_listen) {
    stub_.reset();
    kilnd_.reset();
    kilnd_ = std::make_unique<KilndProcess>(
        KILND_BINARY,
        std::vector<std::string>{"--agent-token-file", token_, "--agent-listen", agent_listen,
                                 "--agent-heartbeat-ms", "300", "--agent-wait-ms", "2000"});
    std::string line = kilnd_->read_line();
    ASSERT_TRUE(line.starts_with("kilnd: agents on 127.0.0.1:")) << line;
    agents_ = "127.0.0.1:" + line.substr(line.rfind(':') + 1);
    stub_ = v1::Compiler::NewStub(
        grpc::CreateChannel(kilnd_->address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    stub_.reset();
    kilnd_.reset();
    std::filesystem::remove_all(dir_);
  }

  v1::ListAgentsResponse list() {
    grpc::ClientContext ctx;
    v1::ListAgentsResponse out;
    EXPECT_TRUE(stub_->ListAgents(&ctx, v1::ListAgentsRequest(), &out).ok());
    return out;
  }
  // Waits until `n` agents are listed.
  void wait_for_agents(int n) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (list().agents_size() != n) {
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "agents did not join";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  grpc::Status measure(const v1::MeasureRequest& r, v1::MeasureResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
    return stub_->Measure(&ctx, r, out);
  }
  v1::MeasureRequest request(const std::string& text, const std::string& file,
                             const std::string& key = "x86") {
    v1::MeasureRequest r;
    r.mutable_op()->mutable_source()->set_text(text);
    r.mutable_op()->mutable_source()->set_filename(file);
    r.set_key(key);
    r.mutable_settings()->set_repeat(2);
    r.mutable_settings()->set_number(1);
    return r;
  }

  std::string dir_, token_, agents_;
  std::unique_ptr<KilndProcess> kilnd_;
  std::unique_ptr<v1::Compiler::Stub> stub_;
};

const char* kScale =
    "func scale { param n; constraint n > 0; input x : f32[n]; output y : f32[n];\n"
    "  compute c(i) in 0 <= i < n: y[i] = x[i] * 3.0; }";

TEST_F(FleetTest, TwoAgentsMeasureEveryExampleCheckedAgainstTheReference) {
  HostAgent a(agents_, "x86", token_, "agent-a"), b(agents_, "x86", token_, "agent-b");
  wait_for_agents(2);
  v1::ListAgentsResponse listed = list();
  EXPECT_EQ(listed.agents(0).id(), "agent-a");
  EXPECT_EQ(listed.agents(1).id(), "agent-b");
  EXPECT_EQ(listed.agents(0).device().key(), "x86");
  EXPECT_EQ(listed.agents(0).device().triple(), "x86_64-linux-gnu");
  EXPECT_GT(listed.agents(0).device().cores(), 0);

  int measured = 0;
  for (const ExampleCase& c : example_cases()) {
    SCOPED_TRACE(c.example);
    v1::MeasureRequest r = request(read_example(c.example), c.example + ".kiln");
    (*r.mutable_options()->mutable_set()).insert(c.params.front().begin(), c.params.front().end());
    r.mutable_runtime_params()->insert(c.runtime.begin(), c.runtime.end());
    r.set_check(true);
    r.set_seed(3);
    v1::MeasureResponse out;
    grpc::Status s = measure(r, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
    EXPECT_TRUE(out.check().ok()) << out.check().message();
    EXPECT_EQ(out.result().round_ms_size(), 2);
    EXPECT_GT(out.median_ms(), 0);
    EXPECT_TRUE(out.agent_id() == "agent-a" || out.agent_id() == "agent-b");
    EXPECT_FALSE(out.result().outputs().empty());
    ++measured;
  }
  int64_t done = 0;
  v1::ListAgentsResponse after = list();
  for (const v1::AgentStatus& s : after.agents()) done += s.jobs_done();
  EXPECT_EQ(done, measured);
}

TEST_F(FleetTest, OutputsComeBackAndARepeatedArtifactIsNotSentAgain) {
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  v1::MeasureRequest r = request(kScale, "scale.kiln");
  (*r.mutable_runtime_params())["n"] = 4;
  r.set_return_outputs(true);
  r.set_check(true);
  for (int k = 0; k < 2; ++k) {
    v1::MeasureResponse out;
    ASSERT_TRUE(measure(r, &out).ok());
    ASSERT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
    ASSERT_EQ(out.result().outputs_size(), 1);
    const std::string& data = out.result().outputs(0).data();
    ASSERT_EQ(data.size(), 16u);
    EXPECT_TRUE(out.check().ok());
    EXPECT_EQ(out.cache_hit(), k == 1);
  }
}

// A GPU measurement on agents without a GPU is refused before anything is compiled, naming
// what the agents have.
TEST_F(FleetTest, AGpuMeasurementOnAgentsWithoutAGpuIsRefused) {
  // An agent that sees no GPU, on any machine: the driver shows it none.
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  struct Restore {
    ~Restore() { unsetenv("CUDA_VISIBLE_DEVICES"); }
  } restore;
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  EXPECT_EQ(list().agents(0).device().gpus_size(), 0);
  v1::MeasureRequest r = request(read_source("examples/gpu/matmul.kiln"), "matmul.kiln");
  (*r.mutable_options()->mutable_set())["M"] = 64;
  r.set_gpu(0);
  v1::MeasureResponse out;
  grpc::Status s = measure(r, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("the agents of key x86 have 0 GPUs"), std::string::npos)
      << s.error_message();
}

// On a machine with a GPU: the agent lists it, and every GPU example measured on it through
// kilnd (compiled for its compute capability, run in the job's child) matches the reference.
TEST_F(FleetTest, GpuExamplesMeasuredOnTheAgentsGpuMatchTheReference) {
  std::string why;
  if (!cuda::nvrtc_available(&why) || !cuda::gpu_available(&why))
    GTEST_SKIP() << "no GPU here (" << why << "): GPU measurement not checked";
  HostAgent a(agents_, "gpu", token_, "agent-gpu");
  wait_for_agents(1);
  v1::Device device = list().agents(0).device();
  ASSERT_GE(device.gpus_size(), 1);
  EXPECT_GE(device.gpus(0).compute_major(), 5);
  const std::map<std::string, std::map<std::string, int64_t>> sizes = {
      {"matmul", {{"M", 200}, {"N", 96}, {"K", 40}}},
      {"batch_matmul", {{"BATCH", 3}, {"M", 64}, {"N", 48}, {"K", 32}}},
      {"conv2d", {{"C", 8}, {"H", 20}, {"W", 18}, {"F", 16}}},
      {"conv2d_constant", {{"C", 8}, {"H", 20}, {"W", 18}, {"F", 16}}}};
  for (const auto& [example, set] : sizes) {
    SCOPED_TRACE(example);
    v1::MeasureRequest r =
        request(read_source("examples/gpu/" + example + ".kiln"), "gpu.kiln", "gpu");
    r.mutable_options()->mutable_set()->insert(set.begin(), set.end());
    r.set_gpu(0);
    r.set_check(true);
    r.set_seed(5);
    v1::MeasureResponse out;
    grpc::Status s = measure(r, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
    EXPECT_TRUE(out.check().ok()) << out.check().message();
    EXPECT_EQ(out.result().round_ms_size(), 2);
    EXPECT_GT(out.median_ms(), 0);
  }
  // A GPU that is not there.
  v1::MeasureRequest r = request(read_source("examples/gpu/matmul.kiln"), "gpu.kiln", "gpu");
  r.set_gpu(device.gpus_size());
  v1::MeasureResponse out;
  EXPECT_EQ(measure(r, &out).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// Two GPU jobs for one GPU sent together to an agent with two slots: the agent runs them one
// after the other (two kernels on one GPU would skew each other's timings). Its debug log says
// when each job started and was done; at no point are two of them started and not yet done.
TEST_F(FleetTest, AnAgentRunsOneJobAtATimeOnAGpu) {
  std::string why;
  if (!cuda::gpu_available(&why))
    GTEST_SKIP() << "no GPU here (" << why << "): GPU job order not checked";
  std::string log = dir_ + "agent.log";
  // the agent's log (its standard error) into `log`
  AgentProcess a(KILN_AGENT_BINARY, agents_, "gpu", token_, "agent-gpu",
                 {"--slots", "2", "--log-level", "debug"},
                 {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>>" + log});
  wait_for_agents(1);
  v1::MeasureRequest r = request(read_source("examples/gpu/matmul.kiln"), "gpu.kiln", "gpu");
  r.mutable_settings()->set_repeat(3);
  r.mutable_settings()->set_number(20);
  r.set_gpu(0);
  std::vector<v1::MeasureResponse> out(2);
  std::vector<grpc::Status> status(2);
  {
    std::vector<std::jthread> clients;
    for (int k = 0; k < 2; ++k)
      clients.emplace_back([&, k] {
        v1::MeasureRequest mine = r;
        mine.set_seed(static_cast<uint64_t>(k + 1));  // two jobs, not one answered twice
        status[k] = measure(mine, &out[k]);
      });
  }
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(status[k].ok()) << status[k].error_message();
    EXPECT_EQ(out[k].result().error(), v1::MeasureResult::OK) << out[k].result().message();
  }
  std::ifstream in(log);
  std::string line;
  int running = 0, started = 0, most = 0;
  while (std::getline(in, line)) {
    if (line.find("] job ") == std::string::npos) continue;
    if (line.find(" started (pid ") != std::string::npos) ++started, ++running;
    if (line.ends_with(" done")) --running;
    most = std::max(most, running);
  }
  EXPECT_EQ(started, 2) << log;
  EXPECT_EQ(most, 1);
  EXPECT_EQ(running, 0);
}

TEST_F(FleetTest, AJobPastItsTimeLimitTimesOutAndTheAgentServesOn) {
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  v1::MeasureRequest slow = request(
      "func slow { param n; input x : f32[n]; output y : f32[1];\n"
      "  compute c(i, j, k) in 0 <= i < n and 0 <= j < n and 0 <= k < n: y[0] += x[i] * x[j]; }",
      "slow.kiln");
  (*slow.mutable_runtime_params())["n"] = 3000;
  slow.mutable_settings()->set_time_limit_ms(300);
  v1::MeasureResponse out;
  ASSERT_TRUE(measure(slow, &out).ok());
  EXPECT_EQ(out.result().error(), v1::MeasureResult::TIMEOUT) << out.result().message();
  EXPECT_NE(out.result().message().find("time limit of 300 ms"), std::string::npos);

  v1::MeasureRequest ok = request(kScale, "scale.kiln");
  ASSERT_TRUE(measure(ok, &out).ok());
  EXPECT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
  EXPECT_EQ(out.agent_id(), "agent-a");
}

TEST_F(FleetTest, AJobPastItsMemoryLimitIsOutOfMemory) {
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  v1::MeasureRequest big = request(kScale, "scale.kiln");
  (*big.mutable_runtime_params())["n"] = 200'000'000;  // 800 MB a buffer
  big.mutable_settings()->set_memory_limit_bytes(uint64_t{256} << 20);
  v1::MeasureResponse out;
  ASSERT_TRUE(measure(big, &out).ok());
  EXPECT_EQ(out.result().error(), v1::MeasureResult::OUT_OF_MEMORY) << out.result().message();
  ASSERT_TRUE(measure(request(kScale, "scale.kiln"), &out).ok());
  EXPECT_EQ(out.result().error(), v1::MeasureResult::OK);
}

TEST_F(FleetTest, AnAgentWithTheWrongTokenIsRefused) {
  std::string wrong = dir_ + "wrong";
  std::ofstream(wrong) << "not-the-token\n";
  HostAgent bad(agents_, "x86", wrong, "intruder", {"--once"});
  int status = bad.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
  EXPECT_EQ(list().agents_size(), 0);
  HostAgent good(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
}

TEST_F(FleetTest, AKeyWithoutAgentsIsUnavailableNamingTheKeys) {
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  v1::MeasureResponse out;
  grpc::Status s = measure(request(kScale, "scale.kiln", "rk3399"), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("no agent of key rk3399 is connected (connected: x86)"),
            std::string::npos)
      << s.error_message();
}

// A measurement pinned to one agent runs there, every time, with the host's load measured;
// pinned to an agent that is not connected it is refused, naming it.
TEST_F(FleetTest, AMeasurementForOneAgentRunsThereAndOnNoOther) {
  HostAgent a(agents_, "x86", token_, "agent-a"), b(agents_, "x86", token_, "agent-b");
  wait_for_agents(2);
  v1::MeasureRequest r = request(kScale, "scale.kiln");
  (*r.mutable_runtime_params())["n"] = 1 << 16;
  // Rounds long enough (over 100 ms in all) for /proc/stat's ticks to tell the host's load.
  r.mutable_settings()->set_number(0);
  r.mutable_settings()->set_repeat(3);
  r.mutable_settings()->set_min_repeat_ms(40);
  for (const char* agent : {"agent-b", "agent-a", "agent-b", "agent-b"}) {
    r.set_agent(agent);
    v1::MeasureResponse out;
    grpc::Status s = measure(r, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(out.agent_id(), agent);
    ASSERT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
    ASSERT_TRUE(out.result().has_host());
    EXPECT_GE(out.result().host().other_cpus(), 0);  // /proc/stat is there on Linux
    EXPECT_GT(out.result().host().window_ms(), 0);
    if (std::filesystem::exists("/proc/pressure/cpu")) {
      EXPECT_GE(out.result().host().cpu_pressure(), 0);
      EXPECT_LE(out.result().host().cpu_pressure(), 1);
    }
  }
  r.set_agent("agent-z");
  v1::MeasureResponse out;
  grpc::Status s = measure(r, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("agent agent-z of key x86"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("is not connected"), std::string::npos) << s.error_message();
}

// A kernel whose first round passes stop_above_ms is timed no further: one round, said so.
TEST_F(FleetTest, AFirstRoundPastTheStopLimitIsTheOnlyOne) {
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  v1::MeasureRequest r = request(kScale, "scale.kiln");
  (*r.mutable_runtime_params())["n"] = 1 << 16;
  r.mutable_settings()->set_repeat(5);
  r.mutable_settings()->set_stop_above_ms(1e-6);  // a nanosecond: every kernel is past it
  v1::MeasureResponse out;
  grpc::Status s = measure(r, &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
  EXPECT_TRUE(out.result().stopped_early());
  EXPECT_EQ(out.result().round_ms_size(), 1);
  r.mutable_settings()->set_stop_above_ms(1e6);  // 1000 s: none is
  ASSERT_TRUE(measure(r, &out).ok());
  EXPECT_FALSE(out.result().stopped_early());
  EXPECT_EQ(out.result().round_ms_size(), 5);
  r.mutable_settings()->set_stop_above_ms(-1);
  s = measure(r, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("settings.stop_above_ms: -1 is not a limit"), std::string::npos)
      << s.error_message();
}

TEST_F(FleetTest, AJobWhoseAgentIsKilledCompletesOnTheOther) {
  auto a = std::make_unique<HostAgent>(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  v1::MeasureRequest slow = request(
      "func slow { param n; input x : f32[n]; output y : f32[1];\n"
      "  compute c(i, j, k) in 0 <= i < n and 0 <= j < n and 0 <= k < n: y[0] += x[i] * x[j]; }",
      "slow.kiln");
  (*slow.mutable_runtime_params())["n"] = 1200;  // seconds a call: time to kill its agent
  slow.mutable_settings()->set_time_limit_ms(60'000);
  slow.mutable_settings()->set_repeat(1);
  v1::MeasureResponse out;
  grpc::Status s;
  std::thread client([&] { s = measure(slow, &out); });
  // Once agent-a runs the job, a second agent joins and agent-a dies.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    v1::ListAgentsResponse now = list();
    if (now.agents_size() == 1 && now.agents(0).running() == 1) break;
    ASSERT_LT(std::chrono::steady_clock::now(), until);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  HostAgent b(agents_, "x86", token_, "agent-b");
  wait_for_agents(2);
  a->kill_now();
  client.join();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
  EXPECT_EQ(out.agent_id(), "agent-b");
  EXPECT_EQ(out.tries(), 2);
}

TEST_F(FleetTest, AgentsReconnectByThemselvesWhenKilndRestarts) {
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  v1::MeasureResponse out;
  ASSERT_TRUE(measure(request(kScale, "scale.kiln"), &out).ok());
  std::string port = agents_.substr(agents_.rfind(':') + 1);
  kilnd_->kill_now();
  start_kilnd("127.0.0.1:" + port);
  wait_for_agents(1);
  EXPECT_EQ(list().agents(0).id(), "agent-a");
  ASSERT_TRUE(measure(request(kScale, "scale.kiln"), &out).ok());
  EXPECT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
  EXPECT_EQ(out.agent_id(), "agent-a");
}

#ifdef KILN_AGENT_AARCH64
// qemu-aarch64 and its options, as CMake gives them ('|' between words).
std::vector<std::string> qemu_runner() {
  std::vector<std::string> words;
  std::string all = KILN_AARCH64_RUN, word;
  for (char c : all + "|") {
    if (c != '|') {
      word += c;
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  return words;
}

TEST_F(FleetTest, AnAarch64AgentUnderQemuRunsWhatKilndCompiledForIt) {
  AgentProcess arm(KILN_AGENT_AARCH64, agents_, "arm64-qemu", token_, "board-1", {}, qemu_runner());
  wait_for_agents(1);
  v1::AgentStatus listed = list().agents(0);
  EXPECT_EQ(listed.device().triple(), "aarch64-linux-gnu");
  EXPECT_EQ(listed.device().key(), "arm64-qemu");
  int measured = 0;
  for (const ExampleCase& c : example_cases()) {
    SCOPED_TRACE(c.example);
    v1::MeasureRequest r = request(read_example(c.example), c.example + ".kiln", "arm64-qemu");
    (*r.mutable_options()->mutable_set()).insert(c.params.front().begin(), c.params.front().end());
    r.mutable_runtime_params()->insert(c.runtime.begin(), c.runtime.end());
    r.set_check(true);
    r.set_seed(5);
    r.mutable_settings()->set_repeat(1);
    v1::MeasureResponse out;
    grpc::Status s = measure(r, &out);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
    EXPECT_TRUE(out.check().ok()) << out.check().message();
    EXPECT_EQ(out.agent_id(), "board-1");
    ++measured;
  }
  EXPECT_EQ(list().agents(0).jobs_done(), measured);
}
#endif

// `kiln` run with arguments: its exit status and what it printed (both streams).
struct CliRun {
  int status;
  std::string out;
};
CliRun kiln_cli(const std::vector<std::string>& args) {
  std::string command = KILN_BINARY;
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

TEST_F(FleetTest, TheCliListsTheAgentsAndMeasuresOnThem) {
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  CliRun agents = kiln_cli({"agents", "--server", kilnd_->address()});
  ASSERT_EQ(agents.status, 0) << agents.out;
  EXPECT_TRUE(
      agents.out.starts_with("ID       KEY  TRIPLE            CORES  CACHES L1D/L2/L3  GPUS  "
                             "STATE  DONE  FAILED  LAST SEEN\n"))
      << agents.out;
  // The agent reports the caches Linux describes, which kilnd fits knob defaults to.
  Target host;
  host_caches(host);
  auto size = [](int64_t b) {
    return b <= 0               ? std::string("?")
           : b % (1 << 20) == 0 ? std::to_string(b >> 20) + "M"
                                : std::to_string(b >> 10) + "K";
  };
  std::string caches = size(host.l1d_bytes) + "/" + size(host.l2_bytes) + "/" + size(host.l3_bytes);
  EXPECT_NE(agents.out.find("  " + caches + "  "), std::string::npos) << caches << "\n"
                                                                      << agents.out;
  EXPECT_NE(agents.out.find("agent-a  x86  x86_64-linux-gnu"), std::string::npos) << agents.out;
  EXPECT_NE(agents.out.find("idle"), std::string::npos) << agents.out;

  std::string matmul = std::string(KILN_SOURCE_DIR) + "/examples/matmul.kiln";
  CliRun m = kiln_cli({"measure", matmul, "--key", "x86", "--check", "--repeat", "2", "--server",
                       kilnd_->address()});
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_TRUE(m.out.starts_with("measure matmul on agent-a (x86, ")) << m.out;
  EXPECT_NE(m.out.find("(median of 2 x "), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("ok  matmul: 1 output matches the reference"), std::string::npos) << m.out;

  CliRun json = kiln_cli({"measure", matmul, "--key", "x86", "--json", "--number", "1", "--repeat",
                          "3", "--server", kilnd_->address()});
  ASSERT_EQ(json.status, 0) << json.out;
  EXPECT_NE(json.out.find("\"agent\":\"agent-a\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"repeat\":3,\"number\":1"), std::string::npos) << json.out;

  CliRun nobody = kiln_cli({"measure", matmul, "--key", "rk3399", "--server", kilnd_->address()});
  EXPECT_EQ(nobody.status, 1) << nobody.out;
  EXPECT_NE(nobody.out.find("no agent of key rk3399 is connected (connected: x86)"),
            std::string::npos)
      << nobody.out;

  CliRun listed = kiln_cli({"agents", "--json", "--server", kilnd_->address()});
  EXPECT_NE(listed.out.find("\"jobs_done\":2"), std::string::npos) << listed.out;

  CliRun no_key = kiln_cli({"measure", matmul, "--server", kilnd_->address()});
  EXPECT_EQ(no_key.status, 2);
  EXPECT_NE(no_key.out.find("missing --key"), std::string::npos) << no_key.out;
  CliRun offline = kiln_cli({"agents"});
  EXPECT_EQ(offline.status, 2);
  EXPECT_NE(offline.out.find("give --server HOST:PORT"), std::string::npos) << offline.out;
}

// A whole model measures on an agent: one job of kind "model" with its weights; a check is
// refused, pointing to kiln run --check.
TEST_F(FleetTest, TheCliMeasuresAWholeModelOnAnAgent) {
  std::string model =
      "/usr/share/libonnx-testdata/data/node/test_basic_conv_with_padding/model.onnx";
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " is missing (Debian's libonnx-testdata)";
  HostAgent a(agents_, "x86", token_, "agent-a");
  wait_for_agents(1);
  CliRun m =
      kiln_cli({"measure", model, "--key", "x86", "--repeat", "2", "--server", kilnd_->address()});
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_TRUE(m.out.starts_with("measure graph test_basic_conv_with_padding on agent-a (x86, "))
      << m.out;
  EXPECT_NE(m.out.find("(median of 2 x "), std::string::npos) << m.out;
  CliRun checked =
      kiln_cli({"measure", model, "--key", "x86", "--check", "--server", kilnd_->address()});
  EXPECT_EQ(checked.status, 1) << checked.out;
  EXPECT_NE(checked.out.find("kiln run MODEL --check"), std::string::npos) << checked.out;
}

// kScale measured on kilnd's agent of `key` (waiting for it to join), checked,
// by the agent `id`.
void expect_scale_measured(KilndProcess& kilnd, const std::string& key, const std::string& id) {
  auto stub = v1::Compiler::NewStub(
      grpc::CreateChannel(kilnd.address(), grpc::InsecureChannelCredentials()));
  v1::MeasureRequest r;
  r.mutable_op()->mutable_source()->set_text(kScale);
  r.set_key(key);
  r.set_check(true);
  v1::MeasureResponse out;
  grpc::ClientContext ctx;
  grpc::Status s = stub->Measure(&ctx, r, &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(out.agent_id(), id);
  EXPECT_EQ(out.result().error(), v1::MeasureResult::OK) << out.result().message();
  EXPECT_TRUE(out.check().ok());
}

// kilnd with --agent-tls-cert and --agent-tls-key, and an agent that trusts
// the CA: the x86-64 one, and the static aarch64 one under qemu.
void measure_over_tls(const std::string& agent_binary, std::vector<std::string> runner) {
  TestCerts certs;
  ASSERT_TRUE(certs.made) << certs.log();
  std::string token = certs("token");
  std::ofstream(token) << "tls-token\n";
  KilndProcess kilnd(KILND_BINARY, {"--agent-token-file", token, "--agent-listen", "127.0.0.1:0",
                                    "--agent-tls-cert", certs("server.pem"), "--agent-tls-key",
                                    certs("server.key")});
  std::string line = kilnd.read_line();
  ASSERT_TRUE(line.starts_with("kilnd: agents on 127.0.0.1:")) << line;
  std::string agents = "127.0.0.1:" + line.substr(line.rfind(':') + 1);
  AgentProcess agent(agent_binary, agents, "tls", token, "tls-agent", {"--tls-ca", certs("ca.pem")},
                     std::move(runner));
  expect_scale_measured(kilnd, "tls", "tls-agent");
}

// What the agent detects is a target kilnd accepts, and it has every vector
// feature /proc/cpuinfo lists: a level the CPU reaches only in part (a virtual
// machine hiding one flag) must not cost it AVX2 or AVX-512.
// `--gpu LIST` picks the GPUs an agent serves; a GPU the machine does not have is a usage error
// that says what it has.
TEST(AgentDeviceTest, GpuSelectsTheGpusTheAgentServes) {
  auto run = [](const std::string& args, int* status) {
    std::string out;
    FILE* pipe =
        popen((std::string(KILN_AGENT_BINARY) + " --print-device " + args + " 2>&1").c_str(), "r");
    char line[4096];
    while (pipe && std::fgets(line, sizeof line, pipe)) out += line;
    *status = pipe ? pclose(pipe) : -1;
    return out;
  };
  int status = 0;
  std::string out = run("--gpu 0,x", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find("--gpu '0,x': expected GPU numbers separated by commas"), std::string::npos)
      << out;
  std::string why;
  if (!cuda::gpu_available(&why)) {
    out = run("--gpu 0", &status);
    EXPECT_EQ(WEXITSTATUS(status), 2);
    EXPECT_NE(out.find("--gpu 0: this machine has no GPU"), std::string::npos) << out;
    return;
  }
  out = run("--gpu 0", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("gpu 0     "), std::string::npos) << out;
  out = run("--gpu 99", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find("--gpu 99: this machine has GPU 0 to"), std::string::npos) << out;
}

TEST(AgentDeviceTest, TheDetectedTargetHasTheCpusVectorFeatures) {
  FILE* pipe = popen(KILN_AGENT_BINARY " --print-device", "r");
  ASSERT_NE(pipe, nullptr);
  std::map<std::string, std::string> fields;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe)) {
    std::string l(line);
    if (!l.empty() && l.back() == '\n') l.pop_back();
    size_t cut = l.find_first_of(' ');
    if (cut == std::string::npos) continue;
    size_t value = l.find_first_not_of(' ', cut);
    if (l.rfind("cpu model", 0) == 0) continue;
    fields[l.substr(0, cut)] = value == std::string::npos ? "" : l.substr(value);
  }
  ASSERT_EQ(pclose(pipe), 0);
  if (fields["triple"] != "x86_64-linux-gnu") GTEST_SKIP() << "an x86-64 agent's detection";
  std::string features = fields["features"] == "(the CPU's own)" ? "" : fields["features"];
  codegen::Target t{fields["triple"], fields["cpu"], features};
  ASSERT_NO_THROW(codegen::check_target(t)) << t.cpu << " " << t.features;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string flags;
  for (std::string l; std::getline(cpuinfo, l);)
    if (l.rfind("flags", 0) == 0) {
      flags = " " + l.substr(l.find(':') + 1) + " ";
      break;
    }
  for (const char* f : {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"}) {
    bool listed = flags.find(std::string(" ") + f + " ") != std::string::npos;
    EXPECT_EQ(codegen::target_has_feature(t, f), listed) << f << " on " << t.cpu << " " << features;
  }
  if (flags.find(" avx512f ") != std::string::npos) {
    EXPECT_TRUE(codegen::target_has_feature(t, "evex512")) << t.cpu << " " << features;
  }
}

TEST(AgentTlsTest, KilndTakesAnAgentOverTls) { measure_over_tls(KILN_AGENT_BINARY, {}); }

#ifdef KILN_AGENT_AARCH64
TEST(AgentTlsTest, KilndTakesTheStaticAarch64AgentOverTls) {
  measure_over_tls(KILN_AGENT_AARCH64, qemu_runner());
}
#endif

// A Measure whose client gives up (its deadline, or a cancel) takes its job off the agent: the
// agent kills the job's process and its one slot is free again within a second, so the next
// client is measured at once; a job still queued behind it is dropped as well. (Before, a
// 10-minute time limit and a 2-second deadline held the agent for 10 minutes.)
TEST(MeasureCancelTest, AClientThatGivesUpFreesTheAgentWithinASecond) {
  KilndProcess kilnd(KILND_BINARY, {"--local-agent", "--measure-timeout-ms", "600000"});
  ASSERT_TRUE(kilnd.read_line().starts_with("kilnd: agents on 127.0.0.1:"));
  auto stub = v1::Compiler::NewStub(
      grpc::CreateChannel(kilnd.address(), grpc::InsecureChannelCredentials()));
  auto running = [&] {
    grpc::ClientContext ctx;
    v1::ListAgentsResponse out;
    EXPECT_TRUE(stub->ListAgents(&ctx, v1::ListAgentsRequest(), &out).ok());
    return out.agents_size() == 1 ? out.agents(0).running() : -1;
  };
  auto measure = [&](const std::string& source, int64_t n, std::chrono::milliseconds deadline,
                     std::function<void(grpc::ClientContext&)> meanwhile = nullptr) {
    v1::MeasureRequest r;
    r.mutable_op()->mutable_source()->set_text(source);
    r.set_key("local");
    (*r.mutable_runtime_params())["n"] = n;
    r.mutable_settings()->set_time_limit_ms(600'000);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    std::thread other;
    if (meanwhile) other = std::thread([&] { meanwhile(ctx); });
    v1::MeasureResponse out;
    grpc::Status s = stub->Measure(&ctx, r, &out);
    if (other.joinable()) other.join();
    return s;
  };
  const std::string endless =
      "func endless { param n; constraint n > 0; input x : f32[1]; output y : f32[1];\n"
      "  compute c(i, j, k) in 0 <= i < n, 0 <= j < n, 0 <= k < n: y[0] += x[0]; }";
  ASSERT_TRUE(measure(kScale, 64, std::chrono::seconds(60)).ok());  // compiled, agent warm

  for (bool cancel : {false, true}) {
    SCOPED_TRACE(cancel ? "the client cancels" : "the client's deadline passes");
    grpc::Status queued_status;
    std::thread queued([&] {  // behind the endless job, with a shorter deadline
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      queued_status = measure(kScale, 64, std::chrono::milliseconds(1500));
    });
    grpc::Status s = cancel ? measure(endless, 1 << 20, std::chrono::seconds(60),
                                      [](grpc::ClientContext& ctx) {
                                        std::this_thread::sleep_for(std::chrono::seconds(3));
                                        ctx.TryCancel();
                                      })
                            : measure(endless, 1 << 20, std::chrono::seconds(3));
    auto gave_up = std::chrono::steady_clock::now();
    queued.join();
    EXPECT_EQ(s.error_code(),
              cancel ? grpc::StatusCode::CANCELLED : grpc::StatusCode::DEADLINE_EXCEEDED)
        << s.error_message();
    EXPECT_EQ(queued_status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << queued_status.error_message();
    while (running() != 0 && std::chrono::steady_clock::now() - gave_up < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_LT(std::chrono::steady_clock::now() - gave_up, std::chrono::seconds(1));
    EXPECT_EQ(running(), 0);
    grpc::Status next = measure(kScale, 64, std::chrono::seconds(10));
    EXPECT_TRUE(next.ok()) << next.error_message();
  }
}

// The TCP ports process `pid` listens on: its sockets (/proc/PID/fd) in the LISTEN state of
// /proc/PID/net/tcp and tcp6.
std::set<int> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid))) {
    std::error_code ec;
    std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in(fmt::format("/proc/{}/net/{}", pid, table));
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state == "0A" && inodes.count(inode))
        ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// The processes whose parent is `parent`.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    long ppid = 0;
    if (stat >> pid >> comm >> state >> ppid && ppid == parent)
      children.push_back(static_cast<pid_t>(std::stol(pid)));
  }
  return children;
}

// A local agent that dies (a crash, kill -9) is started again by kilnd, which serves on: the next
// Measure is measured by the new one.
TEST(LocalAgentTest, ALocalAgentThatDiesIsStartedAgain) {
  KilndProcess kilnd(KILND_BINARY, {"--local-agent"});
  ASSERT_TRUE(kilnd.read_line().starts_with("kilnd: agents on 127.0.0.1:"));
  expect_scale_measured(kilnd, "local", "local");
  for (int round = 0; round < 2; ++round) {
    std::vector<pid_t> before = children_of(kilnd.pid());
    ASSERT_EQ(before.size(), 1u);
    ASSERT_EQ(kill(before[0], SIGKILL), 0);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::vector<pid_t> after;
    while (std::chrono::steady_clock::now() < until) {
      after = children_of(kilnd.pid());
      if (after.size() == 1 && after[0] != before[0]) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(after.size(), 1u);
    EXPECT_NE(after[0], before[0]);
    expect_scale_measured(kilnd, "local", "local");  // waits for it to connect
  }
}

TEST(LocalAgentTest, KilndStartsItsOwnAgentAndStopsItWhenItStops) {
  auto kilnd =
      std::make_unique<KilndProcess>(KILND_BINARY, std::vector<std::string>{"--local-agent"});
  std::string line = kilnd->read_line();
  ASSERT_TRUE(line.starts_with("kilnd: agents on 127.0.0.1:")) << line;
  expect_scale_measured(*kilnd, "local", "local");

  // kilnd listens where it says it does, and nowhere else: its gRPC port and its agents' port.
  const std::string& address = kilnd->address();
  int grpc_port = std::stoi(address.substr(address.rfind(':') + 1));
  int agent_port = std::stoi(line.substr(line.rfind(':') + 1));
  EXPECT_EQ(listening_ports(kilnd->pid()), (std::set<int>{grpc_port, agent_port}));

  // Its agent is its child, and ends with it.
  std::vector<pid_t> children = children_of(kilnd->pid());
  ASSERT_EQ(children.size(), 1u);
  kilnd->terminate();
  EXPECT_EQ(kilnd->wait(), 0);
  EXPECT_NE(kill(children[0], 0), 0) << "the local agent outlived kilnd";
}

}  // namespace
}  // namespace kiln::testing
