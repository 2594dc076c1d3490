// The aarch64 path end to end: every example, compiled by kiln into a shared object for
// aarch64-linux-gnu and run under qemu-aarch64 by a small cross-built C loader (dlopen, the
// runtime, the packed ABI), computes what the reference interpreter computes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "example_cases.h"
#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "programs.h"
#include "scratch_dir.h"

extern char** environ;

namespace kiln::testing {
namespace {

// The loader must find the cross libc that matches qemu's loader: with
// libc6:arm64 also installed (libprotobuf-c-dev:arm64 pulls it in) it would
// otherwise mix the two and hang in its first pthread_create.
const std::string kCrossLibraryPath =
    std::string("LD_LIBRARY_PATH=") + KILN_AARCH64_SYSROOT + "/lib";

// Why the test cannot run here, or "" when it can.
std::string missing_tools() {
  std::string loader = KILN_AARCH64_LOADER, qemu = KILN_QEMU_AARCH64;
  if (qemu.empty() || !std::filesystem::exists(qemu))
    return "qemu-aarch64 not found (Debian package qemu-user; deploy/install-deps.sh installs it)";
  if (!std::filesystem::exists(std::string(KILN_AARCH64_SYSROOT) + "/lib/ld-linux-aarch64.so.1"))
    return std::string("the aarch64 C library is not in ") + KILN_AARCH64_SYSROOT +
           " (Debian package libc6-dev-arm64-cross)";
  if (loader.empty() || !std::filesystem::exists(loader))
    return "the aarch64 loader was not built: aarch64-linux-gnu-gcc not found (Debian package "
           "gcc-aarch64-linux-gnu)";
  return "";
}

using Scratch = ScratchDir;

struct Exit {
  int status = -1;  // exit status; 128 + signal when killed
  bool timed_out = false;
  std::string err;
};

// Runs argv with extra environment variables, stderr captured, killed after `limit`.
Exit run(const std::vector<std::string>& argv_s, const std::vector<std::string>& env_extra,
         const std::string& err_file, std::chrono::seconds limit) {
  std::vector<char*> argv, envp;
  std::vector<std::string> args = argv_s, env = env_extra;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = 0;
  Exit r;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    r.err = "cannot start " + argv_s[0] + ": " + std::strerror(rc);
    return r;
  }
  auto deadline = std::chrono::steady_clock::now() + limit;
  int wstatus = 0;
  while (waitpid(pid, &wstatus, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);  // qemu passes SIGTERM to the guest, which may ignore it
      waitpid(pid, &wstatus, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// Runs artifact `a` under qemu on `inputs` with `threads` threads in the runtime's pool,
// its files in `dir`: outputs land in dir/NAME.out.
Exit run_on_aarch64(const codegen::Artifact& a, const Bindings& inputs, int threads,
                    const Scratch& dir) {
  write_bytes(dir.file("kernel.so"), a.code.data(), a.code.size());
  // The job: the artifact's argument list with this run's values and files.
  std::ostringstream job;
  for (const codegen::ArtifactArg& arg : a.args) {
    if (arg.kind == codegen::ArtifactArg::Kind::Param) {
      job << "param " << arg.name << " " << inputs.params.at(arg.name) << "\n";
      continue;
    }
    const HostBuffer& h = inputs.buffers.at(arg.name);
    size_t bytes = static_cast<size_t>(h.size()) * ir::dtype_bytes(h.dtype());
    write_bytes(dir.file(arg.name + ".in"), h.data(), bytes);
    job << "buffer " << arg.name << " " << bytes << " " << dir.file(arg.name + ".in") << " "
        << (arg.role == ir::BufKind::Output ? dir.file(arg.name + ".out") : "-") << "\n";
  }
  std::ofstream(dir.file("job.txt")) << job.str();
  return run({KILN_QEMU_AARCH64, "-L", KILN_AARCH64_SYSROOT, "-E", kCrossLibraryPath,
              KILN_AARCH64_LOADER, dir.file("kernel.so"), a.entry, dir.file("job.txt")},
             {"KILN_NUM_THREADS=" + std::to_string(threads)}, dir.file("stderr.txt"),
             std::chrono::seconds(60));
}

codegen::Artifact aarch64_artifact(const ir::Func& f, const std::string& cpu = "") {
  CompileRequest r{.func = f, .output = CompileOutput::Artifact};
  r.options.target = Target{"aarch64-linux-gnu", cpu, ""};
  return *compile(r).artifact;
}

// Compiles f for aarch64, runs it under qemu on `inputs` with `threads` threads in the
// runtime's pool, and compares the outputs with the reference interpreter's.
::testing::AssertionResult matches_reference_on_aarch64(const ir::Func& f, const Bindings& inputs,
                                                        int threads, const std::string& cpu = "") {
  Scratch dir;
  if (!dir.ok()) return ::testing::AssertionFailure() << "no temporary folder";
  codegen::Artifact a = aarch64_artifact(f, cpu);
  Exit e = run_on_aarch64(a, inputs, threads, dir);
  if (e.timed_out)
    return ::testing::AssertionFailure() << "the loader did not finish within 60 s under qemu";
  if (e.status != 0)
    return ::testing::AssertionFailure() << "the loader exited with " << e.status << ": " << e.err;
  Bindings actual = inputs, expected = inputs;
  for (const codegen::ArtifactArg& arg : a.args) {
    if (arg.kind != codegen::ArtifactArg::Kind::Buffer || arg.role != ir::BufKind::Output) continue;
    HostBuffer& h = actual.buffers.at(arg.name);
    std::ifstream in(dir.file(arg.name + ".out"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() != static_cast<size_t>(h.size()) * ir::dtype_bytes(h.dtype()))
      return ::testing::AssertionFailure()
             << "the loader wrote " << bytes.size() << " bytes of " << arg.name;
    std::memcpy(h.data(), bytes.data(), bytes.size());
  }
  interp::run_reference(f, expected);
  interp::Mismatch mm = interp::compare_outputs(f, expected, actual);
  if (!mm.ok) return ::testing::AssertionFailure() << mm.describe();
  return ::testing::AssertionSuccess();
}

class Aarch64EndToEnd : public ::testing::TestWithParam<ExampleCase> {
 protected:
  void SetUp() override {
    std::string why = missing_tools();
    if (!why.empty()) GTEST_SKIP() << "aarch64 end-to-end test skipped: " << why;
  }
};

// Every schedule of the differential suite on the first sizes, the example's
// own schedule on every size; one thread.
TEST_P(Aarch64EndToEnd, EveryScheduleMatchesTheReference) {
  const ExampleCase& c = GetParam();
  std::string src = read_example(c.example);
  for (const auto& sched : c.schedules) {
    std::string program = sched == "<file>" ? src : with_schedule(src, sched);
    for (size_t p = 0; p < c.params.size(); ++p) {
      if (p > 0 && sched != "<file>") continue;
      SCOPED_TRACE("schedule: " + (sched.empty() ? std::string("(none)") : sched) + ", sizes #" +
                   std::to_string(p));
      ir::Func f = parse_one(program, c.params[p]);
      Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 7);
      EXPECT_TRUE(matches_reference_on_aarch64(f, in, 1));
    }
  }
}

// The example's own schedule compiled for a named CPU.
TEST_P(Aarch64EndToEnd, OwnScheduleForANamedCpu) {
  const ExampleCase& c = GetParam();
  ir::Func f = parse_one(read_example(c.example), c.params.front());
  Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 3);
  EXPECT_TRUE(matches_reference_on_aarch64(f, in, 1, "neoverse-n1"));
}

// Why qemu cannot run a second guest thread here, or "" when it can: the loader is asked
// first, with a time limit, so a broken emulator costs a skip rather than a hung suite.
const std::string& threads_unavailable() {
  static const std::string why = [] {
    Scratch dir;
    Exit e = run({KILN_QEMU_AARCH64, "-L", KILN_AARCH64_SYSROOT, "-E", kCrossLibraryPath,
                  KILN_AARCH64_LOADER, "--probe-threads"},
                 {}, dir.file("probe.txt"), std::chrono::seconds(5));
    if (e.timed_out) return std::string("qemu-aarch64 hangs creating a second thread on this host");
    if (e.status != 0) return "qemu-aarch64 cannot run a second thread: " + e.err;
    return std::string();
  }();
  return why;
}

// The example's own schedule, its parallel loops on the runtime's pool of two threads.
TEST_P(Aarch64EndToEnd, OwnScheduleWithTwoThreads) {
  if (!threads_unavailable().empty())
    GTEST_SKIP() << "two-thread aarch64 run skipped: " << threads_unavailable();
  const ExampleCase& c = GetParam();
  ir::Func f = parse_one(read_example(c.example), c.params.front());
  Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 3);
  EXPECT_TRUE(matches_reference_on_aarch64(f, in, 2));
}

// The kernel's run-time checks hold on aarch64 too: an input that breaks its value spec,
// and a division by zero, end in the check's status (the loader exits 3 and prints it),
// never in a stray access or a signal.
TEST(Aarch64RuntimeChecks, BadInputsAndDivisionByZeroReturnTheCheckStatus) {
  if (!missing_tools().empty()) GTEST_SKIP() << missing_tools();
  Scratch dir;
  ASSERT_TRUE(dir.ok());
  ir::Func seg = parse_one(read_example("segment_sum"));
  Bindings in = interp::random_bindings(seg, interp::param_values(seg, {{"m", 4}}), 3);
  in.buffers.at("offsets").set_i(2, 100000000);
  codegen::Artifact a = aarch64_artifact(seg);
  ASSERT_FALSE(a.checks.empty());
  Exit e = run_on_aarch64(a, in, 1, dir);
  EXPECT_EQ(e.status, 3) << e.err;
  EXPECT_NE(e.err.find("returned error 16"), std::string::npos) << e.err;

  ir::Func div = parse_one(R"(func d {
    param N = 21;
    input a : i32[N];
    input b : i32[N] in [0, 1);
    output y : i32[N];
    compute c(i) in 0 <= i < N: y[i] = a[i] / b[i];
    schedule { c.split(i, 4, io, ii); c.tag(ii, vectorize); }
  })");
  Bindings zero = interp::random_bindings(div, interp::param_values(div), 3);
  codegen::Artifact d = aarch64_artifact(div);
  ASSERT_EQ(d.checks.size(), 1u);
  EXPECT_EQ(d.checks[0].kind, ir::RuntimeCheck::Kind::Arithmetic);
  e = run_on_aarch64(d, zero, 1, dir);
  EXPECT_EQ(e.status, 3) << e.err;
  EXPECT_NE(e.err.find("returned error 16"), std::string::npos) << e.err;
}

INSTANTIATE_TEST_SUITE_P(Examples, Aarch64EndToEnd, ::testing::ValuesIn(example_cases()),
                         [](const ::testing::TestParamInfo<ExampleCase>& info) {
                           return info.param.example;
                         });

}  // namespace
}  // namespace kiln::testing
