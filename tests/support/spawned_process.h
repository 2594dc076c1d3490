// A program an end-to-end test starts (kilnd, kiln-agent): spawned with its
// arguments, optionally with its standard output on a pipe the test reads
// line by line, signalled, waited for, and killed if the test ends first.
// Throws std::runtime_error when it cannot be started.
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

class SpawnedProcess {
 public:
  enum class Output { Inherited, Piped };

  SpawnedProcess(std::vector<std::string> args, Output output = Output::Inherited) {
    int out[2] = {-1, -1};
    if (output == Output::Piped && pipe(out) != 0)
      throw std::runtime_error("cannot make a pipe for " + args.at(0));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (output == Output::Piped) {
      posix_spawn_file_actions_adddup2(&actions, out[1], 1);
      posix_spawn_file_actions_addclose(&actions, out[0]);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawnp(&pid_, args.at(0).c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (output == Output::Piped) {
      close(out[1]);
      out_ = out[0];
    }
    if (rc != 0) {
      if (out_ >= 0) close(out_);
      throw std::runtime_error("cannot start " + args.at(0));
    }
  }
  ~SpawnedProcess() {
    kill_now();
    if (out_ >= 0) close(out_);
  }
  SpawnedProcess(const SpawnedProcess&) = delete;
  SpawnedProcess& operator=(const SpawnedProcess&) = delete;

  // The next line of its standard output (Output::Piped), without the newline.
  std::string read_line() {
    std::string line;
    char c;
    while (read(out_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Its wait status, once it has ended.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  // SIGKILL, and reaped.
  void kill_now() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    wait();
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

}  // namespace kiln::testing
