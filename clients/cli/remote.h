// `kiln --server HOST:PORT`: the compile and run steps of check, emit, run and
// compile done by kilnd (docs/server.md) instead of here. The commands choose
// and print exactly as offline; only where the work happens changes, so the
// output is the same either way.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "options.h"
#include "report.h"
#include "selection.h"

namespace kiln::cli {

// What `kiln compile` writes, whether kilnd or this process made it.
struct ArtifactBytes {
  std::string code;           // the shared object
  std::string metadata_json;  // out.so.json, without its newline
  std::string triple, cpu, key;
};

// What `kiln emit` prints for a graph: the graph stage, or each call's
// operator (its name and text) at another stage.
struct GraphTexts {
  std::string graph;
  std::vector<std::pair<std::string, std::string>> calls;
};

// A connection to kilnd. Each call sends one func of a file (the whole file's
// text, with the func's name and the compile-time --set values) and throws
// Failure (selection.h) with kilnd's message when the call fails: an operator kilnd
// refuses gets the message the offline command prints.
class Remote {
 public:
  // Reads the token and TLS files the options name: UsageError when one
  // cannot be read.
  explicit Remote(const Options& o);
  ~Remote();
  Remote(const Remote&) = delete;
  Remote& operator=(const Remote&) = delete;

  void check(const Prepared& p);
  // The text `kiln emit --stage` prints for p's func.
  std::string emit(const Prepared& p, Stage stage);
  ArtifactBytes compile(const Prepared& p);
  InterpResult run(const Prepared& p);

  // The same for a graph of a file.
  void check_graph(const GraphJob& j);
  GraphTexts emit_graph(const GraphJob& j, Stage stage);
  GraphResult run_graph(const GraphJob& j);

  // kilnd's agents, and a func measured on one of key o.key.
  std::vector<AgentRow> agents();
  Measurement measure(const Prepared& p);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cli
