// Tensor cores for the CUDA backend (internal to it): the loop nests tagged mma, recognized as
// one warp's matrix multiply-accumulate on a tile, C[m, n] += A[m, k] * B[k, n].
//
// A loop tagged mma heads three loops of constant extents (m 16, n 16 and k 8 for f32 operands,
// which the tensor cores round to TF32) around one statement that adds A's element times B's to
// C's. Each operand is a tile of a buffer in device or shared memory whose elements lie along
// rows or along columns (one of its loops moves it by one element, the other by its leading
// dimension), and starts 32 bytes aligned. The 32 lanes of a warp run it together with CUDA's
// warp matrix operations (mma.h: fragments loaded, mma_sync, the accumulator stored back).
//
// C may also be an array of accumulator fragments: a gpu_local temporary [count, 16, 16] that
// keep_fragments (kiln/cuda.h) puts in place of C's tiles across a loop, each 16 x 16 tile one
// fragment in the warp's registers. Its tiles are filled and written back by 16 x 16 copy nests
// tagged mma, F[f, m, n] = C[...] and C[...] = F[f, m, n].
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/loop_ir.h"

namespace kiln::cuda {

inline bool is_mma(ir::LoopTag t) { return t == ir::LoopTag::Mma; }

// The threads of a warp: the lanes that run an mma nest together.
inline constexpr int64_t kWarp = 32;

// The names keep_fragments gives the arrays of accumulator fragments it makes: kiln_frag0, ...
inline constexpr const char* kFragmentArrayPrefix = "kiln_frag";
inline bool is_fragment_array(const std::string& buf) {
  return buf.rfind(kFragmentArrayPrefix, 0) == 0;
}

// One operand: the tile of `buf` an mma nest reads (A, B) or updates (C).
struct MmaOperand {
  std::string buf;
  std::vector<ir::Expr> first;  // the indices of its first element (the nest's loops at their
                                // first values, the lets inside the nest expanded)
  ir::Expr offset;              // that element's offset in the buffer, every let expanded
  int64_t ld = 0;               // elements from one row (row_major) or column to the next
  bool row_major = true;
  ir::Expr fragment;  // in an array of fragments: which one (else null)
};

enum class MmaKind {
  Multiply,          // C += A * B
  LoadAccumulator,   // fragments <- C's tile
  StoreAccumulator,  // C's tile <- fragments
};

struct MmaNest {
  MmaKind kind = MmaKind::Multiply;
  int64_t m = 16, n = 16, k = 8;
  ir::DType input = ir::DType::F32;  // F32: products of TF32 roundings
  MmaOperand a, b, c;                // Multiply: c in memory or in fragments; copies: c in memory
  MmaOperand fragments;              // copies: the fragment array's side
};

// The nest that `head` (tagged mma) heads, as a warp's tensor cores compute it. `lets` are the
// lets in scope around it (name -> value, themselves expanded), `shape_of` a buffer's shape.
// Throws CompileError (stage Codegen) naming the loop and what keeps the nest off the tensor
// cores: its loops, extents or statement, an operand's type or layout, or an alignment the
// simplifier cannot prove.
// `is_fragment` says which buffers are arrays of accumulator fragments.
MmaNest match_mma(const ir::For& head, const std::map<std::string, ir::Expr>& lets,
                  const std::function<const std::vector<ir::Expr>&(const std::string&)>& shape_of,
                  const std::function<bool(const std::string&)>& is_fragment);

// The loops, the lets between them and the statement of the nest an mma-tagged loop heads, when
// it has a nest's shape (three loops, or two for a copy, around one store); nullopt if not. What
// match_mma checks further is not looked at.
struct MmaLoops {
  std::vector<const ir::For*> loops;
  std::vector<const ir::LetStmt*> lets;
  const ir::Store* store = nullptr;
};
std::optional<MmaLoops> mma_loops(const ir::For& head);

// The buffers the mma nests inside s read or update.
std::set<std::string> mma_buffers(const ir::Stmt& s);

}  // namespace kiln::cuda
