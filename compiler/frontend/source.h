// The text being compiled, positions in it, and the errors that point into it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kiln/error.h"

namespace kiln::frontend {

// A position in the source: 1-based line and column (columns count bytes) and
// the byte offset, which lets messages quote the text of a construct.
struct Pos {
  int line = 0;
  int col = 0;
  size_t offset = 0;
};

class Source {
 public:
  Source(std::string_view text, std::string file) : text_(text), file_(std::move(file)) {}

  std::string_view text() const { return text_; }
  const std::string& file() const { return file_; }
  SourceLoc loc(Pos p) const { return SourceLoc{file_, p.line, p.col}; }

  // The source between two offsets, whitespace runs collapsed to one blank and
  // shortened with "..." past `limit` characters: for quoting in messages.
  std::string quote(size_t begin, size_t end, size_t limit = 40) const;

  [[noreturn]] void parse_error(Pos p, const std::string& message) const {
    throw CompileError(ErrorStage::Parse, loc(p), message);
  }
  [[noreturn]] void validate_error(Pos p, const std::string& message) const {
    throw CompileError(ErrorStage::Validate, loc(p), message);
  }

 private:
  std::string_view text_;
  std::string file_;
};

// The deepest nesting of expressions (parentheses, operators, calls, lists)
// the frontend accepts; deeper input is refused rather than risking the stack.
constexpr int kMaxNesting = 256;

}  // namespace kiln::frontend
