// The Run method of kilnd's service core: every example runs in kiln-runner
// with --check and gives the checksums of an in-process kiln::run_kernel;
// given inputs are used, and data that breaks a value spec is refused naming
// the element before any kernel reads it; a kernel error, an endless loop, a
// runaway allocation, a crashing runner, a deadline and a cancellation each
// fail their request with its reason, and the service serves the next one.
#include "kiln/run.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "deep_operator.h"
#include "example_cases.h"
#include "kiln/frontend.h"
#include "kiln/v1/service.pb.h"
#include "programs.h"
#include "service.h"

namespace kiln::testing {
namespace {

server::ServiceOptions run_options() {
  server::ServiceOptions o;
  o.runner_path = KILN_RUNNER_BINARY;
  o.run_timeout_ms = 20'000;
  return o;
}

v1::RunRequest run_request(const std::string& text, const std::string& file) {
  v1::RunRequest r;
  r.mutable_op()->mutable_source()->set_text(text);
  r.mutable_op()->mutable_source()->set_filename(file);
  return r;
}

// One more request that must succeed: the service is still serving.
void expect_serving(server::Service& service) {
  v1::RunRequest r = run_request(
      "func ok { param n; constraint n > 0; input x : f32[n]; output y : f32[n];\n"
      "  compute c(i) in 0 <= i < n: y[i] = x[i] + 1.0; }",
      "ok.kiln");
  r.set_check(true);
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(out.check().ok());
}

TEST(ServiceRun, EveryExampleRunsCheckedAndMatchesAnInProcessRun) {
  server::Service service(run_options());
  for (const ExampleCase& c : example_cases()) {
    SCOPED_TRACE(c.example);
    v1::RunRequest r = run_request(read_example(c.example), c.example + ".kiln");
    (*r.mutable_options()->mutable_set()).insert(c.params.front().begin(), c.params.front().end());
    r.mutable_runtime_params()->insert(c.runtime.begin(), c.runtime.end());
    r.set_check(true);
    r.set_seed(7);
    v1::RunResponse out;
    server::Status s = service.run(r, &out);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_TRUE(out.check().ok()) << out.check().message();
    EXPECT_GT(out.run_ms(), 0);

    RunSpec spec;
    spec.runtime_params = c.runtime;
    spec.seed = 7;
    RunOutcome local =
        run_kernel(ir::apply_overrides(parse_one(read_example(c.example)), c.params.front()), spec);
    ASSERT_EQ(out.checksums_size(), static_cast<int>(local.outputs.size()));
    for (size_t k = 0; k < local.outputs.size(); ++k) {
      const v1::OutputChecksum& w = out.checksums(static_cast<int>(k));
      EXPECT_EQ(w.name(), local.outputs[k].buf);
      EXPECT_EQ(std::vector<int64_t>(w.shape().begin(), w.shape().end()), local.outputs[k].shape);
      EXPECT_EQ(w.checksum(), local.outputs[k].checksum);
    }
    for (const auto& [name, value] : local.params) EXPECT_EQ(out.params().at(name), value);
    EXPECT_EQ(std::vector<std::string>(out.chosen().begin(), out.chosen().end()), local.chosen);
  }
}

// A graph runs in the runner too, after its graph passes, and gives the
// checksums of an in-process kiln::run_graph; Compile refuses a graph.
TEST(ServiceRun, AGraphRunsCheckedAndMatchesAnInProcessRun) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(read_example("conv_bn_relu"), "conv_bn_relu.kiln");
  r.mutable_op()->mutable_source()->set_name("block");
  r.set_check(true);
  r.set_seed(5);
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(out.check().ok()) << out.check().message();
  EXPECT_EQ(out.graph().calls(), 4);
  EXPECT_EQ(out.graph().calls_after_passes(), 1);
  EXPECT_EQ(out.graph().kernels(), 1);

  ir::Module m = frontend::parse_module(read_example("conv_bn_relu"), "conv_bn_relu.kiln");
  RunSpec spec;
  spec.seed = 5;
  GraphRunOutcome local = run_graph(*m.find_graph("block"), spec);
  ASSERT_EQ(out.checksums_size(), static_cast<int>(local.outputs.size()));
  for (size_t k = 0; k < local.outputs.size(); ++k) {
    EXPECT_EQ(out.checksums(static_cast<int>(k)).name(), local.outputs[k].buf);
    EXPECT_EQ(out.checksums(static_cast<int>(k)).checksum(), local.outputs[k].checksum);
  }

