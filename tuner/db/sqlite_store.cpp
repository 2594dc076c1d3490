// The SQLite record store (kiln/records.h): one file, WAL, synchronous=FULL,
// a versioned schema brought up to date when opened, and a file that is not a
// healthy kiln records database refused before anything is written to it.
#include <fmt/format.h>
#include <sqlite3.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <variant>

#include "kiln/records.h"
#include "store_sql.h"

namespace kiln::records {
namespace {

// Schema versions, each the statements that lead from the one before. A new
// version is a new entry; an entry is never changed once released.
const char* const kMigrations[] = {
    // 1: workloads, targets, jobs, records.
    R"sql(
CREATE TABLE workloads (
  hash TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  definition TEXT NOT NULL,
  created_unix_ms INTEGER NOT NULL
);
CREATE TABLE targets (
  key TEXT PRIMARY KEY,
  triple TEXT NOT NULL,
  cpu TEXT NOT NULL,
  features TEXT NOT NULL,
  first_seen_unix_ms INTEGER NOT NULL
);
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  workload TEXT NOT NULL REFERENCES workloads(hash),
  key TEXT NOT NULL,
  settings TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'done', 'cancelled', 'failed')),
  started_unix_ms INTEGER NOT NULL,
  finished_unix_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE records (
  id INTEGER PRIMARY KEY,
  job INTEGER REFERENCES jobs(id),
  workload TEXT NOT NULL REFERENCES workloads(hash),
  key TEXT NOT NULL,
  config TEXT NOT NULL,
  round_ms BLOB NOT NULL,
  median_ms REAL NOT NULL,
  error TEXT NOT NULL,
  message TEXT NOT NULL,
  compile_ms REAL NOT NULL,
  flops INTEGER NOT NULL,
  compiler_version TEXT NOT NULL,
  agent TEXT NOT NULL,
  unix_ms INTEGER NOT NULL
);
CREATE INDEX records_by_workload ON records(workload, key, error, median_ms);
CREATE INDEX records_by_job ON records(job);
CREATE UNIQUE INDEX records_once_a_job ON records(job, config) WHERE job IS NOT NULL;
)sql",
    // 2: how noisy a measurement was (the host's load, the attempts it took) and the re-timing
    // of a job's finalists. Records written before read as one quiet-unknown attempt.
    R"sql(
ALTER TABLE records ADD COLUMN host_load REAL;
ALTER TABLE records ADD COLUMN cpu_pressure REAL;
ALTER TABLE records ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
ALTER TABLE records ADD COLUMN noisy INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN retime_round_ms BLOB;
ALTER TABLE records ADD COLUMN retimed_ms REAL;
)sql",
    // 3: whether a record was timed for one round only, far slower than its job's best.
    R"sql(
ALTER TABLE records ADD COLUMN stopped_early INTEGER NOT NULL DEFAULT 0;
)sql",
    // 4: a workload's shape, its params' values, so that a task can start from the records of
    // the nearest shapes. Workloads written before have none ('').
    R"sql(
ALTER TABLE workloads ADD COLUMN shape TEXT NOT NULL DEFAULT '';
)sql",
};
constexpr int kSchema = static_cast<int>(std::size(kMigrations));
static_assert(kSchema == sql::kSchemaVersion, "the two stores write one schema version");

// A failure because another connection held a lock SQLite would not wait for.
class Busy : public RecordsError {
 public:
  using RecordsError::RecordsError;
};

// The error of the last call on `db`: Busy when it was a lock.
[[noreturn]] void throw_error(sqlite3* db, const std::string& message) {
  int code = sqlite3_errcode(db) & 0xff;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED) throw Busy(message);
  throw RecordsError(message);
}

using sql::now_unix_ms;

