// kilnd's tuning jobs over kiln::tuner and the service's Measure.
#include "tuning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kiln/compile.h"
#include "kiln/cost_model.h"
#include "kiln/cuda.h"
#include "kiln/digest.h"
#include "kiln/error.h"
#include "kiln/interp.h"
#include "kiln/loop_ir.h"
#include "kiln/records.h"
#include "kiln/run.h"
#include "kiln/target.h"
#include "kiln/tune.h"
#include "kiln/v1/service.pb.h"
#include "request.h"

namespace kiln::server {

namespace {

constexpr int kDefaultTrials = 64;
constexpr int kDefaultBatch = 16;
constexpr int kMaxBatch = 256;
constexpr int kMaxPage = 10'000;
constexpr int kExportPage = 1'000;

double gflops_of(int64_t flops, double median_ms) {
  return flops > 0 && median_ms > 0 ? static_cast<double>(flops) / (median_ms * 1e6) : 0;
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
  w->set_gflops(r.error.empty() ? gflops_of(r.flops, r.median_ms) : 0);
  w->set_compiler_version(r.compiler_version);
  w->set_agent(r.agent);
  w->set_unix_ms(r.unix_ms);
}

void to_wire(const tuner::Trial& t, int64_t job, const records::Workload& w, const std::string& key,
             v1::TuningRecord* out) {
  records::Record r;
  r.job = job;
  r.workload = w.hash;
  r.key = key;
  r.config = t.point;
  r.round_ms = t.round_ms;
  r.median_ms = t.error.empty() ? t.median_ms : 0;
  r.error = t.error;
  r.message = t.message;
  r.compile_ms = t.compile_ms;
  r.flops = t.flops;
  r.compiler_version = t.compiler_version;
  r.agent = t.agent;
  to_wire(r, out);
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

// An operator prepared for tuning: its workload (the func with its params'
// values, knobs at their defaults), the func with every value set, the
// space of the knobs not held fixed, and a call's flops.
struct Prepared {
  records::Workload workload;
  ir::Func func;
  std::unique_ptr<tuner::Space> space;
  std::map<std::string, int64_t> fixed;  // knobs set in the request
  int64_t flops = 0;
};

Prepared prepare(const v1::TuneRequest& request, const Limits& limits) {
  ir::Func base = resolve(request.op(), limits);
  if (base.knobs.empty())
    refuse(Code::InvalidArgument,
           fmt::format("{} has no knobs to tune: declare some in its schedule (knob NAME in "
                       "[V, ...] = DEFAULT; docs/language.md)",
                       base.name));
  std::set<std::string> knob_names;
  for (const ir::Knob& k : base.knobs) knob_names.insert(k.name);
  Prepared p;
  ir::Overrides params;
  for (const auto& [name, value] : request.options().set()) {
    if (knob_names.count(name)) {
      p.fixed[name] = value;
    } else {
      params[name] = value;
    }
  }
  ir::Func shaped = ir::apply_overrides(base, params);
  p.workload.definition = ir::to_string(shaped);
  p.workload.hash = sha256_hex(p.workload.definition);
  p.workload.name = shaped.name;
  p.func = ir::apply_overrides(shaped, ir::Overrides(p.fixed.begin(), p.fixed.end()));
  std::set<std::string> fixed;
  for (const auto& [name, value] : p.fixed) fixed.insert(name);
  try {
    p.space = std::make_unique<tuner::Space>(tuner::space_of(p.func, fixed));
  } catch (const std::invalid_argument& e) {
    refuse(Code::InvalidArgument, fmt::format("{}: {}", base.name, e.what()));
  }

  // The flops of a call, from the algorithm's loops at the sizes measured.
  std::map<std::string, int64_t> given(request.runtime_params().begin(),
                                       request.runtime_params().end());
  std::map<std::string, int64_t> values =
      interp::param_values(p.func, run_param_values(p.func, given).values);
  p.flops = std::max<int64_t>(0, algorithm_flops(p.func, values, limits));
  return p;
}

// What a job's points are compiled for: the agents' CPU, or their GPU `gpu`.
Target job_target(const v1::Device& device, const v1::TuneRequest& r) {
  if (!r.has_gpu()) return Target::named(device.triple(), device.cpu(), device.features());
  if (r.gpu() < 0 || r.gpu() >= device.gpus_size())
    refuse(Code::FailedPrecondition,
           fmt::format("gpu: the agents of key {} have {} GPU{}", r.key(), device.gpus_size(),
                       device.gpus_size() == 1 ? "" : "s"));
  const v1::Gpu& g = device.gpus(r.gpu());
  return Target{cuda::kTriple, cuda::arch_of(g.compute_major(), g.compute_minor()), ""};
}

// The key a job's records are kept under: the agents' key, and "/gpuN" for a GPU.
std::string record_key(const v1::TuneRequest& r) {
  return r.has_gpu() ? fmt::format("{}/gpu{}", r.key(), r.gpu()) : r.key();
}

// The Iter features of a point: its loops after the passes, compiled for the
// key's target at the request's opt level. A point that does not compile
// (an illegal schedule, rejected when measured) gets zeros.
tuner::FeatureFn iter_features_of(const Prepared& p, const v1::TuneRequest& request,
                                  const v1::Device& device, const Limits& limits) {
  CompileOptions o;
  o.target = job_target(device, request);
  if (request.options().has_opt_level()) o.opt_level = request.options().opt_level();
  o.limits = limits;
  std::map<std::string, int64_t> given(request.runtime_params().begin(),
                                       request.runtime_params().end());
  std::map<std::string, int64_t> values =
      interp::param_values(p.func, run_param_values(p.func, given).values);
  ir::Func func = p.func;
  return [func, o, values](const tuner::Space&, const tuner::Config& point) {
    try {
      CompileResult r = kiln::compile(CompileRequest{
          .func = func, .overrides = point, .options = o, .output = CompileOutput::Loops});
      return tuner::iter_features(r.optimized, values);
    } catch (const CompileError&) {
      return std::vector<float>(tuner::kIterFeatureLength, 0.0f);
    }
  };
}

tuner::SearchOptions search_options(const v1::TuneRequest& r) {
  tuner::SearchOptions o;
  const std::string& s = r.search();
  if (s.empty() || s == "xgb-rank") {
    o.strategy = tuner::Strategy::Model;
    o.loss = tuner::Loss::Rank;
  } else if (s == "xgb-reg") {
    o.strategy = tuner::Strategy::Model;
    o.loss = tuner::Loss::Reg;
  } else if (s == "random") {
    o.strategy = tuner::Strategy::Random;
  } else if (s == "grid") {
    o.strategy = tuner::Strategy::Grid;
  } else {
    refuse(Code::InvalidArgument,
           fmt::format("search: '{}' is not a strategy (xgb-rank, xgb-reg, random, grid)", s));
  }
  o.seed = r.seed() != 0 ? r.seed() : 1;
  return o;
}

// Checks what Prepare does not, and fills the defaults in.
v1::TuneRequest normalized(v1::TuneRequest r) {
  if (r.key().empty())
    refuse(Code::InvalidArgument, "key: name the device class to tune on (`kiln agents`)");
  const v1::Target& t = r.options().target();
  if (!t.triple().empty() || !t.cpu().empty() || !t.features().empty())
    refuse(Code::InvalidArgument,
           "options.target: a tuning job compiles for its agents' own target; leave it unset");
  if (r.trials() < 0 || r.batch() < 0 || r.early_stop() < 0)
    refuse(Code::InvalidArgument, "trials, batch and early_stop may not be negative");
  if (r.trials() == 0) r.set_trials(kDefaultTrials);
  if (r.batch() == 0) r.set_batch(std::min(kDefaultBatch, r.trials()));
  if (r.batch() > kMaxBatch)
    refuse(Code::InvalidArgument,
           fmt::format("batch: {} is more than {} points at once", r.batch(), kMaxBatch));
  if (r.search().empty()) r.set_search("xgb-rank");
  if (r.features().empty()) r.set_features("knob");
  if (r.features() != "knob" && r.features() != "iter")
    refuse(Code::InvalidArgument,
           fmt::format("features: '{}' is not a kind of features (knob, iter)", r.features()));
  if (r.seed() == 0) r.set_seed(1);
  v1::MeasureSettings& m = *r.mutable_settings();
  if (m.repeat() == 0) m.set_repeat(3);
  if (m.min_repeat_ms() == 0) m.set_min_repeat_ms(20);
  search_options(r);  // refuses an unknown strategy
  return r;
}

// What a job keeps of its request to be resumed: everything but the
// operator (the workload's definition is that), as JSON.
std::string settings_json(v1::TuneRequest r) {
  r.clear_op();
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(r, &out, o).ok())
    refuse(Code::Internal, "cannot write a tuning job's settings as JSON");
  return out;
}

v1::TuneRequest request_of_job(const records::Job& job, const records::Workload& w) {
  v1::TuneRequest r;
  if (!google::protobuf::util::JsonStringToMessage(job.settings, &r).ok())
    refuse(Code::FailedPrecondition,
           fmt::format("tuning job {} was started by a kiln whose settings this one cannot read: "
                       "{}",
                       job.id, job.settings));
  // The definition has the params' values in it already; the set knobs stay.
  v1::SourceText* s = r.mutable_op()->mutable_source();
  s->set_text(w.definition);
  s->set_filename(fmt::format("<workload {}>", w.hash.substr(0, 12)));
  s->set_name(w.name);
  return r;
}

// Measures points through the service: each compiled for the key's agents
// (through the compile cache) and measured on one of them, the batch's
// points at once, so the workers compile in parallel and every agent of the
// key measures. A point whose schedule is illegal is reported rejected;
// one that fails to compile otherwise is a COMPILE_ERROR trial.
class ServiceMeasurer final : public tuner::Measurer {
 public:
  ServiceMeasurer(Service& service, const v1::TuneRequest& request, const Prepared& prepared,
                  v1::Device device, std::function<bool()> stopping,
                  std::function<bool()> cancelled)
      : service_(service),
        request_(request),
        prepared_(prepared),
        device_(std::move(device)),
        stopping_(std::move(stopping)),
        cancelled_(std::move(cancelled)) {}

