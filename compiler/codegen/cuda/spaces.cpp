// Where the buffers of a kernel live (spaces.h).
#include "spaces.h"

#include "kiln/cuda.h"

namespace kiln::cuda {
namespace {

void collect(const ir::Stmt& s, std::vector<const ir::Alloc*>& out) {
  if (!s) return;
  switch (s->kind) {
    case ir::StmtKind::Alloc: {
      const auto& n = static_cast<const ir::Alloc&>(*s);
      out.push_back(&n);
      return collect(n.body, out);
    }
    case ir::StmtKind::Block:
      for (const ir::Stmt& c : static_cast<const ir::Block&>(*s).stmts) collect(c, out);
      return;
    case ir::StmtKind::LetStmt:
      return collect(static_cast<const ir::LetStmt&>(*s).body, out);
    case ir::StmtKind::If: {
      const auto& n = static_cast<const ir::IfThenElse&>(*s);
      collect(n.then_case, out);
      return collect(n.else_case, out);
    }
    default:
      return;  // a loop: a kernel, whose temporaries are its own
  }
}

}  // namespace

std::vector<const ir::Alloc*> device_temps(const ir::Stmt& body) {
  std::vector<const ir::Alloc*> out;
  collect(body, out);
  return out;
}

BufTable device_buffers(const ir::LoweredFunc& f) {
  BufTable out;
  for (const ir::Buf& b : f.args) {
    bool input = b.kind == ir::BufKind::Input;
    out[b.name] = {b.dtype, b.shape, Space::Global, input,
                   input && b.loc == ir::MemLoc::GpuConstant};
  }
  for (const ir::Alloc* a : device_temps(f.body))
    out[a->buf] = {a->dtype, a->shape, Space::Global, false};
  return out;
}

TempSpace temp_space(ir::MemLoc loc, CodeLevel level) {
  Space s = Space::Global;
  switch (level) {
    case CodeLevel::Host:
      return TempSpace::Device;
    case CodeLevel::Block:
      s = block_code_space(loc);
      break;
    case CodeLevel::Thread:
      s = thread_code_space(loc);
      break;
  }
  return s == Space::Shared ? TempSpace::Shared : TempSpace::Thread;
}

}  // namespace kiln::cuda
