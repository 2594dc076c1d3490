// The shapes of loop nests the CUDA backend recognizes (nests.h).
#include "nests.h"

#include <algorithm>
#include <set>
#include <string>

#include "kiln/analysis.h"
#include "kiln/simplify.h"

namespace kiln::cuda {
namespace {

class StoreCollector : public ir::StmtVisitor {
 public:
  std::vector<const ir::Store*> stores;

 protected:
  void visit_store(const ir::Store& n) override {
    stores.push_back(&n);
    ir::StmtVisitor::visit_store(n);
  }
};

// The buffers a statement allocates, reads and writes.
class BufferNames : public ir::StmtVisitor {
 public:
  std::set<std::string> names;

 protected:
  void visit_alloc(const ir::Alloc& n) override {
    names.insert(n.buf);
    ir::StmtVisitor::visit_alloc(n);
  }
  void visit_store(const ir::Store& n) override {
    names.insert(n.buf);
    ir::StmtVisitor::visit_store(n);
  }
  void visit_load(const ir::Load& n) override {
    names.insert(n.buf);
    ir::StmtVisitor::visit_load(n);
  }
};

// s inside a loop of one iteration tagged `tag`, its variable a name s does not use.
ir::Stmt once(const ir::Stmt& s, ir::LoopTag tag) {
  std::set<std::string> used = ir::names_in(s);
  std::string var = "kiln_once";
  for (int k = 1; used.count(var); ++k) var = "kiln_once_" + std::to_string(k);
  return std::make_shared<ir::For>(var, ir::int_imm(0), ir::int_imm(1), 1, tag, s);
}

}  // namespace

const ir::For* first_loop(const ir::Stmt& s, bool (*pred)(ir::LoopTag)) {
  if (!s) return nullptr;
  switch (s->kind) {
    case ir::StmtKind::For: {
      const auto& n = static_cast<const ir::For&>(*s);
      return pred(n.tag) ? &n : first_loop(n.body, pred);
    }
    case ir::StmtKind::If: {
      const auto& n = static_cast<const ir::IfThenElse&>(*s);
      if (const ir::For* f = first_loop(n.then_case, pred)) return f;
      return first_loop(n.else_case, pred);
    }
    case ir::StmtKind::LetStmt:
      return first_loop(static_cast<const ir::LetStmt&>(*s).body, pred);
    case ir::StmtKind::Alloc:
      return first_loop(static_cast<const ir::Alloc&>(*s).body, pred);
    case ir::StmtKind::Block:
      for (const ir::Stmt& c : static_cast<const ir::Block&>(*s).stmts)
        if (const ir::For* f = first_loop(c, pred)) return f;
      return nullptr;
    default:
      return nullptr;
  }
}

bool has_loop(const ir::Stmt& s, bool (*pred)(ir::LoopTag)) { return first_loop(s, pred); }

FreshNames::FreshNames(const ir::LoweredFunc& f) : used_(ir::names_in(f.body)) {
  BufferNames buffers;
  buffers.visit(f.body);
  used_.insert(buffers.names.begin(), buffers.names.end());
  for (const ir::Buf& b : f.args) used_.insert(b.name);
  used_.insert(f.params.begin(), f.params.end());
}

std::string FreshNames::operator()(const std::string& prefix) {
  for (;;) {
    std::string name = prefix + std::to_string(count_++);
    if (used_.insert(name).second) return name;
  }
}

std::vector<const ir::Store*> stores_of(const ir::Stmt& s) {
  StoreCollector c;
  c.visit(s);
  return std::move(c.stores);
}

bool is_fill(const std::vector<const ir::Store*>& stores) {
  return std::all_of(stores.begin(), stores.end(), [&](const ir::Store* st) {
    return !st->atomic && st->comp.size() > 5 &&
           st->comp.compare(st->comp.size() - 5, 5, "_fill") == 0;
  });
}

CopyNest copy_nest(const ir::Stmt& s) {
  CopyNest out;
  std::vector<const ir::For*>& chain = out.chain;
  std::vector<const ir::LetStmt*>& lets = out.lets;
  std::vector<const ir::LetStmt*> pending;
  std::set<std::string> chain_vars;
  ir::Stmt body = s;
  for (;;) {
    if (const ir::LetStmt* l = ir::as<ir::LetStmt>(body); l && !chain.empty()) {
      pending.push_back(l);
      body = l->body;
      continue;
    }
    const ir::For* n = ir::as<ir::For>(body);
    if (!n || n->tag == ir::LoopTag::Parallel || n->tag == ir::LoopTag::GpuLanes) break;
    std::set<std::string> defined = chain_vars;
    for (const ir::LetStmt* l : pending) defined.insert(l->var);
    bool uniform = true;
    for (const ir::Expr& e : {n->min, n->end})
      for (const std::string& v : ir::free_vars(e)) uniform = uniform && !defined.count(v);
    if (!uniform) break;
    lets.insert(lets.end(), pending.begin(), pending.end());
    pending.clear();
    chain_vars = std::move(defined);
    chain.push_back(n);
    chain_vars.insert(n->var);
    body = n->body;
  }
  out.body = chain.back()->body;  // with the lets after the last loop
  return out;
}

TopLevel top_level(const ir::Stmt& s) {
  const ir::For* n = ir::as<ir::For>(s);
  if (!n) return TopLevel::OneThread;
  if (ir::is_gpu_block_tag(n->tag)) return TopLevel::Kernel;
  if (has_loop(n->body, ir::is_gpu_block_tag)) return TopLevel::Refused;
  if (ir::is_gpu_thread_tag(n->tag) || has_loop(n->body, ir::is_gpu_thread_tag))
    return TopLevel::Kernel;
  return TopLevel::OneThread;
}

ir::Stmt map_kernels(const ir::Stmt& s, const std::function<ir::Stmt(const ir::Stmt&)>& kernel,
                     const std::function<ir::Stmt(const ir::Stmt&)>& one_thread) {
  if (!s) return s;
  switch (s->kind) {
    case ir::StmtKind::Alloc:  // in device memory
    case ir::StmtKind::Block:
    case ir::StmtKind::LetStmt:  // the launch's
    case ir::StmtKind::If:
      return with_children(s,
                           [&](const ir::Stmt& c) { return map_kernels(c, kernel, one_thread); });
    case ir::StmtKind::For:
    case ir::StmtKind::Store:
    case ir::StmtKind::Evaluate:
      switch (top_level(s)) {
        case TopLevel::Kernel: {
          const ir::For* n = ir::as<ir::For>(s);
          return kernel(ir::is_gpu_block_tag(n->tag) ? s : once(s, ir::LoopTag::GpuBlockX));
        }
        case TopLevel::OneThread: {
          // What it makes of the nest (temporaries around its loop) stays one statement.
          ir::Stmt r = one_thread(s);
          bool statement = r->kind == ir::StmtKind::For || r->kind == ir::StmtKind::Store ||
                           r->kind == ir::StmtKind::Evaluate;
          return statement && top_level(r) == TopLevel::OneThread ? r : once(r, ir::LoopTag::None);
        }
        case TopLevel::Refused:
          return s;
      }
  }
  return s;
}

ir::Stmt with_body(const ir::For& n, ir::Stmt body) {
  return std::make_shared<ir::For>(n.var, n.min, n.end, n.step, n.tag, std::move(body));
}

ir::Expr extent_of(const ir::For& n) {
  ir::Expr d = n.end - n.min;
  if (n.step != 1)
    d = ir::binary(ir::BinaryOp::Div, d + ir::int_imm(n.step - 1), ir::int_imm(n.step));
  return ir::simplify(d);
}

ir::Stmt with_children(const ir::Stmt& s, const std::function<ir::Stmt(const ir::Stmt&)>& f) {
  switch (s->kind) {
    case ir::StmtKind::Block: {
      std::vector<ir::Stmt> stmts;
      for (const ir::Stmt& c : static_cast<const ir::Block&>(*s).stmts) stmts.push_back(f(c));
      return ir::block(std::move(stmts));
    }
    case ir::StmtKind::LetStmt: {
      const auto& n = static_cast<const ir::LetStmt&>(*s);
      return std::make_shared<ir::LetStmt>(n.var, n.value, f(n.body));
    }
    case ir::StmtKind::Alloc: {
      const auto& n = static_cast<const ir::Alloc&>(*s);
      return std::make_shared<ir::Alloc>(n.buf, n.dtype, n.shape, n.loc, f(n.body));
    }
    case ir::StmtKind::If: {
      const auto& n = static_cast<const ir::IfThenElse&>(*s);
      return std::make_shared<ir::IfThenElse>(n.cond, f(n.then_case), f(n.else_case));
    }
    default:
      return s;
  }
}

}  // namespace kiln::cuda
