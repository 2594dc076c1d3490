// A real kilnd for an end-to-end test: started on a loopback port of its own
// (port 0: it says the one it got) and stopped with SIGTERM at the end.
// Throws std::runtime_error when it does not start.
#pragma once

#include <signal.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "spawned_process.h"

namespace kiln::testing {

class KilndProcess {
 public:
  // `binary --listen 127.0.0.1:0 --log-level warn extra...`; the address is
  // read from its first line of output.
  explicit KilndProcess(const std::string& binary, const std::vector<std::string>& extra = {})
      : process_(arguments(binary, extra), SpawnedProcess::Output::Piped) {
    // "kilnd: listening on 127.0.0.1:PORT"
    std::string line = process_.read_line();
    if (!line.starts_with("kilnd: listening on 127.0.0.1:")) {
      terminate();
      wait();
      throw std::runtime_error("kilnd did not start; it said: '" + line + "'");
    }
    address_ = "127.0.0.1:" + line.substr(line.rfind(':') + 1);
    running_ = true;
  }
  ~KilndProcess() {
    if (running_) {
      terminate();
      wait();
    }
  }
  KilndProcess(const KilndProcess&) = delete;
  KilndProcess& operator=(const KilndProcess&) = delete;

  const std::string& address() const { return address_; }
  // The next line kilnd prints after the first ("kilnd: agents on HOST:PORT").
  std::string read_line() { return process_.read_line(); }
  void terminate() { process_.signal(SIGTERM); }
  // SIGKILL: no goodbye, as a crash or a power cut would end it.
  void kill_now() {
    running_ = false;
    process_.kill_now();
  }
  pid_t pid() const { return process_.pid(); }
  // kilnd's wait status.
  int wait() {
    running_ = false;
    return process_.wait();
  }

 private:
  static std::vector<std::string> arguments(const std::string& binary,
                                            const std::vector<std::string>& extra) {
    std::vector<std::string> args = {binary, "--listen", "127.0.0.1:0", "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  SpawnedProcess process_;
  std::string address_;
  bool running_ = false;
};

}  // namespace kiln::testing
