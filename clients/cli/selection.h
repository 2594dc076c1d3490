// Which funcs and graphs a command works on: each file parsed, --func and
// --graph applied, --set split between compile-time and run-time values, and
// every failure reported without stopping the others.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include "kiln/ir.h"
#include "options.h"

namespace kiln::cli {

// A func ready to compile: --set applied to its compile-time params and
// knobs, and the --set values of its run-time params kept for running it.
struct Prepared {
  std::string file;
  const std::string* source;  // the file's text, as read once
  ir::Func func;
  std::map<std::string, int64_t> runtime_params;
};

// How a command reports a failure: of a whole file (func empty) or of one func.
using FailFn = std::function<void(const std::string& file, const std::string& func,
                                  const std::string& message)>;

// A failure whose message is complete as it is printed: kilnd's answer to a
// call (`kiln --server`), which already says where and what.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The FailFn of the text output: the message on stderr.
void print_error(const std::string& file, const std::string& func, const std::string& message);

// A graph to process, with the file it came from and the module's funcs.
struct GraphJob {
  std::string file;
  const std::string* source;  // the file's text, as read once (empty for a model)
  const ir::Graph* graph;
  const ir::Module* module;
  bool model = false;  // `file` is an ONNX model: kilnd takes it as a blob (Operator.model)
  std::map<std::string, int64_t> dims;  // its symbolic dimensions' values, as it was imported
};
using GraphFn = std::function<bool(const GraphJob&, bool many)>;

// Calls `each` on every func the options select, file by file, then
// `each_graph` on every graph (only graphs with `graphs_only`). A
// CompileError (from loading a file or from a callback) goes to `fail` and
// the run goes on with the next func, graph or file. The callbacks get
// whether more than one item is being processed, and return false for a
// failed check. Returns the exit status: 0, or 1 when anything failed.
int for_each_func(const Options& o, const std::function<bool(const Prepared&, bool many)>& each,
                  const FailFn& fail, const GraphFn& each_graph = nullptr,
                  bool graphs_only = false);

}  // namespace kiln::cli
