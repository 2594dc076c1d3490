// Register-level rewrites of the loops one GPU thread runs (internal to the CUDA backend):
// loops tagged unroll with constant bounds unrolled by kiln, and accumulators kept in registers
// across the loop that updates them.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/loop_ir.h"

namespace kiln::cuda {

// e with the lets of `lets` substituted until none is left, simplified: index expressions
// compared or bounded across the lets that CSE and LICM put between them.
ir::Expr expand_lets(const ir::Expr& e, const std::map<std::string, ir::Expr>& lets);

// Binds var to value in `lets` when it is an integer that reads no memory (what expand_lets may
// substitute), else forgets var there.
void bind_let(std::map<std::string, ir::Expr>& lets, const std::string& var, const ir::Expr& value);

// bind_let for the life of the scope; what `lets` held for var before is restored after it.
class LetScope {
 public:
  LetScope(std::map<std::string, ir::Expr>& lets, const std::string& var, const ir::Expr& value)
      : lets_(lets), var_(var) {
    if (auto it = lets.find(var); it != lets.end()) saved_ = it->second;
    bind_let(lets, var, value);
  }
  ~LetScope() {
    if (saved_)
      lets_[var_] = *saved_;
    else
      lets_.erase(var_);
  }
  LetScope(const LetScope&) = delete;
  LetScope& operator=(const LetScope&) = delete;

 private:
  std::map<std::string, ir::Expr>& lets_;
  std::string var_;
  std::optional<ir::Expr> saved_;
};

// e simplified, when that is an integer constant.
std::optional<int64_t> constant(const ir::Expr& e);

// The element offset of buf[indices] in a buffer of `shape` (row-major), unsimplified.
ir::Expr flat_offset(const std::vector<ir::Expr>& indices, const std::vector<ir::Expr>& shape);

// e as rest + c: the constant a simplified sum ends with (simplify gathers constants last), or
// 0. Offsets that differ only in it are neighbours (a register tile, a float4 read).
std::pair<ir::Expr, int64_t> split_constant(const ir::Expr& e);

// s with every loop tagged unroll or unroll_explicit whose bounds are constants replaced by its
// iterations, each with the loop variable replaced by its value, while a nest makes at most
// `max_copies` copies of a statement. (NVRTC unrolls poorly on its own, and the rewrite below
// needs the unrolled indices.)
ir::Stmt unroll_constant_loops(const ir::Stmt& s, int64_t max_copies = 64);

// Keeps the elements of buffers the serial loop `loop` updates at indices that do not change
// inside it in registers: each is loaded into a one-element gpu_local temporary before the loop,
// read and written there, and stored back after it. A buffer qualifies when `eligible(name)` gives
// its type, every access to it in the loop is at such an index (the lets inside the loop expanded),
// none is atomic or under a condition, at least one is a store, and its distinct indices are
// provably distinct (a constant difference in some dimension). Returns the loop itself when no
// buffer qualifies; `fresh` makes names for the temporaries.
ir::Stmt keep_accumulators_in_registers(
    const ir::Stmt& loop,
    const std::function<std::optional<ir::DType>(const std::string&)>& eligible,
    const std::function<std::string()>& fresh);

// The same for a serial loop at block level, around thread loops (the K loop of a shared-tile
// matmul, with its cache fills and barriers): a buffer every access of which in the loop lies in
// the same gpu_thread loops, whose bounds the loop does not change, at indices that change with
// the threads but not inside the loop, is kept in registers across the whole loop. The same
// thread loops load each thread's elements before the loop and store them after it. The other
// conditions are those above. Returns the loop itself when no buffer qualifies.
ir::Stmt keep_accumulators_across_block_loop(
    const ir::Stmt& loop,
    const std::function<std::optional<ir::DType>(const std::string&)>& eligible,
    const std::function<std::string()>& fresh);

}  // namespace kiln::cuda
