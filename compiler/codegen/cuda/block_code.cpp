// The walk of a kernel's block-level code (block_code.h).
#include "block_code.h"

#include <algorithm>
#include <vector>

#include "nests.h"
#include "registers.h"

namespace kiln::cuda {

ir::Stmt BlockCodeMutator::kernel(const ir::Stmt& s) {
  if (const ir::LetStmt* l = ir::as<ir::LetStmt>(s)) {
    LetScope let(lets_, l->var, l->value);
    return std::make_shared<ir::LetStmt>(l->var, l->value, kernel(l->body));
  }
  if (const ir::For* n = ir::as<ir::For>(s); n && ir::is_gpu_block_tag(n->tag))
    return with_body(*n, kernel(n->body));
  return block(s);
}

ir::Stmt BlockCodeMutator::block(const ir::Stmt& s) {
  if (!s) return s;
  switch (s->kind) {
    case ir::StmtKind::Alloc: {
      const auto& n = static_cast<const ir::Alloc&>(*s);
      bufs_[n.buf] = {n.dtype, n.shape, block_code_space(n.loc)};
      return with_children(s, [this](const ir::Stmt& c) { return block(c); });
    }
    case ir::StmtKind::LetStmt: {
      const auto& n = static_cast<const ir::LetStmt&>(*s);
      LetScope let(lets_, n.var, n.value);
      return std::make_shared<ir::LetStmt>(n.var, n.value, block(n.body));
    }
    case ir::StmtKind::Block:
    case ir::StmtKind::If:
      return with_children(s, [this](const ir::Stmt& c) { return block(c); });
    case ir::StmtKind::For: {
      const auto& n = static_cast<const ir::For&>(*s);
      if (n.tag == ir::LoopTag::Parallel || ir::is_gpu_block_tag(n.tag))
        return s;  // refused by the printer
      if (ir::is_gpu_thread_tag(n.tag)) return thread_loop(s, n);
      if (has_loop(n.body, ir::is_gpu_thread_tag)) return serial_loop(s, n);
      return block_nest(s);
    }
    case ir::StmtKind::Store:
    case ir::StmtKind::Evaluate:
      return s;
  }
  return s;
}

ir::Stmt BlockCodeMutator::thread_loop(const ir::Stmt& s, const ir::For&) {
  note_thread_temps(s);
  return s;
}

ir::Stmt BlockCodeMutator::serial_loop(const ir::Stmt&, const ir::For& n) {
  return with_body(n, block(n.body));
}

ir::Stmt BlockCodeMutator::block_nest(const ir::Stmt& s) {
  note_thread_temps(s);
  return s;
}

bool BlockCodeMutator::shared_fill(const ir::Stmt& s) const {
  std::vector<const ir::Store*> stores = stores_of(s);
  bool local_only = std::all_of(stores.begin(), stores.end(), [&](const ir::Store* st) {
    return space_of(bufs_, st->buf) == Space::Local;
  });
  return !local_only && is_fill(stores);
}

namespace {

class Allocs : public ir::StmtVisitor {
 public:
  std::vector<const ir::Alloc*> allocs;

 protected:
  void visit_alloc(const ir::Alloc& n) override {
    allocs.push_back(&n);
    ir::StmtVisitor::visit_alloc(n);
  }
};

}  // namespace

void BlockCodeMutator::note_thread_temps(const ir::Stmt& s) {
  Allocs a;
  a.visit(s);
  for (const ir::Alloc* n : a.allocs)
    bufs_[n->buf] = {n->dtype, n->shape, thread_code_space(n->loc)};
}

}  // namespace kiln::cuda
