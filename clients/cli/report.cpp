// Text and JSON output of the commands (report.h).
#include "report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "kiln/json.h"

namespace kiln::cli {
namespace {

std::string outputs_json(const std::vector<OutputSum>& outputs) {
  JsonObject obj;
  for (const OutputSum& s : outputs) {
    obj.raw(s.buf,
            JsonObject().raw("shape", json_int_array(s.shape)).num("checksum", s.checksum).done());
  }
  return obj.done();
}

std::string mismatch_json(const interp::Mismatch& m) {
  return JsonObject()
      .str("buffer", m.buffer)
      .raw("index", json_int_array(m.index))
      .num("expected", m.expected)
      .num("actual", m.actual)
      .num("abs_error", m.abs_error)
      .num("rel_error", m.rel_error)
      .str("message", m.describe())
      .done();
}

std::string bench_json(const BenchResult& b) {
  JsonObject obj;
  obj.num("median_s", b.median_s).num("min_s", b.min_s);
  obj.integer("repeat", b.repeat).integer("number", b.number).integer("threads", b.threads);
  if (!b.device.empty()) obj.str("device", b.device);
  if (b.flops >= 0) {
    obj.integer("flops", b.flops);
  } else {
    obj.null("flops");
  }
  if (std::optional<double> g = gflops(b)) {
    obj.num("gflops", *g);
  } else {
    obj.null("gflops");
  }
  return obj.done();
}

// "ok", "max_abs_error" and "mismatch" of a --json line: a run failed
// (`error`), did not run (`mismatch` null) or was (not) checked.
void check_fields(JsonObject& obj, const std::string* error,
                  const std::optional<interp::Mismatch>* mismatch) {
  bool checked = mismatch != nullptr && mismatch->has_value();
  obj.boolean("ok", error == nullptr && mismatch != nullptr && (!checked || (*mismatch)->ok));
  if (checked) {
    obj.num("max_abs_error", (*mismatch)->abs_error);
  } else {
    obj.null("max_abs_error");
  }
  if (checked && !(*mismatch)->ok) {
    obj.raw("mismatch", mismatch_json(**mismatch));
  } else {
    obj.null("mismatch");
  }
}

// "bench" (when `with_bench`) and "error", the last fields of a --json line.
void end_fields(JsonObject& obj, bool with_bench, const std::optional<BenchResult>* bench,
                const std::string* error) {
  if (with_bench) {
    if (bench != nullptr && bench->has_value()) {
      obj.raw("bench", bench_json(**bench));
    } else {
      obj.null("bench");
    }
  }
  if (error != nullptr) {
    obj.str("error", *error);
  } else {
    obj.null("error");
  }
}

// " with m=13" for the run-time params kiln chose, so that a run can be repeated.
std::string chosen_suffix(const InterpResult& r) {
  std::vector<std::string> values;
  for (const std::string& name : r.chosen) {
    values.push_back(fmt::format("{}={}", name, r.params.at(name)));
  }
  return values.empty() ? "" : fmt::format(" with {}", fmt::join(values, ", "));
}

}  // namespace

std::string count(size_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

std::string result_json(const std::string& file, const std::string& func, const InterpResult* r,
                        const std::string* error, bool with_bench) {
  JsonObject obj;
  obj.str("file", file);
  if (func.empty()) {
    obj.null("func");
  } else {
    obj.str("func", func);
  }
  check_fields(obj, error, r ? &r->mismatch : nullptr);
  if (r != nullptr) {
    JsonObject params;
    for (const auto& [name, value] : r->params) params.integer(name, value);
    obj.raw("params", params.done());
    obj.raw("outputs", outputs_json(r->outputs));
  } else {
    obj.null("params");
    obj.null("outputs");
  }
  end_fields(obj, with_bench, r ? &r->bench : nullptr, error);
  return obj.done();
}

std::string measurement_json(const std::string& file, const std::string& func, const Measurement* m,
                             const std::string* error) {
  JsonObject obj;
  obj.str("file", file).str("func", func);
  std::string agent_error = m && !m->error.empty() ? m->error + ": " + m->message : "";
  check_fields(obj,
               error                    ? error
               : m && !m->error.empty() ? &agent_error
                                        : nullptr,
               m ? &m->mismatch : nullptr);
  if (m != nullptr) {
    obj.str("agent", m->agent_id).str("key", m->key).str("triple", m->triple).str("cpu", m->cpu);
    JsonObject params;
    for (const auto& [name, value] : m->params) params.integer(name, value);
    obj.raw("params", params.done());
    obj.raw("outputs", outputs_json(m->outputs));
    std::vector<std::string> rounds;
    for (double r : m->bench.round_s) rounds.push_back(json_number(r));
    obj.raw("rounds_s", json_array(rounds));
    obj.integer("tries", m->tries);
  }
  std::optional<BenchResult> bench;
  if (m && m->error.empty()) bench = m->bench;
  if (m && !m->error.empty()) {
    obj.str("error_class", m->error);
  } else {
    obj.null("error_class");
  }
  end_fields(obj, true, &bench, error ? error : m && !m->error.empty() ? &agent_error : nullptr);
  return obj.done();
}

std::string agent_json(const AgentRow& a, int64_t now_unix_ms) {
  return JsonObject()
      .str("id", a.id)
      .str("address", a.address)
      .str("key", a.key)
      .str("triple", a.triple)
      .str("cpu", a.cpu)
      .integer("cores", a.cores)
      .integer("gpus", a.gpus)
      .integer("slots", a.slots)
      .integer("running", a.running)
      .integer("jobs_done", a.jobs_done)
      .integer("jobs_failed", a.jobs_failed)
      .num("last_seen_s_ago", static_cast<double>(now_unix_ms - a.last_seen_unix_ms) * 1e-3)
      .integer("l1d_bytes", a.l1d_bytes)
      .integer("l2_bytes", a.l2_bytes)
      .integer("l3_bytes", a.l3_bytes)
      .done();
}

std::string graph_json(const std::string& file, const std::string& graph, const GraphResult* r,
                       const std::string* error, bool with_bench) {
  JsonObject obj;
  obj.str("file", file).str("graph", graph);
  check_fields(obj, error, r ? &r->mismatch : nullptr);
  if (r != nullptr) {
    obj.integer("calls", static_cast<int64_t>(r->calls_before));
    obj.integer("calls_after_passes", static_cast<int64_t>(r->calls_after));
    obj.raw("outputs", outputs_json(r->outputs));
    // With a check: "graph" (the whole graph compared) or "per_call" (each kernel at points).
    if (r->mismatch) obj.str("check_scope", r->per_call_check ? "per_call" : "graph");
  } else {
    obj.null("calls").null("calls_after_passes").null("outputs");
  }
  end_fields(obj, with_bench, r ? &r->bench : nullptr, error);
  return obj.done();
}

std::string duration(double seconds) {
  if (seconds < 1e-6) return fmt::format("{:.4g} ns", seconds * 1e9);
  if (seconds < 1e-3) return fmt::format("{:.4g} us", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:.4g} ms", seconds * 1e3);
  return fmt::format("{:.4g} s", seconds);
}

void print_bench_text(const Prepared& p, const BenchResult& b) {
  std::optional<double> g = gflops(b);
  fmt::print("bench {}: {} per run (median of {} x {}, {}), {}\n", p.func.name,
             duration(b.median_s), b.repeat, count(static_cast<size_t>(b.number), "run"),
             b.device.empty() ? count(static_cast<size_t>(b.threads), "thread") : b.device,
             g ? fmt::format("{:.3g} GFLOP/s", *g) : std::string("flop count unknown"));
}

bool print_measurement_text(const std::string& file, const std::string& name,
                            const Measurement& m) {
  std::string where =
      fmt::format("{} ({}, {})", m.agent_id, m.key, m.cpu.empty() ? m.triple : m.cpu);
  if (m.tries > 1) where += fmt::format(" after {} agents were lost", m.tries - 1);
  if (!m.error.empty()) {
    print_error(file, name, fmt::format("FAIL {} on {}: {}: {}", name, where, m.error, m.message));
    return false;
  }
  const BenchResult& b = m.bench;
  fmt::print("measure {} on {}: {} per run (median of {} x {}, {})\n", name, where,
             duration(b.median_s), b.repeat, count(static_cast<size_t>(b.number), "run"),
             b.device.empty() ? count(static_cast<size_t>(b.threads), "thread") : b.device);
  if (!m.mismatch) return true;
  if (m.mismatch->ok) {
    size_t n = m.outputs.size();
    fmt::print("ok  {}: {} {} the reference (max abs error {})\n", name, count(n, "output"),
               n == 1 ? "matches" : "match", m.mismatch->abs_error);
    return true;
  }
  print_error(file, name,
              fmt::format("FAIL {} on {}: {}", name, m.agent_id, m.mismatch->describe()));
  return false;
}

void print_agents_table(const std::vector<AgentRow>& agents, int64_t now_unix_ms) {
  if (agents.empty()) {
    fmt::print("no agents are connected (docs/agents.md says how to start one)\n");
    return;
  }
  // A cache size as Linux writes it: 48K, 1M, 32M; "?" when not reported.
  auto size = [](int64_t b) {
    return b <= 0               ? std::string("?")
           : b % (1 << 20) == 0 ? fmt::format("{}M", b >> 20)
                                : fmt::format("{}K", b >> 10);
  };
  std::vector<std::array<std::string, 10>> rows;
  rows.push_back({"ID", "KEY", "TRIPLE", "CORES", "CACHES L1D/L2/L3", "GPUS", "STATE", "DONE",
                  "FAILED", "LAST SEEN"});
  for (const AgentRow& a : agents) {
    std::string state = a.running == 0 ? "idle"
                        : a.slots > 1  ? fmt::format("busy {}/{}", a.running, a.slots)
                                       : "busy";
    double ago =
        static_cast<double>(std::max<int64_t>(0, now_unix_ms - a.last_seen_unix_ms)) * 1e-3;
    rows.push_back({a.id, a.key, a.triple, std::to_string(a.cores),
                    fmt::format("{}/{}/{}", size(a.l1d_bytes), size(a.l2_bytes), size(a.l3_bytes)),
                    std::to_string(a.gpus), state, std::to_string(a.jobs_done),
                    std::to_string(a.jobs_failed), fmt::format("{:.1f} s ago", ago)});
  }
  std::array<size_t, 10> width{};
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  // Text left-aligned, counts right-aligned.
  constexpr std::array<bool, 10> right = {false, false, false, true, false,
                                          true,  false, true,  true, false};
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      std::string cell = c + 1 == r.size() ? r[c]
                         : right[c]        ? fmt::format("{:>{}}", r[c], width[c])
                                           : fmt::format("{:<{}}", r[c], width[c]);
      line += cell;
      if (c + 1 < r.size()) line += "  ";
    }
    fmt::print("{}\n", line);
  }
}

