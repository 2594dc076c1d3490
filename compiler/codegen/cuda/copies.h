// Vector copies (internal to the CUDA backend): which cache fills copy 4 (or 2) consecutive,
// aligned floats per step, as one float4 (float2) load and, where the destination allows, one
// vector store. distribute_fills decides by this analysis and writes the groups into the loops
// (gpu_lanes); the printer and the pipeline planner read them back with fill_copy, which checks
// the groups against the same analysis.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/loop_ir.h"
#include "nests.h"
#include "spaces.h"

namespace kiln::cuda {

// A fill whose innermost loop copies consecutive floats of device memory copies 4 (or 2) of
// them per thread and step: one float4 (float2) load of device memory, and one vector store
// where the destination's elements are consecutive and aligned too (else a store each).
// Device buffers are allocated one by one (cuMemAlloc: 256-byte aligned) and shared tiles
// are declared __align__(16), so an offset that is a multiple of the width for every value
// of the variables is an aligned address.
struct VectorCopy {
  int width = 1;
  std::string from, to;                  // the buffers
  std::vector<ir::Expr> from_at, to_at;  // the indices of a group's first element, every let
  std::string var;                       // expanded; the innermost loop's variable
  bool vector_store = false;
};

// The copy a fill nest (its loops `chain`, the lets between them and the innermost body) makes:
// width 0 when it is not a plain copy of floats, 1 when it cannot be vectorized. `outer`: the
// values of the integer lets in scope.
VectorCopy vector_copy(const std::vector<const ir::For*>& chain,
                       const std::vector<const ir::LetStmt*>& lets, const ir::Stmt& body,
                       const std::map<std::string, ir::Expr>& outer, const BufTable& bufs);

// The copy of a fill nest distribute_fills rewrote: where its body is a loop tagged gpu_lanes,
// the copy its innermost loop (stepping by the lanes' extent) makes, that extent wide; width 0
// (a nest it does not copy as vectors) else. `outer`: the values of the integer lets in scope.
// Throws CompileError (stage Codegen) where the lanes are not the copy's groups.
VectorCopy fill_copy(const CopyNest& nest, const std::map<std::string, ir::Expr>& outer,
                     const BufTable& bufs);

// The body of a fill nest's innermost loop for one element: a lanes loop's body with its
// variable the innermost loop's, or the body itself where there is none.
ir::Stmt element_body(const CopyNest& nest);

// Whether e, an integer expression, is a multiple of `width` for every value of its variables
// (as far as the simplifier can tell).
bool multiple_of(const ir::Expr& e, int width);

// Whether offset, an element offset that depends on var, moves to the next element when var
// does (offset(var + 1) - offset(var) is 1).
bool consecutive(const ir::Expr& offset, const std::string& var);

}  // namespace kiln::cuda
