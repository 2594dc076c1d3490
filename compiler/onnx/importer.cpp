// The ONNX importer's driver: the model read and checked, its inputs and
// initializers defined, each node imported in order (ops.cpp), the outputs
// named.
#include "importer.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "kiln/library.h"

namespace kiln::onnx {

namespace {

[[noreturn]] void model_error(const std::string& file, const std::string& message) {
  throw CompileError(ErrorStage::Import, SourceLoc{file, 0, 0}, message);
}

}  // namespace

const Value& Builder::value(const NodeInfo& n, const std::string& onnx_name) const {
  auto it = values_.find(onnx_name);
  if (it == values_.end()) {
    fail(n, fmt::format("reads '{}', which no input, initializer or earlier node defines (the "
                        "nodes must be in topological order, without cycles)",
                        onnx_name));
  }
  return it->second;
}

void Builder::define(const std::string& onnx_name, Value v) {
  v.name = onnx_name;
  values_[onnx_name] = std::move(v);
}

std::string Builder::fresh_name(const std::string& onnx_name) {
  std::string s;
  for (char ch : onnx_name) {
    s += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ? ch : '_';
  }
  while (s.starts_with("_")) s.erase(0, 1);
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "t" + s;
  int& seen = taken_[s];
  return ++seen == 1 ? s : fmt::format("{}_{}", s, seen);
}

void Builder::count_uses(const ::onnx::GraphProto& g) {
  for (const ::onnx::NodeProto& node : g.node()) {
    for (const std::string& in : node.input()) {
      if (!in.empty()) ++uses_[in];
    }
  }
  for (const ::onnx::ValueInfoProto& out : g.output()) ++uses_[out.name()];
}

int Builder::uses(const std::string& onnx_name) const {
  auto it = uses_.find(onnx_name);
  return it == uses_.end() ? 0 : it->second;
}

std::string Builder::tensor_of(const Value& v, const std::string& hint) {
  if (!v.tensor.empty()) return v.tensor;
  ir::GraphTensor t;
  t.name = fresh_name(v.name.empty() ? hint : v.name);
  t.dtype = v.constant->dtype;
  t.shape = v.constant->shape;
  t.kind = ir::TensorKind::Const;
  t.init.kind = ir::ConstInit::Kind::Data;
  t.init.data = v.constant->bytes;
  t.where = SourceLoc{file_, 0, 0};
  graph_.tensors.push_back(std::move(t));
  return graph_.tensors.back().name;
}

std::vector<std::string> Builder::call(const NodeInfo& n, const std::string& func,
                                       const std::map<std::string, int64_t>& params,
                                       const std::vector<std::string>& args,
                                       const std::vector<Shape>& result_shapes,
                                       const std::string& hint) {
  ir::GraphCall c;
  c.op = library::func(func);
  for (ir::Param& p : c.op.params) {
    auto it = params.find(p.name);
    if (it != params.end()) {
      p.value = it->second;
    } else if (!p.value) {
      throw std::logic_error(fmt::format("{}: {} needs param {}", n.label(), func, p.name));
    }
  }
  for (const auto& [name, value] : params) {
    if (!c.op.find_param(name))
      throw std::logic_error(fmt::format("{}: {} has no param {}", n.label(), func, name));
  }
  std::vector<const ir::Buf*> ins = c.op.bufs_of_kind(ir::BufKind::Input);
  std::vector<const ir::Buf*> outs = c.op.bufs_of_kind(ir::BufKind::Output);
  if (ins.size() != args.size() || outs.size() != result_shapes.size()) {
    throw std::logic_error(fmt::format("{}: {} takes {} inputs and {} outputs", n.label(), func,
                                       ins.size(), outs.size()));
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    const ir::GraphTensor* t = graph_.find_tensor(args[i]);
    Shape want = ir::bound_shape(c.op, *ins[i]);
    if (!t || element_count(t->shape) != element_count(want) || t->dtype != ins[i]->dtype) {
      throw std::logic_error(fmt::format("{}: argument {} of {} is {} where {} {} is wanted",
                                         n.label(), i, func, t ? shape_text(t->shape) : "missing",
                                         ir::dtype_name(ins[i]->dtype), shape_text(want)));
    }
  }
  c.args = args;
  c.where = SourceLoc{file_, 0, 0};
  for (size_t o = 0; o < outs.size(); ++o) {
    Shape declared = ir::bound_shape(c.op, *outs[o]);
    if (element_count(declared) != element_count(result_shapes[o])) {
      throw std::logic_error(fmt::format("{}: result {} of {} is {}, not {}", n.label(), o, func,
                                         shape_text(declared), shape_text(result_shapes[o])));
    }
    ir::GraphTensor t;
    t.name = fresh_name(hint);
    t.dtype = outs[o]->dtype;
    t.shape = result_shapes[o];
    t.kind = ir::TensorKind::Value;
    t.where = c.where;
    c.results.push_back(t.name);
    graph_.tensors.push_back(std::move(t));
  }
  graph_.calls.push_back(std::move(c));
  return graph_.calls.back().results;
}

namespace {

ir::DType value_dtype(int elem_type, const std::string& file, const std::string& what) {
  switch (elem_type) {
    case ::onnx::TensorProto::FLOAT:
      return ir::DType::F32;
    case ::onnx::TensorProto::INT64:
      return ir::DType::I64;
    case ::onnx::TensorProto::INT32:
      return ir::DType::I32;
    default:
      model_error(file, fmt::format("{} has element type {}: kiln runs float models (inputs "
                                    "and outputs of type float)",
                                    what, elem_type));
  }
}

Shape static_shape(const ::onnx::ValueInfoProto& v, const std::string& file,
                   const std::map<std::string, int64_t>& dims, std::set<std::string>& used) {
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) {
    model_error(file, fmt::format("input '{}' has no tensor shape", v.name()));
  }
  Shape s;
  for (const ::onnx::TensorShapeProto::Dimension& d : v.type().tensor_type().shape().dim()) {
    if (d.has_dim_value() && d.dim_value() > 0) {
      s.push_back(d.dim_value());
      continue;
    }
    if (d.has_dim_param()) {
      auto it = dims.find(d.dim_param());
      if (it != dims.end()) {
        s.push_back(it->second);
        used.insert(it->first);
        continue;
      }
      model_error(file, fmt::format("input '{}' has the symbolic dimension '{}' on axis {}: "
                                    "kiln takes a batch (a leading symbolic dimension) at run "
                                    "time, and the others at import: give its value (--dim "
                                    "{}=N), or export the model without it in dynamic_axes",
                                    v.name(), d.dim_param(), s.size(), d.dim_param()));
    }
    model_error(file, fmt::format("input '{}' has an unknown dimension {}: kiln imports static "
                                  "shapes (export the model without dynamic_axes)",
                                  v.name(), s.size()));
  }
  return s;
}

}  // namespace

