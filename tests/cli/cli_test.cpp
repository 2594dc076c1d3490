// End-to-end tests of the kiln command line: each runs the real binary and
// checks its exit status, stdout and stderr.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/buffers.h"
#include "kiln/cuda.h"
#include "kilnd_process.h"
#include "test_certs.h"

extern char** environ;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string fmt_args(const std::vector<std::string>& args) {
  std::string s = "kiln";
  for (const std::string& a : args) s += " " + a;
  return s;
}

// The name of the first func a .kiln file defines.
std::string first_func(const std::string& file) {
  std::istringstream in(read_file(file));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("func ", 0) == 0) return line.substr(5, line.find_first_of(" {", 5) - 5);
  }
  return "";
}

struct Result {
  int status = -1;  // the exit status; 128 + signal when killed by one
  std::string out, err;
};

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  return text;
}

// A temporary file, removed when it goes out of scope.
struct TempFile {
  std::string path;
  int fd = -1;
  TempFile() {
    path = testing::TempDir() + "kiln_cli_test_XXXXXX";
    fd = mkstemp(path.data());
  }
  ~TempFile() {
    if (fd >= 0) close(fd);
    unlink(path.c_str());
  }
};

// Runs `kiln args...` with stdin from /dev/null, capturing stdout and stderr.
Result kiln(const std::vector<std::string>& args) {
  TempFile out, err;
  std::vector<std::string> argv_s = {KILN_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd, 2);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, KILN_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  Result r;
  if (rc != 0) {
    r.err = "posix_spawn failed: " + std::to_string(rc);
    return r;
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  r.out = read_all(out.fd);
  r.err = read_all(err.fd);
  return r;
}

std::string data(const std::string& name) {
  return std::string(KILN_SOURCE_DIR) + "/tests/data/cli/" + name;
}

testing::AssertionResult Contains(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << needle << "' not found in:\n" << haystack;
}

testing::AssertionResult Matches(const std::string& text, const std::string& pattern) {
  if (std::regex_search(text, std::regex(pattern))) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "/" << pattern << "/ does not match:\n" << text;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// A strict parser for one JSON value, enough to check that `--json` output
// is JSON and to look inside its objects.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json> object;
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}

  // Null when the text is not exactly one JSON value.
  std::unique_ptr<Json> parse() {
    auto v = std::make_unique<Json>();
    if (!value(*v)) return nullptr;
    space();
    return i_ == s_.size() ? std::move(v) : nullptr;
  }

 private:
  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool literal(const char* word) {
    std::string w = word;
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }
  bool string(std::string& out) {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      char c = s_[i_];
      if (c == '"') {
        ++i_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++i_ >= s_.size()) return false;
      static const std::string kEscaped = "\"\\/bfnrt", kMeaning = "\"\\/\b\f\n\r\t";
      if (size_t k = kEscaped.find(s_[i_]); k != std::string::npos) {
        out += kMeaning[k];
      } else if (s_[i_] == 'u' && i_ + 4 < s_.size() &&
                 std::all_of(s_.begin() + i_ + 1, s_.begin() + i_ + 5,
                             [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
        out += '?';  // the tests never look at escaped code points
        i_ += 4;
      } else {
        return false;
      }
    }
    return false;
  }
  bool number(double& out) {
    static const std::regex re(R"(^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
    std::smatch m;
    std::string rest = s_.substr(i_, 64);
    if (!std::regex_search(rest, m, re) || m.length(0) == 0) return false;
    out = std::strtod(m.str(0).c_str(), nullptr);
    i_ += static_cast<size_t>(m.length(0));
    return true;
  }
  bool value(Json& v) {
    space();
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Object;
      ++i_;
      space();
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
      for (;;) {
        space();
        std::string key;
        if (!string(key)) return false;
        space();
        if (i_ >= s_.size() || s_[i_++] != ':') return false;
        if (v.object.count(key) || !value(v.object[key])) return false;
        space();
        if (i_ >= s_.size()) return false;
        if (s_[i_] == '}') return ++i_, true;
        if (s_[i_++] != ',') return false;
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++i_;
      space();
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
      for (;;) {
        v.array.emplace_back();
        if (!value(v.array.back())) return false;
        space();
        if (i_ >= s_.size()) return false;
        if (s_[i_] == ']') return ++i_, true;
        if (s_[i_++] != ',') return false;
      }
    }
    if (c == '"') return v.kind = Json::String, string(v.string);
    if (literal("true")) return v.kind = Json::Bool, v.boolean = true, true;
    if (literal("false")) return v.kind = Json::Bool, v.boolean = false, true;
    if (literal("null")) return v.kind = Json::Null, true;
    return v.kind = Json::Number, number(v.number);
  }

  const std::string& s_;
  size_t i_ = 0;
};

// Every line of `out` parsed as one JSON object.
std::vector<Json> json_lines(const std::string& out) {
  std::vector<Json> objects;
  for (const std::string& line : lines(out)) {
    std::unique_ptr<Json> v = JsonParser(line).parse();
    EXPECT_TRUE(v != nullptr) << "not JSON: " << line;
    if (!v) continue;
    EXPECT_EQ(v->kind, Json::Object) << line;
    objects.push_back(*v);
  }
  return objects;
}

// ---------------------------------------------------------------------------
// Help, version and usage errors (exit 2)

TEST(CliUsage, HelpPrintsCommandsAndExitsZero) {
  Result r = kiln({"--help"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "usage: kiln"));
  for (const char* cmd : {"check", "emit", "interp", "run", "compile"})
    EXPECT_TRUE(Contains(r.out, cmd));
  EXPECT_EQ(r.err, "");
}

TEST(CliUsage, CommandHelpDescribesItsOptions) {
  Result r = kiln({"emit", "--help"});  // --stage is required, but not for --help
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "usage: kiln emit"));
  EXPECT_TRUE(Contains(r.out, "--stage"));
  EXPECT_TRUE(Contains(r.out, "--no-schedule"));

  r = kiln({"help", "interp"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "--json"));
}

// `kiln tasks`: a graph's distinct operators after the graph passes, a table or JSON lines;
// --repeat without --bench is a usage error.
TEST(CliTasks, ListsAGraphsOperatorsWithTheirShares) {
  std::string file = std::string(KILN_SOURCE_DIR) + "/examples/conv_bn_relu.kiln";
  Result r = kiln({"tasks", file.c_str()});
  ASSERT_EQ(r.status, 0) << r.err;
  // The conv, the batch norm's affine and the relu are one fused operator.
  EXPECT_TRUE(Contains(r.out, "graph block: 1 call after the graph passes, 1 task (1 tunable)"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "conv2d_channel_affine_relu")) << r.out;
  EXPECT_TRUE(Contains(r.out, "100.0%")) << r.out;
  r = kiln({"tasks", file.c_str(), "--json", "--bench", "--repeat", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out, R"(^\{"file":.*"task":1,"operator":"conv2d_channel_affine_relu",)"
                             R"("workload":"[0-9a-f]{64}","calls":1,.*"share":1,"ms":)"))
      << r.out;
  r = kiln({"tasks", file.c_str(), "--repeat", "3"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--repeat and --number apply to --bench only")) << r.err;
}

TEST(CliUsage, VersionPrintsTheVersion) {
  Result r = kiln({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(Matches(r.out, R"(^kiln \d+\.\d+\.\d+\n$)"));
}

TEST(CliUsage, NoCommandIsAUsageError) {
  Result r = kiln({});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "missing command"));
  EXPECT_TRUE(Contains(r.err, "usage: kiln"));
  EXPECT_EQ(r.out, "");
}

TEST(CliUsage, UnknownCommandIsNamed) {
  Result r = kiln({"frobnicate", data("matmul_small.kiln")});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "unknown command 'frobnicate'"));
  EXPECT_TRUE(Contains(
      r.err, "check, emit, interp, run, compile, agents, measure, tune, records or tasks"));
}

TEST(CliUsage, AgentsAndMeasureNeedKilndAndMeasureAKey) {
  Result files = kiln({"agents", data("matmul_small.kiln")});
  EXPECT_EQ(files.status, 2);
  EXPECT_TRUE(Contains(files.err, "agents takes no FILE")) << files.err;
  Result no_key = kiln({"measure", data("matmul_small.kiln")});
  EXPECT_EQ(no_key.status, 2);
  EXPECT_TRUE(Contains(no_key.err, "missing --key")) << no_key.err;
  Result offline = kiln({"measure", data("matmul_small.kiln"), "--key", "x86"});
  EXPECT_EQ(offline.status, 2);
  EXPECT_TRUE(Contains(offline.err, "measure runs on kilnd's agents: give --server"))
      << offline.err;
  Result bench = kiln({"measure", data("matmul_small.kiln"), "--key", "x86", "--bench"});
  EXPECT_EQ(bench.status, 2);
  EXPECT_TRUE(Contains(bench.err, "unknown option '--bench' for 'kiln measure'")) << bench.err;
}

