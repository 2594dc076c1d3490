// Target choice and LLVM's optimization pipeline.
#include "target_machine.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/DiagnosticHandler.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/Scalar/LoopUnrollPass.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>

#include "accumulators.h"
#include "kiln/timing.h"
#include "module_builder.h"

namespace kiln::codegen {

namespace {

std::shared_mutex llvm_options_mutex;

// kiln's settings of LLVM's process-wide options.
void set_kiln_llvm_options() {
  llvm::StringMap<llvm::cl::Option*>& options = llvm::cl::getRegisteredOptions();
  auto set = [&](const char* name, const char* value) {
    if (auto found = options.find(name); found != options.end())
      found->second->addOccurrence(1, name, value);
  };
  // LLVM's scheduler after register allocation took a third of the
  // machine-code time of an unrolled GEMM micro-kernel (18 of 56 ms) and
  // changed none of the benchmark kernels' speed on an out-of-order x86
  // (docs/codegen.md): kiln's code goes without it. (The machine scheduler
  // before it costs as much, but aarch64 code differed without it.)
  set("post-RA-scheduler", "false");
  // Loop strength reduction goes too: it took 8 of the GEMM's 25 ms of
  // machine code and 28 of the bench conv's 57, and the GEMM and conv
  // benchmarks ran as fast without it (kiln's loops address memory as
  // base + index * scale already, which x86 and aarch64 encode).
  set("disable-lsr", "true");
}

}  // namespace

void initialize_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    llvm::InitializeAllAsmParsers();
    std::unique_lock<std::shared_mutex> lock(llvm_options_mutex);
    set_kiln_llvm_options();
  });
}

std::shared_lock<std::shared_mutex> llvm_options_in_use() {
  initialize_llvm();
  return std::shared_lock<std::shared_mutex>(llvm_options_mutex);
}

void with_llvm_options_reset(const std::function<void()>& run) {
  initialize_llvm();
  std::unique_lock<std::shared_mutex> lock(llvm_options_mutex);
  struct Restore {
    ~Restore() { set_kiln_llvm_options(); }
  } restore;
  run();
}

namespace {

[[noreturn]] void refuse(const std::string& msg) {
  throw CompileError(ErrorStage::Codegen, {}, msg);
}

// The LLVM target of t's triple, which must be one kiln supports.
const llvm::Target& supported_target(const Target& t, llvm::Triple& triple) {
  initialize_llvm();
  std::string error;
  triple = llvm::Triple(llvm::Triple::normalize(t.triple));
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple.getTriple(), error);
  if (!target) refuse("unknown target triple '" + t.triple + "': " + error);
  bool arch = triple.getArch() == llvm::Triple::x86_64 || triple.getArch() == llvm::Triple::aarch64;
  if (!arch || !triple.isOSLinux() || !triple.isOSBinFormatELF()) {
    refuse("target '" + t.triple +
           "' is not supported: kiln generates code for x86-64 and aarch64 (little-endian) "
           "Linux, as x86_64-linux-gnu or aarch64-linux-gnu");
  }
  return *target;
}

// Features that would take an x86-64 target out of 64-bit mode: LLVM aborts
// the process on them instead of reporting an error.
bool changes_mode(const llvm::Triple& triple, const std::string& feature) {
  if (triple.getArch() != llvm::Triple::x86_64) return false;
  return feature == "-64bit" || feature == "-64bit-mode" || feature == "+32bit-mode" ||
         feature == "+16bit-mode";
}

void check_target_with_llvm(const Target& t) {
  llvm::Triple triple;
  const llvm::Target& target = supported_target(t, triple);
  // Asked with no CPU, so that LLVM has nothing to warn about on stderr.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target.createMCSubtargetInfo(triple.getTriple(), "", ""));
  if (!sti) refuse("LLVM cannot describe the CPUs of '" + t.triple + "'");
  if (!t.cpu.empty() && t.cpu != "generic" && !sti->isCPUStringValid(t.cpu)) {
    std::string some;
    size_t n = 0;
    for (const llvm::SubtargetSubTypeKV& cpu : sti->getAllProcessorDescriptions()) {
      if (n++ < 6) some += std::string(some.empty() ? "" : ", ") + cpu.Key;
    }
    refuse("unknown CPU '" + t.cpu + "' for " + t.triple + " (LLVM knows " + std::to_string(n) +
           ", among them " + some + ")");
  }
  std::set<std::string> known;
  for (const llvm::SubtargetFeatureKV& f : sti->getAllProcessorFeatures()) known.insert(f.Key);
  llvm::SmallVector<llvm::StringRef, 16> features;
  llvm::StringRef(t.features).split(features, ',', -1, false);
  for (llvm::StringRef f : features) {
    std::string feature = f.trim().str();
    if (feature.size() < 2 || (feature[0] != '+' && feature[0] != '-')) {
      refuse("feature '" + feature + "' for " + t.triple +
             " must be +NAME (turn on) or -NAME (turn off)");
    }
    if (known.count(feature.substr(1)) == 0) {
      refuse("unknown feature '" + feature.substr(1) + "' for " + t.triple);
    }
    if (changes_mode(triple, feature)) {
      refuse("feature '" + feature + "' would take " + t.triple +
             " out of 64-bit mode, which kiln's code needs");
    }
  }
}

}  // namespace

