// kilnd's compile cache: Compile responses by their request key (kiln/compile.h,
// cache_key), in memory (least recently used out first, bounded in bytes) and,
// given a directory, on disk, so that a restarted kilnd serves a repeated
// request without compiling. A disk entry is written atomically (a temporary
// file, then rename) and carries the SHA-256 of its bytes: a truncated or
// corrupted entry is detected, dropped and recompiled, never served.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "kiln/v1/service.pb.h"

namespace kiln::server {

struct CacheStats {
  uint64_t hits = 0;       // from memory or disk
  uint64_t disk_hits = 0;  // of which from disk
  uint64_t misses = 0;
  uint64_t dropped = 0;           // disk entries found damaged and removed
  size_t entries = 0, bytes = 0;  // in memory
};

class CompileCache {
 public:
  // `dir` empty: memory only. Otherwise entries live in DIR/cache/, made if
  // missing; a directory that cannot be made or written is an error
  // (std::runtime_error) here, not at the first request.
  CompileCache(size_t memory_bytes, const std::string& dir);

  // Safe to call from several threads at once.
  std::optional<v1::CompileResponse> find(const std::string& key);
  void add(const std::string& key, const v1::CompileResponse& response);
  CacheStats stats() const;

  // The file an entry lives in (for tests and for operators of the service).
  std::string path_of(const std::string& key) const;

 private:
  std::optional<v1::CompileResponse> read_disk(const std::string& key);
  void write_disk(const std::string& key, const v1::CompileResponse& response);
  void add_memory(const std::string& key, const v1::CompileResponse& response);

  struct Entry {
    std::string key;
    v1::CompileResponse response;
    size_t bytes;
  };
  size_t capacity_;
  std::string dir_;  // DIR/cache, or empty
  mutable std::mutex mu_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  CacheStats stats_;
  uint64_t temp_counter_ = 0;
};

}  // namespace kiln::server
