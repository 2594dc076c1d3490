// kilnd's end of an agent's connection (DESIGN.md section 6): frames of
// proto/kiln/v1/agent.proto, each a 4-byte big-endian length and an
// AgentFrame, over TCP or inside TLS; the mirror of agent/src/frame.c and
// tls.c. Knows nothing of the handshake or of jobs.
#pragma once

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

#include "kiln/v1/agent.pb.h"

namespace kiln::server {

class AgentLink {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes the connected socket `fd`; frames longer than `max_frame` bytes are refused.
  AgentLink(int fd, size_t max_frame);
  ~AgentLink();
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;

  // The server's side of a TLS handshake, by `until`. False with `why` set.
  bool tls_accept(SSL_CTX* ctx, Clock::time_point until, std::string& why);
  // Sends a frame; false when the connection is broken. Safe from several threads.
  bool send(const v1::AgentFrame& f);
  // The next frame, waiting until `until`. nullopt with `why` set when the
  // connection ended, the time passed, or the frame was bad. One reader.
  std::optional<v1::AgentFrame> receive(Clock::time_point until, std::string& why);

  // Ends the connection both ways: a reader waiting in receive() returns.
  void shut();
  void set_max_frame(size_t bytes);

 private:
  bool wait_for(short events, Clock::time_point until, std::string& why);
  bool write_all(const char* p, size_t n);
  bool read_some(Clock::time_point until, std::string& why);
  bool read_all(char* p, size_t n, Clock::time_point until, std::string& why);

  int fd_;
  size_t max_frame_;
  SSL* ssl_ = nullptr;
  std::mutex write_mu_, ssl_mu_;
  std::string in_;  // received, not yet taken (the reader's)
};

// A peer's address as "HOST:PORT", for messages.
std::string peer_name(const sockaddr_storage& a);

// OpenSSL's reason for the last failure.
std::string openssl_reason();

}  // namespace kiln::server
