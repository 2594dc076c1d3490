// The simplify pass: every expression simplified with the ranges of the loops around it, and
// dead code removed.
#include "kiln/passes/simplify.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/analysis.h"
#include "kiln/range.h"
#include "kiln/simplify.h"

namespace kiln::passes {

namespace {

using ir::Bounds;
using ir::DType;
using ir::Expr;
using ir::Interval;
using ir::Stmt;

// A boolean constant's value.
std::optional<bool> bool_value(const Expr& e) {
  const auto* n = ir::as<ir::IntImm>(e);
  if (n == nullptr || n->type != DType::Bool) return std::nullopt;
  return n->value != 0;
}

std::optional<int64_t> add(std::optional<int64_t> a, int64_t b) {
  int64_t r = 0;
  if (!a || __builtin_add_overflow(*a, b, &r)) return std::nullopt;
  return r;
}

// ---------------------------------------------------------------------------
// The statement simplifier: carries the ranges of the enclosing loops

bool is_empty(const Stmt& s) {
  if (!s) return true;
  const auto* b = ir::as<ir::Block>(s);
  return b != nullptr && b->stmts.empty();
}

class StmtSimplifier {
 public:
  Stmt run(const Stmt& s) {
    if (!s) return s;
    switch (s->kind) {
      case ir::StmtKind::For:
        return simplify_for(s, static_cast<const ir::For&>(*s));
      case ir::StmtKind::If:
        return simplify_if(s, static_cast<const ir::IfThenElse&>(*s));
      case ir::StmtKind::LetStmt:
        return simplify_let(s, static_cast<const ir::LetStmt&>(*s));
      case ir::StmtKind::Store:
        return simplify_store(s, static_cast<const ir::Store&>(*s));
      case ir::StmtKind::Alloc:
        return simplify_alloc(s, static_cast<const ir::Alloc&>(*s));
      case ir::StmtKind::Block:
        return simplify_block(s, static_cast<const ir::Block&>(*s));
      case ir::StmtKind::Evaluate: {
        const auto& n = static_cast<const ir::Evaluate&>(*s);
        Expr v = expr(n.value);
        return v == n.value ? s : std::make_shared<ir::Evaluate>(v);
      }
    }
    return s;
  }

 private:
  Expr expr(const Expr& e) { return e ? ir::simplify(e, known_) : e; }

  std::vector<Expr> exprs(const std::vector<Expr>& es, bool* changed) {
    std::vector<Expr> out;
    out.reserve(es.size());
    for (const Expr& e : es) {
      out.push_back(expr(e));
      if (out.back() != e) *changed = true;
    }
    return out;
  }

  // Runs body with `var` known to lie in `range`, restoring what was known before.
  Stmt with_range(const std::string& var, const Interval& range, const Stmt& body) {
    auto it = known_.find(var);
    std::optional<Interval> saved;
    if (it != known_.end()) saved = it->second;
    known_[var] = range;
    Stmt out = run(body);
    if (saved) {
      known_[var] = *saved;
    } else {
      known_.erase(var);
    }
    return out;
  }

  Stmt simplify_for(const Stmt& s, const ir::For& n) {
    Expr lo = expr(n.min);
    Expr hi = expr(n.end);
    ir::LinearForm extent = ir::linearize(hi, true);
    extent.add_linear(ir::linearize(lo, true), -1);
    // A bound read from a buffer still executes: such loops keep their bounds.
    bool bounds_load = ir::reads_memory(lo) || ir::reads_memory(hi);
    if (extent.ok && extent.is_constant() && n.step > 0 && !bounds_load) {
      if (extent.constant <= 0) return ir::block({});
      if (extent.constant <= n.step && !ir::is_gpu_tag(n.tag)) {
        return run(std::make_shared<ir::LetStmt>(n.var, lo, n.body));
      }
    }
    Interval range{ir::range_of(lo, known_).min, add(ir::range_of(hi, known_).max, -1)};
    Stmt body = with_range(n.var, range, n.body);
    if (is_empty(body)) return ir::block({});
    if (lo == n.min && hi == n.end && body == n.body) return s;
    return std::make_shared<ir::For>(n.var, lo, hi, n.step, n.tag, body);
  }

