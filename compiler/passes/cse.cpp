// Common subexpression elimination (seed 004: TVM's CSE, with normalized commutative operands).
#include "kiln/passes/cse.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/analysis.h"

namespace kiln::passes {
namespace {

using namespace kiln::ir;  // NOLINT: a pass over the whole IR

using Names = std::set<std::string>;

// ---------------------------------------------------------------------------
// What may be put in a variable

// Eligible as in seed 004: not a constant, a variable, a let, nor anything that
// reads memory or calls a function with side effects. (kiln has no vector
// ramps or broadcasts in the loop IR; vectorization happens in codegen.)
bool eligible(const Expr& e) {
  switch (e->kind) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Var:
    case ExprKind::Let:
      return false;
    default:
      // A load reads memory that a store may change, and a call that is not
      // a math intrinsic may have side effects: neither is shared.
      return !reads_memory(e) && !calls_unknown(e);
  }
}

size_t complexity(const Expr& e) {
  struct Counter : IRVisitor {
    size_t n = 0;
    void count(const Expr&) { ++n; }
    void visit_cast(const Cast& x) override { count(x.value), IRVisitor::visit_cast(x); }
    void visit_unary(const Unary& x) override { count(x.a), IRVisitor::visit_unary(x); }
    void visit_binary(const Binary& x) override {
      count(x.a), count(x.b), IRVisitor::visit_binary(x);
    }
    void visit_select(const Select& x) override {
      n += 3;
      IRVisitor::visit_select(x);
    }
    void visit_call(const Call& x) override {
      n += x.args.size();
      IRVisitor::visit_call(x);
    }
    void visit_access(const Access& x) override {
      n += x.indices.size();
      IRVisitor::visit_access(x);
    }
    void visit_load(const Load& x) override {
      n += x.indices.size();
      IRVisitor::visit_load(x);
    }
    void visit_let(const Let& x) override {
      n += 2;
      IRVisitor::visit_let(x);
    }
  };
  Counter c;
  c.visit(e);
  return c.n + 1;
}

// ---------------------------------------------------------------------------
// Normalized keys: two computations with the same key compute the same value.
// Integer +, *, min, max and boolean &&, || chains are flattened and their
// operands sorted (&&, || only when no operand can fault, since they
// short-circuit); float + and * only sort the two operands of one operation
// (reassociating floats changes results); == and != sort their operands.

class Keyer {
 public:
  // normalize: match operands up to commutativity and associativity as above;
  // false: structurally equal expressions only.
  explicit Keyer(bool normalize) : normalize_(normalize) {}

  const std::string& key(const Expr& e) {
    auto it = memo_.find(e.get());
    if (it != memo_.end()) return it->second.second;
    std::string k = compute(e);
    return memo_.emplace(e.get(), std::make_pair(e, std::move(k))).first->second.second;
  }

 private:
  // Holding the Expr keeps its address from being reused by another node.
  std::unordered_map<const ExprNode*, std::pair<Expr, std::string>> memo_;
  bool normalize_;

  bool reassociates(const Binary& n) const {
    if (!normalize_) return false;
    switch (n.op) {
      case BinaryOp::Add:
      case BinaryOp::Mul:
      case BinaryOp::Min:
      case BinaryOp::Max:
        return is_int(n.type);
      case BinaryOp::And:
      case BinaryOp::Or:
        return speculatable(n.a) && speculatable(n.b);
      default:
        return false;
    }
  }
  bool swaps(const Binary& n) const {
    return normalize_ && (n.op == BinaryOp::Eq || n.op == BinaryOp::Ne ||
                          (is_float(n.type) && (n.op == BinaryOp::Add || n.op == BinaryOp::Mul)));
  }
  void flatten(const Expr& e, BinaryOp op, std::vector<Expr>& out) {
    const auto* b = as<Binary>(e);
    if (b && b->op == op && reassociates(*b)) {
      flatten(b->a, op, out);
      flatten(b->b, op, out);
    } else {
      out.push_back(e);
    }
  }
  std::string list(const std::vector<Expr>& es) {
    std::string s;
    for (const Expr& x : es) s += key(x) + ",";
    return s;
  }

