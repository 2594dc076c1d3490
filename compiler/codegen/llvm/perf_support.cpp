#include "perf_support.h"

#include <fcntl.h>
#include <llvm/ExecutionEngine/JITLink/JITLink.h>
#include <llvm/ExecutionEngine/Orc/Debugging/PerfSupportPlugin.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace kiln::codegen {

namespace {

// LLVM 19 writes the jitdump header's flags word uninitialized, and perf
// refuses a file with unknown flags ("jitdump file contains invalid or
// unsupported flags"). The file is mapped into this process (that mapping is
// how perf finds it): find it there and zero the word (offset 32; no flag is
// needed, as the timestamps are CLOCK_MONOTONIC). False when there is no such
// file yet.
bool clear_jitdump_flags() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::string wanted = "/jit-" + std::to_string(getpid()) + ".dump";
  while (std::getline(maps, line)) {
    if (line.size() < wanted.size() ||
        line.compare(line.size() - wanted.size(), wanted.size(), wanted) != 0)
      continue;
    std::string path = line.substr(line.find('/'));
    int fd = open(path.c_str(), O_WRONLY);
    const uint64_t flags = 0;
    bool ok = fd >= 0 && pwrite(fd, &flags, sizeof flags, 32) == sizeof flags;
    if (fd >= 0) close(fd);
    if (!ok) std::fprintf(stderr, "kiln: cannot fix the jitdump header of %s\n", path.c_str());
    return true;
  }
  return false;
}

// A kernel's outlined functions are called from the entry by pc-relative calls
// the assembler resolved, so no edge keeps their symbols alive and JITLink
// prunes the names (the code stays: it shares the entry's .text block). Keeping
// every named function live lets perf see all of them, not only the entry.
llvm::Error keep_function_names(llvm::jitlink::LinkGraph& g) {
  for (llvm::jitlink::Symbol* s : g.defined_symbols())
    if (s->hasName() && s->isCallable()) s->setLive(true);
  return llvm::Error::success();
}

// What LLVM's PerfSupportPlugin needs around it: every function's name kept,
// and the jitdump header repaired once its first write has reached the file
// (LLVM buffers the header until the first kernel's records).
class PerfFixups : public llvm::orc::ObjectLinkingLayer::Plugin {
 public:
  void modifyPassConfig(llvm::orc::MaterializationResponsibility&, llvm::jitlink::LinkGraph&,
                        llvm::jitlink::PassConfiguration& config) override {
    config.PrePrunePasses.emplace_back(keep_function_names);
  }
  llvm::Error notifyEmitted(llvm::orc::MaterializationResponsibility&) override {
    if (!header_fixed_.load()) header_fixed_ = clear_jitdump_flags();
    return llvm::Error::success();
  }
  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility&) override {
    return llvm::Error::success();
  }
  llvm::Error notifyRemovingResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey) override {
    return llvm::Error::success();
  }
  void notifyTransferringResources(llvm::orc::JITDylib&, llvm::orc::ResourceKey,
                                   llvm::orc::ResourceKey) override {}

 private:
  std::atomic<bool> header_fixed_{false};
};

}  // namespace

bool perf_support_requested() {
  const char* v = std::getenv("KILN_PERF");
  return v && *v && std::strcmp(v, "0") != 0;
}

void describe_jit_code_to_perf(llvm::orc::LLJIT& jit) {
  auto* linker = llvm::dyn_cast<llvm::orc::ObjectLinkingLayer>(&jit.getObjLinkingLayer());
  if (!linker) {
    std::fprintf(stderr, "kiln: KILN_PERF is set, but this JIT does not link with JITLink\n");
    return;
  }
  // No line tables: kiln's modules carry no debug info. The executor's side of the plugin
  // (llvm_orc_registerJITLoaderPerf*) is in libLLVM, found through the main JITDylib's search of
  // the process.
  auto plugin = llvm::orc::PerfSupportPlugin::Create(
      jit.getExecutionSession().getExecutorProcessControl(), jit.getMainJITDylib(),
      /*EmitDebugInfo=*/false, /*EmitUnwindInfo=*/true);
  if (!plugin) {
    std::fprintf(stderr, "kiln: KILN_PERF is set, but perf cannot be told of JIT code: %s\n",
                 llvm::toString(plugin.takeError()).c_str());
    return;
  }
  // Plugins run in the order added: the names are kept before the pruning
  // that perf's plugin would otherwise see the result of.
  linker->addPlugin(std::make_unique<PerfFixups>());
  linker->addPlugin(std::move(*plugin));
}

}  // namespace kiln::codegen
