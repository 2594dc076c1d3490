// The service core: requests to the compile pipeline and back.
#include "service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "kiln/operator_def.h"
#include "kiln/v1/service.pb.h"

namespace kiln::server {

const char* code_name(Code c) {
  switch (c) {
    case Code::Ok:
      return "OK";
    case Code::InvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::ResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Code::DeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::Cancelled:
      return "CANCELLED";
    case Code::Unauthenticated:
      return "UNAUTHENTICATED";
    case Code::Internal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

namespace {

// A request that cannot be served, with its status.
struct Refusal {
  Status status;
};

[[noreturn]] void refuse(Code code, std::string message) {
  throw Refusal{Status{code, std::move(message)}};
}

// The one func a request's operator names.
ir::Func resolve(const v1::Operator& op, const Limits& limits) {
  switch (op.definition_case()) {
    case v1::Operator::kDef:
      return frontend::parse_operator_def(op.def(), limits);
    case v1::Operator::kSource: {
      const v1::SourceText& s = op.source();
      std::string file = s.filename().empty() ? "<request>" : s.filename();
      ir::Module m = frontend::parse_module(s.text(), file, limits);
      if (!s.name().empty()) {
        if (const ir::Func* f = m.find(s.name())) return *f;
        if (m.find_graph(s.name()))
          refuse(Code::InvalidArgument,
                 fmt::format("{}: '{}' is a graph; this method takes a func", file, s.name()));
        std::string known;
        for (const auto& f : m.funcs) known += (known.empty() ? "" : ", ") + f.name;
        refuse(Code::InvalidArgument, fmt::format("{}: no func '{}' in the source (it has: {})",
                                                  file, s.name(), known.empty() ? "none" : known));
      }
      if (m.funcs.size() == 1) return m.funcs[0];
      refuse(Code::InvalidArgument,
             fmt::format("{}: the source has {} funcs; name the one to use (source.name)", file,
                         m.funcs.size()));
    }
    case v1::Operator::kGraph:
      refuse(Code::InvalidArgument,
             "op.graph: this method takes a func; graphs are not served yet");
    case v1::Operator::DEFINITION_NOT_SET:
      break;
  }
  refuse(Code::InvalidArgument, "op: the request has no operator (set source or def)");
}

CompileOptions compile_options(const v1::CompileOptions& o, const Limits& limits) {
  CompileOptions c;
  const v1::Target& t = o.target();
  if (!t.triple().empty()) {
    c.target = Target{t.triple(), t.cpu(), t.features()};
  } else if (!t.cpu().empty()) {
    c.target.cpu = t.cpu();
    c.target.features = t.features();
  } else if (!t.features().empty()) {
    c.target.features += (c.target.features.empty() ? "" : ",") + t.features();
  }
  if (o.has_opt_level()) {
    if (o.opt_level() < 0 || o.opt_level() > 3)
      refuse(Code::InvalidArgument,
             fmt::format("options.opt_level: {} is not a level (0 to 3)", o.opt_level()));
    c.opt_level = o.opt_level();
  }
  c.apply_schedule = !o.no_schedule();
  c.passes.required.insert(o.required_passes().begin(), o.required_passes().end());
  c.passes.disabled.insert(o.disabled_passes().begin(), o.disabled_passes().end());
  c.limits = limits;
  return c;
}

CompileRequest pipeline_request(const v1::Operator& op, const v1::CompileOptions& o,
                                const Limits& limits, CompileOutput output) {
  CompileRequest r;
  r.func = resolve(op, limits);
  r.overrides = ir::Overrides(o.set().begin(), o.set().end());
  r.options = compile_options(o, limits);
  r.output = output;
  return r;
}

void add_times(const CompileResult& r, google::protobuf::RepeatedPtrField<v1::StageTime>* out) {
  for (const StageTime& t : r.times) {
    v1::StageTime* s = out->Add();
    s->set_stage(t.stage);
    s->set_ms(t.ms);
  }
}

void add_notes(const std::vector<std::string>& notes,
               google::protobuf::RepeatedPtrField<v1::Diagnostic>* out) {
  for (const std::string& n : notes) {
    v1::Diagnostic* d = out->Add();
    d->set_severity(v1::Diagnostic::WARNING);
    d->set_stage("codegen");
    d->set_message(n);
    d->set_text(n);
  }
}

v1::DType wire_dtype(ir::DType t) {
  switch (t) {
    case ir::DType::Bool:
      return v1::BOOL;
    case ir::DType::I32:
      return v1::I32;
    case ir::DType::I64:
      return v1::I64;
    case ir::DType::F32:
      return v1::F32;
    case ir::DType::F64:
      return v1::F64;
  }
  return v1::DTYPE_UNSPECIFIED;
}

void to_wire(const codegen::Artifact& a, v1::Artifact* out) {
  out->set_name(a.name);
  out->set_kind("shared-object");
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
}

// What an exception means to the caller.
Status status_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Refusal& r) {
    return r.status;
  } catch (const DeadlineExceeded& d) {
    return Status{Code::DeadlineExceeded, d.what()};
  } catch (const CompileError& c) {
    return Status{Code::InvalidArgument, c.what()};
  } catch (const std::bad_alloc&) {
    return Status{Code::ResourceExhausted, "kilnd ran out of memory for this request"};
  } catch (const std::exception& x) {
    return Status{Code::Internal,
                  std::string("internal error: ") + x.what() + " (this is a bug in kiln)"};
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
    auto worker_free = [&] { return running_ < workers_; };
    bool got = call.deadline ? freed_.wait_until(lock, *call.deadline, worker_free)
                             : (freed_.wait(lock, worker_free), true);
    --waiting_;
    if (!got)
      refuse(Code::DeadlineExceeded, "the request's deadline passed while it waited for a worker");
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
  explicit Impl(ServiceOptions o)
      : options(std::move(o)),
        cache(options.cache_bytes, options.data_dir),
        admission(options.workers, options.queue_depth) {}

  // The limits of one call: the service's, with the call's deadline.
  Limits limits(const CallOptions& call) const {
    Limits l = options.limits;
    l.deadline = call.deadline;
    return l;
  }

  std::unique_ptr<Admission::Ticket> admit(const CallOptions& call) {
    std::unique_ptr<Admission::Ticket> t = admission.enter(call);
    if (options.on_admitted) options.on_admitted();
    return t;
  }
};

Service::Service(ServiceOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Service::~Service() = default;

CacheStats Service::cache_stats() const { return impl_->cache.stats(); }

Status Service::check(const v1::CheckRequest& request, v1::CheckResponse* response,
                      const CallOptions& call) {
  try {
    auto ticket = impl_->admit(call);
    CompileRequest r = pipeline_request(request.op(), request.options(), impl_->limits(call),
                                        CompileOutput::Loops);
    // `kiln check`: the schedule is always applied, and everything up to code
    // generation runs.
    r.options.apply_schedule = true;
    CompileResult result = kiln::compile(r);
    response->set_name(result.func.name);
    response->set_computations(static_cast<int32_t>(result.func.comps.size()));
    response->set_schedule_commands(static_cast<int32_t>(result.func.schedule.size()));
    add_times(result, response->mutable_times());
    return {};
  } catch (...) {
    return status_of(std::current_exception());
  }
}

Status Service::emit(const v1::EmitRequest& request, v1::EmitResponse* response,
                     const CallOptions& call) {
  try {
    auto ticket = impl_->admit(call);
    bool optimizing = request.options().has_opt_level() ||
                      request.options().required_passes_size() > 0 ||
                      request.options().disabled_passes_size() > 0;
    CompileOutput output = CompileOutput::Schedule;
    switch (request.stage()) {
      case v1::AST:
      case v1::IR:
      case v1::SCHEDULE:
        break;
      case v1::LOOPS:
        output = CompileOutput::Loops;
        break;
      case v1::LLVM:
        output = CompileOutput::LlvmIr;
        break;
      case v1::ASM:
        output = CompileOutput::Assembly;
        break;
      case v1::GRAPH:
        refuse(Code::InvalidArgument, "stage: GRAPH is a graph's stage; graphs are not served yet");
      default:
        refuse(Code::InvalidArgument,
               "stage: set one of AST, IR, SCHEDULE, LOOPS, LLVM, ASM (docs/cli.md, emit)");
    }
    CompileRequest r =
        pipeline_request(request.op(), request.options(), impl_->limits(call), output);
    if (request.stage() == v1::AST) {
      response->set_text(ir::to_string(ir::apply_overrides(r.func, r.overrides)));
      return {};
    }
    // As `kiln emit --stage loops` without -O or a pass option: the loops
    // exactly as lowering leaves them.
    if (request.stage() == v1::LOOPS && !optimizing) {
      r.options.opt_level = 0;
      r.options.passes = {};
    }
    CompileResult result = kiln::compile(r);
    switch (request.stage()) {
      case v1::IR:
        response->set_text(result.scheduled->describe_domains());
        break;
      case v1::SCHEDULE:
        response->set_text(result.scheduled->describe_schedule());
        break;
      case v1::LOOPS:
        response->set_text(ir::to_string(optimizing ? result.optimized : result.lowered));
        break;
      default:
        response->set_text(result.text);
    }
    add_notes(result.notes, response->mutable_notes());
    return {};
  } catch (...) {
    return status_of(std::current_exception());
  }
}

Status Service::compile(const v1::CompileRequest& request, v1::CompileResponse* response,
                        const CallOptions& call) {
  try {
    CompileRequest r = pipeline_request(request.op(), request.options(), impl_->limits(call),
                                        CompileOutput::Artifact);
    std::string key = cache_key(r);
    // A hit needs no worker: it never waits behind compilations.
    if (std::optional<v1::CompileResponse> cached = impl_->cache.find(key)) {
      *response = std::move(*cached);
      response->set_cache_hit(true);
      return {};
    }
    auto ticket = impl_->admit(call);
    CompileResult result = kiln::compile(r);
    to_wire(*result.artifact, response->mutable_artifact());
    add_times(result, response->mutable_times());
    add_notes(result.notes, response->mutable_notes());
    response->set_compiler_version(compiler_version());
    v1::CompileResponse cached = *response;
    cached.clear_times();
    impl_->cache.add(key, cached);
    return {};
  } catch (...) {
    return status_of(std::current_exception());
  }
}

}  // namespace kiln::server
