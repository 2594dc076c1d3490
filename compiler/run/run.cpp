// One run of a compiled func (kiln/run.h): the steps of `kiln run`.
#include "kiln/run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <type_traits>

#include "kiln/codegen.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/stats.h"

namespace kiln {
namespace {

// Calls fn and tells spec.on_step how long it took.
template <typename F>
auto step(const RunSpec& spec, std::string_view name, F&& fn) {
  auto start = std::chrono::steady_clock::now();
  auto told = [&] {
    if (!spec.on_step) return;
    std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
    spec.on_step(name, ms.count());
  };
  if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
    fn();
    told();
  } else {
    auto result = fn();
    told();
    return result;
  }
}

std::string shape_text(ir::DType t, const std::vector<int64_t>& shape) {
  return fmt::format("{}[{}]", ir::dtype_name(t), fmt::join(shape, ", "));
}

// Times a compiled kernel. The inputs are a copy: a kernel that accumulates
// into its output may change it from run to run.
BenchResult bench(const ir::Func& algorithm, const codegen::Kernel& k, Bindings b,
                  const RunSpec& spec) {
  const ir::LoweredFunc& f = k.func();
  std::vector<kiln_value> args = codegen::pack_arguments(f, b);
  auto nargs = static_cast<int32_t>(args.size());
  BenchResult out = measure(
      [&] {
        if (int32_t rc = k.call(args.data(), nargs); rc != 0) {
          throw CompileError(ErrorStage::Run, {}, fmt::format("{} returned error {}", f.name, rc));
        }
      },
      spec.repeat, spec.number);
  out.flops = algorithm_flops(algorithm, b.params, spec.options.limits);
  return out;
}

}  // namespace

int64_t algorithm_flops(const ir::Func& f, const std::map<std::string, int64_t>& params,
                        const Limits& limits) {
  CompileOptions o;
  o.opt_level = 0;
  o.apply_schedule = false;
  o.limits = limits;
  CompileResult loops =
      compile(CompileRequest{.func = f, .options = o, .output = CompileOutput::Loops});
  return ir::flop_count(loops.lowered, params);
}

std::vector<OutputSum> checksums(const std::vector<std::string>& names,
                                 const std::map<std::string, HostBuffer>& buffers) {
  std::vector<OutputSum> sums;
  for (const std::string& name : names) {
    const HostBuffer& h = buffers.at(name);
    OutputSum s{name, h.shape(), 0};
    for (int64_t i = 0; i < h.size(); ++i) s.checksum += h.get_f(i);
    sums.push_back(std::move(s));
  }
  return sums;
}

std::vector<OutputSum> checksums(const ir::Func& f, const Bindings& b) {
  std::vector<std::string> outputs;
  for (const ir::Buf* buf : f.bufs_of_kind(ir::BufKind::Output)) outputs.push_back(buf->name);
  return checksums(outputs, b.buffers);
}

std::string given_input_error(const ir::Func& f, const Tensors& inputs,
                              const std::map<std::string, int64_t>& params) {
  for (const auto& [name, data] : inputs) {
    const ir::Buf* buf = f.find_buf(name);
    if (buf == nullptr || buf->kind != ir::BufKind::Input) {
      std::vector<std::string> known;
      for (const ir::Buf* b : f.bufs_of_kind(ir::BufKind::Input)) known.push_back(b->name);
      return fmt::format("'{}' is not an input of {} (its inputs: {})", name, f.name,
                         known.empty() ? "none" : fmt::format("{}", fmt::join(known, ", ")));
    }
    std::vector<int64_t> shape = buffer_shape(*buf, params);
    if (data.dtype() != buf->dtype || data.shape() != shape) {
      return fmt::format("input {} is {} but {} declares it {} here", name,
                         shape_text(data.dtype(), data.shape()), f.name,
                         shape_text(buf->dtype, shape));
    }
    if (std::string e = value_spec_error(*buf, data, params); !e.empty()) return e;
  }
  return "";
}

