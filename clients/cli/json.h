// Just enough JSON to write `kiln interp --json` results: escaped strings,
// finite numbers, and an object built field by field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cli {

// `s` as a JSON string literal, quotes included. Control characters are
// escaped; well-formed UTF-8 passes through and any other byte (a message may
// quote a malformed file) becomes U+FFFD, so the output is always valid JSON.
std::string json_string(std::string_view s);

// A number as JSON: shortest round-trip form; NaN and infinities are null.
std::string json_number(double v);

// Writes one object in insertion order: {"a":1,"b":"x"}.
class JsonObject {
 public:
  JsonObject& raw(std::string_view key, std::string_view json);  // value already JSON
  JsonObject& str(std::string_view key, std::string_view value);
  JsonObject& num(std::string_view key, double value);
  JsonObject& integer(std::string_view key, int64_t value);
  JsonObject& boolean(std::string_view key, bool value);
  JsonObject& null(std::string_view key);
  std::string done() const { return out_ + "}"; }

 private:
  std::string out_ = "{";
};

// [1,2,3]
std::string json_int_array(const std::vector<int64_t>& values);

}  // namespace kiln::cli
