// kiln's one JSON writer: escaped strings, finite numbers, objects built field
// by field. The CLI's --json lines, artifact metadata and the benchmarks' lines
// are all written with it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// `s` as a JSON string literal, quotes included. Control characters are
// escaped; well-formed UTF-8 passes through and any other byte (a message may
// quote a malformed file) becomes U+FFFD, so the output is always valid JSON.
std::string json_string(std::string_view s);

// A number as JSON: the shortest form that reads back as `v`, or, when
// `significant` > 0, that many significant digits. NaN and infinities are null.
std::string json_number(double v, int significant = 0);

// Writes one object in insertion order: {"a":1,"b":"x"}.
class JsonObject {
 public:
  JsonObject& raw(std::string_view key, std::string_view json);  // value already JSON
  JsonObject& str(std::string_view key, std::string_view value);
  JsonObject& num(std::string_view key, double value, int significant = 0);
  JsonObject& integer(std::string_view key, int64_t value);
  JsonObject& boolean(std::string_view key, bool value);
  JsonObject& null(std::string_view key);
  std::string done() const { return out_ + "}"; }

 private:
  std::string out_ = "{";
};

// [1,2,3]
std::string json_int_array(const std::vector<int64_t>& values);
// ["a","b"]
std::string json_string_array(const std::vector<std::string>& values);
// [v1,v2]: values already JSON.
std::string json_array(const std::vector<std::string>& json_values);

}  // namespace kiln
