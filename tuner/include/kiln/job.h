// What a tuning job tunes, prepared once from the parsed func (DESIGN.md
// section 7a): the workload it is recorded under, the func with the values
// the request set, the space of the knobs left free, the values of the
// run-time params it is measured at, and a call's flops. Warm start from the
// records and the Iter features of a point are computed here too, from the
// prepared func, never from text.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "kiln/autosched.h"
#include "kiln/compile.h"
#include "kiln/ir.h"
#include "kiln/limits.h"
#include "kiln/records.h"
#include "kiln/search.h"
#include "kiln/space.h"

namespace kiln::tuner {

struct TuneSettings;

// A func that cannot be tuned as asked (no knobs, a knob constraint on a
// run-time param, an empty space): what is wrong, for the request's author.
class TaskError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct Task {
  records::Workload workload;  // the func with its params' values, knobs at their defaults
  std::shared_ptr<const ir::Func> func;   // with every value the request set, knobs included
  std::shared_ptr<const Space> space;     // of the knobs not set
  Config fixed;                           // the knobs the request set
  std::map<std::string, int64_t> params;  // every param's value when a point is measured
  int64_t flops = 0;                      // a call's floating-point operations; 0: unknown
  // For a func without a schedule: the schedule kiln sketched for it (kiln/autosched.h, the
  // body of a schedule block), now its own, and the sketch's name ("tiled"); "" for a func
  // that came with one.
  std::string sketch{};
  std::string sketch_name{};
};

// The workload of `base` with `set` applied: its params' values (compile-time
// ones in the definition), its knobs at their defaults. Names in `set` that
// are knobs are left out of it. Throws what ir::apply_overrides throws.
records::Workload workload_of(const ir::Func& base, const ir::Overrides& set);

// The tasks of a func with neither a schedule nor knobs: one per sketch kiln derives from its
// algorithm at the shape `set` gives for `machine` (kiln/autosched.h: a GPU's for a job on a
// GPU), in their order, each prepared as prepare_task prepares the func with that sketch as its
// schedule; a job chooses among them (kiln/task_scheduler.h, alternatives). Throws TaskError
// when kiln finds no sketch (or for `base` with a schedule), and what prepare_task throws.
std::vector<Task> prepare_sketch_tasks(const ir::Func& base, const ir::Overrides& set,
                                       const std::map<std::string, int64_t>& runtime,
                                       const Limits& limits,
                                       autosched::Machine machine = autosched::Machine::Cpu);

// What the records of a func are kept under: with a schedule or knobs, its workload with `set`
// applied; without, each sketch's for `machine` (the sketch's schedule and name beside it), in
// the order of prepare_sketch_tasks; none when kiln finds no sketch. Throws what
// ir::apply_overrides throws.
struct TunedWorkload {
  records::Workload workload;
  std::string sketch{}, sketch_name{};
};
std::vector<TunedWorkload> tuned_workloads(const ir::Func& base, const ir::Overrides& set,
                                           const Limits& limits,
                                           autosched::Machine machine = autosched::Machine::Cpu);

// Prepares `base` (as the frontend made it) for tuning with `set` (params'
// and knobs' values) and the run-time params' values `runtime` (those not
// given take their defaults). A func without a schedule (or knobs) is given
// the first sketch kiln derives from its algorithm (kiln/autosched.h; a job
// that chooses among them takes prepare_sketch_tasks). Throws TaskError for a
// func with a schedule but no knobs, one with nothing to sketch, or an empty
// space; CompileError for bad values.
Task prepare_task(const ir::Func& base, const ir::Overrides& set,
                  const std::map<std::string, int64_t>& runtime, const Limits& limits);

// A model's task (kiln/tasks.h): prepare_task's, with no values set; an operator with no
// knobs is a task of one point, its schedule as it is, measured once.
Task prepare_model_task(const ir::Func& op, const Limits& limits);

// The Iter features (kiln/cost_model.h) of a point of `task`: its loops after
// the passes, compiled with `options` (the job's target and opt level). A
// point that does not compile gets zeros: it is refused when it is built.
FeatureFn iter_features_of(const Task& task, const CompileOptions& options);

// Transfer: the records of the same operator (by name) at other shapes on
// `key`, each relative to the best of its workload, as settings' warm start.
void warm_start(records::RecordStore& store, const records::Workload& workload,
                const std::string& key, TuneSettings& settings);

// Zero-trial start: the points a new job of `task` measures first, into settings.first_points
// (and first_from, first_shape). First the best record on `key` of each of the `nearest` shapes of
// the same operator (by name) nearest the task's -- its own workload first, when another job
// (another model's, a func's) measured it -- then the task's defaults as compile() gives them for
// `options`' target. Shapes are compared by their params' values: the sum over the params of
// |log2(a / b)|; a workload with other params, or with no shape known, is no neighbour.
void first_start(records::RecordStore& store, const Task& task, const std::string& key,
                 const CompileOptions& options, TuneSettings& settings, int nearest = 3);

// How far apart two shapes are (first_start's measure), from their text (Workload::shape);
// nullopt when they have different params or either is not known. Exposed for its test.
std::optional<double> shape_distance(const std::string& a, const std::string& b);

}  // namespace kiln::tuner
