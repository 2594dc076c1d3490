// The commands' work done by kilnd (remote.h).
#include "remote.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

#include "kiln/buffers.h"
#include "kiln/cuda.h"
#include "kiln/digest.h"
#include "kiln/target.h"
#include "kiln/v1/service.grpc.pb.h"

namespace kiln::cli {
namespace {

// A target as a request names it: with its caches, for knob defaults fitted to them.
void wire_target(const Target& t, v1::Target* w) {
  w->set_triple(t.triple);
  w->set_cpu(t.cpu);
  w->set_features(t.features);
  w->set_l1d_bytes(static_cast<uint64_t>(t.l1d_bytes));
  w->set_l2_bytes(static_cast<uint64_t>(t.l2_bytes));
  w->set_l3_bytes(static_cast<uint64_t>(t.l3_bytes));
}

std::string read_file(const std::string& path, std::string_view flag, Command c) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(c, fmt::format("{} {}: cannot read the file", flag, path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

v1::Stage wire_stage(Stage s) {
  switch (s) {
    case Stage::Ast:
      return v1::AST;
    case Stage::Ir:
      return v1::IR;
    case Stage::Schedule:
      return v1::SCHEDULE;
    case Stage::Loops:
      return v1::LOOPS;
    case Stage::Llvm:
      return v1::LLVM;
    case Stage::Asm:
      return v1::ASM;
    case Stage::Cuda:
    case Stage::Algorithm:
    case Stage::Sketch:
      return v1::STAGE_UNSPECIFIED;  // offline only: refused before it gets here
    case Stage::Graph:
      return v1::GRAPH;
  }
  return v1::STAGE_UNSPECIFIED;
}

}  // namespace

struct Remote::Impl {
  const Options& o;
  std::string address;
  std::string token;
  std::unique_ptr<v1::Compiler::Stub> stub;

  explicit Impl(const Options& options) : o(options), address(*options.server) {
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (o.tls_ca || o.tls_cert || o.tls_key) {
      if (o.tls_cert.has_value() != o.tls_key.has_value())
        throw UsageError(o.command, "--tls-cert and --tls-key go together");
      grpc::SslCredentialsOptions ssl;
      if (o.tls_ca) ssl.pem_root_certs = read_file(*o.tls_ca, "--tls-ca", o.command);
      if (o.tls_cert) {
        ssl.pem_cert_chain = read_file(*o.tls_cert, "--tls-cert", o.command);
        ssl.pem_private_key = read_file(*o.tls_key, "--tls-key", o.command);
      }
      creds = grpc::SslCredentials(ssl);
    } else {
      creds = grpc::InsecureChannelCredentials();
    }
    if (o.token_file) {
      token = read_file(*o.token_file, "--token-file", o.command);
      while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back())))
        token.pop_back();
      if (token.empty())
        throw UsageError(o.command,
                         fmt::format("--token-file {}: the file holds no token", *o.token_file));
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // Run's outputs and artifacts may be large
    stub = v1::Compiler::NewStub(grpc::CreateCustomChannel(address, creds, args));
  }

  // A func or graph of a file as kilnd's operator: the text the command
  // read, named (a file is read once, so `<(generator)` works too).
  static v1::Operator op(const std::string& file, const std::string& source,
                         const std::string& name) {
    v1::Operator w;
    w.mutable_source()->set_text(source);
    w.mutable_source()->set_filename(file);
    w.mutable_source()->set_name(name);
    return w;
  }
  static v1::Operator op(const Prepared& p) { return op(p.file, *p.source, p.func.name); }
  v1::Operator op(const GraphJob& j) {
    if (!j.model) return op(j.file, *j.source, j.graph->name);
    v1::Operator w;
    v1::ModelRef* m = w.mutable_model();
    m->set_sha256(upload(j.file));
    m->set_filename(j.file);
    m->mutable_dims()->insert(j.dims.begin(), j.dims.end());
    return w;
  }

