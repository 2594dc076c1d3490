// The tables kilnd replicas share in PostgreSQL beside the records (docs/scale-out.md): who is
// up and which agents each has, which replica drives each tuning job (a lease it renews) and
// the progress the job has streamed, the measurement tasks a job's points wait in until a
// replica with an agent of their key leases one (SELECT ... FOR UPDATE SKIP LOCKED, a lease
// it renews while the task runs), and the compiled artifacts the tasks name by their SHA-256.
// Every lease is timed by the database's clock, never a replica's. Data only: what a replica
// does with it is replica.h's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/pg.h"
#include "kiln/v1/service.pb.h"
#include "status.h"

namespace kiln::server {

// An agent of some replica, as the replicas' directory lists it.
struct SharedAgent {
  std::string replica, agent, key;
  v1::Device device;
  int slots = 1;
};

// A measurement a replica has leased: its point's request (the func as text, the key, the
// settings, the run-time params, the agent when one is named) and its artifact's SHA-256.
struct SharedTask {
  int64_t id = 0, job = 0;
  v1::MeasureRequest request;
  std::string artifact;
};

// A task's end: measured (status ok, the response), or failed where it was measured (the
// status), or cancelled by its job.
struct TaskEnd {
  bool cancelled = false;
  Status status;
  v1::MeasureResponse response;
  double queued_ms = 0;  // from queued until a replica leased it, by the database's clock
};

// A job's lease: which replica drives it, until when, and how it ended.
struct JobLease {
  std::string owner;
  bool live = false;  // its lease has not expired
  bool cancel = false;
  bool ended = false;
  Status status;  // when ended
};

class SharedQueue {
 public:
  // The tables in the database at `url` (made when missing, one opener at a time), for the
  // replica `replica`; leases last `lease`. Throws records::RecordsError when it cannot.
  SharedQueue(const std::string& url, std::string replica, std::chrono::milliseconds lease);

  const std::string& replica() const { return replica_; }
  const std::string& url() const { return url_; }
  // NOTIFY's channels: a task queued (its key the payload), a task ended (its id).
  static constexpr const char* kQueued = "kiln_tasks";
  static constexpr const char* kEnded = "kiln_task_done";
  std::chrono::milliseconds lease() const { return lease_; }

  // The replica joins, at `address`: refused (records::RecordsError) while another replica of
  // its name is up (seen within a lease).
  void join(const std::string& address);
  // The replica is up, serving at `address`, with these agents (its earlier list replaced).
  void heartbeat(const std::string& address, const std::vector<SharedAgent>& agents);
  // The agents of live replicas (seen within a lease) of `key`, or of every key ("").
  std::vector<SharedAgent> agents(const std::string& key = "");
  // The replica is going: its row and its agents' removed.
  void leave();

  // This replica drives `job` from now: true when its lease was free (new, expired or this
  // replica's). The tasks an earlier driver left are removed; its progress is kept.
  bool claim_job(int64_t job);
  // The lease of a job (none: never shared).
  std::optional<JobLease> job(int64_t job);
  // Appends a progress message to a job's stream.
  void post(int64_t job, const v1::TuneProgress& message);
  // The sequence number of the job's last message so far (0: none).
  int64_t last_progress(int64_t job);
  // The job's messages after `after` (a sequence number; 0: from the first), and the last one's.
  std::vector<v1::TuneProgress> progress(int64_t job, int64_t after, int64_t* last);
  // The job ended as `status` says: its lease and its tasks go.
  void end_job(int64_t job, const Status& status);
  // Every job this replica drives is left for another to adopt at once (this one stopping):
  // its lease made older than the grace.
  void release_jobs();
  // Job `job`, driven here, is left for another (or this one, later) to adopt.
  void release_job(int64_t job);
  // Asks the job's driver, wherever it is, to cancel it.
  void request_cancel(int64_t job);
  // Of the jobs this replica runs (`driving`), those whose lease another replica holds now, or
  // that ended (its lease lapsed, in a database outage say, and another adopted it): this
  // replica is to stop driving them.
  std::vector<int64_t> lost_jobs(const std::set<int64_t>& driving);
  // Jobs this replica drives that were asked to cancel.
  std::vector<int64_t> cancel_requests();
  // A job not ended whose lease expired more than a lease ago (its driver died, or stopped and
  // let it go; the grace lets a driver cut off by a database outage renew it first), if any.
  std::optional<int64_t> orphan_job();

  // Keeps an artifact (its wire form) by its SHA-256; one already kept is left.
  void put_artifact(const std::string& sha256, const std::string& bytes);
  std::optional<std::string> artifact(const std::string& sha256);

  // Blobs (a model's file, its weights) published by a replica for the others, in parts.
  void publish_blob(const std::string& sha256, const std::string& file, uint64_t size);
  std::optional<uint64_t> blob_size(const std::string& sha256);
  void fetch_blob(const std::string& sha256, const std::function<void(std::string_view)>& piece);

  // Queues a measurement of `job` (0: outside a job) on the agents of request.key (or its
  // named agent); its id.
  int64_t enqueue(int64_t job, const v1::MeasureRequest& request, const std::string& artifact);
  // The task's end once there is one (the row then removed); none while it waits or runs.
  std::optional<TaskEnd> take_end(int64_t task);
  // Whether the task waits for an agent still (not leased by any replica).
  bool queued(int64_t task);
  // Withdraws a task: cancelled, whoever holds it finds out when renewing its lease.
  void cancel_task(int64_t task);
  // Leases up to free[key] tasks of each key for this replica, the oldest first (those of a
  // named agent only when `agents` has it). A task leased `max_tries` times already (its
  // replicas died with it) ends UNAVAILABLE instead.
  std::vector<SharedTask> lease(const std::map<std::string, int>& free,
                                const std::set<std::string>& agents, int max_tries);
  // Ends a task this replica holds; false when it no longer does (cancelled, or its lease
  // lapsed and another took it).
  bool finish_task(int64_t task, const Status& status, const v1::MeasureResponse& response);
  // Renews the leases of this replica's jobs and of the tasks `held`; the tasks of `held` it
  // no longer holds.
  std::set<int64_t> renew(const std::set<int64_t>& held);

 private:
  std::string url_;
  pg::Pool pool_;
  std::string replica_;
  std::chrono::milliseconds lease_;
};

}  // namespace kiln::server
