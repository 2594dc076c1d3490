// Where the buffers of a kernel live, as the CUDA backend places them (internal to it): the
// printer, the barrier placement and the copy analyses read the same table.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::cuda {

// Device memory (the func's buffers and temporaries allocated outside every kernel), a block's
// shared memory, or one thread's registers.
enum class Space { Global, Shared, Local };

struct BufInfo {
  ir::DType dtype = ir::DType::F32;
  std::vector<ir::Expr> shape;
  Space space = Space::Global;
  bool input = false;
  bool constant = false;  // read from its copy in constant memory
};

// The buffers known so far, by name.
using BufTable = std::map<std::string, BufInfo>;

// The space of `buf`; a buffer the table does not know yet is in device memory.
inline Space space_of(const BufTable& bufs, const std::string& buf) {
  auto it = bufs.find(buf);
  return it == bufs.end() ? Space::Global : it->second.space;
}

// The space of a temporary allocated inside a kernel's block loops, outside its thread loops: the
// block's shared memory, or each thread's registers for a gpu_local one.
inline Space block_code_space(ir::MemLoc loc) {
  return loc == ir::MemLoc::GpuLocal ? Space::Local : Space::Shared;
}

// The space of a temporary allocated in code one thread runs: that thread's registers, except a
// gpu_shared one, which is in the block's shared memory. (The printer refuses a gpu_shared one
// inside a thread loop, where each thread would have its own; outside every thread loop the one
// thread that runs the code, in a one-thread kernel or as the block's first thread, has it.)
inline Space thread_code_space(ir::MemLoc loc) {
  return loc == ir::MemLoc::GpuShared ? Space::Shared : Space::Local;
}

// The temporaries allocated outside every kernel (every loop), in the order they are written:
// in device memory, allocated by whoever launches the kernels.
std::vector<const ir::Alloc*> device_temps(const ir::Stmt& body);

// The buffers in device memory before any kernel runs: f's arguments (an input set_loc'ed
// gpu_constant read from constant memory) and the temporaries allocated outside every kernel.
BufTable device_buffers(const ir::LoweredFunc& f);

}  // namespace kiln::cuda