  v1::CompileRequest c;
  *c.mutable_op() = r.op();
  v1::CompileResponse compiled;
  s = service.compile(c, &compiled);  // a graph compiles whole: blob_test.cpp
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(compiled.artifact().kind(), "model");
  EXPECT_EQ(compiled.model().calls(), 1);
}

const char* kScale =
    "func scale { param n; constraint n > 0; input x : f32[n]; output y : f32[n];\n"
    "  compute c(i) in 0 <= i < n: y[i] = x[i] * 3.0; }";

TEST(ServiceRun, GivenInputsAreUsedAndOutputsReturned) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(kScale, "scale.kiln");
  (*r.mutable_runtime_params())["n"] = 4;
  v1::BufferData* x = r.add_inputs();
  x->set_name("x");
  x->add_shape(4);
  for (double v : {1.0, -2.0, 0.5, 10.0}) x->mutable_floats()->add_values(v);
  r.set_return_outputs(true);
  r.set_check(true);
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(out.outputs_size(), 1);
  const v1::BufferData& y = out.outputs(0);
  EXPECT_EQ(y.name(), "y");
  ASSERT_EQ(y.floats().values_size(), 4);
  EXPECT_EQ(y.floats().values(0), 3.0);
  EXPECT_EQ(y.floats().values(1), -6.0);
  EXPECT_EQ(y.floats().values(2), 1.5);
  EXPECT_EQ(y.floats().values(3), 30.0);
  EXPECT_EQ(out.checksums(0).checksum(), 28.5);
  EXPECT_TRUE(out.chosen().empty());
}

// A deeply nested structured operator runs: the runner reads its job with
// kilnd's nesting limit, not protobuf's default of 100 levels, which 120
// negations (two messages each) pass. As text each is `-(...)`, two of the
// language's 256 levels.
TEST(ServiceRun, ADeeplyNestedStructuredExpressionRuns) {
  server::Service service(run_options());
  v1::RunRequest r;
  *r.mutable_op() = deep_operator(120, 2.5);
  r.set_return_outputs(true);
  r.set_check(true);
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(out.check().ok()) << out.check().message();
  ASSERT_EQ(out.outputs_size(), 1);
  ASSERT_EQ(out.outputs(0).floats().values_size(), 1);
  EXPECT_EQ(out.outputs(0).floats().values(0), 2.5);
}

TEST(ServiceRun, BenchReturnsEveryRound) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(kScale, "scale.kiln");
  r.set_bench(true);
  r.set_repeat(3);
  r.set_number(10);
  r.set_threads(1);
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(out.bench().repeat(), 3);
  EXPECT_EQ(out.bench().number(), 10);
  EXPECT_EQ(out.bench().threads(), 1);
  ASSERT_EQ(out.bench().round_ms_size(), 3);
  EXPECT_GT(out.bench().median_ms(), 0);
  EXPECT_LE(out.bench().min_ms(), out.bench().median_ms());
  EXPECT_EQ(out.bench().flops(), 13);  // n = 13, one multiply per element
}

// Offsets that are not sorted would let the kernel read x out of bounds: the
// data is refused, naming the buffer, the element and its value.
TEST(ServiceRun, InputsThatBreakTheirValueSpecAreRefusedNamingTheElement) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(read_example("segment_sum"), "segment_sum.kiln");
  (*r.mutable_runtime_params())["m"] = 4;
  v1::BufferData* off = r.add_inputs();
  off->set_name("offsets");
  off->add_shape(5);
  for (int64_t v : {0, 50, 20, 100, 200}) off->mutable_ints()->add_values(v);
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("offsets[2] = 20"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("sorted"), std::string::npos) << s.message;

  // Out of range, above nnz = 200.
  off->mutable_ints()->set_values(4, 201);
  off->mutable_ints()->set_values(2, 60);
  s = service.run(r, &out);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("offsets[4] = 201"), std::string::npos) << s.message;
  expect_serving(service);
}

TEST(ServiceRun, MalformedGivenInputsAreRefused) {
  server::Service service(run_options());
  struct Case {
    std::string name;
    std::vector<int64_t> shape;
    bool floats;
    size_t count;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {"z", {13}, true, 13, "scale has no input 'z' (its inputs: x)"},
           {"y", {13}, true, 13, "scale has no input 'y'"},
           {"x", {13}, false, 13, "x is f32; give its values as floats"},
           {"x", {13}, true, 12, "the shape holds 13 elements but 12 values are given"},
           {"x", {12}, true, 12, "input x is f32[12] but scale declares it f32[13] here"},
       }) {
    SCOPED_TRACE(c.expected);
    v1::RunRequest r = run_request(kScale, "scale.kiln");
    v1::BufferData* x = r.add_inputs();
    x->set_name(c.name);
    for (int64_t e : c.shape) x->add_shape(e);
    for (size_t k = 0; k < c.count; ++k) {
      if (c.floats) {
        x->mutable_floats()->add_values(1.0);
      } else {
        x->mutable_ints()->add_values(1);
      }
    }
    v1::RunResponse out;
    server::Status s = service.run(r, &out);
    EXPECT_EQ(s.code, server::Code::InvalidArgument);
    EXPECT_NE(s.message.find(c.expected), std::string::npos) << s.message;
  }
}

