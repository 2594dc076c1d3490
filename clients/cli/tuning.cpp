// `kiln tune` and `kiln records`: kilnd's tuning jobs and its record
// database, as a person reads them (a progress bar, tables) or as JSON.
#include "tuning.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>

#include "kiln/json.h"
#include "kiln/records.h"
#include "kiln/tasks.h"
#include "kiln/v1/service.pb.h"
#include "remote.h"
#include "selection.h"

namespace kiln::cli {
namespace {

std::unique_ptr<Remote> need_remote(const Options& o, const char* what) {
  if (!o.server)
    throw UsageError(o.command,
                     fmt::format("{} kilnd's: give --server HOST:PORT (or set KILN_SERVER)", what));
  return std::make_unique<Remote>(o);
}

std::string proto_json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions p;
  p.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, p);
  return out;
}

// A record as docs/records.md writes it.
std::string record_line(const v1::TuningRecord& w) {
  records::Record r;
  r.id = w.id();
  r.job = w.job();
  r.workload = w.workload();
  r.key = w.key();
  r.config = records::Config(w.config().begin(), w.config().end());
  r.round_ms.assign(w.round_ms().begin(), w.round_ms().end());
  r.median_ms = w.median_ms();
  r.error = w.error();
  r.message = w.message();
  r.compile_ms = w.compile_ms();
  r.flops = w.flops();
  r.compiler_version = w.compiler_version();
  r.agent = w.agent();
  r.unix_ms = w.unix_ms();
  if (w.has_host_load()) r.host_load = w.host_load();
  if (w.has_cpu_pressure()) r.cpu_pressure = w.cpu_pressure();
  r.attempts = w.attempts();
  r.noisy = w.noisy();
  r.stopped_early = w.stopped_early();
  r.retime_round_ms.assign(w.retime_round_ms().begin(), w.retime_round_ms().end());
  if (w.has_retimed_ms()) r.retimed_ms = w.retimed_ms();
  return records::record_json(r);
}

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02}m", static_cast<int>(s) / 3600, static_cast<int>(s) % 3600 / 60);
}

