// The tuning-record database (kiln/records.h) on both of its stores, SQLite and PostgreSQL (a
// throwaway server of the test's own): records come back as they went in, a job measures a
// configuration once, queries filter, sort and page, a committed record survives the writer
// being killed, two jobs (threads, connections, processes) write at once without losing one.
// SQLite's own: a file that is not a healthy kiln records database is refused with a clear error
// and left byte for byte as it was. PostgreSQL's own: a database kiln did not make or a newer
// kiln made is refused, a call waits through the server restarting and loses nothing, and a
// server that stays away makes a call unavailable, its URL's password never shown.
#include "kiln/records.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "postgres_server.h"

namespace kiln::records {
namespace {

using kiln::testing::PostgresServer;

// The test's PostgreSQL server, started by the first test that wants one in this process.
PostgresServer& postgres() {
  static std::unique_ptr<PostgresServer> server = std::make_unique<PostgresServer>();
  return *server;
}
// A new database's name, once in the process.
std::string new_database() {
  static int databases = 0;
  return "records_" + std::to_string(++databases);
}

class RecordsFixture : public ::testing::Test {
 protected:
  // The store's location for this test: a SQLite file, or a PostgreSQL database of its own.
  virtual std::string location() { return path_; }

  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');  // a parameterized test's "NAME/PARAM"
    dir_ = ::testing::TempDir() + "kiln_records_" + std::to_string(getpid()) + "_" + name + "/";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "records.db";
    where_ = location();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<RecordStore> open() { return open_store(where_); }

