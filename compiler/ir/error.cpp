// SourceLoc rendering and the CompileError every stage throws.
#include "kiln/error.h"

#include <utility>

namespace kiln {

std::string SourceLoc::str() const {
  std::string name = file.empty() ? "<input>" : file;
  if (!known()) return name;
  std::string s = name + ":" + std::to_string(line);
  if (col > 0) s += ":" + std::to_string(col);
  return s;
}

namespace {
std::string render(const std::string& stage, const SourceLoc& loc, const std::string& message) {
  return loc.str() + ": " + stage + " error: " + message;
}
}  // namespace

CompileError::CompileError(std::string stage, SourceLoc loc, std::string message)
    : std::runtime_error(render(stage, loc, message)),
      stage_(std::move(stage)),
      loc_(std::move(loc)),
      message_(std::move(message)) {}

}  // namespace kiln
