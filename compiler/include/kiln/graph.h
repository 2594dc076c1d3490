// Graphs of operators, compiled: the graph passes with the JIT as the
// constant evaluator, then every operator scheduled, lowered, optimized and
// compiled, and run one after another (DESIGN.md section 4, graph level).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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
// says (FoldBy::Kernel: compiled for this host, whatever opts' target), opts'
// instrument watching.
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
  // `after_call`, when given, sees each call once its kernel has run, with the
  // call's inputs and outputs (a check of every kernel: kiln::run_graph).
  using CallHook = std::function<void(size_t call, const ir::GraphCall& c, const Bindings& b)>;
  Tensors run(const Tensors& inputs, const CallHook& after_call = {}) const;
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

// ---------------------------------------------------------------------------
// Buffers planned: where each tensor of a graph lives while it runs.

struct TensorPlace {
  enum class Kind : uint8_t {
    Input,   // the caller's input `index`
    Output,  // the caller's output `index`
    Const,   // a constant: the weights
    Arena,   // `offset` bytes into the memory the intermediate tensors share
  };
  Kind kind = Kind::Arena;
  size_t index = 0;     // Input, Output
  uint64_t offset = 0;  // Arena: a multiple of 64
  uint64_t bytes = 0;
};

struct MemoryPlan {
  // Every tensor a call reads or writes, and every graph output. A tensor the graph returns
  // twice, or returns although it is an input or a constant, has its first output's place
  // or its own: `copies` says which outputs are copied from where after the last call.
  std::map<std::string, TensorPlace> places;
  std::vector<std::pair<size_t, std::string>> copies;  // (output index, tensor it copies)
  uint64_t arena_bytes = 0;     // the peak: what the intermediate tensors need at once
  uint64_t unshared_bytes = 0;  // what they would need, each its own
};

// Gives every intermediate tensor (one a call writes and the graph does not return) a place
// in one arena, reused once the tensor's last reader has run: the largest placed first, each
// at the lowest offset free for its whole lifetime. The calls' order is kept.
MemoryPlan plan_memory(const ir::Graph& g);

// ---------------------------------------------------------------------------
// A whole graph as one artifact: every kernel in one shared object for any target, and the
// constants in a weights blob beside it; a C program loads and runs it with kiln's runtime
// (kiln_model_open, kiln_model_run in runtime/include/kiln/runtime.h).

struct ModelTensor {
  std::string name;
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> shape;  // of one sample, for a batched one
  bool batched = false;        // it holds one sample of the model's run-time batch
};

struct ModelArtifact {
  std::string name;   // the graph's, made a C identifier
  std::string batch;  // the run-time batch's name (ir::Graph::batch), or ""
  Target target;
  int opt_level = 3;
  std::vector<ModelTensor> inputs, outputs;
  std::vector<char> code;  // the shared object
  std::string code_sha256;
  std::vector<char> weights;  // every constant a call reads, each at a multiple of 64 bytes
  std::string weights_sha256;
  std::string plan;  // the plan text the shared object holds (runtime/README.md)
  std::vector<std::string> imports;
  size_t calls = 0, calls_before = 0;  // after and before the graph passes
  std::vector<std::string> kernels;    // each distinct kernel's entry symbol
  MemoryPlan memory;
  std::vector<std::string> notes;  // what the code generator said (CompileResult::notes)

  // Everything but the code and the weights, as one JSON object: `kiln compile`'s .so.json.
  std::string metadata_json() const;
};

// optimize() (constants folded as `by` says: by kernels compiled for this host whatever the
// target, or by the reference interpreter in kilnd), the buffers planned, then every distinct
// operator compiled for opts.target into one shared object. Throws CompileError as
// kiln::compile does, stage "link" when the object cannot be linked.
ModelArtifact compile_model(const ir::Graph& g, const CompileOptions& opts,
                            FoldBy by = FoldBy::Kernel);

}  // namespace kiln::graph