  std::string compute(const Expr& e) {
    std::string t = dtype_name(e->type);
    switch (e->kind) {
      case ExprKind::IntImm:
        return "#" + t + ":" + std::to_string(static_cast<const IntImm&>(*e).value);
      case ExprKind::FloatImm: {
        double v = static_cast<const FloatImm&>(*e).value;
        return "#" + t + ":" + std::to_string(std::bit_cast<uint64_t>(v));
      }
      case ExprKind::Var:
        return "$" + static_cast<const Var&>(*e).name + ":" + t;
      case ExprKind::Cast:
        return "cast:" + t + "(" + key(static_cast<const Cast&>(*e).value) + ")";
      case ExprKind::Unary: {
        const auto& n = static_cast<const Unary&>(*e);
        return (n.op == UnaryOp::Neg ? "neg(" : "not(") + key(n.a) + ")";
      }
      case ExprKind::Binary: {
        const auto& n = static_cast<const Binary&>(*e);
        std::vector<std::string> ks;
        if (reassociates(n)) {
          std::vector<Expr> ops;
          flatten(e, n.op, ops);
          for (const Expr& x : ops) ks.push_back(key(x));
          std::sort(ks.begin(), ks.end());
        } else {
          ks = {key(n.a), key(n.b)};
          if (swaps(n)) std::sort(ks.begin(), ks.end());
        }
        std::string s = std::string("(") + binary_op_symbol(n.op) + ":" + t;
        for (const std::string& k : ks) s += " " + k;
        return s + ")";
      }
      case ExprKind::Select: {
        const auto& n = static_cast<const Select&>(*e);
        return "select(" + key(n.cond) + "," + key(n.t) + "," + key(n.f) + ")";
      }
      case ExprKind::Call: {
        const auto& n = static_cast<const Call&>(*e);
        return "call " + n.name + ":" + t + "(" + list(n.args) + ")";
      }
      case ExprKind::Access: {
        const auto& n = static_cast<const Access&>(*e);
        return "access " + n.comp + ":" + t + "[" + list(n.indices) + "]";
      }
      case ExprKind::Load: {
        const auto& n = static_cast<const Load&>(*e);
        return "load " + n.buf + ":" + t + "[" + list(n.indices) + "]";
      }
      case ExprKind::Let: {
        const auto& n = static_cast<const Let&>(*e);
        return "let " + n.var + "=" + key(n.value) + " in " + key(n.body);
      }
    }
    return "?";
  }
};

// ---------------------------------------------------------------------------
// The table of computations done by a statement or an expression

struct Computation {
  Expr expr;  // the first occurrence, which the let will hold
  std::string key;
  size_t count = 0;
  bool unconditional = false;  // some occurrence runs on every path through the scope
  Names inner;                 // names bound inside the scope around some occurrence
  size_t size = 0;             // complexity: larger ones are considered first
};

class Table {
 public:
  std::vector<Computation> items;

  void add(const Computation& c) {
    auto it = index_.find(c.key);
    if (it == index_.end()) {
      index_.emplace(c.key, items.size());
      items.push_back(c);
      return;
    }
    Computation& old = items[it->second];
    old.count += c.count;
    old.unconditional = old.unconditional || c.unconditional;
    old.inner.insert(c.inner.begin(), c.inner.end());
  }
  const Computation* find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items[it->second];
  }
  // What both branches of an if or a select compute: it runs on both paths,
  // so it may move above the branch.
  void add_common(const Table& a, const Table& b) {
    for (const Computation& c : a.items) {
      const Computation* d = b.find(c.key);
      if (!d) continue;
      Computation both = c;
      both.count += d->count;
      both.unconditional = c.unconditional && d->unconditional;
      both.inner.insert(d->inner.begin(), d->inner.end());
      add(both);
    }
  }

 private:
  std::unordered_map<std::string, size_t> index_;
};

