// From the wire to the compile pipeline: the func a request's operator names,
// its compile options, and what an exception means to the caller. Shared by
// the service core and the runner, so both read a request the same way.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/compile.h"
#include "kiln/limits.h"
#include "status.h"

namespace google::protobuf {
template <typename T>
class RepeatedPtrField;
class MessageLite;
}  // namespace google::protobuf

namespace kiln::interp {
struct Mismatch;
}

namespace kiln::v1 {
class OutputCheck;
class Operator;
class CompileOptions;
class Diagnostic;
enum DType : int;
}  // namespace kiln::v1

namespace kiln::server {

// How deep a request's messages may nest. A structured expression nests two
// messages per level (Expr, then Binary, Unary, Call or Index), and the
// language allows 256 levels: 600 leaves room for the messages around it.
// Protobuf's own default, 100, would refuse a 48-level expression.
inline constexpr int kMaxRequestNesting = 600;

// Parses `bytes` as `m`, allowing kMaxRequestNesting levels of nesting below
// `m`'s own and `extra` more for the messages that wrap a request (the
// runner's job wraps a RunRequest). False when they are not one whole `m`.
bool parse_message(std::string_view bytes, google::protobuf::MessageLite& m, int extra = 0);

// A request that cannot be served, with its status: thrown by refuse() and
// turned back into the status by status_of().
struct Refusal {
  Status status;
};
[[noreturn]] void refuse(Code code, std::string message);
// kilnd is full for now (its compile queue): the same request may be served later.
struct Busy : Refusal {};

// What a request's operator names: one func, or one graph with the module
// that defines it.
struct Unit {
  std::optional<ir::Func> func;
  std::optional<ir::Graph> graph;
  ir::Module module;  // graphs: the operators defined beside it
};

class BlobStore;

// The func or graph a request's operator names (INVALID_ARGUMENT otherwise:
// no operator, a name the source lacks, a source with several and no name).
// A model (op.model) is imported from its blob in `blobs` (NOT_FOUND when it
// is not there; FAILED_PRECONDITION without a store). Parse, validation and
// import errors are CompileErrors with the CLI's messages.
Unit resolve_unit(const v1::Operator& op, const Limits& limits, const BlobStore* blobs = nullptr);
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

// A comparison with the reference interpreter, as Run and Measure answer it.
void wire_check(const interp::Mismatch& m, v1::OutputCheck* out);

// What an exception means to the caller: a Refusal its status, a
// DeadlineExceeded DEADLINE_EXCEEDED, a CompileError INVALID_ARGUMENT with its
// message (one without a position of its own is about `op`'s file, named as
// the offline CLI names it), bad_alloc RESOURCE_EXHAUSTED, anything else
// INTERNAL.
Status status_of(const std::exception_ptr& e, const v1::Operator& op);

}  // namespace kiln::server
