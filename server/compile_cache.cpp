// The compile cache, in memory and on disk.
#include "compile_cache.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "kiln/digest.h"

namespace kiln::server {

namespace {

// An entry on disk: this line, the SHA-256 of the payload and a newline, then
// the payload (a serialized CompileResponse).
constexpr std::string_view kMagic = "kiln compile cache 1\n";

// A key is 64 hex digits; anything else never names a file.
bool well_formed(const std::string& key) {
  if (key.size() != 64) return false;
  for (char c : key)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

CompileCache::CompileCache(size_t memory_bytes, const std::string& dir) : capacity_(memory_bytes) {
  if (dir.empty()) return;
  dir_ = dir + "/cache";
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw std::runtime_error("cannot make the cache directory " + dir_ + ": " + ec.message());
  if (access(dir_.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("cannot write the cache directory " + dir_ + ": " +
                             std::strerror(errno));
}

std::string CompileCache::path_of(const std::string& key) const {
  return dir_ + "/" + key.substr(0, 2) + "/" + key + ".entry";
}

std::optional<v1::CompileResponse> CompileCache::find(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++stats_.hits;
      order_.splice(order_.begin(), order_, it->second);
      return it->second->response;
    }
  }
  if (std::optional<v1::CompileResponse> r = read_disk(key)) {
    add_memory(key, *r);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.hits;
    ++stats_.disk_hits;
    return r;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.misses;
  return std::nullopt;
}

void CompileCache::add(const std::string& key, const v1::CompileResponse& response) {
  add_memory(key, response);
  write_disk(key, response);
}

CacheStats CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CompileCache::add_memory(const std::string& key, const v1::CompileResponse& response) {
  size_t bytes = response.ByteSizeLong() + key.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > capacity_ || index_.count(key)) return;
  order_.push_front(Entry{key, response, bytes});
  index_[key] = order_.begin();
  stats_.bytes += bytes;
  while (stats_.bytes > capacity_) {
    stats_.bytes -= order_.back().bytes;
    index_.erase(order_.back().key);
    order_.pop_back();
  }
  stats_.entries = index_.size();
}

std::optional<v1::CompileResponse> CompileCache::read_disk(const std::string& key) {
  if (dir_.empty() || !well_formed(key)) return std::nullopt;
  std::string path = path_of(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string bytes = buffer.str();
  // What is wrong with the entry, if anything.
  std::string damage;
  v1::CompileResponse r;
  if (!bytes.starts_with(kMagic) || bytes.size() < kMagic.size() + 65 ||
      bytes[kMagic.size() + 64] != '\n') {
    damage = "no header";
  } else {
    std::string_view sum(bytes.data() + kMagic.size(), 64);
    std::string_view payload(bytes.data() + kMagic.size() + 65, bytes.size() - kMagic.size() - 65);
    if (sha256_hex(payload) != sum) {
      damage = "its SHA-256 does not match its bytes";
    } else if (!r.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      damage = "it does not parse";
    } else if (r.artifact().key() != key ||
               sha256_hex(r.artifact().code()) != r.artifact().code_sha256()) {
      damage = "it holds another artifact";
    }
  }
  if (damage.empty()) return r;
  spdlog::warn("compile cache: dropped {} ({}); compiling again", path, damage);
  std::filesystem::remove(path);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.dropped;
  return std::nullopt;
}

void CompileCache::write_disk(const std::string& key, const v1::CompileResponse& response) {
  if (dir_.empty() || !well_formed(key)) return;
  std::string payload = response.SerializeAsString();
  std::string bytes = std::string(kMagic) + sha256_hex(payload) + "\n" + payload;
  std::string path = path_of(key);
  std::string temp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    temp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(++temp_counter_);
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes.size();) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  // Durable before it is visible: a crash leaves the old entry or the new one.
  ok = ok && fsync(fd) == 0;
  if (fd >= 0) ok = close(fd) == 0 && ok;
  ok = ok && std::rename(temp.c_str(), path.c_str()) == 0;
  if (!ok) {
    spdlog::warn("compile cache: cannot write {}: {}", path, std::strerror(errno));
    std::filesystem::remove(temp, ec);
  }
}

}  // namespace kiln::server
