// ONNX import: models built here with ONNX's protobuf classes, imported,
// and either run (compiled kernels against the reference interpreter on the
// imported graph) or refused with an error that names what is wrong.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/onnx.h"
#include "kiln/run.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

::onnx::TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims, float start) {
  ::onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(::onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  for (int64_t k = 0; k < n; ++k) t.add_float_data(start + 0.01f * static_cast<float>(k % 17));
  return t;
}

void add_input(::onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims) {
  ::onnx::ValueInfoProto* v = g->add_input();
  v->set_name(name);
  ::onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op,
                            std::vector<std::string> ins, std::vector<std::string> outs) {
  ::onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + outs[0]);
  for (const std::string& i : ins) n->add_input(i);
  for (const std::string& o : outs) n->add_output(o);
  return n;
}

// Input 0's dimension `axis` made symbolic, named `name`.
void symbolic(::onnx::GraphProto* g, int axis, const std::string& name) {
  g->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(axis)
      ->set_dim_param(name);
}

void set_ints(::onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  ::onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void set_int(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  ::onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

// x [1, 3, 8, 8] -> Conv 3x3 stride 2 pad 1 (16 filters, bias) -> Relu ->
// GlobalAveragePool -> Flatten -> Gemm (transB) -> y [1, 5].
::onnx::ModelProto small_cnn(int64_t opset = 13) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  ::onnx::GraphProto* g = m.mutable_graph();
  g->set_name("small");
  add_input(g, "x", {1, 3, 8, 8});
  *g->add_initializer() = float_tensor("w", {16, 3, 3, 3}, -0.08f);
  *g->add_initializer() = float_tensor("b", {16}, -0.05f);
  *g->add_initializer() = float_tensor("fw", {5, 16}, -0.07f);
  *g->add_initializer() = float_tensor("fb", {5}, 0.1f);
  ::onnx::NodeProto* conv = add_node(g, "Conv", {"x", "w", "b"}, {"c"});
  set_ints(conv, "strides", {2, 2});
  set_ints(conv, "pads", {1, 1, 1, 1});
  add_node(g, "Relu", {"c"}, {"r"});
  add_node(g, "GlobalAveragePool", {"r"}, {"p"});
  add_node(g, "Flatten", {"p"}, {"f"});
  set_int(add_node(g, "Gemm", {"f", "fw", "fb"}, {"y"}), "transB", 1);
  g->add_output()->set_name("y");
  return m;
}

ir::Module import(const ::onnx::ModelProto& m) {
  return onnx::import_model(m.SerializeAsString(), "m.onnx");
}

// The import error's message, or "" when the model imports.
std::string import_error(const ::onnx::ModelProto& m, const onnx::ImportOptions& options = {}) {
  try {
    onnx::import_model(m.SerializeAsString(), "m.onnx", options);
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Import) << e.what();
    return e.located("m.onnx");
  }
  return "";
}

TEST(OnnxImport, SmallCnnRunsAsTheReferenceInterpreterDoes) {
  ir::Module mod = import(small_cnn());
  ASSERT_EQ(mod.graphs.size(), 1u);
  const ir::Graph& g = mod.graphs[0];
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.find_tensor(g.outputs[0])->shape, (std::vector<int64_t>{1, 5}));
  RunSpec spec;
  spec.check = true;
  GraphRunOutcome r = run_graph(g, spec);
  // The Relu reads the conv's output as one flat row; the graph passes fuse it
  // into the conv's channel-blocked write-back all the same.
  ir::Graph optimized = graph::optimize(g, CompileOptions{});
  EXPECT_EQ(optimized.calls.at(0).op.name, "conv2d_relu");
  EXPECT_EQ(r.calls_after, r.calls_before - 1);
  ASSERT_TRUE(r.mismatch);
  EXPECT_TRUE(r.mismatch->ok) << r.mismatch->problem << " " << r.mismatch->buffer;
}

