// Faults against kilnd's fleet (server/fleet.h, in this process) and a real
// kiln-agent on loopback. Kernels that segfault, call abort, loop forever or
// allocate without bound (fault_kernels.c) each get their error class and the
// same agent serves the next job. Peers that are not agents (a wrong protocol
// version, a frame before hello, an oversized frame length, garbage, random
// and truncated frames by the hundred) are refused and logged, and the fleet
// keeps serving its agent. And the agent's side: servers that are not kilnd
// (another protocol version, no challenge, a huge frame, a forged welcome)
// are refused.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "agent_process.h"
#include "fleet.h"
#include "kiln/cuda.h"
#include "kiln/digest.h"
#include "test_certs.h"

namespace kiln::testing {
namespace {

using server::Fleet;
using server::FleetJob;
using server::FleetOptions;
using server::FleetOutcome;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A TCP connection to the fleet that speaks (or fails to speak) its framing.
class Peer {
 public:
  explicit Peer(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Peer() { close(fd_); }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  bool connected() const { return connected_; }
  void send_bytes(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t w = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (w <= 0) return;  // kilnd may close first: that is its right
      off += static_cast<size_t>(w);
    }
  }
  static std::string framed(const std::string& body) {
    uint32_t n = static_cast<uint32_t>(body.size());
    std::string out = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 8), static_cast<char>(n)};
    return out + body;
  }
  void send_frame(const v1::AgentFrame& f) { send_bytes(framed(f.SerializeAsString())); }
  void finish_sending() { shutdown(fd_, SHUT_WR); }