std::pair<std::string, HostBuffer> read_tensor_file(const std::string& path,
                                                    const ImportOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) model_error(path, "cannot open the file");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  ::onnx::TensorProto t;
  std::string data = bytes.str();
  if (data.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !t.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
    model_error(path, "not a TensorProto (a truncated or damaged file?)");
  }
  Const c = const_from_proto(t, options.max_tensor_bytes, path);
  HostBuffer b(c.dtype, c.shape);
  if (!c.bytes->empty()) std::memcpy(b.data(), c.bytes->data(), c.bytes->size());
  return {t.name(), std::move(b)};
}

bool is_model_path(const std::string& path) { return path.ends_with(".onnx"); }

namespace {

// The model's initializers, decoded once (a model with a run-time batch is built twice; the
// builds share the bytes).
using Initializers = std::vector<std::pair<std::string, Const>>;

Initializers initializers(const ::onnx::GraphProto& g, const std::string& file,
                          const ImportOptions& options) {
  Initializers out;
  for (const ::onnx::TensorProto& t : g.initializer()) {
    out.emplace_back(t.name(),
                     const_from_proto(t, options.max_tensor_bytes,
                                      fmt::format("{}: initializer '{}'", file, t.name())));
  }
  return out;
}

// The model's graph built with `options`: every symbolic dimension has its value there.
std::unique_ptr<Builder> build(const ::onnx::GraphProto& g, const Initializers& init, int64_t opset,
                               const std::string& file, const ImportOptions& options) {
  auto builder = std::make_unique<Builder>(file, options);
  Builder& b = *builder;
  std::string graph_name = g.name().empty() ? "model" : g.name();
  b.graph().name = b.fresh_name(graph_name);
  b.graph().where = SourceLoc{file, 0, 0};

  std::set<std::string> initialized;
  for (const auto& [name, c] : init) {
    Value v;
    v.constant = c;
    v.dtype = c.dtype;
    v.shape = c.shape;
    initialized.insert(name);
    b.define(name, std::move(v));
  }
  std::set<std::string> used_dims;
  for (const auto& [name, value] : options.dims) {
    if (value <= 0) {
      model_error(file, fmt::format("--dim {}={}: a dimension must be positive", name, value));
    }
  }
  for (const ::onnx::ValueInfoProto& in : g.input()) {
    if (initialized.count(in.name())) continue;  // an initializer listed as an input (IR < 4)
    Value v;
    v.dtype = value_dtype(in.type().tensor_type().elem_type(), file,
                          fmt::format("input '{}'", in.name()));
    v.shape = static_shape(in, file, options.dims, used_dims);
    if (static_cast<uint64_t>(element_count(v.shape)) * 4 > options.max_tensor_bytes) {
      model_error(file, fmt::format("input '{}' of shape {} is larger than {} bytes", in.name(),
                                    shape_text(v.shape), options.max_tensor_bytes));
    }
    ir::GraphTensor t;
    t.name = b.fresh_name(in.name());
    t.dtype = v.dtype;
    t.shape = v.shape;
    t.kind = ir::TensorKind::Input;
    t.where = SourceLoc{file, 0, 0};
    v.tensor = t.name;
    b.graph().tensors.push_back(std::move(t));
    b.define(in.name(), std::move(v));
  }
  for (const auto& [name, value] : options.dims) {
    if (!used_dims.count(name)) {
      model_error(file, fmt::format("--dim {}={}: no input of the model has a symbolic dimension "
                                    "'{}'",
                                    name, value, name));
    }
  }
  b.count_uses(g);
  for (const ::onnx::NodeProto& node : g.node()) {
    NodeInfo n{&node, opset, file};
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      fail(n, fmt::format("is in domain '{}'; kiln imports ops of the default domain (ai.onnx)",
                          node.domain()));
    }
    for (const std::string& out : node.output()) {
      if (!out.empty() && b.has_value(out)) {
        fail(n, fmt::format("defines '{}' again (a value is defined once)", out));
      }
    }
    import_node(b, n);
  }
  return builder;
}