  Stmt simplify_if(const Stmt& s, const ir::IfThenElse& n) {
    Expr c = expr(n.cond);
    if (auto v = bool_value(c)) {
      const Stmt& taken = *v ? n.then_case : n.else_case;
      return taken ? run(taken) : ir::block({});
    }
    Stmt t = run(n.then_case);
    Stmt e = n.else_case ? run(n.else_case) : nullptr;
    if (e && is_empty(e)) e = nullptr;
    if (is_empty(t) && !e && !ir::reads_memory(c)) return ir::block({});
    if (c == n.cond && t == n.then_case && e == n.else_case) return s;
    return std::make_shared<ir::IfThenElse>(c, t, e);
  }

  Stmt simplify_let(const Stmt& s, const ir::LetStmt& n) {
    Expr v = expr(n.value);
    if (ir::as<ir::IntImm>(v) != nullptr || ir::as<ir::FloatImm>(v) != nullptr ||
        ir::as<ir::Var>(v) != nullptr) {
      bool safe = true;
      if (const auto* x = ir::as<ir::Var>(v)) safe = !rebinds(n.body, x->name);
      if (safe) return run(ir::substitute(n.body, {{n.var, v}}));
    }
    Stmt body = ir::is_int(v->type) ? with_range(n.var, ir::range_of(v, known_), n.body)
                                    : with_range(n.var, Interval{}, n.body);
    if (!ir::names_in(body).count(n.var) && !ir::reads_memory(v)) return body;
    if (v == n.value && body == n.body) return s;
    return std::make_shared<ir::LetStmt>(n.var, v, body);
  }

  // Whether any scope inside s binds `name` (substituting it there would capture).
  static bool rebinds(const Stmt& s, const std::string& name) {
    class Finder : public ir::StmtVisitor {
     public:
      std::string name;
      bool found = false;

     protected:
      void visit_let(const ir::Let& n) override {
        found = found || n.var == name;
        ir::StmtVisitor::visit_let(n);
      }
      void visit_for(const ir::For& n) override {
        found = found || n.var == name;
        ir::StmtVisitor::visit_for(n);
      }
      void visit_let_stmt(const ir::LetStmt& n) override {
        found = found || n.var == name;
        ir::StmtVisitor::visit_let_stmt(n);
      }
    } f;
    f.name = name;
    f.visit(s);
    return f.found;
  }

  Stmt simplify_store(const Stmt& s, const ir::Store& n) {
    bool changed = false;
    std::vector<Expr> idx = exprs(n.indices, &changed);
    Expr v = expr(n.value);
    if (!changed && v == n.value) return s;
    return std::make_shared<ir::Store>(n.buf, std::move(idx), v, n.comp, n.instance, n.atomic);
  }

  Stmt simplify_alloc(const Stmt& s, const ir::Alloc& n) {
    bool changed = false;
    std::vector<Expr> shape = exprs(n.shape, &changed);
    Stmt body = run(n.body);
    if (is_empty(body)) return ir::block({});
    if (!changed && body == n.body) return s;
    return std::make_shared<ir::Alloc>(n.buf, n.dtype, std::move(shape), n.loc, body);
  }

  Stmt simplify_block(const Stmt& s, const ir::Block& n) {
    std::vector<Stmt> out;
    bool changed = false;
    for (const Stmt& x : n.stmts) {
      Stmt y = run(x);
      if (y != x) changed = true;
      if (!is_empty(y)) out.push_back(y);
    }
    if (!changed) return s;
    return ir::block(std::move(out));
  }

  Bounds known_;
};

}  // namespace

ir::Stmt simplify(const ir::Stmt& s) {
  Stmt out = StmtSimplifier().run(s);
  return out ? out : ir::block({});
}

}  // namespace kiln::passes
