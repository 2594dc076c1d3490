// kiln's Lower.cpp: the compile pipeline, stage by stage (kiln/compile.h).
#include "kiln/compile.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>

#include "kiln/digest.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// The error stage a pipeline stage reports as.
ErrorStage stage_of(std::string_view stage) {
  if (stage == "overrides") return ErrorStage::Validate;
  if (stage == "schedule") return ErrorStage::Schedule;
  if (stage == "lower") return ErrorStage::Lower;
  if (stage == "passes") return ErrorStage::Passes;
  return ErrorStage::Codegen;
}

// Times each stage into `times` as it runs.
class StageClock {
 public:
  StageClock(std::vector<StageTime>& times, const CompileRequest& request)
      : times_(times), request_(request) {}

  // Runs one stage, unless the request's deadline has passed.
  template <typename F>
  auto operator()(const char* stage, F&& run) {
    auto start = std::chrono::steady_clock::now();
    const auto& deadline = request_.options.limits.deadline;
    if (const auto& cancelled = request_.options.limits.cancelled; cancelled && cancelled())
      throw Cancelled(stage_of(stage), request_.func.where,
                      std::string("the request was cancelled before the ") + stage + " stage of " +
                          request_.func.name);
    if (deadline && start >= *deadline)
      throw DeadlineExceeded(stage_of(stage), request_.func.where,
                             std::string("the request's deadline passed before the ") + stage +
                                 " stage of " + request_.func.name);
    struct Record {
      StageClock& clock;
      const char* stage;
      std::chrono::steady_clock::time_point start;
      ~Record() {
        std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
        clock.times_.push_back(StageTime{stage, ms.count()});
      }
    } record{*this, stage, start};
    return run();
  }

 private:
  std::vector<StageTime>& times_;
  const CompileRequest& request_;
};

// Every field of the pass options is in the key: a field added to them must be
// added there too, or two different requests would share an artifact.
// (LicmOptions: ten ints, and two bools that each pad to an int.)
static_assert(sizeof(passes::LicmOptions) == 12 * sizeof(int),
              "LicmOptions changed: hash its new field in key_of");
static_assert(sizeof(passes::CseOptions) == 3 * sizeof(int),
              "CseOptions changed: hash its new field in key_of");

// The key over a func whose overrides are already applied.
std::string key_of(const CompileRequest& r, const ir::Func& func) {
  const CompileOptions& o = r.options;
  Sha256 h;
  h.add("kiln compile key 1").add(compiler_version());
  h.add(ir::to_string(func));
  h.add("target").add(o.target.triple).add(o.target.cpu).add(o.target.features);
  // The caches decide knob defaults fitted to them (`fit`).
  h.add("caches")
      .add(std::to_string(o.target.l1d_bytes))
      .add(std::to_string(o.target.l2_bytes))
      .add(std::to_string(o.target.l3_bytes));
  // GPU code is NVRTC's, whose version compiler_version() does not name.
  if (o.target.is_gpu()) h.add(cuda::nvrtc_version());
  h.add(fmt::format("O{} schedule={} fast_math={} output={}", o.opt_level, o.apply_schedule,
                    func.fast_math, compile_output_name(r.output)));
  for (const std::string& p : o.passes.required) h.add("require").add(p);
  for (const std::string& p : o.passes.disabled) h.add("disable").add(p);
  if (const std::optional<passes::LicmOptions>& l = o.passes.licm) {
    h.add(fmt::format("licm {} {} {} {} {} {} {} {} {} {} {} {}", l->threshold, l->cost_add,
                      l->cost_mul, l->cost_div, l->cost_min_max, l->cost_compare, l->cost_select,
                      l->cost_cast, l->cost_call, l->gpu, l->small_loop, l->unrolled_serial_loops));
  }
  if (const std::optional<passes::CseOptions>& c = o.passes.cse) {
    h.add(fmt::format("cse {} {} {}", c->min_uses, c->small_loop, c->commutative));
  }
  return h.hex();
}

}  // namespace

