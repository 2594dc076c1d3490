// timed(): runs a step of a command and logs how long it took (seen with --verbose).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kiln::cli {

// Calls fn and logs (at debug level, seen with --verbose) how long it took.
template <typename F>
auto timed(std::string_view subject, std::string_view what, F&& fn) {
  auto start = std::chrono::steady_clock::now();
  auto log = [&] {
    std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
    spdlog::debug("{}: {} took {:.3f} ms", subject, what, ms.count());
  };
  if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
    fn();
    log();
  } else {
    auto result = fn();
    log();
    return result;
  }
}

}  // namespace kiln::cli
