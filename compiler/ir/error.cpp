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

const char* error_stage_name(ErrorStage s) {
  switch (s) {
    case ErrorStage::Parse:
      return "parse";
    case ErrorStage::Validate:
      return "validate";
    case ErrorStage::Bounds:
      return "bounds";
    case ErrorStage::Schedule:
      return "schedule";
    case ErrorStage::Legality:
      return "legality";
    case ErrorStage::Lower:
      return "lower";
    case ErrorStage::Passes:
      return "passes";
    case ErrorStage::Codegen:
      return "codegen";
    case ErrorStage::Link:
      return "link";
    case ErrorStage::Interp:
      return "interp";
    case ErrorStage::Run:
      return "run";
    case ErrorStage::Output:
      return "output";
    case ErrorStage::Import:
      return "import";
  }
  return "?";
}

namespace {
std::string render(ErrorStage stage, const SourceLoc& loc, const std::string& message) {
  return loc.str() + ": " + error_stage_name(stage) + " error: " + message;
}
}  // namespace

CompileError::CompileError(ErrorStage stage, SourceLoc loc, std::string message)
    : std::runtime_error(render(stage, loc, message)),
      stage_(stage),
      loc_(std::move(loc)),
      message_(std::move(message)) {}

std::string CompileError::located(const std::string& file) const {
  if (!loc_.file.empty() || loc_.known()) return what();
  return render(stage_, SourceLoc{file, 0, 0}, message_);
}

}  // namespace kiln