const char* compile_output_name(CompileOutput o) {
  switch (o) {
    case CompileOutput::Schedule:
      return "schedule";
    case CompileOutput::Loops:
      return "loops";
    case CompileOutput::LlvmIr:
      return "llvm";
    case CompileOutput::Assembly:
      return "asm";
    case CompileOutput::Kernel:
      return "kernel";
    case CompileOutput::Artifact:
      return "artifact";
    case CompileOutput::Cuda:
      return "cuda";
  }
  return "?";
}

passes::PassContext pass_context(const CompileOptions& options) {
  passes::PassContext ctx;
  ctx.opt_level = options.opt_level;
  ctx.target = options.target;
  ctx.options = options.passes;
  ctx.instrument = options.instrument;
  ctx.limits = options.limits;
  return ctx;
}

std::string compiler_version() {
  // Asked for every cache key: put together once.
  static const std::string version = fmt::format(
      "kiln {}, {}, {}", KILN_VERSION, codegen::backend_version(), poly::isl_version_name());
  return version;
}

namespace {

// The func as the request compiles it: its knobs' defaults for the target,
// then the overrides.
ir::Func configured(const CompileRequest& r) {
  const Target& target = r.options.target;
  ir::Func f = r.func;
  bool by_target = false;
  for (const ir::Knob& k : f.knobs) by_target = by_target || !k.target_defaults.empty() || k.fit;
  if (by_target) {
    if (target.is_gpu())
      throw CompileError(ErrorStage::Validate, f.where,
                         "knob defaults by target ('for', 'fit') are for CPUs; on a GPU target "
                         "set the knobs of " +
                             f.name + " directly");
    codegen::check_target(target);
    f = ir::apply_target_defaults(f, codegen::target_facts(target));
  }
  return ir::apply_overrides(f, r.overrides);
}

// The GPU backend's part of compile(): CUDA C++, and NVRTC's PTX and cubin for Assembly.
void gpu_codegen(const CompileRequest& request, CompileResult& out) {
  const Target& t = request.options.target;
  switch (request.output) {
    case CompileOutput::Cuda:
    case CompileOutput::Assembly:
      break;
    case CompileOutput::LlvmIr:
      throw CompileError(ErrorStage::Codegen, out.func.where,
                         "a GPU target has no LLVM IR stage: kiln generates CUDA C++ (--stage "
                         "cuda) and NVRTC makes PTX of it (--stage asm)");
    case CompileOutput::Kernel:
      throw CompileError(ErrorStage::Codegen, out.func.where,
                         "code for " + t.cpu +
                             " does not run in kiln's own process: run it "
                             "on a GPU (kiln run on a machine with one, or a "
                             "GPU agent)");
    case CompileOutput::Artifact:
      break;
    default:
      return;
  }
  // The GPU lowering passes (kiln/cuda.h), then the printer.
  out.gpu_lowered = cuda::pipeline_tiles(cuda::place_barriers(
      cuda::distribute_fills(cuda::keep_in_registers(cuda::keep_fragments(out.optimized)))));
  out.cuda = cuda::generate(out.gpu_lowered);
  out.notes.insert(out.notes.end(), out.cuda->notes.begin(), out.cuda->notes.end());
  if (request.output == CompileOutput::Cuda) {
    out.text = cuda::describe_launches(*out.cuda) + out.cuda->source;
    return;
  }
  out.cuda_binary = cuda::compile(*out.cuda, t.cpu);
  // NVRTC's warnings reach the caller as the CPU backend's do (Compile's notes).
  if (std::string log = out.cuda_binary->log; !log.empty()) {
    while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
    out.notes.push_back(out.optimized.name + ": NVRTC: " + log);
  }
  for (const std::string& note : out.cuda_binary->notes)
    out.notes.push_back(out.optimized.name + ": " + note);
  out.text = out.cuda_binary->ptx;
  if (request.output != CompileOutput::Artifact) return;
  out.artifact = cuda::compile_artifact(out.gpu_lowered, *out.cuda, *out.cuda_binary, t,
                                        request.options.opt_level, out.key);
}

}  // namespace

