// Tuning a model's tasks under one budget (kiln/task_scheduler.h).
#include "kiln/task_scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

namespace kiln::tuner {
namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();

double best_ms(const TuneProgress& p) { return p.best ? p.best->effective_ms() : kNone; }

// The task whose best ranks first (records::ranks_before); -1 when none has one.
int fastest_task(const std::vector<TuneProgress>& tasks) {
  int out = -1;
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].best && (out < 0 || records::ranks_before(*tasks[i].best, *tasks[out].best)))
      out = static_cast<int>(i);
  return out;
}

}  // namespace

double task_gain(int calls, const std::vector<double>& history, const std::vector<int>& trials,
                 double backward_weight, int window) {
  if (history.empty() || !std::isfinite(history.back())) return kNone;
  const size_t now = history.size() - 1;
  const double best = history.back();
  const double forward = trials[now] > 0 ? best / trials[now] : 0;
  double backward = 0;
  const size_t then = now >= static_cast<size_t>(std::max(1, window))
                          ? now - static_cast<size_t>(std::max(1, window))
                          : 0;
  if (then < now && std::isfinite(history[then]) && trials[now] > trials[then])
    backward = (history[then] - best) / (trials[now] - trials[then]);
  return calls * (backward_weight * backward + (1 - backward_weight) * forward);
}

double alternative_gain(const std::vector<double>& history, const std::vector<int>& trials,
                        double fastest, int batch, double backward_weight, int window) {
  if (history.empty() || !std::isfinite(history.back()))
    return trials.empty() || trials.back() == 0 ? kNone : -kNone;
  const double rate = task_gain(1, history, trials, backward_weight, window);
  return fastest - (history.back() - rate * batch);
}

ScheduleProgress tune_tasks(const std::vector<ScheduledTask>& tasks, Builder& builder,
                            Runner& runner, records::RecordStore& store, const std::string& key,
                            const ScheduleSettings& settings, const ScheduleHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  ScheduleProgress p;
  p.target = settings.trials;
  p.tasks.resize(tasks.size());
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto timing = [&] {
    p.elapsed_s = elapsed();
    double eta = 0;
    if (settings.trials > 0 && p.trials > 0)
      eta = p.elapsed_s / p.trials * std::max(0, settings.trials - p.trials);
    if (settings.budget_s > 0) {
      double left = std::max(0.0, settings.budget_s - p.elapsed_s);
      eta = settings.trials > 0 && p.trials > 0 ? std::min(eta, left) : left;
    }
    p.eta_s = eta;
  };
  auto predict = [&] {
    if (settings.alternatives) {
      p.fastest = fastest_task(p.tasks);
      return p.fastest < 0 ? 0.0 : best_ms(p.tasks[static_cast<size_t>(p.fastest)]);
    }
    double total = 0;
    for (size_t i = 0; i < tasks.size(); ++i) {
      double b = best_ms(p.tasks[i]);
      if (!std::isfinite(b)) return 0.0;
      total += tasks[i].calls * b;
    }
    return total;
  };
  auto report = [&] {
    p.predicted_ms = predict();
    timing();
    if (hooks.progress) hooks.progress(p);
  };

  // Each task's job, its progress relayed as the model's.
  std::vector<std::unique_ptr<TuneJob>> jobs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    TuneSettings s = settings.task;
    if (tasks[i].task.space->size() <= 1) s.retime_top = 0;  // nothing to compare it with
    TuneHooks h;
    h.stopping = hooks.stopping;
    h.cancelled = hooks.cancelled;
    h.progress = [&, i](const TuneProgress& tp) {
      p.tasks[i] = tp;
      if (!tp.last) return;
      ++p.trials;
      p.task = static_cast<int>(i);
      p.last = tp.last;
      report();
      p.last.reset();
    };
    jobs.push_back(
        std::make_unique<TuneJob>(tasks[i].task, builder, runner, store, key, s, tasks[i].job, h));
    p.tasks[i] = jobs.back()->progress();
  }

  // Each task's best after each of its batches, and its trials then.
  std::vector<std::vector<double>> history(tasks.size());
  std::vector<std::vector<int>> trials_at(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    history[i].push_back(best_ms(p.tasks[i]));
    trials_at[i].push_back(p.tasks[i].trials);
  }

  auto out_of_budget = [&]() -> const char* {
    if (settings.trials > 0 && p.trials >= settings.trials) return "trials";
    if (settings.budget_s > 0 && elapsed() >= settings.budget_s) return "budget";
    return nullptr;
  };
  auto finish = [&](const std::string& why) {
    bool cancelled = why == "cancelled";
    for (size_t i = 0; i < jobs.size(); ++i) p.tasks[i] = jobs[i]->finish(cancelled);
    p.done = true;
    p.stopped = why;
    p.task = -1;
    p.last.reset();
    report();
    p.eta_s = 0;
    return p;
  };
  // One batch (at most n points) of task i; false when its job had no more to do.
  auto step = [&](size_t i, int n) {
    if (settings.trials > 0) n = std::min(n, settings.trials - p.trials);
    if (!jobs[i]->step(n)) return false;
    p.tasks[i] = jobs[i]->progress();
    history[i].push_back(best_ms(p.tasks[i]));
    trials_at[i].push_back(p.tasks[i].trials);
    p.task = -1;
    report();
    return true;
  };
  auto cancelled = [&] { return hooks.cancelled && hooks.cancelled(); };

  // A batch each: what every task costs, and how far its first points are from each other.
  // Tasks of one point first (a trial each), then the others, each a batch or its share of the
  // trials left, so that every task is measured before any gets a second batch.
  std::vector<size_t> first;
  for (size_t i = 0; i < tasks.size(); ++i)
    if (!jobs[i]->measured_before()) first.push_back(i);
  std::stable_partition(first.begin(), first.end(),
                        [&](size_t i) { return tasks[i].task.space->size() <= 1; });
  for (size_t k = 0; k < first.size(); ++k) {
    if (cancelled()) return finish("cancelled");
    if (const char* why = out_of_budget()) return finish(why);
    const Task& task = tasks[first[k]].task;
    if (settings.transfer && task.space->size() > 1) {
      // Zero-trial start: what the records know of this operator at related shapes now, the
      // model's tasks measured before this one included.
      TuneSettings transfer;
      first_start(store, task, key, settings.task.compile, transfer);
      warm_start(store, task.workload, key, transfer);
      jobs[first[k]]->start_from(transfer);
    }
    int n = settings.task.batch;
    if (settings.trials > 0)
      n = std::min(n,
                   std::max(1, (settings.trials - p.trials) / static_cast<int>(first.size() - k)));
    step(first[k], n);
  }
  // Then to the task whose next trials promise the model most.
  for (;;) {
    if (cancelled()) return finish("cancelled");
    if (const char* why = out_of_budget()) return finish(why);
    const int first = fastest_task(p.tasks);
    const double fastest = first < 0 ? kNone : best_ms(p.tasks[static_cast<size_t>(first)]);
    std::optional<size_t> pick;
    double most = 0;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!jobs[i]->over().empty()) continue;
      double g = settings.alternatives
                     ? alternative_gain(history[i], trials_at[i], fastest, settings.task.batch,
                                        settings.backward_weight, settings.window)
                     : task_gain(tasks[i].calls, history[i], trials_at[i], settings.backward_weight,
                                 settings.window);
      if (!pick || g > most) {
        most = g;
        pick = i;
      }
    }
    if (!pick) return finish("tasks exhausted");
    step(*pick, settings.task.batch);
  }
}

}  // namespace kiln::tuner
