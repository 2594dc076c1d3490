// Optimization passes on the loop IR and the PassManager that runs them (DESIGN.md section 4).
// Each pass is a pure function from loop IR to loop IR; its own header in
// compiler/passes/ says what it does and why.
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "kiln/interp.h"
#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::passes {

// What the passes are allowed and asked to do, as Relay's PassContext.
struct PassContext {
  int opt_level = 2;                  // 0..3: a pass runs when its level <= opt_level
  std::set<std::string> required;     // run even above opt_level
  std::set<std::string> disabled;     // never run (wins over required)
  std::string target_kind = "cpu";    // "cpu" or "gpu": cost models differ (LICM)
  std::set<std::string> print_after;  // print the IR after these passes ("all" = every pass)
  bool time_passes = false;           // report each pass's time
  std::ostream* log = nullptr;        // where printing and timing go (null: nowhere)
  // How fold_constants runs an operator at compile time: `b` holds op's
  // params and its input and output buffers. kiln passes the JIT; unset, the
  // reference interpreter runs it.
  std::function<void(const ir::Func& op, interp::Bindings& b)> evaluate;
};

struct PassInfo {
  std::string name;   // "simplify", "cse", "licm", ...
  int opt_level = 1;  // the lowest level it runs at
  // Passes that must run before it (in the pipeline). Not `requires`: that is
  // a keyword in C++20.
  std::vector<std::string> prerequisites;
  std::string description;  // one line for `kiln passes`
  std::function<ir::Stmt(const ir::Stmt&, const PassContext&)> run;
};

// Every pass kiln has, in pipeline order.
const std::vector<PassInfo>& registry();

// Runs the pipeline on f: the registered passes in order, each when it is
// enabled by ctx (opt level, required, disabled; a pass's requirements run
// when it does). Prints and times as ctx asks. Throws CompileError (stage
// "passes") for an unknown pass name in ctx.
ir::LoweredFunc run_pipeline(const ir::LoweredFunc& f, const PassContext& ctx);

// The names of the passes run_pipeline would run under ctx, in order.
std::vector<std::string> pipeline(const PassContext& ctx);

// ---------------------------------------------------------------------------
// Graph passes: on a graph of operators, before each operator is scheduled.
// They share the PassContext and its names with the loop passes (one
// --disable-pass, --print-after, ... for both).

struct GraphPassInfo {
  std::string name;  // "fold_constants", "eliminate_common_operators", ...
  int opt_level = 1;
  std::vector<std::string> prerequisites;
  std::string description;
  std::function<ir::Graph(const ir::Graph&, const PassContext&)> run;
};

// Every graph pass, in pipeline order.
const std::vector<GraphPassInfo>& graph_registry();

// Runs the graph passes ctx enables, in order, printing the graph after those
// in ctx.print_after. Throws CompileError (stage "passes") for an unknown
// pass name in ctx, and whatever a pass throws (fold_constants runs code).
ir::Graph run_graph_pipeline(const ir::Graph& g, const PassContext& ctx);

// The names of the graph passes run_graph_pipeline would run under ctx.
std::vector<std::string> graph_pipeline(const PassContext& ctx);

}  // namespace kiln::passes
