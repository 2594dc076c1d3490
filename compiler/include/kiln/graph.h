// Graphs of operators, compiled: the graph passes with the JIT as the
// constant evaluator, then every operator scheduled, lowered, optimized and
// compiled, and run one after another (DESIGN.md section 4, graph level).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/buffers.h"
#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/ir.h"

namespace kiln::graph {

// Runs op once on the host, compiled by kiln::compile with `opts` (its
// instrument left out): how fold_constants evaluates an operator at compile time.
void jit_evaluate(const ir::Func& op, Bindings& b, const CompileOptions& opts);

// How the constant folder evaluates a call whose arguments are all constants:
// with the operator compiled into this process (jit_evaluate: the CLI, the
// runner), or with the reference interpreter, which runs no generated code
// (kilnd, which never runs generated code in its own process). Either within
// opts.limits.max_fold_bytes a call.
enum class FoldBy { Kernel, Interpreter };

// The graph passes of opts' level and pass options, constants folded as `by`
// says, opts' instrument watching.
ir::Graph optimize(const ir::Graph& g, const CompileOptions& opts, FoldBy by = FoldBy::Kernel);

// The graph as `kiln emit --stage graph` shows it: its text, then each
// operator the graph passes made (those `source` does not define), once.
std::string graph_text(const ir::Graph& g, const ir::Module& source);

// A graph whose operators are compiled into this process.
class CompiledGraph {
 public:
  // Runs every call in order on `inputs` (one buffer per graph input) and
  // returns the outputs by name. Throws CompileError (stage "interp") for a
  // missing or mistyped input, stage "codegen" when a kernel reports an error.
  Tensors run(const Tensors& inputs) const;
  const ir::Graph& graph() const;  // after the graph passes
  size_t kernel_count() const;     // distinct kernels: identical operators share one
  // What the code generator said about the kernels (CompileResult::notes).
  const std::vector<std::string>& notes() const;

  struct State;
  explicit CompiledGraph(std::shared_ptr<const State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<const State> state_;
};

// optimize(), then every distinct operator through kiln::compile into this process.
CompiledGraph compile(const ir::Graph& g, const CompileOptions& opts);

}  // namespace kiln::graph
