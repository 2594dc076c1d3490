// PostgreSQL through libpq, as kiln's shared stores use it (the record store, kilnd's shared job
// queue): a pool of connections, each used by one call at a time, statements with values
// passed apart from their text, and a call tried again on a new connection while the server is
// away (restarting, a network cut), waiting longer each time, until the pool's patience is
// spent. Errors are the records database's (kiln/records.h): RecordsError when the server
// refused a statement, RecordsUnavailable when it could not be reached in time. A URL is
// never shown with its password.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/records.h"

struct pg_conn;
struct pg_result;

namespace kiln::pg {

// A statement's values, as text (none: NULL).
class Params {
 public:
  Params& text(std::string v);
  Params& integer(int64_t v);
  Params& real(double v);
  Params& real(const std::optional<double>& v);
  Params& flag(bool v);
  Params& reals(const std::vector<double>& v);       // an array of DOUBLE PRECISION
  Params& bytes(const std::string& v);               // BYTEA
  Params& texts(const std::vector<std::string>& v);  // an array of TEXT
  Params& null();
  int size() const { return static_cast<int>(values_.size()); }
  std::vector<const char*> pointers() const;

 private:
  std::vector<std::optional<std::string>> values_;
};

// A statement's rows, values read from their text form.
class Result {
 public:
  explicit Result(pg_result* r) : r_(r) {}
  ~Result();
  Result(Result&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;

  int rows() const;
  int64_t changed() const;  // rows an INSERT, UPDATE or DELETE touched
  bool is_null(int row, int col) const;
  std::string text(int row, int col) const;
  int64_t integer(int row, int col) const;
  double real(int row, int col) const;
  std::optional<double> optional_real(int row, int col) const;
  bool flag(int row, int col) const;
  std::vector<double> reals(int row, int col) const;  // empty when NULL
  std::string bytes(int row, int col) const;          // a BYTEA's bytes

 private:
  pg_result* r_;
};

// The connection was lost (or the server is shutting down or starting): the call is tried
// again on a new one.
class Lost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One connection, used by one call at a time.
class Connection {
 public:
  Connection(pg_conn* c, const std::string& name) : c_(c), name_(name) {}
  // Runs a statement: its rows; RecordsError when the server refused it, Lost when it is gone.
  Result exec(const std::string& sql, const Params& p = {});
  // Runs statements with no values (a migration, BEGIN); `what` says what for, in an error.
  void run(const std::string& sql, const std::string& what);
  // Runs `body` in a transaction: committed when it returns, rolled back when it throws.
  void transaction(const std::string& what, const std::function<void()>& body);

 private:
  Result check(pg_result* raw);
  pg_conn* c_;
  const std::string& name_;
};

// How many connections, and how long a call waits through a lost one (kiln/records.h).
using PoolOptions = records::PostgresOptions;

class Pool {
 public:
  // Connects to nothing yet. Throws RecordsError when `url` is not a connection URL.
  Pool(std::string url, PoolOptions options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // The database as it may be shown (records::redacted).
  const std::string& name() const { return name_; }

  // Runs `f` on a connection of the pool, connecting again and trying again while the
  // connection is lost. The first call may take longer than others: it connects.
  template <typename F>
  auto call(F f) -> decltype(f(std::declval<Connection&>())) {
    using T = decltype(f(std::declval<Connection&>()));
    if constexpr (std::is_void_v<T>) {
      call_on([&](Connection& c) { f(c); });
    } else {
      std::optional<T> out;
      call_on([&](Connection& c) { out.emplace(f(c)); });
      return std::move(*out);
    }
  }
  // Connects once now: RecordsError (not Unavailable: nothing to wait for yet) when it cannot.
  void connect_now(const std::function<void(Connection&)>& first = {});

 private:
  void call_on(const std::function<void(Connection&)>& f);
  pg_conn* connect() const;
  pg_conn* acquire();
  void release(pg_conn* c);
  void drop(pg_conn* c);

  std::string url_, name_;
  PoolOptions options_;
  std::mutex mu_;
  std::condition_variable free_;
  std::vector<pg_conn*> idle_;
  int open_ = 0;
};

// A connection of its own that LISTENs on a channel: NOTIFY's payloads as they come. Connects
// again, and listens again, when the connection is lost (what was notified meanwhile is
// missed: a listener's user also looks for itself now and then).
class Listener {
 public:
  // Connects nothing yet: the first wait() does.
  Listener(std::string url, std::string channel);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The payloads notified since the last call, waiting up to `timeout` for the first; empty
  // when none came (or the server is away: then after the timeout).
  std::vector<std::string> wait(std::chrono::milliseconds timeout);

 private:
  bool listen();
  std::string url_, channel_;
  pg_conn* c_ = nullptr;
};

}  // namespace kiln::pg
