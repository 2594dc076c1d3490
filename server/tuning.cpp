// kilnd's tuning jobs over kiln::tuner, its compile cache and its agents.
#include "tuning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/digest.h"
#include "kiln/job.h"
#include "kiln/records.h"
#include "kiln/target.h"
#include "kiln/task_scheduler.h"
#include "kiln/tasks.h"
#include "kiln/tune.h"
#include "kiln/v1/service.pb.h"
#include "outcome.h"
#include "replica.h"
#include "request.h"
#include "wire.h"

namespace kiln::server {

namespace {

constexpr int kDefaultTrials = 64;
constexpr int kDefaultBatch = 16;
// A model's job given neither trials nor a budget: this many trials a task.
constexpr int kDefaultModelTrialsPerTask = 32;
// How a candidate is timed unless the request says: rounds of at least 5 ms (a timer's error is
// far below that), at least 3 of them, and more while they last less than 30 ms in all, so that
// a short kernel gets more rounds and a long one is not timed longer than 3 rounds need.
constexpr int kDefaultRepeat = 3;
constexpr int kDefaultMinRepeatMs = 5;
constexpr int kDefaultMinTotalMs = 30;
constexpr int kMaxBatch = 256;
constexpr int kMaxPage = 10'000;
constexpr int kExportPage = 1'000;

// What a call's exception says as a status: the records database out of reach is UNAVAILABLE
// (the same call may succeed once it is back); the rest as request.h's status_of says.
Status status_here(const std::exception_ptr& e, const v1::Operator& op) {
  try {
    std::rethrow_exception(e);
  } catch (const records::RecordsUnavailable& u) {
    return {Code::Unavailable, u.what()};
  } catch (...) {
    return status_of(std::current_exception(), op);
  }
}

// An operator prepared for tuning: the task (kiln/job.h) of the request's
// operator, the values it sets and the run-time params' values it gives.
ir::Overrides values_set(const v1::TuneRequest& r) {
  return ir::Overrides(r.options().set().begin(), r.options().set().end());
}
std::map<std::string, int64_t> runtime_values(const v1::TuneRequest& r) {
  return std::map<std::string, int64_t>(r.runtime_params().begin(), r.runtime_params().end());
}
tuner::Task prepare(const v1::TuneRequest& request, const ir::Func& base, const Limits& limits) {
  try {
    return tuner::prepare_task(base, values_set(request), runtime_values(request), limits);
  } catch (const tuner::TaskError& e) {
    refuse(Code::InvalidArgument, e.what());
  }
}
tuner::Task prepare(const v1::TuneRequest& request, const Limits& limits) {
  return prepare(request, resolve(request.op(), limits), limits);
}
// The tasks of a func with neither a schedule nor knobs: its sketches (kiln/job.h), a GPU's for
// a job measured on a GPU.
std::vector<tuner::Task> prepare_sketches(const v1::TuneRequest& request, const ir::Func& base,
                                          const Limits& limits) {
  try {
    return tuner::prepare_sketch_tasks(
        base, values_set(request), runtime_values(request), limits,
        request.has_gpu() ? autosched::Machine::Gpu : autosched::Machine::Cpu);
  } catch (const tuner::TaskError& e) {
    refuse(Code::InvalidArgument, e.what());
  }
}

// The key a job's records are kept under: the agents' key, and "/gpuN" for a GPU.
std::string record_key(const v1::TuneRequest& r) {
  return r.has_gpu() ? fmt::format("{}/gpu{}", r.key(), r.gpu()) : r.key();
}

tuner::SearchOptions search_options(const v1::TuneRequest& r) {
  const std::string& s = r.search().empty() ? "xgb-rank" : r.search();
  std::optional<tuner::SearchOptions> o = tuner::strategy_named(s);
  if (!o)
    refuse(Code::InvalidArgument,
           fmt::format("search: '{}' is not a strategy ({})", s, tuner::kStrategyNames));
  o->seed = r.seed() != 0 ? r.seed() : 1;
  return *o;
}

// Checks what the boundary (validate.h) and Prepare do not, and fills the defaults in.
v1::TuneRequest normalized(v1::TuneRequest r) {
  if (r.key().empty())
    refuse(Code::InvalidArgument, "key: name the device class to tune on (`kiln agents`)");
  const v1::Target& t = r.options().target();
  if (!t.triple().empty() || !t.cpu().empty() || !t.features().empty())
    refuse(Code::InvalidArgument,
           "options.target: a tuning job compiles for its agents' own target; leave it unset");
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
  if (m.repeat() == 0) m.set_repeat(kDefaultRepeat);
  if (m.min_repeat_ms() == 0) m.set_min_repeat_ms(kDefaultMinRepeatMs);
  if (m.min_total_ms() == 0) m.set_min_total_ms(kDefaultMinTotalMs);
  const tuner::NoiseLimits noise;
  if (!r.has_remeasure()) r.set_remeasure(noise.remeasure);
  if (r.max_cv() == 0) r.set_max_cv(noise.max_cv);
  if (r.max_host_load() == 0) r.set_max_host_load(noise.max_host_load);
  if (!r.has_retime()) r.set_retime(tuner::TuneSettings{}.retime_top);
  if (!r.has_stop_slower_than()) r.set_stop_slower_than(tuner::TuneSettings{}.stop_slower_than);
  search_options(r);  // refuses an unknown strategy
  return r;
}

// A request as the JSON a job keeps.
std::string settings_json_of(const v1::TuneRequest& r) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(r, &out, o).ok())
    refuse(Code::Internal, "cannot write a tuning job's settings as JSON");
  return out;
}

// What a job keeps of its request to be resumed: everything but the
// operator (the workload's definition is that), as JSON.
std::string settings_json(v1::TuneRequest r) {
  r.clear_op();
  return settings_json_of(r);
}

