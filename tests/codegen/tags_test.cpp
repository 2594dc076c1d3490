// Loop tags in the CPU backend: vectorize makes LLVM vector code, parallel runs
// on the runtime's pool with any thread count, unroll_explicit unrolls in kiln;
// and the packed entry point checks its argument count.
#include <sstream>

#include "kiln/codegen.h"
#include "kiln/passes.h"
#include "kiln/runtime.h"
#include "programs.h"

namespace kiln::testing {
namespace {

const char* kScale = R"(func scale {
  param N = 64;
  input a : f32[N];
  output b : f32[N];
  compute s(i) in 0 <= i < N: b[i] = a[i] * 3.0 + 1.0;
})";

ir::LoweredFunc lowered_func(const std::string& program, const ir::Overrides& set = {}) {
  return poly::lower(poly::schedule(parse_one(program, set)));
}

// Runs the reference interpreter and the compiled kernel on the same random
// inputs; `set` gives compile-time values, `runtime` run-time params' values.
interp::Mismatch run_against_reference(const std::string& program, const ir::Overrides& set = {},
                                       int opt = 3,
                                       const std::map<std::string, int64_t>& runtime = {}) {
  ir::Func f = parse_one(program, set);
  Bindings in = interp::random_bindings(f, interp::param_values(f, runtime), 3);
  Bindings expected = in, actual = in;
  interp::run_reference(f, expected);
  codegen::Options o;
  o.opt_level = opt;
  codegen::jit_compile(poly::lower(poly::schedule(f)), o).run(actual);
  return interp::compare_outputs(f, expected, actual);
}

// kScale with N a run-time param: loop bounds that lowering cannot evaluate.
const char* kScaleAtRunTime = R"(func scale {
  param N;
  input a : f32[N];
  output b : f32[N];
  compute s(i) in 0 <= i < N: b[i] = a[i] * 3.0 + 1.0;
})";

// run_against_reference for run-time params' values.
interp::Mismatch run_at(const std::string& program, const std::map<std::string, int64_t>& params,
                        int opt) {
  return run_against_reference(program, {}, opt, params);
}

// Every access says which buffer it touches (an alias scope per buffer, and
// noalias with the others), so LLVM knows kiln's buffers apart even where
// inlining and parallel closures lost the noalias arguments.
TEST(Buffers, AccessesCarryTheirBufferScope) {
  const char* p = R"(func rowsum {
  param N = 64, K = 32;
  input a : f32[N, K];
  output y : f32[N];
  temp t : f32[N, K];
  compute sq(i, k) in 0 <= i < N, 0 <= k < K: t[i, k] = a[i, k] * a[i, k];
  compute acc(i) in 0 <= i < N: y[i] = sum(k in 0 <= k < K) t[i, k];
  schedule {
    acc.after(acc_init, i);
    acc_init.tag(i, parallel);
    acc.tag(i, parallel);
  }
})";
  codegen::Options o;
  o.opt_level = 0;  // as kiln emits it
  std::string ir_text = codegen::emit_llvm(lowered_func(p), o);
  // A scope for each buffer, named after it...
  for (const char* name : {"a", "y", "t"})
    EXPECT_NE(ir_text.find(std::string(", !\"") + name + "\"}"), std::string::npos) << name << "\n"
                                                                                    << ir_text;
  // ...on every float access.
  std::istringstream lines(ir_text);
  int accesses = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("load float") == std::string::npos &&
        line.find("store float") == std::string::npos)
      continue;
    ++accesses;
    EXPECT_NE(line.find("!alias.scope"), std::string::npos) << line;
    EXPECT_NE(line.find("!noalias"), std::string::npos) << line;
  }
  EXPECT_GE(accesses, 5);  // a, t, y and y's reads
  EXPECT_TRUE(run_against_reference(p).ok);
}

TEST(Vectorize, ConstantExtentBecomesOneVector) {
  std::string p = with_schedule(kScale, "s.split(i, 16, io, ii); s.tag(ii, vectorize);");
  codegen::Options o;
  o.opt_level = 0;  // what kiln emits, before LLVM's own vectorizers run
  std::string ir_text = codegen::emit_llvm(lowered_func(p), o);
  EXPECT_NE(ir_text.find("load <16 x float>"), std::string::npos) << ir_text;
  EXPECT_NE(ir_text.find("store <16 x float>"), std::string::npos) << ir_text;
  EXPECT_TRUE(run_against_reference(p).ok);
}

