// The agent handshake (proto/kiln/v1/agent.proto): kilnd sends a challenge,
// the agent answers with a hello carrying an HMAC of both nonces and its
// identity under the shared token, and kilnd, once the hello checks out
// (protocol version, identity, MAC), answers with a welcome carrying its own
// MAC. Nothing is registered here: the fleet does that with the hello.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "agent_link.h"
#include "kiln/v1/agent.pb.h"

namespace kiln::server {

// How long a peer has for the TLS handshake, and then for its hello.
inline constexpr auto kHandshakeTime = std::chrono::seconds(10);

struct HandshakeOptions {
  std::string token;        // the shared token agents prove they hold
  int heartbeat_ms = 2000;  // told to the agent in the welcome
};

// The handshake on `link` with the agent at `peer`: the agent's hello once
// welcomed; nullopt (refused with a reason sent and logged) otherwise.
std::optional<v1::Hello> handshake(AgentLink& link, const HandshakeOptions& options,
                                   const std::string& peer);

}  // namespace kiln::server