// Whether a workload is a model's: its definition lists its tasks. A func's job over its
// sketches is kept the same way, its heading's columns ending "sketch".
constexpr std::string_view kModelDefinition = "# the tasks of ";
constexpr std::string_view kSketchColumns = ": workload, calls, sketch\n";
bool is_model(const records::Workload& w) { return w.definition.starts_with(kModelDefinition); }
bool is_sketches(const records::Workload& w) {
  return is_model(w) &&
         w.definition.find(kSketchColumns) == w.definition.find('\n') + 1 - kSketchColumns.size();
}

// A model's job's tasks: from its workload's definition (a line a task: its workload, calls and
// name) and its settings (each task's job).
std::vector<v1::JobTask> tasks_of_model(const records::Job& job, const records::Workload& w) {
  v1::TuneRequest r;
  if (!google::protobuf::util::JsonStringToMessage(job.settings, &r).ok()) return {};
  std::vector<v1::JobTask> out;
  std::istringstream lines(w.definition);
  std::string line;
  std::getline(lines, line);  // the heading
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    v1::JobTask t;
    std::string workload, name;
    int32_t calls = 0;
    if (!(fields >> workload >> calls)) continue;
    std::getline(fields >> std::ws, name);
    auto task_job = r.task_jobs().find(workload);
    t.set_job(task_job == r.task_jobs().end() ? 0 : task_job->second);
    t.set_workload(workload);
    t.set_name(name);
    t.set_calls(calls);
    out.push_back(std::move(t));
  }
  return out;
}

// A model's job keeps its request whole but the source of a graph given as text: the model's
// blob reference (its SHA-256, its file name and dims) says what it tuned. A job over a func's
// sketches keeps its source too: it is sketched again when the job is resumed.
std::string model_settings_json(v1::TuneRequest r, bool keep_source) {
  if (!r.op().has_model() && !keep_source) r.clear_op();
  return settings_json_of(r);
}

v1::TuneRequest request_of_job(const records::Job& job, const records::Workload& w) {
  v1::TuneRequest r;
  if (!google::protobuf::util::JsonStringToMessage(job.settings, &r).ok())
    refuse(Code::FailedPrecondition,
           fmt::format("tuning job {} was started by a kiln whose settings this one cannot read: "
                       "{}",
                       job.id, job.settings));
  if (r.has_op() || is_model(w))
    refuse(Code::FailedPrecondition,
           fmt::format("tuning job {} tunes the model {}: not one func's job", job.id, w.name));
  // The definition has the params' values in it already; the set knobs stay.
  v1::SourceText* s = r.mutable_op()->mutable_source();
  s->set_text(w.definition);
  s->set_filename(fmt::format("<workload {}>", w.hash.substr(0, 12)));
  s->set_name(w.name);
  // A job an earlier kilnd started may hold run-time values for names that are no run-time
  // params of its func (they were ignored then; a new request is refused them): ignored again.
  ir::Func f = resolve(r.op(), Limits{});
  auto& given = *r.mutable_runtime_params();
  for (auto it = given.begin(); it != given.end();) {
    const ir::Param* p = f.find_param(it->first);
    it = p && !p->value ? std::next(it) : given.erase(it);
  }
  return r;
}

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
  std::atomic<bool> lost{false};  // another replica drives it now
};

struct Tuning::Impl {
  tuner::Builder& builder;
  FleetRunner& runner;
  const BlobStore* blobs;
  Replica* replica;  // none: kilnd alone
  Limits limits;
  std::string path;
  std::unique_ptr<records::RecordStore> store;
  std::mutex mu;
  std::condition_variable threads_done;
  std::map<int64_t, std::shared_ptr<LiveJob>> live;
  int threads = 0;
  std::atomic<bool> stopping{false};

  Impl(tuner::Builder& b, FleetRunner& r, const BlobStore* bs, const std::string& records_path,
       Limits l, Replica* rep)
      : builder(b),
        runner(r),
        blobs(bs),
        replica(rep),
        limits(std::move(l)),
        path(records_path),
        store(records::open_store(records_path)) {}

  std::shared_ptr<LiveJob> find_live(int64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(id);
    return it == live.end() ? nullptr : it->second;
  }

  v1::TuningJob job_of(const records::Job& j) {
    std::optional<records::Workload> wl = store->workload(j.workload);
    std::vector<v1::JobTask> tasks;
    if (wl && is_model(*wl)) tasks = tasks_of_model(j, *wl);
    records::Query q;
    int64_t records = 0;
    for (const v1::JobTask& t : tasks) {
      q.job = t.job();
      if (t.job() != 0) records += store->count(q);
    }
    q.job = j.id;
    records += store->count(q);
    v1::TuningJob w;
    to_wire(j, wl ? wl->name : "", find_live(j.id) != nullptr || runs_elsewhere(j.id), records, &w);
    for (v1::JobTask& t : tasks) *w.add_tasks() = std::move(t);
    w.set_alternatives(wl && is_sketches(*wl));
    return w;
  }