// A prepared statement, finalized at the end of its scope.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& path) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    check(sqlite3_bind_int64(stmt_, i, v));
    return *this;
  }
  Statement& bind(int i, double v) {
    check(sqlite3_bind_double(stmt_, i, v));
    return *this;
  }
  Statement& bind_null(int i) {
    check(sqlite3_bind_null(stmt_, i));
    return *this;
  }
  Statement& bind_blob(int i, const void* p, size_t n) {
    // An empty blob, not NULL: a null pointer would bind NULL.
    check(n == 0 ? sqlite3_bind_zeroblob(stmt_, i, 0)
                 : sqlite3_bind_blob(stmt_, i, p, static_cast<int>(n), SQLITE_TRANSIENT));
    return *this;
  }
  // True while there is a row.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail("step");
  }
  std::string text(int col) const {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::vector<double> doubles(int col) const {
    const void* p = sqlite3_column_blob(stmt_, col);
    size_t n = static_cast<size_t>(sqlite3_column_bytes(stmt_, col)) / sizeof(double);
    std::vector<double> out(n);
    if (n) std::memcpy(out.data(), p, n * sizeof(double));
    return out;
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail("bind");
  }
  [[noreturn]] void fail(const char* what) {
    throw_error(
        db_, fmt::format("records database {}: {} failed: {}", path_, what, sqlite3_errmsg(db_)));
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  const std::string& path_;
};

std::optional<double> optional_real(const Statement& s, int col) {
  if (s.is_null(col)) return std::nullopt;
  return s.real(col);
}

Record read_record(const Statement& s) {
  Record r;
  r.id = s.integer(0);
  r.job = s.is_null(1) ? 0 : s.integer(1);
  r.workload = s.text(2);
  r.key = s.text(3);
  r.config = parse_config(s.text(4));
  r.round_ms = s.doubles(5);
  r.median_ms = s.real(6);
  r.error = s.text(7);
  r.message = s.text(8);
  r.compile_ms = s.real(9);
  r.flops = s.integer(10);
  r.compiler_version = s.text(11);
  r.agent = s.text(12);
  r.unix_ms = s.integer(13);
  r.host_load = optional_real(s, 14);
  r.cpu_pressure = optional_real(s, 15);
  r.attempts = static_cast<int>(s.integer(16));
  r.noisy = s.integer(17) != 0;
  r.retime_round_ms = s.doubles(18);
  r.retimed_ms = optional_real(s, 19);
  r.stopped_early = s.integer(20) != 0;
  return r;
}

class SqliteStore : public RecordStore {
 public:
  SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteStore() override { sqlite3_close_v2(db_); }

  void put_workload(const Workload& w) override {
    std::lock_guard<std::mutex> lock(mu_);
    // A workload kept before shapes were (schema 3) gains its shape.
    Statement s(db_,
                "INSERT INTO workloads(hash, name, definition, shape, created_unix_ms) "
                "VALUES(?, ?, ?, ?, ?) "
                "ON CONFLICT(hash) DO UPDATE SET shape = excluded.shape WHERE shape = ''",
                path_);
    s.bind(1, w.hash).bind(2, w.name).bind(3, w.definition).bind(4, w.shape);
    s.bind(5, now_unix_ms()).step();
  }
  void put_target(const Target& t) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_,
                "INSERT INTO targets(key, triple, cpu, features, first_seen_unix_ms) "
                "VALUES(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                path_);
    s.bind(1, t.key).bind(2, t.triple).bind(3, t.cpu).bind(4, t.features).bind(5, now_unix_ms());
    s.step();
  }
  std::vector<Target> targets() override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "SELECT key, triple, cpu, features FROM targets ORDER BY key", path_);
    std::vector<Target> out;
    while (s.step()) out.push_back(Target{s.text(0), s.text(1), s.text(2), s.text(3)});
    return out;
  }
  std::optional<Workload> workload(const std::string& hash) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "SELECT hash, name, definition, shape FROM workloads WHERE hash = ?", path_);
    s.bind(1, hash);
    if (!s.step()) return std::nullopt;
    return Workload{s.text(0), s.text(1), s.text(2), s.text(3)};
  }
  std::vector<Workload> workloads(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_,
                "SELECT hash, name, definition, shape FROM workloads WHERE name = ? "
                "ORDER BY created_unix_ms, rowid",
                path_);
    s.bind(1, name);
    std::vector<Workload> out;
    while (s.step()) out.push_back(Workload{s.text(0), s.text(1), s.text(2), s.text(3)});
    return out;
  }

  int64_t start_job(const Job& j) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_,
                "INSERT INTO jobs(workload, key, settings, state, started_unix_ms) "
                "VALUES(?, ?, ?, 'running', ?)",
                path_);
    s.bind(1, j.workload).bind(2, j.key).bind(3, j.settings);
    s.bind(4, j.started_unix_ms ? j.started_unix_ms : now_unix_ms()).step();
    return sqlite3_last_insert_rowid(db_);
  }
  void finish_job(int64_t id, JobState state) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "UPDATE jobs SET state = ?, finished_unix_ms = ? WHERE id = ?", path_);
    s.bind(1, std::string(job_state_name(state)))
        .bind(2, state == JobState::Running ? int64_t{0} : now_unix_ms())
        .bind(3, id)
        .step();
    if (sqlite3_changes(db_) == 0)
      throw RecordsError(fmt::format("records database {}: no job {}", path_, id));
  }
  std::optional<Job> job(int64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, std::string(kJobSelect) + " WHERE id = ?", path_);
    s.bind(1, id);
    if (!s.step()) return std::nullopt;
    return read_job(s);
  }
  std::vector<Job> jobs(const std::string& workload) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_,
                std::string(kJobSelect) + (workload.empty() ? "" : " WHERE workload = ?") +
                    " ORDER BY id DESC",
                path_);
    if (!workload.empty()) s.bind(1, workload);
    std::vector<Job> out;
    while (s.step()) out.push_back(read_job(s));
    return out;
  }

  Added add_record(const Record& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string config = config_text(r.config);
    Statement s(
        db_,
        "INSERT INTO records(job, workload, key, config, round_ms, median_ms, error, "
        "message, compile_ms, flops, compiler_version, agent, unix_ms, host_load, "
        "cpu_pressure, attempts, noisy, stopped_early) "
        "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        path_);
    if (r.job != 0) {
      s.bind(1, r.job);
    } else {
      s.bind_null(1);
    }
    s.bind(2, r.workload).bind(3, r.key).bind(4, config);
    s.bind_blob(5, r.round_ms.data(), r.round_ms.size() * sizeof(double));
    s.bind(6, r.median_ms).bind(7, r.error).bind(8, r.message).bind(9, r.compile_ms);
    s.bind(10, r.flops).bind(11, r.compiler_version).bind(12, r.agent);
    s.bind(13, r.unix_ms ? r.unix_ms : now_unix_ms());
    bind_optional(s, 14, r.host_load);
    bind_optional(s, 15, r.cpu_pressure);
    s.bind(16, int64_t{r.attempts}).bind(17, int64_t{r.noisy ? 1 : 0});
    s.bind(18, int64_t{r.stopped_early ? 1 : 0});
    s.step();
    if (sqlite3_changes(db_) == 1) return {sqlite3_last_insert_rowid(db_), true};
    Statement existing(db_, "SELECT id FROM records WHERE job = ? AND config = ?", path_);
    existing.bind(1, r.job).bind(2, config);
    if (!existing.step())
      throw RecordsError(fmt::format("records database {}: a record was refused", path_));
    return {existing.integer(0), false};
  }

  void set_retime(int64_t id, const std::vector<double>& round_ms, double median_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "UPDATE records SET retime_round_ms = ?, retimed_ms = ? WHERE id = ?", path_);
    s.bind_blob(1, round_ms.data(), round_ms.size() * sizeof(double)).bind(2, median_ms);
    s.bind(3, id).step();
    if (sqlite3_changes(db_) == 0)
      throw RecordsError(fmt::format("records database {}: no record {}", path_, id));
  }

  std::vector<Record> query(const Query& q) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Record> out;
    std::string text = std::string("SELECT ") + sql::kRecordColumns + " FROM records" + where(q) +
                       sql::order_by(q) + " LIMIT ? OFFSET ?";
    Statement s(db_, text, path_);
    int next = bind_where(s, q);
    s.bind(next, q.limit < 0 ? int64_t{-1} : q.limit).bind(next + 1, q.after);
    while (s.step()) out.push_back(read_record(s));
    return out;
  }
  int64_t count(const Query& q) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "SELECT count(*) FROM records" + where(q), path_);
    bind_where(s, q);
    s.step();
    return s.integer(0);
  }
  std::optional<Record> best(const std::string& workload, const std::string& key) override {
    std::vector<Record> r = query(sql::best_of(workload, key));
    if (r.empty()) return std::nullopt;
    return r.front();
  }

 private:
  static inline const std::string kJobSelect =
      std::string("SELECT ") + sql::kJobColumns + " FROM jobs";
  static Job read_job(const Statement& s) {
    return Job{s.integer(0), s.text(1),   s.text(2), s.text(3), sql::parse_state(s.text(4)),
               s.integer(5), s.integer(6)};
  }
  static void bind_optional(Statement& s, int i, const std::optional<double>& v) {
    if (v) {
      s.bind(i, *v);
    } else {
      s.bind_null(i);
    }
  }
  static std::string where(const Query& q) {
    return sql::where(q, [](int) { return std::string("?"); });
  }
  // Binds where()'s values; the next parameter's number.
  static int bind_where(Statement& s, const Query& q) {
    int i = 1;
    for (const auto& v : sql::where_values(q))
      std::visit([&](const auto& x) { s.bind(i++, x); }, v);
    return i;
  }

  sqlite3* db_;
  std::string path_;
  std::mutex mu_;  // one connection, used by one thread at a time
};

