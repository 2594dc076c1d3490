// kiln: the command line. Parses arguments, sets up logging, runs one command.
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "commands.h"
#include "options.h"
#include "tuning.h"

namespace {

constexpr int kExitUsage = 2;

// Logs go to stderr so that stdout holds only results; they stay quiet
// unless --verbose asks for every stage's debug messages.
void set_up_logging(bool verbose) {
  auto logger = spdlog::stderr_color_mt("kiln");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::warn);
}

int run(const kiln::cli::Options& o) {
  using kiln::cli::Command;
  switch (o.command) {
    case Command::Check:
      return kiln::cli::run_check(o);
    case Command::Emit:
      return kiln::cli::run_emit(o);
    case Command::Interp:
      return kiln::cli::run_interp(o);
    case Command::Run:
      return kiln::cli::run_run(o);
    case Command::Compile:
      return kiln::cli::run_compile(o);
    case Command::Agents:
      return kiln::cli::run_agents(o);
    case Command::Measure:
      return kiln::cli::run_measure(o);
    case Command::Tune:
      return kiln::cli::run_tune(o);
    case Command::Records:
      return kiln::cli::run_records(o);
    case Command::Tasks:
      return kiln::cli::run_tasks(o);
    case Command::None:
      break;
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using kiln::cli::Command;
  kiln::cli::Options o;
  try {
    o = kiln::cli::parse_command_line(argc, argv);
  } catch (const kiln::cli::UsageError& e) {
    const char* cmd = kiln::cli::command_name(e.command());
    fmt::print(stderr, "kiln{}{}: {}\n{}\nRun 'kiln{}{} --help' for more.\n", *cmd ? " " : "", cmd,
               e.what(), kiln::cli::synopsis(e.command()), *cmd ? " " : "", cmd);
    return kExitUsage;
  }

  if (o.help) {
    fmt::print("{}", kiln::cli::help_text(o.command));
    return 0;
  }
  if (o.version) {
    fmt::print("kiln {}\n", KILN_VERSION);
    return 0;
  }

  // kilnd from the environment, for the commands it serves.
  if (const char* server = std::getenv("KILN_SERVER");
      !o.server && server && *server && o.command != Command::Interp) {
    o.server = server;
  }
  set_up_logging(o.verbose);
  spdlog::debug("kiln {}: {} on {} file(s)", KILN_VERSION, kiln::cli::command_name(o.command),
                o.files.size());
  try {
    int status = run(o);
    std::fflush(stdout);
    return status;
  } catch (const kiln::cli::UsageError& e) {
    fmt::print(stderr, "kiln {}: {}\n", kiln::cli::command_name(e.command()), e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "kiln: internal error: {} (this is a bug in kiln; please report it)\n",
               e.what());
    return 1;
  }
}
