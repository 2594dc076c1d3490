// kilnd's local agent (local_agent.h).
#include "local_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kiln::server {

std::string random_token() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("cannot make a token: ") + strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

std::string default_agent_binary(const std::string& self) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(self).parent_path();
  for (const fs::path& candidate : {dir / "kiln-agent", dir.parent_path() / "agent" / "kiln-agent"})
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  return "kiln-agent";
}

LocalAgent::LocalAgent(const std::string& binary, int port, const std::string& key,
                       const std::string& token, const std::string& log_level) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kilnd-agent-XXXXXX";
  std::vector<char> dir(pattern.begin(), pattern.end());
  dir.push_back('\0');
  if (!mkdtemp(dir.data()))  // mode 0700
    throw std::runtime_error("--local-agent: cannot make a directory for its token in " + pattern +
                             ": " + strerror(errno));
  dir_ = dir.data();
  std::string token_file = dir_ + "/token";
  int fd = open(token_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  bool written =
      fd >= 0 && write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  if (fd >= 0) close(fd);
  if (!written) {
    std::filesystem::remove_all(dir_);
    throw std::runtime_error("--local-agent: cannot write its token file " + token_file);
  }

  args_ = {binary,        "--server", "127.0.0.1:" + std::to_string(port),
           "--key",       key,        "--token-file",
           token_file,    "--id",     "local",
           "--log-level", log_level};
  try {
    pid_ = spawn();
  } catch (...) {
    std::filesystem::remove_all(dir_);
    throw;
  }
  supervisor_ = std::thread([this] { supervise(); });
}

pid_t LocalAgent::spawn() const {
  std::vector<std::string> args = args_;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // A pipe closed on exec tells whether the exec worked.
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("--local-agent: cannot make a pipe: ") + strerror(errno));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here: kilnd may have threads.
    close(status_pipe[0]);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // kilnd died before the line above
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // kilnd blocks SIGTERM for its own thread
    execvp(argv[0], argv.data());
    int e = errno;
    ssize_t ignored = write(status_pipe[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  close(status_pipe[1]);
  if (pid < 0) {
    close(status_pipe[0]);
    throw std::runtime_error(std::string("--local-agent: cannot fork: ") + strerror(errno));
  }
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(status_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(status_pipe[0]);
  if (n > 0) {
    waitpid(pid, nullptr, 0);
    throw std::runtime_error("--local-agent: cannot start " + args_[0] + ": " +
                             strerror(exec_errno) + " (--agent-binary PATH names it)");
  }
  return pid;
}

// How an agent's process ended, for the log.
std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return std::string("was killed by SIG") + (name ? name : "?");
  }
  return "exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

void LocalAgent::supervise() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kFirstWait = std::chrono::milliseconds(500);
  constexpr auto kLongestWait = std::chrono::seconds(30);
  auto wait = std::chrono::milliseconds(kFirstWait);
  Clock::time_point started = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_) break;
    if (pid_t pid = pid_; pid > 0) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) != pid) continue;
      // It ran for a minute: a new failure, not the same one again.
      if (Clock::now() - started > std::chrono::minutes(1)) wait = kFirstWait;
      spdlog::warn("local agent (pid {}) {}; starting it again in {} ms", pid, how_it_ended(status),
                   wait.count());
      pid_ = -1;
    }
    // No agent: start one after `wait` (again and again, while starting it fails).
    if (stop_cv_.wait_for(lock, wait, [this] { return stopping_.load(); })) break;
    wait = std::min<std::chrono::milliseconds>(wait * 2, kLongestWait);
    try {
      pid_ = spawn();
      started = Clock::now();
      ++restarts_;
      spdlog::info("local agent started again (pid {}), restart {}", pid_.load(), restarts_.load());
    } catch (const std::exception& e) {
      spdlog::error("{}; trying again in {} ms", e.what(), wait.count());
    }
  }
}

LocalAgent::~LocalAgent() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (supervisor_.joinable()) supervisor_.join();
  if (pid_t pid = pid_; pid > 0) {
    kill(pid, SIGTERM);
    // It stops at once, killing a job it runs; SIGKILL if it has not after 5 s.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (waitpid(pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace kiln::server
