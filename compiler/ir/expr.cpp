// Expressions: type-checking constructors, the .kiln printer, equality, substitution, visitors.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <string_view>

#include "kiln/ir.h"

namespace kiln::ir {

// ---------------------------------------------------------------------------
// Names

namespace {

template <typename T>
T load_as(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void store_as(void* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// NaN and out-of-range values saturate instead of being undefined behavior.
int64_t saturated(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

}  // namespace

double read_element(DType t, const void* p) {
  switch (t) {
    case DType::Bool:
      return load_as<uint8_t>(p) != 0 ? 1.0 : 0.0;
    case DType::I32:
      return load_as<int32_t>(p);
    case DType::I64:
      return static_cast<double>(load_as<int64_t>(p));
    case DType::F32:
      return load_as<float>(p);
    case DType::F64:
      return load_as<double>(p);
  }
  return 0;
}

int64_t read_element_int(DType t, const void* p) {
  switch (t) {
    case DType::Bool:
      return load_as<uint8_t>(p) != 0;
    case DType::I32:
      return load_as<int32_t>(p);
    case DType::I64:
      return load_as<int64_t>(p);
    case DType::F32:
      return saturated(load_as<float>(p));
    case DType::F64:
      return saturated(load_as<double>(p));
  }
  return 0;
}

void write_element(DType t, void* p, double v) {
  switch (t) {
    case DType::Bool:
      store_as<uint8_t>(p, v != 0 ? 1 : 0);
      return;
    case DType::I32:
    case DType::I64:
      write_element_int(t, p, saturated(v));
      return;
    case DType::F32:
      store_as<float>(p, static_cast<float>(v));
      return;
    case DType::F64:
      store_as<double>(p, v);
      return;
  }
}

void write_element_int(DType t, void* p, int64_t v) {
  switch (t) {
    case DType::Bool:
      store_as<uint8_t>(p, v != 0 ? 1 : 0);
      return;
    case DType::I32:
      store_as<int32_t>(p, static_cast<int32_t>(static_cast<uint32_t>(v)));
      return;
    case DType::I64:
      store_as<int64_t>(p, v);
      return;
    case DType::F32:
      store_as<float>(p, static_cast<float>(v));
      return;
    case DType::F64:
      store_as<double>(p, static_cast<double>(v));
      return;
  }
}

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::Bool:
      return 1;
    case DType::I32:
    case DType::F32:
      return 4;
    case DType::I64:
    case DType::F64:
      return 8;
  }
  return 8;
}

double dtype_min(DType t) {
  switch (t) {
    case DType::Bool:
      return 0;
    case DType::I32:
      return static_cast<double>(std::numeric_limits<int32_t>::min());
    case DType::I64:
      return static_cast<double>(std::numeric_limits<int64_t>::min());
    case DType::F32:
      return -static_cast<double>(std::numeric_limits<float>::max());
    case DType::F64:
      return -std::numeric_limits<double>::max();
  }
  return 0;
}

double dtype_max(DType t) {
  switch (t) {
    case DType::Bool:
      return 1;
    case DType::I32:
      return static_cast<double>(std::numeric_limits<int32_t>::max());
    case DType::I64:
      return static_cast<double>(std::numeric_limits<int64_t>::max());
    case DType::F32:
      return static_cast<double>(std::numeric_limits<float>::max());
    case DType::F64:
      return std::numeric_limits<double>::max();
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
  }
  return "?";
}

std::optional<DType> dtype_from_name(const std::string& name) {
  for (DType t : {DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64}) {
    if (name == dtype_name(t)) return t;
  }
  return std::nullopt;
}

const char* binary_op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
      return "+";
    case BinaryOp::Sub:
      return "-";
    case BinaryOp::Mul:
      return "*";
    case BinaryOp::Div:
      return "/";
    case BinaryOp::Mod:
      return "%";
    case BinaryOp::Min:
      return "min";
    case BinaryOp::Max:
      return "max";
    case BinaryOp::Lt:
      return "<";
    case BinaryOp::Le:
      return "<=";
    case BinaryOp::Gt:
      return ">";
    case BinaryOp::Ge:
      return ">=";
    case BinaryOp::Eq:
      return "==";
    case BinaryOp::Ne:
      return "!=";
    case BinaryOp::And:
      return "&&";
    case BinaryOp::Or:
      return "||";
  }
  return "?";
}

