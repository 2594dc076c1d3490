// The outcome of a call to the service core, in gRPC's terms, without gRPC,
// and what the transport knows about the call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace kiln::server {

enum class Code : uint8_t {
  Ok,
  InvalidArgument,    // a malformed operator or request: the message says what and where
  ResourceExhausted,  // a full queue, or a limit that bounds the work
  DeadlineExceeded,
  Cancelled,
  Unauthenticated,
  Unavailable,         // no agent of the key a job asks for, or every agent that took it was lost
  Internal,            // a bug in kiln, or a kernel that crashed its runner
  NotFound,            // a tuning job, or a record, that is not there
  FailedPrecondition,  // refused in the state things are in (resuming a finished job)
};
const char* code_name(Code c);  // "OK", "INVALID_ARGUMENT", ...

struct Status {
  Code code = Code::Ok;
  std::string message;
  bool ok() const { return code == Code::Ok; }
};

// What the transport knows about one call.
struct CallOptions {
  // Past it, a request waiting for a worker gives up, and a compiling one
  // stops between stages (or between the steps of one): DEADLINE_EXCEEDED.
  std::optional<std::chrono::steady_clock::time_point> deadline{};
  // True once the client has gone away: the work stops as at the deadline,
  // CANCELLED.
  std::function<bool()> cancelled{};
};

}  // namespace kiln::server