TEST(CliUsage, UnknownOptionIsNamedWithTheCommandsUsage) {
  Result r = kiln({"check", data("matmul_small.kiln"), "--fast"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "unknown option '--fast'"));
  EXPECT_TRUE(Contains(r.err, "usage: kiln check"));
  EXPECT_EQ(r.out, "");
}

TEST(CliUsage, OptionOfAnotherCommandIsRefused) {
  Result r = kiln({"check", data("matmul_small.kiln"), "--json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "unknown option '--json' for 'kiln check'"));
}

TEST(CliUsage, MissingFileIsAUsageError) {
  Result r = kiln({"check"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "missing FILE"));
}

TEST(CliUsage, OptionWithoutItsValue) {
  Result r = kiln({"check", data("matmul_small.kiln"), "--func"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "'--func' needs a value"));
}

TEST(CliUsage, MalformedSetSaysWhatWasExpected) {
  for (const char* bad : {"M", "M=", "M=abc", "M=1.5", "=4", "2M=4", "M=99999999999999999999"}) {
    Result r = kiln({"check", data("matmul_small.kiln"), "--set", bad});
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_TRUE(Contains(r.err, "--set '" + std::string(bad) + "'")) << bad;
    EXPECT_TRUE(Contains(r.err, "expected")) << bad;
  }
}

TEST(CliUsage, EmitNeedsAKnownStage) {
  Result r = kiln({"emit", data("matmul_small.kiln")});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "missing --stage"));

  r = kiln({"emit", data("matmul_small.kiln"), "--stage", "bytecode"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "unknown stage"));
  EXPECT_TRUE(Contains(r.err, "ast, ir, schedule, algorithm, sketch, loops, llvm, asm"));
}

TEST(CliUsage, TargetOptionsForEmitAndCompileOnly) {
  // Every stage takes a target: a knob's default may depend on it.
  Result r = kiln(
      {"emit", data("matmul_small.kiln"), "--stage", "loops", "--target", "aarch64-linux-gnu"});
  EXPECT_EQ(r.status, 0) << r.err;

  r = kiln({"run", data("matmul_small.kiln"), "--target", "aarch64-linux-gnu"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "unknown option '--target' for 'kiln run'"));
}