  // Two phases: every point of the batch compiled at once (through the
  // cache), then the compiled ones measured at once. Compiling while an
  // agent on the same machine measures (kilnd --local-agent) would disturb
  // its timings.
  void measure(const std::vector<tuner::Config>& batch,
               const std::function<void(const tuner::Trial&)>& report) override {
    std::mutex mu;
    std::optional<Status> failure;
    // Whether a status is the point's own fault (its schedule, or a limit its
    // compilation met), reporting it then; false for kilnd's (no agent, every
    // agent lost, kilnd stopping), remembered as the batch's failure.
    auto point_fault = [&](const tuner::Config& point, const Status& s) {
      if (s.code != Code::InvalidArgument && s.code != Code::ResourceExhausted) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = s;
        return false;
      }
      tuner::Trial t;
      t.point = point;
      t.flops = prepared_.flops;
      if (s.message.find("legality error") != std::string::npos) {
        t.rejected = "illegal schedule";
      } else {
        t.error = "COMPILE_ERROR";
        t.message = s.message;
      }
      t.compiler_version = compiler_version();
      report(t);
      return true;
    };
    // `work` on each of `which`, at most `limit` at once; a point is not
    // started once the job is cancelled or kilnd stops. An exception (the
    // store failing in `report`) is rethrown here, after the joins.
    auto each = [&](const std::vector<size_t>& which, size_t limit,
                    const std::function<void(size_t)>& work) {
      std::atomic<size_t> next{0};
      std::exception_ptr error;
      std::vector<std::thread> threads;
      auto run = [&] {
        for (size_t k = next++; k < which.size(); k = next++) {
          if (gone()) return;
          try {
            work(which[k]);
          } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!error) error = std::current_exception();
            next = which.size();
          }
        }
      };
      try {
        for (size_t t = 0; t < std::min(limit, which.size()); ++t) threads.emplace_back(run);
      } catch (...) {  // no thread to be had: those made finish the work
        next = which.size();
        for (std::thread& t : threads) t.join();
        throw;
      }
      for (std::thread& t : threads) t.join();
      if (error) std::rethrow_exception(error);
    };

