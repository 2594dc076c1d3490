// Where the buffers of a kernel live (spaces.h).
#include "spaces.h"

namespace kiln::cuda {
namespace {

// The temporaries allocated outside every loop (every kernel).
void host_temps(const ir::Stmt& s, BufTable& out) {
  if (!s) return;
  switch (s->kind) {
    case ir::StmtKind::Alloc: {
      const auto& n = static_cast<const ir::Alloc&>(*s);
      out[n.buf] = {n.dtype, n.shape, Space::Global, false};
      return host_temps(n.body, out);
    }
    case ir::StmtKind::Block:
      for (const ir::Stmt& c : static_cast<const ir::Block&>(*s).stmts) host_temps(c, out);
      return;
    case ir::StmtKind::LetStmt:
      return host_temps(static_cast<const ir::LetStmt&>(*s).body, out);
    case ir::StmtKind::If: {
      const auto& n = static_cast<const ir::IfThenElse&>(*s);
      host_temps(n.then_case, out);
      return host_temps(n.else_case, out);
    }
    default:
      return;  // a loop: a kernel, whose temporaries are its own
  }
}

}  // namespace

BufTable device_buffers(const ir::LoweredFunc& f) {
  BufTable out;
  for (const ir::Buf& b : f.args) {
    bool input = b.kind == ir::BufKind::Input;
    out[b.name] = {b.dtype, b.shape, Space::Global, input,
                   input && b.loc == ir::MemLoc::GpuConstant};
  }
  host_temps(f.body, out);
  return out;
}

}  // namespace kiln::cuda
