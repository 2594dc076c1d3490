// The tuning loop (kiln/tune.h).
#include "kiln/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <semaphore>
#include <thread>

#include "kiln/json.h"
#include "kiln/stats.h"

namespace kiln::tuner {
namespace {

double cost_of(const Trial& t) {
  return t.error.empty() && t.median_ms > 0 ? t.median_ms : std::numeric_limits<double>::infinity();
}

double gflops_of(const records::Record& r) {
  return r.flops > 0 ? static_cast<double>(r.flops) / (r.effective_ms() * 1e-3) * 1e-9 : 0;
}

// `work` on each of `which`, at most `limit` at once; a point is not started
// once `gone` says so. An exception from `work` (the store failing) is
// rethrown here, after the joins.
void each(const std::vector<size_t>& which, size_t limit, const std::function<bool()>& gone,
          const std::function<void(size_t)>& work) {
  std::mutex mu;
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
}

// Calls `call` until it is not Busy (a full builder or runner is the
// service's state, not the point's), or the service stops.
template <typename T, typename Call>
Outcome<T> retry_busy(Call call, const std::function<bool()>& stopping) {
  for (;;) {
    Outcome<T> o = call();
    if (o.ok() || o.failure().kind != Failure::Kind::Busy || stopping()) return o;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Holds one of a batch's build slots (at most the Builder's parallelism
// builds at once) for as long as it lives.
class BuildSlot {
 public:
  explicit BuildSlot(std::counting_semaphore<>& slots) : slots_(slots) { slots_.acquire(); }
  ~BuildSlot() { slots_.release(); }
  BuildSlot(const BuildSlot&) = delete;
  BuildSlot& operator=(const BuildSlot&) = delete;

 private:
  std::counting_semaphore<>& slots_;
};

// Whether a measurement that ran is past the noise limits.
bool too_noisy(const Measurement& m, const NoiseLimits& n) {
  if (m.error || m.round_ms.empty() || m.stopped_early) return false;
  if (n.max_cv > 0 && round_stats(m.round_ms).cv > n.max_cv) return true;
  if (n.max_host_load > 0 && m.host_load && *m.host_load > n.max_host_load) return true;
  return n.max_cpu_pressure > 0 && m.cpu_pressure && *m.cpu_pressure > n.max_cpu_pressure;
}

struct Measured {
  Measurement m;
  int attempts = 1;
  bool noisy = false;
};

// Measures `in`, and again while the measurement is too noisy (NoiseLimits). A failure or an
// error after the first measurement ends the attempts with the measurement there is.
Outcome<Measured> measure_point(Runner& runner, const RunInput& in, const NoiseLimits& limits,
                                const std::function<bool()>& gone) {
  Outcome<Measurement> first = retry_busy<Measurement>([&] { return runner.run(in); }, gone);
  if (!first.ok()) return first.failure();
  Measured out{std::move(first.value())};
  out.noisy = too_noisy(out.m, limits);
  while (out.noisy && out.attempts <= limits.remeasure && !gone()) {
    Outcome<Measurement> again = retry_busy<Measurement>([&] { return runner.run(in); }, gone);
    if (!again.ok()) break;
    ++out.attempts;
    const Measurement& m = again.value();
    if (m.error) break;
    if (!too_noisy(m, limits)) {
      out.m = m;
      out.noisy = false;
    } else if (m.median_ms < out.m.median_ms) {
      out.m = m;
    }
  }
  return out;
}

}  // namespace

const char* run_error_name(RunError e) {
  switch (e) {
    case RunError::LoadError:
      return "LOAD_ERROR";
    case RunError::RuntimeCrash:
      return "RUNTIME_CRASH";
    case RunError::Timeout:
      return "TIMEOUT";
    case RunError::WrongAnswer:
      return "WRONG_ANSWER";
    case RunError::OutOfMemory:
      return "OUT_OF_MEMORY";
    case RunError::Unsupported:
      return "UNSUPPORTED";
    case RunError::KernelError:
      return "KERNEL_ERROR";
    case RunError::BadJob:
      return "BAD_JOB";
  }
  return "BAD_JOB";
}

int Builder::parallelism() const {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

Interrupted::Interrupted(Failure f) : std::runtime_error(f.message), failure_(std::move(f)) {}

std::string TuneSettings::json() const {
  return JsonObject()
      .integer("trials", trials)
      .integer("batch", batch)
      .integer("early_stop", early_stop)
      .str("search", strategy_name(search))
      .num("epsilon", search.epsilon)
      .integer("annealing_steps", search.annealing_steps)
      .integer("population", search.population)
      .integer("pool", search.pool)
      .integer("seed", static_cast<int64_t>(search.seed))
      .num("max_cv", noise.max_cv)
      .num("max_host_load", noise.max_host_load)
      .num("max_cpu_pressure", noise.max_cpu_pressure)
      .integer("remeasure", noise.remeasure)
      .integer("retime_top", retime_top)
      .integer("retime_passes", retime_passes)
      .num("stop_slower_than", stop_slower_than)
      .done();
}

namespace {

// One batch, streamed: each point is built (at most the Builder's parallelism
// at once) and handed to the Runner as soon as it is
// built, so that the next points compile while the first are measured on
// agents elsewhere. (Where a device measures on the builder's own machine,
// kilnd --local-agent, kilnd's admission holds compiles back while it
// measures: its timings keep the CPUs.) Each point's outcome goes to `report`
// (a trial) or `reject` (an illegal schedule) as it arrives; a failure that is
// not the point's is returned, the first one.
std::optional<Failure> measure_batch(const Task& task, Builder& builder, Runner& runner,
                                     const TuneSettings& settings, double stop_above_ms,
                                     const std::vector<Config>& batch, const TuneHooks& hooks,
                                     const std::function<void(const Trial&)>& report,
                                     const std::function<void(const std::string&)>& reject) {
  auto stopping = [&] { return hooks.stopping && hooks.stopping(); };
  auto gone = [&] { return stopping() || (hooks.cancelled && hooks.cancelled()); };
  std::mutex mu;
  std::optional<Failure> failure;
  // A point's own failure is reported; the service's is remembered. (A failure
  // once the job is cancelled or the service stops is not the point's: the
  // callers drop it, and a resumed job measures the point.)
  auto failed = [&](const Config& point, const Failure& f) {
    if (!f.points_fault()) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure) failure = f;
      return;
    }
    if (f.illegal()) return reject("illegal schedule");
    Trial t;
    t.config = point;
    t.flops = task.flops;
    t.error = kCompileErrorClass;
    t.message = f.message;
    t.compiler_version = compiler_version();
    report(t);
  };

  std::vector<size_t> all(batch.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::counting_semaphore<> slots(std::max(1, builder.parallelism()));
  each(all, all.size(), gone, [&](size_t i) {
    std::optional<Build> built;
    {
      BuildSlot slot(slots);
      if (gone()) return;
      BuildInput in{task.func, batch[i], settings.compile};
      Outcome<Build> b = retry_busy<Build>([&] { return builder.build(in); }, stopping);
      if (!b.ok()) {
        if (!gone()) failed(batch[i], b.failure());
        return;
      }
      built = std::move(b.value());
    }
    if (gone()) return;
    RunInput in{built->artifact, nullptr, task.params, {}, stop_above_ms};
    if (task.func)
      in.func = std::make_shared<const ir::Func>(ir::apply_overrides(*task.func, batch[i]));
    Outcome<Measured> measured = measure_point(runner, in, settings.noise, gone);
    // A measurement that arrives is recorded, cancelled job or not.
    if (!measured.ok()) {
      if (!gone()) failed(batch[i], measured.failure());
      return;
    }
    const Measurement& m = measured.value().m;
    Trial t;
    t.config = batch[i];
    t.flops = task.flops;
    t.round_ms = m.round_ms;
    t.median_ms = m.median_ms;
    if (m.error) {
      t.error = run_error_name(*m.error);
      t.message = m.message;
    }
    t.compile_ms = built->compile_ms;
    t.agent = m.device;
    t.compiler_version = built->compiler_version;
    t.host_load = m.host_load;
    t.cpu_pressure = m.cpu_pressure;
    t.attempts = measured.value().attempts;
    t.noisy = measured.value().noisy;
    t.stopped_early = m.stopped_early && !m.error;
    if (t.stopped_early)
      t.message = fmt::format(
          "timed for one round: {:.4g} ms a call, more than {:.4g} ms ({:g}x the job's best so "
          "far)",
          m.median_ms, stop_above_ms, settings.stop_slower_than);
    report(t);
  });
  return failure;
}

// The job's finalists re-timed (TuneSettings::retime_top; kiln/tune.h's retime); the job's
// best is then the fastest record by re-timed median.
void retime_finalists(const Task& task, Builder& builder, Runner& runner,
                      records::RecordStore& store, const TuneSettings& settings,
                      const TuneHooks& hooks, TuneProgress& p) {
  if (settings.retime_top <= 0 || settings.retime_passes <= 0) return;
  records::Query q;
  q.job = p.job;
  q.error = "";
  q.order = records::Query::Order::Median;  // a resumed job's new points among them
  q.limit = settings.retime_top;
  p.retimed = retime(task, builder, runner, store, store.query(q), settings.compile,
                     settings.retime_passes, hooks.stopping);
  q.order = records::Query::Order::Fastest;
  q.limit = 1;
  std::vector<records::Record> best = store.query(q);
  if (!best.empty()) {
    p.best = best.front();
    p.best_gflops = gflops_of(*p.best);
  }
}

}  // namespace

int retime(const Task& task, Builder& builder, Runner& runner, records::RecordStore& store,
           const std::vector<records::Record>& records, const CompileOptions& options, int passes,
           const std::function<bool()>& stopping_hook) {
  auto stopping = [&] { return stopping_hook && stopping_hook(); };
  auto stop = [] {
    throw Interrupted(Failure{Failure::Kind::Stopped, std::nullopt,
                              "the service is stopping; the re-timing is left undone"});
  };
  struct Finalist {
    records::Record record;
    std::shared_ptr<const codegen::Artifact> artifact;
    std::shared_ptr<const ir::Func> func;
    std::vector<double> rounds;
    bool out = false;  // its build or a run failed
  };
  std::vector<Finalist> finalists;
  for (const records::Record& r : records) {
    if (!r.error.empty()) continue;
    Finalist f;
    f.record = r;
    if (stopping()) stop();
    Outcome<Build> b = retry_busy<Build>(
        [&] {
          return builder.build({task.func, f.record.config, options});
        },
        stopping);
    if (!b.ok()) {
      if (stopping()) stop();
      if (!b.failure().points_fault()) return 0;
      continue;
    }
    f.artifact = b.value().artifact;
    if (task.func)
      f.func = std::make_shared<const ir::Func>(ir::apply_overrides(*task.func, f.record.config));
    finalists.push_back(std::move(f));
  }
  if (finalists.empty()) return 0;
  const std::string device = finalists.front().record.agent;
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t k = 0; k < finalists.size(); ++k) {
      Finalist& f = finalists[pass % 2 ? finalists.size() - 1 - k : k];
      if (f.out) continue;
      if (stopping()) stop();
      RunInput in{f.artifact, f.func, task.params, device, 0};
      Outcome<Measurement> m = retry_busy<Measurement>([&] { return runner.run(in); }, stopping);
      if (!m.ok()) {
        if (stopping()) stop();
        if (!m.failure().points_fault()) return 0;  // the device gone: keep the single timings
        f.out = true;
        continue;
      }
      if (m.value().error || m.value().round_ms.empty()) {
        f.out = true;
        continue;
      }
      f.rounds.insert(f.rounds.end(), m.value().round_ms.begin(), m.value().round_ms.end());
    }
  }
  int retimed = 0;
  for (const Finalist& f : finalists) {
    if (f.out || f.rounds.empty()) continue;
    store.set_retime(f.record.id, f.rounds, round_stats(f.rounds).median);
    ++retimed;
  }
  return retimed;
}

struct TuneJob::State {
  const Task& task;
  Builder& builder;
  Runner& runner;
  records::RecordStore& store;
  const std::string key;
  const TuneSettings settings;
  const TuneHooks hooks;
  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  Searcher search;
  TuneProgress p;
  int trials_before = 0;                   // measured by earlier runs of the job
  std::optional<Config> first_point;       // the first point a new job proposed
  std::map<std::string, int64_t> illegal;  // points the Builder refused, by reason
  std::string over;                        // why step() has no more to do ("": it has)

