// kiln's types on the wire, both ways (wire.h).
#include "wire.h"

#include <stdexcept>

#include "kiln/cuda.h"
#include "kiln/stats.h"
#include "kiln/v1/service.pb.h"
#include "request.h"

namespace kiln::server {
namespace {

void to_wire(const ir::Expr& e, v1::IntExpression* out) {
  out->set_text(ir::to_string(e));
  for (const std::string& t : cuda::postfix(e)) out->add_postfix(t);
}

ir::Expr expr_of(const v1::IntExpression& e, const std::string& what) {
  std::optional<ir::Expr> x =
      cuda::expr_of_postfix(std::vector<std::string>(e.postfix().begin(), e.postfix().end()));
  if (!x) throw std::invalid_argument(what + " is not a launch expression: " + e.text());
  return *x;
}

ir::DType dtype_of(v1::DType t) {
  for (ir::DType d :
       {ir::DType::Bool, ir::DType::I32, ir::DType::I64, ir::DType::F32, ir::DType::F64})
    if (wire_dtype(d) == t) return d;
  throw std::invalid_argument("an artifact names no element type it can have");
}

double gflops_of(int64_t flops, double median_ms) {
  return flops > 0 && median_ms > 0 ? static_cast<double>(flops) / (median_ms * 1e6) : 0;
}

}  // namespace

void to_wire(const Target& t, v1::Target* out) {
  out->set_triple(t.triple);
  out->set_cpu(t.cpu);
  out->set_features(t.features);
  out->set_l1d_bytes(static_cast<uint64_t>(t.l1d_bytes));
  out->set_l2_bytes(static_cast<uint64_t>(t.l2_bytes));
  out->set_l3_bytes(static_cast<uint64_t>(t.l3_bytes));
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

codegen::Artifact artifact_of(const v1::Artifact& w) {
  codegen::Artifact a;
  a.name = w.name();
  a.kind = w.kind();
  a.triple = w.target().triple();
  a.cpu = w.target().cpu();
  a.features = w.target().features();
  a.opt_level = w.opt_level();
  a.fast_math = w.fast_math();
  a.entry = w.entry();
  for (const v1::ArtifactArgument& arg : w.arguments()) {
    codegen::ArtifactArg& x = a.args.emplace_back();
    x.kind = arg.kind() == v1::ArtifactArgument::PARAM ? codegen::ArtifactArg::Kind::Param
                                                       : codegen::ArtifactArg::Kind::Buffer;
    x.name = arg.name();
    x.dtype = dtype_of(arg.dtype());
    x.role = arg.output() ? ir::BufKind::Output : ir::BufKind::Input;
    x.shape.assign(arg.shape().begin(), arg.shape().end());
  }
  a.imports.assign(w.imports().begin(), w.imports().end());
  a.code.assign(w.code().begin(), w.code().end());
  a.code_sha256 = w.code_sha256();
  a.key = w.key();
  for (const v1::RuntimeCheck& c : w.checks()) {
    ir::RuntimeCheck& x = a.checks.emplace_back();
    x.kind = c.kind() == ir::RuntimeCheck::kind_name(ir::RuntimeCheck::Kind::Arithmetic)
                 ? ir::RuntimeCheck::Kind::Arithmetic
                 : ir::RuntimeCheck::Kind::InputSpec;
    x.subject = c.subject();
    x.message = c.message();
  }
  for (const v1::GpuKernel& k : w.kernels()) {
    codegen::Artifact::GpuKernel& x = a.kernels.emplace_back();
    x.name = k.name();
    if (k.grid_size() != 3 || k.block_size() != 3)
      throw std::invalid_argument("kernel " + k.name() + " has no three-dimensional launch");
    for (int d = 0; d < 3; ++d) {
      x.grid[d] = expr_of(k.grid(d), "the grid of kernel " + k.name());
      x.block[d] = k.block(d);
    }
    x.shared_bytes = k.shared_bytes();
  }
  for (const v1::GpuConstant& k : w.constants()) a.constants.push_back({k.buffer(), k.symbol()});
  for (const v1::GpuTemp& t : w.temps()) {
    codegen::Artifact::GpuTemp& x = a.temps.emplace_back();
    x.name = t.name();
    x.dtype = dtype_of(t.dtype());
    for (const v1::IntExpression& e : t.shape())
      x.shape.push_back(expr_of(e, "the size of temporary " + t.name()));
  }
  return a;
}

void add_times(const std::vector<StageTime>& times,
               google::protobuf::RepeatedPtrField<v1::StageTime>* out) {
  for (const StageTime& t : times) {
    v1::StageTime* s = out->Add();
    s->set_stage(t.stage);
    s->set_ms(t.ms);
  }
}

void to_wire(const records::Record& r, v1::TuningRecord* w) {
  w->set_id(r.id);
  w->set_job(r.job);
  w->set_workload(r.workload);
  w->set_key(r.key);
  for (const auto& [name, value] : r.config) (*w->mutable_config())[name] = value;
  w->set_config_text(records::config_text(r.config));
  for (double ms : r.round_ms) w->add_round_ms(ms);
  w->set_median_ms(r.median_ms);
  w->set_error(r.error);
  w->set_message(r.message);
  w->set_compile_ms(r.compile_ms);
  w->set_flops(r.flops);
  w->set_gflops(r.error.empty() ? gflops_of(r.flops, r.effective_ms()) : 0);
  w->set_compiler_version(r.compiler_version);
  w->set_agent(r.agent);
  w->set_unix_ms(r.unix_ms);
  RoundStats spread = round_stats(r.round_ms);
  w->set_min_ms(spread.min);
  w->set_max_ms(spread.max);
  w->set_cv(spread.cv);
  if (r.host_load) w->set_host_load(*r.host_load);
  if (r.cpu_pressure) w->set_cpu_pressure(*r.cpu_pressure);
  w->set_attempts(r.attempts);
  w->set_noisy(r.noisy);
  w->set_stopped_early(r.stopped_early);
  if (r.retimed_ms) w->set_retimed_ms(*r.retimed_ms);
  for (double ms : r.retime_round_ms) w->add_retime_round_ms(ms);
}

records::Query query_of(const v1::RecordFilter& f) {
  records::Query q;
  if (!f.name().empty()) q.name = f.name();
  if (!f.workload().empty()) q.workload = f.workload();
  if (!f.key().empty()) q.key = f.key();
  if (f.job() != 0) q.job = f.job();
  if (f.since_unix_ms() != 0) q.since_unix_ms = f.since_unix_ms();
  if (f.until_unix_ms() != 0) q.until_unix_ms = f.until_unix_ms();
  if (f.has_error()) q.error = f.error();
  return q;
}

void to_wire(const records::Job& j, const std::string& name, bool live, int64_t records,
             v1::TuningJob* w) {
  w->set_id(j.id);
  w->set_workload(j.workload);
  w->set_name(name);
  w->set_key(j.key);
  w->set_state(records::job_state_name(j.state));
  w->set_live(live);
  w->set_settings_json(j.settings);
  w->set_started_unix_ms(j.started_unix_ms);
  w->set_finished_unix_ms(j.finished_unix_ms);
  w->set_records(records);
}

void to_wire(const tuner::TuneProgress& p, const tuner::Task& task, const std::string& key,
             const std::string& search, v1::TuneProgress* w) {
  w->set_job(p.job);
  w->set_workload(task.workload.hash);
  w->set_name(task.workload.name);
  w->set_key(key);
  w->set_search(search);
  w->set_space_size(task.space->size());
  w->set_trials(p.trials);
  w->set_target(p.target);
  if (p.best) to_wire(*p.best, w->mutable_best());
  for (const auto& [k, n] : p.errors) (*w->mutable_errors())[k] = n;
  for (const auto& [k, n] : p.rejected) (*w->mutable_rejected())[k] = n;
  w->set_elapsed_s(p.elapsed_s);
  w->set_eta_s(p.eta_s);
  if (p.last) to_wire(*p.last, w->mutable_last());
  w->set_done(p.done);
  w->set_stopped(p.stopped);
  w->set_remeasured(p.remeasured);
  w->set_retimed(p.retimed);
  w->set_stopped_early(p.stopped_early);
  if (p.done && p.first) {
    to_wire(*p.first, w->mutable_first());
    w->set_first_from(p.first_from);
    w->set_first_shape(p.first_shape);
  }
}

void to_wire(const tuner::ScheduleProgress& p, const std::vector<tuner::ScheduledTask>& tasks,
             int64_t job, const records::Workload& model, const std::string& key,
             const std::string& search, bool alternatives, v1::TuneProgress* w) {
  w->set_job(job);
  w->set_workload(model.hash);
  w->set_name(model.name);
  w->set_key(key);
  w->set_search(search);
  w->set_trials(p.trials);
  w->set_target(p.target);
  w->set_alternatives(alternatives);
  uint64_t space = 0;
  for (size_t i = 0; i < tasks.size() && i < p.tasks.size(); ++i) {
    const tuner::TuneProgress& t = p.tasks[i];
    v1::TaskProgress* out = w->add_tasks();
    out->set_name(tasks[i].name);
    out->set_workload(tasks[i].task.workload.hash);
    out->set_job(t.job);
    out->set_calls(tasks[i].calls);
    out->set_space_size(tasks[i].task.space->size());
    out->set_trials(t.trials);
    if (t.best) to_wire(*t.best, out->mutable_best());
    out->set_stopped(t.stopped);
    if (p.done && t.first) {
      to_wire(*t.first, out->mutable_first());
      out->set_first_from(t.first_from);
      out->set_first_shape(t.first_shape);
    }
    space += tasks[i].task.space->size();
    for (const auto& [k, n] : t.errors) (*w->mutable_errors())[k] += n;
    for (const auto& [k, n] : t.rejected) (*w->mutable_rejected())[k] += n;
    w->set_remeasured(w->remeasured() + t.remeasured);
    w->set_retimed(w->retimed() + t.retimed);
    w->set_stopped_early(w->stopped_early() + t.stopped_early);
  }
  w->set_space_size(space);
  if (alternatives && p.fastest >= 0)
    *w->mutable_best() = w->tasks(p.fastest).best();  // the job keeps the fastest task's
  w->set_elapsed_s(p.elapsed_s);
  w->set_eta_s(p.eta_s);
  if (p.last) to_wire(*p.last, w->mutable_last());
  w->set_task(p.task);
  w->set_predicted_ms(p.predicted_ms);
  w->set_done(p.done);
  w->set_stopped(p.stopped);
}

}  // namespace kiln::server
