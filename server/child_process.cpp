// fork + exec with limits, and the pipes to the child (child_process.h).
#include "child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace kiln::server {
namespace {

constexpr size_t kKeptStderrBytes = 64 << 10;

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() {
    if (pipe2(fd, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("cannot make a pipe: ") + std::strerror(errno));
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (fd[0] >= 0) close(fd[0]);
    fd[0] = -1;
  }
  void close_write() {
    if (fd[1] >= 0) close(fd[1]);
    fd[1] = -1;
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

// Kills and reaps the child when run_child leaves early by an exception, so
// no child outlives its request and none is left a zombie.
struct Reaper {
  pid_t pid;
  explicit Reaper(pid_t p) : pid(p) {}
  ~Reaper() {
    if (pid <= 0) return;
    kill(-pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;
};

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const char* path, char* const* argv, Pipe& in, Pipe& out, Pipe& err,
                             const ChildLimits& limits) {
  setpgid(0, 0);
  // Were any of 0-2 closed in kilnd, a pipe may already sit on one of them:
  // move the three ends above 2 first, so no dup2 overwrites another's source
  // and each lands on a new descriptor (dup2 onto itself would keep CLOEXEC).
  int ends[3] = {in.fd[0], out.fd[1], err.fd[1]};
  for (int& fd : ends)
    if ((fd = fcntl(fd, F_DUPFD, 3)) < 0) _exit(126);
  for (int k = 0; k < 3; ++k)
    if (dup2(ends[k], k) < 0) _exit(126);
  close_range(3, ~0U, 0);
  rlimit core{0, 0};
  setrlimit(RLIMIT_CORE, &core);
  if (limits.address_space_bytes > 0) {
    rlimit as{limits.address_space_bytes, limits.address_space_bytes};
    setrlimit(RLIMIT_AS, &as);
  }
  if (limits.cpu_seconds > 0) {
    rlimit cpu{limits.cpu_seconds, limits.cpu_seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGXCPU}) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(path, argv);
  _exit(127);
}

}  // namespace

std::string signal_description(int sig) {
  const char* name = sigabbrev_np(sig);
  const char* what = sigdescr_np(sig);
  return std::string("SIG") + (name ? name : std::to_string(sig)) + " (" +
         (what ? what : "unknown signal") + ")";
}

ChildResult run_child(const std::string& path, const std::vector<std::string>& args,
                      const std::string& input, const ChildLimits& limits) {
  // A child that exits before reading all of its input must not take kilnd
  // down with SIGPIPE: writes to its pipe fail with EPIPE instead.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { signal(SIGPIPE, SIG_IGN); });

  std::vector<std::string> owned{path};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);

  Pipe in, out, err;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) exec_child(path.c_str(), argv.data(), in, out, err, limits);
  setpgid(pid, pid);  // also here: no race with the kill below
  Reaper reaper(pid);
  in.close_read();
  out.close_write();
  err.close_write();
  set_nonblocking(in.fd[1]);
  set_nonblocking(out.fd[0]);
  set_nonblocking(err.fd[0]);

  ChildResult r;
  size_t written = 0;
  if (input.empty()) in.close_write();
  bool killed = false;
  char buf[1 << 16];
  while (out.fd[0] >= 0 || err.fd[0] >= 0) {
    auto now = std::chrono::steady_clock::now();
    if (!killed) {
      if (now - start >= limits.wall) {
        r.end = ChildResult::End::TimedOut;
      } else if (limits.stop && limits.stop()) {
        r.end = ChildResult::End::Stopped;
      } else if (r.out.size() > limits.max_output_bytes) {
        r.end = ChildResult::End::TooMuchOutput;
      }
      if (r.end != ChildResult::End::Exited) {
        kill(-pid, SIGKILL);
        killed = true;
        in.close_write();
      }
    }
    pollfd fds[3];
    nfds_t n = 0;
    if (out.fd[0] >= 0) fds[n++] = {out.fd[0], POLLIN, 0};
    if (err.fd[0] >= 0) fds[n++] = {err.fd[0], POLLIN, 0};
    if (in.fd[1] >= 0) fds[n++] = {in.fd[1], POLLOUT, 0};
    if (poll(fds, n, 20) < 0 && errno != EINTR)
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    for (nfds_t k = 0; k < n; ++k) {
      if (fds[k].revents == 0) continue;
      if (fds[k].fd == in.fd[1]) {
        ssize_t w = write(in.fd[1], input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size())
          in.close_write();
        continue;
      }
      bool is_out = fds[k].fd == out.fd[0];
      ssize_t got = read(fds[k].fd, buf, sizeof buf);
      if (got > 0) {
        std::string& to = is_out ? r.out : r.err;
        to.append(buf, static_cast<size_t>(got));
        if (!is_out && to.size() > 2 * kKeptStderrBytes) to.erase(0, to.size() - kKeptStderrBytes);
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        (is_out ? out : err).close_read();
      }
    }
  }
  in.close_write();
  // The pipes are closed; the child may not have ended yet.
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, killed ? 0 : WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) {
      reaper.pid = -1;
      break;
    }
    if (w == 0) {
      auto now = std::chrono::steady_clock::now();
      bool timed_out = now - start >= limits.wall;
      if (timed_out || (limits.stop && limits.stop())) {
        r.end = timed_out ? ChildResult::End::TimedOut : ChildResult::End::Stopped;
        kill(-pid, SIGKILL);
        killed = true;
      } else {
        usleep(2000);
      }
    }
  }
  r.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (r.err.size() > kKeptStderrBytes) r.err.erase(0, r.err.size() - kKeptStderrBytes);
  if (r.end != ChildResult::End::Exited) return r;
  if (WIFSIGNALED(status)) {
    r.end = ChildResult::End::Signaled;
    r.signal = WTERMSIG(status);
  } else {
    r.exit_code = WEXITSTATUS(status);
  }
  return r;
}

}  // namespace kiln::server
