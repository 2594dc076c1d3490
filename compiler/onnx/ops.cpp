// Each ONNX op kiln imports: the library func it becomes (with the views of
// its tensors that the func declares), or, when its inputs are constants,
// its value computed at import (the Shape -> Gather -> Concat chains).
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "importer.h"

namespace kiln::onnx {

// ---------------------------------------------------------------------------
// Attributes, axes

const ::onnx::AttributeProto* attr(const NodeInfo& n, const std::string& name) {
  for (const ::onnx::AttributeProto& a : n.node->attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t attr_int(const NodeInfo& n, const std::string& name, int64_t fallback) {
  const ::onnx::AttributeProto* a = attr(n, name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::INT) fail(n, "attribute " + name + " is not an int");
  return a->i();
}

float attr_float(const NodeInfo& n, const std::string& name, float fallback) {
  const ::onnx::AttributeProto* a = attr(n, name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::FLOAT) fail(n, "attribute " + name + " is not a float");
  return a->f();
}

std::vector<int64_t> attr_ints(const NodeInfo& n, const std::string& name,
                               std::vector<int64_t> fallback) {
  const ::onnx::AttributeProto* a = attr(n, name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::INTS) fail(n, "attribute " + name + " is not ints");
  return {a->ints().begin(), a->ints().end()};
}

std::string attr_string(const NodeInfo& n, const std::string& name, std::string fallback) {
  const ::onnx::AttributeProto* a = attr(n, name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::STRING)
    fail(n, "attribute " + name + " is not a string");
  return a->s();
}

// The node's input k, or null when it has none there (an omitted optional input).
int64_t axis_of(const NodeInfo& n, int64_t axis, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= std::max<int64_t>(r, 1)) {
    fail(n, fmt::format("axis {} is outside a tensor of rank {}", axis, rank));
  }
  return axis < 0 ? axis + r : axis;
}

namespace {

// ---------------------------------------------------------------------------
// Inputs

const Value* input(Builder& b, const NodeInfo& n, int k) {
  if (k >= n.node->input_size() || n.node->input(k).empty()) return nullptr;
  return &b.value(n, n.node->input(k));
}

const Value& required(Builder& b, const NodeInfo& n, int k) {
  const Value* v = input(b, n, k);
  if (!v) fail(n, fmt::format("has no input {}", k + 1));
  return *v;
}

const Const& constant(Builder& b, const NodeInfo& n, int k, const std::string& what) {
  const Value& v = required(b, n, k);
  if (!v.constant) {
    fail(n,
         fmt::format("{} (input {}) must be a constant: kiln imports static graphs", what, k + 1));
  }
  return *v.constant;
}

void define_const(Builder& b, const NodeInfo& n, Const c, int output = 0) {
  if (static_cast<uint64_t>(c.size()) * ir::dtype_bytes(c.dtype) > b.options().max_tensor_bytes)
    fail(n, "computes a constant larger than the largest tensor kiln imports");
  Value v;
  v.dtype = c.dtype;
  v.shape = c.shape;
  v.constant = std::move(c);
  b.define(n.node->output(output), std::move(v));
}

void define_tensor(Builder& b, const NodeInfo& n, const std::string& tensor, Shape shape,
                   int output = 0) {
  Value v;
  v.dtype = ir::DType::F32;
  v.shape = std::move(shape);
  v.tensor = tensor;
  b.define(n.node->output(output), std::move(v));
}

// The same elements under another shape: a Reshape, a Flatten, a Squeeze.
void define_view(Builder& b, const NodeInfo& n, const Value& v, Shape shape) {
  if (element_count(shape) != element_count(v.shape)) {
    fail(n, fmt::format("cannot view {} elements of shape {} as {}", element_count(v.shape),
                        shape_text(v.shape), shape_text(shape)));
  }
  Value out = v;
  out.shape = std::move(shape);
  if (out.constant) out.constant->shape = out.shape;
  b.define(n.node->output(0), std::move(out));
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t k = from; k < to && k < s.size(); ++k) p *= s[k];
  return p;
}

void need_f32(const NodeInfo& n, const Value& v, const std::string& what) {
  if (v.dtype != ir::DType::F32) {
    fail(n, fmt::format("{} is {}; kiln's operator library computes in float (f32)", what,
                        ir::dtype_name(v.dtype)));
  }
}

// A value known at import, not yet a graph tensor.
Value const_value(Const c) {
  Value v;
  v.dtype = c.dtype;
  v.shape = c.shape;
  v.constant = std::move(c);
  return v;
}

Const f32_scalar(double v) {
  return Const::make(ir::DType::F32, {1}, [&](int64_t) { return v; });
}

std::string out_name(const NodeInfo& n) { return n.node->output(0); }

// ---------------------------------------------------------------------------
// Broadcasting

Shape broadcast_shape(const NodeInfo& n, const Shape& a, const Shape& c) {
  size_t r = std::max(a.size(), c.size());
  Shape out(r, 1);
  for (size_t k = 0; k < r; ++k) {
    int64_t x = k + a.size() >= r ? a[k + a.size() - r] : 1;
    int64_t y = k + c.size() >= r ? c[k + c.size() - r] : 1;
    if (x != y && x != 1 && y != 1) {
      fail(n, fmt::format("shapes {} and {} do not broadcast (dimension {}: {} against {})",
                          shape_text(a), shape_text(c), k, x, y));
    }
    out[k] = x == 1 ? y : x;
  }
  return out;
}

// The flat index into a tensor of shape `from` that broadcasting reads for
// flat index k of `to`.
int64_t broadcast_index(const Shape& from, const Shape& to, int64_t k) {
  int64_t idx = 0, stride = 1;
  for (size_t d = to.size(); d-- > 0;) {
    int64_t i = k % to[d];
    k /= to[d];
    size_t fd = d + from.size() - to.size();
    if (d + from.size() >= to.size()) {
      if (from[fd] != 1) idx += i * stride;
      stride *= from[fd];
    }
  }
  return idx;
}

// ---------------------------------------------------------------------------
// Elementwise ops

const char* unary_func(const std::string& op) {
  static const std::map<std::string, const char*> funcs = {
      {"Relu", "relu"},  {"Sigmoid", "sigmoid"}, {"Tanh", "tanh_op"},          {"Sqrt", "sqrt_op"},
      {"Exp", "exp_op"}, {"Neg", "neg"},         {"Reciprocal", "reciprocal"}, {"Erf", "erf_op"}};
  auto it = funcs.find(op);
  return it == funcs.end() ? nullptr : it->second;
}

double unary_value(const std::string& op, double x) {
  if (op == "Relu") return std::max(x, 0.0);
  if (op == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "Tanh") return std::tanh(x);
  if (op == "Sqrt") return std::sqrt(x);
  if (op == "Exp") return std::exp(x);
  if (op == "Neg") return -x;
  if (op == "Erf") return std::erf(x);
  return 1 / x;  // Reciprocal
}

void unary(Builder& b, const NodeInfo& n, const std::string& func, const Value& x) {
  need_f32(n, x, "its input");
  std::string r = b.call(n, func, {{"N", element_count(x.shape)}}, {b.tensor_of(x, "x")}, {x.shape},
                         out_name(n))[0];
  define_tensor(b, n, r, x.shape);
}

void import_unary(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  const std::string& op = n.node->op_type();
  if (x.constant) {
    const Const& c = *x.constant;
    define_const(
        b, n, Const::make(c.dtype, c.shape, [&](int64_t k) { return unary_value(op, c.at(k)); }));
    return;
  }
  unary(b, n, unary_func(op), x);
}

double binary_value(const std::string& op, double x, double y, bool integer) {
  if (op == "Add") return x + y;
  if (op == "Sub") return x - y;
  if (op == "Mul") return x * y;
  if (op == "Pow") return std::pow(x, y);
  if (integer) return std::floor(x / y);  // ONNX integer Div truncates; shapes are positive
  return x / y;
}

// x OP y for two values of which at most one is broadcast.
void binary(Builder& b, const NodeInfo& n, const std::string& op, const Value& x, const Value& y) {
  Shape out = broadcast_shape(n, x.shape, y.shape);
  static const std::map<std::string, std::string> names = {
      {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "power"}};
  const std::string& base = names.at(op);
  if (x.shape == out && y.shape == out) {
    std::string r = b.call(n, base, {{"N", element_count(out)}},
                           {b.tensor_of(x, "a"), b.tensor_of(y, "b")}, {out}, out_name(n))[0];
    define_tensor(b, n, r, out);
    return;
  }
  // One operand is the whole output, the other broadcast over it: seen as
  // [A, C, B] against [C], the small one's dimensions must be one run.
  bool x_big = element_count(x.shape) == element_count(out) &&
               element_count(x.shape) >= element_count(y.shape);
  const Value& big = x_big ? x : y;
  const Value& small = x_big ? y : x;
  if (element_count(big.shape) != element_count(out)) {
    fail(n, fmt::format("broadcasts both operands ({} and {} to {}); kiln supports one operand "
                        "broadcast against the other",
                        shape_text(x.shape), shape_text(y.shape), shape_text(out)));
  }
  Shape s(out.size() - small.shape.size(), 1);
  s.insert(s.end(), small.shape.begin(), small.shape.end());
  size_t first = out.size(), last = 0;
  for (size_t d = 0; d < out.size(); ++d) {
    if (s[d] != 1) {
      first = std::min(first, d);
      last = d;
    }
  }
  int64_t A = 1, C = 1, B = element_count(out);
  if (first < out.size()) {
    for (size_t d = first; d <= last; ++d) {
      if (s[d] != out[d]) {
        fail(n, fmt::format("broadcasts {} against {} along more than one run of dimensions; "
                            "kiln supports a bias-like operand (one run of dimensions, as "
                            "[C, 1, 1] against [N, C, H, W])",
                            shape_text(small.shape), shape_text(out)));
      }
    }
    A = product(out, 0, first);
    C = product(out, first, last + 1);
    B = product(out, last + 1, out.size());
  }
  std::string func = base + "_c";
  if (!x_big) {
    if (op == "Sub") func = "rsub_c";
    if (op == "Div") func = "rdiv_c";
    if (op == "Pow") func = "rpower_c";
  }
  std::string r = b.call(n, func, {{"A", A}, {"C", C}, {"B", B}},
                         {b.tensor_of(big, "a"), b.tensor_of(small, "b")}, {out}, out_name(n))[0];
  define_tensor(b, n, r, out);
}

void import_binary(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  const Value& y = required(b, n, 1);
  const std::string& op = n.node->op_type();
  if (x.constant && y.constant) {
    Shape out = broadcast_shape(n, x.shape, y.shape);
    const Const& cx = *x.constant;
    const Const& cy = *y.constant;
    bool integer = !ir::is_float(cx.dtype);
    if (integer) {
      define_const(b, n, Const::make(cx.dtype, out, [&](int64_t k) -> int64_t {
                     int64_t p = cx.int_at(broadcast_index(cx.shape, out, k));
                     int64_t q = cy.int_at(broadcast_index(cy.shape, out, k));
                     if (op == "Add") return p + q;
                     if (op == "Sub") return p - q;
                     if (op == "Mul") return p * q;
                     if (op == "Div") {
                       if (q == 0) fail(n, "divides an integer constant by zero");
                       return p / q;
                     }
                     return static_cast<int64_t>(std::pow(p, q));
                   }));
    } else {
      define_const(b, n, Const::make(cx.dtype, out, [&](int64_t k) {
                     return binary_value(op, cx.at(broadcast_index(cx.shape, out, k)),
                                         cy.at(broadcast_index(cy.shape, out, k)), false);
                   }));
    }
    return;
  }
  need_f32(n, x, "its first input");
  need_f32(n, y, "its second input");
  if (op == "Pow" && y.constant && y.constant->size() == 1 &&
      broadcast_shape(n, x.shape, y.shape) == x.shape) {
    // The common constant exponents as the cheaper ops they are.
    double e = y.constant->at(0);
    if (e == 2) return unary(b, n, "square", x);
    if (e == 0.5) return unary(b, n, "sqrt_op", x);
    if (e == 1) return define_view(b, n, x, x.shape);
  }
  binary(b, n, op, x, y);
}

void import_clip(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  // The bounds: constants, computed scalars (one value each), or none (the f32 limits).
  std::vector<Value> bounds;
  for (int k : {1, 2}) {
    const Value* v = input(b, n, k);
    if (!v) {
      double none = k == 1 ? -std::numeric_limits<float>::max() : std::numeric_limits<float>::max();
      bounds.push_back(const_value(f32_scalar(none)));
      continue;
    }
    if (element_count(v->shape) != 1) {
      fail(n, fmt::format("has a {} of shape {}; ONNX's bounds are one value each",
                          k == 1 ? "min" : "max", shape_text(v->shape)));
    }
    need_f32(n, *v, k == 1 ? "its min" : "its max");
    bounds.push_back(*v);
  }
  if (x.constant && bounds[0].constant && bounds[1].constant) {
    const Const& c = *x.constant;
    double lo = bounds[0].constant->at(0), hi = bounds[1].constant->at(0);
    define_const(b, n, Const::make(c.dtype, c.shape, [&](int64_t k) {
                   return std::min(std::max(c.at(k), lo), hi);
                 }));
    return;
  }
  need_f32(n, x, "its input");
  std::string r =
      b.call(n, "clip", {{"N", element_count(x.shape)}},
             {b.tensor_of(x, "x"), b.tensor_of(bounds[0], "lo"), b.tensor_of(bounds[1], "hi")},
             {x.shape}, out_name(n))[0];
  define_tensor(b, n, r, x.shape);
}

// ---------------------------------------------------------------------------
// Convolution and pooling: the window's geometry from the attributes

struct Window {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
  int64_t h, w, pb, pr;  // the input's extents, and the pads after it
};

Window window(const NodeInfo& n, int64_t h, int64_t w, int64_t kh, int64_t kw,
              bool dilations_allowed) {
  Window g{};
  g.kh = kh;
  g.kw = kw;
  std::vector<int64_t> strides = attr_ints(n, "strides", {1, 1});
  std::vector<int64_t> dil = attr_ints(n, "dilations", {1, 1});
  std::vector<int64_t> pads = attr_ints(n, "pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4) {
    fail(n, "needs 2 strides, 2 dilations and 4 pads (kiln imports 2-D windows)");
  }
  g.sh = strides[0], g.sw = strides[1], g.dh = dil[0], g.dw = dil[1];
  if (g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0) fail(n, "has a stride or dilation below 1");
  if (!dilations_allowed && (g.dh != 1 || g.dw != 1)) {
    fail(n, "has dilations other than 1, which kiln's pooling does not support yet");
  }
  int64_t ekh = (kh - 1) * g.dh + 1, ekw = (kw - 1) * g.dw + 1;
  std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  int64_t pb, pr;
  if (auto_pad == "NOTSET") {
    g.pt = pads[0], g.pl = pads[1], pb = pads[2], pr = pads[3];
  } else if (auto_pad == "VALID") {
    g.pt = g.pl = pb = pr = 0;
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    auto same = [&](int64_t in, int64_t s, int64_t ek, int64_t& before, int64_t& after) {
      int64_t out = (in + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out - 1) * s + ek - in);
      before = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      after = total - before;
    };
    same(h, g.sh, ekh, g.pt, pb);
    same(w, g.sw, ekw, g.pl, pr);
  } else {
    fail(n, "has auto_pad '" + auto_pad + "'; ONNX allows NOTSET, VALID, SAME_UPPER, SAME_LOWER");
  }
  if (g.pt < 0 || g.pl < 0 || pb < 0 || pr < 0) fail(n, "has a negative pad");
  int64_t ih = h + g.pt + pb - ekh, iw = w + g.pl + pr - ekw;
  if (ih < 0 || iw < 0) fail(n, "has a window larger than its padded input");
  g.oh = ih / g.sh + 1;
  g.ow = iw / g.sw + 1;
  g.h = h, g.w = w, g.pb = pb, g.pr = pr;
  return g;
}

const Value& image(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  need_f32(n, x, "its input");
  if (x.shape.size() != 4) {
    fail(n, fmt::format("reads a tensor of shape {}; kiln imports 2-D images (NCHW, rank 4)",
                        shape_text(x.shape)));
  }
  return x;
}

// conv2d's filters [F, C, KH, KW] packed by 16 filters, [F / 16, C, KH, KW, 16] (the library's
// conv2d reads them so): a constant packed here, once; other filters by a transpose_block call
// ([F / 16, 16, C * KH * KW, 1] -> [F / 16, C * KH * KW, 16, 1]).
Const general_transpose(const Const& c, const std::vector<int64_t>& perm);

std::string packed_filters(Builder& b, const NodeInfo& n, const Value& w) {
  const int64_t F = w.shape[0], per_filter = element_count(w.shape) / F;
  const Shape packed{F / 16, w.shape[1], w.shape[2], w.shape[3], 16};
  if (w.constant) {
    Const blocks = *w.constant;  // the same bytes seen as [F / 16, 16, C * KH * KW]
    blocks.shape = {F / 16, 16, per_filter};
    Value p;
    p.shape = packed;
    p.constant = general_transpose(blocks, {0, 2, 1});
    p.constant->shape = packed;
    return b.tensor_of(p, n.node->input(1) + "_packed");
  }
  return b.call(n, "transpose_block", {{"A", F / 16}, {"B", 16}, {"C", per_filter}, {"D", 1}},
                {b.tensor_of(w, n.node->input(1))}, {packed}, out_name(n) + "_w_packed")[0];
}

void import_conv(Builder& b, const NodeInfo& n) {
  const Value& x = image(b, n);
  const Value& w = required(b, n, 1);
  need_f32(n, w, "its weights");
  if (w.shape.size() != 4) fail(n, "has weights of rank other than 4");
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t F = w.shape[0], group = attr_int(n, "group", 1);
  std::vector<int64_t> ks = attr_ints(n, "kernel_shape", {w.shape[2], w.shape[3]});
  if (ks != Shape{w.shape[2], w.shape[3]})
    fail(n, "has a kernel_shape that differs from its weights");
  Window g = window(n, H, W, w.shape[2], w.shape[3], true);
  std::string func;
  if (group == 1) {
    if (w.shape[1] != C) {
      fail(n, fmt::format("has weights {} for {} input channels", shape_text(w.shape), C));
    }
    func = F % 16 == 0 ? "conv2d" : "conv2d_any";
  } else if (group == C && F == C && w.shape[1] == 1) {
    func = "depthwise_conv2d";
  } else if (group > 1 && C % group == 0 && F % group == 0 && w.shape[1] == C / group) {
    func = "grouped_conv2d";
  } else {
    fail(n, fmt::format("has group {} with {} input and {} output channels and weights {}; the "
                        "groups must divide both, and the weights hold input channels / group",
                        group, C, F, shape_text(w.shape)));
  }
  Value bias;
  if (const Value* v = input(b, n, 2)) {
    bias = *v;
    if (element_count(bias.shape) != F) fail(n, "has a bias that is not one value per filter");
  } else {
    bias.shape = {F};
    bias.constant = Const::make(ir::DType::F32, {F}, [](int64_t) { return 0.0; });
  }
  // A 1 x 1 kernel with stride 1 and no padding on one image is a matrix product
  // (conv2d_1x1), its tensors seen as [F, C], [C, H * W] and [F, H * W].
  if ((func == "conv2d" || func == "conv2d_any") && g.kh == 1 && g.kw == 1 && g.sh == 1 &&
      g.sw == 1 && g.pt == 0 && g.pl == 0 && g.oh == H && g.ow == W && N == 1) {
    Shape o1{N, F, g.oh, g.ow};
    std::string r =
        b.call(n, "conv2d_1x1", {{"M", F}, {"N", H * W}, {"K", C}},
               {b.tensor_of(w, n.node->input(1)), b.tensor_of(x, "x"),
                b.tensor_of(bias, n.node->input_size() > 2 ? n.node->input(2) : "bias")},
               {o1}, out_name(n))[0];
    return define_tensor(b, n, r, o1);
  }
  std::map<std::string, int64_t> p = {{"N", N},     {"C", C},     {"H", H},     {"W", W},
                                      {"KH", g.kh}, {"KW", g.kw}, {"SH", g.sh}, {"SW", g.sw},
                                      {"DH", g.dh}, {"DW", g.dw}, {"PH", g.pt}, {"PW", g.pl},
                                      {"OH", g.oh}, {"OW", g.ow}};
  if (func == "grouped_conv2d") {
    p.erase("C");
    p["G"] = group;
    p["CG"] = C / group;
    p["FG"] = F / group;
  } else if (func != "depthwise_conv2d") {
    p["F"] = F;
  }
  Shape out{N, F, g.oh, g.ow};
  std::string filters =
      func == "conv2d" ? packed_filters(b, n, w) : b.tensor_of(w, n.node->input(1));
  std::string r = b.call(n, func, p,
                         {b.tensor_of(x, "x"), filters,
                          b.tensor_of(bias, n.node->input_size() > 2 ? n.node->input(2) : "bias")},
                         {out}, out_name(n))[0];
  define_tensor(b, n, r, out);
}

void import_pool(Builder& b, const NodeInfo& n) {
  const Value& x = image(b, n);
  const std::string& op = n.node->op_type();
  std::vector<int64_t> ks = attr_ints(n, "kernel_shape", {});
  if (ks.size() != 2) fail(n, "needs a kernel_shape of 2 values (kiln pools 2-D images)");
  bool ceil_mode = attr_int(n, "ceil_mode", 0) != 0;
  if (n.node->output_size() > 1 && !n.node->output(1).empty()) {
    fail(n, "returns the indices of the maxima, which kiln does not support");
  }
  if (attr_int(n, "storage_order", 0) != 0) fail(n, "has storage_order 1");
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  Window g = window(n, H, W, ks[0], ks[1], false);
  bool count_pad = op == "AveragePool" && attr_int(n, "count_include_pad", 0) != 0;
  if (ceil_mode) {
    // The last window may start past the floor's last one, but never in the padding after the
    // input: an element outside counts for nothing in a maximum or in an average of what is
    // inside (an average that counts the padding would count part of it: refused).
    if (count_pad) fail(n, "has ceil_mode 1 with count_include_pad 1, which kiln does not support");
    auto ceil_extent = [](int64_t in, int64_t before, int64_t after, int64_t k, int64_t s) {
      int64_t span = in + before + after - k;
      int64_t out = (span + s - 1) / s + 1;
      if ((out - 1) * s >= in + before) --out;
      return out;
    };
    g.oh = ceil_extent(g.h, g.pt, g.pb, g.kh, g.sh);
    g.ow = ceil_extent(g.w, g.pl, g.pr, g.kw, g.sw);
  }
  std::map<std::string, int64_t> p = {{"N", N},     {"C", C},     {"H", H},     {"W", W},
                                      {"KH", g.kh}, {"KW", g.kw}, {"SH", g.sh}, {"SW", g.sw},
                                      {"PH", g.pt}, {"PW", g.pl}, {"OH", g.oh}, {"OW", g.ow}};
  std::string func = "maxpool2d";
  if (op == "AveragePool") {
    func = "avgpool2d";
    p["COUNT_PAD"] = count_pad;
  }
  Shape out{N, C, g.oh, g.ow};
  std::string r = b.call(n, func, p, {b.tensor_of(x, "x")}, {out}, out_name(n))[0];
  define_tensor(b, n, r, out);
}

void import_global_avgpool(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  need_f32(n, x, "its input");
  if (x.shape.size() < 3) fail(n, "reads a tensor of rank below 3");
  Shape out{x.shape[0], x.shape[1]};
  out.resize(x.shape.size(), 1);
  std::string r = b.call(n, "global_avgpool",
                         {{"N", x.shape[0]}, {"C", x.shape[1]}, {"HW", product(x.shape, 2, 99)}},
                         {b.tensor_of(x, "x")}, {out}, out_name(n))[0];
  define_tensor(b, n, r, out);
}

// ---------------------------------------------------------------------------
// Matrix products

// A constant matrix [R, C] transposed at import.
Const transposed(const Const& m) {
  int64_t R = m.shape[0], C = m.shape[1];
  return Const::make(m.dtype, {C, R}, [&](int64_t k) { return m.at((k % R) * C + k / R); });
}

std::string transpose_value(Builder& b, const NodeInfo& n, const Value& m) {
  int64_t R = m.shape[0], C = m.shape[1];
  return b.call(n, "transpose_block", {{"A", 1}, {"B", R}, {"C", C}, {"D", 1}},
                {b.tensor_of(m, "m")}, {{C, R}}, out_name(n) + "_t")[0];
}

void import_gemm(Builder& b, const NodeInfo& n) {
  const Value& a = required(b, n, 0);
  const Value& bm = required(b, n, 1);
  need_f32(n, a, "A");
  need_f32(n, bm, "B");
  if (a.shape.size() != 2 || bm.shape.size() != 2)
    fail(n, "multiplies tensors that are not matrices");
  double alpha = attr_float(n, "alpha", 1), beta = attr_float(n, "beta", 1);
  bool ta = attr_int(n, "transA", 0) != 0, tb = attr_int(n, "transB", 0) != 0;
  std::string at = ta ? transpose_value(b, n, a) : b.tensor_of(a, "a");
  int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  std::string bt;
  int64_t N = tb ? bm.shape[0] : bm.shape[1];
  if ((tb ? bm.shape[1] : bm.shape[0]) != K) {
    fail(n, fmt::format("multiplies {} by {} (transA {}, transB {}): the inner dimensions differ",
                        shape_text(a.shape), shape_text(bm.shape), ta, tb));
  }
  if (bm.constant) {
    Const c = tb ? transposed(*bm.constant) : *bm.constant;
    if (alpha != 1) c = Const::make(c.dtype, c.shape, [&](int64_t k) { return alpha * c.at(k); });
    bt = b.tensor_of(const_value(c), n.node->input(1));
  } else {
    if (alpha != 1) fail(n, "has alpha other than 1 with a B that is not a constant");
    bt = tb ? transpose_value(b, n, bm) : b.tensor_of(bm, "b");
  }
  Shape out{M, N};
  const Value* c = input(b, n, 2);
  std::string r = b.call(n, "matmul", {{"M", M}, {"N", N}, {"K", K}}, {at, bt}, {out},
                         c ? out_name(n) + "_ab" : out_name(n))[0];
  if (!c) return define_tensor(b, n, r, out);
  Value prod;
  prod.shape = out;
  prod.tensor = r;
  Value bias = *c;
  if (beta != 1) {
    if (!bias.constant) fail(n, "has beta other than 1 with a C that is not a constant");
    Const s = *bias.constant;
    bias.constant = Const::make(s.dtype, s.shape, [&](int64_t k) { return beta * s.at(k); });
  }
  binary(b, n, "Add", prod, bias);
}

void import_matmul(Builder& b, const NodeInfo& n) {
  const Value& a = required(b, n, 0);
  const Value& bm = required(b, n, 1);
  need_f32(n, a, "A");
  need_f32(n, bm, "B");
  Shape as = a.shape, bs = bm.shape;
  if (as.empty() || bs.empty()) fail(n, "multiplies a scalar");
  bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K) {
    fail(n, fmt::format("multiplies {} by {}: the inner dimensions differ", shape_text(a.shape),
                        shape_text(bm.shape)));
  }
  Shape out;
  std::string r;
  if (bs.size() == 2) {
    // Every leading dimension of A is more rows.
    out.assign(as.begin(), as.end() - 1);
    out.push_back(N);
    int64_t rows = element_count(as) / K;
    r = b.call(n, "matmul", {{"M", rows}, {"N", N}, {"K", K}},
               {b.tensor_of(a, "a"), b.tensor_of(bm, n.node->input(1))}, {out}, out_name(n))[0];
  } else {
    Shape batch_a(as.begin(), as.end() - 2), batch_b(bs.begin(), bs.end() - 2);
    if (batch_a != batch_b) {
      fail(n, fmt::format("multiplies batches {} and {}; kiln supports equal batches, or a "
                          "matrix B shared by every batch",
                          shape_text(a.shape), shape_text(bm.shape)));
    }
    out = batch_a;
    out.push_back(M);
    out.push_back(N);
    r = b.call(n, "batch_matmul", {{"Bt", element_count(batch_a)}, {"M", M}, {"N", N}, {"K", K}},
               {b.tensor_of(a, "a"), b.tensor_of(bm, "b")}, {out}, out_name(n))[0];
  }
  if (a_vec) out.erase(out.end() - 2);
  if (b_vec) out.pop_back();
  define_tensor(b, n, r, out);
}