  // The file as a blob kilnd holds: its SHA-256, the bytes sent only when kilnd lacks them,
  // in pieces of 1 MiB.
  std::map<std::string, std::string> uploaded;  // path -> SHA-256
  std::string upload(const std::string& path) {
    auto known = uploaded.find(path);
    if (known != uploaded.end()) return known->second;
    std::string bytes = read_file(path, "model", o.command);
    std::string sha = sha256_hex(bytes);
    v1::StatBlobsRequest stat;
    stat.add_sha256(sha);
    v1::StatBlobsResponse have = call<v1::StatBlobsResponse>(
        [&](auto* ctx, auto* out) { return stub->StatBlobs(ctx, stat, out); });
    if (have.blobs_size() == 1 && have.blobs(0).present()) {
      spdlog::debug("{}: kilnd holds blob {} already", path, sha);
    } else {
      grpc::ClientContext ctx;
      authorize(ctx);
      v1::PutBlobResponse response;
      std::unique_ptr<grpc::ClientWriter<v1::BlobChunk>> writer = stub->PutBlob(&ctx, &response);
      constexpr size_t kPiece = size_t{1} << 20;
      size_t offset = 0;
      do {
        v1::BlobChunk chunk;
        if (offset == 0) {
          chunk.set_sha256(sha);
          chunk.set_size(bytes.size());
        }
        chunk.set_offset(offset);
        size_t n = std::min(kPiece, bytes.size() - offset);
        chunk.set_data(bytes.data() + offset, n);
        offset += n;
        if (!writer->Write(chunk)) break;  // kilnd ended the call: Finish says why
      } while (offset < bytes.size());
      writer->WritesDone();
      expect_ok(writer->Finish());
      spdlog::debug("{}: uploaded as blob {} ({} bytes)", path, sha, bytes.size());
    }
    uploaded[path] = sha;
    return sha;
  }

