// kilnd as one replica of several (replica.h).
#include "replica.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "kiln/digest.h"
#include "kiln/ir.h"
#include "outcome.h"
#include "request.h"
#include "wire.h"

namespace kiln::server {
namespace {

constexpr size_t kArtifactsKept = 512;  // the artifacts a worker keeps in memory

std::string default_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::random_device random;
  return fmt::format("{}-{}-{:04x}", host, getpid(), random() & 0xffff);
}

// An agent's id among every replica's: "REPLICA/AGENT" (agents of two replicas may share one).
std::string qualified(const std::string& replica, const std::string& agent) {
  return replica + "/" + agent;
}

// The keys agents of the directory have, for messages.
std::string keys_of(const std::vector<SharedAgent>& agents) {
  std::set<std::string> keys;
  for (const SharedAgent& a : agents) keys.insert(a.key);
  return keys.empty() ? "none" : fmt::format("{}", fmt::join(keys, ", "));
}

// A tuning job's view of the agents of every replica: each point queued, measured by whichever
// replica has a free agent of its key, its end read back.
class SharedRunner final : public tuner::Runner {
 public:
  SharedRunner(Replica& replica, MeasureSpec spec, int64_t job, std::function<bool()> stopping,
               std::chrono::milliseconds wait_for_agent)
      : replica_(replica),
        spec_(std::move(spec)),
        job_(job),
        stopping_(std::move(stopping)),
        wait_for_agent_(wait_for_agent) {}

  tuner::Outcome<Target> target() override {
    try {
      return FleetRunner::target(replica_.device(spec_.key, call()), spec_.key, spec_.gpu);
    } catch (...) {
      return failure_of(status_of(std::current_exception(), v1::Operator{}));
    }
  }

  tuner::Outcome<tuner::Measurement> run(const tuner::RunInput& in) override {
    if (!in.artifact || !in.func)
      return tuner::Failure{tuner::Failure::Kind::Internal, std::nullopt,
                            "a point reached the queue without its artifact or func (a bug in "
                            "kiln)"};
    SharedQueue& queue = replica_.queue();
    try {
      v1::Artifact wire;
      to_wire(*in.artifact, &wire);
      std::string bytes = wire.SerializeAsString();
      std::string sha = sha256_hex(bytes);
      if (!put(sha)) queue.put_artifact(sha, bytes);

      v1::MeasureRequest r;
      v1::SourceText* source = r.mutable_op()->mutable_source();
      source->set_text(ir::to_string(*in.func));
      source->set_filename(fmt::format("<a point of {}>", in.func->name));
      source->set_name(in.func->name);
      r.set_key(spec_.key);
      if (spec_.gpu) r.set_gpu(*spec_.gpu);
      *r.mutable_settings() = spec_.settings;
      if (in.stop_above_ms > 0) r.mutable_settings()->set_stop_above_ms(in.stop_above_ms);
      r.set_seed(spec_.seed);
      r.set_priority(spec_.priority);
      r.mutable_runtime_params()->insert(in.params.begin(), in.params.end());
      r.set_agent(in.device);
      int64_t task = queue.enqueue(job_, r, sha);

      auto agentless_since = std::chrono::steady_clock::now();
      auto checked = agentless_since;
      for (;;) {
        if (stopping_()) {
          queue.cancel_task(task);
          return tuner::Failure{tuner::Failure::Kind::Stopped, std::nullopt,
                                "the measurement was withdrawn: its job was cancelled, or kilnd "
                                "is stopping"};
        }
        if (std::optional<TaskEnd> end = queue.take_end(task)) {
          if (end->cancelled)
            return tuner::Failure{tuner::Failure::Kind::Stopped, std::nullopt, end->status.message};
          if (!end->status.ok()) return failure_of(end->status);
          return measurement_of(end->response);
        }
        auto now = std::chrono::steady_clock::now();
        if (now - checked >= std::chrono::seconds(1)) {
          // Waiting for an agent nobody has: as Measure, UNAVAILABLE after the wait.
          checked = now;
          std::vector<SharedAgent> agents = queue.agents(spec_.key);
          bool any = std::any_of(agents.begin(), agents.end(), [&](const SharedAgent& a) {
            return in.device.empty() || qualified(a.replica, a.agent) == in.device;
          });
          if (any || !queue.queued(task)) {
            agentless_since = now;
          } else if (now - agentless_since >= wait_for_agent_) {
            queue.cancel_task(task);
            return tuner::Failure{
                tuner::Failure::Kind::Unavailable, std::nullopt,
                in.device.empty()
                    ? fmt::format("no agent of key {} is connected to any replica (connected: {})",
                                  spec_.key, keys_of(queue.agents()))
                    : fmt::format("agent {} is connected to no replica", in.device)};
          }
        }
        replica_.await_end(task, std::chrono::milliseconds(250));
      }
    } catch (const records::RecordsUnavailable& e) {
      return tuner::Failure{tuner::Failure::Kind::Unavailable, std::nullopt, e.what()};
    } catch (...) {
      return failure_of(status_of(std::current_exception(), v1::Operator{}));
    }
  }

