// The outcome of a call to the service core, in gRPC's terms, without gRPC.
#pragma once

#include <cstdint>
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

}  // namespace kiln::server
