// A run-time batch: the proof that a model keeps the samples of its batch
// apart, so that the model compiled for one sample, run once per sample, is
// the model run on the batch (docs/models.md, "A batch size chosen at run
// time").
//
// The model has been imported with its batch dimension bound to 2. Each
// value is followed from the inputs: which of its axes is the batch (a whole
// axis of extent 2, each index one sample) or none, and whether a constant
// was computed from the batch's size (a Shape of a batched value). Each op
// says where its output's batch axis is by its own semantics, and fails for
// anything that would let one sample's values reach another's: a reduction
// over the batch axis, a matrix product contracting it, a reshape that
// merges it with another axis, a concatenation along it, the batch size used
// as a number. An op without a rule here is refused: nothing is assumed.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "importer.h"

namespace kiln::onnx {

namespace {

constexpr int kNone = -1;

// What is known of one value.
struct Samples {
  // The batch axis of a computed value: the sample of index k on it is k / inner % B, its extent
  // outer * B * inner (a batch merged with other axes by a reshape: [S, B * H, D]).
  int axis = kNone;
  int64_t outer = 1, inner = 1;
  bool same_place(const Samples& o) const {
    return axis == o.axis && outer == o.outer && inner == o.inner;
  }
  // A constant's elements that were computed from the batch's size (a Shape of a batched value
  // and what is computed from its batch element); empty when none was.
  std::vector<char> from_size;
  bool sized() const { return std::find(from_size.begin(), from_size.end(), 1) != from_size.end(); }
};

class Tracker {
 public:
  Tracker(const Builder& b, std::string batch) : b_(b), batch_(std::move(batch)) {}

  void input(const std::string& name) { known_[name].axis = 0; }

  void node(const NodeInfo& n);

  // Fails unless every output is batched along its first axis.
  void outputs(const ::onnx::GraphProto& g, const std::string& file);

 private:
  const Builder& b_;
  std::string batch_;
  std::map<std::string, Samples> known_;