  // A blob kilnd holds, fetched in pieces.
  std::string download(const std::string& sha) {
    grpc::ClientContext ctx;
    authorize(ctx);
    v1::GetBlobRequest request;
    request.set_sha256(sha);
    std::unique_ptr<grpc::ClientReader<v1::BlobChunk>> reader = stub->GetBlob(&ctx, request);
    std::string bytes;
    v1::BlobChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk.offset() != bytes.size())
        throw Failure(fmt::format("kiln: kilnd at {} sent blob {} out of order", address, sha));
      if (chunk.offset() == 0) bytes.reserve(chunk.size());
      bytes += chunk.data();
    }
    expect_ok(reader->Finish());
    if (sha256_hex(bytes) != sha)
      throw Failure(
          fmt::format("kiln: blob {} from kilnd at {} has another SHA-256", sha, address));
    return bytes;
  }

  // The command line's compile options; --set gives the func's compile-time
  // params and knobs (its run-time params are the run's).
  v1::CompileOptions options(const Prepared& p) const {
    v1::CompileOptions w = options();
    for (const auto& [name, value] : o.overrides) {
      if (p.runtime_params.contains(name)) continue;
      if (p.func.find_param(name) || p.func.find_knob(name)) (*w.mutable_set())[name] = value;
    }
    return w;
  }
  // Those of a graph, which binds its operators' params itself.
  v1::CompileOptions options() const {
    v1::CompileOptions w;
    if (o.target) w.mutable_target()->set_triple(*o.target);
    if (o.cpu) w.mutable_target()->set_cpu(*o.cpu);
    if (o.features) w.mutable_target()->set_features(*o.features);
    if (o.opt_level_given) w.set_opt_level(o.opt_level);
    w.set_no_schedule(o.no_schedule);
    for (const std::string& pass : o.required_passes) w.add_required_passes(pass);
    for (const std::string& pass : o.disabled_passes) w.add_disabled_passes(pass);
    return w;
  }

  void authorize(grpc::ClientContext& ctx) const {
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  }

  // Throws Failure for a failed call; an operator kilnd refused has the
  // offline command's message.
  void expect_ok(const grpc::Status& s) const {
    if (s.ok()) return;
    switch (s.error_code()) {
      case grpc::StatusCode::INVALID_ARGUMENT:
        throw Failure(s.error_message());
      case grpc::StatusCode::UNAVAILABLE:
        throw Failure(
            fmt::format("kiln: cannot reach kilnd at {}: {}", address, s.error_message()));
      default:
        throw Failure(fmt::format("kiln: kilnd at {} answered {}: {}", address,
                                  code_name(s.error_code()), s.error_message()));
    }
  }

  // One call of a method: `send(ctx, response)` sends the request. The
  // response's warnings are logged as the offline command logs them.
  template <typename Response, typename Send>
  Response call(Send send) const {
    Response response;
    grpc::ClientContext ctx;
    authorize(ctx);
    expect_ok(send(&ctx, &response));
    if constexpr (requires { response.notes(); }) {
      for (const v1::Diagnostic& d : response.notes()) spdlog::warn("{}", d.text());
    }
    return response;
  }

  // A request for a func or a graph, with the command line's options. Code
  // is for the target the command line names, as offline: without --target
  // that is this machine's, not kilnd's, so the bytes are those `kiln`
  // gives here without --server. A run is on kilnd's machine, which kilnd
  // checks against the target named.
  template <typename Request, typename Unit>
  Request request(const Unit& u) {
    Request r;
    *r.mutable_op() = op(u);
    if constexpr (std::is_same_v<Unit, Prepared>) {
      *r.mutable_options() = options(u);
    } else {
      *r.mutable_options() = options();
    }
    if constexpr (!std::is_same_v<Request, v1::RunRequest>) {
      wire_target(target_of(o), r.mutable_options()->mutable_target());
    }
    return r;
  }

  v1::CheckResponse check(const v1::CheckRequest& r) {
    return call<v1::CheckResponse>([&](auto* ctx, auto* out) { return stub->Check(ctx, r, out); });
  }
  v1::EmitResponse emit(const v1::EmitRequest& r) {
    return call<v1::EmitResponse>([&](auto* ctx, auto* out) { return stub->Emit(ctx, r, out); });
  }
  v1::RunResponse run(const v1::RunRequest& r) {
    return call<v1::RunResponse>([&](auto* ctx, auto* out) { return stub->Run(ctx, r, out); });
  }

  static const char* code_name(grpc::StatusCode c) {
    switch (c) {
      case grpc::StatusCode::CANCELLED:
        return "CANCELLED";
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return "DEADLINE_EXCEEDED";
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return "RESOURCE_EXHAUSTED";
      case grpc::StatusCode::UNAUTHENTICATED:
        return "UNAUTHENTICATED";
      case grpc::StatusCode::NOT_FOUND:
        return "NOT_FOUND";
      case grpc::StatusCode::FAILED_PRECONDITION:
        return "FAILED_PRECONDITION";
      case grpc::StatusCode::PERMISSION_DENIED:
        return "PERMISSION_DENIED";
      case grpc::StatusCode::UNIMPLEMENTED:
        return "UNIMPLEMENTED";
      case grpc::StatusCode::INTERNAL:
        return "INTERNAL";
      default:
        return "an error";
    }
  }
};

Remote::Remote(const Options& o) : impl_(std::make_unique<Impl>(o)) {}
Remote::~Remote() = default;

