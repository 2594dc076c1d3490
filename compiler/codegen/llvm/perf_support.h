// Telling Linux perf about JIT code: with KILN_PERF set, every kernel the JIT
// links is written to a jitdump file, so profiles name kiln's functions.
#pragma once

#include <llvm/ExecutionEngine/Orc/LLJIT.h>

namespace kiln::codegen {

// True when the environment asks for it (KILN_PERF set, and not "0").
bool perf_support_requested();

// From now on, every object jit links is described to perf: each function of
// a kernel (the entry and its outlined parallel bodies) by name, with its code
// and unwind tables, in jit-PID.dump under $JITDUMPDIR (else ~/.debug/jit/).
// `perf record -k 1`, then `perf inject --jit`, give named, annotated JIT code.
// A profiling aid only: when perf cannot be served, a warning goes to stderr
// and the JIT works as before.
void describe_jit_code_to_perf(llvm::orc::LLJIT& jit);

}  // namespace kiln::codegen