bool is_comparison(BinaryOp op) {
  switch (op) {
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
    case BinaryOp::Eq:
    case BinaryOp::Ne:
      return true;
    default:
      return false;
  }
}

bool is_commutative(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Mul:
    case BinaryOp::Min:
    case BinaryOp::Max:
    case BinaryOp::Eq:
    case BinaryOp::Ne:
    case BinaryOp::And:
    case BinaryOp::Or:
      return true;
    default:
      return false;
  }
}

bool is_math_intrinsic(const std::string& name, size_t* arity) {
  static const char* const kUnary[] = {"exp", "log",  "sqrt",  "abs", "sin",
                                       "cos", "tanh", "floor", "ceil"};
  for (const char* n : kUnary) {
    if (name == n) {
      if (arity) *arity = 1;
      return true;
    }
  }
  if (name == "pow") {
    if (arity) *arity = 2;
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Constructors

namespace {

[[noreturn]] void type_bug(const std::string& what) {
  throw std::logic_error("kiln IR type error: " + what);
}

void require_same(const Expr& a, const Expr& b, const char* op) {
  if (!a || !b) type_bug(std::string("null operand of ") + op);
  if (a->type != b->type) {
    type_bug(fmt::format("operands of {} have types {} and {}: {} and {}", op, dtype_name(a->type),
                         dtype_name(b->type), to_string(a), to_string(b)));
  }
}

}  // namespace

Expr int_imm(int64_t v, DType t) {
  if (is_float(t)) return std::make_shared<FloatImm>(static_cast<double>(v), t);
  if (t == DType::Bool) return std::make_shared<IntImm>(v != 0, t);
  if (t == DType::I32) v = static_cast<int32_t>(v);
  return std::make_shared<IntImm>(v, t);
}

Expr float_imm(double v, DType t) {
  if (!is_float(t)) type_bug(fmt::format("float literal of type {}", dtype_name(t)));
  if (t == DType::F32) v = static_cast<double>(static_cast<float>(v));
  return std::make_shared<FloatImm>(v, t);
}

Expr reduction_identity(BinaryOp op, DType t) {
  double inf = std::numeric_limits<double>::infinity();
  if (is_float(t)) {
    double v = op == BinaryOp::Add   ? 0.0
               : op == BinaryOp::Mul ? 1.0
               : op == BinaryOp::Max ? -inf
                                     : inf;
    return float_imm(v, t);
  }
  int64_t lo =
      t == DType::I32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  int64_t hi =
      t == DType::I32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  int64_t v = op == BinaryOp::Add ? 0 : op == BinaryOp::Mul ? 1 : op == BinaryOp::Max ? lo : hi;
  return int_imm(v, t);
}

Expr bool_imm(bool v) { return std::make_shared<IntImm>(v ? 1 : 0, DType::Bool); }

Expr var(const std::string& name, DType t) { return std::make_shared<Var>(name, t); }

Expr cast(DType t, Expr v) {
  if (!v) type_bug("cast of null");
  if (v->type == t) return v;
  return std::make_shared<Cast>(t, std::move(v));
}

Expr unary(UnaryOp op, Expr a) {
  if (!a) type_bug("null operand of unary op");
  if (op == UnaryOp::Not) {
    if (a->type != DType::Bool) type_bug("not of non-bool " + to_string(a));
  } else if (a->type == DType::Bool) {
    type_bug("negation of bool " + to_string(a));
  }
  DType t = a->type;
  return std::make_shared<Unary>(op, std::move(a), t);
}

Expr binary(BinaryOp op, Expr a, Expr b) {
  require_same(a, b, binary_op_symbol(op));
  DType t = a->type;
  if (op == BinaryOp::And || op == BinaryOp::Or) {
    if (t != DType::Bool) {
      type_bug(fmt::format("{} needs bool operands: {}", binary_op_symbol(op), to_string(a)));
    }
  } else if (is_comparison(op)) {
    if (t == DType::Bool && op != BinaryOp::Eq && op != BinaryOp::Ne) {
      type_bug(fmt::format("ordering comparison of bools: {}", to_string(a)));
    }
    t = DType::Bool;
  } else if (t == DType::Bool) {
    type_bug(fmt::format("arithmetic {} on bool: {}", binary_op_symbol(op), to_string(a)));
  }
  return std::make_shared<Binary>(op, std::move(a), std::move(b), t);
}

Expr select(Expr cond, Expr t, Expr f) {
  if (!cond || cond->type != DType::Bool) type_bug("select condition is not bool");
  require_same(t, f, "select");
  DType ty = t->type;
  return std::make_shared<Select>(std::move(cond), std::move(t), std::move(f), ty);
}

Expr call(const std::string& name, std::vector<Expr> args) {
  if (args.empty() || !args[0]) type_bug("call of " + name + " without arguments");
  size_t arity = 0;
  if (is_math_intrinsic(name, &arity) && args.size() != arity) {
    type_bug(fmt::format("{} takes {} argument(s), got {}", name, arity, args.size()));
  }
  for (size_t i = 1; i < args.size(); ++i) require_same(args[0], args[i], name.c_str());
  DType t = args[0]->type;
  return std::make_shared<Call>(name, std::move(args), t);
}

Expr access(const std::string& comp, std::vector<Expr> indices, DType t, SourceLoc where) {
  return std::make_shared<Access>(comp, std::move(indices), t, std::move(where));
}

Expr load(const std::string& buf, std::vector<Expr> indices, DType t, SourceLoc where) {
  return std::make_shared<Load>(buf, std::move(indices), t, std::move(where));
}

Expr let(const std::string& v, Expr value, Expr body) {
  if (!value || !body) type_bug("let with null value or body");
  DType t = body->type;
  return std::make_shared<Let>(v, std::move(value), std::move(body), t);
}

Expr operator+(Expr a, Expr b) { return binary(BinaryOp::Add, std::move(a), std::move(b)); }
Expr operator-(Expr a, Expr b) { return binary(BinaryOp::Sub, std::move(a), std::move(b)); }
Expr operator*(Expr a, Expr b) { return binary(BinaryOp::Mul, std::move(a), std::move(b)); }

// ---------------------------------------------------------------------------
// Printing in .kiln syntax

namespace {

// Precedence levels, lowest first, as the language defines them.
enum Prec : int { kOr = 1, kAnd, kNot, kCmp, kAdd, kMul, kUnary, kAtom };

int binary_prec(BinaryOp op) {
  switch (op) {
    case BinaryOp::Or:
      return kOr;
    case BinaryOp::And:
      return kAnd;
    case BinaryOp::Add:
    case BinaryOp::Sub:
      return kAdd;
    case BinaryOp::Mul:
    case BinaryOp::Div:
    case BinaryOp::Mod:
      return kMul;
    case BinaryOp::Min:
    case BinaryOp::Max:
      return kAtom;
    default:
      return kCmp;
  }
}

std::string float_literal(double v, DType t) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest text that reads back as the same value in the literal's own type.
  std::string s = t == DType::F32 ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

class Printer {
 public:
  // Prints e, parenthesized when its precedence is below `min_prec`.
  std::string print(const Expr& e, int min_prec = 0) {
    int p = 0;
    std::string s = print_bare(e, &p);
    return p < min_prec ? "(" + s + ")" : s;
  }

 private:
  std::string list(const std::vector<Expr>& es) {
    std::string s;
    for (size_t i = 0; i < es.size(); ++i) {
      if (i) s += ", ";
      s += print(es[i]);
    }
    return s;
  }

  std::string print_bare(const Expr& e, int* prec) {
    *prec = kAtom;
    if (!e) return "<null>";
    switch (e->kind) {
      case ExprKind::IntImm: {
        const auto& n = static_cast<const IntImm&>(*e);
        if (n.type == DType::Bool) return n.value ? "true" : "false";
        // The smallest i64 has no literal (9223372036854775808 does not fit):
        // printed as a sum, it parses back to itself.
        if (n.value == std::numeric_limits<int64_t>::min()) {
          *prec = kAdd;
          return "-9223372036854775807 - 1";
        }
        if (n.value < 0) *prec = kUnary;
        return std::to_string(n.value);
      }
      case ExprKind::FloatImm: {
        const auto& n = static_cast<const FloatImm&>(*e);
        if (std::signbit(n.value)) *prec = kUnary;
        return float_literal(n.value, n.type);
      }
      case ExprKind::Var:
        return static_cast<const Var&>(*e).name;
      case ExprKind::Cast: {
        const auto& n = static_cast<const Cast&>(*e);
        return std::string(dtype_name(n.type)) + "(" + print(n.value) + ")";
      }
      case ExprKind::Unary: {
        const auto& n = static_cast<const Unary&>(*e);
        if (n.op == UnaryOp::Not) {
          *prec = kNot;
          return "not " + print(n.a, kNot);
        }
        *prec = kUnary;
        std::string a = print(n.a, kUnary);
        return a[0] == '-' ? "- " + a : "-" + a;
      }
      case ExprKind::Binary: {
        const auto& n = static_cast<const Binary&>(*e);
        if (n.op == BinaryOp::Min || n.op == BinaryOp::Max) {
          return std::string(binary_op_symbol(n.op)) + "(" + print(n.a) + ", " + print(n.b) + ")";
        }
        int p = binary_prec(n.op);
        *prec = p;
        const char* sym = n.op == BinaryOp::And  ? "and"
                          : n.op == BinaryOp::Or ? "or"
                                                 : binary_op_symbol(n.op);
        // Left-associative; comparisons do not chain (a < b < c means a < b and b < c).
        int left = p == kCmp ? p + 1 : p;
        return print(n.a, left) + " " + sym + " " + print(n.b, p + 1);
      }
      case ExprKind::Select: {
        const auto& n = static_cast<const Select&>(*e);
        return "select(" + print(n.cond) + ", " + print(n.t) + ", " + print(n.f) + ")";
      }
      case ExprKind::Call: {
        const auto& n = static_cast<const Call&>(*e);
        return n.name + "(" + list(n.args) + ")";
      }
      case ExprKind::Access: {
        const auto& n = static_cast<const Access&>(*e);
        return n.comp + "(" + list(n.indices) + ")";
      }
      case ExprKind::Load: {
        const auto& n = static_cast<const Load&>(*e);
        return n.buf + "[" + list(n.indices) + "]";
      }
      case ExprKind::Let: {
        const auto& n = static_cast<const Let&>(*e);
        return "(let " + n.var + " = " + print(n.value) + " in " + print(n.body) + ")";
      }
    }
    return "?";
  }
};

}  // namespace

std::string to_string(const Expr& e) { return Printer().print(e); }

// ---------------------------------------------------------------------------
// Equality

namespace {
bool equal_all(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!equal(a[i], b[i])) return false;
  }
  return true;
}
}  // namespace