  Samples of(const std::string& name) const {
    auto it = known_.find(name);
    return it == known_.end() ? Samples{} : it->second;
  }
  const Value& value(const NodeInfo& n, const std::string& name) const { return b_.value(n, name); }
  [[noreturn]] void refuse(const NodeInfo& n, const std::string& why) const {
    fail(n, fmt::format("{}, so kiln cannot run the model on a batch of '{}' samples one sample "
                        "at a time; give the batch its size at import instead (--dim {}=N)",
                        why, batch_, batch_));
  }
  // The output axis for an elementwise op with numpy broadcasting.
  int broadcast(const NodeInfo& n, const Shape& out);
  int matmul(const NodeInfo& n);
  Samples reshape(const NodeInfo& n, const Shape& in, const Samples& x, const Shape& out);
  int rule(const NodeInfo& n, int axis, const Shape& x, const Shape& out);
  std::vector<char> folded(const NodeInfo& n);
};

// Which elements of the constant node n computes come from the batch's size, followed element
// by element through the ops that compute shapes (Shape, Gather, Concat, Unsqueeze, arithmetic
// with a scalar), and all of them for any other op that reads one.
std::vector<char> Tracker::folded(const NodeInfo& n) {
  const std::string& op = n.node->op_type();
  const std::string& in0 = n.node->input_size() > 0 ? n.node->input(0) : std::string();
  if ((op == "Shape" || op == "Size") && of(in0).axis != kNone) {
    int64_t rank = static_cast<int64_t>(value(n, in0).shape.size());
    if (op == "Size") return {1};
    std::vector<char> t(static_cast<size_t>(rank), 0);
    t[static_cast<size_t>(of(in0).axis)] = 1;
    int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, start, rank);
    return {t.begin() + start, t.begin() + end};
  }
  bool any = false;
  for (const std::string& in : n.node->input()) any = any || (!in.empty() && of(in).sized());
  if (!any) return {};
  size_t count = static_cast<size_t>(element_count(value(n, n.node->output(0)).shape));
  auto elements = [&](const std::string& in) {
    std::vector<char> t = of(in).from_size;
    t.resize(static_cast<size_t>(element_count(value(n, in).shape)), 0);
    return t;
  };
  static const std::set<std::string> same_order = {"Identity", "Cast",    "Unsqueeze",
                                                   "Squeeze",  "Reshape", "Flatten"};
  static const std::set<std::string> arithmetic = {"Add", "Sub", "Mul", "Div", "Neg"};
  if (same_order.count(op)) return elements(in0);
  if (op == "Gather" && value(n, in0).shape.size() == 1 && attr_int(n, "axis", 0) == 0 &&
      !of(n.node->input(1)).sized()) {
    std::vector<char> data = elements(in0);
    std::vector<int64_t> indices = value(n, n.node->input(1)).constant->ints();
    std::vector<char> t;
    for (int64_t k : indices) {
      if (k < 0) k += static_cast<int64_t>(data.size());
      t.push_back(k >= 0 && k < static_cast<int64_t>(data.size()) ? data[static_cast<size_t>(k)]
                                                                  : 1);
    }
    return t;
  }
  if (op == "Concat" && value(n, n.node->output(0)).shape.size() == 1) {
    std::vector<char> t;
    for (const std::string& in : n.node->input()) {
      std::vector<char> e = elements(in);
      t.insert(t.end(), e.begin(), e.end());
    }
    return t;
  }
  if (arithmetic.count(op)) {
    std::vector<char> t(count, 0);
    for (const std::string& in : n.node->input()) {
      std::vector<char> e = elements(in);
      for (size_t k = 0; k < count; ++k) {
        if (e.size() == count) {
          t[k] |= e[k];
        } else if (e.size() == 1) {
          t[k] |= e[0];
        } else {
          t[k] = 1;
        }
      }
    }
    return t;
  }
  return std::vector<char>(count, 1);
}

// Each input's batch axis, counted in the output's rank, must be the same;
// an input without one must have extent 1 there.
int Tracker::broadcast(const NodeInfo& n, const Shape& out) {
  int at = kNone;
  const Samples* first = nullptr;
  for (const std::string& in : n.node->input()) {
    if (in.empty()) continue;
    int a = of(in).axis;
    if (a == kNone) continue;
    int mapped = a + static_cast<int>(out.size() - value(n, in).shape.size());
    if (at != kNone && (at != mapped || first->outer != known_.at(in).outer ||
                        first->inner != known_.at(in).inner)) {
      refuse(n, fmt::format("its inputs have their batches in different places (axes {} and {})",
                            at, mapped));
    }
    at = mapped;
    first = &known_.at(in);
  }
  for (const std::string& in : n.node->input()) {
    if (in.empty() || of(in).axis != kNone) continue;
    const Shape& s = value(n, in).shape;
    int d = at - static_cast<int>(out.size() - s.size());
    if (d >= 0 && s[static_cast<size_t>(d)] != 1) {
      refuse(n, fmt::format("'{}', which is the same for every sample, has extent {} on the "
                            "batch axis {}",
                            in, s[static_cast<size_t>(d)], at));
    }
  }
  return at;
}

// A row-major reshape: the flat index of an element is h * B * L + b * L + l
// for sample b, with H = the elements before the batch (the axes before its
// axis, times its outer factor) and L those after it. The batch stays in one
// axis of the output exactly when some axis a' has H / (the axes before a')
// whole outer blocks and L / (the axes after a') whole inner ones: then
// every element keeps its sample, and the batch its place on a'.
Samples Tracker::reshape(const NodeInfo& n, const Shape& in, const Samples& x, const Shape& out) {
  int64_t H = x.outer, L = x.inner;
  for (int d = 0; d < x.axis; ++d) H *= in[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(x.axis) + 1; d < in.size(); ++d) L *= in[d];
  int64_t before = 1;
  for (size_t d = 0; d < out.size(); ++d) {
    int64_t after = 1;
    for (size_t e = d + 1; e < out.size(); ++e) after *= out[e];
    if (H % before == 0 && L % after == 0 && out[d] == H / before * kBatchWitness * (L / after)) {
      return Samples{static_cast<int>(d), H / before, L / after, {}};
    }
    before *= out[d];
  }
  refuse(n, fmt::format("it reshapes {} (the batch on axis {}) to {}, which spreads the samples "
                        "of the batch over several axes",
                        shape_text(in), x.axis, shape_text(out)));
}

int Tracker::matmul(const NodeInfo& n) {
  const Shape& a = value(n, n.node->input(0)).shape;
  const Shape& b = value(n, n.node->input(1)).shape;
  const Shape& out = value(n, n.node->output(0)).shape;
  int ra = static_cast<int>(a.size()), rb = static_cast<int>(b.size());
  int ro = static_cast<int>(out.size());
  int xa = of(n.node->input(0)).axis, xb = of(n.node->input(1)).axis;
  if (ra < 2 || rb < 2) refuse(n, "it multiplies a vector by a batched value");
  int at = kNone;
  auto place = [&](int mapped) {
    if (at != kNone && at != mapped) {
      refuse(n, "its operands have their batches on different axes of the product");
    }
    at = mapped;
  };
  if (xa != kNone) {
    if (xa == ra - 1) refuse(n, "it sums over the batch axis of its first operand");
    place(xa == ra - 2 ? ro - 2 : xa + ro - ra);
  }
  if (xb != kNone) {
    if (xb == rb - 2) refuse(n, "it sums over the batch axis of its second operand");
    place(xb == rb - 1 ? ro - 1 : xb + ro - rb);
  }
  if (xa != kNone && xb != kNone) {
    const Samples &sa = known_.at(n.node->input(0)), &sb = known_.at(n.node->input(1));
    if (sa.outer != sb.outer || sa.inner != sb.inner) {
      refuse(n, "its operands have their batches in different places");
    }
  }
  // An operand without the batch must broadcast over it.
  for (auto [x, s, r] : {std::tuple{xa, &a, ra}, std::tuple{xb, &b, rb}}) {
    if (x != kNone || at >= ro - 2) continue;
    int d = at - (ro - r);
    if (d >= 0 && (*s)[static_cast<size_t>(d)] != 1) {
      refuse(n, "one operand is the same for every sample but has the batch's extent");
    }
  }
  return at;
}

// The output's batch axis for op n, whose (first batched) input x has its
// batch on `axis`.
int Tracker::rule(const NodeInfo& n, int axis, const Shape& x, const Shape& out) {
  const std::string& op = n.node->op_type();
  static const std::set<std::string> elementwise = {
      "Add",  "Sub", "Mul", "Div",        "Pow", "Relu",     "Clip",    "Sigmoid", "Tanh",
      "Sqrt", "Exp", "Neg", "Reciprocal", "Erf", "Identity", "Dropout", "Cast"};
  if (elementwise.count(op)) return broadcast(n, out);
  // Every other input of these (weights, bias, statistics) must be the same for every sample.
  for (int k = 1; k < n.node->input_size(); ++k) {
    const std::string& in = n.node->input(k);
    if (!in.empty() && of(in).axis != kNone && op != "MatMul" && op != "Concat" && op != "Gather") {
      refuse(n, fmt::format("its input '{}' differs from sample to sample", in));
    }
  }
  static const std::set<std::string> images = {"Conv", "MaxPool", "AveragePool",
                                               "GlobalAveragePool", "BatchNormalization"};
  if (images.count(op)) {
    if (axis != 0) refuse(n, fmt::format("its image has the batch on axis {}, not 0", axis));
    return 0;
  }
  if (op == "Gemm") {
    int rows = attr_int(n, "transA", 0) ? 1 : 0;
    if (axis != rows) refuse(n, "it sums over the batch axis of its first operand");
    return 0;
  }
  if (op == "MatMul") return matmul(n);
  if (op == "Softmax" || op == "LayerNormalization") {
    int64_t from =
        axis_of(n, attr_int(n, "axis", op == "Softmax" && n.opset < 13 ? 1 : -1), x.size());
    bool reduced = op == "Softmax" && n.opset >= 13 ? axis == from : axis >= from;
    if (reduced) refuse(n, fmt::format("it normalizes over the batch axis {}", axis));
    return axis;
  }
  if (op == "ReduceMean") {
    std::vector<int64_t> axes = attr_ints(n, "axes", {});
    if (axes.empty()) refuse(n, "it reduces every axis, the batch's too");
    int removed = 0;
    for (int64_t a : axes) {
      int64_t d = axis_of(n, a, x.size());
      if (d == axis) refuse(n, fmt::format("it reduces the batch axis {}", axis));
      if (d < axis) ++removed;
    }
    return attr_int(n, "keepdims", 1) ? axis : axis - removed;
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm = attr_ints(n, "perm", {});
    if (perm.empty()) {
      for (size_t d = x.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    }
    auto it = std::find(perm.begin(), perm.end(), axis);
    return static_cast<int>(it - perm.begin());
  }
  if (op == "Concat") {
    int64_t along = axis_of(n, attr_int(n, "axis", 0), x.size());
    for (const std::string& in : n.node->input()) {
      if (!of(in).same_place(of(n.node->input(0)))) {
        refuse(n, fmt::format("it joins '{}', {}, to a value with the batch on axis {}", in,
                              of(in).axis == kNone ? "the same for every sample"
                                                   : "batched on another axis",
                              axis));
      }
    }
    if (along == axis) refuse(n, "it concatenates along the batch axis");
    return axis;
  }
  if (op == "Slice" || op == "Pad") {
    if (out[static_cast<size_t>(axis)] != x[static_cast<size_t>(axis)]) {
      refuse(n, fmt::format("it cuts or pads the batch axis {}", axis));
    }
    return axis;
  }
  if (op == "Gather") {
    // out = data's axes before `along`, the indices' axes, data's axes after it.
    const Shape& data = value(n, n.node->input(0)).shape;
    int64_t along = axis_of(n, attr_int(n, "axis", 0), data.size());
    int xd = of(n.node->input(0)).axis, xi = of(n.node->input(1)).axis;
    if (xd != kNone && xi != kNone) refuse(n, "both its data and its indices are batched");
    if (xi != kNone) return static_cast<int>(along) + xi;
    if (xd == along) refuse(n, "it gathers along the batch axis");
    size_t indices = value(n, n.node->input(1)).shape.size();
    return xd < along ? xd : xd + static_cast<int>(indices) - 1;
  }
  refuse(n, fmt::format("kiln has no rule for how {} treats the batch", op));
}

void Tracker::node(const NodeInfo& n) {
  const std::string& op = n.node->op_type();
  bool computed = false;
  for (const std::string& out : n.node->output()) {
    if (!out.empty() && b_.has_value(out) && !value(n, out).constant) computed = true;
  }
  if (!computed) {
    // Folded at import: a constant, some of whose elements may be the batch's size.
    if (n.node->output_size() > 0 && !n.node->output(0).empty()) {
      known_[n.node->output(0)].from_size = folded(n);
    }
    return;
  }
  // A computed node: the batch's size may only give a reshape its shape (which the reshape
  // rule checks element by element).
  const std::string* batched = nullptr;
  for (int k = 0; k < n.node->input_size(); ++k) {
    const std::string& in = n.node->input(k);
    if (in.empty()) continue;
    Samples s = of(in);
    if (s.sized() && !(op == "Reshape" && k == 1)) {
      refuse(n, fmt::format("its input '{}' is computed from the batch's size", in));
    }
    if (s.axis != kNone && !batched) batched = &in;
  }
  Samples placed;
  if (batched) {
    const Samples& x = known_.at(*batched);
    const Shape& in = value(n, *batched).shape;
    const Shape& out = value(n, n.node->output(0)).shape;
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      if (batched != &n.node->input(0)) refuse(n, "its shape is batched");
      placed = reshape(n, in, x, out);
    } else {
      placed = x;
      placed.from_size.clear();
      placed.axis = rule(n, x.axis, in, out);
    }
  }
  for (const std::string& out : n.node->output()) {
    if (!out.empty()) known_[out] = placed;
  }
}

void Tracker::outputs(const ::onnx::GraphProto& g, const std::string& file) {
  for (const ::onnx::ValueInfoProto& out : g.output()) {
    Samples s = of(out.name());
    int axis = s.axis;
    if (axis == 0 && s.outer == 1 && s.inner == 1) continue;
    throw CompileError(
        ErrorStage::Import, SourceLoc{file, 0, 0},
        fmt::format("output '{}' {}, so kiln cannot run the model on a batch of '{}' samples one "
                    "sample at a time; give the batch its size at import instead (--dim {}=N)",
                    out.name(),
                    axis == kNone ? "is the same for every sample"
                    : axis != 0   ? fmt::format("has its batch on axis {}, not 0", axis)
                                  : "has its batch merged with another axis",
                    batch_, batch_));
  }
}

}  // namespace

void check_samples_apart(const ::onnx::GraphProto& g, const Builder& b, const std::string& batch,
                         const std::vector<std::string>& batched_inputs, int64_t opset) {
  Tracker t(b, batch);
  for (const std::string& in : batched_inputs) t.input(in);
  for (const ::onnx::NodeProto& node : g.node()) t.node(NodeInfo{&node, opset, b.file()});
  t.outputs(g, b.file());
}

}  // namespace kiln::onnx
