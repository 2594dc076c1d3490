// The loop IR: tag names, block building, the C-like printer, statement visitors and mutators.
#include "kiln/loop_ir.h"

#include <optional>
#include <sstream>

namespace kiln::ir {

const char* loop_tag_name(LoopTag t) {
  switch (t) {
    case LoopTag::None:
      return "none";
    case LoopTag::Parallel:
      return "parallel";
    case LoopTag::Vectorize:
      return "vectorize";
    case LoopTag::Unroll:
      return "unroll";
    case LoopTag::UnrollExplicit:
      return "unroll_explicit";
    case LoopTag::GpuBlockX:
      return "gpu_block_x";
    case LoopTag::GpuBlockY:
      return "gpu_block_y";
    case LoopTag::GpuBlockZ:
      return "gpu_block_z";
    case LoopTag::GpuThreadX:
      return "gpu_thread_x";
    case LoopTag::GpuThreadY:
      return "gpu_thread_y";
    case LoopTag::GpuThreadZ:
      return "gpu_thread_z";
    case LoopTag::Mma:
      return "mma";
    case LoopTag::GpuPipelined:
      return "gpu_pipelined";
    case LoopTag::GpuDistributed:
      return "gpu_distributed";
    case LoopTag::GpuLanes:
      return "gpu_lanes";
    case LoopTag::GpuRank:
      return "gpu_rank";
  }
  return "?";
}

bool is_gpu_block_tag(LoopTag t) {
  return t == LoopTag::GpuBlockX || t == LoopTag::GpuBlockY || t == LoopTag::GpuBlockZ;
}

bool is_gpu_thread_tag(LoopTag t) {
  return t == LoopTag::GpuThreadX || t == LoopTag::GpuThreadY || t == LoopTag::GpuThreadZ;
}

int gpu_tag_axis(LoopTag t) {
  switch (t) {
    case LoopTag::GpuBlockY:
    case LoopTag::GpuThreadY:
      return 1;
    case LoopTag::GpuBlockZ:
    case LoopTag::GpuThreadZ:
      return 2;
    default:
      return 0;
  }
}

std::optional<LoopTag> loop_tag_from_name(const std::string& name) {
  for (LoopTag t :
       {LoopTag::None, LoopTag::Parallel, LoopTag::Vectorize, LoopTag::Unroll,
        LoopTag::UnrollExplicit, LoopTag::GpuBlockX, LoopTag::GpuBlockY, LoopTag::GpuBlockZ,
        LoopTag::GpuThreadX, LoopTag::GpuThreadY, LoopTag::GpuThreadZ, LoopTag::Mma}) {
    if (name == loop_tag_name(t)) return t;
  }
  return std::nullopt;
}

Stmt gpu_barrier() {
  return std::make_shared<Evaluate>(
      std::make_shared<Call>(kGpuBarrier, std::vector<Expr>{}, DType::I32));
}

bool is_gpu_barrier(const Stmt& s) {
  const auto* e = as<Evaluate>(s);
  const auto* c = e ? as<Call>(e->value) : nullptr;
  return c != nullptr && c->name == kGpuBarrier && c->args.empty();
}

Expr gpu_block_threads(int64_t at_least) {
  return std::make_shared<Call>(kGpuBlockThreads, std::vector<Expr>{int_imm(at_least)}, kIndexType);
}

std::optional<int64_t> gpu_block_threads_at_least(const Expr& e) {
  const auto* c = as<Call>(e);
  if (c == nullptr || c->name != kGpuBlockThreads || c->args.size() != 1) return std::nullopt;
  const auto* n = as<IntImm>(c->args[0]);
  if (n == nullptr) return std::nullopt;
  return n->value;
}

Stmt block(std::vector<Stmt> stmts) {
  std::vector<Stmt> flat;
  for (Stmt& s : stmts) {
    if (!s) continue;
    if (const auto* b = as<Block>(s)) {
      for (const Stmt& inner : b->stmts) {
        if (inner) flat.push_back(inner);
      }
    } else {
      flat.push_back(std::move(s));
    }
  }
  if (flat.size() == 1) return flat[0];
  return std::make_shared<Block>(std::move(flat));
}

// ---------------------------------------------------------------------------
// Printing

namespace {

std::string join_exprs(const std::vector<Expr>& es) {
  std::string s;
  for (size_t i = 0; i < es.size(); ++i) {
    if (i) s += ", ";
    s += to_string(es[i]);
  }
  return s;
}

void print_stmt(std::ostringstream& os, const Stmt& s, int indent) {
  std::string pad(2 * static_cast<size_t>(indent), ' ');
  if (!s) return;
  switch (s->kind) {
    case StmtKind::For: {
      const auto& n = static_cast<const For&>(*s);
      os << pad << "for (" << n.var << " = " << to_string(n.min) << "; " << n.var << " < "
         << to_string(n.end) << "; " << n.var << " += " << n.step << ") {";
      if (n.tag != LoopTag::None) os << "  // " << loop_tag_name(n.tag);
      os << "\n";
      print_stmt(os, n.body, indent + 1);
      os << pad << "}\n";
      return;
    }
    case StmtKind::If: {
      const auto& n = static_cast<const IfThenElse&>(*s);
      os << pad << "if (" << to_string(n.cond) << ") {\n";
      print_stmt(os, n.then_case, indent + 1);
      if (n.else_case) {
        os << pad << "} else {\n";
        print_stmt(os, n.else_case, indent + 1);
      }
      os << pad << "}\n";
      return;
    }
    case StmtKind::LetStmt: {
      const auto& n = static_cast<const LetStmt&>(*s);
      os << pad << "let " << n.var << " = " << to_string(n.value) << ";\n";
      print_stmt(os, n.body, indent);
      return;
    }
    case StmtKind::Store: {
      const auto& n = static_cast<const Store&>(*s);
      if (n.atomic) {
        std::string op = *n.atomic == BinaryOp::Add   ? "add"
                         : *n.atomic == BinaryOp::Sub ? "sub"
                         : *n.atomic == BinaryOp::Mul ? "mul"
                                                      : binary_op_symbol(*n.atomic);
        os << pad << "atomic_" << op << "(" << n.buf << "[" << join_exprs(n.indices) << "], "
           << to_string(n.value) << ");\n";
        return;
      }
      os << pad << n.buf << "[" << join_exprs(n.indices) << "] = " << to_string(n.value) << ";\n";
      return;
    }
    case StmtKind::Alloc: {
      const auto& n = static_cast<const Alloc&>(*s);
      os << pad << "alloc " << n.buf << ": " << dtype_name(n.dtype) << "[" << join_exprs(n.shape)
         << "] @" << mem_loc_name(n.loc) << " {\n";
      print_stmt(os, n.body, indent + 1);
      os << pad << "}\n";
      return;
    }
    case StmtKind::Block: {
      for (const Stmt& x : static_cast<const Block&>(*s).stmts) print_stmt(os, x, indent);
      return;
    }
    case StmtKind::Evaluate: {
      os << pad << to_string(static_cast<const Evaluate&>(*s).value) << ";\n";
      return;
    }
  }
}

}  // namespace

std::string to_string(const Stmt& s, int indent) {
  std::ostringstream os;
  print_stmt(os, s, indent);
  return os.str();
}

std::string to_string(const LoweredFunc& f) {
  std::ostringstream os;
  os << "func " << f.name << "(";
  bool first = true;
  for (const std::string& p : f.params) {
    os << (first ? "" : ", ") << p;
    first = false;
  }
  for (const Buf& b : f.args) {
    os << (first ? "" : ", ") << buf_kind_name(b.kind) << " " << b.name << ": "
       << dtype_name(b.dtype) << "[" << join_exprs(b.shape) << "]";
    first = false;
  }
  os << ") {\n";
  for (size_t k = 0; k < f.checks.size(); ++k) {
    const RuntimeCheck& c = f.checks[k];
    if (c.kind != RuntimeCheck::Kind::InputSpec) continue;
    std::string spec;
    for (const Buf& b : f.args)
      if (b.name == c.subject) spec = value_spec_text(b.values);
    os << "  check " << c.subject << " " << spec << ";  // else status "
       << kStatusCheckBase + static_cast<int32_t>(k) << "\n";
  }
  print_stmt(os, f.body, 1);
  os << "}\n";
  return os.str();
}

std::string first_stored_computation(const Stmt& s) {
  struct First : StmtVisitor {
    std::string comp;
    void visit_store(const Store& n) override {
      if (comp.empty()) comp = n.comp;
    }
  } first;
  first.visit(s);
  return first.comp;
}

const RuntimeCheck* runtime_check(const LoweredFunc& f, int32_t status) {
  int64_t k = static_cast<int64_t>(status) - kStatusCheckBase;
  if (k < 0 || k >= static_cast<int64_t>(f.checks.size())) return nullptr;
  return &f.checks[static_cast<size_t>(k)];
}

CompileError status_error(const LoweredFunc& f, int32_t status) {
  if (const RuntimeCheck* c = runtime_check(f, status))
    return CompileError(ErrorStage::Run, c->where, c->message);
  std::string what;
  switch (status) {
    case 1:
      what = "was called with the wrong number of arguments (KILN_ERR_ARGS)";
      break;
    case 2:
      what =
          "could not allocate a temporary (KILN_ERR_ALLOC): one sized by the run-time params "
          "needs more than the limit (" +
          std::to_string(kMaxStackTempBytes) + " bytes on the stack, " +
          std::to_string(kMaxHeapTempBytes) +
          " on the heap; docs/limits.md), or the heap had "
          "no room";
      break;
    case kStatusArith:
      what = "divided an integer by zero, or the smallest integer by -1 (KILN_ERR_ARITH)";
      break;
    default:
      what = "returned the unknown status " + std::to_string(status);
  }
  return CompileError(ErrorStage::Run, f.where, "kernel " + f.name + " " + what);
}

// ---------------------------------------------------------------------------
// StmtVisitor

void StmtVisitor::visit(const Stmt& s) {
  if (!s) return;
  switch (s->kind) {
    case StmtKind::For:
      return visit_for(static_cast<const For&>(*s));
    case StmtKind::If:
      return visit_if(static_cast<const IfThenElse&>(*s));
    case StmtKind::LetStmt:
      return visit_let_stmt(static_cast<const LetStmt&>(*s));
    case StmtKind::Store:
      return visit_store(static_cast<const Store&>(*s));
    case StmtKind::Alloc:
      return visit_alloc(static_cast<const Alloc&>(*s));
    case StmtKind::Block:
      return visit_block(static_cast<const Block&>(*s));
    case StmtKind::Evaluate:
      return visit_evaluate(static_cast<const Evaluate&>(*s));
  }
}

void StmtVisitor::visit_for(const For& n) {
  visit(n.min);
  visit(n.end);
  visit(n.body);
}
void StmtVisitor::visit_if(const IfThenElse& n) {
  visit(n.cond);
  visit(n.then_case);
  visit(n.else_case);
}
void StmtVisitor::visit_let_stmt(const LetStmt& n) {
  visit(n.value);
  visit(n.body);
}
// The diagnostic `instance` expressions are not visited: they are not executed.
void StmtVisitor::visit_store(const Store& n) {
  for (const Expr& i : n.indices) visit(i);
  visit(n.value);
}
void StmtVisitor::visit_alloc(const Alloc& n) {
  for (const Expr& e : n.shape) visit(e);
  visit(n.body);
}
void StmtVisitor::visit_block(const Block& n) {
  for (const Stmt& s : n.stmts) visit(s);
}
void StmtVisitor::visit_evaluate(const Evaluate& n) { visit(n.value); }

// ---------------------------------------------------------------------------
// StmtMutator

Stmt StmtMutator::mutate(const Stmt& s) {
  if (!s) return s;
  switch (s->kind) {
    case StmtKind::For:
      return mutate_for(s, static_cast<const For&>(*s));
    case StmtKind::If:
      return mutate_if(s, static_cast<const IfThenElse&>(*s));
    case StmtKind::LetStmt:
      return mutate_let_stmt(s, static_cast<const LetStmt&>(*s));
    case StmtKind::Store:
      return mutate_store(s, static_cast<const Store&>(*s));
    case StmtKind::Alloc:
      return mutate_alloc(s, static_cast<const Alloc&>(*s));
    case StmtKind::Block:
      return mutate_block(s, static_cast<const Block&>(*s));
    case StmtKind::Evaluate:
      return mutate_evaluate(s, static_cast<const Evaluate&>(*s));
  }
  return s;
}

std::vector<Expr> StmtMutator::mutate_stmt_exprs(const std::vector<Expr>& es, bool* changed) {
  std::vector<Expr> out;
  out.reserve(es.size());
  for (const Expr& e : es) {
    out.push_back(mutate_stmt_expr(e));
    if (out.back() != e) *changed = true;
  }
  return out;
}

Stmt StmtMutator::mutate_for(const Stmt& s, const For& n) {
  Expr lo = mutate_stmt_expr(n.min);
  Expr hi = mutate_stmt_expr(n.end);
  Stmt body = mutate(n.body);
  if (lo == n.min && hi == n.end && body == n.body) return s;
  return std::make_shared<For>(n.var, lo, hi, n.step, n.tag, body);
}

Stmt StmtMutator::mutate_if(const Stmt& s, const IfThenElse& n) {
  Expr c = mutate_stmt_expr(n.cond);
  Stmt t = mutate(n.then_case);
  Stmt e = mutate(n.else_case);
  if (c == n.cond && t == n.then_case && e == n.else_case) return s;
  return std::make_shared<IfThenElse>(c, t, e);
}

Stmt StmtMutator::mutate_let_stmt(const Stmt& s, const LetStmt& n) {
  Expr v = mutate_stmt_expr(n.value);
  Stmt body = mutate(n.body);
  if (v == n.value && body == n.body) return s;
  return std::make_shared<LetStmt>(n.var, v, body);
}

// The diagnostic `instance` is rewritten too, so it keeps naming the right
// point after loop variables are substituted.
Stmt StmtMutator::mutate_store(const Stmt& s, const Store& n) {
  bool changed = false;
  std::vector<Expr> idx = mutate_stmt_exprs(n.indices, &changed);
  Expr v = mutate_stmt_expr(n.value);
  std::vector<std::pair<std::string, Expr>> inst;
  inst.reserve(n.instance.size());
  bool inst_changed = false;
  for (const auto& [name, e] : n.instance) {
    inst.emplace_back(name, mutate_stmt_expr(e));
    if (inst.back().second != e) inst_changed = true;
  }
  if (!changed && !inst_changed && v == n.value) return s;
  return std::make_shared<Store>(n.buf, std::move(idx), v, n.comp, std::move(inst), n.atomic);
}

Stmt StmtMutator::mutate_alloc(const Stmt& s, const Alloc& n) {
  bool changed = false;
  std::vector<Expr> shape = mutate_stmt_exprs(n.shape, &changed);
  Stmt body = mutate(n.body);
  if (!changed && body == n.body) return s;
  return std::make_shared<Alloc>(n.buf, n.dtype, std::move(shape), n.loc, body);
}

Stmt StmtMutator::mutate_block(const Stmt& s, const Block& n) {
  std::vector<Stmt> out;
  out.reserve(n.stmts.size());
  bool changed = false;
  for (const Stmt& x : n.stmts) {
    out.push_back(mutate(x));
    if (out.back() != x) changed = true;
  }
  if (!changed) return s;
  return block(std::move(out));
}

Stmt StmtMutator::mutate_evaluate(const Stmt& s, const Evaluate& n) {
  Expr v = mutate_stmt_expr(n.value);
  if (v == n.value) return s;
  return std::make_shared<Evaluate>(v);
}

// ---------------------------------------------------------------------------
// Substitution in statements

namespace {

// Replaces free variables, respecting the scopes of loops and lets: a name a
// loop or a let binds is not replaced inside it.
class StmtSubstituter : public StmtMutator {
 public:
  explicit StmtSubstituter(std::map<std::string, Expr> m) : map_(std::move(m)) {}

