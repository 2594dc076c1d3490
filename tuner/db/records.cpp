// Records as values: configurations as text, a record as a JSON line (kiln/records.h).
#include "kiln/records.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <tuple>

#include "kiln/json.h"

namespace kiln::records {

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::Running:
      return "running";
    case JobState::Done:
      return "done";
    case JobState::Cancelled:
      return "cancelled";
    case JobState::Failed:
      return "failed";
  }
  return "running";
}

std::string config_text(const Config& c) {
  std::string out;
  for (const auto& [name, value] : c) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}={}", name, value);
  }
  return out;
}

Config parse_config(const std::string& text) {
  Config c;
  if (!text.empty() && text.back() == ',')
    throw RecordsError(fmt::format("configuration '{}': ends with ','", text));
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(at, end - at);
    size_t eq = item.find('=');
    int64_t value = 0;
    const char* first = item.data() + (eq == std::string::npos ? 0 : eq + 1);
    const char* last = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(first, last, value);
    if (eq == std::string::npos || eq == 0 || ec != std::errc() || ptr != last ||
        !c.emplace(item.substr(0, eq), value).second)
      throw RecordsError(
          fmt::format("configuration '{}': '{}' is not NAME=INTEGER (once a name)", text, item));
    at = end + 1;
  }
  return c;
}

std::string record_json(const Record& r) {
  JsonObject config;
  for (const auto& [name, value] : r.config) config.integer(name, value);
  std::vector<std::string> rounds;
  for (double ms : r.round_ms) rounds.push_back(json_number(ms));
  JsonObject obj;
  obj.integer("id", r.id);
  if (r.job != 0) {
    obj.integer("job", r.job);
  } else {
    obj.null("job");
  }
  obj.str("workload", r.workload).str("key", r.key).raw("config", config.done());
  obj.raw("round_ms", json_array(rounds));
  if (r.error.empty()) {
    obj.num("median_ms", r.median_ms).null("error");
  } else {
    obj.null("median_ms").str("error", r.error);
  }
  obj.str("message", r.message).num("compile_ms", r.compile_ms).integer("flops", r.flops);
  obj.str("compiler_version", r.compiler_version)
      .str("agent", r.agent)
      .integer("unix_ms", r.unix_ms);
  auto optional = [&](const char* key, const std::optional<double>& v) {
    if (v) {
      obj.num(key, *v);
    } else {
      obj.null(key);
    }
  };
  optional("host_load", r.host_load);
  optional("cpu_pressure", r.cpu_pressure);
  obj.integer("attempts", r.attempts).boolean("noisy", r.noisy);
  obj.boolean("stopped_early", r.stopped_early);
  std::vector<std::string> retime;
  for (double ms : r.retime_round_ms) retime.push_back(json_number(ms));
  obj.raw("retime_round_ms", json_array(retime));
  optional("retimed_ms", r.retimed_ms);
  return obj.done();
}

bool ranks_before(const Record& a, const Record& b) {
  auto key = [](const Record& r) {
    bool ran = r.error.empty();
    return std::tuple(!ran, !r.retimed_ms, ran ? r.effective_ms() : 0.0, r.id);
  };
  return key(a) < key(b);
}

}  // namespace kiln::records
