// kilnd's tuning jobs and its tuning-record database (DESIGN.md sections 7
// and 7a, docs/tuning.md): the Tune, ResumeTune, CancelTune, ListJobs,
// QueryRecords, BestConfig and ExportRecords methods of
// proto/kiln/v1/service.proto. A job runs tuner::tune on a thread of its own,
// its points built by the Builder it is given (kilnd's compile cache) and
// measured by the agents of its key (fleet_runner.h), every trial recorded as
// it arrives; the calls that follow it stream its progress. Knows nothing of
// gRPC.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "fleet_runner.h"
#include "kiln/limits.h"
#include "kiln/measure.h"
#include "status.h"

namespace kiln::v1 {
class TuneRequest;
class TuneProgress;
class ResumeTuneRequest;
class CancelTuneRequest;
class CancelTuneResponse;
class ListJobsRequest;
class ListJobsResponse;
class QueryRecordsRequest;
class QueryRecordsResponse;
class BestConfigRequest;
class BestConfigResponse;
class ExportRecordsRequest;
class ExportRecordsChunk;
}  // namespace kiln::v1

namespace kiln::server {

class BlobStore;
class Replica;

class Tuning {
 public:
  // The records database `records_path` names (records::open_store: a postgresql:// URL, a
  // SQLite file, or records::kInMemory: one in memory); points built by `builder` and measured
  // through `runner`, a model's file read from `blobs` (none: models are refused), all outliving
  // this. Throws records::RecordsError when the database cannot be
  // used.
  // With a `replica` (kilnd one of several sharing PostgreSQL, replica.h), its jobs measure
  // through the shared queue, their progress streams from any replica, a cancel works from any,
  // and a job whose replica died is adopted here (adopt()).
  Tuning(tuner::Builder& builder, FleetRunner& runner, const BlobStore* blobs,
         const std::string& records_path, Limits limits, Replica* replica = nullptr);
  ~Tuning();  // stop()
  Tuning(const Tuning&) = delete;
  Tuning& operator=(const Tuning&) = delete;

  // Receives a job's progress; false when the client has gone away.
  using ProgressSink = std::function<bool(const v1::TuneProgress&)>;

  // Starts a job and streams its progress until it ends, or until the client
  // goes away (which cancels the job unless request.detach).
  Status tune(const v1::TuneRequest& request, const ProgressSink& sink, const CallOptions& call);
  Status resume(const v1::ResumeTuneRequest& request, const ProgressSink& sink,
                const CallOptions& call);
  Status cancel(const v1::CancelTuneRequest& request, v1::CancelTuneResponse* response);
  Status list_jobs(const v1::ListJobsRequest& request, v1::ListJobsResponse* response);
  Status query(const v1::QueryRecordsRequest& request, v1::QueryRecordsResponse* response);
  Status best(const v1::BestConfigRequest& request, v1::BestConfigResponse* response,
              const CallOptions& call);
  Status export_records(const v1::ExportRecordsRequest& request,
                        const std::function<bool(const v1::ExportRecordsChunk&)>& sink);

  // kilnd is stopping: every job ends after the measurements in flight, left
  // running in the database, to be resumed; new jobs are refused.
  void stop();

  // With a replica: goes on with job `job`, whose driver's lease expired (it died or stopped),
  // unless another replica took it first; no client follows it here (any replica's ResumeTune
  // does). Throws what starting it throws; the job is then left for another try.
  void adopt(int64_t job);
  // With a replica: job `job`, if it runs here, was asked to cancel at another replica.
  void cancel_here(int64_t job);
  // The jobs running here.
  std::set<int64_t> running_here();
  // With a replica: job `job`, if it runs here, was adopted by another (this one's lease
  // lapsed): it stops here, leaving its records and its lease alone.
  void lost_here(int64_t job);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server
