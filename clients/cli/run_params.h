// The values of a func's run-time params for `kiln interp`: those --set gives,
// checked against the func's constraints, and a test size for each one left out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/ir.h"

namespace kiln::cli {

struct RunParams {
  std::map<std::string, int64_t> values;  // every run-time param of the func
  std::vector<std::string> chosen;        // those kiln picked (not given with --set)
};

// Run-time params not in `given` get the first of a few small sizes (13, 16,
// 8, ..., chosen so that remainder loops run too) under which every
// constraint of f holds. Throws CompileError (stage "interp") when a given
// value breaks a constraint, or when no size tried satisfies them all.
// Constraints this cannot evaluate are left to the compiler.
RunParams run_param_values(const ir::Func& f, const std::map<std::string, int64_t>& given);

}  // namespace kiln::cli
