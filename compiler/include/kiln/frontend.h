// The .kiln operator language: text to algorithm IR (docs/language.md describes the language).
#pragma once

#include <string>
#include <string_view>

#include "kiln/ir.h"

namespace kiln::frontend {

// Parses and validates a whole .kiln file. `filename` appears in error
// positions. Throws CompileError (stage "parse" for syntax, "validate" for
// names, types and non-affine domains) at the first problem; it never
// crashes on malformed input.
ir::Module parse_module(std::string_view text, const std::string& filename = "<input>");

// Reads the file and parses it; a file that cannot be read is a CompileError too.
ir::Module parse_file(const std::string& path);

}  // namespace kiln::frontend
