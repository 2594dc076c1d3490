// Compile-time benchmark: how long kiln takes from .kiln text to a callable kernel, per stage
// and per part of a stage, for every operator of examples/ and tests/bench/kernels/. No
// baseline: the figure that matters is a tuner's candidates per second.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "kiln/json.h"
#include "kiln/space.h"
#include "kiln/stats.h"

namespace {

using kiln::bench::Options;

const char* const kUsage =
    "usage: bench_compile [--quick] [--repeat R] [--case TEXT]\n"
    "\n"
    "For every func of examples/*.kiln and tests/bench/kernels/*.kiln, parses the file and\n"
    "compiles the func to a callable kernel (the JIT, -O3, this machine) R times in one\n"
    "process, and prints one JSON line with the median milliseconds of the whole (parse to\n"
    "callable), of each stage, and of each part of a stage: model, dependences, bounds,\n"
    "commands, loop ranges, legality, schedule tree, ast, ast to loops, llvm ir, llvm\n"
    "optimize, machine code and link.\n"
    "isl_ms is the sum of the isl parts (model to ast). A func with knobs gets a second\n"
    "line, \"..._warm\": R compiles in the same process, each at another point of its knob\n"
    "space (drawn at random with a fixed seed, knob constraints kept), as a tuner's\n"
    "candidates are. Every line names the CPU. Within a process, an operator's\n"
    "dependences and access-bounds proofs are remembered after its first compilation\n"
    "(the `dependences` and `bounds` parts are then lookups: docs/pipeline.md);\n"
    "first_ms is the line's first compilation, which on the first line found nothing\n"
    "remembered.\n"
    "\n"
    "  --quick      R = 3, and only tests/bench/kernels/gemm.kiln and conv2d.kiln\n"
    "  --repeat R   compiles per line (default 10)\n"
    "  --case TEXT  only funcs whose line name contains TEXT\n";

// The isl parts of a compilation (kiln/timing.h names).
const char* const kIslParts[] = {"model",       "dependences", "bounds",        "commands",
                                 "loop ranges", "legality",    "schedule tree", "ast"};

double median(std::vector<double> v) { return kiln::round_stats(std::move(v)).median; }

// The per-compile figures of one line, in the order they first appeared.
struct Samples {
  std::vector<double> total;
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> stage, part;

  void add(double total_ms, const kiln::CompileResult& r) {
    total.push_back(total_ms);
    std::map<std::string, double> stages, parts;
    for (const kiln::StageTime& t : r.times) stages[t.stage] += t.ms;
    for (const kiln::PartTime& t : r.parts) parts[t.part] += t.ms;
    for (const auto& [name, ms] : stages) stage[name].push_back(ms);
    for (const auto& [name, ms] : parts) {
      if (part[name].empty()) order.push_back(name);
      part[name].push_back(ms);
    }
  }
};

void print_line(const std::string& name, const Samples& s, int errors) {
  kiln::JsonObject line;
  line.str("bench", name);
  kiln::bench::add_host(line);
  line.num("total_ms", median(s.total), 4);
  // The first compilation of the line: on the first line of an operator, the
  // one that found nothing remembered (dependences, bounds proofs).
  line.num("first_ms", s.total.empty() ? 0 : s.total.front(), 4);
  kiln::JsonObject stages, parts;
  for (const auto& [stage, v] : s.stage) stages.num(stage, median(v), 4);
  double isl = 0;
  for (const std::string& part : s.order) {
    double ms = median(s.part.at(part));
    parts.num(part, ms, 4);
    for (const char* p : kIslParts)
      if (part == p) isl += ms;
  }
  line.num("isl_ms", isl, 4);
  line.raw("stages", stages.done()).raw("parts", parts.done());
  line.integer("repeat", static_cast<int64_t>(s.total.size()));
  if (errors > 0) line.integer("compile_errors", errors);
  std::printf("%s\n", line.done().c_str());
  std::fflush(stdout);
}

// Parses `text` and compiles `func` with `overrides` to a kernel; adds its times to `s`.
void compile_once(const std::string& text, const std::string& path, const std::string& func,
                  const kiln::ir::Overrides& overrides, Samples& s) {
  auto start = std::chrono::steady_clock::now();
  kiln::ir::Module m = kiln::frontend::parse_module(text, path);
  kiln::CompileRequest r{.func = *m.find(func), .overrides = overrides};
  r.output = kiln::CompileOutput::Kernel;
  kiln::CompileResult result = kiln::compile(r);
  std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
  s.add(ms.count(), result);
}

// Runs the lines of one func; false when a compile failed.
bool run_func(const Options& opts, const std::string& text, const std::string& path,
              const kiln::ir::Func& f, int repeat) {
  // compile_FILE_FUNC, or compile_FUNC when the file is named for it.
  std::string stem = std::filesystem::path(path).stem().string();
  std::string name = "compile_" + (stem == f.name ? f.name : stem + "_" + f.name);
  if (!opts.filter.empty() && name.find(opts.filter) == std::string::npos) return true;
  Samples cold;
  for (int i = 0; i < repeat; ++i) compile_once(text, path, f.name, {}, cold);
  print_line(name, cold, 0);
  if (f.knobs.empty()) return true;

  // A tuner's candidates: other points of the knob space.
  kiln::tuner::Space space = kiln::tuner::space_of(f);
  std::mt19937_64 rng(1);
  Samples warm;
  int errors = 0;
  for (int i = 0, tries = 0; i < repeat && tries < 100 * repeat; ++tries) {
    kiln::tuner::Config point = space.random_point(rng);
    if (space.broken_constraint(point)) continue;
    kiln::ir::Overrides knobs(point.begin(), point.end());
    try {
      compile_once(text, path, f.name, knobs, warm);
      ++i;
    } catch (const kiln::CompileError&) {
      ++errors;  // an illegal schedule: the tuner rejects it the same way
    }
  }
  if (!warm.total.empty()) print_line(name + "_warm", warm, errors);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts = kiln::bench::parse_options(argc, argv, kUsage);
  int repeat = opts.repeat > 0 ? opts.repeat : opts.quick ? 3 : 10;
  std::vector<std::string> files;
  if (opts.quick) {
    files = {kiln::bench::kernel_path(opts, "gemm.kiln"),
             kiln::bench::kernel_path(opts, "conv2d.kiln")};
  } else {
    for (const char* dir : {KILN_EXAMPLES, KILN_BENCH_KERNELS}) {
      std::vector<std::string> found;
      for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".kiln") found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    }
  }
  bool ok = true;
  for (const std::string& path : files) {
    try {
      std::string text = kiln::frontend::read_source(path);
      kiln::ir::Module m = kiln::frontend::parse_module(text, path);
      for (const kiln::ir::Func& f : m.funcs) ok = run_func(opts, text, path, f, repeat) && ok;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_compile: %s: %s\n", path.c_str(), e.what());
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
