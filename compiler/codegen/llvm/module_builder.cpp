// Loop IR to an LLVM module: one kernel's function (function_builder.h) and a
// check that what was built is valid LLVM IR.
#include "module_builder.h"

#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "function_builder.h"

namespace kiln::codegen {

std::string entry_symbol(const ir::LoweredFunc& f) { return "kiln_" + f.name; }

std::unique_ptr<llvm::Module> build_module(const ir::LoweredFunc& f, const Options& opts,
                                           llvm::LLVMContext& ctx) {
  auto m = std::make_unique<llvm::Module>("kiln." + f.name, ctx);
  detail::FunctionBuilder(f, opts, ctx, *m).build();
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os))
    detail::fail("generated LLVM IR for " + f.name + " is invalid: " + problems);
  return m;
}

}  // namespace kiln::codegen