  // A store with a workload "w1" on target "x86", and a running job.
  std::unique_ptr<RecordStore> store_with_job(int64_t* job) {
    auto s = open();
    s->put_workload({"w1", "matmul", "func matmul { ... }"});
    s->put_target({"x86", "x86_64-linux-gnu", "znver4", "+avx2"});
    *job = s->start_job({0, "w1", "x86", R"({"search":"random","trials":64})"});
    return s;
  }
  static Record record(int64_t job, Config config, double median, std::string error = "") {
    Record r;
    r.job = job;
    r.workload = "w1";
    r.key = "x86";
    r.config = std::move(config);
    if (error.empty()) r.round_ms = {median * 1.1, median, median * 0.9};
    r.median_ms = error.empty() ? median : 0;
    r.error = std::move(error);
    r.compile_ms = 12.5;
    r.flops = 2 * 64 * 64 * 64;
    r.compiler_version = "kiln 0.1.0";
    r.agent = "agent-a";
    return r;
  }
  std::string bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The error opening the store gives (empty when it opens).
  std::string open_error() {
    try {
      open();
    } catch (const RecordsError& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_, path_, where_;
};

// The tests every store passes: the parameter names the store.
class RecordsTest : public RecordsFixture, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string location() override {
    if (GetParam() == "sqlite") return path_;
    return postgres().create(new_database());
  }
  void SetUp() override {
    if (GetParam() == "postgresql" && !PostgresServer::available()) {
      if (PostgresServer::required()) FAIL() << PostgresServer::missing();
      GTEST_SKIP() << PostgresServer::missing();
    }
    RecordsFixture::SetUp();
  }
};

INSTANTIATE_TEST_SUITE_P(Stores, RecordsTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

// SQLite's own: the file.
class SqliteRecordsTest : public RecordsFixture {};

// PostgreSQL's own: the server.
class PostgresRecordsTest : public RecordsFixture {
 protected:
  std::string location() override {
    db_ = new_database();
    return postgres().create(db_);
  }
  void SetUp() override {
    if (!PostgresServer::available()) {
      if (PostgresServer::required()) FAIL() << PostgresServer::missing();
      GTEST_SKIP() << PostgresServer::missing();
    }
    RecordsFixture::SetUp();
  }
  std::string db_;  // the test's database
};

TEST_P(RecordsTest, ARecordComesBackAsItWentIn) {
  int64_t job = 0;
  auto s = store_with_job(&job);
  Record r = record(job, {{"NR", 16}, {"MB", 64}}, 0.75);
  r.message = "ok";
  RecordStore::Added added = s->add_record(r);
  EXPECT_TRUE(added.added);
  std::vector<Record> got = s->query({});
  ASSERT_EQ(got.size(), 1u);
  const Record& g = got[0];
  EXPECT_EQ(g.id, added.id);
  EXPECT_EQ(g.job, job);
  EXPECT_EQ(g.workload, "w1");
  EXPECT_EQ(g.key, "x86");
  EXPECT_EQ(g.config, (Config{{"MB", 64}, {"NR", 16}}));
  EXPECT_EQ(g.round_ms, r.round_ms);
  EXPECT_EQ(g.median_ms, 0.75);
  EXPECT_EQ(g.error, "");
  EXPECT_EQ(g.compile_ms, 12.5);
  EXPECT_EQ(g.flops, 2 * 64 * 64 * 64);
  EXPECT_EQ(g.compiler_version, "kiln 0.1.0");
  EXPECT_EQ(g.agent, "agent-a");
  EXPECT_GT(g.unix_ms, 1'700'000'000'000);
  EXPECT_FALSE(g.host_load);
  EXPECT_FALSE(g.cpu_pressure);
  EXPECT_EQ(g.attempts, 1);
  EXPECT_FALSE(g.noisy);
  EXPECT_FALSE(g.retimed_ms);
  EXPECT_TRUE(g.retime_round_ms.empty());
  EXPECT_EQ(s->workload("w1")->name, "matmul");
  EXPECT_FALSE(s->workload("nope"));

  std::optional<Job> j = s->job(job);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->state, JobState::Running);
  EXPECT_EQ(j->finished_unix_ms, 0);
  EXPECT_EQ(j->settings, R"({"search":"random","trials":64})");
  s->finish_job(job, JobState::Done);
  EXPECT_EQ(s->job(job)->state, JobState::Done);
  EXPECT_GT(s->job(job)->finished_unix_ms, 0);
  EXPECT_THROW(s->finish_job(job + 100, JobState::Done), RecordsError);
}

TEST_P(RecordsTest, AJobMeasuresAConfigurationOnce) {
  int64_t job = 0;
  auto s = store_with_job(&job);
  RecordStore::Added first = s->add_record(record(job, {{"MB", 64}}, 1.0));
  RecordStore::Added again = s->add_record(record(job, {{"MB", 64}}, 2.0));
  EXPECT_TRUE(first.added);
  EXPECT_FALSE(again.added);
  EXPECT_EQ(again.id, first.id);
  EXPECT_EQ(s->count({}), 1);
  EXPECT_EQ(s->query({})[0].median_ms, 1.0);  // the first one stays
  // Another job, or none (a re-measurement), may measure it again.
  int64_t other = s->start_job({0, "w1", "x86", "{}"});
  EXPECT_TRUE(s->add_record(record(other, {{"MB", 64}}, 1.1)).added);
  EXPECT_TRUE(s->add_record(record(0, {{"MB", 64}}, 1.2)).added);
  EXPECT_TRUE(s->add_record(record(0, {{"MB", 64}}, 1.3)).added);
  EXPECT_EQ(s->count({}), 4);
}

TEST_P(RecordsTest, QueriesFilterSortAndPage) {
  int64_t job = 0;
  auto s = store_with_job(&job);
  s->put_target({"arm", "aarch64-linux-gnu", "generic", ""});
  for (int k = 0; k < 30; ++k) {
    Record r = record(job, {{"K", k}}, 10.0 - 0.25 * k, k % 7 == 3 ? "TIMEOUT" : "");
    if (k >= 20) r.key = "arm";
    r.unix_ms = 1'000'000 + k;
    s->add_record(r);
  }
  Query all;
  all.limit = -1;
  EXPECT_EQ(s->query(all).size(), 30u);
  Query x86;
  x86.key = "x86";
  EXPECT_EQ(s->count(x86), 20);
  Query failed;
  failed.error = "TIMEOUT";
  EXPECT_EQ(s->count(failed), 4);  // k = 3, 10, 17, 24
  Query window;
  window.since_unix_ms = 1'000'005;
  window.until_unix_ms = 1'000'015;
  EXPECT_EQ(s->count(window), 10);

  // Fastest first, the failed ones last; pages of 8.
  Query fastest;
  fastest.key = "x86";
  fastest.order = Query::Order::Fastest;
  fastest.limit = 8;
  std::vector<int64_t> ks;
  for (fastest.after = 0;; fastest.after += 8) {
    std::vector<Record> page = s->query(fastest);
    for (const Record& r : page) ks.push_back(r.config.at("K"));
    if (page.size() < 8) break;
  }
  ASSERT_EQ(ks.size(), 20u);
  EXPECT_EQ(std::vector<int64_t>(ks.begin(), ks.begin() + 4),
            (std::vector<int64_t>{19, 18, 16, 15}));
  EXPECT_EQ(std::vector<int64_t>(ks.end() - 3, ks.end()), (std::vector<int64_t>{3, 10, 17}));

  std::optional<Record> best = s->best("w1", "x86");
  ASSERT_TRUE(best);
  EXPECT_EQ(best->config.at("K"), 19);
  EXPECT_EQ(s->best("w1", "arm")->config.at("K"), 29);
  EXPECT_FALSE(s->best("w1", "rk3399"));
  Query of_job;
  of_job.job = job;
  EXPECT_EQ(s->count(of_job), 30);
}

TEST_P(RecordsTest, ACommittedRecordSurvivesTheWriterBeingKilled) {
  int64_t job = 0;
  store_with_job(&job).reset();
  int acked[2];
  ASSERT_EQ(pipe(acked), 0);
  pid_t writer = fork();
  if (writer == 0) {
    close(acked[0]);
    auto s = open();
    for (int k = 0;; ++k) {
      s->add_record(record(job, {{"K", k}}, 1.0 + k));
      if (write(acked[1], &k, sizeof k) != sizeof k) _exit(1);  // committed: say so
    }
  }
  close(acked[1]);
  int last = -1, k = 0;
  while (last < 50 && read(acked[0], &k, sizeof k) == sizeof k) last = k;
  kill(writer, SIGKILL);  // mid-write, as kill -9 of kilnd would
  while (read(acked[0], &k, sizeof k) == sizeof k) last = k;
  close(acked[0]);
  waitpid(writer, nullptr, 0);
  auto s = open();
  Query q;
  q.limit = -1;
  std::vector<Record> got = s->query(q);
  ASSERT_GE(static_cast<int>(got.size()), last + 1);  // every acknowledged record is there
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].config.at("K"), static_cast<int64_t>(i));
}

TEST_P(RecordsTest, TwoJobsWriteAtOnceAndNoRecordIsLost) {
  int64_t job_a = 0;
  store_with_job(&job_a).reset();
  int64_t job_b = open()->start_job({0, "w1", "x86", "{}"});
  constexpr int kEach = 150;
  // Threads on one store, threads on two stores (connections), and processes.
  {
    auto shared = open();
    auto other = open();
    auto write = [&](RecordStore* s, int64_t job, int from) {
      for (int k = from; k < from + kEach; ++k) s->add_record(record(job, {{"K", k}}, 1.0));
    };
    std::thread t1(write, shared.get(), job_a, 0), t2(write, shared.get(), job_b, 0);
    std::thread t3(write, other.get(), job_a, 1000), t4(write, other.get(), job_b, 1000);
    t1.join(), t2.join(), t3.join(), t4.join();
  }
  pid_t children[2];
  for (int c = 0; c < 2; ++c) {
    children[c] = fork();
    if (children[c] == 0) {
      auto s = open();
      for (int k = 0; k < kEach; ++k)
        s->add_record(record(c ? job_b : job_a, {{"K", 5000 + k}}, 1.0));
      _exit(0);
    }
  }
  for (pid_t c : children) {
    int status = 0;
    waitpid(c, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  auto s = open();
  Query a, b;
  a.job = job_a;
  b.job = job_b;
  EXPECT_EQ(s->count(a), 3 * kEach);
  EXPECT_EQ(s->count(b), 3 * kEach);
}

TEST_P(RecordsTest, ProcessesOpeningANewStoreAtOnceGetOneSchema) {
  pid_t children[4];
  for (int c = 0; c < 4; ++c) {
    children[c] = fork();
    if (children[c] == 0) {
      try {
        auto s = open();
        s->put_workload({"w1", "matmul", "..."});
        s->add_record(record(0, {{"C", c}}, 1.0));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", c, e.what());
        _exit(1);
      }
      _exit(0);
    }
  }
  for (pid_t c : children) {
    int status = 0;
    waitpid(c, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  EXPECT_EQ(open()->count({}), 4);
}

TEST_F(SqliteRecordsTest, AFileThatIsNotADatabaseIsRefusedAndLeftAsItWas) {
  std::ofstream(path_) << "these are my notes, not a database\n";
  std::string before = bytes_of(path_);
  std::string e = open_error();
  EXPECT_NE(e.find("records database " + path_ + ": not a SQLite database"), std::string::npos)
      << e;
  EXPECT_EQ(bytes_of(path_), before);
}

// A records file truncated to nothing is not taken for a new, empty database (the user lost
// their records and is told so), and is left as it was; one that another process is creating
// (empty for a moment) is waited for.
TEST_F(SqliteRecordsTest, AnEmptyFileIsRefusedAndLeftAsItWas) {
  {
    int64_t job = 0;
    auto s = store_with_job(&job);
  }
  std::ofstream(path_, std::ios::binary | std::ios::trunc).flush();
  std::filesystem::remove(path_ + "-wal");
  std::filesystem::remove(path_ + "-shm");
  std::string e = open_error();
  EXPECT_NE(e.find("records database " + path_ + ": the file is empty (0 bytes)"),
            std::string::npos)
      << e;
  EXPECT_EQ(std::filesystem::file_size(path_), 0u);
  EXPECT_FALSE(std::filesystem::exists(path_ + "-wal"));

  // Empty for a moment, then set up by its creator: opened.
  std::ofstream(path_, std::ios::binary | std::ios::trunc).flush();
  std::thread creator([&] {  // a process setting the file up: its header comes first
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sqlite3* db = nullptr;
    sqlite3_open(path_.c_str(), &db);
    sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  });
  EXPECT_NO_THROW(open_sqlite_store(path_));
  creator.join();
}

TEST_F(SqliteRecordsTest, ATruncatedOrDamagedDatabaseIsRefusedAndLeftAsItWas) {
  int64_t job = 0;
  {
    auto s = store_with_job(&job);
    for (int k = 0; k < 3000; ++k) s->add_record(record(job, {{"K", k}}, 1.0 + k));
  }
  std::string healthy = bytes_of(path_);
  ASSERT_GT(healthy.size(), 64u * 1024);

  std::ofstream(path_, std::ios::binary | std::ios::trunc) << healthy.substr(0, healthy.size() / 2);
  std::string truncated = bytes_of(path_);
  std::string e = open_error();
  EXPECT_NE(e.find("records database " + path_ + ": damaged"), std::string::npos) << e;
  EXPECT_EQ(bytes_of(path_), truncated);

  std::string scribbled = healthy;
  for (size_t i = healthy.size() / 3; i < healthy.size() / 3 + 8192; ++i) scribbled[i] = '\x5a';
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << scribbled;
  e = open_error();
  EXPECT_NE(e.find("damaged"), std::string::npos) << e;
  EXPECT_EQ(bytes_of(path_), scribbled);
}

TEST_F(SqliteRecordsTest, ADatabaseFromANewerKilnOrAnotherProgramIsRefused) {
  open_sqlite_store(path_).reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  std::string e = open_error();
  EXPECT_NE(e.find("schema version 99 is from a newer kiln (this one knows up to " +
                   std::to_string(schema_version()) + ")"),
            std::string::npos)
      << e;

  std::filesystem::remove(path_);
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE photos(id INTEGER)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::string before = bytes_of(path_);
  e = open_error();
  EXPECT_NE(e.find("a SQLite database that kiln did not make"), std::string::npos) << e;
  EXPECT_EQ(bytes_of(path_), before);
}

TEST_F(SqliteRecordsTest, ANewFileGetsTheSchemaInWriteAheadLoggingMode) {
  open_sqlite_store(path_).reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), schema_version());
  sqlite3_finalize(st);
  sqlite3_close(db);
  // Opening again changes nothing.
  open_sqlite_store(path_).reset();
}

TEST_P(RecordsTest, NoiseAndRetimingAreKeptAndTheFastestIsByRetimedMedian) {
  int64_t job = 0;
  auto s = store_with_job(&job);
  Record lucky = record(job, {{"MB", 16}}, 1.0);
  lucky.host_load = 0.75;
  lucky.cpu_pressure = 0.125;
  lucky.attempts = 3;
  lucky.noisy = true;
  int64_t lucky_id = s->add_record(lucky).id;
  int64_t steady_id = s->add_record(record(job, {{"MB", 32}}, 2.0)).id;
  s->add_record(record(job, {{"MB", 64}}, 4.0));
  int64_t unretimed_id = s->add_record(record(job, {{"MB", 128}}, 2.5)).id;
  EXPECT_EQ(s->best("w1", "x86")->id, lucky_id);
  s->set_retime(lucky_id, {3.0, 3.5, 2.5}, 3.0);
  s->set_retime(steady_id, {2.0, 2.0}, 2.0);
  std::optional<Record> best = s->best("w1", "x86");
  ASSERT_TRUE(best);
  EXPECT_EQ(best->id, steady_id);
  EXPECT_EQ(best->effective_ms(), 2.0);
  Query fastest;
  fastest.order = Query::Order::Fastest;
  std::vector<Record> order = s->query(fastest);
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0].id, steady_id);
  EXPECT_EQ(order[1].id, lucky_id);      // re-timed 3.0: ahead of every record never re-timed,
  EXPECT_EQ(order[2].id, unretimed_id);  // even this 2.5 measured once
  Query by_median;
  by_median.order = Query::Order::Median;
  std::vector<Record> medians = s->query(by_median);
  ASSERT_EQ(medians.size(), 4u);
  EXPECT_EQ(medians[0].id, lucky_id);
  EXPECT_EQ(medians[1].id, steady_id);
  EXPECT_EQ(medians[2].id, unretimed_id);
  EXPECT_EQ(order[1].host_load, 0.75);
  EXPECT_EQ(order[1].cpu_pressure, 0.125);
  EXPECT_EQ(order[1].attempts, 3);
  EXPECT_TRUE(order[1].noisy);
  EXPECT_EQ(order[1].median_ms, 1.0);
  EXPECT_EQ(order[1].retime_round_ms, (std::vector<double>{3.0, 3.5, 2.5}));
  EXPECT_EQ(order[1].retimed_ms, 3.0);
  EXPECT_THROW(s->set_retime(999, {1.0}, 1.0), RecordsError);
}

// A database kiln wrote before the noise columns (schema version 1): it opens, is brought up
// to date, and its records read as they were, with nothing known of their noise.
TEST_F(SqliteRecordsTest, RecordsWrittenBeforeSchemaTwoStillRead) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  const char* v1 = R"sql(
CREATE TABLE workloads (hash TEXT PRIMARY KEY, name TEXT NOT NULL, definition TEXT NOT NULL,
  created_unix_ms INTEGER NOT NULL);
CREATE TABLE targets (key TEXT PRIMARY KEY, triple TEXT NOT NULL, cpu TEXT NOT NULL,
  features TEXT NOT NULL, first_seen_unix_ms INTEGER NOT NULL);
CREATE TABLE jobs (id INTEGER PRIMARY KEY, workload TEXT NOT NULL REFERENCES workloads(hash),
  key TEXT NOT NULL, settings TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'done', 'cancelled', 'failed')),
  started_unix_ms INTEGER NOT NULL, finished_unix_ms INTEGER NOT NULL DEFAULT 0);
