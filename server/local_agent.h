// `kilnd --local-agent`: one kiln-agent on kilnd's own machine, a child of
// kilnd, so that Measure works with no set-up (docs/agents.md). It dials
// kilnd's agent port on loopback with a token kilnd made for it (in a file
// only this user can read, removed when kilnd stops), dies with kilnd
// (PR_SET_PDEATHSIG), and is stopped with SIGTERM when kilnd stops.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::server {

// A fresh random token (hex, 256 bits) for a local agent. Throws
// std::runtime_error when the system has no randomness to give.
std::string random_token();

class LocalAgent {
 public:
  // Starts `binary` (a path, or a name looked up in PATH) as
  // `kiln-agent --server 127.0.0.1:PORT --key KEY --id local ...`. Throws
  // std::runtime_error when it cannot be started. An agent that exits later
  // (a crash, a kill) is started again, after 0.5 s, then twice as long each
  // time it exits within a minute of starting, at most 30 s; each exit and
  // restart is logged.
  LocalAgent(const std::string& binary, int port, const std::string& key, const std::string& token,
             const std::string& log_level);
  ~LocalAgent();  // SIGTERM, waited for; the token file removed
  LocalAgent(const LocalAgent&) = delete;
  LocalAgent& operator=(const LocalAgent&) = delete;

  pid_t pid() const { return pid_; }  // the running agent's; it changes on a restart
  int restarts() const { return restarts_; }

 private:
  pid_t spawn() const;  // throws std::runtime_error when the exec fails
  void supervise();

  std::vector<std::string> args_;
  std::string dir_;  // holds the token file
  std::atomic<pid_t> pid_{-1};
  std::atomic<int> restarts_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable stop_cv_;
  std::thread supervisor_;
};

// Where kiln-agent is, for kilnd at `self` (its executable): beside it, then
// in the build tree's agent/ beside server/, else just "kiln-agent" (PATH).
std::string default_agent_binary(const std::string& self);

}  // namespace kiln::server
