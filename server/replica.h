// kilnd as one of several replicas sharing one PostgreSQL database (docs/scale-out.md): the
// tuning jobs it drives measure their points through the shared queue (shared_queue.h), so
// that the agents of any replica measure them; its worker leases the queued measurements its
// own agents can take and measures them; its heartbeat publishes its agents, renews its
// leases, passes on a cancel asked at another replica, and adopts a job whose driver died.
// Knows the fleet and the queue; the tuning jobs (tuning.h) know it, not the other way round.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "blob_store.h"
#include "fleet.h"
#include "fleet_runner.h"
#include "kiln/limits.h"
#include "kiln/measure.h"
#include "shared_queue.h"
#include "status.h"

namespace kiln::server {

struct ReplicaOptions {
  std::string url;   // the database (postgresql://...)
  std::string name;  // unique among the replicas; "": HOST-PID-RANDOM
  // A lease (a job's driver, a measurement's replica) not renewed for this long is free for
  // another replica: how soon a job whose replica died goes on elsewhere.
  std::chrono::milliseconds lease{10'000};
  // A measurement waits this long for an agent of its key on some replica, as Measure does.
  std::chrono::milliseconds wait_for_agent{30'000};
  int max_tries = 3;  // replicas a measurement may be leased by before it fails
  Limits limits;      // for the funcs of the measurements it takes
};

class Replica {
 public:
  // Connects and makes the shared tables; throws records::RecordsError when it cannot. Its
  // agents are `fleet`'s (none: it measures nothing, and drives jobs for others' agents), and
  // measured through `runner`; both outlive it.
  Replica(ReplicaOptions options, FleetRunner& runner, Fleet* fleet);
  ~Replica();  // stop()
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  const std::string& name() const { return options_.name; }
  SharedQueue& queue() { return queue_; }
  // The blobs of every replica, through the database.
  BlobShare& blobs() { return blobs_; }

  // What the replica tells the tuning jobs (tuning.h) and asks of them.
  struct Hooks {
    // A job whose driver's lease expired: go on with it here (on a thread of its own, one at a
    // time).
    std::function<void(int64_t)> adopt;
    // A job driven here was asked to cancel at another replica.
    std::function<void(int64_t)> cancel;
    // The jobs driven here now.
    std::function<std::set<int64_t>()> driving;
    // A job driven here that another replica adopted (this one's lease lapsed, the database
    // away): stop driving it, leaving it to that one.
    std::function<void(int64_t)> lost;
  };
  // Starts the heartbeat and the worker, the replica listed as serving at `address`.
  void start(std::string address, Hooks hooks);
  // Stops taking work: the jobs it drives are left for another replica to adopt at once, its
  // measurements in flight are withdrawn (another replica measures them once their leases
  // lapse), and it leaves the directory. Idempotent.
  void stop();

  // The device of an agent of `key` on any replica, waiting for one as Measure does; refuses
  // UNAVAILABLE naming the keys there are when none comes.
  v1::Device device(const std::string& key, const CallOptions& call);
  // A tuning job's Runner: its points queued for the agents of spec.key on any replica;
  // `stopping` withdraws what waits.
  std::unique_ptr<tuner::Runner> runner(MeasureSpec spec, int64_t job,
                                        std::function<bool()> stopping);

  // A driver waits for the end of task `id` (one it queued): true once a replica said it ended
  // (NOTIFY), false after `timeout` (then it looks for itself: a notice may be missed).
  bool await_end(int64_t id, std::chrono::milliseconds timeout);

 private:
  void heartbeat_loop();
  void worker_loop();
  void ends_loop();
  void measure(SharedTask task);
  std::shared_ptr<const codegen::Artifact> artifact(const std::string& sha256);

  class Blobs final : public BlobShare {
   public:
    explicit Blobs(SharedQueue& q) : q_(q) {}
    void publish(const std::string& sha256, const std::string& file, uint64_t size) override {
      q_.publish_blob(sha256, file, size);
    }
    std::optional<uint64_t> size(const std::string& sha256) override {
      return q_.blob_size(sha256);
    }
    void fetch(const std::string& sha256,
               const std::function<void(std::string_view)>& piece) override {
      q_.fetch_blob(sha256, piece);
    }

   private:
    SharedQueue& q_;
  };

  ReplicaOptions options_;
  FleetRunner& runner_;
  Fleet* fleet_;
  SharedQueue queue_;
  Blobs blobs_{queue_};
  std::string address_;
  Hooks hooks_;
  std::atomic<bool> stopping_{false}, adopting_{false};
  std::thread heartbeat_, worker_, ends_;

  std::mutex mu_;  // what follows
  std::condition_variable idle_;
  std::map<std::string, int> in_flight_;  // measurements running here, by key
  std::set<int64_t> held_, lost_;         // tasks leased here; of them, those it lost
  int running_ = 0;                       // measurement threads
  std::map<std::string, std::shared_ptr<const codegen::Artifact>> artifacts_;  // by SHA-256
  std::condition_variable freed_;  // a measurement here ended: a slot is free

  std::mutex ends_mu_;  // what follows
  std::condition_variable ended_;
  std::map<int64_t, bool> awaited_;  // tasks drivers here wait for: whether they ended
};

}  // namespace kiln::server