 protected:
  Expr mutate_var(const Expr& e, const Var& n) override {
    auto it = map_.find(n.name);
    return it == map_.end() ? e : it->second;
  }
  Expr mutate_let(const Expr& e, const Let& n) override {
    Expr v = mutate(n.value);
    Expr b = where_unbound(n.var, [&] { return mutate(n.body); });
    if (v == n.value && b == n.body) return e;
    return let(n.var, v, b);
  }
  Stmt mutate_for(const Stmt& s, const For& n) override {
    Expr lo = mutate(n.min);
    Expr hi = mutate(n.end);
    Stmt body = where_unbound(n.var, [&] { return mutate(n.body); });
    if (lo == n.min && hi == n.end && body == n.body) return s;
    return std::make_shared<For>(n.var, lo, hi, n.step, n.tag, body);
  }
  Stmt mutate_let_stmt(const Stmt& s, const LetStmt& n) override {
    Expr v = mutate(n.value);
    Stmt body = where_unbound(n.var, [&] { return mutate(n.body); });
    if (v == n.value && body == n.body) return s;
    return std::make_shared<LetStmt>(n.var, v, body);
  }

 private:
  // f() with `name` out of the replacements: inside its binding, name is another variable.
  template <typename F>
  auto where_unbound(const std::string& name, F f) -> decltype(f()) {
    auto it = map_.find(name);
    if (it == map_.end()) return f();
    Expr old = it->second;
    map_.erase(it);
    auto out = f();
    map_[name] = old;
    return out;
  }
  std::map<std::string, Expr> map_;
};

}  // namespace

Stmt substitute(const Stmt& s, const std::map<std::string, Expr>& replacements) {
  if (!s || replacements.empty()) return s;
  return StmtSubstituter(replacements).mutate(s);
}

}  // namespace kiln::ir
