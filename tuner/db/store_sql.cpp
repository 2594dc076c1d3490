// What the SQLite and PostgreSQL record stores share (store_sql.h), and the choice between
// them (kiln/records.h's open_store).
#include "store_sql.h"

#include <chrono>

namespace kiln::records {

namespace sql {

JobState parse_state(const std::string& s) {
  if (s == "done") return JobState::Done;
  if (s == "cancelled") return JobState::Cancelled;
  if (s == "failed") return JobState::Failed;
  return JobState::Running;
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string where(const Query& q, std::string (*placeholder)(int)) {
  std::vector<std::string> terms;
  int n = 0;
  auto next = [&] { return placeholder(++n); };
  if (q.workload) terms.push_back("workload = " + next());
  if (q.name)
    terms.push_back("workload IN (SELECT hash FROM workloads WHERE name = " + next() + ")");
  if (q.key) terms.push_back("key = " + next());
  if (q.job) terms.push_back("job = " + next());
  if (q.since_unix_ms) terms.push_back("unix_ms >= " + next());
  if (q.until_unix_ms) terms.push_back("unix_ms < " + next());
  if (q.error) terms.push_back("error = " + next());
  std::string out;
  for (const std::string& t : terms) out += (out.empty() ? " WHERE " : " AND ") + t;
  return out;
}

std::vector<std::variant<std::string, int64_t>> where_values(const Query& q) {
  std::vector<std::variant<std::string, int64_t>> out;
  if (q.workload) out.emplace_back(*q.workload);
  if (q.name) out.emplace_back(*q.name);
  if (q.key) out.emplace_back(*q.key);
  if (q.job) out.emplace_back(*q.job);
  if (q.since_unix_ms) out.emplace_back(*q.since_unix_ms);
  if (q.until_unix_ms) out.emplace_back(*q.until_unix_ms);
  if (q.error) out.emplace_back(*q.error);
  return out;
}

Query best_of(const std::string& workload, const std::string& key) {
  Query q;
  q.workload = workload;
  q.key = key;
  q.error = "";
  q.order = Query::Order::Fastest;
  q.limit = 1;
  return q;
}

std::string order_by(const Query& q) {
  switch (q.order) {
    case Query::Order::Arrival:
      break;
    case Query::Order::Fastest:
      return " ORDER BY error <> '', retimed_ms IS NULL, coalesce(retimed_ms, median_ms), id";
    case Query::Order::Median:
      return " ORDER BY error <> '', median_ms, id";
  }
  return " ORDER BY id";
}

}  // namespace sql

int schema_version() { return sql::kSchemaVersion; }

bool is_postgres_url(const std::string& where) {
  return where.starts_with("postgresql://") || where.starts_with("postgres://");
}

std::unique_ptr<RecordStore> open_store(const std::string& where) {
  return is_postgres_url(where) ? open_postgres_store(where) : open_sqlite_store(where);
}

}  // namespace kiln::records
