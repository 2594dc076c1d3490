// The frontend's entry points: text to tokens to syntax tree to checked IR.
#include "kiln/frontend.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checker.h"
#include "lexer.h"
#include "parser.h"

namespace kiln::frontend {

ir::Module parse_module(std::string_view text, const std::string& filename) {
  Source src(text, filename);
  std::vector<Token> tokens = lex(src);
  ModuleDecl decl = parse(src, tokens);
  return check(src, decl);
}

ir::Module parse_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw CompileError(ErrorStage::Parse, SourceLoc{path, 0, 0},
                       "cannot read " + path + ": it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw CompileError(ErrorStage::Parse, SourceLoc{path, 0, 0},
                       "cannot open " + path + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw CompileError(ErrorStage::Parse, SourceLoc{path, 0, 0}, "cannot read " + path);
  }
  return parse_module(text.str(), path);
}

}  // namespace kiln::frontend
