// kilnd: the compile service (docs/server.md).
//
//   kilnd [--listen HOST:PORT] [--data-dir DIR] [--db URL [--replica NAME] [--lease-ms N]]
//         [--workers N] [--queue-depth N]
//         [--cache-bytes N] [--run-timeout-ms N] [--run-memory-mb N]
//         [--runner PATH] [--max-source-bytes N] [--max-computations N]
//         [--max-domain-dims N] [--max-expression-nodes N]
//         [--max-isl-operations N] [--max-stage-ms N] [--max-fold-bytes N]
//         [--max-blob-mb N] [--token-file FILE]
//         [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
//         [--agent-token-file FILE] [--agent-listen HOST:PORT] [--agent-heartbeat-ms N]
//         [--agent-wait-ms N] [--agent-tls-cert FILE --agent-tls-key FILE]
//         [--measure-timeout-ms N] [--measure-memory-mb N]
//         [--local-agent [--local-agent-key KEY] [--agent-binary PATH]
//                        [--local-agent-compiles pause|overlap]]
//         [--config FILE] [--log-level LEVEL]
//
// A config file holds the same settings, one "NAME = VALUE" per line (NAME a
// flag without its dashes); flags on the command line win over it.
//
// Agents are taken with an agent token file (remote ones) or --local-agent
// (one kiln-agent started here, with a token of its own when no file is
// given, on a free loopback port unless --agent-listen says otherwise).
//
// Listens on loopback by default. Prints "kilnd: listening on HOST:PORT" once
// it serves (with the port chosen when PORT is 0). SIGTERM or SIGINT stops it
// gracefully: requests in flight finish, new ones are refused.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpc_service.h"
#include "kiln/limits.h"
#include "kiln/records.h"
#include "local_agent.h"
#include "replica.h"
#include "service.h"
#include "tuning.h"

namespace {

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir;
  std::string db;       // the records database: a postgresql:// URL, or a SQLite file
  std::string replica;  // with a postgresql:// --db: this replica's name
  int64_t lease_ms = kiln::server::ReplicaOptions{}.lease.count();
  int workers = 0;
  int queue_depth = kiln::server::ServiceOptions{}.queue_depth;
  size_t cache_bytes = kiln::server::ServiceOptions{}.cache_bytes;
  std::string log_level = "info";
  kiln::Limits limits{};  // --max-* (docs/limits.md)
  int64_t run_timeout_ms = kiln::server::ServiceOptions{}.run_timeout_ms;
  uint64_t run_memory_mb = kiln::server::ServiceOptions{}.run_memory_bytes >> 20;
  uint64_t max_blob_mb = kiln::server::ServiceOptions{}.max_blob_bytes >> 20;
  std::string runner;
  std::string token_file;
  std::string tls_cert, tls_key, tls_client_ca;
  // Agents (docs/agents.md): none without a token file.
  std::string agent_token_file;
  std::string agent_listen = "127.0.0.1:50052";
  bool agent_listen_given = false;
  bool local_agent = false;
  bool quiet_measurements = true;  // --local-agent-compiles pause|overlap
  std::string local_agent_key = "local";
  std::string agent_binary;
  std::string agent_tls_cert, agent_tls_key;
  int agent_heartbeat_ms = kiln::server::FleetOptions{}.heartbeat_ms;
  int64_t agent_wait_ms = kiln::server::FleetOptions{}.wait_for_agent.count();
  int64_t measure_timeout_ms = kiln::server::ServiceOptions{}.measure_timeout_ms;
  uint64_t measure_memory_mb = kiln::server::ServiceOptions{}.measure_memory_bytes >> 20;
};

// A whole number from `lo` to `hi`, or the usage message.
long long count_flag(const std::string& flag, const std::string& v, long long lo, long long hi);

