// An LLVM pass for register tiles whose sums live in memory (the GEMM's C).
#pragma once

#include <llvm/IR/PassManager.h>

namespace kiln::codegen {

// After LLVM's LICM has kept a tile of sums in registers across a reduction
// loop (load before it, store after), each sum is loaded before the loop and
// every FMA of the loop waits for it: where the sums come from far away (C of a
// 2048 GEMM, 16 MB, reloaded for every KB step) the loads stalled the loop for
// about a fifth of its time. With reassociation allowed (fast_math), this pass
// starts each sum at -0.0 instead, loads the old value after the loop and adds
// it there, and prefetches it where the load was: the loop no longer waits,
// and the value is in cache by the time it is read.
//
// It applies to a loop with no store or call that writes memory, a preheader
// load of pointer p as a header phi's start, the phi summed by reassociable
// fadds alone (each feeding only the next), and the sum stored to p in the
// loop's single exit block.
class AccumulateFromZero : public llvm::PassInfoMixin<AccumulateFromZero> {
 public:
  llvm::PreservedAnalyses run(llvm::Function& f, llvm::FunctionAnalysisManager& fam);
};

}  // namespace kiln::codegen
