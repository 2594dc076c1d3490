// Tensor cores on the GPU backend: loop nests tagged mma become a warp's matrix
// multiply-accumulate (CUDA's warp matrix operations, TF32). Everywhere: the kernels' shape, the
// layouts and leading dimensions read from the accesses, NVRTC's PTX for sm_80 and sm_90 (the
// tensor-core instructions in it), the refusal of older GPUs, every refusal of a nest the tensor
// cores cannot run, and the tolerance the checks hold TF32 results to. The loops themselves
// against the reference, and the kernels on a GPU, are in cuda_test (examples/gpu/matmul_tf32
// is one of its examples); where a GPU is here, a larger product is checked below too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sstream>

#include "gpu_programs.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/interp.h"
#include "programs.h"

namespace kiln::testing {
namespace {

// The loops after the GPU lowering passes are held to f32's own tolerance: the rewrites keep f32
// arithmetic as it is; only the tensor cores round to TF32.
constexpr interp::Tolerance kExact{1e-5, 1e-6};

std::string tf32_example() { return read_source("examples/gpu/matmul_tf32.kiln"); }

// Each warp (wx) of a block of 16 x 32 owns one 16 x 16 tile, A and B read from device memory;
// `tags` and `extra` (a cache command) complete it, `src` is the algorithm.
std::string one_tile_per_warp(const std::string& tags, const std::string& extra = "",
                              const std::string& src = tf32_example()) {
  return with_schedule(
      src,
      "C_init.split(i, 16, io, mi); C_init.split(j, 16, j1, nj); C_init.split(j1, 2, jo, wx);"
      "C_init.reorder(io, jo, wx, mi, nj); C.split(i, 16, io, mi); C.split(j, 16, j1, nj);"
      "C.split(j1, 2, jo, wx); C.split(k, 8, ko, kk); C.reorder(io, jo, ko, wx, mi, nj, kk);"
      "C.after(C_init, jo); C_init.tag(io, gpu_block_y); C_init.tag(jo, gpu_block_x);"
      "C.tag(io, gpu_block_y); C.tag(jo, gpu_block_x);" +
          tags + extra);
}
const ir::Overrides kSmall = {{"M", 64}, {"N", 64}, {"K", 32}};
// Blocks of two warps side by side, each four tiles of 16 x 16 down; steps of 16 along k.
const ir::Overrides kNarrowWarps = {{"M", 128}, {"N", 96}, {"K", 48}, {"WY", 1},
                                    {"FI", 4},  {"WX", 2}, {"FJ", 1}, {"BK", 16}};

// The lanes of a warp see each other's writes in order: every warp matrix operation starts with
// __syncwarp(), and every store_matrix_sync and every store one lane makes for its warp is
// followed by one.
void expect_warp_syncs(const std::string& source) {
  std::istringstream in(source);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    size_t text = l.find_first_not_of(' ');
    lines.push_back(text == std::string::npos ? "" : l.substr(text));
  }
  int ops = 0;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.starts_with("{  // mma: ")) {
      ++ops;
      EXPECT_EQ(lines[i + 1], "__syncwarp();") << l;
    }
    if (l.starts_with("nvcuda::wmma::store_matrix_sync(") ||
        l.starts_with("if (threadIdx.x == 0)")) {
      EXPECT_EQ(lines[i + 1], "__syncwarp();") << l;
    }
  }
  EXPECT_GT(ops, 0);
}

