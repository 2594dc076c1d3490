// The check, emit, interp, run and compile commands: load each file, pick its
// funcs, apply --set, then call the compiler library one stage after another.
#include "commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/frontend.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/ir.h"
#include "kiln/json.h"
#include "kiln/loop_ir.h"
#include "kiln/passes.h"
#include "kiln/poly.h"
#include "kiln/runtime.h"
#include "run_params.h"

namespace kiln::cli {
namespace {

// Calls fn and logs (at debug level, seen with --verbose) how long it took.
template <typename F>
auto timed(std::string_view subject, std::string_view what, F&& fn) {
  auto start = std::chrono::steady_clock::now();
  auto log = [&] {
    std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
    spdlog::debug("{}: {} took {:.3f} ms", subject, what, ms.count());
  };
  if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
    fn();
    log();
  } else {
    auto result = fn();
    log();
    return result;
  }
}

// "1 computation", "4 schedule commands".
std::string count(size_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

// A func ready to compile: --set applied to its compile-time params and
// knobs, and the --set values of its run-time params kept for running it.
struct Prepared {
  std::string file;
  ir::Func func;
  std::map<std::string, int64_t> runtime_params;
};

// How a command reports a failure: of a whole file (func empty) or of one func.
using FailFn = std::function<void(const std::string& file, const std::string& func,
                                  const std::string& message)>;

void print_error(const std::string&, const std::string&, const std::string& message) {
  std::fflush(stdout);  // keep stdout and stderr lines in order on a terminal
  fmt::print(stderr, "{}\n", message);
}

// "matmul has params M, N, K and knobs TI"
std::string names_in(const ir::Func& f) {
  std::vector<std::string> params, knobs;
  for (const ir::Param& p : f.params) params.push_back(p.name);
  for (const ir::Knob& k : f.knobs) knobs.push_back(k.name);
  return fmt::format("{} has params {} and knobs {}", f.name,
                     params.empty() ? "(none)" : fmt::format("{}", fmt::join(params, ", ")),
                     knobs.empty() ? "(none)" : fmt::format("{}", fmt::join(knobs, ", ")));
}

// The funcs of `m` that the options select. Throws CompileError when --func
// names no func of the file, or a --set names nothing in the selected funcs.
std::vector<const ir::Func*> select_funcs(const ir::Module& m, const std::string& file,
                                          const Options& o) {
  SourceLoc where{file, 0, 0};
  std::vector<const ir::Func*> funcs;
  if (m.funcs.empty()) throw CompileError(ErrorStage::Validate, where, "the file defines no func");
  if (o.graph) {
    if (!o.overrides.empty()) {
      throw CompileError(ErrorStage::Validate, where,
                         fmt::format("--set {}: --set applies to funcs; a graph binds its "
                                     "operators' params in its calls (op(x, NAME = INT))",
                                     o.overrides.begin()->first));
    }
    return funcs;
  }
  if (o.func) {
    const ir::Func* f = m.find(*o.func);
    if (!f) {
      std::vector<std::string> names;
      for (const ir::Func& g : m.funcs) names.push_back(g.name);
      throw CompileError(ErrorStage::Validate, where,
                         fmt::format("--func {}: no func of that name (expected one of: {})",
                                     *o.func, fmt::join(names, ", ")));
    }
    funcs.push_back(f);
  } else {
    for (const ir::Func& f : m.funcs) funcs.push_back(&f);
  }

  for (const auto& [name, value] : o.overrides) {
    bool known = std::any_of(funcs.begin(), funcs.end(), [&](const ir::Func* f) {
      return f->find_param(name) != nullptr || f->find_knob(name) != nullptr;
    });
    if (!known) {
      std::vector<std::string> described;
      for (const ir::Func* f : funcs) described.push_back(names_in(*f));
      throw CompileError(ErrorStage::Validate, where,
                         fmt::format("--set {}={}: no param or knob named '{}' ({})", name, value,
                                     name, fmt::join(described, "; ")));
    }
  }
  return funcs;
}

// The graphs of `m` that the options select: none with --func, the one
// --graph names (CompileError when the file has no such graph), else all.
std::vector<const ir::Graph*> select_graphs(const ir::Module& m, const std::string& file,
                                            const Options& o) {
  std::vector<const ir::Graph*> graphs;
  if (o.func) return graphs;
  if (o.graph) {
    const ir::Graph* g = m.find_graph(*o.graph);
    if (!g) {
      std::vector<std::string> names;
      for (const ir::Graph& h : m.graphs) names.push_back(h.name);
      throw CompileError(
          ErrorStage::Validate, SourceLoc{file, 0, 0},
          fmt::format("--graph {}: no graph of that name ({})", *o.graph,
                      names.empty() ? std::string("the file defines none")
                                    : fmt::format("expected one of: {}", fmt::join(names, ", "))));
    }
    graphs.push_back(g);
    return graphs;
  }
  for (const ir::Graph& g : m.graphs) graphs.push_back(&g);
  return graphs;
}

// A graph to process, with the file it came from and the module's funcs.
struct GraphJob {
  std::string file;
  const ir::Graph* graph;
  const ir::Module* module;
};
using GraphFn = std::function<bool(const GraphJob&, bool many)>;

// Splits the --set values between f's compile-time params and knobs (given to
// ir::apply_overrides, which checks knob candidates) and its run-time params
// (kept for interp::param_values). Names f does not have are for other funcs.
Prepared prepare(const std::string& file, const ir::Func& f, const Options& o) {
  Prepared p{file, {}, {}};
  ir::Overrides compile_time;
  for (const auto& [name, value] : o.overrides) {
    const ir::Param* param = f.find_param(name);
    if (param != nullptr && !param->value) {
      p.runtime_params[name] = value;
    } else if (param != nullptr || f.find_knob(name) != nullptr) {
      compile_time[name] = value;
    }
  }
  p.func = ir::apply_overrides(f, compile_time);
  return p;
}

// Calls `each` on every func the options select, file by file. A CompileError
// (from loading a file or from `each`) goes to `fail` and the run goes on with
// the next func or file. `each` gets whether more than one func is being
// processed, and returns false for a failed check. Returns the exit status.
int for_each_func(const Options& o, const std::function<bool(const Prepared&, bool many)>& each,
                  const FailFn& fail, const GraphFn& each_graph = nullptr,
                  bool graphs_only = false) {
  bool all_ok = true;
  auto internal = [](const std::string& where, const std::exception& e) {
    return fmt::format("{}: internal error: {} (this is a bug in kiln; please report it)", where,
                       e.what());
  };
  for (const std::string& file : o.files) {
    ir::Module module;
    std::vector<const ir::Func*> funcs;
    std::vector<const ir::Graph*> graphs;
    try {
      module = timed(file, "parse", [&] { return frontend::parse_file(file); });
      funcs = select_funcs(module, file, o);
      if (graphs_only) funcs.clear();
      if (each_graph) graphs = select_graphs(module, file, o);
      if (graphs_only && graphs.empty()) {
        throw CompileError(ErrorStage::Validate, SourceLoc{file, 0, 0},
                           "the file defines no graph");
      }
    } catch (const CompileError& e) {
      fail(file, "", e.what());
      all_ok = false;
      continue;
    } catch (const std::exception& e) {
      fail(file, "", internal(file, e));
      all_ok = false;
      continue;
    }
    bool many = o.files.size() > 1 || funcs.size() + graphs.size() > 1;
    for (const ir::Func* f : funcs) {
      try {
        Prepared p = prepare(file, *f, o);
        if (!each(p, many)) all_ok = false;
      } catch (const CompileError& e) {
        fail(file, f->name, e.what());
        all_ok = false;
      } catch (const std::exception& e) {
        fail(file, f->name, internal(fmt::format("{}: func {}", file, f->name), e));
        all_ok = false;
      }
    }
    for (const ir::Graph* g : graphs) {
      try {
        if (!each_graph(GraphJob{file, g, &module}, many)) all_ok = false;
      } catch (const CompileError& e) {
        fail(file, "graph " + g->name, e.what());
        all_ok = false;
      } catch (const std::exception& e) {
        fail(file, "graph " + g->name, internal(fmt::format("{}: graph {}", file, g->name), e));
        all_ok = false;
      }
    }
  }
  return all_ok ? 0 : 1;
}

// The compile options of the command line: the target (--target, --cpu,
// --features; this machine's by default: --cpu replaces its CPU and that CPU's
// own features are used, --features adds to or removes from them), -O,
// --no-schedule, the pass options, and --print-after and --time-passes
// printing to stderr beside the IR or results on stdout.
CompileOptions compile_options(const Options& o) {
  CompileOptions c;
  c.opt_level = o.opt_level;
  c.apply_schedule = !o.no_schedule;
  if (o.target) {
    c.target = Target{*o.target, o.cpu.value_or(""), o.features.value_or("")};
  } else if (o.cpu) {
    c.target.cpu = *o.cpu;
    c.target.features = o.features.value_or("");
  } else if (o.features) {
    c.target.features += (c.target.features.empty() ? "" : ",") + *o.features;
  }
  c.passes.required = o.required_passes;
  c.passes.disabled = o.disabled_passes;
  if (!o.print_after.empty() || o.time_passes) {
    c.instrument = passes::print_and_time(o.print_after, o.time_passes, std::cerr);
  }
  return c;
}

// Whether -O or a pass option asks emit for optimized output.
bool optimizing(const Options& o) {
  return o.opt_level_given || !o.print_after.empty() || o.time_passes ||
         !o.required_passes.empty() || !o.disabled_passes.empty();
}

// Compiles f (its overrides applied) up to `output` with `c`, logging how
// long each stage took (seen with --verbose).
CompileResult compile_logged(const ir::Func& f, const CompileOptions& c, CompileOutput output) {
  CompileResult r =
      compile(CompileRequest{.func = f, .overrides = {}, .options = c, .output = output});
  for (const StageTime& t : r.times) spdlog::debug("{}: {} took {:.3f} ms", f.name, t.stage, t.ms);
  return r;
}

CompileResult compile_logged(const ir::Func& f, const Options& o, CompileOutput output) {
  return compile_logged(f, compile_options(o), output);
}

// `kiln check` and the graph checks: the schedule applied and checked, whatever --no-schedule says.
void check_schedule(const ir::Func& f, const Options& o) {
  CompileOptions c = compile_options(o);
  c.apply_schedule = true;
  compile_logged(f, c, CompileOutput::Schedule);
}

// The loops the loop interpreter runs: as lowering leaves them, no pass run.
ir::LoweredFunc interpreted_loops(const ir::Func& f, const Options& o) {
  CompileOptions c = compile_options(o);
  c.opt_level = 0;
  c.passes = {};
  c.instrument = nullptr;
  return compile_logged(f, c, CompileOutput::Loops).lowered;
}

// The sum of an output's elements: a cheap fingerprint of a run.
struct OutputSum {
  std::string buf;
  std::vector<int64_t> shape;
  double checksum = 0;
};

// The checksums of the buffers named, in order.
std::vector<OutputSum> checksums(const std::vector<std::string>& names,
                                 const std::map<std::string, interp::HostBuffer>& buffers) {
  std::vector<OutputSum> sums;
  for (const std::string& name : names) {
    const interp::HostBuffer& h = buffers.at(name);
    OutputSum s{name, h.shape(), 0};
    for (int64_t i = 0; i < h.size(); ++i) s.checksum += h.get_f(i);
    sums.push_back(std::move(s));
  }
  return sums;
}

std::vector<OutputSum> checksums(const ir::Func& f, const interp::Bindings& b) {
  std::vector<std::string> outputs;
  for (const ir::Buf* buf : f.bufs_of_kind(ir::BufKind::Output)) outputs.push_back(buf->name);
  return checksums(outputs, b.buffers);
}

// What `kiln run --bench` measured.
struct BenchResult {
  int repeat = 0, number = 0;  // repeats of `number` runs each
  int threads = 0;             // of the runtime's pool
  double median_s = 0;         // per run
  double min_s = 0;            // per run, the fastest repeat
  int64_t flops = -1;          // per run; -1 = unknown
};

// One run of `kiln interp` or `kiln run` on one func.
struct InterpResult {
  std::map<std::string, int64_t> params;  // every param's value in this run
  std::vector<std::string> chosen;        // run-time params kiln gave a value
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;  // with --check
  std::optional<BenchResult> bench;          // run --bench
};

// A func lowered, with values for its run-time params and random inputs:
// what interp and run both start from.
struct RunSetup {
  CompileResult compiled;
  RunParams run_params;
  std::map<std::string, int64_t> params;  // every param's value
  interp::Bindings inputs;
};

RunSetup set_up_run(const Prepared& p, const Options& o, CompileOutput output) {
  const ir::Func& f = p.func;
  RunSetup s;
  // Compile first: a schedule kiln refuses should not wait for the reference run.
  if (output == CompileOutput::Loops) {
    s.compiled.lowered = interpreted_loops(f, o);
  } else {
    s.compiled = compile_logged(f, o, output);
  }
  s.run_params = run_param_values(f, p.runtime_params);
  for (const std::string& name : s.run_params.chosen) {
    spdlog::debug("{}: run-time param {} not given; using {}", f.name, name,
                  s.run_params.values.at(name));
  }
  s.params = interp::param_values(f, s.run_params.values);
  s.inputs =
      timed(f.name, "random inputs", [&] { return interp::random_bindings(f, s.params, o.seed); });
  return s;
}

// The result of a run that produced `actual`; with --check, the reference
// interpreter runs on the same inputs and the outputs are compared.
InterpResult result_of(const Prepared& p, const Options& o, const RunSetup& s,
                       const interp::Bindings& actual) {
  const ir::Func& f = p.func;
  InterpResult r;
  r.params = s.params;
  r.chosen = s.run_params.chosen;
  r.outputs = checksums(f, actual);
  if (o.check) {
    interp::Bindings expected = s.inputs;
    timed(f.name, "reference interpreter", [&] { interp::run_reference(f, expected); });
    r.mismatch = interp::compare_outputs(f, expected, actual);
  }
  return r;
}

InterpResult interpret(const Prepared& p, const Options& o) {
  RunSetup s = set_up_run(p, o, CompileOutput::Loops);
  interp::Bindings actual = s.inputs;
  timed(p.func.name, "loop interpreter", [&] { interp::run_loops(s.compiled.lowered, actual); });
  return result_of(p, o, s, actual);
}

// Times a compiled kernel: one warm-up run, then `repeat` timed repeats of
// `number` runs each (number chosen from the warm-up so that a repeat takes
// about 50 ms when --number is not given). The inputs are a copy: a kernel
// that accumulates into its output may change it from run to run.
// Times `run_once`: one warm-up run, then `repeat` timed repeats of `number`
// runs each (number chosen from the warm-up so that a repeat takes about
// 50 ms when --number is not given).
BenchResult measure(const std::function<void()>& run_once, const Options& o) {
  constexpr uint64_t kRepeatTargetNs = 50'000'000;
  uint64_t start = kiln_now_ns();
  run_once();
  uint64_t warm = std::max<uint64_t>(kiln_now_ns() - start, 1);

  BenchResult r;
  r.repeat = o.repeat;
  r.number = o.number > 0
                 ? o.number
                 : static_cast<int>(std::clamp<uint64_t>(kRepeatTargetNs / warm, 1, 1'000'000));
  std::vector<double> per_run;
  for (int rep = 0; rep < r.repeat; ++rep) {
    uint64_t t0 = kiln_now_ns();
    for (int n = 0; n < r.number; ++n) run_once();
    per_run.push_back(static_cast<double>(kiln_now_ns() - t0) * 1e-9 / r.number);
  }
  std::sort(per_run.begin(), per_run.end());
  size_t mid = per_run.size() / 2;
  r.median_s = per_run.size() % 2 ? per_run[mid] : (per_run[mid - 1] + per_run[mid]) / 2;
  r.min_s = per_run.front();
  r.threads = kiln_runtime_threads();
  return r;
}

// Times a compiled kernel. The inputs are a copy: a kernel that accumulates
// into its output may change it from run to run.
BenchResult bench(const codegen::Kernel& k, const RunSetup& s, const Options& o) {
  interp::Bindings b = s.inputs;
  const ir::LoweredFunc& f = s.compiled.lowered;
  std::vector<kiln_value> args = codegen::pack_arguments(f, b);
  auto nargs = static_cast<int32_t>(args.size());
  BenchResult r = measure(
      [&] {
        if (int32_t rc = k.call(args.data(), nargs); rc != 0) {
          throw CompileError(ErrorStage::Run, {}, fmt::format("{} returned error {}", f.name, rc));
        }
      },
      o);
  r.flops = ir::flop_count(f, s.params);
  return r;
}

InterpResult run_compiled(const Prepared& p, const Options& o) {
  const ir::Func& f = p.func;
  RunSetup s = set_up_run(p, o, CompileOutput::Kernel);
  const codegen::Kernel& k = *s.compiled.kernel;
  interp::Bindings actual = s.inputs;
  timed(f.name, "compiled run", [&] { k.run(actual); });
  InterpResult r = result_of(p, o, s, actual);
  if (o.bench && (!r.mismatch || r.mismatch->ok)) {
    r.bench = timed(f.name, "benchmark", [&] { return bench(k, s, o); });
  }
  return r;
}

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

// GFLOP/s, when the flop count is known.
std::optional<double> gflops(const BenchResult& b) {
  if (b.flops < 0 || b.median_s <= 0) return std::nullopt;
  return static_cast<double>(b.flops) / b.median_s * 1e-9;
}

std::string bench_json(const BenchResult& b) {
  JsonObject obj;
  obj.num("median_s", b.median_s).num("min_s", b.min_s);
  obj.integer("repeat", b.repeat).integer("number", b.number).integer("threads", b.threads);
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

// The --json line for one func (or a file that failed as a whole: func empty).
// `kiln run` adds the "bench" key.
std::string result_json(const std::string& file, const std::string& func, const InterpResult* r,
                        const std::string* error, bool with_bench = false) {
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

// " with m=13" for the run-time params kiln chose, so that a run can be repeated.
std::string chosen_suffix(const InterpResult& r) {
  std::vector<std::string> values;
  for (const std::string& name : r.chosen) {
    values.push_back(fmt::format("{}={}", name, r.params.at(name)));
  }
  return values.empty() ? "" : fmt::format(" with {}", fmt::join(values, ", "));
}

// "412 us", "3.25 ms": a time per run with a unit that fits.
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
             count(static_cast<size_t>(b.threads), "thread"),
             g ? fmt::format("{:.3g} GFLOP/s", *g) : std::string("flop count unknown"));
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

// ---------------------------------------------------------------------------
// Graphs

std::string graph_summary(const ir::Graph& g) {
  size_t inputs = 0, consts = 0;
  for (const ir::GraphTensor& t : g.tensors) {
    inputs += t.kind == ir::TensorKind::Input;
    consts += t.kind == ir::TensorKind::Const;
  }
  return fmt::format("{}, {}, {}, {}", count(g.calls.size(), "call"), count(inputs, "input"),
                     count(consts, "const"), count(g.outputs.size(), "output"));
}

// One run of a graph: its outputs and, with --check, the comparison with the
// reference interpreter on the graph as written.
struct GraphResult {
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;
  std::optional<BenchResult> bench;
  size_t calls_before = 0, calls_after = 0, kernels = 0;
};

void check_graph_result(const GraphJob& j, const Options& o, const interp::Tensors& inputs,
                        const interp::Tensors& actual, GraphResult& r) {
  r.outputs = checksums(j.graph->outputs, actual);
  if (!o.check) return;
  interp::Tensors expected = timed(j.graph->name, "reference interpreter",
                                   [&] { return interp::run_reference(*j.graph, inputs); });
  r.mismatch = interp::compare_buffers(j.graph->outputs, expected, actual);
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
  } else {
    obj.null("calls").null("calls_after_passes").null("outputs");
  }
  end_fields(obj, with_bench, r ? &r->bench : nullptr, error);
  return obj.done();
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
  } else if (r.mismatch->ok) {
    size_t n = r.outputs.size();
    fmt::print("ok  graph {}: {} {} (max abs error {}; {}, {})\n", name, count(n, "output"),
               n == 1 ? "matches" : "match", r.mismatch->abs_error, passes, what);
  } else {
    print_error(j.file, name, fmt::format("FAIL graph {}: {}", name, r.mismatch->describe()));
  }
}

}  // namespace

