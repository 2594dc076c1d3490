// Parsing of the kiln command line, and the usage and help texts.
#include "options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <charconv>
#include <cmath>
#include <ctime>
#include <string_view>
#include <vector>

#include "kiln/passes.h"
#include "kiln/search.h"
#include "kiln/target.h"

namespace kiln::cli {
namespace {

// One option: its name, whether it takes a value (and what kind, for
// messages), and which commands accept it (a bit each).
struct OptionSpec {
  std::string_view name;
  std::string_view value;  // empty: a flag
  uint32_t commands;
};

constexpr uint32_t bit(Command c) { return uint32_t{1} << static_cast<int>(c); }

constexpr std::array<OptionSpec, 69> kOptions = {{
    {"--func", "NAME",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Interp) | bit(Command::Run) |
         bit(Command::Compile) | bit(Command::Measure) | bit(Command::Tune) |
         bit(Command::Records)},
    {"--graph", "NAME",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Interp) | bit(Command::Run) |
         bit(Command::Compile) | bit(Command::Tasks)},
    {"--set", "NAME=INT",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Interp) | bit(Command::Run) |
         bit(Command::Compile) | bit(Command::Measure) | bit(Command::Tune) |
         bit(Command::Records)},
    {"--stage", "STAGE", bit(Command::Emit)},
    {"--no-schedule", "",
     bit(Command::Emit) | bit(Command::Interp) | bit(Command::Run) | bit(Command::Compile) |
         bit(Command::Measure)},
    {"--check", "", bit(Command::Interp) | bit(Command::Run) | bit(Command::Measure)},
    {"--json", "",
     bit(Command::Interp) | bit(Command::Run) | bit(Command::Agents) | bit(Command::Measure) |
         bit(Command::Tune) | bit(Command::Records) | bit(Command::Tasks)},
    {"--seed", "N",
     bit(Command::Interp) | bit(Command::Run) | bit(Command::Measure) | bit(Command::Tune)},
    {"--verbose", "",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Interp) | bit(Command::Run) |
         bit(Command::Compile) | bit(Command::Agents) | bit(Command::Measure) | bit(Command::Tune) |
         bit(Command::Records) | bit(Command::Tasks)},
    {"--bench", "", bit(Command::Run) | bit(Command::Tasks)},
    {"--gpu", "N", bit(Command::Run) | bit(Command::Measure) | bit(Command::Tune)},
    {"--repeat", "R",
     bit(Command::Run) | bit(Command::Measure) | bit(Command::Tune) | bit(Command::Tasks)},
    {"--number", "N", bit(Command::Run) | bit(Command::Measure) | bit(Command::Tune)},
    {"--threads", "N",
     bit(Command::Run) | bit(Command::Measure) | bit(Command::Tune) | bit(Command::Tasks)},
    {"--input", "NAME=FILE", bit(Command::Run)},
    {"--dim", "NAME=N",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Interp) | bit(Command::Run) |
         bit(Command::Compile) | bit(Command::Tasks)},
    {"--save-outputs", "DIR", bit(Command::Run)},
    {"-O0", "",
     bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) | bit(Command::Measure) |
         bit(Command::Tune) | bit(Command::Tasks)},
    {"-O1", "",
     bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) | bit(Command::Measure) |
         bit(Command::Tune) | bit(Command::Tasks)},
    {"-O2", "",
     bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) | bit(Command::Measure) |
         bit(Command::Tune) | bit(Command::Tasks)},
    {"-O3", "",
     bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) | bit(Command::Measure) |
         bit(Command::Tune) | bit(Command::Tasks)},
    {"--print-after", "PASS", bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile)},
    {"--time-passes", "", bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile)},
    {"--disable-pass", "NAME",
     bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) | bit(Command::Measure) |
         bit(Command::Tune)},
    {"--require-pass", "NAME",
     bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) | bit(Command::Measure) |
         bit(Command::Tune)},
    {"--target", "TRIPLE", bit(Command::Emit) | bit(Command::Compile) | bit(Command::Records)},
    {"--cpu", "NAME", bit(Command::Emit) | bit(Command::Compile) | bit(Command::Records)},
    {"--features", "FEATURES",
     bit(Command::Emit) | bit(Command::Compile) | bit(Command::Records) | bit(Command::Tune)},
    {"--caches", "L1D,L2,L3", bit(Command::Emit) | bit(Command::Compile)},
    {"-o", "FILE", bit(Command::Compile) | bit(Command::Records)},
    {"--output", "FILE", bit(Command::Compile) | bit(Command::Records)},
    {"--out", "FILE", bit(Command::Records)},
    {"--server", "HOST:PORT",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) |
         bit(Command::Agents) | bit(Command::Measure) | bit(Command::Tune) | bit(Command::Records)},
    {"--token-file", "FILE",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) |
         bit(Command::Agents) | bit(Command::Measure) | bit(Command::Tune) | bit(Command::Records)},
    {"--tls-ca", "FILE",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) |
         bit(Command::Agents) | bit(Command::Measure) | bit(Command::Tune) | bit(Command::Records)},
    {"--tls-cert", "FILE",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) |
         bit(Command::Agents) | bit(Command::Measure) | bit(Command::Tune) | bit(Command::Records)},
    {"--tls-key", "FILE",
     bit(Command::Check) | bit(Command::Emit) | bit(Command::Run) | bit(Command::Compile) |
         bit(Command::Agents) | bit(Command::Measure) | bit(Command::Tune) | bit(Command::Records)},
    {"--key", "KEY",
     bit(Command::Measure) | bit(Command::Tune) | bit(Command::Records) | bit(Command::Compile) |
         bit(Command::Emit)},
    {"--priority", "N", bit(Command::Measure) | bit(Command::Tune)},
    {"--min-repeat-ms", "MS", bit(Command::Measure) | bit(Command::Tune)},
    {"--min-total-ms", "MS", bit(Command::Measure) | bit(Command::Tune)},
    {"--flush-cache", "", bit(Command::Measure) | bit(Command::Tune)},
    {"--time-limit-ms", "MS", bit(Command::Measure) | bit(Command::Tune)},
    {"--memory-limit-mb", "MB", bit(Command::Measure) | bit(Command::Tune)},
    {"--trials", "N", bit(Command::Tune)},
    {"--budget", "DURATION", bit(Command::Tune)},
    {"--batch", "N", bit(Command::Tune)},
    {"--early-stop", "N", bit(Command::Tune)},
    {"--retime", "N", bit(Command::Tune) | bit(Command::Records)},
    {"--agent", "ID", bit(Command::Measure)},
    {"--remeasure", "N", bit(Command::Tune)},
    {"--stop-slower-than", "X", bit(Command::Tune)},
    {"--search", "STRATEGY", bit(Command::Tune)},
    {"--detach", "", bit(Command::Tune)},
    {"--resume", "JOB", bit(Command::Tune)},
    {"--cancel", "JOB", bit(Command::Tune)},
    {"--transfer", "", bit(Command::Tune)},
    {"--best", "", bit(Command::Compile) | bit(Command::Measure) | bit(Command::Emit)},
    {"--auto", "", bit(Command::Tune) | bit(Command::Compile) | bit(Command::Emit)},
    {"--job", "JOB", bit(Command::Records)},
    {"--name", "NAME", bit(Command::Records)},
    {"--workload", "HASH", bit(Command::Records)},
    {"--error", "CLASS", bit(Command::Records)},
    {"--ok", "", bit(Command::Records)},
    {"--sort", "ORDER", bit(Command::Records)},
    {"--limit", "N", bit(Command::Records)},
    {"--offset", "N", bit(Command::Records)},
    {"--since", "TIME", bit(Command::Records)},
    {"--until", "TIME", bit(Command::Records)},
}};

