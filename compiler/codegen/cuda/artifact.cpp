// The artifact of a GPU target (kiln/cuda.h): NVRTC's cubin and how to launch it.
#include <string_view>

#include "kiln/cuda.h"
#include "kiln/digest.h"

namespace kiln::cuda {

codegen::Artifact compile_artifact(const ir::LoweredFunc& f, const Program& p, const Binary& binary,
                                   const Target& target, int opt_level, std::string key) {
  codegen::Artifact a;
  a.kind = "cubin";
  a.name = f.name;
  a.triple = target.triple;
  a.cpu = target.cpu;
  a.opt_level = opt_level;
  a.fast_math = f.fast_math;
  a.args = codegen::artifact_args(f);
  a.code = binary.cubin;
  a.code_sha256 = sha256_hex(std::string_view(a.code.data(), a.code.size()));
  a.key = std::move(key);
  a.checks = f.checks;
  for (const Launch& l : p.launches)
    a.kernels.push_back({l.kernel, l.grid, l.block, l.shared_bytes});
  for (const DeviceTemp& d : p.temps) a.temps.push_back({d.name, d.dtype, d.shape});
  for (const ConstantBuffer& k : p.constants) a.constants.push_back({k.buffer, k.symbol});
  return a;
}

}  // namespace kiln::cuda