std::string utc(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  std::time_t t = unix_ms / 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

// What a record's speed is taken to be: its re-timed median when it has one.
double effective_ms(const v1::TuningRecord& r) {
  return r.has_retimed_ms() ? r.retimed_ms() : r.median_ms();
}

// How good a job's trial 0 was: the best's time over trial 0's, at most 1; 0 when it failed.
double trial0_quality(const v1::TuningRecord& first, double best_ms) {
  return first.error().empty() && first.median_ms() > 0 ? std::min(1.0, best_ms / first.median_ms())
                                                        : 0.0;
}

std::string timing(const v1::TuningRecord& r) {
  if (!r.error().empty()) return r.error();
  std::string out = fmt::format("{:.5g} ms", effective_ms(r));
  if (r.has_retimed_ms()) out += fmt::format(" re-timed ({} rounds)", r.retime_round_ms_size());
  if (r.gflops() > 0) out += fmt::format(" ({:.1f} GFLOP/s)", r.gflops());
  return out;
}

// How noisy the rounds were: their coefficient of variation, with a '!' when the record is
// marked noisy.
std::string spread(const v1::TuningRecord& r) {
  if (!r.error().empty() || r.round_ms_size() < 2) return "-";
  return fmt::format("{:.1f}%{}", r.cv() * 100, r.noisy() ? "!" : "");
}

std::string load(const v1::TuningRecord& r) {
  return r.has_host_load() ? fmt::format("{:.2f}", r.host_load()) : "-";
}

std::string counts(const google::protobuf::Map<std::string, int64_t>& m) {
  std::map<std::string, int64_t> sorted(m.begin(), m.end());
  std::vector<std::string> parts;
  for (const auto& [what, n] : sorted) parts.push_back(fmt::format("{} {}", what, n));
  return fmt::format("{}", fmt::join(parts, ", "));
}

int64_t total(const google::protobuf::Map<std::string, int64_t>& m) {
  int64_t n = 0;
  for (const auto& [what, k] : m) n += k;
  return n;
}

// The progress of a job as a person follows it: a bar redrawn on a
// terminal, a line a trial otherwise.
class ProgressView {
 public:
  explicit ProgressView(const Options& o) : o_(o), tty_(isatty(STDOUT_FILENO) == 1) {}

  bool show(const v1::TuneProgress& p) {
    if (o_.json) {
      fmt::print("{}\n", proto_json(p));
      std::fflush(stdout);
      return !o_.detach;
    }
    if (!started_) {
      started_ = true;
      if (p.alternatives()) {
        fmt::print("tuning job {}: {} on {} (kiln's {} sketches of its algorithm, {} search, {})\n",
                   p.job(), p.name(), p.key(), p.tasks_size(), p.search(),
                   p.target() > 0 ? fmt::format("{} trials", p.target()) : "no trial limit");
      } else if (p.tasks_size() > 0) {
        fmt::print("tuning job {}: model {} on {} ({} tasks, {} search, {}{})\n", p.job(), p.name(),
                   p.key(), p.tasks_size(), p.search(),
                   p.target() > 0 ? fmt::format("{} trials", p.target()) : "no trial limit",
                   o_.budget_s > 0 ? ", budget " + duration(o_.budget_s) : "");
      } else {
        fmt::print("tuning job {}: {} on {} ({} search, {} points in the space, {} trials{})\n",
                   p.job(), p.name(), p.key(), p.search(), p.space_size(), p.target(),
                   p.trials() > 0 ? fmt::format(", {} measured before", p.trials()) : "");
      }
      if (o_.detach) {
        fmt::print(
            "detached: follow it with `kiln tune --resume {}`, stop it with `kiln tune "
            "--cancel {}`\n",
            p.job(), p.job());
        return false;
      }
    }
    last_ = p;
    if (p.done()) {
      if (tty_) fmt::print("\r\x1b[K");
      return true;
    }
    if (tty_) {
      draw_bar(p);
    } else if (p.has_last() && p.task() >= 0 && p.task() < p.tasks_size()) {
      const v1::TaskProgress& t = p.tasks(p.task());
      fmt::print("trial {}: {}: {}: {}; its best {}{}\n",
                 p.target() > 0 ? fmt::format("{}/{}", p.trials(), p.target())
                                : std::to_string(p.trials()),
                 t.name(), p.last().config_text().empty() ? "as it is" : p.last().config_text(),
                 timing(p.last()), t.has_best() ? timing(t.best()) : std::string("-"),
                 p.predicted_ms() <= 0 ? std::string()
                 : p.alternatives()    ? fmt::format("; fastest {:.4g} ms", p.predicted_ms())
                                       : fmt::format("; model {:.4g} ms", p.predicted_ms()));
    } else if (p.has_last()) {
      fmt::print("trial {}/{}: {}: {}{}\n", p.trials(), p.target(), p.last().config_text(),
                 timing(p.last()),
                 p.has_best() ? fmt::format("; best {}", timing(p.best())) : std::string());
    }
    std::fflush(stdout);
    return true;
  }

  const std::optional<v1::TuneProgress>& last() const { return last_; }

 private:
  void draw_bar(const v1::TuneProgress& p) {
    winsize ws{};
    int width = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 100;
    constexpr int kBar = 24;
    // Filled by the trials, or for a model's job with a time budget only, by the time.
    double time = p.elapsed_s() + p.eta_s();
    int filled = p.target() > 0 ? std::min(kBar, kBar * p.trials() / p.target())
                 : time > 0     ? std::min(kBar, static_cast<int>(kBar * p.elapsed_s() / time))
                                : 0;
    std::string line =
        fmt::format("{:>4}/{} [{}{}] {}", p.trials(),
                    p.target() > 0 ? std::to_string(p.target()) : std::string("-"),
                    std::string(filled, '#'), std::string(kBar - filled, '.'),
                    p.tasks_size() > 0 && !p.alternatives()
                        ? (p.predicted_ms() > 0 ? fmt::format("model {:.4g} ms", p.predicted_ms())
                                                : std::string("model -"))
                        : "best " + (p.has_best() ? timing(p.best()) : std::string("-")));
    if (int64_t e = total(p.errors())) line += fmt::format("  errors {}", e);
    if (int64_t r = total(p.rejected())) line += fmt::format("  rejected {}", r);
    if (p.eta_s() > 0) line += "  ETA " + duration(p.eta_s());
    if (static_cast<int>(line.size()) >= width) line.resize(static_cast<size_t>(width - 1));
    fmt::print("\r{}\x1b[K", line);
  }

  const Options& o_;
  bool tty_;
  bool started_ = false;
  std::optional<v1::TuneProgress> last_;
};

// The end of a model's job: each task's trials and best, and the model's predicted time.
int print_model_summary(const v1::TuneProgress& p) {
  fmt::print("tuning job {} {}: {} trials over {} tasks in {}\n", p.job(),
             p.stopped() == "trials" ? "done" : "stopped (" + p.stopped() + ")", p.trials(),
             p.tasks_size(), duration(p.elapsed_s()));
  double sum = 0;
  for (const v1::TaskProgress& t : p.tasks())
    if (t.has_best()) sum += t.calls() * effective_ms(t.best());
  fmt::print("  {:>4}  {:>5}  {:>6}  {:>12}  {:>6}  {:>10}  {:>7}  {}\n", "TASK", "CALLS", "TRIALS",
             "BEST MS", "SHARE", "GFLOP/S", "TRIAL 0", "OPERATOR (JOB; BEST CONFIG)");
  // Trial 0's quality: the best's time over the first trial's, for the tasks whose first point
  // came from another shape's records and for all.
  double quality_all = 0, quality_transferred = 0;
  int n_all = 0, n_transferred = 0;
  int index = 0;
  for (const v1::TaskProgress& t : p.tasks()) {
    double ms = t.has_best() ? effective_ms(t.best()) : 0;
    std::string first = "-";
    if (t.has_first() && ms > 0 && t.space_size() > 1) {
      double q = trial0_quality(t.first(), ms);
      first = fmt::format("{:.0f}%", 100 * q);
      quality_all += q;
      ++n_all;
      if (t.first_from() == "transfer") {
        quality_transferred += q;
        ++n_transferred;
      }
    }
    fmt::print(
        "  {:>4}  {:>5}  {:>6}  {:>12}  {:>6}  {:>10}  {:>7}  {} (job {}; {})\n", index++,
        t.calls(), t.trials(), ms > 0 ? fmt::format("{:.5g}", ms) : "-",
        ms > 0 && sum > 0 ? fmt::format("{:.1f}%", 100 * t.calls() * ms / sum) : "-",
        t.has_best() && t.best().gflops() > 0 ? fmt::format("{:.1f}", t.best().gflops()) : "-",
        first, t.name(), t.job(),
        !t.has_best()                    ? "none ran"
        : t.best().config_text().empty() ? "no knobs"
                                         : t.best().config_text());
  }
  if (n_all > 0)
    fmt::print(
        "  trial 0 (each task's first point, before it measured anything) ran at {:.0f}% of its "
        "task's best on average{}\n",
        100 * quality_all / n_all,
        n_transferred > 0
            ? fmt::format("; {:.0f}% over the {} that started from the records of related shapes",
                          100 * quality_transferred / n_transferred, n_transferred)
            : std::string());
  if (p.predicted_ms() > 0)
    fmt::print("  the model, predicted from the tasks' best records: {:.4g} ms a run\n",
               p.predicted_ms());
  if (total(p.errors()) > 0) fmt::print("  failed: {}\n", counts(p.errors()));
  if (total(p.rejected()) > 0)
    fmt::print("  rejected before measuring: {}\n", counts(p.rejected()));
  return p.stopped() == "cancelled" ? 1 : 0;
}

// How to compile the best of a func's job and read its schedule.
void print_next_steps(const Options& o, const v1::TuneProgress& p, const std::string& file) {
  if (file.empty()) return;
  const char* as = o.auto_schedule ? " --auto" : "";
  fmt::print("compile the best: kiln compile {} --best{} --key {}\n", file, as, p.key());
  fmt::print("its schedule:     kiln emit {} --stage schedule --best{} --key {}\n", file, as,
             p.key());
}

// The end of a job over a func's sketches: each sketch's trials and best, and the fastest.
int print_sketches_summary(const Options& o, const v1::TuneProgress& p, const std::string& file) {
  fmt::print("tuning job {} {}: {} trials over {} sketches in {}\n", p.job(),
             p.stopped() == "trials" ? "done" : "stopped (" + p.stopped() + ")", p.trials(),
             p.tasks_size(), duration(p.elapsed_s()));
  fmt::print("  {:>6}  {:>6}  {:>12}  {:>10}  {}\n", "SKETCH", "TRIALS", "BEST MS", "GFLOP/S",
             "SKETCH (JOB; BEST CONFIG)");
  int index = 0;
  for (const v1::TaskProgress& t : p.tasks()) {
    double ms = t.has_best() ? effective_ms(t.best()) : 0;
    fmt::print(
        "  {:>6}  {:>6}  {:>12}  {:>10}  {} (job {}; {})\n", index++, t.trials(),
        ms > 0 ? fmt::format("{:.5g}", ms) : "-",
        t.has_best() && t.best().gflops() > 0 ? fmt::format("{:.1f}", t.best().gflops()) : "-",
        t.name(), t.job(), t.has_best() ? t.best().config_text() : "none ran");
  }
  if (p.has_best()) {
    for (const v1::TaskProgress& t : p.tasks())
      if (t.has_best() && t.best().id() == p.best().id())
        fmt::print("  the fastest: {}, {}\n", t.name(), timing(p.best()));
  } else {
    fmt::print("  no configuration of any sketch ran\n");
  }
  if (total(p.errors()) > 0) fmt::print("  failed: {}\n", counts(p.errors()));
  if (total(p.rejected()) > 0)
    fmt::print("  rejected before measuring: {}\n", counts(p.rejected()));
  if (p.has_best()) print_next_steps(o, p, file);
  return p.stopped() == "cancelled" ? 1 : 0;
}

// The end of a job: why it stopped, its best configurations, what failed.
int print_summary(Remote& remote, const Options& o, const v1::TuneProgress& p,
                  const std::string& file) {
  if (o.json) return p.done() && p.stopped() != "cancelled" ? 0 : 1;
  if (p.alternatives()) return print_sketches_summary(o, p, file);
  if (p.tasks_size() > 0) return print_model_summary(p);
  fmt::print("tuning job {} {}: {} trials in {}\n", p.job(),
             p.stopped() == "trials" ? "done" : "stopped (" + p.stopped() + ")", p.trials(),
             duration(p.elapsed_s()));
  v1::QueryRecordsRequest q;
  q.mutable_filter()->set_job(p.job());
  q.mutable_filter()->set_error("");
  q.set_order(v1::QueryRecordsRequest::FASTEST);
  q.set_limit(5);
  v1::QueryRecordsResponse best = remote.query(q);
  if (best.records_size() > 0) {
    if (p.retimed() > 0)
      fmt::print("  the {} fastest re-timed on one agent, their rounds interleaved\n", p.retimed());
    fmt::print("  {:>4}  {:>12}  {:>12}  {:>7}  {:>10}  {}\n", "RANK", "MEDIAN MS", "RE-TIMED MS",
               "CV", "GFLOP/S", "CONFIG");
    int rank = 0;
    for (const v1::TuningRecord& r : best.records())
      fmt::print("  {:>4}  {:>12.5g}  {:>12}  {:>7}  {:>10.1f}  {}\n", ++rank, r.median_ms(),
                 r.has_retimed_ms() ? fmt::format("{:.5g}", r.retimed_ms()) : "-", spread(r),
                 r.gflops(), r.config_text());
  } else {
    fmt::print("  no configuration ran\n");
  }
  if (p.has_first() && !p.first_from().empty() && best.records_size() > 0) {
    const v1::TuningRecord& first = p.first();
    double best_ms = effective_ms(best.records(0));
    fmt::print("  trial 0 ({}): {}\n",
               p.first_from() == "transfer"
                   ? "the best record of the nearest shape, " + p.first_shape()
                   : p.first_from(),
               first.error().empty() && first.median_ms() > 0
                   ? fmt::format("{:.5g} ms, {:.0f}% of the best's speed", first.median_ms(),
                                 100 * trial0_quality(first, best_ms))
                   : "failed: " + first.error());
  }
  if (p.stopped_early() > 0)
    fmt::print("  timed for one round, far slower than the best: {} point{}\n", p.stopped_early(),
               p.stopped_early() == 1 ? "" : "s");
  if (p.remeasured() > 0)
    fmt::print("  measured again as noisy: {} point{}\n", p.remeasured(),
               p.remeasured() == 1 ? "" : "s");
  if (total(p.errors()) > 0) fmt::print("  failed: {}\n", counts(p.errors()));
  if (total(p.rejected()) > 0)
    fmt::print("  rejected before measuring: {}\n", counts(p.rejected()));
  if (best.records_size() > 0) print_next_steps(o, p, file);
  return p.stopped() == "cancelled" ? 1 : 0;
}

}  // namespace