bool equal(const Expr& a, const Expr& b) {
  if (a == b) return true;
  if (!a || !b) return false;
  if (a->kind != b->kind || a->type != b->type) return false;
  switch (a->kind) {
    case ExprKind::IntImm:
      return static_cast<const IntImm&>(*a).value == static_cast<const IntImm&>(*b).value;
    case ExprKind::FloatImm: {
      double x = static_cast<const FloatImm&>(*a).value;
      double y = static_cast<const FloatImm&>(*b).value;
      return x == y ? std::signbit(x) == std::signbit(y) : (std::isnan(x) && std::isnan(y));
    }
    case ExprKind::Var:
      return static_cast<const Var&>(*a).name == static_cast<const Var&>(*b).name;
    case ExprKind::Cast:
      return equal(static_cast<const Cast&>(*a).value, static_cast<const Cast&>(*b).value);
    case ExprKind::Unary: {
      const auto& x = static_cast<const Unary&>(*a);
      const auto& y = static_cast<const Unary&>(*b);
      return x.op == y.op && equal(x.a, y.a);
    }
    case ExprKind::Binary: {
      const auto& x = static_cast<const Binary&>(*a);
      const auto& y = static_cast<const Binary&>(*b);
      return x.op == y.op && equal(x.a, y.a) && equal(x.b, y.b);
    }
    case ExprKind::Select: {
      const auto& x = static_cast<const Select&>(*a);
      const auto& y = static_cast<const Select&>(*b);
      return equal(x.cond, y.cond) && equal(x.t, y.t) && equal(x.f, y.f);
    }
    case ExprKind::Call: {
      const auto& x = static_cast<const Call&>(*a);
      const auto& y = static_cast<const Call&>(*b);
      return x.name == y.name && equal_all(x.args, y.args);
    }
    case ExprKind::Access: {
      const auto& x = static_cast<const Access&>(*a);
      const auto& y = static_cast<const Access&>(*b);
      return x.comp == y.comp && equal_all(x.indices, y.indices);
    }
    case ExprKind::Load: {
      const auto& x = static_cast<const Load&>(*a);
      const auto& y = static_cast<const Load&>(*b);
      return x.buf == y.buf && equal_all(x.indices, y.indices);
    }
    case ExprKind::Let: {
      const auto& x = static_cast<const Let&>(*a);
      const auto& y = static_cast<const Let&>(*b);
      return x.var == y.var && equal(x.value, y.value) && equal(x.body, y.body);
    }
  }
  return false;
}

