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
  // With a check: what was compared (GraphRunOutcome::check_scope), and whether each call was
  // checked on its own rather than the whole graph.
  std::string check_scope;
  bool per_call_check = false;
  std::optional<BenchResult> bench;
  size_t calls_before = 0, calls_after = 0, kernels = 0;
};

// An agent as `kiln agents` lists it.
struct AgentRow {
  std::string id, address, key, triple, cpu;
  int cores = 0, gpus = 0, slots = 1, running = 0;
  int64_t jobs_done = 0, jobs_failed = 0;
  int64_t last_seen_unix_ms = 0;
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // its caches (0: not reported)
};

// One func measured on an agent (`kiln measure`).
struct Measurement {
  std::string agent_id, key, triple, cpu;
  std::string error;  // the agent's error class ("" when it ran): TIMEOUT, RUNTIME_CRASH, ...
  std::string message;
  std::map<std::string, int64_t> params;
  BenchResult bench;  // the agent's rounds
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;  // with --check
  int tries = 1;                             // agents that took the job
  bool cache_hit = false;
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

// The --json line of one func measured (`kiln measure`), or of its failure.
std::string measurement_json(const std::string& file, const std::string& func, const Measurement* m,
                             const std::string* error);
// The --json line of one agent; its last heartbeat `now_unix_ms - last_seen` ago.
std::string agent_json(const AgentRow& a, int64_t now_unix_ms);

void print_interp_text(const Prepared& p, const InterpResult& r);
// "measure matmul on board-1 (rk3399, cortex-a72): ..." or the agent's error;
// false when the func did not run or did not match the reference.
bool print_measurement_text(const std::string& file, const std::string& name, const Measurement& m);
// The table of `kiln agents`.
void print_agents_table(const std::vector<AgentRow>& agents, int64_t now_unix_ms);
void print_bench_text(const Prepared& p, const BenchResult& b);
void print_graph_text(const GraphJob& j, const GraphResult& r, const char* what);
// "3 calls, 1 input, 2 consts, 1 output"
std::string graph_summary(const ir::Graph& g);

}  // namespace kiln::cli