TEST(Vectorize, AVX512FeaturesOnALevelCPUGive512BitVectors) {
  // What an agent in a virtual machine reports: a level below v4 and AVX-512 as
  // features. LLVM needs evex512 for zmm registers there; kiln adds it unless the
  // features say otherwise.
  std::string p = with_schedule(kScale, "s.split(i, 16, io, ii); s.tag(ii, vectorize);");
  codegen::Options o;
  o.target = codegen::Target{"x86_64-linux-gnu", "x86-64-v2", "+avx2,+fma,+avx512f,+avx512vl"};
  EXPECT_NE(codegen::emit_asm(lowered_func(p), o).find("zmm"), std::string::npos);
  o.target.features += ",-evex512";
  std::string ymm_only = codegen::emit_asm(lowered_func(p), o);
  EXPECT_EQ(ymm_only.find("zmm"), std::string::npos) << ymm_only;
  EXPECT_NE(ymm_only.find("ymm"), std::string::npos) << ymm_only;
}

// A tile that a split leaves partial: with compile-time sizes, lowering
// gives the partial tile its constant extent (Vectorize.ConstantExtents...).
// With a run-time size its extent is known only at run time. Bounded by at
// most 64 lanes, it is the full tile's vectors, each run when its first lane
// is in the tile, with the lanes past the end off: masked loads and stores.
// Bounded by more, it is a loop of 8-lane vectors and a scalar rest.
TEST(Vectorize, PartialVectorsAreMaskedOrRunAScalarTail) {
  std::string p = with_schedule(kScaleAtRunTime, "s.split(i, 8, io, ii); s.tag(ii, vectorize);");
  codegen::Options o;
  o.opt_level = 0;
  std::string ir_text = codegen::emit_llvm(lowered_func(p), o);
  EXPECT_NE(ir_text.find("llvm.masked.store.v8f32"), std::string::npos) << ir_text;
  EXPECT_NE(ir_text.find("llvm.masked.load.v8f32"), std::string::npos) << ir_text;
  EXPECT_EQ(ir_text.find("ii.rest"), std::string::npos) << ir_text;
  std::string wide =
      with_schedule(kScaleAtRunTime, "s.split(i, 100, io, ii); s.tag(ii, vectorize);");
  ir_text = codegen::emit_llvm(lowered_func(wide), o);
  EXPECT_NE(ir_text.find("ii.rest"), std::string::npos) << ir_text;
  // Tiles of 37 are three vectors, 16 + 16 + 5; a last tile of 5 runs the
  // first, 5 of its lanes on; one of 20 the first two, 4 lanes on in the second.
  std::string three =
      with_schedule(kScaleAtRunTime, "s.split(i, 37, io, ii); s.tag(ii, vectorize);");
  for (int opt : {0, 3}) {
    SCOPED_TRACE("opt " + std::to_string(opt));
    for (int64_t n : {1, 5, 8, 13, 16}) EXPECT_TRUE(run_at(p, {{"N", n}}, opt).ok) << n;
    for (int64_t n : {99, 130, 200}) EXPECT_TRUE(run_at(wide, {{"N", n}}, opt).ok) << n;
    for (int64_t n : {5, 37 + 5, 74 + 20, 111}) EXPECT_TRUE(run_at(three, {{"N", n}}, opt).ok) << n;
  }
}

// The lanes a partial vector switches off neither store nor scatter nor
// read: a reversed write (a scatter) and a guarded read, and a contiguous
// store, in tiles of 16 whose last is partial at run time.
TEST(Vectorize, LanesPastAPartialTilesEndWriteNothing) {
  // The loops cover m of the n elements: the reference leaves the others 0.
  const char* program = R"(func t {
    param n, m;
    constraint m <= n;
    input  w    : f32[n];
    output x    : f32[n];
    output y    : f32[n];
    compute h(k) in 0 <= k < m: x[k] = w[k] + 1.0;
    compute s(k) in 0 <= k < m: y[n - 1 - k] = select(k >= 1, w[k - 1], 0.5) * 2.0;
  })";
  std::string p = with_schedule(program,
                                "h.split(k, 16, ko, ki); h.tag(ki, vectorize); "
                                "s.split(k, 16, ko, ki); s.tag(ki, vectorize);");
  for (int opt : {0, 3})
    for (int64_t m : {1, 7, 16, 21, 40})
      EXPECT_TRUE(run_at(p, {{"n", 48}, {"m", m}}, opt).ok) << "m = " << m << ", opt " << opt;
}

// A select whose condition reads a vector of data and whose sides are
// constants: the constants become vectors (they were scalars beside a vector
// condition, which LLVM refuses as invalid IR; ONNX's Erf was the first to
// meet it).
TEST(Vectorize, AVectorConditionBetweenTwoConstants) {
  const char* program = R"(func t {
    param n;
    input  x : f32[n];
    output y : f32[n];
    compute s(k) in 0 <= k < n: y[k] = select(x[k] < 0.0, -1.0, 1.0) * x[k];
  })";
  std::string p = with_schedule(program, "s.split(k, 16, ko, ki); s.tag(ki, vectorize);");
  for (int opt : {0, 3})
    for (int64_t n : {5, 16, 37}) EXPECT_TRUE(run_at(p, {{"n", n}}, opt).ok) << n;
}