// Where the setting being read comes from, when a config file: "FILE:LINE".
std::string setting_origin;

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(
      stderr,
      "kilnd: %s%s\nusage: kilnd [--listen HOST:PORT] [--data-dir DIR] "
      "[--db URL [--replica NAME] [--lease-ms N]] [--workers N] "
      "[--queue-depth N] [--cache-bytes N] [--run-timeout-ms N] [--run-memory-mb N] "
      "[--runner PATH] [--max-source-bytes N] [--max-computations N] [--max-domain-dims N] "
      "[--max-expression-nodes N] [--max-isl-operations N] [--max-stage-ms N] [--max-fold-bytes N] "
      "[--max-blob-mb N] [--token-file FILE] "
      "[--tls-cert FILE --tls-key FILE "
      "[--tls-client-ca FILE]] [--agent-token-file FILE] [--agent-listen HOST:PORT] "
      "[--agent-heartbeat-ms N] [--agent-wait-ms N] [--agent-tls-cert FILE --agent-tls-key FILE] "
      "[--measure-timeout-ms N] "
      "[--measure-memory-mb N] [--local-agent [--local-agent-key KEY] [--agent-binary PATH] "
      "[--local-agent-compiles pause|overlap]] "
      "[--config FILE] [--log-level trace|debug|info|warn|error|off]\n",
      problem.c_str(), setting_origin.empty() ? "" : (" (at " + setting_origin + ")").c_str());
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

// The settings of a config file as flags: one "NAME = VALUE" (or "NAME
// VALUE", or a lone NAME for a flag without a value) per line, NAME a flag's
// name without its dashes, '#' starting a comment.
std::vector<std::string> config_args(const std::string& path, std::vector<std::string>& origins) {
  std::ifstream in(path);
  if (!in) usage("--config " + path + ": cannot read the file");
  std::vector<std::string> args;
  std::string line;
  auto trim = [](std::string t) {
    size_t first = t.find_first_not_of(" \t\r");
    if (first == std::string::npos) return std::string();
    return t.substr(first, t.find_last_not_of(" \t\r") - first + 1);
  };
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    size_t split = line.find('=');
    if (split == std::string::npos) split = line.find_first_of(" \t");
    std::string name = trim(line.substr(0, split));
    std::string value = split == std::string::npos ? "" : trim(line.substr(split + 1));
    if (name.empty() || name == "config" || name.find_first_of(" \t") != std::string::npos)
      usage(path + ":" + std::to_string(n) +
            ": expected 'NAME = VALUE', NAME a flag of kilnd without its dashes (not config)");
    std::string at = path + ":" + std::to_string(n);
    args.push_back("--" + name);
    origins.push_back(at);
    if (!value.empty()) {
      args.push_back(value);
      origins.push_back(at);
    }
  }
  return args;
}

