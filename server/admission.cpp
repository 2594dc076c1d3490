// kilnd's admission of compiling requests (admission.h).
#include "admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "request.h"

namespace kiln::server {

Admission::Admission(int workers, int queue_depth, std::function<void()> on_admitted)
    : workers_(workers > 0 ? workers
                           : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
      queue_depth_(std::max(0, queue_depth)),
      on_admitted_(std::move(on_admitted)) {}

std::unique_ptr<Admission::Ticket> Admission::enter(const CallOptions& call) {
  std::unique_lock<std::mutex> lock(mu_);
  if (running_ >= workers_ && waiting_ >= queue_depth_)
    throw Busy{{Status{Code::ResourceExhausted,
                       fmt::format("kilnd is busy: {} compiling and {} waiting, as many as it "
                                   "takes (--workers {}, --queue-depth {}); try again later",
                                   running_, waiting_, workers_, queue_depth_)}}};
  ++waiting_;
  try {
    wait(
        lock, call, [this] { return running_ < workers_ && quiet_ == 0 && quiet_wanted_ == 0; },
        "a worker");
  } catch (...) {
    --waiting_;
    throw;
  }
  --waiting_;
  ++running_;
  auto ticket = std::make_unique<Ticket>(*this, running_);
  lock.unlock();
  if (on_admitted_) on_admitted_();
  return ticket;
}

std::unique_ptr<Admission::Quiet> Admission::quiet(const CallOptions& call) {
  std::unique_lock<std::mutex> lock(mu_);
  ++quiet_wanted_;
  try {
    wait(
        lock, call, [this] { return running_ == 0; }, "the requests compiling to finish");
  } catch (...) {
    --quiet_wanted_;
    freed_.notify_all();
    throw;
  }
  --quiet_wanted_;
  ++quiet_;
  return std::make_unique<Quiet>(*this, quiet_);
}

void Admission::wait(std::unique_lock<std::mutex>& lock, const CallOptions& call,
                     const std::function<bool()>& ready, const char* what) {
  // Woken when a worker frees, and every 50 ms to see whether the client went away.
  while (!ready()) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    if (call.deadline && *call.deadline < until) until = *call.deadline;
    freed_.wait_until(lock, until);
    if (ready()) break;
    if (call.cancelled && call.cancelled())
      refuse(Code::Cancelled,
             fmt::format("the request was cancelled while it waited for {}", what));
    if (call.deadline && std::chrono::steady_clock::now() >= *call.deadline)
      refuse(Code::DeadlineExceeded,
             fmt::format("the request's deadline passed while it waited for {}", what));
  }
}

}  // namespace kiln::server
