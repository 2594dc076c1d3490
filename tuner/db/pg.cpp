// PostgreSQL through libpq (kiln/pg.h).
#include "kiln/pg.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace kiln::pg {
namespace {

// Whether a statement's SQLSTATE says the server went away, rather than that it refused it.
bool connection_lost(const char* state) {
  if (state == nullptr) return true;  // no answer at all
  std::string s = state;
  return s.starts_with("08") || s == "57P01" || s == "57P02" || s == "57P03";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// A new connection to `url`, with kiln's defaults (a URL's own settings win over them).
PGconn* connect_to(const std::string& url) {
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "kiln", url.c_str(), nullptr};
  PGconn* c = PQconnectdbParams(keys, values, 1);
  if (c && PQstatus(c) == CONNECTION_OK)
    PQsetNoticeProcessor(
        c, [](void*, const char*) {}, nullptr);
  return c;
}

}  // namespace

Params& Params::text(std::string v) {
  values_.emplace_back(std::move(v));
  return *this;
}
Params& Params::integer(int64_t v) { return text(std::to_string(v)); }
Params& Params::real(double v) { return text(fmt::format("{}", v)); }
Params& Params::real(const std::optional<double>& v) { return v ? real(*v) : null(); }
Params& Params::flag(bool v) { return text(v ? "true" : "false"); }
Params& Params::reals(const std::vector<double>& v) {
  return text(fmt::format("{{{}}}", fmt::join(v, ",")));
}
Params& Params::bytes(const std::string& v) {
  // BYTEA's hex text form: \x then two hex digits a byte.
  static const char* const kHex = "0123456789abcdef";
  std::string t = "\\x";
  t.reserve(2 + 2 * v.size());
  for (unsigned char c : v) {
    t += kHex[c >> 4];
    t += kHex[c & 15];
  }
  return text(std::move(t));
}
Params& Params::texts(const std::vector<std::string>& v) {
  // An array literal, each element quoted with its quotes and backslashes escaped.
  std::string t = "{";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) t += ',';
    t += '"';
    for (char c : v[i]) {
      if (c == '"' || c == '\\') t += '\\';
      t += c;
    }
    t += '"';
  }
  return text(t + "}");
}
Params& Params::null() {
  values_.emplace_back(std::nullopt);
  return *this;
}
std::vector<const char*> Params::pointers() const {
  std::vector<const char*> out;
  for (const auto& v : values_) out.push_back(v ? v->c_str() : nullptr);
  return out;
}

Result::~Result() { PQclear(r_); }
int Result::rows() const { return PQntuples(r_); }
int64_t Result::changed() const { return std::atoll(PQcmdTuples(r_)); }
bool Result::is_null(int row, int col) const { return PQgetisnull(r_, row, col) != 0; }
std::string Result::text(int row, int col) const {
  return std::string(PQgetvalue(r_, row, col), static_cast<size_t>(PQgetlength(r_, row, col)));
}
int64_t Result::integer(int row, int col) const { return std::atoll(PQgetvalue(r_, row, col)); }
double Result::real(int row, int col) const {
  return std::strtod(PQgetvalue(r_, row, col), nullptr);
}
std::optional<double> Result::optional_real(int row, int col) const {
  if (is_null(row, col)) return std::nullopt;
  return real(row, col);
}
bool Result::flag(int row, int col) const { return PQgetvalue(r_, row, col)[0] == 't'; }
std::vector<double> Result::reals(int row, int col) const {
  std::vector<double> out;
  if (is_null(row, col)) return out;
  std::string t = text(row, col);  // "{1.5,2.25}"
  size_t at = 1;
  while (at < t.size() && t[at] != '}') {
    size_t end = t.find_first_of(",}", at);
    out.push_back(std::strtod(t.substr(at, end - at).c_str(), nullptr));
    at = end + (t[end] == ',' ? 1 : 0);
  }
  return out;
}
std::string Result::bytes(int row, int col) const {
  if (is_null(row, col)) return "";
  size_t n = 0;
  unsigned char* raw =
      PQunescapeBytea(reinterpret_cast<const unsigned char*>(PQgetvalue(r_, row, col)), &n);
  if (raw == nullptr) throw records::RecordsError("a BYTEA value that cannot be read");
  std::string out(reinterpret_cast<const char*>(raw), n);
  PQfreemem(raw);
  return out;
}

Result Connection::exec(const std::string& sql, const Params& p) {
  std::vector<const char*> values = p.pointers();
  return check(
      PQexecParams(c_, sql.c_str(), p.size(), nullptr, values.data(), nullptr, nullptr, 0));
}

void Connection::run(const std::string& sql, const std::string& what) {
  try {
    check(PQexec(c_, sql.c_str()));
  } catch (const Lost&) {
    throw;
  } catch (const records::RecordsError& e) {
    throw records::RecordsError(fmt::format("{} ({})", e.what(), what));
  }
}