// A constant extent that 16 does not divide is still all vectors: up to 64
// lanes straight-line code, 16 lanes at a time and one narrower vector for
// the rest (a GEMM's partial register tile of 40 columns kept its
// accumulators in registers only so); beyond, a loop of 16-lane vectors and
// the narrower one after it. No element is left to a scalar loop.
TEST(Vectorize, ConstantExtentsAreWholeVectorsAndANarrowerOne) {
  struct Case {
    int64_t n;
    std::vector<std::string> vectors;  // one "<K x float>" store per vector, in order
    bool loop;                         // the 16-lane vectors in a loop
  };
  for (const Case& c : std::vector<Case>{{40, {"16", "16", "8"}, false},
                                         {21, {"16", "5"}, false},
                                         {64, {"16", "16", "16", "16"}, false},
                                         {1000, {"16", "8"}, true},
                                         {1001, {"16", "9"}, true}}) {
    SCOPED_TRACE("N = " + std::to_string(c.n));
    std::string p = with_schedule(kScale, "s.tag(i, vectorize);");
    codegen::Options o;
    o.opt_level = 0;
    std::string ir_text = codegen::emit_llvm(lowered_func(p, {{"N", c.n}}), o);
    std::vector<std::string> stores;
    std::istringstream lines(ir_text);
    for (std::string line; std::getline(lines, line);) {
      size_t at = line.find("store <");
      if (at != std::string::npos)
        stores.push_back(line.substr(at + 7, line.find(" x float>", at) - at - 7));
    }
    EXPECT_EQ(stores, c.vectors) << ir_text;
    EXPECT_EQ(ir_text.find("i.rest"), std::string::npos) << ir_text;
    EXPECT_EQ(ir_text.find("i.vhead") != std::string::npos, c.loop) << ir_text;
    for (int opt : {0, 3}) EXPECT_TRUE(run_against_reference(p, {{"N", c.n}}, opt).ok);
  }
}

TEST(Vectorize, StridedAndGuardedReadsUseGatherAndMasks) {
  // Reads a column (stride N) and a padded window (a guarded read).
  const char* program = R"(func t {
    param N = 12;
    input a : f32[N, N];
    output b : f32[N, N];
    compute s(i, j) in 0 <= i < N, 0 <= j < N:
      b[i, j] = a[j, i] + select(j >= 1, a[i, j - 1], 0.0);
  })";
  std::string p = with_schedule(program, "s.split(j, 4, jo, ji); s.tag(ji, vectorize);");
  codegen::Options o;
  o.opt_level = 0;
  std::string ir_text = codegen::emit_llvm(lowered_func(p), o);
  EXPECT_NE(ir_text.find("llvm.masked.gather"), std::string::npos) << ir_text;
  EXPECT_NE(ir_text.find("llvm.masked.load"), std::string::npos) << ir_text;
  for (int opt : {0, 3}) EXPECT_TRUE(run_against_reference(p, {}, opt).ok);
}

// Lanes 2, 3 or 4 elements apart load as one wide masked load and a shuffle,
// not a gather; 5 apart still gather. The last lane reads the array's last
// element (the mask keeps the wide load from reading past it), the tail of 13
// in vectors of 8 runs partial, and a guarded read (under a lane mask) reads
// only the lanes it selects.
TEST(Vectorize, SmallStridesLoadWideAndShuffle) {
  const char* program = R"(func t {
    param N = 13;
    input a : f32[4 * N];
    input g : f32[5 * N];
    output b : f32[N];
    compute s(i) in 0 <= i < N:
      b[i] = a[2 * i] + 10.0 * a[3 * i + 1] + 100.0 * a[4 * i + 3] + g[5 * i]
             + select(i >= 3, a[2 * i - 5], 0.5);
  })";
  for (int lanes : {8, 16}) {
    SCOPED_TRACE(std::to_string(lanes) + " lanes");
    std::string p = with_schedule(
        program, "s.split(i, " + std::to_string(lanes) + ", io, ii); s.tag(ii, vectorize);");
    codegen::Options o;
    o.opt_level = 0;
    std::string ir_text = codegen::emit_llvm(lowered_func(p, {{"N", 16}}), o);
    for (int stride : {2, 3, 4}) {
      std::string wide = "@llvm.masked.load.v" + std::to_string(lanes * stride) + "f32.p0(ptr";
      EXPECT_NE(ir_text.find(wide), std::string::npos) << wide << "\n" << ir_text;
    }
    EXPECT_NE(ir_text.find("shufflevector"), std::string::npos) << ir_text;
    EXPECT_EQ(count_of(ir_text,
                       "call contract <" + std::to_string(lanes) + " x float> @llvm.masked.gather"),
              1)
        << "g alone, 5 apart, gathers\n"
        << ir_text;
    for (int64_t size : {16, 13, 3, 1})
      for (int opt : {0, 3})
        EXPECT_TRUE(run_against_reference(p, {{"N", size}}, opt).ok)
            << "N = " << size << ", -O" << opt;
  }
}

