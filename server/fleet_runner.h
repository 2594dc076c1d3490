// Measurement on kilnd's agents (fleet.h): the device of a key and what to
// compile for it, the agent's job for an artifact, the reference check. The
// Measure method and every tuning job measure through it; a job sees it as
// its Runner (kiln/measure.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "fleet.h"
#include "kiln/codegen.h"
#include "kiln/ir.h"
#include "kiln/measure.h"
#include "kiln/target.h"
#include "kiln/v1/agent.pb.h"
#include "status.h"

namespace kiln::v1 {
class MeasureResponse;
}

namespace kiln::graph {
struct ModelArtifact;
}

namespace kiln::server {

// How one artifact is measured: on which device class, and how.
struct MeasureSpec {
  std::string key;
  std::optional<int> gpu;  // its agents' GPU of this index, else their CPU
  v1::MeasureSettings settings;
  uint64_t seed = 0;  // of the inputs
  int priority = 0;
  bool check = false;           // against the reference interpreter, here
  bool return_outputs = false;  // the outputs' data in the response
  std::string agent;            // "": any agent of the key; else this one (FleetJob::agent)
};

// The spec of a request that names a key, maybe a GPU, settings, a seed and a
// priority, as MeasureRequest and TuneRequest do (neither checks nor returns outputs).
template <typename Request>
MeasureSpec measure_spec(const Request& r) {
  MeasureSpec m;
  m.key = r.key();
  if (r.has_gpu()) m.gpu = r.gpu();
  m.settings = r.settings();
  m.seed = r.seed();
  m.priority = r.priority();
  return m;
}

// What a tuning job learns from a measurement an agent answered: its rounds and statistics, or
// how the kernel failed there; a measurement withdrawn as kilnd stopped is the Failure Stopped.
tuner::Outcome<tuner::Measurement> measurement_of(const v1::MeasureResponse& response);

class FleetRunner {
 public:
  // A job's time and memory limits when its settings give none.
  FleetRunner(int64_t timeout_ms, uint64_t memory_bytes);
  // The agents (none: every measurement is UNAVAILABLE); they outlive this.
  void set_fleet(Fleet* fleet);

  // The device of a connected agent of `key`, waiting a while for one; refuses
  // UNAVAILABLE, naming the keys there are, when none comes.
  v1::Device device(const std::string& key, const CallOptions& call) const;
  // What `device` runs: its CPU, or its GPU `gpu` (FAILED_PRECONDITION when it has none such).
  static Target target(const v1::Device& device, const std::string& key, std::optional<int> gpu);

  // Measures `artifact`, compiled from `f`, at the params' values, as `spec`
  // says; fills the response's agent_id, device, tries, result, median_ms,
  // min_ms and check. Not ok: no agent could measure it (UNAVAILABLE). Throws
  // what request.h's status_of turns into a status: the call's deadline or
  // cancel, a launch the params do not allow, inputs too large to make.
  Status measure(const MeasureSpec& spec, const codegen::Artifact& artifact, const ir::Func& f,
                 const std::map<std::string, int64_t>& params, const CallOptions& call,
                 v1::MeasureResponse* response) const;

  // Measures a whole model's artifact (kind "model", its weights in the job) on an agent of
  // spec.key, its inputs made there; fills the response as measure() does, with no check.
  Status measure_model(const MeasureSpec& spec, const graph::ModelArtifact& model,
                       const CallOptions& call, v1::MeasureResponse* response) const;

  // A tuning job's Runner: the agents of spec.key; `stopping` stops what waits.
  std::unique_ptr<tuner::Runner> runner(MeasureSpec spec, std::function<bool()> stopping);

  // The measurements of `key` run on this machine (kilnd's own agent): each holds what `quiet`
  // gives (the admission's Quiet: no compile beside it) from before it is queued until its
  // result is in.
  using QuietFn = std::function<std::shared_ptr<void>(const CallOptions&)>;
  void set_quiet(std::string key, QuietFn quiet);

 private:
  // Submits `job` (quiet when its key is kilnd's own agent's), waits for it, and fills the
  // response's agent, device, tries, result and round statistics.
  Status run_job(const MeasureSpec& spec, FleetJob job, const CallOptions& call,
                 v1::MeasureResponse* response) const;

  Fleet* fleet_ = nullptr;
  std::string quiet_key_;
  QuietFn quiet_;
  int64_t timeout_ms_;
  uint64_t memory_bytes_;
};

}  // namespace kiln::server
