// A graph compiled operator by operator through the whole pipeline.
#include <fmt/format.h>

#include <map>

#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/poly.h"

namespace kiln::graph {

namespace {

codegen::Kernel compile_op(const ir::Func& op, const passes::PassContext& ctx,
                           const codegen::Options& opts) {
  ir::LoweredFunc lowered = poly::lower(poly::schedule(op, true));
  codegen::Options o = opts;
  o.fast_math = op.fast_math;
  return codegen::jit_compile(passes::run_pipeline(lowered, ctx), o);
}

}  // namespace

void jit_evaluate(const ir::Func& op, interp::Bindings& b, const passes::PassContext& ctx,
                  const codegen::Options& opts) {
  // The operator's own loop passes run quietly: what the user asked to see
  // printed is the graph's compilation, not this evaluation.
  passes::PassContext quiet = ctx;
  quiet.log = nullptr;
  compile_op(op, quiet, opts).run(b);
}

ir::Graph optimize(const ir::Graph& g, const passes::PassContext& ctx,
                   const codegen::Options& opts) {
  passes::PassContext with_jit = ctx;
  with_jit.evaluate = [ctx, opts](const ir::Func& op, interp::Bindings& b) {
    jit_evaluate(op, b, ctx, opts);
  };
  return passes::run_graph_pipeline(g, with_jit);
}

struct CompiledGraph::State {
  ir::Graph graph;
  std::vector<codegen::Kernel> kernels;  // one per call
  interp::Tensors constants;             // made once, not on every run
  size_t distinct = 0;
};

CompiledGraph compile(const ir::Graph& g, const passes::PassContext& ctx,
                      const codegen::Options& opts) {
  auto s = std::make_shared<CompiledGraph::State>();
  s->graph = optimize(g, ctx, opts);
  s->constants = interp::graph_constants(s->graph);
  std::map<std::string, size_t> by_text;  // an operator's text (with its schedule) -> kernel
  for (const ir::GraphCall& c : s->graph.calls) {
    std::string text = ir::to_string(c.op);
    auto it = by_text.find(text);
    if (it != by_text.end()) {
      s->kernels.push_back(s->kernels[it->second]);
      continue;
    }
    by_text.emplace(text, s->kernels.size());
    s->kernels.push_back(compile_op(c.op, ctx, opts));
    ++s->distinct;
  }
  return CompiledGraph(std::move(s));
}

interp::Tensors CompiledGraph::run(const interp::Tensors& inputs) const {
  return interp::run_graph(
      state_->graph, inputs,
      [this](size_t k, const ir::GraphCall&, interp::Bindings& b) { state_->kernels.at(k).run(b); },
      &state_->constants);
}

const ir::Graph& CompiledGraph::graph() const { return state_->graph; }

size_t CompiledGraph::kernel_count() const { return state_->distinct; }

}  // namespace kiln::graph
