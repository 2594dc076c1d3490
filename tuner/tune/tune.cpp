// The tuning loop (kiln/tune.h).
#include "kiln/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>

#include "kiln/json.h"

namespace kiln::tuner {
namespace {

double cost_of(const Trial& t) {
  return t.error.empty() && t.median_ms > 0 ? t.median_ms : std::numeric_limits<double>::infinity();
}

Trial trial_of(const records::Record& r) {
  Trial t;
  t.point = r.config;
  t.round_ms = r.round_ms;
  t.median_ms = r.median_ms;
  t.error = r.error;
  t.message = r.message;
  t.compile_ms = r.compile_ms;
  t.flops = r.flops;
  t.agent = r.agent;
  t.compiler_version = r.compiler_version;
  return t;
}

}  // namespace

std::string TuneSettings::json() const {
  return JsonObject()
      .integer("trials", trials)
      .integer("batch", batch)
      .integer("early_stop", early_stop)
      .str("search", strategy_name(search.strategy, search.loss))
      .num("epsilon", search.epsilon)
      .integer("annealing_steps", search.annealing_steps)
      .integer("population", search.population)
      .integer("pool", search.pool)
      .integer("seed", static_cast<int64_t>(search.seed))
      .done();
}

TuneProgress tune(const Space& space, Measurer& measurer, records::RecordStore& store,
                  const records::Workload& workload, const std::string& key,
                  const TuneSettings& settings, int64_t job,
                  const std::function<void(const TuneProgress&)>& progress,
                  const std::function<bool()>& cancelled) {
  auto start = std::chrono::steady_clock::now();
  Searcher search(space, settings.search,
                  settings.features ? settings.features : FeatureFn(knob_features));
  if (!settings.warm_points.empty()) search.warm_start(settings.warm_points, settings.warm_cost);
  TuneProgress p;
  p.target = settings.trials;
  int trials_before = 0;                   // measured by earlier runs of the job
  std::map<std::string, int64_t> illegal;  // points the Measurer refused, by reason
  auto rejected = [&] {
    std::map<std::string, int64_t> all = search.rejected();
    for (const auto& [why, n] : illegal) all[why] += n;
    return all;
  };
  auto timing = [&] {
    p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int run = p.trials - trials_before;
    p.eta_s = run > 0 ? p.elapsed_s / run * std::max(0, settings.trials - p.trials) : 0;
  };
  auto note = [&](const Trial& t) {
    ++p.trials;
    if (!t.error.empty()) {
      ++p.errors[t.error];
    } else if (!p.best || cost_of(t) < cost_of(*p.best)) {
      p.best = t;
      p.best_gflops = t.flops > 0 ? static_cast<double>(t.flops) / (t.median_ms * 1e-3) * 1e-9 : 0;
    }
  };

  store.put_workload(workload);
  if (job == 0) {
    p.job = store.start_job({0, workload.hash, key, settings.json()});
  } else {
    std::optional<records::Job> j = store.job(job);
    if (!j) throw records::RecordsError(fmt::format("no tuning job {} to resume", job));
    if (j->workload != workload.hash || j->key != key)
      throw records::RecordsError(fmt::format("tuning job {} tunes workload {} on {}, not {} on {}",
                                              job, j->workload, j->key, workload.hash, key));
    p.job = job;
    // What the job measured before: the model learns it, the search never proposes it again.
    records::Query q;
    q.job = job;
    q.limit = -1;
    std::vector<Config> points;
    std::vector<double> costs;
    for (const records::Record& r : store.query(q)) {
      Trial t = trial_of(r);
      note(t);
      points.push_back(t.point);
      costs.push_back(cost_of(t));
    }
    search.update(points, costs);
    trials_before = p.trials;
  }

  auto finish = [&](const char* why, records::JobState state) {
    p.done = true;
    p.stopped = why;
    p.rejected = rejected();
    p.last.reset();
    timing();
    p.eta_s = 0;
    store.finish_job(p.job, state);
    if (progress) progress(p);
    return p;
  };
  while (p.trials < settings.trials) {
    if (cancelled && cancelled()) return finish("cancelled", records::JobState::Cancelled);
    if (settings.early_stop > 0 && search.since_improvement() >= settings.early_stop)
      return finish("early stop", records::JobState::Done);
    std::vector<Config> batch =
        search.next_batch(std::min(settings.batch, settings.trials - p.trials));
    if (batch.empty()) return finish("space exhausted", records::JobState::Done);

    std::mutex mu;  // a Measurer may report from its own threads
    std::vector<Config> measured;
    std::vector<double> costs;
    measurer.measure(batch, [&](const Trial& t) {
      std::lock_guard<std::mutex> lock(mu);
      if (!t.rejected.empty()) {
        ++illegal[t.rejected];
        return;
      }
      records::Record r;
      r.job = p.job;
      r.workload = workload.hash;
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
      if (!store.add_record(r).added) return;  // reported twice: kept once
      note(t);
      measured.push_back(t.point);
      costs.push_back(cost_of(t));
      if (progress) {
        p.last = t;
        p.rejected = rejected();
        timing();
        progress(p);
        p.last.reset();
      }
    });
    search.update(measured, costs);
    p.rejected = rejected();
    timing();
    if (progress && p.trials < settings.trials) progress(p);
  }
  return finish("trials", records::JobState::Done);
}

}  // namespace kiln::tuner