namespace {

int tune(Remote& remote_ref, const Options& o) {
  Remote* remote = &remote_ref;
  if (o.cancel) {
    v1::CancelTuneResponse r = remote->cancel(o.cancel);
    if (o.json) {
      fmt::print("{}\n", proto_json(r.job()));
    } else {
      fmt::print("tuning job {}: {} ({} records)\n", r.job().id(), r.job().state(),
                 r.job().records());
    }
    return 0;
  }
  ProgressView view(o);
  auto each = [&](const v1::TuneProgress& p) { return view.show(p); };
  std::string file;
  if (o.resume) {
    remote->resume(o.resume, each);
  } else {
    int status = for_each_func(
        o,
        [&](const Prepared& p, bool many) {
          if (many)
            throw CompileError(ErrorStage::Validate, SourceLoc{p.file, 0, 0},
                               "kiln tune tunes one func at a time; choose one with --func");
          file = p.file;
          remote->tune(p, each);
          return true;
        },
        print_error,
        [&](const GraphJob& j, bool many) {
          if (many)
            throw CompileError(ErrorStage::Validate, SourceLoc{j.file, 0, 0},
                               "kiln tune tunes one func or model at a time; choose one with "
                               "--func or --graph");
          remote->tune_graph(j, each);
          return true;
        });
    if (status != 0) return status;
  }
  if (o.detach || !view.last()) return 0;
  return print_summary(*remote, o, *view.last(), file);
}

}  // namespace

