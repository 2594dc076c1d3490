// Expression typing: the rules of docs/language.md, "Types", one function per construct.
#include "typing.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "affine.h"

namespace kiln::frontend {

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string count(size_t n, const std::string& singular, const std::string& plural_form) {
  return std::to_string(n) + " " + (n == 1 ? singular : plural_form);
}

Value typed(ir::Expr e) {
  Value v;
  v.expr = std::move(e);
  return v;
}

Value int_const(int64_t i) {
  Value v;
  v.konst = Value::Const::Int;
  v.i = i;
  return v;
}

Value float_const(double f) {
  Value v;
  v.konst = Value::Const::Float;
  v.f = f;
  return v;
}

double as_double(const Value& v) {
  return v.konst == Value::Const::Int ? static_cast<double>(v.i) : v.f;
}

const char* op_name(ir::BinaryOp op) {
  switch (op) {
    case ir::BinaryOp::And:
      return "and";
    case ir::BinaryOp::Or:
      return "or";
    default:
      return ir::binary_op_symbol(op);
  }
}

bool fits(ir::DType t, int64_t v) {
  if (t == ir::DType::I32) {
    return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
  }
  return true;
}

bool fits(ir::DType t, double v) {
  // inf and nan (literals past a double's range are refused when they are read) are f32's too.
  if (t == ir::DType::F32) return !std::isfinite(v) || std::fabs(v) <= FLT_MAX;
  if (t == ir::DType::I32) return v > -2147483649.0 && v < 2147483648.0;
  if (t == ir::DType::I64) return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  return true;
}

}  // namespace

std::string quote(const Source& src, const Ast& e) { return src.quote(e.start.offset, e.end); }

// ---------------------------------------------------------------------------
// Entry points

Value Typer::check(const Ast& e) {
  switch (e.kind) {
    case AstKind::Int:
      return int_const(e.int_value);
    case AstKind::Float:
      return float_const(e.float_value);
    case AstKind::Bool:
      return typed(ir::bool_imm(e.bool_value));
    case AstKind::Name:
      return name(e);
    case AstKind::Index:
      return load(e);
    case AstKind::Call:
      return call(e);
    case AstKind::Unary:
      return unary(e);
    case AstKind::Binary:
      return binary(e);
    case AstKind::Compare: {
      ir::Expr all;
      for (size_t k = 0; k < e.cmp_ops.size(); ++k) {
        ir::Expr c = comparison(e, k);
        all = all ? ir::binary(ir::BinaryOp::And, all, c) : c;
      }
      return typed(all);
    }
  }
  fail(e.pos, "unknown expression");
}

std::string Typer::describe(const Value& v, const Ast& e) const {
  switch (v.konst) {
    case Value::Const::Int:
      return "the integer constant " + q(quote(src_, e));
    case Value::Const::Float:
      return "the float constant " + q(quote(src_, e));
    case Value::Const::None:
      break;
  }
  return ir::dtype_name(v.expr->type);
}

ir::Expr Typer::constant_as(const Value& v, ir::DType t, const Ast& at) {
  if (v.konst == Value::Const::Int) {
    if (!fits(t, v.i)) {
      fail(at.start,
           "the constant " + q(quote(src_, at)) + " does not fit in " + ir::dtype_name(t));
    }
    if (ir::is_float(t)) return ir::float_imm(static_cast<double>(v.i), t);
    return ir::int_imm(v.i, t);
  }
  if (!fits(t, v.f)) {
    fail(at.start, "the constant " + q(quote(src_, at)) + " does not fit in " + ir::dtype_name(t));
  }
  return ir::float_imm(v.f, t);
}

ir::Expr Typer::as_type(const Ast& e, ir::DType t, const std::string& purpose) {
  Value v = check(e);
  if (!v.untyped()) {
    if (v.expr->type == t) return v.expr;
    fail(e.start, purpose + " must be " + ir::dtype_name(t) + ", found " +
                      ir::dtype_name(v.expr->type) + "; cast it: " + ir::dtype_name(t) + "(...)");
  }
  bool ok = v.konst == Value::Const::Int ? t != ir::DType::Bool : ir::is_float(t);
  if (!ok) {
    fail(e.start, purpose + " must be " + ir::dtype_name(t) + ", found " + describe(v, e));
  }
  return constant_as(v, t, e);
}

ir::Expr Typer::as_index(const Ast& e, const std::string& purpose) {
  Value v = check(e);
  if (v.konst == Value::Const::Int) return ir::int_imm(v.i, ir::DType::I64);
  if (!v.untyped() && ir::is_int(v.expr->type)) return ir::cast(ir::DType::I64, v.expr);
  fail(e.start, purpose + " must be an integer, found " + describe(v, e));
}