void check_target(const Target& t) {
  // Every compilation asks (kiln::compile, then the target machine): a target
  // accepted once is remembered, so the hot path does not rebuild LLVM's CPU
  // and feature tables. Refusals are not cached; they end the compilation.
  static std::mutex mu;
  static std::set<std::string> accepted;
  std::string key = t.triple + '\n' + t.cpu + '\n' + t.features;
  {
    std::lock_guard<std::mutex> guard(mu);
    if (accepted.count(key) != 0) return;
  }
  check_target_with_llvm(t);
  std::lock_guard<std::mutex> guard(mu);
  accepted.insert(std::move(key));
}

namespace {

// The CPU features LLVM knows for a triple.
const std::set<std::string>& known_features(const std::string& triple_text) {
  static std::mutex mu;
  static std::map<std::string, std::set<std::string>> known;
  std::lock_guard<std::mutex> guard(mu);
  auto found = known.find(triple_text);
  if (found != known.end()) return found->second;
  std::set<std::string>& out = known[triple_text];
  llvm::Triple triple;
  const llvm::Target& target = supported_target(Target{triple_text, "", ""}, triple);
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target.createMCSubtargetInfo(triple.getTriple(), "", ""));
  if (sti)
    for (const llvm::SubtargetFeatureKV& f : sti->getAllProcessorFeatures()) out.insert(f.Key);
  return out;
}

}  // namespace

ir::TargetFacts target_facts(const Target& t) {
  ir::TargetFacts facts;
  facts.has_feature = [t](const std::string& feature) { return target_has_feature(t, feature); };
  bool arm = t.triple.starts_with("aarch64");
  bool avx512 = !arm && target_has_feature(t, "avx512f");
  bool avx = !arm && target_has_feature(t, "avx");
  facts.sizes["vector_bytes"] = avx512 ? 64 : avx ? 32 : 16;
  facts.sizes["vector_registers"] = arm || avx512 ? 32 : 16;
  for (auto [name, bytes] : {std::pair{"l1d_bytes", t.l1d_bytes}, std::pair{"l2_bytes", t.l2_bytes},
                             std::pair{"l3_bytes", t.l3_bytes}})
    if (bytes > 0) facts.sizes[name] = bytes;
  return facts;
}

bool target_has_feature(const Target& t, const std::string& feature) {
  llvm::Triple triple;
  const llvm::Target& target = supported_target(t, triple);
  if (!known_features(triple.getTriple()).count(feature)) {
    for (const char* other : {"x86_64-linux-gnu", "aarch64-linux-gnu"})
      if (known_features(other).count(feature)) return false;
    refuse("'" + feature + "' is not a CPU feature LLVM knows for x86-64 or aarch64");
  }
  // The feature list's own word, the last one, decides (the list as LLVM gets it).
  const std::string features = llvm_features(t);
  llvm::SmallVector<llvm::StringRef, 16> words;
  llvm::StringRef(features).split(words, ',', -1, false);
  for (auto w = words.rbegin(); w != words.rend(); ++w) {
    llvm::StringRef word = w->trim();
    if (word.size() > 1 && word.drop_front() == feature) return word.front() == '+';
  }
  // Else the CPU's: asked once per CPU and feature.
  static std::mutex mu;
  static std::map<std::string, bool> answers;
  std::string key = triple.getTriple() + '\n' + t.cpu + '\n' + feature;
  std::lock_guard<std::mutex> guard(mu);
  auto found = answers.find(key);
  if (found != answers.end()) return found->second;
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target.createMCSubtargetInfo(triple.getTriple(), t.cpu.empty() ? "generic" : t.cpu, ""));
  bool has = sti && sti->checkFeatures("+" + feature);
  answers[key] = has;
  return has;
}