::onnx::TensorProto int_tensor(const std::string& name, std::vector<int64_t> values) {
  ::onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(::onnx::TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

// x [2, 3, 4] -> Transpose [2, 1, 0] (no two-block swap: three calls) -> y
// [4, 3, 2] -> Slice of axes 0 and 2 (two calls) -> z [2, 3, 1], against the
// values computed here.
TEST(OnnxImport, AnyTransposeAndASliceOfSeveralAxesGiveONNXsValues) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  ::onnx::GraphProto* g = m.mutable_graph();
  add_input(g, "x", {2, 3, 4});
  *g->add_initializer() = int_tensor("starts", {1, 1});
  *g->add_initializer() = int_tensor("ends", {3, 2});
  *g->add_initializer() = int_tensor("axes", {0, 2});
  set_ints(add_node(g, "Transpose", {"x"}, {"y"}), "perm", {2, 1, 0});
  add_node(g, "Slice", {"y", "starts", "ends", "axes"}, {"z"});
  g->add_output()->set_name("z");
  ir::Module mod = import(m);
  const ir::Graph& graph = mod.graphs[0];
  EXPECT_EQ(graph.calls.size(), 5u);
  HostBuffer x(ir::DType::F32, {2, 3, 4});
  for (int64_t k = 0; k < x.size(); ++k) x.set_f(k, static_cast<double>(k));
  RunSpec spec;
  spec.inputs["x"] = x;
  spec.check = true;
  GraphRunOutcome r = run_graph(graph, spec);
  ASSERT_TRUE(r.mismatch && r.mismatch->ok);
  const HostBuffer& z = r.tensors.at(graph.outputs[0]);
  ASSERT_EQ(z.shape(), (std::vector<int64_t>{2, 3, 1}));
  // z[i, j, 0] = y[1 + i, j, 1] = x[1, j, 1 + i]
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(z.get_f(i * 3 + j), 12 + j * 4 + 1 + i) << i << j;
  }
}

// x [1, 3, 6, 6] -> Conv 3x3 pad 1 (F filters, bias) -> BatchNormalization
// -> y, and with `also_relu` the conv's output read by a Relu too (z). With
// `weights_input` the filters are an input of the graph (w), not a constant.
::onnx::ModelProto conv_batchnorm(bool also_relu, int64_t kernel = 3, int64_t F = 4,
                                  bool weights_input = false) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  ::onnx::GraphProto* g = m.mutable_graph();
  g->set_name("conv_bn");
  add_input(g, "x", {1, 3, 6, 6});
  if (weights_input)
    add_input(g, "w", {F, 3, kernel, kernel});
  else
    *g->add_initializer() = float_tensor("w", {F, 3, kernel, kernel}, -0.08f);
  *g->add_initializer() = float_tensor("b", {F}, -0.05f);
  *g->add_initializer() = float_tensor("gamma", {F}, 0.6f);
  *g->add_initializer() = float_tensor("beta", {F}, -0.1f);
  *g->add_initializer() = float_tensor("mean", {F}, 0.02f);
  *g->add_initializer() = float_tensor("var", {F}, 0.7f);
  int64_t pad = kernel / 2;
  set_ints(add_node(g, "Conv", {"x", "w", "b"}, {"c"}), "pads", {pad, pad, pad, pad});
  add_node(g, "BatchNormalization", {"c", "gamma", "beta", "mean", "var"}, {"y"});
  g->add_output()->set_name("y");
  if (also_relu) {
    add_node(g, "Relu", {"c"}, {"z"});
    g->add_output()->set_name("z");
  }
  return m;
}

// y of conv_batchnorm, computed here in double from its definition.
std::vector<double> conv_batchnorm_expected(const HostBuffer& x, int64_t kernel, int64_t F = 4) {
  auto init = [](int64_t k, float start) { return start + 0.01f * static_cast<float>(k % 17); };
  std::vector<double> y(F * 6 * 6);
  for (int64_t f = 0; f < F; ++f) {
    double scale = init(f, 0.6f) / std::sqrt(init(f, 0.7f) + 1e-5);
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 6; ++j) {
        double acc = init(f, -0.05f);
        for (int64_t c = 0; c < 3; ++c) {
          for (int64_t u = 0; u < kernel; ++u) {
            for (int64_t v = 0; v < kernel; ++v) {
              int64_t h = i + u - kernel / 2, w = j + v - kernel / 2;
              if (h < 0 || h >= 6 || w < 0 || w >= 6) continue;
              acc += init(((f * 3 + c) * kernel + u) * kernel + v, -0.08f) *
                     x.get_f((c * 6 + h) * 6 + w);
            }
          }
        }
        y[(f * 6 + i) * 6 + j] = (acc - init(f, 0.02f)) * scale + init(f, -0.1f);
      }
    }
  }
  return y;
}