// ---------------------------------------------------------------------------
// Normalizations and reductions

// A batch norm after a convolution whose weights and bias are constants and
// whose output nothing else reads becomes part of the convolution: filter f's
// weights times scale[f], its bias times scale[f] plus shift[f]. PyTorch's
// exporter does this itself in eval mode; models exported otherwise (other
// frameworks, TrainingMode.PRESERVE) keep the BatchNormalization node.
// Returns whether it folded.
bool fold_into_conv(Builder& b, const NodeInfo& n, const Value& x, const Const& scale,
                    const Const& shift) {
  if (x.tensor.empty() || b.uses(n.node->input(0)) != 1) return false;
  ir::Graph& g = b.graph();
  auto producer = std::find_if(g.calls.rbegin(), g.calls.rend(), [&](const ir::GraphCall& c) {
    return std::find(c.results.begin(), c.results.end(), x.tensor) != c.results.end();
  });
  if (producer == g.calls.rend()) return false;
  ir::GraphCall& conv = *producer;
  static const std::set<std::string> convs = {"conv2d", "conv2d_any", "depthwise_conv2d",
                                              "grouped_conv2d", "conv2d_1x1"};
  if (!convs.count(conv.op.name) || conv.args.size() != 3) return false;
  const ir::GraphTensor* out = g.find_tensor(x.tensor);
  if (!out || out->shape != x.shape || x.shape.size() != 4) return false;
  // conv2d_1x1 takes the filters first (its A), the others the image first.
  std::string& w_arg = conv.args[conv.op.name == "conv2d_1x1" ? 0 : 1];
  const ir::GraphTensor* w = g.find_tensor(w_arg);
  const ir::GraphTensor* bias = g.find_tensor(conv.args[2]);
  auto data = [](const ir::GraphTensor* t) {
    return t && t->kind == ir::TensorKind::Const && t->dtype == ir::DType::F32 &&
           t->init.kind == ir::ConstInit::Kind::Data;
  };
  int64_t F = x.shape[1];
  // conv2d's filters are packed by 16 (packed_filters): [F / 16, C, KH, KW, 16].
  const bool packed = conv.op.name == "conv2d";
  if (!data(w) || !data(bias) || w->shape.empty() ||
      (packed ? 16 * w->shape[0] : w->shape[0]) != F || element_count(bias->shape) != F) {
    return false;
  }
  int64_t per_filter = element_count(w->shape) / F;
  auto filter_of = [&](int64_t k) {
    return packed ? k / (per_filter * 16) * 16 + k % 16 : k / per_filter;
  };
  Value folded_w;
  folded_w.shape = w->shape;
  folded_w.constant = Const::make(ir::DType::F32, w->shape, [&](int64_t k) {
    return ir::const_element(*w, static_cast<size_t>(k)) * scale.at(filter_of(k));
  });
  Value folded_bias;
  folded_bias.shape = {F};
  folded_bias.constant = Const::make(ir::DType::F32, {F}, [&](int64_t f) {
    return ir::const_element(*bias, static_cast<size_t>(f)) * scale.at(f) + shift.at(f);
  });
  std::vector<std::string> old = {w_arg, conv.args[2]};
  w_arg = b.tensor_of(folded_w, x.tensor + "_w_bn");
  conv.args[2] = b.tensor_of(folded_bias, x.tensor + "_bias_bn");
  // The constants the conv read before, unless another call reads them too.
  std::erase_if(g.tensors, [&](const ir::GraphTensor& t) {
    if (std::find(old.begin(), old.end(), t.name) == old.end()) return false;
    return std::none_of(g.calls.begin(), g.calls.end(), [&](const ir::GraphCall& c) {
      return std::find(c.args.begin(), c.args.end(), t.name) != c.args.end();
    });
  });
  define_tensor(b, n, x.tensor, x.shape);
  return true;
}

