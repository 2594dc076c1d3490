// tests/bench/run.sh scale: the control plane of kilnd replicas sharing one PostgreSQL
// (docs/scale-out.md). 1, 2 and 4 replicas, each with 32 simulated agents (kiln-agent
// --simulate-ms: a job answered with one round after a fixed delay, no kernel run), and as
// many drivers as there are agents, spread over the replicas as tuning jobs would be, each
// keeping one measurement in the shared queue at a time (queued, polled for its end, again).
// A line per replica count: measurements a second against the ideal (agents / delay), and the
// dispatch latency (queued until a replica leased it, by the database's clock) and the
// round trip (queued until the driver had its end) at the median and the 99th percentile.
// What the agents would run is one small kernel, compiled once.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench_support.h"
#include "kiln/compile.h"
#include "kiln/digest.h"
#include "kiln/frontend.h"
#include "kiln/json.h"
#include "kilnd_process.h"
#include "postgres_server.h"
#include "shared_queue.h"
#include "spawned_process.h"
#include "wire.h"

namespace {

using kiln::testing::KilndProcess;
using kiln::testing::PostgresServer;
using kiln::testing::SpawnedProcess;

constexpr const char* kUsage =
    "usage: bench_scale [--quick] [--repeat SECONDS] [--sizes AGENTS_PER_REPLICA]\n"
    "  1, 2 and 4 kilnd replicas on one throwaway PostgreSQL, 32 simulated agents each\n"
    "  (--sizes N: N), each job answered after 100 ms; each count timed for --repeat seconds\n"
    "  (default 10). --quick: 1 and 2 replicas, 8 agents each, 4 s.\n";

constexpr const char* kKernel = R"(func scale {
  param N = 256;
  input A : f32[N];
  output B : f32[N];
  compute B(i) in 0 <= i < N:
    B[i] = A[i] * 2.0;
}
)";
constexpr int kDelayMs = 100;
constexpr const char* kKey = "simulated";