namespace {

// A buffer on the wire, as Run takes inputs.
void to_wire(const std::string& name, const HostBuffer& h, v1::BufferData* out) {
  out->set_name(name);
  for (int64_t e : h.shape()) out->add_shape(e);
  bool is_float = ir::is_float(h.dtype());
  for (int64_t i = 0; i < h.size(); ++i) {
    if (is_float) {
      out->mutable_floats()->add_values(h.get_f(i));
    } else {
      out->mutable_ints()->add_values(h.get_i(i));
    }
  }
}

// An output as kilnd returned it.
HostBuffer from_wire(const v1::BufferData& d) {
  ir::DType t = ir::DType::F32;
  switch (d.dtype()) {
    case v1::F64:
      t = ir::DType::F64;
      break;
    case v1::I32:
      t = ir::DType::I32;
      break;
    case v1::I64:
      t = ir::DType::I64;
      break;
    case v1::BOOL:
      t = ir::DType::Bool;
      break;
    default:
      break;
  }
  HostBuffer h(t, std::vector<int64_t>(d.shape().begin(), d.shape().end()));
  for (int64_t i = 0; i < h.size(); ++i) {
    if (d.has_floats() && i < d.floats().values_size()) h.set_f(i, d.floats().values(i));
    if (d.has_ints() && i < d.ints().values_size()) h.set_i(i, d.ints().values(i));
  }
  return h;
}

// --save-outputs DIR: the outputs kilnd returned, as DIR/NAME.npy.
void save_outputs(const v1::RunResponse& response, const Options& o) {
  if (!o.save_outputs) return;
  for (const v1::BufferData& d : response.outputs())
    write_npy(from_wire(d), *o.save_outputs + "/" + d.name() + ".npy");
}

// The run options of the command line, and its --input files.
v1::RunRequest with_run_options(v1::RunRequest request, const Options& o) {
  for (const auto& [name, path] : o.input_files)
    to_wire(name, read_npy(path), request.add_inputs());
  request.set_return_outputs(o.save_outputs.has_value());
  request.set_seed(o.seed);
  request.set_check(o.check);
  request.set_bench(o.bench);
  request.set_repeat(o.repeat);
  request.set_number(o.number);
  request.set_threads(o.threads.value_or(0));
  return request;
}

// kilnd's comparison with the reference interpreter, as the offline command holds it.
interp::Mismatch mismatch_of(const v1::OutputCheck& c) {
  interp::Mismatch m;
  m.ok = c.ok();
  m.buffer = c.buffer();
  m.index.assign(c.index().begin(), c.index().end());
  m.expected = c.expected();
  m.actual = c.actual();
  m.abs_error = c.abs_error();
  m.rel_error = c.rel_error();
  m.problem = c.problem();
  return m;
}

// The outputs, check and benchmark of a run, as the offline command holds them.
template <typename Result>
void read_run(const v1::RunResponse& response, Result& r) {
  for (const v1::OutputChecksum& c : response.checksums())
    r.outputs.push_back(OutputSum{c.name(), {c.shape().begin(), c.shape().end()}, c.checksum()});
  if (response.has_check()) r.mismatch = mismatch_of(response.check());
  if (response.has_bench()) {
    const v1::Bench& b = response.bench();
    BenchResult out;
    out.repeat = b.repeat();
    out.number = b.number();
    out.threads = b.threads();
    out.median_s = b.median_ms() * 1e-3;
    out.min_s = b.min_ms() * 1e-3;
    out.flops = b.flops();
    for (double ms : b.round_ms()) out.round_s.push_back(ms * 1e-3);
    r.bench = out;
  }
}

}  // namespace

void Remote::check(const Prepared& p) { impl_->check(impl_->request<v1::CheckRequest>(p)); }

void Remote::check_graph(const GraphJob& j) { impl_->check(impl_->request<v1::CheckRequest>(j)); }

std::string Remote::emit(const Prepared& p, Stage stage) {
  v1::EmitRequest request = impl_->request<v1::EmitRequest>(p);
  request.set_stage(wire_stage(stage));
  return impl_->emit(request).text();
}

GraphTexts Remote::emit_graph(const GraphJob& j, Stage stage) {
  v1::EmitRequest request = impl_->request<v1::EmitRequest>(j);
  request.set_stage(wire_stage(stage));
  v1::EmitResponse response = impl_->emit(request);
  GraphTexts out;
  out.graph = response.text();
  for (const v1::EmitCall& c : response.calls()) out.calls.emplace_back(c.op(), c.text());
  return out;
}

ArtifactBytes Remote::compile(const Prepared& p, const ir::Overrides& knobs) {
  v1::CompileRequest request = impl_->request<v1::CompileRequest>(p);
  for (const auto& [name, value] : knobs) (*request.mutable_options()->mutable_set())[name] = value;
  v1::CompileResponse response = impl_->call<v1::CompileResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->Compile(ctx, request, out); });
  spdlog::debug("{}: kilnd {} ({})", p.func.name, response.cache_hit() ? "cache hit" : "compiled",
                response.compiler_version());
  const v1::Artifact& a = response.artifact();
  return ArtifactBytes{a.code(), a.metadata_json(), a.target().triple(), a.target().cpu(), a.key()};
}