    std::vector<size_t> all(batch.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<double> compile_ms(batch.size(), 0.0);
    std::vector<char> compiled(batch.size(), 0);
    // As many compiles at once as kilnd has workers: a batch does not fill
    // the queue other clients wait in.
    size_t workers = std::max(1u, std::thread::hardware_concurrency());
    each(all, workers, [&](size_t i) {
      v1::CompileResponse response;
      Status s = compile_one(batch[i], &response);
      if (!s.ok()) {
        if (!gone()) point_fault(batch[i], s);
        return;
      }
      for (const v1::StageTime& st : response.times()) compile_ms[i] += st.ms();
      compiled[i] = 1;
    });
    std::vector<size_t> ready;
    for (size_t i = 0; i < batch.size(); ++i)
      if (compiled[i]) ready.push_back(i);
    each(ready, ready.size(), [&](size_t i) {
      v1::MeasureResponse response;
      Status s = measure_one(batch[i], &response);
      // A measurement that arrives is recorded, cancelled job or not.
      if (!s.ok()) {
        if (!gone()) point_fault(batch[i], s);
        return;
      }
      tuner::Trial t;
      t.point = batch[i];
      t.flops = prepared_.flops;
      const v1::MeasureResult& result = response.result();
      t.round_ms.assign(result.round_ms().begin(), result.round_ms().end());
      t.median_ms = response.median_ms();
      if (result.error() != v1::MeasureResult::OK) {
        t.error = v1::MeasureResult::Error_Name(result.error());
        t.message = result.message();
      }
      t.compile_ms = compile_ms[i];
      for (const v1::StageTime& st : response.times()) t.compile_ms += st.ms();
      t.agent = response.agent_id();
      t.compiler_version = response.compiler_version();
      report(t);
    });
    if (stopping_())
      refuse(Code::Unavailable, "kilnd is stopping; the job is kept and can be resumed");
    if (failure && !cancelled_()) throw Refusal{*failure};
  }

