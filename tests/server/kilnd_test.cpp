// kilnd end to end: the real daemon started on loopback (port 0: it says the
// one it got), called through the generated gRPC stub, and stopped with
// SIGTERM.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kiln/compile.h"
#include "kiln/v1/service.grpc.pb.h"
#include "kilnd_process.h"
#include "programs.h"

extern char** environ;

namespace kiln::testing {
namespace {

// A kilnd of its own for each test, with a stub to call it, stopped at the end.
class Kilnd {
 public:
  explicit Kilnd(const std::vector<std::string>& extra = {}) : process_(KILND_BINARY, extra) {
    channel_ = grpc::CreateChannel(process_.address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Compiler::NewStub(channel_);
  }

  // SIGTERM, and kilnd's exit status. (A graceful stop takes about 5 s while
  // this process's gRPC still holds the connection; a CLI that exits does not
  // keep kilnd waiting.)
  int stop() {
    stub_.reset();
    channel_.reset();
    terminate();
    return wait();
  }
  void terminate() { process_.terminate(); }
  int wait() { return process_.wait(); }

  const std::string& address() const { return process_.address(); }
  v1::Compiler::Stub& stub() { return *stub_; }

 private:
  KilndProcess process_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Compiler::Stub> stub_;
};

v1::Operator example(const std::string& name) {
  v1::Operator op;
  op.mutable_source()->set_text(read_example(name));
  op.mutable_source()->set_filename(name + ".kiln");
  return op;
}

// Check, then Compile twice: the artifact is the offline pipeline's, byte
// for byte, and the second one comes from the cache.
TEST(Kilnd, ServesCheckAndCompileOverGrpc) {
  Kilnd kilnd;
  grpc::ClientContext check_ctx;
  v1::CheckRequest check;
  *check.mutable_op() = example("matmul");
  v1::CheckResponse checked;
  grpc::Status s = kilnd.stub().Check(&check_ctx, check, &checked);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(checked.name(), "matmul");

  CompileResult offline = compile(
      CompileRequest{.func = parse_one(read_example("matmul")), .output = CompileOutput::Artifact});
  for (bool hit : {false, true}) {
    grpc::ClientContext ctx;
    v1::CompileRequest request;
    *request.mutable_op() = example("matmul");
    v1::CompileResponse response;
    s = kilnd.stub().Compile(&ctx, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.cache_hit(), hit);
    EXPECT_EQ(response.artifact().code(),
              std::string(offline.artifact->code.begin(), offline.artifact->code.end()));
    EXPECT_EQ(response.artifact().key(), offline.key);
  }
  EXPECT_EQ(kilnd.stop(), 0);
}

// A bad operator is INVALID_ARGUMENT with the CLI's message, a request past its
// deadline DEADLINE_EXCEEDED, an oversized one RESOURCE_EXHAUSTED, and kilnd
// goes on serving.
TEST(Kilnd, BadRequestsFailAloneAndKilndGoesOn) {
  Kilnd kilnd;
  grpc::ClientContext ctx;
  v1::CheckRequest bad;
  bad.mutable_op()->mutable_source()->set_text("func f { input x : f32[N]; }");
  bad.mutable_op()->mutable_source()->set_filename("bad.kiln");
  v1::CheckResponse response;
  grpc::Status s = kilnd.stub().Check(&ctx, bad, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "bad.kiln:1:24: validate error: unknown name 'N' in the shape of 'x'");

  // A 1 ms deadline: DEADLINE_EXCEEDED, whether it passes on the wire, in the
  // queue or between stages.
  grpc::ClientContext hurried;
  hurried.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1));
  v1::CompileRequest compile;
  *compile.mutable_op() = example("conv2d");
  v1::CompileResponse compiled;
  s = kilnd.stub().Compile(&hurried, compile, &compiled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();

  // A message beyond kilnd's limit (twice max_source_bytes, and 1 MiB) is
  // refused before it is read.
  grpc::ClientContext huge_ctx;
  v1::CheckRequest huge;
  huge.mutable_op()->mutable_source()->set_text(std::string(40u << 20, ' '));
  s = kilnd.stub().Check(&huge_ctx, huge, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  grpc::ClientContext again;
  v1::CheckRequest good;
  *good.mutable_op() = example("spmm");
  s = kilnd.stub().Check(&again, good, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(kilnd.stop(), 0);
}

// A restarted kilnd serves a repeated request from its data directory.
TEST(Kilnd, ARestartedKilndHitsItsDiskCache) {
  std::string dir = ::testing::TempDir() + "kilnd_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::string code;
  for (bool hit : {false, true}) {
    Kilnd kilnd({"--data-dir", dir});
    grpc::ClientContext ctx;
    v1::CompileRequest request;
    *request.mutable_op() = example("spmm");
    v1::CompileResponse response;
    grpc::Status s = kilnd.stub().Compile(&ctx, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.cache_hit(), hit);
    if (!hit) code = response.artifact().code();
    EXPECT_EQ(response.artifact().code(), code);
    EXPECT_EQ(kilnd.stop(), 0);
  }
  std::filesystem::remove_all(dir);
}

// A records database truncated to nothing: kilnd refuses to start, names the file, and leaves it
// as it was, rather than serve an empty store in its place.
TEST(Kilnd, AnEmptyRecordsDatabaseStopsKilndAtStart) {
  std::string dir = ::testing::TempDir() + "kilnd_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::string db = dir + "/records.db";
  std::ofstream(db).flush();
  std::string out = dir + "/kilnd.out";
  int status = std::system(("timeout 30 " + std::string(KILND_BINARY) +
                            " --listen 127.0.0.1:0 --data-dir " + dir + " > " + out + " 2>&1")
                               .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(out);
  std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(said.find("kilnd: records database " + db + ": the file is empty (0 bytes)"),
            std::string::npos)
      << said;
  EXPECT_EQ(std::filesystem::file_size(db), 0u);
  std::filesystem::remove_all(dir);
}

// SIGTERM with a request in flight: the request finishes and is answered,
// a new one is refused, and kilnd exits 0.
TEST(Kilnd, SigtermLetsTheRequestsInFlightFinish) {
  // 200 computations: a compilation of a second or more.
  std::string text =
      "func many {\n  param N = 64;\n  input x : f32[N];\n  output y : f32[200, N];\n";
  for (int k = 0; k < 200; ++k)
    text += "  compute c" + std::to_string(k) + "(i) in 0 <= i < N: y[" + std::to_string(k) +
            ", i] = x[i] + " + std::to_string(k) + ".0;\n";
  text += "}\n";
  Kilnd kilnd;
  using Clock = std::chrono::steady_clock;
  Clock::time_point answered;
  grpc::Status in_flight;
  std::thread client([&] {
    grpc::ClientContext ctx;
    v1::CompileRequest request;
    request.mutable_op()->mutable_source()->set_text(text);
    v1::CompileResponse response;
    in_flight = kilnd.stub().Compile(&ctx, request, &response);
    answered = Clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Clock::time_point signalled = Clock::now();
  kilnd.terminate();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  grpc::ClientContext late_ctx;
  v1::CheckRequest late;
  *late.mutable_op() = example("matmul");
  v1::CheckResponse late_response;
  grpc::Status refused = kilnd.stub().Check(&late_ctx, late, &late_response);
  client.join();
  EXPECT_TRUE(in_flight.ok()) << in_flight.error_message();
  EXPECT_GT(answered, signalled) << "the compilation ended before SIGTERM: this tested nothing";
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_EQ(kilnd.wait(), 0);
}

// A config file sets what flags set; a flag on the command line wins over it;
// a bad line stops kilnd at start, naming the file and the line.
TEST(Kilnd, AConfigFileSetsWhatFlagsSetAndFlagsWin) {
  std::string dir = ::testing::TempDir() + "kiln_config_" + std::to_string(getpid()) + "/";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "token") << "from-the-config\n";
  std::ofstream(dir + "other") << "from-the-flag\n";
  std::ofstream(dir + "kilnd.conf") << "# kilnd's settings\n"
                                    << "log-level = warn\n"
                                    << "token-file = " << dir << "token   # the token\n"
                                    << "workers 1\n"
                                    << "max-domain-dims = 3\n";
  auto check_with = [](Kilnd& kilnd, const std::string& token) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::CheckRequest request;
    *request.mutable_op() = example("matmul");
    v1::CheckResponse response;
    return kilnd.stub().Check(&ctx, request, &response).error_code();
  };
  {
    Kilnd kilnd({"--config", dir + "kilnd.conf"});
    EXPECT_EQ(check_with(kilnd, ""), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(check_with(kilnd, "from-the-config"), grpc::StatusCode::OK);
    // The config's limit: batch_matmul's C has four iterators (b, i, j, k).
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer from-the-config");
    v1::CheckRequest request;
    *request.mutable_op() = example("batch_matmul");
    v1::CheckResponse response;
    grpc::Status s = kilnd.stub().Check(&ctx, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("more than the limit of 3 (max_domain_dims"),
              std::string::npos)
        << s.error_message();
    EXPECT_EQ(kilnd.stop(), 0);
  }
  {
    Kilnd kilnd({"--config", dir + "kilnd.conf", "--token-file", dir + "other"});
    EXPECT_EQ(check_with(kilnd, "from-the-config"), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(check_with(kilnd, "from-the-flag"), grpc::StatusCode::OK);
    EXPECT_EQ(kilnd.stop(), 0);
  }
  std::ofstream(dir + "bad.conf") << "workers = 2\n\nqueue-size = 3\n";
  std::string cmd = std::string(KILND_BINARY) + " --config " + dir + "bad.conf 2> " + dir + "err";
  int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  std::ifstream err_in(dir + "err");
  std::string err((std::istreambuf_iterator<char>(err_in)), {});
  EXPECT_NE(err.find("kilnd: unknown option '--queue-size' (at " + dir + "bad.conf:3)"),
            std::string::npos)
      << err;
  // A last line without its value takes none from the command line after it.
  std::ofstream(dir + "short.conf") << "workers = 2\nlisten\n";
  cmd = std::string(KILND_BINARY) + " --config " + dir + "short.conf --workers 1 2> " + dir + "err";
  status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  std::ifstream short_in(dir + "err");
  err.assign(std::istreambuf_iterator<char>(short_in), {});
  EXPECT_NE(err.find("kilnd: --listen needs a value (at " + dir + "short.conf:2)"),
            std::string::npos)
      << err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::testing