ir::Expr Typer::as_bool(const Ast& e, const std::string& purpose) {
  Value v = check(e);
  if (!v.untyped() && v.expr->type == ir::DType::Bool) return v.expr;
  fail(e.start, purpose + " must be bool, found " + describe(v, e));
}

ir::Expr Typer::as_default(const Ast& e) {
  Value v = check(e);
  if (!v.untyped()) return v.expr;
  return constant_as(v, v.konst == Value::Const::Int ? ir::DType::I64 : ir::DType::F32, e);
}

// ---------------------------------------------------------------------------
// Names and reads

Value Typer::name(const Ast& e) {
  if (ctx_.iterators && scope_.iter(e.name)) return typed(ir::var(e.name, ir::kIndexType));
  if (const Decl* d = scope_.name(e.name)) {
    switch (d->kind) {
      case Decl::Kind::Param:
        return typed(ir::var(e.name, ir::kIndexType));
      case Decl::Kind::Buffer:
        fail(e.pos, "buffer " + q(e.name) +
                        " is read with indices: " + q(e.name + (d->rank == 0 ? "[]" : "[...]")));
      case Decl::Kind::Knob:
        if (ctx_.knobs) return typed(ir::var(e.name, ir::kIndexType));
        fail(e.pos, "knob " + q(e.name) + " can only be used in schedule commands and constraints");
      case Decl::Kind::Comp:
        break;
    }
  }
  if (const Decl* c = scope_.comp(e.name)) {
    fail(e.pos, "computation " + q(e.name) +
                    " is read with arguments: " + q(e.name + (c->rank == 0 ? "()" : "(...)")));
  }
  if (is_builtin_name(e.name)) {
    fail(e.pos, q(e.name) + " is a built-in function; call it as " + q(e.name + "(...)"));
  }
  if (ctx_.target && ir::is_target_size(e.name)) return typed(ir::var(e.name, ir::kIndexType));
  // The float values without a decimal form, as ir::to_string prints them (a max reduction's
  // identity is -inf), so that a printed func parses again; a declared name shadows them.
  if (e.name == "inf") return float_const(std::numeric_limits<double>::infinity());
  if (e.name == "nan") return float_const(std::numeric_limits<double>::quiet_NaN());
  fail(e.pos,
       "unknown name " + q(e.name) + " in " + ctx_.what + scope_.unknown_hint(e.name, e.pos));
}

Value Typer::load(const Ast& e) {
  const Decl* d = scope_.name(e.name);
  if (!d || d->kind != Decl::Kind::Buffer) {
    if (scope_.comp(e.name)) {
      fail(e.pos,
           q(e.name) + " is a computation; read it with parentheses: " + q(e.name + "(...)"));
    }
    if (d) fail(e.pos, q(e.name) + " is " + decl_kind_name(d->kind) + ", not a buffer");
    if (scope_.iter(e.name)) fail(e.pos, q(e.name) + " is an iterator, not a buffer");
    fail(e.pos, "unknown buffer " + q(e.name) + scope_.unknown_hint(e.name, e.pos));
  }
  if (!ctx_.buffer_reads) {
    fail(e.pos, "a buffer read (" + q(quote(src_, e)) + ") is not allowed in " + ctx_.what);
  }
  if (ctx_.only_input_reads && d->buf_kind != ir::BufKind::Input) {
    fail(e.pos, ctx_.what + " may only read input buffers; " + q(e.name) + " is " +
                    (d->buf_kind == ir::BufKind::Output ? "an output" : "a temp") + " buffer");
  }
  if (e.args.size() != d->rank) {
    fail(e.pos, "buffer " + q(e.name) + " has " + count(d->rank, "dimension", "dimensions") +
                    " but is read with " + count(e.args.size(), "index", "indices"));
  }
  std::vector<ir::Expr> idx;
  for (size_t k = 0; k < e.args.size(); ++k) {
    idx.push_back(as_index(*e.args[k], "index " + std::to_string(k + 1) + " of " + q(e.name)));
  }
  return typed(ir::load(e.name, std::move(idx), d->dtype, src_.loc(e.pos)));
}

void Typer::require_args(const Ast& e, size_t n) const {
  if (e.args.size() != n) {
    fail(e.pos, q(e.name) + " takes " + count(n, "argument", "arguments") + ", found " +
                    std::to_string(e.args.size()));
  }
}