 private:
  CallOptions call() const { return CallOptions{std::nullopt, stopping_}; }
  // Whether the artifact was put already by this runner (and notes that it is now).
  bool put(const std::string& sha) {
    std::lock_guard<std::mutex> lock(mu_);
    return !put_.insert(sha).second;
  }

  Replica& replica_;
  MeasureSpec spec_;
  int64_t job_;
  std::function<bool()> stopping_;
  std::chrono::milliseconds wait_for_agent_;
  std::mutex mu_;
  std::set<std::string> put_;
};

}  // namespace

Replica::Replica(ReplicaOptions options, FleetRunner& runner, Fleet* fleet)
    : options_(std::move(options)),
      runner_(runner),
      fleet_(fleet),
      queue_(options_.url, options_.name.empty() ? (options_.name = default_name()) : options_.name,
             options_.lease) {
  queue_.join("(starting)");
}

Replica::~Replica() { stop(); }

void Replica::start(std::string address, Hooks hooks) {
  address_ = std::move(address);
  hooks_ = std::move(hooks);
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  worker_ = std::thread([this] { worker_loop(); });
  ends_ = std::thread([this] { ends_loop(); });
}

void Replica::stop() {
  if (stopping_.exchange(true)) return;
  if (worker_.joinable()) worker_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (ends_.joinable()) ends_.join();
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return running_ == 0; });
  }
  try {
    queue_.release_jobs();
    queue_.leave();
  } catch (const std::exception& e) {
    spdlog::warn("replica {}: leaving: {}", options_.name, e.what());
  }
}

v1::Device Replica::device(const std::string& key, const CallOptions& call) {
  auto give_up = std::chrono::steady_clock::now() + options_.wait_for_agent;
  for (;;) {
    std::vector<SharedAgent> agents = queue_.agents(key);
    if (!agents.empty()) return agents.front().device;
    bool stopped = stopping_ || (call.cancelled && call.cancelled()) ||
                   (call.deadline && std::chrono::steady_clock::now() >= *call.deadline);
    if (stopped || std::chrono::steady_clock::now() >= give_up)
      refuse(Code::Unavailable,
             fmt::format("no agent of key {} is connected to any replica (connected: {})", key,
                         keys_of(queue_.agents())));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

std::unique_ptr<tuner::Runner> Replica::runner(MeasureSpec spec, int64_t job,
                                               std::function<bool()> stopping) {
  return std::make_unique<SharedRunner>(*this, std::move(spec), job, std::move(stopping),
                                        options_.wait_for_agent);
}

void Replica::heartbeat_loop() {
  const auto period = std::max(std::chrono::milliseconds(100), options_.lease / 5);
  while (!stopping_) {
    try {
      std::vector<SharedAgent> agents;
      if (fleet_)
        for (const AgentView& a : fleet_->agents())
          agents.push_back({options_.name, a.id, a.device.key(), a.device, a.slots});
      queue_.heartbeat(address_, agents);
      std::set<int64_t> held;
      {
        std::lock_guard<std::mutex> lock(mu_);
        held = held_;
      }
      std::set<int64_t> lost = queue_.renew(held);
      if (!lost.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        lost_.insert(lost.begin(), lost.end());
      }
      for (int64_t job : queue_.cancel_requests()) hooks_.cancel(job);
      for (int64_t job : queue_.lost_jobs(hooks_.driving())) {
        spdlog::warn(
            "replica {}: tuning job {} goes on at another replica: this one's lease "
            "lapsed",
            options_.name, job);
        hooks_.lost(job);
      }
      if (!adopting_)
        if (std::optional<int64_t> orphan = queue_.orphan_job()) {
          adopting_ = true;
          std::thread([this, job = *orphan] {
            try {
              hooks_.adopt(job);
            } catch (const std::exception& e) {
              spdlog::warn("replica {}: adopting tuning job {}: {}", options_.name, job, e.what());
            }
            adopting_ = false;
          }).detach();
        }
    } catch (const std::exception& e) {
      spdlog::warn("replica {}: heartbeat: {}", options_.name, e.what());
    }
    for (auto slept = std::chrono::milliseconds(0); slept < period && !stopping_;
         slept += std::chrono::milliseconds(20))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A detached adoption may still be starting a job: Tuning stops it with kilnd.
  while (adopting_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

bool Replica::await_end(int64_t id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(ends_mu_);
  awaited_.emplace(id, false);
  bool ended = ended_.wait_for(lock, timeout, [&] { return awaited_[id] || stopping_; });
  awaited_.erase(id);
  return ended;
}

void Replica::ends_loop() {
  pg::Listener ends(queue_.url(), SharedQueue::kEnded);
  while (!stopping_) {
    std::vector<std::string> ids = ends.wait(std::chrono::milliseconds(200));
    if (ids.empty()) continue;
    std::lock_guard<std::mutex> lock(ends_mu_);
    bool any = false;
    for (const std::string& id : ids) {
      auto it = awaited_.find(std::atoll(id.c_str()));
      if (it != awaited_.end()) it->second = any = true;
    }
    if (any) ended_.notify_all();
  }
  std::lock_guard<std::mutex> lock(ends_mu_);
  ended_.notify_all();
}

void Replica::worker_loop() {
  // Woken when a task is queued (NOTIFY) or a measurement here ends; else it looks every
  // 100 ms (a notice may be missed, a lease lapse).
  pg::Listener queued(queue_.url(), SharedQueue::kQueued);
  while (!stopping_) {
    std::map<std::string, int> free;
    std::set<std::string> agents;
    if (fleet_) {
      for (const AgentView& a : fleet_->agents()) {
        free[a.device.key()] += a.slots;
        agents.insert(qualified(options_.name, a.id));
      }
    }
    std::vector<SharedTask> tasks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, n] : free) n -= in_flight_[key];
    }
    try {
      if (!free.empty()) tasks = queue_.lease(free, agents, options_.max_tries);
    } catch (const std::exception& e) {
      spdlog::warn("replica {}: leasing measurements: {}", options_.name, e.what());
    }
    for (SharedTask& t : tasks) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++in_flight_[t.request.key()];
        held_.insert(t.id);
        ++running_;
      }
      std::thread([this, t = std::move(t)]() mutable { measure(std::move(t)); }).detach();
    }
    if (!tasks.empty()) continue;  // more may wait
    bool room = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (const auto& [key, n] : free) room = room || n > 0;
      if (!room) {  // every slot busy: woken when one is free
        freed_.wait_for(lock, std::chrono::milliseconds(100));
        continue;
      }
    }
    queued.wait(std::chrono::milliseconds(100));
  }
}

