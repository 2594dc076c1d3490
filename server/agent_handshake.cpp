// The agent handshake (agent_handshake.h).
#include "agent_handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <vector>

namespace kiln::server {
namespace {

constexpr size_t kNonce = 32;
const char* const kServerVersion = "kilnd 0.1.0";

// HMAC-SHA256 keyed with the token over a label and its NUL, then each part
// preceded by its length as 4 bytes big-endian (agent.proto).
std::string mac_of(const std::string& token, const char* label,
                   const std::vector<std::string>& parts) {
  std::string msg(label, std::strlen(label) + 1);
  for (const std::string& p : parts) {
    uint32_t n = static_cast<uint32_t>(p.size());
    char be[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                  static_cast<char>(n)};
    msg.append(be, 4);
    msg += p;
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace

std::optional<v1::Hello> handshake(AgentLink& link, const HandshakeOptions& options,
                                   const std::string& peer) {
  unsigned char nonce_bytes[kNonce];
  if (RAND_bytes(nonce_bytes, kNonce) != 1) {
    spdlog::error("agent {}: cannot make a nonce", peer);
    return std::nullopt;
  }
  std::string nonce(reinterpret_cast<char*>(nonce_bytes), kNonce);
  v1::AgentFrame challenge;
  challenge.mutable_challenge()->set_protocol_version(v1::AGENT_PROTOCOL_VERSION);
  challenge.mutable_challenge()->set_nonce(nonce);
  if (!link.send(challenge)) return std::nullopt;
  std::string why;
  std::optional<v1::AgentFrame> f = link.receive(AgentLink::Clock::now() + kHandshakeTime, why);
  auto refuse = [&](const std::string& reason) {
    spdlog::warn("agent {}: refused: {}", peer, reason);
    v1::AgentFrame r;
    r.mutable_refusal()->set_reason(reason);
    link.send(r);
    return std::nullopt;
  };
  if (!f) {
    spdlog::warn("agent {}: no hello: it {}", peer, why);
    return std::nullopt;
  }
  if (!f->has_hello()) return refuse("the first frame must be a hello");
  const v1::Hello& h = f->hello();
  if (h.protocol_version() != v1::AGENT_PROTOCOL_VERSION)
    return refuse("the agent speaks agent protocol version " +
                  std::to_string(h.protocol_version()) + ", kilnd version " +
                  std::to_string(v1::AGENT_PROTOCOL_VERSION));
  if (h.agent_id().empty() || h.device().key().empty() || h.device().triple().empty())
    return refuse("a hello must give the agent's id, key and triple");
  std::string expected =
      mac_of(options.token, "kiln-agent-hello",
             {nonce, h.nonce(), h.agent_id(), h.device().key(), h.device().triple()});
  if (h.nonce().size() != kNonce || h.mac().size() != expected.size() ||
      CRYPTO_memcmp(h.mac().data(), expected.data(), expected.size()) != 0)
    return refuse(
        "the agent's MAC does not match: it holds another token (kilnd --agent-token-file)");

  v1::AgentFrame w;
  w.mutable_welcome()->set_mac(mac_of(options.token, "kiln-agent-welcome", {h.nonce(), nonce}));
  w.mutable_welcome()->set_heartbeat_ms(options.heartbeat_ms);
  w.mutable_welcome()->set_server_version(kServerVersion);
  if (!link.send(w)) return std::nullopt;
  return h;
}

}  // namespace kiln::server
