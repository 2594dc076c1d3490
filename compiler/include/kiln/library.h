// The operator library: the funcs a model's operators become (DESIGN.md
// section 7b). Each is written once in .kiln (compiler/library/, one file per
// family), parameterised by shape, with its schedule and knobs; the model
// importer binds their params for each call.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/ir.h"

namespace kiln::library {

// The library's files, by name ("conv.kiln"), with their text.
const std::vector<std::pair<std::string, std::string>>& files();

// Every func of the library, parsed and checked once (the first call).
const ir::Module& module();

// The func `name`; throws std::logic_error when the library has none (a bug in
// the caller, not bad input).
const ir::Func& func(const std::string& name);

}  // namespace kiln::library
