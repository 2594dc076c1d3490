// kilnd under load: one kilnd on loopback, C concurrent clients (default 64) of R Compile
// requests each (default 50), a mix of cache hits and misses. Prints one JSON line:
// requests/s, p50/p99 latency of hits and of misses, and the counts; any failure other than
// RESOURCE_EXHAUSTED (a full queue) makes the exit status 1.
//
//   build/tests/bench/bench_server [--quick] [--sizes CLIENTS,REQUESTS]
//
// Each client has its own channel. Its requests compile one of a few hot operators
// (matmul under 8 tile sizes: misses the first time, hits after) or, one time in ten, an
// operator no one asked for before (a small elementwise func with a constant of its own:
// always a miss), chosen by a seeded generator so that runs are comparable.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
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
    "usage: bench_server [--quick] [--sizes CLIENTS,REQUESTS]\n"
    "  One kilnd, CLIENTS concurrent clients (64) of REQUESTS Compile requests each (50),\n"
    "  hits and misses mixed; --quick: 8 clients of 10.\n";

const char* kFresh =
    "func fresh { param K = 1; input x : f32[64]; output y : f32[64];\n"
    "  compute c(i) in 0 <= i < 64: y[i] = x[i] * 2.0 + f32(K); }";

struct Sample {
  double ms;
  bool hit;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  bench::Options opts = bench::parse_options(argc, argv, kUsage);
  int clients = opts.quick ? 8 : 64, requests = opts.quick ? 10 : 50;
  if (opts.sizes.size() == 2) {
    clients = static_cast<int>(opts.sizes[0]);
    requests = static_cast<int>(opts.sizes[1]);
  }
  kiln::testing::KilndProcess kilnd(KILND_BINARY);
  const std::string matmul = read_file(std::string(KILN_SOURCE_DIR) + "/examples/matmul.kiln");
  const int64_t tiles[] = {8, 16, 32, 64};

  std::mutex mu;
  std::vector<Sample> samples;
  std::atomic<int> exhausted{0}, failures{0}, fresh_key{0};
  std::string first_failure;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto stub = v1::Compiler::NewStub(
          grpc::CreateChannel(kilnd.address(), grpc::InsecureChannelCredentials()));
      std::mt19937_64 rng(static_cast<uint64_t>(c) * 7919 + 1);
      for (int r = 0; r < requests; ++r) {
        v1::CompileRequest request;
        v1::SourceText* src = request.mutable_op()->mutable_source();
        src->set_filename("bench.kiln");
        if (rng() % 10 == 0) {
          src->set_text(kFresh);
          (*request.mutable_options()->mutable_set())["K"] = 1000 + fresh_key++;
        } else {
          src->set_text(matmul);
          auto& set = *request.mutable_options()->mutable_set();
          set["TI"] = tiles[rng() % 4];
          set["TJ"] = tiles[rng() % 2 + 1];
        }
        grpc::ClientContext ctx;
        v1::CompileResponse response;
        auto t0 = std::chrono::steady_clock::now();
        grpc::Status s = stub->Compile(&ctx, request, &response);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count();
        std::lock_guard<std::mutex> lock(mu);
        if (s.ok()) {
          samples.push_back({ms, response.cache_hit()});
        } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ++exhausted;
        } else {
          if (failures++ == 0) first_failure = s.error_message();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kilnd.terminate();
  int kilnd_status = kilnd.wait();

  std::vector<double> hits, misses;
  for (const Sample& s : samples) (s.hit ? hits : misses).push_back(s.ms);
  Target host = Target::host();
  bool avx512 = host.features.find("+avx512f") != std::string::npos;
  bool avx2 = host.features.find("+avx2") != std::string::npos;
  JsonObject line;
  line.str("bench", "server_" + std::to_string(clients) + "x" + std::to_string(requests));
  line.str("cpu", host.cpu).str("vector", avx512 ? "avx512" : avx2 ? "avx2" : "other");
  line.integer("cores", std::thread::hardware_concurrency());
  line.integer("requests", static_cast<int64_t>(clients) * requests);
  line.num("seconds", seconds, 4)
      .num("requests_per_s", static_cast<double>(samples.size()) / seconds, 4);
  line.integer("hits", static_cast<int64_t>(hits.size()));
  line.integer("misses", static_cast<int64_t>(misses.size()));
  line.num("hit_p50_ms", percentile(hits, 0.5), 4).num("hit_p99_ms", percentile(hits, 0.99), 4);
  line.num("miss_p50_ms", percentile(misses, 0.5), 4)
      .num("miss_p99_ms", percentile(misses, 0.99), 4);
  line.integer("resource_exhausted", exhausted.load()).integer("failures", failures.load());
  std::printf("%s\n", line.done().c_str());
  if (failures > 0)
    std::fprintf(stderr, "bench_server: first failure: %s\n", first_failure.c_str());
  if (kilnd_status != 0) std::fprintf(stderr, "bench_server: kilnd exited with %d\n", kilnd_status);
  return failures == 0 && kilnd_status == 0 ? 0 : 1;
}