void import_batchnorm(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  need_f32(n, x, "its input");
  if (attr_int(n, "training_mode", 0) != 0) fail(n, "is in training mode; kiln imports inference");
  for (int k = 1; k < n.node->output_size(); ++k) {
    if (!n.node->output(k).empty()) fail(n, "returns running statistics (training mode)");
  }
  const Const& gamma = constant(b, n, 1, "scale");
  const Const& beta = constant(b, n, 2, "bias");
  const Const& mean = constant(b, n, 3, "mean");
  const Const& var = constant(b, n, 4, "var");
  double eps = attr_float(n, "epsilon", 1e-5f);
  if (x.shape.size() < 2) fail(n, "normalizes a tensor of rank below 2");
  int64_t C = x.shape[1];
  for (const Const* c : {&gamma, &beta, &mean, &var}) {
    if (c->size() != C)
      fail(n, fmt::format("has {} values per channel for {} channels", c->size(), C));
  }
  Const scale = Const::make(ir::DType::F32, {C},
                            [&](int64_t k) { return gamma.at(k) / std::sqrt(var.at(k) + eps); });
  Const shift = Const::make(ir::DType::F32, {C}, [&](int64_t k) {
    return beta.at(k) - mean.at(k) * gamma.at(k) / std::sqrt(var.at(k) + eps);
  });
  if (fold_into_conv(b, n, x, scale, shift)) return;
  std::string r =
      b.call(n, "channel_affine",
             {{"A", x.shape[0]}, {"C", C}, {"B", product(x.shape, 2, x.shape.size())}},
             {b.tensor_of(x, "x"), b.tensor_of(const_value(scale), out_name(n) + "_scale"),
              b.tensor_of(const_value(shift), out_name(n) + "_shift")},
             {x.shape}, out_name(n))[0];
  define_tensor(b, n, r, x.shape);
}