// Stores whose lanes lie 2 to 8 elements apart, in a buffer whose inner
// dimensions are constants (b[i, c] over lanes of i, rows of R), are one wide
// masked store each, the elements between left alone: the R stores of a
// vector fill them in turn. Wider strides, and rows whose length is known only
// at run time (R a run-time param), scatter. With N known only at run time the
// last vector is partial (N = 13, 3, 1) and switches its lanes off, in the
// wide store's mask too; with N = 13 known, it is a narrower vector.
TEST(Vectorize, SmallStridesStoreWideUnderAMask) {
  for (int row : {2, 4, 6, 8, 9, 0}) {
    const bool runtime_row = row == 0;  // R a run-time param
    const std::string r = runtime_row ? "R" : std::to_string(row);
    for (const char* n : {"N = 13", "N"}) {
      std::string program = std::string(R"(func t {
    param )") + n + (runtime_row ? ", R" : "") +
                            R"(;
    input a : f32[N];
    output b : f32[N, )" + r +
                            R"(];
    compute s(i, c) in 0 <= i < N, 0 <= c < )" +
                            r + R"(: b[i, c] = a[i] * 2.0 + 1.0;
  })";
      for (int lanes : {8, 16}) {
        SCOPED_TRACE("rows of " + r + ", " + n + ", " + std::to_string(lanes) + " lanes");
        std::string p =
            with_schedule(program, "s.reorder(c, i); s.split(i, " + std::to_string(lanes) +
                                       ", io, ii); s.tag(ii, vectorize);");
        codegen::Options o;
        o.opt_level = 0;
        const bool wide =
            !runtime_row && row <= 8 && codegen::target_has_feature(o.target, "avx512f");
        const ir::Overrides whole =
            std::string(n) == "N" ? ir::Overrides{} : ir::Overrides{{"N", 16}};
        std::string ir_text = codegen::emit_llvm(lowered_func(p, whole), o);
        std::string store = "@llvm.masked.store.v" + std::to_string(lanes * row) + "f32.p0(";
        EXPECT_EQ(ir_text.find(store) != std::string::npos, wide) << store << "\n" << ir_text;
        EXPECT_EQ(ir_text.find("@llvm.masked.scatter") != std::string::npos, !wide) << ir_text;
        // A target that cannot store under a mask in one instruction scatters:
        // LLVM would break the wide store into a branch per element.
        codegen::Options arm = o;
        arm.target = Target::named("aarch64-linux-gnu", "", "");
        std::string arm_text = codegen::emit_llvm(lowered_func(p, whole), arm);
        EXPECT_EQ(arm_text.find("@llvm.masked.store.v"), std::string::npos) << arm_text;
        for (int64_t size : {16, 13, 3, 1}) {
          std::map<std::string, int64_t> runtime;
          ir::Overrides set;
          if (runtime_row) runtime["R"] = 5;
          if (std::string(n) == "N")
            runtime["N"] = size;
          else
            set = {{"N", size}};
          for (int opt : {0, 3}) {
            interp::Mismatch mm = run_against_reference(p, set, opt, runtime);
            EXPECT_TRUE(mm.ok) << "N = " << size << ", -O" << opt << ": " << mm.describe();
          }
        }
      }
    }
  }
}

// A loop of whole vectors whose stores are wide and masked stays a loop at
// -O3: LLVM's full unrolling of its 8 vectors (the GEMM's copy of A, rows of 4
// along 128) gave instruction selection 8 copies of each store to split, 7 ms
// of a 55 ms compile, for no speed.
TEST(Vectorize, WideMaskedStoresStayInALoop) {
  std::string p = with_schedule(R"(func t {
    param N = 128;
    input a : f32[N];
    output b : f32[N, 4];
    compute s(i, c) in 0 <= i < N, 0 <= c < 4: b[i, c] = a[i] * 2.0 + 1.0;
  })",
                                "s.reorder(c, i); s.tag(i, vectorize);");
  codegen::Options o;
  o.opt_level = 3;
  o.target = Target::named("x86_64-linux-gnu", "skylake-avx512", "");
  std::string ir_text = codegen::emit_llvm(lowered_func(p), o);
  // 16 lanes: 8 vectors a row, each one store of the 64 elements it spans.
  int stores = count_of(ir_text, "call void @llvm.masked.store.v64f32.p0(");
  EXPECT_GE(stores, 1) << ir_text;
  EXPECT_LE(stores, 4) << "one store a row at most\n" << ir_text;
  EXPECT_NE(ir_text.find("llvm.loop.unroll.disable"), std::string::npos) << ir_text;
  for (int opt : {0, 3}) {
    interp::Mismatch mm = run_against_reference(p, {}, opt);
    EXPECT_TRUE(mm.ok) << "-O" << opt << ": " << mm.describe();
  }
}

