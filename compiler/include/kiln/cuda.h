// GPU code generation (DESIGN.md section 5): loop IR to CUDA C++, NVRTC to PTX and cubin, and
// running the result on a GPU through the driver (runtime/include/kiln/cuda_driver.h).
//
// A GPU func is a sequence of kernels. Each top-level loop nest whose outermost loops are
// tagged gpu_block_{x,y,z} becomes one kernel: those loops become the grid, loops tagged
// gpu_thread_{x,y,z} inside them the block. Inside a block, code outside the thread loops runs
// once per block: a copy into a temporary (a cache_identity or cache fill) is shared among the
// block's threads, any other store is made by its first thread, and a barrier
// (`__syncthreads()`, placed by the place_barriers pass) goes between two such steps only where
// one writes what the other reads or writes. Temporaries allocated inside the block loops live in
// shared memory (in a thread loop, or gpu_local: in each thread's registers); those allocated
// outside every kernel in device memory. A nest with no GPU tag runs as one thread (a note says
// so), whose temporaries are in its registers but for gpu_shared ones, in shared memory.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/artifact.h"
#include "kiln/buffers.h"
#include "kiln/ir.h"
#include "kiln/loop_ir.h"
#include "kiln/target.h"

namespace kiln::cuda {

// The triple of GPU targets; the target's CPU is the architecture ("sm_90").
inline constexpr const char* kTriple = "nvptx64-nvidia-cuda";

// Throws CompileError (stage Codegen) unless t is a GPU target kiln generates code for: the
// triple kTriple and an architecture sm_XY as its CPU.
void check_target(const Target& t);

// One kernel launch, in the order the func runs them.
struct Launch {
  std::string kernel;              // its extern "C" name in the source
  std::array<ir::Expr, 3> grid;    // blocks along x, y, z: i64 expressions in the run-time params
  std::array<int64_t, 3> block{};  // threads along x, y, z
  int64_t shared_bytes = 0;        // static shared memory (already in the source)
};

// Where code runs on a GPU: on the host, outside every kernel (outside every loop); once per
// block, inside a kernel's GPU loops but outside its thread loops; or as a thread's code, inside
// a thread loop, inside a nest with no GPU loop at block level (a fill the threads share out, or
// code the block's first thread runs), and all of a kernel of one thread (a nest with no GPU
// loop).
enum class CodeLevel { Host, Block, Thread };

// Where a temporary allocated at `level` lives: on the host, in device memory (not a gpu_local
// one: that is refused); in block code, in the block's shared memory, or in each thread's
// registers for a gpu_local one; in thread code, in the thread's registers, or in the block's
// shared memory for a gpu_shared one (refused inside a thread loop, allowed in a kernel of one
// thread).
enum class TempSpace { Device, Shared, Thread };
TempSpace temp_space(ir::MemLoc loc, CodeLevel level);

// A temporary in device memory, allocated by whoever launches the kernels.
struct DeviceTemp {
  std::string name;
  ir::DType dtype = ir::DType::F32;
  std::vector<ir::Expr> shape;  // extents in the run-time params
};

// An input buffer the kernels read from constant memory (`B.set_loc(gpu_constant)`): whoever
// launches them copies the buffer, once it is on the device, into the module's global `symbol`
// (cuModuleGetGlobal, exactly the buffer's bytes) before the first launch.
struct ConstantBuffer {
  std::string buffer;
  std::string symbol;
};

// The CUDA program of one func. Every kernel takes the same parameters: the run-time params
// (long long) in order, then a pointer per buffer argument in order, then one per device
// temporary, then `int* status` (0, or the first failing check's code: kiln/loop_ir.h).
struct Program {
  std::string name;
  std::string source;
  std::vector<std::string> params;
  std::vector<ir::Buf> args;
  std::vector<DeviceTemp> temps;
  std::vector<Launch> launches;
  std::vector<ConstantBuffer> constants;
  std::vector<ir::RuntimeCheck> checks;
  bool fast_math = false;
  // Loops tagged mma run on tensor cores: CUDA's warp matrix operations with TF32, which need
  // sm_80 or later and the toolkit's mma.h on NVRTC's include path.
  bool tensor_cores = false;
  std::vector<std::string> notes;  // what runs slower than the schedule may suggest
};

// The GPU lowering passes, which compile() runs in this order on the optimized loops of a GPU
// target before generate() prints them (its GPU branch lists them):
//
// keep_in_registers: in the code each thread runs, loops tagged unroll with constant bounds are
// unrolled (NVRTC unrolls poorly on its own), and the elements of a buffer that a serial loop
// keeps updating at indices it does not change (a register tile of C, across the K loop and its
// barriers too) are kept in one-element gpu_local temporaries named kiln_acc0, kiln_acc1, ...:
// loaded before the loop, stored back after it. A nest generate() refuses is left as it is.
ir::LoweredFunc keep_in_registers(const ir::LoweredFunc& f);

// keep_fragments, before keep_in_registers: where a serial loop (the K loop, at block level around
// the warps' thread loops or inside them) holds one nest tagged mma whose tile of C changes with
// none of the loop's loops but the thread loops and some serial loops with constant bounds (the
// tiles of a warp), those tiles are kept in the warp's registers across the loop as accumulator
// fragments: a gpu_local temporary kiln_fragN[count, 16, 16], filled from C before the loop and
// written back after it by copy nests tagged mma, the tile loops tagged unroll.
ir::LoweredFunc keep_fragments(const ir::LoweredFunc& f);

// distribute_fills, after keep_in_registers: inside each kernel's block loops, outside its thread
// loops, a cache fill (a nest whose stores are a cache's copies) that stores elsewhere than in a
// thread's registers is dealt out to the block's threads: its outermost loop is tagged
// gpu_distributed (the iterations of the perfect nest it heads go to thread t, t + threads, ...).
// Where it copies floats of device memory (copies.h), each iteration of its innermost loop copies a
// group of consecutive elements, 4 or 2 where they are aligned (else 1), in a loop tagged gpu_lanes
// that the printer writes as one float4, float2 or float load and store.
ir::LoweredFunc distribute_fills(const ir::LoweredFunc& f);

// place_barriers, after distribute_fills: inside each kernel's block loops, outside its thread
// loops, a barrier (ir::gpu_barrier(), __syncthreads()) goes before each step that reads or writes
// memory the block's threads share (shared tiles, device memory) which a step since the last
// barrier wrote, or writes what one read; and at the end of a loop around thread loops whose next
// iteration's first steps would overtake this one's last. It decides which of those loops are
// written as a pipeline (prefetching their shared tiles) and tags them gpu_pipelined: such a
// loop gets a barrier before it where its fills need one, and one after its computation where
// the stores into its tiles do; pipeline_tiles gives it the rest.
ir::LoweredFunc place_barriers(const ir::LoweredFunc& f);

// pipeline_tiles, last: each loop tagged gpu_pipelined becomes a pipeline of its shared tiles.
// The first step's fills are copied into the tiles before the loop, then a barrier; in each step
// the next step's elements are read into each thread's registers (gpu_local temporaries
// kiln_pfN) where the fills were, before the computation, and stored into the tiles after it,
// then a barrier. Each copy is dealt out to the block's threads by rank (a loop tagged gpu_rank
// over gpu_block_threads(n), kiln/loop_ir.h), each thread's groups unrolled, each group a
// gpu_lanes loop; the loop itself is left untagged.
ir::LoweredFunc pipeline_tiles(const ir::LoweredFunc& f);

// Generates the CUDA program of f, the loops the GPU lowering passes left, with its barriers
// where those passes put them, and only those. Throws CompileError (stage Codegen) naming the
// loop or buffer when the schedule cannot run on a GPU: block loops not outermost or not
// perfectly nested, a thread loop whose extent has no constant bound, a tag used twice in one
// nest, `parallel` or a loop around kernels, a shared or local temporary of run-time size.
Program generate(const ir::LoweredFunc& f);

// A launch's integer expression (a grid extent, a temporary's size) as postfix tokens, which
// whoever launches the kernels evaluates without kiln's parser: integers, param names, and the
// operators "+", "-", "*", "/" and "%" (rounding down), "min", "max" and "neg". Throws
// CompileError (stage Codegen) for an expression with anything else in it.
std::vector<std::string> postfix(const ir::Expr& e);
// The expression postfix tokens spell (i64 params, +, -, *, /, %, min, max,
// neg), as whoever reads an artifact back from the wire needs it; nullopt for
// a malformed list. postfix() of it gives the tokens back.
std::optional<ir::Expr> expr_of_postfix(const std::vector<std::string>& tokens);
// The value of postfix tokens under `params`; nullopt for a malformed list, a name not in
// params, a division by zero or an overflow.
std::optional<int64_t> eval_postfix(const std::vector<std::string>& tokens,
                                    const std::map<std::string, int64_t>& params);

// The program's launch configuration and temporaries as text (`kiln emit --stage cuda`
// prints it above the source).
std::string describe_launches(const Program& p);

// What one kernel of a cubin takes of the device, as ptxas reported it.
struct KernelResources {
  std::string kernel;
  int registers = 0;          // per thread
  int64_t shared_bytes = 0;   // static shared memory per block
  int64_t stack_bytes = 0;    // local memory per thread (stack frame)
  int64_t spilled_bytes = 0;  // of which spill stores
};

// A block's registers when each thread takes `registers`: warps are given registers in
// units of 256 (kRegisterUnit), and a block of any architecture from sm_50 on has 65536
// (kRegistersPerBlock).
inline constexpr int64_t kRegistersPerBlock = 65536;
inline constexpr int64_t kRegisterUnit = 256;
int64_t block_registers(int registers, int64_t threads);

// NVRTC's output for one architecture.
struct Binary {
  std::string arch;                        // "sm_90"
  std::string ptx;                         // PTX text
  std::vector<char> cubin;                 // machine code for arch
  std::string log;                         // NVRTC's warnings (ptxas's figures left out)
  std::vector<KernelResources> resources;  // one per kernel, in the order ptxas gave them
  std::vector<std::string> notes;          // kernels that spill registers to local memory
};

// The architecture of compute capability major.minor: "sm_90".
std::string arch_of(int major, int minor);

// Whether NVRTC is part of this build; why not in `why`.
bool nvrtc_available(std::string* why = nullptr);
// NVRTC's version ("NVRTC 13.0"), or "no NVRTC".
std::string nvrtc_version();
// Compiles p with NVRTC for `arch` ("sm_90"; "sm_XY" for compute capability X.Y). Throws
// CompileError (stage Codegen) with NVRTC's log when it refuses the source, when this build
// has no NVRTC, or when a launch's block needs more registers than a block has (ptxas's count
// per thread times its threads): the launch would fail on every device of the architecture,
// so the tuner drops such a point without measuring it.
Binary compile(const Program& p, const std::string& arch);
// The artifact of f (DESIGN.md section 5), as codegen::compile_artifact makes a CPU's: the
// cubin of `binary` (NVRTC's for `p`, the program generate(f) made) for target.cpu, and the
// launches, temporaries and constant buffers that say how to run it; `key` the compile cache
// key it answers.
codegen::Artifact compile_artifact(const ir::LoweredFunc& f, const Program& p, const Binary& binary,
                                   const Target& target, int opt_level, std::string key);
// ptxas's figures in NVRTC's log (--ptxas-options=-v): one entry per kernel. Lines that are
// not ptxas's are left in *rest.
std::vector<KernelResources> parse_ptxas_info(const std::string& log, std::string* rest);

// A GPU, opened through the driver. Not copyable; one per thread that uses it.
class Device {
 public:
  // Throws CompileError (stage Run) when there is no driver or no such GPU.
  explicit Device(int ordinal = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  std::string name() const;
  std::string arch() const;  // "sm_90"

  // How long one run of the kernels took on the device, in milliseconds.
  struct Timing {
    std::vector<double> ms;  // one per timed run
  };
  // Runs p (compiled as `bin`) on the params and buffers of b: copies the inputs and outputs to
  // the device, launches every kernel in order, copies the outputs back. With `repeat` > 0 it
  // then times `repeat` more runs (each all kernels, no copies) after one warm-up. Throws
  // CompileError (stage Run) for a launch the device cannot take (too many threads, too much
  // shared memory), a kernel fault, or a nonzero status (the failing check's message). After a
  // fault no CUDA call of this process succeeds again (the driver's sticky errors): what must
  // survive one runs the kernel in a child process.
  Timing run(const Program& p, const Binary& bin, Bindings& b, int repeat = 0);

  struct State;

 private:
  State* state_;
};

// Whether a GPU can be opened; why not in `why` ("no GPU driver: libcuda.so.1 cannot be loaded").
bool gpu_available(std::string* why = nullptr, int ordinal = 0);

}  // namespace kiln::cuda
