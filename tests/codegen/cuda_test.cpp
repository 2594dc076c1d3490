// The GPU backend: CUDA C++ generated from loop IR for every GPU example under several
// schedules, NVRTC's PTX and cubin for sm_90 (everywhere: NVRTC needs no GPU), the launch
// configuration and synchronization the source has, every refusal, and, where a GPU is there,
// every kernel against the reference interpreter. Without a GPU the tests that need one skip and
// say why.
#include "kiln/cuda.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "cuda_emulator.h"
#include "gpu_programs.h"
#include "kiln/compile.h"
#include "kiln/interp.h"
#include "programs.h"

namespace kiln::testing {
namespace {

// Rows of C over blocks, 34 columns of a row over threads, B's 8 x 34 slice staged per k step.
constexpr const char* kStagedRowsOf34 =
    "C_init.split(j, 34, jo, ji); C.split(j, 34, jo, ji); C.split(k, 8, ko, ki);"
    "C.reorder(i, jo, ko, ji, ki); C.after(C_init, jo); C.cache_identity(B, ko, gpu_shared);"
    "C_init.tag(i, gpu_block_x); C_init.tag(ji, gpu_thread_x); C.tag(i, gpu_block_x);"
    "C.tag(ji, gpu_thread_x);";

// All of B in each block's shared memory, filled before the block's threads compute.
constexpr const char* kWholeBPerBlock =
    "C_init.tag(i, gpu_block_x); C_init.tag(j, gpu_thread_x); C.tag(i, gpu_block_x);"
    "C.tag(j, gpu_thread_x); C.after(C_init, j); C.cache_identity(B, i, gpu_shared);";

struct GpuCase {
  std::string example;                 // examples/gpu/NAME.kiln
  std::vector<std::string> schedules;  // "<file>": its own
  std::vector<ir::Overrides> params;   // sizes and knob values
};

const std::vector<GpuCase>& gpu_cases() {
  static const std::vector<GpuCase> all = {
      {"matmul",
       {"<file>",
        // one element per thread, no shared memory
        "C_init.tile(i, j, 16, 16, io, jo, ii, ji); C.tile(i, j, 16, 16, io, jo, ii, ji);"
        "C.after(C_init, ji); C_init.tag(io, gpu_block_y); C_init.tag(jo, gpu_block_x);"
        "C_init.tag(ii, gpu_thread_y); C_init.tag(ji, gpu_thread_x); C.tag(io, gpu_block_y);"
        "C.tag(jo, gpu_block_x); C.tag(ii, gpu_thread_y); C.tag(ji, gpu_thread_x);",
        // rows of C over blocks, columns over threads, B's rows staged per k step
        "C_init.split(j, 32, jo, ji); C.split(j, 32, jo, ji); C.split(k, 8, ko, ki);"
        "C.reorder(i, jo, ko, ji, ki); C.after(C_init, jo); C.cache_identity(B, ko, gpu_shared);"
        "C_init.tag(i, gpu_block_x); C_init.tag(ji, gpu_thread_x); C.tag(i, gpu_block_x);"
        "C.tag(ji, gpu_thread_x);",
        // no GPU tag at all: one thread
        "",
        // register tiles strided by the thread counts (row ty + 16 * ri), both slices as they
        // are: no float4 reads
        "C_init.split(i, 16, i1, ty); C_init.split(i1, 4, io, ri); C_init.split(j, 16, j1, tx);"
        "C_init.split(j1, 4, jo, rj); C_init.reorder(io, jo, ty, tx, ri, rj);"
        "C.split(i, 16, i1, ty); C.split(i1, 4, io, ri); C.split(j, 16, j1, tx);"
        "C.split(j1, 4, jo, rj); C.split(k, 16, ko, ki); C.reorder(io, jo, ko, ty, tx, ki, ri, rj);"
        "C.after(C_init, jo); C.cache_identity(A, ko, gpu_shared);"
        "C.cache_identity(B, ko, gpu_shared); C_init.tag(io, gpu_block_y);"
        "C_init.tag(jo, gpu_block_x); C_init.tag(ty, gpu_thread_y); C_init.tag(tx, gpu_thread_x);"
        "C.tag(io, gpu_block_y); C.tag(jo, gpu_block_x); C.tag(ty, gpu_thread_y);"
        "C.tag(tx, gpu_thread_x); C.tag(ri, unroll); C.tag(rj, unroll);",
        kStagedRowsOf34},
       {{{"M", 64}, {"N", 64}, {"K", 32}},
        {{"M", 70}, {"N", 45}, {"K", 19}, {"RI", 2}, {"TX", 8}},
        {{"M", 1}, {"N", 1}, {"K", 1}},
        // rows of 102 floats, tiles of 34 columns: B's tile is copied as float2
        {{"M", 8}, {"N", 102}, {"K", 16}}}},
      {"batch_matmul",
       {"<file>",
        "C.tag(b, gpu_block_x); C_init.tag(b, gpu_block_x); C.tag(j, gpu_thread_x);"
        "C_init.tag(j, gpu_thread_x); C.after(C_init, j);"},
       {{{"BATCH", 3}, {"M", 20}, {"N", 24}, {"K", 9}},
        {{"BATCH", 1}, {"M", 1}, {"N", 1}, {"K", 2}}}},
      {"conv2d",
       {"<file>"},
       {{{"N", 1}, {"C", 3}, {"H", 12}, {"W", 10}, {"F", 4}},
        {{"N", 2}, {"C", 5}, {"H", 9}, {"W", 17}, {"F", 3}, {"P", 0}, {"CB", 2}},
        // 27 KiB of shared tiles: more than half of the 48 KiB a launch may ask for, so a
        // launch that asked for them again as dynamic shared memory would fail
        {{"N", 2}, {"C", 32}, {"H", 10}, {"W", 12}, {"F", 32}, {"CB", 16}},
        // two rows per thread, and a last tile of rows the tile does not fill
        {{"N", 1}, {"C", 3}, {"H", 13}, {"W", 10}, {"F", 4}, {"TY", 4}, {"PY", 2}}}},
      {"matmul_tf32",
       {"<file>",
        // A's slice transposed ([k][i], a column-major tile for the tensor cores), B's as it
        // is; blocks of 32 x 32, two warps side by side, each two tiles of 16 x 16 one above the
        // other
        "C_init.split(i, 16, i1, mi); C_init.split(i1, 2, io, fi); C_init.split(j, 16, j1, nj);"
        "C_init.split(j1, 2, jo, wx); C_init.reorder(io, jo, wx, fi, mi, nj);"
        "C.split(i, 16, i1, mi); C.split(i1, 2, io, fi); C.split(j, 16, j1, nj);"
        "C.split(j1, 2, jo, wx); C.split(k, 16, ko, k1); C.split(k1, 8, ks, kk);"
        "C.reorder(io, jo, ko, wx, ks, fi, mi, nj, kk); C.after(C_init, jo);"
        "C.cache(A, ko, gpu_shared, [\"16\", \"36\"], \"{ [e0, e1] -> [e1 - 16 * ko, e0 - 32 * io] "
        "}\");"
        "C.cache_identity(B, ko, gpu_shared);"
        "C_init.tag(io, gpu_block_y); C_init.tag(jo, gpu_block_x); C_init.tag(wx, gpu_thread_y);"
        "C.tag(io, gpu_block_y); C.tag(jo, gpu_block_x); C.tag(wx, gpu_thread_y);"
        "C.tag(mi, mma);",
        // no shared memory: the fragments of A and B loaded from device memory; two warps one
        // above the other, each a tile of 16 x 16; C's initialization by each warp's first lane
        "C_init.split(i, 16, io, mi); C_init.split(j, 16, jo, nj);"
        "C_init.reorder(io, jo, mi, nj); C.split(i, 16, io, mi); C.split(j, 16, jo, nj);"
        "C.split(k, 8, ko, kk); C.split(io, 2, io1, w); C.reorder(io1, jo, w, ko, mi, nj, kk);"
        "C_init.split(io, 2, io1, w); C_init.reorder(io1, jo, w, mi, nj); C.after(C_init, w);"
        "C_init.tag(io1, gpu_block_y); C_init.tag(jo, gpu_block_x); C_init.tag(w, gpu_thread_y);"
        "C.tag(io1, gpu_block_y); C.tag(jo, gpu_block_x); C.tag(w, gpu_thread_y);"
        "C.tag(mi, mma);"},
       {{{"M", 64}, {"N", 64}, {"K", 32}},
        {{"M", 128},
         {"N", 96},
         {"K", 48},
         {"WY", 1},
         {"FI", 4},
         {"WX", 2},
         {"FJ", 1},
         {"BK", 16}}}},
      {"conv2d_constant",
       {"<file>"},
       {{{"N", 1}, {"C", 3}, {"H", 12}, {"W", 10}, {"F", 4}},
        {{"N", 2}, {"C", 5}, {"H", 9}, {"W", 17}, {"F", 3}, {"P", 0}, {"CB", 2}}}},
  };
  return all;
}

std::string gpu_example(const std::string& name) {
  return read_source("examples/gpu/" + name + ".kiln");
}

std::string program_text(const GpuCase& c, const std::string& sched) {
  std::string src = gpu_example(c.example);
  return sched == "<file>" ? src : with_schedule(src, sched);
}

// The overrides of `set` that f has (a schedule without the file's knobs has none of them).
ir::Overrides known(const std::string& text, const ir::Overrides& set) {
  ir::Func bare = parse_one(text);
  ir::Overrides out;
  for (const auto& [k, v] : set) {
    bool has = std::any_of(bare.knobs.begin(), bare.knobs.end(),
                           [&](const ir::Knob& n) { return n.name == k; }) ||
               std::any_of(bare.params.begin(), bare.params.end(),
                           [&](const ir::Param& p) { return p.name == k; });
    if (has) out[k] = v;
  }
  return out;
}

// f for every GPU example (the tensor cores' too where `with_mma`) under every schedule and size
// of its case, with `opt` each of -O0 and -O3, the case traced.
void for_each_gpu_program(bool with_mma,
                          const std::function<void(const GpuCase&, const ir::Func&, int)>& fn) {
  for (const GpuCase& c : gpu_cases()) {
    if (!with_mma && c.example == "matmul_tf32") continue;
    for (const std::string& sched : c.schedules) {
      std::string text = program_text(c, sched);
      for (const ir::Overrides& set : c.params) {
        for (int opt : {0, 3}) {
          SCOPED_TRACE(c.example + ", -O" + std::to_string(opt) + ", schedule: " + sched);
          fn(c, parse_one(text, known(text, set)), opt);
        }
      }
    }
  }
}

// The loops f lowers to for a GPU against the reference at f's tolerance, on inputs of `seed`.
GpuLoopsMismatch gpu_loops_of(const ir::Func& f, uint64_t seed) {
  return gpu_loops_against_reference(f, gpu_compile(f), seed, interp::tolerance_of(f));
}

// The schedules of the GPU examples keep every dependence, and the GPU lowering passes (unrolled
// register tiles, accumulators in registers) keep the meaning: the loops, run by the loop
// interpreter (which ignores tags), compute what the reference computes.
TEST(GpuSchedules, LoopsMatchTheReference) {
  for (const GpuCase& c : gpu_cases()) {
    for (const std::string& sched : c.schedules) {
      std::string text = program_text(c, sched);
      for (const ir::Overrides& set : c.params) {
        SCOPED_TRACE(c.example + ", schedule: " + sched);
        GpuLoopsMismatch mm = gpu_loops_of(parse_one(text, known(text, set)), 3);
        EXPECT_TRUE(mm.optimized.ok) << "after kiln's passes: " << mm.optimized.describe();
        EXPECT_TRUE(mm.gpu_lowered.ok)
            << "after the GPU lowering passes: " << mm.gpu_lowered.describe();
      }
    }
  }
}

// Every GPU example, under every schedule and at -O0 and -O3, becomes CUDA that NVRTC compiles
// to PTX and to an sm_90 cubin, with one entry per launch; at -O3 to an sm_80 cubin (the first
// architecture with the TF32 tensor cores) too.
TEST(GpuCodegen, NvrtcCompilesEveryExample) {
  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  // every size the GPU runs below: partial tiles and 32-bit indices change the source
  for_each_gpu_program(true, [](const GpuCase&, const ir::Func& f, int opt) {
    cuda::Program p = gpu_program(f, opt);
    for (const char* arch : {"sm_90", "sm_80"}) {
      if (opt == 0 && std::string(arch) == "sm_80") continue;
      SCOPED_TRACE(arch);
      cuda::Binary bin = cuda::compile(p, arch);
      EXPECT_NE(bin.ptx.find(std::string(".target ") + arch), std::string::npos);
      ASSERT_GE(bin.cubin.size(), 4u);
      EXPECT_EQ(std::string(bin.cubin.data(), 4),
                "\x7f"
                "ELF");
      for (const cuda::Launch& l : p.launches)
        EXPECT_NE(bin.ptx.find(".entry " + l.kernel), std::string::npos) << l.kernel;
    }
  });
}

// The shared-memory matmul: one kernel of (N / 64) x (M / 64) blocks of 16 x 16 threads, 8.25
// KiB of shared tiles, filled by all the block's threads: the first K step's before the K loop
// and a barrier, each next step's read into registers before the step computes and stored after
// the barrier that ends its computation, and a barrier before the next step reads them. Each
// thread's 4 x 4 elements of C stay in registers across the whole K loop: loaded once before it
// (after a barrier that orders C's initialization by the block's threads first) and stored once
// after it.
TEST(GpuCodegen, SharedTileMatmulLaunchAndBarriers) {
  ir::Func f = parse_one(gpu_example("matmul"),
                         {{"M", 256}, {"N", 128}, {"K", 64}, {"RI", 4}, {"RJ", 4}, {"BK", 16}});
  cuda::Program p = gpu_program(f);
  ASSERT_EQ(p.launches.size(), 1u);
  const cuda::Launch& l = p.launches[0];
  EXPECT_EQ(ir::to_string(l.grid[0]), "2");
  EXPECT_EQ(ir::to_string(l.grid[1]), "4");
  EXPECT_EQ(l.block, (std::array<int64_t, 3>{16, 16, 1}));
  // B's slice, 16 x 64, and A's transposed with its rows padded by 4: 16 x 68
  EXPECT_EQ(l.shared_bytes, (16 * 64 + 16 * 68) * 4);
  EXPECT_EQ(count_of(p.source, "__shared__ __align__(16) float"), 2);
  // each k step reads a thread's 4 rows of A and 4 columns of B as one float4 each; the first
  // step's fills read 4 floats of A and of B at a time, and each thread's 4 rows of C are loaded
  // and stored as 4 float4
  EXPECT_EQ(count_of(p.source, "const float4 kiln_v"), 2 + 2 + 4) << p.source;
  EXPECT_EQ(count_of(p.source, "b_A_C_cache[((((68) * (v_ki))) + (((4) * (v_ty))))]"), 1)
      << p.source;
  EXPECT_EQ(count_of(p.source, "__syncthreads();"), 4) << p.source;
  size_t k_loop = p.source.find("for (int v_ko = ");
  ASSERT_NE(k_loop, std::string::npos) << p.source;
  std::string before_k = p.source.substr(0, k_loop), in_k = p.source.substr(k_loop);
  in_k = in_k.substr(0, in_k.find("\n    }\n"));  // up to the K loop's closing brace
  EXPECT_EQ(count_of(in_k, "__syncthreads();"), 2) << in_k;
  EXPECT_EQ(count_of(in_k, "b_C["), 0) << in_k;
  EXPECT_EQ(count_of(before_k, "\n  float b_kiln_acc"), 16) << p.source;
  EXPECT_EQ(count_of(p.source, "b_C["), 1 + 2 * 4) << p.source;  // init, loads, stores
  EXPECT_EQ(count_of(p.source, "*reinterpret_cast<float4*>(&b_C["), 4) << p.source;
  EXPECT_EQ(count_of(p.source, "make_float4(b_kiln_acc"), 4) << p.source;
  // the fills are dealt out to the threads by rank, one group each: the first step's, the next
  // step's reads and stores
  EXPECT_EQ(count_of(p.source, " = kiln_tid;"), 2 + 2 + 2) << p.source;
  EXPECT_EQ(count_of(p.source, " + (((0) * (kiln_nthreads))));"), 2 + 2 + 2) << p.source;
  EXPECT_EQ(count_of(in_k, "float4 b_kiln_pf"), 2) << in_k;
  // 16 x 16 threads for 16-wide thread loops: no bound check in them
  EXPECT_EQ(count_of(p.source, "if (v_tx <"), 0) << p.source;
  EXPECT_TRUE(p.notes.empty());
}

// Where a block loop has one iteration (M = 64 rows of C, the block's TY * RI), lowering leaves it
// out, and the K loop with its shared tiles sits at the top level around the thread loops. It is
// still one kernel of one block: the tiles in shared memory, filled and read in the same kernel,
// and each thread's 16 elements of C in its own registers, not in device memory, where every
// thread would share them (on a GPU each thread then summed into the same 16 floats).
TEST(GpuCodegen, BlockLoopsOfOneIterationStillMakeOneKernel) {
  for (int opt : {0, 3}) {
    SCOPED_TRACE("-O" + std::to_string(opt));
    ir::Func f = parse_one(gpu_example("matmul"), {{"M", 64}, {"N", 64}, {"K", 32}});
    cuda::Program p = gpu_program(f, opt);
    EXPECT_TRUE(p.temps.empty()) << p.source;
    ASSERT_EQ(p.launches.size(), 2u) << p.source;  // C's init, then the K loop
    for (const cuda::Launch& l : p.launches) {
      for (const ir::Expr& g : l.grid) EXPECT_EQ(ir::to_string(g), "1");
      EXPECT_EQ(l.block, (std::array<int64_t, 3>{16, 16, 1}));
    }
    EXPECT_EQ(p.launches[1].shared_bytes, (16 * 64 + 16 * 68) * 4);
    EXPECT_EQ(count_of(p.source, "\n  float b_kiln_acc"), 16) << p.source;
    EXPECT_NE(p.source.find("for (int v_ko = "), std::string::npos) << p.source;
  }
}

// A gpu_local temporary is one thread's registers: outside every kernel no thread runs, and the
// printer refuses one there rather than give all threads one copy in device memory.
TEST(GpuCodegen, AGpuLocalTemporaryOutsideEveryKernelIsRefused) {
  ir::Func f = parse_one(gpu_example("matmul"), {{"M", 64}, {"N", 64}, {"K", 32}});
  ir::LoweredFunc lowered = compile(gpu_request(f)).gpu_lowered;
  lowered.body = std::make_shared<ir::Alloc>("t", ir::DType::F32, std::vector<ir::Expr>{},
                                             ir::MemLoc::GpuLocal, lowered.body);
  try {
    cuda::generate(lowered);
    FAIL() << "generated";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Codegen);
    EXPECT_NE(std::string(e.what()).find("temporary t is gpu_local"), std::string::npos)
        << e.what();
  }
}

// float4 reads of the tiles only where every offset is a multiple of 4: with A's rows padded to
// 65 floats its column of 4 starts anywhere, and only B's row is read as a vector; the strided
// register tile (rows ty + 16 * ri) reads no neighbours at all, in the tiles or in C.
TEST(GpuCodegen, VectorReadsOnlyWhereAligned) {
  ir::Overrides sizes{{"M", 256}, {"N", 128}, {"K", 64}};
  std::string padded =
      std::regex_replace(gpu_example("matmul"), std::regex("TY \\* RI \\+ 4"), "TY * RI + 1");
  std::string p = gpu_program(parse_one(padded, sizes)).source;
  EXPECT_EQ(count_of(p, "reinterpret_cast<const float4*>(&b_B_C_cache["), 1) << p;
  EXPECT_EQ(count_of(p, "reinterpret_cast<const float4*>(&b_A_C_cache["), 0) << p;
  EXPECT_EQ(count_of(p, "float2"), 0) << p;
  const GpuCase& mm = gpu_cases().front();
  auto it = std::find_if(mm.schedules.begin(), mm.schedules.end(), [](const std::string& x) {
    return x.find("C.split(i1, 4, io, ri)") != std::string::npos;
  });
  ASSERT_NE(it, mm.schedules.end());
  const std::string& strided = *it;
  std::string q = gpu_program(parse_one(program_text(mm, strided), sizes)).source;
  EXPECT_EQ(count_of(q, "const float4*>(&b_A_C_cache["), 0) << q;
  EXPECT_EQ(count_of(q, "const float4*>(&b_B_C_cache["), 0) << q;
  EXPECT_EQ(count_of(q, "float4*>(&b_C["), 0) << q;
  EXPECT_EQ(count_of(q, "float2"), 0) << q;
}

// A cache fill copies 4 floats of device memory at a time where the rows it copies start at
// multiples of 4 and its innermost loop has a constant extent that 4 divides: one float4 load,
// and one float4 store where the tile's row is consecutive too (B's), else 4 stores (A's,
// transposed). Rows of 102 floats copied 34 at a time go as float2. Rows of 19 or 45 floats,
// a partial tile, or sizes known only at run time keep the copy one float at a time.
TEST(GpuCodegen, VectorCopiesOnlyWhereAligned) {
  // all of B in each block's shared memory: a fill outside any serial loop
  std::string b = gpu_program(parse_one(with_schedule(gpu_example("matmul"), kWholeBPerBlock),
                                        {{"M", 16}, {"N", 64}, {"K", 8}}))
                      .source;
  EXPECT_EQ(count_of(b, "constexpr long long kiln_e0_1 = 16;"), 1) << b;  // 64 / 4
  EXPECT_EQ(count_of(b, " % kiln_e0_1) * 4;"), 1) << b;
  EXPECT_EQ(count_of(b,
                     "reinterpret_cast<const float4*>(&b_B[(v_B_C_cache_0) * (64) + "
                     "(v_B_C_cache_1)])"),
            1)
      << b;
  EXPECT_EQ(count_of(b, "*reinterpret_cast<float4*>(&b_B_C_cache["), 1) << b;

  // the K loop's fills (the first step's, and the next step's into registers)
  std::string p =
      gpu_program(parse_one(gpu_example("matmul"), {{"M", 256}, {"N", 128}, {"K", 64}})).source;
  EXPECT_EQ(count_of(p,
                     "reinterpret_cast<const float4*>(&b_A[(v_A_C_cache_0) * (64) + "
                     "(v_A_C_cache_1)])"),
            2)
      << p;
  EXPECT_EQ(count_of(p,
                     "reinterpret_cast<const float4*>(&b_B[(v_B_C_cache_0) * (128) + "
                     "(v_B_C_cache_1)])"),
            2)
      << p;
  EXPECT_EQ(count_of(p, "*reinterpret_cast<float4*>(&b_B_C_cache["), 2) << p;
  // A's tile: its declaration, twice the 4 scalar stores of a float4, the float4 read of the k
  // step
  EXPECT_EQ(count_of(p, "b_A_C_cache["), 1 + 2 * 4 + 1) << p;
  EXPECT_EQ(count_of(p, ".x;"), 2 + 4) << p;  // and a thread's 4 rows of C into registers

  const GpuCase& mm = gpu_cases().front();
  std::string q =
      gpu_program(parse_one(program_text(mm, kStagedRowsOf34), {{"M", 8}, {"N", 102}, {"K", 16}}))
          .source;
  EXPECT_EQ(count_of(q, "float4"), 0) << q;
  // 8 x 17 pairs for 34 threads: 4 a thread
  EXPECT_EQ(count_of(q, "reinterpret_cast<const float2*>(&b_B["), 2 * 4) << q;
  EXPECT_EQ(count_of(q, "*reinterpret_cast<float2*>(&b_B_C_cache["), 2 * 4) << q;

  for (const ir::Overrides& sizes : std::vector<ir::Overrides>{
           {{"M", 70}, {"N", 45}, {"K", 19}},  // rows of 19 and 45 floats
           {{"M", 64}, {"N", 64}, {"K", 40}},  // K's last tile is 8 of 16 columns
       }) {
    std::string r = gpu_program(parse_one(gpu_example("matmul"), sizes)).source;
    EXPECT_EQ(count_of(r, "float4*>(&b_A["), 0) << r;
    if (sizes.at("N") == 45) {
      EXPECT_EQ(count_of(r, "float4*>(&b_B["), 0) << r;
    }
    EXPECT_EQ(count_of(r, "float2"), 0) << r;
  }
  std::string text = std::regex_replace(
      gpu_example("matmul"), std::regex("param M = 1024, N = 1024, K = 1024;"), "param M, N, K;");
  std::string s = gpu_program(parse_one(text)).source;
  EXPECT_EQ(count_of(s, "float4*>(&b_A["), 0) << s;
  EXPECT_EQ(count_of(s, "float4*>(&b_B["), 0) << s;
  EXPECT_EQ(count_of(s, "float4*>(&b_C["), 0) << s;
}

// The K loop's tiles are pipelined: the first step's fills run before the loop, each step reads
// the next step's elements into registers before it computes (when there is a next step) and
// stores them into the tiles between the barrier that ends its computation and the one that
// ends the step. Fills of a partial tile, fills that would hold more than 16 floats a thread, and
// fills that are not plain copies (the convolution's zero-padded window) stay in the loop,
// dealt out to the threads after the barrier that ends the previous step.
TEST(GpuCodegen, TilesOfTheNextStepAreReadWhileThisStepComputes) {
  std::string p =
      gpu_program(parse_one(gpu_example("matmul"), {{"M", 256}, {"N", 128}, {"K", 64}})).source;
  size_t loop = p.find("for (int v_ko = 0; v_ko < 4; v_ko += 1) {");
  ASSERT_NE(loop, std::string::npos) << p;
  size_t first = p.rfind("if (((0) < (4))) {", loop);
  ASSERT_NE(first, std::string::npos) << p;
  std::string before = p.substr(first, loop - first);
  EXPECT_EQ(count_of(before, "const float4 kiln_v"), 2) << before;
  EXPECT_EQ(count_of(before, "__syncthreads();"), 1) << before;
  std::string in_k = p.substr(loop);
  in_k = in_k.substr(0, in_k.find("\n    }\n"));
  size_t reads = in_k.find("kiln_pf");
  size_t compute = in_k.find("for (int v_ki = 0;");
  size_t barrier = in_k.find("__syncthreads();");
  size_t stores = in_k.find("= b_kiln_pf");
  size_t last = in_k.rfind("__syncthreads();");
  ASSERT_NE(reads, std::string::npos) << in_k;
  EXPECT_LT(reads, compute) << in_k;
  EXPECT_LT(compute, barrier) << in_k;
  EXPECT_LT(barrier, stores) << in_k;
  EXPECT_LT(stores, last) << in_k;
  EXPECT_EQ(count_of(in_k, "__syncthreads();"), 2) << in_k;
  EXPECT_EQ(count_of(in_k, "(((v_ko) + (1))) < (4)"), 2 + 1) << in_k;  // reads, stores
  EXPECT_EQ(count_of(in_k, "+= kiln_nthreads"), 0) << in_k;

  // 8 x 8 threads: A's 32 x 16 slice is 128 float4, two a thread
  std::string two =
      gpu_program(parse_one(gpu_example("matmul"),
                            {{"M", 128}, {"N", 128}, {"K", 64}, {"TY", 8}, {"TX", 8}}))
          .source;
  EXPECT_EQ(count_of(two, " + (((1) * (kiln_nthreads))));"), 2 * 3) << two;

  for (const ir::Overrides& sizes : std::vector<ir::Overrides>{
           {{"M", 64}, {"N", 64}, {"K", 40}},  // K's last tile is 8 of 16 columns
           // 32 x 32 slices for 64 threads: 32 floats a thread
           {{"M", 128}, {"N", 128}, {"K", 64}, {"TY", 8}, {"TX", 8}, {"BK", 32}},
       }) {
    std::string r = gpu_program(parse_one(gpu_example("matmul"), sizes)).source;
    EXPECT_EQ(count_of(r, "kiln_pf"), 0) << r;
    EXPECT_EQ(count_of(r, "+= kiln_nthreads"), 2) << r;
  }
  std::string c =
      gpu_program(parse_one(gpu_example("conv2d"),
                            {{"N", 2}, {"C", 32}, {"H", 10}, {"W", 12}, {"F", 32}, {"CB", 16}}))
          .source;
  EXPECT_EQ(count_of(c, "kiln_pf"), 0) << c;
  EXPECT_EQ(count_of(c, "+= kiln_nthreads"), 2) << c;
  EXPECT_EQ(count_of(c, ") * 0;"), 0) << c;  // every copy steps by its loop's step
}

// `Wt.set_loc(gpu_constant)`: the kernels read the filters from a __constant__ array of their
// size, which the program lists for whoever launches it to fill; only inputs of sizes known at
// compile time, 64 KiB in all, may live there, and no temporary.
TEST(GpuCodegen, ConstantMemoryHoldsInputsTheKernelsOnlyRead) {
  std::string text = gpu_example("conv2d_constant");
  cuda::Program p = gpu_program(parse_one(text));
  EXPECT_EQ(count_of(p.source, "__constant__ float kiln_const_Wt[9216];"), 1) << p.source;
  EXPECT_GT(count_of(p.source, "kiln_const_Wt[("), 0) << p.source;
  EXPECT_EQ(count_of(p.source, "b_Wt["), 0) << p.source;
  ASSERT_EQ(p.constants.size(), 1u);
  EXPECT_EQ(p.constants[0].buffer, "Wt");
  EXPECT_EQ(p.constants[0].symbol, "kiln_const_Wt");
  EXPECT_NE(cuda::describe_launches(p).find("// buffer Wt: read from constant memory"),
            std::string::npos);
  std::string why;
  if (cuda::nvrtc_available(&why)) {
    CompileRequest q = gpu_request(parse_one(text));
    q.output = CompileOutput::Artifact;
    CompileResult r = compile(q);
    ASSERT_TRUE(r.artifact.has_value());
    ASSERT_EQ(r.artifact->constants.size(), 1u);
    EXPECT_EQ(r.artifact->constants[0].symbol, "kiln_const_Wt");
    EXPECT_NE(r.artifact->metadata_json().find(R"("constants":[{"buffer":"Wt")"), std::string::npos)
        << r.artifact->metadata_json();
  }

  auto refused = [&](const std::string& src, const ir::Overrides& set) {
    try {
      gpu_program(parse_one(src, set));
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
    return std::string("compiled");
  };
  // 64 x 64 3x3 filters are 144 KiB
  EXPECT_NE(refused(text, {{"C", 64}, {"F", 64}})
                .find("need 147456 bytes in all: constant "
                      "memory holds 65536"),
            std::string::npos);
  std::string output = std::regex_replace(text, std::regex("Wt.set_loc\\(gpu_constant\\)"),
                                          "O.set_loc(gpu_constant)");
  EXPECT_NE(refused(output, {}).find("buffer O is gpu_constant but the kernels write it"),
            std::string::npos);
  std::string run_time = std::regex_replace(text, std::regex("C = 32,"), "C,");
  EXPECT_NE(refused(run_time, {})
                .find("buffer Wt is gpu_constant but its extent C is known only "
                      "at run time"),
            std::string::npos)
      << refused(run_time, {});
  std::string temp = std::regex_replace(text, std::regex("Wt.set_loc\\(gpu_constant\\)"),
                                        "O.cache_identity(Wt, co, gpu_constant)");
  EXPECT_NE(refused(temp, {}).find("is gpu_constant, but the kernels write a temporary"),
            std::string::npos)
      << refused(temp, {});
}

// Sizes that the tiles do not divide: the thread loops keep their bound checks, and the grid
// rounds up.
TEST(GpuCodegen, PartialTilesKeepTheirGuards) {
  ir::Func f = parse_one(gpu_example("matmul"),
                         {{"M", 70}, {"N", 45}, {"K", 19}, {"RI", 4}, {"RJ", 4}, {"BK", 16}});
  cuda::Program p = gpu_program(f);
  ASSERT_EQ(p.launches.size(), 1u);
  EXPECT_EQ(ir::to_string(p.launches[0].grid[0]), "1");
  EXPECT_EQ(ir::to_string(p.launches[0].grid[1]), "2");
  EXPECT_GT(count_of(p.source, "if (v_ty <"), 0) << p.source;
}

// Run-time sizes: the grid is an expression of the params, evaluated at launch.
TEST(GpuCodegen, GridInRunTimeParams) {
  std::string text = gpu_example("matmul");
  text =
      std::regex_replace(text, std::regex("param M = 1024, N = 1024, K = 1024;"), "param M, N, K;");
  cuda::Program p = gpu_program(parse_one(text, {{"RI", 4}, {"RJ", 4}}));
  ASSERT_EQ(p.launches.size(), 1u);
  EXPECT_EQ(p.params, (std::vector<std::string>{"M", "N", "K"}));
  std::optional<int64_t> gx =
      ir::eval_int(p.launches[0].grid[0], {{"M", 100}, {"N", 130}, {"K", 7}});
  std::optional<int64_t> gy =
      ir::eval_int(p.launches[0].grid[1], {{"M", 100}, {"N", 130}, {"K", 7}});
  EXPECT_EQ(gx, 3);
  EXPECT_EQ(gy, 2);
}

// Index arithmetic is int where the known ranges keep it within 32 bits (half the registers
// of long long): with the sizes bound, every index variable of the matmul is an int. Offsets
// into a buffer of more than 2^31 elements, and indices of run-time sizes, stay long long.
TEST(GpuCodegen, IndexArithmeticIsIntWhereItFits) {
  std::string bound =
      gpu_program(parse_one(gpu_example("matmul"), {{"M", 2048}, {"N", 2048}, {"K", 2048}})).source;
  EXPECT_EQ(count_of(bound, "long long v_"), 0) << bound;
  EXPECT_EQ(count_of(bound, "for (long long"), 0) << bound;
  EXPECT_GT(count_of(bound, "const int v_ty = "), 0) << bound;
  EXPECT_EQ(count_of(bound, "(long long)(v_"), 0) << bound;  // C's offsets fit in an int

  // C has 65536 x 65536 elements: its offsets need 64 bits, though each index fits in 32
  std::string big =
      gpu_program(parse_one(gpu_example("matmul"), {{"M", 65536}, {"N", 65536}, {"K", 64}})).source;
  EXPECT_GT(count_of(big, "b_C[((long long)("), 0) << big;
  EXPECT_EQ(count_of(big, "b_A_C_cache[((long long)"), 0) << big;

  std::string text = gpu_example("matmul");
  text =
      std::regex_replace(text, std::regex("param M = 1024, N = 1024, K = 1024;"), "param M, N, K;");
  cuda::Program runtime = gpu_program(parse_one(text));
  EXPECT_GT(count_of(runtime.source, "for (long long v_ko = "), 0) << runtime.source;
  std::string why;
  if (cuda::nvrtc_available(&why)) {
    cuda::compile(runtime, "sm_90");
    cuda::compile(
        gpu_program(parse_one(gpu_example("matmul"), {{"M", 65536}, {"N", 65536}, {"K", 64}})),
        "sm_90");
  }
}

// A nest with no GPU tag runs, slowly, on one thread, and a note says so.
// The register tile's accumulators are the GPU lowering pass's work, in the loops it hands the
// printer: 16 one-element gpu_local temporaries around the K loop, none before the pass; the
// printer only prints them.
TEST(GpuLowering, AccumulatorsAreKeptInRegistersByAPassBeforeThePrinter) {
  ir::Func f = parse_one(gpu_example("matmul"),
                         {{"M", 256}, {"N", 128}, {"K", 64}, {"RI", 4}, {"RJ", 4}, {"BK", 16}});
  CompileResult r = compile(gpu_request(f));
  const std::string before = ir::to_string(r.optimized), after = ir::to_string(r.gpu_lowered);
  EXPECT_EQ(count_of(before, "kiln_acc"), 0) << before;
  for (int k = 0; k < 16; ++k)
    EXPECT_EQ(count_of(after, "alloc kiln_acc" + std::to_string(k) + ": f32[] @gpu_local"), 1)
        << after;
  EXPECT_EQ(count_of(after, "alloc kiln_acc16 "), 0) << after;
  EXPECT_EQ(ir::to_string(cuda::pipeline_tiles(cuda::place_barriers(
                cuda::distribute_fills(cuda::keep_in_registers(r.optimized))))),
            after);
  // The printer given the optimized loops prints what it is given: no accumulator.
  EXPECT_EQ(count_of(cuda::generate(r.optimized).source, "kiln_acc"), 0);
  EXPECT_EQ(count_of(r.cuda->source, "\n  float b_kiln_acc"), 16);
}

// The barriers between a block's steps are placed by a pass (place_barriers) as gpu_barrier()
// statements, and the printer writes __syncthreads() where they are and nowhere else. The block's
// steps here: one thread loop fills a shared
// tile, the next reads it (a barrier), a third touches neither it nor what the second wrote (no
// barrier), a fourth overwrites the tile the second read (a barrier), and a fifth writes only
// thread registers (no barrier). The loop interpreter passes over the barriers.
TEST(GpuLowering, BarriersArePlacedByAPassAndPrintedWhereItPutThem) {
  using ir::Expr;
  using ir::Stmt;
  auto loop = [](const std::string& v, int64_t n, ir::LoopTag tag, Stmt body) -> Stmt {
    return std::make_shared<ir::For>(v, ir::int_imm(0), ir::int_imm(n), 1, tag, std::move(body));
  };
  auto store = [](const std::string& buf, Expr at, Expr value) -> Stmt {
    return std::make_shared<ir::Store>(buf, std::vector<Expr>{std::move(at)}, std::move(value));
  };
  auto load = [](const std::string& buf, Expr at) {
    return ir::load(buf, {std::move(at)}, ir::DType::F32);
  };
  const ir::LoopTag tx = ir::LoopTag::GpuThreadX;
  Expr t = ir::var("t"), g = ir::var("b") * ir::int_imm(64) + ir::var("t");
  Stmt steps = ir::block({
      loop("t", 64, tx, store("T", t, load("x", g))),
      loop("t", 64, tx, store("y", g, load("T", ir::int_imm(63) - t))),
      loop("t", 64, tx, store("z", g, load("x", g) * ir::float_imm(2.0))),
      loop("t", 64, tx, store("T", t, ir::float_imm(0.0))),
      loop("t", 64, tx, store("R", ir::int_imm(0), load("x", g))),
  });
  ir::LoweredFunc f;
  f.name = "steps";
  for (const char* b : {"x", "y", "z"}) {
    ir::Buf buf;
    buf.name = b;
    buf.shape = {ir::int_imm(256)};
    buf.kind = std::string(b) == "x" ? ir::BufKind::Input : ir::BufKind::Output;
    f.args.push_back(buf);
  }
  f.body =
      loop("b", 4, ir::LoopTag::GpuBlockX,
           std::make_shared<ir::Alloc>(
               "T", ir::DType::F32, std::vector<Expr>{ir::int_imm(64)}, ir::MemLoc::GpuShared,
               std::make_shared<ir::Alloc>("R", ir::DType::F32, std::vector<Expr>{ir::int_imm(1)},
                                           ir::MemLoc::GpuLocal, steps)));
  const std::string placed = ir::to_string(cuda::place_barriers(f).body);
  std::vector<size_t> barriers;
  for (size_t at = placed.find("gpu_barrier();"); at != std::string::npos;
       at = placed.find("gpu_barrier();", at + 1))
    barriers.push_back(at);
  ASSERT_EQ(barriers.size(), 2u) << placed;
  EXPECT_LT(placed.find("T[t] = x["), barriers[0]) << placed;
  EXPECT_LT(barriers[0], placed.find("y[")) << placed;
  EXPECT_LT(placed.find("z["), barriers[1]) << placed;
  EXPECT_LT(barriers[1], placed.find("T[t] = 0.0")) << placed;

  EXPECT_EQ(count_of(cuda::generate(cuda::place_barriers(f)).source, "__syncthreads();"), 2);
  EXPECT_EQ(count_of(cuda::generate(f).source, "__syncthreads();"), 0);

  Bindings in;
  for (const char* b : {"x", "y", "z"}) in.buffers[b] = HostBuffer(ir::DType::F32, {256});
  for (int64_t k = 0; k < 256; ++k) in.buffers["x"].set_f(k, static_cast<double>(k));
  interp::run_loops(cuda::place_barriers(f), in);
  for (int64_t k = 0; k < 256; ++k) {
    EXPECT_EQ(in.buffers["y"].get_f(k), static_cast<double>(k / 64 * 64 + 63 - k % 64)) << k;
    EXPECT_EQ(in.buffers["z"].get_f(k), 2.0 * static_cast<double>(k)) << k;
  }
}

// A loop from 0 to hi, and a load of a float, for funcs built by hand.
ir::Stmt loop_from_0(const std::string& v, ir::Expr hi, ir::LoopTag tag, ir::Stmt body) {
  return std::make_shared<ir::For>(v, ir::int_imm(0), std::move(hi), 1, tag, std::move(body));
}
ir::Expr load_f32(const std::string& buf, std::vector<ir::Expr> at) {
  return ir::load(buf, std::move(at), ir::DType::F32);
}

// An argument of a func built by hand.
ir::Buf arg(const char* name, std::vector<ir::Expr> shape, ir::BufKind kind) {
  ir::Buf out;
  out.name = name;
  out.shape = std::move(shape);
  out.kind = kind;
  return out;
}

// A pipelined loop's barriers are all the passes': place_barriers puts the one that ends its
// computation, before the stores of the next step's elements into the tiles, and pipeline_tiles
// the two of the pipeline's form, after the first step's tiles and after those stores. The
// printer writes a __syncthreads() for each, and no other; a loop tagged gpu_pipelined that
// pipeline_tiles did not write is an internal error. Without the passes there is no barrier and
// no pipeline.
TEST(GpuLowering, APipelinedLoopsBarriersAreAllThePasses) {
  ir::Func f = parse_one(gpu_example("matmul"), {{"M", 256}, {"N", 128}, {"K", 64}});
  CompileResult r = compile(gpu_request(f));
  const std::string lowered = ir::to_string(r.gpu_lowered);
  EXPECT_EQ(count_of(ir::to_string(r.optimized), "gpu_barrier"), 0);
  // before C's elements are loaded into registers (after the block's threads initialized C),
  // after the first step's tiles, at the end of the K loop's computation, after the stores
  EXPECT_EQ(count_of(lowered, "gpu_barrier();"), 4) << lowered;
  EXPECT_EQ(count_of(r.cuda->source, "__syncthreads();"), 4) << r.cuda->source;
  EXPECT_EQ(count_of(lowered, "// gpu_pipelined"), 0) << lowered;
  EXPECT_EQ(count_of(lowered, "// gpu_rank"), 2 * 3) << lowered;  // A's and B's, three copies each

  ir::LoweredFunc tagged = cuda::place_barriers(
      cuda::distribute_fills(cuda::keep_in_registers(cuda::keep_fragments(r.optimized))));
  EXPECT_EQ(count_of(ir::to_string(tagged), "// gpu_pipelined"), 1);
  try {
    cuda::generate(tagged);
    ADD_FAILURE() << "a loop tagged gpu_pipelined was printed";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline_tiles did not write it"), std::string::npos)
        << e.what();
  }
  ir::LoweredFunc unplaced = cuda::keep_in_registers(cuda::keep_fragments(r.optimized));
  EXPECT_EQ(count_of(cuda::generate(unplaced).source, "__syncthreads();"), 0);
  EXPECT_EQ(count_of(cuda::generate(unplaced).source, "kiln_pf"), 0);
}

// pipeline_tiles writes the pipeline in the loops it hands the printer: the tiles allocated
// around the K loop, the first step's copies before it, and in its body a thread's registers
// (gpu_local) for the next step's elements, read where the fills were and stored into the
// tiles after the computation. Each copy is a loop over the block's threads by rank (gpu_rank,
// to gpu_block_threads(n): n is the thread loops' 256 threads), a thread's groups unrolled: with
// 8 x 8 threads, A's 32 x 16 slice is 128 float4, two a thread. The loop interpreter runs the
// ranks one after another, each with its own registers, to the reference's values, and the
// printer writes each rank loop as the code of the thread whose rank is kiln_tid.
TEST(GpuLowering, APipelineIsWrittenByAPassTheInterpreterRuns) {
  ir::Func f =
      parse_one(gpu_example("matmul"), {{"M", 128}, {"N", 128}, {"K", 64}, {"TY", 8}, {"TX", 8}});
  CompileResult r = compile(gpu_request(f));
  const std::string loops = ir::to_string(r.gpu_lowered);
  size_t k_loop = loops.find("for (ko = ");
  ASSERT_NE(k_loop, std::string::npos) << loops;
  const std::string before = loops.substr(0, k_loop), in_k = loops.substr(k_loop);
  EXPECT_EQ(count_of(before, "@gpu_shared"), 2) << loops;  // the tiles, around the loop
  EXPECT_EQ(count_of(in_k, "@gpu_shared"), 0) << loops;
  EXPECT_EQ(count_of(before, "// gpu_rank"), 2) << loops;  // the first step's copies
  EXPECT_EQ(count_of(in_k, "// gpu_rank"), 4) << loops;    // the reads, the stores
  EXPECT_EQ(count_of(loops, "< gpu_block_threads(64);"), 6) << loops;
  EXPECT_EQ(count_of(in_k, "alloc kiln_pf"), 2) << loops;
  EXPECT_EQ(count_of(in_k, "@gpu_local"), 2) << loops;
  EXPECT_EQ(count_of(loops, " + 1 * gpu_block_threads(64)"), 2 * 3) << loops;  // A's second group

  interp::Mismatch mm = gpu_loops_against_reference(f, r, 7, interp::tolerance_of(f)).gpu_lowered;
  EXPECT_TRUE(mm.ok) << mm.describe();

  const std::string& source = r.cuda->source;
  EXPECT_EQ(count_of(source, " = kiln_tid;"), 6) << source;
  EXPECT_EQ(count_of(source, "float4 b_kiln_pf0_0;"), 1) << source;  // A's two groups
  EXPECT_EQ(count_of(source, "float4 b_kiln_pf0_1;"), 1) << source;
}

// The names the GPU lowering passes make avoid the func's own, its buffers' too: an input named
// kiln_pf0 (the name pipeline_tiles would give its first registers) is still the input in the
// K loop's reads, emulated as on the loop interpreter. The registers had been declared
// b_kiln_pf0, hiding the input, and the prefetch read 64 floats of a 4-float array.
TEST(GpuLowering, TheNamesThePassesMakeAvoidTheFuncsBuffers) {
  ir::Func f = parse_one(R"(
func clash {
  param N = 64, K = 64;
  input  kiln_pf0 : f32[K];
  input  B : f32[K, N];
  output C : f32[N];
  compute C(j) in 0 <= j < N:
    C[j] = sum(k in 0 <= k < K) kiln_pf0[k] * B[k, j];
  schedule {
    C_init.split(j, 32, jo, tx);
    C.split(j, 32, jo, tx);
    C.split(k, 8, ko, ki);
    C.reorder(jo, ko, tx, ki);
    C.after(C_init, jo);
    C.cache_identity(kiln_pf0, ko, gpu_shared);
    C.cache_identity(B, ko, gpu_shared);
    C_init.tag(jo, gpu_block_x);
    C_init.tag(tx, gpu_thread_x);
    C.tag(jo, gpu_block_x);
    C.tag(tx, gpu_thread_x);
  }
})");
  CompileResult r = gpu_compile(f);
  const std::string loops = ir::to_string(r.gpu_lowered);
  EXPECT_EQ(count_of(loops, "alloc kiln_pf0:"), 0) << loops;
  EXPECT_EQ(count_of(loops, "alloc kiln_pf1:"), 1) << loops;  // the registers, named apart
  GpuLoopsMismatch loops_mm = gpu_loops_against_reference(f, r, 5, interp::tolerance_of(f));
  EXPECT_TRUE(loops_mm.gpu_lowered.ok) << loops_mm.gpu_lowered.describe();
  for (ThreadOrder order : {ThreadOrder::Forward, ThreadOrder::Reverse}) {
    interp::Mismatch mm = emulated_against_reference(f, *r.cuda, 5, order);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

// place_barriers decides which loops are pipelines and marks them; pipeline_tiles writes those,
// and only those, as pipelines. The printer decided again for itself before, with the lets it had
// printed so far rather than those in scope: here the thread loop's `n = 1024` would have hidden
// the block's `n = 4`, the printer would not have pipelined the K loop (128 floats a thread) where
// the pass had (4), and the fill and the computation would have had no barrier between them.
TEST(GpuLowering, ThePassMarksThePipelinesThePrinterWrites) {
  using ir::Expr;
  using ir::Stmt;
  auto loop = [](const std::string& v, Expr lo, Expr hi, ir::LoopTag tag, Stmt body) -> Stmt {
    return std::make_shared<ir::For>(v, std::move(lo), std::move(hi), 1, tag, std::move(body));
  };
  auto c = [](int64_t v) { return ir::int_imm(v); };
  auto store = [](const std::string& buf, std::vector<Expr> at, Expr value) -> Stmt {
    return std::make_shared<ir::Store>(buf, std::move(at), std::move(value));
  };
  auto load = [](const std::string& buf, std::vector<Expr> at) {
    return ir::load(buf, std::move(at), ir::DType::F32);
  };
  Expr bx = ir::var("bx"), tx = ir::var("tx"), k = ir::var("k");
  Stmt thread_code = loop(
      "tx", c(0), c(32), ir::LoopTag::GpuThreadX,
      std::make_shared<ir::LetStmt>("n", c(1024), store("D", {bx * c(32) + tx}, load("x", {tx}))));
  Stmt fill =
      loop("e0", c(0), ir::var("n"), ir::LoopTag::None,
           loop("e1", c(0), c(4), ir::LoopTag::None,
                std::make_shared<ir::Store>("As", std::vector<Expr>{ir::var("e0"), ir::var("e1")},
                                            load("A", {k * c(4) + ir::var("e0"), ir::var("e1")}),
                                            "As_fill")));  // a cache fill (nests.h is_fill)
  Stmt compute = loop("tx", c(0), c(16), ir::LoopTag::GpuThreadX,
                      store("C", {bx * c(8) + k, tx},
                            load("As", {ir::binary(ir::BinaryOp::Div, tx, c(4)),
                                        ir::binary(ir::BinaryOp::Mod, tx, c(4))})));
  Stmt k_loop =
      loop("k", c(0), c(8), ir::LoopTag::None,
           std::make_shared<ir::Alloc>("As", ir::DType::F32, std::vector<Expr>{c(4), c(4)},
                                       ir::MemLoc::GpuShared, ir::block({fill, compute})));
  ir::LoweredFunc f;
  f.name = "shadowed";
  f.args = {arg("A", {c(32), c(4)}, ir::BufKind::Input), arg("x", {c(32)}, ir::BufKind::Input),
            arg("C", {c(32), c(16)}, ir::BufKind::Output), arg("D", {c(128)}, ir::BufKind::Output)};
  f.body = loop("bx", c(0), c(4), ir::LoopTag::GpuBlockX,
                std::make_shared<ir::LetStmt>("n", c(4), ir::block({thread_code, k_loop})));
  const std::string lowered = ir::to_string(cuda::place_barriers(cuda::distribute_fills(f)).body);
  EXPECT_EQ(count_of(lowered, "// gpu_pipelined"), 1) << lowered;
  ir::LoweredFunc placed = cuda::pipeline_tiles(cuda::place_barriers(cuda::distribute_fills(f)));
  const std::string source = cuda::generate(placed).source;
  EXPECT_NE(source.find("kiln_pf"), std::string::npos) << source;
  // after the first step's tiles, after the computation, after the next step's stores
  EXPECT_EQ(count_of(source, "__syncthreads();"), 3) << source;

  Bindings in;
  in.buffers["A"] = HostBuffer(ir::DType::F32, {32, 4});
  in.buffers["x"] = HostBuffer(ir::DType::F32, {32});
  in.buffers["C"] = HostBuffer(ir::DType::F32, {32, 16});
  in.buffers["D"] = HostBuffer(ir::DType::F32, {128});
  for (int64_t e = 0; e < 128; ++e) in.buffers["A"].set_f(e, static_cast<double>(e));
  interp::run_loops(placed, in);
  for (int64_t row = 0; row < 32; ++row)
    for (int64_t t = 0; t < 16; ++t)
      EXPECT_EQ(in.buffers["C"].get_f(row * 16 + t), static_cast<double>((row % 8) * 16 + t))
          << row << ", " << t;
}

// Which fills the block's threads share, and how many floats each of their iterations copies,
// is the distribute_fills pass's decision, in the loops it hands the printer: the outermost loop
// of each fill tagged gpu_distributed, and a loop tagged gpu_lanes inside the innermost one,
// which then steps by the group. A fill from rows of 8 floats copies 4 at once, one from rows of
// 9 (no alignment) one by one; a fill that scales what it copies is distributed but copies no
// group, and a fill of a thread's own registers is left to every thread. The loop
// interpreter runs the rewritten loops to the same values; the printer, given the loops without
// the pass, deals out no fill.
TEST(GpuLowering, FillsAreDealtOutByAPassThatSaysHowManyFloatsAtOnce) {
  using ir::Expr;
  using ir::Stmt;
  auto c = [](int64_t v) { return ir::int_imm(v); };
  const auto& loop = loop_from_0;
  const auto& load = load_f32;
  auto fill = [&](const std::string& tile, Expr value) -> Stmt {  // tile[r, e] = value
    return loop(
        "r", c(4), ir::LoopTag::None,
        loop("e", c(8), ir::LoopTag::None,
             std::make_shared<ir::Store>(tile, std::vector<Expr>{ir::var("r"), ir::var("e")},
                                         std::move(value), tile + "_fill")));
  };
  auto alloc = [&](const std::string& tile, ir::MemLoc loc, Stmt body) -> Stmt {
    return std::make_shared<ir::Alloc>(tile, ir::DType::F32, std::vector<Expr>{c(4), c(8)}, loc,
                                       std::move(body));
  };
  Expr b = ir::var("b"), t = ir::var("t"), e = ir::var("e");
  Expr row = b * c(4) + ir::var("r");
  // y[b, t] = the sum of the four tiles' elements t of row t % 4
  auto tile_at = [&](const std::string& tile) {
    return load(tile, {ir::binary(ir::BinaryOp::Mod, t, c(4)), t});
  };
  Stmt use = loop(
      "t", c(8), ir::LoopTag::GpuThreadX,
      std::make_shared<ir::Store>("y", std::vector<Expr>{b, t},
                                  tile_at("Ta") + tile_at("Tb") + tile_at("Tc") + tile_at("Td")));
  // A's rows of 8 floats keep a float4's alignment, B's of 9 none
  Stmt body = alloc(
      "Ta", ir::MemLoc::GpuShared,
      alloc("Tb", ir::MemLoc::GpuShared,
            alloc("Tc", ir::MemLoc::GpuShared,
                  alloc("Td", ir::MemLoc::GpuLocal,
                        ir::block({fill("Ta", load("A", {row, e})), fill("Tb", load("B", {row, e})),
                                   fill("Tc", load("A", {row, e}) * ir::float_imm(2.0)),
                                   fill("Td", load("A", {row, e})), use})))));
  ir::LoweredFunc f;
  f.name = "fills";
  f.args = {arg("A", {c(16), c(8)}, ir::BufKind::Input),
            arg("B", {c(16), c(9)}, ir::BufKind::Input),
            arg("y", {c(4), c(8)}, ir::BufKind::Output)};
  f.body = loop("b", c(4), ir::LoopTag::GpuBlockX, body);

  ir::LoweredFunc dealt = cuda::distribute_fills(f);
  const std::string loops = ir::to_string(dealt.body);
  EXPECT_EQ(count_of(ir::to_string(f.body), "// gpu_"), 2);      // the block and thread loops
  EXPECT_EQ(count_of(loops, "// gpu_distributed"), 3) << loops;  // Ta, Tb, Tc
  EXPECT_EQ(count_of(loops, "// gpu_lanes"), 2) << loops;        // Ta, Tb
  EXPECT_EQ(count_of(loops, "for (e = 0; e < 8; e += 4)"), 1) << loops;  // Ta's groups
  EXPECT_EQ(count_of(loops, "kiln_lane0 < e + 4;"), 1) << loops;
  EXPECT_EQ(count_of(loops, "kiln_lane1 < e + 1;"), 1) << loops;  // Tb's, one float each
  EXPECT_EQ(count_of(loops, "Td[r, e] = "), 1) << loops;          // as it was

  Bindings before, after;
  for (Bindings* in : {&before, &after}) {
    in->buffers["A"] = HostBuffer(ir::DType::F32, {16, 8});
    in->buffers["B"] = HostBuffer(ir::DType::F32, {16, 9});
    in->buffers["y"] = HostBuffer(ir::DType::F32, {4, 8});
    for (int64_t k = 0; k < 16 * 8; ++k) in->buffers["A"].set_f(k, static_cast<double>(k % 23));
    for (int64_t k = 0; k < 16 * 9; ++k) in->buffers["B"].set_f(k, static_cast<double>(k % 19));
  }
  interp::run_loops(cuda::place_barriers(f), before);
  interp::run_loops(cuda::place_barriers(dealt), after);
  for (int64_t k = 0; k < 32; ++k)
    EXPECT_EQ(after.buffers["y"].get_f(k), before.buffers["y"].get_f(k)) << k;

  // The printer deals out the three (Ta's as float4s), and none it is not told to.
  const std::string source = cuda::generate(cuda::place_barriers(dealt)).source;
  EXPECT_EQ(count_of(source, "= kiln_tid; kiln_c"), 3) << source;
  EXPECT_EQ(count_of(source, "reinterpret_cast<const float4*>(&b_A["), 1) << source;
  EXPECT_EQ(count_of(cuda::generate(cuda::place_barriers(f)).source, "= kiln_tid; kiln_c"), 0);
}

// The pipeline planner reads a let inside a pipelined loop's body for that let's body only, as
// distribute_fills and the printer do: here the K loop's first fill has 8 columns (an inner
// `n = 8`, float4 groups) and the second 6 (the kernel's `n = 6`, float2 groups). It had kept
// the inner `n` for the second fill too, and planned groups of 4 where the pass had made them 2.
TEST(GpuLowering, APipelinedLoopsLetsScopeTheirBodiesOnly) {
  using ir::Expr;
  using ir::Stmt;
  auto c = [](int64_t v) { return ir::int_imm(v); };
  const auto& loop = loop_from_0;
  const auto& load = load_f32;
  Expr k = ir::var("k"), t = ir::var("t"), b = ir::var("b");
  auto fill = [&](const std::string& tile) -> Stmt {  // tile[r, e] = A[k * 4 + r, e], e < n
    return loop("r", c(4), ir::LoopTag::None,
                loop("e", ir::var("n"), ir::LoopTag::None,
                     std::make_shared<ir::Store>(
                         tile, std::vector<Expr>{ir::var("r"), ir::var("e")},
                         load("A", {k * c(4) + ir::var("r"), ir::var("e")}), tile + "_fill")));
  };
  Expr row = ir::binary(ir::BinaryOp::Mod, t, c(4));
  Stmt compute =
      loop("t", c(8), ir::LoopTag::GpuThreadX,
           std::make_shared<ir::Store>(
               "C", std::vector<Expr>{b * c(8) + k, t},
               load("Ta", {row, t}) + load("Tb", {row, ir::binary(ir::BinaryOp::Mod, t, c(6))})));
  auto tile = [&](const std::string& name, Stmt body) -> Stmt {
    return std::make_shared<ir::Alloc>(name, ir::DType::F32, std::vector<Expr>{c(4), c(8)},
                                       ir::MemLoc::GpuShared, std::move(body));
  };
  Stmt k_loop =
      loop("k", c(8), ir::LoopTag::None,
           tile("Ta", tile("Tb", ir::block({std::make_shared<ir::LetStmt>("n", c(8), fill("Ta")),
                                            fill("Tb"), compute}))));
  ir::LoweredFunc f;
  f.name = "lets";
  f.args = {arg("A", {c(32), c(8)}, ir::BufKind::Input),
            arg("C", {c(32), c(8)}, ir::BufKind::Output)};
  f.body =
      loop("b", c(4), ir::LoopTag::GpuBlockX, std::make_shared<ir::LetStmt>("n", c(6), k_loop));

  const std::string lowered = ir::to_string(cuda::place_barriers(cuda::distribute_fills(f)).body);
  EXPECT_EQ(count_of(lowered, "// gpu_pipelined"), 1) << lowered;
  EXPECT_EQ(count_of(lowered, "kiln_lane0 < e + 4;"), 1) << lowered;
  EXPECT_EQ(count_of(lowered, "kiln_lane1 < e + 2;"), 1) << lowered;
  ir::LoweredFunc placed = cuda::pipeline_tiles(cuda::place_barriers(cuda::distribute_fills(f)));
  const std::string source = cuda::generate(placed).source;
  EXPECT_EQ(count_of(source, "float4 b_kiln_pf"), 1) << source;
  EXPECT_EQ(count_of(source, "float2 b_kiln_pf"), 2) << source;  // 12 pairs for 8 threads

  Bindings before, after;
  for (Bindings* in : {&before, &after}) {
    in->buffers["A"] = HostBuffer(ir::DType::F32, {32, 8});
    in->buffers["C"] = HostBuffer(ir::DType::F32, {32, 8});
    for (int64_t e = 0; e < 256; ++e) in->buffers["A"].set_f(e, static_cast<double>(e % 29));
  }
  interp::run_loops(f, before);
  interp::run_loops(placed, after);
  for (int64_t e = 0; e < 256; ++e)
    EXPECT_EQ(after.buffers["C"].get_f(e), before.buffers["C"].get_f(e)) << e;
}

// A one-thread nest whose outermost loop is tagged unroll stays one kernel: the loop is left a
// loop (its copies would be kernels of their own), the loops inside it are unrolled.
TEST(GpuCodegen, AnUnrolledOutermostLoopOfAOneThreadNestStaysOneKernel) {
  const std::string text = R"(
func scale_gpu {
  input  x : f32[4, 3];
  output y : f32[4, 3];
  compute s(i, j) in 0 <= i < 4 and 0 <= j < 3: y[i, j] = x[i, j] * 2.0;
  schedule {
    s.tag(i, unroll);
    s.tag(j, unroll);
  }
})";
  ir::Func f = parse_one(text);
  cuda::Program p = gpu_program(f);
  ASSERT_EQ(p.launches.size(), 1u) << p.source;
  EXPECT_EQ(count_of(p.source, "#pragma unroll"), 1) << p.source;
  EXPECT_EQ(count_of(p.source, "b_y[(v_i) * (3) + (2)] = "), 1) << p.source;  // j unrolled
  GpuLoopsMismatch mm = gpu_loops_of(f, 7);
  EXPECT_TRUE(mm.gpu_lowered.ok) << mm.gpu_lowered.describe();
}

TEST(GpuCodegen, UntaggedNestRunsOnOneThreadWithANote) {
  ir::Func f = parse_one(with_schedule(gpu_example("matmul"), ""), {{"M", 8}, {"N", 8}, {"K", 8}});
  cuda::Program p = gpu_program(f);
  ASSERT_FALSE(p.launches.empty());
  for (const cuda::Launch& l : p.launches) EXPECT_EQ(l.block, (std::array<int64_t, 3>{1, 1, 1}));
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes[0].find("runs as one GPU thread"), std::string::npos) << p.notes[0];
}

// What a GPU cannot run is refused with the loop and the reason.
TEST(GpuCodegen, RefusesWhatAGpuCannotRun) {
  const std::string mm = gpu_example("matmul");
  auto refused = [&](const std::string& sched, const std::string& expected) {
    std::string err = gpu_compile_error(with_schedule(mm, sched));
    EXPECT_NE(err.find(expected), std::string::npos) << "schedule: " << sched << "\n" << err;
  };
  refused("C.tag(i, parallel); C_init.tag(i, parallel);", "tagged parallel, a CPU tag");
  refused(
      "C.tag(j, gpu_block_x); C_init.tag(j, gpu_block_x);"
      "C.tag(i, gpu_thread_x); C_init.tag(i, gpu_thread_x);",
      "outside every gpu_block loop");
  refused(
      "C_init.split(j, 4, jo, ji); C.split(j, 4, jo, ji); C.after(C_init, ji);"
      "C.tag(i, gpu_block_x); C_init.tag(i, gpu_block_x);"
      "C.tag(jo, gpu_block_x); C_init.tag(jo, gpu_block_x);",
      "two loops of one kernel are tagged gpu_block_x");
  refused(
      "C_init.split(j, 64, jo, ji); C.split(j, 64, jo, ji); C.split(i, 32, io, ii);"
      "C_init.split(i, 32, io, ii); C.reorder(io, jo, ii, ji, k); C_init.reorder(io, jo, ii, ji);"
      "C.after(C_init, ji); C.tag(io, gpu_block_x); C_init.tag(io, gpu_block_x);"
      "C.tag(ii, gpu_thread_y); C_init.tag(ii, gpu_thread_y);"
      "C.tag(ji, gpu_thread_x); C_init.tag(ji, gpu_thread_x);",
      "needs 2048 threads per block (64 x 32 x 1)");
  refused(
      "C.tag(i, gpu_block_x); C_init.tag(i, gpu_block_x); C.tag(j, gpu_thread_x);"
      "C_init.tag(j, gpu_thread_x); C.after(C_init, j); C.cache_identity(B, j, gpu_shared);",
      "gpu_shared but allocated inside a thread loop");
}

// A block has at most 1024 threads: a 1024-wide thread loop is accepted, a 1025-wide one not.
TEST(GpuCodegen, AThousandAndTwentyFourThreadsFit) {
  std::string text = with_schedule(gpu_example("matmul"),
                                   "C.tag(i, gpu_block_x); C_init.tag(i, gpu_block_x);"
                                   "C.tag(j, gpu_thread_x); C_init.tag(j, gpu_thread_x);"
                                   "C.after(C_init, j);");
  cuda::Program p = gpu_program(parse_one(text, {{"N", 1024}, {"M", 4}, {"K", 4}}));
  EXPECT_EQ(p.launches.at(0).block[0], 1024);
  try {
    gpu_program(parse_one(text, {{"N", 1025}, {"M", 4}, {"K", 4}}));
    FAIL() << "accepted";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 1025 threads per block"), std::string::npos)
        << e.what();
  }
}

// A thread loop whose extent is a run-time size has no constant bound.
TEST(GpuCodegen, ThreadLoopOfRunTimeExtentIsRefused) {
  std::string text = std::regex_replace(
      gpu_example("matmul"), std::regex("param M = 1024, N = 1024, K = 1024;"), "param M, N, K;");
  std::string err =
      gpu_compile_error(with_schedule(text,
                                      "C.tag(i, gpu_block_x); C_init.tag(i, gpu_block_x);"
                                      "C.tag(j, gpu_thread_x); C_init.tag(j, gpu_thread_x);"
                                      "C.after(C_init, j);"));
  EXPECT_NE(err.find("extent of gpu_thread loop 'j'"), std::string::npos) << err;
  EXPECT_NE(err.find("no constant bound"), std::string::npos) << err;
}

// An input whose values index a buffer is checked on the device by a first kernel: each of its
// elements against the value spec, in [0, n) and sorted; every later kernel returns at once when
// the check failed. NVRTC compiles both, and the loops still match the reference.
TEST(GpuCodegen, InputValueSpecsAreCheckedByAFirstKernel) {
  const std::string text = R"(func gather_gpu {
  param m = 300, n = 50;
  input  idx : i32[m] in [0, n) sorted;
  input  x   : f32[n];
  output y   : f32[m];
  compute g(i) in 0 <= i < m: y[i] = x[idx[i]] * 2.0;
  schedule {
    g.split(i, 128, io, ii);
    g.tag(io, gpu_block_x);
    g.tag(ii, gpu_thread_x);
  }
})";
  ir::Func f = parse_one(text);
  cuda::Program p = gpu_program(f);
  ASSERT_EQ(p.launches.size(), 2u);
  EXPECT_EQ(p.launches[0].kernel, "gather_gpu_check");
  EXPECT_EQ(p.launches[0].block[0], 256);
  EXPECT_EQ(p.launches[1].kernel, "gather_gpu_k0");
  EXPECT_EQ(p.launches[1].block[0], 128);
  const std::string check = p.source.substr(p.source.find("gather_gpu_check("));
  EXPECT_NE(check.find("v < (0) || v > (49)"), std::string::npos) << check;          // [0, 50)
  EXPECT_NE(check.find("v < (long long)b_idx[e - 1]"), std::string::npos) << check;  // sorted
  const std::string k0 = p.source.substr(p.source.find("gather_gpu_k0("));
  EXPECT_NE(k0.find("if (*kiln_status != 0) return;"), std::string::npos) << k0;

