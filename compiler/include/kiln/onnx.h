// ONNX models in: a ModelProto becomes a kiln graph whose calls are funcs of
// the operator library (kiln/library.h) and whose constants are the model's
// initializers (DESIGN.md section 7b, docs/models.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kiln/buffers.h"
#include "kiln/ir.h"

namespace kiln::onnx {

struct ImportOptions {
  // The largest tensor (an initializer, a constant, a value) a model may
  // declare, in bytes: a model that declares more is refused before anything
  // is allocated for it.
  uint64_t max_tensor_bytes = uint64_t{1} << 31;
  // Values for the inputs' symbolic dimensions ("batch" -> 8, from `--dim
  // batch=8`): the model is imported with them as static shapes. A name no
  // input has is an error, as is a symbolic dimension without a value.
  std::map<std::string, int64_t> dims;
};

// The opsets of the default domain kiln reads.
constexpr int64_t kMinOpset = 11;
constexpr int64_t kMaxOpset = 17;

// Reads `bytes`, a serialized ModelProto from `file` (named in errors), into a
// module holding one graph, named after the model's graph. Throws
// CompileError (stage "import") for a file that is not a well-formed model
// (truncated, an initializer whose data disagrees with its shape, a node
// reading a tensor nobody defines, a cycle) and for what kiln does not
// support yet, naming the node, its op type and opset and what is supported.
ir::Module import_model(std::string_view bytes, const std::string& file,
                        const ImportOptions& options = {});

// Reads the file at `path`, then import_model.
ir::Module import_file(const std::string& path, const ImportOptions& options = {});

// A tensor file as ONNX's tests keep them (a serialized TensorProto: the
// input_0.pb beside a node test's model): its values, under its name.
// Throws CompileError (stage import) as import_model does for an initializer.
std::pair<std::string, HostBuffer> read_tensor_file(const std::string& path,
                                                    const ImportOptions& options = {});

// The ONNX op types kiln imports (in some of their forms: an unsupported
// attribute is an import error that says so), sorted.
const std::vector<std::string>& supported_op_types();

// Whether `path` names an ONNX model (by its .onnx extension).
bool is_model_path(const std::string& path);

}  // namespace kiln::onnx