// A column of rows as long as the vector (b[j, i] = a[i, j] with a's rows of
// 4, 8 or 16 and j unrolled) is read as the rows and a transpose in
// registers, not as gathers: after LLVM's CSE, one load per row and
// log2(width) rounds of shuffles serve every column.
TEST(Vectorize, ColumnsOfShortRowsLoadAsATranspose) {
  for (int width : {4, 8, 16}) {
    SCOPED_TRACE(std::to_string(width) + " lanes");
    const std::string w = std::to_string(width);
    const std::string program =
        "func t {\n  param N = 48;\n  input a : f32[N, " + w + "];\n  output b : f32[" + w +
        ", N];\n  compute s(j, i) in 0 <= j < " + w + ", 0 <= i < N: b[j, i] = a[i, j] * 2.0;\n}";
    std::string p = with_schedule(program.c_str(), "s.split(i, " + w +
                                                       ", io, ii); s.reorder(io, j, ii); "
                                                       "s.tag(j, unroll_explicit); s.tag(ii, "
                                                       "vectorize);");
    codegen::Options o;
    o.opt_level = 3;
    std::string ir_text = codegen::emit_llvm(lowered_func(p), o);
    EXPECT_EQ(ir_text.find("masked.gather"), std::string::npos) << ir_text;
    // Per block of rows: width loads and width * log2(width) shuffles, where
    // a transpose per column would take width * (width - 1).
    const std::string vec = "<" + w + " x float>";
    int rows = count_of(ir_text, "= load " + vec),
        shuffles = count_of(ir_text, "= shufflevector " + vec);
    int rounds = width == 4 ? 2 : width == 8 ? 3 : 4;
    ASSERT_GT(rows, 0) << ir_text;
    EXPECT_EQ(rows % width, 0) << ir_text;
    EXPECT_EQ(shuffles, rows * rounds) << "the columns share one transpose\n" << ir_text;
    for (int64_t n : {48, 37, 5})
      for (int opt : {0, 3})
        EXPECT_TRUE(run_against_reference(p, {{"N", n}}, opt).ok) << "N = " << n << ", -O" << opt;
  }
}

// CSE and LICM bind parts of an index to lets inside a vectorized loop; the
// access must still be seen as contiguous, not become a gather.
TEST(Vectorize, IndicesThroughLetsStayContiguous) {
  ir::LoweredFunc f = lowered_func(read_example("matmul"), {{"M", 64}, {"N", 64}, {"K", 64}});
  passes::PassContext ctx;
  ctx.opt_level = 2;
  ir::LoweredFunc optimized = passes::run_pipeline(f, ctx);
  ASSERT_NE(ir::to_string(optimized.body).find("let cse_var"), std::string::npos)
      << "the passes no longer introduce lets here; this test needs another kernel";
  codegen::Options o;
  o.opt_level = 0;
  std::string ir_text = codegen::emit_llvm(optimized, o);
  EXPECT_EQ(ir_text.find("masked.gather"), std::string::npos) << ir_text;
  EXPECT_EQ(ir_text.find("masked.scatter"), std::string::npos) << ir_text;
}

TEST(Parallel, SameResultWithOneAndTwoThreads) {
  std::string p =
      with_schedule(read_example("matmul"),
                    "C.tile(i, j, 8, 8, io, jo, ii, ji); C.tag(io, parallel); C_init.tag(i, "
                    "parallel);");
  ir::Overrides sizes = {{"M", 37}, {"N", 19}, {"K", 11}};
  int before = kiln_runtime_threads();
  for (int threads : {1, 2}) {
    kiln_runtime_set_threads(threads);
    SCOPED_TRACE(std::to_string(threads) + " threads");
    EXPECT_TRUE(run_against_reference(p, sizes).ok);
  }
  kiln_runtime_set_threads(before);
  codegen::Options o;
  o.opt_level = 0;
  std::string ir_text = codegen::emit_llvm(lowered_func(p, sizes), o);
  EXPECT_NE(ir_text.find("call i32 @kiln_parallel_launch"), std::string::npos) << ir_text;
}

TEST(Parallel, NestedParallelLoopsRunInsideTheOuterOnes) {
  std::string p =
      with_schedule(kScale, "s.split(i, 8, io, ii); s.tag(io, parallel); s.tag(ii, parallel);");
  EXPECT_TRUE(run_against_reference(p, {{"N", 30}}).ok);
}