// [M, N] with N the product of the axes from `axis` on.
std::pair<int64_t, int64_t> rows_from(const Shape& s, int64_t axis) {
  int64_t n = product(s, static_cast<size_t>(axis), s.size());
  return {element_count(s) / std::max<int64_t>(n, 1), n};
}

void import_softmax(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  need_f32(n, x, "its input");
  int64_t axis = axis_of(n, attr_int(n, "axis", n.opset >= 13 ? -1 : 1), x.shape.size());
  // Opset 13 normalizes along the axis; 11 and 12 over every axis from it on.
  size_t a = static_cast<size_t>(axis);
  int64_t A = product(x.shape, 0, a);
  int64_t N = n.opset >= 13 ? x.shape[a] : product(x.shape, a, x.shape.size());
  int64_t B = n.opset >= 13 ? product(x.shape, a + 1, x.shape.size()) : 1;
  std::string r = b.call(n, "softmax", {{"A", A}, {"N", N}, {"B", B}}, {b.tensor_of(x, "x")},
                         {x.shape}, out_name(n))[0];
  define_tensor(b, n, r, x.shape);
}

void import_reduce_mean(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  need_f32(n, x, "its input");
  std::vector<int64_t> axes = attr_ints(n, "axes", {});
  if (axes.empty()) {  // every axis
    for (size_t d = 0; d < x.shape.size(); ++d) axes.push_back(static_cast<int64_t>(d));
  }
  for (int64_t& a : axes) a = axis_of(n, a, x.shape.size());
  std::sort(axes.begin(), axes.end());
  size_t first = static_cast<size_t>(axes[0]), last = static_cast<size_t>(axes.back());
  if (last - first + 1 != axes.size() ||
      std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    fail(n, fmt::format("reduces axes [{}] of a tensor of rank {}; kiln supports adjacent axes",
                        fmt::join(axes, ", "), x.shape.size()));
  }
  bool keep = attr_int(n, "keepdims", 1) != 0;
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (d < first || d > last) {
      out.push_back(x.shape[d]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  std::string r = b.call(n, "reduce_mean",
                         {{"A", product(x.shape, 0, first)},
                          {"N", product(x.shape, first, last + 1)},
                          {"B", product(x.shape, last + 1, x.shape.size())}},
                         {b.tensor_of(x, "x")}, {out}, out_name(n))[0];
  define_tensor(b, n, r, out);
}

void import_layer_norm(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  need_f32(n, x, "its input");
  int64_t axis = axis_of(n, attr_int(n, "axis", -1), x.shape.size());
  auto [M, N] = rows_from(x.shape, axis);
  for (int k = 1; k < n.node->output_size(); ++k) {
    if (!n.node->output(k).empty())
      fail(n, "returns its mean and inverse deviation; kiln does not");
  }
  const Value& scale = required(b, n, 1);
  Value bias;
  if (const Value* v = input(b, n, 2)) {
    bias = *v;
  } else {
    bias.shape = {N};
    bias.constant = Const::make(ir::DType::F32, {N}, [](int64_t) { return 0.0; });
  }
  if (element_count(scale.shape) != N || element_count(bias.shape) != N) {
    fail(n,
         "has a scale or bias that is not one value per normalized element (kiln does not "
         "broadcast them)");
  }
  double eps = attr_float(n, "epsilon", 1e-5f);
  std::string r =
      b.call(n, "layer_norm", {{"M", M}, {"N", N}},
             {b.tensor_of(x, "x"), b.tensor_of(scale, "scale"), b.tensor_of(bias, "bias"),
              b.tensor_of(const_value(f32_scalar(eps)), "eps")},
             {x.shape}, out_name(n))[0];
  define_tensor(b, n, r, x.shape);
}

// ---------------------------------------------------------------------------
// Shapes and layouts

Const general_transpose(const Const& c, const std::vector<int64_t>& perm) {
  Shape out;
  for (int64_t p : perm) out.push_back(c.shape[static_cast<size_t>(p)]);
  std::vector<int64_t> in_stride(c.shape.size(), 1);
  for (size_t d = c.shape.size(); d-- > 1;) in_stride[d - 1] = in_stride[d] * c.shape[d];
  auto index = [&](int64_t k) {
    int64_t src = 0;
    for (size_t d = out.size(); d-- > 0;) {
      src += (k % out[d]) * in_stride[static_cast<size_t>(perm[d])];
      k /= out[d];
    }
    return src;
  };
  if (!ir::is_float(c.dtype))
    return Const::make(c.dtype, out, [&](int64_t k) { return c.int_at(index(k)); });
  return Const::make(c.dtype, out, [&](int64_t k) { return c.at(index(k)); });
}

void import_transpose(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  size_t r = x.shape.size();
  std::vector<int64_t> perm(r);
  for (size_t k = 0; k < r; ++k) perm[k] = static_cast<int64_t>(r - 1 - k);
  perm = attr_ints(n, "perm", perm);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < r; ++k) {
    if (sorted.size() != r || sorted[k] != static_cast<int64_t>(k))
      fail(n, fmt::format("has perm [{}], not a permutation of {} axes", fmt::join(perm, ", "), r));
  }
  Shape out;
  for (int64_t p : perm) out.push_back(x.shape[static_cast<size_t>(p)]);
  if (x.constant) return define_const(b, n, general_transpose(*x.constant, perm));
  need_f32(n, x, "its input");
  // Axes of extent 1 move freely; the others, in output order, with runs of
  // input-adjacent axes merged, must be [prefix, block 2, block 1, suffix].
  std::vector<int64_t> kept;
  for (int64_t p : perm) {
    if (x.shape[static_cast<size_t>(p)] != 1) kept.push_back(p);
  }
  std::vector<std::vector<int64_t>> groups;  // runs of consecutive input axes, in output order
  for (int64_t p : kept) {
    // Consecutive among the kept axes of the input (axes of extent 1 between them do not count).
    bool follows = false;
    if (!groups.empty()) {
      int64_t prev = groups.back().back();
      follows = p > prev;
      for (int64_t q = prev + 1; q < p && follows; ++q)
        follows = x.shape[static_cast<size_t>(q)] == 1;
    }
    if (follows) {
      groups.back().push_back(p);
    } else {
      groups.push_back({p});
    }
  }
  auto size = [&](const std::vector<int64_t>& g) {
    int64_t s = 1;
    for (int64_t p : g) s *= x.shape[static_cast<size_t>(p)];
    return s;
  };
  // Groups in input order are sorted by their first axis.
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t i, size_t j) { return groups[i][0] < groups[j][0]; });
  // order[k] = the output position of the k-th group in input order. Sorted by
  // swaps of two adjacent groups, each one transpose_block ([A, B, C, D] ->
  // [A, C, B, D]): a swap of two blocks of axes is one call, any other
  // permutation one call per inversion.
  if (std::is_sorted(order.begin(), order.end()))
    return define_view(b, n, x, out);  // only axes of extent 1 moved
  std::string cur = b.tensor_of(x, "x");
  for (bool swapped = true; swapped;) {
    swapped = false;
    for (size_t k = 0; k + 1 < order.size(); ++k) {
      if (order[k] < order[k + 1]) continue;
      int64_t A = 1, D = 1;
      for (size_t q = 0; q < k; ++q) A *= size(groups[order[q]]);
      for (size_t q = k + 2; q < order.size(); ++q) D *= size(groups[order[q]]);
      int64_t Bsz = size(groups[order[k]]), Csz = size(groups[order[k + 1]]);
      std::swap(order[k], order[k + 1]);
      bool last = std::is_sorted(order.begin(), order.end());
      cur = b.call(n, "transpose_block", {{"A", A}, {"B", Bsz}, {"C", Csz}, {"D", D}}, {cur},
                   {last ? out : Shape{A, Csz, Bsz, D}}, out_name(n))[0];
      swapped = true;
    }
  }
  define_tensor(b, n, cur, out);
}