std::string beside_kilnd(const std::string& name) {
  // bench_scale lives in BUILD/tests/bench; kilnd in BUILD/server, kiln-agent in BUILD/agent.
  std::filesystem::path build =
      std::filesystem::canonical("/proc/self/exe").parent_path() / ".." / "..";
  return std::filesystem::canonical(build / name).string();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Round {
  int replicas = 0, agents = 0;
  int64_t tasks = 0, failed = 0;
  std::string first_failure;
  double seconds = 0;
  std::vector<double> dispatch_ms, round_trip_ms;
};

Round run(PostgresServer& pg, int replicas, int agents_each, double seconds,
          const std::string& token, const std::string& artifact_bytes) {
  Round out;
  out.replicas = replicas;
  out.agents = replicas * agents_each;
  std::string url = pg.create(fmt::format("scale_{}", replicas));
  std::vector<std::unique_ptr<KilndProcess>> kilnds;
  std::vector<std::unique_ptr<SpawnedProcess>> agents;
  for (int r = 0; r < replicas; ++r) {
    kilnds.push_back(std::make_unique<KilndProcess>(
        beside_kilnd("server/kilnd"),
        std::vector<std::string>{"--db", url, "--replica", fmt::format("r{}", r), "--agent-listen",
                                 "127.0.0.1:0", "--agent-token-file", token}));
    std::string line = kilnds.back()->read_line();  // "kilnd: agents on HOST:PORT"
    std::string at = line.substr(line.rfind(' ') + 1);
    for (int a = 0; a < agents_each; ++a)
      agents.push_back(std::make_unique<SpawnedProcess>(std::vector<std::string>{
          beside_kilnd("agent/kiln-agent"), "--server", at, "--key", kKey, "--token-file", token,
          "--id", fmt::format("a{}", a), "--simulate-ms", std::to_string(kDelayMs), "--log-level",
          "error"}));
  }
  // Drivers: a queue of its own for each replica's share of them (a connection pool each, as
  // each replica has for the jobs it drives).
  std::vector<std::unique_ptr<kiln::server::SharedQueue>> queues;
  for (int r = 0; r < replicas; ++r)
    queues.push_back(std::make_unique<kiln::server::SharedQueue>(
        url, fmt::format("driver{}", r), std::chrono::milliseconds(10'000)));
  auto joined = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (static_cast<int>(queues[0]->agents(kKey).size()) < out.agents) {
    if (std::chrono::steady_clock::now() > joined)
      throw std::runtime_error(
          fmt::format("only {} of {} agents joined", queues[0]->agents(kKey).size(), out.agents));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string sha = kiln::sha256_hex(artifact_bytes);
  queues[0]->put_artifact(sha, artifact_bytes);
  kiln::v1::MeasureRequest request;
  request.mutable_op()->mutable_source()->set_text(kKernel);
  request.mutable_op()->mutable_source()->set_filename("scale.kiln");
  request.set_key(kKey);
  request.mutable_settings()->set_repeat(1);
  request.mutable_settings()->set_number(1);
  (*request.mutable_runtime_params())["N"] = 256;  // every param's value, as a tuning job gives

  std::mutex mu;
  std::atomic<bool> stop{false};
  auto driver = [&](kiln::server::SharedQueue* q) {
    std::vector<double> dispatch, trip;
    int64_t failed = 0;
    while (!stop) {
      auto t0 = std::chrono::steady_clock::now();
      int64_t id = q->enqueue(0, request, sha);
      auto delay = std::chrono::milliseconds(2);
      std::optional<kiln::server::TaskEnd> end;
      while (!(end = q->take_end(id))) {
        std::this_thread::sleep_for(delay);
        delay = std::min(delay * 2, std::chrono::milliseconds(50));
      }
      trip.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      dispatch.push_back(end->queued_ms);
      if (!end->status.ok() || end->response.result().error() != kiln::v1::MeasureResult::OK) {
        if (failed++ == 0) {
          std::lock_guard<std::mutex> lock(mu);
          if (out.first_failure.empty())
            out.first_failure =
                end->status.ok() ? end->response.result().message() : end->status.message;
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out.dispatch_ms.insert(out.dispatch_ms.end(), dispatch.begin(), dispatch.end());
    out.round_trip_ms.insert(out.round_trip_ms.end(), trip.begin(), trip.end());
    out.failed += failed;
  };
  std::vector<std::thread> drivers;
  auto started = std::chrono::steady_clock::now();
  for (int d = 0; d < out.agents; ++d) drivers.emplace_back(driver, queues[d % replicas].get());
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& t : drivers) t.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  out.tasks = static_cast<int64_t>(out.round_trip_ms.size());
  queues.clear();
  agents.clear();
  for (auto& k : kilnds) k->terminate();
  for (auto& k : kilnds) k->wait();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::bench::Options opts = kiln::bench::parse_options(argc, argv, kUsage);
  if (!PostgresServer::available()) {
    std::fprintf(stderr, "bench_scale: %s\n", PostgresServer::missing().c_str());
    std::printf("{\"bench\":\"scale\",\"skipped\":\"%s\"}\n", PostgresServer::missing().c_str());
    return 1;
  }
  int agents_each = opts.sizes.empty() ? (opts.quick ? 8 : 32) : static_cast<int>(opts.sizes[0]);
  double seconds = opts.repeat > 0 ? opts.repeat : (opts.quick ? 4 : 10);
  std::vector<int> counts = opts.quick ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 4};

  // One small kernel for the host, compiled once: what every simulated job carries.
  kiln::CompileRequest cr;
  cr.func = kiln::frontend::parse_module(kKernel, "scale.kiln").funcs.at(0);
  cr.output = kiln::CompileOutput::Artifact;
  kiln::CompileResult compiled = kiln::compile(cr);
  kiln::v1::Artifact wire;
  kiln::server::to_wire(*compiled.artifact, &wire);
  std::string artifact_bytes = wire.SerializeAsString();

  PostgresServer pg;
  std::string token = pg.dir() + "/agent.token";
  std::ofstream(token) << "the benchmark's agents' token\n";
  std::filesystem::permissions(
      token, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  int status = 0;
  for (int replicas : counts) {
    std::fprintf(stderr, "bench_scale: %d replica(s), %d simulated agents each, %.0f s\n", replicas,
                 agents_each, seconds);
    kiln::JsonObject line;
    line.str("bench", fmt::format("scale_{}", replicas));
    try {
      Round r = run(pg, replicas, agents_each, seconds, token, artifact_bytes);
      line.integer("replicas", r.replicas).integer("agents", r.agents);
      line.integer("delay_ms", kDelayMs).integer("tasks", r.tasks).integer("failed", r.failed);
      line.num("tasks_per_s", r.tasks / r.seconds);
      line.num("ideal_tasks_per_s", r.agents * 1000.0 / kDelayMs);
      line.num("dispatch_p50_ms", percentile(r.dispatch_ms, 0.5));
      line.num("dispatch_p99_ms", percentile(r.dispatch_ms, 0.99));
      line.num("round_trip_p50_ms", percentile(r.round_trip_ms, 0.5));
      line.num("round_trip_p99_ms", percentile(r.round_trip_ms, 0.99));
      if (r.failed > 0) {
        line.str("first_failure", r.first_failure);
        status = 1;
      }
    } catch (const std::exception& e) {
      line.str("error", e.what());
      status = 1;
    }
    line.integer("cores", static_cast<int64_t>(std::thread::hardware_concurrency()));
    kiln::bench::add_host(line);
    std::printf("%s\n", line.done().c_str());
    std::fflush(stdout);
  }
  return status;
}