// The run-time batch: the symbolic leading dimension of the inputs that `dims` gives no value,
// and the inputs that have it. "" when there is none.
std::pair<std::string, std::vector<std::string>> run_time_batch(
    const ::onnx::GraphProto& g, const std::map<std::string, int64_t>& dims,
    const std::string& file) {
  std::set<std::string> initialized;
  for (const ::onnx::TensorProto& t : g.initializer()) initialized.insert(t.name());
  std::string batch;
  std::vector<std::string> inputs;
  for (const ::onnx::ValueInfoProto& in : g.input()) {
    if (initialized.count(in.name()) || !in.type().tensor_type().has_shape()) continue;
    const auto& shape = in.type().tensor_type().shape();
    if (shape.dim_size() == 0 || !shape.dim(0).has_dim_param()) continue;
    const std::string& name = shape.dim(0).dim_param();
    if (name.empty() || dims.count(name)) continue;
    if (!batch.empty() && name != batch) {
      model_error(file, fmt::format("inputs '{}' and '{}' lead with different symbolic dimensions "
                                    "('{}' and '{}'); kiln takes one batch at run time: give the "
                                    "others their values (--dim {}=N)",
                                    inputs.front(), in.name(), batch, name, name));
    }
    batch = name;
    inputs.push_back(in.name());
  }
  return {batch, inputs};
}

}  // namespace