class Collector {
 public:
  Collector(Keyer& keyer, int small_loop) : keyer_(keyer), small_loop_(small_loop) {}

  // `conditional`: the occurrence may not run on every path (a loop body, one
  // side of && or ||); `inner`: names bound between the scope and here.
  void expr(const Expr& e, bool conditional, const Names& inner, Table& t) {
    if (pinned_) return;  // shared only within its unrolled loop, when that loop is the scope
    if (eligible(e)) {
      t.add({e, keyer_.key(e), 1, !conditional, inner, complexity(e)});
      return;
    }
    children(e, conditional, inner, t);
  }

  void children(const Expr& e, bool conditional, const Names& inner, Table& t) {
    switch (e->kind) {
      case ExprKind::Binary: {
        const auto& n = static_cast<const Binary&>(*e);
        bool short_circuit = n.op == BinaryOp::And || n.op == BinaryOp::Or;
        expr(n.a, conditional, inner, t);
        return expr(n.b, conditional || short_circuit, inner, t);
      }
      case ExprKind::Select: {
        const auto& n = static_cast<const Select&>(*e);
        expr(n.cond, conditional, inner, t);
        Table tt, tf;
        expr(n.t, conditional, inner, tt);
        expr(n.f, conditional, inner, tf);
        return t.add_common(tt, tf);
      }
      case ExprKind::Let: {
        const auto& n = static_cast<const Let&>(*e);
        expr(n.value, conditional, inner, t);
        Names in = inner;
        in.insert(n.var);
        return expr(n.body, conditional, in, t);
      }
      default:
        for_each_child(e, [&](const Expr& c) { expr(c, conditional, inner, t); });
        return;
    }
  }

  // A serial loop of constant extent <= small_loop: LLVM unrolls it completely.
  bool unrolled(const For& n) const {
    const auto* lo = as<IntImm>(n.min);
    const auto* hi = as<IntImm>(n.end);
    bool serial =
        n.tag == LoopTag::None || n.tag == LoopTag::Unroll || n.tag == LoopTag::UnrollExplicit;
    return small_loop_ > 0 && serial && lo && hi && n.step > 0 &&
           (hi->value - lo->value + n.step - 1) / n.step <= small_loop_;
  }

  void stmt(const Stmt& s, bool conditional, const Names& inner, Table& t) {
    switch (s->kind) {
      case StmtKind::For: {
        const auto& n = static_cast<const For&>(*s);
        expr(n.min, conditional, inner, t);
        expr(n.end, conditional, inner, t);
        Names in = inner;
        in.insert(n.var);
        bool saved = pinned_;
        pinned_ = unrolled(n);
        stmt(n.body, true, in, t);  // the loop may run zero times
        pinned_ = saved;
        return;
      }
      case StmtKind::If: {
        const auto& n = static_cast<const IfThenElse&>(*s);
        expr(n.cond, conditional, inner, t);
        if (!n.else_case) return;
        Table tt, tf;
        stmt(n.then_case, conditional, inner, tt);
        stmt(n.else_case, conditional, inner, tf);
        return t.add_common(tt, tf);
      }
      case StmtKind::LetStmt: {
        const auto& n = static_cast<const LetStmt&>(*s);
        expr(n.value, conditional, inner, t);
        Names in = inner;
        in.insert(n.var);
        return stmt(n.body, conditional, in, t);
      }
      case StmtKind::Store: {
        const auto& n = static_cast<const Store&>(*s);
        for (const Expr& i : n.indices) expr(i, conditional, inner, t);
        return expr(n.value, conditional, inner, t);
      }
      case StmtKind::Alloc: {
        const auto& n = static_cast<const Alloc&>(*s);
        for (const Expr& i : n.shape) expr(i, conditional, inner, t);
        return stmt(n.body, conditional, inner, t);
      }
      case StmtKind::Block:
        for (const Stmt& x : static_cast<const Block&>(*s).stmts) stmt(x, conditional, inner, t);
        return;
      case StmtKind::Evaluate:
        return expr(static_cast<const Evaluate&>(*s).value, conditional, inner, t);
    }
  }

