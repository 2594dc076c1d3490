// A real kilnd for an end-to-end test: started on a loopback port of its own
// (port 0: it says the one it got) and stopped with SIGTERM at the end.
// Throws std::runtime_error when it does not start.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace kiln::testing {

class KilndProcess {
 public:
  // `binary --listen 127.0.0.1:0 --log-level warn extra...`; the address is
  // read from its first line of output.
  explicit KilndProcess(const std::string& binary, const std::vector<std::string>& extra = {}) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("kilnd_process: cannot make a pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> args = {binary, "--listen", "127.0.0.1:0", "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("kilnd_process: cannot start " + binary);
    close(out[1]);
    // "kilnd: listening on 127.0.0.1:PORT\n"
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    out_ = out[0];
    if (!line.starts_with("kilnd: listening on 127.0.0.1:")) {
      terminate();
      wait();
      close(out_);
      throw std::runtime_error("kilnd did not start; it said: '" + line + "'");
    }
    address_ = "127.0.0.1:" + line.substr(line.rfind(':') + 1);
  }

  ~KilndProcess() {
    if (pid_ > 0) {
      terminate();
      wait();
    }
    close(out_);
  }
  KilndProcess(const KilndProcess&) = delete;
  KilndProcess& operator=(const KilndProcess&) = delete;

  const std::string& address() const { return address_; }
  // The next line kilnd prints after the first ("kilnd: agents on HOST:PORT").
  std::string read_line() {
    std::string line;
    char c;
    while (read(out_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  void terminate() { kill(pid_, SIGTERM); }
  // kilnd's wait status.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string address_;
};

}  // namespace kiln::testing
