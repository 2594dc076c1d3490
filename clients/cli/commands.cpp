// The check, emit, interp, run and compile commands: for each func or graph
// selection.h picks, compile through kiln::compile with the command line's
// options, run or write what it made, and print with report.h.
#include "commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/autosched.h"
#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/ir.h"
#include "kiln/onnx.h"
#include "kiln/passes.h"
#include "kiln/run.h"
#include "kiln/runtime.h"
#include "kiln/v1/service.pb.h"
#include "remote.h"
#include "report.h"
#include "selection.h"
#include "timing.h"
#include "tuning.h"

namespace kiln::cli {

// The compile options of the command line: the target (--target, --cpu,
// --features; this machine's by default: --cpu replaces its CPU and that CPU's
// own features are used, --features adds to or removes from them), -O,
// --no-schedule, the pass options, and --print-after and --time-passes
// printing to stderr beside the IR or results on stdout.
CompileOptions compile_options(const Options& o) {
  CompileOptions c;
  c.opt_level = o.opt_level;
  c.apply_schedule = !o.no_schedule;
  c.target = target_of(o);
  c.passes.required = o.required_passes;
  c.passes.disabled = o.disabled_passes;
  if (!o.print_after.empty() || o.time_passes) {
    c.instrument = passes::print_and_time(o.print_after, o.time_passes, std::cerr);
  }
  return c;
}

namespace {

// Whether -O or a pass option asks emit for optimized output.
bool optimizing(const Options& o) {
  return o.opt_level_given || !o.print_after.empty() || o.time_passes ||
         !o.required_passes.empty() || !o.disabled_passes.empty();
}

// Compiles f (its overrides applied) up to `output` with `c`, logging how
// long each stage took (seen with --verbose).
// The stages' times (at debug level) and the compiler's warnings.
void log_compile(const ir::Func& f, const CompileResult& r) {
  for (const StageTime& t : r.times) spdlog::debug("{}: {} took {:.3f} ms", f.name, t.stage, t.ms);
  for (const std::string& note : r.notes) spdlog::warn("{}", note);
}

CompileResult compile_logged(const ir::Func& f, const CompileOptions& c, CompileOutput output) {
  CompileResult r =
      compile(CompileRequest{.func = f, .overrides = {}, .options = c, .output = output});
  log_compile(f, r);
  return r;
}

// `kiln check` and the graph checks: the schedule applied and checked, whatever --no-schedule says.
// Everything up to code generation runs: a schedule that is legal but cannot
// become loops (a data-dependent bound read outside the loops that define it)
// is refused here, not first by `run`.
void check_schedule(const ir::Func& f, const Options& o) {
  CompileOptions c = compile_options(o);
  c.apply_schedule = true;
  compile_logged(f, c, CompileOutput::Loops);
}

// The loops the loop interpreter runs: as lowering leaves them, no pass run.
ir::LoweredFunc interpreted_loops(const ir::Func& f, const Options& o) {
  CompileOptions c = compile_options(o);
  c.opt_level = 0;
  c.passes = {};
  c.instrument = nullptr;
  return compile_logged(f, c, CompileOutput::Loops).lowered;
}

// `kiln interp`: the loops as lowering leaves them, run by the loop
// interpreter on random inputs; with --check, the reference interpreter runs
// first on the same inputs (an out-of-bounds access is then reported by the
// reference, with the access and the instance) and the outputs are compared.
InterpResult interpret(const Prepared& p, const Options& o) {
  const ir::Func& f = p.func;
  // Lower first: a schedule kiln refuses should not wait for the reference run.
  ir::LoweredFunc loops = interpreted_loops(f, o);
  RunParams run_params = run_param_values(f, p.runtime_params);
  for (const std::string& name : run_params.chosen) {
    spdlog::debug("{}: run-time param {} not given; using {}", f.name, name,
                  run_params.values.at(name));
  }
  InterpResult r;
  r.params = interp::param_values(f, run_params.values);
  r.chosen = run_params.chosen;
  Bindings inputs =
      timed(f.name, "random inputs", [&] { return interp::random_bindings(f, r.params, o.seed); });
  std::optional<Bindings> expected;
  if (o.check) {
    expected = inputs;
    timed(f.name, "reference interpreter", [&] { interp::run_reference(f, *expected); });
  }
  Bindings actual = std::move(inputs);
  timed(f.name, "loop interpreter", [&] { interp::run_loops(loops, actual); });
  r.outputs = checksums(f, actual);
  if (expected) r.mismatch = interp::compare_outputs(f, *expected, actual);
  return r;
}

// The run options of the command line; each step is logged (seen with
// --verbose) as done for `subject`.
RunSpec run_spec(const Options& o, const std::string& subject) {
  RunSpec spec;
  spec.options = compile_options(o);
  spec.seed = o.seed;
  for (const auto& [name, path] : o.input_files) spec.inputs[name] = read_npy(path);
  spec.check = o.check;
  spec.bench = o.bench;
  spec.repeat = o.repeat;
  spec.number = o.number;
  if (o.gpu) spec.gpu = *o.gpu;
  spec.on_step = [subject](std::string_view step, double ms) {
    spdlog::debug("{}: {} took {:.3f} ms", subject, step, ms);
  };
  return spec;
}

// The run of `kiln run`: kiln::run_kernel.
InterpResult run_compiled(const Prepared& p, const Options& o) {
  RunSpec spec = run_spec(o, p.func.name);
  spec.runtime_params = p.runtime_params;
  RunOutcome out = run_kernel(p.func, spec);
  for (const std::string& note : out.notes) spdlog::warn("{}", note);
  if (o.save_outputs) {
    for (const ir::Buf* b : p.func.bufs_of_kind(ir::BufKind::Output))
      write_npy(out.bindings.buffers.at(b->name), *o.save_outputs + "/" + b->name + ".npy");
  }
  return InterpResult{.params = std::move(out.params),
                      .chosen = std::move(out.chosen),
                      .outputs = std::move(out.outputs),
                      .mismatch = std::move(out.mismatch),
                      .bench = std::move(out.bench)};
}

// ---------------------------------------------------------------------------
// Graphs

// The run of a graph by `kiln run`: kiln::run_graph.
GraphResult run_graph_compiled(const GraphJob& j, const Options& o) {
  if (o.gpu)
    throw UsageError(o.command, "--gpu runs funcs: graph " + j.graph->name +
                                    " runs on the CPU (leave out --gpu, or --func NAME)");
  GraphRunOutcome out = run_graph(*j.graph, run_spec(o, j.graph->name));
  for (const std::string& note : out.notes) spdlog::warn("{}", note);
  if (o.save_outputs) {
    for (const auto& [name, data] : out.tensors)
      write_npy(data, *o.save_outputs + "/" + name + ".npy");
  }
  GraphResult r;
  r.calls_before = out.calls_before;
  r.calls_after = out.calls_after;
  r.kernels = out.kernels;
  r.outputs = std::move(out.outputs);
  r.mismatch = std::move(out.mismatch);
  r.check_scope = std::move(out.check_scope);
  r.per_call_check = out.per_call_check;
  r.bench = std::move(out.bench);
  return r;
}

// With --check, the reference interpreter's run of the graph as written,
// before any compiled kernel runs (as reference_run).
std::optional<Tensors> graph_reference_run(const GraphJob& j, const Options& o,
                                           const Tensors& inputs) {
  if (!o.check) return std::nullopt;
  return timed(j.graph->name, "reference interpreter",
               [&] { return interp::run_reference(*j.graph, inputs); });
}

void check_graph_result(const GraphJob& j, const std::optional<Tensors>& expected,
                        const Tensors& actual, GraphResult& r) {
  r.outputs = checksums(j.graph->outputs, actual);
  if (expected) r.mismatch = interp::compare_buffers(j.graph->outputs, *expected, actual);
}

// kilnd when the command line names one (--server, KILN_SERVER), else none.
std::unique_ptr<Remote> remote_of(const Options& o) {
  if (!o.server) return nullptr;
  if (!o.print_after.empty() || o.time_passes)
    throw UsageError(o.command,
                     "--print-after and --time-passes work offline only: kilnd does "
                     "not send pass dumps; leave out --server (and KILN_SERVER)");
  return std::make_unique<Remote>(o);
}

}  // namespace

int run_check(const Options& o) {
  std::unique_ptr<Remote> remote = remote_of(o);
  return for_each_func(
      o,
      [&](const Prepared& p, bool) {
        if (remote) {
          remote->check(p);
        } else {
          check_schedule(p.func, o);
        }
        fmt::print("ok  {}: {}, {}\n", p.func.name, count(p.func.comps.size(), "computation"),
                   count(p.func.schedule.size(), "schedule command"));
        return true;
      },
      print_error,
      [&](const GraphJob& j, bool) {
        // Every call's operator, with its params bound, scheduled and checked.
        if (remote) {
          remote->check_graph(j);
        } else {
          for (const ir::GraphCall& c : j.graph->calls) check_schedule(c.op, o);
        }
        fmt::print("ok  graph {}: {}\n", j.graph->name, graph_summary(*j.graph));
        return true;
      });
}

namespace {

// The sketches kiln derives from f's algorithm (its own schedule left out) for the target's
// machine (a GPU's for --target nvptx64-nvidia-cuda), each a schedule block to paste into the
// func; `kiln tune` searches them all and keeps the fastest.
std::string sketch_text(const ir::Func& scheduled, const Target& target) {
  ir::Func f = autosched::algorithm_of(scheduled);
  std::vector<autosched::Sketch> sketches = autosched::sketches(
      f, {}, target.is_gpu() ? autosched::Machine::Gpu : autosched::Machine::Cpu);
  if (sketches.empty())
    return fmt::format(
        "# {}: nothing to sketch ({})\n", f.name,
        target.is_gpu() ? "for a GPU: kernels inside an algorithm loop are not supported on GPUs "
                          "yet, and nothing outside one has a data-parallel loop to spread over "
                          "threads"
                        : "no loop outside an algorithm loop to tile");
  std::string out;
  for (size_t i = 0; i < sketches.size(); ++i)
    out += fmt::format(
        "{}# {}: the {} sketch ({} of {}{})\n  schedule {{\n{}  }}\n", i ? "\n" : "", f.name,
        sketches[i].name, i + 1, sketches.size(),
        i == 0 && sketches.size() > 1 ? ": kiln tune searches each and keeps the fastest" : "",
        sketches[i].schedule);
  return out;
}

// f as its best record was tuned: with the schedule kiln sketched for it when it had none.
ir::Func as_tuned(const ir::Func& f, const v1::BestConfigResponse& best) {
  if (best.sketch().empty()) return f;
  return autosched::apply(f, autosched::Sketch{"sketch", best.sketch()});
}

// The schedule of f's best record as lines to paste into the func: its knob lines, each at
// the value found, and its schedule block (`kiln emit --stage schedule --best`).
std::string found_schedule(const ir::Func& f, const v1::BestConfigResponse& best) {
  ir::Overrides knobs(best.record().config().begin(), best.record().config().end());
  std::string text = ir::schedule_to_string(ir::apply_overrides(as_tuned(f, best), knobs));
  while (text.starts_with("\n")) text.erase(0, 1);  // no knobs: the schedule's blank line
  return fmt::format("# best {} on {}: {}: {:.4f} ms, record {} of job {}{}\n{}", f.name,
                     best.record().key(), best.record().config_text(), best.record().median_ms(),
                     best.record().id(), best.record().job(),
                     best.sketch().empty() ? "" : " (a schedule kiln sketched)", text);
}

// One stage of f's compilation, as `kiln emit --stage` prints it.
std::string stage_text(const ir::Func& f, const Options& o) {
  if (*o.stage == Stage::Sketch) return sketch_text(f, compile_options(o).target);
  // The func as its algorithm alone, what `kiln tune --auto` sends and kiln sketches.
  if (*o.stage == Stage::Algorithm) return ir::to_string(autosched::algorithm_of(f));
  EmitStage stage = EmitStage::Asm;
  switch (*o.stage) {
    case Stage::Ast:
      stage = EmitStage::Ast;
      break;
    case Stage::Ir:
      stage = EmitStage::Ir;
      break;
    case Stage::Schedule:
      stage = EmitStage::Schedule;
      break;
    case Stage::Loops:
      stage = EmitStage::Loops;
      break;
    case Stage::Llvm:
      stage = EmitStage::Llvm;
      break;
    case Stage::Cuda:
      stage = EmitStage::Cuda;
      break;
    case Stage::Asm:
    case Stage::Algorithm:
    case Stage::Sketch:
    case Stage::Graph:
      break;
  }
  CompileResult r =
      emit(CompileRequest{.func = f, .options = compile_options(o)}, stage, optimizing(o));
  log_compile(f, r);
  return r.text;
}

// A graph's stage as `kiln emit` prints it: the graph stage (after the graph
// passes when optimizing, with the operators they made), or each call's
// operator at another stage.
GraphTexts graph_texts(const GraphJob& j, const Options& o) {
  const ir::Graph& g = *j.graph;
  ir::Graph shown = optimizing(o) ? timed(g.name, "graph passes",
                                          [&] { return graph::optimize(g, compile_options(o)); })
                                  : g;
  GraphTexts out;
  if (*o.stage == Stage::Graph) {
    out.graph = graph::graph_text(shown, *j.module);
    return out;
  }
  for (const ir::GraphCall& c : shown.calls) out.calls.emplace_back(c.op.name, stage_text(c.op, o));
  return out;
}

}  // namespace

int run_emit(const Options& o) {
  std::unique_ptr<Remote> remote = remote_of(o);
  if (remote && *o.stage == Stage::Cuda)
    throw UsageError(o.command,
                     "--stage cuda is printed by this kiln only: kilnd's Emit has no CUDA "
                     "stage; leave out --server (and unset KILN_SERVER), or ask kilnd for "
                     "--stage asm (PTX)");
  if (remote && (*o.stage == Stage::Sketch || *o.stage == Stage::Algorithm))
    throw UsageError(o.command, fmt::format("--stage {0} is printed by this kiln only: kilnd's "
                                            "Emit has no {0} stage; leave out --server (and "
                                            "unset KILN_SERVER)",
                                            stage_name(*o.stage)));
  if (o.best && !remote)
    throw UsageError(o.command,
                     "--best reads kilnd's tuning records: give --server HOST:PORT (or set "
                     "KILN_SERVER)");
  if (o.best && *o.stage != Stage::Schedule)
    throw UsageError(o.command,
                     fmt::format("--best goes with --stage schedule (the schedule found, as .kiln "
                                 "lines), not --stage {}; `kiln compile FILE --best` builds it",
                                 stage_name(*o.stage)));
  if (o.key && !o.best) throw UsageError(o.command, "--key goes with --best");
  spdlog::debug("emit: stage {}{}", stage_name(*o.stage), o.no_schedule ? ", no schedule" : "");
  bool first = true;
  // A comment line in .kiln, the C-like loop syntax, LLVM IR, or the assembly.
  std::string_view comment = "//";
  if (*o.stage == Stage::Llvm) comment = ";";
  if (*o.stage == Stage::Sketch || *o.stage == Stage::Algorithm) comment = "#";
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
        std::string text;
        if (o.best)
          text = found_schedule(p.func, remote->best(p));
        else
          text = remote ? remote->emit(p, *o.stage) : stage_text(p.func, o);
        print(many, fmt::format("{}: func {}", p.file, p.func.name), text);
        return true;
      },
      print_error,
      [&](const GraphJob& j, bool many) {
        const ir::Graph& g = *j.graph;
        if (o.best)
          throw CompileError(ErrorStage::Validate, SourceLoc{j.file, 0, 0},
                             fmt::format("--best --stage schedule prints a func's schedule; {} is "
                                         "a graph: `kiln tasks FILE --key KEY` lists its "
                                         "operators' best records",
                                         g.name));
        GraphTexts texts = remote ? remote->emit_graph(j, *o.stage) : graph_texts(j, o);
        if (*o.stage == Stage::Graph) {
          print(many, fmt::format("{}: graph {}", j.file, g.name), texts.graph);
          return true;
        }
        for (size_t k = 0; k < texts.calls.size(); ++k) {
          const auto& [op, text] = texts.calls[k];
          print(true, fmt::format("{}: graph {}, call {}: {}", j.file, g.name, k + 1, op), text);
        }
        return true;
      },
      // Only graphs have the graph stage (a --func with it is refused above).
      *o.stage == Stage::Graph && !o.func);
}