bool accepts(const OptionSpec& o, Command c) { return c != Command::None && (o.commands & bit(c)); }

const OptionSpec* find_option(std::string_view name) {
  for (const OptionSpec& o : kOptions) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::optional<Command> command_from_name(std::string_view name) {
  if (name == "check") return Command::Check;
  if (name == "emit") return Command::Emit;
  if (name == "interp") return Command::Interp;
  if (name == "run") return Command::Run;
  if (name == "compile") return Command::Compile;
  if (name == "agents") return Command::Agents;
  if (name == "measure") return Command::Measure;
  if (name == "tune") return Command::Tune;
  if (name == "records") return Command::Records;
  if (name == "tasks") return Command::Tasks;
  return std::nullopt;
}

constexpr const char* kCommandList =
    "check, emit, interp, run, compile, agents, measure, tune, records or tasks";

bool is_identifier(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (s.empty() || !alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !digit(c)) return false;
  }
  return true;
}

template <typename Int>
std::optional<Int> parse_int(std::string_view s) {
  Int v{};
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

void parse_set(Command c, std::string_view text, ir::Overrides& out) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    throw UsageError(c,
                     fmt::format("--set '{}': expected NAME=INT, for example --set M=128", text));
  }
  std::string_view name = text.substr(0, eq);
  std::string_view value = text.substr(eq + 1);
  if (!is_identifier(name)) {
    throw UsageError(c, fmt::format("--set '{}': '{}' is not a param or knob name (expected an "
                                    "identifier before '=', for example --set M=128)",
                                    text, name));
  }
  std::optional<int64_t> v = parse_int<int64_t>(value);
  if (!v) {
    throw UsageError(c, fmt::format("--set '{}': '{}' is not an integer (expected a 64-bit "
                                    "integer after '=', for example --set {}=128)",
                                    text, value, name));
  }
  out[std::string(name)] = *v;
}

Stage parse_stage(Command c, std::string_view text) {
  if (text == "ast") return Stage::Ast;
  if (text == "ir") return Stage::Ir;
  if (text == "schedule") return Stage::Schedule;
  if (text == "algorithm") return Stage::Algorithm;
  if (text == "sketch") return Stage::Sketch;
  if (text == "loops") return Stage::Loops;
  if (text == "llvm") return Stage::Llvm;
  if (text == "asm") return Stage::Asm;
  if (text == "cuda") return Stage::Cuda;
  if (text == "graph") return Stage::Graph;
  throw UsageError(c, fmt::format("--stage '{}': unknown stage (expected one of: ast, ir, "
                                  "schedule, algorithm, sketch, loops, llvm, asm, cuda, graph)",
                                  text));
}

// A count option's value: an integer of at least `min`.
int parse_count(Command c, std::string_view option, std::string_view text, int min) {
  std::optional<int> v = parse_int<int>(text);
  if (!v || *v < min) {
    throw UsageError(c,
                     fmt::format("{} '{}': expected an integer of at least {}", option, text, min));
  }
  return *v;
}

// A duration: a positive whole number of seconds, minutes or hours ("90s", "20m", "1h"), or
// of seconds with no unit.
double parse_duration(Command c, std::string_view option, std::string_view text) {
  std::string_view digits = text;
  double unit = 1;
  if (!text.empty()) {
    char last = text.back();
    if (last == 's' || last == 'm' || last == 'h') {
      digits = text.substr(0, text.size() - 1);
      unit = last == 'h' ? 3600 : last == 'm' ? 60 : 1;
    }
  }
  std::optional<int> v = parse_int<int>(digits);
  if (!v || *v <= 0)
    throw UsageError(
        c, fmt::format("{} '{}': expected a duration such as 90s, 20m or 1h", option, text));
  return *v * unit;
}

// --target, --cpu, --features, -o: a value that may not be empty.
std::string parse_text(Command c, std::string_view option, std::string_view text,
                       std::string_view what) {
  if (text.empty()) throw UsageError(c, fmt::format("{}: expected {}, got ''", option, what));
  return std::string(text);
}

// --print-after, --disable-pass, --require-pass: a registered pass (or `all`).
std::string parse_pass_name(Command c, std::string_view option, std::string_view text,
                            bool allow_all) {
  std::vector<std::string> known;
  for (const passes::PassInfo& p : passes::registry()) {
    if (p.name == text) return std::string(text);
    known.push_back(p.name);
  }
  for (const passes::GraphPassInfo& p : passes::graph_registry()) {
    if (p.name == text) return std::string(text);
    known.push_back(p.name);
  }
  if (allow_all && text == "all") return "all";
  if (allow_all) known.push_back("all");
  throw UsageError(c, fmt::format("{} '{}': unknown pass (expected one of: {})", option, text,
                                  fmt::join(known, ", ")));
}

// --since, --until: a UTC date (2026-11-25, 2026-11-25T14:30[:00]) or Unix
// seconds; the time in Unix milliseconds.
int64_t parse_time(Command c, std::string_view option, std::string_view text) {
  if (std::optional<int64_t> seconds = parse_int<int64_t>(text)) return *seconds * 1000;
  std::tm tm{};
  std::string t(text);
  for (const char* format : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    tm = std::tm{};
    const char* end = strptime(t.c_str(), format, &tm);
    if (end && *end == '\0') return static_cast<int64_t>(timegm(&tm)) * 1000;
  }
  throw UsageError(c, fmt::format("{} '{}': expected a UTC date (2026-11-25, 2026-11-25T14:30) "
                                  "or Unix seconds",
                                  option, text));
}