CREATE TABLE records (id INTEGER PRIMARY KEY, job INTEGER REFERENCES jobs(id),
  workload TEXT NOT NULL REFERENCES workloads(hash), key TEXT NOT NULL, config TEXT NOT NULL,
  round_ms BLOB NOT NULL, median_ms REAL NOT NULL, error TEXT NOT NULL, message TEXT NOT NULL,
  compile_ms REAL NOT NULL, flops INTEGER NOT NULL, compiler_version TEXT NOT NULL,
  agent TEXT NOT NULL, unix_ms INTEGER NOT NULL);
CREATE INDEX records_by_workload ON records(workload, key, error, median_ms);
CREATE INDEX records_by_job ON records(job);
CREATE UNIQUE INDEX records_once_a_job ON records(job, config) WHERE job IS NOT NULL;
INSERT INTO workloads VALUES('w1', 'matmul', 'func matmul { ... }', 1);
INSERT INTO jobs VALUES(1, 'w1', 'x86', '{}', 'done', 1, 2);
INSERT INTO records VALUES(1, 1, 'w1', 'x86', 'MB=64', x'000000000000F03F', 1.0, '', '', 3.0,
  100, 'kiln 0.1.0', 'agent-a', 1795557500966);
PRAGMA user_version = 1;
)sql";
  ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto s = open_sqlite_store(path_);
  std::vector<Record> got = s->query({});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].config, (Config{{"MB", 64}}));
  EXPECT_EQ(got[0].round_ms, (std::vector<double>{1.0}));
  EXPECT_EQ(got[0].median_ms, 1.0);
  EXPECT_EQ(got[0].agent, "agent-a");
  EXPECT_EQ(got[0].unix_ms, 1795557500966);
  EXPECT_FALSE(got[0].host_load);
  EXPECT_FALSE(got[0].cpu_pressure);
  EXPECT_EQ(got[0].attempts, 1);
  EXPECT_FALSE(got[0].noisy);
  EXPECT_FALSE(got[0].retimed_ms);
  EXPECT_EQ(s->best("w1", "x86")->id, 1);
  // And new records go in beside it.
  Record r = record(1, {{"MB", 32}}, 0.5);
  r.host_load = 0.0;
  EXPECT_TRUE(s->add_record(r).added);
  EXPECT_EQ(s->best("w1", "x86")->host_load, 0.0);
  // A workload kept before shapes were has none, until it is put again with one.
  EXPECT_EQ(s->workload("w1")->shape, "");
  s->put_workload({"w1", "matmul", "func matmul { ... }", "K=32,M=64"});
  EXPECT_EQ(s->workload("w1")->shape, "K=32,M=64");
  s->put_workload({"w1", "matmul", "func matmul { ... }", "K=1,M=1"});  // kept as it was
  EXPECT_EQ(s->workload("w1")->shape, "K=32,M=64");
}