std::string llvm_features(const Target& t) {
  if (llvm::Triple(llvm::Triple::normalize(t.triple)).getArch() != llvm::Triple::x86_64)
    return t.features;
  llvm::SmallVector<llvm::StringRef, 16> words;
  llvm::StringRef(t.features).split(words, ',', -1, false);
  bool avx512 = false;
  for (llvm::StringRef w : words) {
    w = w.trim();
    if (w.drop_front().starts_with("evex512")) return t.features;  // said either way
    avx512 = avx512 || w.starts_with("+avx512");
  }
  return avx512 ? t.features + ",+evex512" : t.features;
}

std::unique_ptr<llvm::TargetMachine> make_target_machine(const Target& t, int opt_level) {
  check_target(t);
  llvm::Triple triple;
  const llvm::Target* target = &supported_target(t, triple);
  llvm::TargetOptions options;
  llvm::CodeGenOptLevel level = opt_level <= 0   ? llvm::CodeGenOptLevel::None
                                : opt_level == 1 ? llvm::CodeGenOptLevel::Less
                                : opt_level == 2 ? llvm::CodeGenOptLevel::Default
                                                 : llvm::CodeGenOptLevel::Aggressive;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple.getTriple(), t.cpu.empty() ? "generic" : t.cpu, llvm_features(t), options,
      llvm::Reloc::PIC_, std::nullopt, level));
  if (!tm)
    throw CompileError(ErrorStage::Codegen, {}, "LLVM cannot generate code for '" + t.triple + "'");
  return tm;
}

namespace {

// Whether kiln vectorized m's loops itself: it has vector arithmetic, and no
// loop asks LLVM's loop vectorizer for help (a loop tagged vectorize that kiln
// could not vectorize carries llvm.loop.vectorize.enable).
bool vectorized_by_kiln(const llvm::Module& m) {
  bool vectors = false;
  for (const llvm::Function& f : m) {
    for (const llvm::BasicBlock& b : f) {
      for (const llvm::Instruction& i : b) {
        if (const llvm::MDNode* loop = i.getMetadata(llvm::LLVMContext::MD_loop)) {
          for (const llvm::MDOperand& op : loop->operands()) {
            const auto* entry = llvm::dyn_cast_or_null<llvm::MDNode>(op.get());
            if (!entry || entry->getNumOperands() == 0) continue;
            const auto* key = llvm::dyn_cast<llvm::MDString>(entry->getOperand(0));
            if (key && key->getString() == "llvm.loop.vectorize.enable") return false;
          }
        }
        if (!vectors && i.getType()->isVectorTy() && i.getType()->isFPOrFPVectorTy() &&
            llvm::isa<llvm::BinaryOperator, llvm::CallInst>(i))
          vectors = true;
      }
    }
  }
  return vectors;
}

// Passes of LLVM's -O2/-O3 pipeline that change nothing in x86-64 code kiln
// vectorized itself: with them left out, the machine code of every example,
// benchmark kernel and polybench kernel (AVX-512 and AVX2, -O2 and -O3) is
// byte for byte the same (IdlePasses.LeaveTheCodeAsItWas checks it), and a
// GEMM candidate's "llvm optimize" took 13.5 ms instead of 16 (docs/codegen.md).
// They are interprocedural passes for code with calls between functions
// (kiln's thunks call their bodies once, inlined), OpenMP and coroutine
// passes, and scalar clean-ups whose work kiln's passes (simplify, CSE, LICM)
// or the passes that stay have done already. A pass that does change the code
// of some kernel stays (loop idiom recognition, loop unswitching, jump
// threading, tail calls, value propagation, vector combining, DSE, EarlyCSE,
// reassociation, induction variable simplification).
constexpr std::string_view kIdlePasses[] = {
    "AggressiveInstCombinePass",
    "ADCEPass",
    "ArgumentPromotionPass",
    "BDCEPass",
    "CGProfilePass",
    "CallSiteSplittingPass",
    "CalledValuePropagationPass",
    "ConstantMergePass",
    "ConstraintEliminationPass",
    "ControlHeightReductionPass",
    "DeadArgumentEliminationPass",
    "DivRemPairsPass",
    "Float2IntPass",
    "GlobalOptPass",
    "IPSCCPPass",
    "InferFunctionAttrsPass",
    "InstSimplifyPass",
    "LibCallsShrinkWrapPass",
    "LoopDistributePass",
    "LoopInstSimplifyPass",
    "LoopLoadEliminationPass",
    "LoopSimplifyCFGPass",
    "LoopSinkPass",
    "MemCpyOptPass",
    "MergedLoadStoreMotionPass",
    "MoveAutoInitPass",
    "OpenMPOptCGSCCPass",
    "OpenMPOptPass",
    "PostOrderFunctionAttrsPass",
    "RelLookupTableConverterPass",
    "ReversePostOrderFunctionAttrsPass",
    "SCCPPass",
    "SpeculativeExecutionPass",
    "WarnMissedTransformationsPass",
};

bool idle_pass(llvm::StringRef name) {
  return std::find(std::begin(kIdlePasses), std::end(kIdlePasses), std::string_view(name)) !=
         std::end(kIdlePasses);
}

}  // namespace