void import_reshape(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  const Const& s = constant(b, n, 1, "the shape");
  bool allowzero = attr_int(n, "allowzero", 0) != 0;
  Shape out;
  int infer = -1;
  for (int64_t k = 0; k < s.size(); ++k) {
    int64_t d = s.int_at(k);
    if (d == 0 && !allowzero) {
      if (static_cast<size_t>(k) >= x.shape.size()) fail(n, "copies a dimension its input lacks");
      d = x.shape[static_cast<size_t>(k)];
    }
    if (d == -1) {
      if (infer >= 0) fail(n, "has two dimensions of -1");
      infer = static_cast<int>(k);
      d = 1;
    } else if (d < 0) {
      fail(n, fmt::format("has the dimension {}", d));
    }
    out.push_back(d);
  }
  if (infer >= 0) {
    int64_t known = element_count(out);
    if (known == 0 || element_count(x.shape) % known != 0) {
      fail(n, fmt::format("cannot reshape {} to {}", shape_text(x.shape), shape_text(s.ints())));
    }
    out[static_cast<size_t>(infer)] = element_count(x.shape) / known;
  }
  define_view(b, n, x, out);
}

void import_flatten(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  int64_t axis = axis_of(n, attr_int(n, "axis", 1), x.shape.size() + 1);
  int64_t outer = product(x.shape, 0, static_cast<size_t>(axis));
  define_view(b, n, x, {outer, element_count(x.shape) / std::max<int64_t>(outer, 1)});
}