// ---------------------------------------------------------------------------
// Substitution

namespace {

class Substituter : public IRMutator {
 public:
  explicit Substituter(const std::map<std::string, Expr>& r) : repl_(r) {}

 protected:
  Expr mutate_var(const Expr& e, const Var& n) override {
    if (shadowed_.count(n.name)) return e;
    auto it = repl_.find(n.name);
    return it == repl_.end() ? e : it->second;
  }
  Expr mutate_let(const Expr& e, const Let& n) override {
    Expr value = mutate(n.value);
    bool inserted = shadowed_.insert(n.var).second;
    Expr body = mutate(n.body);
    if (inserted) shadowed_.erase(n.var);
    if (value == n.value && body == n.body) return e;
    return let(n.var, value, body);
  }

 private:
  const std::map<std::string, Expr>& repl_;
  std::set<std::string> shadowed_;
};

}  // namespace

Expr substitute(const Expr& e, const std::map<std::string, Expr>& replacements) {
  if (replacements.empty()) return e;
  return Substituter(replacements).mutate(e);
}

// ---------------------------------------------------------------------------
// IRVisitor

void IRVisitor::visit(const Expr& e) {
  if (!e) return;
  switch (e->kind) {
    case ExprKind::IntImm:
      return visit_int(static_cast<const IntImm&>(*e));
    case ExprKind::FloatImm:
      return visit_float(static_cast<const FloatImm&>(*e));
    case ExprKind::Var:
      return visit_var(static_cast<const Var&>(*e));
    case ExprKind::Cast:
      return visit_cast(static_cast<const Cast&>(*e));
    case ExprKind::Unary:
      return visit_unary(static_cast<const Unary&>(*e));
    case ExprKind::Binary:
      return visit_binary(static_cast<const Binary&>(*e));
    case ExprKind::Select:
      return visit_select(static_cast<const Select&>(*e));
    case ExprKind::Call:
      return visit_call(static_cast<const Call&>(*e));
    case ExprKind::Access:
      return visit_access(static_cast<const Access&>(*e));
    case ExprKind::Load:
      return visit_load(static_cast<const Load&>(*e));
    case ExprKind::Let:
      return visit_let(static_cast<const Let&>(*e));
  }
}