// A statement run for its effect; the message of a failure, prefixed.
void exec(sqlite3* db, const std::string& path, const char* sql, const char* what) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db);
    sqlite3_free(message);
    throw_error(db, fmt::format("records database {}: {}: {}", path, what, text));
  }
}

// One value a pragma or query answers (its first column of its first row).
std::string scalar(sqlite3* db, const std::string& path, const char* sql) {
  Statement s(db, sql, path);
  return s.step() ? s.text(0) : std::string();
}

// Whether the file db has open starts with SQLite's header. Read through
// SQLite's own handle of the file: a descriptor of kiln's own would drop, when
// closed, the locks SQLite holds on the file in this process (POSIX locks
// belong to the process, not to a descriptor). Without its lock on the file
// this connection looks gone to the others, and the last of them to close
// deleted the write-ahead log while this one was writing to it: its records
// were lost (seen as 3 records of 4 processes that created one file at once).
bool starts_with_sqlite_header(sqlite3* db) {
  sqlite3_file* file = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK ||
      file == nullptr || file->pMethods == nullptr)
    return false;
  char header[16] = {};
  return file->pMethods->xRead(file, header, sizeof header, 0) == SQLITE_OK &&
         std::memcmp(header, "SQLite format 3", 16) == 0;
}

// Refuses a file that is there but not a healthy SQLite database, reading it only.
void check_existing(sqlite3* db, const std::string& path) {
  if (!starts_with_sqlite_header(db))
    throw RecordsError(fmt::format(
        "records database {}: not a SQLite database (it does not start with SQLite's header); "
        "kiln left it as it is: move it away, or point kilnd at another --data-dir",
        path));
  std::string verdict;
  try {
    verdict = scalar(db, path, "PRAGMA quick_check");
  } catch (const RecordsError& e) {
    verdict = e.what();
  }
  if (verdict != "ok")
    throw RecordsError(fmt::format(
        "records database {}: damaged ({}); kiln left it as it is: restore it from a copy, "
        "or move it away to start an empty one",
        path, verdict));
}

}  // namespace

