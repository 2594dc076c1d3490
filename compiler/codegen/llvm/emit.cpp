// Text and object output of the CPU backend: optimized LLVM IR, assembly, object files.
#include <llvm/Support/raw_ostream.h>

#include "target_machine.h"

namespace kiln::codegen {

std::string emit_llvm(const ir::LoweredFunc& f, const Options& opts) {
  llvm::LLVMContext ctx;
  OptimizedModule m = optimized_module(f, opts, ctx);
  std::string text;
  llvm::raw_string_ostream os(text);
  m.module->print(os, nullptr);
  return text;
}

std::string emit_asm(const ir::LoweredFunc& f, const Options& opts) {
  llvm::LLVMContext ctx;
  OptimizedModule m = optimized_module(f, opts, ctx);
  std::vector<char> text = machine_code(m, llvm::CodeGenFileType::AssemblyFile);
  return std::string(text.begin(), text.end());
}

std::vector<char> emit_object(const ir::LoweredFunc& f, const Options& opts) {
  llvm::LLVMContext ctx;
  OptimizedModule m = optimized_module(f, opts, ctx);
  return machine_code(m, llvm::CodeGenFileType::ObjectFile);
}

}  // namespace kiln::codegen
