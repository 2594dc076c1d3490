// kiln-runner: the child process kilnd runs each Run request in (docs/server.md).
//
// Reads a kiln.server.RunnerJob from standard input, compiles the operator for
// this machine and runs it as `kiln run` does (kiln/run.h), and writes a
// kiln.server.RunnerReply to standard output. kilnd starts it with a
// wall-clock limit and CPU and address-space rlimits: generated code never
// runs in kilnd's own process, so a crash, an endless loop or a runaway
// allocation ends this process only, and kilnd reports why.
//
// Not meant to be run by hand; `kiln-runner --version` says what it is.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>

#include "blob_store.h"
#include "kiln/run.h"
#include "kiln/runtime.h"
#include "kiln/v1/service.pb.h"
#include "request.h"
#include "runner.pb.h"

namespace kiln::server {
namespace {

Limits limits_of(const RunnerLimits& l) {
  Limits out;
  out.max_source_bytes = l.max_source_bytes();
  out.max_computations = l.max_computations();
  out.max_domain_dims = l.max_domain_dims();
  out.max_expression_nodes = l.max_expression_nodes();
  out.max_isl_operations = l.max_isl_operations();
  out.max_stage_ms = l.max_stage_ms();
  if (l.has_max_fold_bytes()) out.max_fold_bytes = static_cast<size_t>(l.max_fold_bytes());
  if (l.deadline_ms() > 0)
    out.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(l.deadline_ms());
  return out;
}

std::string where_input(const v1::BufferData& d, int k) {
  return "inputs[" + std::to_string(k) + "] (" + d.name() + ")";
}

// The declared dtype of a given input: the func's input buffer, or the
// graph's input tensor, of its name; refused when there is none.
ir::DType input_dtype(const Unit& unit, const v1::BufferData& d, int k) {
  std::string known;
  if (unit.func) {
    const ir::Buf* buf = unit.func->find_buf(d.name());
    if (buf != nullptr && buf->kind == ir::BufKind::Input) return buf->dtype;
    for (const ir::Buf* b : unit.func->bufs_of_kind(ir::BufKind::Input))
      known += (known.empty() ? "" : ", ") + b->name;
  } else {
    const ir::GraphTensor* t = unit.graph->find_tensor(d.name());
    if (t != nullptr && t->kind == ir::TensorKind::Input) return t->dtype;
    for (const ir::GraphTensor& u : unit.graph->tensors)
      if (u.kind == ir::TensorKind::Input) known += (known.empty() ? "" : ", ") + u.name;
  }
  refuse(Code::InvalidArgument, where_input(d, k) + ": " +
                                    (unit.func ? unit.func->name : unit.graph->name) +
                                    " has no input '" + d.name() +
                                    "' (its inputs: " + (known.empty() ? "none" : known) + ")");
}

// A given input as a host buffer of its declared dtype; refused when the
// values do not fit it.
HostBuffer host_buffer(ir::DType dtype, const v1::BufferData& d, int k) {
  std::string where = where_input(d, k);
  if (d.dtype() != v1::DTYPE_UNSPECIFIED && d.dtype() != wire_dtype(dtype))
    refuse(Code::InvalidArgument, where + ": given as " + v1::DType_Name(d.dtype()) + ", but " +
                                      d.name() + " is " + ir::dtype_name(dtype));
  std::vector<int64_t> shape(d.shape().begin(), d.shape().end());
  HostBuffer h;
  try {
    h = HostBuffer(dtype, shape);
  } catch (const CompileError& e) {
    refuse(Code::InvalidArgument, where + ": " + e.message());
  }
  bool is_float = dtype == ir::DType::F32 || dtype == ir::DType::F64;
  auto count = static_cast<int64_t>(is_float ? d.floats().values_size() : d.ints().values_size());
  if (is_float ? d.has_ints() : d.has_floats())
    refuse(Code::InvalidArgument, where + ": " + d.name() + " is " + ir::dtype_name(dtype) +
                                      "; give its values as " + (is_float ? "floats" : "ints"));
  if (count != h.size())
    refuse(Code::InvalidArgument, where + ": the shape holds " + std::to_string(h.size()) +
                                      " elements but " + std::to_string(count) +
                                      " values are given");
  for (int64_t i = 0; i < h.size(); ++i) {
    if (is_float) {
      h.set_f(i, d.floats().values(static_cast<int>(i)));
      continue;
    }
    int64_t v = d.ints().values(static_cast<int>(i));
    bool fits = dtype == ir::DType::I64 ||
                (dtype == ir::DType::I32 && v >= INT32_MIN && v <= INT32_MAX) ||
                (dtype == ir::DType::Bool && (v == 0 || v == 1));
    if (!fits)
      refuse(Code::InvalidArgument, where + ": " + d.name() + "[flat " + std::to_string(i) +
                                        "] = " + std::to_string(v) + " is not a " +
                                        ir::dtype_name(dtype));
    h.set_i(i, v);
  }
  return h;
}

void to_wire(const std::string& name, const HostBuffer& h, v1::BufferData* out) {
  out->set_name(name);
  out->set_dtype(wire_dtype(h.dtype()));
  for (int64_t e : h.shape()) out->add_shape(e);
  bool is_float = h.dtype() == ir::DType::F32 || h.dtype() == ir::DType::F64;
  for (int64_t i = 0; i < h.size(); ++i) {
    if (is_float) {
      out->mutable_floats()->add_values(h.get_f(i));
    } else {
      out->mutable_ints()->add_values(h.get_i(i));
    }
  }
}

void run(const RunnerJob& job, v1::RunResponse* response) {
  const v1::RunRequest& request = job.request();
  if (request.options().target().triple().size() > 0)
    refuse(Code::InvalidArgument,
           "options.target: Run compiles for the server's own machine; leave the target empty "
           "(Compile makes artifacts for other targets)");
  Limits limits = limits_of(job.limits());
  std::optional<BlobStore> blobs;
  if (!job.blob_dir().empty()) blobs.emplace(job.blob_dir(), 0);
  Unit unit = resolve_unit(request.op(), limits, blobs ? &*blobs : nullptr);
  if (unit.graph && !unit.graph->batch.empty()) {
    // A model's run-time batch, given inputs of n samples: imported for n, as `kiln run` does.
    for (const v1::BufferData& d : request.inputs()) {
      const std::vector<std::string>& batched = unit.graph->batched_inputs;
      if (std::find(batched.begin(), batched.end(), d.name()) == batched.end()) continue;
      if (d.shape_size() == 0 || d.shape(0) == 1) break;
      v1::Operator op = request.op();
      (*op.mutable_model()->mutable_dims())[unit.graph->batch] = d.shape(0);
      unit = resolve_unit(op, limits, blobs ? &*blobs : nullptr);
      break;
    }
  }
  CompileOptions options = compile_options(request.options(), limits);
  // threads, number and repeat were checked at kilnd's boundary (validate.h).
  if (request.threads() > 0) kiln_runtime_set_threads(request.threads());
  // A test hook: kiln's kernels do not crash (docs/limits.md), so the tests
  // of how kilnd survives a runner that does ask for one by the operator's name.
  if (const char* crash = std::getenv("KILN_RUNNER_TEST_CRASH");
      crash && (unit.func ? unit.func->name : unit.graph->name) == crash)
    std::raise(SIGSEGV);

  RunSpec spec;
  spec.options = options;
  spec.runtime_params.insert(request.runtime_params().begin(), request.runtime_params().end());
  for (int k = 0; k < request.inputs_size(); ++k) {
    const v1::BufferData& d = request.inputs(k);
    if (spec.inputs.contains(d.name()))
      refuse(Code::InvalidArgument,
             "inputs[" + std::to_string(k) + "]: " + d.name() + " is given twice");
    spec.inputs[d.name()] = host_buffer(input_dtype(unit, d, k), d, k);
  }
  spec.seed = request.seed();
  spec.check = request.check();
  spec.bench = request.bench();
  spec.repeat = request.repeat() > 0 ? request.repeat() : 5;
  spec.number = request.number();
  spec.on_step = [&](std::string_view step, double ms) {
    if (step != "compilation" && step != "graph compilation") return;
    v1::StageTime* t = response->add_times();
    t->set_stage("compile");
    t->set_ms(ms);
  };
  std::vector<OutputSum> outputs;
  std::optional<interp::Mismatch> mismatch;
  std::optional<BenchResult> bench;
  std::vector<std::string> notes;
  const Tensors* data = nullptr;
  RunOutcome func_run;
  GraphRunOutcome graph_run;
  if (unit.func) {
    ir::Func f = ir::apply_overrides(
        *unit.func, ir::Overrides(request.options().set().begin(), request.options().set().end()));
    func_run = run_kernel(f, spec);
    response->mutable_params()->insert(func_run.params.begin(), func_run.params.end());
    for (const std::string& c : func_run.chosen) response->add_chosen(c);
    outputs = std::move(func_run.outputs);
    mismatch = std::move(func_run.mismatch);
    bench = std::move(func_run.bench);
    notes = std::move(func_run.notes);
    data = &func_run.bindings.buffers;
  } else {
    if (!request.options().set().empty() || !request.runtime_params().empty())
      refuse(Code::InvalidArgument, "options.set and runtime_params apply to funcs; graph " +
                                        unit.graph->name +
                                        " binds its operators' params in its calls");
    graph_run = run_graph(*unit.graph, spec);
    v1::GraphRun* g = response->mutable_graph();
    g->set_calls(static_cast<int32_t>(graph_run.calls_before));
    g->set_calls_after_passes(static_cast<int32_t>(graph_run.calls_after));
    g->set_kernels(static_cast<int32_t>(graph_run.kernels));
    outputs = std::move(graph_run.outputs);
    mismatch = std::move(graph_run.mismatch);
    bench = std::move(graph_run.bench);
    notes = std::move(graph_run.notes);
    data = &graph_run.tensors;
  }

  for (const OutputSum& s : outputs) {
    v1::OutputChecksum* c = response->add_checksums();
    c->set_name(s.buf);
    for (int64_t e : s.shape) c->add_shape(e);
    c->set_checksum(s.checksum);
    if (request.return_outputs()) to_wire(s.buf, data->at(s.buf), response->add_outputs());
  }
  if (mismatch) wire_check(*mismatch, response->mutable_check());
  if (mismatch && graph_run.per_call_check)
    response->mutable_check()->set_per_call_scope(graph_run.check_scope);
  if (bench) {
    const BenchResult& b = *bench;
    v1::Bench* w = response->mutable_bench();
    w->set_repeat(b.repeat);
    w->set_number(b.number);
    w->set_threads(b.threads);
    w->set_median_ms(b.median_s * 1e3);
    w->set_min_ms(b.min_s * 1e3);
    w->set_flops(b.flops);
    for (double s : b.round_s) w->add_round_ms(s * 1e3);
  }
  add_notes(notes, response->mutable_notes());
}

// A run that hit its address-space limit: RESOURCE_EXHAUSTED saying which.
void out_of_memory(RunnerReply& reply, const std::string& what) {
  rlimit as{};
  getrlimit(RLIMIT_AS, &as);
  reply.Clear();
  reply.set_code(static_cast<int>(Code::ResourceExhausted));
  reply.set_message(as.rlim_cur == RLIM_INFINITY
                        ? what
                        : what + ", more than its limit of " + std::to_string(as.rlim_cur >> 20) +
                              " MiB of address space allows (kilnd --run-memory-mb)");
}

}  // namespace
}  // namespace kiln::server

int main(int argc, char**) {
  using namespace kiln::server;
  if (argc > 1) {
    std::fprintf(stderr,
                 "kiln-runner: runs one Run request for kilnd, which starts it; it reads a job "
                 "on standard input and takes no arguments\n");
    return 2;
  }
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  RunnerJob job;
  RunnerReply reply;
  // The job wraps the RunRequest kilnd accepted: one level more than its own.
  if (!parse_message(input, job, 1)) {
    std::fprintf(stderr, "kiln-runner: the job on standard input is not a RunnerJob\n");
    return 3;
  }
  try {
    run(job, reply.mutable_response());
  } catch (const std::bad_alloc&) {
    out_of_memory(reply, "the run ran out of memory");
  } catch (const kiln::HostAllocError& e) {
    out_of_memory(reply, "the run " + e.message());
  } catch (...) {
    Status s = status_of(std::current_exception(), job.request().op());
    reply.clear_response();
    reply.set_code(static_cast<int>(s.code));
    reply.set_message(s.message);
  }
  std::string out;
  if (!reply.SerializeToString(&out)) return 4;
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 4;
}
