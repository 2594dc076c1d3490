// The agent listener, registry and dispatch (fleet.h); each connection's
// frames are an AgentLink's (agent_link.h), its first exchange the handshake
// (agent_handshake.h).
#include "fleet.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "agent_handshake.h"
#include "agent_link.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;
// Until a peer has proved it holds the token it may send only a hello, and
// no more than this: a stranger cannot make kilnd allocate max_frame_bytes.
constexpr size_t kMaxHelloBytes = size_t{1} << 20;
// Connections still in their handshake; past this, new ones are closed at
// once, so strangers cannot hold a thread each until kilnd runs out.
constexpr int kMaxHandshakes = 64;

}  // namespace

struct Fleet::Impl {
  ~Impl() {
    if (tls) SSL_CTX_free(tls);
  }
  struct Pending {
    uint64_t id;
    FleetJob job;
    std::promise<FleetOutcome> promise;
    int tries = 0;
    Clock::time_point queued;
    uint64_t order;          // arrival
    bool cancelled = false;  // its agent was told to kill it
  };
  struct Agent {
    AgentView view;
    std::shared_ptr<AgentLink> link;
    std::set<std::string> holds;                           // artifacts it has
    std::map<uint64_t, std::shared_ptr<Pending>> running;  // by job id
  };

  FleetOptions options;
  SSL_CTX* tls = nullptr;  // with tls_cert_file: the agent link is TLS
  int listen_fd = -1;
  int port = 0;
  int wake[2] = {-1, -1};  // written to stop the accept loop
  std::atomic<bool> stopping{false};
  std::thread acceptor, monitor;

  // A connection's thread; `done` once it has returned, so it can be joined.
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  mutable std::mutex mu;
  std::condition_variable monitor_cv;
  mutable std::condition_variable joined_cv;  // an agent joined
  std::map<uint64_t, Agent> agents;           // by connection number
  std::vector<std::shared_ptr<Pending>> queue;
  std::vector<Connection> connections;
  int handshaking = 0;                            // connections not yet welcomed or refused
  std::set<std::shared_ptr<AgentLink>> greeting;  // their links
  uint64_t next_connection = 1, next_job = 1, next_order = 1;

  void listen_on(const std::string& address);
  void accept_loop();
  void serve(int fd, std::string peer);
  std::optional<uint64_t> welcome(AgentLink& link, const std::string& peer);
  void on_result(uint64_t conn, v1::MeasureResult result);
  void lost(uint64_t conn, const std::string& why);
  void dispatch();
  void monitor_loop();
  void fail(const std::shared_ptr<Pending>& p, Code code, std::string message);
};

void Fleet::Impl::listen_on(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos)
    throw std::runtime_error("--agent-listen " + address + ": expected HOST:PORT");
  std::string host = address.substr(0, colon), service = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) throw std::runtime_error("--agent-listen " + address + ": " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = list; a && listen_fd < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      listen_fd = fd;
    } else {
      why = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(list);
  if (listen_fd < 0)
    throw std::runtime_error("cannot listen for agents on " + address + ": " + why);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

void Fleet::Impl::accept_loop() {
  while (!stopping) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (stopping) break;
    if (!(fds[0].revents & POLLIN)) continue;
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lock(mu);
    // Join the connections that ended, so a long-lived kilnd does not keep
    // a thread per agent reconnection.
    std::erase_if(connections, [](Connection& c) {
      if (!*c.done) return false;
      c.thread.join();
      return true;
    });
    if (handshaking >= kMaxHandshakes) {
      spdlog::warn("agent {}: refused: {} connections are already in their handshake",
                   peer_name(peer), handshaking);
      close(fd);
      continue;
    }
    ++handshaking;
    auto done = std::make_shared<std::atomic<bool>>(false);
    connections.push_back({std::thread([this, fd, done, name = peer_name(peer)] {
                             serve(fd, name);
                             *done = true;
                           }),
                           done});
  }
}

// An agent that completed the handshake (agent_handshake.h) joins the
// registry: its connection number.
std::optional<uint64_t> Fleet::Impl::welcome(AgentLink& link, const std::string& peer) {
  std::optional<v1::Hello> hello = handshake(link, {options.token, options.heartbeat_ms}, peer);
  if (!hello) return std::nullopt;
  const v1::Hello& h = *hello;
  std::lock_guard<std::mutex> lock(mu);
  uint64_t conn = next_connection++;
  Agent& a = agents[conn];
  a.view.id = h.agent_id();
  a.view.address = peer;
  a.view.device = h.device();
  a.view.slots = std::max(1, h.slots());
  a.view.connected = a.view.last_seen = std::chrono::system_clock::now();
  a.holds.insert(h.artifacts().begin(), h.artifacts().end());
  spdlog::info("agent {} ({}) joined: key {}, {} {}, {} cores, {} GPUs", a.view.id, peer,
               h.device().key(), h.device().triple(), h.device().cpu(), h.device().cores(),
               h.device().gpus_size());
  return conn;
}