void print_interp_text(const Prepared& p, const InterpResult& r) {
  const std::string& name = p.func.name;
  if (!r.mismatch) {
    for (const OutputSum& s : r.outputs) {
      fmt::print("{}: {}[{}] checksum {:.10g}{}\n", name, s.buf, fmt::join(s.shape, ", "),
                 s.checksum, chosen_suffix(r));
    }
  } else if (r.mismatch->ok) {
    size_t n = r.outputs.size();
    fmt::print("ok  {}: {} {} (max abs error {}){}\n", name, count(n, "output"),
               n == 1 ? "matches" : "match", r.mismatch->abs_error, chosen_suffix(r));
  } else {
    print_error(p.file, name,
                fmt::format("FAIL {}: {}{}", name, r.mismatch->describe(), chosen_suffix(r)));
  }
}

std::string graph_summary(const ir::Graph& g) {
  size_t inputs = 0, consts = 0;
  for (const ir::GraphTensor& t : g.tensors) {
    inputs += t.kind == ir::TensorKind::Input;
    consts += t.kind == ir::TensorKind::Const;
  }
  std::string s =
      fmt::format("{}, {}, {}, {}", count(g.calls.size(), "call"), count(inputs, "input"),
                  count(consts, "const"), count(g.outputs.size(), "output"));
  if (!g.batch.empty()) s += fmt::format(", batch '{}' at run time", g.batch);
  return s;
}