int run_check(const Options& o) {
  return for_each_func(
      o,
      [&](const Prepared& p, bool) {
        check_schedule(p.func, o);
        fmt::print("ok  {}: {}, {}\n", p.func.name, count(p.func.comps.size(), "computation"),
                   count(p.func.schedule.size(), "schedule command"));
        return true;
      },
      print_error,
      [&](const GraphJob& j, bool) {
        // Every call's operator, with its params bound, scheduled and checked.
        for (const ir::GraphCall& c : j.graph->calls) check_schedule(c.op, o);
        fmt::print("ok  graph {}: {}\n", j.graph->name, graph_summary(*j.graph));
        return true;
      });
}

namespace {

// One stage of f's compilation, as `kiln emit --stage` prints it.
std::string stage_text(const ir::Func& f, const Options& o) {
  switch (*o.stage) {
    case Stage::Ast:
      return ir::to_string(f);
    case Stage::Ir:
      return compile_logged(f, o, CompileOutput::Schedule).scheduled->describe_domains();
    case Stage::Schedule:
      return compile_logged(f, o, CompileOutput::Schedule).scheduled->describe_schedule();
    case Stage::Loops: {
      // Without -O or a pass option: the loops exactly as lowering leaves them.
      if (!optimizing(o)) return ir::to_string(interpreted_loops(f, o));
      return ir::to_string(compile_logged(f, o, CompileOutput::Loops).optimized);
    }
    case Stage::Llvm:
      return compile_logged(f, o, CompileOutput::LlvmIr).text;
    case Stage::Asm:
      return compile_logged(f, o, CompileOutput::Assembly).text;
    case Stage::Graph:
      break;
  }
  return "";
}

}  // namespace