  GpuLoopsMismatch mm = gpu_loops_of(f, 5);
  EXPECT_TRUE(mm.optimized.ok) << mm.optimized.describe();
  EXPECT_TRUE(mm.gpu_lowered.ok) << mm.gpu_lowered.describe();

  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  cuda::Binary bin = cuda::compile(p, "sm_90");
  EXPECT_NE(bin.ptx.find(".entry gather_gpu_check"), std::string::npos);
  EXPECT_NE(bin.ptx.find(".entry gather_gpu_k0"), std::string::npos);
  EXPECT_EQ(bin.resources.size(), 2u);
}

// ptxas's figures per kernel come out of NVRTC's log, and the rest of the log stays.
TEST(GpuCodegen, PtxasFiguresAreReadFromTheLog) {
  std::string rest;
  std::vector<cuda::KernelResources> r = cuda::parse_ptxas_info(
      "x.cu(3): warning #550-D: variable \"t\" was set but never used\n"
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'mm_k0' for 'sm_90'\n"
      "ptxas info    : Function properties for mm_k0\n"
      "ptxas         .     24 bytes stack frame, 16 bytes spill stores, 16 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 8192 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compile time = 52.206 ms\n"
      "ptxas info    : Compiling entry function 'mm_k1' for 'sm_90'\n"
      "ptxas info    : Function properties for mm_k1\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 0 barriers, 368 bytes cmem[0]\n",
      &rest);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].kernel, "mm_k0");
  EXPECT_EQ(r[0].registers, 255);
  EXPECT_EQ(r[0].shared_bytes, 8192);
  EXPECT_EQ(r[0].stack_bytes, 24);
  EXPECT_EQ(r[0].spilled_bytes, 16);
  EXPECT_EQ(r[1].kernel, "mm_k1");
  EXPECT_EQ(r[1].registers, 12);
  EXPECT_EQ(r[1].shared_bytes, 0);
  EXPECT_EQ(rest, "x.cu(3): warning #550-D: variable \"t\" was set but never used\n");
  // Registers go to warps in units of 256: 33 per thread is 1280 a warp.
  EXPECT_EQ(cuda::block_registers(32, 1024), 32768);
  EXPECT_EQ(cuda::block_registers(33, 32), 1280);
  EXPECT_EQ(cuda::block_registers(64, 1025), 33 * 2048);
}