Flags parse_flags(int argc, char** argv) {
  std::vector<std::string> args, origins;
  for (int k = 1; k < argc; ++k) {
    if (std::string(argv[k]) == "--config" && k + 1 < argc) {
      args = config_args(argv[k + 1], origins);
    }
  }
  for (int k = 1; k < argc; ++k) {
    args.emplace_back(argv[k]);
    origins.emplace_back();
  }
  Flags f;
  for (size_t k = 0; k < args.size(); ++k) {
    setting_origin = origins[k];
    std::string a = args[k];
    auto value = [&]() -> std::string {
      // A config line's value is on its line: never the next line's or the command line's.
      if (k + 1 >= args.size() || origins[k + 1] != origins[k]) usage(a + " needs a value");
      return args[++k];
    };
    if (a == "--listen") {
      f.listen = value();
    } else if (a == "--data-dir") {
      f.data_dir = value();
    } else if (a == "--db") {
      f.db = value();
      if (f.db.empty()) usage("--db: name the records database (postgresql://... or a file)");
    } else if (a == "--replica") {
      f.replica = value();
      if (f.replica.empty()) usage("--replica: name this replica");
    } else if (a == "--lease-ms") {
      f.lease_ms = count_flag(a, value(), 200, 3'600'000);
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
    } else if (a == "--max-source-bytes") {
      f.limits.max_source_bytes = static_cast<size_t>(count_flag(a, value(), 1, int64_t{1} << 30));
    } else if (a == "--max-computations") {
      f.limits.max_computations = static_cast<size_t>(count_flag(a, value(), 1, 1 << 20));
    } else if (a == "--max-domain-dims") {
      f.limits.max_domain_dims = static_cast<size_t>(count_flag(a, value(), 1, 64));
    } else if (a == "--max-expression-nodes") {
      f.limits.max_expression_nodes = static_cast<size_t>(count_flag(a, value(), 1, 1 << 24));
    } else if (a == "--max-isl-operations") {
      f.limits.max_isl_operations =
          static_cast<uint64_t>(count_flag(a, value(), 1, int64_t{1} << 40));
    } else if (a == "--max-fold-bytes") {
      f.limits.max_fold_bytes = static_cast<size_t>(count_flag(a, value(), 0, int64_t{1} << 40));
    } else if (a == "--max-stage-ms") {
      f.limits.max_stage_ms = count_flag(a, value(), -1, 86'400'000);
    } else if (a == "--run-timeout-ms") {
      f.run_timeout_ms = count_flag(a, value(), 1, 86'400'000);
    } else if (a == "--max-blob-mb") {
      f.max_blob_mb = static_cast<uint64_t>(count_flag(a, value(), 1, int64_t{1} << 24));
    } else if (a == "--run-memory-mb") {
      f.run_memory_mb = static_cast<uint64_t>(count_flag(a, value(), 0, 1 << 30));
    } else if (a == "--agent-token-file") {
      f.agent_token_file = value();
    } else if (a == "--agent-listen") {
      f.agent_listen = value();
      f.agent_listen_given = true;
    } else if (a == "--local-agent") {
      f.local_agent = true;
    } else if (a == "--local-agent-compiles") {
      std::string v = value();
      if (v != "pause" && v != "overlap")
        usage("--local-agent-compiles: expected pause (the default) or overlap");
      f.quiet_measurements = v == "pause";
    } else if (a == "--local-agent-key") {
      f.local_agent_key = value();
      if (f.local_agent_key.empty()) usage("--local-agent-key: expected a device class name");
    } else if (a == "--agent-binary") {
      f.agent_binary = value();
    } else if (a == "--agent-tls-cert") {
      f.agent_tls_cert = value();
    } else if (a == "--agent-tls-key") {
      f.agent_tls_key = value();
    } else if (a == "--agent-wait-ms") {
      f.agent_wait_ms = count_flag(a, value(), 0, 24LL * 3600 * 1000);
    } else if (a == "--agent-heartbeat-ms") {
      f.agent_heartbeat_ms = static_cast<int>(count_flag(a, value(), 50, 600'000));
    } else if (a == "--measure-timeout-ms") {
      f.measure_timeout_ms = count_flag(a, value(), 1, 24LL * 3600 * 1000);
    } else if (a == "--measure-memory-mb") {
      f.measure_memory_mb = static_cast<uint64_t>(count_flag(a, value(), 0, 1 << 30));
    } else if (a == "--runner") {
      f.runner = value();
    } else if (a == "--token-file") {
      f.token_file = value();
    } else if (a == "--tls-cert") {
      f.tls_cert = value();
    } else if (a == "--tls-key") {
      f.tls_key = value();
    } else if (a == "--tls-client-ca") {
      f.tls_client_ca = value();
    } else if (a == "--config") {
      value();  // read before the other flags (config_args)
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
  setting_origin.clear();
  return f;
}

std::string read_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(flag + " " + path + ": cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A token file's token: its text without trailing white space, never empty.
std::string read_token(const std::string& path, const std::string& flag) {
  std::string token = read_file(path, flag);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) throw std::runtime_error(flag + " " + path + ": the file holds no token");
  return token;
}

// Plaintext, or TLS with the server's certificate and, with a client CA,
// client certificates required and verified.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const Flags& f) {
  if (f.tls_cert.empty() != f.tls_key.empty())
    throw std::runtime_error("--tls-cert and --tls-key go together");
  if (f.tls_cert.empty()) {
    if (!f.tls_client_ca.empty())
      throw std::runtime_error("--tls-client-ca needs --tls-cert and --tls-key");
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl(
      f.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!f.tls_client_ca.empty()) ssl.pem_root_certs = read_file(f.tls_client_ca, "--tls-client-ca");
  ssl.pem_key_cert_pairs.push_back(
      {read_file(f.tls_key, "--tls-key"), read_file(f.tls_cert, "--tls-cert")});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = parse_flags(argc, argv);
  // Logs go to stderr; stdout says only where kilnd listens.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kilnd"));
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  // protobuf's own complaints (a string field that is not UTF-8 in a frame a
  // stranger sent the agent port) are debug lines: kilnd logs the refusal.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string& message) {
        spdlog::debug("protobuf: {}", message);
      });

  // SIGTERM and SIGINT are taken by a thread of their own (blocked here
  // before gRPC starts its threads, so none of them gets them).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A peer that went away is a failed write (EPIPE), never the end of kilnd.
  signal(SIGPIPE, SIG_IGN);

  kiln::server::ServiceOptions options;
  options.cache_bytes = flags.cache_bytes;
  options.data_dir = flags.data_dir;
  options.workers = flags.workers;
  options.queue_depth = flags.queue_depth;
  options.limits = flags.limits;
  options.run_timeout_ms = flags.run_timeout_ms;
  options.run_memory_bytes = flags.run_memory_mb << 20;
  options.max_blob_bytes = flags.max_blob_mb << 20;
  options.runner_path = flags.runner;
  options.measure_timeout_ms = flags.measure_timeout_ms;
  options.measure_memory_bytes = flags.measure_memory_mb << 20;
  std::unique_ptr<kiln::server::Service> service;
  try {
    service = std::make_unique<kiln::server::Service>(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kilnd: %s\n", e.what());
    return 1;
  }
  std::unique_ptr<kiln::server::Fleet> fleet;
  std::unique_ptr<kiln::server::LocalAgent> local_agent;
  if (!flags.agent_token_file.empty() || flags.local_agent) {
    try {
      kiln::server::FleetOptions fo;
      bool remote = !flags.agent_token_file.empty();
      fo.listen = remote || flags.agent_listen_given ? flags.agent_listen : "127.0.0.1:0";
      fo.token = remote ? read_token(flags.agent_token_file, "--agent-token-file")
                        : kiln::server::random_token();
      fo.heartbeat_ms = flags.agent_heartbeat_ms;
      fo.tls_cert_file = flags.agent_tls_cert;
      fo.tls_key_file = flags.agent_tls_key;
      fo.wait_for_agent = std::chrono::milliseconds(flags.agent_wait_ms);
      fleet = std::make_unique<kiln::server::Fleet>(fo);
      if (flags.local_agent && !flags.agent_tls_cert.empty())
        throw std::runtime_error(
            "--local-agent with --agent-tls-cert: the local agent would have to check kilnd's "
            "certificate for 127.0.0.1; start it yourself (kiln-agent --tls-ca FILE "
            "--tls-server-name NAME) or take agents without TLS");
      if (flags.local_agent) {
        std::string binary = flags.agent_binary;
        if (binary.empty()) {
          std::error_code ec;
          binary = kiln::server::default_agent_binary(
              std::filesystem::read_symlink("/proc/self/exe", ec).string());
        }
        spdlog::level::level_enum level = spdlog::level::from_str(flags.log_level);
        const char* agent_level = level <= spdlog::level::debug  ? "debug"
                                  : level == spdlog::level::info ? "info"
                                  : level == spdlog::level::warn ? "warning"
                                                                 : "error";
        local_agent = std::make_unique<kiln::server::LocalAgent>(
            binary, fleet->port(), flags.local_agent_key, fo.token, agent_level);
        spdlog::info("local agent {} started (pid {}), key {}", binary, local_agent->pid(),
                     flags.local_agent_key);
        if (flags.quiet_measurements) service->quiet_measurements(flags.local_agent_key);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kilnd: %s\n", e.what());
      return 1;
    }
    service->set_fleet(fleet.get());
  }
  kiln::server::Service& core = *service;
  // With a PostgreSQL database, kilnd is one replica of several: its jobs measure through the
  // shared queue, on the agents of every replica (docs/scale-out.md).
  std::unique_ptr<kiln::server::Replica> replica;
  if (!flags.replica.empty() && !kiln::records::is_postgres_url(flags.db))
    usage("--replica: only with --db postgresql://... (replicas share a PostgreSQL database)");
  if (kiln::records::is_postgres_url(flags.db)) {
    kiln::server::ReplicaOptions ro;
    ro.url = flags.db;
    ro.name = flags.replica;
    ro.lease = std::chrono::milliseconds(flags.lease_ms);
    ro.wait_for_agent = std::chrono::milliseconds(flags.agent_wait_ms);
    ro.limits = options.limits;
    try {
      replica = std::make_unique<kiln::server::Replica>(ro, core.fleet_runner(), fleet.get());
      service->share_blobs(&replica->blobs());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kilnd: %s\n", e.what());
      return 1;
    }
  }
  // Tuning jobs build through the service's compile cache and measure on its agents.
  std::unique_ptr<kiln::server::Tuning> tuning;
  try {
    // --db names it; else DIR/records.db of --data-dir; else one in memory.
    std::string records = !flags.db.empty() ? flags.db
                          : flags.data_dir.empty()
                              ? kiln::records::kInMemory
                              : (std::filesystem::path(flags.data_dir) / "records.db").string();
    tuning =
        std::make_unique<kiln::server::Tuning>(core.artifacts(), core.fleet_runner(), &core.blobs(),
                                               records, options.limits, replica.get());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kilnd: %s\n", e.what());
    return 1;
  }
  kiln::server::Access access;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  try {
    if (!flags.token_file.empty()) {
      access.token = read_token(flags.token_file, "--token-file");
    }
    credentials = server_credentials(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kilnd: %s\n", e.what());
    return 1;
  }
  std::unique_ptr<grpc::Service> compiler = kiln::server::make_compiler_service(
      core, *tuning, access,
      kiln::server::Ceilings{flags.measure_timeout_ms, flags.measure_memory_mb << 20});

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, credentials, &port);
  // Without SO_REUSEPORT: gRPC otherwise clones the listener once per poller, and a clone of
  // port 0 binds a port of its own, an undocumented second door to the same service (and a
  // fixed port could be shared with another process of the same user).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
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
  if (fleet) {
    std::string agent_host = flags.agent_listen.substr(0, flags.agent_listen.rfind(':'));
    std::printf("kilnd: agents on %s:%d\n", agent_host.c_str(), fleet->port());
  }
  if (flags.data_dir.empty() && flags.db.empty())
    spdlog::warn("no --data-dir: the tuning records are kept in memory and lost when kilnd stops");
  if (!flags.db.empty()) spdlog::info("records database {}", kiln::records::redacted(flags.db));
  if (replica) {
    kiln::server::Tuning* jobs = tuning.get();
    kiln::server::Replica::Hooks hooks;
    hooks.adopt = [jobs](int64_t job) { jobs->adopt(job); };
    hooks.cancel = [jobs](int64_t job) { jobs->cancel_here(job); };
    hooks.driving = [jobs] { return jobs->running_here(); };
    hooks.lost = [jobs](int64_t job) { jobs->lost_here(job); };
    replica->start(fmt::format("{}:{}", host, port), std::move(hooks));
    spdlog::info("replica {}: jobs measured by the agents of every replica", replica->name());
  }
  spdlog::info("serving on {}:{} ({}{}); runner {}", host, port,
               flags.tls_cert.empty() ? "plaintext" : "TLS",
               access.token.empty() ? "" : ", token required",
               options.runner_path.empty() ? "beside kilnd" : options.runner_path);
  std::fflush(stdout);

  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("{}: finishing the requests in flight, refusing new ones",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT");
    // Tuning jobs stop first (their records kept, to be resumed): the calls
    // that follow them end, and do not hold the shutdown.
    tuning->stop();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
  });
  server->Wait();
  stopper.join();
  if (replica) replica->stop();  // its jobs, stopped above, left for another replica at once
  tuning.reset();
  service->share_blobs(nullptr);
  replica.reset();
  local_agent.reset();
  if (fleet) fleet->stop();
  kiln::server::CacheStats s = core.cache_stats();
  spdlog::info(
      "stopped; compile cache: {} hits ({} from disk), {} misses, {} damaged entries dropped",
      s.hits, s.disk_hits, s.misses, s.dropped);
  return 0;
}