TEST(ServiceRun, AKernelErrorIsTheCliMessage) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(
      "func div { param n; constraint n > 0; input x : i32[n]; output y : i32[n];\n"
      "  compute c(i) in 0 <= i < n: y[i] = 7 / x[i]; }",
      "div.kiln");
  (*r.mutable_runtime_params())["n"] = 3;
  v1::BufferData* x = r.add_inputs();
  x->set_name("x");
  x->add_shape(3);
  for (int64_t v : {1, 0, 2}) x->mutable_ints()->add_values(v);
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("run error"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("div.kiln:2:11: run error: integer division by zero"), std::string::npos)
      << s.message;
}

// 2^48 dependent additions: no run ends; the runner is killed at the limit.
const char* kEndless =
    "func endless { param n; constraint n > 0; input x : f32[1]; output y : f32[1];\n"
    "  compute c(i, j, k) in 0 <= i < n, 0 <= j < n, 0 <= k < n: y[0] += x[0]; }";

TEST(ServiceRun, AnEndlessKernelIsKilledAtTheRunTimeout) {
  server::ServiceOptions o = run_options();
  o.run_timeout_ms = 1500;
  server::Service service(o);
  v1::RunRequest r = run_request(kEndless, "endless.kiln");
  (*r.mutable_runtime_params())["n"] = int64_t{1} << 16;
  v1::RunResponse out;
  auto start = std::chrono::steady_clock::now();
  server::Status s = service.run(r, &out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(s.code, server::Code::ResourceExhausted);
  EXPECT_NE(s.message.find("longer than its limit of 1500 ms (kilnd --run-timeout-ms)"),
            std::string::npos)
      << s.message;
  expect_serving(service);
}

TEST(ServiceRun, TheRequestDeadlineStopsAnEndlessKernel) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(kEndless, "endless.kiln");
  (*r.mutable_runtime_params())["n"] = int64_t{1} << 16;
  v1::RunResponse out;
  server::CallOptions call;
  call.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1200);
  server::Status s = service.run(r, &out, call);
  EXPECT_EQ(s.code, server::Code::DeadlineExceeded);
  EXPECT_NE(s.message.find("deadline"), std::string::npos) << s.message;
}

TEST(ServiceRun, ACancelledRunIsKilled) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(kEndless, "endless.kiln");
  (*r.mutable_runtime_params())["n"] = int64_t{1} << 16;
  v1::RunResponse out;
  auto start = std::chrono::steady_clock::now();
  server::CallOptions call;
  call.cancelled = [&] {
    return std::chrono::steady_clock::now() - start > std::chrono::seconds(1);
  };
  server::Status s = service.run(r, &out, call);
  EXPECT_EQ(s.code, server::Code::Cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  expect_serving(service);
}

// Outputs of 3 GiB under an address-space limit of 1 GiB.
TEST(ServiceRun, ARunawayAllocationIsRefusedNamingTheMemoryLimit) {
  server::ServiceOptions o = run_options();
  o.run_memory_bytes = uint64_t{1} << 30;
  server::Service service(o);
  v1::RunRequest r = run_request(
      "func big { param n; constraint n > 0; input x : f32[1]; output y : f32[n];\n"
      "  compute c(i) in 0 <= i < n: y[i] = x[0]; }",
      "big.kiln");
  (*r.mutable_runtime_params())["n"] = int64_t{3} << 28;  // 3 GiB of f32
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  EXPECT_EQ(s.code, server::Code::ResourceExhausted);
  EXPECT_NE(s.message.find("limit of 1024 MiB"), std::string::npos) << s.message;
  expect_serving(service);
}

TEST(ServiceRun, ACrashingRunnerFailsOnlyItsRequest) {
  ASSERT_EQ(setenv("KILN_RUNNER_TEST_CRASH", "scale", 1), 0);
  server::Service service(run_options());
  v1::RunResponse out;
  server::Status s = service.run(run_request(kScale, "scale.kiln"), &out);
  unsetenv("KILN_RUNNER_TEST_CRASH");
  EXPECT_EQ(s.code, server::Code::Internal);
  EXPECT_NE(s.message.find("crashed with SIGSEGV"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("kilnd is unaffected"), std::string::npos) << s.message;
  expect_serving(service);
}

TEST(ServiceRun, AMissingRunnerIsReported) {
  server::ServiceOptions o = run_options();
  o.runner_path = "/nonexistent/kiln-runner";
  server::Service service(o);
  v1::RunResponse out;
  server::Status s = service.run(run_request(kScale, "scale.kiln"), &out);
  EXPECT_EQ(s.code, server::Code::Internal);
  EXPECT_NE(s.message.find("cannot start the runner /nonexistent/kiln-runner"), std::string::npos)
      << s.message;
}

TEST(ServiceRun, ATargetOtherThanTheServersIsRefused) {
  server::Service service(run_options());
  v1::RunRequest r = run_request(kScale, "scale.kiln");
  r.mutable_options()->mutable_target()->set_triple("aarch64-unknown-linux-gnu");
  v1::RunResponse out;
  server::Status s = service.run(r, &out);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("the server's own machine"), std::string::npos) << s.message;
}

}  // namespace
}  // namespace kiln::testing