// kiln's kernels carry __launch_bounds__ of their block, so ptxas keeps a block of 32 x 32
// threads within the block's registers (64 a thread): with a 4 x 4 register tile each it fits;
// with 8 x 8 (64 accumulators) it spills, and a compile note says so.
TEST(GpuCodegen, ABigRegisterTileSpillsWithANote) {
  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  auto request = [](int64_t r) {
    CompileRequest q = gpu_request(parse_one(gpu_example("matmul"), {{"M", 512},
                                                                     {"N", 512},
                                                                     {"K", 64},
                                                                     {"TY", 32},
                                                                     {"TX", 32},
                                                                     {"RI", r},
                                                                     {"RJ", r},
                                                                     {"BK", 16}}));
    q.output = CompileOutput::Assembly;
    return compile(q);
  };
  CompileResult fits = request(4);
  ASSERT_TRUE(fits.cuda_binary.has_value());
  ASSERT_EQ(fits.cuda_binary->resources.size(), fits.cuda->launches.size());
  for (const cuda::KernelResources& k : fits.cuda_binary->resources) {
    EXPECT_GT(k.registers, 0) << k.kernel;
    EXPECT_EQ(k.spilled_bytes, 0) << k.kernel;
    EXPECT_LE(cuda::block_registers(k.registers, 1024), cuda::kRegistersPerBlock) << k.kernel;
  }
  for (const std::string& note : fits.notes) {
    EXPECT_EQ(note.find("ptxas"), std::string::npos) << note;
    EXPECT_EQ(note.find('\0'), std::string::npos) << note;
  }
  CompileResult spills = request(8);
  ASSERT_TRUE(spills.cuda_binary.has_value());
  EXPECT_LE(spills.cuda_binary->resources.at(0).registers, 64);
  EXPECT_GT(spills.cuda_binary->resources.at(0).spilled_bytes, 0);
  bool noted = false;
  for (const std::string& note : spills.notes)
    noted |= note.find("matmul_gpu: kernel matmul_gpu_k0 spills ") == 0 &&
             note.find("bytes per thread to local memory") != std::string::npos;
  EXPECT_TRUE(noted) << ::testing::PrintToString(spills.notes);
}

