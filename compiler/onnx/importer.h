// Inside the ONNX importer: the values a model's nodes produce, its constants
// evaluated at import, and the graph being built. Not a public header.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/error.h"
#include "kiln/ir.h"
#include "kiln/onnx.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx {

using Shape = std::vector<int64_t>;

int64_t element_count(const Shape& s);
std::string shape_text(const Shape& s);

// A tensor known at import: an initializer, a Constant, or what a node of
// constants computed (a Shape -> Gather -> Concat chain). Its elements are
// held as the dtype stores them.
struct Const {
  ir::DType dtype = ir::DType::F32;
  Shape shape;
  std::shared_ptr<const std::vector<unsigned char>> bytes;

  int64_t size() const { return element_count(shape); }
  double at(int64_t k) const;  // any dtype, as a double
  int64_t int_at(int64_t k) const;
  std::vector<int64_t> ints() const;  // every element, as integers

  // A constant of `shape` whose element k is value(k), stored as dtype.
  template <typename F>
  static Const make(ir::DType dtype, Shape shape, F value);
};

// The constant from an ONNX TensorProto. Throws CompileError (stage import,
// `where` in the message) for an unsupported dtype, external data, a size
// over `max_bytes`, or data that disagrees with the dims.
Const const_from_proto(const ::onnx::TensorProto& t, uint64_t max_bytes, const std::string& where);

// A value a node reads or writes: its dtype and ONNX shape, and where it
// lives — a graph tensor (`tensor`: its kiln name; the graph tensor may have
// another shape of as many elements), a constant, or both once a constant is
// passed to a call.
struct Value {
  ir::DType dtype = ir::DType::F32;
  Shape shape;
  std::string tensor;
  std::optional<Const> constant;
  std::string name;  // the ONNX name it was defined under, for the tensor made from it
};

// The node being imported, for errors.
struct NodeInfo {
  const ::onnx::NodeProto* node = nullptr;
  int64_t opset = 0;
  std::string file;
  std::string label() const;  // "node '/layer1/0/conv1/Conv' (Conv, opset 13)"
};

// A CompileError (stage import) about the node.
[[noreturn]] void fail(const NodeInfo& n, const std::string& message);

// A node's attributes: `fallback` when it has none of the name; fail() when
// it has one of another type.
const ::onnx::AttributeProto* attr(const NodeInfo& n, const std::string& name);
int64_t attr_int(const NodeInfo& n, const std::string& name, int64_t fallback);
float attr_float(const NodeInfo& n, const std::string& name, float fallback);
std::vector<int64_t> attr_ints(const NodeInfo& n, const std::string& name,
                               std::vector<int64_t> fallback);
std::string attr_string(const NodeInfo& n, const std::string& name, std::string fallback);
// An axis attribute in [-rank, rank) as an axis in [0, rank); fail() outside.
int64_t axis_of(const NodeInfo& n, int64_t axis, size_t rank);

// The importer's state while it walks the nodes.
class Builder {
 public:
  Builder(std::string file, ImportOptions options) : file_(std::move(file)), options_(options) {}

  ir::Graph& graph() { return graph_; }
  const ImportOptions& options() const { return options_; }
  const std::string& file() const { return file_; }

  // The value `onnx_name` names; fails for a name nothing defined.
  const Value& value(const NodeInfo& n, const std::string& onnx_name) const;
  bool has_value(const std::string& onnx_name) const { return values_.count(onnx_name) != 0; }
  void define(const std::string& onnx_name, Value v);

  // A graph tensor for v: its tensor, or its constant as a new const tensor.
  std::string tensor_of(const Value& v, const std::string& hint);

  // Appends a call of library func `func` with these params, reading `args`
  // (tensor names) and writing one new tensor per result, of the given ONNX
  // shapes (f32). Checks that every argument and result holds as many
  // elements as the func's buffers do under the params; returns the results.
  std::vector<std::string> call(const NodeInfo& n, const std::string& func,
                                const std::map<std::string, int64_t>& params,
                                const std::vector<std::string>& args,
                                const std::vector<Shape>& result_shapes, const std::string& hint);

  // A fresh kiln name for an ONNX one: identifier characters only, unique.
  std::string fresh_name(const std::string& onnx_name);

  // How many times the graph reads an ONNX value: as a node's input or as
  // one of its outputs (count_uses, once, before the nodes are imported).
  void count_uses(const ::onnx::GraphProto& g);
  int uses(const std::string& onnx_name) const;

 private:
  std::string file_;
  ImportOptions options_;
  ir::Graph graph_;
  std::map<std::string, Value> values_;
  std::map<std::string, int> taken_;
  std::map<std::string, int> uses_;
};

// The batch size a model with a run-time batch is imported with for the proof below (any
// size above 1 shows how each op treats the batch).
constexpr int64_t kBatchWitness = 2;

// Shows that the model keeps the samples of its run-time batch `batch` apart:
// every output's sample k is computed from sample k of `batched_inputs` (and
// what is the same for every sample) alone, so that running the model for one
// sample on each is running it on the batch. `b` is the model imported with
// the batch bound to kBatchWitness. Fails, naming the first node it cannot show it for
// and why, and suggesting --dim (batch.cpp).
void check_samples_apart(const ::onnx::GraphProto& g, const Builder& b, const std::string& batch,
                         const std::vector<std::string>& batched_inputs, int64_t opset);

// Imports one node: defines its outputs in b. Fails for an op kiln does not support.
void import_node(Builder& b, const NodeInfo& n);

template <typename F>
Const Const::make(ir::DType dtype, Shape shape, F value) {
  Const c;
  c.dtype = dtype;
  c.shape = std::move(shape);
  int64_t n = c.size();
  auto data =
      std::make_shared<std::vector<unsigned char>>(static_cast<size_t>(n) * ir::dtype_bytes(dtype));
  unsigned char* p = data->data();
  size_t width = ir::dtype_bytes(dtype);
  for (int64_t k = 0; k < n; ++k) {
    auto v = value(k);  // an integer type keeps 64-bit integers exact
    if constexpr (std::is_integral_v<decltype(v)>) {
      ir::write_element_int(dtype, p + static_cast<size_t>(k) * width, static_cast<int64_t>(v));
    } else {
      ir::write_element(dtype, p + static_cast<size_t>(k) * width, static_cast<double>(v));
    }
  }
  c.bytes = std::move(data);
  return c;
}

}  // namespace kiln::onnx