// A BatchNormalization after a convolution (as other exporters than
// PyTorch's eval mode leave it) is folded into the conv's weights and bias:
// no call of its own, and y as the definition gives it. When the conv's
// output is read by another node too, the batch norm stays a call of its own.
TEST(OnnxImport, ABatchNormAfterAConvIsFoldedIntoItsWeights) {
  HostBuffer x(ir::DType::F32, {1, 3, 6, 6});
  for (int64_t k = 0; k < x.size(); ++k) x.set_f(k, std::sin(0.37 * static_cast<double>(k)));
  // A 3x3 conv (conv2d_any: 4 filters; conv2d: 16, its filters packed by 16 at import) and a
  // 1x1 one (conv2d_1x1, a matrix product).
  struct Case {
    int64_t kernel, F;
    bool also_relu;
  };
  for (auto [kernel, F, also_relu] : {Case{3, 4, false}, Case{3, 4, true}, Case{1, 4, false},
                                      Case{3, 16, false}, Case{3, 16, true}}) {
    SCOPED_TRACE(fmt::format("{}x{} conv of {} filters, its output read {}", kernel, kernel, F,
                             also_relu ? "twice" : "by the batch norm"));
    std::vector<double> expected = conv_batchnorm_expected(x, kernel, F);
    ir::Module mod = import(conv_batchnorm(also_relu, kernel, F));
    const ir::Graph& g = mod.graphs[0];
    ASSERT_EQ(g.calls.size(), also_relu ? 3u : 1u);
    EXPECT_EQ(g.calls[0].op.name, kernel == 1 ? "conv2d_1x1" : F == 16 ? "conv2d" : "conv2d_any");
    bool affine = std::any_of(g.calls.begin(), g.calls.end(),
                              [](const ir::GraphCall& c) { return c.op.name == "channel_affine"; });
    EXPECT_EQ(affine, also_relu);
    // Only the weights and bias the conv reads are left as constants.
    size_t consts = std::count_if(g.tensors.begin(), g.tensors.end(), [](const ir::GraphTensor& t) {
      return t.kind == ir::TensorKind::Const;
    });
    EXPECT_EQ(consts, also_relu ? 4u : 2u);
    RunSpec spec;
    spec.inputs["x"] = x;
    spec.check = true;
    GraphRunOutcome r = run_graph(g, spec);
    ASSERT_TRUE(r.mismatch && r.mismatch->ok) << r.mismatch->problem;
    const HostBuffer& y = r.tensors.at(g.outputs[0]);
    ASSERT_EQ(y.size(), static_cast<int64_t>(expected.size()));
    for (int64_t k = 0; k < y.size(); ++k) {
      EXPECT_NEAR(y.get_f(k), expected[static_cast<size_t>(k)], 1e-5) << k;
    }
  }
}

// conv2d reads its filters packed by 16: filters that are an input of the graph, not a
// constant the importer packs, are packed by a transpose_block call before it, and the
// result is the same as with the same filters as a constant.
TEST(OnnxImport, FiltersThatAreNoConstantArePackedByACallBeforeTheConv) {
  HostBuffer x(ir::DType::F32, {1, 3, 6, 6});
  for (int64_t k = 0; k < x.size(); ++k) x.set_f(k, std::cos(0.29 * static_cast<double>(k)));
  HostBuffer w(ir::DType::F32, {32, 3, 3, 3});
  for (int64_t k = 0; k < w.size(); ++k) w.set_f(k, -0.08 + 0.01 * static_cast<double>(k % 17));
  ir::Module as_input = import(conv_batchnorm(true, 3, 32, true));
  const ir::Graph& g = as_input.graphs[0];
  ASSERT_GE(g.calls.size(), 2u);
  EXPECT_EQ(g.calls[0].op.name, "transpose_block");
  EXPECT_EQ(g.calls[1].op.name, "conv2d");
  RunSpec spec;
  spec.inputs["x"] = x;
  spec.inputs["w"] = w;
  spec.check = true;
  GraphRunOutcome r = run_graph(g, spec);
  ASSERT_TRUE(r.mismatch && r.mismatch->ok) << r.mismatch->problem;

  ir::Module as_constant = import(conv_batchnorm(true, 3, 32));
  RunSpec constant_spec;
  constant_spec.inputs["x"] = x;
  GraphRunOutcome c = run_graph(as_constant.graphs[0], constant_spec);
  for (const std::string& out : {std::string("y"), std::string("z")}) {
    const HostBuffer& got = r.tensors.at(out);
    const HostBuffer& want = c.tensors.at(out);
    ASSERT_EQ(got.size(), want.size()) << out;
    for (int64_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got.get_f(k), want.get_f(k), 1e-5) << out;
  }
  std::vector<double> expected = conv_batchnorm_expected(x, 3, 32);
  const HostBuffer& y = c.tensors.at("y");
  for (int64_t k = 0; k < y.size(); ++k)
    EXPECT_NEAR(y.get_f(k), expected[static_cast<size_t>(k)], 1e-5) << k;
}