InterpResult Remote::run(const Prepared& p) {
  v1::RunRequest request = with_run_options(impl_->request<v1::RunRequest>(p), impl_->o);
  request.mutable_runtime_params()->insert(p.runtime_params.begin(), p.runtime_params.end());
  v1::RunResponse response = impl_->run(request);
  save_outputs(response, impl_->o);
  InterpResult r;
  r.params.insert(response.params().begin(), response.params().end());
  r.chosen.assign(response.chosen().begin(), response.chosen().end());
  read_run(response, r);
  return r;
}

namespace {

void wire_knobs(const WorkloadKnobs& knobs, v1::CompileOptions* options) {
  for (const auto& [workload, values] : knobs)
    (*options->mutable_workload_knobs())[workload].mutable_values()->insert(values.begin(),
                                                                            values.end());
}

}  // namespace

ModelBytes Remote::compile_graph(const GraphJob& j, const WorkloadKnobs& workload_knobs) {
  v1::CompileRequest request = impl_->request<v1::CompileRequest>(j);
  wire_knobs(workload_knobs, request.mutable_options());
  v1::CompileResponse response = impl_->call<v1::CompileResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->Compile(ctx, request, out); });
  const v1::Artifact& a = response.artifact();
  ModelBytes m;
  m.code = a.code();
  m.metadata_json = a.metadata_json();
  m.triple = a.target().triple();
  m.cpu = a.target().cpu();
  m.weights = impl_->download(a.weights_sha256());
  m.calls = static_cast<size_t>(response.model().calls());
  m.kernels = static_cast<size_t>(response.model().kernels());
  m.arena_bytes = response.model().arena_bytes();
  m.unshared_bytes = response.model().unshared_bytes();
  return m;
}

GraphResult Remote::run_graph(const GraphJob& j) {
  v1::RunResponse response =
      impl_->run(with_run_options(impl_->request<v1::RunRequest>(j), impl_->o));
  save_outputs(response, impl_->o);
  GraphResult r;
  r.per_call_check = !response.check().per_call_scope().empty();
  r.check_scope = response.check().per_call_scope();
  r.calls_before = static_cast<size_t>(response.graph().calls());
  r.calls_after = static_cast<size_t>(response.graph().calls_after_passes());
  r.kernels = static_cast<size_t>(response.graph().kernels());
  read_run(response, r);
  return r;
}

std::vector<AgentRow> Remote::agents() {
  v1::ListAgentsResponse response = impl_->call<v1::ListAgentsResponse>([&](auto* ctx, auto* out) {
    return impl_->stub->ListAgents(ctx, v1::ListAgentsRequest(), out);
  });
  std::vector<AgentRow> rows;
  for (const v1::AgentStatus& a : response.agents()) {
    const v1::Device& d = a.device();
    rows.push_back(AgentRow{a.id(), a.address(), d.key(), d.triple(), d.cpu(), d.cores(),
                            d.gpus_size(), a.slots(), a.running(), a.jobs_done(), a.jobs_failed(),
                            a.last_seen_unix_ms(), static_cast<int64_t>(d.l1d_bytes()),
                            static_cast<int64_t>(d.l2_bytes()),
                            static_cast<int64_t>(d.l3_bytes())});
  }
  return rows;
}

Measurement Remote::measure(const Prepared& p) {
  v1::MeasureRequest request;
  *request.mutable_op() = Impl::op(p);
  *request.mutable_options() = impl_->options(p);
  request.mutable_runtime_params()->insert(p.runtime_params.begin(), p.runtime_params.end());
  return measure_request(std::move(request));
}

Measurement Remote::measure_graph(const GraphJob& j, const WorkloadKnobs& workload_knobs) {
  v1::MeasureRequest request;
  *request.mutable_op() = impl_->op(j);
  *request.mutable_options() = impl_->options();
  wire_knobs(workload_knobs, request.mutable_options());
  return measure_request(std::move(request));
}