  // Starts job `job` (0: a new one) on a thread of its own: a func's, or a model's (a graph:
  // start_model).
  std::shared_ptr<LiveJob> start(v1::TuneRequest request, int64_t job, int32_t trials,
                                 const CallOptions& call);
  // A model's job: new (job 0), or job `job` resumed with its tasks' jobs (request.task_jobs)
  // up to `trials` over all its runs.
  std::shared_ptr<LiveJob> start_model(v1::TuneRequest request, const ir::Graph& g,
                                       const CallOptions& call, int64_t job = 0,
                                       int32_t trials = 0);
  // A func without a schedule whose algorithm gives kiln several sketches (`sketches`, as
  // prepare_sketches made them): a job whose tasks are the sketches, of which the fastest is
  // kept (tuner::ScheduleSettings::alternatives); new or resumed as start_model's.
  std::shared_ptr<LiveJob> start_sketches(v1::TuneRequest request, const ir::Func& base,
                                          std::vector<tuner::Task> sketches,
                                          const CallOptions& call, int64_t job = 0,
                                          int32_t trials = 0);
  // The tasks of a job with tasks, and the workload that lists them, for its settings and the
  // key its records are kept under.
  using TaskMaker = std::function<std::pair<std::vector<tuner::ScheduledTask>, records::Workload>(
      const tuner::ScheduleSettings&, const std::string&)>;
  // A job with tasks (start_model's, start_sketches'), `alternatives` when only the fastest
  // task counts.
  std::shared_ptr<LiveJob> start_tasks(v1::TuneRequest request, const TaskMaker& make,
                                       bool alternatives, const CallOptions& call, int64_t job,
                                       int32_t trials);
  // Goes on with a model's job (of workload `w`), its model read again from its blob, to
  // `trials` over all its runs (0: the job's own).
  std::shared_ptr<LiveJob> resume_model(const records::Job& job, const records::Workload& w,
                                        int32_t trials, const CallOptions& call);
  // How a request's points are searched and measured, compiled for `target`.
  tuner::TuneSettings settings_of(const v1::TuneRequest& request, const Target& target);
  // Job `job` (0: the one new_job() starts in the store) running and live here, under `mu`: two
  // resumes of one job, or a resume and a cancel, cannot both act on it.
  std::shared_ptr<LiveJob> enlist(int64_t job, const std::function<int64_t()>& new_job);
  // A live job's Runner: its measurements in flight are withdrawn from their agents when kilnd
  // stops or the job is cancelled (its agents kill them): neither waits for a time limit.
  std::unique_ptr<tuner::Runner> runner_of(const MeasureSpec& spec,
                                           const std::shared_ptr<LiveJob>& job) {
    auto stopped = [this, job] {
      return stopping.load() || job->cancel.load() || job->lost.load();
    };
    if (replica) return replica->runner(spec, job->id, stopped);
    return runner.runner(spec, stopped);
  }
  // The device of an agent of `key`: this kilnd's, or with a replica, any replica's.
  v1::Device device(const std::string& key, const CallOptions& call) {
    return replica ? replica->device(key, call) : runner.device(key, call);
  }
  // With a replica: whether job `id` runs at another replica now (its driver's lease live).
  bool runs_elsewhere(int64_t id) {
    if (!replica) return false;
    std::optional<JobLease> l = replica->queue().job(id);
    return l && l->live && !l->ended && l->owner != replica->name();
  }
  // Appends a progress message to a live job's stream (and, with a replica, to the shared one
  // clients of other replicas follow).
  void post(LiveJob& job, v1::TuneProgress w);
  // With a replica: follows job `id` run by another replica, from its shared stream.
  Status follow_elsewhere(int64_t id, const ProgressSink& sink, const CallOptions& call);
  // A live job's hooks (tuner::TuneHooks or ScheduleHooks) but its progress: cancelled with
  // it, stopping with kilnd.
  template <typename Hooks>
  Hooks stop_hooks(const std::shared_ptr<LiveJob>& job) {
    Hooks h;
    h.cancelled = [job] { return job->cancel.load(); };
    h.stopping = [this, job] { return stopping.load() || job->lost.load(); };
    return h;
  }
  // Runs `work` for a live job on a thread of its own; when it throws, the job fails (or, when
  // kilnd is stopping, is left to be resumed); either way its stream ends.
  void launch(const std::shared_ptr<LiveJob>& job, const v1::Operator& op,
              std::function<void()> work);
  Status follow(const std::shared_ptr<LiveJob>& job, size_t from, bool cancel_on_leave,
                const ProgressSink& sink, const CallOptions& call);
  // Re-times the `top` fastest records of `workload` on `key` (tuner::retime), measured as its
  // newest tuning job measured them.
  void retime(const std::string& workload, const std::string& key, int top,
              const CallOptions& call);
};

void Tuning::Impl::retime(const std::string& workload, const std::string& key, int top,
                          const CallOptions& call) {
  std::optional<records::Workload> w = store->workload(workload);
  std::optional<records::Job> job;
  for (const records::Job& j : store->jobs(workload))
    if (j.key == key) {
      job = j;
      break;
    }
  if (!w || !job)
    refuse(Code::FailedPrecondition,
           fmt::format("retime: no tuning job of workload {} on {}, whose measure settings and "
                       "run-time params a re-timing takes",
                       workload.substr(0, 12), key));
  v1::TuneRequest r = normalized(request_of_job(*job, *w));
  auto task = std::make_shared<const tuner::Task>(prepare(r, limits));
  MeasureSpec spec = measure_spec(r);
  CompileOptions options = compile_options(r.options(), limits);
  options.target = FleetRunner::target(device(r.key(), call), r.key(), spec.gpu);
  auto stopped = [this, call] {
    return stopping.load() || (call.cancelled && call.cancelled()) ||
           (call.deadline && std::chrono::steady_clock::now() >= *call.deadline);
  };
  std::unique_ptr<tuner::Runner> agents =
      replica ? replica->runner(spec, 0, stopped) : runner.runner(spec, stopped);
  records::Query q;
  q.workload = workload;
  q.key = key;
  q.error = "";
  q.order = records::Query::Order::Median;
  q.limit = top;
  try {
    int retimed = tuner::retime(*task, builder, *agents, *store, store->query(q), options,
                                tuner::TuneSettings{}.retime_passes, stopped);
    spdlog::info("workload {} on {}: {} of its {} fastest records re-timed", workload.substr(0, 12),
                 key, retimed, top);
  } catch (const tuner::Interrupted& e) {
    refuse(Code::Cancelled, std::string("retime: ") + e.what());
  }
}

