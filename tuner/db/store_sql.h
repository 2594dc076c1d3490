// What the SQLite and PostgreSQL record stores share (kiln/records.h): the schema version,
// the records' columns in the order both read them, and a Query as SQL.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "kiln/records.h"

namespace kiln::records::sql {

// The schema version both stores write; each lists its migrations to it in its own dialect.
inline constexpr int kSchemaVersion = 4;

// A record's columns, in the order both stores read them.
inline constexpr const char* kRecordColumns =
    "id, job, workload, key, config, round_ms, median_ms, error, message, compile_ms, flops, "
    "compiler_version, agent, unix_ms, host_load, cpu_pressure, attempts, noisy, retime_round_ms, "
    "retimed_ms, stopped_early";
inline constexpr const char* kJobColumns =
    "id, workload, key, settings, state, started_unix_ms, finished_unix_ms";

JobState parse_state(const std::string& s);
int64_t now_unix_ms();

// q's filter as " WHERE ..." ("" when none), its n-th value written as placeholder(n), n from 1.
std::string where(const Query& q, std::string (*placeholder)(int));
// The values where() leaves placeholders for, in their order.
std::vector<std::variant<std::string, int64_t>> where_values(const Query& q);
// The query of RecordStore::best: the fastest record that ran of `workload` on `key`.
Query best_of(const std::string& workload, const std::string& key);
// q's order as " ORDER BY ...".
std::string order_by(const Query& q);

}  // namespace kiln::records::sql
