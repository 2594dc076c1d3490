// Graphs of operators: lookup, the shapes a call binds, and printing in .kiln syntax.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "kiln/error.h"
#include "kiln/ir.h"

namespace kiln::ir {

const char* tensor_kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::Input:
      return "input";
    case TensorKind::Const:
      return "const";
    case TensorKind::Value:
      return "value";
  }
  return "?";
}

const GraphTensor* Graph::find_tensor(const std::string& n) const {
  for (const GraphTensor& t : tensors) {
    if (t.name == n) return &t;
  }
  return nullptr;
}

GraphTensor* Graph::find_tensor(const std::string& n) {
  return const_cast<GraphTensor*>(std::as_const(*this).find_tensor(n));
}

const Graph* Module::find_graph(const std::string& name) const {
  for (const Graph& g : graphs) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

std::vector<int64_t> bound_shape(const Func& op, const Buf& b) {
  std::map<std::string, int64_t> env;
  for (const Param& p : op.params) {
    if (p.value) env[p.name] = *p.value;
  }
  std::vector<int64_t> shape;
  for (const Expr& e : b.shape) {
    std::optional<int64_t> v = eval_int(e, env);
    if (!v) {
      throw CompileError(ErrorStage::Validate, b.where,
                         fmt::format("the shape of {}'s buffer {} depends on a param with no "
                                     "value: {}",
                                     op.name, b.name, to_string(e)));
    }
    if (*v < 0) {
      throw CompileError(ErrorStage::Validate, b.where,
                         fmt::format("{}'s buffer {} has a negative extent {} = {}", op.name,
                                     b.name, to_string(e), *v));
    }
    shape.push_back(*v);
  }
  return shape;
}

double const_element(const GraphTensor& t, size_t k) {
  const ConstInit& c = t.init;
  switch (c.kind) {
    case ConstInit::Kind::Fill:
      return c.fill;
    case ConstInit::Kind::Random:
      break;
    case ConstInit::Kind::Values:
      return c.values.at(k);
    case ConstInit::Kind::Data:
      if (k >= const_value_count(t)) break;
      return read_element(t.dtype, c.data->data() + k * dtype_bytes(t.dtype));
  }
  throw std::logic_error(fmt::format("const {} has no value {} to read", t.name, k));
}

size_t const_value_count(const GraphTensor& t) {
  switch (t.init.kind) {
    case ConstInit::Kind::Values:
      return t.init.values.size();
    case ConstInit::Kind::Data:
      return t.init.data ? t.init.data->size() / dtype_bytes(t.dtype) : 0;
    default: {
      size_t n = 1;
      for (int64_t e : t.shape) n *= static_cast<size_t>(std::max<int64_t>(e, 0));
      return n;
    }
  }
}

namespace {

// A value as a literal of dtype t: floats always show a fraction or exponent.
std::string literal(DType t, double v) {
  if (!is_float(t)) return fmt::format("{}", static_cast<int64_t>(v));
  // f32 values print as the shortest text that reads back as the same float.
  std::string s = t == DType::F32 ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
  if (std::isfinite(v) && s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

void print_init(std::ostringstream& os, const GraphTensor& t, size_t max_values) {
  const ConstInit& c = t.init;
  switch (c.kind) {
    case ConstInit::Kind::Fill:
      os << "fill(" << literal(t.dtype, c.fill) << ")";
      return;
    case ConstInit::Kind::Random:
      os << "random(" << c.seed << ", " << literal(t.dtype, c.lo) << ", " << literal(t.dtype, c.hi)
         << ")";
      return;
    case ConstInit::Kind::Values:
    case ConstInit::Kind::Data: {
      os << "[";
      size_t count = const_value_count(t);
      size_t shown = std::min(count, max_values);
      for (size_t i = 0; i < shown; ++i)
        os << (i ? ", " : "") << literal(t.dtype, const_element(t, i));
      if (shown < count) os << ", ...";
      os << "]";
      if (shown < count) os << ";  # " << count << " values";
      return;
    }
  }
}

}  // namespace

std::string to_string(const Graph& g, size_t max_values) {
  std::ostringstream os;
  os << "graph " << g.name << " {\n";
  for (const GraphTensor& t : g.tensors) {
    if (t.kind == TensorKind::Value) continue;
    os << "  " << tensor_kind_name(t.kind) << " " << t.name << " : " << dtype_name(t.dtype) << "["
       << fmt::format("{}", fmt::join(t.shape, ", ")) << "]";
    if (t.kind == TensorKind::Const) {
      os << " = ";
      print_init(os, t, max_values);
      // A truncated list already ended its line with a comment.
      if ((t.init.kind == ConstInit::Kind::Values || t.init.kind == ConstInit::Kind::Data) &&
          const_value_count(t) > max_values) {
        os << "\n";
        continue;
      }
    }
    os << ";\n";
  }
  for (const GraphCall& c : g.calls) {
    os << "  " << fmt::format("{}", fmt::join(c.results, ", ")) << " = " << c.op.name << "("
       << fmt::format("{}", fmt::join(c.args, ", "));
    for (const Param& p : c.op.params) {
      os << ", " << p.name << " = " << (p.value ? std::to_string(*p.value) : "?");
    }
    os << ");\n";
  }
  if (!g.outputs.empty())
    os << "  output " << fmt::format("{}", fmt::join(g.outputs, ", ")) << ";\n";
  os << "}\n";
  return os.str();
}

}  // namespace kiln::ir