TEST(UnrollExplicit, CopiesTheBodyForEachIteration) {
  std::string p = with_schedule(kScale, "s.split(i, 4, io, ii); s.tag(ii, unroll_explicit);");
  codegen::Options o;
  o.opt_level = 0;
  std::string ir_text = codegen::emit_llvm(lowered_func(p), o);
  EXPECT_EQ(ir_text.find("ii.head"), std::string::npos) << "no loop is left for ii";
  EXPECT_EQ(count_of(ir_text, "store float"), 4) << ir_text;
  EXPECT_TRUE(run_against_reference(p).ok);
}

TEST(UnrollExplicit, APartialTileIsUnrolledToItsBoundWithGuards) {
  // N elements in tiles of 4: the last tile may be partial, so ii's end
  // varies with io (min(4, N - 4 * io)). Lowering unrolls it to 4 copies
  // under `ii < end` and splits io's body into the full tiles, unguarded,
  // and the rest.
  std::string p =
      with_schedule(kScaleAtRunTime, "s.split(i, 4, io, ii); s.tag(ii, unroll_explicit);");
  EXPECT_EQ(ir::to_string(lowered_func(p).body),
            "for (io = 0; io < (N - 1) / 4 + 1; io += 1) {\n"
            "  if (3 < min(4, N - 4 * io)) {\n"
            "    for (ii = 0; ii < 4; ii += 1) {  // unroll_explicit\n"
            "      b[4 * io + ii] = a[4 * io + ii] * 3.0 + 1.0;\n"
            "    }\n"
            "  } else {\n"
            "    for (ii = 0; ii < 4; ii += 1) {  // unroll_explicit\n"
            "      if (ii < min(4, N - 4 * io)) {\n"
            "        b[4 * io + ii] = a[4 * io + ii] * 3.0 + 1.0;\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}\n");
  for (int64_t n : {1, 4, 13, 16, 17}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    for (int opt : {0, 3}) EXPECT_TRUE(run_at(p, {{"N", n}}, opt).ok);
  }
}

// With N known when compiling (13: the last tile has 1), lowering evaluates
// the tile's end at each io: the partial tile is io = 3 alone, of extent 1,
// so the rest is that tile with both as constants, no guard.
TEST(UnrollExplicit, AKnownPartialTileHasConstantExtentAndPlace) {
  std::string p = with_schedule(kScale, "s.split(i, 4, io, ii); s.tag(ii, unroll_explicit);");
  EXPECT_EQ(ir::to_string(lowered_func(p, {{"N", 13}}).body),
            "for (io = 0; io < 4; io += 1) {\n"
            "  if (3 < min(4, -4 * io + 13)) {\n"
            "    for (ii = 0; ii < 4; ii += 1) {  // unroll_explicit\n"
            "      b[4 * io + ii] = a[4 * io + ii] * 3.0 + 1.0;\n"
            "    }\n"
            "  } else {\n"
            "    for (ii = 0; ii < 1; ii += 1) {  // unroll_explicit\n"
            "      b[4 * 3 + ii] = a[4 * 3 + ii] * 3.0 + 1.0;\n"
            "    }\n"
            "  }\n"
            "}\n");
  // No partial tile at all (16): no split.
  EXPECT_EQ(ir::to_string(lowered_func(p, {{"N", 16}}).body),
            "for (io = 0; io < 4; io += 1) {\n"
            "  for (ii = 0; ii < 4; ii += 1) {  // unroll_explicit\n"
            "    b[4 * io + ii] = a[4 * io + ii] * 3.0 + 1.0;\n"
            "  }\n"
            "}\n");
  for (int64_t n : {1, 4, 13, 16, 17}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    for (int opt : {0, 3}) EXPECT_TRUE(run_against_reference(p, {{"N", n}}, opt).ok);
  }
}

TEST(UnrollExplicit, NeedsABoundOnTheTripCount) {
  // A loop over a run-time extent has no count to unroll to.
  std::string p = with_schedule(kScaleAtRunTime, "s.tag(i, unroll_explicit);");
  try {
    codegen::jit_compile(lowered_func(p));
    FAIL() << "a loop with a run-time extent was unrolled";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Codegen);
    EXPECT_NE(e.message().find("tagged unroll_explicit but its bounds"), std::string::npos)
        << e.what();
  }
}

TEST(Unroll, IsAHintToLlvm) {
  std::string p = with_schedule(kScale, "s.split(i, 4, io, ii); s.tag(ii, unroll);");
  codegen::Options o;
  o.opt_level = 0;
  EXPECT_NE(codegen::emit_llvm(lowered_func(p), o).find("llvm.loop.unroll.enable"),
            std::string::npos);
  EXPECT_TRUE(run_against_reference(p).ok);
}

