// The expression evaluator shared by the reference and loop-IR interpreters.
#include "eval.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kiln/loop_ir.h"

namespace kiln::interp::detail {

using ir::BinaryOp;
using ir::DType;

namespace {

int64_t wrap(DType t, uint64_t bits) {
  if (t == DType::I32) return static_cast<int32_t>(static_cast<uint32_t>(bits));
  if (t == DType::Bool) return bits != 0;
  return static_cast<int64_t>(bits);
}

// C-like float-to-integer conversion, defined for every input (NaN gives 0,
// out of range saturates) so a bad program cannot make the interpreter crash.
int64_t float_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

}  // namespace

Value Value::of_int(DType t, int64_t v) {
  if (ir::is_float(t)) return of_float(t, static_cast<double>(v));
  return Value{t, wrap(t, static_cast<uint64_t>(v)), 0};
}

Value Value::of_float(DType t, double v) {
  if (t == DType::F32) return Value{t, 0, static_cast<double>(static_cast<float>(v))};
  if (t == DType::F64) return Value{t, 0, v};
  if (t == DType::Bool) return of_bool(v != 0);
  return of_int(t, float_to_int(v));
}

int64_t Value::as_int() const { return ir::is_float(type) ? float_to_int(f) : i; }

std::string Value::str() const {
  if (type == DType::Bool) return i ? "true" : "false";
  if (ir::is_float(type)) return fmt::format("{}", f);
  return std::to_string(i);
}

Value convert(const Value& v, DType t) {
  if (v.type == t) return v;
  if (t == DType::Bool) return Value::of_bool(ir::is_float(v.type) ? v.f != 0 : v.i != 0);
  if (ir::is_float(v.type)) return Value::of_float(t, v.f);
  return Value::of_int(t, v.i);
}

std::string format_index(const std::vector<int64_t>& idx) {
  return fmt::format("{}", fmt::join(idx, ", "));
}

std::string format_shape(const std::vector<int64_t>& shape) {
  return "[" + format_index(shape) + "]";
}

HostBuffer* run_buffer(std::map<std::string, HostBuffer>& temps, Bindings& b,
                       const std::string& name) {
  auto t = temps.find(name);
  if (t != temps.end()) return &t->second;
  auto it = b.buffers.find(name);
  return it == b.buffers.end() ? nullptr : &it->second;
}

Value load_element(const HostBuffer& b, int64_t flat) {
  if (ir::is_float(b.dtype())) return Value::of_float(b.dtype(), b.get_f(flat));
  return Value::of_int(b.dtype(), b.get_i(flat));
}

void store_element(HostBuffer& b, int64_t flat, const Value& v) {
  if (ir::is_float(v.type)) {
    b.set_f(flat, v.f);
  } else {
    b.set_i(flat, v.i);
  }
}

// ---------------------------------------------------------------------------
// Evaluator

size_t Evaluator::begin_scope() {
  size_t saved = scope_start_;
  scope_start_ = locals_.size();
  return saved;
}

void Evaluator::end_scope(size_t saved) {
  locals_.resize(scope_start_);
  scope_start_ = saved;
}

const Value* Evaluator::lookup(const std::string& name) const {
  for (size_t k = locals_.size(); k > scope_start_; --k) {
    if (locals_[k - 1].first == name) return &locals_[k - 1].second;
  }
  return nullptr;
}

void Evaluator::fail(const std::string& message) {
  throw CompileError(ErrorStage::Interp, error_loc(), message + context());
}

std::string Evaluator::describe_element(const std::string& buf, const std::vector<int64_t>& idx,
                                        const std::vector<int64_t>& shape) const {
  return fmt::format("{}[{}] (shape {})", buf, format_index(idx), format_shape(shape));
}

int64_t Evaluator::checked_flat(const char* what, const std::string& buf, const HostBuffer& b,
                                const std::vector<int64_t>& idx) {
  const std::vector<int64_t>& shape = b.shape();
  if (idx.size() != shape.size()) {
    fail(fmt::format("{} of {} with {} indices, but {} has {} dimensions", what, buf, idx.size(),
                     buf, shape.size()));
  }
  int64_t flat = 0;
  for (size_t d = 0; d < idx.size(); ++d) {
    if (idx[d] < 0 || idx[d] >= shape[d]) {
      fail(fmt::format("out-of-bounds {} {}", what, describe_element(buf, idx, shape)));
    }
    flat = flat * shape[d] + idx[d];
  }
  return flat;
}

Value Evaluator::eval_access(const ir::Access& a, const std::vector<int64_t>& idx) {
  fail(fmt::format("read of computation {}({}) in loop IR", a.comp, format_index(idx)));
}

std::vector<int64_t> Evaluator::eval_indices(const std::vector<ir::Expr>& es) {
  std::vector<int64_t> idx;
  idx.reserve(es.size());
  for (const ir::Expr& e : es) idx.push_back(eval_int(e));
  return idx;
}

int64_t Evaluator::eval_int(const ir::Expr& e) {
  Value v = eval(e);
  if (ir::is_float(v.type)) fail("index or bound " + ir::to_string(e) + " is not an integer");
  return v.i;
}

bool Evaluator::eval_bool(const ir::Expr& e) {
  Value v = eval(e);
  return ir::is_float(v.type) ? v.f != 0 : v.i != 0;
}

Value Evaluator::eval(const ir::Expr& e) {
  switch (e->kind) {
    case ir::ExprKind::IntImm:
      return Value::of_int(e->type, static_cast<const ir::IntImm&>(*e).value);
    case ir::ExprKind::FloatImm:
      return Value::of_float(e->type, static_cast<const ir::FloatImm&>(*e).value);
    case ir::ExprKind::Var: {
      const auto& n = static_cast<const ir::Var&>(*e);
      if (const Value* v = lookup(n.name)) return convert(*v, n.type);
      auto it = params_.find(n.name);
      if (it == params_.end()) fail("unbound variable " + n.name);
      return Value::of_int(n.type, it->second);
    }
    case ir::ExprKind::Cast: {
      const auto& n = static_cast<const ir::Cast&>(*e);
      return convert(eval(n.value), n.type);
    }
    case ir::ExprKind::Unary: {
      const auto& n = static_cast<const ir::Unary&>(*e);
      Value a = eval(n.a);
      if (n.op == ir::UnaryOp::Not) return Value::of_bool(a.as_int() == 0);
      if (ir::is_float(a.type)) return Value::of_float(a.type, -a.f);
      return Value::of_int(a.type, static_cast<int64_t>(0 - static_cast<uint64_t>(a.i)));
    }
    case ir::ExprKind::Binary:
      return eval_binary(static_cast<const ir::Binary&>(*e), e);
    case ir::ExprKind::Select: {
      const auto& n = static_cast<const ir::Select&>(*e);
      return eval_bool(n.cond) ? eval(n.t) : eval(n.f);
    }
    case ir::ExprKind::Call:
      return eval_call(static_cast<const ir::Call&>(*e));
    case ir::ExprKind::Access: {
      const auto& n = static_cast<const ir::Access&>(*e);
      return convert(eval_access(n, eval_indices(n.indices)), n.type);
    }
    case ir::ExprKind::Load: {
      const auto& n = static_cast<const ir::Load&>(*e);
      std::vector<int64_t> idx = eval_indices(n.indices);
      HostBuffer* b = find_buffer(n.buf);
      if (!b) fail("read of unknown buffer " + n.buf);
      return convert(load_element(*b, checked_flat("read", n.buf, *b, idx)), n.type);
    }
    case ir::ExprKind::Let: {
      const auto& n = static_cast<const ir::Let&>(*e);
      push(n.var, eval(n.value));
      Value v = eval(n.body);
      pop();
      return v;
    }
  }
  fail("unknown expression kind");
}

Value Evaluator::eval_binary(const ir::Binary& n, const ir::Expr& e) {
  // and/or short-circuit, like C: `i < n and x[i] > 0` never reads x[n].
  if (n.op == BinaryOp::And) return Value::of_bool(eval_bool(n.a) && eval_bool(n.b));
  if (n.op == BinaryOp::Or) return Value::of_bool(eval_bool(n.a) || eval_bool(n.b));
  return apply_binary(n.op, eval(n.a), eval(n.b), e);
}

Value Evaluator::apply_binary(BinaryOp op, Value a, Value b, const ir::Expr& e) {
  if (a.type != b.type) {
    // The IR constructors keep operand types equal; be lenient with hand-built nodes.
    DType t = ir::is_float(a.type) ? a.type : b.type;
    a = convert(a, t);
    b = convert(b, t);
  }
  if (ir::is_float(a.type)) {
    double x = a.f, y = b.f;
    DType t = a.type;
    if (is_comparison(op)) return Value::of_bool(ir::compare(op, x, y));
    switch (op) {
      case BinaryOp::Add:
        return Value::of_float(t, x + y);
      case BinaryOp::Sub:
        return Value::of_float(t, x - y);
      case BinaryOp::Mul:
        return Value::of_float(t, x * y);
      case BinaryOp::Div:
        return Value::of_float(t, x / y);
      case BinaryOp::Mod:
        return Value::of_float(t, std::fmod(x, y));
      case BinaryOp::Min:
        return Value::of_float(t, y < x ? y : x);
      case BinaryOp::Max:
        return Value::of_float(t, x < y ? y : x);
      default:
        break;
    }
    fail("bad float operation " + ir::to_string(e));
  }
  int64_t x = a.i, y = b.i;
  uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  DType t = a.type;
  if (is_comparison(op)) return Value::of_bool(ir::compare(op, x, y));
  switch (op) {
    case BinaryOp::Add:
      return Value::of_int(t, static_cast<int64_t>(ux + uy));
    case BinaryOp::Sub:
      return Value::of_int(t, static_cast<int64_t>(ux - uy));
    case BinaryOp::Mul:
      return Value::of_int(t, static_cast<int64_t>(ux * uy));
    case BinaryOp::Div:
    case BinaryOp::Mod:
      // One outcome everywhere: compiled kernels return an error status for both.
      if (y == 0) fail("integer division by zero in " + ir::to_string(e));
      if (y == -1 && static_cast<double>(x) == ir::dtype_min(t))
        fail(fmt::format("integer overflow: the smallest {} divided by -1 in {}", ir::dtype_name(t),
                         ir::to_string(e)));
      return Value::of_int(t, op == BinaryOp::Div ? ir::floor_div(x, y) : ir::floor_mod(x, y));
    case BinaryOp::Min:
      return Value::of_int(t, std::min(x, y));
    case BinaryOp::Max:
      return Value::of_int(t, std::max(x, y));
    default:
      break;
  }
  fail("bad integer operation " + ir::to_string(e));
}

namespace {

// Applies a one-argument intrinsic in the precision of T (float or double),
// as compiled code calling expf/exp would.
template <typename T>
bool apply_unary(const std::string& name, T x, T* out) {
  if (name == "exp")
    *out = std::exp(x);
  else if (name == "log")
    *out = std::log(x);
  else if (name == "sqrt")
    *out = std::sqrt(x);
  else if (name == "abs")
    *out = std::fabs(x);
  else if (name == "sin")
    *out = std::sin(x);
  else if (name == "cos")
    *out = std::cos(x);
  else if (name == "tanh")
    *out = std::tanh(x);
  else if (name == "floor")
    *out = std::floor(x);
  else if (name == "ceil")
    *out = std::ceil(x);
  else
    return false;
  return true;
}

}  // namespace

Value Evaluator::eval_call(const ir::Call& n) {
  // The GPU block's threads (kiln/loop_ir.h): here, as many as it has at least.
  if (n.name == ir::kGpuBlockThreads && n.args.size() == 1)
    return Value::of_int(ir::kIndexType, eval(n.args[0]).i);
  std::vector<Value> args;
  args.reserve(n.args.size());
  for (const ir::Expr& a : n.args) args.push_back(eval(a));
  size_t arity = 0;
  if (!ir::is_math_intrinsic(n.name, &arity)) fail("call of unknown function " + n.name);
  if (args.size() != arity) {
    fail(fmt::format("{} takes {} argument(s), got {}", n.name, arity, args.size()));
  }
  DType t = args[0].type;
  if (!ir::is_float(t)) {
    if (n.name == "abs") {
      int64_t x = args[0].i;
      return Value::of_int(t, x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x);
    }
    if (n.name == "floor" || n.name == "ceil") return args[0];
    t = DType::F64;  // other intrinsics of integers compute in double, then convert back
  }
  if (n.name == "pow") {
    Value y = convert(args[1], t);
    double r = t == DType::F32
                   ? static_cast<double>(std::pow(static_cast<float>(args[0].as_double()),
                                                  static_cast<float>(y.as_double())))
                   : std::pow(args[0].as_double(), y.as_double());
    return convert(Value::of_float(t, r), args[0].type);
  }
  double r = 0;
  if (t == DType::F32) {
    float out = 0;
    apply_unary<float>(n.name, static_cast<float>(args[0].as_double()), &out);
    r = out;
  } else {
    apply_unary<double>(n.name, args[0].as_double(), &r);
  }
  return convert(Value::of_float(t, r), args[0].type);
}

}  // namespace kiln::interp::detail
