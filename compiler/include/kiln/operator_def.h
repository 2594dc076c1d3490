// Structured operators (proto/kiln/v1/operator.proto): an OperatorDef or a
// GraphDef, for clients that never write the .kiln language, becomes IR
// through the very frontend that text goes through. Each definition is
// written out as canonical .kiln text, parsed and validated as any file is,
// and every position in the result (and in any error) is then the field the
// construct came from: a SourceLoc whose file is a field path such as
// "computations[2].domain[0]" and whose line is 0, printed as
// "computations[2].domain[0]: validate error: ...".
#pragma once

#include <string>

#include "kiln/ir.h"
#include "kiln/limits.h"

namespace kiln::v1 {
class OperatorDef;
class GraphDef;
}  // namespace kiln::v1

namespace kiln::frontend {

// The func an OperatorDef defines, validated. Throws CompileError at the
// field that is wrong: a name that is not an identifier, an unset enum, a
// non-finite number, or anything the language refuses.
ir::Func parse_operator_def(const v1::OperatorDef& def, const Limits& limits = {});

// The module a GraphDef defines: its operators and the graph itself (its
// only graph). Errors name fields as parse_operator_def's do.
ir::Module parse_graph_def(const v1::GraphDef& def, const Limits& limits = {});

// The canonical .kiln text of a definition (what parse_operator_def parses):
// for `kiln emit --stage ast`-like views of a structured request. Throws
// CompileError as parse_operator_def does for what cannot be written.
std::string operator_def_text(const v1::OperatorDef& def, const Limits& limits = {});
std::string graph_def_text(const v1::GraphDef& def, const Limits& limits = {});

}  // namespace kiln::frontend