std::shared_ptr<LiveJob> Tuning::Impl::resume_model(const records::Job& job,
                                                    const records::Workload& w, int32_t trials,
                                                    const CallOptions& call) {
  v1::TuneRequest r;
  if (!google::protobuf::util::JsonStringToMessage(job.settings, &r).ok())
    refuse(Code::FailedPrecondition,
           fmt::format("tuning job {} was started by a kiln whose settings this one cannot read: "
                       "{}",
                       job.id, job.settings));
  if (!r.has_op())
    refuse(Code::FailedPrecondition,
           fmt::format("tuning job {} tuned the graph {} sent as text, which kilnd does not keep: "
                       "tune it again; its tasks' jobs (`kiln records jobs`) keep every record "
                       "and each can be resumed on its own",
                       job.id, w.name));
  int64_t measured = 0;
  for (const auto& [workload, task_job] : r.task_jobs()) {
    records::Query q;
    q.job = task_job;
    measured += store->count(q);
  }
  if (trials <= 0) trials = r.trials();
  if (job.state == records::JobState::Done && r.budget_s() == 0 && trials <= measured)
    refuse(Code::FailedPrecondition,
           fmt::format("tuning job {} is done ({} records over its tasks); ask for more trials "
                       "than that to go on",
                       job.id, measured));
  Unit unit = resolve_unit(r.op(), limits, blobs);
  if (unit.func) {
    std::vector<tuner::Task> sketches = prepare_sketches(r, *unit.func, limits);
    // Today's sketches must be the job's: a kiln that sketches otherwise would start task jobs
    // the job does not list.
    std::set<std::string> now, then;
    for (const tuner::Task& t : sketches) now.insert(t.workload.hash);
    for (const auto& [hash, task_job] : r.task_jobs()) then.insert(hash);
    if (now != then)
      refuse(Code::FailedPrecondition,
             fmt::format("tuning job {}: this kiln sketches {} otherwise than the kiln that "
                         "started the job did; its sketches' jobs (`kiln records jobs`) keep "
                         "every record and each can be resumed on its own, or tune {} again for "
                         "a job over today's sketches",
                         job.id, w.name, w.name));
    return start_sketches(std::move(r), *unit.func, std::move(sketches), call, job.id, trials);
  }
  if (!unit.graph)
    refuse(Code::Internal, fmt::format("tuning job {}: its model is no graph", job.id));
  return start_model(std::move(r), *unit.graph, call, job.id, trials);
}

tuner::TuneSettings Tuning::Impl::settings_of(const v1::TuneRequest& request,
                                              const Target& target) {
  tuner::TuneSettings settings;
  settings.trials = request.trials();
  settings.batch = request.batch();
  settings.early_stop = request.early_stop();
  settings.noise = {request.max_cv(), request.max_host_load(), request.max_cpu_pressure(),
                    request.remeasure()};
  settings.retime_top = request.retime();
  settings.stop_slower_than = request.stop_slower_than();
  settings.search = search_options(request);
  settings.compile = compile_options(request.options(), limits);
  settings.compile.target = target;
  // kilnd stopping stops a point's compilation between its stages; a cancelled job lets it end.
  settings.compile.limits.cancelled = [this] { return stopping.load(); };
  return settings;
}

std::shared_ptr<LiveJob> Tuning::Impl::enlist(int64_t job_id,
                                              const std::function<int64_t()>& new_job) {
  auto live_job = std::make_shared<LiveJob>();
  std::lock_guard<std::mutex> lock(mu);
  if (stopping) refuse(Code::Unavailable, "kilnd is stopping");
  if (job_id != 0 && live.count(job_id))
    refuse(Code::FailedPrecondition,
           fmt::format("tuning job {} is running already; follow it with ResumeTune", job_id));
  if (job_id == 0) {
    job_id = new_job();
    if (replica) replica->queue().claim_job(job_id);
  } else {
    if (replica && !replica->queue().claim_job(job_id)) {
      std::optional<JobLease> l = replica->queue().job(job_id);
      refuse(Code::FailedPrecondition,
             fmt::format("tuning job {} is running at replica {}; follow it with ResumeTune",
                         job_id, l ? l->owner : "?"));
    }
    store->finish_job(job_id, records::JobState::Running);
  }
  live_job->id = job_id;
  live[job_id] = live_job;
  ++threads;
  return live_job;
}

