// Shared objects for any target: a freestanding object file from LLVM, linked in-process by lld.
#include <lld/Common/Driver.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>

#include "kiln/digest.h"
#include "kiln/timing.h"
#include "target_machine.h"

LLD_HAS_DRIVER(elf)

namespace kiln::codegen {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw CompileError(ErrorStage::Link, {}, msg); }

// What a loaded kernel may ask of its loader: the runtime, and the libm
// functions LLVM lowers math intrinsics it cannot inline to (exp, log, sin,
// cos, pow; sqrt, floor, ceil and fabs are instructions on x86-64 and aarch64,
// but a generic CPU may still call them).
bool allowed_import(const std::string& name) {
  static const std::set<std::string> runtime = {"kiln_parallel_launch", "kiln_alloc", "kiln_free"};
  static const std::set<std::string> libm = {"expf",   "exp",   "logf",  "log",  "sinf",  "sin",
                                             "cosf",   "cos",   "powf",  "pow",  "sqrtf", "sqrt",
                                             "floorf", "floor", "ceilf", "ceil", "fabsf", "fabs"};
  return runtime.count(name) > 0 || libm.count(name) > 0;
}

// A folder of our own under the system's temporary folder, removed with its
// contents when the value goes away: lld reads and writes files only.
class ScratchDir {
 public:
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "kiln-link-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr)
      fail("cannot make a temporary folder for the linker in " +
           std::filesystem::temp_directory_path().string());
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("cannot write " + path);
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("the linker wrote no " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// lld keeps global state while it links: one link at a time in the process.
// After a crash it may refuse to run again, and then every later link fails.
std::mutex lld_mutex;
bool lld_usable = true;

std::vector<char> link_shared(const std::vector<std::vector<char>>& objects,
                              const std::string& soname) {
  TimedPart part("link");
  ScratchDir dir;
  std::string so = dir.file(soname);
  std::vector<std::string> files;
  for (size_t k = 0; k < objects.size(); ++k) {
    files.push_back(dir.file("kernel" + std::to_string(k) + ".o"));
    write_file(files.back(), objects[k]);
  }
  std::vector<const char*> args = {
      "ld.lld", "-shared", "-soname", soname.c_str(), "--hash-style=both",
      "-z",     "now",     "-o",      so.c_str()};
  for (const std::string& f : files) args.push_back(f.c_str());
  std::string out_text, err_text;
  llvm::raw_string_ostream out(out_text), err(err_text);
  {
    std::lock_guard<std::mutex> guard(lld_mutex);
    if (!lld_usable) fail("the in-process linker failed earlier and cannot run again");
    // lld resets LLVM's options, which kiln's code generation reads.
    lld::Result r;
    with_llvm_options_reset([&] {
      r = lld::lldMain(args, out, err, {{lld::Gnu, &lld::elf::link}});
    });
    if (!r.canRunAgain) lld_usable = false;
    out.flush();
    err.flush();
    if (r.retCode != 0) fail("lld could not link " + soname + ": " + err_text);
  }
  return read_file(so);
}

}  // namespace

std::vector<std::string> shared_object_imports(const std::vector<char>& so) {
  llvm::MemoryBufferRef ref(llvm::StringRef(so.data(), so.size()), "kernel.so");
  auto file = llvm::object::ObjectFile::createObjectFile(ref);
  if (!file) fail("not an object file: " + llvm::toString(file.takeError()));
  const auto* elf = llvm::dyn_cast<llvm::object::ELFObjectFileBase>(file->get());
  if (elf == nullptr) fail("not an ELF shared object");
  std::set<std::string> names;
  for (const llvm::object::ELFSymbolRef& sym : elf->getDynamicSymbolIterators()) {
    llvm::Expected<uint32_t> flags = sym.getFlags();
    llvm::Expected<llvm::StringRef> name = sym.getName();
    if (!flags || !name) {
      llvm::consumeError(flags.takeError());
      llvm::consumeError(name.takeError());
      fail("unreadable dynamic symbol table");
    }
    if ((*flags & llvm::object::SymbolRef::SF_Undefined) && !name->empty())
      names.insert(name->str());
  }
  return std::vector<std::string>(names.begin(), names.end());
}

namespace {

// Refuses a shared object that needs more than kiln's runtime and libm.
void check_imports(const std::vector<char>& so, const std::string& what, const Target& target) {
  for (const std::string& name : shared_object_imports(so)) {
    if (!allowed_import(name))
      fail("the shared object of " + what + " for " + target.triple + " needs '" + name +
           "', which neither kiln's runtime nor libm provides");
  }
}

// The object file of a model's two tables: `kiln_model_plan`, the plan's text and a NUL, and
// `kiln_model_kernels`, the kernels' entry points in order.
std::vector<char> model_table(const std::vector<ir::LoweredFunc>& kernels, const std::string& name,
                              const std::string& plan, const Options& opts) {
  llvm::LLVMContext ctx;
  OptimizedModule m;
  m.llvm_error = std::make_shared<std::string>();
  m.machine = make_target_machine(opts.target, opts.opt_level);
  m.module = std::make_unique<llvm::Module>("kiln.model." + name, ctx);
  m.module->setTargetTriple(m.machine->getTargetTriple().getTriple());
  m.module->setDataLayout(m.machine->createDataLayout());
  llvm::Constant* text = llvm::ConstantDataArray::getString(ctx, plan, /*AddNull=*/true);
  new llvm::GlobalVariable(*m.module, text->getType(), /*isConstant=*/true,
                           llvm::GlobalValue::ExternalLinkage, text, "kiln_model_plan");
  auto* entry_ty = llvm::FunctionType::get(
      llvm::Type::getInt32Ty(ctx), {llvm::PointerType::get(ctx, 0), llvm::Type::getInt32Ty(ctx)},
      /*isVarArg=*/false);
  std::vector<llvm::Constant*> entries;
  for (const ir::LoweredFunc& f : kernels) {
    entries.push_back(llvm::cast<llvm::Constant>(
        m.module->getOrInsertFunction(entry_symbol(f), entry_ty).getCallee()));
  }
  auto* table_ty = llvm::ArrayType::get(llvm::PointerType::get(ctx, 0), entries.size());
  new llvm::GlobalVariable(*m.module, table_ty, /*isConstant=*/true,
                           llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantArray::get(table_ty, entries), "kiln_model_kernels");
  return machine_code(m, llvm::CodeGenFileType::ObjectFile);
}

}  // namespace

std::vector<char> compile_shared_object(const ir::LoweredFunc& f, const Options& opts) {
  llvm::LLVMContext ctx;
  OptimizedModule m = optimized_module(f, opts, ctx, Builtins::Freestanding);
  std::vector<char> object = machine_code(m, llvm::CodeGenFileType::ObjectFile);
  std::vector<char> so = link_shared({object}, "lib" + entry_symbol(f) + ".so");
  check_imports(so, f.name, opts.target);
  return so;
}

std::vector<char> compile_model_shared_object(const std::vector<ir::LoweredFunc>& kernels,
                                              const std::string& name, const std::string& plan,
                                              const Options& opts) {
  std::vector<std::vector<char>> objects;
  std::set<std::string> symbols;
  for (const ir::LoweredFunc& f : kernels) {
    if (!symbols.insert(entry_symbol(f)).second)
      fail("two kernels of model " + name + " are both named " + f.name);
    llvm::LLVMContext ctx;
    OptimizedModule m = optimized_module(f, opts, ctx, Builtins::Freestanding);
    objects.push_back(machine_code(m, llvm::CodeGenFileType::ObjectFile));
  }
  objects.push_back(model_table(kernels, name, plan, opts));
  std::vector<char> so = link_shared(objects, "lib" + name + ".so");
  check_imports(so, "model " + name, opts.target);
  return so;
}

Artifact compile_artifact(const ir::LoweredFunc& f, const Options& opts, std::string key) {
  Artifact a;
  a.name = f.name;
  a.triple = opts.target.triple;
  a.cpu = opts.target.cpu;
  a.features = opts.target.features;
  a.opt_level = opts.opt_level;
  a.fast_math = f.fast_math;
  a.entry = entry_symbol(f);
  a.args = artifact_args(f);
  a.code = compile_shared_object(f, opts);
  a.imports = shared_object_imports(a.code);
  a.code_sha256 = sha256_hex(std::string_view(a.code.data(), a.code.size()));
  a.key = std::move(key);
  a.checks = f.checks;
  return a;
}

}  // namespace kiln::codegen
