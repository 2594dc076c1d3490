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

}  // namespace kiln::codegen