TEST(CliUsage, RunCountsMustBePositive) {
  for (const char* opt : {"--threads", "--repeat", "--number"}) {
    Result r = kiln({"run", data("matmul_small.kiln"), "--bench", opt, "0"});
    EXPECT_EQ(r.status, 2) << opt;
    EXPECT_TRUE(Contains(r.err, std::string(opt) + " '0': expected an integer of at least 1"));
  }
  Result r = kiln({"run", data("matmul_small.kiln"), "--repeat", "3"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--repeat and --number apply to --bench only"));
}

TEST(CliUsage, SeedMustBeANumber) {
  Result r = kiln({"interp", data("matmul_small.kiln"), "--seed", "x"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--seed 'x'"));
}

// ---------------------------------------------------------------------------
// Bad input (exit 1)

TEST(CliErrors, ParseErrorNamesFileLineAndColumn) {
  Result r = kiln({"check", data("parse_error.kiln")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Matches(r.err, R"(parse_error\.kiln:[0-9]+:[0-9]+: parse error)"));
  EXPECT_EQ(r.out, "");
}

TEST(CliErrors, MissingFileIsACompileError) {
  Result r = kiln({"check", data("no_such_file.kiln")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "no_such_file.kiln"));
}

TEST(CliErrors, UnknownFuncListsTheFuncsThereAre) {
  Result r = kiln({"check", data("two_funcs.kiln"), "--func", "nope"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "--func nope"));
  EXPECT_TRUE(Contains(r.err, "scale, shifted"));
}

TEST(CliErrors, SetOfAnUnknownNameListsParamsAndKnobs) {
  Result r = kiln({"check", data("matmul_small.kiln"), "--set", "Q=3"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "no param or knob named 'Q'"));
  EXPECT_TRUE(Contains(r.err, "M, N, K"));
  EXPECT_TRUE(Contains(r.err, "TI"));
}

TEST(CliErrors, KnobValueOutsideItsCandidatesIsRefused) {
  Result r = kiln({"check", data("matmul_small.kiln"), "--set", "TI=3"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "TI"));
}

TEST(CliErrors, IllegalScheduleNamesBothComputations) {
  Result r = kiln({"check", data("illegal_schedule.kiln")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "legality error"));
  EXPECT_TRUE(Contains(r.err, "produce"));
  EXPECT_TRUE(Contains(r.err, "consume"));
}

// The .kiln files of a corpus folder under tests/data/, sorted.
std::vector<std::string> corpus(const std::string& folder) {
  std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/data/" + folder + "/";
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kiln") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The text after `# KEY: ` on the last such line of a file ("" if none).
std::string header(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line, value, prefix = "# " + key + ": ";
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) value = line.substr(prefix.size());
  return value;
}

// Every file in tests/data/illegal/ holds an illegal schedule and says, on a
// `# expect:` line, what kiln check must answer: exit 1, a legality error
// pointing into the schedule, with that text.
TEST(CliErrors, CheckRefusesEveryIllegalScheduleWithItsReason) {
  std::vector<std::string> files = corpus("illegal");
  ASSERT_GE(files.size(), 8u);
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    std::string expect = header(f, "expect");
    ASSERT_FALSE(expect.empty()) << "no '# expect:' line";
    Result r = kiln({"check", f});
    EXPECT_EQ(r.status, 1);
    EXPECT_TRUE(Contains(r.err, f + ":")) << r.err;
    EXPECT_TRUE(Contains(r.err, "legality error")) << r.err;
    EXPECT_TRUE(Contains(r.err, expect)) << r.err;
  }
}

// tests/data/hostile/ holds inputs that once crashed kiln, miscompiled or
// answered wrongly (issue 9). Each file says how to run it (`# run:` the
// command and options, the file going right after the command), the exit
// status it must give and a line its output must hold, exactly. None may end
// in a signal.
TEST(CliHostile, EveryHostileInputGetsItsExpectedAnswer) {
  std::vector<std::string> files = corpus("hostile");
  ASSERT_GE(files.size(), 2u);
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    std::string run = header(f, "run"), status = header(f, "status"), expect = header(f, "expect");
    ASSERT_FALSE(run.empty() || status.empty() || expect.empty())
        << "each file needs '# run:', '# status:' and '# expect:' lines";
    std::istringstream words(run);
    std::vector<std::string> args;
    for (std::string w; words >> w;) args.push_back(w);
    args.insert(args.begin() + 1, f);
    Result r = kiln(args);
    EXPECT_LT(r.status, 128) << "killed by signal " << r.status - 128 << "\n" << r.err;
    EXPECT_EQ(r.status, std::stoi(status)) << r.out << r.err;
    EXPECT_TRUE(Contains(r.out + r.err, expect));

    // The interpreters and the compiled kernel agree: `interp` and `run --check`
    // end the same way (the compiler's own options are run's alone).
    std::vector<std::string> opts, interp_opts;
    for (size_t k = 2; k < args.size(); ++k) {
      const std::string& o = args[k];
      if (o == "--check") continue;
      opts.push_back(o);
      if (o == "--require-pass" || o == "--disable-pass") {
        if (k + 1 < args.size()) opts.push_back(args[++k]);
        continue;
      }
      if (o.rfind("-O", 0) != 0) interp_opts.push_back(o);
    }
    std::vector<std::string> interp_args = {"interp", f}, checked_args = {"run", f, "--check"};
    interp_args.insert(interp_args.end(), interp_opts.begin(), interp_opts.end());
    checked_args.insert(checked_args.end(), opts.begin(), opts.end());
    Result in = kiln(interp_args), checked = kiln(checked_args);
    EXPECT_LT(in.status, 128) << "interp killed by signal " << in.status - 128 << "\n" << in.err;
    EXPECT_EQ(in.status, checked.status) << "interp:\n"
                                         << in.out << in.err << "run --check:\n"
                                         << checked.out << checked.err;
  }
}

// A source beyond max_source_bytes is refused without reading it all: /dev/zero
// never ends, and reading 2 GB of it ended in bad_alloc.
TEST(CliErrors, AnEndlessFileIsRefusedAtTheSizeLimit) {
  Result r = kiln({"check", "/dev/zero"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "/dev/zero: parse error: the source is larger than the limit of 16777216 bytes "
            "(max_source_bytes, docs/limits.md)\n");
}

TEST(CliErrors, OneBadFileDoesNotStopTheOthers) {
  Result r = kiln({"check", data("parse_error.kiln"), data("matmul_small.kiln")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "parse_error.kiln"));
  EXPECT_TRUE(Contains(r.out, "ok  matmul:"));
}

// ---------------------------------------------------------------------------
// check

TEST(CliCheck, PrintsOneLinePerFunc) {
  Result r = kiln({"check", data("matmul_small.kiln")});
  EXPECT_EQ(r.status, 0) << r.err;
  // The reduction makes two computations: C_init and C.
  EXPECT_EQ(r.out, "ok  matmul: 2 computations, 2 schedule commands\n");

  r = kiln({"check", data("two_funcs.kiln")});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines(r.out), (std::vector<std::string>{
                              "ok  scale: 1 computation, 0 schedule commands",
                              "ok  shifted: 2 computations, 1 schedule command",
                          }));
}

TEST(CliCheck, FuncSelectsOneFunc) {
  Result r = kiln({"check", data("two_funcs.kiln"), "--func", "shifted"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "ok  shifted: 2 computations, 1 schedule command\n");
}

TEST(CliCheck, KnobCanBeSetToACandidate) {
  Result r = kiln({"check", data("matmul_small.kiln"), "--set", "TI=8", "--set=M=32"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  matmul:"));
}

TEST(CliCheck, VerboseLogsGoToStderrOnly) {
  Result quiet = kiln({"check", data("matmul_small.kiln")});
  Result verbose = kiln({"--verbose", "check", data("matmul_small.kiln")});
  EXPECT_EQ(verbose.status, 0) << verbose.err;
  EXPECT_EQ(verbose.out, quiet.out);
  EXPECT_TRUE(Contains(verbose.err, "debug"));
}

// ---------------------------------------------------------------------------
// emit

// GPU targets: the CUDA source with its launches, NVRTC's PTX, and what a GPU target refuses.
TEST(CliEmit, CudaAndPtxForAGpuTarget) {
  std::string file = std::string(KILN_SOURCE_DIR) + "/examples/gpu/matmul.kiln";
  Result r = kiln({"emit", file, "--stage", "cuda", "--target", "nvptx64-nvidia-cuda", "--cpu",
                   "sm_90", "--set", "M=256", "--set", "N=128"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "// launch matmul_gpu_k0: grid (2, 4, 1), block (16, 16, 1)"))
      << r.out;
  EXPECT_TRUE(
      Contains(r.out, "extern \"C\" __global__ void __launch_bounds__(256) matmul_gpu_k0("));
  EXPECT_TRUE(Contains(r.out, "__syncthreads();"));
  if (kiln::cuda::nvrtc_available()) {
    r = kiln({"emit", file, "--stage", "asm", "--target", "nvptx64-nvidia-cuda", "--cpu", "sm_90"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(Contains(r.out, ".target sm_90")) << r.out.substr(0, 400);
    EXPECT_TRUE(Contains(r.out, ".entry matmul_gpu_k0"));
  }
  r = kiln({"emit", file, "--stage", "cuda", "--target", "nvptx64-nvidia-cuda"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "needs its architecture as the CPU, sm_XY")) << r.err;
  r = kiln({"emit", file, "--stage", "llvm", "--target", "nvptx64-nvidia-cuda", "--cpu", "sm_90"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "a GPU target has no LLVM IR stage")) << r.err;
  r = kiln({"emit", data("matmul_small.kiln"), "--stage", "cuda"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "CUDA is generated for GPU targets only")) << r.err;
  r = kiln({"emit", std::string(KILN_SOURCE_DIR) + "/examples/matmul.kiln", "--stage", "cuda",
            "--target", "nvptx64-nvidia-cuda", "--cpu", "sm_90"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "is tagged parallel, a CPU tag")) << r.err;
}

// `kiln run --gpu N` on a machine without a GPU says so; with one, it checks and times the
// kernel there.
TEST(CliRun, GpuRunsOnThisMachinesGpu) {
  std::string file = std::string(KILN_SOURCE_DIR) + "/examples/gpu/matmul.kiln";
  std::string why;
  if (!kiln::cuda::gpu_available(&why)) {
    Result r = kiln({"run", "--check", "--gpu", "0", file});
    EXPECT_EQ(r.status, 1);
    EXPECT_TRUE(Contains(r.err, "run error: no GPU driver")) << r.err;
    return;
  }
  Result r = kiln({"run", "--check", "--bench", "--gpu", "0", file, "--set", "M=300", "--set",
                   "N=200", "--set", "K=50"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  matmul_gpu: 1 output matches")) << r.out;
  EXPECT_TRUE(Contains(r.out, "bench matmul_gpu:")) << r.out;
  r = kiln({"run", "--check", "--gpu", "99", file});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "no GPU 99")) << r.err;
}

TEST(CliEmit, AstIsTheParsedProgramInKilnSyntax) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "ast"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "matmul"));
  EXPECT_TRUE(Contains(r.out, "compute"));
  EXPECT_TRUE(Contains(r.out, "C_init"));

  // It parses again, to the same computations.
  TempFile copy;
  std::ofstream(copy.path) << r.out;
  Result again = kiln({"check", copy.path});
  EXPECT_EQ(again.status, 0) << again.err << "\nfrom:\n" << r.out;
  EXPECT_TRUE(Contains(again.out, "ok  matmul: 2 computations"));
}

TEST(CliEmit, AstShowsSetValues) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "ast", "--set", "M=40"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out, R"(\bM\s*=\s*40\b)"));
  EXPECT_FALSE(Matches(r.out, R"(\bM\s*=\s*16\b)"));
}

TEST(CliEmit, SketchesArePastableSchedulesThatRunAsTheAlgorithmDoes) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "sketch"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(
      r.out, "# matmul: the tiled sketch (1 of 2: kiln tune searches each and keeps the fastest)"));
  EXPECT_TRUE(Contains(r.out, "C.reorder(k_o, i_o, j_o, k_i, i_i, j_i);"));
  EXPECT_TRUE(Contains(r.out, "# matmul: the split sketch (2 of 2)"));

  // The first, pasted into the algorithm alone (--stage algorithm), runs as the reference.
  Result algorithm = kiln({"emit", data("matmul_small.kiln"), "--stage", "algorithm"});
  ASSERT_EQ(algorithm.status, 0) << algorithm.err;
  EXPECT_FALSE(Contains(algorithm.out, "schedule {")) << algorithm.out;
  EXPECT_FALSE(Contains(algorithm.out, "knob")) << algorithm.out;
  EXPECT_TRUE(Contains(algorithm.out, "constraint M > 0, N > 0, K > 0;")) << algorithm.out;
  size_t open = r.out.find("  schedule {"), close = r.out.find("  }\n", open);
  ASSERT_NE(close, std::string::npos) << r.out;
  std::string sketch = r.out.substr(open, close + 4 - open);
  std::string program = algorithm.out.substr(0, algorithm.out.rfind('}')) + sketch + "}\n";
  TempFile pasted;
  std::ofstream(pasted.path) << program;
  Result run = kiln({"run", pasted.path, "--check"});
  EXPECT_EQ(run.status, 0) << run.err << "\nfrom:\n" << program;
  EXPECT_TRUE(Contains(run.out, "ok  matmul")) << run.out;

  for (const char* stage : {"sketch", "algorithm"}) {
    Result remote =
        kiln({"emit", data("matmul_small.kiln"), "--stage", stage, "--server", "127.0.0.1:1"});
    EXPECT_EQ(remote.status, 2);
    EXPECT_TRUE(
        Contains(remote.err, std::string("--stage ") + stage + " is printed by this kiln only"))
        << remote.err;
  }

  // For a GPU target, the GPU sketches: blocks and threads.
  Result gpu = kiln({"emit", data("matmul_small.kiln"), "--stage", "sketch", "--target",
                     "nvptx64-nvidia-cuda", "--cpu", "sm_90"});
  EXPECT_EQ(gpu.status, 0) << gpu.err;
  EXPECT_TRUE(Contains(gpu.out, "C.tag(j_t, gpu_thread_x);")) << gpu.out;
  EXPECT_FALSE(Contains(gpu.out, "vectorize")) << gpu.out;
}

TEST(CliEmit, IrDescribesEachComputationsDomain) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "ir"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "C_init"));
  EXPECT_TRUE(Contains(r.out, "{"));  // isl notation
}

TEST(CliEmit, ScheduleNamesTheNewLoops) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "schedule"});
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* loop : {"io", "jo", "ii", "ji"}) EXPECT_TRUE(Contains(r.out, loop));
}

