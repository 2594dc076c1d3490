// Errors the compiler reports: a message with the source position it is about.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

// A position in a .kiln file. line and col are 1-based; 0 means "unknown".
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;

  bool known() const { return line > 0; }
  // "file:line:col", or "file" / "<input>" when the position is unknown.
  std::string str() const;
};

// Every stage of the compiler reports bad input by throwing a CompileError.
// It carries where (loc), which stage found it (stage: "parse", "validate",
// "schedule", "legality", "lower", "interp") and what is wrong (message).
// what() renders all three as "file:line:col: stage error: message".
class CompileError : public std::runtime_error {
 public:
  CompileError(std::string stage, SourceLoc loc, std::string message);

  const std::string& stage() const { return stage_; }
  const SourceLoc& loc() const { return loc_; }
  const std::string& message() const { return message_; }

 private:
  std::string stage_;
  SourceLoc loc_;
  std::string message_;
};

}  // namespace kiln