 private:
  bool gone() const { return stopping_() || cancelled_(); }

  v1::CompileOptions options_of(const tuner::Config& point) const {
    v1::CompileOptions o = request_.options();
    for (const auto& [name, value] : point) (*o.mutable_set())[name] = value;
    return o;
  }

  // Calls `call` until kilnd's compile queue has room: a full queue is
  // kilnd's state, not the point's.
  template <typename Call>
  Status retry_busy(Call call) {
    for (;;) {
      Status s = call();
      if (s.code != Code::ResourceExhausted || !s.message.starts_with("kilnd is busy") ||
          stopping_())
        return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // The point compiled for the key's target, as Measure will ask for it.
  Status compile_one(const tuner::Config& point, v1::CompileResponse* response) {
    v1::CompileRequest c;
    *c.mutable_op() = request_.op();
    *c.mutable_options() = options_of(point);
    v1::Target* t = c.mutable_options()->mutable_target();
    Target target = job_target(device_, request_);
    t->set_triple(target.triple);
    t->set_cpu(target.cpu);
    t->set_features(target.features);
    CallOptions call;  // a cancelled job lets what is in flight finish; kilnd stopping does not
    call.cancelled = [this] { return stopping_(); };
    return retry_busy([&] {
      response->Clear();
      return service_.compile(c, response, call);
    });
  }

  Status measure_one(const tuner::Config& point, v1::MeasureResponse* response) {
    v1::MeasureRequest m;
    *m.mutable_op() = request_.op();
    *m.mutable_options() = options_of(point);
    m.set_key(request_.key());
    *m.mutable_runtime_params() = request_.runtime_params();
    m.set_seed(request_.seed());
    *m.mutable_settings() = request_.settings();
    m.set_priority(request_.priority());
    if (request_.has_gpu()) m.set_gpu(request_.gpu());
    CallOptions call;  // a cancelled job lets what is in flight finish; kilnd stopping does not
    call.cancelled = [this] { return stopping_(); };
    return retry_busy([&] {
      response->Clear();
      return service_.measure(m, response, call);
    });
  }

  Service& service_;
  const v1::TuneRequest& request_;
  const Prepared& prepared_;
  v1::Device device_;
  std::function<bool()> stopping_, cancelled_;
};

}  // namespace

// A job running in this kilnd, and the progress it has made so far.
struct LiveJob {
  int64_t id = 0;
  std::mutex mu;
  std::condition_variable changed;
  std::vector<v1::TuneProgress> messages;  // every one so far, in order
  bool ended = false;
  Status status;  // when ended: not ok when the job did not finish
  std::atomic<bool> cancel{false};
};

struct Tuning::Impl {
  Service& service;
  Limits limits;
  std::string path;
  std::unique_ptr<records::RecordStore> store;
  std::mutex mu;
  std::condition_variable threads_done;
  std::map<int64_t, std::shared_ptr<LiveJob>> live;
  int threads = 0;
  std::atomic<bool> stopping{false};

  Impl(Service& s, const std::string& records_path)
      : service(s), path(records_path), store(records::open_sqlite_store(records_path)) {}

  std::shared_ptr<LiveJob> find_live(int64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(id);
    return it == live.end() ? nullptr : it->second;
  }

  v1::TuningJob job_of(const records::Job& j) {
    v1::TuningJob w;
    w.set_id(j.id);
    w.set_workload(j.workload);
    if (std::optional<records::Workload> wl = store->workload(j.workload)) w.set_name(wl->name);
    w.set_key(j.key);
    w.set_state(records::job_state_name(j.state));
    w.set_live(find_live(j.id) != nullptr);
    w.set_settings_json(j.settings);
    w.set_started_unix_ms(j.started_unix_ms);
    w.set_finished_unix_ms(j.finished_unix_ms);
    records::Query q;
    q.job = j.id;
    w.set_records(store->count(q));
    return w;
  }