 private:
  Keyer& keyer_;
  int small_loop_;
  bool pinned_ = false;  // inside a loop that `unrolled` accepts, below the scope
};

// ---------------------------------------------------------------------------
// Replacing a computation by a variable

// Replaces every occurrence of the computation with key `key` by `replacement`,
// except under a binder that rebinds one of the computation's variables.
class Replacer : public StmtMutator {
 public:
  Replacer(Keyer& keyer, std::string key, Names vars, Expr replacement)
      : keyer_(keyer),
        key_(std::move(key)),
        vars_(std::move(vars)),
        with_(std::move(replacement)) {}

 protected:
  bool hit(const Expr& e) { return eligible(e) && keyer_.key(e) == key_; }
  Expr mutate_cast(const Expr& e, const Cast& n) override {
    return hit(e) ? with_ : IRMutator::mutate_cast(e, n);
  }
  Expr mutate_unary(const Expr& e, const Unary& n) override {
    return hit(e) ? with_ : IRMutator::mutate_unary(e, n);
  }
  Expr mutate_binary(const Expr& e, const Binary& n) override {
    return hit(e) ? with_ : IRMutator::mutate_binary(e, n);
  }
  Expr mutate_select(const Expr& e, const Select& n) override {
    return hit(e) ? with_ : IRMutator::mutate_select(e, n);
  }
  Expr mutate_call(const Expr& e, const Call& n) override {
    return hit(e) ? with_ : IRMutator::mutate_call(e, n);
  }
  Expr mutate_let(const Expr& e, const Let& n) override {
    if (!vars_.count(n.var)) return IRMutator::mutate_let(e, n);
    Expr v = mutate(n.value);
    return v == n.value ? e : std::make_shared<Let>(n.var, v, n.body, n.type);
  }
  Stmt mutate_for(const Stmt& s, const For& n) override {
    if (!vars_.count(n.var)) return StmtMutator::mutate_for(s, n);
    Expr lo = mutate(n.min), hi = mutate(n.end);
    if (lo == n.min && hi == n.end) return s;
    return std::make_shared<For>(n.var, lo, hi, n.step, n.tag, n.body);
  }
  Stmt mutate_let_stmt(const Stmt& s, const LetStmt& n) override {
    if (!vars_.count(n.var)) return StmtMutator::mutate_let_stmt(s, n);
    Expr v = mutate(n.value);
    return v == n.value ? s : std::make_shared<LetStmt>(n.var, v, n.body);
  }

 private:
  Keyer& keyer_;
  std::string key_;
  Names vars_;
  Expr with_;
};

// ---------------------------------------------------------------------------
// The pass

class Eliminator : public StmtMutator {
 public:
  Eliminator(const CseOptions& options, Names taken, const Names& free)
      : min_uses_(static_cast<size_t>(std::max(2, options.min_uses))),
        small_loop_(options.small_loop),
        taken_(std::move(taken)),
        keyer_(options.commutative) {
    for (const std::string& v : free) context_.push_back({v, std::nullopt});
  }

  // Seed 004's VisitStmt: share what this statement computes repeatedly, as
  // far out as its variables allow, then again (the new variables may make
  // more sharing possible), and only when nothing is left, look inside.
  Stmt stmt(const Stmt& s) {
    Stmt result = s;
    for (;;) {
      Table table;
      Collector(keyer_, small_loop_).stmt(result, false, {}, table);
      std::optional<Introduced> made =
          share(table, [&](const std::string& key, const Names& fv, const Expr& with) {
            result = Replacer(keyer_, key, fv, with).mutate(result);
          });
      if (!made) break;
      result = std::make_shared<LetStmt>(made->name, made->value, result);
    }
    return StmtMutator::mutate(result);
  }

