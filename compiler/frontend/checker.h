// The checker: names, types and domains validated, sugar removed, syntax tree turned into IR.
#pragma once

#include "ast.h"
#include "kiln/ir.h"
#include "kiln/limits.h"

namespace kiln::frontend {

// Throws CompileError (stage "validate") at the first problem.
ir::Module check(const Source& src, const ModuleDecl& module, const Limits& limits = {});

// Checks one graph against the (already checked) funcs of its module.
ir::Graph check_graph(const Source& src, const GraphDecl& graph, const ir::Module& module);

}  // namespace kiln::frontend
