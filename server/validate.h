// Every request checked at kilnd's boundary, once, before any work: its strings (length, NUL
// bytes) and numbers (signs, ranges, kilnd's ceilings), answered INVALID_ARGUMENT naming the
// field. And the bounds on what a status message may carry back, so that every status reaches
// every client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "status.h"

namespace google::protobuf {
class Message;
}

namespace kiln::server {

// The most bytes of one string field of a request: a name, a key, a target, a filename.
inline constexpr size_t kMaxNameBytes = 1024;
inline constexpr size_t kMaxFilenameBytes = 4096;
// The most bytes of a string that is a text of its own (a schedule argument's isl map).
inline constexpr size_t kMaxTextBytes = size_t{64} << 10;
// The most bytes of a status message kilnd sends (gRPC carries it in a header, which clients
// bound at 8 KiB and less).
inline constexpr size_t kMaxStatusMessageBytes = 4096;
// The most bytes of a client's string an error message quotes.
inline constexpr size_t kMaxQuotedBytes = 128;

// What kilnd allows a request to ask of its agents and runners.
struct Ceilings {
  int64_t measure_time_limit_ms = 60'000;             // --measure-timeout-ms
  uint64_t measure_memory_bytes = uint64_t{4} << 30;  // --measure-memory-mb
};

// OK, or INVALID_ARGUMENT naming the first field that is wrong and why: a string longer than
// its bound or holding a NUL byte (in any message of the request, map keys included), a count,
// size or limit that is negative, a measurement limit above kilnd's ceiling.
Status validate(const google::protobuf::Message& request, const Ceilings& ceilings);

// s for a message: whole when it is short, else its first kMaxQuotedBytes and how long it is;
// control characters escaped.
std::string quoted(std::string_view s);

// message, cut so that its percent-encoded form (how gRPC sends it) takes at most
// kMaxStatusMessageBytes, at a UTF-8 character boundary, with a note saying so.
std::string bounded(std::string message);

}  // namespace kiln::server