// A fill (a loop that reads no buffer) is not LLVM's to unroll: the GEMM's
// zeroed C block became 512 stores in one block, all machine-scheduler time.
// A loop that reads stays LLVM's.
TEST(Unroll, FillsAreNotUnrolledByLlvm) {
  const std::string text = read_source("tests/bench/kernels/gemm.kiln");
  codegen::Options o;
  o.opt_level = 0;
  std::string ir_text = codegen::emit_llvm(lowered_func(text), o);
  // The hint is one metadata node ("!N = !{!"llvm.loop.unroll.disable", i1
  // true}"); each loop that carries it names !N in its own distinct node.
  size_t hint = ir_text.find("!{!\"llvm.loop.unroll.disable\"");
  ASSERT_NE(hint, std::string::npos) << ir_text;
  size_t line = ir_text.rfind('\n', hint) + 1;
  std::string id = ir_text.substr(line, ir_text.find(' ', line) - line);
  size_t disabled = 0;
  for (size_t at = ir_text.find(", " + id + ","); at != std::string::npos;
       at = ir_text.find(", " + id + ",", at + 1))
    ++disabled;
  // C_init's row loop around its vectorized row of stores; where the target
  // stores under a mask, the vector loop of A's packing copy, whose wide
  // masked stores LLVM would copy 8 times (WideMaskedStoresStayInALoop); no
  // other loop that reads (B's packing copy, the register tile's loops).
  const bool masked = codegen::target_has_feature(o.target, "avx512f");
  EXPECT_EQ(disabled, masked ? 2u : 1u) << ir_text;
  // The fill without LLVM's unrolling still zeroes every block, partial ones too.
  interp::Mismatch mm = run_against_reference(text, {{"M", 100}, {"N", 70}, {"K", 33}});
  EXPECT_TRUE(mm.ok) << mm.describe();
}

