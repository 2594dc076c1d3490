// The tuning-record database (DESIGN.md section 7): every measurement the
// tuner makes -- good, failed or timed out -- is a record, committed the
// moment it arrives, so a crash loses at most what is in flight. RecordStore
// is the interface; SQLite is the embedded default (open_sqlite_store), and
// PostgreSQL the store several kilnd replicas share (open_postgres_store); open_store
// chooses by the name it is given.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::records {

// An operator as it is tuned: its content address, name and definition.
struct Workload {
  std::string hash;        // SHA-256 (hex) of `definition`
  std::string name;        // the func's name
  std::string definition;  // the canonical text the hash is of
  // Its params' values, as a Config's text ("C=64,H=56,..."): what makes one shape of an
  // operator nearer another. "" when not known (a workload kept by an older kiln).
  std::string shape{};
};

// A device class agents register under, and what kernels for it are compiled for.
struct Target {
  std::string key;  // "x86-avx512", "rk3399"
  std::string triple, cpu, features;
};

enum class JobState { Running, Done, Cancelled, Failed };
const char* job_state_name(JobState s);  // "running", "done", "cancelled", "failed"

struct Job {
  int64_t id = 0;
  std::string workload;  // its hash
  std::string key;
  std::string settings;  // the job's settings as the tuner wrote them (JSON)
  JobState state = JobState::Running;
  int64_t started_unix_ms = 0;
  int64_t finished_unix_ms = 0;  // 0 while running
};

// A knob assignment, by name. Its text form is "NAME=VALUE,NAME=VALUE" in
// name order: the same configuration always has the same text.
using Config = std::map<std::string, int64_t>;
std::string config_text(const Config& c);
// The text form back; throws RecordsError for text that is not one.
Config parse_config(const std::string& text);

// One point measured -- or that failed to be -- as the tuner learns from it.
struct Trial {
  Config config;
  std::vector<double> round_ms;  // every round's time per call, in order
  double median_ms = 0;          // of round_ms; 0 when there is none
  std::string error;             // "" when it ran; else the error class: TIMEOUT, WRONG_ANSWER, ...
  std::string message;           // what went wrong, for a person
  double compile_ms = 0;
  int64_t flops = 0;  // per call, 0 when unknown
  std::string compiler_version, agent;
  // The host while the rounds ran, as the agent saw it (kiln/measure.h's Measurement); absent
  // when the agent could not say.
  std::optional<double> host_load, cpu_pressure;
  int attempts = 1;    // measurements taken of the point: more than 1 when one was too noisy
  bool noisy = false;  // the measurement kept was still past the job's noise limits
  // Timed for one round only: far slower than the job's best so far (stop_slower_than).
  bool stopped_early = false;
};

// A trial as the store keeps it: of which job, workload and device class, and when.
struct Record : Trial {
  int64_t id = 0;
  int64_t job = 0;  // 0: measured outside a tuning job
  std::string workload, key;
  int64_t unix_ms = 0;  // when the measurement arrived; 0: now
  // The re-timing among the job's finalists (kiln/tune.h): every round, interleaved with the
  // others', and their median. Absent: never re-timed.
  std::vector<double> retime_round_ms;
  std::optional<double> retimed_ms;
  // What the record's speed is taken to be: the re-timed median when there is one.
  double effective_ms() const { return retimed_ms ? *retimed_ms : median_ms; }
};

// Whether a comes before b in Query::Order::Fastest: one that ran before one that did not, a
// re-timed one before one never re-timed, then the faster.
bool ranks_before(const Record& a, const Record& b);

// Which records, in which order, which page.
struct Query {
  std::optional<std::string> workload, key;
  std::optional<std::string> name;  // the workloads of an operator, by its name
  std::optional<int64_t> job;
  std::optional<int64_t> since_unix_ms, until_unix_ms;  // [since, until)
  std::optional<std::string> error;                     // "" for the records that ran
  // Fastest: those that ran first; among them those re-timed at their job's end first (a
  // re-timing compared them with their rivals under the same conditions; a single measurement
  // may have been lucky), by re-timed median, then the others by median. Median: those that
  // ran first, by the median of their own rounds alone.
  enum class Order { Arrival, Fastest, Median } order = Order::Arrival;
  int64_t after = 0;  // paging: the records after this many (an offset)
  int64_t limit = 100;
};