namespace {

// What the CPU and GPU runs of run_kernel share: the run-time params, the inputs (given ones
// checked before anything reads them), and with spec.check the reference's run on them, before
// the compiled program runs: an out-of-bounds access is then reported by the reference, with
// the access and the instance, before a compiled kernel could make it. Returns the reference's
// outputs, if it ran.
std::optional<Bindings> prepare_run(const ir::Func& f, const RunSpec& spec, RunOutcome& r) {
  RunParams run_params = run_param_values(f, spec.runtime_params);
  r.chosen = run_params.chosen;
  r.params = interp::param_values(f, run_params.values);
  if (std::string e = given_input_error(f, spec.inputs, r.params); !e.empty()) {
    throw CompileError(ErrorStage::Interp, SourceLoc{"inputs", 0, 0}, e);
  }
  r.bindings =
      step(spec, "random inputs", [&] { return interp::random_bindings(f, r.params, spec.seed); });
  for (const auto& [name, data] : spec.inputs) r.bindings.buffers[name] = data;
  std::optional<Bindings> expected;
  if (spec.check) {
    expected = r.bindings;
    step(spec, "reference interpreter", [&] { interp::run_reference(f, *expected); });
  }
  return expected;
}

// run_kernel on a GPU of this machine.
RunOutcome run_on_gpu(const ir::Func& f, const RunSpec& spec) {
  RunOutcome r;
  cuda::Device gpu(spec.gpu);
  CompileOptions options = spec.options;
  options.target = Target{cuda::kTriple, gpu.arch(), ""};
  CompileResult compiled = step(spec, "compilation", [&] {
    return compile(CompileRequest{
        .func = f, .overrides = {}, .options = options, .output = CompileOutput::Assembly});
  });
  r.notes = compiled.notes;
  std::optional<Bindings> expected = prepare_run(f, spec, r);
  Bindings inputs = r.bindings;
  step(spec, "compiled run", [&] { gpu.run(*compiled.cuda, *compiled.cuda_binary, r.bindings); });
  r.outputs = checksums(f, r.bindings);
  if (expected) r.mismatch = interp::compare_outputs(f, *expected, r.bindings);
  if (spec.bench && (!r.mismatch || r.mismatch->ok)) {
    r.bench = step(spec, "benchmark", [&] {
      cuda::Device::Timing t =
          gpu.run(*compiled.cuda, *compiled.cuda_binary, inputs, std::max(spec.repeat, 1));
      BenchResult b;
      b.repeat = static_cast<int>(t.ms.size());
      b.number = 1;
      b.device = gpu.name() + " (" + gpu.arch() + ")";
      for (double ms : t.ms) b.round_s.push_back(ms * 1e-3);
      RoundStats stats = round_stats(b.round_s);
      b.median_s = stats.median;
      b.min_s = stats.min;
      b.flops = algorithm_flops(f, inputs.params, spec.options.limits);
      return b;
    });
  }
  return r;
}

}  // namespace

RunOutcome run_kernel(const ir::Func& f, const RunSpec& spec) {
  if (spec.gpu >= 0) return run_on_gpu(f, spec);
  RunOutcome r;
  // Compile first: a schedule kiln refuses should not wait for the reference run.
  CompileResult compiled = step(spec, "compilation", [&] {
    return compile(CompileRequest{
        .func = f, .overrides = {}, .options = spec.options, .output = CompileOutput::Kernel});
  });
  r.notes = compiled.notes;
  const codegen::Kernel& k = *compiled.kernel;
  std::optional<Bindings> expected = prepare_run(f, spec, r);
  Bindings inputs = r.bindings;
  step(spec, "compiled run", [&] { k.run(r.bindings); });
  r.outputs = checksums(f, r.bindings);
  if (expected) r.mismatch = interp::compare_outputs(f, *expected, r.bindings);
  if (spec.bench && (!r.mismatch || r.mismatch->ok)) {
    r.bench = step(spec, "benchmark", [&] { return bench(f, k, std::move(inputs), spec); });
  }
  return r;
}

namespace {

// The floating-point operations of `calls` (-1: unknown). An operator's flops are counted once
// for all its calls with the same text.
int64_t graph_flops(const std::vector<ir::GraphCall>& calls, const Limits& limits) {
  int64_t flops = 0;
  std::map<std::string, int64_t> counted;
  for (const ir::GraphCall& c : calls) {
    auto [it, fresh] = counted.emplace(ir::to_string(c.op), 0);
    if (fresh) it->second = algorithm_flops(c.op, interp::param_values(c.op), limits);
    int64_t f = it->second;
    if (f < 0 || __builtin_add_overflow(flops, f, &flops)) return -1;
  }
  return flops;
}

// Each call's kernel checked as the compiled graph runs: the reference interpreter runs the
// call's operator on the kernel's own inputs, at sampled points of each output.
struct CallCheck {
  interp::Mismatch worst;  // the first failure, else the largest error seen
  int64_t points = 0;