// With fast_math, a register tile's sums start at -0.0 and the old values of
// C are loaded and added after the reduction loop, prefetched where they were
// loaded before (AccumulateFromZero): the loop no longer waits for C. Without
// fast_math the order of the additions stays, and so does the load.
TEST(LlvmPipeline, TileSumsStartAtZeroWhenReassociationIsAllowed) {
  const std::string fast = read_source("tests/bench/kernels/gemm.kiln");
  ASSERT_NE(fast.find("option fast_math;"), std::string::npos);
  std::string strict = fast;
  strict.replace(strict.find("option fast_math;"), std::string("option fast_math;").size(), "");
  const ir::Overrides sizes = {{"M", 96}, {"N", 128}, {"K", 64}};
  auto zero_started_phis = [](const std::string& ir_text) {
    size_t n = 0;
    std::istringstream in(ir_text);
    for (std::string line; std::getline(in, line);)
      n += line.find(" = phi <") != std::string::npos &&
           line.find("-0.000000e+00") != std::string::npos;
    return n;
  };
  codegen::Options o;
  o.opt_level = 3;
  std::string fast_ir = codegen::emit_llvm(lowered_func(fast, sizes), o);
  EXPECT_GE(zero_started_phis(fast_ir), 4u) << fast_ir;
  EXPECT_NE(fast_ir.find("call void @llvm.prefetch"), std::string::npos) << fast_ir;
  std::string strict_ir = codegen::emit_llvm(lowered_func(strict, sizes), o);
  EXPECT_EQ(zero_started_phis(strict_ir), 0u) << strict_ir;
  EXPECT_EQ(strict_ir.find("@llvm.prefetch"), std::string::npos) << strict_ir;
  for (const std::string& text : {fast, strict}) {
    interp::Mismatch mm = run_against_reference(text, sizes, 3);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

// LLVM's partial unrolling does not copy again what kiln vectorized (x86-64 at
// O2/O3): the reduction loop around a vector of sums stays one loop with one
// multiply-add; a loop of few constant trips is still unrolled in full. (The
// old pipeline gave 4 and 6 multiply-adds here; without full unrolling, 1 and 1.)
TEST(LlvmPipeline, KilnVectorizedLoopsAreNotUnrolledAgainButShortOnesAre) {
  // N = 1024: 64 blocks of columns, a loop LLVM keeps.
  const char* program = R"(func rows {
  param N = 1024, K = 128;
  input a : f32[K];
  input w : f32[K, N];
  output y : f32[N];
  compute acc(j) in 0 <= j < N: y[j] = sum(k in 0 <= k < K) a[k] * w[k, j];
  schedule {
    acc_init.split(j, 16, jo, ji);
    acc.split(j, 16, jo, ji);
    acc.reorder(jo, k, ji);
    acc.after(acc_init, jo);
    acc_init.tag(ji, vectorize);
    acc.tag(ji, vectorize);
  }
})";
  // Multiply-adds of 16 floats in the optimized IR.
  auto vector_fmas = [](const std::string& ir_text) {
    size_t n = 0;
    std::istringstream in(ir_text);
    for (std::string line; std::getline(in, line);)
      n += line.find("<16 x float>") != std::string::npos &&
           (line.find("@llvm.fmuladd.v16f32(") != std::string::npos ||
            line.find("= fmul") != std::string::npos);
    return n;
  };
  codegen::Options o;
  o.target = codegen::Target{"x86_64-linux-gnu", "x86-64-v3", ""};
  o.opt_level = 3;
  std::string ir_text = codegen::emit_llvm(lowered_func(program), o);
  EXPECT_EQ(vector_fmas(ir_text), 1u) << ir_text;
  // K = 3: the k loop is gone, its three steps in a row.
  std::string short_ir = codegen::emit_llvm(lowered_func(program, {{"K", 3}}), o);
  EXPECT_EQ(vector_fmas(short_ir), 3u) << short_ir;
  for (int64_t k : {128, 3}) {
    interp::Mismatch mm = run_against_reference(program, {{"K", k}}, 3);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

// Reassociation only where the operator asks for it; fusing a * b + c into a
// multiply-add always (LLVM's contract flag), as C compilers do by default.
TEST(FastMath, OnlyWhenTheOperatorAllowsIt) {
  codegen::Options o;
  o.opt_level = 0;
  std::string strict = codegen::emit_llvm(lowered_func(kScale), o);
  EXPECT_EQ(strict.find("fmul fast"), std::string::npos) << strict;
  EXPECT_EQ(strict.find("reassoc"), std::string::npos) << strict;
  EXPECT_NE(strict.find("fmul contract"), std::string::npos) << "fusing is allowed: " << strict;
  std::string program = kScale;
  program.insert(program.find('{') + 1, "\n  option fast_math;");
  std::string fast = codegen::emit_llvm(lowered_func(program), o);
  EXPECT_NE(fast.find("fmul fast"), std::string::npos) << fast;
  EXPECT_TRUE(run_against_reference(program).ok);
}

TEST(EntryPoint, RefusesTheWrongArgumentCount) {
  codegen::Kernel k = codegen::jit_compile(lowered_func(kScale));
  kiln_value args[2] = {};
  EXPECT_EQ(k.call(args, 1), KILN_ERR_ARGS);
  EXPECT_EQ(k.call(args, 3), KILN_ERR_ARGS);
}

TEST(EntryPoint, RunTimeParamsComeFirst) {
  ir::Func f = parse_one(read_example("segment_sum"));
  auto params = interp::param_values(f, {{"m", 6}});
  Bindings in = interp::random_bindings(f, params, 1), expected = in;
  interp::run_reference(f, expected);
  codegen::Kernel k = codegen::jit_compile(poly::lower(poly::schedule(f)));
  kiln_value args[4];
  args[0].i64 = 6;
  args[1].ptr = in.buffers.at("offsets").data();
  args[2].ptr = in.buffers.at("x").data();
  args[3].ptr = in.buffers.at("y").data();
  ASSERT_EQ(k.call(args, 4), KILN_OK);
  EXPECT_TRUE(interp::compare_outputs(f, expected, in).ok);
}

// Kernels of one name live side by side, each with its own code: a func under
// two knob settings, or an operator a graph calls with two sets of params.
TEST(Jit, KernelsOfOneNameLiveSideBySide) {
  std::string other = kScale;
  other.replace(other.find("3.0"), 3, "5.0");
  codegen::Kernel first = codegen::jit_compile(lowered_func(kScale));
  codegen::Kernel second = codegen::jit_compile(lowered_func(other));
  EXPECT_EQ(first.func().name, second.func().name);
  ir::Func f = parse_one(kScale);
  Bindings in = interp::random_bindings(f, interp::param_values(f), 2);
  Bindings a = in, b = in;
  first.run(a);
  second.run(b);
  const HostBuffer &x = in.buffers.at("a"), &ya = a.buffers.at("b"), &yb = b.buffers.at("b");
  for (int64_t k = 0; k < x.size(); ++k) {
    EXPECT_FLOAT_EQ(ya.get_f(k), static_cast<float>(x.get_f(k) * 3.0 + 1.0)) << k;
    EXPECT_FLOAT_EQ(yb.get_f(k), static_cast<float>(x.get_f(k) * 5.0 + 1.0)) << k;
  }
}

TEST(Jit, KernelsAreFreedWhenDropped) {
  ir::LoweredFunc f = lowered_func(kScale);
  for (int i = 0; i < 50; ++i) {
    codegen::Kernel k = codegen::jit_compile(f);
    kiln_value args[2] = {};
    EXPECT_EQ(k.call(args, 0), KILN_ERR_ARGS);
  }
}

}  // namespace
}  // namespace kiln::testing