// A kernel without launch bounds that keeps 96 values live needs about 100 registers a thread:
// a block of 1024 threads of it needs more than the 65536 a block has, and the compile says so
// before any GPU sees the launch (the tuner drops such a point without measuring it).
TEST(GpuCodegen, ABlockThatNeedsMoreRegistersThanABlockHasIsRefused) {
  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  cuda::Program p;
  p.name = "live";
  p.source =
      "extern \"C\" __global__ void live_k0(float* p, int n) {\n"
      "  float v[96];\n"
      "#pragma unroll\n"
      "  for (int k = 0; k < 96; ++k) v[k] = p[threadIdx.x * 96 + k];\n"
      "  for (int i = 0; i < n; ++i) {\n"
      "#pragma unroll\n"
      "    for (int k = 0; k < 96; ++k) v[k] = v[k] * v[(k + 1) % 96] + 1.0f;\n"
      "  }\n"
      "#pragma unroll\n"
      "  for (int k = 0; k < 96; ++k) p[threadIdx.x * 96 + k] = v[k];\n"
      "}\n";
  cuda::Launch l;
  l.kernel = "live_k0";
  l.grid = {ir::int_imm(1), ir::int_imm(1), ir::int_imm(1)};
  l.block = {32, 1, 1};
  p.launches = {l};
  cuda::Binary small = cuda::compile(p, "sm_90");
  ASSERT_EQ(small.resources.size(), 1u);
  ASSERT_GT(small.resources[0].registers, 96);
  p.launches[0].block = {1024, 1, 1};
  // Another source text: NVRTC 13.0 on a GPU machine gave no ptxas figures at all for a second
  // compilation of the very same source (kiln's own kernels differ with their block anyway:
  // they carry its __launch_bounds__).
  p.source = "// a block of 1024 threads\n" + p.source;
  try {
    cuda::Binary big = cuda::compile(p, "sm_90");
    std::string figures;
    for (const cuda::KernelResources& k : big.resources)
      figures += " '" + k.kernel + "': " + std::to_string(k.registers) + " registers;";
    FAIL() << "accepted; ptxas said" << figures << " " << cuda::nvrtc_version() << "\n" << big.log;
  } catch (const CompileError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("kernel live_k0 needs "), std::string::npos) << m;
    EXPECT_NE(m.find("registers per block (" + std::to_string(small.resources[0].registers) +
                     " per thread for 1024 threads, block (1024, 1, 1)), more than the 65536 a "
                     "block has on sm_90: the launch would fail on every such GPU"),
              std::string::npos)
        << m;
  }
}