WorkloadKnobs best_knobs(Remote& remote, const Options& o, const ir::Graph& g,
                         const CompileOptions& c) {
  WorkloadKnobs knobs;
  int tuned = 0, tunable = 0;
  for (const tuner::ModelTask& t : tuner::model_tasks(g, c)) {
    if (t.points == 0) continue;  // no knobs
    ++tunable;
    std::string name =
        t.first_result.empty() ? t.op.name : fmt::format("{} {}", t.op.name, t.first_result);
    std::optional<v1::BestConfigResponse> best = remote.best_if_any(t.workload.hash);
    if (!best) {
      fmt::print("best {} on {}: no record ran; its knobs' defaults\n", name, o.key.value_or(""));
      continue;
    }
    const v1::TuningRecord& r = best->record();
    knobs[t.workload.hash] = ir::Overrides(r.config().begin(), r.config().end());
    ++tuned;
    fmt::print("best {} on {}: {}: {:.5g} ms, record {} of job {}\n", name, r.key(),
               r.config_text(), effective_ms(r), r.id(), r.job());
  }
  fmt::print("{} of {} tunable tasks from their best records\n", tuned, tunable);
  return knobs;
}

int run_tune(const Options& o) {
  std::unique_ptr<Remote> remote = need_remote(o, "tuning is");
  try {
    return tune(*remote, o);
  } catch (const Failure& f) {
    std::fflush(stdout);
    fmt::print(stderr, "\n{}\n", f.what());
    return 1;
  }
}