  // Transfer: the records of the same operator (by name) at other shapes on
  // the same key, each relative to the best of its workload.
  void warm_start(const records::Workload& w, const std::string& key, tuner::TuneSettings& s) {
    records::Query q;
    q.name = w.name;
    q.key = key;
    q.error = "";
    q.order = records::Query::Order::Fastest;  // the most telling ones, and not too many
    q.limit = 512;
    std::map<std::string, std::vector<records::Record>> by_workload;
    for (records::Record& r : store->query(q))
      if (r.workload != w.hash && r.median_ms > 0) by_workload[r.workload].push_back(std::move(r));
    for (const auto& [hash, rs] : by_workload) {
      double best = rs.front().median_ms;
      for (const records::Record& r : rs) best = std::min(best, r.median_ms);
      for (const records::Record& r : rs) {
        s.warm_points.push_back(r.config);
        s.warm_cost.push_back(r.median_ms / best);
      }
    }
  }

  // Starts job `job` (0: a new one) on a thread of its own.
  std::shared_ptr<LiveJob> start(v1::TuneRequest request, int64_t job, int32_t trials,
                                 const CallOptions& call);
  Status follow(const std::shared_ptr<LiveJob>& job, size_t from, bool cancel_on_leave,
                const ProgressSink& sink, const CallOptions& call);
};

std::shared_ptr<LiveJob> Tuning::Impl::start(v1::TuneRequest request, int64_t job_id,
                                             int32_t trials, const CallOptions& call) {
  request = normalized(std::move(request));
  if (trials > 0) request.set_trials(trials);
  auto prepared = std::make_shared<Prepared>(prepare(request, limits));
  if (prepared->space->size() == 0) refuse(Code::InvalidArgument, "the knobs' space is empty");

  // The key's target: what its agents compile for.
  v1::Device device;
  if (Status s = service.agent_device(request.key(), &device, call); !s.ok()) throw Refusal{s};

  tuner::TuneSettings settings;
  settings.trials = request.trials();
  settings.batch = request.batch();
  settings.early_stop = request.early_stop();
  settings.search = search_options(request);
  if (request.features() == "iter") {
    // The loops each point lowers to, for the agents' target: a compile up to
    // the passes a point, so the model scores a pool of candidates a round
    // (4 batches' worth) instead of annealing over thousands.
    settings.search.pool = std::max(32, 4 * settings.batch);
    settings.search.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    settings.features = iter_features_of(*prepared, request, device, limits);
  }
  const Target target = job_target(device, request);
  const std::string records_key = record_key(request);
  if (request.transfer()) warm_start(prepared->workload, records_key, settings);
  store->put_target({records_key, target.triple, target.cpu, target.features});
  store->put_workload(prepared->workload);

  // The job, running and live here, under `mu`: two resumes of one job, or a
  // resume and a cancel, cannot both act on it.
  auto live_job = std::make_shared<LiveJob>();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) refuse(Code::Unavailable, "kilnd is stopping");
    if (job_id != 0 && live.count(job_id))
      refuse(Code::FailedPrecondition,
             fmt::format("tuning job {} is running already; follow it with ResumeTune", job_id));
    if (job_id == 0) {
      job_id = store->start_job(
          {0, prepared->workload.hash, records_key, settings_json(request), {}, 0, 0});
    } else {
      store->finish_job(job_id, records::JobState::Running);
    }
    live_job->id = job_id;
    live[job_id] = live_job;
    ++threads;
  }
  spdlog::info("tuning job {}: {} on {}, {} trials, {} search, space of {} points{}", job_id,
               prepared->workload.name, records_key, settings.trials, request.search(),
               prepared->space->size(),
               settings.warm_points.empty()
                   ? ""
                   : fmt::format(", warm-started from {} records", settings.warm_points.size()));

  auto body = [this, live_job, prepared, request, settings, device, records_key] {
    auto post = [&](const tuner::TuneProgress& p) {
      v1::TuneProgress w;
      w.set_job(p.job);
      w.set_workload(prepared->workload.hash);
      w.set_name(prepared->workload.name);
      w.set_key(records_key);
      w.set_search(request.search());
      w.set_space_size(prepared->space->size());
      w.set_trials(p.trials);
      w.set_target(p.target);
      if (p.best) to_wire(*p.best, p.job, prepared->workload, records_key, w.mutable_best());
      for (const auto& [k, n] : p.errors) (*w.mutable_errors())[k] = n;
      for (const auto& [k, n] : p.rejected) (*w.mutable_rejected())[k] = n;
      w.set_elapsed_s(p.elapsed_s);
      w.set_eta_s(p.eta_s);
      if (p.last) to_wire(*p.last, p.job, prepared->workload, records_key, w.mutable_last());
      w.set_done(p.done);
      w.set_stopped(p.stopped);
      std::lock_guard<std::mutex> lock(live_job->mu);
      live_job->messages.push_back(std::move(w));
      live_job->changed.notify_all();
    };
    ServiceMeasurer measurer(
        service, request, *prepared, device, [this] { return stopping.load(); },
        [live_job] { return live_job->cancel.load(); });
    Status status;
    try {
      {
        // The first message: the job's number, before anything is measured.
        tuner::TuneProgress first;
        first.job = live_job->id;
        first.target = settings.trials;
        records::Query q;
        q.job = live_job->id;
        first.trials = static_cast<int>(store->count(q));
        post(first);
      }
      tuner::TuneProgress end =
          tuner::tune(*prepared->space, measurer, *store, prepared->workload, records_key, settings,
                      live_job->id, post, [&] { return live_job->cancel.load(); });
      spdlog::info("tuning job {}: {} after {} trials, best {}", live_job->id, end.stopped,
                   end.trials,
                   end.best ? fmt::format("{:.4f} ms ({})", end.best->median_ms,
                                          records::config_text(end.best->point))
                            : "none");
    } catch (...) {
      status = status_of(std::current_exception(), request.op());
      if (stopping) {
        status = {Code::Unavailable,
                  fmt::format("kilnd stopped; tuning job {} keeps its records: resume it with "
                              "ResumeTune (kiln tune --resume {})",
                              live_job->id, live_job->id)};
      } else {
        try {
          store->finish_job(live_job->id, records::JobState::Failed);
        } catch (const std::exception& e) {
          spdlog::error("tuning job {}: {}", live_job->id, e.what());
        }
        status.message = fmt::format("tuning job {} failed: {}", live_job->id, status.message);
      }
      spdlog::warn("{}", status.message);
    }
    {
      std::lock_guard<std::mutex> lock(mu);  // no longer live once anyone sees it ended
      if (auto it = live.find(live_job->id); it != live.end() && it->second == live_job)
        live.erase(it);
    }
    {
      std::lock_guard<std::mutex> lock(live_job->mu);
      live_job->ended = true;
      live_job->status = status;
      live_job->changed.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu);
    --threads;
    threads_done.notify_all();
  };
  try {
    std::thread(body).detach();
  } catch (...) {  // no thread: the job is left to be resumed
    std::lock_guard<std::mutex> lock(mu);
    live.erase(live_job->id);
    --threads;
    threads_done.notify_all();
    throw;
  }
  return live_job;
}