std::unique_ptr<RecordStore> open_sqlite_store(const std::string& path) {
  if (path.empty())
    throw RecordsError("records database: no file named (\":memory:\" for one in memory)");
  std::error_code ec;
  bool existed = std::filesystem::exists(path, ec);
  if (existed && std::filesystem::file_size(path, ec) == 0 && !ec) {
    // A database kiln made is never empty once set up: the file is empty only while another
    // process creates it (the first statement writes its header), or when something truncated
    // it. Give a creator two seconds; an empty file is not taken for a new database.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::filesystem::file_size(path, ec) == 0 && !ec &&
           std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::filesystem::file_size(path, ec) == 0 && !ec)
      throw RecordsError(fmt::format(
          "records database {}: the file is empty (0 bytes), where a database kiln made never "
          "is: it was truncated, or made by something else. kiln left it as it is: restore it "
          "from a copy, or remove it to start an empty one",
          path));
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string why = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    throw RecordsError(fmt::format("records database {}: cannot open: {}", path, why));
  }
  auto store = std::make_unique<SqliteStore>(db, path);  // closes db on a throw below
  sqlite3_busy_timeout(db, 30'000);                      // another process (or job) writing
  sqlite3_extended_result_codes(db, 1);
  if (existed) check_existing(db, path);

  // Setting up may meet another process setting up the same file: SQLite
  // answers BUSY at once where waiting could deadlock (changing the journal
  // mode, upgrading a read to a write). Then it is tried again, for 30 s.
  auto set_up = [&] {
    // The version and the tables from one snapshot: another process may be
    // creating the file right now, and then its tables come with a version.
    exec(db, path, "BEGIN", "reading the schema");
    int version = 0;
    int64_t tables = 0;
    try {
      version = std::stoi(scalar(db, path, "PRAGMA user_version"));
      tables = std::stoll(scalar(db, path, "SELECT count(*) FROM sqlite_schema"));
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
    exec(db, path, "COMMIT", "reading the schema");
    if (version > kSchema)
      throw RecordsError(fmt::format(
          "records database {}: schema version {} is from a newer kiln (this one knows up to {}); "
          "kiln left it as it is",
          path, version, kSchema));
    if (version == 0 && tables > 0)
      throw RecordsError(fmt::format(
          "records database {}: a SQLite database that kiln did not make (it has tables and no "
          "kiln schema version); kiln left it as it is",
          path));
    if (path != kInMemory && scalar(db, path, "PRAGMA journal_mode=WAL") != "wal")
      throw RecordsError(fmt::format("records database {}: cannot use write-ahead logging", path));
    exec(db, path, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON", "settings");
    // Up to date, one version a transaction; IMMEDIATE so that two processes
    // opening a new file do not both migrate it.
    while (version < kSchema) {
      exec(db, path, "BEGIN IMMEDIATE", "migrate");
      int now = std::stoi(scalar(db, path, "PRAGMA user_version"));  // another may have migrated
      if (now < kSchema) {
        try {
          exec(db, path, kMigrations[now], fmt::format("schema version {}", now + 1).c_str());
          exec(db, path, fmt::format("PRAGMA user_version = {}", now + 1).c_str(), "migrate");
        } catch (...) {
          sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
          throw;
        }
      }
      exec(db, path, "COMMIT", "migrate");
      version = std::stoi(scalar(db, path, "PRAGMA user_version"));
    }
  };
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    try {
      set_up();
      break;
    } catch (const Busy&) {
      if (std::chrono::steady_clock::now() > give_up) throw;
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return store;
}

}  // namespace kiln::records