void Connection::transaction(const std::string& what, const std::function<void()>& body) {
  run("BEGIN", what);
  try {
    body();
  } catch (const Lost&) {
    throw;  // the server ended the transaction with the connection
  } catch (...) {
    try {
      run("ROLLBACK", what);
    } catch (...) {  // the error that led here says more
    }
    throw;
  }
  run("COMMIT", what);
}

Result Connection::check(PGresult* raw) {
  Result owned(raw);
  ExecStatusType status = raw ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return owned;
  const char* state = raw ? PQresultErrorField(raw, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = trimmed(raw ? PQresultErrorMessage(raw) : PQerrorMessage(c_));
  if (PQstatus(c_) == CONNECTION_BAD || connection_lost(state))
    throw Lost(fmt::format("records database {}: the connection was lost: {}", name_, message));
  throw records::RecordsError(fmt::format("records database {}: {}", name_, message));
}

Pool::Pool(std::string url, PoolOptions options)
    : url_(std::move(url)), name_(records::redacted(url_)), options_(options) {
  options_.connections = std::max(1, options_.connections);
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url_.c_str(), &error);
  if (parsed == nullptr) {
    std::string why = trimmed(error ? error : "cannot read it");
    PQfreemem(error);
    throw records::RecordsError(
        fmt::format("records database {}: not a PostgreSQL URL: {}", name_, why));
  }
  PQconninfoFree(parsed);
}

Pool::~Pool() {
  for (PGconn* c : idle_) PQfinish(c);
}

PGconn* Pool::connect() const { return connect_to(url_); }

void Pool::connect_now(const std::function<void(Connection&)>& first) {
  PGconn* c = connect();
  if (PQstatus(c) != CONNECTION_OK) {
    std::string why = trimmed(PQerrorMessage(c));
    PQfinish(c);
    throw records::RecordsError(fmt::format("records database {}: cannot connect: {}", name_, why));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++open_;
  }
  try {
    Connection db(c, name_);
    if (first) first(db);
  } catch (const Lost& e) {
    drop(c);
    throw records::RecordsError(e.what());
  } catch (...) {
    drop(c);
    throw;
  }
  release(c);
}

void Pool::call_on(const std::function<void(Connection&)>& f) {
  auto give_up = std::chrono::steady_clock::now() + options_.wait_for_server;
  auto delay = std::chrono::milliseconds(50);
  for (;;) {
    PGconn* c = acquire();
    std::string why;
    if (c == nullptr) {
      c = connect();
      if (PQstatus(c) != CONNECTION_OK) {
        why = fmt::format("records database {}: cannot connect: {}", name_,
                          trimmed(PQerrorMessage(c)));
        drop(c);
        c = nullptr;
      }
    }
    if (c != nullptr) {
      try {
        Connection db(c, name_);
        f(db);
        release(c);
        return;
      } catch (const Lost& e) {
        why = e.what();
        drop(c);
      } catch (...) {
        release(c);
        throw;
      }
    }
    if (std::chrono::steady_clock::now() + delay > give_up)
      throw records::RecordsUnavailable(
          fmt::format("{} (tried for {} s)", why, options_.wait_for_server.count() / 1000.0));
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(2000));
  }
}

PGconn* Pool::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  free_.wait(lock, [&] { return !idle_.empty() || open_ < options_.connections; });
  if (!idle_.empty()) {
    PGconn* c = idle_.back();
    idle_.pop_back();
    return c;
  }
  ++open_;
  return nullptr;
}

void Pool::release(PGconn* c) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(c);
  free_.notify_one();
}

void Pool::drop(PGconn* c) {
  PQfinish(c);
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
  free_.notify_one();
}

Listener::Listener(std::string url, std::string channel)
    : url_(std::move(url)), channel_(std::move(channel)) {}

Listener::~Listener() { PQfinish(c_); }

bool Listener::listen() {
  PQfinish(c_);
  c_ = connect_to(url_);
  if (PQstatus(c_) != CONNECTION_OK) return false;
  char* quoted = PQescapeIdentifier(c_, channel_.c_str(), channel_.size());
  if (quoted == nullptr) return false;
  PGresult* r = PQexec(c_, (std::string("LISTEN ") + quoted).c_str());
  PQfreemem(quoted);
  bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  return ok;
}

std::vector<std::string> Listener::wait(std::chrono::milliseconds timeout) {
  std::vector<std::string> out;
  if ((c_ == nullptr || PQstatus(c_) != CONNECTION_OK) && !listen()) {
    std::this_thread::sleep_for(timeout);
    return out;
  }
  auto drain = [&] {
    PQconsumeInput(c_);
    while (PGnotify* n = PQnotifies(c_)) {
      out.emplace_back(n->extra);
      PQfreemem(n);
    }
  };
  drain();
  if (!out.empty()) return out;
  pollfd p{PQsocket(c_), POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) > 0) drain();
  if (PQstatus(c_) != CONNECTION_OK) {  // lost: listen again next time
    PQfinish(c_);
    c_ = nullptr;
  }
  return out;
}

}  // namespace kiln::pg