int run_emit(const Options& o) {
  spdlog::debug("emit: stage {}{}", stage_name(*o.stage), o.no_schedule ? ", no schedule" : "");
  bool first = true;
  // A comment line in .kiln, the C-like loop syntax, LLVM IR, or the assembly.
  std::string_view comment = "//";
  if (*o.stage == Stage::Llvm) comment = ";";
  if (*o.stage == Stage::Asm && compile_options(o).target.triple.starts_with("x86")) comment = "#";
  auto print = [&](bool many, const std::string& header, const std::string& text) {
    if (many) fmt::print("{}{} {}\n", first ? "" : "\n", comment, header);
    first = false;
    fmt::print("{}{}", text, text.ends_with('\n') ? "" : "\n");
  };
  return for_each_func(
      o,
      [&](const Prepared& p, bool many) {
        if (*o.stage == Stage::Graph) {
          throw CompileError(ErrorStage::Validate, SourceLoc{p.file, 0, 0},
                             fmt::format("--stage graph: {} is a func, not a graph", p.func.name));
        }
        print(many, fmt::format("{}: func {}", p.file, p.func.name), stage_text(p.func, o));
        return true;
      },
      print_error,
      [&](const GraphJob& j, bool many) {
        const ir::Graph& g = *j.graph;
        ir::Graph shown = optimizing(o)
                              ? timed(g.name, "graph passes",
                                      [&] { return graph::optimize(g, compile_options(o)); })
                              : g;
        if (*o.stage == Stage::Graph) {
          std::string text = ir::to_string(shown);
          // The operators the passes made are not in the file: show them.
          std::set<std::string> printed;
          for (const ir::GraphCall& c : shown.calls) {
            if (j.module->find(c.op.name) || !printed.insert(c.op.name).second) continue;
            text += "\n" + ir::to_string(c.op);
          }
          print(many, fmt::format("{}: graph {}", j.file, g.name), text);
          return true;
        }
        for (size_t k = 0; k < shown.calls.size(); ++k) {
          const ir::Func& op = shown.calls[k].op;
          print(true, fmt::format("{}: graph {}, call {}: {}", j.file, g.name, k + 1, op.name),
                stage_text(op, o));
        }
        return true;
      },
      // Only graphs have the graph stage (a --func with it is refused above).
      *o.stage == Stage::Graph && !o.func);
}