  // The same for an expression, with Let instead of LetStmt.
  Expr expr(const Expr& e) {
    Expr result = e;
    for (;;) {
      Table table;
      Collector(keyer_, small_loop_).expr(result, false, {}, table);
      std::optional<Introduced> made =
          share(table, [&](const std::string& key, const Names& fv, const Expr& with) {
            result = Replacer(keyer_, key, fv, with).mutate(result);
          });
      if (!made) break;
      result = let(made->name, made->value, result);
    }
    return IRMutator::mutate(result);
  }

 protected:
  // Children are visited through stmt() and expr() so that each gets its own
  // table; binders extend the context of what is in scope.
  Expr children(const Expr& e) {
    return map_children(e, [this](const Expr& c) { return expr(c); });
  }
  Expr mutate_cast(const Expr& e, const Cast&) override { return children(e); }
  Expr mutate_unary(const Expr& e, const Unary&) override { return children(e); }
  Expr mutate_binary(const Expr& e, const Binary&) override { return children(e); }
  Expr mutate_select(const Expr& e, const Select&) override { return children(e); }
  Expr mutate_call(const Expr& e, const Call&) override { return children(e); }
  Expr mutate_access(const Expr& e, const Access&) override { return children(e); }
  Expr mutate_load(const Expr& e, const Load&) override { return children(e); }
  Expr mutate_let(const Expr& e, const Let& n) override {
    Expr v = expr(n.value);
    Context saved = context_;
    bind(n.var, n.value);
    Expr body = expr(n.body);
    context_ = std::move(saved);
    return v == n.value && body == n.body ? e : std::make_shared<Let>(n.var, v, body, n.type);
  }

  Stmt mutate_for(const Stmt& s, const For& n) override {
    Expr lo = expr(n.min), hi = expr(n.end);
    Context saved = context_;
    bind(n.var, std::nullopt);
    Stmt body = stmt(n.body);
    context_ = std::move(saved);
    if (lo == n.min && hi == n.end && body == n.body) return s;
    return std::make_shared<For>(n.var, lo, hi, n.step, n.tag, body);
  }
  Stmt mutate_if(const Stmt& s, const IfThenElse& n) override {
    Expr c = expr(n.cond);
    Stmt t = stmt(n.then_case);
    Stmt f = n.else_case ? stmt(n.else_case) : nullptr;
    if (c == n.cond && t == n.then_case && f == n.else_case) return s;
    return std::make_shared<IfThenElse>(c, t, f);
  }
  Stmt mutate_let_stmt(const Stmt& s, const LetStmt& n) override {
    Expr v = expr(n.value);
    Context saved = context_;
    bind(n.var, n.value);
    Stmt body = stmt(n.body);
    context_ = std::move(saved);
    return v == n.value && body == n.body ? s : std::make_shared<LetStmt>(n.var, v, body);
  }
  Stmt mutate_store(const Stmt& s, const Store& n) override {
    bool changed = false;
    std::vector<Expr> idx = all(n.indices, &changed);
    Expr v = expr(n.value);
    if (!changed && v == n.value) return s;
    return std::make_shared<Store>(n.buf, std::move(idx), v, n.comp, n.instance, n.atomic);
  }
  Stmt mutate_alloc(const Stmt& s, const Alloc& n) override {
    bool changed = false;
    std::vector<Expr> shape = all(n.shape, &changed);
    Stmt body = stmt(n.body);
    if (!changed && body == n.body) return s;
    return std::make_shared<Alloc>(n.buf, n.dtype, std::move(shape), n.loc, body);
  }
  Stmt mutate_block(const Stmt& s, const Block& n) override {
    bool changed = false;
    std::vector<Stmt> out;
    for (const Stmt& x : n.stmts) {
      out.push_back(stmt(x));
      changed = changed || out.back() != x;
    }
    return changed ? std::make_shared<Block>(std::move(out)) : s;
  }
  Stmt mutate_evaluate(const Stmt& s, const Evaluate& n) override {
    Expr v = expr(n.value);
    return v == n.value ? s : std::make_shared<Evaluate>(v);
  }

 private:
  // The variables in scope, with the value of those bound by a let (seed
  // 004's context).
  struct Binding {
    std::string name;
    std::optional<Expr> value;
  };
  using Context = std::vector<Binding>;

