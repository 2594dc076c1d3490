// kiln's types on the wire (proto/kiln/v1), both ways, in one place: the
// artifacts, stage times and tuning records kilnd answers with, and an
// artifact read back from the compile cache's wire form.
#pragma once

#include <vector>

#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/records.h"

namespace google::protobuf {
template <typename T>
class RepeatedPtrField;
}  // namespace google::protobuf

namespace kiln::v1 {
class Artifact;
class StageTime;
class TuningRecord;
class RecordFilter;
}  // namespace kiln::v1

namespace kiln::server {

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

}  // namespace kiln::server
