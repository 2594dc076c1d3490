// kilnd's end of an agent's connection (agent_link.h).
#include "agent_link.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kiln::server {
namespace {

// SIGPIPE held back for one scope of the calling thread: OpenSSL writes to
// its socket with write(), not send(MSG_NOSIGNAL), and a peer that has gone
// away would otherwise kill kilnd (a TLS alert to a plaintext peer that
// closed). The write fails with EPIPE instead; a SIGPIPE it raised is taken
// from the thread's pending signals before the mask is restored.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~NoSigpipe() {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !sigismember(&old_, SIGPIPE)) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      timespec zero{0, 0};
      while (sigtimedwait(&pipe, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t old_;
};

}  // namespace

std::string openssl_reason() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return errno ? std::strerror(errno) : "no reason given";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

AgentLink::AgentLink(int fd, size_t max_frame) : fd_(fd), max_frame_(max_frame) {}

AgentLink::~AgentLink() {
  if (ssl_) SSL_free(ssl_);
  close(fd_);
}

// The server's side of a TLS handshake, by `until`. False with `why` set.
bool AgentLink::tls_accept(SSL_CTX* ctx, Clock::time_point until, std::string& why) {
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  ssl_ = SSL_new(ctx);
  if (!ssl_ || SSL_set_fd(ssl_, fd_) != 1) {
    why = "cannot start TLS: " + openssl_reason();
    return false;
  }
  for (;;) {
    NoSigpipe guard;
    int rc = SSL_accept(ssl_);
    if (rc == 1) return true;
    int e = SSL_get_error(ssl_, rc);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
      why = "no TLS handshake (a plaintext agent? kiln-agent --tls): " + openssl_reason();
      return false;
    }
    if (!wait_for(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, until, why)) return false;
  }
}

// Sends a frame; false when the connection is broken. Safe from several threads.
bool AgentLink::send(const v1::AgentFrame& f) {
  std::string body = f.SerializeAsString();
  uint32_t n = static_cast<uint32_t>(body.size());
  char be[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                static_cast<char>(n)};
  std::lock_guard<std::mutex> lock(write_mu_);
  return write_all(be, 4) && write_all(body.data(), body.size());
}

// The next frame, waiting until `until`. nullopt with `why` set when the
// connection ended, the time passed, or the frame was bad. One reader.
std::optional<v1::AgentFrame> AgentLink::receive(Clock::time_point until, std::string& why) {
  char header[4];
  if (!read_all(header, 4, until, why)) return std::nullopt;
  uint32_t n = (static_cast<uint32_t>(static_cast<unsigned char>(header[0])) << 24) |
               (static_cast<uint32_t>(static_cast<unsigned char>(header[1])) << 16) |
               (static_cast<uint32_t>(static_cast<unsigned char>(header[2])) << 8) |
               static_cast<uint32_t>(static_cast<unsigned char>(header[3]));
  if (n > max_frame_) {
    why = "announced a frame of " + std::to_string(n) + " bytes, more than the limit of " +
          std::to_string(max_frame_);
    return std::nullopt;
  }
  std::string body(n, '\0');
  if (!read_all(body.data(), n, until, why)) return std::nullopt;
  v1::AgentFrame f;
  if (!f.ParseFromString(body)) {
    why = "sent " + std::to_string(n) + " bytes that are not an AgentFrame";
    return std::nullopt;
  }
  return f;
}

void AgentLink::shut() { shutdown(fd_, SHUT_RDWR); }

void AgentLink::set_max_frame(size_t bytes) { max_frame_ = bytes; }

// Waits until the socket is ready for `events`, or `until`.
bool AgentLink::wait_for(short events, Clock::time_point until, std::string& why) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) {
      why = "silent past its deadline";
      return false;
    }
    pollfd pfd{fd_, events, 0};
    int ready = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) {
      why = std::strerror(errno);
      return false;
    }
    if (ready > 0) return true;
  }
}

bool AgentLink::write_all(const char* p, size_t n) {
  while (n > 0) {
    if (ssl_) {
      // Writers hold write_mu_ for a whole frame; every SSL call holds ssl_mu_ too, as
      // the reader's do: one SSL object is not for two threads at once.
      size_t put = 0;
      int rc, e;
      {
        NoSigpipe guard;
        std::lock_guard<std::mutex> lock(ssl_mu_);
        rc = SSL_write_ex(ssl_, p, n, &put);
        e = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, rc);
        if (e != SSL_ERROR_NONE) ERR_clear_error();
      }
      if (rc == 1) {
        p += put;
        n -= put;
        continue;
      }
      std::string why;
      if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) ||
          !wait_for(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                    Clock::now() + std::chrono::seconds(30), why))
        return false;
      continue;
    }
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Some bytes into in_: from the socket, or from TLS.
bool AgentLink::read_some(Clock::time_point until, std::string& why) {
  char buf[1 << 16];
  for (;;) {
    if (ssl_) {
      size_t got = 0;
      int rc, e;
      {
        NoSigpipe guard;  // reading may write: an alert, a key update
        std::lock_guard<std::mutex> lock(ssl_mu_);
        rc = SSL_read_ex(ssl_, buf, sizeof buf, &got);
        e = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, rc);
        // A syscall error with neither an OpenSSL error nor errno is the peer
        // closing without a TLS close_notify.
        bool closed = e == SSL_ERROR_ZERO_RETURN ||
                      (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0);
        if (e != SSL_ERROR_NONE && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
          why = closed ? "closed the connection" : "broke the TLS connection: " + openssl_reason();
      }
      if (rc == 1) {
        in_.append(buf, got);
        return true;
      }
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return false;
      if (!wait_for(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, until, why)) return false;
      continue;
    }
    if (!wait_for(POLLIN, until, why)) return false;
    ssize_t got = recv(fd_, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      why = got == 0 ? "closed the connection" : std::strerror(errno);
      return false;
    }
    in_.append(buf, static_cast<size_t>(got));
    return true;
  }
}

bool AgentLink::read_all(char* p, size_t n, Clock::time_point until, std::string& why) {
  while (n > 0) {
    if (in_.empty() && !read_some(until, why)) return false;
    size_t take = std::min(n, in_.size());
    std::memcpy(p, in_.data(), take);
    in_.erase(0, take);
    p += take;
    n -= take;
  }
  return true;
}

std::string peer_name(const sockaddr_storage& a) {
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof a, host, sizeof host, port,
                  sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return std::string(host) + ":" + port;
}

}  // namespace kiln::server
