// `kiln --server HOST:PORT`: the compile and run steps of check, emit, run and
// compile done by kilnd (docs/server.md) instead of here. The commands choose
// and print exactly as offline; only where the work happens changes, so the
// output is the same either way.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "options.h"
#include "report.h"
#include "selection.h"

namespace kiln::v1 {
class TuneProgress;
class CancelTuneResponse;
class ListJobsRequest;
class ListJobsResponse;
class QueryRecordsRequest;
class QueryRecordsResponse;
class BestConfigResponse;
class ExportRecordsRequest;
class MeasureRequest;
class TuneRequest;
}  // namespace kiln::v1

namespace kiln::cli {

// Knobs' values by workload hash, for a graph's operators.
using WorkloadKnobs = std::map<std::string, ir::Overrides>;

// What `kiln compile` writes, whether kilnd or this process made it.
struct ArtifactBytes {
  std::string code;           // the shared object
  std::string metadata_json;  // out.so.json, without its newline
  std::string triple, cpu, key;
};

// What `kiln compile` writes for a graph (a model), whether kilnd or this process made it.
struct ModelBytes {
  std::string code;           // the shared object
  std::string weights;        // its weights blob
  std::string metadata_json;  // out.so.json, without its newline
  std::string triple, cpu;
  size_t calls = 0, kernels = 0;
  uint64_t arena_bytes = 0, unshared_bytes = 0;
};

// What `kiln emit` prints for a graph: the graph stage, or each call's
// operator (its name and text) at another stage.
struct GraphTexts {
  std::string graph;
  std::vector<std::pair<std::string, std::string>> calls;
};

// A connection to kilnd. Each call sends one func of a file (the whole file's
// text, with the func's name and the compile-time --set values) and throws
// Failure (selection.h) with kilnd's message when the call fails: an operator kilnd
// refuses gets the message the offline command prints.
class Remote {
 public:
  // Reads the token and TLS files the options name: UsageError when one
  // cannot be read.
  explicit Remote(const Options& o);
  ~Remote();
  Remote(const Remote&) = delete;
  Remote& operator=(const Remote&) = delete;

  void check(const Prepared& p);
  // The text `kiln emit --stage` prints for p's func.
  std::string emit(const Prepared& p, Stage stage);
  // `knobs`: values given beside the command line's (compile --best).
  ArtifactBytes compile(const Prepared& p, const ir::Overrides& knobs = {});
  InterpResult run(const Prepared& p);

  // The same for a graph of a file (a model's file goes to kilnd as a blob, uploaded once).
  void check_graph(const GraphJob& j);
  // `workload_knobs`: its operators' knobs by workload (CompileOptions.workload_knobs).
  ModelBytes compile_graph(const GraphJob& j, const WorkloadKnobs& workload_knobs = {});
  GraphTexts emit_graph(const GraphJob& j, Stage stage);
  GraphResult run_graph(const GraphJob& j);

  // kilnd's agents, and a func measured on one of key o.key.
  std::vector<AgentRow> agents();
  Measurement measure(const Prepared& p);
  // A graph (a model, sent as a blob) measured whole on one agent of key o.key.
  Measurement measure_graph(const GraphJob& j, const WorkloadKnobs& workload_knobs = {});

  // Tuning (tuning.cpp prints it): a job's progress, message by message,
  // until it ends (or until `each` returns false: the call is dropped,
  // which cancels a job not started with --detach).
  using ProgressFn = std::function<bool(const v1::TuneProgress&)>;
  void tune(const Prepared& p, const ProgressFn& each);
  // A model or a graph: one job over its tasks.
  void tune_graph(const GraphJob& j, const ProgressFn& each);
  void resume(int64_t job, const ProgressFn& each);
  v1::CancelTuneResponse cancel(int64_t job);
  // The records database.
  v1::ListJobsResponse jobs(const v1::ListJobsRequest& r);
  v1::QueryRecordsResponse query(const v1::QueryRecordsRequest& r);
  // The best record of p's func (its --set params) on o.key, or on the
  // device class whose target is the command line's (this machine's).
  v1::BestConfigResponse best(const Prepared& p);
  v1::BestConfigResponse best(const std::string& workload);
  // The same, or none when the workload has no record that ran on the key.
  std::optional<v1::BestConfigResponse> best_if_any(const std::string& workload);
  void export_records(const v1::ExportRecordsRequest& r,
                      const std::function<void(const std::string& lines)>& each);

 private:
  Measurement measure_request(v1::MeasureRequest request);
  void tune_request(v1::TuneRequest request, const ProgressFn& each);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cli