int run_run(const Options& o) {
  if (o.threads) {
    int n = kiln_runtime_set_threads(*o.threads);
    spdlog::debug("run: {} thread(s) in the runtime's pool", n);
  }
  FailFn fail = print_error;
  if (o.json) {
    fail = [](const std::string& file, const std::string& func, const std::string& message) {
      if (func.starts_with("graph ")) {
        fmt::print("{}\n", graph_json(file, func.substr(6), nullptr, &message, true));
      } else {
        fmt::print("{}\n", result_json(file, func, nullptr, &message, true));
      }
    };
  }
  return for_each_func(
      o,
      [&](const Prepared& p, bool) {
        InterpResult r = run_compiled(p, o);
        if (o.json) {
          fmt::print("{}\n", result_json(p.file, p.func.name, &r, nullptr, true));
        } else {
          // The checksums unless a check or a benchmark says more.
          if (r.mismatch || !r.bench) print_interp_text(p, r);
          if (r.bench) print_bench_text(p, *r.bench);
        }
        return !r.mismatch || r.mismatch->ok;
      },
      fail,
      [&](const GraphJob& j, bool) {
        const ir::Graph& g = *j.graph;
        graph::CompiledGraph cg = timed(g.name, "graph compilation",
                                        [&] { return graph::compile(g, compile_options(o)); });
        interp::Tensors inputs = interp::random_graph_inputs(g, o.seed);
        interp::Tensors actual = timed(g.name, "compiled run", [&] { return cg.run(inputs); });
        GraphResult r;
        r.calls_before = g.calls.size();
        r.calls_after = cg.graph().calls.size();
        r.kernels = cg.kernel_count();
        check_graph_result(j, o, inputs, actual, r);
        if (o.bench && (!r.mismatch || r.mismatch->ok)) {
          r.bench = timed(g.name, "benchmark", [&] { return measure([&] { cg.run(inputs); }, o); });
        }
        if (o.json) {
          fmt::print("{}\n", graph_json(j.file, g.name, &r, nullptr, true));
        } else {
          if (r.mismatch || !r.bench) print_graph_text(j, r, count(r.kernels, "kernel").c_str());
          if (r.bench) {
            fmt::print("bench graph {}: {} per run (median of {} x {}, {})\n", g.name,
                       duration(r.bench->median_s), r.bench->repeat,
                       count(static_cast<size_t>(r.bench->number), "run"),
                       count(static_cast<size_t>(r.bench->threads), "thread"));
          }
        }
        return !r.mismatch || r.mismatch->ok;
      });
}