void Tuning::Impl::launch(const std::shared_ptr<LiveJob>& live_job, const v1::Operator& op,
                          std::function<void()> work) {
  auto body = [this, live_job, op, work = std::move(work)] {
    Status status;
    bool unreachable = false;  // the records database: the job cannot even be marked failed
    try {
      work();
    } catch (const tuner::Interrupted& e) {
      status = status_of(e.failure());
    } catch (const records::RecordsUnavailable& e) {
      unreachable = true;
      status = {Code::Unavailable,
                fmt::format("tuning job {} stopped: {}; its records are kept: resume it with "
                            "ResumeTune (kiln tune --resume {}) once the database is back",
                            live_job->id, e.what(), live_job->id)};
    } catch (...) {
      status = status_here(std::current_exception(), op);
    }
    if (live_job->lost) {
      // Another replica drives it now: nothing here is its to mark.
      unreachable = true;
      status = {Code::Unavailable,
                fmt::format("tuning job {} went on at another replica: this one's lease lapsed "
                            "(follow it with ResumeTune at any replica)",
                            live_job->id)};
    }
    if (!status.ok() && !unreachable) {
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
    }
    if (!status.ok()) spdlog::warn("{}", status.message);
    if (replica && !live_job->lost) {
      // Ended here: its lease ends with it. Stopped before its end (kilnd stopping, the database
      // away): left for another replica, or this one later, to adopt.
      try {
        if (status.ok() || (!stopping && !unreachable)) {
          replica->queue().end_job(live_job->id, status);
        } else {
          replica->queue().release_job(live_job->id);
        }
      } catch (const std::exception& e) {
        spdlog::warn("tuning job {}: its lease: {}", live_job->id, e.what());
      }
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
}

void Tuning::Impl::post(LiveJob& job, v1::TuneProgress w) {
  if (replica) {
    try {
      replica->queue().post(job.id, w);
    } catch (const std::exception& e) {  // the job goes on; clients here still follow it
      spdlog::warn("tuning job {}: its progress was not shared: {}", job.id, e.what());
    }
  }
  std::lock_guard<std::mutex> lock(job.mu);
  job.messages.push_back(std::move(w));
  job.changed.notify_all();
}

std::shared_ptr<LiveJob> Tuning::Impl::start(v1::TuneRequest request, int64_t job_id,
                                             int32_t trials, const CallOptions& call) {
  std::optional<ir::Func> base;  // a new job's func, parsed once
  std::optional<tuner::Task> sketched;
  if (job_id == 0) {
    Unit unit = resolve_unit(request.op(), limits, blobs);
    if (unit.graph) return start_model(std::move(request), *unit.graph, call);
    base = std::move(unit.func);
    if (!base->has_schedule()) {
      // Kiln's sketches of its algorithm: a choice among them, or the one there is.
      std::vector<tuner::Task> sketches = prepare_sketches(request, *base, limits);
      if (sketches.size() > 1)
        return start_sketches(std::move(request), *base, std::move(sketches), call);
      sketched = std::move(sketches.front());
    }
  }
  request = normalized(std::move(request));
  if (trials > 0) request.set_trials(trials);
  auto task = std::make_shared<const tuner::Task>(sketched ? std::move(*sketched)
                                                  : base   ? prepare(request, *base, limits)
                                                           : prepare(request, limits));
  MeasureSpec spec = measure_spec(request);
  // The key's target: what its agents compile for.
  const Target target = FleetRunner::target(device(request.key(), call), request.key(), spec.gpu);

  tuner::TuneSettings settings = settings_of(request, target);
  if (request.features() == "iter") {
    // The loops each point lowers to, for the agents' target: a compile up to
    // the passes a point, so the model scores a pool of candidates a round
    // (4 batches' worth) instead of annealing over thousands.
    settings.search.pool = std::max(32, 4 * settings.batch);
    settings.search.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    settings.features = tuner::iter_features_of(*task, settings.compile);
  }
  const std::string records_key = record_key(request);
  if (request.transfer()) {
    // A new job measures the best of the nearest shapes and its defaults first.
    if (job_id == 0) tuner::first_start(*store, *task, records_key, settings.compile, settings);
    tuner::warm_start(*store, task->workload, records_key, settings);
  }
  store->put_target({records_key, target.triple, target.cpu, target.features});
  store->put_workload(task->workload);

  // The job, running and live here, under `mu`: two resumes of one job, or a
  // resume and a cancel, cannot both act on it.
  std::shared_ptr<LiveJob> live_job = enlist(job_id, [&] {
    return store->start_job(
        {0, task->workload.hash, records_key, settings_json(request), {}, 0, 0});
  });
  spdlog::info("tuning job {}: {} on {}, {} trials, {} search, space of {} points{}{}",
               live_job->id, task->workload.name, records_key, settings.trials, request.search(),
               task->space->size(), task->sketch.empty() ? "" : " of the schedule kiln sketched",
               settings.warm_points.empty()
                   ? ""
                   : fmt::format(", warm-started from {} records", settings.warm_points.size()));

  launch(live_job, request.op(), [this, live_job, task, request, settings, spec, records_key] {
    auto progress = [&](const tuner::TuneProgress& p) {
      v1::TuneProgress w;
      to_wire(p, *task, records_key, request.search(), &w);
      this->post(*live_job, std::move(w));
    };
    std::unique_ptr<tuner::Runner> job_runner = runner_of(spec, live_job);
    auto hooks = stop_hooks<tuner::TuneHooks>(live_job);
    hooks.progress = progress;
    {
      // The first message: the job's number, before anything is measured.
      tuner::TuneProgress first;
      first.job = live_job->id;
      first.target = settings.trials;
      records::Query q;
      q.job = live_job->id;
      first.trials = static_cast<int>(store->count(q));
      progress(first);
    }
    tuner::TuneProgress end = tuner::tune(*task, builder, *job_runner, *store, records_key,
                                          settings, live_job->id, hooks);
    spdlog::info("tuning job {}: {} after {} trials, best {}", live_job->id, end.stopped,
                 end.trials,
                 end.best ? fmt::format("{:.4f} ms ({})", end.best->median_ms,
                                        records::config_text(end.best->config))
                          : "none");
  });
  return live_job;
}

std::shared_ptr<LiveJob> Tuning::Impl::start_model(v1::TuneRequest request, const ir::Graph& g,
                                                   const CallOptions& call, int64_t job_id,
                                                   int32_t trials) {
  std::string name =
      request.op().has_model()
          ? std::filesystem::path(request.op().model().filename()).filename().string()
          : g.name;
  if (name.empty()) name = g.name;
  auto make = [this, &g, name](const tuner::ScheduleSettings& settings,
                               const std::string& records_key) {
    std::vector<tuner::ScheduledTask> tasks;
    records::Workload model;
    model.name = name;
    model.definition = fmt::format("{}{} on {}: workload, calls, operator\n", kModelDefinition,
                                   model.name, records_key);
    for (const tuner::ModelTask& t : tuner::model_tasks(g, settings.task.compile)) {
      tuner::ScheduledTask s;
      s.task = tuner::prepare_model_task(t.op, limits);
      s.calls = t.calls;
      s.name = t.first_result.empty() ? t.op.name : fmt::format("{} {}", t.op.name, t.first_result);
      model.definition += fmt::format("{} {} {}\n", t.workload.hash, t.calls, s.name);
      tasks.push_back(std::move(s));
    }
    if (tasks.empty()) refuse(Code::InvalidArgument, model.name + ": the model runs no operator");
    return std::make_pair(std::move(tasks), std::move(model));
  };
  return start_tasks(std::move(request), make, false, call, job_id, trials);
}

std::shared_ptr<LiveJob> Tuning::Impl::start_sketches(v1::TuneRequest request, const ir::Func& base,
                                                      std::vector<tuner::Task> sketches,
                                                      const CallOptions& call, int64_t job_id,
                                                      int32_t trials) {
  auto make = [&base, &sketches](const tuner::ScheduleSettings&, const std::string& records_key) {
    std::vector<tuner::ScheduledTask> tasks;
    records::Workload func;
    func.name = base.name;
    func.definition =
        fmt::format("{}{} on {}{}", kModelDefinition, base.name, records_key, kSketchColumns);
    for (tuner::Task& t : sketches) {
      tuner::ScheduledTask s;
      s.name = fmt::format("{} ({} sketch)", base.name, t.sketch_name);
      func.definition += fmt::format("{} 1 {}\n", t.workload.hash, s.name);
      s.task = std::move(t);
      tasks.push_back(std::move(s));
    }
    return std::make_pair(std::move(tasks), std::move(func));
  };
  return start_tasks(std::move(request), make, true, call, job_id, trials);
}

std::shared_ptr<LiveJob> Tuning::Impl::start_tasks(v1::TuneRequest request, const TaskMaker& make,
                                                   bool alternatives, const CallOptions& call,
                                                   int64_t job_id, int32_t trials) {
  if (job_id == 0) {
    trials = request.trials();
    request.clear_task_jobs();  // kilnd's own record of a job's tasks
  }
  request = normalized(std::move(request));
  request.set_trials(trials);
  if (request.features() == "iter")
    refuse(Code::InvalidArgument,
           alternatives
               ? "features: a job over kiln's sketches of a func searches each with the knob "
                 "features; iter is for a func with a schedule of its own"
               : "features: a model's tasks are searched with the knob features; iter is for "
                 "one func's job");
  MeasureSpec spec = measure_spec(request);
  const Target target = FleetRunner::target(device(request.key(), call), request.key(), spec.gpu);
  const std::string records_key = record_key(request);

  tuner::ScheduleSettings settings;
  settings.task = settings_of(request, target);
  settings.task.trials = std::numeric_limits<int>::max() / 2;  // the job's budget decides
  settings.alternatives = alternatives;
  auto [made, model] = make(settings, records_key);
  auto tasks = std::make_shared<std::vector<tuner::ScheduledTask>>(std::move(made));
  model.hash = sha256_hex(model.definition);
  settings.budget_s = request.budget_s();
  if (request.trials() == 0 && settings.budget_s == 0)
    request.set_trials(alternatives ? kDefaultTrials
                                    : kDefaultModelTrialsPerTask * static_cast<int>(tasks->size()));
  store->put_target({records_key, target.triple, target.cpu, target.features});
  store->put_workload(model);

  // Each task's own job: made now, so that the job keeps their numbers and a resume goes on
  // with them; a resumed job's tasks go on with theirs.
  int64_t measured = 0;  // by earlier runs of the job
  {
    v1::TuneRequest of_task = request;
    of_task.clear_budget_s();
    of_task.clear_task_jobs();
    const std::string task_settings = settings_json(of_task);
    for (tuner::ScheduledTask& s : *tasks) {
      const std::string& hash = s.task.workload.hash;
      auto known = request.task_jobs().find(hash);
      if (job_id != 0 && known != request.task_jobs().end()) {
        s.job = known->second;
        records::Query q;
        q.job = s.job;
        measured += store->count(q);
        store->finish_job(s.job, records::JobState::Running);
        continue;
      }
      store->put_workload(s.task.workload);
      s.job = store->start_job({0, hash, records_key, task_settings, {}, 0, 0});
      (*request.mutable_task_jobs())[hash] = s.job;
    }
  }
  // The trials over all the job's runs; this run's are what is left of them.
  settings.trials =
      request.trials() > 0 ? std::max<int>(1, request.trials() - static_cast<int>(measured)) : 0;

  std::shared_ptr<LiveJob> live_job = enlist(job_id, [&] {
    return store->start_job(
        {0, model.hash, records_key, model_settings_json(request, alternatives), {}, 0, 0});
  });
  spdlog::info("tuning job {}: {} {} on {}, {} {}, {} trials{}", live_job->id,
               alternatives ? "func" : "model", model.name, records_key, tasks->size(),
               alternatives ? "sketches" : "tasks", settings.trials,
               settings.budget_s > 0 ? fmt::format(", {} s", settings.budget_s) : "");

  launch(
      live_job, request.op(),
      [this, live_job, tasks, model, request, settings, spec, records_key, alternatives] {
        auto progress = [&](const tuner::ScheduleProgress& p) {
          v1::TuneProgress w;
          to_wire(p, *tasks, live_job->id, model, records_key, request.search(), alternatives, &w);
          this->post(*live_job, std::move(w));
        };
        std::unique_ptr<tuner::Runner> job_runner = runner_of(spec, live_job);
        auto hooks = stop_hooks<tuner::ScheduleHooks>(live_job);
        hooks.progress = progress;
        {
          // The first message: the job's number and its tasks' jobs, before anything runs.
          tuner::ScheduleProgress first;
          first.target = settings.trials;
          first.tasks.resize(tasks->size());
          for (size_t i = 0; i < tasks->size(); ++i) first.tasks[i].job = (*tasks)[i].job;
          progress(first);
        }
        tuner::ScheduleProgress end =
            tuner::tune_tasks(*tasks, builder, *job_runner, *store, records_key, settings, hooks);
        store->finish_job(live_job->id, end.stopped == "cancelled" ? records::JobState::Cancelled
                                                                   : records::JobState::Done);
        spdlog::info("tuning job {}: {}: {} after {} trials, {} {:.4f} ms", live_job->id,
                     model.name, end.stopped, end.trials, alternatives ? "fastest" : "predicted",
                     end.predicted_ms);
      });
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

Tuning::Tuning(tuner::Builder& builder, FleetRunner& runner, const BlobStore* blobs,
               const std::string& records_path, Limits limits, Replica* replica)
    : impl_(std::make_unique<Impl>(builder, runner, blobs, records_path, std::move(limits),
                                   replica)) {}

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
    return status_here(std::current_exception(), request.op());
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
    if (impl_->runs_elsewhere(request.job())) {
      if (request.trials() != 0)
        refuse(Code::FailedPrecondition,
               fmt::format("tuning job {} is running at another replica: its trials can change "
                           "once it has stopped (resume without trials to follow it)",
                           request.job()));
      return impl_->follow_elsewhere(request.job(), sink, call);
    }
    std::optional<records::Job> job = impl_->store->job(request.job());
    if (!job) refuse(Code::NotFound, fmt::format("no tuning job {}", request.job()));
    std::optional<records::Workload> w = impl_->store->workload(job->workload);
    if (!w)
      refuse(Code::Internal,
             fmt::format("tuning job {}: its workload {} is missing", job->id, job->workload));
    if (is_model(*w)) {
      std::shared_ptr<LiveJob> live = impl_->resume_model(*job, *w, request.trials(), call);
      return impl_->follow(live, 0, !request.detach(), sink, call);
    }
    v1::TuneRequest r = request_of_job(*job, *w);
    records::Query q;
    q.job = job->id;
    int64_t measured = impl_->store->count(q);
    int32_t trials = request.trials() > 0 ? request.trials() : r.trials();
    if (job->state == records::JobState::Done && trials <= measured)
      refuse(Code::FailedPrecondition,
             fmt::format("tuning job {} is done ({} records); ask for more trials than that to "
                         "go on",
                         job->id, measured));
    std::shared_ptr<LiveJob> live;
    try {
      live = impl_->start(r, job->id, trials, call);
    } catch (const Refusal&) {
      // Adopted here meanwhile (its replica died): followed as a job running here is.
      live = impl_->find_live(job->id);
      if (!live || request.trials() != 0) throw;
    }
    return impl_->follow(live, 0, !request.detach(), sink, call);
  } catch (...) {
    return status_here(std::current_exception(), v1::Operator{});
  }
}

Status Tuning::cancel(const v1::CancelTuneRequest& request, v1::CancelTuneResponse* response) {
  try {
    std::optional<records::Job> job = impl_->store->job(request.job());
    if (!job) refuse(Code::NotFound, fmt::format("no tuning job {}", request.job()));
    if (std::shared_ptr<LiveJob> live = impl_->find_live(request.job())) {
      live->cancel = true;
      // The job marks itself cancelled once its measurements in flight are
      // withdrawn (their agents kill them, within a second).
      std::unique_lock<std::mutex> lock(live->mu);
      if (!live->changed.wait_for(lock, std::chrono::seconds(120), [&] { return live->ended; }))
        refuse(Code::DeadlineExceeded,
               fmt::format("tuning job {} is stopping: it ends once its measurements in flight "
                           "are withdrawn (ListJobs shows when)",
                           request.job()));
    } else if (impl_->runs_elsewhere(job->id)) {
      // Its driver is another replica: asked there, through the database, and waited for.
      impl_->replica->queue().request_cancel(job->id);
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      for (;;) {
        std::optional<JobLease> l = impl_->replica->queue().job(job->id);
        if (!l || l->ended) break;
        if (std::chrono::steady_clock::now() >= give_up)
          refuse(Code::DeadlineExceeded,
                 fmt::format("tuning job {} is stopping at replica {}: it ends once its "
                             "measurements in flight are withdrawn (ListJobs shows when)",
                             job->id, l->owner));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    } else if (job->state == records::JobState::Running) {
      impl_->store->finish_job(job->id, records::JobState::Cancelled);   // interrupted before
      if (impl_->replica && impl_->replica->queue().claim_job(job->id))  // no replica adopts it
        impl_->replica->queue().end_job(job->id, {Code::Cancelled, "cancelled"});
    } else {
      refuse(Code::FailedPrecondition, fmt::format("tuning job {} is {}, not running", job->id,
                                                   records::job_state_name(job->state)));
    }
    *response->mutable_job() = impl_->job_of(*impl_->store->job(request.job()));
    return {};
  } catch (...) {
    return status_here(std::current_exception(), v1::Operator{});
  }
}

Status Tuning::Impl::follow_elsewhere(int64_t id, const ProgressSink& sink,
                                      const CallOptions& call) {
  SharedQueue& queue = replica->queue();
  // From the last message so far, as a live job here is followed.
  int64_t last = queue.last_progress(id);
  int64_t seq = last > 0 ? last - 1 : 0;
  for (;;) {
    std::optional<JobLease> l = queue.job(id);
    for (const v1::TuneProgress& m : queue.progress(id, seq, &last))
      if (!sink(m))
        return {Code::Cancelled, fmt::format("the client went away; tuning job {} goes on", id)};
    seq = last;
    // Read after the lease: every message posted before the end was among those just sent.
    if (!l || l->ended) return l ? l->status : Status{};
    if (stopping)
      return {Code::Unavailable,
              fmt::format("kilnd is stopping; tuning job {} goes on at replica {}", id, l->owner)};
    if (call.cancelled && call.cancelled())
      return {Code::Cancelled, fmt::format("the client went away; tuning job {} goes on", id)};
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Tuning::adopt(int64_t id) {
  Replica* replica = impl_->replica;
  if (!replica) return;
  std::optional<records::Job> job = impl_->store->job(id);
  if (!job || job->state != records::JobState::Running) {
    // The records say it is over (cancelled while orphaned, or never started): so is its lease.
    if (replica->queue().claim_job(id))
      replica->queue().end_job(id, {Code::Ok, job ? fmt::format("tuning job {} is {}", id,
                                                                records::job_state_name(job->state))
                                                  : fmt::format("no tuning job {}", id)});
    return;
  }
  if (impl_->find_live(id)) return;             // a client here resumed it first
  if (!replica->queue().claim_job(id)) return;  // another replica was first
  try {
    std::optional<records::Workload> w = impl_->store->workload(job->workload);
    if (!w) refuse(Code::Internal, fmt::format("its workload {} is missing", job->workload));
    spdlog::info("tuning job {}: adopted (its replica went away)", id);
    if (is_model(*w)) {
      impl_->resume_model(*job, *w, 0, CallOptions{});
    } else {
      impl_->start(request_of_job(*job, *w), id, 0, CallOptions{});
    }
  } catch (...) {
    Status s = status_here(std::current_exception(), v1::Operator{});
    try {
      replica->queue().release_job(id);
    } catch (const std::exception&) {  // its lease lapses on its own
    }
    throw std::runtime_error(s.message);
  }
}

void Tuning::cancel_here(int64_t job) {
  if (std::shared_ptr<LiveJob> live = impl_->find_live(job)) live->cancel = true;
}

std::set<int64_t> Tuning::running_here() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::set<int64_t> out;
  for (const auto& [id, job] : impl_->live) out.insert(id);
  return out;
}

void Tuning::lost_here(int64_t job) {
  if (std::shared_ptr<LiveJob> live = impl_->find_live(job)) live->lost = true;
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
    return status_here(std::current_exception(), v1::Operator{});
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
    return status_here(std::current_exception(), v1::Operator{});
  }
}

Status Tuning::best(const v1::BestConfigRequest& request, v1::BestConfigResponse* response,
                    const CallOptions& call) {
  try {
    std::string workload = request.workload();
    std::vector<tuner::TunedWorkload> candidates;  // the workloads its records may be under
    if (workload.empty()) {
      if (request.op().definition_case() == v1::Operator::DEFINITION_NOT_SET)
        refuse(Code::InvalidArgument, "name the operator (op) or its workload hash (workload)");
      // A func without a schedule was tuned as the sketches kiln derives for it (a GPU's for a
      // GPU's key or target): the fastest of their records is its best.
      auto gpu_triple = [](const std::string& triple) {
        Target t;
        t.triple = triple;
        return t.is_gpu();
      };
      bool gpu = gpu_triple(request.options().target().triple());
      for (const records::Target& k : impl_->store->targets())
        if (k.key == request.key()) gpu = gpu_triple(k.triple);  // the key's, when it is known
      for (tuner::TunedWorkload& w : tuner::tuned_workloads(
               resolve(request.op(), impl_->limits),
               ir::Overrides(request.options().set().begin(), request.options().set().end()),
               impl_->limits, gpu ? autosched::Machine::Gpu : autosched::Machine::Cpu))
        candidates.push_back(std::move(w));
      if (candidates.empty())
        refuse(Code::NotFound,
               "the func has no schedule and kiln finds no sketch of it: nothing was tuned");
      workload = candidates.front().workload.hash;
    } else {
      candidates.emplace_back();
      candidates.back().workload.hash = workload;
    }
    // Whether a workload of the candidates has a record on `key`.
    auto recorded_on = [&](const std::string& key) {
      for (const tuner::TunedWorkload& c : candidates)
        if (impl_->store->best(c.workload.hash, key)) return true;
      return false;
    };
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
        if (recorded_on(k.key)) same_arch.push_back(k.key);
      }
      bool recorded = false;
      for (const std::string& k : keys) recorded = recorded || recorded_on(k);
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
    if (request.retime() > 0) {
      if (keys.size() != 1)
        refuse(Code::InvalidArgument,
               fmt::format("retime: name the device class to re-time on with key (these have "
                           "records: {})",
                           fmt::join(keys, ", ")));
      for (const tuner::TunedWorkload& c : candidates)
        if (candidates.size() == 1 || impl_->store->best(c.workload.hash, keys.front()))
          impl_->retime(c.workload.hash, keys.front(), request.retime(), call);
    }
    std::optional<records::Record> best;
    const tuner::TunedWorkload* best_of = nullptr;
    for (const tuner::TunedWorkload& c : candidates)
      for (const std::string& key : keys) {
        std::optional<records::Record> r = impl_->store->best(c.workload.hash, key);
        if (r && (!best || records::ranks_before(*r, *best))) {
          best = r;
          best_of = &c;
        }
      }
    if (!best)
      refuse(Code::NotFound,
             fmt::format("no record of {} ran on {}: tune it first (kiln tune)",
                         candidates.size() > 1
                             ? fmt::format("its {} sketches' workloads", candidates.size())
                             : "workload " + workload.substr(0, 12),
                         fmt::join(keys, ", ")));
    to_wire(*best, response->mutable_record());
    response->set_workload(best_of->workload.hash);
    response->set_sketch(best_of->sketch);
    for (const records::Target& k : targets) {
      if (k.key != best->key) continue;
      response->mutable_target()->set_triple(k.triple);
      response->mutable_target()->set_cpu(k.cpu);
      response->mutable_target()->set_features(k.features);
    }
    return {};
  } catch (...) {
    return status_here(std::current_exception(), request.op());
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
    return status_here(std::current_exception(), v1::Operator{});
  }
}

}  // namespace kiln::server
