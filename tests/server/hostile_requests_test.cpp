// Hostile requests against a real kilnd over gRPC: each gets its expected
// status and a message that says what is wrong (and where), and kilnd serves
// the next request. Kernels that crash, loop forever or allocate without
// bound run in kiln-runner and fail their request only.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "deep_operator.h"
#include "kiln/v1/service.grpc.pb.h"
#include "kilnd_process.h"
#include "programs.h"
#include "test_certs.h"

namespace kiln::testing {
namespace {

constexpr const char* kToken = "hostile-requests-token";

v1::Operator text(const std::string& source, const std::string& name = "") {
  v1::Operator op;
  op.mutable_source()->set_text(source);
  op.mutable_source()->set_filename("hostile.kiln");
  op.mutable_source()->set_name(name);
  return op;
}

// y[i] = x[i] + 1 over n: what every healthy request after a hostile one runs.
const char* kHealthy =
    "func healthy { param n; constraint n > 0; input x : f32[n]; output y : f32[n];\n"
    "  compute c(i) in 0 <= i < n: y[i] = x[i] + 1.0; }";

// A call to kilnd: which method, with what.
struct Call {
  enum Method { Check, Emit, Compile, Run, Measure } method = Check;
  v1::Operator op;
  std::function<void(v1::CompileOptions&)> options = nullptr;
  std::function<void(v1::RunRequest&)> run = nullptr;  // Run's own fields
  std::function<void(v1::EmitRequest&)> emit = nullptr;
  std::string token = kToken;  // "" for none
  std::optional<std::chrono::milliseconds> deadline{};
  std::function<void(v1::MeasureRequest&)> measure = nullptr;  // Measure's own fields
  std::vector<std::string> more_tokens{};                      // further authorization values
};

grpc::Status send(v1::Compiler::Stub& stub, const Call& c) {
  grpc::ClientContext ctx;
  if (!c.token.empty()) ctx.AddMetadata("authorization", "Bearer " + c.token);
  for (const std::string& t : c.more_tokens) ctx.AddMetadata("authorization", "Bearer " + t);
  if (c.deadline) ctx.set_deadline(std::chrono::system_clock::now() + *c.deadline);
  v1::CompileOptions options;
  if (c.options) c.options(options);
  switch (c.method) {
    case Call::Check: {
      v1::CheckRequest r;
      *r.mutable_op() = c.op;
      *r.mutable_options() = options;
      v1::CheckResponse out;
      return stub.Check(&ctx, r, &out);
    }
    case Call::Emit: {
      v1::EmitRequest r;
      *r.mutable_op() = c.op;
      *r.mutable_options() = options;
      r.set_stage(v1::LOOPS);
      if (c.emit) c.emit(r);
      v1::EmitResponse out;
      return stub.Emit(&ctx, r, &out);
    }
    case Call::Compile: {
      v1::CompileRequest r;
      *r.mutable_op() = c.op;
      *r.mutable_options() = options;
      v1::CompileResponse out;
      return stub.Compile(&ctx, r, &out);
    }
    case Call::Run: {
      v1::RunRequest r;
      *r.mutable_op() = c.op;
      *r.mutable_options() = options;
      if (c.run) c.run(r);
      v1::RunResponse out;
      return stub.Run(&ctx, r, &out);
    }
    case Call::Measure: {
      v1::MeasureRequest r;
      *r.mutable_op() = c.op;
      *r.mutable_options() = options;
      r.set_key("any");
      if (c.measure) c.measure(r);
      v1::MeasureResponse out;
      return stub.Measure(&ctx, r, &out);
    }
  }
  return grpc::Status::CANCELLED;
}

v1::Operator model_ref(const std::string& sha) {
  v1::Operator op;
  op.mutable_model()->set_sha256(sha);
  op.mutable_model()->set_filename("m.onnx");
  return op;
}

struct Hostile {
  std::string what;
  Call call;
  grpc::StatusCode code;
  std::string expect;  // a part of the message
};

v1::Operator named_file(const std::string& source, const std::string& filename) {
  v1::Operator op = text(source);
  op.mutable_source()->set_filename(filename);
  return op;
}

// A source of n funcs with 64-character names: a message listing them is long.
std::string many_funcs(int n) {
  std::string out;
  for (int k = 0; k < n; ++k)
    out += "func f" + std::to_string(k) + std::string(60, 'x') +
           " { output y : f32[1]; compute c(i) in 0 <= i < 1: y[i] = 1.0; }\n";
  return out;
}

std::string nested(int depth) {
  std::string e = "x[0]";
  for (int k = 0; k < depth; ++k) e = "(" + e + " + 1.0)";
  return "func deep { input x : f32[1]; output y : f32[1];\n compute c(i) in 0 <= i < 1: y[i] = " +
         e + "; }";
}

std::vector<Hostile> hostile_requests() {
  std::string dims, domain;
  for (int k = 0; k < 32; ++k) {
    dims += (k ? ", i" : "i") + std::to_string(k);
    domain += (k ? ", 0 <= i" : "0 <= i") + std::to_string(k) + " < 2";
  }
  const std::string matmul = read_example("matmul");
  const std::string endless =
      "func endless { param n; constraint n > 0; input x : f32[1]; output y : f32[1];\n"
      "  compute c(i, j, k) in 0 <= i < n, 0 <= j < n, 0 <= k < n: y[0] += x[0]; }";
  std::string crashme = kHealthy;
  crashme.replace(crashme.find("healthy"), 7, "crashme");
  auto with_n = [](int64_t n) {
    return [n](v1::RunRequest& r) { (*r.mutable_runtime_params())["n"] = n; };
  };
  using grpc::StatusCode;
  return {
      {"an empty operator",
       {Call::Check, {}},
       StatusCode::INVALID_ARGUMENT,
       "op: the request has no operator"},
      {"an unknown buffer",
       {Call::Check, text("func f { output y : f32[4];\n compute c(i) in 0 <= i < 4: y[i] = "
                          "z[i]; }")},
       StatusCode::INVALID_ARGUMENT,
       "hostile.kiln:2:37: validate error: unknown buffer 'z'"},
      {"a name the source lacks",
       {Call::Check, text(kHealthy, "nope")},
       StatusCode::INVALID_ARGUMENT,
       "no func or graph 'nope' in the source (it has: healthy)"},
      {"bytes that are not .kiln",
       {Call::Check, text(std::string("\0\xff junk", 7))},
       StatusCode::INVALID_ARGUMENT,
       "hostile.kiln:1:1: parse error: unexpected byte 0x00"},
      {"a 10^9-point domain over 4 GB buffers, run",
       {Call::Run, text("func big { input x : f32[1000000000]; output y : f32[1000000000];\n"
                        " compute c(i) in 0 <= i < 1000000000: y[i] = x[i]; }")},
       StatusCode::RESOURCE_EXHAUSTED,
       "cannot allocate a buffer of f32[1000000000]: 4000000000 bytes, more than its limit of "
       "1024 MiB"},
      {"a 10,000-deep expression",
       {Call::Check, text(nested(10'000))},
       StatusCode::INVALID_ARGUMENT,
       "parse error: expression is nested too deeply (the limit "
       "is 256 levels)"},
      {"a 10,000-deep structured expression",
       {Call::Check, deep_operator(10'000, 1.0)},
       StatusCode::INVALID_ARGUMENT,
       "its messages nest deeper than 600 levels"},
      {"a 32-dimensional domain",
       {Call::Check, text("func f { output y : f32[1];\n compute c(" + dims + ") in " + domain +
                          ": y[0] += 1.0; }")},
       StatusCode::INVALID_ARGUMENT,
       "computation 'c' has 32 iterators, more than the limit of 16 (max_domain_dims"},
      {"a source past max_source_bytes",
       {Call::Check, text(std::string(17 << 20, '#'))},
       StatusCode::INVALID_ARGUMENT,
       "the source is larger than the limit of 16777216 bytes"},
      {"a message past kilnd's limit",
       {Call::Check, text(std::string(40 << 20, '#'))},
       StatusCode::RESOURCE_EXHAUSTED,
       ""},
      {"an illegal schedule",
       {Call::Check, text("func f { input x : f32[8]; output y : f32[8];\n"
                          " compute a(i) in 0 <= i < 8: y[i] = x[i];\n"
                          " compute b(i) in 1 <= i < 8: y[i] = y[i - 1] + 1.0;\n"
                          " schedule { a.after(b, root); } }")},
       StatusCode::INVALID_ARGUMENT,
       "legality error"},
      {"unroll_explicit of 10^6",
       {Call::Check, text("func f { input x : f32[1000000]; output y : f32[1000000];\n"
                          " compute c(i) in 0 <= i < 1000000: y[i] = x[i];\n"
                          " schedule { c.tag(i, unroll_explicit); } }")},
       StatusCode::INVALID_ARGUMENT,
       "more than the limit of 65536 (unrolled copies"},
      {"a knob value that is not a candidate",
       {Call::Check, text(matmul), [](v1::CompileOptions& o) { (*o.mutable_set())["TI"] = 3; }},
       StatusCode::INVALID_ARGUMENT,
       "value 3 for knob TI is not one of its candidates"},
      {"an unknown target",
       {Call::Compile, text(matmul),
        [](v1::CompileOptions& o) { o.mutable_target()->set_triple("sparc-sun-solaris"); }},
       StatusCode::INVALID_ARGUMENT,
       "target 'sparc-sun-solaris' is not supported"},
      {"an unknown pass",
       {Call::Compile, text(matmul), [](v1::CompileOptions& o) { o.add_required_passes("nope"); }},
       StatusCode::INVALID_ARGUMENT,
       "unknown pass 'nope' in required passes"},
      {"an opt level of 7",
       {Call::Compile, text(matmul), [](v1::CompileOptions& o) { o.set_opt_level(7); }},
       StatusCode::INVALID_ARGUMENT,
       "options.opt_level: 7 is not a level (0 to 3)"},
      {"no stage to emit",
       {Call::Emit, text(kHealthy), nullptr, nullptr,
        [](v1::EmitRequest& r) { r.set_stage(v1::STAGE_UNSPECIFIED); }},
       StatusCode::INVALID_ARGUMENT,
       "stage: set one of"},
      {"a graph to Compile with a param set",
       {Call::Compile, text(read_example("conv_bn_relu"), "block"),
        [](v1::CompileOptions& o) { (*o.mutable_set())["N"] = 2; }},
       StatusCode::INVALID_ARGUMENT,
       "options.set N: set applies to funcs; graph block binds its operators' params"},
      {"a model kilnd does not hold",
       {Call::Compile, model_ref(std::string(64, 'e'))},
       StatusCode::NOT_FOUND,
       "op.model.sha256: kilnd has no blob eeee"},
      {"a model named by what is not a hash",
       {Call::Run, model_ref("../../etc/passwd")},
       StatusCode::INVALID_ARGUMENT,
       "op.model.sha256: '../../etc/passwd' is not a SHA-256"},
      {"a kernel that segfaults (kiln-runner's test hook, for a func named crashme)",
       {Call::Run, text(crashme)},
       StatusCode::INTERNAL,
       "the kernel's runner crashed with SIGSEGV"},
      {"a kernel that loops forever",
       {Call::Run, text(endless), nullptr, with_n(1 << 16)},
       StatusCode::RESOURCE_EXHAUSTED,
       "the run took longer than its limit of 3000 ms"},
      {"a kernel that allocates without bound",
       {Call::Run,
        text("func grow { param n; constraint n > 0; input x : f32[1]; output y : f32[n];\n"
             " compute c(i) in 0 <= i < n: y[i] = x[0]; }"),
        nullptr, with_n(int64_t{3} << 28)},
       StatusCode::RESOURCE_EXHAUSTED,
       "more than its limit of 1024 MiB of address space"},
      {"CSR offsets that break their declared spec",
       {Call::Run, text(read_example("segment_sum")), nullptr,
        [](v1::RunRequest& r) {
          (*r.mutable_runtime_params())["m"] = 3;
          v1::BufferData* d = r.add_inputs();
          d->set_name("offsets");
          d->add_shape(4);
          for (int64_t v : {0, 9, 5, 200}) d->mutable_ints()->add_values(v);
        }},
       StatusCode::INVALID_ARGUMENT,
       "offsets[2] = 5 is below offsets[1] = 9"},
      {"an input of the wrong shape",
       {Call::Run, text(kHealthy), nullptr,
        [](v1::RunRequest& r) {
          (*r.mutable_runtime_params())["n"] = 4;
          v1::BufferData* d = r.add_inputs();
          d->set_name("x");
          d->add_shape(3);
          for (int k = 0; k < 3; ++k) d->mutable_floats()->add_values(k);
        }},
       StatusCode::INVALID_ARGUMENT,
       "input x is f32[3] but healthy declares it f32[4] here"},
      {"a division by zero in the kernel",
       {Call::Run,
        text("func div { input x : i32[2]; output y : i32[2];\n"
             " compute c(i) in 0 <= i < 2: y[i] = 7 / x[i]; }"),
        nullptr,
        [](v1::RunRequest& r) {
          v1::BufferData* d = r.add_inputs();
          d->set_name("x");
          d->add_shape(2);
          for (int64_t v : {1, 0}) d->mutable_ints()->add_values(v);
        }},
       StatusCode::INVALID_ARGUMENT,
       "run error: integer division by zero"},
      {"a Run for another machine",
       {Call::Run, text(kHealthy),
        [](v1::CompileOptions& o) { o.mutable_target()->set_triple("aarch64-linux-gnu"); }},
       StatusCode::INVALID_ARGUMENT,
       "Run compiles for the server's own machine"},
      {"a negative thread count",
       {Call::Run, text(kHealthy), nullptr, [](v1::RunRequest& r) { r.set_threads(-4); }},
       StatusCode::INVALID_ARGUMENT,
       "threads: -4 is negative"},
      // Strings and numbers checked at the boundary, before any work, each naming its field;
      // a client's long string is not echoed back whole (issue 45's cases).
      {"a 100,000-byte filename",
       {Call::Check, named_file(kHealthy, std::string(100'000, 'f')), nullptr, nullptr, nullptr,
        kToken, std::chrono::seconds(5)},
       StatusCode::INVALID_ARGUMENT,
       "source.filename: 100000 bytes, more than the 4096 a field may hold"},
      {"a NUL inside the operator's name",
       {Call::Check, text(kHealthy, std::string("healthy\0evil", 12)), nullptr, nullptr, nullptr,
        kToken, std::chrono::seconds(5)},
       StatusCode::INVALID_ARGUMENT,
       "source.name: holds a NUL byte (byte 7 of 12)"},
      {"a NUL inside the target's CPU",
       {Call::Compile, text(kHealthy),
        [](v1::CompileOptions& o) { o.mutable_target()->set_cpu(std::string("znver4\0x", 8)); }},
       StatusCode::INVALID_ARGUMENT,
       "options.target.cpu: holds a NUL byte"},
      {"a 100,000-byte name to set",
       {Call::Check, text(matmul),
        [](v1::CompileOptions& o) { (*o.mutable_set())[std::string(100'000, 'M')] = 1; }, nullptr,
        nullptr, kToken, std::chrono::seconds(5)},
       StatusCode::INVALID_ARGUMENT,
       "options.set key: 100000 bytes, more than the 1024 a name may hold"},
      {"M set to 2^63 - 1",
       {Call::Check, text(matmul),
        [](v1::CompileOptions& o) { (*o.mutable_set())["M"] = INT64_MAX; }},
       StatusCode::INVALID_ARGUMENT,
       "buffer A would be f32[9223372036854775807, 128] with M = 9223372036854775807"},
      {"an input of a negative extent",
       {Call::Run, text(kHealthy), nullptr,
        [](v1::RunRequest& r) {
          v1::BufferData* d = r.add_inputs();
          d->set_name("x");
          d->add_shape(-1);
          d->add_shape(128);
        }},
       StatusCode::INVALID_ARGUMENT,
       "inputs[0].shape[0]: -1 is a negative extent"},
      {"a compile-time param given as a run-time one",
       {Call::Run, text(matmul), nullptr,
        [](v1::RunRequest& r) { (*r.mutable_runtime_params())["M"] = 128; }},
       StatusCode::INVALID_ARGUMENT,
       "param M of matmul is fixed when it is compiled (M = 128)"},
      {"a run-time param the func lacks",
       {Call::Run, text(kHealthy), nullptr,
        [](v1::RunRequest& r) { (*r.mutable_runtime_params())["zz"] = 3; }},
       StatusCode::INVALID_ARGUMENT,
       "healthy has no run-time param named zz (its run-time params: n)"},
      {"a Measure whose counts are all -1",
       {.method = Call::Measure,
        .op = text(kHealthy),
        .measure =
            [](v1::MeasureRequest& r) {
              v1::MeasureSettings* m = r.mutable_settings();
              m->set_warmup(-1);
              m->set_repeat(-1);
              m->set_number(-1);
              m->set_time_limit_ms(-1);
              m->set_threads(-1);
            }},
       StatusCode::INVALID_ARGUMENT,
       "settings.warmup: -1 is negative"},
      {"a Measure time limit past kilnd's ceiling",
       {.method = Call::Measure,
        .op = text(kHealthy),
        .measure = [](v1::MeasureRequest& r) { r.mutable_settings()->set_time_limit_ms(600'000); }},
       StatusCode::INVALID_ARGUMENT,
       "settings.time_limit_ms: 600000 ms is more than this kilnd allows a measurement (60000 ms, "
       "--measure-timeout-ms)"},
      {"a status message past 4096 bytes is cut",
       {Call::Check, text(many_funcs(200), "nope")},
       StatusCode::INVALID_ARGUMENT,
       " bytes in all)"},
      {"two authorization values",
       {.method = Call::Check, .op = text(kHealthy), .more_tokens = {"not-it"}},
       StatusCode::UNAUTHENTICATED,
       "the request carries 2 authorization values: send one"},
      {"no token",
       {Call::Check, text(kHealthy), nullptr, nullptr, nullptr, ""},
       StatusCode::UNAUTHENTICATED,
       "this kilnd requires a token"},
      {"a wrong token",
       {Call::Check, text(kHealthy), nullptr, nullptr, nullptr, "not-it"},
       StatusCode::UNAUTHENTICATED,
       "the request's token is not this kilnd's"},
      {"a 1 ms deadline",
       {Call::Compile, text(matmul), [](v1::CompileOptions& o) { (*o.mutable_set())["M"] = 96; },
        nullptr, nullptr, kToken, std::chrono::milliseconds(1)},
       StatusCode::DEADLINE_EXCEEDED,
       ""},
  };
}

class HostileRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string dir = ::testing::TempDir();
    token_file_ = dir + "kiln_hostile_token_" + std::to_string(getpid());
    std::ofstream(token_file_) << kToken << "\n";
    // The runner asks for a crash for a func named crashme (kiln-runner's test hook).
    setenv("KILN_RUNNER_TEST_CRASH", "crashme", 1);
    kilnd_ = new KilndProcess(KILND_BINARY, {"--token-file", token_file_, "--run-timeout-ms",
                                             "3000", "--run-memory-mb", "1024"});
    unsetenv("KILN_RUNNER_TEST_CRASH");
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    stub_ = v1::Compiler::NewStub(grpc::CreateCustomChannel(
                                      kilnd_->address(), grpc::InsecureChannelCredentials(), args))
                .release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    kilnd_->terminate();
    EXPECT_EQ(kilnd_->wait(), 0);
    delete kilnd_;
    std::remove(token_file_.c_str());
  }

  static void expect_serving() {
    Call healthy{Call::Run, text(kHealthy)};
    healthy.run = [](v1::RunRequest& r) { r.set_check(true); };
    grpc::Status s = send(*stub_, healthy);
    EXPECT_TRUE(s.ok()) << "kilnd no longer serves: " << s.error_message();
  }

  static KilndProcess* kilnd_;
  static v1::Compiler::Stub* stub_;
  static std::string token_file_;
};
KilndProcess* HostileRequests::kilnd_ = nullptr;
v1::Compiler::Stub* HostileRequests::stub_ = nullptr;
std::string HostileRequests::token_file_;

TEST_F(HostileRequests, EachGetsItsStatusAndMessageAndKilndServesOn) {
  std::vector<Hostile> cases = hostile_requests();
  ASSERT_GE(cases.size(), 25u);
  for (const Hostile& h : cases) {
    SCOPED_TRACE(h.what);
    grpc::Status s = send(*stub_, h.call);
    EXPECT_EQ(s.error_code(), h.code) << s.error_message();
    EXPECT_NE(s.error_message().find(h.expect), std::string::npos) << s.error_message();
    EXPECT_LE(s.error_message().size(), 4096u);
    expect_serving();
  }
}

// kilnd's peak resident memory (VmHWM), in bytes.
int64_t peak_rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// A 200-byte Emit that asks kilnd to fold a 256 MiB constant: not folded (past max_fold_bytes,
// a note says so), answered at once, and kilnd's memory stays where it was; a small constant is
// folded, by the interpreter (kilnd runs no generated code of its own).
TEST(HostileFolding, AHugeConstantIsLeftUnfoldedAndASmallOneIsFolded) {
  KilndProcess kilnd(KILND_BINARY, {"--max-fold-bytes", "1048576"});
  auto stub = v1::Compiler::NewStub(
      grpc::CreateChannel(kilnd.address(), grpc::InsecureChannelCredentials()));
  const std::string relu =
      "func relu { param N = 16; input X : f32[N]; output Y : f32[N];\n"
      "  compute r(n) in 0 <= n < N: Y[n] = max(X[n], 0.0); }\n";
  auto emit = [&](const std::string& graph, v1::EmitResponse* out) {
    v1::EmitRequest r;
    *r.mutable_op() = text(relu + graph, "g");
    r.set_stage(v1::GRAPH);
    r.mutable_options()->set_opt_level(3);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stub->Emit(&ctx, r, out);
  };
  int64_t before = peak_rss(kilnd.pid());
  v1::EmitResponse huge;
  grpc::Status s =
      emit("graph g { const w : f32[67108864] = random(1); y = relu(w); output y; }", &huge);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(huge.text().find("y = relu(w, N = 67108864);"), std::string::npos) << huge.text();
  ASSERT_EQ(huge.notes_size(), 1);
  EXPECT_NE(huge.notes(0).message().find("kept y = relu(...) in the graph: folding it takes "
                                         "1073741824 bytes, more than the limit of 1048576 "
                                         "(max_fold_bytes"),
            std::string::npos)
      << huge.notes(0).message();
  EXPECT_LT(peak_rss(kilnd.pid()) - before, int64_t{64} << 20);

  v1::EmitResponse small;
  s = emit("graph g { const w : f32[16] = random(1); y = relu(w); output y; }", &small);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(small.text().find("const y : f32[16] = ["), std::string::npos) << small.text();
  EXPECT_EQ(small.notes_size(), 0);
}

// A client that goes away mid-run: kilnd kills its runner and frees the
// worker, so a request behind it (one worker) does not wait for the run's
// 60 s limit.
TEST(HostileCancel, ACancelledRequestStopsItsWorkAndFreesItsWorker) {
  KilndProcess kilnd(KILND_BINARY, {"--workers", "1", "--run-timeout-ms", "60000"});
  auto stub = v1::Compiler::NewStub(
      grpc::CreateChannel(kilnd.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::RunRequest endless;
  *endless.mutable_op() = text(
      "func endless { param n; constraint n > 0; input x : f32[1]; output y : f32[1];\n"
      "  compute c(i, j, k) in 0 <= i < n, 0 <= j < n, 0 <= k < n: y[0] += x[0]; }");
  (*endless.mutable_runtime_params())["n"] = 1 << 16;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    ctx.TryCancel();
  });
  v1::RunResponse out;
  grpc::Status s = stub->Run(&ctx, endless, &out);
  canceller.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);

  grpc::ClientContext next;
  next.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::CheckRequest check;
  *check.mutable_op() = text(kHealthy);
  v1::CheckResponse checked;
  grpc::Status n = stub->Check(&next, check, &checked);
  EXPECT_TRUE(n.ok()) << "the cancelled run still holds the worker: " << n.error_message();
}

// Plaintext to a TLS port is not served; TLS with the CA is.
TEST(HostileTls, PlaintextToTheTlsPortIsRefused) {
  TestCerts certs;
  ASSERT_TRUE(certs.made) << certs.log();
  KilndProcess kilnd(KILND_BINARY,
                     {"--tls-cert", certs("server.pem"), "--tls-key", certs("server.key")});
  v1::CheckRequest check;
  *check.mutable_op() = text(kHealthy);
  v1::CheckResponse out;
  grpc::ClientContext plain_ctx;
  plain_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto plain = v1::Compiler::NewStub(
      grpc::CreateChannel(kilnd.address(), grpc::InsecureChannelCredentials()));
  grpc::Status s = plain->Check(&plain_ctx, check, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();

  std::ifstream ca_in(certs("ca.pem"));
  std::string ca((std::istreambuf_iterator<char>(ca_in)), {});
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca;
  auto tls = v1::Compiler::NewStub(grpc::CreateChannel(kilnd.address(), grpc::SslCredentials(ssl)));
  grpc::ClientContext tls_ctx;
  s = tls->Check(&tls_ctx, check, &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace kiln::testing
