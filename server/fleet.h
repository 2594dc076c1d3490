// The agents connected to kilnd (DESIGN.md section 6, docs/agents.md): a
// listener for kiln-agent on a port of its own, the registry of agents by id
// and key, and the dispatch of measure jobs to free agents of the key a job
// asks for (priority, then arrival). An agent that goes silent or away has
// its job given to another agent of the key, or failed after max_tries with
// the reason. Knows the agent protocol (proto/kiln/v1/agent.proto), not gRPC.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/v1/agent.pb.h"
#include "status.h"

namespace kiln::server {

struct FleetOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0: any free one
  std::string token;                   // the shared token agents prove they hold
  int heartbeat_ms = 2000;             // each side's; 3 missed and the peer is gone
  int max_tries = 3;                   // agents lost during one job before it fails
  // How long a job waits for an agent of its key when none is connected
  // (an agent restarting, kilnd just started) before it fails.
  std::chrono::milliseconds wait_for_agent{30'000};
  size_t max_frame_bytes = size_t{1} << 30;  // from an agent; longer frames are refused
  // TLS on the agent link: the server's certificate chain and key (PEM files).
  // Empty: plaintext. The token's HMAC is checked either way.
  std::string tls_cert_file, tls_key_file;
};

// One agent as ListAgents shows it.
struct AgentView {
  std::string id;
  std::string address;  // its peer address
  v1::Device device;
  int slots = 1;
  int running = 0;
  int64_t jobs_done = 0, jobs_failed = 0;
  std::chrono::system_clock::time_point connected, last_seen;
};

// A job for the fleet: the artifact and how to measure it (job_id, artifact
// and artifact_sha256 are the fleet's to fill).
struct FleetJob {
  std::string key;
  int priority = 0;  // higher first
  std::shared_ptr<const std::string> code;
  std::string code_sha256;
  v1::MeasureJob job;
  // "": any agent of the key. Else only the agent of this id; the job fails, UNAVAILABLE, once
  // that agent is not connected (a re-timing compares kernels on one machine).
  std::string agent;
};

struct FleetOutcome {
  Status status;  // not ok: no agent of the key, every try lost, kilnd stopping
  v1::MeasureResult result;
  std::string agent_id;
  v1::Device device;
  int tries = 0;
};

class Fleet {
 public:
  // Listens at once; throws std::runtime_error when it cannot.
  explicit Fleet(FleetOptions options);
  ~Fleet();  // stop()
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  int port() const;
  std::vector<AgentView> agents() const;
  // The device of a connected agent of `key` (what to compile for), waiting
  // up to wait_for_agent for one to join; none when none did, or when
  // `give_up` (asked every 50 ms) says so first.
  std::optional<v1::Device> await_device(const std::string& key,
                                         const std::function<bool()>& give_up = {}) const;
  // Keys of the connected agents, sorted, for messages.
  std::vector<std::string> keys() const;

  // A queued job: its id (to cancel it) and its outcome to come.
  struct Submitted {
    uint64_t id = 0;
    std::future<FleetOutcome> outcome;
  };
  // Queues a job; the future gets its outcome. A key no connected agent has
  // waits up to wait_for_agent for one.
  Submitted submit(FleetJob job);
  // Withdraws job `id`, whose outcome nobody waits for any more (its request
  // was cancelled or passed its deadline): a queued job fails at once with
  // CANCELLED; a running one's agent is told to kill it (CancelJob), and its
  // slot is free once the agent answers, within milliseconds. A job already
  // done, or unknown, is left alone.
  void cancel(uint64_t id);

  // Closes the listener and every agent; jobs not done fail with UNAVAILABLE.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server