int run_run(const Options& o) {
  std::unique_ptr<Remote> remote = remote_of(o);
  if (remote && o.gpu)
    throw UsageError(o.command,
                     "--gpu runs on this machine's GPU: leave out --server (and unset "
                     "KILN_SERVER)");
  if (o.threads && !remote) {
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
        InterpResult r = remote ? remote->run(p) : run_compiled(p, o);
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
        GraphResult r = remote ? remote->run_graph(j) : run_graph_compiled(j, o);
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

int run_agents(const Options& o) {
  std::unique_ptr<Remote> remote = remote_of(o);
  if (!remote)
    throw UsageError(o.command, "agents are kilnd's: give --server HOST:PORT (or set KILN_SERVER)");
  std::vector<AgentRow> agents;
  try {
    agents = remote->agents();
  } catch (const Failure& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  if (o.json) {
    for (const AgentRow& a : agents) fmt::print("{}\n", agent_json(a, now));
  } else {
    print_agents_table(agents, now);
  }
  return 0;
}

int run_measure(const Options& o) {
  std::unique_ptr<Remote> remote = remote_of(o);
  if (!remote)
    throw UsageError(
        o.command, "measure runs on kilnd's agents: give --server HOST:PORT (or set KILN_SERVER)");
  FailFn fail = print_error;
  if (o.json) {
    fail = [](const std::string& file, const std::string& func, const std::string& message) {
      fmt::print("{}\n", measurement_json(file, func, nullptr, &message));
    };
  }
  return for_each_func(
      o,
      [&](const Prepared& p, bool) {
        if (o.best)
          throw CompileError(ErrorStage::Validate, SourceLoc{p.file, 0, 0},
                             "--best measures a model or graph from its tasks' records; for a "
                             "func, `kiln compile FILE --best --key KEY`");
        Measurement m = remote->measure(p);
        if (!o.json) return print_measurement_text(p.file, p.func.name, m);
        fmt::print("{}\n", measurement_json(p.file, p.func.name, &m, nullptr));
        return m.error.empty() && (!m.mismatch || m.mismatch->ok);
      },
      fail,
      [&](const GraphJob& j, bool) {
        // A graph (a model) measured whole on an agent: one artifact, its weights with it; with
        // --best, its operators' knobs from their tasks' best records on the key.
        Measurement m = remote->measure_graph(
            j, o.best ? best_knobs(*remote, o, *j.graph, compile_options(o)) : WorkloadKnobs{});
        std::string name = "graph " + j.graph->name;
        if (!o.json) return print_measurement_text(j.file, name, m);
        fmt::print("{}\n", measurement_json(j.file, name, &m, nullptr));
        return m.error.empty();
      });
}

namespace {

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw CompileError(ErrorStage::Output, SourceLoc{path, 0, 0}, "cannot write the file");
}

// 1536 -> "1.5 KiB"
std::string bytes_text(uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < 1024 * 1024) return fmt::format("{:.1f} KiB", n / 1024.0);
  return fmt::format("{:.1f} MiB", n / (1024.0 * 1024.0));
}

}  // namespace

int run_compile(const Options& o) {
  std::unique_ptr<Remote> remote = remote_of(o);
  if (o.best && !remote)
    throw UsageError(o.command,
                     "--best reads kilnd's tuning records: give --server HOST:PORT (or set "
                     "KILN_SERVER)");
  if (o.key && !o.best) throw UsageError(o.command, "--key goes with --best");
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
        ArtifactBytes a;
        if (o.best) {
          // The knobs' values of the fastest record for this target (or key).
          v1::BestConfigResponse best = remote->best(p);
          ir::Overrides knobs(best.record().config().begin(), best.record().config().end());
          fmt::print("best {} on {}: {}: {:.4f} ms, record {} of job {}\n", f.name,
                     best.record().key(), best.record().config_text(), best.record().median_ms(),
                     best.record().id(), best.record().job());
          if (best.sketch().empty()) {
            a = remote->compile(p, knobs);
          } else {
            // Tuned as the schedule kiln sketched for it: compiled as that, which is shown.
            fmt::print("{} has no schedule; kiln sketched this one and tuned its knobs:\n{}",
                       f.name, best.sketch());
            std::string text = ir::to_string(as_tuned(f, best));
            Prepared sketched = p;
            sketched.source = &text;
            a = remote->compile(sketched, knobs);
          }
        } else if (remote) {
          a = remote->compile(p);
        } else {
          codegen::Artifact local = *compile_logged(f, c, CompileOutput::Artifact).artifact;
          a = ArtifactBytes{std::string(local.code.begin(), local.code.end()),
                            local.metadata_json(), local.triple, local.cpu, local.key};
        }
        std::string so = o.output.value_or(f.name + ".so"), meta = so + ".json";
        write_file(so, a.code);
        write_file(meta, a.metadata_json + "\n");
        fmt::print("ok  {}: {} and {} ({}{}, {} bytes, key {})\n", f.name, so, meta, a.triple,
                   a.cpu.empty() ? "" : ", " + a.cpu, a.code.size(), a.key);
        return true;
      },
      print_error,
      [&](const GraphJob& j, bool many) {
        // A whole graph (a model) as one artifact: the shared object, its weights, its .json.
        const ir::Graph& g = *j.graph;
        if (o.best && !o.key)
          throw CompileError(ErrorStage::Validate, SourceLoc{j.file, 0, 0},
                             "--best for a model or graph takes --key KEY: the device class its "
                             "tasks were tuned on (`kiln tune MODEL --key KEY`)");
        if (many && o.output) {
          throw CompileError(ErrorStage::Validate, SourceLoc{j.file, 0, 0},
                             fmt::format("-o {} names one file, but more than one func or graph "
                                         "is selected; choose one with --func or --graph",
                                         *o.output));
        }
        std::string stem = j.model ? std::filesystem::path(j.file).stem().string() : g.name;
        std::string so = o.output.value_or(stem + ".so"), meta = so + ".json";
        std::string weights = (so.ends_with(".so") ? so.substr(0, so.size() - 3) : so) + ".weights";
        ModelBytes m;
        if (remote) {
          m = remote->compile_graph(j, o.best ? best_knobs(*remote, o, g, c) : WorkloadKnobs{});
        } else {
          graph::ModelArtifact a =
              timed(g.name, "compile", [&] { return graph::compile_model(g, c); });
          for (const std::string& note : a.notes) spdlog::warn("{}", note);
          m = ModelBytes{std::string(a.code.begin(), a.code.end()),
                         std::string(a.weights.begin(), a.weights.end()),
                         a.metadata_json(),
                         a.target.triple,
                         a.target.cpu,
                         a.calls,
                         a.kernels.size(),
                         a.memory.arena_bytes,
                         a.memory.unshared_bytes};
        }
        write_file(so, m.code);
        write_file(weights, m.weights);
        write_file(meta, m.metadata_json + "\n");
        fmt::print(
            "ok  graph {}: {}, {} and {} ({}{}; {} calls, {}; weights {}, tensors {} planned, "
            "{} unshared{})\n",
            g.name, so, weights, meta, m.triple, m.cpu.empty() ? "" : ", " + m.cpu, m.calls,
            count(m.kernels, "kernel"), bytes_text(m.weights.size()), bytes_text(m.arena_bytes),
            bytes_text(m.unshared_bytes),
            g.batch.empty() ? ""
                            : fmt::format("; batch '{}' at run time, one sample each", g.batch));
        return true;
      });
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
        Tensors inputs = interp::random_graph_inputs(g, o.seed);
        std::optional<Tensors> expected = graph_reference_run(j, o, inputs);
        Tensors actual = interp::run_graph(optimized, inputs,
                                           [&](size_t, const ir::GraphCall& call, Bindings& b) {
                                             interp::run_loops(interpreted_loops(call.op, o), b);
                                           });
        GraphResult r;
        r.calls_before = g.calls.size();
        r.calls_after = optimized.calls.size();
        check_graph_result(j, expected, actual, r);
        if (o.json) {
          fmt::print("{}\n", graph_json(j.file, g.name, &r, nullptr, false));
        } else {
          print_graph_text(j, r, "loop interpreter");
        }
        return !r.mismatch || r.mismatch->ok;
      });
}

}  // namespace kiln::cli