TEST(OnnxImport, ATruncatedModelIsAnErrorAtEveryLength) {
  std::string bytes = small_cnn().SerializeAsString();
  int refused = 0, tried = 0;
  for (size_t len = 0; len < bytes.size(); len += 7, ++tried) {
    try {
      onnx::import_model(std::string_view(bytes).substr(0, len), "m.onnx");
    } catch (const CompileError& e) {
      EXPECT_EQ(e.stage(), ErrorStage::Import) << e.what();
      ++refused;
    }
  }
  // Every cut lands inside a field or leaves out the graph or the opset: none imports.
  EXPECT_EQ(refused, tried);
  std::string e;
  try {
    onnx::import_model(std::string_view(bytes).substr(0, bytes.size() / 2), "m.onnx");
  } catch (const CompileError& err) {
    e = err.located("m.onnx");
  }
  EXPECT_NE(e.find("m.onnx: import error:"), std::string::npos) << e;
}

TEST(OnnxImport, NotAModelIsAnError) {
  std::string e;
  try {
    onnx::import_model("func f { }", "m.onnx");
  } catch (const CompileError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("ModelProto"), std::string::npos) << e;
}

TEST(OnnxImport, AnInitializerWhoseDataDisagreesWithItsShapeIsAnError) {
  ::onnx::ModelProto m = small_cnn();
  m.mutable_graph()->mutable_initializer(1)->add_float_data(1.0f);  // b: 17 values for [16]
  std::string e = import_error(m);
  EXPECT_NE(e.find("initializer 'b': shape [16] holds 16 elements but the tensor has 17 values"),
            std::string::npos)
      << e;
}

TEST(OnnxImport, RawDataOfTheWrongSizeIsAnError) {
  ::onnx::ModelProto m = small_cnn();
  ::onnx::TensorProto* b = m.mutable_graph()->mutable_initializer(1);
  b->clear_float_data();
  b->set_raw_data(std::string(60, '\0'));
  std::string e = import_error(m);
  EXPECT_NE(e.find("needs 64 bytes of data but the tensor has 60"), std::string::npos) << e;
}

TEST(OnnxImport, ACycleIsAnError) {
  ::onnx::ModelProto m = small_cnn();
  // Relu now reads the Flatten's result, which comes after it.
  m.mutable_graph()->mutable_node(1)->set_input(0, "f");
  std::string e = import_error(m);
  EXPECT_NE(e.find("node 'Relu_r' (Relu, opset 13): reads 'f', which no input, initializer or "
                   "earlier node defines"),
            std::string::npos)
      << e;
}

