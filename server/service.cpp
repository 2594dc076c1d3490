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
#include <fstream>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "blob_store.h"
#include "child_process.h"
#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/operator_def.h"
#include "kiln/run.h"
#include "kiln/v1/service.pb.h"
#include "request.h"
#include "runner.pb.h"
#include "validate.h"
#include "wire.h"

namespace kiln::server {

namespace {

// Where the service keeps its blobs: DATA_DIR/blobs, or a folder of its own in the system's
// temporary one, removed with the service.
class BlobHome {
 public:
  explicit BlobHome(const std::string& data_dir) {
    if (!data_dir.empty()) {
      path_ = (std::filesystem::path(data_dir) / "blobs").string();
      return;
    }
    std::string templ = (std::filesystem::temp_directory_path() / "kilnd-blobs-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr)
      throw std::runtime_error("cannot make a folder for blobs in " +
                               std::filesystem::temp_directory_path().string());
    path_ = templ;
    owned_ = true;
  }
  ~BlobHome() {
    std::error_code ec;
    if (owned_) std::filesystem::remove_all(path_, ec);
  }
  BlobHome(const BlobHome&) = delete;
  BlobHome& operator=(const BlobHome&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

}  // namespace

struct Service::Impl {
  ServiceOptions options;
  CompileCache cache;
  Admission admission;
  Artifacts artifacts;
  FleetRunner runner;
  BlobHome blob_home;
  BlobStore blobs;
  explicit Impl(ServiceOptions o)
      : options(std::move(o)),
        cache(options.cache_bytes, options.data_dir),
        admission(options.workers, options.queue_depth, options.on_admitted),
        artifacts(cache, admission),
        runner(options.measure_timeout_ms, options.measure_memory_bytes),
        blob_home(options.data_dir),
        blobs(blob_home.path(), options.max_blob_bytes) {
    runner.set_fleet(options.fleet);
    blobs.remove_unfinished();
  }

  // The limits of one call: the service's, with the call's deadline.
  Limits limits(const CallOptions& call) const {
    Limits l = options.limits;
    l.deadline = call.deadline;
    l.cancelled = call.cancelled;
    return l;
  }

  std::unique_ptr<Admission::Ticket> admit(const CallOptions& call) {
    return admission.enter(call);
  }
};

Service::Service(ServiceOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Service::~Service() = default;

const Limits& Service::limits() const { return impl_->options.limits; }
Artifacts& Service::artifacts() { return impl_->artifacts; }
FleetRunner& Service::fleet_runner() { return impl_->runner; }
const BlobStore& Service::blobs() const { return impl_->blobs; }
void Service::share_blobs(BlobShare* share) { impl_->blobs.share(share); }

void Service::quiet_measurements(const std::string& key) {
  impl_->runner.set_quiet(key, [this](const CallOptions& call) -> std::shared_ptr<void> {
    return impl_->admission.quiet(call);
  });
}

CacheStats Service::cache_stats() const { return impl_->cache.stats(); }

void Service::set_fleet(Fleet* fleet) {
  impl_->options.fleet = fleet;
  impl_->runner.set_fleet(fleet);
}

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
    Unit unit = resolve_unit(request.op(), limits, &impl_->blobs);
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
    add_times(result.times, response->mutable_times());
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
    Unit unit = resolve_unit(request.op(), limits, &impl_->blobs);
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
      // Folded by the interpreter: kilnd runs no generated code in its own process.
      CompileOptions folding = options;
      folding.instrument = [&notes, watch = options.instrument](const passes::PassEvent& e) {
        if (e.pass == "fold_constants" && !e.remark.empty()) notes.emplace_back(e.remark);
        if (watch) watch(e);
      };
      ir::Graph shown = optimizing ? graph::optimize(g, folding, graph::FoldBy::Interpreter) : g;
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

Status Service::compile(const v1::CompileRequest& request, v1::CompileResponse* response,
                        const CallOptions& call) {
  try {
    Limits limits = impl_->limits(call);
    const v1::Operator& op = request.op();
    if (op.has_model() || op.has_graph()) {
      auto ticket = impl_->admit(call);
      Unit unit = resolve_unit(op, limits, &impl_->blobs);
      compile_model(*unit.graph, request.options(), limits, response);
      return {};
    }
    if (op.has_source()) {
      // Parsed before any worker is taken, as a func's request is (pipeline_request).
      Unit unit = resolve_unit(op, limits, &impl_->blobs);
      if (unit.graph) {
        auto ticket = impl_->admit(call);
        compile_model(*unit.graph, request.options(), limits, response);
        return {};
      }
    }
    // A func: through the compile cache, which admits it itself.
    *response = impl_->artifacts.compile(
        pipeline_request(op, request.options(), limits, CompileOutput::Artifact), call);
    return {};
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

void Service::compile_model(const ir::Graph& g, const v1::CompileOptions& wire,
                            const Limits& limits, v1::CompileResponse* response) {
  refuse_set_for_graph(g, wire);
  CompileOptions options = compile_options(wire, limits);
  // Constants are folded by the reference interpreter: no generated code runs in kilnd.
  auto start = std::chrono::steady_clock::now();
  graph::ModelArtifact m = graph::compile_model(g, options, graph::FoldBy::Interpreter);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::string weights = impl_->blobs.put(std::string_view(m.weights.data(), m.weights.size()));
  v1::Artifact* a = response->mutable_artifact();
  a->set_name(m.name);
  a->set_kind("model");
  a->mutable_target()->set_triple(m.target.triple);
  a->mutable_target()->set_cpu(m.target.cpu);
  a->mutable_target()->set_features(m.target.features);
  a->set_opt_level(m.opt_level);
  for (const std::string& i : m.imports) a->add_imports(i);
  a->set_code(std::string(m.code.begin(), m.code.end()));
  a->set_code_sha256(m.code_sha256);
  a->set_metadata_json(m.metadata_json());
  a->set_weights_sha256(weights);
  a->set_weights_bytes(m.weights.size());
  v1::ModelInfo* info = response->mutable_model();
  info->set_calls(static_cast<int32_t>(m.calls));
  info->set_calls_before(static_cast<int32_t>(m.calls_before));
  info->set_kernels(static_cast<int32_t>(m.kernels.size()));
  info->set_arena_bytes(m.memory.arena_bytes);
  info->set_unshared_bytes(m.memory.unshared_bytes);
  v1::StageTime* t = response->add_times();
  t->set_stage("compile");
  t->set_ms(ms);
  add_notes(m.notes, response->mutable_notes());
  response->set_compiler_version(compiler_version());
}

Status Service::stat_blobs(const v1::StatBlobsRequest& request, v1::StatBlobsResponse* response) {
  for (int k = 0; k < request.sha256_size(); ++k) {
    const std::string& sha = request.sha256(k);
    if (!is_sha256(sha))
      return {Code::InvalidArgument,
              fmt::format("sha256[{}]: {} is not a SHA-256 (64 lowercase hex digits)", k,
                          server::quoted(sha))};
    v1::BlobInfo* b = response->add_blobs();
    b->set_sha256(sha);
    b->set_present(impl_->blobs.has(sha));
    b->set_size(impl_->blobs.size(sha));
  }
  return {};
}

Status Service::put_blob(const std::function<bool(v1::BlobChunk&)>& next,
                         v1::PutBlobResponse* response, const CallOptions& call) {
  try {
    v1::BlobChunk chunk;
    if (!next(chunk))
      refuse(Code::InvalidArgument, "PutBlob: no piece arrived (the first names the blob)");
    std::string sha = chunk.sha256();
    bool present = impl_->blobs.has(sha);
    BlobStore::Upload upload = impl_->blobs.begin(sha, chunk.size());
    for (int64_t piece = 0;; ++piece) {
      if (call.cancelled && call.cancelled())
        refuse(Code::Cancelled, "the client cancelled the upload");
      if (piece > 0 && !chunk.sha256().empty() && chunk.sha256() != sha)
        refuse(Code::InvalidArgument, fmt::format("piece {}: names blob {}, the upload is of {}",
                                                  piece, server::quoted(chunk.sha256()), sha));
      if (chunk.offset() != upload.received())
        refuse(Code::InvalidArgument,
               fmt::format("piece {}: at offset {}, where {} bytes have arrived", piece,
                           chunk.offset(), upload.received()));
      if (chunk.data().size() > kMaxBlobPiece)
        refuse(Code::InvalidArgument, fmt::format("piece {}: {} bytes, past the {} a piece may "
                                                  "hold",
                                                  piece, chunk.data().size(), kMaxBlobPiece));
      upload.write(chunk.data());
      chunk.Clear();
      if (!next(chunk)) break;
    }
    upload.finish();
    response->set_sha256(sha);
    response->set_size(upload.received());
    response->set_already_present(present);
    return {};
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator());
  }
}

Status Service::get_blob(const v1::GetBlobRequest& request,
                         const std::function<bool(const v1::BlobChunk&)>& send,
                         const CallOptions& call) {
  try {
    std::string path = impl_->blobs.path(request.sha256(), "sha256");
    std::ifstream in(path, std::ios::binary);
    uint64_t size = impl_->blobs.size(request.sha256()), offset = 0;
    std::string buffer(kMaxBlobPiece, '\0');
    do {
      if (call.cancelled && call.cancelled()) refuse(Code::Cancelled, "the client went away");
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      size_t n = static_cast<size_t>(in.gcount());
      v1::BlobChunk chunk;
      if (offset == 0) {
        chunk.set_sha256(request.sha256());
        chunk.set_size(size);
      }
      chunk.set_offset(offset);
      chunk.set_data(buffer.data(), n);
      offset += n;
      if (!send(chunk)) refuse(Code::Cancelled, "the client went away");
    } while (offset < size && in);
    if (offset != size)
      refuse(Code::Internal,
             fmt::format("blob {}: read {} of its {} bytes", request.sha256(), offset, size));
    return {};
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator());
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

Status Service::measure(const v1::MeasureRequest& request, v1::MeasureResponse* response,
                        const CallOptions& call) {
  try {
    if (!impl_->options.fleet)
      refuse(Code::Unavailable,
             "this kilnd takes no agents: start it with --agent-token-file FILE (docs/agents.md)");
    if (request.key().empty())
      refuse(Code::InvalidArgument,
             "key: name the device class to measure on (`kiln agents` lists them)");
    const v1::Target& t = request.options().target();
    if (!t.triple().empty() || !t.cpu().empty() || !t.features().empty())
      refuse(Code::InvalidArgument,
             "options.target: a measurement compiles for its agent's own target; leave it unset");
    MeasureSpec spec = measure_spec(request);
    spec.check = request.check();
    spec.return_outputs = request.return_outputs();
    spec.agent = request.agent();
    // A graph or a model is measured whole: one artifact, its weights sent with the job.
    const v1::Operator& op = request.op();
    if (op.has_model() || op.has_graph() || op.has_source()) {
      Unit unit = op.has_source() ? resolve_unit(op, impl_->limits(call))
                                  : resolve_unit(op, impl_->limits(call), &impl_->blobs);
      if (unit.graph) {
        measure_model(*unit.graph, request, spec, call, response);
        return {};
      }
    }

    // Compiled for the agent's triple, CPU and features (or its GPU's
    // architecture), through the cache.
    Target target =
        FleetRunner::target(impl_->runner.device(request.key(), call), request.key(), spec.gpu);
    v1::CompileOptions options = request.options();
    to_wire(target, options.mutable_target());
    CompileRequest r =
        pipeline_request(request.op(), options, impl_->limits(call), CompileOutput::Artifact);
    v1::CompileResponse compiled = impl_->artifacts.compile(r, call);
    response->set_artifact_key(compiled.artifact().key());
    response->set_cache_hit(compiled.cache_hit());
    *response->mutable_notes() = compiled.notes();
    *response->mutable_times() = compiled.times();
    response->set_compiler_version(compiler_version());

    ir::Func f = ir::apply_overrides(r.func, r.overrides);
    std::map<std::string, int64_t> given(request.runtime_params().begin(),
                                         request.runtime_params().end());
    std::map<std::string, int64_t> params =
        interp::param_values(f, run_param_values(f, given).values);
    for (const auto& [name, value] : params) (*response->mutable_params())[name] = value;
    return impl_->runner.measure(spec, artifact_of(compiled.artifact()), f, params, call, response);
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

void Service::measure_model(const ir::Graph& g, const v1::MeasureRequest& request,
                            const MeasureSpec& spec, const CallOptions& call,
                            v1::MeasureResponse* response) {
  if (spec.check)
    refuse(Code::InvalidArgument,
           "check: a whole model's measurement is not checked on the agent; `kiln run MODEL "
           "--check` checks every kernel against the reference interpreter");
  if (spec.gpu) refuse(Code::InvalidArgument, "gpu: a whole model runs on an agent's CPU");
  if (!request.runtime_params().empty())
    refuse(Code::InvalidArgument,
           "runtime_params: graph " + g.name + " binds its operators' params in its calls");
  refuse_set_for_graph(g, request.options());
  Target target =
      FleetRunner::target(impl_->runner.device(request.key(), call), request.key(), std::nullopt);
  v1::CompileOptions wire = request.options();
  to_wire(target, wire.mutable_target());
  CompileOptions options = compile_options(wire, impl_->limits(call));
  std::optional<graph::ModelArtifact> m;
  {
    auto ticket = impl_->admit(call);
    m = graph::compile_model(g, options, graph::FoldBy::Interpreter);
  }
  response->set_artifact_key(m->code_sha256);
  response->set_compiler_version(compiler_version());
  add_notes(m->notes, response->mutable_notes());
  Status s = impl_->runner.measure_model(spec, *m, call, response);
  if (!s.ok()) refuse(s.code, s.message);
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
  out.set_max_fold_bytes(l.max_fold_bytes);
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
    job.set_blob_dir(impl_->blobs.dir());
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
