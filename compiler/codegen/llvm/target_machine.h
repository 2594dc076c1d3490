// Target choice and the optimization pipeline: a kiln Target becomes an LLVM TargetMachine.
#pragma once

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>

#include "kiln/codegen.h"

namespace kiln::codegen {

// Registers LLVM's targets once per process.
void initialize_llvm();

// The TargetMachine for t (position-independent code). Throws CompileError
// (stage "codegen") for a triple LLVM does not know.
std::unique_ptr<llvm::TargetMachine> make_target_machine(const Target& t, int opt_level);

// Sets m's triple and data layout for tm and runs LLVM's O<opt_level>
// pipeline on it.
void optimize(llvm::Module& m, llvm::TargetMachine& tm, int opt_level);

}  // namespace kiln::codegen
