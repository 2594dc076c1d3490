// Artifacts (DESIGN.md section 5): a compiled kernel that describes itself,
// whichever backend made it -- the CPU's shared object (kiln/codegen.h,
// codegen::compile_artifact) or the GPU's cubin (kiln/cuda.h,
// cuda::compile_artifact). Nothing here knows LLVM or NVRTC.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::codegen {

// One argument of an artifact's entry point, in the packed ABI's order.
struct ArtifactArg {
  enum class Kind : uint8_t { Param, Buffer } kind = Kind::Param;
  std::string name;
  ir::DType dtype = ir::kIndexType;       // params are i64
  ir::BufKind role = ir::BufKind::Input;  // buffers: Input or Output
  std::vector<std::string> shape;         // buffers: extents in the run-time params, as text
};

// A compiled kernel that describes itself (DESIGN.md section 5): what it was
// compiled for, how to call it, its code, and the key it is cached under.
struct Artifact {
  // "shared-object" (a CPU target), or "cubin" (a GPU target: `code` is NVRTC's cubin for the
  // architecture in `cpu`, and `kernels` and `temps` say how to run it: kiln/cuda.h).
  std::string kind = "shared-object";
  std::string name;                   // the func's
  std::string triple, cpu, features;  // Options::target
  int opt_level = 3;
  bool fast_math = false;            // the func's `option fast_math`, as compiled
  std::string entry;                 // entry_symbol(f)
  std::vector<ArtifactArg> args;     // run-time params, then buffers
  std::vector<std::string> imports;  // symbols the loader must provide
  std::vector<char> code;            // the shared object
  std::string code_sha256;           // SHA-256 of `code`: what a loader checks the bytes by
  std::string key;                   // the compile cache key (kiln/compile.h) it was made under
  // The statuses from KILN_ERR_CHECK up the kernel can return, in order: what
  // a loader reports for each (LoweredFunc::checks).
  std::vector<ir::RuntimeCheck> checks;
  struct GpuKernel {
    std::string name;
    std::array<ir::Expr, 3> grid;  // blocks along x, y, z, in the run-time params
    std::array<int64_t, 3> block{};
    int64_t shared_bytes = 0;
  };
  struct GpuTemp {
    std::string name;
    ir::DType dtype = ir::DType::F32;
    std::vector<ir::Expr> shape;
  };
  // An input read from constant memory: copied into the module's global `symbol` once the
  // inputs are on the device (kiln/cuda.h, ConstantBuffer).
  struct GpuConstant {
    std::string buffer;
    std::string symbol;
  };
  std::vector<GpuKernel> kernels;      // cubin: in launch order
  std::vector<GpuTemp> temps;          // cubin: device temporaries
  std::vector<GpuConstant> constants;  // cubin: inputs in constant memory

  // The metadata (everything but the code) as one JSON object, for
  // `kiln compile`'s out.so.json and for agents.
  std::string metadata_json() const;
};

// The entry point's arguments of f, in the packed ABI's order (params, then buffers): what
// every artifact of f lists, whatever its code.
std::vector<ArtifactArg> artifact_args(const ir::LoweredFunc& f);

}  // namespace kiln::codegen
