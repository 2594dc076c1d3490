// The pass registry and the PassManager: which passes run under a PassContext, in what order.
#include <fmt/format.h>

#include <chrono>

#include "cse.h"
#include "graph_passes.h"
#include "kiln/passes.h"
#include "licm.h"
#include "simplify.h"

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
       [](const ir::Stmt& s, const PassContext& ctx) {
         LicmOptions o;
         o.gpu = ctx.target_kind == "gpu";
         o.unrolled_serial_loops = !o.gpu;
         return licm(normalize(s), o);
       }},
      {"cse",
       2,
       {},
       "share repeated pure computations through lets, operands normalized",
       [](const ir::Stmt& s, const PassContext& ctx) {
         CseOptions o;
         if (ctx.target_kind != "gpu") o.small_loop = LicmOptions().small_loop;
         return cse(s, o);
       }},
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
    throw CompileError("passes", {},
                       fmt::format("unknown pass '{}' in {} (known passes: {})", n, what, known));
  }
}

template <typename Info>
std::vector<std::string> select(const std::vector<Info>& reg, const PassContext& ctx) {
  check_names(ctx.required, "required passes", false);
  check_names(ctx.disabled, "disabled passes", false);
  check_names(ctx.print_after, "print-after", true);
  // A pass runs when its level allows or it is required; what it requires
  // runs with it; a disabled pass never runs. Iterate to the fixed point,
  // since requirements may chain.
  std::set<std::string> enabled;
  for (const Info& p : reg) {
    if (p.opt_level <= ctx.opt_level || ctx.required.count(p.name) != 0) enabled.insert(p.name);
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (const Info& p : reg) {
      if (enabled.count(p.name) == 0 || ctx.disabled.count(p.name) != 0) continue;
      for (const std::string& r : p.prerequisites) grew = enabled.insert(r).second || grew;
    }
  }
  std::vector<std::string> out;
  for (const Info& p : reg) {
    if (enabled.count(p.name) != 0 && ctx.disabled.count(p.name) == 0) out.push_back(p.name);
  }
  return out;
}

}  // namespace

std::vector<std::string> pipeline(const PassContext& ctx) { return select(registry(), ctx); }

std::vector<std::string> graph_pipeline(const PassContext& ctx) {
  return select(graph_registry(), ctx);
}

ir::Graph run_graph_pipeline(const ir::Graph& g, const PassContext& ctx) {
  ir::Graph out = g;
  bool print_all = ctx.print_after.count("all") != 0;
  for (const std::string& name : graph_pipeline(ctx)) {
    const GraphPassInfo& p = *find_in(graph_registry(), name);
    auto start = std::chrono::steady_clock::now();
    out = p.run(out, ctx);
    std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    if (ctx.log == nullptr) continue;
    if (ctx.time_passes) *ctx.log << fmt::format("pass {}: {:.2f} ms\n", name, took.count());
    if (print_all || ctx.print_after.count(name) != 0) {
      *ctx.log << "// after " << name << "\n" << ir::to_string(out);
    }
  }
  return out;
}

ir::LoweredFunc run_pipeline(const ir::LoweredFunc& f, const PassContext& ctx) {
  ir::LoweredFunc out = f;
  bool print_all = ctx.print_after.count("all") != 0;
  for (const std::string& name : pipeline(ctx)) {
    const PassInfo& p = *find_pass(name);
    auto start = std::chrono::steady_clock::now();
    out.body = p.run(out.body, ctx);
    std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    if (ctx.log == nullptr) continue;
    if (ctx.time_passes) *ctx.log << fmt::format("pass {}: {:.2f} ms\n", name, took.count());
    if (print_all || ctx.print_after.count(name) != 0) {
      std::string text = ir::to_string(out.body);
      if (text.empty() || text.back() != '\n') text += '\n';
      *ctx.log << "// after " << name << "\n" << text;
    }
  }
  return out;
}

}  // namespace kiln::passes