TEST(OnnxImport, AnUnknownOpNamesTheNodeItsOpsetAndWhatIsSupported) {
  ::onnx::ModelProto m = small_cnn();
  m.mutable_graph()->mutable_node(1)->set_op_type("Mish");
  std::string e = import_error(m);
  EXPECT_NE(e.find("node 'Relu_r' (Mish, opset 13): kiln does not support Mish yet; it imports "
                   "Add, "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("Conv"), std::string::npos) << e;
}

TEST(OnnxImport, AHugeDeclaredTensorIsRefusedBeforeAnythingIsAllocated) {
  ::onnx::ModelProto m = small_cnn();
  ::onnx::TensorProto* t = m.mutable_graph()->add_initializer();
  t->set_name("huge");
  t->set_data_type(::onnx::TensorProto::FLOAT);
  t->add_dims(1 << 20);
  t->add_dims(1 << 20);
  std::string e = import_error(m);
  EXPECT_NE(e.find("initializer 'huge': shape [1048576, 1048576] declares more than 2147483648 "
                   "bytes"),
            std::string::npos)
      << e;
}

TEST(OnnxImport, AnOpsetOutsideTheSupportedRangeIsAnError) {
  std::string e = import_error(small_cnn(9));
  EXPECT_NE(e.find("uses opset 9 of ai.onnx; kiln reads opsets 11 to 17"), std::string::npos) << e;
}

// A symbolic dimension that does not lead (not a batch) needs its value at import.
TEST(OnnxImport, ASymbolicDimensionThatIsNotABatchIsAnError) {
  ::onnx::ModelProto m = small_cnn();
  symbolic(m.mutable_graph(), 2, "height");
  std::string e = import_error(m);
  EXPECT_NE(e.find("input 'x' has the symbolic dimension 'height' on axis 2"), std::string::npos)
      << e;
  EXPECT_NE(e.find("--dim height=N"), std::string::npos) << e;
}

// A leading symbolic dimension is a batch chosen at run time: the model is imported for one
// sample, once the batch is shown to stay apart, and names it.
TEST(OnnxImport, ALeadingSymbolicDimensionIsARunTimeBatch) {
  ::onnx::ModelProto m = small_cnn();
  symbolic(m.mutable_graph(), 0, "batch");
  ir::Module mod = import(m);
  const ir::Graph& g = mod.graphs[0];
  EXPECT_EQ(g.batch, "batch");
  EXPECT_EQ(g.batched_inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(g.find_tensor("x")->shape, (std::vector<int64_t>{1, 3, 8, 8}));
  EXPECT_EQ(g.find_tensor(g.outputs[0])->shape, (std::vector<int64_t>{1, 5}));
}

// A Reshape of `in` to the constant shape `to`, named `out` (its shape "out_shape").
void add_reshape(::onnx::GraphProto* g, const std::string& in, std::vector<int64_t> to,
                 const std::string& out) {
  *g->add_initializer() = int_tensor(out + "_shape", std::move(to));
  add_node(g, "Reshape", {in, out + "_shape"}, {out});
}

// x [batch, 3, 4] through `nodes` (built by `add`) to y: the import's error, "" if it imports.
std::string batch_error(const std::function<void(::onnx::GraphProto*)>& add) {
  ::onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  ::onnx::GraphProto* g = m.mutable_graph();
  g->set_name("b");
  add_input(g, "x", {1, 3, 4});
  symbolic(g, 0, "batch");
  add(g);
  g->add_output()->set_name("y");
  return import_error(m);
}

// What lets one sample's values reach another's is refused, naming the node and why; what keeps
// them apart, although the batch moves and merges with other axes on the way, is not.
TEST(OnnxImport, ARunTimeBatchMustStayApart) {
  struct Case {
    std::string what;
    std::function<void(::onnx::GraphProto*)> add;
    std::string expect;  // "" when it imports
  } cases[] = {
      {"a mean over the batch",
       [](::onnx::GraphProto* g) {
         set_ints(add_node(g, "ReduceMean", {"x"}, {"y"}), "axes", {0});
       },
       "node 'ReduceMean_y' (ReduceMean, opset 13): it reduces the batch axis 0"},
      {"a softmax over the batch",
       [](::onnx::GraphProto* g) { set_int(add_node(g, "Softmax", {"x"}, {"y"}), "axis", 0); },
       "it normalizes over the batch axis 0"},
      {"a product that sums over samples",
       [](::onnx::GraphProto* g) {
         set_ints(add_node(g, "Transpose", {"x"}, {"t"}), "perm", {1, 2, 0});
         add_reshape(g, "t", {12, -1}, "r");
         add_reshape(g, "x", {-1, 12}, "q");
         add_node(g, "MatMul", {"r", "q"}, {"y"});
       },
       "node 'MatMul_y' (MatMul, opset 13): it sums over the batch axis of its first operand"},
      {"a reshape that spreads the samples",
       [](::onnx::GraphProto* g) {
         add_reshape(g, "x", {3, -1}, "y");
       },
       "spreads the samples of the batch over several axes"},
      {"the batch size as a number",
       [](::onnx::GraphProto* g) {
         add_node(g, "Shape", {"x"}, {"shape"});
         *g->add_initializer() = int_tensor("zero", {0});
         add_node(g, "Gather", {"shape", "zero"}, {"n"});
         set_int(add_node(g, "Cast", {"n"}, {"nf"}), "to", ::onnx::TensorProto::FLOAT);
         add_node(g, "Div", {"x", "nf"}, {"y"});
       },
       "node 'Div_y' (Div, opset 13): its input 'nf' is computed from the batch's size"},
      {"an output merged with another axis",
       [](::onnx::GraphProto* g) {
         add_reshape(g, "x", {-1, 4}, "y");
       },
       "output 'y' has its batch merged with another axis"},
      {"the batch merged with an axis and back, as attention does, and the shape's other "
       "elements used as numbers",
       [](::onnx::GraphProto* g) {
         set_ints(add_node(g, "Transpose", {"x"}, {"t"}), "perm", {1, 0, 2});  // [3, B, 4]
         add_reshape(g, "t", {3, -1, 2}, "r");                                 // [3, 2B, 2]
         set_ints(add_node(g, "Transpose", {"r"}, {"u"}), "perm", {1, 0, 2});  // [2B, 3, 2]
         set_int(add_node(g, "Softmax", {"u"}, {"v"}), "axis", 1);
         add_node(g, "Shape", {"x"}, {"shape"});
         *g->add_initializer() = int_tensor("two", {2});
         add_node(g, "Gather", {"shape", "two"}, {"last"});  // 4, not the batch's size
         set_int(add_node(g, "Cast", {"last"}, {"lf"}), "to", ::onnx::TensorProto::FLOAT);
         add_node(g, "Div", {"v", "lf"}, {"w"});
         add_reshape(g, "w", {-1, 3, 4}, "y");  // [B, 3, 4]
       },
       ""},
  };
  for (const Case& c : cases) {
    std::string e = batch_error(c.add);
    if (c.expect.empty()) {
      EXPECT_EQ(e, "") << c.what;
    } else {
      EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": " << e;
      EXPECT_NE(e.find("--dim batch=N"), std::string::npos) << c.what << ": " << e;
    }
  }
}

TEST(OnnxImport, ASymbolicDimensionGivenAValueImportsAsThatShape) {
  ::onnx::ModelProto m = small_cnn();
  symbolic(m.mutable_graph(), 0, "batch");
  onnx::ImportOptions o;
  o.dims["batch"] = 3;
  ir::Module mod = onnx::import_model(m.SerializeAsString(), "m.onnx", o);
  const ir::Graph& g = mod.graphs[0];
  EXPECT_EQ(g.find_tensor("x")->shape, (std::vector<int64_t>{3, 3, 8, 8}));
  EXPECT_EQ(g.find_tensor(g.outputs[0])->shape, (std::vector<int64_t>{3, 5}));
  RunSpec spec;
  spec.check = true;
  GraphRunOutcome r = run_graph(g, spec);
  ASSERT_TRUE(r.mismatch);
  EXPECT_TRUE(r.mismatch->ok);
  // A name no input has is an error too.
  o.dims["seq"] = 4;
  std::string e = import_error(m, o);
  EXPECT_NE(e.find("--dim seq=4: no input of the model has a symbolic dimension 'seq'"),
            std::string::npos)
      << e;
}

TEST(OnnxImport, AnUnsupportedAttributeSaysWhatIsSupported) {
  ::onnx::ModelProto m = small_cnn();
  set_int(m.mutable_graph()->mutable_node(0), "group", 3);
  std::string e = import_error(m);
  EXPECT_NE(e.find("(Conv, opset 13): has group 3 with 3 input and 16 output channels and "
                   "weights [16, 3, 3, 3]; the groups must divide both"),
            std::string::npos)
      << e;
}

TEST(OnnxImport, ShapesThatDoNotBroadcastAreAnError) {
  ::onnx::ModelProto m = small_cnn();
  *m.mutable_graph()->add_initializer() = float_tensor("z", {3}, 0);
  add_node(m.mutable_graph(), "Add", {"y", "z"}, {"y2"});
  std::string e = import_error(m);
  EXPECT_NE(e.find("shapes [1, 5] and [3] do not broadcast"), std::string::npos) << e;
}

TEST(OnnxImport, AnOutputNoNodeDefinesIsAnError) {
  ::onnx::ModelProto m = small_cnn();
  m.mutable_graph()->mutable_output(0)->set_name("nothing");
  std::string e = import_error(m);
  EXPECT_NE(e.find("output 'nothing' is defined by no node"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