void IRVisitor::visit_cast(const Cast& n) { visit(n.value); }
void IRVisitor::visit_unary(const Unary& n) { visit(n.a); }
void IRVisitor::visit_binary(const Binary& n) {
  visit(n.a);
  visit(n.b);
}
void IRVisitor::visit_select(const Select& n) {
  visit(n.cond);
  visit(n.t);
  visit(n.f);
}
void IRVisitor::visit_call(const Call& n) {
  for (const Expr& a : n.args) visit(a);
}
void IRVisitor::visit_access(const Access& n) {
  for (const Expr& i : n.indices) visit(i);
}
void IRVisitor::visit_load(const Load& n) {
  for (const Expr& i : n.indices) visit(i);
}
void IRVisitor::visit_let(const Let& n) {
  visit(n.value);
  visit(n.body);
}

// ---------------------------------------------------------------------------
// IRMutator

Expr IRMutator::mutate(const Expr& e) {
  if (!e) return e;
  switch (e->kind) {
    case ExprKind::IntImm:
      return mutate_int(e, static_cast<const IntImm&>(*e));
    case ExprKind::FloatImm:
      return mutate_float(e, static_cast<const FloatImm&>(*e));
    case ExprKind::Var:
      return mutate_var(e, static_cast<const Var&>(*e));
    case ExprKind::Cast:
      return mutate_cast(e, static_cast<const Cast&>(*e));
    case ExprKind::Unary:
      return mutate_unary(e, static_cast<const Unary&>(*e));
    case ExprKind::Binary:
      return mutate_binary(e, static_cast<const Binary&>(*e));
    case ExprKind::Select:
      return mutate_select(e, static_cast<const Select&>(*e));
    case ExprKind::Call:
      return mutate_call(e, static_cast<const Call&>(*e));
    case ExprKind::Access:
      return mutate_access(e, static_cast<const Access&>(*e));
    case ExprKind::Load:
      return mutate_load(e, static_cast<const Load&>(*e));
    case ExprKind::Let:
      return mutate_let(e, static_cast<const Let&>(*e));
  }
  return e;
}

