// The pass registry and the PassManager: which passes run under a PassContext, in what order.
#include <fmt/format.h>

#include <chrono>
#include <ostream>
#include <type_traits>

#include "kiln/analysis.h"
#include "kiln/passes.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/graph_passes.h"
#include "kiln/passes/licm.h"
#include "kiln/passes/simplify.h"

namespace kiln::passes {

const std::vector<PassInfo>& registry() {
  static const std::vector<PassInfo> all = {
      {"simplify",
       1,
       {},
       "fold constants, apply identities, divide out known loop ranges, drop dead code",
       [](const ir::Stmt& s, const PassContext&) { return simplify(s); }},
      {"licm",
       2,
       {"simplify"},
       "normalize (rank-based reassociation, condCollapse, ifconcat), then hoist invariant "
       "expressions, statements and if-conditions out of loops",
       [](const ir::Stmt& s, const PassContext& ctx) { return licm(normalize(s), ctx.licm()); }},
      {"cse",
       2,
       {},
       "share repeated pure computations through lets, operands normalized",
       [](const ir::Stmt& s, const PassContext& ctx) { return cse(s, ctx.cse()); }},
  };
  return all;
}

const std::vector<GraphPassInfo>& graph_registry() {
  static const std::vector<GraphPassInfo> all = {
      {"fold_constants",
       2,
       {},
       "run every operator whose inputs are all constants at compile time (with the JIT); its "
       "results become constants",
       [](const ir::Graph& g, const PassContext& ctx) { return fold_constants(g, ctx); }},
      {"eliminate_common_operators",
       2,
       {},
       "share the results of calls of the same algorithm on the same arguments, and of equal "
       "constants",
       [](const ir::Graph& g, const PassContext&) { return eliminate_common_operators(g); }},
      {"remove_unused_operators",
       1,
       {},
       "drop the calls and constants no graph output depends on",
       [](const ir::Graph& g, const PassContext&) { return remove_unused_operators(g); }},
      {"fuse_elementwise",
       2,
       {"remove_unused_operators"},
       "fuse elementwise consumers into their producers as epilogues, inside the producer's "
       "loops where the dependences allow",
       [](const ir::Graph& g, const PassContext& ctx) { return fuse_elementwise(g, ctx); }},
      {"sketch_operators",
       2,
       {},
       "give each operator without a schedule the first sketch kiln derives from its "
       "algorithm (a CPU target's tiles, parallel loop and vectors; knobs a model's tuning "
       "searches)",
       [](const ir::Graph& g, const PassContext& ctx) { return sketch_operators(g, ctx); }},
  };
  return all;
}

namespace {

template <typename Info>
const Info* find_in(const std::vector<Info>& reg, const std::string& name) {
  for (const Info& p : reg) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const PassInfo* find_pass(const std::string& name) { return find_in(registry(), name); }

// A name is known when it names a loop pass or a graph pass: one context serves both.
void check_names(const std::set<std::string>& names, const char* what, bool allow_all) {
  for (const std::string& n : names) {
    if ((allow_all && n == "all") || find_pass(n) != nullptr ||
        find_in(graph_registry(), n) != nullptr)
      continue;
    std::string known;
    for (const PassInfo& p : registry()) known += (known.empty() ? "" : ", ") + p.name;
    for (const GraphPassInfo& p : graph_registry()) known += ", " + p.name;
    throw CompileError(ErrorStage::Passes, {},
                       fmt::format("unknown pass '{}' in {} (known passes: {})", n, what, known));
  }
}

template <typename Info>
std::vector<std::string> select(const std::vector<Info>& reg, const PassContext& ctx) {
  const std::set<std::string>& required = ctx.options.required;
  const std::set<std::string>& disabled = ctx.options.disabled;
  check_names(required, "required passes", false);
  check_names(disabled, "disabled passes", false);
  // A pass runs when its level allows or it is required; what it requires
  // runs with it; a disabled pass never runs. Iterate to the fixed point,
  // since requirements may chain.
  std::set<std::string> enabled;
  for (const Info& p : reg) {
    if (p.opt_level <= ctx.opt_level || required.count(p.name) != 0) enabled.insert(p.name);
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (const Info& p : reg) {
      if (enabled.count(p.name) == 0 || disabled.count(p.name) != 0) continue;
      for (const std::string& r : p.prerequisites) grew = enabled.insert(r).second || grew;
    }
  }
  std::vector<std::string> out;
  for (const Info& p : reg) {
    if (enabled.count(p.name) != 0 && disabled.count(p.name) == 0) out.push_back(p.name);
  }
  return out;
}

}  // namespace

std::vector<std::string> pipeline(const PassContext& ctx) { return select(registry(), ctx); }

std::vector<std::string> graph_pipeline(const PassContext& ctx) {
  return select(graph_registry(), ctx);
}

// Runs one pass of either kind and tells the instrument what it left.
template <typename IR, typename Run>
void run_instrumented(const std::string& name, IR& ir, const PassContext& ctx, Run&& run) {
  auto start = std::chrono::steady_clock::now();
  run(ir);
  std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
  if (!ctx.instrument) return;
  PassEvent e{.pass = name, .ms = took.count()};
  if constexpr (std::is_same_v<IR, ir::Graph>) {
    e.graph = &ir;
  } else {
    e.func = &ir;
  }
  ctx.instrument(e);
}

ir::Graph run_graph_pipeline(const ir::Graph& g, const PassContext& ctx) {
  ir::Graph out = g;
  for (const std::string& name : graph_pipeline(ctx)) {
    const GraphPassInfo& p = *find_in(graph_registry(), name);
    run_instrumented(name, out, ctx, [&](ir::Graph& graph) { graph = p.run(graph, ctx); });
  }
  return out;
}

// Every variable a pass leaves is bound where it is used: by a loop or a let
// around it, or as one of f's run-time params. A pass that moves a use out of
// its binder's scope (LICM once hoisted an `if` on a loop's own variable out
// of that loop) is caught here, naming the pass, instead of miscompiling.
// `pass` is empty for the pipeline's input.
void check_bound(const ir::LoweredFunc& f, const std::string& pass) {
  std::set<std::string> params(f.params.begin(), f.params.end());
  for (const std::string& name : ir::free_vars(f.body)) {
    if (params.count(name) != 0) continue;
    if (pass.empty()) {
      throw CompileError(
          ErrorStage::Passes, {},
          fmt::format("the loops of {} use '{}' where nothing binds it", f.name, name));
    }
    throw CompileError(ErrorStage::Passes, {},
                       fmt::format("pass {} left '{}' unbound in {} (a bug in kiln; please "
                                   "report it, and --disable-pass {} avoids it)",
                                   pass, name, f.name, pass));
  }
}

ir::LoweredFunc run_pipeline(const ir::LoweredFunc& f, const PassContext& ctx) {
  ir::LoweredFunc out = f;
  check_bound(out, "");
  StageTimer timer(ErrorStage::Passes, ctx.limits);
  for (const std::string& name : pipeline(ctx)) {
    const PassInfo& p = *find_pass(name);
    run_instrumented(name, out, ctx,
                     [&](ir::LoweredFunc& func) { func.body = p.run(func.body, ctx); });
    check_bound(out, name);
    timer.check(f.where, "after pass " + name + " on " + f.name);
  }
  return out;
}

PassInstrument print_and_time(std::set<std::string> print_after, bool time, std::ostream& log) {
  check_names(print_after, "print-after", true);
  return [print_after = std::move(print_after), time, &log](const PassEvent& e) {
    std::string pass(e.pass);
    bool print = print_after.count("all") != 0 || print_after.count(pass) != 0;
    if (e.func == nullptr && e.graph == nullptr) {
      if (print) log << "// " << pass << ": " << e.remark << "\n";
      return;
    }
    if (time) log << fmt::format("pass {}: {:.2f} ms\n", pass, e.ms);
    if (!print) return;
    std::string text = e.graph != nullptr ? ir::to_string(*e.graph) : ir::to_string(e.func->body);
    if (text.empty() || text.back() != '\n') text += '\n';
    log << "// after " << pass << "\n" << text;
  };
}

LicmOptions licm_defaults(const Target& t) {
  LicmOptions o;
  o.gpu = t.is_gpu();
  o.unrolled_serial_loops = !o.gpu;
  return o;
}

CseOptions cse_defaults(const Target& t) {
  CseOptions o;
  if (!t.is_gpu()) o.small_loop = LicmOptions().small_loop;
  return o;
}

LicmOptions PassContext::licm() const { return options.licm.value_or(licm_defaults(target)); }

CseOptions PassContext::cse() const { return options.cse.value_or(cse_defaults(target)); }

}  // namespace kiln::passes
