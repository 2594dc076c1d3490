// Constants at import: ONNX TensorProtos read into kiln's element layout, and
// the errors the importer reports.
#include <fmt/ranges.h>

#include <cstring>

#include "importer.h"

namespace kiln::onnx {

int64_t element_count(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

std::string shape_text(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

double Const::at(int64_t k) const {
  return ir::read_element(dtype, bytes->data() + static_cast<size_t>(k) * ir::dtype_bytes(dtype));
}

int64_t Const::int_at(int64_t k) const {
  if (!ir::is_float(dtype)) {
    return ir::read_element_int(dtype,
                                bytes->data() + static_cast<size_t>(k) * ir::dtype_bytes(dtype));
  }
  double d = at(k);
  // Saturating, NaN to the smallest: a float index past the 64-bit range (or none at all) is
  // out of any shape, never a valid 0.
  if (!(d > -9.2e18)) return INT64_MIN;
  if (!(d < 9.2e18)) return INT64_MAX;
  return static_cast<int64_t>(d);
}

std::vector<int64_t> Const::ints() const {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < size(); ++k) out.push_back(int_at(k));
  return out;
}

std::string NodeInfo::label() const {
  if (!node) return "the model's outputs";
  std::string name =
      node->name().empty() ? node->output_size() > 0 ? node->output(0) : "?" : node->name();
  return fmt::format("node '{}' ({}, opset {})", name, node->op_type(), opset);
}

void fail(const NodeInfo& n, const std::string& message) {
  throw CompileError(ErrorStage::Import, SourceLoc{n.file, 0, 0}, n.label() + ": " + message);
}

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& message) {
  throw CompileError(ErrorStage::Import, SourceLoc{}, where + ": " + message);
}

const char* proto_type_name(int t) {
  switch (t) {
    case ::onnx::TensorProto::FLOAT:
      return "float";
    case ::onnx::TensorProto::UINT8:
      return "uint8";
    case ::onnx::TensorProto::INT8:
      return "int8";
    case ::onnx::TensorProto::UINT16:
      return "uint16";
    case ::onnx::TensorProto::INT16:
      return "int16";
    case ::onnx::TensorProto::INT32:
      return "int32";
    case ::onnx::TensorProto::INT64:
      return "int64";
    case ::onnx::TensorProto::STRING:
      return "string";
    case ::onnx::TensorProto::BOOL:
      return "bool";
    case ::onnx::TensorProto::FLOAT16:
      return "float16";
    case ::onnx::TensorProto::DOUBLE:
      return "double";
    case ::onnx::TensorProto::BFLOAT16:
      return "bfloat16";
    default:
      return "an unknown type";
  }
}

}  // namespace

Const const_from_proto(const ::onnx::TensorProto& t, uint64_t max_bytes, const std::string& where) {
  Const c;
  switch (t.data_type()) {
    case ::onnx::TensorProto::FLOAT:
      c.dtype = ir::DType::F32;
      break;
    case ::onnx::TensorProto::DOUBLE:
      c.dtype = ir::DType::F64;
      break;
    case ::onnx::TensorProto::INT32:
      c.dtype = ir::DType::I32;
      break;
    case ::onnx::TensorProto::INT64:
      c.dtype = ir::DType::I64;
      break;
    case ::onnx::TensorProto::BOOL:
      c.dtype = ir::DType::Bool;
      break;
    default:
      bad(where, fmt::format("tensor of {} (data_type {}): kiln reads float, double, int32, "
                             "int64 and bool tensors",
                             proto_type_name(t.data_type()), t.data_type()));
  }
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL || t.external_data_size() > 0) {
    bad(where,
        "its data is in an external file, which kiln does not read yet (save the model "
        "with its weights inside: onnx.save(model, path, save_as_external_data=False))");
  }
  uint64_t bytes = ir::dtype_bytes(c.dtype);
  for (int64_t d : t.dims()) {
    if (d < 0) bad(where, fmt::format("dimension {} is negative", d));
    c.shape.push_back(d);
    if (d != 0 && bytes > max_bytes / static_cast<uint64_t>(d)) {
      bad(where, fmt::format("shape {} declares more than {} bytes (the largest tensor kiln "
                             "imports)",
                             shape_text(Shape(t.dims().begin(), t.dims().end())), max_bytes));
    }
    bytes *= static_cast<uint64_t>(d);
  }
  int64_t n = c.size();
  auto data = std::make_shared<std::vector<unsigned char>>();
  auto count_error = [&](size_t have) {
    bad(where, fmt::format("shape {} holds {} elements but the tensor has {} values",
                           shape_text(c.shape), n, have));
  };
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes) {
      bad(where,
          fmt::format("shape {} of {} needs {} bytes of data but the tensor has {}",
                      shape_text(c.shape), ir::dtype_name(c.dtype), bytes, t.raw_data().size()));
    }
    data->assign(t.raw_data().begin(), t.raw_data().end());  // little-endian, as kiln's
  } else {
    data->resize(bytes);
    unsigned char* p = data->data();
    switch (c.dtype) {
      case ir::DType::F32:
        if (t.float_data_size() != n) count_error(static_cast<size_t>(t.float_data_size()));
        if (n) std::memcpy(p, t.float_data().data(), bytes);
        break;
      case ir::DType::F64:
        if (t.double_data_size() != n) count_error(static_cast<size_t>(t.double_data_size()));
        if (n) std::memcpy(p, t.double_data().data(), bytes);
        break;
      case ir::DType::I64:
        if (t.int64_data_size() != n) count_error(static_cast<size_t>(t.int64_data_size()));
        if (n) std::memcpy(p, t.int64_data().data(), bytes);
        break;
      case ir::DType::I32:
        if (t.int32_data_size() != n) count_error(static_cast<size_t>(t.int32_data_size()));
        if (n) std::memcpy(p, t.int32_data().data(), bytes);
        break;
      case ir::DType::Bool:
        // Booleans travel in int32_data, one per element.
        if (t.int32_data_size() != n) count_error(static_cast<size_t>(t.int32_data_size()));
        for (int64_t k = 0; k < n; ++k) p[k] = t.int32_data(static_cast<int>(k)) != 0;
        break;
    }
  }
  c.bytes = std::move(data);
  return c;
}

}  // namespace kiln::onnx
