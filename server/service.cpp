// The service core: requests to the compile pipeline and back.
#include "service.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "child_process.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/frontend.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/operator_def.h"
#include "kiln/records.h"
#include "kiln/run.h"
#include "kiln/v1/service.pb.h"
#include "request.h"
#include "runner.pb.h"
#include "tuning.h"

namespace kiln::server {

namespace {

void add_times(const CompileResult& r, google::protobuf::RepeatedPtrField<v1::StageTime>* out) {
  for (const StageTime& t : r.times) {
    v1::StageTime* s = out->Add();
    s->set_stage(t.stage);
    s->set_ms(t.ms);
  }
}

void to_wire(const ir::Expr& e, v1::IntExpression* out) {
  out->set_text(ir::to_string(e));
  for (const std::string& t : cuda::postfix(e)) out->add_postfix(t);
}

void to_wire(const codegen::Artifact& a, v1::Artifact* out) {
  out->set_name(a.name);
  out->set_kind(a.kind);
  out->mutable_target()->set_triple(a.triple);
  out->mutable_target()->set_cpu(a.cpu);
  out->mutable_target()->set_features(a.features);
  out->set_opt_level(a.opt_level);
  out->set_fast_math(a.fast_math);
  out->set_entry(a.entry);
  for (const codegen::ArtifactArg& arg : a.args) {
    v1::ArtifactArgument* w = out->add_arguments();
    w->set_kind(arg.kind == codegen::ArtifactArg::Kind::Param ? v1::ArtifactArgument::PARAM
                                                              : v1::ArtifactArgument::BUFFER);
    w->set_name(arg.name);
    w->set_dtype(wire_dtype(arg.dtype));
    w->set_output(arg.kind == codegen::ArtifactArg::Kind::Buffer &&
                  arg.role == ir::BufKind::Output);
    for (const std::string& e : arg.shape) w->add_shape(e);
  }
  for (const std::string& i : a.imports) out->add_imports(i);
  out->set_code(std::string(a.code.begin(), a.code.end()));
  out->set_code_sha256(a.code_sha256);
  out->set_key(a.key);
  for (size_t k = 0; k < a.checks.size(); ++k) {
    const ir::RuntimeCheck& c = a.checks[k];
    v1::RuntimeCheck* w = out->add_checks();
    w->set_status(static_cast<int32_t>(ir::kStatusCheckBase + static_cast<int64_t>(k)));
    w->set_kind(ir::RuntimeCheck::kind_name(c.kind));
    w->set_subject(c.subject);
    w->set_message(c.message);
  }
  out->set_metadata_json(a.metadata_json());
  for (const codegen::Artifact::GpuKernel& k : a.kernels) {
    v1::GpuKernel* w = out->add_kernels();
    w->set_name(k.name);
    for (const ir::Expr& g : k.grid) to_wire(g, w->add_grid());
    for (int64_t b : k.block) w->add_block(b);
    w->set_shared_bytes(k.shared_bytes);
  }
  for (const codegen::Artifact::GpuConstant& k : a.constants) {
    v1::GpuConstant* w = out->add_constants();
    w->set_buffer(k.buffer);
    w->set_symbol(k.symbol);
  }
  for (const codegen::Artifact::GpuTemp& t : a.temps) {
    v1::GpuTemp* w = out->add_temps();
    w->set_name(t.name);
    w->set_dtype(wire_dtype(t.dtype));
    for (const ir::Expr& e : t.shape) to_wire(e, w->add_shape());
  }
}

}  // namespace

// At most `workers` requests compile at once; at most `queue_depth` more wait.
class Admission {
 public:
  Admission(int workers, int queue_depth)
      : workers_(workers > 0 ? workers
                             : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
        queue_depth_(std::max(0, queue_depth)) {}

  // Holds a worker for as long as it lives.
  class Ticket {
   public:
    explicit Ticket(Admission& a) : a_(a) {}
    ~Ticket() {
      std::lock_guard<std::mutex> lock(a_.mu_);
      --a_.running_;
      a_.freed_.notify_one();
    }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    Admission& a_;
  };

  // A worker, once one is free; refuses at once when the queue is full, and
  // gives up at the deadline.
  std::unique_ptr<Ticket> enter(const CallOptions& call) {
    std::unique_lock<std::mutex> lock(mu_);
    if (running_ >= workers_ && waiting_ >= queue_depth_)
      refuse(Code::ResourceExhausted,
             fmt::format("kilnd is busy: {} compiling and {} waiting, as many as it takes "
                         "(--workers {}, --queue-depth {}); try again later",
                         running_, waiting_, workers_, queue_depth_));
    ++waiting_;
    // Woken when a worker frees, and every 50 ms to see whether the client
    // went away.
    while (running_ >= workers_) {
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      if (call.deadline && *call.deadline < until) until = *call.deadline;
      freed_.wait_until(lock, until);
      if (running_ < workers_) break;
      if (call.cancelled && call.cancelled()) {
        --waiting_;
        refuse(Code::Cancelled, "the request was cancelled while it waited for a worker");
      }
      if (call.deadline && std::chrono::steady_clock::now() >= *call.deadline) {
        --waiting_;
        refuse(Code::DeadlineExceeded,
               "the request's deadline passed while it waited for a worker");
      }
    }
    --waiting_;
    ++running_;
    return std::make_unique<Ticket>(*this);
  }

 private:
  const int workers_, queue_depth_;
  std::mutex mu_;
  std::condition_variable freed_;
  int running_ = 0, waiting_ = 0;
};

struct Service::Impl {
  ServiceOptions options;
  CompileCache cache;
  Admission admission;
  std::unique_ptr<Tuning> tuning;  // made last, stopped first
  explicit Impl(ServiceOptions o)
      : options(std::move(o)),
        cache(options.cache_bytes, options.data_dir),
        admission(options.workers, options.queue_depth) {}