void apply_option(Options& o, const OptionSpec& spec, std::string_view value) {
  Command c = o.command;
  std::string_view name = spec.name;
  if (name == "--func") {
    if (value.empty()) throw UsageError(c, "--func: expected a func name, got ''");
    o.func = std::string(value);
  } else if (name == "--set") {
    parse_set(c, value, o.overrides);
  } else if (name == "--graph") {
    if (value.empty()) throw UsageError(c, "--graph: expected a graph name, got ''");
    o.graph = std::string(value);
  } else if (name == "--stage") {
    o.stage = parse_stage(c, value);
  } else if (name == "--no-schedule") {
    o.no_schedule = true;
  } else if (name == "--check") {
    o.check = true;
  } else if (name == "--json") {
    o.json = true;
  } else if (name == "--seed") {
    std::optional<uint64_t> seed = parse_int<uint64_t>(value);
    if (!seed) {
      throw UsageError(c, fmt::format("--seed '{}': expected a non-negative integer", value));
    }
    o.seed = *seed;
  } else if (name == "--verbose") {
    o.verbose = true;
  } else if (name == "--bench") {
    o.bench = true;
  } else if (name == "--repeat") {
    o.repeat = parse_count(c, name, value, 1);
    o.repeat_given = true;
  } else if (name == "--number") {
    o.number = parse_count(c, name, value, 1);
  } else if (name == "--input") {
    size_t eq = value.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == value.size()) {
      throw UsageError(c, fmt::format("--input '{}': expected NAME=FILE.npy", value));
    }
    o.input_files[std::string(value.substr(0, eq))] = std::string(value.substr(eq + 1));
  } else if (name == "--dim") {
    size_t eq = value.find('=');
    std::optional<int64_t> n =
        eq == std::string_view::npos ? std::nullopt : parse_int<int64_t>(value.substr(eq + 1));
    if (eq == 0 || !n || *n <= 0) {
      throw UsageError(c, fmt::format("--dim '{}': expected NAME=N with N a positive integer "
                                      "(a symbolic dimension of a model's inputs)",
                                      value));
    }
    o.dims[std::string(value.substr(0, eq))] = *n;
  } else if (name == "--save-outputs") {
    if (value.empty()) throw UsageError(c, "--save-outputs: expected a directory");
    o.save_outputs = std::string(value);
  } else if (name == "--threads") {
    o.threads = parse_count(c, name, value, 1);
  } else if (name == "--gpu") {
    o.gpu = parse_count(c, name, value, 0);
  } else if (name.size() == 3 && name.starts_with("-O")) {
    o.opt_level = name[2] - '0';
    o.opt_level_given = true;
  } else if (name == "--print-after") {
    o.print_after.insert(parse_pass_name(c, name, value, true));
  } else if (name == "--time-passes") {
    o.time_passes = true;
  } else if (name == "--disable-pass") {
    o.disabled_passes.insert(parse_pass_name(c, name, value, false));
  } else if (name == "--require-pass") {
    o.required_passes.insert(parse_pass_name(c, name, value, false));
  } else if (name == "--target") {
    o.target = parse_text(c, name, value, "a target triple such as aarch64-linux-gnu");
  } else if (name == "--cpu") {
    o.cpu = parse_text(c, name, value, "a CPU name such as neoverse-n1");
  } else if (name == "--features" && c == Command::Tune) {
    if (value != "knob" && value != "iter")
      throw UsageError(
          c, fmt::format("--features '{}': the model's features are knob or iter", value));
    o.model_features = std::string(value);
  } else if (name == "--features") {
    o.features = parse_text(c, name, value, "CPU features such as +avx2,+fma");
  } else if (name == "--caches") {
    std::array<int64_t, 3> sizes{};
    std::string_view rest = value;
    for (size_t k = 0; k < 3; ++k) {
      size_t comma = rest.find(',');
      std::optional<int64_t> n = parse_cache_size(rest.substr(0, comma));
      if (!n || (k < 2) != (comma != std::string_view::npos))
        throw UsageError(c, fmt::format("--caches '{}': give the L1 data, L2 and L3 caches' "
                                        "sizes, such as 32K,512K,8M",
                                        value));
      sizes[k] = *n;
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    o.caches = sizes;
  } else if (name == "-o" || name == "--output" || name == "--out") {
    o.output = parse_text(c, name, value, "an output file name");
  } else if (name == "--server") {
    o.server = parse_text(c, name, value, "kilnd's address, such as localhost:50051");
  } else if (name == "--token-file") {
    o.token_file = parse_text(c, name, value, "a file holding kilnd's token");
  } else if (name == "--tls-ca") {
    o.tls_ca = parse_text(c, name, value, "a PEM file of the CA that signed kilnd's certificate");
  } else if (name == "--tls-cert") {
    o.tls_cert = parse_text(c, name, value, "a PEM file of this client's certificate");
  } else if (name == "--tls-key") {
    o.tls_key = parse_text(c, name, value, "a PEM file of this client's private key");
  } else if (name == "--agent") {
    o.agent = parse_text(c, name, value, "an agent's id, as `kiln agents` lists it");
  } else if (name == "--key") {
    o.key = parse_text(c, name, value, "an agent key such as x86-avx512 or rk3399");
  } else if (name == "--priority") {
    std::optional<int> p = parse_int<int>(value);
    if (!p) throw UsageError(c, fmt::format("--priority '{}': expected an integer", value));
    o.priority = *p;
  } else if (name == "--min-repeat-ms") {
    o.min_repeat_ms = parse_count(c, name, value, 1);
  } else if (name == "--flush-cache") {
    o.flush_cache = true;
  } else if (name == "--min-total-ms") {
    o.min_total_ms = parse_count(c, name, value, 1);
  } else if (name == "--time-limit-ms") {
    o.time_limit_ms = parse_count(c, name, value, 1);
  } else if (name == "--memory-limit-mb") {
    o.memory_limit_mb = parse_count(c, name, value, 1);
  } else if (name == "--budget") {
    o.budget_s = parse_duration(c, name, value);
  } else if (name == "--trials") {
    o.trials = parse_count(c, name, value, 1);
  } else if (name == "--batch") {
    o.batch = parse_count(c, name, value, 1);
  } else if (name == "--early-stop") {
    o.early_stop = parse_count(c, name, value, 1);
  } else if (name == "--retime") {
    o.retime = parse_count(c, name, value, 0);
  } else if (name == "--remeasure") {
    o.remeasure = parse_count(c, name, value, 0);
  } else if (name == "--stop-slower-than") {
    double x = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !(x >= 0) ||
        std::isinf(x))
      throw UsageError(c, fmt::format("--stop-slower-than '{}': expected a number, 0 or more "
                                      "(0: never stop a candidate early)",
                                      value));
    o.stop_slower_than = x;
  } else if (name == "--search") {
    if (!tuner::strategy_named(std::string(value)))
      throw UsageError(
          c, fmt::format("--search '{}': expected one of {}", value, tuner::kStrategyNames));
    o.search = std::string(value);
  } else if (name == "--detach") {
    o.detach = true;
  } else if (name == "--resume") {
    o.resume = parse_count(c, name, value, 1);
  } else if (name == "--cancel") {
    o.cancel = parse_count(c, name, value, 1);
  } else if (name == "--transfer") {
    o.transfer = true;
  } else if (name == "--best") {
    o.best = true;
  } else if (name == "--auto") {
    o.auto_schedule = true;
  } else if (name == "--job") {
    o.job = parse_count(c, name, value, 1);
  } else if (name == "--name") {
    o.name = parse_text(c, name, value, "an operator's name");
  } else if (name == "--workload") {
    o.workload = parse_text(c, name, value, "a workload hash (kiln records jobs shows them)");
  } else if (name == "--error") {
    o.error = parse_text(c, name, value, "an error class such as TIMEOUT or RUNTIME_CRASH");
  } else if (name == "--ok") {
    o.error = "";
  } else if (name == "--sort") {
    if (value != "fastest" && value != "arrival")
      throw UsageError(c, fmt::format("--sort '{}': expected fastest or arrival", value));
    o.sort_fastest = value == "fastest";
  } else if (name == "--limit") {
    o.limit = parse_count(c, name, value, 1);
  } else if (name == "--offset") {
    o.offset = parse_count(c, name, value, 0);
  } else if (name == "--since" || name == "--until") {
    int64_t ms = parse_time(c, name, value);
    (name == "--since" ? o.since_unix_ms : o.until_unix_ms) = ms;
  }
}

}  // namespace