void Fleet::Impl::serve(int fd, std::string peer) {
  auto link = std::make_shared<AgentLink>(fd, std::min(kMaxHelloBytes, options.max_frame_bytes));
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) {
      --handshaking;
      return;
    }
    greeting.insert(link);  // stop() shuts it: a silent peer must not hold kilnd for 10 s
  }
  std::optional<uint64_t> conn;
  std::string refused;
  if (tls && !link->tls_accept(tls, Clock::now() + kHandshakeTime, refused)) {
    spdlog::warn("agent {}: refused: {}", peer, refused);
  } else {
    conn = welcome(*link, peer);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    --handshaking;
    greeting.erase(link);
    if (conn) agents[*conn].link = link;
  }
  if (!conn) return;
  link->set_max_frame(options.max_frame_bytes);
  joined_cv.notify_all();
  dispatch();
  std::string why;
  while (!stopping) {
    // The monitor shuts a silent agent's socket down; this wait is only a backstop.
    std::optional<v1::AgentFrame> f = link->receive(Clock::now() + std::chrono::hours(24), why);
    if (!f) break;
    {
      std::lock_guard<std::mutex> lock(mu);
      agents[*conn].view.last_seen = std::chrono::system_clock::now();
    }
    if (f->has_result()) {
      on_result(*conn, f->result());
    } else if (!f->has_heartbeat()) {
      why = "sent a frame an agent may not send after hello";
      break;
    }
  }
  lost(*conn, stopping ? "was let go: kilnd is stopping" : why);
}

void Fleet::Impl::fail(const std::shared_ptr<Pending>& p, Code code, std::string message) {
  FleetOutcome out;
  out.status = {code, std::move(message)};
  out.tries = p->tries;
  p->promise.set_value(std::move(out));
}

void Fleet::Impl::on_result(uint64_t conn, v1::MeasureResult result) {
  std::shared_ptr<Pending> done;
  {
    std::lock_guard<std::mutex> lock(mu);
    Agent& a = agents[conn];
    auto it = a.running.find(result.job_id());
    if (it == a.running.end()) {
      spdlog::warn("agent {}: a result for job {}, which it does not run", a.view.id,
                   result.job_id());
      return;
    }
    std::shared_ptr<Pending> p = it->second;
    a.running.erase(it);
    a.view.running = static_cast<int>(a.running.size());
    if (result.error() == v1::MeasureResult::ARTIFACT_UNKNOWN && p->cancelled) {
      a.holds.erase(p->job.code_sha256);
      fail(p, Code::Cancelled, "job " + std::to_string(p->id) + " was cancelled");
    } else if (result.error() == v1::MeasureResult::ARTIFACT_UNKNOWN) {
      // Evicted from the agent's cache: send it again, with the bytes.
      a.holds.erase(p->job.code_sha256);
      queue.insert(queue.begin(), p);
    } else {
      // A job cancelled before it started may have carried its artifact: the agent dropped it.
      if (result.error() == v1::MeasureResult::CANCELLED) a.holds.erase(p->job.code_sha256);
      if (result.error() == v1::MeasureResult::OK)
        ++a.view.jobs_done;
      else if (result.error() != v1::MeasureResult::CANCELLED)
        ++a.view.jobs_failed;
      FleetOutcome out;
      out.result = std::move(result);
      out.agent_id = a.view.id;
      out.device = a.view.device;
      out.tries = p->tries;
      p->promise.set_value(std::move(out));
    }
  }
  dispatch();
}

void Fleet::Impl::lost(uint64_t conn, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = agents.find(conn);
    if (it == agents.end()) return;
    Agent& a = it->second;
    // An agent let go as kilnd stops is no news.
    spdlog::log(stopping ? spdlog::level::info : spdlog::level::warn, "agent {} ({}) left: it {}{}",
                a.view.id, a.view.address, why,
                a.running.empty() ? "" : "; its jobs go to another agent of its key");
    for (auto& [id, p] : a.running) {
      if (p->cancelled) {
        fail(p, Code::Cancelled, "job " + std::to_string(id) + " was cancelled");
      } else if (!p->job.agent.empty()) {
        fail(p, Code::Unavailable,
             "job " + std::to_string(id) + " must run on agent " + a.view.id + ", which " + why);
      } else if (stopping) {
        fail(p, Code::Unavailable, "kilnd is stopping");
      } else if (p->tries >= options.max_tries) {
        fail(p, Code::Unavailable,
             "job " + std::to_string(id) + " was lost with " + std::to_string(p->tries) +
                 " agents of key " + p->job.key + " (the last, " + a.view.id + ", " + why + ")");
      } else {
        p->queued = Clock::now();
        queue.insert(queue.begin(), p);
      }
    }
    agents.erase(it);
  }
  dispatch();
}