Status Tuning::Impl::follow(const std::shared_ptr<LiveJob>& job, size_t next, bool cancel_on_leave,
                            const ProgressSink& sink, const CallOptions& call) {
  auto left = [&] {
    if (cancel_on_leave) job->cancel = true;
    return Status{Code::Cancelled,
                  cancel_on_leave
                      ? fmt::format("the client went away; tuning job {} was cancelled", job->id)
                      : fmt::format("the client went away; tuning job {} goes on", job->id)};
  };
  std::unique_lock<std::mutex> lock(job->mu);
  for (;;) {
    job->changed.wait_for(lock, std::chrono::milliseconds(100),
                          [&] { return job->messages.size() > next || job->ended; });
    while (next < job->messages.size()) {
      v1::TuneProgress m = job->messages[next++];
      lock.unlock();
      bool sent = sink(m);
      lock.lock();
      if (!sent) {
        lock.unlock();
        return left();
      }
    }
    if (job->ended) return job->status;
    if (call.cancelled && call.cancelled()) {
      lock.unlock();
      return left();
    }
  }
}

Tuning::Tuning(Service& service, const std::string& records_path)
    : impl_(std::make_unique<Impl>(service, records_path)) {
  impl_->limits = service.limits();
}

Tuning::~Tuning() { stop(); }

void Tuning::stop() {
  impl_->stopping = true;
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->threads_done.wait(lock, [&] { return impl_->threads == 0; });
}

