// A whole graph as one artifact: the buffers planned, then the shared object and its weights,
// run by examples/c/run_model (a C program linking only libc and kiln's runtime) here and,
// cross-compiled, under qemu-aarch64; outputs against the reference interpreter, and every
// way a model can fail to load.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "kiln/buffers.h"
#include "kiln/compile.h"
#include "kiln/digest.h"
#include "kiln/frontend.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "programs.h"
#include "scratch_dir.h"

namespace kiln {
namespace {

// Three funcs and a graph that has what a plan must handle: a chain whose intermediates can
// share memory, a call with two results, an output that is also read by a later call, an
// output that is an input (as an imported Identity makes), and a constant.
constexpr const char* kModel = R"(
func scale {
  param N, K;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * f32(K);
}
func split {
  param N;
  input x : f32[N];
  output lo : f32[N];
  output hi : f32[N];
  compute a(i) in 0 <= i < N: lo[i] = min(x[i], 0.0);
  compute b(i) in 0 <= i < N: hi[i] = max(x[i], 0.0);
}
func add2 {
  param N;
  input x : f32[N];
  input z : f32[N];
  output y : f32[N];
  compute t(i) in 0 <= i < N: y[i] = x[i] + z[i];
}
graph net {
  input x : f32[1000];
  input unused : f32[4];
  const w : f32[1000] = random(7, -1.0, 1.0);
  a = add2(x, w);
  b = scale(a, N = 1000, K = 3);
  lo, hi = split(b);
  c = scale(lo, N = 1000, K = 5);
  d = add2(c, hi);
  e = scale(d, N = 1000, K = 7);
  f = add2(e, d);
  output f, d, unused;
}
)";

ir::Graph model_graph() {
  ir::Module m = frontend::parse_module(kModel, "net.kiln");
  return m.graphs.at(0);
}

// -O0: the graph passes leave the calls alone, so that the plan has intermediates to share.
CompileOptions unfused() {
  CompileOptions o;
  o.opt_level = 0;
  return o;
}

TEST(MemoryPlan, IntermediatesShareTheArenaAndNeverOverlapWhileAlive) {
  ir::Graph g = model_graph();
  graph::MemoryPlan plan = graph::plan_memory(g);
  // a, b, lo, hi, c, e live in the arena (d and f are outputs).
  std::map<std::string, std::pair<size_t, size_t>> life;
  for (size_t k = 0; k < g.calls.size(); ++k) {
    for (const std::string& r : g.calls[k].results) life.emplace(r, std::make_pair(k, k));
    for (const std::string& a : g.calls[k].args) {
      auto it = life.find(a);
      if (it != life.end()) it->second.second = k;
    }
  }
  std::vector<std::string> arena;
  for (const auto& [name, p] : plan.places) {
    if (p.kind == graph::TensorPlace::Kind::Arena) {
      arena.push_back(name);
      EXPECT_EQ(p.offset % 64, 0u) << name;
      EXPECT_EQ(p.bytes, 4000u) << name;
      EXPECT_LE(p.offset + p.bytes, plan.arena_bytes) << name;
    }
  }
  EXPECT_EQ(std::set<std::string>(arena.begin(), arena.end()),
            (std::set<std::string>{"a", "b", "lo", "hi", "c", "e"}));
  for (const std::string& s : arena) {
    for (const std::string& t : arena) {
      if (s >= t) continue;
      const graph::TensorPlace &p = plan.places.at(s), &q = plan.places.at(t);
      bool together =
          life.at(s).first <= life.at(t).second && life.at(t).first <= life.at(s).second;
      bool overlap = p.offset < q.offset + q.bytes && q.offset < p.offset + p.bytes;
      EXPECT_FALSE(together && overlap) << s << " and " << t << " share memory while both live";
    }
  }
  EXPECT_EQ(plan.unshared_bytes, 6u * 4032u);
  // At most three are alive at once (b, lo and hi; lo, hi and c).
  EXPECT_LE(plan.arena_bytes, 3u * 4032u);
  EXPECT_EQ(plan.places.at("d").kind, graph::TensorPlace::Kind::Output);
  EXPECT_EQ(plan.places.at("d").index, 1u);
  EXPECT_EQ(plan.places.at("f").index, 0u);
  EXPECT_EQ(plan.places.at("w").kind, graph::TensorPlace::Kind::Const);
  ASSERT_EQ(plan.copies.size(), 1u);  // the input `unused`
  EXPECT_EQ(plan.copies[0], std::make_pair(size_t{2}, std::string("unused")));
}

using Scratch = testing::ScratchDir;

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Ran {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs a shell command line, its output captured.
Ran run(const std::string& command) {
  Ran r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

// The artifact of model_graph() for `target` in `dir` as net.so and net.weights, its inputs
// as x.npy and unused.npy; returns the reference interpreter's outputs for them.
Tensors prepare(const Scratch& dir, const Target& target, graph::ModelArtifact* out = nullptr) {
  ir::Graph g = model_graph();
  CompileOptions o = unfused();
  o.target = target;
  graph::ModelArtifact a = graph::compile_model(g, o);
  write_bytes(dir.file("net.so"), a.code);
  write_bytes(dir.file("net.weights"), a.weights);
  Tensors inputs = interp::random_graph_inputs(g, 5);
  write_npy(inputs.at("x"), dir.file("x.npy"));
  write_npy(inputs.at("unused"), dir.file("unused.npy"));
  if (out != nullptr) *out = a;
  return interp::run_reference(g, inputs);
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// run_model's command line for the model in `dir`, before its options.
std::string run_model_command(const Scratch& dir, const std::string& run_model,
                              const std::string& prefix = "") {
  return prefix + quoted(run_model) + " " + quoted(dir.file("net.so"));
}

void expect_outputs_match(const Scratch& dir, const std::string& command, const Tensors& expected) {
  std::filesystem::create_directories(dir.file("out"));
  Ran r = run(command + " --input x=" + quoted(dir.file("x.npy")) + " --input unused=" +
              quoted(dir.file("unused.npy")) + " --save " + quoted(dir.file("out")));
  ASSERT_EQ(r.status, 0) << r.output;
  // Outputs are saved by name: f.npy, d.npy, unused.npy.
  Tensors got;
  for (const char* name : {"f", "d", "unused"})
    got[name] = read_npy(dir.file(std::string("out/") + name + ".npy"));
  interp::Mismatch mm = interp::compare_buffers({"f", "d", "unused"}, expected, got);
  EXPECT_TRUE(mm.ok) << mm.describe();
  EXPECT_NE(r.output.find("model net: 2 input(s), 3 output(s)"), std::string::npos) << r.output;
}

TEST(ModelArtifact, RunModelComputesWhatTheReferenceComputes) {
  Scratch dir;
  graph::ModelArtifact a;
  Tensors expected = prepare(dir, Target::host(), &a);
  EXPECT_EQ(a.calls, 7u);
  EXPECT_EQ(a.kernels.size(), 5u);  // the scales by 3, 5 and 7, split, and add2 once
  EXPECT_EQ(a.weights.size(), 4000u);
  EXPECT_EQ(a.weights_sha256, sha256_hex(std::string_view(a.weights.data(), a.weights.size())));
  std::string meta = a.metadata_json();
  EXPECT_NE(meta.find(R"("inputs":[{"name":"x","dtype":"f32","shape":[1000]})"), std::string::npos)
      << meta;
  EXPECT_NE(meta.find(R"("weights_sha256":")" + a.weights_sha256), std::string::npos);
  expect_outputs_match(dir, run_model_command(dir, KILN_RUN_MODEL), expected);
}

TEST(ModelArtifact, FusedGraphRunsToo) {
  Scratch dir;
  ir::Graph g = model_graph();
  graph::ModelArtifact a = graph::compile_model(g, {});  // -O3: folded and fused
  EXPECT_LT(a.calls, 7u);
  write_bytes(dir.file("net.so"), a.code);
  write_bytes(dir.file("net.weights"), a.weights);
  Tensors inputs = interp::random_graph_inputs(g, 9);
  write_npy(inputs.at("x"), dir.file("x.npy"));
  write_npy(inputs.at("unused"), dir.file("unused.npy"));
  expect_outputs_match(dir, run_model_command(dir, KILN_RUN_MODEL),
                       interp::run_reference(g, inputs));
}

// A tuned model: an operator's knobs given by its workload (as a model's tuning records give
// them) are the ones its kernel is compiled with, the outputs unchanged; a workload the graph
// does not run changes nothing; a value the knob does not take is refused, naming it.
TEST(ModelArtifact, AnOperatorsKnobsComeFromItsWorkload) {
  constexpr const char* kTiled = R"(
func tiled {
  param N;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 2.0 + 1.0;
  schedule {
    knob T = 4 in [4, 16, 64];
    c.split(i, T, io, ii);
  }
}
graph net {
  input x : f32[1000];
  y = tiled(x, N = 1000);
  output y;
}
)";
  ir::Graph g = frontend::parse_module(kTiled, "tiled.kiln").graphs.at(0);
  CompileOptions base;
  graph::ModelArtifact plain = graph::compile_model(g, base);
  std::string workload =
      workload_hash(ir::apply_overrides(graph::optimize(g, base).calls.at(0).op, {}));

  CompileOptions elsewhere = base;
  elsewhere.workload_knobs["not-a-workload-of-this-graph"] = {{"T", 64}};
  EXPECT_EQ(graph::compile_model(g, elsewhere).code, plain.code);

  CompileOptions tuned = base;
  tuned.workload_knobs[workload] = {{"T", 64}};
  graph::ModelArtifact a = graph::compile_model(g, tuned);
  EXPECT_NE(a.code, plain.code);
  Scratch dir;
  write_bytes(dir.file("net.so"), a.code);
  write_bytes(dir.file("net.weights"), a.weights);
  Tensors inputs = interp::random_graph_inputs(g, 5);
  write_npy(inputs.at("x"), dir.file("x.npy"));
  std::filesystem::create_directories(dir.file("out"));
  Ran r = run(run_model_command(dir, KILN_RUN_MODEL) + " --input x=" + quoted(dir.file("x.npy")) +
              " --save " + quoted(dir.file("out")));
  ASSERT_EQ(r.status, 0) << r.output;
  Tensors got{{"y", read_npy(dir.file("out/y.npy"))}};
  interp::Mismatch mm = interp::compare_buffers({"y"}, interp::run_reference(g, inputs), got);
  EXPECT_TRUE(mm.ok) << mm.describe();

  CompileOptions bad = base;
  bad.workload_knobs[workload] = {{"T", 5}};
  try {
    graph::compile_model(g, bad);
    FAIL() << "T = 5 was taken";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("T"), std::string::npos) << e.what();
  }
}

// Why the aarch64 run cannot happen here, or "".
std::string aarch64_missing() {
  std::string qemu = KILN_QEMU_AARCH64, run_model = KILN_RUN_MODEL_AARCH64;
  if (qemu.empty() || !std::filesystem::exists(qemu))
    return "qemu-aarch64 not found (Debian package qemu-user; deploy/install-deps.sh installs it)";
  if (run_model.empty() || !std::filesystem::exists(run_model))
    return "run_model was not cross-built for aarch64 (gcc-aarch64-linux-gnu and "
           "libc6-dev-arm64-cross; deploy/install-deps.sh installs them)";
  return "";
}

TEST(ModelArtifact, Aarch64ArtifactRunsUnderQemu) {
  std::string why = aarch64_missing();
  if (!why.empty()) GTEST_SKIP() << why;
  Scratch dir;
  Target arm;
  arm.triple = "aarch64-linux-gnu";
  Tensors expected = prepare(dir, arm);
  std::string sysroot = KILN_AARCH64_SYSROOT;
  std::string prefix =
      quoted(KILN_QEMU_AARCH64) + " -L " + sysroot + " -E LD_LIBRARY_PATH=" + sysroot + "/lib ";
  expect_outputs_match(dir, run_model_command(dir, KILN_RUN_MODEL_AARCH64, prefix), expected);
}

TEST(ModelArtifact, WeightsOfAnotherSizeOrContentAreRefused) {
  Scratch dir;
  prepare(dir, Target::host());
  std::string cmd = run_model_command(dir, KILN_RUN_MODEL);
  std::vector<char> w = read_bytes(dir.file("net.weights"));

  write_bytes(dir.file("short.weights"), std::vector<char>(w.begin(), w.end() - 4));
  Ran r = run(cmd + " --weights " + quoted(dir.file("short.weights")));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("are not this model's: it needs 4000 bytes, the file holds fewer"),
            std::string::npos)
      << r.output;

  std::vector<char> changed = w;
  changed[123] ^= 1;
  write_bytes(dir.file("changed.weights"), changed);
  r = run(cmd + " --weights " + quoted(dir.file("changed.weights")));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("their SHA-256 is"), std::string::npos) << r.output;

  std::filesystem::remove(dir.file("net.weights"));  // the one beside net.so
  r = run(cmd);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("cannot open the weights " + dir.file("net.weights")), std::string::npos)
      << r.output;
}