std::vector<int64_t> axes_input(Builder& b, const NodeInfo& n, int k, const std::string& what) {
  if (n.opset >= 13) {
    if (!input(b, n, k)) return {};
    return constant(b, n, k, what).ints();
  }
  return attr_ints(n, "axes", {});
}

void import_squeeze(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  std::vector<int64_t> axes = axes_input(b, n, 1, "the axes");
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    bool listed = axes.empty() ? x.shape[d] == 1 : false;
    for (int64_t a : axes)
      listed = listed || axis_of(n, a, x.shape.size()) == static_cast<int64_t>(d);
    if (listed && x.shape[d] != 1)
      fail(n, fmt::format("squeezes axis {} of extent {}", d, x.shape[d]));
    if (!listed) out.push_back(x.shape[d]);
  }
  define_view(b, n, x, out);
}

void import_unsqueeze(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  std::vector<int64_t> axes = axes_input(b, n, 1, "the axes");
  size_t rank = x.shape.size() + axes.size();
  std::vector<bool> added(rank, false);
  for (int64_t a : axes) {
    int64_t at = axis_of(n, a, rank);
    if (added[static_cast<size_t>(at)]) fail(n, "lists an axis twice");
    added[static_cast<size_t>(at)] = true;
  }
  Shape out;
  size_t from = 0;
  for (size_t d = 0; d < rank; ++d) out.push_back(added[d] ? 1 : x.shape[from++]);
  define_view(b, n, x, out);
}

