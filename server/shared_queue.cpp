// The replicas' shared tables in PostgreSQL (shared_queue.h).
#include "shared_queue.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <utility>

namespace kiln::server {
namespace {

using pg::Connection;
using pg::Params;
using pg::Result;

// Made when missing, in one transaction under an advisory lock: replicas starting at once
// make them once. A change to them is a new statement here that checks what is there.
constexpr const char* kTables = R"sql(
CREATE TABLE IF NOT EXISTS kiln_replicas (
  name TEXT PRIMARY KEY,
  address TEXT NOT NULL,
  started TIMESTAMPTZ NOT NULL DEFAULT now(),
  seen TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS kiln_agents (
  replica TEXT NOT NULL,
  agent TEXT NOT NULL,
  key TEXT NOT NULL,
  device BYTEA NOT NULL,
  slots INTEGER NOT NULL,
  PRIMARY KEY (replica, agent)
);
CREATE TABLE IF NOT EXISTS kiln_job_leases (
  job BIGINT PRIMARY KEY,
  owner TEXT NOT NULL,
  lease_until TIMESTAMPTZ NOT NULL,
  cancel BOOLEAN NOT NULL DEFAULT false,
  ended BOOLEAN NOT NULL DEFAULT false,
  status_code INTEGER NOT NULL DEFAULT 0,
  status_message TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS kiln_job_progress (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job BIGINT NOT NULL,
  message BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS kiln_job_progress_by_job ON kiln_job_progress (job, seq);
CREATE TABLE IF NOT EXISTS kiln_tasks (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job BIGINT NOT NULL,
  key TEXT NOT NULL,
  agent TEXT NOT NULL,
  priority INTEGER NOT NULL,
  request BYTEA NOT NULL,
  artifact TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'leased', 'done')),
  owner TEXT,
  lease_until TIMESTAMPTZ,
  tries INTEGER NOT NULL DEFAULT 0,
  code INTEGER,
  message TEXT,
  response BYTEA,
  created TIMESTAMPTZ NOT NULL DEFAULT now(),
  leased TIMESTAMPTZ,
  done TIMESTAMPTZ
);
CREATE INDEX IF NOT EXISTS kiln_tasks_waiting ON kiln_tasks (key, priority DESC, id)
  WHERE state <> 'done';
CREATE INDEX IF NOT EXISTS kiln_tasks_by_job ON kiln_tasks (job);
CREATE TABLE IF NOT EXISTS kiln_blobs (
  sha256 TEXT PRIMARY KEY,
  size BIGINT NOT NULL,
  parts INTEGER NOT NULL,
  created TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS kiln_blob_parts (
  sha256 TEXT NOT NULL,
  part INTEGER NOT NULL,
  bytes BYTEA NOT NULL,
  PRIMARY KEY (sha256, part)
);
CREATE TABLE IF NOT EXISTS kiln_artifacts (
  sha256 TEXT PRIMARY KEY,
  bytes BYTEA NOT NULL,
  created TIMESTAMPTZ NOT NULL DEFAULT now()
);
)sql";
constexpr int64_t kTablesLock = 0x6b696c6e7175;  // "kilnqu"
constexpr size_t kBlobPart = size_t{4} << 20;    // bytes a row of kiln_blob_parts holds

std::string bytes_of(const google::protobuf::Message& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

// "now() + N ms" for a lease of `ms`, its N the statement's value $n.
std::string lease_end(int n) { return fmt::format("now() + ${} * interval '1 millisecond'", n); }

// An array of BIGINT as a value.
std::string ids_text(const std::set<int64_t>& ids) {
  return fmt::format("{{{}}}", fmt::join(ids, ","));
}

}  // namespace

SharedQueue::SharedQueue(const std::string& url, std::string replica,
                         std::chrono::milliseconds lease)
    : url_(url), pool_(url, pg::PoolOptions{}), replica_(std::move(replica)), lease_(lease) {
  pool_.connect_now([](Connection& db) {
    db.transaction("making the replicas' tables", [&] {
      db.exec(fmt::format("SELECT pg_advisory_xact_lock({})", kTablesLock));
      db.run(kTables, "making the replicas' tables");
    });
  });
}

void SharedQueue::join(const std::string& address) {
  pool_.call([&](Connection& db) {
    Result r =
        db.exec(fmt::format("INSERT INTO kiln_replicas(name, address) VALUES($1, $2) "
                            "ON CONFLICT(name) DO UPDATE SET address = excluded.address, "
                            "started = now(), seen = now() "
                            "WHERE kiln_replicas.seen < now() - $3 * interval '1 millisecond' "
                            "RETURNING name"),
                Params().text(replica_).text(address).integer(lease_.count()));
    if (r.rows() == 1) return;
    Result up = db.exec(
        "SELECT address, extract(epoch FROM now() - seen) FROM kiln_replicas WHERE name = $1",
        Params().text(replica_));
    throw records::RecordsError(fmt::format(
        "replica {} is up already at {} (seen {:.1f} s ago): give this kilnd another --replica "
        "name, or, if that one died, start this one again in {:.0f} s, when its lease has lapsed",
        replica_, up.rows() ? up.text(0, 0) : "?", up.rows() ? up.real(0, 1) : 0.0,
        lease_.count() / 1000.0));
  });
}

void SharedQueue::heartbeat(const std::string& address, const std::vector<SharedAgent>& agents) {
  pool_.call([&](Connection& db) {
    db.transaction("heartbeat", [&] {
      db.exec(
          "INSERT INTO kiln_replicas(name, address) VALUES($1, $2) "
          "ON CONFLICT(name) DO UPDATE SET address = excluded.address, seen = now()",
          Params().text(replica_).text(address));
      db.exec("DELETE FROM kiln_agents WHERE replica = $1", Params().text(replica_));
      for (const SharedAgent& a : agents)
        db.exec(
            "INSERT INTO kiln_agents(replica, agent, key, device, slots) "
            "VALUES($1, $2, $3, $4, $5)",
            Params()
                .text(replica_)
                .text(a.agent)
                .text(a.key)
                .bytes(bytes_of(a.device))
                .integer(a.slots));
    });
  });
}

std::vector<SharedAgent> SharedQueue::agents(const std::string& key) {
  return pool_.call([&](Connection& db) {
    Params p;
    p.integer(lease_.count());
    if (!key.empty()) p.text(key);
    Result r = db.exec(fmt::format("SELECT a.replica, a.agent, a.key, a.device, a.slots "
                                   "FROM kiln_agents a JOIN kiln_replicas r ON r.name = a.replica "
                                   "WHERE r.seen > now() - $1 * interval '1 millisecond'{} "
                                   "ORDER BY a.replica, a.agent",
                                   key.empty() ? "" : " AND a.key = $2"),
                       p);
    std::vector<SharedAgent> out;
    for (int i = 0; i < r.rows(); ++i) {
      SharedAgent a;
      a.replica = r.text(i, 0);
      a.agent = r.text(i, 1);
      a.key = r.text(i, 2);
      a.device.ParseFromString(r.bytes(i, 3));
      a.slots = static_cast<int>(r.integer(i, 4));
      out.push_back(std::move(a));
    }
    return out;
  });
}

void SharedQueue::leave() {
  pool_.call([&](Connection& db) {
    db.exec("DELETE FROM kiln_agents WHERE replica = $1", Params().text(replica_));
    db.exec("DELETE FROM kiln_replicas WHERE name = $1", Params().text(replica_));
  });
}

bool SharedQueue::claim_job(int64_t job) {
  return pool_.call([&](Connection& db) {
    // A cancel asked of an orphan stays asked: its adopter cancels it.
    Result r =
        db.exec(fmt::format("INSERT INTO kiln_job_leases(job, owner, lease_until) "
                            "VALUES($1, $2, {}) "
                            "ON CONFLICT(job) DO UPDATE SET owner = excluded.owner, "
                            "lease_until = excluded.lease_until, "
                            "cancel = kiln_job_leases.cancel AND NOT kiln_job_leases.ended, "
                            "ended = false, status_code = 0, status_message = '' "
                            "WHERE kiln_job_leases.owner = excluded.owner "
                            "OR kiln_job_leases.lease_until < now() OR kiln_job_leases.ended "
                            "RETURNING job",
                            lease_end(3)),
                Params().integer(job).text(replica_).integer(lease_.count()));
    if (r.rows() == 0) return false;
    db.exec("DELETE FROM kiln_tasks WHERE job = $1", Params().integer(job));
    return true;
  });
}

std::optional<JobLease> SharedQueue::job(int64_t job) {
  return pool_.call([&](Connection& db) -> std::optional<JobLease> {
    Result r = db.exec(
        "SELECT owner, lease_until > now(), cancel, ended, status_code, status_message "
        "FROM kiln_job_leases WHERE job = $1",
        Params().integer(job));
    if (r.rows() == 0) return std::nullopt;
    JobLease l;
    l.owner = r.text(0, 0);
    l.live = r.flag(0, 1);
    l.cancel = r.flag(0, 2);
    l.ended = r.flag(0, 3);
    l.status = {static_cast<Code>(r.integer(0, 4)), r.text(0, 5)};
    return l;
  });
}

void SharedQueue::post(int64_t job, const v1::TuneProgress& message) {
  pool_.call([&](Connection& db) {
    db.exec("INSERT INTO kiln_job_progress(job, message) VALUES($1, $2)",
            Params().integer(job).bytes(bytes_of(message)));
  });
}

int64_t SharedQueue::last_progress(int64_t job) {
  return pool_.call([&](Connection& db) {
    Result r = db.exec("SELECT coalesce(max(seq), 0) FROM kiln_job_progress WHERE job = $1",
                       Params().integer(job));
    return r.integer(0, 0);
  });
}

std::vector<v1::TuneProgress> SharedQueue::progress(int64_t job, int64_t after, int64_t* last) {
  return pool_.call([&](Connection& db) {
    Result r = db.exec(
        "SELECT seq, message FROM kiln_job_progress WHERE job = $1 AND seq > $2 "
        "ORDER BY seq LIMIT 1000",
        Params().integer(job).integer(after));
    std::vector<v1::TuneProgress> out;
    *last = after;
    for (int i = 0; i < r.rows(); ++i) {
      out.emplace_back().ParseFromString(r.bytes(i, 1));
      *last = r.integer(i, 0);
    }
    return out;
  });
}

void SharedQueue::end_job(int64_t job, const Status& status) {
  pool_.call([&](Connection& db) {
    db.exec(
        "UPDATE kiln_job_leases SET ended = true, status_code = $3, status_message = $4, "
        "lease_until = now() WHERE job = $1 AND owner = $2",
        Params()
            .integer(job)
            .text(replica_)
            .integer(static_cast<int>(status.code))
            .text(status.message));
    db.exec("DELETE FROM kiln_tasks WHERE job = $1", Params().integer(job));
    // Its last message stays, for whoever follows the job after its end.
    db.exec(
        "DELETE FROM kiln_job_progress WHERE job = $1 AND seq < "
        "(SELECT max(seq) FROM kiln_job_progress WHERE job = $1)",
        Params().integer(job));
  });
}

void SharedQueue::release_jobs() {
  pool_.call([&](Connection& db) {
    db.exec(
        "UPDATE kiln_job_leases SET lease_until = now() - 2 * $2 * interval '1 millisecond' "
        "WHERE owner = $1 AND NOT ended",
        Params().text(replica_).integer(lease_.count()));
  });
}

void SharedQueue::release_job(int64_t job) {
  pool_.call([&](Connection& db) {
    db.exec(
        "UPDATE kiln_job_leases SET lease_until = now() - 2 * $3 * interval '1 millisecond' "
        "WHERE job = $1 AND owner = $2 AND NOT ended",
        Params().integer(job).text(replica_).integer(lease_.count()));
  });
}

void SharedQueue::request_cancel(int64_t job) {
  pool_.call([&](Connection& db) {
    db.exec("UPDATE kiln_job_leases SET cancel = true WHERE job = $1 AND NOT ended",
            Params().integer(job));
  });
}

std::vector<int64_t> SharedQueue::lost_jobs(const std::set<int64_t>& driving) {
  if (driving.empty()) return {};
  return pool_.call([&](Connection& db) {
    Result r = db.exec(
        "SELECT job FROM kiln_job_leases WHERE job = ANY($1::bigint[]) "
        "AND (owner <> $2 OR ended) ORDER BY job",
        Params().text(ids_text(driving)).text(replica_));
    std::vector<int64_t> out;
    for (int i = 0; i < r.rows(); ++i) out.push_back(r.integer(i, 0));
    return out;
  });
}

std::vector<int64_t> SharedQueue::cancel_requests() {
  return pool_.call([&](Connection& db) {
    Result r = db.exec(
        "SELECT job FROM kiln_job_leases WHERE owner = $1 AND cancel AND NOT ended ORDER BY job",
        Params().text(replica_));
    std::vector<int64_t> out;
    for (int i = 0; i < r.rows(); ++i) out.push_back(r.integer(i, 0));
    return out;
  });
}

std::optional<int64_t> SharedQueue::orphan_job() {
  return pool_.call([&](Connection& db) -> std::optional<int64_t> {
    Result r = db.exec(
        "SELECT job FROM kiln_job_leases WHERE NOT ended "
        "AND lease_until < now() - $1 * interval '1 millisecond' ORDER BY job LIMIT 1",
        Params().integer(lease_.count()));
    if (r.rows() == 0) return std::nullopt;
    return r.integer(0, 0);
  });
}

void SharedQueue::put_artifact(const std::string& sha256, const std::string& bytes) {
  pool_.call([&](Connection& db) {
    db.exec("INSERT INTO kiln_artifacts(sha256, bytes) VALUES($1, $2) ON CONFLICT DO NOTHING",
            Params().text(sha256).bytes(bytes));
  });
}

std::optional<std::string> SharedQueue::artifact(const std::string& sha256) {
  return pool_.call([&](Connection& db) -> std::optional<std::string> {
    Result r = db.exec("SELECT bytes FROM kiln_artifacts WHERE sha256 = $1", Params().text(sha256));
    if (r.rows() == 0) return std::nullopt;
    return r.bytes(0, 0);
  });
}

void SharedQueue::publish_blob(const std::string& sha256, const std::string& file, uint64_t size) {
  pool_.call([&](Connection& db) {
    if (db.exec("SELECT 1 FROM kiln_blobs WHERE sha256 = $1", Params().text(sha256)).rows() > 0)
      return;
    std::ifstream in(file, std::ios::binary);
    if (!in) throw records::RecordsError(fmt::format("cannot read blob {} to publish it", file));
    // Its parts and then its row, in one transaction: a blob is listed only once whole.
    db.transaction("publishing a blob", [&] {
      std::string piece(kBlobPart, '\0');
      int part = 0;
      for (uint64_t left = size; left > 0; ++part) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(left, kBlobPart));
        if (!in.read(piece.data(), static_cast<std::streamsize>(n)))
          throw records::RecordsError(fmt::format("blob {} is shorter than {} bytes", file, size));
        db.exec(
            "INSERT INTO kiln_blob_parts(sha256, part, bytes) VALUES($1, $2, $3) "
            "ON CONFLICT DO NOTHING",
            Params().text(sha256).integer(part).bytes(piece.substr(0, n)));
        left -= n;
      }
      db.exec(
          "INSERT INTO kiln_blobs(sha256, size, parts) VALUES($1, $2, $3) ON CONFLICT DO NOTHING",
          Params().text(sha256).integer(static_cast<int64_t>(size)).integer(part));
    });
  });
}

std::optional<uint64_t> SharedQueue::blob_size(const std::string& sha256) {
  return pool_.call([&](Connection& db) -> std::optional<uint64_t> {
    Result r = db.exec("SELECT size FROM kiln_blobs WHERE sha256 = $1", Params().text(sha256));
    if (r.rows() == 0) return std::nullopt;
    return static_cast<uint64_t>(r.integer(0, 0));
  });
}

void SharedQueue::fetch_blob(const std::string& sha256,
                             const std::function<void(std::string_view)>& piece) {
  int parts = pool_.call([&](Connection& db) {
    Result r = db.exec("SELECT parts FROM kiln_blobs WHERE sha256 = $1", Params().text(sha256));
    return r.rows() == 0 ? -1 : static_cast<int>(r.integer(0, 0));
  });
  if (parts < 0)
    throw records::RecordsError(fmt::format("blob {} was not published", sha256.substr(0, 12)));
  for (int part = 0; part < parts; ++part) {
    std::string bytes = pool_.call([&](Connection& db) {
      Result r = db.exec("SELECT bytes FROM kiln_blob_parts WHERE sha256 = $1 AND part = $2",
                         Params().text(sha256).integer(part));
      if (r.rows() == 0)
        throw records::RecordsError(
            fmt::format("blob {}: part {} is missing", sha256.substr(0, 12), part));
      return r.bytes(0, 0);
    });
    piece(bytes);
  }
}

int64_t SharedQueue::enqueue(int64_t job, const v1::MeasureRequest& request,
                             const std::string& artifact) {
  return pool_.call([&](Connection& db) {
    return db
        .exec(
            "WITH t AS (INSERT INTO kiln_tasks(job, key, agent, priority, request, artifact) "
            "VALUES($1, $2, $3, $4, $5, $6) RETURNING id) "
            "SELECT id, pg_notify('kiln_tasks', $2) FROM t",
            Params()
                .integer(job)
                .text(request.key())
                .text(request.agent())
                .integer(request.priority())
                .bytes(bytes_of(request))
                .text(artifact))
        .integer(0, 0);
  });
}

std::optional<TaskEnd> SharedQueue::take_end(int64_t task) {
  return pool_.call([&](Connection& db) -> std::optional<TaskEnd> {
    Result r = db.exec(
        "DELETE FROM kiln_tasks WHERE id = $1 AND state = 'done' "
        "RETURNING code, message, response, extract(epoch FROM leased - created) * 1000",
        Params().integer(task));
    if (r.rows() == 0) {
      // Gone without an end: withdrawn (its job cancelled, or adopted by another driver).
      if (db.exec("SELECT 1 FROM kiln_tasks WHERE id = $1", Params().integer(task)).rows() == 0)
        return TaskEnd{true, {Code::Cancelled, "the measurement was withdrawn"}, {}};
      return std::nullopt;
    }
    TaskEnd end;
    end.status = {static_cast<Code>(r.integer(0, 0)), r.text(0, 1)};
    end.response.ParseFromString(r.bytes(0, 2));
    end.queued_ms = r.is_null(0, 3) ? 0 : r.real(0, 3);
    return end;
  });
}

bool SharedQueue::queued(int64_t task) {
  return pool_.call([&](Connection& db) {
    return db.exec("SELECT 1 FROM kiln_tasks WHERE id = $1 AND state = 'queued'",
                   Params().integer(task))
               .rows() == 1;
  });
}

void SharedQueue::cancel_task(int64_t task) {
  pool_.call([&](Connection& db) {
    db.exec("DELETE FROM kiln_tasks WHERE id = $1", Params().integer(task));
  });
}

std::vector<SharedTask> SharedQueue::lease(const std::map<std::string, int>& free,
                                           const std::set<std::string>& agents, int max_tries) {
  std::vector<SharedTask> out;
  std::vector<int64_t> worn;  // leased too often: ended, not measured
  pool_.call([&](Connection& db) {
    out.clear();
    worn.clear();
    for (const auto& [key, n] : free) {
      if (n <= 0) continue;
      Result r = db.exec(
          fmt::format("WITH picked AS (SELECT id FROM kiln_tasks WHERE key = $1 "
                      "AND (state = 'queued' OR (state = 'leased' AND lease_until < now())) "
                      "AND (agent = '' OR agent = ANY($2::text[])) "
                      "ORDER BY priority DESC, id LIMIT $3 FOR UPDATE SKIP LOCKED) "
                      "UPDATE kiln_tasks t SET state = 'leased', owner = $4, lease_until = {}, "
                      "tries = t.tries + 1, leased = now() FROM picked WHERE t.id = picked.id "
                      "RETURNING t.id, t.job, t.request, t.artifact, t.tries",
                      lease_end(5)),
          Params()
              .text(key)
              .texts(std::vector<std::string>(agents.begin(), agents.end()))
              .integer(n)
              .text(replica_)
              .integer(lease_.count()));
      for (int i = 0; i < r.rows(); ++i) {
        if (r.integer(i, 4) > max_tries) {
          worn.push_back(r.integer(i, 0));
          continue;
        }
        SharedTask t;
        t.id = r.integer(i, 0);
        t.job = r.integer(i, 1);
        t.request.ParseFromString(r.bytes(i, 2));
        t.artifact = r.text(i, 3);
        out.push_back(std::move(t));
      }
    }
  });
  for (int64_t id : worn)
    finish_task(id,
                {Code::Unavailable,
                 fmt::format("the measurement was leased {} times by replicas that went away "
                             "before it ended",
                             max_tries)},
                {});
  return out;
}

bool SharedQueue::finish_task(int64_t task, const Status& status,
                              const v1::MeasureResponse& response) {
  return pool_.call([&](Connection& db) {
    return db.exec(
                 "WITH t AS (UPDATE kiln_tasks SET state = 'done', code = $3, message = $4, "
                 "response = $5, "
                 "done = now() WHERE id = $1 AND owner = $2 AND state = 'leased' RETURNING id) "
                 "SELECT pg_notify('kiln_task_done', id::text) FROM t",
                 Params()
                     .integer(task)
                     .text(replica_)
                     .integer(static_cast<int>(status.code))
                     .text(status.message)
                     .bytes(bytes_of(response)))
               .rows() == 1;
  });
}

std::set<int64_t> SharedQueue::renew(const std::set<int64_t>& held) {
  return pool_.call([&](Connection& db) {
    db.exec(
        fmt::format("UPDATE kiln_job_leases SET lease_until = {} WHERE owner = $1 AND NOT ended",
                    lease_end(2)),
        Params().text(replica_).integer(lease_.count()));
    db.exec("UPDATE kiln_replicas SET seen = now() WHERE name = $1", Params().text(replica_));
    std::set<int64_t> lost = held;
    if (held.empty()) return lost;
    Result r = db.exec(fmt::format("UPDATE kiln_tasks SET lease_until = {} WHERE owner = $1 "
                                   "AND state = 'leased' AND id = ANY($3::bigint[]) RETURNING id",
                                   lease_end(2)),
                       Params().text(replica_).integer(lease_.count()).text(ids_text(held)));
    for (int i = 0; i < r.rows(); ++i) lost.erase(r.integer(i, 0));
    return lost;
  });
}

}  // namespace kiln::server
