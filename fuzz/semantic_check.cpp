// The semantic fuzzer's oracle: the reference interpreter against the loop
// interpreter and the compiled kernel.
#include "semantic_check.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "kiln/interp.h"

namespace kiln::fuzz {

Outcome check_program(const Program& p, uint64_t seed) {
  Outcome o;
  ir::Module mod;
  CompileResult res;
  try {
    mod = frontend::parse_module(p.source, "fuzz.kiln");
    CompileRequest r{.func = mod.funcs.at(0), .output = CompileOutput::Kernel};
    r.options.opt_level = p.opt_level;
    res = compile(r);
  } catch (const CompileError& e) {
    o.detail = e.what();
    return o;
  }
  Bindings inputs = interp::random_bindings(res.func, interp::param_values(res.func), seed);
  // Each run on its own copy; the error it ended with, if any.
  auto attempt = [&](const std::function<void(Bindings&)>& run,
                     Bindings& out) -> std::optional<std::string> {
    out = inputs;
    try {
      run(out);
      return std::nullopt;
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
  };
  Bindings ref, loops, kernel;
  auto ref_error = attempt([&](Bindings& b) { interp::run_reference(res.func, b); }, ref);
  auto loops_error = attempt([&](Bindings& b) { interp::run_loops(res.optimized, b); }, loops);
  auto kernel_error = attempt([&](Bindings& b) { res.kernel->run(b); }, kernel);
  o.kind = Outcome::Kind::Agreed;
  if (ref_error || loops_error || kernel_error) {
    if (ref_error && loops_error && kernel_error) {
      o.runs_failed = true;
      o.detail = *kernel_error;
      return o;
    }
    o.kind = Outcome::Kind::Disagreed;
    o.detail = "reference: " + ref_error.value_or("ok") + "\nloops: " + loops_error.value_or("ok") +
               "\nkernel: " + kernel_error.value_or("ok");
    return o;
  }
  for (const auto& [name, actual] : {std::pair<const char*, const Bindings*>{"loops", &loops},
                                     std::pair<const char*, const Bindings*>{"kernel", &kernel}}) {
    interp::Mismatch mm = interp::compare_outputs(res.func, ref, *actual);
    if (!mm.ok) {
      o.kind = Outcome::Kind::Disagreed;
      o.detail = std::string(name) + " differs from the reference: " + mm.describe();
      return o;
    }
  }
  return o;
}

void report_disagreement(const Program& p, const Outcome& o) {
  std::fprintf(stderr, "kiln semantic fuzz: disagreement at -O%d\n%s\n--- program ---\n%s",
               p.opt_level, o.detail.c_str(), p.source.c_str());
  std::abort();
}

}  // namespace kiln::fuzz