void import_concat(Builder& b, const NodeInfo& n) {
  std::vector<const Value*> ins;
  for (int k = 0; k < n.node->input_size(); ++k) ins.push_back(&required(b, n, k));
  if (ins.empty()) fail(n, "has no inputs");
  size_t rank = ins[0]->shape.size();
  int64_t axis = axis_of(n, attr_int(n, "axis", 0), rank);
  Shape out = ins[0]->shape;
  out[static_cast<size_t>(axis)] = 0;
  for (const Value* v : ins) {
    Shape s = v->shape;
    if (s.size() != rank) fail(n, "concatenates tensors of different ranks");
    out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    s[static_cast<size_t>(axis)] = out[static_cast<size_t>(axis)];
    if (s != out) fail(n, "concatenates tensors whose other dimensions differ");
  }
  bool all_const =
      std::all_of(ins.begin(), ins.end(), [](const Value* v) { return v->constant.has_value(); });
  int64_t A = product(out, 0, static_cast<size_t>(axis));
  int64_t Cn = product(out, static_cast<size_t>(axis) + 1, rank);
  if (all_const) {
    // Element k of the output: its row a, position j along the axis, column c.
    std::vector<int64_t> starts;
    int64_t at = 0;
    for (const Value* v : ins) {
      starts.push_back(at);
      at += v->shape[static_cast<size_t>(axis)];
    }
    int64_t total = out[static_cast<size_t>(axis)];
    auto locate = [&](int64_t k, size_t& which, int64_t& src) {
      int64_t c = k % Cn, j = (k / Cn) % total, a = k / (Cn * total);
      which = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), j) -
                                  starts.begin() - 1);
      int64_t len = ins[which]->shape[static_cast<size_t>(axis)];
      src = (a * len + (j - starts[which])) * Cn + c;
    };
    ir::DType t = ins[0]->constant->dtype;
    if (!ir::is_float(t)) {
      return define_const(b, n, Const::make(t, out, [&](int64_t k) {
                            size_t w;
                            int64_t s;
                            locate(k, w, s);
                            return ins[w]->constant->int_at(s);
                          }));
    }
    return define_const(b, n, Const::make(t, out, [&](int64_t k) {
                          size_t w;
                          int64_t s;
                          locate(k, w, s);
                          return ins[w]->constant->at(s);
                        }));
  }
  for (const Value* v : ins) need_f32(n, *v, "an input");
  std::string acc = b.tensor_of(*ins[0], "x");
  int64_t len = ins[0]->shape[static_cast<size_t>(axis)];
  for (size_t k = 1; k < ins.size(); ++k) {
    int64_t more = ins[k]->shape[static_cast<size_t>(axis)];
    Shape part = out;
    part[static_cast<size_t>(axis)] = len + more;
    acc = b.call(n, "concat2", {{"A", A}, {"B1", len}, {"B2", more}, {"C", Cn}},
                 {acc, b.tensor_of(*ins[k], "x")}, {part}, out_name(n))[0];
    len += more;
  }
  define_tensor(b, n, acc, out);
}

