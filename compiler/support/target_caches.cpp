// The host's caches, as Linux describes them, and cache sizes as text (kiln/target.h).
#include <charconv>
#include <fstream>
#include <string>

#include "kiln/target.h"

namespace kiln {

std::optional<int64_t> parse_cache_size(std::string_view text) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || n < 0) return std::nullopt;
  std::string_view unit = text.substr(static_cast<size_t>(end - text.data()));
  int64_t scale = unit.empty() ? 1 : unit == "K" ? 1024 : unit == "M" ? 1024 * 1024 : 0;
  if (scale == 0 || n > (int64_t{1} << 50) / scale) return std::nullopt;
  return n * scale;
}

void host_caches(Target& t) {
  for (int index = 0; index < 8; ++index) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    std::optional<int64_t> bytes = parse_cache_size(size);
    if (!bytes || type == "Instruction") continue;
    if (level == 1) t.l1d_bytes = *bytes;
    if (level == 2) t.l2_bytes = *bytes;
    if (level == 3) t.l3_bytes = *bytes;
  }
}

}  // namespace kiln
