// kiln's types on the wire (proto/kiln/v1), both ways, in one place: the
// artifacts, stage times, tuning records, jobs and progress kilnd answers
// with, record filters, and an artifact read back from the compile cache's
// wire form.
#pragma once

#include <vector>

#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/job.h"
#include "kiln/records.h"
#include "kiln/task_scheduler.h"
#include "kiln/tune.h"

namespace google::protobuf {
template <typename T>
class RepeatedPtrField;
}  // namespace google::protobuf

namespace kiln::v1 {
class Artifact;
class Target;
class StageTime;
class TuningRecord;
class RecordFilter;
class TuningJob;
class TuneProgress;
}  // namespace kiln::v1

namespace kiln::server {

// A target as a request names it, its caches included (0 for those not known).
void to_wire(const Target& t, v1::Target* out);

void to_wire(const codegen::Artifact& a, v1::Artifact* out);
// An artifact from its wire form: everything a loader and a launch need. The
// run-time checks come back with their kinds, subjects and messages only (the
// wire does not carry their bounds). Throws std::invalid_argument for a
// launch expression that is not well-formed postfix.
codegen::Artifact artifact_of(const v1::Artifact& a);

void add_times(const std::vector<StageTime>& times,
               google::protobuf::RepeatedPtrField<v1::StageTime>* out);

void to_wire(const records::Record& r, v1::TuningRecord* out);
records::Query query_of(const v1::RecordFilter& f);
// A job as ListJobs shows it: `name` its operator's, `live` whether it runs in
// this kilnd, `records` how many it has.
void to_wire(const records::Job& j, const std::string& name, bool live, int64_t records,
             v1::TuningJob* out);
// A job's progress on `task`, its records kept under `key`, searched by `search`.
void to_wire(const tuner::TuneProgress& p, const tuner::Task& task, const std::string& key,
             const std::string& search, v1::TuneProgress* out);
// A model's job (`job`, of the model's workload `model`): the tasks' progress and the model's.
// With `alternatives` (a func's sketches), the job's best is the fastest task's.
void to_wire(const tuner::ScheduleProgress& p, const std::vector<tuner::ScheduledTask>& tasks,
             int64_t job, const records::Workload& model, const std::string& key,
             const std::string& search, bool alternatives, v1::TuneProgress* out);

}  // namespace kiln::server
