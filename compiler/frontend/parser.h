// The recursive-descent parser: tokens to the syntax tree (syntax only; names
// and types are the checker's business).
#pragma once

#include <vector>

#include "ast.h"
#include "lexer.h"

namespace kiln::frontend {

// Parses a whole file. Throws CompileError (stage "parse") at the first token
// that does not fit the grammar, saying what was expected and what was found.
ModuleDecl parse(const Source& src, const std::vector<Token>& tokens);

}  // namespace kiln::frontend