Value Typer::call(const Ast& e) {
  if (auto t = ir::dtype_from_name(e.name)) return cast(e, *t);
  if (e.name == "select") return select(e);
  if (e.name == "min" || e.name == "max") {
    require_args(e, 2);
    return binary(e);
  }
  if (ir::is_math_intrinsic(e.name)) return math(e);
  const Decl* c = scope_.comp(e.name);
  if (!c) {
    if (const Decl* d = scope_.name(e.name)) {
      if (d->kind == Decl::Kind::Buffer) {
        fail(e.pos, q(e.name) + " is a buffer; read it with brackets: " +
                        q(e.name + (d->rank == 0 ? "[]" : "[...]")));
      }
      fail(e.pos, q(e.name) + " is " + decl_kind_name(d->kind) + ", not a computation");
    }
    if (e.name == scope_.current_comp) {
      fail(e.pos, "computation " + q(e.name) + " cannot read itself");
    }
    fail(e.pos,
         "unknown function or computation " + q(e.name) + scope_.unknown_hint(e.name, e.pos));
  }
  if (!ctx_.comp_reads) {
    fail(e.pos, "a computation read (" + q(quote(src_, e)) + ") is not allowed in " + ctx_.what);
  }
  if (c->stores) {
    fail(e.pos, "computation " + q(e.name) +
                    " stores to a buffer and has no value to read; read the buffer it stores to");
  }
  if (e.args.size() != c->rank) {
    fail(e.pos, "computation " + q(e.name) + " has " + count(c->rank, "iterator", "iterators") +
                    " but is read with " + count(e.args.size(), "index", "indices"));
  }
  std::vector<ir::Expr> idx;
  AffineContext actx{"the indices of a read of " + q(e.name), false};
  for (size_t k = 0; k < e.args.size(); ++k) {
    idx.push_back(as_index(*e.args[k], "index " + std::to_string(k + 1) + " of " + q(e.name)));
    check_affine(src_, scope_, actx, *e.args[k]);
  }
  return typed(ir::access(e.name, std::move(idx), c->dtype, src_.loc(e.pos)));
}

// ---------------------------------------------------------------------------
// Built-in functions

Value Typer::cast(const Ast& e, ir::DType t) {
  require_args(e, 1);
  const Ast& a = *e.args[0];
  Value v = check(a);
  if (!v.untyped()) return typed(ir::cast(t, v.expr));
  if (t == ir::DType::Bool) return typed(ir::bool_imm(as_double(v) != 0));
  if (ir::is_float(t)) return typed(constant_as(v, t, a));
  if (v.konst == Value::Const::Int) return typed(constant_as(v, t, a));
  double f = std::trunc(v.f);
  if (!fits(t, f)) {
    fail(a.start, "the constant " + q(quote(src_, a)) + " does not fit in " + ir::dtype_name(t));
  }
  return typed(ir::int_imm(static_cast<int64_t>(f), t));
}

Value Typer::select(const Ast& e) {
  require_args(e, 3);
  ir::Expr c = as_bool(*e.args[0], "the condition of 'select'");
  Value a = check(*e.args[1]);
  Value b = check(*e.args[2]);
  if (a.untyped() && b.untyped()) {
    ir::DType t = a.konst == Value::Const::Float || b.konst == Value::Const::Float ? ir::DType::F32
                                                                                   : ir::DType::I64;
    return typed(ir::select(c, constant_as(a, t, *e.args[1]), constant_as(b, t, *e.args[2])));
  }
  auto [x, y] = unify(a, *e.args[1], b, *e.args[2], e.pos, "the branches of 'select'", true);
  return typed(ir::select(c, x, y));
}