// NVRTC's refusal comes back with its log.
TEST(GpuCodegen, NvrtcErrorsCarryTheLog) {
  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  cuda::Program p;
  p.name = "broken";
  p.source = "extern \"C\" __global__ void broken_k0() { undeclared_name = 1; }\n";
  try {
    cuda::compile(p, "sm_90");
    FAIL() << "compiled";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("undeclared_name"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::compile(p, "compute_90x"), CompileError);
  // A warning does not stop it, and is in the log.
  p.source = "extern \"C\" __global__ void broken_k0(int* p) { *p = 1 / 0; }\n";
  cuda::Binary bin = cuda::compile(p, "sm_90");
  EXPECT_FALSE(bin.cubin.empty());
  EXPECT_NE(bin.log.find("warning"), std::string::npos) << bin.log;
}

// ---------------------------------------------------------------------------------------------
// On the CPU, emulated (cuda_emulator.h): the printed kernels, compiled by the host's compiler,
// each block's threads as fibers that switch at the barriers

// Quotients of 300 integers, on blocks of 64 threads.
constexpr const char* kQuotient = R"(
func quotient {
  param n = 300;
  input a : i32[n];
  input b : i32[n];
  output q : i32[n];
  compute q(i) in 0 <= i < n: q[i] = a[i] / b[i];
  schedule { q.split(i, 64, io, ii); q.tag(io, gpu_block_x); q.tag(ii, gpu_thread_x); }
}
)";

