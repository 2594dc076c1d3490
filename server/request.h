// From the wire to the compile pipeline: the func a request's operator names,
// its compile options, and what an exception means to the caller. Shared by
// the service core and the runner, so both read a request the same way.
#pragma once

#include <exception>
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

// The one func a request's operator names (INVALID_ARGUMENT otherwise: no
// operator, a graph, a source with several funcs and no name). Parse and
// validation errors are CompileErrors with the CLI's messages.
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
// message, bad_alloc RESOURCE_EXHAUSTED, anything else INTERNAL.
Status status_of(const std::exception_ptr& e);

}  // namespace kiln::server