// Gives queued jobs to free agents of their key: the highest priority first,
// then the earliest. The frames are sent outside the lock.
void Fleet::Impl::dispatch() {
  std::vector<std::pair<std::shared_ptr<AgentLink>, v1::AgentFrame>> sends;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::stable_sort(queue.begin(), queue.end(), [](const auto& a, const auto& b) {
      if (a->job.priority != b->job.priority) return a->job.priority > b->job.priority;
      return a->order < b->order;
    });
    for (auto it = queue.begin(); it != queue.end();) {
      std::shared_ptr<Pending> p = *it;
      Agent* free = nullptr;
      bool pinned_there = false;
      for (auto& [conn, a] : agents) {
        if (!a.link || a.view.device.key() != p->job.key) continue;
        if (!p->job.agent.empty() && a.view.id != p->job.agent) continue;
        pinned_there = true;
        if (static_cast<int>(a.running.size()) < a.view.slots) {
          free = &a;
          break;
        }
      }
      if (!p->job.agent.empty() && !pinned_there) {
        fail(p, Code::Unavailable,
             "agent " + p->job.agent + " of key " + p->job.key + ", the one job " +
                 std::to_string(p->id) + " must run on, is not connected");
        it = queue.erase(it);
        continue;
      }
      if (!free) {
        ++it;
        continue;
      }
      ++p->tries;
      free->running[p->id] = p;
      free->view.running = static_cast<int>(free->running.size());
      v1::AgentFrame f;
      v1::MeasureJob* job = f.mutable_job();
      *job = p->job.job;
      job->set_job_id(p->id);
      job->set_artifact_sha256(p->job.code_sha256);
      if (!free->holds.count(p->job.code_sha256)) {
        job->set_artifact(*p->job.code);
        free->holds.insert(p->job.code_sha256);
      }
      sends.emplace_back(free->link, std::move(f));
      it = queue.erase(it);
    }
  }
  // A send that fails leaves the job with the agent: its reader sees the
  // broken connection and gives the job to another agent.
  for (auto& [link, f] : sends)
    if (!link->send(f)) link->shut();
}

void Fleet::Impl::monitor_loop() {
  uint64_t sequence = 0;
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    monitor_cv.wait_for(lock, std::chrono::milliseconds(options.heartbeat_ms));
    if (stopping) break;
    auto now = std::chrono::system_clock::now();
    std::vector<std::shared_ptr<AgentLink>> beat;
    for (auto& [conn, a] : agents) {
      if (!a.link) continue;
      if (now - a.view.last_seen > 3 * std::chrono::milliseconds(options.heartbeat_ms)) {
        spdlog::warn(
            "agent {}: silent for {} ms", a.view.id,
            std::chrono::duration_cast<std::chrono::milliseconds>(now - a.view.last_seen).count());
        a.link->shut();  // its reader ends and hands its jobs on
      } else {
        beat.push_back(a.link);
      }
    }
    // Jobs whose key has had no agent for too long.
    std::set<std::string> present;
    for (auto& [conn, a] : agents) present.insert(a.view.device.key());
    for (auto it = queue.begin(); it != queue.end();) {
      std::shared_ptr<Pending> p = *it;
      if (!present.count(p->job.key) && Clock::now() - p->queued > options.wait_for_agent) {
        fail(p, Code::Unavailable,
             "no agent of key " + p->job.key + " connected within " +
                 std::to_string(options.wait_for_agent.count()) + " ms");
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
    lock.unlock();
    v1::AgentFrame f;
    f.mutable_heartbeat()->set_sequence(++sequence);
    for (auto& link : beat) link->send(f);
    lock.lock();
  }
}

Fleet::Fleet(FleetOptions options) : impl_(std::make_unique<Impl>()) {
  // OpenSSL frees every thread's state in its clean-up at exit, which must
  // come after this fleet's threads are joined. Initialized here, before a
  // fleet kept in a static is complete, its atexit handler runs after the
  // fleet's destructor. Initialized by the first connection's HMAC instead,
  // it ran first, and a connection thread ending meanwhile freed its state a
  // second time (fuzz_fleet_listener under ASan: a double free at exit).
  OPENSSL_init_ssl(0, nullptr);
  if (options.token.empty())
    throw std::runtime_error("agents need a token: kilnd --agent-token-file FILE");
  impl_->options = std::move(options);
  const FleetOptions& o = impl_->options;
  if (o.tls_cert_file.empty() != o.tls_key_file.empty())
    throw std::runtime_error("--agent-tls-cert and --agent-tls-key go together");
  if (!o.tls_cert_file.empty()) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) throw std::runtime_error("cannot make a TLS context: " + openssl_reason());
    impl_->tls = ctx;  // freed with impl_
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, o.tls_cert_file.c_str()) != 1)
      throw std::runtime_error("--agent-tls-cert " + o.tls_cert_file +
                               ": cannot load the certificate: " + openssl_reason());
    if (SSL_CTX_use_PrivateKey_file(ctx, o.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1)
      throw std::runtime_error(
          "--agent-tls-key " + o.tls_key_file +
          ": cannot load the key, or it is not the certificate's: " + openssl_reason());
  }
  impl_->listen_on(impl_->options.listen);
  if (pipe2(impl_->wake, O_CLOEXEC) != 0) throw std::runtime_error("cannot make a pipe");
  impl_->acceptor = std::thread([this] { impl_->accept_loop(); });
  impl_->monitor = std::thread([this] { impl_->monitor_loop(); });
}