std::string cache_key(const CompileRequest& request) {
  return key_of(request, configured(request));
}

std::string workload_hash(const ir::Func& f) { return sha256_hex(ir::to_string(f)); }

std::map<std::string, int64_t> default_knobs(const ir::Func& f, const CompileOptions& options) {
  ir::Func resolved = configured(CompileRequest{.func = f, .options = options});
  std::map<std::string, int64_t> values;
  for (const ir::Knob& k : resolved.knobs) values[k.name] = k.value;
  return values;
}

CompileResult compile(const CompileRequest& request) {
  const CompileOptions& o = request.options;
  CompileResult out;
  StageClock clock(out.times, request);
  PartSink parts(out.parts);

  // A target kiln cannot generate code for is refused before any work is done.
  if (request.output != CompileOutput::Schedule && request.output != CompileOutput::Loops) {
    if (o.target.is_gpu())
      cuda::check_target(o.target);
    else
      codegen::check_target(o.target);
  }
  out.func = clock("overrides", [&] { return configured(request); });
  out.key = key_of(request, out.func);

  poly::ScheduledFunc scheduled =
      clock("schedule", [&] { return poly::schedule(out.func, o.apply_schedule, o.limits); });
  if (request.output == CompileOutput::Schedule) {
    out.scheduled = std::move(scheduled);
    return out;
  }

  out.lowered = clock("lower", [&] { return poly::lower(scheduled); });
  out.optimized =
      clock("passes", [&] { return passes::run_pipeline(out.lowered, pass_context(o)); });
  if (request.output == CompileOutput::Loops) return out;

  if (o.target.is_gpu()) {
    clock("codegen", [&] { gpu_codegen(request, out); });
    return out;
  }
  codegen::Options llvm{o.target, o.opt_level,
                        [&out](const std::string& note) { out.notes.push_back(note); }};
  clock("codegen", [&] {
    switch (request.output) {
      case CompileOutput::LlvmIr:
        out.text = codegen::emit_llvm(out.optimized, llvm);
        break;
      case CompileOutput::Assembly:
        out.text = codegen::emit_asm(out.optimized, llvm);
        break;
      case CompileOutput::Kernel:
        out.kernel = codegen::jit_compile(out.optimized, llvm);
        break;
      case CompileOutput::Artifact:
        out.artifact = codegen::compile_artifact(out.optimized, llvm, out.key);
        break;
      case CompileOutput::Cuda:
        throw CompileError(ErrorStage::Codegen, out.func.where,
                           "CUDA is generated for GPU targets only (--target " +
                               std::string(cuda::kTriple) + " --cpu sm_90)");
      case CompileOutput::Schedule:
      case CompileOutput::Loops:
        break;
    }
  });
  return out;
}

CompileResult emit(CompileRequest r, EmitStage stage, bool optimizing) {
  if (stage == EmitStage::Ast) {
    CompileResult out;
    out.func = configured(r);
    out.text = ir::to_string(out.func);
    return out;
  }
  switch (stage) {
    case EmitStage::Loops:
      r.output = CompileOutput::Loops;
      if (!optimizing) {
        r.options.opt_level = 0;
        r.options.passes = {};
        r.options.instrument = nullptr;
      }
      break;
    case EmitStage::Llvm:
      r.output = CompileOutput::LlvmIr;
      break;
    case EmitStage::Asm:
      r.output = CompileOutput::Assembly;
      break;
    case EmitStage::Cuda:
      r.output = CompileOutput::Cuda;
      break;
    default:
      r.output = CompileOutput::Schedule;
  }
  CompileResult out = compile(r);
  switch (stage) {
    case EmitStage::Ir:
      out.text = out.scheduled->describe_domains();
      break;
    case EmitStage::Schedule:
      out.text = out.scheduled->describe_schedule();
      break;
    case EmitStage::Loops:
      out.text = ir::to_string(optimizing ? out.optimized : out.lowered);
      break;
    default:
      break;
  }
  return out;
}

}  // namespace kiln