void optimize(llvm::Module& m, llvm::TargetMachine& tm, int opt_level, bool every_pass) {
  m.setTargetTriple(tm.getTargetTriple().getTriple());
  m.setDataLayout(tm.createDataLayout());
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  // Code kiln vectorized needs no vectorizer of LLVM's: they cost time and
  // find nothing. Nor LLVM's partial and runtime unrolling, which copies the
  // vector bodies kiln already unrolled (a register tile's FMAs, a packing
  // copy's rows) 2-8 times more for the rest of the pipeline and instruction
  // selection to chew: without it a GEMM candidate compiled in 52 ms instead
  // of 58 (warm candidates 57 instead of 65) at the same speed, the matmul
  // and conv3d of bench_licm ran 20% faster, trmm 10% slower (docs/codegen.md).
  // Full unrolling of loops with few constant trips stays (the conv's kx loop
  // of 3: 0.95 of oneDNN with it, 0.71 without), as do loops tagged unroll.
  bool vectorized = vectorized_by_kiln(m);
  tuning.LoopVectorization = opt_level >= 2 && !vectorized;
  tuning.SLPVectorization = opt_level >= 2 && !vectorized;
  // Measured on x86-64 only: aarch64 code keeps LLVM's unroller (in-order
  // cores lean on it to schedule, and no ARM board was at hand to measure).
  bool partial_unrolling = !(vectorized && opt_level >= 2 && tm.getTargetTriple().isX86());
  // LoopUnrolling = false turns off both of LLVM's unrollers except where a
  // loop asks for it; full unrolling comes back below.
  tuning.LoopUnrolling = partial_unrolling;
  // Measured on x86-64 only, as the unrollers above.
  llvm::PassInstrumentationCallbacks instrumentation;
  if (vectorized && opt_level >= 2 && tm.getTargetTriple().isX86() && !every_pass)
    instrumentation.registerShouldRunOptionalPassCallback(
        [](llvm::StringRef name, llvm::Any) { return !idle_pass(name); });
  llvm::PassBuilder pb(&tm, tuning, std::nullopt, &instrumentation);
  if (!partial_unrolling)
    pb.registerLateLoopOptimizationsEPCallback(
        [](llvm::LoopPassManager& lpm, llvm::OptimizationLevel level) {
          lpm.addPass(llvm::LoopFullUnrollPass(static_cast<int>(level.getSpeedupLevel()),
                                               /*OnlyWhenForced=*/false,
                                               /*ForgetSCEV=*/false));
        });
  pb.registerOptimizerLastEPCallback(
      [](llvm::ModulePassManager& mpm, llvm::OptimizationLevel level) {
        if (level.getSpeedupLevel() >= 2)
          mpm.addPass(llvm::createModuleToFunctionPassAdaptor(AccumulateFromZero()));
      });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel level = opt_level <= 0   ? llvm::OptimizationLevel::O0
                                  : opt_level == 1 ? llvm::OptimizationLevel::O1
                                  : opt_level == 2 ? llvm::OptimizationLevel::O2
                                                   : llvm::OptimizationLevel::O3;
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(m, mam);
}