// What went wrong with the database: the file, and what and where.
class RecordsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The database cannot be reached now (a PostgreSQL server restarting or gone): nothing was
// written by the call, and the same call may succeed later.
class RecordsUnavailable : public RecordsError {
 public:
  using RecordsError::RecordsError;
};

class RecordStore {
 public:
  virtual ~RecordStore() = default;

  // Idempotent: a workload or target already there is kept as it is (a workload without a
  // shape gains w's).
  virtual void put_workload(const Workload& w) = 0;
  virtual void put_target(const Target& t) = 0;
  virtual std::optional<Workload> workload(const std::string& hash) = 0;
  // The workloads of an operator (every shape of it), by its name, in the order they came.
  virtual std::vector<Workload> workloads(const std::string& name) = 0;
  virtual std::vector<Target> targets() = 0;  // by key

  // A new job (its id), running; its workload must be there.
  virtual int64_t start_job(const Job& j) = 0;
  virtual void finish_job(int64_t id, JobState state) = 0;
  virtual std::optional<Job> job(int64_t id) = 0;
  // Jobs of a workload (every job when empty), newest first.
  virtual std::vector<Job> jobs(const std::string& workload = "") = 0;

  // Adds a record and commits it before returning. A job measures a
  // configuration once: a second record for the same job and configuration
  // is not added, and the first one's id is returned with `added` false.
  struct Added {
    int64_t id;
    bool added;
  };
  virtual Added add_record(const Record& r) = 0;
  // Keeps the re-timing of record `id` (Record::retime_round_ms, retimed_ms), replacing any
  // earlier one.
  virtual void set_retime(int64_t id, const std::vector<double>& round_ms, double median_ms) = 0;
  virtual std::vector<Record> query(const Query& q) = 0;
  virtual int64_t count(const Query& q) = 0;  // ignoring after and limit
  // The fastest record that ran for a workload on a device class (Order::Fastest's first).
  virtual std::optional<Record> best(const std::string& workload, const std::string& key) = 0;
};

// The SQLite store in the file `path` (kInMemory: one in memory, gone when
// closed), created when missing, its schema
// brought up to date. Throws RecordsError, naming the file, when it cannot be
// opened, is not a kiln records database, is damaged or truncated, or comes
// from a newer kiln; such a file is left exactly as it was.
std::unique_ptr<RecordStore> open_sqlite_store(const std::string& path);
inline constexpr const char* kInMemory = ":memory:";

// How a PostgreSQL store uses its server.
struct PostgresOptions {
  int connections = 4;  // at most this many open at once, each used by one call at a time
  // A call that finds its connection lost (the server restarting, a network cut) connects again
  // and is tried again, waiting longer each time (50 ms doubling to 2 s), for this long in all;
  // then it throws RecordsUnavailable.
  std::chrono::milliseconds wait_for_server{60'000};
};

// The PostgreSQL store at `url` (postgresql://USER@HOST:PORT/DB, or libpq's "KEY=VALUE ..."
// form), its schema (the same tables, columns and versions as the SQLite store's, in
// PostgreSQL's types) created or brought up to date when opened, by one opener at a time.
// Throws RecordsError, naming the database (never its password), when the server cannot be
// reached, the database is not a kiln records database, or comes from a newer kiln.
std::unique_ptr<RecordStore> open_postgres_store(const std::string& url,
                                                 const PostgresOptions& options = {});
// Whether `where` names a PostgreSQL database: postgresql:// or postgres://.
bool is_postgres_url(const std::string& where);
// The store `where` names: a PostgreSQL database by its URL, else a SQLite file.
std::unique_ptr<RecordStore> open_store(const std::string& where);
// `where` as it may be shown: a URL without its password.
std::string redacted(const std::string& where);
// The schema version this kiln writes (the same in both stores).
int schema_version();

// One record as a JSON line (docs/records.md), without the newline.
std::string record_json(const Record& r);

}  // namespace kiln::records
