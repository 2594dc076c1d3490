// From the wire to the compile pipeline: the func a request's operator names,
// its compile options, and what an exception means to the caller. Shared by
// the service core and the runner, so both read a request the same way.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/limits.h"
#include "status.h"

namespace google::protobuf {
template <typename T>
class RepeatedPtrField;
}

namespace kiln::v1 {
class Operator;
class CompileOptions;
class Diagnostic;
enum DType : int;
}  // namespace kiln::v1

namespace kiln::server {

// A request that cannot be served, with its status: thrown by refuse() and
// turned back into the status by status_of().
struct Refusal {
  Status status;
};
[[noreturn]] void refuse(Code code, std::string message);

// What a request's operator names: one func, or one graph with the module
// that defines it.
struct Unit {
  std::optional<ir::Func> func;
  std::optional<ir::Graph> graph;
  ir::Module module;  // graphs: the operators defined beside it
};

// The func or graph a request's operator names (INVALID_ARGUMENT otherwise:
// no operator, a name the source lacks, a source with several and no name).
// Parse and validation errors are CompileErrors with the CLI's messages.
Unit resolve_unit(const v1::Operator& op, const Limits& limits);
// The same for a method that takes only a func (INVALID_ARGUMENT for a graph).
ir::Func resolve(const v1::Operator& op, const Limits& limits);

CompileOptions compile_options(const v1::CompileOptions& o, const Limits& limits);

// The pipeline request of a wire request: resolve() and compile_options(), and the `set` values.
CompileRequest pipeline_request(const v1::Operator& op, const v1::CompileOptions& o,
                                const Limits& limits, CompileOutput output);

// The compiler's warnings as diagnostics.
void add_notes(const std::vector<std::string>& notes,
               google::protobuf::RepeatedPtrField<v1::Diagnostic>* out);

v1::DType wire_dtype(ir::DType t);

// What an exception means to the caller: a Refusal its status, a
// DeadlineExceeded DEADLINE_EXCEEDED, a CompileError INVALID_ARGUMENT with its
// message (one without a position of its own is about `op`'s file, named as
// the offline CLI names it), bad_alloc RESOURCE_EXHAUSTED, anything else
// INTERNAL.
Status status_of(const std::exception_ptr& e, const v1::Operator& op);

}  // namespace kiln::server