std::shared_ptr<const codegen::Artifact> Replica::artifact(const std::string& sha256) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = artifacts_.find(sha256);
    if (it != artifacts_.end()) return it->second;
  }
  std::optional<std::string> bytes = queue_.artifact(sha256);
  v1::Artifact wire;
  if (!bytes || !wire.ParseFromString(*bytes) || sha256_hex(*bytes) != sha256)
    refuse(Code::Internal,
           fmt::format("artifact {} is missing from the shared database, or damaged there",
                       sha256.substr(0, 12)));
  auto a = std::make_shared<const codegen::Artifact>(artifact_of(wire));
  std::lock_guard<std::mutex> lock(mu_);
  if (artifacts_.size() >= kArtifactsKept) artifacts_.clear();
  artifacts_[sha256] = a;
  return a;
}

void Replica::measure(SharedTask task) {
  const int64_t id = task.id;
  const std::string key = task.request.key();
  auto lost = [this, id] {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_.count(id) > 0;
  };
  CallOptions call{std::nullopt, [this, lost] { return stopping_.load() || lost(); }};
  v1::MeasureResponse response;
  Status status;
  try {
    std::shared_ptr<const codegen::Artifact> a = artifact(task.artifact);
    ir::Func f = resolve(task.request.op(), options_.limits);
    MeasureSpec spec = measure_spec(task.request);
    const std::string& agent = task.request.agent();  // "REPLICA/AGENT", this replica's
    if (!agent.empty()) spec.agent = agent.substr(agent.find('/') + 1);
    std::map<std::string, int64_t> params(task.request.runtime_params().begin(),
                                          task.request.runtime_params().end());
    status = runner_.measure(spec, *a, f, params, call, &response);
    if (!response.agent_id().empty())
      response.set_agent_id(qualified(options_.name, response.agent_id()));
  } catch (...) {
    status = status_of(std::current_exception(), task.request.op());
  }
  // Withdrawn here (this replica stopping, the task cancelled or taken by another): no end of
  // this replica's is the task's.
  if (!stopping_ && !lost()) {
    try {
      queue_.finish_task(id, status, response);
    } catch (const std::exception& e) {
      spdlog::warn("replica {}: measurement {}: {}", options_.name, id, e.what());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_[key];
  held_.erase(id);
  lost_.erase(id);
  --running_;
  idle_.notify_all();
  freed_.notify_all();
}

}  // namespace kiln::server