Measurement Remote::measure_request(v1::MeasureRequest request) {
  const Options& o = impl_->o;
  request.mutable_options()->clear_target();  // the agent's own
  request.set_key(*o.key);
  request.set_agent(o.agent);
  request.set_seed(o.seed);
  request.set_check(o.check);
  request.set_priority(o.priority);
  if (o.gpu) request.set_gpu(*o.gpu);
  v1::MeasureSettings& s = *request.mutable_settings();
  s.set_repeat(o.repeat);
  s.set_number(o.number);
  // As `kiln run --bench`: rounds of about 50 ms unless told otherwise.
  s.set_min_repeat_ms(o.min_repeat_ms > 0 ? o.min_repeat_ms : o.number > 0 ? 0 : 50);
  s.set_min_total_ms(o.min_total_ms);
  s.set_flush_cache(o.flush_cache);
  s.set_threads(o.threads.value_or(0));
  s.set_time_limit_ms(o.time_limit_ms);
  s.set_memory_limit_bytes(static_cast<uint64_t>(o.memory_limit_mb) << 20);
  v1::MeasureResponse response = impl_->call<v1::MeasureResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->Measure(ctx, request, out); });

  const v1::MeasureResult& r = response.result();
  Measurement m;
  m.agent_id = response.agent_id();
  m.key = response.device().key();
  m.triple = response.device().triple();
  m.cpu = response.device().cpu();
  if (r.error() != v1::MeasureResult::OK) m.error = v1::MeasureResult::Error_Name(r.error());
  m.message = r.message();
  m.params.insert(response.params().begin(), response.params().end());
  m.bench.repeat = r.round_ms_size();
  m.bench.number = r.number();
  m.bench.threads = r.threads();
  if (o.gpu && *o.gpu < response.device().gpus_size()) {
    const v1::Gpu& g = response.device().gpus(*o.gpu);
    m.bench.device = fmt::format("GPU {}: {} ({})", *o.gpu, g.name(),
                                 cuda::arch_of(g.compute_major(), g.compute_minor()));
  }
  m.bench.median_s = response.median_ms() * 1e-3;
  m.bench.min_s = response.min_ms() * 1e-3;
  for (double ms : r.round_ms()) m.bench.round_s.push_back(ms * 1e-3);
  for (const v1::OutputValues& v : r.outputs())
    m.outputs.push_back(OutputSum{v.name(), {}, v.checksum()});
  if (response.has_check()) m.mismatch = mismatch_of(response.check());
  m.tries = response.tries();
  m.cache_hit = response.cache_hit();
  return m;
}

namespace {

// Reads a stream of progress until it ends or `each` says stop.
template <typename Reader>
bool read_progress(Reader& reader, const Remote::ProgressFn& each, grpc::ClientContext& ctx) {
  v1::TuneProgress p;
  while (reader->Read(&p)) {
    if (!each(p)) {
      ctx.TryCancel();
      return false;
    }
  }
  return true;
}

}  // namespace

void Remote::tune(const Prepared& p, const ProgressFn& each) {
  v1::TuneRequest request;
  *request.mutable_op() = Impl::op(p);
  *request.mutable_options() = impl_->options(p);
  request.mutable_runtime_params()->insert(p.runtime_params.begin(), p.runtime_params.end());
  tune_request(std::move(request), each);
}

void Remote::tune_graph(const GraphJob& j, const ProgressFn& each) {
  v1::TuneRequest request;
  *request.mutable_op() = impl_->op(j);
  *request.mutable_options() = impl_->options();
  request.set_budget_s(impl_->o.budget_s);
  tune_request(std::move(request), each);
}