// `run` (kQuotient's func f, on a GPU or emulated) computes the quotients, and a division by
// zero gives its check's status, which the run reports as the CPU kernels' callers do.
void expect_division_by_zero_reported(const ir::Func& f,
                                      const std::function<void(Bindings&)>& run) {
  Bindings in = interp::random_bindings(f, interp::param_values(f), 5);
  for (int64_t i = 0; i < 300; ++i) in.buffers.at("b").set_i(i, i % 7 + 1);
  Bindings ok = in;
  run(ok);
  for (int64_t i = 0; i < 300; ++i)
    EXPECT_EQ(ok.buffers.at("q").get_i(i),
              ir::floor_div(in.buffers.at("a").get_i(i), in.buffers.at("b").get_i(i)));
  in.buffers.at("b").set_i(123, 0);
  try {
    run(in);
    FAIL() << "no error";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Run);
    EXPECT_NE(std::string(e.what()).find("zero"), std::string::npos) << e.what();
  }
}

// Every GPU example but the tensor cores' (which the emulator does not run), under every schedule
// and size, at -O0 and -O3, computes emulated what the reference interpreter computes, its threads
// run in order and in reverse between barriers. This checks the printer where the loop
// interpreter cannot: which kernels the loops become, where each temporary lives, the fills dealt
// out to the threads, the vector copies, the pipelined tiles and the barriers.
TEST(GpuEmulated, EveryExampleMatchesTheReference) {
  int programs = 0;
  for_each_gpu_program(false, [&](const GpuCase&, const ir::Func& f, int opt) {
    cuda::Program p = gpu_program(f, opt);
    for (ThreadOrder order : {ThreadOrder::Forward, ThreadOrder::Reverse}) {
      interp::Mismatch mm = emulated_against_reference(f, p, 7, order);
      EXPECT_TRUE(mm.ok) << (order == ThreadOrder::Forward ? "threads in order: "
                                                           : "threads in reverse: ")
                         << mm.describe();
    }
    ++programs;
  });
  EXPECT_GE(programs, 40);
}

