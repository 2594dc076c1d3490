// kilnd: the compile service (docs/server.md).
//
//   kilnd [--listen HOST:PORT] [--data-dir DIR] [--workers N] [--queue-depth N]
//         [--cache-bytes N] [--run-timeout-ms N] [--run-memory-mb N]
//         [--runner PATH] [--log-level LEVEL]
//
// Listens on loopback by default. Prints "kilnd: listening on HOST:PORT" once
// it serves (with the port chosen when PORT is 0). SIGTERM or SIGINT stops it
// gracefully: requests in flight finish, new ones are refused.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "grpc_service.h"
#include "service.h"

namespace {

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir;
  int workers = 0;
  int queue_depth = kiln::server::ServiceOptions{}.queue_depth;
  size_t cache_bytes = kiln::server::ServiceOptions{}.cache_bytes;
  std::string log_level = "info";
  int64_t run_timeout_ms = kiln::server::ServiceOptions{}.run_timeout_ms;
  uint64_t run_memory_mb = kiln::server::ServiceOptions{}.run_memory_bytes >> 20;
  std::string runner;
};

// A whole number from `lo` to `hi`, or the usage message.
long long count_flag(const std::string& flag, const std::string& v, long long lo, long long hi);

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "kilnd: %s\nusage: kilnd [--listen HOST:PORT] [--data-dir DIR] [--workers N] "
               "[--queue-depth N] [--cache-bytes N] [--run-timeout-ms N] [--run-memory-mb N] "
               "[--runner PATH] [--log-level trace|debug|info|warn|error|off]\n",
               problem.c_str());
  std::exit(2);
}

long long count_flag(const std::string& flag, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi)
    usage(flag + " '" + v + "': expected a whole number from " + std::to_string(lo) + " to " +
          std::to_string(hi));
  return n;
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int k = 1; k < argc; ++k) {
    std::string a = argv[k];
    auto value = [&]() -> std::string {
      if (k + 1 >= argc) usage(a + " needs a value");
      return argv[++k];
    };
    if (a == "--listen") {
      f.listen = value();
    } else if (a == "--data-dir") {
      f.data_dir = value();
    } else if (a == "--workers" || a == "--queue-depth") {
      std::string v = value();
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < (a == "--workers" ? 1 : 0) || n > 4096)
        usage(a + " '" + v + "': expected a count" + (a == "--workers" ? " from 1" : "") +
              " up to 4096");
      (a == "--workers" ? f.workers : f.queue_depth) = static_cast<int>(n);
    } else if (a == "--cache-bytes") {
      std::string v = value();
      char* end = nullptr;
      unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || v[0] == '-')
        usage("--cache-bytes '" + v + "': expected a byte count");
      f.cache_bytes = static_cast<size_t>(n);
    } else if (a == "--run-timeout-ms") {
      f.run_timeout_ms = count_flag(a, value(), 1, 86'400'000);
    } else if (a == "--run-memory-mb") {
      f.run_memory_mb = static_cast<uint64_t>(count_flag(a, value(), 0, 1 << 30));
    } else if (a == "--runner") {
      f.runner = value();
    } else if (a == "--log-level") {
      f.log_level = value();
      if (spdlog::level::from_str(f.log_level) == spdlog::level::off && f.log_level != "off")
        usage("--log-level '" + f.log_level + "': expected trace, debug, info, warn, error or off");
    } else if (a == "--help" || a == "-h") {
      usage("the kiln compile service");
    } else {
      usage("unknown option '" + a + "'");
    }
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = parse_flags(argc, argv);
  // Logs go to stderr; stdout says only where kilnd listens.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kilnd"));
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");

  // SIGTERM and SIGINT are taken by a thread of their own (blocked here
  // before gRPC starts its threads, so none of them gets them).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  kiln::server::ServiceOptions options;
  options.cache_bytes = flags.cache_bytes;
  options.data_dir = flags.data_dir;
  options.workers = flags.workers;
  options.queue_depth = flags.queue_depth;
  options.run_timeout_ms = flags.run_timeout_ms;
  options.run_memory_bytes = flags.run_memory_mb << 20;
  options.runner_path = flags.runner;
  std::unique_ptr<kiln::server::Service> service;
  try {
    service = std::make_unique<kiln::server::Service>(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kilnd: %s\n", e.what());
    return 1;
  }
  kiln::server::Service& core = *service;
  std::unique_ptr<grpc::Service> compiler = kiln::server::make_compiler_service(core);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(compiler.get());
  // A request may hold a source of max_source_bytes and then some (a
  // structured operator, options); a larger message is refused by gRPC
  // before it is read, with RESOURCE_EXHAUSTED.
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(
      options.limits.max_source_bytes * 2 + (1 << 20), std::numeric_limits<int>::max())));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "kilnd: cannot listen on %s\n", flags.listen.c_str());
    return 1;
  }
  std::string host = flags.listen.substr(0, flags.listen.rfind(':'));
  std::printf("kilnd: listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("{}: finishing the requests in flight, refusing new ones",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
  });
  server->Wait();
  stopper.join();
  kiln::server::CacheStats s = core.cache_stats();
  spdlog::info(
      "stopped; compile cache: {} hits ({} from disk), {} misses, {} damaged entries dropped",
      s.hits, s.disk_hits, s.misses, s.dropped);
  return 0;
}