ir::Module import_model(std::string_view bytes, const std::string& file,
                        const ImportOptions& options) {
  ::onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    model_error(file, fmt::format("the model is {} bytes; a protobuf message holds less than 2 GiB "
                                  "(keep larger weights as external data, not read yet)",
                                  bytes.size()));
  }
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    model_error(file, fmt::format("not an ONNX model: its {} bytes do not parse as a ModelProto "
                                  "(a truncated or damaged file, or another format)",
                                  bytes.size()));
  }
  if (!model.has_graph()) model_error(file, "the model has no graph (a truncated file?)");
  int64_t opset = 0;
  for (const ::onnx::OperatorSetIdProto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  if (opset == 0) {
    model_error(file, "the model imports no opset of the default domain (ai.onnx)");
  }
  if (opset < kMinOpset || opset > kMaxOpset) {
    model_error(file, fmt::format("the model uses opset {} of ai.onnx; kiln reads opsets {} to {} "
                                  "(export with opset_version={})",
                                  opset, kMinOpset, kMaxOpset, kMaxOpset));
  }
  const ::onnx::GraphProto& g = model.graph();
  auto [batch, batched_inputs] = run_time_batch(g, options.dims, file);
  Initializers init = initializers(g, file, options);
  std::unique_ptr<Builder> built;
  if (batch.empty()) {
    built = build(g, init, opset, file, options);
  } else {
    // The model for one sample, once it is shown to keep the samples of a batch apart: the
    // proof follows the batch through the model imported for two (batch.cpp).
    ImportOptions two = options;
    two.dims[batch] = kBatchWitness;
    std::unique_ptr<Builder> witness;
    try {
      witness = build(g, init, opset, file, two);
    } catch (const CompileError& e) {
      model_error(file, fmt::format("the model does not import for a batch of 2 samples (its "
                                    "symbolic dimension '{}'), so its batch cannot be chosen at "
                                    "run time: {}",
                                    batch, e.message()));
    }
    check_samples_apart(g, *witness, batch, batched_inputs, opset);
    ImportOptions one = options;
    one.dims[batch] = 1;
    built = build(g, init, opset, file, one);
    built->graph().batch = batch;
    for (const std::string& in : batched_inputs) {
      built->graph().batched_inputs.push_back(
          built->value(NodeInfo{nullptr, opset, file}, in).tensor);
    }
  }
  Builder& b = *built;
  if (g.output_size() == 0) model_error(file, "the graph has no outputs");
  for (const ::onnx::ValueInfoProto& out : g.output()) {
    if (!b.has_value(out.name())) {
      model_error(file, fmt::format("output '{}' is defined by no node", out.name()));
    }
    Value v = b.value(NodeInfo{nullptr, opset, file}, out.name());
    if (v.constant) {
      // A constant output (a Shape, or an op on constants): its own const tensor.
      v.tensor.clear();
      b.graph().outputs.push_back(b.tensor_of(v, out.name()));
      continue;
    }
    ir::GraphTensor* t = b.graph().find_tensor(v.tensor);
    bool taken = std::find(b.graph().outputs.begin(), b.graph().outputs.end(), v.tensor) !=
                 b.graph().outputs.end();
    if (t->kind == ir::TensorKind::Input || taken) {
      // The input itself, a view of it, or another output under a second
      // name: a copy, so that each output is a tensor of its own shape.
      if (v.dtype != ir::DType::F32) {
        model_error(file, fmt::format("output '{}' is a {} copy of an input or another output, "
                                      "which kiln does not make yet",
                                      out.name(), ir::dtype_name(v.dtype)));
      }
      NodeInfo n{nullptr, opset, file};
      std::string copy =
          b.call(n, "copy", {{"N", element_count(v.shape)}}, {v.tensor}, {v.shape}, out.name())[0];
      b.graph().outputs.push_back(copy);
      continue;
    }
    t->shape = v.shape;  // the model's shape for it (a Reshape at the end costs nothing)
    b.graph().outputs.push_back(v.tensor);
  }
  ir::Module m;
  m.graphs.push_back(std::move(b.graph()));
  return m;
}

ir::Module import_file(const std::string& path, const ImportOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) model_error(path, "cannot open the file");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) model_error(path, "cannot read the file");
  return import_model(bytes.str(), path, options);
}

}  // namespace kiln::onnx
