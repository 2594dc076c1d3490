// The IR queries of kiln/analysis.h.
#include "kiln/analysis.h"

#include <vector>

namespace kiln::ir {

void for_each_child(const Expr& e, const std::function<void(const Expr&)>& f) {
  switch (e->kind) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Var:
      return;
    case ExprKind::Cast:
      return f(static_cast<const Cast&>(*e).value);
    case ExprKind::Unary:
      return f(static_cast<const Unary&>(*e).a);
    case ExprKind::Binary: {
      const auto& n = static_cast<const Binary&>(*e);
      f(n.a);
      return f(n.b);
    }
    case ExprKind::Select: {
      const auto& n = static_cast<const Select&>(*e);
      f(n.cond);
      f(n.t);
      return f(n.f);
    }
    case ExprKind::Call:
      for (const Expr& a : static_cast<const Call&>(*e).args) f(a);
      return;
    case ExprKind::Access:
      for (const Expr& a : static_cast<const Access&>(*e).indices) f(a);
      return;
    case ExprKind::Load:
      for (const Expr& a : static_cast<const Load&>(*e).indices) f(a);
      return;
    case ExprKind::Let: {
      const auto& n = static_cast<const Let&>(*e);
      f(n.value);
      return f(n.body);
    }
  }
}

Expr map_children(const Expr& e, const std::function<Expr(const Expr&)>& f) {
  auto map_all = [&](const std::vector<Expr>& in, bool* changed) {
    std::vector<Expr> out;
    out.reserve(in.size());
    for (const Expr& x : in) {
      out.push_back(f(x));
      *changed = *changed || out.back() != x;
    }
    return out;
  };
  switch (e->kind) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Var:
      return e;
    case ExprKind::Cast: {
      const auto& n = static_cast<const Cast&>(*e);
      Expr v = f(n.value);
      return v == n.value ? e : std::make_shared<Cast>(n.type, v);
    }
    case ExprKind::Unary: {
      const auto& n = static_cast<const Unary&>(*e);
      Expr a = f(n.a);
      return a == n.a ? e : std::make_shared<Unary>(n.op, a, n.type);
    }
    case ExprKind::Binary: {
      const auto& n = static_cast<const Binary&>(*e);
      Expr a = f(n.a), b = f(n.b);
      return a == n.a && b == n.b ? e : std::make_shared<Binary>(n.op, a, b, n.type);
    }
    case ExprKind::Select: {
      const auto& n = static_cast<const Select&>(*e);
      Expr c = f(n.cond), t = f(n.t), fl = f(n.f);
      return c == n.cond && t == n.t && fl == n.f ? e : std::make_shared<Select>(c, t, fl, n.type);
    }
    case ExprKind::Call: {
      const auto& n = static_cast<const Call&>(*e);
      bool changed = false;
      std::vector<Expr> args = map_all(n.args, &changed);
      return changed ? std::make_shared<Call>(n.name, std::move(args), n.type) : e;
    }
    case ExprKind::Access: {
      const auto& n = static_cast<const Access&>(*e);
      bool changed = false;
      std::vector<Expr> idx = map_all(n.indices, &changed);
      return changed ? std::make_shared<Access>(n.comp, std::move(idx), n.type, n.where) : e;
    }
    case ExprKind::Load: {
      const auto& n = static_cast<const Load&>(*e);
      bool changed = false;
      std::vector<Expr> idx = map_all(n.indices, &changed);
      return changed ? std::make_shared<Load>(n.buf, std::move(idx), n.type, n.where) : e;
    }
    case ExprKind::Let: {
      const auto& n = static_cast<const Let&>(*e);
      Expr v = f(n.value), b = f(n.body);
      return v == n.value && b == n.body ? e : std::make_shared<Let>(n.var, v, b, n.type);
    }
  }
  return e;
}

bool any_subexpr(const Expr& e, const std::function<bool(const Expr&)>& pred) {
  if (pred(e)) return true;
  bool found = false;
  for_each_child(e, [&](const Expr& c) { found = found || any_subexpr(c, pred); });
  return found;
}

bool reads_memory(const Expr& e) {
  return any_subexpr(
      e, [](const Expr& x) { return x->kind == ExprKind::Load || x->kind == ExprKind::Access; });
}

bool reads_memory(const Stmt& s) {
  struct Finder : StmtVisitor {
    bool found = false;
    void visit_load(const Load& n) override {
      found = true;
      StmtVisitor::visit_load(n);
    }
    void visit_access(const Access& n) override {
      found = true;
      StmtVisitor::visit_access(n);
    }
  } f;
  f.visit(s);
  return f.found;
}

bool calls_unknown(const Expr& e) {
  return any_subexpr(e, [](const Expr& x) {
    const auto* c = as<Call>(x);
    return c != nullptr && !is_math_intrinsic(c->name);
  });
}

bool traps(const Binary& b) {
  if (!is_int(b.type) || (b.op != BinaryOp::Div && b.op != BinaryOp::Mod)) return false;
  const auto* d = as<IntImm>(b.b);
  return !d || d->value == 0 || d->value == -1;
}

bool may_trap(const Expr& e) {
  return any_subexpr(e, [](const Expr& x) {
    const auto* b = as<Binary>(x);
    return b && traps(*b);
  });
}

bool may_trap(const Stmt& s) {
  struct Finder : StmtVisitor {
    bool found = false;
    void visit_binary(const Binary& n) override {
      found = found || traps(n);
      StmtVisitor::visit_binary(n);
    }
  } f;
  f.visit(s);
  return f.found;
}

bool speculatable(const Expr& e) { return !reads_memory(e) && !calls_unknown(e) && !may_trap(e); }

namespace {

// Free names and every name, of expressions and statements, with the names
// bound around the current point.
class NameCollector : public StmtVisitor {
 public:
  std::set<std::string> free, all;

  using StmtVisitor::visit;

 protected:
  void visit_var(const Var& n) override {
    all.insert(n.name);
    if (bound_.count(n.name) == 0) free.insert(n.name);
  }
  void visit_let(const Let& n) override {
    visit(n.value);
    scoped(n.var, [&] { visit(n.body); });
  }
  void visit_for(const For& n) override {
    visit(n.min);
    visit(n.end);
    scoped(n.var, [&] { visit(n.body); });
  }
  void visit_let_stmt(const LetStmt& n) override {
    visit(n.value);
    scoped(n.var, [&] { visit(n.body); });
  }

 private:
  template <typename F>
  void scoped(const std::string& name, F&& body) {
    all.insert(name);
    bool fresh = bound_.insert(name).second;
    body();
    if (fresh) bound_.erase(name);
  }
  std::set<std::string> bound_;
};

template <typename IR>
NameCollector collect(const IR& ir) {
  NameCollector c;
  c.visit(ir);
  return c;
}

}  // namespace

std::set<std::string> free_vars(const Expr& e) { return collect(e).free; }
std::set<std::string> free_vars(const Stmt& s) { return collect(s).free; }
std::set<std::string> names_in(const Expr& e) { return collect(e).all; }
std::set<std::string> names_in(const Stmt& s) { return collect(s).all; }

}  // namespace kiln::ir