TEST(CliEmit, LoopsChangeWithTheSchedule) {
  Result scheduled = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops"});
  Result plain = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops", "--no-schedule"});
  EXPECT_EQ(scheduled.status, 0) << scheduled.err;
  EXPECT_EQ(plain.status, 0) << plain.err;
  EXPECT_TRUE(Contains(scheduled.out, "for"));
  EXPECT_TRUE(Contains(plain.out, "for"));
  EXPECT_NE(scheduled.out, plain.out);
  EXPECT_TRUE(Contains(scheduled.out, "parallel"));
  EXPECT_FALSE(Contains(plain.out, "parallel"));
}

TEST(CliEmit, SeveralFuncsEachGetAHeading) {
  Result r = kiln({"emit", data("two_funcs.kiln"), "--stage", "loops"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "two_funcs.kiln: func scale"));
  EXPECT_TRUE(Contains(r.out, "two_funcs.kiln: func shifted"));
}

TEST(CliEmit, IllegalScheduleFailsButNoScheduleStillEmits) {
  Result r = kiln({"emit", data("illegal_schedule.kiln"), "--stage", "loops"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "legality error"));

  r = kiln({"emit", data("illegal_schedule.kiln"), "--stage", "loops", "--no-schedule"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "for"));
}

// ---------------------------------------------------------------------------
// interp