namespace {

// The kiln name of the loop whose header is `header`, from the loop
// metadata on its back edge (kLoopNameKey), or empty.
std::string loop_name(const llvm::BasicBlock& header) {
  for (const llvm::BasicBlock* pred : llvm::predecessors(&header)) {
    const llvm::MDNode* md = pred->getTerminator()->getMetadata(llvm::LLVMContext::MD_loop);
    if (!md) continue;
    for (const llvm::MDOperand& op : md->operands()) {
      const auto* entry = llvm::dyn_cast_or_null<llvm::MDNode>(op.get());
      if (!entry || entry->getNumOperands() != 2) continue;
      const auto* key = llvm::dyn_cast<llvm::MDString>(entry->getOperand(0));
      const auto* value = llvm::dyn_cast<llvm::MDString>(entry->getOperand(1));
      if (key && value && key->getString() == kLoopNameKey) return value->getString().str();
    }
  }
  return "";
}

// What LLVM says about one kernel, in words a user can place: the kernel,
// and the loop when LLVM speaks of one kiln named.
std::string describe(const std::string& func, const llvm::DiagnosticInfo& d) {
  std::string where = func;
  if (const auto* ir = llvm::dyn_cast<llvm::DiagnosticInfoIROptimization>(&d)) {
    if (const auto* block = llvm::dyn_cast_or_null<llvm::BasicBlock>(ir->getCodeRegion())) {
      std::string loop = loop_name(*block);
      if (!loop.empty()) where += ", loop '" + loop + "'";
    }
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  if (const auto* opt = llvm::dyn_cast<llvm::DiagnosticInfoOptimizationBase>(&d)) {
    os << opt->getMsg();
  } else {
    llvm::DiagnosticPrinterRawOStream printer(os);
    d.print(printer);
  }
  return where + ": " + text + " (LLVM)";
}

class Diagnostics final : public llvm::DiagnosticHandler {
 public:
  Diagnostics(std::string func, std::function<void(const std::string&)> note,
              std::shared_ptr<std::string> error)
      : func_(std::move(func)), note_(std::move(note)), error_(std::move(error)) {}

  bool handleDiagnostics(const llvm::DiagnosticInfo& d) override {
    if (d.getSeverity() == llvm::DS_Error) {
      if (error_->empty()) *error_ = describe(func_, d);
    } else if (note_ && d.getSeverity() != llvm::DS_Note) {
      note_(describe(func_, d));
    }
    return true;
  }

 private:
  std::string func_;
  std::function<void(const std::string&)> note_;
  std::shared_ptr<std::string> error_;
};

}  // namespace

void check_llvm_errors(const OptimizedModule& m) {
  if (!m.llvm_error->empty()) throw CompileError(ErrorStage::Codegen, {}, *m.llvm_error);
}

OptimizedModule optimized_module(const ir::LoweredFunc& f, const Options& opts,
                                 llvm::LLVMContext& ctx, Builtins builtins) {
  OptimizedModule out;
  out.llvm_error = std::make_shared<std::string>();
  ctx.setDiagnosticHandler(std::make_unique<Diagnostics>(f.name, opts.note, out.llvm_error),
                           /*RespectFilters=*/true);
  {
    TimedPart part("llvm ir");
    out.module = build_module(f, opts, ctx);
  }
  if (builtins == Builtins::Freestanding) {
    for (llvm::Function& fn : *out.module) {
      if (!fn.isDeclaration()) fn.addFnAttr("no-builtins");
    }
  }
  out.machine = make_target_machine(opts.target, opts.opt_level);
  TimedPart part("llvm optimize");
  optimize(*out.module, *out.machine, opts.opt_level, opts.every_llvm_pass);
  check_llvm_errors(out);
  return out;
}

std::vector<char> machine_code(OptimizedModule& m, llvm::CodeGenFileType type) {
  TimedPart part("machine code");
  std::shared_lock<std::shared_mutex> options = llvm_options_in_use();
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (m.machine->addPassesToEmitFile(pm, os, nullptr, type)) {
    throw CompileError(
        ErrorStage::Codegen, {},
        "LLVM cannot emit this kind of file for " + m.machine->getTargetTriple().getTriple());
  }
  pm.run(*m.module);
  check_llvm_errors(m);
  return std::vector<char>(buffer.begin(), buffer.end());
}

}  // namespace kiln::codegen

std::string kiln::codegen::backend_version() { return std::string("LLVM ") + LLVM_VERSION_STRING; }

// kiln/target.h declares it; LLVM knows the host. Asked once: every default
// CompileOptions starts from it.
kiln::Target kiln::Target::host() {
  static const Target host = [] {
    Target t;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = llvm::sys::getHostCPUName().str();
    for (const auto& [name, on] : llvm::sys::getHostCPUFeatures()) {
      t.features += (t.features.empty() ? "" : ",") + std::string(on ? "+" : "-") + name.str();
    }
    host_caches(t);
    return t;
  }();
  return host;
}

kiln::Target kiln::Target::named(std::string_view triple, std::string_view cpu,
                                 std::string_view features) {
  // Another triple is another machine: its caches are not this one's.
  if (!triple.empty()) return Target{std::string(triple), std::string(cpu), std::string(features)};
  Target t = host();
  if (!cpu.empty()) {
    t.cpu = cpu;
    t.features = features;
  } else if (!features.empty()) {
    t.features += (t.features.empty() ? "" : ",") + std::string(features);
  }
  return t;
}