Status Tuning::tune(const v1::TuneRequest& request, const ProgressSink& sink,
                    const CallOptions& call) {
  try {
    std::shared_ptr<LiveJob> job = impl_->start(request, 0, 0, call);
    return impl_->follow(job, 0, !request.detach(), sink, call);
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

Status Tuning::resume(const v1::ResumeTuneRequest& request, const ProgressSink& sink,
                      const CallOptions& call) {
  try {
    if (std::shared_ptr<LiveJob> live = impl_->find_live(request.job())) {
      if (request.trials() != 0)
        refuse(Code::FailedPrecondition,
               fmt::format("tuning job {} is running: its trials can change once it has stopped "
                           "(resume without trials to follow it)",
                           request.job()));
      size_t from = 0;
      {
        std::lock_guard<std::mutex> lock(live->mu);
        from = live->messages.empty() ? 0 : live->messages.size() - 1;
      }
      return impl_->follow(live, from, false, sink, call);
    }
    std::optional<records::Job> job = impl_->store->job(request.job());
    if (!job) refuse(Code::NotFound, fmt::format("no tuning job {}", request.job()));
    std::optional<records::Workload> w = impl_->store->workload(job->workload);
    if (!w)
      refuse(Code::Internal,
             fmt::format("tuning job {}: its workload {} is missing", job->id, job->workload));
    v1::TuneRequest r = request_of_job(*job, *w);
    records::Query q;
    q.job = job->id;
    int64_t measured = impl_->store->count(q);
    int32_t trials = request.trials() > 0 ? request.trials() : r.trials();
    if (request.trials() < 0) refuse(Code::InvalidArgument, "trials may not be negative");
    if (job->state == records::JobState::Done && trials <= measured)
      refuse(Code::FailedPrecondition,
             fmt::format("tuning job {} is done ({} records); ask for more trials than that to "
                         "go on",
                         job->id, measured));
    std::shared_ptr<LiveJob> live = impl_->start(r, job->id, trials, call);
    return impl_->follow(live, 0, !request.detach(), sink, call);
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator{});
  }
}

Status Tuning::cancel(const v1::CancelTuneRequest& request, v1::CancelTuneResponse* response) {
  try {
    std::optional<records::Job> job = impl_->store->job(request.job());
    if (!job) refuse(Code::NotFound, fmt::format("no tuning job {}", request.job()));
    if (std::shared_ptr<LiveJob> live = impl_->find_live(request.job())) {
      live->cancel = true;
      // The job marks itself cancelled once the measurements in flight end
      // (each within its time limit).
      std::unique_lock<std::mutex> lock(live->mu);
      if (!live->changed.wait_for(lock, std::chrono::seconds(120), [&] { return live->ended; }))
        refuse(Code::DeadlineExceeded,
               fmt::format("tuning job {} is stopping: it ends when its measurements in flight "
                           "do (ListJobs shows when)",
                           request.job()));
    } else if (job->state == records::JobState::Running) {
      impl_->store->finish_job(job->id, records::JobState::Cancelled);  // interrupted before
    } else {
      refuse(Code::FailedPrecondition, fmt::format("tuning job {} is {}, not running", job->id,
                                                   records::job_state_name(job->state)));
    }
    *response->mutable_job() = impl_->job_of(*impl_->store->job(request.job()));
    return {};
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator{});
  }
}

Status Tuning::list_jobs(const v1::ListJobsRequest& request, v1::ListJobsResponse* response) {
  try {
    int limit = request.limit() > 0 ? request.limit() : 100;
    for (const records::Job& j : impl_->store->jobs(request.workload())) {
      if (response->jobs_size() >= limit) break;
      v1::TuningJob w = impl_->job_of(j);
      if (!request.name().empty() && w.name() != request.name()) continue;
      *response->add_jobs() = std::move(w);
    }
    return {};
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator{});
  }
}

Status Tuning::query(const v1::QueryRecordsRequest& request, v1::QueryRecordsResponse* response) {
  try {
    if (request.limit() < 0 || request.limit() > kMaxPage || request.offset() < 0)
      refuse(Code::InvalidArgument,
             fmt::format("limit: 1 to {} records a page (0: 100), offset 0 or more", kMaxPage));
    records::Query q = query_of(request.filter());
    q.order = request.order() == v1::QueryRecordsRequest::FASTEST ? records::Query::Order::Fastest
                                                                  : records::Query::Order::Arrival;
    q.after = request.offset();
    q.limit = request.limit() > 0 ? request.limit() : 100;
    for (const records::Record& r : impl_->store->query(q)) to_wire(r, response->add_records());
    int64_t total = impl_->store->count(q);
    response->set_total(total);
    int64_t end = q.after + response->records_size();
    response->set_next_offset(end < total ? end : 0);
    return {};
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator{});
  }
}

