// kilnd's admission of compiling requests: at most `workers` at once, at
// most `queue_depth` more waiting, and a refusal (Busy) beyond both.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "status.h"

namespace kiln::server {

// At most `workers` requests compile at once; at most `queue_depth` more wait.
class Admission {
 public:
  // workers 0: one per core. `on_admitted` (tests): called by each request
  // once it holds a worker.
  Admission(int workers, int queue_depth, std::function<void()> on_admitted = {});

  int workers() const { return workers_; }

  // One of the admission's counts (a worker running, a Quiet held), held for as long as it
  // lives.
  class Hold {
   public:
    Hold(Admission& a, int& count) : a_(a), count_(count) {}
    ~Hold() {
      std::lock_guard<std::mutex> lock(a_.mu_);
      --count_;
      a_.freed_.notify_all();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    Admission& a_;
    int& count_;
  };

  // Holds a worker for as long as it lives.
  using Ticket = Hold;
  // A worker, once one is free (and no Quiet is held or wanted); throws Busy at once when the
  // queue is full, and refuses at the deadline.
  std::unique_ptr<Ticket> enter(const CallOptions& call);

  // While one lives no request starts compiling: kilnd's own agent measures on this machine,
  // and a compile beside it would take the CPUs its timings need. Taking one waits for the
  // requests compiling to finish (no new one starts meanwhile); refuses at the deadline.
  using Quiet = Hold;
  std::unique_ptr<Quiet> quiet(const CallOptions& call);

 private:
  // Waits on freed_ until `ready`, or refuses at the call's deadline or cancel (`what` says
  // what waited).
  void wait(std::unique_lock<std::mutex>& lock, const CallOptions& call,
            const std::function<bool()>& ready, const char* what);

  const int workers_, queue_depth_;
  std::function<void()> on_admitted_;
  std::mutex mu_;
  std::condition_variable freed_;
  int running_ = 0, waiting_ = 0;
  int quiet_ = 0, quiet_wanted_ = 0;  // Quiets held, and being taken
};

}  // namespace kiln::server