const char* command_name(Command c) {
  switch (c) {
    case Command::Check:
      return "check";
    case Command::Emit:
      return "emit";
    case Command::Interp:
      return "interp";
    case Command::Run:
      return "run";
    case Command::Compile:
      return "compile";
    case Command::Agents:
      return "agents";
    case Command::Measure:
      return "measure";
    case Command::Tune:
      return "tune";
    case Command::Records:
      return "records";
    case Command::Tasks:
      return "tasks";
    case Command::None:
      return "";
  }
  return "";
}

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::Ast:
      return "ast";
    case Stage::Ir:
      return "ir";
    case Stage::Schedule:
      return "schedule";
    case Stage::Algorithm:
      return "algorithm";
    case Stage::Sketch:
      return "sketch";
    case Stage::Loops:
      return "loops";
    case Stage::Llvm:
      return "llvm";
    case Stage::Asm:
      return "asm";
    case Stage::Cuda:
      return "cuda";
    case Stage::Graph:
      return "graph";
  }
  return "";
}

Options parse_command_line(int argc, const char* const* argv) {
  Options o;
  bool options_done = false;  // after `--`, everything is a file
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    bool is_option = !options_done && arg.size() > 1 && arg[0] == '-';

    if (!is_option) {
      if (o.command == Command::None) {
        if (arg == "help") {  // `kiln help [COMMAND]`
          o.help = true;
          if (i + 1 < argc) {
            std::optional<Command> c = command_from_name(argv[i + 1]);
            if (!c)
              throw UsageError(Command::None,
                               fmt::format("help: unknown command '{}' (expected {})", argv[i + 1],
                                           kCommandList));
            o.command = *c;
          }
          return o;
        }
        std::optional<Command> c = command_from_name(arg);
        if (!c) {
          throw UsageError(Command::None,
                           fmt::format("unknown command '{}' (expected {})", arg, kCommandList));
        }
        o.command = *c;
      } else {
        o.files.emplace_back(arg);
      }
      continue;
    }

    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg == "--version") {
      o.version = true;
      continue;
    }

    // --name VALUE or --name=VALUE
    std::string_view name = arg;
    std::optional<std::string_view> inline_value;
    if (size_t eq = arg.find('='); eq != std::string_view::npos && arg.starts_with("--")) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const OptionSpec* spec = find_option(name);
    if (spec && spec->name == "--verbose") {  // accepted anywhere, like --help
      o.verbose = true;
      continue;
    }
    if (o.command == Command::None) {
      throw UsageError(
          Command::None,
          spec ? fmt::format("option '{}' must come after a command ({})", name, kCommandList)
               : fmt::format("unknown option '{}'", name));
    }
    if (!spec || !accepts(*spec, o.command)) {
      throw UsageError(o.command, fmt::format("unknown option '{}' for 'kiln {}'", name,
                                              command_name(o.command)));
    }
    std::string_view value;
    if (!spec->value.empty()) {
      if (inline_value) {
        value = *inline_value;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        throw UsageError(o.command,
                         fmt::format("option '{}' needs a value ({} {})", name, name, spec->value));
      }
    } else if (inline_value) {
      throw UsageError(o.command, fmt::format("option '{}' takes no value", name));
    }
    apply_option(o, *spec, value);
  }

  if (o.help || o.version) return o;
  if (o.command == Command::None) {
    throw UsageError(Command::None, fmt::format("missing command (expected {})", kCommandList));
  }
  if (o.command == Command::Agents) {
    if (!o.files.empty())
      throw UsageError(o.command, fmt::format("unexpected argument '{}': agents takes no FILE",
                                              o.files.front()));
    return o;
  }
  if (o.command == Command::Records) {
    if (o.files.empty())
      throw UsageError(o.command,
                       "missing what to do (expected jobs, query, best, export or plot)");
    o.subcommand = o.files.front();
    o.files.erase(o.files.begin());
    const std::string& sub = o.subcommand;
    if (sub != "jobs" && sub != "query" && sub != "best" && sub != "export" && sub != "plot")
      throw UsageError(o.command, fmt::format("records {}: expected jobs, query, best, export or "
                                              "plot",
                                              sub));
    if (sub == "best" && o.files.size() != 1 && !o.workload)
      throw UsageError(o.command, "records best: name one FILE (or --workload HASH)");
    if (sub != "best" && !o.files.empty())
      throw UsageError(o.command, fmt::format("records {}: unexpected argument '{}' (filter with "
                                              "--name, --workload, --job, --key)",
                                              sub, o.files.front()));
    if (sub == "plot" && !o.output)
      throw UsageError(o.command, "records plot: name the picture to write (--out FILE.png)");
    return o;
  }
  if (o.command == Command::Tune && (o.resume || o.cancel)) {
    if (!o.files.empty())
      throw UsageError(o.command, fmt::format("unexpected argument '{}': --resume and --cancel "
                                              "name a job, not a file",
                                              o.files.front()));
    if (o.resume && o.cancel) throw UsageError(o.command, "--resume and --cancel: give one");
    return o;
  }
  if (o.files.empty()) {
    throw UsageError(o.command, "missing FILE (expected one or more .kiln files)");
  }
  if (o.command == Command::Tune && !o.key) {
    throw UsageError(o.command,
                     "missing --key (the device class to tune on; `kiln agents` lists them)");
  }
  if (o.best && !o.server) {
    // --server may also come from $KILN_SERVER: checked by the command.
  }
  if (o.auto_schedule && o.command != Command::Tune && !o.best) {
    throw UsageError(o.command,
                     "--auto goes with --best here (the best of `kiln tune FILE --auto`): the "
                     "schedule kiln sketched and tuned, the func's own left out");
  }
  if (o.command == Command::Measure && !o.key) {
    throw UsageError(o.command,
                     "missing --key (the device class to measure on; `kiln agents` lists them)");
  }
  if (o.command == Command::Emit && !o.stage) {
    throw UsageError(
        o.command,
        "missing --stage (expected one of: ast, ir, schedule, algorithm, sketch, loops, llvm, "
        "asm, cuda, graph)");
  }
  // The opt level and the passes matter once there are loops. (The target
  // matters at every stage: knobs may have defaults by target.)
  if (o.command == Command::Emit) {
    bool machine = *o.stage == Stage::Llvm || *o.stage == Stage::Asm || *o.stage == Stage::Cuda;
    bool loops = machine || *o.stage == Stage::Loops || *o.stage == Stage::Graph;
    if (!loops && (o.opt_level_given || !o.print_after.empty() || o.time_passes ||
                   !o.disabled_passes.empty() || !o.required_passes.empty())) {
      const char* what = o.opt_level_given            ? "-O"
                         : !o.print_after.empty()     ? "--print-after"
                         : o.time_passes              ? "--time-passes"
                         : !o.disabled_passes.empty() ? "--disable-pass"
                                                      : "--require-pass";
      throw UsageError(
          o.command,
          fmt::format("{} applies to --stage loops, llvm, asm, cuda and graph only", what));
    }
  }
  if (o.func && o.graph) {
    throw UsageError(o.command, "--func and --graph each select what to process; give one");
  }
  if ((o.command == Command::Run || o.command == Command::Tasks) && !o.bench &&
      (o.repeat != 5 || o.number != 0)) {
    throw UsageError(o.command, "--repeat and --number apply to --bench only");
  }
  return o;
}