  // The limits of one call: the service's, with the call's deadline.
  Limits limits(const CallOptions& call) const {
    Limits l = options.limits;
    l.deadline = call.deadline;
    l.cancelled = call.cancelled;
    return l;
  }

  std::unique_ptr<Admission::Ticket> admit(const CallOptions& call) {
    std::unique_ptr<Admission::Ticket> t = admission.enter(call);
    if (options.on_admitted) options.on_admitted();
    return t;
  }

  // The artifact of `r`, from the cache or compiled (holding a worker).
  v1::CompileResponse artifact(const CompileRequest& r, const CallOptions& call);
};

Service::Service(ServiceOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  const std::string& dir = impl_->options.data_dir;
  std::string records =
      dir.empty() ? records::kInMemory : (std::filesystem::path(dir) / "records.db").string();
  try {
    impl_->tuning = std::make_unique<Tuning>(*this, records);
  } catch (const records::RecordsError& e) {
    throw std::runtime_error(e.what());
  }
}

Service::~Service() {
  if (impl_->tuning) impl_->tuning->stop();
}

Tuning& Service::tuning() { return *impl_->tuning; }
const Limits& Service::limits() const { return impl_->options.limits; }

CacheStats Service::cache_stats() const { return impl_->cache.stats(); }

void Service::set_fleet(Fleet* fleet) { impl_->options.fleet = fleet; }

namespace {

// A graph binds its operators' params in its calls: `set` has nothing to set.
void refuse_set_for_graph(const ir::Graph& g, const v1::CompileOptions& o) {
  if (!o.set().empty())
    refuse(Code::InvalidArgument,
           fmt::format("options.set {}: set applies to funcs; graph {} binds its operators' "
                       "params in its calls (op(x, NAME = INT))",
                       o.set().begin()->first, g.name));
}

// The pipeline's stage of a wire stage (not GRAPH).
EmitStage emit_stage(v1::Stage s) {
  switch (s) {
    case v1::AST:
      return EmitStage::Ast;
    case v1::IR:
      return EmitStage::Ir;
    case v1::SCHEDULE:
      return EmitStage::Schedule;
    case v1::LOOPS:
      return EmitStage::Loops;
    case v1::LLVM:
      return EmitStage::Llvm;
    default:
      return EmitStage::Asm;
  }
}

// One stage of a func's compilation as `kiln emit --stage` prints it; the
// compiler's warnings go to `notes`.
std::string stage_text(CompileRequest r, v1::Stage stage, bool optimizing,
                       std::vector<std::string>& notes) {
  CompileResult result = kiln::emit(std::move(r), emit_stage(stage), optimizing);
  notes.insert(notes.end(), result.notes.begin(), result.notes.end());
  return result.text;
}

}  // namespace

Status Service::check(const v1::CheckRequest& request, v1::CheckResponse* response,
                      const CallOptions& call) {
  try {
    auto ticket = impl_->admit(call);
    Limits limits = impl_->limits(call);
    Unit unit = resolve_unit(request.op(), limits);
    // `kiln check`: the schedule is always applied, and everything up to code
    // generation runs.
    CompileOptions options = compile_options(request.options(), limits);
    options.apply_schedule = true;
    if (unit.graph) {
      // Every call's operator, with its params bound, scheduled and checked.
      refuse_set_for_graph(*unit.graph, request.options());
      for (const ir::GraphCall& c : unit.graph->calls) {
        kiln::compile(
            CompileRequest{.func = c.op, .options = options, .output = CompileOutput::Loops});
      }
      response->set_name(unit.graph->name);
      response->set_calls(static_cast<int32_t>(unit.graph->calls.size()));
      return {};
    }
    CompileResult result = kiln::compile(CompileRequest{
        .func = *unit.func,
        .overrides = ir::Overrides(request.options().set().begin(), request.options().set().end()),
        .options = options,
        .output = CompileOutput::Loops});
    response->set_name(result.func.name);
    response->set_computations(static_cast<int32_t>(result.func.comps.size()));
    response->set_schedule_commands(static_cast<int32_t>(result.func.schedule.size()));
    add_times(result, response->mutable_times());
    return {};
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

Status Service::emit(const v1::EmitRequest& request, v1::EmitResponse* response,
                     const CallOptions& call) {
  try {
    auto ticket = impl_->admit(call);
    const v1::CompileOptions& wire = request.options();
    bool optimizing =
        wire.has_opt_level() || wire.required_passes_size() > 0 || wire.disabled_passes_size() > 0;
    if (!v1::Stage_IsValid(request.stage()) || request.stage() == v1::STAGE_UNSPECIFIED)
      refuse(Code::InvalidArgument,
             "stage: set one of AST, IR, SCHEDULE, LOOPS, LLVM, ASM, GRAPH (docs/cli.md, emit)");
    Limits limits = impl_->limits(call);
    Unit unit = resolve_unit(request.op(), limits);
    CompileOptions options = compile_options(wire, limits);
    std::vector<std::string> notes;
    if (unit.func) {
      if (request.stage() == v1::GRAPH)
        refuse(Code::InvalidArgument,
               fmt::format("stage GRAPH: {} is a func, not a graph", unit.func->name));
      CompileRequest r{.func = *unit.func,
                       .overrides = ir::Overrides(wire.set().begin(), wire.set().end()),
                       .options = options};
      response->set_text(stage_text(std::move(r), request.stage(), optimizing, notes));
    } else {
      const ir::Graph& g = *unit.graph;
      refuse_set_for_graph(g, wire);
      ir::Graph shown = optimizing ? graph::optimize(g, options) : g;
      if (request.stage() == v1::GRAPH) {
        response->set_text(graph::graph_text(shown, unit.module));
      } else {
        for (const ir::GraphCall& c : shown.calls) {
          v1::EmitCall* e = response->add_calls();
          e->set_op(c.op.name);
          e->set_text(stage_text(CompileRequest{.func = c.op, .options = options}, request.stage(),
                                 optimizing, notes));
        }
      }
    }
    add_notes(notes, response->mutable_notes());
    return {};
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

v1::CompileResponse Service::Impl::artifact(const CompileRequest& r, const CallOptions& call) {
  std::string key = cache_key(r);
  // A hit needs no worker: it never waits behind compilations.
  if (std::optional<v1::CompileResponse> cached = cache.find(key)) {
    cached->set_cache_hit(true);
    return std::move(*cached);
  }
  auto ticket = admit(call);
  CompileResult result = kiln::compile(r);
  v1::CompileResponse response;
  to_wire(*result.artifact, response.mutable_artifact());
  add_times(result, response.mutable_times());
  add_notes(result.notes, response.mutable_notes());
  response.set_compiler_version(compiler_version());
  v1::CompileResponse cached = response;
  cached.clear_times();
  cache.add(key, cached);
  return response;
}

Status Service::compile(const v1::CompileRequest& request, v1::CompileResponse* response,
                        const CallOptions& call) {
  try {
    *response = impl_->artifact(pipeline_request(request.op(), request.options(),
                                                 impl_->limits(call), CompileOutput::Artifact),
                                call);
    return {};
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

Status Service::list_agents(v1::ListAgentsResponse* response) {
  if (!impl_->options.fleet) return {};
  auto unix_ms = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  for (const AgentView& a : impl_->options.fleet->agents()) {
    v1::AgentStatus* w = response->add_agents();
    w->set_id(a.id);
    w->set_address(a.address);
    *w->mutable_device() = a.device;
    w->set_slots(a.slots);
    w->set_running(a.running);
    w->set_jobs_done(a.jobs_done);
    w->set_jobs_failed(a.jobs_failed);
    w->set_connected_unix_ms(unix_ms(a.connected));
    w->set_last_seen_unix_ms(unix_ms(a.last_seen));
  }
  return {};
}

namespace {

v1::ElementType element_type(ir::DType t) { return static_cast<v1::ElementType>(wire_dtype(t)); }

// Waits for `f`, seeing every 50 ms whether the call was cancelled or its
// deadline passed.
FleetOutcome wait_for(std::future<FleetOutcome>& f, const CallOptions& call) {
  while (f.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (call.cancelled && call.cancelled())
      refuse(Code::Cancelled, "the request was cancelled while its job was measured");
    if (call.deadline && std::chrono::steady_clock::now() >= *call.deadline)
      refuse(Code::DeadlineExceeded, "the request's deadline passed while its job was measured");
  }
  return f.get();
}

// The device of a connected agent of `key` (the fleet waits a while for one).
v1::Device device_for(const Fleet& fleet, const std::string& key, const CallOptions& call) {
  std::optional<v1::Device> d = fleet.await_device(key, [&] {
    return (call.deadline && std::chrono::steady_clock::now() >= *call.deadline) ||
           (call.cancelled && call.cancelled());
  });
  if (d) return *d;
  std::vector<std::string> keys = fleet.keys();
  refuse(Code::Unavailable,
         fmt::format("no agent of key {} is connected (connected: {})", key,
                     keys.empty() ? "none" : fmt::format("{}", fmt::join(keys, ", "))));
}

}  // namespace

Status Service::agent_device(const std::string& key, v1::Device* device, const CallOptions& call) {
  try {
    if (!impl_->options.fleet)
      refuse(Code::Unavailable,
             "this kilnd takes no agents: start it with --agent-token-file FILE or --local-agent "
             "(docs/agents.md)");
    *device = device_for(*impl_->options.fleet, key, call);
    return {};
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator{});
  }
}

namespace {

// The job for an agent: the artifact's arguments in its order (params with
// their values, buffers with their shapes; `inputs`' data for the inputs when
// kilnd made them) and how to time it.
v1::MeasureJob measure_job(const v1::Artifact& a, const ir::Func& f,
                           const std::map<std::string, int64_t>& params,
                           const std::optional<Bindings>& inputs, const v1::MeasureRequest& request,
                           const ServiceOptions& options) {
  v1::MeasureJob job;
  job.set_entry(a.entry());
  job.set_artifact_kind(a.kind());
  job.set_seed(request.seed());
  if (request.has_gpu()) {
    job.set_gpu(request.gpu());
    // The launches and temporaries sized for these params.
    auto value = [&](const v1::IntExpression& e, const std::string& what) {
      std::vector<std::string> tokens(e.postfix().begin(), e.postfix().end());
      std::optional<int64_t> v = cuda::eval_postfix(tokens, params);
      if (!v || *v < 0 || *v > std::numeric_limits<uint32_t>::max())
        refuse(Code::InvalidArgument,
               fmt::format("{} of {} is {} = {} under the job's params", what, a.name(), e.text(),
                           v ? std::to_string(*v) : "undefined"));
      return *v;
    };
    for (const v1::GpuKernel& k : a.kernels()) {
      v1::GpuLaunch* l = job.add_launches();
      l->set_kernel(k.name());
      for (const v1::IntExpression& g : k.grid())
        l->add_grid(static_cast<uint32_t>(value(g, "the grid of kernel " + k.name())));
      for (int64_t b : k.block()) l->add_block(static_cast<uint32_t>(b));
      l->set_shared_bytes(static_cast<uint32_t>(k.shared_bytes()));
    }
    for (const v1::GpuTemp& t : a.temps()) {
      uint64_t bytes = 0;
      for (ir::DType d :
           {ir::DType::Bool, ir::DType::I32, ir::DType::I64, ir::DType::F32, ir::DType::F64})
        if (wire_dtype(d) == t.dtype()) bytes = ir::dtype_bytes(d);
      for (const v1::IntExpression& e : t.shape()) {
        int64_t n = value(e, "the size of temporary " + t.name());
        if (n > 0 && bytes > (uint64_t{1} << 62) / static_cast<uint64_t>(n))
          refuse(Code::InvalidArgument,
                 "temporary " + t.name() + " of " + a.name() + " is too large");
        bytes *= static_cast<uint64_t>(n);
      }
      job.add_temp_bytes(bytes);
    }
    for (const v1::GpuConstant& k : a.constants()) {
      int index = -1;
      for (int i = 0; i < a.arguments_size(); ++i)
        if (a.arguments(i).name() == k.buffer()) index = i;
      if (index < 0)
        refuse(Code::Internal, fmt::format("artifact {} reads buffer {} from constant memory but "
                                           "has no such argument",
                                           a.name(), k.buffer()));
      v1::GpuConstantCopy* c = job.add_constants();
      c->set_argument(static_cast<uint32_t>(index));
      c->set_symbol(k.symbol());
    }
  }
  v1::MeasureSettings& m = *job.mutable_settings();
  m = request.settings();
  if (m.time_limit_ms() <= 0) m.set_time_limit_ms(static_cast<int32_t>(options.measure_timeout_ms));
  if (m.memory_limit_bytes() == 0) m.set_memory_limit_bytes(options.measure_memory_bytes);
  job.set_return_outputs(request.return_outputs() || request.check());
  for (const v1::ArtifactArgument& arg : a.arguments()) {
    v1::JobArgument* w = job.add_arguments();
    w->set_name(arg.name());
    if (arg.kind() == v1::ArtifactArgument::PARAM) {
      w->set_value(params.at(arg.name()));
      continue;
    }
    const ir::Buf* b = f.find_buf(arg.name());
    w->set_is_buffer(true);
    w->set_type(element_type(b->dtype));
    w->set_output(arg.output());
    for (int64_t e : buffer_shape(*b, params)) w->add_shape(e);
    if (inputs && !arg.output()) {
      const HostBuffer& data = inputs->buffers.at(arg.name());
      w->set_data(std::string(static_cast<const char*>(data.data()),
                              static_cast<size_t>(data.size()) * ir::dtype_bytes(b->dtype)));
    }
  }
  return job;
}

// The agent's outputs against the reference interpreter's on the same
// inputs; WRONG_ANSWER when they differ.
void check_outputs(const ir::Func& f, const std::map<std::string, int64_t>& params,
                   const Bindings& inputs, const std::string& agent, v1::MeasureResult& result,
                   v1::OutputCheck* check) {
  Bindings expected = inputs;
  interp::run_reference(f, expected);
  Bindings actual = inputs;
  for (const v1::OutputValues& o : result.outputs()) {
    const ir::Buf* b = f.find_buf(o.name());
    if (!b) continue;
    HostBuffer h(b->dtype, buffer_shape(*b, params));
    size_t bytes = static_cast<size_t>(h.size()) * ir::dtype_bytes(b->dtype);
    if (o.data().size() != bytes)
      refuse(Code::Internal, fmt::format("agent {} returned {} bytes for output {}, not {}", agent,
                                         o.data().size(), o.name(), bytes));
    std::memcpy(h.data(), o.data().data(), bytes);
    actual.buffers[o.name()] = std::move(h);
  }
  interp::Mismatch mismatch = interp::compare_outputs(f, expected, actual);
  wire_check(mismatch, check);
  if (!mismatch.ok) {
    result.set_error(v1::MeasureResult::WRONG_ANSWER);
    result.set_message("the outputs differ from the reference interpreter's: " +
                       mismatch.describe());
  }
}

}  // namespace

Status Service::measure(const v1::MeasureRequest& request, v1::MeasureResponse* response,
                        const CallOptions& call) {
  try {
    Fleet* fleet = impl_->options.fleet;
    if (!fleet)
      refuse(Code::Unavailable,
             "this kilnd takes no agents: start it with --agent-token-file FILE (docs/agents.md)");
    if (request.key().empty())
      refuse(Code::InvalidArgument,
             "key: name the device class to measure on (`kiln agents` lists them)");
    const v1::Target& t = request.options().target();
    if (!t.triple().empty() || !t.cpu().empty() || !t.features().empty())
      refuse(Code::InvalidArgument,
             "options.target: a measurement compiles for its agent's own target; leave it unset");
    v1::Device device = device_for(*fleet, request.key(), call);

    // Compiled for the agent's triple, CPU and features (or its GPU's architecture), through
    // the cache.
    v1::CompileOptions options = request.options();
    if (request.has_gpu()) {
      if (request.gpu() < 0 || request.gpu() >= device.gpus_size())
        refuse(Code::FailedPrecondition,
               fmt::format("gpu: the agents of key {} have {} GPU{}{}", request.key(),
                           device.gpus_size(), device.gpus_size() == 1 ? "" : "s",
                           device.gpus_size() > 0
                               ? fmt::format(" (0 to {})", device.gpus_size() - 1)
                               : std::string(": measure on their CPU (leave out gpu)")));
      const v1::Gpu& g = device.gpus(request.gpu());
      options.mutable_target()->set_triple(cuda::kTriple);
      options.mutable_target()->set_cpu(cuda::arch_of(g.compute_major(), g.compute_minor()));
      options.mutable_target()->set_features("");
    } else {
      options.mutable_target()->set_triple(device.triple());
      options.mutable_target()->set_cpu(device.cpu());
      options.mutable_target()->set_features(device.features());
    }
    CompileRequest r =
        pipeline_request(request.op(), options, impl_->limits(call), CompileOutput::Artifact);
    v1::CompileResponse compiled = impl_->artifact(r, call);
    const v1::Artifact& a = compiled.artifact();
    response->set_artifact_key(a.key());
    response->set_cache_hit(compiled.cache_hit());
    *response->mutable_notes() = compiled.notes();
    *response->mutable_times() = compiled.times();
    response->set_compiler_version(compiler_version());

    // Inputs are made here when they must be checked or meet a value spec;
    // the agent makes the others.
    ir::Func f = ir::apply_overrides(r.func, r.overrides);
    std::map<std::string, int64_t> given(request.runtime_params().begin(),
                                         request.runtime_params().end());
    std::map<std::string, int64_t> params =
        interp::param_values(f, run_param_values(f, given).values);
    for (const auto& [name, value] : params) (*response->mutable_params())[name] = value;
    bool specs = false;
    for (const ir::Buf* b : f.bufs_of_kind(ir::BufKind::Input))
      specs |= !ir::value_spec_text(b->values).empty();
    std::optional<Bindings> inputs;
    if (request.check() || specs) inputs = interp::random_bindings(f, params, request.seed());

    FleetJob job;
    job.key = request.key();
    job.priority = request.priority();
    job.code = std::make_shared<const std::string>(a.code());
    job.code_sha256 = a.code_sha256();
    job.job = measure_job(a, f, params, inputs, request, impl_->options);
    std::future<FleetOutcome> pending = fleet->submit(std::move(job));
    FleetOutcome out = wait_for(pending, call);
    if (!out.status.ok()) return out.status;
    response->set_agent_id(out.agent_id);
    *response->mutable_device() = out.device;
    response->set_tries(out.tries);
    v1::MeasureResult& result = *response->mutable_result();
    result = std::move(out.result);
    RoundStats stats = round_stats({result.round_ms().begin(), result.round_ms().end()});
    response->set_median_ms(stats.median);
    response->set_min_ms(stats.min);
    if (request.check() && result.error() == v1::MeasureResult::OK)
      check_outputs(f, params, *inputs, out.agent_id, result, response->mutable_check());
    if (!request.return_outputs())
      for (v1::OutputValues& o : *result.mutable_outputs()) o.clear_data();
    return {};
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

namespace {

// Where kiln-runner is: beside the running executable (kilnd, or a test).
std::string default_runner_path() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "kiln-runner";
  return (self.parent_path() / "kiln-runner").string();
}

RunnerLimits runner_limits(const Limits& l, const CallOptions& call) {
  RunnerLimits out;
  out.set_max_source_bytes(l.max_source_bytes);
  out.set_max_computations(l.max_computations);
  out.set_max_domain_dims(l.max_domain_dims);
  out.set_max_expression_nodes(l.max_expression_nodes);
  out.set_max_isl_operations(l.max_isl_operations);
  out.set_max_stage_ms(l.max_stage_ms);
  if (call.deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        *call.deadline - std::chrono::steady_clock::now());
    out.set_deadline_ms(std::max<int64_t>(1, left.count()));
  }
  return out;
}

// What the end of a runner means to the caller. `by_deadline`: the wall-clock
// limit was the request's deadline, not kilnd's run timeout.
Status runner_status(const ChildResult& c, const ServiceOptions& o, const std::string& runner,
                     bool by_deadline, v1::RunResponse* response) {
  auto stderr_tail = [&] {
    std::string e = c.err;
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
    size_t nl = e.rfind('\n');
    if (nl != std::string::npos) e = e.substr(nl + 1);
    return e.empty() ? std::string() : "; its last words: " + e;
  };
  switch (c.end) {
    case ChildResult::End::TimedOut:
      if (by_deadline)
        return {Code::DeadlineExceeded,
                fmt::format("the request's deadline passed while the kernel ran; its runner "
                            "was killed after {:.0f} ms",
                            c.ms)};
      return {Code::ResourceExhausted,
              fmt::format("the run took longer than its limit of {} ms (kilnd --run-timeout-ms), "
                          "compilation included; its runner was killed",
                          o.run_timeout_ms)};
    case ChildResult::End::Stopped:
      return {Code::Cancelled, "the request was cancelled; its runner was killed"};
    case ChildResult::End::TooMuchOutput:
      return {Code::ResourceExhausted, "the run's reply was larger than kilnd accepts (1 GiB)"};
    case ChildResult::End::Signaled:
      if (c.signal == SIGXCPU || c.signal == SIGKILL)
        return {Code::ResourceExhausted,
                fmt::format("the run was killed by {} after {:.0f} ms: it used more CPU time or "
                            "memory than its limits allow (kilnd --run-timeout-ms, "
                            "--run-memory-mb){}",
                            signal_description(c.signal), c.ms, stderr_tail())};
      return {Code::Internal,
              fmt::format("the kernel's runner crashed with {} after {:.0f} ms{}; kilnd is "
                          "unaffected. A kernel kiln compiled should never crash: please report "
                          "this operator (a bug in kiln)",
                          signal_description(c.signal), c.ms, stderr_tail())};
    case ChildResult::End::Exited:
      break;
  }
  if (c.exit_code == 127)
    return {Code::Internal, fmt::format("cannot start the runner {} (kilnd --runner)", runner)};
  RunnerReply reply;
  if (c.exit_code != 0 || !reply.ParseFromString(c.out))
    return {Code::Internal, fmt::format("the runner {} exited with status {} without a reply{} "
                                        "(a bug in kiln)",
                                        runner, c.exit_code, stderr_tail())};
  auto code = static_cast<Code>(reply.code());
  if (code != Code::Ok) return {code, reply.message()};
  *response = std::move(*reply.mutable_response());
  response->set_run_ms(c.ms);
  return {};
}

}  // namespace

Status Service::run(const v1::RunRequest& request, v1::RunResponse* response,
                    const CallOptions& call) {
  try {
    auto ticket = impl_->admit(call);
    const ServiceOptions& o = impl_->options;
    RunnerJob job;
    *job.mutable_request() = request;
    *job.mutable_limits() = runner_limits(o.limits, call);
    ChildLimits limits;
    limits.wall = std::chrono::milliseconds(std::max<int64_t>(1, o.run_timeout_ms));
    bool by_deadline = false;
    if (call.deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *call.deadline - std::chrono::steady_clock::now());
      if (left < limits.wall) {
        limits.wall = std::max(left, std::chrono::milliseconds(1));
        by_deadline = true;
      }
    }
    limits.address_space_bytes = o.run_memory_bytes;
    // A backstop behind the wall clock: every core busy for the whole run.
    uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
    limits.cpu_seconds = static_cast<uint64_t>(o.run_timeout_ms / 1000 + 1) * cores + 1;
    limits.stop = call.cancelled;
    std::string runner = o.runner_path.empty() ? default_runner_path() : o.runner_path;
    ChildResult c = run_child(runner, {}, job.SerializeAsString(), limits);
    Status s = runner_status(c, o, runner, by_deadline, response);
    if (!s.ok()) response->Clear();
    return s;
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

}  // namespace kiln::server
