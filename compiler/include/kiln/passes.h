// Optimization passes on the loop IR and the PassManager that runs them (DESIGN.md section 4).
// Each pass is a pure function from loop IR to loop IR; its own header in
// compiler/passes/ says what it does and why.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/buffers.h"
#include "kiln/ir.h"
#include "kiln/limits.h"
#include "kiln/loop_ir.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/licm.h"
#include "kiln/target.h"

namespace kiln::passes {

// Which passes run beyond those of the opt level, and how they are tuned:
// what a user or a tuner chooses. All of it is part of the compile cache key.
struct PassOptions {
  std::set<std::string> required;   // run even above opt_level
  std::set<std::string> disabled;   // never run (wins over required)
  std::optional<LicmOptions> licm;  // LICM's cost model; unset: the target's (licm_defaults)
  std::optional<CseOptions> cse;    // CSE's rules; unset: the target's (cse_defaults)

  friend bool operator==(const PassOptions&, const PassOptions&) = default;
};

// The options LICM and CSE get for a target when PassOptions leaves them unset:
// on GPUs, expressions in small constant loops cost nothing (the backend
// unrolls them); on CPUs, small serial loops keep their index bases inside.
LicmOptions licm_defaults(const Target& t);
CseOptions cse_defaults(const Target& t);

// What a pass instrument is told: after a pass, the IR it left and how long
// it took; or a remark a pass makes on its way ("fused relu into conv").
struct PassEvent {
  std::string_view pass{};
  double ms = 0;                          // after a pass
  const ir::LoweredFunc* func = nullptr;  // after a loop pass: the func it left
  const ir::Graph* graph = nullptr;       // after a graph pass: the graph it left
  std::string_view remark{};              // a remark: func and graph are null
};
// Sees every pass run and changes nothing: printing, timing, kilnd's stage log.
using PassInstrument = std::function<void(const PassEvent&)>;

// The instrument behind `--print-after` and `--time-passes`: prints to `log`
// the IR after each pass in print_after ("all" = every pass) with those
// passes' remarks, and, when `time`, every pass's time. Throws CompileError
// (stage Passes) for a name in print_after that is no pass.
PassInstrument print_and_time(std::set<std::string> print_after, bool time, std::ostream& log);

// Everything a pass is given besides the IR, as Relay's PassContext.
struct PassContext {
  int opt_level = 2;  // 0..3: a pass runs when its level <= opt_level
  Target target;      // cost models differ between CPUs and GPUs (LICM, CSE)
  PassOptions options;
  PassInstrument instrument;  // unset: nobody watches
  // How fold_constants runs an operator at compile time: `b` holds op's
  // params and its input and output buffers. kiln passes the JIT; unset, the
  // reference interpreter runs it.
  std::function<void(const ir::Func& op, Bindings& b)> evaluate;
  // The pipeline stops between passes once it has run for max_stage_ms, or
  // past the request's deadline (stage "passes").
  Limits limits{};

  // LICM's and CSE's options: options.licm and options.cse, or the target's defaults.
  LicmOptions licm() const;
  CseOptions cse() const;
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
// when it does), telling ctx.instrument after each. Throws CompileError
// (stage Passes) for an unknown pass name in ctx.
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

// Runs the graph passes ctx enables, in order, telling ctx.instrument after
// each. Throws CompileError (stage Passes) for an unknown pass name in ctx,
// and whatever a pass throws (fold_constants runs code).
ir::Graph run_graph_pipeline(const ir::Graph& g, const PassContext& ctx);

// The names of the graph passes run_graph_pipeline would run under ctx.
std::vector<std::string> graph_pipeline(const PassContext& ctx);

}  // namespace kiln::passes