std::string synopsis(Command c) {
  switch (c) {
    case Command::Check:
      return "usage: kiln check FILE... [--func NAME | --graph NAME] [--set NAME=INT]...";
    case Command::Emit:
      return "usage: kiln emit FILE... --stage "
             "{ast,ir,schedule,algorithm,sketch,loops,llvm,asm,cuda,graph} "
             "[--func "
             "NAME "
             "| "
             "--graph NAME] "
             "[--no-schedule] [--set NAME=INT]...\n"
             "       [--target TRIPLE] [--cpu NAME] [--features F] [-O0..-O3]\n"
             "       [--print-after PASS]... [--time-passes] [--disable-pass NAME]... "
             "[--require-pass NAME]...\n"
             "       kiln emit FILE... --stage schedule --best [--auto] [--key KEY] [--func NAME] "
             "[--set NAME=INT]...";
    case Command::Interp:
      return "usage: kiln interp FILE... [--check] [--json] [--func NAME | --graph NAME] [--seed "
             "N] "
             "[--no-schedule] [--set NAME=INT]...";
    case Command::Run:
      return "usage: kiln run FILE... [--check] [--bench [--repeat R] [--number N]] "
             "[--threads N] [--gpu N] [-O0..-O3] [--json]\n"
             "       [--func NAME | --graph NAME] [--seed N] [--no-schedule] [--set NAME=INT]...\n"
             "       [--input NAME=FILE.npy]... [--save-outputs DIR] [--dim NAME=N]...\n"
             "       [--print-after PASS]... [--time-passes] [--disable-pass NAME]... "
             "[--require-pass NAME]...";
    case Command::Compile:
      return "usage: kiln compile FILE... [--target TRIPLE] [--cpu NAME] [--features F] "
             "[-o FILE] [-O0..-O3]\n"
             "       [--func NAME | --graph NAME] [--no-schedule] [--set NAME=INT]... "
             "[--dim NAME=N]...\n"
             "       [--print-after PASS]... [--time-passes] [--disable-pass NAME]... "
             "[--require-pass NAME]...\n"
             "       kiln compile FILE... --best [--auto] [--key KEY] [-o FILE] [--func NAME]";
    case Command::Agents:
      return "usage: kiln agents [--json] [--server HOST:PORT]";
    case Command::Measure:
      return "usage: kiln measure FILE... --key KEY [--best] [--agent ID] [--check] [--repeat R] "
             "[--number N] [--threads N] [--gpu N] [--json]\n"
             "       [--func NAME] [--seed N] [--set NAME=INT]... [-O0..-O3] [--priority N]\n"
             "       [--min-repeat-ms MS] [--min-total-ms MS] [--flush-cache] [--time-limit-ms "
             "MS]\n"
             "       [--memory-limit-mb MB] [--server HOST:PORT]";
    case Command::Tune:
      return "usage: kiln tune FILE --key KEY [--trials N] [--budget DURATION] [--search "
             "xgb-rank|xgb-reg|evo-rank|evo-reg|random|grid]\n"
             "       [--features knob|iter] [--batch N] [--early-stop N] [--retime N]\n"
             "       [--remeasure N] [--stop-slower-than X] [--transfer] [--detach] [--auto]\n"
             "       [--func NAME] [--set NAME=INT]... [--seed N] [--repeat R] [--number N]\n"
             "       [--min-repeat-ms MS] [--min-total-ms MS] [--flush-cache] [--threads N] [--gpu "
             "N]\n"
             "       [--time-limit-ms MS] [--memory-limit-mb MB]\n"
             "       [--priority N] [--json] [--server HOST:PORT]\n"
             "       kiln tune --resume JOB [--trials N] [--detach] | --cancel JOB";
    case Command::Tasks:
      return "usage: kiln tasks FILE... [--graph NAME] [--dim NAME=N]... [--bench [--repeat R] "
             "[--threads N]]\n"
             "       [-O0..-O3] [--json]";
    case Command::Records:
      return "usage: kiln records jobs|query|export|plot [--name NAME | --workload HASH] "
             "[--key KEY] [--job JOB]\n"
             "       [--ok | --error CLASS] [--since TIME] [--until TIME] [--sort "
             "fastest|arrival]\n"
             "       [--limit N] [--offset N] [--json] [--out FILE] [--server HOST:PORT]\n"
             "       kiln records best FILE [--func NAME] [--set NAME=INT]... [--key KEY | "
             "--target "
             "TRIPLE --cpu NAME]\n"
             "                         [--retime N]";
    case Command::None:
      break;
  }
  return "usage: kiln [--verbose] COMMAND FILE... [OPTIONS]\n"
         "       kiln --help | --version | COMMAND --help";
}

