// Generates .kiln programs for the semantic fuzzer from a stream of choices:
// valid operators (params, inputs with value specs, stored and value
// computations, reductions, guarded and data-dependent reads, integer
// division) under random schedules. Most are accepted; the rest must be
// refused with a clear error, never crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::fuzz {

// Where the choices come from: the bytes libFuzzer gives, or a seeded
// generator's. Once the bytes run out every choice is its first option.
class Choices {
 public:
  Choices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // A number in [0, n).
  uint32_t below(uint32_t n) {
    if (n <= 1) return 0;
    uint32_t v = 0;
    for (int k = 0; k < 2 && at_ < size_; ++k) v = (v << 8) | data_[at_++];
    return v % n;
  }
  bool coin() { return below(2) == 1; }
  int64_t in(int64_t lo, int64_t hi) { return lo + below(static_cast<uint32_t>(hi - lo + 1)); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

struct Program {
  std::string source;  // one func, `f`
  int opt_level = 3;
};

Program generate_program(Choices& c);

}  // namespace kiln::fuzz