namespace {

v1::RecordFilter filter_of(const Options& o) {
  v1::RecordFilter f;
  if (o.name) f.set_name(*o.name);
  if (o.workload) f.set_workload(*o.workload);
  if (o.key) f.set_key(*o.key);
  f.set_job(o.job);
  f.set_since_unix_ms(o.since_unix_ms);
  f.set_until_unix_ms(o.until_unix_ms);
  if (o.error) f.set_error(*o.error);
  return f;
}

int records_jobs(Remote& remote, const Options& o) {
  v1::ListJobsRequest r;
  if (o.name) r.set_name(*o.name);
  if (o.workload) r.set_workload(*o.workload);
  r.set_limit(o.limit > 0 ? o.limit : 20);
  v1::ListJobsResponse jobs = remote.jobs(r);
  if (o.json) {
    for (const v1::TuningJob& j : jobs.jobs()) fmt::print("{}\n", proto_json(j));
    return 0;
  }
  if (jobs.jobs_size() == 0) {
    fmt::print("no tuning jobs\n");
    return 0;
  }
  fmt::print("{:>5}  {:<16} {:<12} {:<11} {:>7}  {:<19}  {}\n", "JOB", "NAME", "KEY", "STATE",
             "RECORDS", "STARTED (UTC)", "WORKLOAD");
  for (const v1::TuningJob& j : jobs.jobs()) {
    std::string state = j.state() == "running" && !j.live() ? "interrupted" : j.state();
    fmt::print("{:>5}  {:<16} {:<12} {:<11} {:>7}  {:<19}  {}\n", j.id(), j.name(), j.key(), state,
               j.records(), utc(j.started_unix_ms()), j.workload().substr(0, 12));
  }
  return 0;
}

int records_query(Remote& remote, const Options& o) {
  v1::QueryRecordsRequest r;
  *r.mutable_filter() = filter_of(o);
  r.set_order(o.sort_fastest ? v1::QueryRecordsRequest::FASTEST : v1::QueryRecordsRequest::ARRIVAL);
  r.set_offset(o.offset);
  r.set_limit(o.limit > 0 ? o.limit : 20);
  v1::QueryRecordsResponse page = remote.query(r);
  if (o.json) {
    for (const v1::TuningRecord& rec : page.records()) fmt::print("{}\n", record_line(rec));
    return 0;
  }
  constexpr const char* kRow =
      "{:>6} {:>4}  {:<10} {:>12} {:>12} {:>7} {:>5} {:>9}  {:<16}  {:<19}  {}\n";
  fmt::print(kRow, "ID", "JOB", "KEY", "MEDIAN MS", "RE-TIMED MS", "CV", "LOAD", "GFLOP/S", "ERROR",
             "WHEN (UTC)", "CONFIG");
  bool noisy = false;
  for (const v1::TuningRecord& rec : page.records()) {
    noisy |= rec.noisy();
    fmt::print(kRow, rec.id(), rec.job(), rec.key(),
               rec.error().empty() ? fmt::format("{:.5g}", rec.median_ms()) : "-",
               rec.has_retimed_ms() ? fmt::format("{:.5g}", rec.retimed_ms()) : "-", spread(rec),
               load(rec), rec.gflops() > 0 ? fmt::format("{:.1f}", rec.gflops()) : "-",
               rec.error().empty() ? "-" : rec.error(), utc(rec.unix_ms()), rec.config_text());
  }
  if (noisy)
    fmt::print(
        "!: noisy, past the job's noise limits in every attempt (CV: the rounds' spread; LOAD: "
        "other processes' CPUs)\n");
  int64_t shown_to = o.offset + page.records_size();
  fmt::print("{} of {} records{}\n", page.records_size(), page.total(),
             page.next_offset() > 0 ? fmt::format(" (more: --offset {})", shown_to) : "");
  return 0;
}

int print_best(const v1::BestConfigResponse& b, const Options& o, const std::string& what) {
  if (o.json) {
    fmt::print("{}\n", record_line(b.record()));
    return 0;
  }
  const v1::TuningRecord& r = b.record();
  fmt::print("best {} on {} ({}{}): {}: {}, record {} of job {}\n", what, r.key(),
             b.target().triple(), b.target().cpu().empty() ? "" : ", " + b.target().cpu(),
             r.config_text(), timing(r), r.id(), r.job());
  return 0;
}

int records_best(Remote& remote, const Options& o) {
  if (o.files.empty()) return print_best(remote.best(*o.workload), o, o.workload->substr(0, 12));
  return for_each_func(
      o,
      [&](const Prepared& p, bool) {
        print_best(remote.best(p), o, p.func.name);
        return true;
      },
      print_error);
}

int records_export(Remote& remote, const Options& o) {
  v1::ExportRecordsRequest r;
  *r.mutable_filter() = filter_of(o);
  std::ofstream file;
  if (o.output) {
    file.open(*o.output, std::ios::binary | std::ios::trunc);
    if (!file) throw Failure(fmt::format("kiln records export: cannot write {}", *o.output));
  }
  int64_t lines = 0;
  remote.export_records(r, [&](const std::string& chunk) {
    lines += std::count(chunk.begin(), chunk.end(), '\n');
    if (o.output) {
      file << chunk;
    } else {
      fmt::print("{}", chunk);
    }
  });
  if (o.output) {
    file.close();
    if (!file) throw Failure(fmt::format("kiln records export: cannot write {}", *o.output));
    fmt::print(stderr, "{} records written to {}\n", lines, *o.output);
  }
  return 0;
}

// Draws the curves with matplotlib (python3-matplotlib), from a JSON file of
// {"panels": [{"title", "ylabel", "jobs": [{"label", "y": [...]}]}]}: a panel side by side
// for each kind of curve (a null in y: no value yet).
constexpr const char* kPlotScript = R"py(
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
data = json.load(open(sys.argv[1]))
panels = data["panels"]
fig, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 5), squeeze=False)
for ax, panel in zip(axes[0], panels):
    for job in panel["jobs"]:
        y = [float("nan") if v is None else v for v in job["y"]]
        ax.plot(range(1, len(y) + 1), y, label=job["label"])
    ax.set_xlabel("trials")
    ax.set_ylabel(panel["ylabel"])
    ax.set_title(panel["title"])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
)py";

