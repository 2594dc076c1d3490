// A graph compiled operator by operator through the compile pipeline.
#include <map>
#include <set>
#include <string>

#include "kiln/compile.h"
#include "kiln/graph.h"
#include "kiln/interp.h"

namespace kiln::graph {

namespace {

CompileRequest kernel_request(const ir::Func& op, const CompileOptions& opts) {
  return CompileRequest{
      .func = op, .overrides = {}, .options = opts, .output = CompileOutput::Kernel};
}

}  // namespace

void jit_evaluate(const ir::Func& op, Bindings& b, const CompileOptions& opts) {
  // The operator's own loop passes run quietly: what the user asked to see
  // printed is the graph's compilation, not this evaluation.
  CompileOptions quiet = opts;
  quiet.instrument = nullptr;
  compile(kernel_request(op, quiet)).kernel->run(b);
}

ir::Graph optimize(const ir::Graph& g, const CompileOptions& opts, FoldBy by) {
  passes::PassContext ctx = pass_context(opts);
  if (by == FoldBy::Kernel) {
    // A folded constant is the same whatever the graph is compiled for: its operator runs on
    // this host, also when the graph's target is another (a model's artifact for aarch64).
    CompileOptions host = opts;
    host.target = Target::host();
    ctx.evaluate = [host](const ir::Func& op, Bindings& b) { jit_evaluate(op, b, host); };
  }
  return passes::run_graph_pipeline(g, ctx);
}

struct CompiledGraph::State {
  ir::Graph graph;
  std::vector<codegen::Kernel> kernels;  // one per call
  Tensors constants;                     // made once, not on every run
  size_t distinct = 0;
  std::vector<std::string> notes;
};

CompiledGraph compile(const ir::Graph& g, const CompileOptions& opts) {
  auto s = std::make_shared<CompiledGraph::State>();
  s->graph = optimize(g, opts);
  s->constants = interp::graph_constants(s->graph);
  std::map<std::string, size_t> by_key;  // compile cache key -> kernel: equal operators share one
  for (const ir::GraphCall& c : s->graph.calls) {
    CompileRequest r = kernel_request(c.op, opts);
    auto [it, added] = by_key.emplace(cache_key(r), s->kernels.size());
    if (!added) {
      s->kernels.push_back(s->kernels[it->second]);
      continue;
    }
    CompileResult compiled = compile(r);
    s->kernels.push_back(*compiled.kernel);
    s->notes.insert(s->notes.end(), compiled.notes.begin(), compiled.notes.end());
    ++s->distinct;
  }
  return CompiledGraph(std::move(s));
}

Tensors CompiledGraph::run(const Tensors& inputs, const CallHook& after_call) const {
  return interp::run_graph(
      state_->graph, inputs,
      [this, &after_call](size_t k, const ir::GraphCall& c, Bindings& b) {
        state_->kernels.at(k).run(b);
        if (after_call) after_call(k, c, b);
      },
      &state_->constants);
}

const ir::Graph& CompiledGraph::graph() const { return state_->graph; }

size_t CompiledGraph::kernel_count() const { return state_->distinct; }

const std::vector<std::string>& CompiledGraph::notes() const { return state_->notes; }

std::string graph_text(const ir::Graph& g, const ir::Module& source) {
  std::string text = ir::to_string(g);
  std::set<std::string> printed;
  for (const ir::GraphCall& c : g.calls) {
    if (source.find(c.op.name) || !printed.insert(c.op.name).second) continue;
    text += "\n" + ir::to_string(c.op);
  }
  return text;
}

}  // namespace kiln::graph