Value Typer::math(const Ast& e) {
  size_t arity = 1;
  ir::is_math_intrinsic(e.name, &arity);
  require_args(e, arity);
  std::vector<Value> vs;
  bool all_constant = true;
  const Ast* typed_arg = nullptr;
  for (const AstPtr& a : e.args) {
    vs.push_back(check(*a));
    if (!vs.back().untyped()) {
      all_constant = false;
      if (!typed_arg) typed_arg = a.get();
    }
  }
  if (all_constant) {
    // Folded exactly; abs of an integer stays an integer.
    if (e.name == "abs" && vs[0].konst == Value::Const::Int) {
      if (vs[0].i == std::numeric_limits<int64_t>::min()) {
        fail(e.pos, "constant expression " + q(quote(src_, e)) + " overflows 64-bit integers");
      }
      return int_const(vs[0].i < 0 ? -vs[0].i : vs[0].i);
    }
    double x = as_double(vs[0]);
    double r = 0;
    if (e.name == "exp") r = std::exp(x);
    if (e.name == "log") r = std::log(x);
    if (e.name == "sqrt") r = std::sqrt(x);
    if (e.name == "abs") r = std::fabs(x);
    if (e.name == "sin") r = std::sin(x);
    if (e.name == "cos") r = std::cos(x);
    if (e.name == "tanh") r = std::tanh(x);
    if (e.name == "floor") r = std::floor(x);
    if (e.name == "ceil") r = std::ceil(x);
    if (e.name == "pow") r = std::pow(x, as_double(vs[1]));
    if (!std::isfinite(r)) {
      fail(e.pos, "constant expression " + q(quote(src_, e)) + " has no finite value");
    }
    return float_const(r);
  }
  std::vector<ir::Expr> args;
  if (arity == 2) {
    auto [x, y] =
        unify(vs[0], *e.args[0], vs[1], *e.args[1], e.pos, "the arguments of " + q(e.name), false);
    args = {x, y};
  } else {
    args = {vs[0].expr};
  }
  ir::DType t = args[0]->type;
  bool ok = ir::is_float(t) || (e.name == "abs" && ir::is_int(t));
  if (!ok) {
    fail(typed_arg->start,
         q(e.name) + " needs " + (e.name == "abs" ? "a number" : std::string("a float argument")) +
             ", found " + ir::dtype_name(t) + (t == ir::DType::Bool ? "" : "; cast it: f32(...)"));
  }
  return typed(ir::call(e.name, std::move(args)));
}

// ---------------------------------------------------------------------------
// Operators

Value Typer::unary(const Ast& e) {
  const Ast& a = *e.args[0];
  if (e.unary_op == ir::UnaryOp::Not) {
    return typed(ir::unary(ir::UnaryOp::Not, as_bool(a, "the operand of 'not'")));
  }
  Value v = check(a);
  if (v.konst == Value::Const::Int) {
    if (v.i == std::numeric_limits<int64_t>::min()) {
      fail(e.pos, "constant expression " + q(quote(src_, e)) + " overflows 64-bit integers");
    }
    return int_const(-v.i);
  }
  if (v.konst == Value::Const::Float) return float_const(-v.f);
  if (v.expr->type == ir::DType::Bool) fail(e.pos, "unary '-' needs a number, found bool");
  return typed(ir::unary(ir::UnaryOp::Neg, v.expr));
}

Value Typer::binary(const Ast& e) {
  // min(a, b) and max(a, b) arrive here as calls.
  ir::BinaryOp op = e.kind == AstKind::Call
                        ? (e.name == "min" ? ir::BinaryOp::Min : ir::BinaryOp::Max)
                        : e.binary_op;
  std::string sym = q(op_name(op));
  const Ast& ea = *e.args[0];
  const Ast& eb = *e.args[1];
  if (op == ir::BinaryOp::And || op == ir::BinaryOp::Or) {
    ir::Expr a = as_bool(ea, "the left operand of " + sym);
    ir::Expr b = as_bool(eb, "the right operand of " + sym);
    return typed(ir::binary(op, a, b));
  }
  Value a = check(ea);
  Value b = check(eb);
  if (a.untyped() && b.untyped()) return fold(op, a, b, e);
  auto [x, y] = unify(a, ea, b, eb, e.pos, "operands of " + sym, false);
  if ((op == ir::BinaryOp::Div || op == ir::BinaryOp::Mod) && ir::is_int(x->type) &&
      b.konst == Value::Const::Int && b.i == 0) {
    fail(e.pos, "division by zero in " + q(quote(src_, e)));
  }
  return typed(ir::binary(op, x, y));
}

ir::Expr Typer::comparison(const Ast& chain, size_t k) {
  ir::BinaryOp op = chain.cmp_ops[k];
  const Ast& ea = *chain.args[k];
  const Ast& eb = *chain.args[k + 1];
  Value a = check(ea);
  Value b = check(eb);
  if (a.untyped() && b.untyped()) {
    Value r = fold(op, a, b, chain);
    return r.expr;
  }
  bool eq = op == ir::BinaryOp::Eq || op == ir::BinaryOp::Ne;
  auto [x, y] = unify(a, ea, b, eb, chain.cmp_pos[k], "operands of " + q(op_name(op)), eq);
  return ir::binary(op, x, y);
}

