// A program run in a child process under limits: what kilnd runs kernels in,
// so that a crash, an endless loop or a runaway allocation in generated code
// ends that child and never kilnd.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::server {

struct ChildLimits {
  // Past it the child (its whole process group) is killed with SIGKILL.
  std::chrono::milliseconds wall{60'000};
  uint64_t address_space_bytes = 0;  // RLIMIT_AS; 0: none
  uint64_t cpu_seconds = 0;          // RLIMIT_CPU (SIGXCPU, then SIGKILL); 0: none
  // Bytes of standard output kept; a child that writes more is killed.
  size_t max_output_bytes = size_t{1} << 30;
  // Asked every few milliseconds while the child runs; true kills it.
  std::function<bool()> stop{};
};

struct ChildResult {
  enum class End : uint8_t {
    Exited,    // exit_code holds its status
    Signaled,  // killed by `signal` (not by us)
    TimedOut,  // we killed it at the wall-clock limit
    Stopped,   // we killed it because limits.stop said so
    TooMuchOutput,
  };
  End end = End::Exited;
  int exit_code = 0;
  int signal = 0;
  std::string out;  // standard output
  std::string err;  // the last 64 KiB of standard error
  double ms = 0;    // wall-clock time
};

// Runs `path` with `args` (argv[1..]), `input` on its standard input, in a
// process group of its own with the limits set, its signal mask cleared and
// no file descriptor of ours open but the three pipes. Throws
// std::runtime_error when it cannot be started (no such program: the child
// exits 127, which is reported as such by the caller).
ChildResult run_child(const std::string& path, const std::vector<std::string>& args,
                      const std::string& input, const ChildLimits& limits);

// "SIGSEGV (segmentation fault)", for messages.
std::string signal_description(int sig);

}  // namespace kiln::server