void Remote::tune_request(v1::TuneRequest request, const ProgressFn& each) {
  const Options& o = impl_->o;
  request.mutable_options()->clear_target();  // the agents'
  request.set_key(*o.key);
  request.set_trials(o.trials);
  request.set_batch(o.batch);
  request.set_early_stop(o.early_stop);
  if (o.retime) request.set_retime(*o.retime);
  if (o.remeasure) request.set_remeasure(*o.remeasure);
  if (o.stop_slower_than) request.set_stop_slower_than(*o.stop_slower_than);
  request.set_search(o.search.value_or(""));
  request.set_features(o.model_features.value_or(""));
  request.set_seed(o.seed);
  request.set_detach(o.detach);
  request.set_transfer(o.transfer);
  request.set_priority(o.priority);
  if (o.gpu) request.set_gpu(*o.gpu);
  v1::MeasureSettings& s = *request.mutable_settings();
  if (o.repeat_given) s.set_repeat(o.repeat);
  s.set_number(o.number);
  s.set_min_repeat_ms(o.min_repeat_ms);
  s.set_min_total_ms(o.min_total_ms);
  s.set_flush_cache(o.flush_cache);
  s.set_threads(o.threads.value_or(0));
  s.set_time_limit_ms(o.time_limit_ms);
  s.set_memory_limit_bytes(static_cast<uint64_t>(o.memory_limit_mb) << 20);
  grpc::ClientContext ctx;
  impl_->authorize(ctx);
  auto reader = impl_->stub->Tune(&ctx, request);
  if (!read_progress(reader, each, ctx)) return;
  impl_->expect_ok(reader->Finish());
}

void Remote::resume(int64_t job, const ProgressFn& each) {
  v1::ResumeTuneRequest request;
  request.set_job(job);
  request.set_trials(impl_->o.trials);
  request.set_detach(impl_->o.detach);
  grpc::ClientContext ctx;
  impl_->authorize(ctx);
  auto reader = impl_->stub->ResumeTune(&ctx, request);
  if (!read_progress(reader, each, ctx)) return;
  impl_->expect_ok(reader->Finish());
}

v1::CancelTuneResponse Remote::cancel(int64_t job) {
  v1::CancelTuneRequest request;
  request.set_job(job);
  return impl_->call<v1::CancelTuneResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->CancelTune(ctx, request, out); });
}

v1::ListJobsResponse Remote::jobs(const v1::ListJobsRequest& r) {
  return impl_->call<v1::ListJobsResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->ListJobs(ctx, r, out); });
}

v1::QueryRecordsResponse Remote::query(const v1::QueryRecordsRequest& r) {
  return impl_->call<v1::QueryRecordsResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->QueryRecords(ctx, r, out); });
}

v1::BestConfigResponse Remote::best(const Prepared& p) {
  v1::BestConfigRequest request;
  if (impl_->o.command == Command::Records) request.set_retime(impl_->o.retime.value_or(0));
  *request.mutable_op() = Impl::op(p);
  *request.mutable_options() = impl_->options(p);
  if (impl_->o.key) {
    request.set_key(*impl_->o.key);
  } else {
    const Options& o = impl_->o;
    wire_target(target_of(o), request.mutable_options()->mutable_target());
  }
  return impl_->call<v1::BestConfigResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->BestConfig(ctx, request, out); });
}

namespace {

// BestConfig for a workload on o.key (`kiln records best --retime N` re-times first).
v1::BestConfigRequest best_request(const Options& o, const std::string& workload) {
  v1::BestConfigRequest request;
  request.set_workload(workload);
  request.set_key(o.key.value_or(""));
  if (o.command == Command::Records) request.set_retime(o.retime.value_or(0));
  return request;
}

}  // namespace

v1::BestConfigResponse Remote::best(const std::string& workload) {
  v1::BestConfigRequest request = best_request(impl_->o, workload);
  return impl_->call<v1::BestConfigResponse>(
      [&](auto* ctx, auto* out) { return impl_->stub->BestConfig(ctx, request, out); });
}

std::optional<v1::BestConfigResponse> Remote::best_if_any(const std::string& workload) {
  v1::BestConfigRequest request = best_request(impl_->o, workload);
  grpc::ClientContext ctx;
  impl_->authorize(ctx);
  v1::BestConfigResponse out;
  grpc::Status s = impl_->stub->BestConfig(&ctx, request, &out);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) return std::nullopt;
  impl_->expect_ok(s);
  return out;
}

void Remote::export_records(const v1::ExportRecordsRequest& r,
                            const std::function<void(const std::string& lines)>& each) {
  grpc::ClientContext ctx;
  impl_->authorize(ctx);
  auto reader = impl_->stub->ExportRecords(&ctx, r);
  v1::ExportRecordsChunk chunk;
  while (reader->Read(&chunk)) each(chunk.lines());
  impl_->expect_ok(reader->Finish());
}

}  // namespace kiln::cli
