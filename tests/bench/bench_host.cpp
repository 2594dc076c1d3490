// What this host is, for benchmarks written as scripts (tests/bench/bench_models.py):
// one JSON line per thread count given, with the CPU, its vector features and its
// measured FMA peak at that many threads.
//
// usage: bench_host [THREADS...]   (default: 1)
#include <cstdio>
#include <cstdlib>

#include "bench_support.h"
#include "fma_peak.h"
#include "kiln/codegen.h"
#include "kiln/json.h"

int main(int argc, char** argv) {
  using namespace kiln;
  Target host = Target::host();
  bench::FmaWidth width = bench::fma_width(
      codegen::target_has_feature(host, "avx512f"),
      codegen::target_has_feature(host, "avx2") && codegen::target_has_feature(host, "fma"));
  for (int k = 1; k < argc || k == 1; ++k) {
    int threads = k < argc ? std::atoi(argv[k]) : 1;
    if (threads < 1) {
      std::fprintf(stderr, "bench_host: '%s' is not a thread count\n", argv[k]);
      return 2;
    }
    const bench::FmaPeak& peak = bench::fma_peak(width, threads);
    JsonObject line;
    line.integer("threads", threads);
    line.num("peak_gflops", peak.gflops, 4).str("peak_probe", peak.probe);
    bench::add_host(line, host);
    std::printf("%s\n", line.done().c_str());
  }
  return 0;
}
