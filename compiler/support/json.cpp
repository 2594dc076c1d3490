// The JSON writer of kiln/json.h.
#include "kiln/json.h"

#include <fmt/format.h>

#include <cmath>

namespace kiln {

namespace {

// The length of the well-formed UTF-8 sequence at s[i], or 0 if there is none.
size_t utf8_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  if (n == 3 && c == 0xe0 && byte(i + 1) < 0xa0) return 0;   // overlong
  if (n == 3 && c == 0xed && byte(i + 1) >= 0xa0) return 0;  // surrogate
  if (n == 4 && c == 0xf0 && byte(i + 1) < 0x90) return 0;   // overlong
  if (n == 4 && c == 0xf4 && byte(i + 1) >= 0x90) return 0;  // beyond U+10FFFF
  return n;
}

}  // namespace

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {  // copy well-formed UTF-8; replace anything else with U+FFFD
      size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v, int significant) {
  if (!std::isfinite(v)) return "null";
  if (significant > 0) return fmt::format("{:.{}g}", v, significant);
  return fmt::format("{}", v);
}

JsonObject& JsonObject::raw(std::string_view key, std::string_view json) {
  if (out_.size() > 1) out_ += ',';
  out_ += json_string(key);
  out_ += ':';
  out_ += json;
  return *this;
}

JsonObject& JsonObject::str(std::string_view key, std::string_view value) {
  return raw(key, json_string(value));
}

JsonObject& JsonObject::num(std::string_view key, double value, int significant) {
  return raw(key, json_number(value, significant));
}

JsonObject& JsonObject::integer(std::string_view key, int64_t value) {
  return raw(key, std::to_string(value));
}

JsonObject& JsonObject::boolean(std::string_view key, bool value) {
  return raw(key, value ? "true" : "false");
}

JsonObject& JsonObject::null(std::string_view key) { return raw(key, "null"); }

std::string json_array(const std::vector<std::string>& json_values) {
  std::string out = "[";
  for (size_t i = 0; i < json_values.size(); ++i) {
    if (i > 0) out += ',';
    out += json_values[i];
  }
  return out + "]";
}

std::string json_int_array(const std::vector<int64_t>& values) {
  std::vector<std::string> items;
  for (int64_t v : values) items.push_back(std::to_string(v));
  return json_array(items);
}

std::string json_string_array(const std::vector<std::string>& values) {
  std::vector<std::string> items;
  for (const std::string& v : values) items.push_back(json_string(v));
  return json_array(items);
}

}  // namespace kiln
