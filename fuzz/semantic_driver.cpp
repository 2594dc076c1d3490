// The semantic fuzzer without libFuzzer: N programs from a seeded generator,
// each checked like the libFuzzer target checks it. Prints how many were
// refused, agreed (and of those, how many runs all three refused) and
// disagreed; exits 1 on the first disagreement, with the program.
//
//   kiln_semantic_fuzz [--runs N] [--seed S] [--verbose]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "semantic_check.h"

int main(int argc, char** argv) {
  long runs = 1000;
  unsigned long seed = 1;
  bool verbose = false;
  for (int k = 1; k < argc; ++k) {
    if (!std::strcmp(argv[k], "--runs") && k + 1 < argc) {
      runs = std::strtol(argv[++k], nullptr, 10);
    } else if (!std::strcmp(argv[k], "--seed") && k + 1 < argc) {
      seed = std::strtoul(argv[++k], nullptr, 10);
    } else if (!std::strcmp(argv[k], "--verbose")) {
      verbose = true;
    } else {
      std::fprintf(stderr, "usage: kiln_semantic_fuzz [--runs N] [--seed S] [--verbose]\n");
      return 2;
    }
  }
  std::mt19937_64 rng(seed);
  long refused = 0, agreed = 0, failed_runs = 0;
  std::map<std::string, long> refusals;  // by stage
  for (long n = 0; n < runs; ++n) {
    std::vector<uint8_t> bytes(256);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    kiln::fuzz::Choices c(bytes.data(), bytes.size());
    kiln::fuzz::Program p = kiln::fuzz::generate_program(c);
    kiln::fuzz::Outcome o = kiln::fuzz::check_program(p, n);
    switch (o.kind) {
      case kiln::fuzz::Outcome::Kind::Refused: {
        ++refused;
        size_t colon = o.detail.find(" error: ");
        size_t start = o.detail.rfind(' ', colon == std::string::npos ? 0 : colon - 1);
        refusals[colon == std::string::npos ? "?"
                                            : o.detail.substr(start + 1, colon - start - 1)]++;
        if (verbose)
          std::fprintf(stderr, "--- program %ld ---\n%srefused: %s\n", n, p.source.c_str(),
                       o.detail.c_str());
        break;
      }
      case kiln::fuzz::Outcome::Kind::Agreed:
        ++agreed;
        failed_runs += o.runs_failed;
        break;
      case kiln::fuzz::Outcome::Kind::Disagreed:
        std::fprintf(stderr, "program %ld of seed %lu:\n", n, seed);
        kiln::fuzz::report_disagreement(p, o);
    }
  }
  std::printf(
      "%ld programs (seed %lu): %ld compiled and agreed (%ld of them runs that all three "
      "refused), %ld refused, 0 disagreed\n",
      runs, seed, agreed, failed_runs, refused);
  for (const auto& [stage, count] : refusals)
    std::printf("  refused at %s: %ld\n", stage.c_str(), count);
  return 0;
}