std::string help_text(Command c) {
  const char* common =
      "  --func NAME     only the func called NAME (default: every func and graph in\n"
      "                  the file)\n"
      "  --graph NAME    only the graph called NAME (not for compile)\n"
      "  --set NAME=INT  give a param or knob this value (repeatable); a run-time\n"
      "                  param's value is used when the operator runs\n"
      "  --verbose       debug logs of every stage on stderr\n"
      "  -h, --help      this help\n";
  const char* target =
      "  --target TRIPLE the target triple (default: this machine), for example\n"
      "                  x86_64-linux-gnu or aarch64-linux-gnu\n"
      "  --cpu NAME      the CPU to tune for (default: this machine's with no --target,\n"
      "                  the triple's generic CPU with one)\n"
      "  --features F    CPU features to add or remove, for example +avx2,-avx512f\n"
      "  --caches L1D,L2,L3\n"
      "                  the target's caches (such as 32K,512K,8M), for knob defaults\n"
      "                  fitted to them (default: this machine's with no --target)\n";
  const char* pass_options =
      "  -O0..-O3        kiln's pass pipeline and LLVM's optimization level (default\n"
      "                  -O3); -O0 runs no kiln pass unless one is required\n"
      "  --print-after PASS\n"
      "                  print the loops (or, for a graph pass, the graph) after PASS\n"
      "                  on stderr (repeatable; `all`)\n"
      "  --time-passes   print the time of each pass on stderr\n"
      "  --disable-pass NAME\n"
      "                  never run pass NAME (repeatable; wins over --require-pass)\n"
      "  --require-pass NAME\n"
      "                  run pass NAME at any -O level (repeatable)\n";
  const char* server =
      "  --server HOST:PORT\n"
      "                  do the work on kilnd at HOST:PORT (default: $KILN_SERVER;\n"
      "                  none: here); the output is the same either way\n"
      "  --token-file F  send the token in F (kilnd --token-file)\n"
      "  --tls-ca F      talk TLS, trusting the CA certificate in F (PEM)\n"
      "  --tls-cert F, --tls-key F\n"
      "                  this client's certificate and key, for a kilnd that asks\n";
  const char* exits =
      "\nExit status: 0 ok, 1 the input is wrong or a check failed, 2 usage error.\n";
  switch (c) {
    case Command::Check:
      return synopsis(c) +
             "\n\nParses each FILE, applies --set, builds the polyhedral model of every func\n"
             "and applies its schedule, checking it against the exact dependences.\n"
             "Prints one line per func:\n"
             "  ok  matmul: 2 computations, 4 schedule commands\n\nOptions:\n" +
             std::string(common) + server + exits;
    case Command::Emit:
      return synopsis(c) +
             "\n\nPrints one stage of the compilation of every func:\n"
             "  ast       the parsed program in .kiln syntax (after --set)\n"
             "  ir        each computation's iteration domain and accesses (isl notation)\n"
             "  schedule  each computation's schedule, loop names, tags and dependences\n"
             "  algorithm the func as its algorithm alone (schedule, knobs and knob\n"
             "            constraints left out): what `kiln tune --auto` sketches\n"
             "  sketch    the schedules kiln sketches from the algorithm alone (its own\n"
             "            schedule left out), each a schedule block to paste: what\n"
             "            `kiln tune` searches for a func given without one (a GPU\n"
             "            target's: over blocks and threads)\n"
             "  loops     the lowered loop nest; with -O or a pass option, after kiln's\n"
             "            passes at that level\n"
             "  llvm      the LLVM IR, after LLVM's optimization pipeline\n"
             "  asm       the target's assembly (a GPU target's: NVRTC's PTX)\n"
             "  cuda      a GPU target's CUDA C++, its launches first (--target\n"
             "            nvptx64-nvidia-cuda --cpu sm_90)\n"
             "  graph     each graph; with -O or a pass option, after the graph passes,\n"
             "            followed by the operators they made (fused ones)\n"
             "For a graph, the other stages print each call's operator, after the graph\n"
             "passes when -O or a pass option is given.\n\nOptions:\n"
             "  --stage STAGE   which stage to print (required)\n"
             "  --no-schedule   ignore the schedule: the algorithm's own loop order\n"
             "  --best          with --stage schedule: the schedule of the best record kilnd\n"
             "                  holds for the target (--key KEY: for that device class), as\n"
             "                  .kiln knob lines and commands to paste, each knob at the\n"
             "                  value found (the sketch kiln tuned, for a func without a\n"
             "                  schedule); needs kilnd\n"
             "  --auto          with --best: the best of `kiln tune FILE --auto` (the func's\n"
             "                  own schedule left out, the sketch kiln tuned)\n" +
             std::string(target) + pass_options + common + server + exits;
    case Command::Interp:
      return synopsis(c) +
             "\n\nRuns every func on reproducible random inputs with the loop-IR interpreter\n"
             "and prints a checksum of each output. With --check it also runs the\n"
             "reference interpreter (the algorithm without its schedule) and compares:\n"
             "  ok  matmul: 1 output matches (max abs error 0)\n"
             "A run-time param without --set gets a small size that meets the func's\n"
             "constraints, and the line says which: `... with n=13`.\n\nOptions:\n"
             "  --check         compare against the reference interpreter\n"
             "  --json          one JSON object per func on stdout instead of text\n"
             "  --seed N        seed of the random inputs (default 0)\n"
             "  --no-schedule   ignore the schedule: the algorithm's own loop order\n" +
             common + exits;
    case Command::Run:
      return synopsis(c) +
             "\n\nCompiles every func for this machine with LLVM's JIT and runs it on the\n"
             "random inputs `interp` uses, printing a checksum of each output. With --check\n"
             "it compares the outputs with the reference interpreter:\n"
             "  ok  matmul: 1 output matches (max abs error 0)\n"
             "With --bench it times the kernel: one warm-up run, then R repeats of N runs,\n"
             "and prints the median time per run, and GFLOP/s when the flop count is known:\n"
             "  bench matmul: 0.412 ms per run (median of 5 x 24 runs, 2 threads), "
             "10.2 GFLOP/s\n"
             "A graph runs after the graph passes (constant folding with the JIT, operator\n"
             "CSE, dead-operator removal, elementwise fusion), each operator compiled; --check\n"
             "compares with the reference interpreter on the graph as written.\n\nOptions:\n"
             "  --check         compare against the reference interpreter\n"
             "  --bench         time the kernel\n"
             "  --repeat R      timed repeats (default 5)\n"
             "  --number N      runs per repeat (default: enough for about 50 ms)\n"
             "  --threads N     threads of the runtime's pool (default: one per core)\n"
             "  --gpu N         compile for this machine's GPU N (CUDA through NVRTC, for its\n"
             "                  architecture) and run there; --bench times each run of the\n"
             "                  kernels with CUDA events\n" +
             std::string(pass_options) +
             "  --json          one JSON object per func on stdout instead of text\n"
             "  --seed N        seed of the random inputs (default 0)\n"
             "  --input NAME=FILE.npy\n"
             "                  input NAME from a NumPy .npy file instead of random values\n"
             "                  (repeatable)\n"
             "  --save-outputs DIR\n"
             "                  write each output to DIR/NAME.npy\n"
             "  --dim NAME=N    a model's symbolic input dimension NAME is N (repeatable)\n"
             "  --no-schedule   ignore the schedule: the algorithm's own loop order\n" +
             common + server + exits;
    case Command::Compile:
      return synopsis(c) +
             "\n\nCompiles every func into a position-independent shared object for a\n"
             "target (linked in-process by lld; it needs no C library), and writes its\n"
             "metadata (triple, CPU, entry symbol, arguments, hash) beside it as JSON:\n"
             "  ok  matmul: matmul.so and matmul.so.json (aarch64-linux-gnu, 5432 bytes)\n"
             "A graph, and a model (.onnx), becomes one artifact: every kernel and the plan\n"
             "that runs them in one shared object, the constants in NAME.weights beside it\n"
             "(its SHA-256 in the plan), and NAME.so.json; a C program runs it with kiln's\n"
             "runtime (kiln_model_open, kiln_model_run; examples/c/run_model.c).\n\n"
             "Options:\n"
             "  -o FILE         the shared object (default: FUNC.so, GRAPH.so, or MODEL.so for\n"
             "                  MODEL.onnx); one func or graph only\n"
             "  --graph NAME    only the graph called NAME\n"
             "  --dim NAME=N    a model's symbolic input dimension NAME is N (repeatable)\n"
             "  --best          the best configuration kilnd recorded for the target (its\n"
             "                  knob values; --key KEY: of that device class); needs kilnd.\n"
             "                  A model or graph (with --key): each task's best record, the\n"
             "                  tasks with none at their defaults\n"
             "  --auto          with --best: the best of `kiln tune FILE --auto` (the func's\n"
             "                  own schedule left out, compiled as the sketch kiln tuned)\n" +
             std::string(target) + pass_options +
             "  --no-schedule   ignore the schedule: the algorithm's own loop order\n" + common +
             server + exits;
    case Command::Agents:
      return synopsis(c) +
             "\n\nLists the agents connected to kilnd (docs/agents.md), one line each:\n"
             "  ID        KEY     TRIPLE            CORES  GPUS  STATE  DONE  FAILED  "
             "LAST SEEN\n"
             "  board-1   rk3399  aarch64-linux-gnu     6     0  idle     12       1  "
             "0.4 s ago\n\nOptions:\n"
             "  --json          one JSON object per agent instead of the table\n" +
             std::string(server) + "  -h, --help      this help\n" +
             "\nExit status: 0 ok, 1 kilnd cannot be reached, 2 usage error.\n";
    case Command::Measure:
      return synopsis(c) +
             "\n\nCompiles every func on kilnd for an agent of KEY (its triple and CPU), ships\n"
             "it there, and prints the agent's timing: a warm-up run, then R rounds of N\n"
             "runs, N grown until a round lasts --min-repeat-ms:\n"
             "  measure matmul on board-1 (rk3399, cortex-a72): 4.21 ms per run (median of 5 "
             "x 3 runs, 6 threads)\n"
             "With --check kilnd runs the reference interpreter on the same inputs and\n"
             "compares the agent's outputs. A crash, a timeout or running out of memory is\n"
             "that func's result, printed with its class; the agent lives on.\n\nOptions:\n"
             "  --key KEY       the device class to measure on (required)\n"
             "  --agent ID      on this agent of KEY only (`kiln agents` lists them)\n"
             "  --best          a model or graph: each task's knobs from its best record on\n"
             "                  KEY (`kiln tune MODEL`), the tasks with none at their defaults\n"
             "  --check         compare the outputs with the reference interpreter\n"
             "  --repeat R      timed rounds (default 5)\n"
             "  --number N      runs per round (default: enough for --min-repeat-ms)\n"
             "  --min-repeat-ms MS\n"
             "                  the shortest round when --number is not given (default 50)\n"
             "  --min-total-ms MS\n"
             "                  more rounds than R while they last less than MS in all (at\n"
             "                  most 10 x R; default none)\n"
             "  --flush-cache   flush the inputs and outputs from the caches before each run\n"
             "                  (not timed): a kernel timed as it runs in a model, its weights\n"
             "                  coming from memory\n"
             "  --threads N     threads of the agent's pool (default: its cores)\n"
             "  --gpu N         on the agent's GPU N instead (`kiln agents` lists them): CUDA\n"
             "                  for its compute capability, timed with CUDA events\n"
             "  --time-limit-ms MS, --memory-limit-mb MB\n"
             "                  the job's limits on the agent (default: kilnd's)\n"
             "  --priority N    higher goes first among queued jobs (default 0)\n"
             "  -O0..-O3        kiln's pass pipeline and LLVM's level (default -O3)\n"
             "  --disable-pass NAME, --require-pass NAME\n"
             "                  as for `kiln run`\n"
             "  --json          one JSON object per func on stdout instead of text\n"
             "  --seed N        seed of the random inputs (default 0)\n"
             "  --no-schedule   ignore the schedule: the algorithm's own loop order\n" +
             common + server + exits;
    case Command::Tune:
      return synopsis(c) +
             "\n\nTunes the knobs of a func on kilnd's agents of KEY (docs/tuning.md): batches of\n"
             "points chosen by the search are compiled on kilnd and measured on the agents,\n"
             "each measurement a record in kilnd's database the moment it arrives. Shows a\n"
             "progress bar on a terminal (a line a trial otherwise), then the best\n"
             "configurations. Interrupting it cancels the job (--detach leaves it running);\n"
             "a job cut short by a stopped kilnd goes on with --resume JOB.\n"
             "A model (FILE.onnx, or a graph with --graph) is tuned as one job over its tasks\n"
             "(`kiln tasks`), each batch given to the task expected to shorten the model's\n"
             "time most; the progress names the task and the model's predicted time.\n\nOptions:\n"
             "  --key KEY       the device class to tune on (required)\n"
             "  --trials N      points to measure (default 64; a model: over all its tasks,\n"
             "                  default 32 a task)\n"
             "  --budget DURATION\n"
             "                  a model: no batch starts after this long (90s, 20m, 1h)\n"
             "  --search S      xgb-rank (default), xgb-reg, evo-rank, evo-reg, random or grid\n"
             "  --features F    the cost model's features: knob (default) or iter\n"
             "  --batch N       points measured at once (default 16)\n"
             "  --early-stop N  stop after N trials without a better one\n"
             "  --retime N      at the end, re-time the N fastest on one agent, their rounds\n"
             "                  interleaved; the best is the fastest re-timed (default 3; 0: no)\n"
             "  --remeasure N   measure a noisy point (its rounds' spread or the host's load\n"
             "                  past the limits) up to N more times (default 2; 0: never)\n"
             "  --stop-slower-than X\n"
             "                  time a candidate whose first round passes X times the best so\n"
             "                  far for that round only (default 4; 0: never)\n"
             "  --transfer      start the model from records of the same operator at other\n"
             "                  shapes on KEY\n"
             "  --auto          leave each func's own schedule (and knobs) out: tune the sketch\n"
             "                  kiln derives from its algorithm, to compare with the hand\n"
             "                  schedule (`kiln emit FILE --stage sketch` prints it)\n"
             "  --detach        start the job, print its number and return\n"
             "  --resume JOB    go on with a job that did not finish (more with --trials)\n"
             "  --cancel JOB    stop a running job\n"
             "  --set NAME=INT  a param's value, or a knob held fixed (repeatable)\n"
             "  --repeat R, --number N, --min-repeat-ms MS, --min-total-ms MS, --flush-cache,\n"
             "  --threads N,\n"
             "  --time-limit-ms MS, --memory-limit-mb MB, --priority N\n"
             "                  how each point is measured, as for `kiln measure` (default:\n"
             "                  rounds of at least 5 ms, at least 3 and more while they last\n"
             "                  less than 30 ms in all)\n"
             "  --gpu N         tune on the agents' GPU N; the records are kept under the key\n"
             "                  KEY/gpuN (docs/gpu.md)\n"
             "  --json          one JSON object a progress message instead of the bar\n" +
             std::string(server) + exits;
    case Command::Records:
      return synopsis(c) +
             "\n\nReads kilnd's tuning-record database (docs/records.md):\n"
             "  jobs    the tuning jobs, newest first\n"
             "  query   the records that match the filters, a table (--json: JSON lines)\n"
             "  best    the fastest record of FILE's func (with its --set params) on --key,\n"
             "          or on the device class whose target is --target/--cpu (default:\n"
             "          this machine); with --retime N, first re-time its N fastest on one\n"
             "          agent of --key, their rounds interleaved (kept in the records)\n"
             "  export  the records as JSON lines, to --out FILE or stdout\n"
             "  plot    best GFLOP/s against trials, a line a job, as a PNG (--out FILE)\n\n"
             "Options:\n"
             "  --name NAME     records of the operator called NAME\n"
             "  --workload HASH records of one workload (an operator at one shape)\n"
             "  --key KEY, --job JOB\n"
             "  --ok            only the records that ran; --error CLASS: those that failed so\n"
             "  --since TIME, --until TIME\n"
             "                  a UTC date (2026-11-25, 2026-11-25T14:30) or Unix seconds\n"
             "  --sort ORDER    arrival (default) or fastest\n"
             "  --limit N       records to show (default 20), --offset N to page\n"
             "  --json          JSON lines instead of a table\n"
             "  --out FILE      export, plot: the file to write\n" +
             std::string(server) + exits;
    case Command::Tasks:
      return synopsis(c) +
             "\n\nLists a model's (or a graph's) tasks: the distinct operators its calls run\n"
             "after the graph passes, the workloads tuning records are kept under, with how\n"
             "many calls run each and each one's estimated share of the model's time: of its\n"
             "floating-point operations, or with --bench of its kernels' time on this machine.\n"
             "\nOptions:\n"
             "  --graph NAME    only the graph called NAME\n"
             "  --dim NAME=N    a model's symbolic input dimension NAME is N (repeatable)\n"
             "  --bench         compile each task's kernel here and time it; the shares are\n"
             "                  of the time (--repeat R rounds, default 5; --threads N)\n"
             "  -O0..-O3        the optimization level (default -O3)\n"
             "  --json          one JSON object per task instead of the table\n"
             "  -h, --help      this help\n" +
             exits;
    case Command::None:
      break;
  }
  return synopsis(c) +
         "\n\nkiln compiles tensor operators written in the .kiln language.\n\n"
         "Commands:\n"
         "  check    parse, apply the schedule and check its legality\n"
         "  emit     print a stage of compilation: ast, ir, schedule, loops, llvm, asm\n"
         "           or graph\n"
         "  interp   run the lowered loops; --check compares with the reference\n"
         "  run      compile for this machine and run; --check compares with the\n"
         "           reference, --bench times it\n"
         "  compile  compile into a shared object for any target\n"
         "  agents   list the agents connected to kilnd\n"
         "  measure  compile on kilnd for an agent's device and time it there\n"
         "  tune     search a func's knobs on kilnd's agents, every trial recorded\n"
         "  records  query, export and plot kilnd's tuning records\n"
         "  tasks    list a model's tasks: its distinct operators and their shares\n\n"
         "Options:\n"
         "  --verbose       debug logs of every stage on stderr\n"
         "  --version       print the version\n"
         "  -h, --help      this help; `kiln COMMAND --help` for a command's options\n" +
         exits + "\nDocumentation: docs/cli.md and docs/language.md.\n";
}

Target target_of(const Options& o) {
  Target t = Target::named(o.target.value_or(""), o.cpu.value_or(""), o.features.value_or(""));
  if (o.caches) {
    t.l1d_bytes = (*o.caches)[0];
    t.l2_bytes = (*o.caches)[1];
    t.l3_bytes = (*o.caches)[2];
  }
  return t;
}

}  // namespace kiln::cli