  struct Introduced {
    std::string name;
    Expr value;
  };

  std::vector<Expr> all(const std::vector<Expr>& es, bool* changed) {
    std::vector<Expr> out;
    for (const Expr& e : es) {
      out.push_back(expr(e));
      *changed = *changed || out.back() != e;
    }
    return out;
  }

  // A new binder hides an older one of the same name, and makes the values
  // that read that name mean something else here.
  void bind(const std::string& name, std::optional<Expr> value) {
    for (Binding& b : context_) {
      if (b.value && (b.name == name || free_vars(*b.value).count(name))) b.value.reset();
    }
    context_.push_back({name, std::move(value)});
  }

  bool in_scope(const Names& vars) const {
    for (const std::string& v : vars) {
      auto it = std::find_if(context_.begin(), context_.end(),
                             [&](const Binding& b) { return b.name == v; });
      if (it == context_.end()) return false;
    }
    return true;
  }

  std::optional<std::string> holding(const std::string& key) {
    for (auto it = context_.rbegin(); it != context_.rend(); ++it) {
      if (it->value && eligible(*it->value) && keyer_.key(*it->value) == key) return it->name;
    }
    return std::nullopt;
  }

  std::string fresh_name() {
    std::string name;
    do {
      name = "cse_var_" + std::to_string(++counter_);
    } while (taken_.count(name));
    taken_.insert(name);
    return name;
  }

  // Seed 004's loop over the computations, largest first: a computation
  // already held by a variable in scope is replaced by it; one computed
  // min_uses times whose variables are all in scope gets a new variable (the
  // caller wraps the let around the scope and starts again); any other one
  // lends its direct subcomputations to the list.
  template <typename Replace>
  std::optional<Introduced> share(const Table& table, Replace replace) {
    std::vector<Computation> work = table.items;
    std::stable_sort(work.begin(), work.end(),
                     [](const Computation& a, const Computation& b) { return a.size > b.size; });
    for (size_t i = 0; i < work.size(); ++i) {
      const Computation c = work[i];
      Names fv = free_vars(c.expr);
      bool defined = in_scope(fv) && std::none_of(fv.begin(), fv.end(), [&](const std::string& v) {
                       return c.inner.count(v) > 0;
                     });
      if (defined) {
        if (std::optional<std::string> held = holding(c.key)) {
          replace(c.key, fv, var(*held, c.expr->type));
          continue;
        }
        if (c.count >= min_uses_ && (c.unconditional || !may_trap(c.expr))) {
          std::string name = fresh_name();
          replace(c.key, fv, var(name, c.expr->type));
          return Introduced{name, c.expr};
        }
      }
      Table sub;
      Collector(keyer_, small_loop_).children(c.expr, !c.unconditional, c.inner, sub);
      for (Computation s : sub.items) {
        s.count *= c.count;
        auto same = std::find_if(work.begin(), work.end(),
                                 [&](const Computation& w) { return w.key == s.key; });
        if (same != work.end()) {
          same->count += s.count;
          same->unconditional = same->unconditional || s.unconditional;
          same->inner.insert(s.inner.begin(), s.inner.end());
          continue;
        }
        auto at = std::find_if(work.begin() + static_cast<std::ptrdiff_t>(i) + 1, work.end(),
                               [&](const Computation& w) { return s.size > w.size; });
        work.insert(at, s);
      }
    }
    return std::nullopt;
  }

  size_t min_uses_;
  int small_loop_;
  Names taken_;
  Context context_;
  Keyer keyer_;
  int counter_ = 0;
};

}  // namespace

Stmt cse(const Stmt& s, const CseOptions& options) {
  if (!s) return s;
  return Eliminator(options, names_in(s), free_vars(s)).stmt(s);
}

Expr cse(const Expr& e, const CseOptions& options) {
  if (!e) return e;
  return Eliminator(options, names_in(e), free_vars(e)).expr(e);
}

}  // namespace kiln::passes