Fleet::~Fleet() { stop(); }

void Fleet::stop() {
  if (impl_->stopping.exchange(true)) return;
  if (write(impl_->wake[1], "x", 1) < 0) {
    // The accept loop also sees `stopping` at its next connection.
  }
  impl_->monitor_cv.notify_all();
  impl_->acceptor.join();
  impl_->monitor.join();
  std::vector<Impl::Connection> connections;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [conn, a] : impl_->agents)
      if (a.link) a.link->shut();
    for (const std::shared_ptr<AgentLink>& l : impl_->greeting) l->shut();
    connections.swap(impl_->connections);
  }
  for (Impl::Connection& c : connections) c.thread.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& p : impl_->queue) impl_->fail(p, Code::Unavailable, "kilnd is stopping");
  impl_->queue.clear();
  close(impl_->listen_fd);
  close(impl_->wake[0]);
  close(impl_->wake[1]);
}

int Fleet::port() const { return impl_->port; }

std::vector<AgentView> Fleet::agents() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<AgentView> out;
  for (const auto& [conn, a] : impl_->agents)
    if (a.link) out.push_back(a.view);
  std::sort(out.begin(), out.end(), [](const AgentView& a, const AgentView& b) {
    return std::tie(a.device.key(), a.id) < std::tie(b.device.key(), b.id);
  });
  return out;
}

std::optional<v1::Device> Fleet::await_device(const std::string& key,
                                              const std::function<bool()>& give_up) const {
  auto until = Clock::now() + impl_->options.wait_for_agent;
  std::unique_lock<std::mutex> lock(impl_->mu);
  for (;;) {
    for (const auto& [conn, a] : impl_->agents)
      if (a.link && a.view.device.key() == key) return a.view.device;
    if (impl_->stopping || Clock::now() >= until || (give_up && give_up())) return std::nullopt;
    impl_->joined_cv.wait_until(lock,
                                std::min(until, Clock::now() + std::chrono::milliseconds(50)));
  }
}

std::vector<std::string> Fleet::keys() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::set<std::string> keys;
  for (const auto& [conn, a] : impl_->agents)
    if (a.link) keys.insert(a.view.device.key());
  return std::vector<std::string>(keys.begin(), keys.end());
}

void Fleet::cancel(uint64_t id) {
  std::shared_ptr<AgentLink> link;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto& queue = impl_->queue;
    auto queued =
        std::find_if(queue.begin(), queue.end(), [&](const auto& p) { return p->id == id; });
    if (queued != queue.end()) {
      impl_->fail(*queued, Code::Cancelled, "job " + std::to_string(id) + " was cancelled");
      queue.erase(queued);
      return;
    }
    for (auto& [conn, a] : impl_->agents) {
      auto it = a.running.find(id);
      if (it == a.running.end() || it->second->cancelled) continue;
      it->second->cancelled = true;
      link = a.link;
      spdlog::info("job {}: cancelled; agent {} is told to kill it", id, a.view.id);
      break;
    }
  }
  if (!link) return;
  v1::AgentFrame f;
  f.mutable_cancel()->set_job_id(id);
  // A send that fails: the reader sees the broken link, and lost() ends the job.
  if (!link->send(f)) link->shut();
}

Fleet::Submitted Fleet::submit(FleetJob job) {
  auto p = std::make_shared<Impl::Pending>();
  Submitted out{0, p->promise.get_future()};
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) {
      impl_->fail(p, Code::Unavailable, "kilnd is stopping");
      return out;
    }
    p->id = impl_->next_job++;
    out.id = p->id;
    p->order = impl_->next_order++;
    p->queued = Clock::now();
    p->job = std::move(job);
    impl_->queue.push_back(p);
  }
  impl_->dispatch();
  return out;
}

}  // namespace kiln::server
