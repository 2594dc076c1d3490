// Artifacts: the metadata that says how to call a kernel, whichever backend made it
// (kiln/artifact.h).
#include "kiln/artifact.h"

#include "kiln/json.h"

namespace kiln::codegen {
namespace {

std::string arg_json(const ArtifactArg& a) {
  JsonObject o;
  o.str("kind", a.kind == ArtifactArg::Kind::Param ? "param" : "buffer");
  o.str("name", a.name).str("dtype", ir::dtype_name(a.dtype));
  if (a.kind == ArtifactArg::Kind::Buffer) {
    o.str("role", ir::buf_kind_name(a.role)).raw("shape", json_string_array(a.shape));
  }
  return o.done();
}

}  // namespace

std::string Artifact::metadata_json() const {
  std::vector<std::string> arg_list;
  for (const ArtifactArg& a : args) arg_list.push_back(arg_json(a));
  // No source positions: an artifact is a function of its key, which holds
  // the operator but not where its text put it (a cached artifact serves
  // every file that holds the same operator).
  std::vector<std::string> check_list;
  for (size_t k = 0; k < checks.size(); ++k) {
    const ir::RuntimeCheck& c = checks[k];
    check_list.push_back(JsonObject()
                             .integer("status", ir::kStatusCheckBase + static_cast<int64_t>(k))
                             .str("kind", ir::RuntimeCheck::kind_name(c.kind))
                             .str("subject", c.subject)
                             .str("message", c.message)
                             .done());
  }
  JsonObject out;
  out.str("kind", kind);
  out.str("name", name)
      .str("triple", triple)
      .str("cpu", cpu)
      .str("features", features)
      .integer("opt_level", opt_level)
      .boolean("fast_math", fast_math)
      .str("entry", entry)
      .str("abi", "kiln_value")
      .raw("args", json_array(arg_list))
      .raw("imports", json_string_array(imports))
      .integer("size", static_cast<int64_t>(code.size()))
      .str("code_sha256", code_sha256)
      .str("key", key)
      .raw("checks", json_array(check_list));
  if (kind != "shared-object") {
    std::vector<std::string> kernel_list, temp_list;
    for (const GpuKernel& k : kernels) {
      std::vector<std::string> grid;
      for (const ir::Expr& e : k.grid) grid.push_back(ir::to_string(e));
      kernel_list.push_back(JsonObject()
                                .str("name", k.name)
                                .raw("grid", json_string_array(grid))
                                .raw("block", json_int_array({k.block[0], k.block[1], k.block[2]}))
                                .integer("shared_bytes", k.shared_bytes)
                                .done());
    }
    for (const GpuTemp& t : temps) {
      std::vector<std::string> shape;
      for (const ir::Expr& e : t.shape) shape.push_back(ir::to_string(e));
      temp_list.push_back(JsonObject()
                              .str("name", t.name)
                              .str("dtype", ir::dtype_name(t.dtype))
                              .raw("shape", json_string_array(shape))
                              .done());
    }
    std::vector<std::string> constant_list;
    for (const GpuConstant& k : constants)
      constant_list.push_back(JsonObject().str("buffer", k.buffer).str("symbol", k.symbol).done());
    out.raw("kernels", json_array(kernel_list))
        .raw("temps", json_array(temp_list))
        .raw("constants", json_array(constant_list));
  }
  return out.done();
}

std::vector<ArtifactArg> artifact_args(const ir::LoweredFunc& f) {
  std::vector<ArtifactArg> args;
  for (const std::string& p : f.params) {
    ArtifactArg arg;
    arg.kind = ArtifactArg::Kind::Param;
    arg.name = p;
    args.push_back(arg);
  }
  for (const ir::Buf& b : f.args) {
    ArtifactArg arg;
    arg.kind = ArtifactArg::Kind::Buffer;
    arg.name = b.name;
    arg.dtype = b.dtype;
    arg.role = b.kind;
    for (const ir::Expr& e : b.shape) arg.shape.push_back(ir::to_string(e));
    args.push_back(arg);
  }
  return args;
}

}  // namespace kiln::codegen
