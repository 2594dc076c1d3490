// The walk of a kernel's code that runs once per block (internal to the CUDA backend), as the
// printer reads it: the block loops and the lets between them, then, inside them and outside
// every thread loop, temporaries, lets, branches, serial loops around thread loops, thread
// loops and nests with no thread loop, with the buffers and integer lets known at each. The GPU
// lowering passes that rewrite that code derive from it and take the cases they rewrite
// (keep_in_registers, distribute_fills, pipeline_tiles); place_barriers, which follows the steps
// of a block in order, takes the kernel's walk and the tables and walks the block's code itself.
#pragma once

#include <map>
#include <string>

#include "kiln/loop_ir.h"
#include "spaces.h"

namespace kiln::cuda {

class BlockCodeMutator {
 public:
  explicit BlockCodeMutator(const ir::LoweredFunc& f) : bufs_(device_buffers(f)) {}
  virtual ~BlockCodeMutator() = default;
  BlockCodeMutator(const BlockCodeMutator&) = delete;
  BlockCodeMutator& operator=(const BlockCodeMutator&) = delete;

  // A kernel over blocks and threads (map_kernels): its block loops and the lets between them,
  // then block() of what runs once per block.
  ir::Stmt kernel(const ir::Stmt& s);

 protected:
  // Inside the block loops, outside the thread loops: a temporary joins bufs_ (in shared memory,
  // or a thread's registers for a gpu_local one) and a let lets_ for its body; a loop tagged
  // parallel or gpu_block is left for the printer to refuse.
  virtual ir::Stmt block(const ir::Stmt& s);
  // s, a loop n tagged gpu_thread: the code each thread runs. Left as it is (its temporaries
  // join bufs_).
  virtual ir::Stmt thread_loop(const ir::Stmt& s, const ir::For& n);
  // s, a serial loop n with thread loops inside (the K loop): block() of its body.
  virtual ir::Stmt serial_loop(const ir::Stmt& s, const ir::For& n);
  // A nest with no thread loop in it (a fill, code for one thread or for every thread). Left as
  // it is (its temporaries join bufs_).
  virtual ir::Stmt block_nest(const ir::Stmt& s);

  // Whether s, a nest with no thread loop, is a cache fill the block's threads share: its stores
  // are a cache's copies (nests.h is_fill), and not all into a thread's registers.
  bool shared_fill(const ir::Stmt& s) const;

  // The temporaries of s, code a thread runs, join bufs_ (in its registers but for gpu_shared
  // ones), as the printer declares them: for the rest of the kernel.
  void note_thread_temps(const ir::Stmt& s);

  BufTable bufs_;                         // those declared so far, as the printer meets them
  std::map<std::string, ir::Expr> lets_;  // the integer lets in scope in the kernel
};

}  // namespace kiln::cuda
