// The compile pipeline (DESIGN.md sections 1 and 5): one operator from the IR
// the frontend validated to loop IR, LLVM IR, assembly, a kernel in this
// process, or an artifact for any target. compile() in compiler/pipeline/
// compile.cpp runs the stages in order, one call each, and is the only place
// they are strung together: the CLI, kilnd, compiled graphs, the tests and
// the benchmarks all compile through it, so equal requests give equal results.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/codegen.h"
#include "kiln/cuda.h"
#include "kiln/ir.h"
#include "kiln/limits.h"
#include "kiln/loop_ir.h"
#include "kiln/passes.h"
#include "kiln/poly.h"
#include "kiln/target.h"
#include "kiln/timing.h"

namespace kiln {

// Where the pipeline stops, and so what compile() returns.
enum class CompileOutput : uint8_t {
  Schedule,  // the schedule applied and checked against the dependences (`kiln check`)
  Loops,     // loop IR after the passes (`kiln emit --stage loops`, the loop interpreter)
  LlvmIr,    // LLVM IR after LLVM's optimizer, as text
  Assembly,  // the target's assembly, as text
  Kernel,    // machine code loaded into this process (the target must be the host)
  Artifact,  // a shared object for the target, with what describes it
  // GPU targets (nvptx64-nvidia-cuda, the CPU naming the architecture: sm_90) stop at Cuda
  // (the CUDA program: kernels and launches) or Assembly (also NVRTC's PTX as text, and the
  // cubin in CompileResult::cuda_binary); the other outputs are CPU-only.
  Cuda,
};
const char* compile_output_name(CompileOutput o);  // "schedule", "loops", "llvm", ...

// How an operator is compiled: everything but the operator itself. A graph's
// operators are all compiled with one CompileOptions.
struct CompileOptions {
  Target target = Target::host();
  int opt_level = 3;           // 0..3: the pass pipeline's level and LLVM's
  bool apply_schedule = true;  // false: the algorithm's own loop order (--no-schedule)
  passes::PassOptions passes;  // passes required or disabled beyond the level, their options
  passes::PassInstrument instrument{};  // sees each pass; changes nothing, not in the key
  // Bounds on the work (docs/limits.md); not in the key: a limit decides
  // whether a compilation finishes, never what it gives.
  Limits limits{};
  // A graph (graph::compile_model): the knobs' values of its operators by their workload
  // (workload_hash below), as a model's tuning records give them; an operator not named keeps
  // its knobs' defaults. Each operator's values are its compile's overrides, so they are in
  // its kernel's key.
  std::map<std::string, ir::Overrides> workload_knobs{};
};

struct CompileRequest {
  ir::Func func{};            // as the frontend (or OperatorDef validation) made it
  ir::Overrides overrides{};  // compile-time params and knobs: --set, or a tuner's point
  CompileOptions options{};
  CompileOutput output = CompileOutput::Kernel;
};

// How long one stage took.
struct StageTime {
  const char* stage;  // "overrides", "schedule", "lower", "passes", "codegen"
  double ms = 0;
};

struct CompileResult {
  std::string key;                               // cache_key(request): known before any stage ran
  ir::Func func;                                 // the operator with the overrides applied
  std::optional<poly::ScheduledFunc> scheduled;  // output Schedule only
  ir::LoweredFunc lowered;      // the loops as lowering left them (Loops and beyond)
  ir::LoweredFunc optimized;    // after the passes (Loops and beyond)
  ir::LoweredFunc gpu_lowered;  // GPU targets: after the GPU lowering passes (Cuda and beyond)
  std::string text;             // LlvmIr, Assembly
  std::optional<codegen::Kernel> kernel;      // Kernel
  std::optional<codegen::Artifact> artifact;  // Artifact; its key is `key`
  std::optional<cuda::Program> cuda;          // GPU targets: Cuda and Assembly
  std::optional<cuda::Binary> cuda_binary;    // GPU targets: Assembly
  std::vector<StageTime> times;               // in the order the stages ran
  std::vector<PartTime> parts;                // the parts of the stages (kiln/timing.h), in order
  // What the code generator said about the kernel without refusing it (a
  // loop tagged vectorize that LLVM could not vectorize): codegen::Options::note.
  std::vector<std::string> notes;
};

// Runs the pipeline up to request.output: the overrides, the polyhedral
// schedule with its legality check, lowering, the passes of opt_level, then
// LLVM. Throws CompileError naming the stage that refused the operator.
CompileResult compile(const CompileRequest& request);

// The stages `kiln emit` shows a func at (`--stage`, EmitRequest.stage).
enum class EmitStage : uint8_t {
  Ast,       // the operator with the overrides applied, as .kiln
  Ir,        // its iteration domains and accesses
  Schedule,  // the schedule, applied and checked
  Loops,     // loop IR
  Llvm,      // LLVM IR
  Asm,       // the target's assembly (a GPU target's: PTX)
  Cuda,      // a GPU target's CUDA C++, its launches first
};

// Compiles as far as `stage` needs and returns the result with that stage's
// text in `text`. Loops are shown as lowering leaves them, no pass run,
// unless `optimizing` (an -O level or a pass option was given): the loops
// the loop interpreter runs. The CLI and kilnd both emit through this, so
// they print the same text.
CompileResult emit(CompileRequest request, EmitStage stage, bool optimizing);

// The compile cache key: SHA-256 (hex) over the canonical printed operator
// after validation and overrides, the override values, the target, the opt
// level, whether the schedule is applied, the pass options, fast math, the
// output and compiler_version(). Equal requests have equal keys; a change to
// any of these changes it. Throws CompileError as the overrides do.
std::string cache_key(const CompileRequest& request);

// The hash a tuning record's workload is named by (the tuner's workload_of): SHA-256 (hex) of
// the func's canonical text, its params' values as they are, its knobs at their defaults.
std::string workload_hash(const ir::Func& f);

// The knobs' values compile() gives `f` for `options`' target when no override sets them:
// each knob's default, by target where it declares one (`for`, `fit`). What a tuner measures
// first when nothing better is known. Throws CompileError as compile()'s overrides stage does.
std::map<std::string, int64_t> default_knobs(const ir::Func& f, const CompileOptions& options);

// The context compile() runs the loop passes under (and a graph its graph passes).
passes::PassContext pass_context(const CompileOptions& options);

// kiln's version, its code generator's and that of the isl the process calls
// ("kiln 0.1.0, LLVM 19.1.7, isl-0.25-193-g8621c60c-IMath-32"): part of every
// cache key and tuning record, so that a new compiler never serves an old
// artifact. Fixed for the process.
std::string compiler_version();

}  // namespace kiln
