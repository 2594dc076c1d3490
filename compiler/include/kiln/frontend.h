// The .kiln operator language: text to algorithm IR (docs/language.md describes the language).
#pragma once

#include <string>
#include <string_view>

#include "kiln/ir.h"
#include "kiln/limits.h"

namespace kiln::frontend {

// Parses and validates a whole .kiln file. `filename` appears in error
// positions. Throws CompileError (stage Parse for syntax and for a text
// longer than limits.max_source_bytes, Validate for names, types and
// non-affine domains) at the first problem; it never crashes on malformed input.
ir::Module parse_module(std::string_view text, const std::string& filename = "<input>",
                        const Limits& limits = {});

// The text of a .kiln file. A file that cannot be read, or that holds more
// than limits.max_source_bytes (read no further: a device such as /dev/zero
// never ends), is a CompileError of stage Parse.
std::string read_source(const std::string& path, const Limits& limits = {});

// read_source, then parse_module.
ir::Module parse_file(const std::string& path, const Limits& limits = {});

}  // namespace kiln::frontend