// The example at its defaults: blocks of 2 x 2 warps (32 lanes along x), shared tiles aligned
// to 32 bytes for the fragment loads, A's padded rows 36 floats apart. Each warp's 2 x 2 tiles
// of C stay in its registers across the K loop (keep_fragments): an array of 4 accumulator
// fragments, loaded from C before the loop and stored after it, the tile loops unrolled; each k
// step loads A's and B's fragments (rounded to TF32) and multiplies into one of them.
TEST(TensorCores, TheTf32MatmulKernel) {
  cuda::Program p = gpu_program(parse_one(tf32_example()));
  EXPECT_TRUE(p.tensor_cores);
  ASSERT_EQ(p.launches.size(), 1u);
  EXPECT_EQ(p.launches[0].block, (std::array<int64_t, 3>{32, 2, 2}));
  EXPECT_EQ(ir::to_string(p.launches[0].grid[0]), "16");
  EXPECT_EQ(p.launches[0].shared_bytes, (64 * 36 + 32 * 64) * 4);
  EXPECT_EQ(count_of(p.source, "#include <mma.h>"), 1);
  EXPECT_EQ(count_of(p.source, "__shared__ __align__(32) float"), 2) << p.source;
  EXPECT_EQ(count_of(p.source,
                     "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, "
                     "float> b_kiln_frag0[4];"),
            1)
      << p.source;
  for (int f = 0; f < 4; ++f) {
    std::string frag = "b_kiln_frag0[" + std::to_string(f) + "]";
    EXPECT_EQ(count_of(p.source, "nvcuda::wmma::load_matrix_sync(" + frag + ", &b_C["), 1);
    EXPECT_EQ(count_of(p.source, "nvcuda::wmma::mma_sync(" + frag + ", "), 1) << p.source;
    EXPECT_EQ(count_of(p.source, ", " + frag + ", 1024, nvcuda::wmma::mem_row_major);"), 1);
  }
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::load_matrix_sync(kiln_ma"), 4) << p.source;
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::load_matrix_sync(kiln_mb"), 4) << p.source;
  EXPECT_EQ(count_of(p.source, "kiln_round_tf32(kiln_m"), 8) << p.source;
  EXPECT_EQ(count_of(p.source, "kiln_mc"), 0) << p.source;  // no tile of C reloaded per k step
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major>"), 8);
  EXPECT_EQ(count_of(p.source,
                     "&b_A_C_cache[(((v_cse_var_5) + (v_cse_var_10))) * (36) + "
                     "(v_cse_var_8)], 36);"),
            4)
      << p.source;
  // C's initialization is spread over 16 of the 32 lanes (gpu_thread_x on its columns)
  EXPECT_EQ(count_of(p.source, "if (v_nj < 16) {"), 1) << p.source;
  expect_warp_syncs(p.source);
}

// The rewrite is one of the loop IR: a gpu_local array of fragments around the K loop, which the
// loop interpreter runs (each thread its own copy) to what the reference computes.
TEST(TensorCores, KeptFragmentsAreLoopsTheInterpreterChecks) {
  ir::Func f = parse_one(tf32_example(), {{"M", 128}, {"N", 64}, {"K", 64}});
  CompileResult c = gpu_compile(f);
  std::string loops = ir::to_string(c.gpu_lowered.body);
  EXPECT_EQ(count_of(loops, "alloc kiln_frag0: f32[4, 16, 16] @gpu_local"), 1) << loops;
  // the 4 tiles (unrolled): copied in, updated (read and written), copied out
  EXPECT_EQ(count_of(loops, "kiln_frag0["), 4 * 4) << loops;
  interp::Mismatch mm = gpu_loops_against_reference(f, c, 5, kExact).gpu_lowered;
  EXPECT_TRUE(mm.ok) << mm.describe();
}

// A kernel of one block (the example's 64 x 64 block tile at M = N = 64, whose block loops
// lowering leaves out) keeps its warps' tiles of C in registers across the whole K loop, as a
// kernel of more blocks does: loaded before the loop and stored after it, not once per K step
// around the k steps inside the warps' loops (keep_fragments walks the kernels through
// map_kernels, which gives such a kernel its block loop of one iteration back).
TEST(TensorCores, AKernelOfOneBlockKeepsItsFragmentsAcrossTheKLoop) {
  ir::Func f = parse_one(tf32_example(), {{"M", 64}, {"N", 64}, {"K", 64}});
  CompileResult c = gpu_compile(f);
  ASSERT_TRUE(c.cuda.has_value());
  const std::string& source = c.cuda->source;
  ASSERT_EQ(c.cuda->launches.size(), 2u) << source;  // C's initialization, the product
  for (const ir::Expr& g : c.cuda->launches[1].grid) EXPECT_EQ(ir::to_string(g), "1");
  const size_t k_loop = source.find("for (int v_ko = 0; v_ko < 2; v_ko += 1) {");
  ASSERT_NE(k_loop, std::string::npos) << source;
  for (int t = 0; t < 4; ++t) {
    const std::string frag = "b_kiln_frag0[" + std::to_string(t) + "]";
    const std::string load = "nvcuda::wmma::load_matrix_sync(" + frag + ", &b_C[";
    const std::string store = ", " + frag + ", 64, nvcuda::wmma::mem_row_major);";
    EXPECT_EQ(count_of(source, load), 1) << source;
    EXPECT_EQ(count_of(source, store), 1) << source;
    EXPECT_LT(source.find(load), k_loop) << source;
    EXPECT_GT(source.find(store), k_loop) << source;
  }
  interp::Mismatch mm = gpu_loops_against_reference(f, c, 5, kExact).gpu_lowered;
  EXPECT_TRUE(mm.ok) << mm.describe();
}

// A K loop inside the warps' loops keeps C's tile in the warp's registers too, its copies inside
// those loops. A nest no loop repeats (one k step) loads C's tile, multiplies into it and stores
// it back.
TEST(TensorCores, AKLoopInsideTheWarpsLoopsAndNoKLoop) {
  std::string text = with_schedule(
      tf32_example(),
      "C_init.split(i, 16, io, mi); C_init.split(j, 16, jo, nj); C_init.reorder(io, jo, mi, nj);"
      "C.split(i, 16, io, mi); C.split(j, 16, jo, nj); C.split(k, 8, ko, kk);"
      "C.split(io, 2, io1, w); C.reorder(io1, jo, w, ko, mi, nj, kk); C_init.split(io, 2, io1, w);"
      "C_init.reorder(io1, jo, w, mi, nj); C.after(C_init, w); C_init.tag(io1, gpu_block_y);"
      "C_init.tag(jo, gpu_block_x); C_init.tag(w, gpu_thread_y); C.tag(io1, gpu_block_y);"
      "C.tag(jo, gpu_block_x); C.tag(w, gpu_thread_y); C.tag(mi, mma);");
  cuda::Program p = gpu_program(parse_one(text, kSmall));
  EXPECT_EQ(count_of(p.source, "b_kiln_frag0[1];"), 1) << p.source;
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::mma_sync(b_kiln_frag0[0], "), 1) << p.source;
  EXPECT_EQ(count_of(p.source, "kiln_mc"), 0) << p.source;

  expect_warp_syncs(p.source);
  p = gpu_program(parse_one(text, {{"M", 64}, {"N", 64}, {"K", 8}}));
  EXPECT_EQ(count_of(p.source, "kiln_frag"), 0) << p.source;
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::load_matrix_sync(kiln_mc0, &b_C["), 1) << p.source;
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::store_matrix_sync(&b_C["), 1) << p.source;
  expect_warp_syncs(p.source);
}

// Programs without mma nests are as before: no mma.h, shared tiles aligned to 16 bytes.
TEST(TensorCores, OnlyProgramsWithMmaNestsUseThem) {
  cuda::Program p = gpu_program(parse_one(read_source("examples/gpu/matmul.kiln")));
  EXPECT_FALSE(p.tensor_cores);
  EXPECT_EQ(count_of(p.source, "mma"), 0);
  EXPECT_EQ(count_of(p.source, "__align__(32)"), 0);
}

// A's slice staged transposed is a column-major tile whose columns are the padded rows; B read
// from device memory is row-major with N between rows. Stores to C outside the mma nests (its
// initialization, not spread over lanes) are the first lane's.
TEST(TensorCores, LayoutsAndLeadingDimensionsComeFromTheAccesses) {
  std::string text = one_tile_per_warp(
      "C_init.tag(wx, gpu_thread_y); C.tag(wx, gpu_thread_y); C.tag(mi, mma);",
      "C.cache(A, ko, gpu_shared, [\"8\", \"20\"], \"{ [e0, e1] -> [e1 - 8 * ko, e0 - 16 * io] "
      "}\");");
  cuda::Program p = gpu_program(parse_one(text, kSmall));
  EXPECT_EQ(p.launches.at(0).block, (std::array<int64_t, 3>{32, 2, 1}));
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::precision::tf32, nvcuda::wmma::col_major> kiln_ma"),
            1)
      << p.source;
  EXPECT_EQ(count_of(p.source, "nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major> kiln_mb"),
            1)
      << p.source;
  EXPECT_EQ(count_of(p.source, ", &b_A_C_cache[(0) * (20) + (0)], 20);"), 1) << p.source;
  EXPECT_EQ(count_of(p.source, ", 64);\n"), 1) << p.source;  // B's rows
  EXPECT_EQ(count_of(p.source, "if (threadIdx.x == 0) b_C["), 1) << p.source;
  expect_warp_syncs(p.source);
}

// Every point of the example's space that its knob constraints allow becomes one kernel of
// 32 x WY x WX threads with FI x FJ fragments per warp; the constraints refuse the points whose
// slices would not fit in shared memory, and a single warp. The loops at a few points compute what
// the reference does, and NVRTC compiles the point with the most fragments per warp and the one
// with the most warps.
TEST(TensorCores, EveryPointOfTheExamplesSpace) {
  const std::vector<int64_t> warps = {1, 2, 4}, tiles = {1, 2, 4}, steps = {8, 16, 32};
  int accepted = 0, refused = 0;
  for (int64_t wy : warps)
    for (int64_t wx : warps)
      for (int64_t fi : tiles)
        for (int64_t fj : tiles)
          for (int64_t bk : steps) {
            ir::Overrides set = {{"M", 512}, {"N", 512}, {"K", 256}, {"WY", wy},
                                 {"WX", wx}, {"FI", fi}, {"FJ", fj}, {"BK", bk}};
            bool fits = (wy * fi * 16 * (bk + 4) + bk * wx * fj * 16) * 4 <= 49152 && wy * wx >= 2;
            SCOPED_TRACE(::testing::Message() << "WY " << wy << " WX " << wx << " FI " << fi
                                              << " FJ " << fj << " BK " << bk);
            ir::Func f;
            try {
              f = parse_one(tf32_example(), set);
            } catch (const CompileError& e) {
              EXPECT_FALSE(fits) << e.what();
              ++refused;
              continue;
            }
            EXPECT_TRUE(fits);
            ++accepted;
            cuda::Program p = gpu_program(f);
            ASSERT_EQ(p.launches.size(), 1u);
            EXPECT_EQ(p.launches[0].block, (std::array<int64_t, 3>{32, wy, wx}));
            EXPECT_EQ(count_of(p.source, fmt::format("b_kiln_frag0[{}];", fi * fj)), 1);
          }
  EXPECT_EQ(accepted + refused, 243);
  EXPECT_GT(refused, 0);

  for (const ir::Overrides& set :
       {ir::Overrides{{"WY", 2}, {"WX", 1}, {"FI", 2}, {"FJ", 4}, {"BK", 8}},
        ir::Overrides{{"WY", 1}, {"WX", 4}, {"FI", 4}, {"FJ", 1}, {"BK", 16}}}) {
    ir::Overrides sized = set;
    sized.insert({{"M", 128}, {"N", 128}, {"K", 48}});
    ir::Func f = parse_one(tf32_example(), sized);
    interp::Mismatch mm = gpu_loops_against_reference(f, gpu_compile(f), 9, kExact).gpu_lowered;
    EXPECT_TRUE(mm.ok) << mm.describe();
  }

  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  for (const ir::Overrides& set :
       {ir::Overrides{{"WY", 2}, {"WX", 1}, {"FI", 4}, {"FJ", 4}, {"BK", 8}},
        ir::Overrides{{"WY", 4}, {"WX", 4}, {"FI", 1}, {"FJ", 1}, {"BK", 32}}}) {
    cuda::Program p = gpu_program(parse_one(tf32_example(), set));
    cuda::Binary bin = cuda::compile(p, "sm_90");
    EXPECT_EQ(bin.resources.size(), 1u);
  }
}

// NVRTC compiles the example for sm_80 and sm_90: the PTX has the TF32 tensor-core operation.
// Older GPUs have no TF32 tensor cores: refused before NVRTC runs.
TEST(TensorCores, PtxForSm80AndSm90AndOlderGpusRefused) {
  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  for (const ir::Overrides& set : {ir::Overrides{}, kNarrowWarps}) {
    cuda::Program p = gpu_program(parse_one(tf32_example(), set));
    for (const char* arch : {"sm_80", "sm_90"}) {
      SCOPED_TRACE(arch);
      cuda::Binary bin = cuda::compile(p, arch);
      EXPECT_NE(bin.ptx.find("mma.sync.aligned.row.row.m16n16k8.f32.tf32.tf32.f32"),
                std::string::npos)
          << bin.ptx.substr(0, 4000);
      EXPECT_NE(bin.ptx.find("wmma.load.a.sync.aligned.row.m16n16k8"), std::string::npos);
      EXPECT_EQ(bin.resources.size(), 1u) << "NVRTC's log without ptxas's lines:\n" << bin.log;
    }
  }
  cuda::Program p = gpu_program(parse_one(tf32_example()));
  try {
    cuda::compile(p, "sm_75");
    FAIL() << "compiled for sm_75";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("need sm_80 or later (an A100, H100 or H200), not sm_75"),
              std::string::npos)
        << e.what();
  }
}

// Every nest the tensor cores cannot run is refused with the loop and the reason.
TEST(TensorCores, RefusesWhatTheTensorCoresCannotRun) {
  auto refused = [&](const std::string& text, const std::string& expected,
                     const ir::Overrides& set = kSmall) {
    std::string err = gpu_compile_error(text, set);
    EXPECT_NE(err.find(expected), std::string::npos) << text << "\n" << err;
  };
  const std::string warps = "C_init.tag(wx, gpu_thread_y); C.tag(wx, gpu_thread_y);";
  // the warp's lanes are the x axis
  refused(one_tile_per_warp("C_init.tag(wx, gpu_thread_x); C.tag(wx, gpu_thread_x); "
                            "C.tag(mi, mma);"),
          "loop 'mi' is tagged mma inside a gpu_thread_x loop");
  refused(one_tile_per_warp("C.tag(mi, mma);"), "loop 'mi' is tagged mma outside every gpu_thread");
  // one warp a block: its loop has one iteration, which lowering removes, and the staged slices'
  // fills would otherwise be the first thing refused
  std::string one_warp = tf32_example();
  one_warp.replace(one_warp.find("    constraint WY * WX >= 2;\n"), 29, "");
  refused(one_warp, "loop 'mi' is tagged mma outside every gpu_thread loop",
          {{"M", 64}, {"N", 64}, {"K", 64}, {"WY", 1}, {"WX", 1}});
  // a gpu_thread_x loop of 16 of the 32 lanes is accepted
  EXPECT_EQ(gpu_compile_error(
                one_tile_per_warp(warps + "C.tag(mi, mma); C_init.tag(mi, gpu_thread_x);"), kSmall),
            "(accepted)");
  refused(one_tile_per_warp(warps + "C.tag(mi, mma); C_init.fuse(mi, nj, f);"
                                    "C_init.tag(f, gpu_thread_x);"),
          "gpu_thread_x loop 'f' runs up to 256 times in a kernel with loops tagged mma");
  // tiles of 16 x 16 x 8
  refused(with_schedule(tf32_example(),
                        "C_init.split(i, 8, io, mi); C_init.split(j, 16, j1, nj);"
                        "C_init.split(j1, 2, jo, wx); C_init.reorder(io, jo, wx, mi, nj);"
                        "C.split(i, 8, io, mi); C.split(j, 16, j1, nj); C.split(j1, 2, jo, wx);"
                        "C.split(k, 8, ko, kk); C.reorder(io, jo, ko, wx, mi, nj, kk);"
                        "C.after(C_init, jo); C_init.tag(io, gpu_block_y);"
                        "C_init.tag(jo, gpu_block_x); C.tag(io, gpu_block_y);"
                        "C.tag(jo, gpu_block_x);" +
                            warps + "C.tag(mi, mma);"),
          "its loops run 8 x 16 x 8 times (mi, nj, kk); a TF32 tensor-core tile is 16 x 16 x 8 (m, "
          "n, k): split and order the loops so that the nest is that tile");
  // the nest takes no tags inside
  refused(one_tile_per_warp(warps + "C.tag(mi, mma); C.tag(nj, unroll);"),
          "loop 'nj' inside it is tagged unroll");
  // a tile that is not whole: the last tile's loops have guards
  refused(one_tile_per_warp(warps + "C.tag(mi, mma);"), "does not run a constant number",
          {{"M", 72}, {"N", 64}, {"K", 32}});
  // rows 18 floats apart: not a multiple of 16 bytes
  refused(one_tile_per_warp(warps + "C.tag(mi, mma);",
                            "C.cache(A, ko, gpu_shared, [\"16\", \"18\"], \"{ [e0, e1] -> [e0 - "
                            "16 * io, e1 - 8 * ko] }\");"),
          "its tile of A_C_cache (A) has rows 18 elements apart");
  // A's rows 36 floats apart in a cache whose slice starts 4 floats in: not 32-byte aligned
  refused(one_tile_per_warp(warps + "C.tag(mi, mma);",
                            "C.cache(A, ko, gpu_shared, [\"16\", \"36\"], \"{ [e0, e1] -> [e0 - "
                            "16 * io, e1 - 8 * ko + 4] }\");"),
          "starts at element");
  // not a product of A and B into C
  std::string sum = tf32_example();
  sum.replace(sum.find("A[i, k] * B[k, j]"), 17, "A[i, k] + B[k, j]");
  refused(one_tile_per_warp(warps + "C.tag(mi, mma);", "", sum),
          "its statement is not three loops");
  // f64 operands
  std::string f64 = tf32_example();
  for (size_t at = f64.find("f32["); at != std::string::npos; at = f64.find("f32[", at))
    f64.replace(at, 3, "f64");
  refused(one_tile_per_warp(warps + "C.tag(mi, mma);", "", f64),
          "is f64: tensor cores here multiply f32 operands");
}

// TF32 results are held to rtol 1e-2; other results, and programs without mma, to 1e-5. A tag
// knob counts by its value.
TEST(TensorCores, ChecksHoldTf32ResultsToTheirTolerance) {
  EXPECT_EQ(interp::tolerance_of(parse_one(tf32_example())).rtol, 1e-2);
  EXPECT_EQ(interp::tolerance_of(parse_one(tf32_example())).atol, 1e-5);
  EXPECT_EQ(interp::tolerance_of(parse_one(read_source("examples/gpu/matmul.kiln"))).rtol, 1e-5);
  std::string knobbed = tf32_example();
  knobbed.replace(knobbed.find("C.tag(mi, mma);"), 15,
                  "knob T = mma in [none, mma]; C.tag(mi, T);");
  EXPECT_EQ(interp::tolerance_of(parse_one(knobbed)).rtol, 1e-2);
  EXPECT_EQ(interp::tolerance_of(parse_one(knobbed, {{"T", 0}})).rtol, 1e-5);

  // 1 + 2^-9 differs from 1 by 0.2%: within TF32's tolerance, not f32's
  ir::Func f = parse_one(tf32_example(), kSmall);
  Bindings in = interp::random_bindings(f, interp::param_values(f), 3);
  Bindings expected = in;
  interp::run_reference(f, expected);
  Bindings actual = expected;
  float* c = static_cast<float*>(actual.buffers.at("C").data());
  c[5] = c[5] * (1.0f + 1.0f / 512);
  EXPECT_TRUE(interp::compare_outputs(f, expected, actual).ok);
  EXPECT_FALSE(interp::compare_outputs(f, expected, actual, 1e-5, 1e-6).ok);
}

// On a GPU: a 256 x 192 x 64 product on the tensor cores (a grid of 3 x 4 blocks, several K
// steps), at the defaults and at a second point, against the reference within TF32's tolerance.
// (The reference interpreter takes about a microsecond a multiply-add: 512 x 384 x 256 took over
// a minute on an H200 machine.)
TEST(TensorCoresRun, TheTf32MatmulMatchesTheReference) {
  std::string why;
  if (!cuda::nvrtc_available(&why) || !cuda::gpu_available(&why))
    GTEST_SKIP() << "no GPU here (" << why << "): tensor-core kernels not run";
  cuda::Device gpu;
  for (const ir::Overrides& set :
       {ir::Overrides{{"M", 256}, {"N", 192}, {"K", 64}},
        ir::Overrides{{"M", 256}, {"N", 192}, {"K", 64}, {"WY", 4}, {"FI", 1}, {"BK", 8}}}) {
    ir::Func f = parse_one(tf32_example(), set);
    interp::Mismatch mm = gpu_run_against_reference(gpu, f, gpu_program(f), 11);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

}  // namespace
}  // namespace kiln::testing
