// The frontend's entry points: text to tokens to syntax tree to checked IR.
#include "kiln/frontend.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checker.h"
#include "lexer.h"
#include "parser.h"

namespace kiln::frontend {

namespace {

[[noreturn]] void too_large(const std::string& filename, const Limits& limits) {
  throw CompileError(ErrorStage::Parse, SourceLoc{filename, 0, 0},
                     fmt::format("the source is larger than the limit of {} bytes "
                                 "(max_source_bytes, docs/limits.md)",
                                 limits.max_source_bytes));
}

}  // namespace

ir::Module parse_module(std::string_view text, const std::string& filename, const Limits& limits) {
  if (text.size() > limits.max_source_bytes) too_large(filename, limits);
  // CR LF (Windows) and a lone CR (classic Mac OS) end lines too: without
  // this, a CR-only file was one line and its first comment hid the rest.
  std::string unified;
  if (text.find('\r') != std::string_view::npos) {
    unified.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '\r') {
        unified += text[i];
      } else if (i + 1 >= text.size() || text[i + 1] != '\n') {
        unified += '\n';
      }
    }
    text = unified;
  }
  Source src(text, filename);
  std::vector<Token> tokens = lex(src);
  ModuleDecl decl = parse(src, tokens);
  return check(src, decl, limits);
}

std::string read_source(const std::string& path, const Limits& limits) {
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
  // One byte past the limit is enough to know the file is too large.
  std::string text;
  char chunk[1 << 16];
  while (in && text.size() <= limits.max_source_bytes) {
    in.read(chunk, sizeof chunk);
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    throw CompileError(ErrorStage::Parse, SourceLoc{path, 0, 0}, "cannot read " + path);
  }
  if (text.size() > limits.max_source_bytes) too_large(path, limits);
  return text;
}

ir::Module parse_file(const std::string& path, const Limits& limits) {
  return parse_module(read_source(path, limits), path, limits);
}

}  // namespace kiln::frontend
