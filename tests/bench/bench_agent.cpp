// The cost of a measurement on an agent: one kilnd with its local agent
// (kilnd --local-agent) on loopback, and an empty kernel (one element copied)
// measured R times (default 200) with one call a round, so the time is the
// round trip itself: the Measure request, the compile cache hit, the job sent
// to the agent (the artifact only the first time), the forked child that
// loads the kernel from memory and runs it, and the result back. Beside it,
// as the baseline, kilnd's own Run of the same kernel (a kiln-runner child
// per request). Prints one JSON line: the p50 and p99 of both, their ratio,
// and the agent's own time in its child (load to last call).
//
//   build/tests/bench/bench_agent [--quick] [--repeat R]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.h"
#include "kiln/json.h"
#include "kiln/target.h"
#include "kiln/v1/service.grpc.pb.h"
#include "kilnd_process.h"

namespace {

using namespace kiln;

const char* kUsage =
    "usage: bench_agent [--quick] [--repeat R]\n"
    "  R Measure requests of an empty kernel on kilnd's local agent (200), and R Run\n"
    "  requests of it on kilnd as the baseline; --quick: 20 of each.\n";

const char* kEmpty =
    "func empty { input x : f32[1]; output y : f32[1];\n"
    "  compute c(i) in 0 <= i < 1: y[i] = x[i]; }";

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  bench::Options opts = bench::parse_options(argc, argv, kUsage);
  int repeat = opts.repeat > 0 ? opts.repeat : opts.quick ? 20 : 200;
  kiln::testing::KilndProcess kilnd(KILND_BINARY, {"--local-agent"});
  auto stub = v1::Compiler::NewStub(
      grpc::CreateChannel(kilnd.address(), grpc::InsecureChannelCredentials()));

  v1::MeasureRequest measure;
  measure.mutable_op()->mutable_source()->set_text(kEmpty);
  measure.set_key("local");
  measure.mutable_settings()->set_number(1);
  measure.mutable_settings()->set_repeat(1);
  v1::RunRequest run;
  run.mutable_op()->mutable_source()->set_text(kEmpty);
  run.set_bench(true);
  run.set_number(1);
  run.set_repeat(1);

  std::vector<double> agent_ms, agent_child_ms, run_ms;
  int failures = 0;
  std::string first_failure;
  auto failed = [&](const std::string& what) {
    if (failures++ == 0) first_failure = what;
  };
  // One of each first: the agent joins, the kernel is compiled and cached, the agent keeps it.
  for (int k = -1; k < repeat; ++k) {
    {
      v1::MeasureResponse out;
      grpc::ClientContext ctx;
      auto t0 = std::chrono::steady_clock::now();
      grpc::Status s = stub->Measure(&ctx, measure, &out);
      double ms = ms_since(t0);
      if (!s.ok() || out.result().error() != v1::MeasureResult::OK) {
        failed(s.ok() ? out.result().message() : s.error_message());
      } else if (k >= 0) {
        agent_ms.push_back(ms);
        agent_child_ms.push_back(out.result().wall_ms());
      }
    }
    {
      v1::RunResponse out;
      grpc::ClientContext ctx;
      auto t0 = std::chrono::steady_clock::now();
      grpc::Status s = stub->Run(&ctx, run, &out);
      double ms = ms_since(t0);
      if (!s.ok()) {
        failed(s.error_message());
      } else if (k >= 0) {
        run_ms.push_back(ms);
      }
    }
  }
  stub.reset();
  kilnd.terminate();
  int kilnd_status = kilnd.wait();

  Target host = Target::host();
  bool avx512 = host.features.find("+avx512f") != std::string::npos;
  bool avx2 = host.features.find("+avx2") != std::string::npos;
  double agent_p50 = percentile(agent_ms, 0.5), run_p50 = percentile(run_ms, 0.5);
  JsonObject line;
  line.str("bench", "agent_roundtrip_empty");
  line.str("cpu", host.cpu).str("vector", avx512 ? "avx512" : avx2 ? "avx2" : "other");
  line.integer("cores", std::thread::hardware_concurrency());
  line.integer("requests", repeat);
  line.num("measure_p50_ms", agent_p50, 4).num("measure_p99_ms", percentile(agent_ms, 0.99), 4);
  line.num("agent_child_p50_ms", percentile(agent_child_ms, 0.5), 4);
  line.str("baseline", "kilnd_run");
  line.num("run_p50_ms", run_p50, 4).num("run_p99_ms", percentile(run_ms, 0.99), 4);
  line.num("ratio", run_p50 > 0 ? agent_p50 / run_p50 : 0, 4);
  line.integer("failures", failures);
  std::printf("%s\n", line.done().c_str());
  if (failures > 0) std::fprintf(stderr, "bench_agent: first failure: %s\n", first_failure.c_str());
  if (kilnd_status != 0) std::fprintf(stderr, "bench_agent: kilnd exited with %d\n", kilnd_status);
  return failures == 0 && kilnd_status == 0 ? 0 : 1;
}