Status Tuning::best(const v1::BestConfigRequest& request, v1::BestConfigResponse* response,
                    const CallOptions& call) {
  (void)call;
  try {
    std::string workload = request.workload();
    if (workload.empty()) {
      if (request.op().definition_case() == v1::Operator::DEFINITION_NOT_SET)
        refuse(Code::InvalidArgument, "name the operator (op) or its workload hash (workload)");
      v1::TuneRequest r;
      *r.mutable_op() = request.op();
      *r.mutable_options()->mutable_set() = request.options().set();
      ir::Func base = resolve(r.op(), impl_->limits);
      std::set<std::string> knobs;
      for (const ir::Knob& k : base.knobs) knobs.insert(k.name);
      ir::Overrides params;
      for (const auto& [name, value] : request.options().set())
        if (!knobs.count(name)) params[name] = value;
      workload = sha256_hex(ir::to_string(ir::apply_overrides(base, params)));
    }
    std::vector<records::Target> targets = impl_->store->targets();
    std::vector<std::string> keys;
    if (!request.key().empty()) {
      keys.push_back(request.key());
    } else {
      // The device classes of this target: the same CPU, or else the one
      // class of the same architecture that has a record of the workload.
      const v1::Target& t = request.options().target();
      Target want =
          t.triple().empty() ? Target::host() : Target::named(t.triple(), t.cpu(), t.features());
      auto arch = [](const std::string& triple) { return triple.substr(0, triple.find('-')); };
      std::vector<std::string> same_arch;
      for (const records::Target& k : targets) {
        if (arch(k.triple) != arch(want.triple)) continue;
        if (k.cpu == want.cpu) keys.push_back(k.key);
        if (impl_->store->best(workload, k.key)) same_arch.push_back(k.key);
      }
      bool recorded = false;
      for (const std::string& k : keys) recorded = recorded || impl_->store->best(workload, k);
      if (!recorded && same_arch.size() == 1) keys = same_arch;
      if (keys.empty()) {
        std::vector<std::string> all;
        for (const records::Target& k : targets)
          all.push_back(fmt::format("{} ({} {})", k.key, k.triple, k.cpu));
        refuse(Code::NotFound,
               fmt::format(
                   "no device class is the target {} {}{}: name one with key (device "
                   "classes: {})",
                   want.triple, want.cpu,
                   same_arch.size() > 1
                       ? fmt::format(", and {} of its architecture have records", same_arch.size())
                       : "",
                   all.empty() ? std::string("none") : fmt::format("{}", fmt::join(all, ", "))));
      }
    }
    std::optional<records::Record> best;
    for (const std::string& key : keys) {
      std::optional<records::Record> r = impl_->store->best(workload, key);
      if (r && (!best || r->median_ms < best->median_ms)) best = r;
    }
    if (!best)
      refuse(Code::NotFound,
             fmt::format("no record of workload {} ran on {}: tune it first (kiln tune)",
                         workload.substr(0, 12), fmt::join(keys, ", ")));
    to_wire(*best, response->mutable_record());
    response->set_workload(workload);
    for (const records::Target& k : targets) {
      if (k.key != best->key) continue;
      response->mutable_target()->set_triple(k.triple);
      response->mutable_target()->set_cpu(k.cpu);
      response->mutable_target()->set_features(k.features);
    }
    return {};
  } catch (...) {
    return status_of(std::current_exception(), request.op());
  }
}

Status Tuning::export_records(const v1::ExportRecordsRequest& request,
                              const std::function<bool(const v1::ExportRecordsChunk&)>& sink) {
  try {
    records::Query q = query_of(request.filter());
    q.limit = kExportPage;
    for (;;) {
      std::vector<records::Record> page = impl_->store->query(q);
      if (page.empty()) return {};
      v1::ExportRecordsChunk chunk;
      for (const records::Record& r : page)
        chunk.mutable_lines()->append(records::record_json(r) + "\n");
      if (!sink(chunk)) return {Code::Cancelled, "the client went away during the export"};
      q.after += static_cast<int64_t>(page.size());
    }
  } catch (...) {
    return status_of(std::current_exception(), v1::Operator{});
  }
}

}  // namespace kiln::server