  void check(size_t k, const ir::GraphCall& c, const Bindings& ran) {
    if (!worst.ok) return;  // the first wrong kernel is the one to report
    int64_t compared = 0;
    interp::Mismatch m =
        interp::check_at_points(c.op, ran, kCheckPointsPerOutput, 0x6b696c6e + k, &compared);
    points += compared;
    // Named as the graph names it: the call's result tensor.
    std::vector<const ir::Buf*> outs = c.op.bufs_of_kind(ir::BufKind::Output);
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i]->name == m.buffer) m.buffer = c.results.at(i);
    }
    m.buffer = fmt::format("{} (call {}, {})", m.buffer, k + 1, c.op.name);
    if (!m.ok || m.rel_error > worst.rel_error || worst.buffer.empty()) worst = m;
  }
};

}  // namespace

GraphRunOutcome run_graph(const ir::Graph& g, const RunSpec& spec) {
  GraphRunOutcome r;
  graph::CompiledGraph cg =
      step(spec, "graph compilation", [&] { return graph::compile(g, spec.options); });
  r.notes = cg.notes();
  r.calls_before = g.calls.size();
  r.calls_after = cg.graph().calls.size();
  r.kernels = cg.kernel_count();
  Tensors inputs =
      step(spec, "random inputs", [&] { return interp::random_graph_inputs(g, spec.seed); });
  for (const auto& [name, data] : spec.inputs) {
    const ir::GraphTensor* t = g.find_tensor(name);
    if (t == nullptr || t->kind != ir::TensorKind::Input) {
      std::vector<std::string> known;
      for (const ir::GraphTensor& u : g.tensors)
        if (u.kind == ir::TensorKind::Input) known.push_back(u.name);
      throw CompileError(ErrorStage::Interp, SourceLoc{"inputs", 0, 0},
                         fmt::format("'{}' is not an input of graph {} (its inputs: {})", name,
                                     g.name, fmt::join(known, ", ")));
    }
    inputs[name] = data;
  }
  std::optional<Tensors> expected;
  graph::CompiledGraph::CallHook per_call;
  CallCheck calls;
  if (spec.check) {
    int64_t work = graph_flops(g.calls, spec.options.limits);
    if (work >= 0 && work <= kWholeGraphCheckFlops) {
      r.check_scope = "the whole graph as written";
      expected =
          step(spec, "reference interpreter", [&] { return interp::run_reference(g, inputs); });
    } else {
      per_call = [&](size_t k, const ir::GraphCall& c, const Bindings& b) { calls.check(k, c, b); };
    }
  }
  r.tensors = step(spec, "compiled run", [&] { return cg.run(inputs, per_call); });
  r.outputs = checksums(g.outputs, r.tensors);
  if (expected) r.mismatch = interp::compare_buffers(g.outputs, *expected, r.tensors);
  if (per_call) {
    r.per_call_check = true;
    r.mismatch = calls.worst;
    r.check_scope = fmt::format(
        "each of the {} calls' kernels against the reference interpreter running its operator "
        "on the kernel's own inputs, at up to {} points of each output ({} points in all; "
        "the graph as written does {} floating-point operations, past the {} a whole "
        "reference run is given)",
        cg.graph().calls.size(), kCheckPointsPerOutput, calls.points,
        graph_flops(g.calls, spec.options.limits), kWholeGraphCheckFlops);
  }
  if (spec.bench && (!r.mismatch || r.mismatch->ok)) {
    r.bench = step(spec, "benchmark",
                   [&] { return measure([&] { cg.run(inputs); }, spec.repeat, spec.number); });
    // The work of one run: every call the optimized graph makes (folded ones ran once,
    // when it was compiled).
    r.bench->flops = graph_flops(cg.graph().calls, spec.options.limits);
  }
  return r;
}

}  // namespace kiln