// The IR's integer division and modulo round down, C's toward zero: the printer writes a
// division by a positive constant as C's `/` and `%` where the dividend cannot be negative (the
// ranges it knows: loop bounds, lets), where the two agree, and as kiln_floordiv/kiln_floormod
// where it can be (a value read from memory). Emulated, both give the reference's values, on
// inputs of either sign.
TEST(GpuEmulated, FloorDivisionIsCsWhereTheDividendCannotBeNegative) {
  ir::Func f = parse_one(R"(
func floors {
  input x : i64[64];
  output q : i64[64];
  compute q(i) in 0 <= i < 64: q[i] = x[i] / 8 + x[i] % 8 + i / 4 * 100 + i % 4 * 1000;
  schedule { q.split(i, 16, io, ii); q.tag(io, gpu_block_x); q.tag(ii, gpu_thread_x); }
})");
  cuda::Program p = gpu_program(f);
  EXPECT_EQ(count_of(p.source, "(((v_ii) / (4)))"), 1) << p.source;
  EXPECT_EQ(count_of(p.source, "(((v_ii) % (4)))"), 1) << p.source;
  EXPECT_EQ(count_of(p.source, "kiln_floordiv<long long>(b_x["), 1) << p.source;
  EXPECT_EQ(count_of(p.source, "kiln_floormod<long long>(b_x["), 1) << p.source;
  for (ThreadOrder order : {ThreadOrder::Forward, ThreadOrder::Reverse}) {
    interp::Mismatch mm = emulated_against_reference(f, p, 11, order);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

// The emulator sees a missing barrier: the shared-tile matmul with its __syncthreads() taken out
// reads tiles before the block's other threads have filled them (NaN where no thread has yet), or
// refilled after they are read. And threads of one warp waiting at different barriers (a
// __syncthreads() that some of them skip for a __syncwarp()) are reported, not waited on forever.
TEST(GpuEmulated, AMissingBarrierIsSeen) {
  ir::Func f = parse_one(gpu_example("matmul"), {{"M", 64}, {"N", 128}, {"K", 48}});
  cuda::Program p = gpu_program(f);
  ASSERT_TRUE(emulated_against_reference(f, p, 3, ThreadOrder::Forward).ok);
  cuda::Program unsynced = p;
  unsynced.source = std::regex_replace(p.source, std::regex("__syncthreads\\(\\);"), ";");
  ASSERT_NE(unsynced.source, p.source);
  for (ThreadOrder order : {ThreadOrder::Forward, ThreadOrder::Reverse})
    EXPECT_FALSE(emulated_against_reference(f, unsynced, 3, order).ok);

  cuda::Program divergent = p;
  divergent.source =
      std::regex_replace(p.source, std::regex("__syncthreads\\(\\);"),
                         "if (threadIdx.x == 0) __syncthreads(); else __syncwarp();");
  try {
    emulated_against_reference(f, divergent, 3, ThreadOrder::Forward);
    FAIL() << "ran";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Run);
    EXPECT_NE(std::string(e.what()).find("cannot all be reached"), std::string::npos) << e.what();
  }
}

// A failed check in an emulated kernel gives its status, as on a GPU; a program on the tensor
// cores is refused with the reason.
TEST(GpuEmulated, ChecksAndRefusals) {
  ir::Func f = parse_one(kQuotient);
  cuda::Program p = gpu_program(f);
  CudaEmulator emulated(p, ::testing::TempDir());
  expect_division_by_zero_reported(f, [&](Bindings& b) { emulated.run(b); });
  cuda::Program mma = gpu_program(parse_one(gpu_example("matmul_tf32"), {{"M", 64}, {"N", 64}}));
  try {
    CudaEmulator refused(mma, ::testing::TempDir());
    FAIL() << "emulated";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor cores"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// On a GPU

bool have_gpu(std::string* why) {
  if (!cuda::nvrtc_available(why)) return false;
  return cuda::gpu_available(why);
}

// Every GPU example under every schedule and size computes on the GPU what the reference
// interpreter computes.
TEST(GpuRun, EveryExampleMatchesTheReference) {
  std::string why;
  if (!have_gpu(&why)) GTEST_SKIP() << "no GPU here (" << why << "): GPU execution not checked";
  cuda::Device gpu;
  for_each_gpu_program(true, [&](const GpuCase&, const ir::Func& f, int opt) {
    interp::Mismatch mm = gpu_run_against_reference(gpu, f, gpu_program(f, opt), 7);
    EXPECT_TRUE(mm.ok) << mm.describe();
  });
}

// An integer division by zero inside a GPU kernel gives its check's status, which the run
// reports as the CPU kernels' callers do.
TEST(GpuRun, DivisionByZeroIsReported) {
  std::string why;
  if (!have_gpu(&why)) GTEST_SKIP() << "no GPU here (" << why << "): GPU execution not checked";
  ir::Func f = parse_one(kQuotient);
  cuda::Program p = gpu_program(f);
  cuda::Device gpu;
  cuda::Binary bin = cuda::compile(p, gpu.arch());
  expect_division_by_zero_reported(f, [&](Bindings& b) { gpu.run(p, bin, b); });
}

// A kernel that faults poisons the CUDA context of its process for good (the driver's sticky
// errors), which is why agents run each job in a child process. Here the child is this test
// program cuda_fault_child: it reports the fault and ends, and this process's GPU runs on.
TEST(GpuRun, AFaultingKernelIsSurvived) {
  std::string why;
  if (!have_gpu(&why)) GTEST_SKIP() << "no GPU here (" << why << "): GPU execution not checked";
  std::string out = ::testing::TempDir() + "/cuda_fault_child.txt";
  std::string command = std::string(CUDA_FAULT_CHILD) + " > " + out + " 2>&1";
  int status = std::system(command.c_str());
  std::string child = read_file(out);
  EXPECT_EQ(status, 0) << child;
  EXPECT_NE(child.find("fault reported"), std::string::npos) << child;
  EXPECT_NE(child.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << child;

  ir::Func f = parse_one(gpu_example("matmul"), {{"M", 64}, {"N", 64}, {"K", 16}});
  cuda::Program p = gpu_program(f);
  Bindings in = interp::random_bindings(f, interp::param_values(f), 1);
  Bindings expected = in, actual = in;
  interp::run_reference(f, expected);
  cuda::Device gpu;
  gpu.run(p, cuda::compile(p, gpu.arch()), actual);
  interp::Mismatch mm = interp::compare_outputs(f, expected, actual);
  EXPECT_TRUE(mm.ok) << mm.describe();
}

}  // namespace
}  // namespace kiln::testing
