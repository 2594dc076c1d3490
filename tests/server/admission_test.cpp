// kilnd's admission (server/admission.h): a Quiet, taken for a measurement of kilnd's own
// agent on this machine, waits for the requests compiling to finish, keeps new ones from
// starting while it lives, and refuses at its call's deadline; the requests waiting start once
// it is gone.
#include "admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "request.h"

namespace kiln::testing {
namespace {

using namespace std::chrono_literals;

server::CallOptions no_limit() { return {}; }

TEST(Admission, AQuietWaitsForTheCompilesAndHoldsNewOnesBack) {
  server::Admission admission(2, 4);
  auto compiling = admission.enter(no_limit());
  std::atomic<bool> quiet_taken{false};
  std::unique_ptr<server::Admission::Quiet> quiet;
  std::thread measure([&] {
    quiet = admission.quiet(no_limit());
    quiet_taken = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(quiet_taken) << "the Quiet was taken while a request compiled";
  // A request that comes while the Quiet is wanted waits too, though a worker is free.
  std::atomic<bool> second_in{false};
  std::thread second([&] {
    auto t = admission.enter(no_limit());
    second_in = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(second_in);
  compiling.reset();
  measure.join();
  EXPECT_TRUE(quiet_taken);
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(second_in) << "a request started compiling beside a measurement";
  quiet.reset();
  second.join();
  EXPECT_TRUE(second_in);
}

TEST(Admission, AQuietRefusesAtItsDeadline) {
  server::Admission admission(1, 4);
  auto compiling = admission.enter(no_limit());
  server::CallOptions call;
  call.deadline = std::chrono::steady_clock::now() + 100ms;
  try {
    admission.quiet(call);
    FAIL() << "the Quiet was taken while a request compiled";
  } catch (const server::Refusal& r) {
    EXPECT_EQ(r.status.code, server::Code::DeadlineExceeded);
    EXPECT_NE(r.status.message.find("waited for the requests compiling to finish"),
              std::string::npos)
        << r.status.message;
  }
  // Given up, it holds nothing back.
  compiling.reset();
  EXPECT_NE(admission.enter(no_limit()), nullptr);
}

}  // namespace
}  // namespace kiln::testing