TEST_P(RecordsTest, AnOperatorsWorkloadsAreFoundByItsName) {
  auto s = open();
  s->put_workload({"b", "conv2d", "func conv2d { ... 2 }", "C=64"});
  s->put_workload({"a", "conv2d", "func conv2d { ... 1 }", "C=3"});
  s->put_workload({"c", "matmul", "func matmul { ... }", "M=64"});
  std::vector<Workload> got = s->workloads("conv2d");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].hash, "b");  // in the order they came
  EXPECT_EQ(got[0].shape, "C=64");
  EXPECT_EQ(got[1].hash, "a");
  EXPECT_TRUE(s->workloads("pool").empty());
}

TEST_F(PostgresRecordsTest, TheSchemaIsSQLitesVersionInOneRowAndOpeningAgainChangesNothing) {
  open().reset();
  EXPECT_EQ(postgres().sql(db_, "SELECT version FROM kiln_schema"),
            std::to_string(schema_version()));
  EXPECT_EQ(postgres().sql(db_, "SELECT count(*) FROM kiln_schema"), "1");
  int64_t job = 0;
  store_with_job(&job)->add_record(record(job, {{"MB", 64}}, 1.0));
  auto s = open();
  EXPECT_EQ(s->count({}), 1);
  EXPECT_EQ(postgres().sql(db_, "SELECT count(*) FROM kiln_schema"), "1");
}

