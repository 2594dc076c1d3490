// The tuning seam (DESIGN.md section 7a): a Builder compiles a point into an
// artifact, a Runner measures an artifact on a device, and each answers with
// a value or a Failure that says, as values, what went wrong. The tuning loop
// (kiln/tune.h) decides on those values alone; kilnd implements both over its
// compile cache and its agents, a test over a formula.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/ir.h"
#include "kiln/records.h"
#include "kiln/target.h"

namespace kiln::tuner {

using records::Config;

// How a measured kernel failed, as the agents classify it (agent.proto's
// MeasureResult.Error, less OK and ARTIFACT_UNKNOWN, which the fleet resolves).
enum class RunError : uint8_t {
  LoadError,     // the artifact cannot be loaded on the device
  RuntimeCrash,  // the kernel died of a signal
  Timeout,       // killed at the time limit
  WrongAnswer,   // its outputs differ from the reference interpreter's
  OutOfMemory,
  Unsupported,  // the device cannot run this kind of artifact
  KernelError,  // the kernel returned an error status (a run-time check failed)
  BadJob,       // the job did not fit the artifact
};
// The class a record keeps: "LOAD_ERROR", "RUNTIME_CRASH", "TIMEOUT", ...
const char* run_error_name(RunError e);
// The error class of a record that never reached a device: the compiler refused it.
inline constexpr const char* kCompileErrorClass = "COMPILE_ERROR";

// Why a Builder has no artifact for a point, or a Runner no measurement.
struct Failure {
  enum class Kind : uint8_t {
    Compile,      // the compiler refused the point: `stage` says where (none: out of memory)
    Busy,         // the builder or runner is full for now: the same call may succeed later
    Unavailable,  // nothing can be measured (no device, every device lost): the job's trouble
    Stopped,      // the work was stopped (the job cancelled, the service stopping)
    Internal,     // a bug in kiln
  };
  Kind kind = Kind::Internal;
  std::optional<ErrorStage> stage;  // Compile
  std::string message;              // for a person

  // Whether the point itself is at fault (a trial with an error, or a
  // rejected point), as opposed to the service that built or ran it.
  bool points_fault() const { return kind == Kind::Compile; }
  // A point whose schedule breaks a dependence: refused, counted, not a trial.
  bool illegal() const { return kind == Kind::Compile && stage == ErrorStage::Legality; }
};

// A value, or the Failure that stands in for it.
template <typename T>
class Outcome {
 public:
  Outcome(T value) : v_(std::move(value)) {}  // NOLINT: an Outcome is its value
  Outcome(Failure f) : v_(std::move(f)) {}    // NOLINT: or its failure
  bool ok() const { return v_.index() == 0; }
  const T& value() const { return std::get<0>(v_); }
  T& value() { return std::get<0>(v_); }
  const Failure& failure() const { return std::get<1>(v_); }

 private:
  std::variant<T, Failure> v_;
};

// What one point is compiled from: the job's func, parsed and prepared once
// (its params and fixed knobs applied), the point's knob values, and the
// job's compile options (its target: what the Runner's devices run).
struct BuildInput {
  std::shared_ptr<const ir::Func> func;
  Config point;
  CompileOptions options;
};

// What a Builder made of a point.
struct Build {
  std::shared_ptr<const codegen::Artifact> artifact;
  double compile_ms = 0;  // 0 when it came from a cache
  bool cache_hit = false;
  std::string compiler_version;
  std::vector<std::string> notes;  // what the code generator said (kiln/compile.h)
};

class Builder {
 public:
  virtual ~Builder() = default;
  // Safe to call from several threads at once.
  virtual Outcome<Build> build(const BuildInput& input) = 0;
  // How many builds are worth running at once.
  virtual int parallelism() const;
};

// What one artifact is measured with: the func it was compiled from (with
// the point applied: the shapes of its buffers, and the reference a check
// compares with) and the values of its run-time params.
struct RunInput {
  std::shared_ptr<const codegen::Artifact> artifact;
  std::shared_ptr<const ir::Func> func;
  std::map<std::string, int64_t> params;
  // "": any of the runner's devices; else the one of this id (Measurement::device): a
  // re-timing compares its finalists on one machine.
  std::string device;
  // > 0: a kernel whose first round takes longer than this per call is timed no further
  // (Measurement::stopped_early).
  double stop_above_ms = 0;
};

// A kernel measured on a device: its timings, or how it failed there (the
// rounds it ran before a failure found after them, such as a wrong answer,
// are kept).
struct Measurement {
  std::vector<double> round_ms;  // every round's time per call, in order
  double median_ms = 0, min_ms = 0;
  std::optional<RunError> error;
  std::string message;  // what went wrong, for a person
  std::string device;   // which device measured it (an agent's id)
  // The host while the rounds ran: other processes' CPU time per second, in CPUs, and the
  // share of the time some task waited for a CPU. Absent: the device could not say.
  std::optional<double> host_load, cpu_pressure;
  bool stopped_early = false;  // one round, past RunInput::stop_above_ms
};

class Runner {
 public:
  virtual ~Runner() = default;
  // What the runner's devices run, and so what to compile for.
  virtual Outcome<Target> target() = 0;
  // Safe to call from several threads at once; a call may wait for a free device.
  virtual Outcome<Measurement> run(const RunInput& input) = 0;
};

}  // namespace kiln::tuner