// Every record of tuning job `job`, in the order they came.
std::vector<v1::TuningRecord> job_records(Remote& remote, int64_t job) {
  v1::QueryRecordsRequest q;
  q.mutable_filter()->set_job(job);
  q.set_limit(10'000);
  std::vector<v1::TuningRecord> out;
  for (;;) {
    v1::QueryRecordsResponse page = remote.query(q);
    for (const v1::TuningRecord& r : page.records()) out.push_back(r);
    if (page.next_offset() == 0) break;
    q.set_offset(page.next_offset());
  }
  return out;
}

// A job's tasks' records in the order they came, each with its task's number.
std::vector<std::pair<size_t, v1::TuningRecord>> task_records(Remote& remote,
                                                              const v1::TuningJob& j) {
  std::vector<std::pair<size_t, v1::TuningRecord>> out;
  for (size_t i = 0; i < static_cast<size_t>(j.tasks_size()); ++i)
    for (v1::TuningRecord& r : job_records(remote, j.tasks(static_cast<int>(i)).job()))
      out.emplace_back(i, std::move(r));
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second.id() < b.second.id(); });
  return out;
}

// A model's job: the model's time predicted after each trial over all its tasks (in the order
// the trials came), each task's calls times its best median so far, summed, as the job saw it
// while it ran (before its finalists were re-timed); NaN until every task has one that ran.
std::vector<double> model_curve(Remote& remote, const v1::TuningJob& j) {
  struct Trial {
    size_t task;
    double ms;
  };
  std::vector<Trial> trials;
  for (const auto& [task, r] : task_records(remote, j))
    trials.push_back({task, r.error().empty() ? r.median_ms() : 0.0});
  std::vector<double> best(static_cast<size_t>(j.tasks_size()), 0.0), y;
  for (const Trial& t : trials) {
    if (t.ms > 0 && (best[t.task] == 0 || t.ms < best[t.task])) best[t.task] = t.ms;
    double total = 0;
    for (size_t i = 0; i < best.size() && total >= 0; ++i)
      total = best[i] > 0 ? total + j.tasks(static_cast<int>(i)).calls() * best[i] : -1;
    y.push_back(total > 0 ? total : std::nan(""));
  }
  return y;
}