std::vector<Expr> IRMutator::mutate_all(const std::vector<Expr>& es, bool* changed) {
  std::vector<Expr> out;
  out.reserve(es.size());
  for (const Expr& x : es) {
    out.push_back(mutate(x));
    if (out.back() != x) *changed = true;
  }
  return out;
}

Expr IRMutator::mutate_cast(const Expr& e, const Cast& n) {
  Expr v = mutate(n.value);
  if (v == n.value) return e;
  return std::make_shared<Cast>(n.type, v);
}

Expr IRMutator::mutate_unary(const Expr& e, const Unary& n) {
  Expr a = mutate(n.a);
  if (a == n.a) return e;
  return unary(n.op, a);
}

Expr IRMutator::mutate_binary(const Expr& e, const Binary& n) {
  Expr a = mutate(n.a);
  Expr b = mutate(n.b);
  if (a == n.a && b == n.b) return e;
  return binary(n.op, a, b);
}

Expr IRMutator::mutate_select(const Expr& e, const Select& n) {
  Expr c = mutate(n.cond);
  Expr t = mutate(n.t);
  Expr f = mutate(n.f);
  if (c == n.cond && t == n.t && f == n.f) return e;
  return select(c, t, f);
}

Expr IRMutator::mutate_call(const Expr& e, const Call& n) {
  bool changed = false;
  std::vector<Expr> args = mutate_all(n.args, &changed);
  if (!changed) return e;
  return call(n.name, std::move(args));
}

