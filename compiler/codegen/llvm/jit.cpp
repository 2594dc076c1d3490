// The in-process JIT: one ORC LLJIT for the process; a Kernel owns its code in a
// JITDylib of its own, so kernels of one name (a func under two knob settings,
// an operator called twice in a graph) live side by side.
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/Support/Error.h>

#include <mutex>

#include "kiln/runtime.h"
#include "kiln/timing.h"
#include "perf_support.h"
#include "target_machine.h"

namespace kiln::codegen {

struct Kernel::State {
  ir::LoweredFunc func;
  llvm::orc::JITDylib* dylib = nullptr;  // the kernel's code, linked against the runtime's
  kiln_entry_fn entry = nullptr;
  ~State();
};

namespace {

std::string message(llvm::Error e) { return llvm::toString(std::move(e)); }

// The process's JIT. It lives as long as the process: kernels may be freed
// from static destructors, so it is never torn down.
class Engine {
 public:
  static Engine& get() {
    static Engine* engine = new Engine();
    return *engine;
  }

  llvm::orc::LLJIT& jit() { return *jit_; }
  std::mutex& lock() { return mu_; }
  // A name for the next kernel's JITDylib (called with the lock held).
  std::string next_dylib_name() { return "kiln.kernel." + std::to_string(++kernels_); }

 private:
  Engine() {
    initialize_llvm();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb)
      throw CompileError(ErrorStage::Codegen, {},
                         "cannot describe this machine to LLVM: " + message(jtmb.takeError()));
    Target host = Target::host();
    jtmb->setCPU(host.cpu);
    jtmb->addFeatures({host.features});
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*jtmb)).create();
    if (!jit)
      throw CompileError(ErrorStage::Codegen, {},
                         "cannot start LLVM's JIT: " + message(jit.takeError()));
    jit_ = std::move(*jit);
    llvm::orc::JITDylib& lib = jit_->getMainJITDylib();
    // The runtime generated code calls, by address: no need to export them.
    llvm::orc::SymbolMap runtime;
    for (const kiln_runtime_symbol* s = kiln_runtime_symbols(); s->name; ++s)
      runtime[jit_->mangleAndIntern(s->name)] = {
          llvm::orc::ExecutorAddr::fromPtr(reinterpret_cast<void*>(s->address)),
          llvm::JITSymbolFlags::Exported};
    if (auto e = lib.define(llvm::orc::absoluteSymbols(std::move(runtime))))
      throw CompileError(ErrorStage::Codegen, {},
                         "cannot give the JIT kiln's runtime: " + message(std::move(e)));
    // libc and libm (memset, memcpy, expf, ... that LLVM may call).
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        jit_->getDataLayout().getGlobalPrefix());
    if (!process)
      throw CompileError(ErrorStage::Codegen, {},
                         "cannot search this process's symbols: " + message(process.takeError()));
    lib.addGenerator(std::move(*process));
    if (perf_support_requested()) describe_jit_code_to_perf(*jit_);
  }

  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::mutex mu_;
  uint64_t kernels_ = 0;
};

}  // namespace

Kernel::State::~State() {
  if (dylib) {
    Engine& engine = Engine::get();
    std::lock_guard<std::mutex> guard(engine.lock());
    llvm::consumeError(engine.jit().getExecutionSession().removeJITDylib(*dylib));
  }
}

Kernel jit_compile(const ir::LoweredFunc& f, const Options& opts_in) {
  Options opts = opts_in;
  Target host = Target::host();
  if (opts.target.triple != host.triple)
    throw CompileError(ErrorStage::Codegen, {},
                       "the JIT runs code for this machine (" + host.triple + "), not for " +
                           opts.target.triple + "; use kiln compile for other targets");
  auto ctx = std::make_unique<llvm::LLVMContext>();
  OptimizedModule optimized = optimized_module(f, opts, *ctx);
  std::unique_ptr<llvm::Module> m = std::move(optimized.module);

  Engine& engine = Engine::get();
  // Declared before the lock: if linking fails, the state (whose destructor
  // takes the lock to free the code) is destroyed after the lock is released.
  auto state = std::make_shared<Kernel::State>();
  state->func = f;
  std::lock_guard<std::mutex> guard(engine.lock());
  TimedPart part("machine code and link");
  llvm::orc::LLJIT& jit = engine.jit();
  llvm::Expected<llvm::orc::JITDylib&> dylib = jit.createJITDylib(engine.next_dylib_name());
  if (!dylib) {
    throw CompileError(
        ErrorStage::Codegen, {},
        "the JIT cannot make room for " + f.name + ": " + message(dylib.takeError()));
  }
  state->dylib = &*dylib;
  // The kernel links against the main JITDylib, which holds the runtime's
  // symbols and searches the process for libc and libm.
  state->dylib->addToLinkOrder(jit.getMainJITDylib());
  if (auto e =
          jit.addIRModule(*state->dylib, llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))))
    throw CompileError(ErrorStage::Codegen, {},
                       "the JIT refused " + f.name + ": " + message(std::move(e)));
  // The JIT generates the machine code during the lookup, which reads LLVM's options.
  std::shared_lock<std::shared_mutex> options = llvm_options_in_use();
  auto sym = jit.lookup(*state->dylib, entry_symbol(f));
  options.unlock();
  if (!sym) {
    std::string why = message(sym.takeError());
    throw CompileError(ErrorStage::Codegen, {}, "cannot link " + f.name + ": " + why);
  }
  check_llvm_errors(optimized);
  state->entry = sym->toPtr<kiln_entry_fn>();
  return Kernel(std::move(state));
}

int32_t Kernel::call(const void* args, int32_t nargs) const {
  return state_->entry(static_cast<const kiln_value*>(args), nargs);
}

const ir::LoweredFunc& Kernel::func() const { return state_->func; }

std::vector<kiln_value> pack_arguments(const ir::LoweredFunc& f, Bindings& b) {
  std::vector<kiln_value> args;
  for (const auto& p : f.params) {
    auto it = b.params.find(p);
    if (it == b.params.end())
      throw CompileError(ErrorStage::Codegen, {},
                         "no value for run-time param '" + p + "' of " + f.name);
    kiln_value v;
    v.i64 = it->second;
    args.push_back(v);
  }
  for (const auto& buf : f.args) {
    kiln_value v;
    HostBuffer& hb = bound_buffer(b, buf, f.name, ErrorStage::Codegen);
    // A kernel never writes its inputs: read them where they are, shared or not.
    v.ptr =
        buf.kind == ir::BufKind::Input ? const_cast<void*>(std::as_const(hb).data()) : hb.data();
    args.push_back(v);
  }
  return args;
}

void Kernel::run(Bindings& b) const {
  const ir::LoweredFunc& f = state_->func;
  std::vector<kiln_value> args = pack_arguments(f, b);
  int32_t rc = call(args.data(), static_cast<int32_t>(args.size()));
  if (rc == 0) return;
  // An input that broke its spec: name the element, as the interpreters do.
  const ir::RuntimeCheck* check = ir::runtime_check(f, rc);
  if (check && check->kind == ir::RuntimeCheck::Kind::InputSpec) {
    for (const ir::Buf& arg : f.args) {
      auto data = b.buffers.find(arg.name);
      if (arg.name != check->subject || data == b.buffers.end()) continue;
      std::string error = value_spec_error(arg, data->second, b.params);
      if (!error.empty()) throw CompileError(ErrorStage::Run, check->where, error);
    }
  }
  throw ir::status_error(f, rc);
}

}  // namespace kiln::codegen
