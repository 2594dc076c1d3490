// Loop IR to an LLVM module. Knows nothing of JITs or object files.
#pragma once

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>

#include "kiln/codegen.h"

namespace kiln::codegen {

// Builds the module for f: an internal function per parallel loop body and
// the external entry point `entry_symbol(f)`. The module is unoptimized;
// its functions carry the target's CPU and features.
std::unique_ptr<llvm::Module> build_module(const ir::LoweredFunc& f, const Options& opts,
                                           llvm::LLVMContext& ctx);

// A loop that carries a hint for LLVM (vectorize, unroll) also carries its
// kiln name in its loop metadata, !{!"kiln.loop.name", !"j"}, so that what
// LLVM says about the loop can name it.
inline constexpr const char* kLoopNameKey = "kiln.loop.name";

}  // namespace kiln::codegen
