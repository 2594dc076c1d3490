// What an isl computation found, remembered for the process by the text of
// its inputs: a tuner's candidates of one operator differ in knob values,
// which change its schedule and not its domains or accesses, so what depends
// only on those is computed for the first candidate and looked up for the
// rest. Private to compiler/poly.
#pragma once

#include <cstddef>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace kiln::poly {

// A memo from text to Value, safe to share between threads, bounded by the
// number of entries and by the bytes of keys plus what add() says each value
// holds: an entry that would pass either bound makes it forget everything
// first. Value is copied out of the memo, so make it cheap to copy (a flag, a
// shared_ptr to const).
template <typename Value>
class TextMemo {
 public:
  TextMemo(size_t max_entries, size_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  std::optional<Value> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  // Does nothing when the entry alone would pass the bytes bound.
  void add(const std::string& key, Value value, size_t value_bytes = 0) {
    size_t bytes = key.size() + value_bytes;
    if (bytes > max_bytes_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= max_entries_ || bytes_ + bytes > max_bytes_) {
      entries_.clear();
      bytes_ = 0;
    }
    if (entries_.emplace(key, std::move(value)).second) bytes_ += bytes;
  }

  static constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();

 private:
  const size_t max_entries_, max_bytes_;
  std::mutex mutex_;
  std::unordered_map<std::string, Value> entries_;
  size_t bytes_ = 0;
};

}  // namespace kiln::poly