int run_compile(const Options& o) {
  CompileOptions c = compile_options(o);
  spdlog::debug("compile: for {} (cpu '{}', features '{}'), -O{}", c.target.triple, c.target.cpu,
                c.target.features, c.opt_level);
  return for_each_func(
      o,
      [&](const Prepared& p, bool many) {
        const ir::Func& f = p.func;
        if (many && o.output) {
          throw CompileError(ErrorStage::Validate, SourceLoc{p.file, 0, 0},
                             fmt::format("-o {} names one file, but more than one func is "
                                         "selected; choose {} with --func",
                                         *o.output, f.name));
        }
        codegen::Artifact a = *compile_logged(f, c, CompileOutput::Artifact).artifact;
        std::string so = o.output.value_or(f.name + ".so"), meta = so + ".json";
        auto write = [&](const std::string& path, std::string_view bytes) {
          std::ofstream out(path, std::ios::binary | std::ios::trunc);
          out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
          out.close();
          if (!out) {
            throw CompileError(ErrorStage::Output, SourceLoc{path, 0, 0}, "cannot write the file");
          }
        };
        write(so, std::string_view(a.code.data(), a.code.size()));
        write(meta, a.metadata_json() + "\n");
        fmt::print("ok  {}: {} and {} ({}{}, {} bytes, key {})\n", f.name, so, meta, a.triple,
                   a.cpu.empty() ? "" : ", " + a.cpu, a.code.size(), a.key);
        return true;
      },
      print_error);
}