int records_plot(Remote& remote, const Options& o) {
  v1::ListJobsRequest lr;
  if (o.name) lr.set_name(*o.name);
  if (o.workload) lr.set_workload(*o.workload);
  lr.set_limit(1000);
  std::vector<v1::TuningJob> jobs;
  v1::ListJobsResponse listed = remote.jobs(lr);
  for (const v1::TuningJob& j : listed.jobs()) {
    if (o.job && j.id() != o.job) continue;
    if (o.key && j.key() != *o.key) continue;
    jobs.push_back(j);
  }
  if (jobs.empty()) throw Failure("kiln records plot: no tuning job matches");
  std::reverse(jobs.begin(), jobs.end());  // oldest first

  // A func's job: best GFLOP/s so far after each trial (best speed, 1/ms, when the flops are
  // unknown). A model's: its predicted time.
  bool gflops = true;
  std::vector<std::pair<std::string, std::vector<double>>> curves, models;
  for (const v1::TuningJob& j : jobs) {
    std::string search = "?";
    if (size_t at = j.settings_json().find("\"search\":\""); at != std::string::npos) {
      size_t from = at + 10, to = j.settings_json().find('"', from);
      search = j.settings_json().substr(from, to - from);
    }
    std::string label = fmt::format("job {}: {} on {} ({})", j.id(), j.name(), j.key(), search);
    if (j.tasks_size() > 0 && !j.alternatives()) {
      models.push_back(
          {fmt::format("{}, {} tasks", label, j.tasks_size()), model_curve(remote, j)});
      continue;
    }
    // A func's records; over its sketches, theirs in the order they came.
    std::vector<v1::TuningRecord> records;
    if (j.alternatives()) {
      for (auto& [task, r] : task_records(remote, j)) records.push_back(std::move(r));
      label += fmt::format(", {} sketches", j.tasks_size());
    } else {
      records = job_records(remote, j.id());
    }
    std::vector<double> y;
    double best = 0;
    for (const v1::TuningRecord& r : records) {
      if (r.flops() <= 0) gflops = false;
      double v = r.gflops() > 0 ? r.gflops() : r.median_ms() > 0 ? 1.0 / r.median_ms() : 0;
      best = std::max(best, v);
      y.push_back(best);
    }
    curves.push_back({label, y});
  }
  auto jobs_json = [](const std::vector<std::pair<std::string, std::vector<double>>>& of,
                      double scale) {
    std::string out;
    for (const auto& [label, y] : of) {
      std::vector<std::string> values;
      for (double v : y) values.push_back(std::isnan(v) ? "null" : json_number(v * scale));
      out += (out.empty() ? "" : ",") +
             JsonObject().str("label", label).raw("y", json_array(values)).done();
    }
    return "[" + out + "]";
  };
  std::vector<std::string> panels;
  if (!curves.empty())
    panels.push_back(JsonObject()
                         .str("title", "best configuration so far")
                         .str("ylabel", gflops ? "GFLOP/s" : "calls per second")
                         .raw("jobs", jobs_json(curves, gflops ? 1 : 1000))
                         .done());
  if (!models.empty())
    panels.push_back(JsonObject()
                         .str("title", "a model: its tasks' best records so far")
                         .str("ylabel", "predicted ms a run (lower is better)")
                         .raw("jobs", jobs_json(models, 1))
                         .done());
  std::string data = JsonObject().raw("panels", json_array(panels)).done();
  std::string dir = std::filesystem::temp_directory_path() / "kiln-plot-XXXXXX";
  if (!mkdtemp(dir.data())) throw Failure("kiln records plot: cannot make a temporary directory");
  std::string data_file = dir + "/curves.json", script = dir + "/plot.py";
  std::ofstream(data_file) << data;
  std::ofstream(script) << kPlotScript;
  std::string command =
      fmt::format("/usr/bin/python3 '{}' '{}' '{}' 2>'{}/err'", script, data_file, *o.output, dir);
  int rc = std::system(command.c_str());
  std::string err;
  if (std::ifstream e(dir + "/err"); e) err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove_all(dir);
  if (rc != 0) {
    if (err.find("No module named 'matplotlib'") != std::string::npos)
      throw Failure(
          "kiln records plot: needs matplotlib for /usr/bin/python3 (apt-get install "
          "python3-matplotlib)");
    throw Failure(fmt::format("kiln records plot: python3 failed to draw {}: {}", *o.output, err));
  }
  size_t n = curves.size() + models.size();
  fmt::print("{}: {} job{}, {}{}{} against trials\n", *o.output, n, n == 1 ? "" : "s",
             curves.empty() ? ""
             : gflops       ? "best GFLOP/s"
                            : "best speed",
             !curves.empty() && !models.empty() ? " and " : "",
             models.empty() ? "" : "a model's predicted time");
  return 0;
}

}  // namespace

int run_records(const Options& o) {
  std::unique_ptr<Remote> remote = need_remote(o, "the tuning records are");
  try {
    if (o.subcommand == "jobs") return records_jobs(*remote, o);
    if (o.subcommand == "query") return records_query(*remote, o);
    if (o.subcommand == "best") return records_best(*remote, o);
    if (o.subcommand == "export") return records_export(*remote, o);
    return records_plot(*remote, o);
  } catch (const Failure& f) {
    std::fflush(stdout);
    fmt::print(stderr, "{}\n", f.what());
    return 1;
  }
}

}  // namespace kiln::cli
