// Pipelined tiles (internal to the CUDA backend). A serial loop around thread loops whose body
// first fills shared tiles from device memory and then computes on them (the matmul's K loop)
// reads the next step's elements into registers before it computes on this step's tiles, and
// stores them into the tiles after the barrier that ends the computation: the loads' latency
// hides behind the arithmetic, for the registers that hold them. The first step's tiles are
// filled before the loop. Each thread takes the groups kiln_tid, kiln_tid + kiln_nthreads, ...
// of a fill, as many as the thread loops inside the loop make necessary (the block has at least
// their threads). The planner below decides which loops are so written: place_barriers asks it
// and tags those loops gpu_pipelined, pipeline_tiles asks it again for them and writes them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "copies.h"
#include "kiln/loop_ir.h"
#include "spaces.h"

namespace kiln::cuda {

// Floats a thread may hold for the next step.
inline constexpr int64_t kPipelineRegisters = 16;

struct PipelinedFill {
  const ir::For* nest = nullptr;  // the fill's outermost loop in the loop's body
  VectorCopy copy;
  std::vector<const ir::For*> chain;
  const ir::For* lanes = nullptr;  // the innermost loop's body, a gpu_lanes loop
  std::vector<ir::Expr> mins;      // each loop's first value, lets expanded
  std::vector<int64_t> extents;    // each loop's iterations (the innermost's in groups)
  int64_t groups = 1;              // iterations of the whole nest
  int64_t per_thread = 1;          // of them for each thread, at most
};

// The tiles allocated in the loop (declared before it) and its fills.
struct Pipeline {
  std::vector<const ir::Alloc*> tiles;
  std::vector<PipelinedFill> fills;
  int64_t threads = 1;  // the block has at least so many (its thread loops')
};

// The pipeline of the serial loop n at block level, if it is one. `bufs`: the buffers known
// before it; `lets`: the values of the integer lets in scope (bind_let); `mma_kernel`: whether
// the kernel has mma nests (whose warps' 32 lanes are its x axis). Barriers in its body are
// ignored. place_barriers decides which loops are pipelines (and marks them gpu_pipelined);
// pipeline_tiles plans those again, for the loops it writes.
std::optional<Pipeline> plan_pipeline(const ir::For& n, const BufTable& bufs,
                                      const std::map<std::string, ir::Expr>& lets, bool mma_kernel);

}  // namespace kiln::cuda