int run_interp(const Options& o) {
  FailFn fail = print_error;
  if (o.json) {
    fail = [](const std::string& file, const std::string& func, const std::string& message) {
      if (func.starts_with("graph ")) {
        fmt::print("{}\n", graph_json(file, func.substr(6), nullptr, &message, false));
      } else {
        fmt::print("{}\n", result_json(file, func, nullptr, &message));
      }
    };
  }
  return for_each_func(
      o,
      [&](const Prepared& p, bool) {
        InterpResult r = interpret(p, o);
        if (o.json) {
          fmt::print("{}\n", result_json(p.file, p.func.name, &r, nullptr));
        } else {
          print_interp_text(p, r);
        }
        return !r.mismatch || r.mismatch->ok;
      },
      fail,
      [&](const GraphJob& j, bool) {
        // The graph passes with the reference interpreter folding constants,
        // then each operator's lowered loops interpreted.
        const ir::Graph& g = *j.graph;
        CompileOptions c = compile_options(o);
        c.instrument = nullptr;
        ir::Graph optimized = passes::run_graph_pipeline(g, pass_context(c));
        interp::Tensors inputs = interp::random_graph_inputs(g, o.seed);
        interp::Tensors actual = interp::run_graph(
            optimized, inputs, [&](size_t, const ir::GraphCall& call, interp::Bindings& b) {
              interp::run_loops(interpreted_loops(call.op, o), b);
            });
        GraphResult r;
        r.calls_before = g.calls.size();
        r.calls_after = optimized.calls.size();
        check_graph_result(j, o, inputs, actual, r);
        if (o.json) {
          fmt::print("{}\n", graph_json(j.file, g.name, &r, nullptr, false));
        } else {
          print_graph_text(j, r, "loop interpreter");
        }
        return !r.mismatch || r.mismatch->ok;
      });
}

}  // namespace kiln::cli