void import_slice(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  std::vector<int64_t> starts = constant(b, n, 1, "starts").ints();
  std::vector<int64_t> ends = constant(b, n, 2, "ends").ints();
  std::vector<int64_t> axes, steps;
  if (input(b, n, 3)) axes = constant(b, n, 3, "axes").ints();
  if (input(b, n, 4)) steps = constant(b, n, 4, "steps").ints();
  if (axes.empty()) {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail(n, "has starts, ends, axes and steps of different lengths");
  size_t rank = x.shape.size();
  std::vector<int64_t> begin(rank, 0), count = x.shape;
  for (size_t k = 0; k < starts.size(); ++k) {
    size_t a = static_cast<size_t>(axis_of(n, axes[k], rank));
    if (steps[k] != 1) fail(n, fmt::format("has step {}; kiln supports step 1", steps[k]));
    int64_t dim = x.shape[a];
    auto clamp = [&](int64_t v) {
      if (v < 0) v += dim;
      return std::clamp<int64_t>(v, 0, dim);
    };
    int64_t s = clamp(starts[k]), e = clamp(ends[k]);
    begin[a] = s;
    count[a] = std::max<int64_t>(0, e - s);
  }
  if (element_count(count) == 0) fail(n, "slices out nothing (an empty tensor)");
  if (x.constant) {
    const Const& c = *x.constant;
    auto index = [&](int64_t k) {
      int64_t src = 0, stride = 1;
      for (size_t d = rank; d-- > 0;) {
        src += (k % count[d] + begin[d]) * stride;
        k /= count[d];
        stride *= x.shape[d];
      }
      return src;
    };
    if (!ir::is_float(c.dtype))
      return define_const(
          b, n, Const::make(c.dtype, count, [&](int64_t k) { return c.int_at(index(k)); }));
    return define_const(b, n,
                        Const::make(c.dtype, count, [&](int64_t k) { return c.at(index(k)); }));
  }
  need_f32(n, x, "its input");
  std::vector<size_t> cut;
  for (size_t d = 0; d < rank; ++d) {
    if (count[d] != x.shape[d]) cut.push_back(d);
  }
  if (cut.empty()) return define_view(b, n, x, count);
  // One slice_axis per axis cut, each on what the one before left.
  std::string cur = b.tensor_of(x, "x");
  Shape shape = x.shape;
  for (size_t a : cut) {
    Shape next = shape;
    next[a] = count[a];
    cur = b.call(n, "slice_axis",
                 {{"A", product(shape, 0, a)},
                  {"D", shape[a]},
                  {"B", product(shape, a + 1, rank)},
                  {"S", begin[a]},
                  {"L", count[a]}},
                 {cur}, {next}, out_name(n))[0];
    shape = next;
  }
  define_tensor(b, n, cur, count);
}

void import_pad(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  need_f32(n, x, "its input");
  std::string mode = attr_string(n, "mode", "constant");
  if (mode != "constant") fail(n, "pads in mode '" + mode + "'; kiln supports mode constant");
  std::vector<int64_t> pads = constant(b, n, 1, "the pads").ints();
  double fill = 0;
  if (const Value* v = input(b, n, 2)) {
    if (!v->constant) fail(n, "its constant_value (input 3) must be a constant");
    fill = v->constant->at(0);
  }
  if (input(b, n, 3)) fail(n, "pads given axes (input 4), which kiln does not support yet");
  size_t r = x.shape.size();
  if (pads.size() != 2 * r) fail(n, fmt::format("has {} pads for rank {}", pads.size(), r));
  Shape out = x.shape;
  for (size_t d = 0; d < r; ++d) {
    if (pads[d] < 0 || pads[d + r] < 0)
      fail(n, "has a negative pad (a crop), which kiln does not support yet");
    if (d + 2 < r && (pads[d] != 0 || pads[d + r] != 0)) {
      fail(n, "pads an axis other than the last two; kiln pads the last two");
    }
    out[d] += pads[d] + pads[d + r];
  }
  if (r < 2) fail(n, "pads a tensor of rank below 2");
  int64_t H = x.shape[r - 2], W = x.shape[r - 1];
  std::string res =
      b.call(n, "pad2d",
             {{"A", product(x.shape, 0, r - 2)},
              {"H", H},
              {"W", W},
              {"PT", pads[r - 2]},
              {"PL", pads[r - 1]},
              {"OH", out[r - 2]},
              {"OW", out[r - 1]}},
             {b.tensor_of(x, "x"), b.tensor_of(const_value(f32_scalar(fill)), "fill")}, {out},
             out_name(n))[0];
  define_tensor(b, n, res, out);
}

void import_shape(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  int64_t r = static_cast<int64_t>(x.shape.size());
  int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  define_const(b, n, Const::make(ir::DType::I64, {end - start}, [&](int64_t k) -> int64_t {
                 return x.shape[static_cast<size_t>(start + k)];
               }));
}

// A Gather of a computed tensor, or by computed indices: gather_axis.
void gather_values(Builder& b, const NodeInfo& n, const Value& x, const Value& idx) {
  need_f32(n, x, "its data");
  if (idx.dtype != ir::DType::I64) {
    fail(n,
         fmt::format("has {} indices; kiln gathers by int64 indices", ir::dtype_name(idx.dtype)));
  }
  size_t axis = static_cast<size_t>(axis_of(n, attr_int(n, "axis", 0), x.shape.size()));
  int64_t dim = x.shape[axis];
  Value indices = idx;
  if (idx.constant) {
    // Negative indices count from the end (at import; computed ones must be in [0, D)).
    const Const& c = *idx.constant;
    for (int64_t k = 0; k < c.size(); ++k) {
      if (c.int_at(k) < -dim || c.int_at(k) >= dim)
        fail(n, fmt::format("gathers index {} of an axis of extent {}", c.int_at(k), dim));
    }
    indices = const_value(Const::make(ir::DType::I64, c.shape, [&](int64_t k) -> int64_t {
      return c.int_at(k) < 0 ? c.int_at(k) + dim : c.int_at(k);
    }));
  }
  Shape out(x.shape.begin(), x.shape.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.shape.end());
  int64_t count = element_count(idx.shape);
  if (count == 0) fail(n, "gathers no index (an empty tensor)");
  std::string r =
      b.call(n, "gather_axis",
             {{"A", product(x.shape, 0, axis)},
              {"D", dim},
              {"B", product(x.shape, axis + 1, x.shape.size())},
              {"N", count}},
             {b.tensor_of(x, "x"), b.tensor_of(indices, "indices")}, {out}, out_name(n))[0];
  define_tensor(b, n, r, out);
}

void import_gather(Builder& b, const NodeInfo& n) {
  const Value& xv = required(b, n, 0);
  const Value& iv = required(b, n, 1);
  if (!xv.constant || !iv.constant) return gather_values(b, n, xv, iv);
  const Const& data = constant(b, n, 0, "the data");
  const Const& idx = constant(b, n, 1, "the indices");
  int64_t axis = axis_of(n, attr_int(n, "axis", 0), data.shape.size());
  int64_t dim = data.shape[static_cast<size_t>(axis)];
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  int64_t inner = product(data.shape, static_cast<size_t>(axis) + 1, data.shape.size());
  int64_t count = idx.size();
  auto index = [&](int64_t k) {
    int64_t c = k % inner, j = (k / inner) % count, a = k / (inner * count);
    int64_t i = idx.int_at(j);
    if (i < 0) i += dim;
    if (i < 0 || i >= dim)
      fail(n, fmt::format("gathers index {} of an axis of extent {}", idx.int_at(j), dim));
    return (a * dim + i) * inner + c;
  };
  if (!ir::is_float(data.dtype))
    return define_const(
        b, n, Const::make(data.dtype, out, [&](int64_t k) { return data.int_at(index(k)); }));
  define_const(b, n, Const::make(data.dtype, out, [&](int64_t k) { return data.at(index(k)); }));
}

void import_cast(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  int64_t to = attr_int(n, "to", 0);
  ir::DType t;
  switch (to) {
    case ::onnx::TensorProto::FLOAT:
      t = ir::DType::F32;
      break;
    case ::onnx::TensorProto::DOUBLE:
      t = ir::DType::F64;
      break;
    case ::onnx::TensorProto::INT64:
      t = ir::DType::I64;
      break;
    case ::onnx::TensorProto::INT32:
      t = ir::DType::I32;
      break;
    case ::onnx::TensorProto::BOOL:
      t = ir::DType::Bool;
      break;
    default:
      fail(n, fmt::format(
                  "casts to ONNX type {}; kiln casts to float, double, int32, int64 and bool", to));
  }
  if (x.constant) {
    const Const& c = *x.constant;
    if (ir::is_float(t))
      return define_const(b, n, Const::make(t, c.shape, [&](int64_t k) { return c.at(k); }));
    return define_const(b, n, Const::make(t, c.shape, [&](int64_t k) { return c.int_at(k); }));
  }
  if (t != x.dtype)
    fail(n, "casts a computed tensor to another type, which kiln does not support yet");
  define_view(b, n, x, x.shape);
}

void import_constant(Builder& b, const NodeInfo& n) {
  if (n.node->attribute_size() != 1) fail(n, "needs exactly one attribute");
  const ::onnx::AttributeProto& a = n.node->attribute(0);
  if (a.name() == "value") {
    return define_const(b, n, const_from_proto(a.t(), b.options().max_tensor_bytes, n.label()));
  }
  if (a.name() == "value_float")
    return define_const(b, n, Const::make(ir::DType::F32, {}, [&](int64_t) { return a.f(); }));
  if (a.name() == "value_int")
    return define_const(b, n, Const::make(ir::DType::I64, {}, [&](int64_t) { return a.i(); }));
  if (a.name() == "value_floats") {
    return define_const(b, n, Const::make(ir::DType::F32, {a.floats_size()}, [&](int64_t k) {
                          return a.floats(static_cast<int>(k));
                        }));
  }
  if (a.name() == "value_ints") {
    return define_const(b, n, Const::make(ir::DType::I64, {a.ints_size()}, [&](int64_t k) {
                          return a.ints(static_cast<int>(k));
                        }));
  }
  fail(n, "has attribute " + a.name() + "; kiln reads value, value_float(s) and value_int(s)");
}

void import_constant_of_shape(Builder& b, const NodeInfo& n) {
  Shape s = constant(b, n, 0, "the shape").ints();
  Const fill = Const::make(ir::DType::F32, {1}, [](int64_t) { return 0.0; });
  if (const ::onnx::AttributeProto* a = attr(n, "value")) {
    fill = const_from_proto(a->t(), 64, n.label());
  }
  for (int64_t d : s)
    if (d < 0) fail(n, "has a negative dimension");
  if (ir::is_float(fill.dtype))
    return define_const(b, n, Const::make(fill.dtype, s, [&](int64_t) { return fill.at(0); }));
  define_const(b, n, Const::make(fill.dtype, s, [&](int64_t) { return fill.int_at(0); }));
}

void import_identity(Builder& b, const NodeInfo& n) {
  const Value& x = required(b, n, 0);
  define_view(b, n, x, x.shape);
}

void import_dropout(Builder& b, const NodeInfo& n) {
  if (n.node->output_size() > 1 && !n.node->output(1).empty()) fail(n, "returns its mask");
  import_identity(b, n);
}

using Handler = void (*)(Builder&, const NodeInfo&);

const std::map<std::string, Handler>& handlers() {
  static const std::map<std::string, Handler> h = {
      {"Add", import_binary},
      {"AveragePool", import_pool},
      {"BatchNormalization", import_batchnorm},
      {"Cast", import_cast},
      {"Clip", import_clip},
      {"Concat", import_concat},
      {"Constant", import_constant},
      {"ConstantOfShape", import_constant_of_shape},
      {"Conv", import_conv},
      {"Div", import_binary},
      {"Dropout", import_dropout},
      {"Erf", import_unary},
      {"Exp", import_unary},
      {"Flatten", import_flatten},
      {"Gather", import_gather},
      {"Gemm", import_gemm},
      {"GlobalAveragePool", import_global_avgpool},
      {"Identity", import_identity},
      {"LayerNormalization", import_layer_norm},
      {"MatMul", import_matmul},
      {"MaxPool", import_pool},
      {"Mul", import_binary},
      {"Neg", import_unary},
      {"Pad", import_pad},
      {"Pow", import_binary},
      {"Reciprocal", import_unary},
      {"ReduceMean", import_reduce_mean},
      {"Relu", import_unary},
      {"Reshape", import_reshape},
      {"Shape", import_shape},
      {"Sigmoid", import_unary},
      {"Slice", import_slice},
      {"Softmax", import_softmax},
      {"Sqrt", import_unary},
      {"Squeeze", import_squeeze},
      {"Sub", import_binary},
      {"Tanh", import_unary},
      {"Transpose", import_transpose},
      {"Unsqueeze", import_unsqueeze},
  };
  return h;
}

}  // namespace

const std::vector<std::string>& supported_op_types() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v;
    for (const auto& [name, h] : handlers()) v.push_back(name);
    return v;
  }();
  return ops;
}

void import_node(Builder& b, const NodeInfo& n) {
  auto it = handlers().find(n.node->op_type());
  if (it == handlers().end()) {
    fail(n, fmt::format("kiln does not support {} yet; it imports {}", n.node->op_type(),
                        fmt::join(supported_op_types(), ", ")));
  }
  it->second(b, n);
}

}  // namespace kiln::onnx
