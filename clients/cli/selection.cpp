// Selecting and preparing the funcs and graphs of each file (selection.h).
#include "selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

#include "kiln/autosched.h"
#include "kiln/error.h"
#include "kiln/frontend.h"
#include "kiln/interp.h"
#include "kiln/onnx.h"
#include "timing.h"

namespace kiln::cli {
namespace {

// "matmul has params M, N, K and knobs TI"
std::string names_in(const ir::Func& f) {
  std::vector<std::string> params, knobs;
  for (const ir::Param& p : f.params) params.push_back(p.name);
  for (const ir::Knob& k : f.knobs) knobs.push_back(k.name);
  return fmt::format("{} has params {} and knobs {}", f.name,
                     params.empty() ? "(none)" : fmt::format("{}", fmt::join(params, ", ")),
                     knobs.empty() ? "(none)" : fmt::format("{}", fmt::join(knobs, ", ")));
}

// The funcs of `m` that the options select. Throws CompileError when --func
// names no func of the file, or a --set names nothing in the selected funcs.
std::vector<const ir::Func*> select_funcs(const ir::Module& m, const std::string& file,
                                          const Options& o) {
  SourceLoc where{file, 0, 0};
  std::vector<const ir::Func*> funcs;
  if (m.funcs.empty()) {
    // An imported model is one graph of library funcs.
    if (!m.graphs.empty() && !o.func && o.overrides.empty()) return funcs;
    throw CompileError(ErrorStage::Validate, where,
                       m.graphs.empty() ? "the file defines no func"
                                        : "the file defines no func, only a graph (--set and "
                                          "--func apply to funcs)");
  }
  if (o.graph) {
    if (!o.overrides.empty()) {
      throw CompileError(ErrorStage::Validate, where,
                         fmt::format("--set {}: --set applies to funcs; a graph binds its "
                                     "operators' params in its calls (op(x, NAME = INT))",
                                     o.overrides.begin()->first));
    }
    return funcs;
  }
  if (o.func) {
    const ir::Func* f = m.find(*o.func);
    if (!f) {
      std::vector<std::string> names;
      for (const ir::Func& g : m.funcs) names.push_back(g.name);
      throw CompileError(ErrorStage::Validate, where,
                         fmt::format("--func {}: no func of that name (expected one of: {})",
                                     *o.func, fmt::join(names, ", ")));
    }
    funcs.push_back(f);
  } else {
    for (const ir::Func& f : m.funcs) funcs.push_back(&f);
  }

  for (const auto& [name, value] : o.overrides) {
    bool known = std::any_of(funcs.begin(), funcs.end(), [&](const ir::Func* f) {
      return f->find_param(name) != nullptr || f->find_knob(name) != nullptr;
    });
    if (!known) {
      std::vector<std::string> described;
      for (const ir::Func* f : funcs) described.push_back(names_in(*f));
      throw CompileError(ErrorStage::Validate, where,
                         fmt::format("--set {}={}: no param or knob named '{}' ({})", name, value,
                                     name, fmt::join(described, "; ")));
    }
  }
  return funcs;
}

// The graphs of `m` that the options select: none with --func, the one
// --graph names (CompileError when the file has no such graph), else all.
std::vector<const ir::Graph*> select_graphs(const ir::Module& m, const std::string& file,
                                            const Options& o) {
  std::vector<const ir::Graph*> graphs;
  if (o.func) return graphs;
  if (o.graph) {
    const ir::Graph* g = m.find_graph(*o.graph);
    if (!g) {
      std::vector<std::string> names;
      for (const ir::Graph& h : m.graphs) names.push_back(h.name);
      throw CompileError(
          ErrorStage::Validate, SourceLoc{file, 0, 0},
          fmt::format("--graph {}: no graph of that name ({})", *o.graph,
                      names.empty() ? std::string("the file defines none")
                                    : fmt::format("expected one of: {}", fmt::join(names, ", "))));
    }
    graphs.push_back(g);
    return graphs;
  }
  for (const ir::Graph& g : m.graphs) graphs.push_back(&g);
  return graphs;
}

// Splits the --set values between f's compile-time params and knobs (given to
// ir::apply_overrides, which checks knob candidates) and its run-time params
// (kept for interp::param_values). Names f does not have are for other funcs.
Prepared prepare(const std::string& file, const std::string& source, const ir::Func& f,
                 const Options& o) {
  Prepared p{file, &source, {}, {}};
  ir::Overrides compile_time;
  for (const auto& [name, value] : o.overrides) {
    const ir::Param* param = f.find_param(name);
    if (param != nullptr && !param->value) {
      p.runtime_params[name] = value;
    } else if (param != nullptr || f.find_knob(name) != nullptr) {
      compile_time[name] = value;
    }
  }
  p.func = ir::apply_overrides(f, compile_time);
  return p;
}

}  // namespace

void print_error(const std::string&, const std::string&, const std::string& message) {
  std::fflush(stdout);  // keep stdout and stderr lines in order on a terminal
  fmt::print(stderr, "{}\n", message);
}

int for_each_func(const Options& o, const std::function<bool(const Prepared&, bool many)>& each,
                  const FailFn& fail, const GraphFn& each_graph, bool graphs_only) {
  bool all_ok = true;
  auto internal = [](const std::string& where, const std::exception& e) {
    return fmt::format("{}: internal error: {} (this is a bug in kiln; please report it)", where,
                       e.what());
  };
  for (const std::string& file : o.files) {
    std::string source;
    ir::Module module;
    std::vector<const ir::Func*> funcs;
    std::vector<const ir::Graph*> graphs;
    std::map<std::string, int64_t> dims;  // a model's symbolic dimensions, as imported
    try {
      if (onnx::is_model_path(file)) {
        // Imported here also with --server: a bad model is refused before it is uploaded, and
        // the graph names what is printed.
        onnx::ImportOptions io;
        io.dims = o.dims;
        module = timed(file, "import", [&] { return onnx::import_file(file, io); });
        // A run-time batch, run on --input files of n samples: the model imported for n, so
        // that its kernels see the whole batch (an artifact takes the batch at run time).
        const ir::Graph& g = module.graphs.at(0);
        for (const std::string& in : g.batched_inputs) {
          auto given = o.input_files.find(in);
          if (given == o.input_files.end()) continue;
          std::vector<int64_t> shape = npy_shape(given->second);  // the data is read by the run
          if (shape.empty() || shape[0] == 1) break;
          io.dims[g.batch] = shape[0];
          module = timed(file, "import", [&] { return onnx::import_file(file, io); });
          break;
        }
        dims = io.dims;
      } else {
        if (!o.dims.empty()) {
          throw CompileError(ErrorStage::Validate, SourceLoc{file, 0, 0},
                             "--dim gives a model's symbolic dimensions; this is not a model "
                             "(.onnx): give a func's params with --set");
        }
        module = timed(file, "parse", [&] {
          source = frontend::read_source(file);
          return frontend::parse_module(source, file);
        });
      }
      funcs = select_funcs(module, file, o);
      if (graphs_only) funcs.clear();
      if (each_graph) graphs = select_graphs(module, file, o);
      if (graphs_only && graphs.empty()) {
        throw CompileError(ErrorStage::Validate, SourceLoc{file, 0, 0},
                           "the file defines no graph");
      }
    } catch (const CompileError& e) {
      fail(file, "", e.located(file));
      all_ok = false;
      continue;
    } catch (const std::exception& e) {
      fail(file, "", internal(file, e));
      all_ok = false;
      continue;
    }
    bool many = o.files.size() > 1 || funcs.size() + graphs.size() > 1;
    for (const ir::Func* f : funcs) {
      try {
        // --auto: the func's algorithm alone, as its own source, which kiln sketches.
        ir::Func algorithm = o.auto_schedule ? autosched::algorithm_of(*f) : ir::Func{};
        std::string algorithm_source = o.auto_schedule ? ir::to_string(algorithm) : "";
        Prepared p = o.auto_schedule ? prepare(file, algorithm_source, algorithm, o)
                                     : prepare(file, source, *f, o);
        if (!each(p, many)) all_ok = false;
      } catch (const Failure& e) {
        fail(file, f->name, e.what());
        all_ok = false;
      } catch (const CompileError& e) {
        fail(file, f->name, e.located(file));
        all_ok = false;
      } catch (const std::exception& e) {
        fail(file, f->name, internal(fmt::format("{}: func {}", file, f->name), e));
        all_ok = false;
      }
    }
    for (const ir::Graph* g : graphs) {
      try {
        if (o.auto_schedule)
          throw CompileError(ErrorStage::Validate, SourceLoc{file, 0, 0},
                             fmt::format("--auto leaves a func's schedule out; {} is a graph, "
                                         "whose operators without a schedule of their own are "
                                         "sketched already (graph pass sketch_operators)",
                                         g->name));
        if (!each_graph(GraphJob{file, &source, g, &module, onnx::is_model_path(file), dims}, many))
          all_ok = false;
      } catch (const Failure& e) {
        fail(file, "graph " + g->name, e.what());
        all_ok = false;
      } catch (const CompileError& e) {
        fail(file, "graph " + g->name, e.located(file));
        all_ok = false;
      } catch (const std::exception& e) {
        fail(file, "graph " + g->name, internal(fmt::format("{}: graph {}", file, g->name), e));
        all_ok = false;
      }
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace kiln::cli
