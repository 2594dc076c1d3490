// Measurement on kilnd's agents (fleet_runner.h).
#include "fleet_runner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstring>
#include <future>
#include <limits>
#include <thread>
#include <vector>

#include "kiln/cuda.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/run.h"
#include "kiln/stats.h"
#include "kiln/v1/service.pb.h"
#include "outcome.h"
#include "request.h"

namespace kiln::server {
namespace {

v1::ElementType element_type(ir::DType t) { return static_cast<v1::ElementType>(wire_dtype(t)); }

// Waits for the job's outcome, seeing every 50 ms whether the call was
// cancelled or its deadline passed: then the job is withdrawn (its agent
// kills it and its slot is free again) and the call refused.
FleetOutcome wait_for(Fleet& fleet, Fleet::Submitted& job, const CallOptions& call) {
  while (job.outcome.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (call.cancelled && call.cancelled()) {
      fleet.cancel(job.id);
      refuse(Code::Cancelled, "the request was cancelled while its job was measured");
    }
    if (call.deadline && std::chrono::steady_clock::now() >= *call.deadline) {
      fleet.cancel(job.id);
      refuse(Code::DeadlineExceeded, "the request's deadline passed while its job was measured");
    }
  }
  return job.outcome.get();
}

// The job for an agent: the artifact's arguments in its order (params with
// their values, buffers with their shapes; `inputs`' data for the inputs when
// kilnd made them) and how to time it.
v1::MeasureJob measure_job(const codegen::Artifact& a, const ir::Func& f,
                           const std::map<std::string, int64_t>& params,
                           const std::optional<Bindings>& inputs, const MeasureSpec& spec,
                           int64_t timeout_ms, uint64_t memory_bytes) {
  v1::MeasureJob job;
  job.set_entry(a.entry);
  job.set_artifact_kind(a.kind);
  job.set_seed(spec.seed);
  if (spec.gpu) {
    job.set_gpu(*spec.gpu);
    // The launches and temporaries sized for these params.
    auto value = [&](const ir::Expr& e, const std::string& what) {
      std::optional<int64_t> v = cuda::eval_postfix(cuda::postfix(e), params);
      if (!v || *v < 0 || *v > std::numeric_limits<uint32_t>::max())
        refuse(Code::InvalidArgument,
               fmt::format("{} of {} is {} = {} under the job's params", what, a.name,
                           ir::to_string(e), v ? std::to_string(*v) : "undefined"));
      return *v;
    };
    for (const codegen::Artifact::GpuKernel& k : a.kernels) {
      v1::GpuLaunch* l = job.add_launches();
      l->set_kernel(k.name);
      for (const ir::Expr& g : k.grid)
        l->add_grid(static_cast<uint32_t>(value(g, "the grid of kernel " + k.name)));
      for (int64_t b : k.block) l->add_block(static_cast<uint32_t>(b));
      l->set_shared_bytes(static_cast<uint32_t>(k.shared_bytes));
    }
    for (const codegen::Artifact::GpuTemp& t : a.temps) {
      uint64_t bytes = ir::dtype_bytes(t.dtype);
      for (const ir::Expr& e : t.shape) {
        int64_t n = value(e, "the size of temporary " + t.name);
        if (n > 0 && bytes > (uint64_t{1} << 62) / static_cast<uint64_t>(n))
          refuse(Code::InvalidArgument, "temporary " + t.name + " of " + a.name + " is too large");
        bytes *= static_cast<uint64_t>(n);
      }
      job.add_temp_bytes(bytes);
    }
    for (const codegen::Artifact::GpuConstant& k : a.constants) {
      int index = -1;
      for (size_t i = 0; i < a.args.size(); ++i)
        if (a.args[i].name == k.buffer) index = static_cast<int>(i);
      if (index < 0)
        refuse(Code::Internal, fmt::format("artifact {} reads buffer {} from constant memory but "
                                           "has no such argument",
                                           a.name, k.buffer));
      v1::GpuConstantCopy* c = job.add_constants();
      c->set_argument(static_cast<uint32_t>(index));
      c->set_symbol(k.symbol);
    }
  }
  v1::MeasureSettings& m = *job.mutable_settings();
  m = spec.settings;
  if (m.time_limit_ms() <= 0) m.set_time_limit_ms(static_cast<int32_t>(timeout_ms));
  if (m.memory_limit_bytes() == 0) m.set_memory_limit_bytes(memory_bytes);
  job.set_return_outputs(spec.return_outputs || spec.check);
  for (const codegen::ArtifactArg& arg : a.args) {
    v1::JobArgument* w = job.add_arguments();
    w->set_name(arg.name);
    if (arg.kind == codegen::ArtifactArg::Kind::Param) {
      w->set_value(params.at(arg.name));
      continue;
    }
    const ir::Buf* b = f.find_buf(arg.name);
    if (!b)
      refuse(Code::Internal,
             fmt::format("artifact {} takes buffer {}, which its func lacks", a.name, arg.name));
    w->set_is_buffer(true);
    w->set_type(element_type(b->dtype));
    w->set_output(arg.role == ir::BufKind::Output);
    for (int64_t e : buffer_shape(*b, params)) w->add_shape(e);
    if (inputs && arg.role != ir::BufKind::Output) {
      const HostBuffer& data = inputs->buffers.at(arg.name);
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

std::optional<tuner::RunError> run_error_of(v1::MeasureResult::Error e) {
  switch (e) {
    case v1::MeasureResult::LOAD_ERROR:
      return tuner::RunError::LoadError;
    case v1::MeasureResult::RUNTIME_CRASH:
      return tuner::RunError::RuntimeCrash;
    case v1::MeasureResult::TIMEOUT:
      return tuner::RunError::Timeout;
    case v1::MeasureResult::WRONG_ANSWER:
      return tuner::RunError::WrongAnswer;
    case v1::MeasureResult::OUT_OF_MEMORY:
      return tuner::RunError::OutOfMemory;
    case v1::MeasureResult::UNSUPPORTED:
      return tuner::RunError::Unsupported;
    case v1::MeasureResult::KERNEL_ERROR:
      return tuner::RunError::KernelError;
    case v1::MeasureResult::OK:
      return std::nullopt;
    default:  // BAD_JOB; ARTIFACT_UNKNOWN, which the fleet answers itself; CANCELLED
      return tuner::RunError::BadJob;
  }
}

// A tuning job's view of the fleet: the agents of one key.
class JobRunner final : public tuner::Runner {
 public:
  JobRunner(const FleetRunner& fleet, MeasureSpec spec, std::function<bool()> stopping)
      : fleet_(fleet), spec_(std::move(spec)), stopping_(std::move(stopping)) {}

  tuner::Outcome<Target> target() override {
    try {
      return FleetRunner::target(fleet_.device(spec_.key, call()), spec_.key, spec_.gpu);
    } catch (...) {
      return failure_of(status_of(std::current_exception(), v1::Operator{}));
    }
  }

  tuner::Outcome<tuner::Measurement> run(const tuner::RunInput& in) override {
    if (!in.artifact || !in.func)
      return tuner::Failure{tuner::Failure::Kind::Internal, std::nullopt,
                            "a point reached the agents without its artifact or func (a bug in "
                            "kiln)"};
    v1::MeasureResponse response;
    try {
      // The key's agents as Measure waits for them: none connected is UNAVAILABLE
      // naming the keys there are.
      (void)fleet_.device(spec_.key, call());
      MeasureSpec spec = spec_;
      spec.agent = in.device;
      if (in.stop_above_ms > 0) spec.settings.set_stop_above_ms(in.stop_above_ms);
      Status s = fleet_.measure(spec, *in.artifact, *in.func, in.params, call(), &response);
      if (!s.ok()) return failure_of(s);
    } catch (...) {
      return failure_of(status_of(std::current_exception(), v1::Operator{}));
    }
    return measurement_of(response);
  }

 private:
  // What is in flight is withdrawn from its agent once `stopping_` says so (kilnd stopping,
  // the job cancelled).
  CallOptions call() const { return CallOptions{std::nullopt, stopping_}; }

  const FleetRunner& fleet_;
  MeasureSpec spec_;
  std::function<bool()> stopping_;
};

}  // namespace

tuner::Outcome<tuner::Measurement> measurement_of(const v1::MeasureResponse& response) {
  const v1::MeasureResult& result = response.result();
  if (result.error() == v1::MeasureResult::CANCELLED)  // kilnd stopping withdrew it
    return tuner::Failure{tuner::Failure::Kind::Stopped, std::nullopt, result.message()};
  tuner::Measurement m;
  m.round_ms.assign(result.round_ms().begin(), result.round_ms().end());
  m.median_ms = response.median_ms();
  m.min_ms = response.min_ms();
  m.error = run_error_of(result.error());
  if (m.error) m.message = result.message();
  m.device = response.agent_id();
  m.stopped_early = result.stopped_early();
  if (result.has_host() && result.host().other_cpus() >= 0)
    m.host_load = result.host().other_cpus();
  if (result.has_host() && result.host().cpu_pressure() >= 0)
    m.cpu_pressure = result.host().cpu_pressure();
  return m;
}

FleetRunner::FleetRunner(int64_t timeout_ms, uint64_t memory_bytes)
    : timeout_ms_(timeout_ms), memory_bytes_(memory_bytes) {}

void FleetRunner::set_fleet(Fleet* fleet) { fleet_ = fleet; }

void FleetRunner::set_quiet(std::string key, QuietFn quiet) {
  quiet_key_ = std::move(key);
  quiet_ = std::move(quiet);
}

v1::Device FleetRunner::device(const std::string& key, const CallOptions& call) const {
  if (!fleet_)
    refuse(Code::Unavailable,
           "this kilnd takes no agents: start it with --agent-token-file FILE or --local-agent "
           "(docs/agents.md)");
  std::optional<v1::Device> d = fleet_->await_device(key, [&] {
    return (call.deadline && std::chrono::steady_clock::now() >= *call.deadline) ||
           (call.cancelled && call.cancelled());
  });
  if (d) return *d;
  std::vector<std::string> keys = fleet_->keys();
  refuse(Code::Unavailable,
         fmt::format("no agent of key {} is connected (connected: {})", key,
                     keys.empty() ? "none" : fmt::format("{}", fmt::join(keys, ", "))));
}

Target FleetRunner::target(const v1::Device& device, const std::string& key,
                           std::optional<int> gpu) {
  if (!gpu) {
    Target t = Target::named(device.triple(), device.cpu(), device.features());
    // The agent's machine's caches, whatever this one has.
    t.l1d_bytes = static_cast<int64_t>(device.l1d_bytes());
    t.l2_bytes = static_cast<int64_t>(device.l2_bytes());
    t.l3_bytes = static_cast<int64_t>(device.l3_bytes());
    return t;
  }
  if (*gpu < 0 || *gpu >= device.gpus_size())
    refuse(Code::FailedPrecondition,
           fmt::format("gpu: the agents of key {} have {} GPU{}{}", key, device.gpus_size(),
                       device.gpus_size() == 1 ? "" : "s",
                       device.gpus_size() > 0
                           ? fmt::format(" (0 to {})", device.gpus_size() - 1)
                           : std::string(": measure on their CPU (leave out gpu)")));
  const v1::Gpu& g = device.gpus(*gpu);
  return Target{cuda::kTriple, cuda::arch_of(g.compute_major(), g.compute_minor()), ""};
}

Status FleetRunner::measure(const MeasureSpec& spec, const codegen::Artifact& artifact,
                            const ir::Func& f, const std::map<std::string, int64_t>& params,
                            const CallOptions& call, v1::MeasureResponse* response) const {
  if (!fleet_)
    refuse(Code::Unavailable,
           "this kilnd takes no agents: start it with --agent-token-file FILE (docs/agents.md)");
  // Inputs are made here when they must be checked or meet a value spec;
  // the agent makes the others.
  bool specs = false;
  for (const ir::Buf* b : f.bufs_of_kind(ir::BufKind::Input))
    specs |= !ir::value_spec_text(b->values).empty();
  std::optional<Bindings> inputs;
  if (spec.check || specs) inputs = interp::random_bindings(f, params, spec.seed);

  FleetJob job;
  job.key = spec.key;
  job.priority = spec.priority;
  job.code = std::make_shared<const std::string>(artifact.code.begin(), artifact.code.end());
  job.code_sha256 = artifact.code_sha256;
  job.job = measure_job(artifact, f, params, inputs, spec, timeout_ms_, memory_bytes_);
  job.agent = spec.agent;
  Status s = run_job(spec, std::move(job), call, response);
  if (!s.ok()) return s;
  v1::MeasureResult& result = *response->mutable_result();
  if (spec.check && result.error() == v1::MeasureResult::OK)
    check_outputs(f, params, *inputs, response->agent_id(), result, response->mutable_check());
  if (!spec.return_outputs)
    for (v1::OutputValues& o : *result.mutable_outputs()) o.clear_data();
  return {};
}

Status FleetRunner::run_job(const MeasureSpec& spec, FleetJob job, const CallOptions& call,
                            v1::MeasureResponse* response) const {
  std::shared_ptr<void> quiet;
  if (quiet_ && spec.key == quiet_key_) quiet = quiet_(call);
  Fleet::Submitted pending = fleet_->submit(std::move(job));
  FleetOutcome out = wait_for(*fleet_, pending, call);
  if (!out.status.ok()) return out.status;
  response->set_agent_id(out.agent_id);
  *response->mutable_device() = out.device;
  response->set_tries(out.tries);
  v1::MeasureResult& result = *response->mutable_result();
  result = std::move(out.result);
  RoundStats stats = round_stats({result.round_ms().begin(), result.round_ms().end()});
  response->set_median_ms(stats.median);
  response->set_min_ms(stats.min);
  return {};
}

Status FleetRunner::measure_model(const MeasureSpec& spec, const graph::ModelArtifact& model,
                                  const CallOptions& call, v1::MeasureResponse* response) const {
  if (!fleet_)
    refuse(Code::Unavailable,
           "this kilnd takes no agents: start it with --agent-token-file FILE (docs/agents.md)");
  FleetJob job;
  job.key = spec.key;
  job.priority = spec.priority;
  job.code = std::make_shared<const std::string>(model.code.begin(), model.code.end());
  job.code_sha256 = model.code_sha256;
  job.agent = spec.agent;
  v1::MeasureJob& j = job.job;
  j.set_artifact_kind("model");
  j.set_seed(spec.seed);
  j.set_weights(std::string(model.weights.begin(), model.weights.end()));
  v1::MeasureSettings& m = *j.mutable_settings();
  m = spec.settings;
  if (m.time_limit_ms() <= 0) m.set_time_limit_ms(static_cast<int32_t>(timeout_ms_));
  if (m.memory_limit_bytes() == 0) m.set_memory_limit_bytes(memory_bytes_);
  j.set_return_outputs(spec.return_outputs);
  auto argument = [&](const graph::ModelTensor& t, bool output) {
    v1::JobArgument* w = j.add_arguments();
    w->set_name(t.name);
    w->set_is_buffer(true);
    w->set_type(element_type(t.dtype));
    w->set_output(output);
    for (int64_t e : t.shape) w->add_shape(e);
  };
  for (const graph::ModelTensor& t : model.inputs) argument(t, false);
  for (const graph::ModelTensor& t : model.outputs) argument(t, true);
  Status s = run_job(spec, std::move(job), call, response);
  if (!s.ok()) return s;
  if (!spec.return_outputs)
    for (v1::OutputValues& o : *response->mutable_result()->mutable_outputs()) o.clear_data();
  return {};
}

std::unique_ptr<tuner::Runner> FleetRunner::runner(MeasureSpec spec,
                                                   std::function<bool()> stopping) {
  return std::make_unique<JobRunner>(*this, std::move(spec), std::move(stopping));
}

}  // namespace kiln::server
