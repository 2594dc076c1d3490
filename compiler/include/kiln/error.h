// Errors the compiler reports: a message, the stage that found it, and the
// source position it is about.
#pragma once

#include <cstdint>
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

// The stage of kiln that found a problem, in pipeline order. Each is named in
// messages as error_stage_name gives it.
enum class ErrorStage : uint8_t {
  Parse,     // "parse": the text does not fit the grammar
  Validate,  // "validate": names, types, non-affine domains; --func, --set, graph calls
  Bounds,    // "bounds": an access that can fall outside its buffer, a value spec too wide
  Schedule,  // "schedule": a malformed schedule command (unknown loop, bad factor, ...)
  Legality,  // "legality": a schedule command that breaks a dependence
  Lower,     // "lower": the schedule cannot become loops (data-dependent bounds out of order)
  Passes,    // "passes": an unknown pass name in a pass option
  Codegen,   // "codegen": LLVM cannot generate the code, or an unknown target triple
  Link,      // "link": lld failed, or a shared object would need a library
  Interp,    // "interp": an interpreter found an out-of-bounds access, a bad input or binding
  Run,       // "run": a compiled kernel returned an error status
  Output,    // "output": a result cannot be written (kiln compile -o)
  Import,    // "import": a model (ONNX) is malformed or uses what kiln does not support
};
const char* error_stage_name(ErrorStage s);

// Every stage of the compiler reports bad input by throwing a CompileError.
// It carries where (loc), which stage found it and what is wrong (message).
// what() renders all three as "file:line:col: stage error: message".
class CompileError : public std::runtime_error {
 public:
  CompileError(ErrorStage stage, SourceLoc loc, std::string message);

  ErrorStage stage() const { return stage_; }
  const SourceLoc& loc() const { return loc_; }
  const std::string& message() const { return message_; }

  // what(), or, for an error with no position of its own (a bad target, a
  // kernel's error status), "file: stage error: message": it is about `file`.
  std::string located(const std::string& file) const;

 private:
  ErrorStage stage_;
  SourceLoc loc_;
  std::string message_;
};

}  // namespace kiln
