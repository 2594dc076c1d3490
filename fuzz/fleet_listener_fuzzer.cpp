// libFuzzer target: kilnd's agent listener (server/fleet.h) on whatever a
// stranger sends its port. One fleet for the whole run; each input is sent on
// a fresh loopback connection, which is then half-closed and read until kilnd
// closes it. kilnd must answer with its challenge and at most a refusal, and
// never crash, leak or hang (libFuzzer's -timeout) on any input. deploy/fuzz.sh
// runs it; FleetFaultsTest.RandomAndTruncatedFramesNeverDisturbTheFleet is its
// seeded counterpart in ctest.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fleet.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_fleet_listener: %s (errno: %s)\n", what, std::strerror(errno));
  std::abort();
}

kiln::server::Fleet& fleet() {
  static std::unique_ptr<kiln::server::Fleet> f = [] {
    spdlog::set_level(spdlog::level::off);  // a refusal a run is not news
    kiln::server::FleetOptions o;
    o.token = "fuzz-token";
    o.max_frame_bytes = 1 << 20;
    return std::make_unique<kiln::server::Fleet>(o);
  }();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(fleet().port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fail("cannot connect");
  for (size_t at = 0; at < size;) {
    ssize_t w = send(fd, data + at, size - at, MSG_NOSIGNAL);
    if (w <= 0) break;  // kilnd closed first: its right
    at += static_cast<size_t>(w);
  }
  shutdown(fd, SHUT_WR);
  std::string got;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10'000) <= 0) fail("kilnd neither answered nor closed within 10 s");
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // The challenge always comes first.
  kiln::v1::AgentFrame first;
  if (got.size() < 4) fail("kilnd closed without its challenge");
  uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(got[0])) << 24 |
               static_cast<uint32_t>(static_cast<unsigned char>(got[1])) << 16 |
               static_cast<uint32_t>(static_cast<unsigned char>(got[2])) << 8 |
               static_cast<uint32_t>(static_cast<unsigned char>(got[3]));
  if (got.size() < 4 + n || !first.ParseFromString(got.substr(4, n)) || !first.has_challenge())
    fail("kilnd's first frame is not a challenge");
  return 0;
}
