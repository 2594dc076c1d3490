// What the commands print: checksums, checks and benchmarks as text lines or
// as one JSON object per func or graph (--json).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/interp.h"
#include "kiln/ir.h"
#include "kiln/run.h"
#include "selection.h"

namespace kiln::cli {

// "1 computation", "4 schedule commands".
std::string count(size_t n, std::string_view noun);

// One run of `kiln interp` or `kiln run` on one func.
struct InterpResult {
  std::map<std::string, int64_t> params;  // every param's value in this run
  std::vector<std::string> chosen;        // run-time params kiln gave a value
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;  // with --check
  std::optional<BenchResult> bench;          // run --bench
};

// One run of a graph: its outputs and, with --check, the comparison with the
// reference interpreter on the graph as written.
struct GraphResult {
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;
  std::optional<BenchResult> bench;
  size_t calls_before = 0, calls_after = 0, kernels = 0;
};

// The --json line for one func (or a file that failed as a whole: func empty).
// `kiln run` adds the "bench" key.
std::string result_json(const std::string& file, const std::string& func, const InterpResult* r,
                        const std::string* error, bool with_bench = false);
// The --json line for one graph.
std::string graph_json(const std::string& file, const std::string& graph, const GraphResult* r,
                       const std::string* error, bool with_bench);

// "412 us", "3.25 ms": a time per run with a unit that fits.
std::string duration(double seconds);

void print_interp_text(const Prepared& p, const InterpResult& r);
void print_bench_text(const Prepared& p, const BenchResult& b);
void print_graph_text(const GraphJob& j, const GraphResult& r, const char* what);
// "3 calls, 1 input, 2 consts, 1 output"
std::string graph_summary(const ir::Graph& g);

}  // namespace kiln::cli
