// A throwaway PostgreSQL server for a test: initdb and pg_ctl from Debian's postgresql-15 in a
// folder of the test's own, listening on a Unix socket there only (no TCP port, so tests never
// collide), run as the postgres user when the test runs as root (PostgreSQL refuses root).
// Stopped and removed with the value. Each test asks it for a database of its own.
//
// available() is false where PostgreSQL is not installed: a test says so and skips, unless
// KILN_REQUIRE_POSTGRES=1 (deploy/test.sh sets it), where that is a failure.
#pragma once

#include <fmt/format.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln::testing {

class PostgresServer {
 public:
  // Where PostgreSQL's programs are ("" when it is not installed).
  static std::string bin_dir() {
    std::error_code ec;
    for (const char* version : {"15", "16", "17", "14", "13"}) {
      std::string dir = std::string("/usr/lib/postgresql/") + version + "/bin";
      if (std::filesystem::exists(dir + "/initdb", ec) && std::filesystem::exists(dir + "/pg_ctl"))
        return dir;
    }
    return "";
  }
  static bool available() { return !bin_dir().empty(); }
  // What a test does where PostgreSQL is missing: skip, saying so, or fail when it is required.
  static std::string missing() {
    return "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
           "deploy/install-deps.sh installs postgresql-15";
  }
  static bool required() {
    const char* r = std::getenv("KILN_REQUIRE_POSTGRES");
    return r != nullptr && std::string(r) == "1";
  }

  // Makes the cluster and starts it; throws std::runtime_error, with its log, when it cannot.
  PostgresServer() : bin_(bin_dir()) {
    if (bin_.empty()) throw std::runtime_error(missing());
    std::string templ = (std::filesystem::temp_directory_path() / "kiln_pg_XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("cannot make " + templ);
    dir_ = templ;
    if (geteuid() == 0) {
      struct passwd* pw = getpwnam("postgres");
      if (pw == nullptr || chown(dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0)
        throw std::runtime_error("running as root, and cannot give " + dir_ +
                                 " to the postgres user");
      as_ = "runuser -u postgres -- ";
    }
    shell(fmt::format("{}{}/initdb -D {}/data -A trust -U kiln -N >{}/initdb.log 2>&1", as_, bin_,
                      dir_, dir_),
          dir_ + "/initdb.log");
    start();
  }
  ~PostgresServer() {
    if (running_) std::system(ctl("-m immediate -w stop >/dev/null 2>&1").c_str());
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  void start() {
    shell(ctl(fmt::format("-o \"-k {} -p {} -c listen_addresses='' -c fsync=off\" -l {}/log -w "
                          "start >/dev/null 2>&1",
                          dir_, kPort, dir_)),
          dir_ + "/log");
    running_ = true;
  }
  // Stops it: "fast" (clients told, sessions ended) or "immediate" (as a crash).
  void stop(const std::string& mode = "fast") {
    shell(ctl("-m " + mode + " -w stop >/dev/null 2>&1"), dir_ + "/log");
    running_ = false;
  }

  // A URL of database `db` (made by create()).
  std::string url(const std::string& db = "postgres") const {
    return fmt::format("postgresql:///{}?host={}&port={}&user=kiln", db, dir_, kPort);
  }
  // A new empty database; its URL.
  std::string create(const std::string& db) {
    sql("postgres", "CREATE DATABASE " + db);
    return url(db);
  }
  // Runs statements in database `db`; the first value of the last one's first row.
  std::string sql(const std::string& db, const std::string& statements) const {
    PGconn* c = PQconnectdb(url(db).c_str());
    if (PQstatus(c) != CONNECTION_OK) {
      std::string why = PQerrorMessage(c);
      PQfinish(c);
      throw std::runtime_error("cannot connect to " + url(db) + ": " + why);
    }
    PGresult* r = PQexec(c, statements.c_str());
    ExecStatusType status = PQresultStatus(r);
    std::string out;
    if (status == PGRES_TUPLES_OK && PQntuples(r) > 0) out = PQgetvalue(r, 0, 0);
    std::string why = PQresultErrorMessage(r);
    PQclear(r);
    PQfinish(c);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK)
      throw std::runtime_error(statements + ": " + why);
    return out;
  }
  const std::string& dir() const { return dir_; }

 private:
  static constexpr int kPort = 5432;  // on a socket in dir_ alone

  std::string ctl(const std::string& what) const {
    return fmt::format("{}{}/pg_ctl -D {}/data {}", as_, bin_, dir_, what);
  }
  static void shell(const std::string& command, const std::string& log) {
    if (std::system(command.c_str()) == 0) return;
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    throw std::runtime_error(command + " failed:\n" + text.str());
  }

  std::string bin_, dir_, as_;
  bool running_ = false;
};

}  // namespace kiln::testing