  State(const Task& t, Builder& b, Runner& r, records::RecordStore& s, std::string k,
        TuneSettings ts, TuneHooks h)
      : task(t),
        builder(b),
        runner(r),
        store(s),
        key(std::move(k)),
        settings(std::move(ts)),
        hooks(std::move(h)),
        search(*task.space, settings.search,
               settings.features ? settings.features : FeatureFn(knob_features)) {}

  std::map<std::string, int64_t> rejected() const {
    std::map<std::string, int64_t> all = search.rejected();
    for (const auto& [why, n] : illegal) all[why] += n;
    return all;
  }
  void timing() {
    p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int run = p.trials - trials_before;
    p.eta_s = run > 0 ? p.elapsed_s / run * std::max(0, settings.trials - p.trials) : 0;
  }
  void note(const records::Record& r) {
    ++p.trials;
    // Trial 0: the first point proposed (a batch's points may come back in another order);
    // a resumed job's first record.
    if (!p.first && (!first_point || r.config == *first_point)) p.first = r;
    if (!r.error.empty()) {
      ++p.errors[r.error];
    } else if (!p.best || records::ranks_before(r, *p.best)) {
      p.best = r;
      p.best_gflops = gflops_of(r);
    }
  }
  void stopped() const {
    if (!hooks.stopping || !hooks.stopping()) return;
    throw Interrupted(Failure{Failure::Kind::Stopped, std::nullopt,
                              "the service is stopping; the job is kept and can be resumed"});
  }
};

TuneJob::TuneJob(const Task& task, Builder& builder, Runner& runner, records::RecordStore& store,
                 const std::string& key, const TuneSettings& settings, int64_t job,
                 const TuneHooks& hooks)
    : s_(std::make_unique<State>(task, builder, runner, store, key, settings, hooks)) {
  State& s = *s_;
  start_from(settings);
  s.p.target = settings.trials;
  const records::Workload& workload = task.workload;
  store.put_workload(workload);
  if (job == 0) {
    s.p.job = store.start_job({0, workload.hash, key, settings.json()});
    return;
  }
  std::optional<records::Job> j = store.job(job);
  if (!j) throw records::RecordsError(fmt::format("no tuning job {} to resume", job));
  if (j->workload != workload.hash || j->key != key)
    throw records::RecordsError(fmt::format("tuning job {} tunes workload {} on {}, not {} on {}",
                                            job, j->workload, j->key, workload.hash, key));
  s.p.job = job;
  // What the job measured before: the model learns it, the search never proposes it again.
  records::Query q;
  q.job = job;
  q.limit = -1;
  std::vector<Config> points;
  std::vector<double> costs;
  for (const records::Record& r : store.query(q)) {
    s.note(r);
    points.push_back(r.config);
    costs.push_back(cost_of(r));
  }
  s.search.update(points, costs);
  s.trials_before = s.p.trials;
  if (s.trials_before > 0) {  // its first trial was chosen back then
    s.p.first_from.clear();
    s.p.first_shape.clear();
  }
}

TuneJob::~TuneJob() = default;

const TuneProgress& TuneJob::progress() const { return s_->p; }
const std::string& TuneJob::over() const { return s_->over; }
bool TuneJob::measured_before() const { return s_->trials_before > 0; }

void TuneJob::start_from(const TuneSettings& transfer) {
  State& s = *s_;
  if (!transfer.warm_points.empty()) s.search.warm_start(transfer.warm_points, transfer.warm_cost);
  const std::vector<Config>& points = transfer.first_points;
  if (points.empty()) return;
  // The job's own shape, measured by another job, first; the others as the model (trained on
  // the related shapes' records) ranks them, when it is trained.
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto shape_of = [&](size_t i) {
    return i < transfer.first_shapes.size() ? transfer.first_shapes[i] : std::string();
  };
  size_t keep = !shape_of(0).empty() && shape_of(0) == s.task.workload.shape ? 1 : 0;
  if (std::optional<std::vector<double>> score = s.search.score(points))
    std::stable_sort(order.begin() + keep, order.end(),
                     [&](size_t a, size_t b) { return (*score)[a] > (*score)[b]; });
  std::vector<Config> ordered;
  for (size_t i : order) ordered.push_back(points[i]);
  s.search.suggest(ordered);
  s.p.first_shape = shape_of(order.front());
  s.p.first_from = s.p.first_shape.empty() ? "defaults" : "transfer";
}

bool TuneJob::step(int n) {
  State& s = *s_;
  TuneProgress& p = s.p;
  const TuneSettings& settings = s.settings;
  if (!s.over.empty()) return false;
  s.stopped();
  if (s.hooks.cancelled && s.hooks.cancelled()) {
    s.over = "cancelled";
    return false;
  }
  if (p.trials >= settings.trials) {
    s.over = "trials";
    return false;
  }
  if (settings.early_stop > 0 && s.search.since_improvement() >= settings.early_stop) {
    s.over = "early stop";
    return false;
  }
  int want = std::min(n > 0 ? n : settings.batch, settings.trials - p.trials);
  std::vector<Config> batch = s.search.next_batch(want);
  if (batch.empty()) {
    s.over = "space exhausted";
    return false;
  }
  if (p.trials == 0 && !s.first_point) s.first_point = batch.front();

  std::mutex mu;  // the batch reports from several threads
  std::vector<Config> measured;
  std::vector<double> costs;
  auto report = [&](const Trial& t) {
    std::lock_guard<std::mutex> lock(mu);
    records::Record r;
    static_cast<Trial&>(r) = t;
    r.job = p.job;
    r.workload = s.task.workload.hash;
    r.key = s.key;
    if (!r.error.empty()) r.median_ms = 0;
    // When it arrived: the record streamed is the record stored, with its time and its id.
    r.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    records::RecordStore::Added added = s.store.add_record(r);
    if (!added.added) return;  // reported twice: kept once
    r.id = added.id;
    if (r.attempts > 1) ++p.remeasured;
    if (r.stopped_early) ++p.stopped_early;
    s.note(r);
    measured.push_back(r.config);
    costs.push_back(cost_of(r));
    if (s.hooks.progress) {
      p.last = r;
      p.rejected = s.rejected();
      s.timing();
      s.hooks.progress(p);
      p.last.reset();
    }
  };
  auto reject = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    ++s.illegal[why];
  };
  // A candidate far slower than the best so far needs one round to say so.
  double stop_above_ms = settings.stop_slower_than > 0 && p.best && p.best->median_ms > 0
                             ? settings.stop_slower_than * p.best->median_ms
                             : 0;
  std::optional<Failure> failure = measure_batch(s.task, s.builder, s.runner, settings,
                                                 stop_above_ms, batch, s.hooks, report, reject);
  s.search.update(measured, costs);
  s.stopped();
  if (failure && !(s.hooks.cancelled && s.hooks.cancelled())) throw Interrupted(*failure);
  p.rejected = s.rejected();
  s.timing();
  return true;
}

TuneProgress TuneJob::finish(bool cancelled) {
  State& s = *s_;
  TuneProgress& p = s.p;
  cancelled = cancelled || s.over == "cancelled";
  if (!cancelled) retime_finalists(s.task, s.builder, s.runner, s.store, s.settings, s.hooks, p);
  p.done = true;
  p.stopped = cancelled ? "cancelled" : s.over.empty() ? "trials" : s.over;
  p.rejected = s.rejected();
  p.last.reset();
  s.timing();
  p.eta_s = 0;
  s.store.finish_job(p.job, cancelled ? records::JobState::Cancelled : records::JobState::Done);
  if (s.hooks.progress) s.hooks.progress(p);
  return p;
}

TuneProgress tune(const Task& task, Builder& builder, Runner& runner, records::RecordStore& store,
                  const std::string& key, const TuneSettings& settings, int64_t job,
                  const TuneHooks& hooks) {
  TuneJob j(task, builder, runner, store, key, settings, job, hooks);
  while (j.step())
    if (hooks.progress && j.progress().trials < settings.trials) hooks.progress(j.progress());
  return j.finish();
}

}  // namespace kiln::tuner
