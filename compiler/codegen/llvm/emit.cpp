// Text and object output of the CPU backend: optimized LLVM IR, assembly, object files.
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Support/raw_ostream.h>

#include "module_builder.h"
#include "target_machine.h"

namespace kiln::codegen {
namespace {

std::string machine_code(const ir::LoweredFunc& f, const Options& opts,
                         llvm::CodeGenFileType type) {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = build_module(f, opts, ctx);
  std::unique_ptr<llvm::TargetMachine> tm = make_target_machine(opts.target, opts.opt_level);
  optimize(*m, *tm, opts.opt_level);
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, type))
    throw CompileError("codegen", {},
                       "LLVM cannot emit this kind of file for " + opts.target.triple);
  pm.run(*m);
  return std::string(buffer.begin(), buffer.end());
}

}  // namespace

std::string emit_llvm(const ir::LoweredFunc& f, const Options& opts) {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = build_module(f, opts, ctx);
  std::unique_ptr<llvm::TargetMachine> tm = make_target_machine(opts.target, opts.opt_level);
  optimize(*m, *tm, opts.opt_level);
  std::string text;
  llvm::raw_string_ostream os(text);
  m->print(os, nullptr);
  return text;
}

std::string emit_asm(const ir::LoweredFunc& f, const Options& opts) {
  return machine_code(f, opts, llvm::CodeGenFileType::AssemblyFile);
}

std::vector<char> emit_object(const ir::LoweredFunc& f, const Options& opts) {
  std::string bytes = machine_code(f, opts, llvm::CodeGenFileType::ObjectFile);
  return std::vector<char>(bytes.begin(), bytes.end());
}

}  // namespace kiln::codegen