TEST_F(PostgresRecordsTest, ADatabaseFromANewerKilnOrWithTablesOfAnotherProgramIsRefused) {
  open().reset();
  postgres().sql(db_, "UPDATE kiln_schema SET version = 99");
  std::string e = open_error();
  EXPECT_NE(e.find("schema version 99 is from a newer kiln (this one knows up to " +
                   std::to_string(schema_version()) + ")"),
            std::string::npos)
      << e;
  EXPECT_EQ(postgres().sql(db_, "SELECT version FROM kiln_schema"), "99");  // left as it was

  where_ = postgres().create("photos_" + db_);
  postgres().sql("photos_" + db_, "CREATE TABLE photos(id INTEGER)");
  e = open_error();
  EXPECT_NE(e.find("a database with tables kiln did not make"), std::string::npos) << e;
  EXPECT_EQ(
      postgres().sql("photos_" + db_, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
      "1");
}

TEST_F(PostgresRecordsTest, AServerThatCannotBeReachedIsAClearErrorThatNeverShowsThePassword) {
  std::string url = "postgresql://kiln:hunter2@/records?host=" + dir_ + "nowhere&port=5432";
  try {
    open_store(url);
    FAIL() << "opened " << url;
  } catch (const RecordsError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("records database postgresql://kiln@" + dir_ +
                     "nowhere:5432/records: "
                     "cannot connect"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
  }
  EXPECT_TRUE(is_postgres_url("postgres://h/db"));
  EXPECT_FALSE(is_postgres_url("/var/lib/kiln/records.db"));
  EXPECT_EQ(redacted("/var/lib/kiln/records.db"), "/var/lib/kiln/records.db");
  EXPECT_EQ(redacted("postgresql://kiln:hunter2@db.example:6543/records"),
            "postgresql://kiln@db.example:6543/records");
  EXPECT_THROW(open_store("postgresql://kiln@db.example:notaport/records"), RecordsError);
}

// The server restarts (as a crash, then cleanly) while a job writes: every call waits for it,
// connects again and goes on; every record acknowledged is there, once.
TEST_F(PostgresRecordsTest, CallsWaitThroughTheServerRestartingAndLoseNothing) {
  int64_t job = 0;
  auto s = store_with_job(&job);
  std::atomic<int> written{0};
  std::atomic<bool> stop{false};
  std::string failure;
  std::thread writer([&] {
    try {
      for (int k = 0; !stop; ++k) {
        if (!s->add_record(record(job, {{"K", k}}, 1.0 + k)).added) failure = "added twice";
        written = k + 1;
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  for (const char* mode : {"immediate", "fast"}) {
    int before = written;
    while (written < before + 20 && failure.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    postgres().stop(mode);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // calls wait meanwhile
    postgres().start();
  }
  int before = written;
  while (written < before + 20 && failure.empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  writer.join();
  EXPECT_EQ(failure, "");
  Query q;
  q.job = job;
  q.limit = -1;
  std::vector<Record> got = s->query(q);
  ASSERT_EQ(static_cast<int>(got.size()), written.load());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].config.at("K"), static_cast<int64_t>(i));
}

// A server that stays away longer than the store waits: the call is unavailable, saying what,
// and the next call once the server is back succeeds.
TEST_F(PostgresRecordsTest, AServerThatStaysAwayMakesACallUnavailableUntilItIsBack) {
  PostgresOptions o;
  o.wait_for_server = std::chrono::milliseconds(600);
  auto s = open_postgres_store(where_, o);
  s->put_workload({"w1", "matmul", "func matmul { ... }"});
  postgres().stop();
  auto started = std::chrono::steady_clock::now();
  try {
    s->count({});
    FAIL() << "counted with the server stopped";
  } catch (const RecordsUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("records database " + redacted(where_)), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  postgres().start();
  EXPECT_EQ(s->workload("w1")->name, "matmul");
}

TEST(RecordValues, ConfigurationsHaveOneTextForm) {
  EXPECT_EQ(config_text({{"NR", 16}, {"MB", -4}}), "MB=-4,NR=16");
  EXPECT_EQ(parse_config("MB=-4,NR=16"), (Config{{"MB", -4}, {"NR", 16}}));
  EXPECT_EQ(parse_config(""), Config{});
  for (const char* bad : {"MB", "=4", "MB=x", "MB=4,MB=5", "MB=4,"})
    EXPECT_THROW(parse_config(bad), RecordsError) << bad;
}

TEST(RecordValues, ARecordIsOneJsonLine) {
  Record r;
  r.id = 7;
  r.job = 2;
  r.workload = "ab12";
  r.key = "x86";
  r.config = {{"NR", 16}, {"MB", 64}};
  r.round_ms = {1.5, 1.25};
  r.median_ms = 1.375;
  r.compile_ms = 20;
  r.flops = 1000;
  r.compiler_version = "kiln 0.1.0";
  r.agent = "a";
  r.unix_ms = 1795557500966;
  EXPECT_EQ(
      record_json(r),
      R"({"id":7,"job":2,"workload":"ab12","key":"x86","config":{"MB":64,"NR":16},)"
      R"("round_ms":[1.5,1.25],"median_ms":1.375,"error":null,"message":"","compile_ms":20,)"
      R"("flops":1000,"compiler_version":"kiln 0.1.0","agent":"a","unix_ms":1795557500966,)"
      R"("host_load":null,"cpu_pressure":null,"attempts":1,"noisy":false,"stopped_early":false,)"
      R"("retime_round_ms":[],"retimed_ms":null})");
  r.host_load = 0.25;
  r.cpu_pressure = 0.5;
  r.attempts = 3;
  r.noisy = true;
  r.retime_round_ms = {1.5, 1.75};
  r.retimed_ms = 1.625;
  EXPECT_NE(
      record_json(r).find(R"("host_load":0.25,"cpu_pressure":0.5,"attempts":3,)"
                          R"("noisy":true,"stopped_early":false,"retime_round_ms":[1.5,1.75],)"
                          R"("retimed_ms":1.625})"),
      std::string::npos)
      << record_json(r);
  r.job = 0;
  r.error = "TIMEOUT";
  r.message = "killed at the time limit of 300 ms";
  std::string j = record_json(r);
  EXPECT_NE(j.find(R"("job":null)"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("median_ms":null,"error":"TIMEOUT")"), std::string::npos) << j;
}

}  // namespace
}  // namespace kiln::records