TEST(ModelArtifact, WhatIsNotAModelIsRefused) {
  Scratch dir;
  prepare(dir, Target::host());
  // A single kernel's shared object.
  ir::Module m = frontend::parse_module(kModel, "net.kiln");
  CompileRequest req{.func = ir::apply_overrides(m.funcs.at(0), {{"N", 8}, {"K", 2}}),
                     .overrides = {},
                     .options = {},
                     .output = CompileOutput::Artifact};
  write_bytes(dir.file("kernel.so"), compile(req).artifact->code);
  Ran r = run(quoted(KILN_RUN_MODEL) + " " + quoted(dir.file("kernel.so")));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("is not a kiln model"), std::string::npos) << r.output;

  // A plan of another version: the plan's first line, changed in the shared object.
  std::vector<char> so = read_bytes(dir.file("net.so"));
  std::string text(so.begin(), so.end());
  size_t at = text.find("kiln-model 1\n");
  ASSERT_NE(at, std::string::npos);
  so[at + 11] = '9';
  write_bytes(dir.file("v9.so"), so);
  std::filesystem::copy_file(dir.file("net.weights"), dir.file("v9.weights"));
  r = run(quoted(KILN_RUN_MODEL) + " " + quoted(dir.file("v9.so")));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("line 1: a plan of another version of kiln"), std::string::npos)
      << r.output;

  // Not a shared object at all.
  write_bytes(dir.file("junk.so"), {'j', 'u', 'n', 'k'});
  r = run(quoted(KILN_RUN_MODEL) + " " + quoted(dir.file("junk.so")));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("cannot load the model"), std::string::npos) << r.output;
}

TEST(ModelArtifact, AnInputOfTheWrongShapeIsRefused) {
  Scratch dir;
  prepare(dir, Target::host());
  Ran r =
      run(run_model_command(dir, KILN_RUN_MODEL) + " --input x=" + quoted(dir.file("unused.npy")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("does not hold x f32 (1000,) in C order"), std::string::npos) << r.output;
  r = run(run_model_command(dir, KILN_RUN_MODEL) + " --input nosuch=" + quoted(dir.file("x.npy")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("the model has no such input"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kiln