void print_graph_text(const GraphJob& j, const GraphResult& r, const char* what) {
  const std::string& name = j.graph->name;
  std::string passes =
      fmt::format("{} -> {} after graph passes", count(r.calls_before, "call"), r.calls_after);
  if (!r.mismatch) {
    for (const OutputSum& s : r.outputs) {
      fmt::print("graph {}: {}[{}] checksum {:.10g} ({})\n", name, s.buf, fmt::join(s.shape, ", "),
                 s.checksum, passes);
    }
  } else if (r.mismatch->ok && !r.per_call_check) {
    size_t n = r.outputs.size();
    fmt::print("ok  graph {}: {} {} (max abs error {}; {}, {})\n", name, count(n, "output"),
               n == 1 ? "matches" : "match", r.mismatch->abs_error, passes, what);
  } else if (r.mismatch->ok) {
    fmt::print("ok  graph {}: every kernel matches (max abs error {}; {}, {})\n", name,
               r.mismatch->abs_error, passes, what);
    fmt::print("    checked: {}\n", r.check_scope);
  } else {
    print_error(j.file, name,
                fmt::format("FAIL graph {}: {}{}", name, r.mismatch->describe(),
                            r.per_call_check ? "\n    checked: " + r.check_scope : ""));
  }
}

}  // namespace kiln::cli