std::pair<ir::Expr, ir::Expr> Typer::unify(const Value& a, const Ast& ea, const Value& b,
                                           const Ast& eb, Pos at, const std::string& what,
                                           bool allow_bool) {
  auto mix = [&](const std::string& ta, const std::string& tb, const std::string& hint) {
    fail(at, what + " do not mix: " + ta + " and " + tb + hint);
  };
  auto no_bool = [&]() { fail(at, what + " must be numbers, found bool"); };
  if (!a.untyped() && !b.untyped()) {
    ir::DType ta = a.expr->type;
    ir::DType tb = b.expr->type;
    if (ta == tb) {
      if (ta == ir::DType::Bool && !allow_bool) no_bool();
      return {a.expr, b.expr};
    }
    if (ir::is_int(ta) && ir::is_int(tb)) {
      return {ir::cast(ir::DType::I64, a.expr), ir::cast(ir::DType::I64, b.expr)};
    }
    if ((ta == ir::DType::Bool || tb == ir::DType::Bool) && !allow_bool) no_bool();
    std::string hint;
    if (ir::is_float(ta) && ir::is_float(tb)) {
      hint = "; cast one side: f32(...) or f64(...)";
    } else if (ir::is_float(ta) || ir::is_float(tb)) {
      hint = std::string("; cast the integer side: ") + ir::dtype_name(ir::is_float(ta) ? ta : tb) +
             "(...)";
    }
    mix(ir::dtype_name(ta), ir::dtype_name(tb), hint);
  }
  // One side is a constant: it takes the other side's type.
  bool a_const = a.untyped();
  const Value& c = a_const ? a : b;
  const Ast& ec = a_const ? ea : eb;
  const Value& v = a_const ? b : a;
  ir::DType t = v.expr->type;
  if (t == ir::DType::Bool) {
    if (!allow_bool) no_bool();
    if (a_const) mix(describe(c, ec), "bool", "");
    mix("bool", describe(c, ec), "");
  }
  if (c.konst == Value::Const::Float && ir::is_int(t)) {
    std::string hint = "; cast the integer side: f32(...)";
    if (a_const) mix(describe(c, ec), ir::dtype_name(t), hint);
    mix(ir::dtype_name(t), describe(c, ec), hint);
  }
  ir::Expr k = constant_as(c, t, ec);
  return a_const ? std::pair{k, v.expr} : std::pair{v.expr, k};
}

Value Typer::fold(ir::BinaryOp op, const Value& a, const Value& b, const Ast& at) {
  auto overflow = [&]() {
    fail(at.pos, "constant expression " + q(quote(src_, at)) + " overflows 64-bit integers");
  };
  auto by_zero = [&]() { fail(at.pos, "division by zero in " + q(quote(src_, at))); };
  if (a.konst == Value::Const::Int && b.konst == Value::Const::Int) {
    int64_t x = a.i, y = b.i, r = 0;
    if (ir::is_comparison(op)) return typed(ir::bool_imm(ir::compare(op, x, y)));
    switch (op) {
      case ir::BinaryOp::Add:
        if (__builtin_add_overflow(x, y, &r)) overflow();
        return int_const(r);
      case ir::BinaryOp::Sub:
        if (__builtin_sub_overflow(x, y, &r)) overflow();
        return int_const(r);
      case ir::BinaryOp::Mul:
        if (__builtin_mul_overflow(x, y, &r)) overflow();
        return int_const(r);
      case ir::BinaryOp::Div:
        if (y == 0) by_zero();
        if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow();
        return int_const(ir::floor_div(x, y));
      case ir::BinaryOp::Mod:
        if (y == 0) by_zero();
        if (y == -1) return int_const(0);
        return int_const(ir::floor_mod(x, y));
      case ir::BinaryOp::Min:
        return int_const(std::min(x, y));
      case ir::BinaryOp::Max:
        return int_const(std::max(x, y));
      default:  // And and Or: bool operands, never folded here
        break;
    }
    fail(at.pos, "bad constant operator");
  }
  double x = as_double(a), y = as_double(b), r = 0;
  if (ir::is_comparison(op)) return typed(ir::bool_imm(ir::compare(op, x, y)));
  switch (op) {
    case ir::BinaryOp::Add:
      r = x + y;
      break;
    case ir::BinaryOp::Sub:
      r = x - y;
      break;
    case ir::BinaryOp::Mul:
      r = x * y;
      break;
    case ir::BinaryOp::Div:
      if (y == 0) by_zero();
      r = x / y;
      break;
    case ir::BinaryOp::Mod:
      if (y == 0) by_zero();
      r = std::fmod(x, y);
      break;
    case ir::BinaryOp::Min:
      r = std::min(x, y);
      break;
    case ir::BinaryOp::Max:
      r = std::max(x, y);
      break;
    default:  // And and Or
      fail(at.pos, "bad constant operator");
  }
  if (!std::isfinite(r)) {
    fail(at.pos, "constant expression " + q(quote(src_, at)) + " has no finite value");
  }
  return float_const(r);
}

}  // namespace kiln::frontend