Expr IRMutator::mutate_access(const Expr& e, const Access& n) {
  bool changed = false;
  std::vector<Expr> idx = mutate_all(n.indices, &changed);
  if (!changed) return e;
  return access(n.comp, std::move(idx), n.type, n.where);
}

Expr IRMutator::mutate_load(const Expr& e, const Load& n) {
  bool changed = false;
  std::vector<Expr> idx = mutate_all(n.indices, &changed);
  if (!changed) return e;
  return load(n.buf, std::move(idx), n.type, n.where);
}

Expr IRMutator::mutate_let(const Expr& e, const Let& n) {
  Expr v = mutate(n.value);
  Expr b = mutate(n.body);
  if (v == n.value && b == n.body) return e;
  return let(n.var, v, b);
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) return static_cast<int64_t>(0 - static_cast<uint64_t>(a));  // no overflow trap
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

namespace {

std::optional<int64_t> eval_int_in(const Expr& e, const std::map<std::string, int64_t>& env) {
  if (const auto* n = as<IntImm>(e)) return n->value;
  if (const auto* n = as<Var>(e)) {
    auto it = env.find(n->name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  }
  if (const auto* n = as<Cast>(e)) {
    if (is_float(n->type) || is_float(n->value->type)) return std::nullopt;
    std::optional<int64_t> v = eval_int_in(n->value, env);
    if (v && n->type == DType::Bool) return *v != 0;
    return v;
  }
  if (const auto* n = as<Unary>(e)) {
    std::optional<int64_t> a = eval_int_in(n->a, env);
    if (!a) return std::nullopt;
    return n->op == UnaryOp::Neg ? -*a : int64_t{*a == 0};
  }
  if (const auto* n = as<Select>(e)) {
    std::optional<int64_t> c = eval_int_in(n->cond, env);
    if (!c) return std::nullopt;
    return eval_int_in(*c != 0 ? n->t : n->f, env);
  }
  if (const auto* n = as<Let>(e)) {
    std::optional<int64_t> v = eval_int_in(n->value, env);
    if (!v) return std::nullopt;
    std::map<std::string, int64_t> inner = env;
    inner[n->var] = *v;
    std::optional<int64_t> r = eval_int_in(n->body, inner);
    return r;
  }
  const auto* n = as<Binary>(e);
  if (n == nullptr || is_float(n->a->type)) return std::nullopt;
  std::optional<int64_t> a = eval_int_in(n->a, env), b = eval_int_in(n->b, env);
  if (!a || !b) return std::nullopt;
  if (is_comparison(n->op)) return compare(n->op, *a, *b);
  switch (n->op) {
    case BinaryOp::Add:
      return *a + *b;
    case BinaryOp::Sub:
      return *a - *b;
    case BinaryOp::Mul:
      return *a * *b;
    case BinaryOp::Div:
      if (*b == 0) return std::nullopt;
      return floor_div(*a, *b);
    case BinaryOp::Mod:
      if (*b == 0) return std::nullopt;
      return floor_mod(*a, *b);
    case BinaryOp::Min:
      return std::min(*a, *b);
    case BinaryOp::Max:
      return std::max(*a, *b);
    case BinaryOp::And:
      return *a != 0 && *b != 0;
    case BinaryOp::Or:
      return *a != 0 || *b != 0;
    default:  // comparisons, above
      break;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> eval_int(const Expr& e, const std::map<std::string, int64_t>& env) {
  return eval_int_in(e, env);
}

}  // namespace kiln::ir