  // Everything kilnd sends until it closes the connection (or 10 s pass).
  std::string read_to_close() {
    std::string all;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t got = recv(fd_, buf, sizeof buf, 0);
      if (got <= 0) return all;
      all.append(buf, static_cast<size_t>(got));
    }
    ADD_FAILURE() << "kilnd kept the connection open";
    return all;
  }
  // The frames in bytes received.
  static std::vector<v1::AgentFrame> frames(const std::string& bytes) {
    std::vector<v1::AgentFrame> out;
    size_t at = 0;
    while (bytes.size() - at >= 4) {
      auto b = [&](size_t i) {
        return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]));
      };
      uint32_t n = b(at) << 24 | b(at + 1) << 16 | b(at + 2) << 8 | b(at + 3);
      if (bytes.size() - at - 4 < n) break;
      v1::AgentFrame f;
      EXPECT_TRUE(f.ParseFromString(bytes.substr(at + 4, n)));
      out.push_back(f);
      at += 4 + n;
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class FleetFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
    previous_ = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("fleet", log_));
    dir_ = ::testing::TempDir() + "kiln_faults_" + std::to_string(getpid()) + "/";
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "token") << "faults-token\n";
    fleet_ = std::make_unique<Fleet>(options());
    code_ = std::make_shared<const std::string>(read_file(FAULT_KERNELS));
    ASSERT_FALSE(code_->empty()) << FAULT_KERNELS;
  }
  virtual FleetOptions options() {
    FleetOptions o;
    o.token = "faults-token";
    o.heartbeat_ms = 300;
    o.wait_for_agent = std::chrono::seconds(5);
    return o;
  }
  void TearDown() override {
    agent_.reset();
    fleet_.reset();
    spdlog::set_default_logger(previous_);
    std::filesystem::remove_all(dir_);
  }

  void start_agent(std::vector<std::string> extra = {}) {
    agent_ = std::make_unique<AgentProcess>(KILN_AGENT_BINARY,
                                            "127.0.0.1:" + std::to_string(fleet_->port()), "x86",
                                            dir_ + "token", "agent-a", std::move(extra));
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (fleet_->agents().size() != 1) {
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "the agent did not join";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Runs fault_kernels.so's `entry` on one f32[4] output.
  FleetOutcome run(const std::string& entry, int time_limit_ms = 10'000,
                   uint64_t memory_limit = uint64_t{512} << 20) {
    FleetJob job;
    job.key = "x86";
    job.code = code_;
    job.code_sha256 = sha256_hex(*code_);
    job.job.set_entry(entry);
    job.job.set_return_outputs(true);
    v1::JobArgument* y = job.job.add_arguments();
    y->set_name("y");
    y->set_is_buffer(true);
    y->set_type(v1::ELEMENT_F32);
    y->add_shape(4);
    y->set_output(true);
    v1::MeasureSettings* s = job.job.mutable_settings();
    s->set_repeat(2);
    s->set_number(1);
    s->set_time_limit_ms(time_limit_ms);
    s->set_memory_limit_bytes(memory_limit);
    return fleet_->submit(std::move(job)).outcome.get();
  }
  // The agent still serves: a working kernel on the same agent.
  void expect_served() {
    FleetOutcome ok = run("fault_ok");
    ASSERT_TRUE(ok.status.ok()) << ok.status.message;
    ASSERT_EQ(ok.result.error(), v1::MeasureResult::OK) << ok.result.message();
    EXPECT_EQ(ok.agent_id, "agent-a");
    ASSERT_EQ(ok.result.outputs_size(), 1);
    float first = 0;
    std::memcpy(&first, ok.result.outputs(0).data().data(), sizeof first);
    EXPECT_EQ(first, 42.0f);
  }
  // Whether kilnd logs `text` within 5 s (a peer may see its refusal first).
  bool eventually_logged(const std::string& text) const {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (logged().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  std::string logged() const {
    std::string all;
    for (const std::string& line : log_->last_formatted()) all += line;
    return all;
  }

  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log_;
  std::shared_ptr<spdlog::logger> previous_;
  std::string dir_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<AgentProcess> agent_;
  std::shared_ptr<const std::string> code_;
};

TEST_F(FleetFaultsTest, EachFaultGetsItsClassAndTheSameAgentServesTheNextJob) {
  start_agent();
  expect_served();

  FleetOutcome segv = run("fault_segv");
  ASSERT_TRUE(segv.status.ok()) << segv.status.message;
  EXPECT_EQ(segv.result.error(), v1::MeasureResult::RUNTIME_CRASH) << segv.result.message();
  EXPECT_EQ(segv.result.signal(), SIGSEGV);
  EXPECT_NE(segv.result.message().find("SIGSEGV"), std::string::npos) << segv.result.message();
  expect_served();

  FleetOutcome abort = run("fault_abort");
  EXPECT_EQ(abort.result.error(), v1::MeasureResult::RUNTIME_CRASH) << abort.result.message();
  EXPECT_EQ(abort.result.signal(), SIGABRT);
  EXPECT_NE(abort.result.message().find("SIGABRT"), std::string::npos);
  expect_served();

  FleetOutcome spin = run("fault_spin", 400);
  EXPECT_EQ(spin.result.error(), v1::MeasureResult::TIMEOUT) << spin.result.message();
  EXPECT_NE(spin.result.message().find("time limit of 400 ms"), std::string::npos);
  expect_served();

  FleetOutcome hog = run("fault_hog", 30'000, uint64_t{256} << 20);
  EXPECT_EQ(hog.result.error(), v1::MeasureResult::OUT_OF_MEMORY) << hog.result.message();
  expect_served();

  FleetOutcome missing = run("fault_nowhere");
  EXPECT_EQ(missing.result.error(), v1::MeasureResult::LOAD_ERROR) << missing.result.message();
  EXPECT_NE(missing.result.message().find("fault_nowhere"), std::string::npos);
  expect_served();

  ASSERT_EQ(fleet_->agents().size(), 1u);
  EXPECT_EQ(fleet_->agents()[0].id, "agent-a");
  EXPECT_EQ(fleet_->agents()[0].jobs_done, 6);
  EXPECT_EQ(fleet_->agents()[0].jobs_failed, 5);
}

TEST_F(FleetFaultsTest, AGpuJobOnAnAgentWithoutAGpuIsUnsupported) {
  // An agent that sees no GPU, on any machine: the driver shows it none.
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  struct Restore {
    ~Restore() { unsetenv("CUDA_VISIBLE_DEVICES"); }
  } restore;
  start_agent();
  for (const char* kind : {"cubin", "ptx", "hsaco"}) {
    FleetJob job;
    job.key = "x86";
    job.code = code_;
    job.code_sha256 = sha256_hex(*code_);
    job.job.set_entry("fault_ok");
    job.job.set_artifact_kind(kind);
    FleetOutcome out = fleet_->submit(std::move(job)).outcome.get();
    ASSERT_TRUE(out.status.ok()) << out.status.message;
    EXPECT_EQ(out.result.error(), v1::MeasureResult::UNSUPPORTED) << out.result.message();
    std::string want = std::string(kind) == "hsaco"
                           ? "artifact kind 'hsaco' is not one this agent runs"
                           : std::string("a ") + kind + " job needs a GPU, and this agent has none";
    EXPECT_NE(out.result.message().find(want), std::string::npos) << out.result.message();
    expect_served();
  }
}

// On a machine with a GPU: a GPU kernel that faults costs its job (RUNTIME_CRASH, with the
// driver's error), and the agent serves on; a good GPU job after it runs and returns its output.
TEST_F(FleetFaultsTest, AFaultingGpuKernelCostsItsJobAndTheAgentServesOn) {
  std::string why;
  if (!cuda::nvrtc_available(&why) || !cuda::gpu_available(&why))
    GTEST_SKIP() << "no GPU here (" << why << "): the GPU fault path not checked";
  cuda::Program p;
  p.name = "gpu_faults";
  p.source =
      "extern \"C\" __global__ void bad(float* y, int* status) { *(volatile int*)(0x10) = 1; }\n"
      "extern \"C\" __global__ void good(float* y, int* status) { y[threadIdx.x] = 42.0f; }\n";
  std::string arch;
  {
    cuda::Device probe;  // in this test process: the agent's children are others
    arch = probe.arch();
  }
  cuda::Binary bin = cuda::compile(p, arch);
  auto code = std::make_shared<const std::string>(bin.cubin.begin(), bin.cubin.end());
  start_agent();
  auto gpu_job = [&](const char* kernel) {
    FleetJob job;
    job.key = "x86";
    job.code = code;
    job.code_sha256 = sha256_hex(*code);
    job.job.set_artifact_kind("cubin");
    job.job.set_gpu(0);
    job.job.set_return_outputs(true);
    v1::JobArgument* y = job.job.add_arguments();
    y->set_name("y");
    y->set_is_buffer(true);
    y->set_type(v1::ELEMENT_F32);
    y->add_shape(4);
    y->set_output(true);
    v1::GpuLaunch* l = job.job.add_launches();
    l->set_kernel(kernel);
    for (int d = 0; d < 3; ++d) l->add_grid(1);
    l->add_block(4);
    l->add_block(1);
    l->add_block(1);
    return fleet_->submit(std::move(job)).outcome.get();
  };
  FleetOutcome bad = gpu_job("bad");
  ASSERT_TRUE(bad.status.ok()) << bad.status.message;
  EXPECT_EQ(bad.result.error(), v1::MeasureResult::RUNTIME_CRASH) << bad.result.message();
  EXPECT_NE(bad.result.message().find("CUDA_ERROR_"), std::string::npos) << bad.result.message();
  FleetOutcome good = gpu_job("good");
  ASSERT_TRUE(good.status.ok()) << good.status.message;
  ASSERT_EQ(good.result.error(), v1::MeasureResult::OK) << good.result.message();
  ASSERT_EQ(good.result.outputs_size(), 1);
  float first = 0;
  std::memcpy(&first, good.result.outputs(0).data().data(), sizeof first);
  EXPECT_EQ(first, 42.0f);
  expect_served();
}

TEST_F(FleetFaultsTest, AWrongProtocolVersionIsRefusedNamingBothVersions) {
  Peer peer(fleet_->port());
  ASSERT_TRUE(peer.connected());
  v1::AgentFrame hello;
  hello.mutable_hello()->set_protocol_version(v1::AGENT_PROTOCOL_VERSION + 98);
  hello.mutable_hello()->set_agent_id("from-the-future");
  hello.mutable_hello()->mutable_device()->set_key("x86");
  hello.mutable_hello()->mutable_device()->set_triple("x86_64-linux-gnu");
  peer.send_frame(hello);
  std::vector<v1::AgentFrame> got = Peer::frames(peer.read_to_close());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].has_challenge());
  ASSERT_TRUE(got[1].has_refusal());
  std::string want = "agent protocol version " + std::to_string(v1::AGENT_PROTOCOL_VERSION + 98) +
                     ", kilnd version " + std::to_string(v1::AGENT_PROTOCOL_VERSION);
  EXPECT_NE(got[1].refusal().reason().find(want), std::string::npos) << got[1].refusal().reason();
  EXPECT_TRUE(eventually_logged("refused: the agent speaks " + want)) << logged();
  EXPECT_TRUE(fleet_->agents().empty());
  start_agent();
  expect_served();
}

TEST_F(FleetFaultsTest, ASilentPeerDoesNotHoldTheFleetWhenItStops) {
  Peer silent(fleet_->port());  // connected, never says hello (the fleet waits 10 s for one)
  ASSERT_TRUE(silent.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its handshake has begun
  auto start = std::chrono::steady_clock::now();
  fleet_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(FleetFaultsTest, AFrameOtherThanHelloFirstIsRefused) {
  Peer peer(fleet_->port());
  v1::AgentFrame beat;
  beat.mutable_heartbeat()->set_sequence(1);
  peer.send_frame(beat);
  std::vector<v1::AgentFrame> got = Peer::frames(peer.read_to_close());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].refusal().reason(), "the first frame must be a hello");
  EXPECT_TRUE(eventually_logged("refused: the first frame must be a hello"));
}

TEST_F(FleetFaultsTest, AnOversizedFrameLengthIsRefusedBeforeAnythingIsAllocated) {
  Peer peer(fleet_->port());
  peer.send_bytes(std::string("\xff\xff\xff\xf0", 4));  // 4 GiB announced, never sent
  peer.read_to_close();
  EXPECT_TRUE(eventually_logged("announced a frame of 4294967280 bytes, more than the limit of " +
                                std::to_string(1 << 20)))
      << logged();
  start_agent();
  expect_served();
}

TEST_F(FleetFaultsTest, GarbageIsRefusedAndLogged) {
  {
    Peer peer(fleet_->port());
    peer.send_bytes(Peer::framed(std::string(10, '\xff')));
    peer.read_to_close();
  }
  EXPECT_TRUE(eventually_logged("sent 10 bytes that are not an AgentFrame")) << logged();
  {
    Peer peer(fleet_->port());
    peer.send_bytes("GET / HTTP/1.1\r\nHost: kilnd\r\n\r\n");
    peer.read_to_close();
  }
  EXPECT_TRUE(eventually_logged("announced a frame of")) << logged();
  start_agent();
  expect_served();
}

// Random bytes, truncated frames and frames with flipped bits, on many
// connections, while the agent keeps measuring: the fleet answers every one
// with a challenge and at most a refusal, and never loses its agent.
TEST_F(FleetFaultsTest, RandomAndTruncatedFramesNeverDisturbTheFleet) {
  start_agent();
  std::mt19937_64 rng(20261124);
  v1::AgentFrame hello;
  hello.mutable_hello()->set_protocol_version(v1::AGENT_PROTOCOL_VERSION);
  hello.mutable_hello()->set_nonce(std::string(32, 'n'));
  hello.mutable_hello()->set_mac(std::string(32, 'm'));
  hello.mutable_hello()->set_agent_id("fuzz");
  hello.mutable_hello()->mutable_device()->set_key("x86");
  hello.mutable_hello()->mutable_device()->set_triple("x86_64-linux-gnu");
  hello.mutable_hello()->add_artifacts(std::string(64, 'a'));
  std::string valid = Peer::framed(hello.SerializeAsString());
  for (int round = 0; round < 2000; ++round) {
    std::string bytes;
    switch (round % 3) {
      case 0:  // random bytes of random length
        bytes.resize(rng() % 64);
        for (char& c : bytes) c = static_cast<char>(rng());
        break;
      case 1:  // a hello cut short
        bytes = valid.substr(0, rng() % valid.size());
        break;
      default:  // a hello with bytes flipped
        bytes = valid;
        for (int k = 0; k < 4; ++k)
          bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    Peer peer(fleet_->port());
    ASSERT_TRUE(peer.connected()) << "round " << round;
    peer.send_bytes(bytes);
    peer.finish_sending();
    std::vector<v1::AgentFrame> got = Peer::frames(peer.read_to_close());
    ASSERT_GE(got.size(), 1u) << "round " << round;
    EXPECT_TRUE(got[0].has_challenge());
    for (size_t k = 1; k < got.size(); ++k) EXPECT_TRUE(got[k].has_refusal()) << "round " << round;
    if (round % 250 == 0) expect_served();
  }
  ASSERT_EQ(fleet_->agents().size(), 1u);
  EXPECT_EQ(fleet_->agents()[0].id, "agent-a");
  expect_served();
}

// A listener that is not kilnd, for the agent's side: to the first peer it
// sends `first`, then, once the peer has said something (its hello),
// `second`, and waits for the peer to close.
class Impostor {
 public:
  Impostor(std::string first, std::string second) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listener_, 4) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, first = std::move(first), second = std::move(second)] {
      int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      ::send(fd, first.data(), first.size(), MSG_NOSIGNAL);
      char buf[4096];
      bool answered = false;
      for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 15'000) <= 0) break;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (!answered && !second.empty()) ::send(fd, second.data(), second.size(), MSG_NOSIGNAL);
        answered = true;
      }
      close(fd);
    });
  }
  ~Impostor() {
    shutdown(listener_, SHUT_RDWR);
    thread_.join();
    close(listener_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int listener_ = -1, port_ = 0;
  std::thread thread_;
};

std::string challenge_frame(uint32_t version) {
  v1::AgentFrame f;
  f.mutable_challenge()->set_protocol_version(version);
  f.mutable_challenge()->set_nonce(std::string(32, 'k'));
  return Peer::framed(f.SerializeAsString());
}

// kiln-agent --once against `impostor`: its exit status (3 refused, 1 lost).
int agent_once(const Impostor& impostor, const std::string& token_file) {
  AgentProcess agent(KILN_AGENT_BINARY, impostor.address(), "x86", token_file, "agent-a",
                     {"--once"});
  int status = agent.wait();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(FleetFaultsTest, TheAgentRefusesServersThatAreNotKilnd) {
  std::string token = dir_ + "token";
  {  // another protocol version
    Impostor other(challenge_frame(v1::AGENT_PROTOCOL_VERSION + 1), "");
    EXPECT_EQ(agent_once(other, token), 3);
  }
  {  // something that does not start with a challenge
    v1::AgentFrame beat;
    beat.mutable_heartbeat()->set_sequence(1);
    Impostor chatty(Peer::framed(beat.SerializeAsString()), "");
    EXPECT_EQ(agent_once(chatty, token), 3);
  }
  {  // a frame length past the agent's limit: dropped as a lost connection
    Impostor huge(std::string("\xff\xff\xff\xff", 4), "");
    EXPECT_EQ(agent_once(huge, token), 1);
  }
  {  // a welcome whose MAC does not prove the token: no job is taken from it
    v1::AgentFrame welcome;
    welcome.mutable_welcome()->set_mac(std::string(32, 'x'));
    welcome.mutable_welcome()->set_heartbeat_ms(1000);
    Impostor forger(challenge_frame(v1::AGENT_PROTOCOL_VERSION),
                    Peer::framed(welcome.SerializeAsString()));
    EXPECT_EQ(agent_once(forger, token), 3);
  }
}

// The agent link over TLS: kilnd with a certificate for 127.0.0.1 signed by a
// test CA, agents that trust that CA.
class FleetTlsTest : public FleetFaultsTest {
 protected:
  FleetOptions options() override {
    EXPECT_TRUE(certs_.made) << certs_.log();
    FleetOptions o = FleetFaultsTest::options();
    o.tls_cert_file = certs_("server.pem");
    o.tls_key_file = certs_("server.key");
    return o;
  }
  TestCerts certs_;
};

TEST_F(FleetTlsTest, AnAgentThatTrustsTheCaMeasuresOverTls) {
  start_agent({"--tls-ca", certs_("ca.pem")});
  expect_served();
  FleetOutcome crash = run("fault_segv");
  EXPECT_EQ(crash.result.error(), v1::MeasureResult::RUNTIME_CRASH);
  expect_served();
}

TEST_F(FleetTlsTest, WhatIsNotTlsOrNotTrustedIsRefused) {
  std::string server = "127.0.0.1:" + std::to_string(fleet_->port());
  auto once = [&](std::vector<std::string> extra) {
    extra.push_back("--once");
    AgentProcess agent(KILN_AGENT_BINARY, server, "x86", dir_ + "token", "agent-b", extra);
    int status = agent.wait();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  // A name kilnd's certificate does not hold: the agent will not talk to it.
  EXPECT_EQ(once({"--tls-ca", certs_("ca.pem"), "--tls-server-name", "kilnd.example"}), 1);
  // A CA that did not sign it (the client's certificate is no CA).
  EXPECT_EQ(once({"--tls-ca", certs_("client.pem")}), 1);
  // A plaintext peer: kilnd refuses it at the handshake and logs why.
  {
    Peer peer(fleet_->port());
    v1::AgentFrame beat;
    beat.mutable_heartbeat()->set_sequence(1);
    peer.send_frame(beat);
    peer.finish_sending();
    peer.read_to_close();
  }
  EXPECT_TRUE(eventually_logged("refused: no TLS handshake (a plaintext agent? kiln-agent --tls)"))
      << logged();
  EXPECT_TRUE(fleet_->agents().empty());
  // The fleet serves on, to agents that trust it.
  start_agent({"--tls-ca", certs_("ca.pem")});
  expect_served();
}

TEST_F(FleetFaultsTest, ATlsAgentAndAPlaintextKilndDoNotTalk) {
  AgentProcess agent(KILN_AGENT_BINARY, "127.0.0.1:" + std::to_string(fleet_->port()), "x86",
                     dir_ + "token", "agent-tls", {"--tls", "--once"});
  int status = agent.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  // Its ClientHello read as a frame length: 0x16 0x03 ... is far past the hello's limit.
  EXPECT_TRUE(eventually_logged("announced a frame of")) << logged();
  EXPECT_TRUE(fleet_->agents().empty());
}

TEST(FleetTlsOptions, ACertificateWithoutItsKeyOrAnUnreadableOneIsRefused) {
  FleetOptions o;
  o.token = "t";
  o.tls_cert_file = "/nonexistent/server.pem";
  EXPECT_THROW(Fleet{o}, std::runtime_error);
  o.tls_key_file = "/nonexistent/server.key";
  try {
    Fleet fleet(o);
    ADD_FAILURE() << "a missing certificate was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--agent-tls-cert /nonexistent/server.pem: cannot load"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::testing