TEST(CliInterp, CheckMatchesTheReference) {
  Result r = kiln({"interp", data("matmul_small.kiln"), "--check"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out, R"(^ok  matmul: 1 output matches \(max abs error [0-9.e+-]+\)\n$)"));

  r = kiln({"interp", data("two_funcs.kiln"), "--check", "--func", "shifted"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  shifted: 2 outputs match (max abs error 0)"));
}

TEST(CliInterp, CheckWithoutScheduleMatchesToo) {
  Result r = kiln({"interp", data("matmul_small.kiln"), "--check", "--no-schedule", "--seed", "7"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  matmul: 1 output matches"));
}

TEST(CliInterp, JsonIsOneObjectPerFunc) {
  Result r = kiln({"interp", data("two_funcs.kiln"), "--check", "--json"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<Json> objects = json_lines(r.out);
  ASSERT_EQ(objects.size(), 2u) << r.out;
  EXPECT_EQ(objects[0].object["func"].string, "scale");
  EXPECT_EQ(objects[1].object["func"].string, "shifted");
  for (Json& o : objects) {
    for (const char* key : {"func", "ok", "max_abs_error", "mismatch", "error"}) {
      EXPECT_TRUE(o.object.count(key)) << key << " missing in " << r.out;
    }
    EXPECT_EQ(o.object["ok"].kind, Json::Bool);
    EXPECT_TRUE(o.object["ok"].boolean);
    EXPECT_EQ(o.object["max_abs_error"].kind, Json::Number);
    EXPECT_EQ(o.object["mismatch"].kind, Json::Null);
    EXPECT_EQ(o.object["error"].kind, Json::Null);
  }
  EXPECT_EQ(objects[1].object["outputs"].object.size(), 2u);
}

TEST(CliInterp, JsonReportsErrorsAsObjects) {
  Result r = kiln(
      {"interp", data("illegal_schedule.kiln"), data("parse_error.kiln"), "--check", "--json"});
  EXPECT_EQ(r.status, 1);
  std::vector<Json> objects = json_lines(r.out);
  ASSERT_EQ(objects.size(), 2u) << r.out;
  EXPECT_EQ(objects[0].object["func"].string, "reversed");
  EXPECT_EQ(objects[1].object["func"].kind, Json::Null);  // the whole file failed
  for (Json& o : objects) {
    EXPECT_FALSE(o.object["ok"].boolean);
    EXPECT_EQ(o.object["error"].kind, Json::String);
  }
  EXPECT_TRUE(Contains(objects[0].object["error"].string, "legality error"));
  EXPECT_TRUE(Contains(objects[1].object["error"].string, "parse error"));
}

TEST(CliInterp, JsonStaysJsonWhatEverTheFileHolds) {
  Result r = kiln({"interp", data("bad_bytes.kiln"), "--json"});
  EXPECT_EQ(r.status, 1);
  std::vector<Json> objects = json_lines(r.out);
  ASSERT_EQ(objects.size(), 1u) << r.out;
  EXPECT_TRUE(Contains(objects[0].object["error"].string, "bad_bytes.kiln:2:"));
}

TEST(CliInterp, WithoutCheckPrintsAChecksumPerOutput) {
  Result r = kiln({"interp", data("two_funcs.kiln"), "--func", "shifted"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::string> out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_TRUE(Matches(out[0], R"(^shifted: lo\[6\] checksum -?[0-9.e+-]+$)"));
  EXPECT_TRUE(Matches(out[1], R"(^shifted: hi\[6\] checksum -?[0-9.e+-]+$)"));
}

TEST(CliInterp, SeedMakesRunsReproducible) {
  Result a = kiln({"interp", data("matmul_small.kiln"), "--seed", "1"});
  Result b = kiln({"interp", data("matmul_small.kiln"), "--seed", "1"});
  Result c = kiln({"interp", data("matmul_small.kiln"), "--seed", "2"});
  EXPECT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST(CliInterp, SetOverridesACompileTimeParam) {
  Result r = kiln({"interp", data("two_funcs.kiln"), "--func", "scale", "--set", "N=5"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "scale: y[5] checksum"));

  r = kiln({"interp", data("matmul_small.kiln"), "--check", "--set", "M=9", "--set", "TI=8"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  matmul: 1 output matches"));
}

TEST(CliInterp, SetGivesARunTimeParamItsValue) {
  Result r = kiln({"interp", data("runtime_param.kiln"), "--set", "n=7"});
  EXPECT_EQ(r.status, 0) << r.err;
  // Nothing was chosen, so nothing is said about n.
  EXPECT_TRUE(Matches(r.out, R"(^axpy: z\[7\] checksum \S+\n$)"));

  r = kiln({"interp", data("runtime_param.kiln"), "--check", "--set", "n=7", "--json"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<Json> objects = json_lines(r.out);
  ASSERT_EQ(objects.size(), 1u) << r.out;
  EXPECT_EQ(objects[0].object["params"].object["n"].number, 7);

  // A run-time param stays one when compiling: check needs no value.
  r = kiln({"check", data("runtime_param.kiln")});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliInterp, RunTimeParamLeftOutGetsATestSizeItSays) {
  Result r = kiln({"interp", data("runtime_param.kiln"), "--check"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(
      Matches(r.out, R"(^ok  axpy: 1 output matches \(max abs error \S+\) with n=[0-9]+\n$)"));
}

TEST(CliInterp, RunTimeParamMustMeetTheConstraints) {
  Result r = kiln({"interp", data("runtime_param.kiln"), "--set", "n=0"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "runtime_param.kiln:4:"));
  EXPECT_TRUE(Contains(r.err, "n > 0"));
  EXPECT_TRUE(Contains(r.err, "n=0"));

  r = kiln({"interp", data("rare_size.kiln")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "--set n=INT"));

  r = kiln({"interp", data("rare_size.kiln"), "--check", "--set", "n=999"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  rare: 1 output matches"));
}

// ---------------------------------------------------------------------------
// run

TEST(CliRun, CheckPassesForEveryExample) {
  std::string dir = std::string(KILN_SOURCE_DIR) + "/examples/";
  std::vector<std::string> args = {"run", "--check"};
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kiln") args.push_back(e.path().string());
  ASSERT_GE(args.size(), 7u);
  Result r = kiln(args);
  EXPECT_EQ(r.status, 0) << r.err;
  // One line per func and per graph, each a match.
  std::vector<std::string> out = lines(r.out);
  EXPECT_GE(out.size(), args.size() - 2) << r.out;
  for (const std::string& line : out)
    EXPECT_TRUE(Matches(line, R"(^ok  (graph )?\w+: \d+ outputs? match(es)? \(max abs error \S+)"))
        << line;
}

// ---------------------------------------------------------------------------
// graphs

std::string example(const char* name) {
  return std::string(KILN_SOURCE_DIR) + "/examples/" + name + ".kiln";
}

TEST(CliGraph, RunCheckComparesTheOptimizedGraphWithTheReference) {
  Result r = kiln({"run", example("conv_bn_relu"), "--graph", "block", "--check"});
  EXPECT_EQ(r.status, 0) << r.err;
  // The error is not 0: fused multiply-adds round once where the reference
  // rounds twice.
  EXPECT_TRUE(Matches(r.out,
                      R"(^ok  graph block: 1 output matches \(max abs error [0-9.e-]+; 4 calls -> )"
                      R"(1 after graph passes, 1 kernel\)\n$)"))
      << r.out;
  r = kiln({"run", example("conv_bn_relu"), "--graph", "block", "--check", "-O0"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "4 calls -> 4 after graph passes, 4 kernels")) << r.out;
  r = kiln({"interp", example("conv_bn_relu"), "--graph", "block", "--check"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  graph block: 1 output matches")) << r.out;
}

TEST(CliGraph, JsonLineDescribesTheGraphRun) {
  Result r = kiln({"run", example("conv_bn_relu"), "--graph", "block", "--check", "--json"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out,
                      R"(^\{"file":"[^"]+","graph":"block","ok":true,"max_abs_error":[0-9.e-]+,)"
                      R"("mismatch":null,"calls":4,"calls_after_passes":1,"outputs":\{"r":)"
                      R"(\{"shape":\[1,32,14,14\],"checksum":[-0-9.e]+\}\},"check_scope":"graph",)"
                      R"("bench":null,)"
                      R"("error":null\}\n$)"))
      << r.out;
}

TEST(CliGraph, EmitGraphShowsEachPassAndTheFusedOperator) {
  Result r = kiln({"emit", example("conv_bn_relu"), "--stage", "graph"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "  scale, shift = bn_coefficients(gamma, beta, mean, var, F = 32);"))
      << r.out;
  r = kiln({"emit", example("conv_bn_relu"), "--stage", "graph", "-O2", "--print-after",
            "fold_constants", "--print-after", "fuse_elementwise"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out,
                       "  r = conv2d_channel_affine_relu(x, w, scale, shift, N = 1, C = 16, "
                       "H = 14, W = 14, F = 32);"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "func conv2d_channel_affine_relu {")) << r.out;
  EXPECT_TRUE(Contains(r.out, "    relu.after(channel_affine, xi);")) << r.out;
  EXPECT_TRUE(Contains(r.err, "// after fold_constants\ngraph block {")) << r.err;
  EXPECT_TRUE(Contains(r.err, "  const scale : f32[32] = [")) << r.err;
  EXPECT_TRUE(
      Contains(r.err, "// fuse_elementwise: channel_affine into conv2d (inside loop xo of O)"))
      << r.err;
  // The other stages print each call's operator.
  r = kiln({"emit", example("conv_bn_relu"), "--graph", "block", "--stage", "loops", "-O2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "graph block, call 1: conv2d_channel_affine_relu")) << r.out;
}

TEST(CliGraph, SelectionErrors) {
  Result r = kiln({"run", example("conv_bn_relu"), "--graph", "nope"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "--graph nope: no graph of that name (expected one of: block)"))
      << r.err;
  r = kiln({"run", example("matmul"), "--graph", "g"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "--graph g: no graph of that name (the file defines none)")) << r.err;
  r = kiln({"emit", example("matmul"), "--stage", "graph"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "the file defines no graph")) << r.err;
  r = kiln({"run", example("conv_bn_relu"), "--graph", "block", "--set", "N=2"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err,
                       "--set N: --set applies to funcs; a graph binds its operators' "
                       "params in its calls"))
      << r.err;
  r = kiln({"run", example("conv_bn_relu"), "--graph", "block", "--func", "relu"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--func and --graph each select what to process; give one")) << r.err;
  r = kiln({"run", example("conv_bn_relu"), "--graph", "block", "--disable-pass", "fold"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "fold_constants")) << r.err;  // the list of known passes
}

TEST(CliRun, ParallelLoopsMatchWithOneAndTwoThreads) {
  for (const char* threads : {"1", "2"}) {
    Result r =
        kiln({"run", data("matmul_small.kiln"), "--check", "--threads", threads, "--set", "M=13"});
    EXPECT_EQ(r.status, 0) << threads << ": " << r.err;
    EXPECT_TRUE(Contains(r.out, "ok  matmul: 1 output matches")) << threads;
  }
}

TEST(CliPasses, EmitLoopsRunsThePassesOnlyWhenAsked) {
  Result plain = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops"});
  Result o0 = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops", "-O0"});
  Result o2 = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops", "-O2"});
  EXPECT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(o2.status, 0) << o2.err;
  EXPECT_EQ(o0.out, plain.out);  // -O0 runs no pass
  EXPECT_TRUE(Contains(o2.out, "for ("));
}

TEST(CliPasses, PrintAfterAndTimePassesWriteToStderr) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops", "--print-after",
                   "simplify", "--time-passes"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "// after simplify\n")) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(pass simplify: [0-9]+\.[0-9]{2} ms)")))
      << r.err;
  EXPECT_TRUE(Contains(r.err, "for (io = 0; io < 4; io += 1) {")) << r.err;

  r = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops", "-O1", "--disable-pass",
            "simplify", "--print-after=all"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(Contains(r.err, "// after simplify"));
}

TEST(CliPasses, UnknownPassIsAUsageError) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "loops", "--print-after", "nope"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--print-after 'nope': unknown pass")) << r.err;
  r = kiln({"run", data("matmul_small.kiln"), "--require-pass", "nope"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--require-pass 'nope': unknown pass")) << r.err;
}

TEST(CliPasses, PassOptionsNeedLoops) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "ast", "-O2"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "-O applies to --stage loops, llvm, asm, cuda and graph only"))
      << r.err;
  r = kiln({"interp", data("matmul_small.kiln"), "--time-passes"});
  EXPECT_EQ(r.status, 2);
}

TEST(CliPasses, RequiredPassRunsAtO0AndStillMatches) {
  Result r = kiln({"run", data("matmul_small.kiln"), "--check", "-O0", "--require-pass", "simplify",
                   "--time-passes"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  matmul: 1 output matches"));
  EXPECT_TRUE(Contains(r.err, "pass simplify: ")) << r.err;
}

TEST(CliRun, EveryOptimizationLevelMatches) {
  for (const char* level : {"-O0", "-O1", "-O2", "-O3"}) {
    Result r = kiln({"run", data("matmul_small.kiln"), "--check", level, "--seed", "3"});
    EXPECT_EQ(r.status, 0) << level << ": " << r.err;
    EXPECT_TRUE(Contains(r.out, "ok  matmul: 1 output matches")) << level;
  }
}

TEST(CliRun, ComputesWhatTheLoopInterpreterComputes) {
  // Same inputs, same checksums (the sums of f32 outputs of identical arithmetic).
  Result run = kiln({"run", data("two_funcs.kiln"), "--json", "--seed", "4"});
  Result interp = kiln({"interp", data("two_funcs.kiln"), "--json", "--seed", "4"});
  EXPECT_EQ(run.status, 0) << run.err;
  std::vector<Json> a = json_lines(run.out), b = json_lines(interp.out);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    for (auto& [name, out] : b[k].object["outputs"].object) {
      EXPECT_NEAR(a[k].object["outputs"].object[name].object["checksum"].number,
                  out.object["checksum"].number, 1e-4)
          << name;
    }
  }
}

TEST(CliRun, RunTimeParamsArePickedAsForInterp) {
  Result r = kiln({"run", data("runtime_param.kiln"), "--check"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(
      Matches(r.out, R"(^ok  axpy: 1 output matches \(max abs error \S+\) with n=[0-9]+\n$)"));

  r = kiln({"run", data("runtime_param.kiln"), "--check", "--set", "n=1000"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out, R"(^ok  axpy: 1 output matches \(max abs error \S+\)\n$)"));

  r = kiln({"run", data("runtime_param.kiln"), "--set", "n=0"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "n > 0"));
}

TEST(CliRun, IllegalScheduleIsRefusedBeforeCompiling) {
  Result r = kiln({"run", data("illegal_schedule.kiln"), "--check"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "legality error"));
}

// What LLVM says about a kernel is a warning of kiln's, naming the kernel and
// the loop, once, and not LLVM's own "<unknown>:0:0" lines.
TEST(CliRun, LlvmsWarningsNameTheKernelAndTheLoop) {
  Result r = kiln({"run", data("vectorize_outer_loop.kiln"), "--check"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  tri: 1 output matches")) << r.out;
  const std::string warning = "[warning] tri, loop 'i': loop not vectorized: ";
  size_t at = r.err.find(warning);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, at + 1), std::string::npos) << r.err;
  EXPECT_FALSE(Contains(r.err, "<unknown>")) << r.err;
}

// KILN_PERF=1: the JIT describes every function of a kernel, the outlined
// parallel bodies too, in a jitdump file perf can read (magic "JiTD", flags
// zero: perf refuses unknown flags). Without it, nothing is written.
TEST(CliRun, PerfSupportWritesAJitdumpNamingEveryFunction) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(testing::TempDir()) / ("kiln_jitdump_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv("JITDUMPDIR", dir.c_str(), 1);
  Result quiet = kiln({"run", data("matmul_small.kiln"), "--check", "--threads", "2"});
  setenv("KILN_PERF", "1", 1);
  Result r = kiln({"run", data("matmul_small.kiln"), "--check", "--threads", "2"});
  unsetenv("KILN_PERF");
  unsetenv("JITDUMPDIR");
  EXPECT_EQ(quiet.status, 0) << quiet.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  matmul: 1 output matches"));
  EXPECT_EQ(r.err, "");

  std::vector<fs::path> dumps;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".dump") dumps.push_back(e.path());
  ASSERT_EQ(dumps.size(), 1u) << "one jitdump, from the run with KILN_PERF only";
  std::string dump = read_file(dumps[0].string());
  ASSERT_GE(dump.size(), 40u);
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    std::memcpy(&v, dump.data() + at, sizeof v);
    return v;
  };
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    std::memcpy(&v, dump.data() + at, sizeof v);
    return v;
  };
  EXPECT_EQ(u32(0), 0x4A695444u);  // "JiTD"
  EXPECT_EQ(u64(32), 0u) << "header flags";
  // Code-load records (id 0): header, pid, tid, vma, code address, size, index,
  // then the function's name.
  std::vector<std::string> names;
  for (size_t at = u32(8); at + 16 <= dump.size() && u32(at + 4) > 0; at += u32(at + 4))
    if (u32(at) == 0) names.push_back(dump.c_str() + at + 56);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"kiln_matmul", "kiln_matmul_par_io_1"}));
  fs::remove_all(dir);
}

TEST(CliRun, BenchPrintsTheMedianAndGflops) {
  Result r = kiln({"run", data("matmul_small.kiln"), "--bench", "--repeat", "3", "--number", "4",
                   "--threads", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out, R"(^bench matmul: [0-9.]+ (ns|us|ms|s) per run \(median of 3 x 4 )"
                             R"(runs, 1 thread\), [0-9.e+]+ GFLOP/s\n$)"))
      << r.out;

  // With --check the comparison comes first; a run-time param's size is said there.
  r = kiln({"run", data("runtime_param.kiln"), "--check", "--bench", "--repeat", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::string> out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_TRUE(Contains(out[0], "ok  axpy: 1 output matches"));
  EXPECT_TRUE(Matches(out[1], R"(^bench axpy: .* GFLOP/s$)")) << out[1];
}

TEST(CliRun, BenchWithoutAFlopCountSaysSo) {
  // segment_sum's loop bounds are read from its input: its flop count is not known statically.
  Result r = kiln({"run", std::string(KILN_SOURCE_DIR) + "/examples/segment_sum.kiln", "--bench",
                   "--repeat", "1", "--number", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out, R"(^bench segment_sum: .* flop count unknown\n$)")) << r.out;
}

// The flops come from the algorithm's loops, whatever the schedule does to them:
// heat2d's skewed wavefronts have bounds that depend on every loop around them,
// which a count on the scheduled loops would have to step through (at these
// sizes it gave up: "flop count unknown"; larger ones took minutes).
TEST(CliRun, BenchCountsTheFlopsOfTheAlgorithmNotOfItsSchedule) {
  Result r =
      kiln({"run", std::string(KILN_SOURCE_DIR) + "/examples/heat2d.kiln", "--bench", "--json",
            "--repeat", "1", "--number", "1", "--set", "T=200", "--set", "N=1000"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<Json> objects = json_lines(r.out);
  ASSERT_EQ(objects.size(), 1u) << r.out;
  // T (N - 2)^2 updates of 4 additions and a multiplication each.
  EXPECT_EQ(objects[0].object["bench"].object["flops"].number, 200.0 * 998 * 998 * 5) << r.out;
}

TEST(CliRun, JsonCarriesTheBenchmark) {
  Result r = kiln({"run", data("matmul_small.kiln"), "--check", "--bench", "--json", "--repeat",
                   "2", "--number", "3", "--threads", "2"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<Json> objects = json_lines(r.out);
  ASSERT_EQ(objects.size(), 1u) << r.out;
  Json& o = objects[0];
  EXPECT_TRUE(o.object["ok"].boolean);
  EXPECT_EQ(o.object["mismatch"].kind, Json::Null);
  ASSERT_EQ(o.object["bench"].kind, Json::Object) << r.out;
  auto& b = o.object["bench"].object;
  EXPECT_GT(b["median_s"].number, 0);
  EXPECT_LE(b["min_s"].number, b["median_s"].number);
  EXPECT_EQ(b["repeat"].number, 2);
  EXPECT_EQ(b["number"].number, 3);
  EXPECT_EQ(b["threads"].number, 2);
  EXPECT_EQ(b["flops"].number, 2 * 16 * 12 * 8);
  EXPECT_GT(b["gflops"].number, 0);

  // Without --bench the key is there, null.
  r = kiln({"run", data("matmul_small.kiln"), "--json"});
  objects = json_lines(r.out);
  ASSERT_EQ(objects.size(), 1u) << r.out;
  EXPECT_EQ(objects[0].object["bench"].kind, Json::Null);
  EXPECT_EQ(objects[0].object["max_abs_error"].kind, Json::Null);
}

// ---------------------------------------------------------------------------
// compile

// e_machine of an ELF file, 0 when it is not one.
uint16_t elf_machine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char header[20] = {};
  in.read(header, sizeof header);
  if (!in || std::string(header, 4) !=
                 "\x7f"
                 "ELF")
    return 0;
  return static_cast<uint16_t>(static_cast<unsigned char>(header[18]) |
                               static_cast<unsigned char>(header[19]) << 8);
}

TEST(CliCompile, SharedObjectsForX86AndAarch64) {
  TempFile so;
  for (auto [triple, machine] :
       {std::pair<std::string, uint16_t>{"x86_64-linux-gnu", 62}, {"aarch64-linux-gnu", 183}}) {
    Result r = kiln({"compile", data("matmul_small.kiln"), "--target", triple, "-o", so.path});
    EXPECT_EQ(r.status, 0) << triple << ": " << r.err;
    EXPECT_TRUE(Matches(r.out, "^ok  matmul: .* and .*\\.json \\(" + triple +
                                   ", [0-9]+ bytes, key [0-9a-f]{64}\\)\n$"))
        << r.out;
    EXPECT_EQ(elf_machine(so.path), machine) << triple;

    std::ifstream in(so.path + ".json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::unique_ptr<Json> meta = JsonParser(text).parse();
    ASSERT_TRUE(meta != nullptr) << text;
    auto& m = meta->object;
    EXPECT_EQ(m["triple"].string, triple);
    EXPECT_EQ(m["entry"].string, "kiln_matmul");
    EXPECT_TRUE(Matches(m["key"].string, "^[0-9a-f]{64}$")) << m["key"].string;
    EXPECT_TRUE(Matches(m["code_sha256"].string, "^[0-9a-f]{64}$")) << m["code_sha256"].string;
    EXPECT_EQ(m["fast_math"].kind, Json::Bool);
    EXPECT_FALSE(m["fast_math"].boolean);
    ASSERT_EQ(m["args"].array.size(), 3u);
    EXPECT_EQ(m["args"].array[0].object["name"].string, "A");
    EXPECT_EQ(m["args"].array[0].object["dtype"].string, "f32");
    EXPECT_EQ(m["args"].array[2].object["role"].string, "output");
    EXPECT_EQ(m["args"].array[2].object["shape"].array.size(), 2u);
    for (Json& name : m["imports"].array) EXPECT_TRUE(Contains(name.string, "kiln_"));
    unlink((so.path + ".json").c_str());
  }
}

TEST(CliCompile, CpuAndOptimizationLevelAreRecorded) {
  TempFile so;
  Result r = kiln({"compile", data("runtime_param.kiln"), "--target", "aarch64-linux-gnu", "--cpu",
                   "neoverse-n1", "-O1", "--output", so.path});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "(aarch64-linux-gnu, neoverse-n1, "));
  std::ifstream in(so.path + ".json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::unique_ptr<Json> meta = JsonParser(text).parse();
  ASSERT_TRUE(meta != nullptr) << text;
  EXPECT_EQ(meta->object["cpu"].string, "neoverse-n1");
  EXPECT_EQ(meta->object["opt_level"].number, 1);
  // The run-time param comes first, then the buffers, with shapes in n.
  auto& args = meta->object["args"].array;
  ASSERT_EQ(args.size(), 4u);
  EXPECT_EQ(args[0].object["kind"].string, "param");
  EXPECT_EQ(args[0].object["name"].string, "n");
  EXPECT_EQ(args[1].object["shape"].array.at(0).string, "n");
  unlink((so.path + ".json").c_str());
}

// The artifact records the fast-math setting the func was compiled with: the
// benchmark GEMM declares `option fast_math`.
TEST(CliCompile, FastMathFuncIsRecordedAsFastMath) {
  TempFile so;
  Result r = kiln({"compile", std::string(KILN_SOURCE_DIR) + "/tests/bench/kernels/gemm.kiln",
                   "--func", "gemm", "-o", so.path});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(so.path + ".json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::unique_ptr<Json> meta = JsonParser(text).parse();
  ASSERT_TRUE(meta != nullptr) << text;
  EXPECT_EQ(meta->object["fast_math"].kind, Json::Bool) << text;
  EXPECT_TRUE(meta->object["fast_math"].boolean) << text;
  unlink((so.path + ".json").c_str());
}

// A target, CPU or feature kiln cannot generate code for is refused with a
// clear error before LLVM sees it: LLVM aborts the process on some (exit 134)
// and compiles others without a word for machines kiln does not support.
TEST(CliCompile, TargetsCpusAndFeaturesAreCheckedBeforeLlvm) {
  TempFile so;
  std::string file = data("matmul_small.kiln");
  std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--cpu", "bogus"}, "codegen error: unknown CPU 'bogus' for "},
      {{"--features", "-64bit-mode"}, "codegen error: feature '-64bit-mode' would take "},
      {{"--features", "-64bit"}, "codegen error: feature '-64bit' would take "},
      {{"--features", "+bogus"}, "codegen error: unknown feature 'bogus' for "},
      {{"--features", "avx2"}, "codegen error: feature 'avx2' for "},
      {{"--target", "i386-linux-gnu"}, "codegen error: target 'i386-linux-gnu' is not supported"},
      {{"--target", "armv7-linux-gnueabihf"},
       "codegen error: target 'armv7-linux-gnueabihf' is not supported"},
      {{"--target", "aarch64_be-linux-gnu"},
       "codegen error: target 'aarch64_be-linux-gnu' is not supported"},
      {{"--target", "x86_64-pc-windows-msvc"},
       "codegen error: target 'x86_64-pc-windows-msvc' is not supported"},
      {{"--target", "aarch64-apple-darwin"},
       "codegen error: target 'aarch64-apple-darwin' is not supported"},
      {{"--target", "aarch64-linux-gnu", "--cpu", "skylake"},
       "codegen error: unknown CPU 'skylake' for aarch64-linux-gnu"},
  };
  for (const auto& [options, message] : cases) {
    std::vector<std::string> args = {"compile", file, "-o", so.path};
    args.insert(args.end(), options.begin(), options.end());
    Result r = kiln(args);
    SCOPED_TRACE(options.back());
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_TRUE(Contains(r.err, file + ": " + message)) << r.err;
    EXPECT_FALSE(Contains(r.err, "LLVM ERROR")) << r.err;
    EXPECT_FALSE(Contains(r.err, "not a recognized")) << r.err;
  }
  // What kiln supports still compiles.
  EXPECT_EQ(kiln({"compile", file, "-o", so.path, "--target", "aarch64-linux-gnu", "--cpu",
                  "neoverse-n1", "--features", "+sve"})
                .status,
            0);
  unlink((so.path + ".json").c_str());
}

TEST(CliCompile, OneOutputFileNeedsOneFunc) {
  Result r = kiln({"compile", data("two_funcs.kiln"), "-o", testing::TempDir() + "unused.so"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "more than one func is selected; choose scale with --func"));
}

TEST(CliCompile, UnknownTargetIsACompileError) {
  TempFile so;
  Result r =
      kiln({"compile", data("matmul_small.kiln"), "--target", "pdp11-unknown-none", "-o", so.path});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "unknown target triple 'pdp11-unknown-none'"));
}

// ---------------------------------------------------------------------------
// emit llvm and asm

TEST(CliEmit, LlvmHoldsTheEntryPoint) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "llvm"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Matches(r.out, R"(define [^\n]*@kiln_matmul\(ptr)")) << r.out;
  EXPECT_TRUE(Contains(r.out, "kiln_parallel_launch"));  // the parallel loop

  r = kiln({"emit", data("matmul_small.kiln"), "--stage", "llvm", "--target", "aarch64-linux-gnu",
            "-O0"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "target triple = \"aarch64"));
}

TEST(CliEmit, AsmIsForTheTarget) {
  Result r = kiln({"emit", data("matmul_small.kiln"), "--stage", "asm", "--target",
                   "aarch64-linux-gnu", "--cpu", "cortex-a72"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "kiln_matmul:"));
  EXPECT_TRUE(Matches(r.out, R"(\bldr\b)")) << "no aarch64 load in:\n" << r.out;

  r = kiln({"emit", data("matmul_small.kiln"), "--stage", "asm", "--target", "x86_64-linux-gnu",
            "--features", "+avx2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "kiln_matmul:"));
  EXPECT_TRUE(Matches(r.out, R"(\b(mov|vmov)\w*\b)"));
}

TEST(CliEmit, SeveralFuncsOfLlvmGetCommentHeadings) {
  Result r = kiln({"emit", data("two_funcs.kiln"), "--stage", "llvm"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "; " + data("two_funcs.kiln") + ": func scale"));
  EXPECT_TRUE(Contains(r.out, "@kiln_scale("));
  EXPECT_TRUE(Contains(r.out, "@kiln_shifted("));
}

// ---------------------------------------------------------------------------
// kiln --server: kilnd does the work, and the output is the offline command's

// Runs `args` offline and through kilnd at `address`; the two must agree in
// exit status, stdout and stderr, byte for byte.
void expect_same_through(const std::string& address, std::vector<std::string> args) {
  SCOPED_TRACE(fmt_args(args));
  Result offline = kiln(args);
  args.push_back("--server");
  args.push_back(address);
  Result remote = kiln(args);
  EXPECT_EQ(remote.status, offline.status);
  EXPECT_EQ(remote.out, offline.out);
  EXPECT_EQ(remote.err, offline.err);
}

std::vector<std::string> examples() {
  std::string dir = std::string(KILN_SOURCE_DIR) + "/examples/";
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kiln") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(CliRemote, EveryExampleGivesTheOfflineOutput) {
  kiln::testing::KilndProcess kilnd(KILND_BINARY);
  std::string so = testing::TempDir() + "kiln_cli_remote.so";
  for (const std::string& f : examples()) {
    expect_same_through(kilnd.address(), {"check", f});
    expect_same_through(kilnd.address(), {"run", f, "--check", "--seed", "3"});
    expect_same_through(kilnd.address(), {"emit", f, "--stage", "schedule"});
    expect_same_through(kilnd.address(), {"emit", f, "--stage", "loops", "-O2"});
    expect_same_through(kilnd.address(), {"compile", f, "--func", first_func(f), "-o", so});
    // The artifacts are the same bytes too.
    std::string remote_so = read_file(so);
    kiln({"compile", f, "--func", first_func(f), "-o", so});
    EXPECT_EQ(read_file(so), remote_so) << f;
  }
  expect_same_through(kilnd.address(), {"compile", examples().front(), "--target",
                                        "aarch64-linux-gnu", "--cpu", "neoverse-n1", "-o", so});
  std::remove(so.c_str());
  std::remove((so + ".json").c_str());
}

// A model (.onnx) goes to kilnd as a blob and gives what it gives offline: the same lines,
// and the same artifact and weights, byte for byte.
TEST(CliRemote, AModelGivesTheOfflineOutput) {
  kiln::testing::KilndProcess kilnd(KILND_BINARY);
  std::string so = testing::TempDir() + "kiln_cli_remote_model.so";
  std::string weights = testing::TempDir() + "kiln_cli_remote_model.weights";
  for (const char* test : {"test_relu", "test_basic_conv_with_padding"}) {
    std::string model =
        std::string("/usr/share/libonnx-testdata/data/node/") + test + "/model.onnx";
    if (!std::filesystem::exists(model))
      GTEST_SKIP() << model << " is missing (Debian's libonnx-testdata)";
    expect_same_through(kilnd.address(), {"check", model});
    expect_same_through(kilnd.address(), {"run", model, "--seed", "4"});
    expect_same_through(kilnd.address(), {"compile", model, "-o", so});
    std::string remote_so = read_file(so), remote_weights = read_file(weights);
    kiln({"compile", model, "-o", so});
    EXPECT_EQ(read_file(so), remote_so) << model;
    EXPECT_EQ(read_file(weights), remote_weights) << model;
  }
  for (const std::string& f : {so, weights, so + ".json"}) std::remove(f.c_str());
}

// Every hostile input, run as its file says and with --check, ends the same
// through kilnd: the same errors, at the same places, with the same status.
TEST(CliRemote, EveryHostileInputGivesTheOfflineAnswer) {
  kiln::testing::KilndProcess kilnd(KILND_BINARY);
  for (const auto& f : corpus("hostile")) {
    std::istringstream words(header(f, "run"));
    std::vector<std::string> args;
    for (std::string w; words >> w;) args.push_back(w);
    ASSERT_FALSE(args.empty()) << f;
    args.insert(args.begin() + 1, f);
    if (args[0] == "interp") continue;  // not a command kilnd serves
    expect_same_through(kilnd.address(), args);
    expect_same_through(kilnd.address(), {"check", f});
  }
  for (const auto& f : corpus("illegal")) expect_same_through(kilnd.address(), {"check", f});
}

TEST(CliRemote, KilnServerInTheEnvironmentIsUsedAndAnUnreachableOneIsSaid) {
  std::string f = examples().front();
  ASSERT_EQ(setenv("KILN_SERVER", "127.0.0.1:1", 1), 0);
  Result r = kiln({"check", f});
  Result interp = kiln({"interp", f});  // never goes to kilnd
  unsetenv("KILN_SERVER");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "kiln: cannot reach kilnd at 127.0.0.1:1")) << r.err;
  EXPECT_EQ(interp.status, 0) << interp.err;
}

TEST(CliRemote, OfflineOnlyOptionsAreRefusedWithTheServer) {
  Result r = kiln({"run", examples().front(), "--time-passes", "--server", "127.0.0.1:1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--print-after and --time-passes work offline only")) << r.err;
  r = kiln({"interp", examples().front(), "--server", "127.0.0.1:1"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "unknown option '--server' for 'kiln interp'")) << r.err;
}

// A kilnd with a token: no token and a wrong one are refused, saying so; the
// right one works.
TEST(CliRemote, ATokenIsRequiredWhenKilndHasOne) {
  std::string dir = testing::TempDir();
  std::string token = dir + "kiln_token", wrong = dir + "kiln_wrong_token";
  std::ofstream(token) << "s3cret-token-for-the-test\n";
  std::ofstream(wrong) << "not-the-token\n";
  kiln::testing::KilndProcess kilnd(KILND_BINARY, {"--token-file", token});
  std::string f = examples().front();
  Result none = kiln({"check", f, "--server", kilnd.address()});
  EXPECT_EQ(none.status, 1);
  EXPECT_TRUE(Contains(none.err, "answered UNAUTHENTICATED: this kilnd requires a token"))
      << none.err;
  Result bad = kiln({"check", f, "--server", kilnd.address(), "--token-file", wrong});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(Contains(bad.err, "the request's token is not this kilnd's")) << bad.err;
  Result good = kiln({"check", f, "--server", kilnd.address(), "--token-file", token});
  EXPECT_EQ(good.status, 0) << good.err;
  EXPECT_TRUE(Contains(good.out, "ok  "));
  std::remove(token.c_str());
  std::remove(wrong.c_str());
}

TEST(CliRemote, TlsServesClientsThatTrustItsCaAndRefusesPlaintext) {
  kiln::testing::TestCerts certs;
  ASSERT_TRUE(certs.made) << certs.log();
  kiln::testing::KilndProcess kilnd(
      KILND_BINARY, {"--tls-cert", certs("server.pem"), "--tls-key", certs("server.key")});
  std::string f = examples().front();
  Result tls = kiln({"check", f, "--server", kilnd.address(), "--tls-ca", certs("ca.pem")});
  EXPECT_EQ(tls.status, 0) << tls.err;
  Result plain = kiln({"check", f, "--server", kilnd.address()});
  EXPECT_EQ(plain.status, 1);
  EXPECT_TRUE(Contains(plain.err, "kiln: cannot reach kilnd at " + kilnd.address())) << plain.err;
}

TEST(CliRemote, TlsWithClientCertificatesRefusesAClientWithout) {
  kiln::testing::TestCerts certs;
  ASSERT_TRUE(certs.made) << certs.log();
  kiln::testing::KilndProcess kilnd(
      KILND_BINARY, {"--tls-cert", certs("server.pem"), "--tls-key", certs("server.key"),
                     "--tls-client-ca", certs("ca.pem")});
  std::string f = examples().front();
  std::vector<std::string> base = {"check",         f,          "--server",
                                   kilnd.address(), "--tls-ca", certs("ca.pem")};
  Result without = kiln(base);
  EXPECT_EQ(without.status, 1);
  EXPECT_TRUE(Contains(without.err, "kiln: cannot reach kilnd at")) << without.err;
  std::vector<std::string> with = base;
  for (const char* a : {"--tls-cert", "client.pem", "--tls-key", "client.key"})
    with.push_back(std::string(a).starts_with("--") ? a : certs(a));
  Result r = kiln(with);
  EXPECT_EQ(r.status, 0) << r.err;
}

}  // namespace

namespace {

namespace fs = std::filesystem;
using kiln::HostBuffer;
namespace ir = kiln::ir;

// --input and --save-outputs: A from an .npy file, C written to one, and C is A * B.
TEST(CliNpy, AnInputFromNpyAndTheOutputsSavedAsNpy) {
  fs::path dir = fs::path(testing::TempDir()) / ("kiln_npy_" + std::to_string(getpid()));
  fs::create_directories(dir);
  HostBuffer a(ir::DType::F32, {2, 3});
  for (int64_t k = 0; k < 6; ++k) a.set_f(k, static_cast<double>(k + 1));
  kiln::write_npy(a, (dir / "a.npy").string());
  std::string src = (dir / "mm.kiln").string();
  {
    std::ofstream f(src);
    f << "func mm {\n  param M = 2, N = 2, K = 3;\n  input A : f32[M, K];\n  input B : f32[K, N];\n"
         "  output C : f32[M, N];\n  compute C(i, j) in 0 <= i < M, 0 <= j < N:\n"
         "    C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];\n}\n";
  }
  HostBuffer b(ir::DType::F32, {3, 2});
  for (int64_t k = 0; k < 6; ++k) b.set_f(k, k % 2 ? 1.0 : 0.0);  // column 1 sums A's rows
  kiln::write_npy(b, (dir / "b.npy").string());
  Result r = kiln({"run", src, "--input", "A=" + (dir / "a.npy").string(), "--input",
                   "B=" + (dir / "b.npy").string(), "--save-outputs", dir.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  HostBuffer c = kiln::read_npy((dir / "C.npy").string());
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(c.get_f(0), 0);
  EXPECT_EQ(c.get_f(1), 6);   // 1 + 2 + 3
  EXPECT_EQ(c.get_f(3), 15);  // 4 + 5 + 6
  fs::remove_all(dir);
}

TEST(CliNpy, AnInputThatIsNotAnNpyFileIsAnError) {
  Result r = kiln({"run", data("two_funcs.kiln"), "--input", "A=" + data("two_funcs.kiln")});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "not a .npy kiln reads: no .npy magic")) << r.err;
  r = kiln({"run", data("two_funcs.kiln"), "--input", "A"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Contains(r.err, "--input 'A': expected NAME=FILE.npy")) << r.err;
}

TEST(CliModels, CompileMakesAGraphOneArtifactWithItsWeightsAndItsJson) {
  fs::path dir = fs::path(testing::TempDir()) / ("kiln_model_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string so = (dir / "block.so").string();
  Result r = kiln({"compile", std::string(KILN_SOURCE_DIR) + "/examples/conv_bn_relu.kiln",
                   "--graph", "block", "-o", so});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok  graph block: " + so + ", " + (dir / "block.weights").string() +
                                  " and " + so + ".json"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "1 calls, 1 kernel")) << r.out;  // batch norm and relu fused
  EXPECT_TRUE(fs::exists(dir / "block.weights"));
  std::ifstream json(so + ".json");
  std::string meta((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(Contains(meta, R"("kind":"model","name":"block")")) << meta;
  EXPECT_TRUE(Contains(meta, R"("outputs":[{"name":"r","dtype":"f32","shape":[1,32,14,14]}])"))
      << meta;

  // -o names one file: a file with funcs and a graph, and no --graph, is refused.
  r = kiln({"compile", std::string(KILN_SOURCE_DIR) + "/examples/conv_bn_relu.kiln", "-o", so});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, "choose one with --func or --graph")) << r.err;
  fs::remove_all(dir);
}

TEST(CliModels, AFileThatIsNotAModelIsAnImportError) {
  fs::path p = fs::path(testing::TempDir()) / ("kiln_bad_" + std::to_string(getpid()) + ".onnx");
  {
    std::ofstream f(p);
    f << "not a model";
  }
  Result r = kiln({"check", p.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(Contains(r.err, p.string() + ": import error: not an ONNX model")) << r.err;
  fs::remove(p);
}

}  // namespace
