// Sketches from the algorithm (kiln/autosched.h): every example and bench kernel with its
// schedule taken away gets sketches that are legal, whose loop nests compute what the
// reference interpreter computes at their defaults and at other points of their knobs, and
// whose text parses back to the same loop nest; a func with a schedule of its own is refused.
// Their GPU sketches compute the same and compile for a GPU (NVRTC, where the build has it).
#include "kiln/autosched.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "cuda_emulator.h"
#include "example_cases.h"
#include "gpu_programs.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "programs.h"

namespace kiln::testing {
namespace {

std::string loops_of(const ir::Func& f) { return ir::to_string(poly::lower(poly::schedule(f))); }

// g (a func with a sketch) computes what the reference interpreter does at its knobs' defaults
// and at `n` other points of them, drawn with a fixed seed.
void expect_reference_at(const ir::Func& g, int n,
                         const std::map<std::string, int64_t>& runtime = {}) {
  std::mt19937 rng(7);
  for (int k = 0; k <= n; ++k) {
    ir::Overrides point;
    if (k > 0)
      for (const ir::Knob& knob : g.knobs)
        point[knob.name] = knob.candidates.at(rng() % knob.candidates.size());
    SCOPED_TRACE(fmt::format("knobs {}", fmt::join(point, ", ")));
    interp::Mismatch mm = differential(ir::apply_overrides(g, point), runtime);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

TEST(Autosched, EveryKernelWithoutItsScheduleGetsLegalSketchesThatParseBack) {
  std::vector<std::string> files = kiln_files("examples");
  for (const std::string& k : kiln_files("tests/bench/kernels")) files.push_back(k);
  for (const std::string& k : kiln_files("tests/bench/polybench")) files.push_back(k);
  int sketched = 0;
  for (const std::string& file : files) {
    for (const ir::Func& scheduled : frontend::parse_module(read_source(file), file).funcs) {
      SCOPED_TRACE(file + ": " + scheduled.name);
      ir::Func f = autosched::algorithm_of(scheduled);
      std::vector<autosched::Sketch> sketches = autosched::sketches(f);
      sketched += !sketches.empty();
      for (const autosched::Sketch& s : sketches) {
        SCOPED_TRACE(s.name + " sketch:\n" + s.schedule);
        ir::Func g = autosched::apply(f, s);
        EXPECT_FALSE(g.knobs.empty());
        std::string loops;
        ASSERT_NO_THROW(loops = loops_of(g));
        // What a user reads is what runs: the whole func printed and parsed again.
        ir::Func again = frontend::parse_module(ir::to_string(g), "again.kiln").funcs.at(0);
        EXPECT_EQ(loops_of(again), loops);
      }
    }
  }
  EXPECT_GE(sketched, 20);  // most of them have something to tile
}

TEST(Autosched, SketchedLoopNestsComputeWhatTheReferenceDoes) {
  for (const ExampleCase& c : example_cases()) {
    for (const ir::Overrides& sizes : c.params) {
      // Sketched at the shape it runs at, as a tuning job sketches it.
      ir::Func base =
          ir::apply_overrides(autosched::algorithm_of(parse_one(read_example(c.example))), sizes);
      for (const autosched::Sketch& s : autosched::sketches(base)) {
        SCOPED_TRACE(c.example + ", " + s.name + " sketch:\n" + s.schedule);
        expect_reference_at(autosched::apply(base, s), 3, c.runtime);
      }
    }
  }
}

TEST(Autosched, AMatmulIsTiledItsReductionBlockedOutsideTheTilesAndItsRowsARegisterTile) {
  ir::Func f = autosched::algorithm_of(parse_one(read_example("matmul")));
  std::vector<autosched::Sketch> s = autosched::sketches(f);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "tiled");
  // k blocked, each block sweeping every tile; the initialization a nest of its own before.
  EXPECT_EQ(s[0].schedule,
            "    knob tile_C_i = 8 in [4, 8, 16, 32, 64];\n"
            "    knob tile_C_j = 16 in [4, 8, 16, 32, 64];\n"
            "    knob split_C_k = 64 in [16, 32, 64, 128];\n"
            "    knob par_C = parallel in [none, parallel];\n"
            "    knob unroll_C = unroll_explicit in [none, unroll_explicit];\n"
            "    C.tile(i, j, tile_C_i, tile_C_j, i_o, j_o, i_i, j_i);\n"
            "    C_init.tile(i, j, tile_C_i, tile_C_j, i_o, j_o, i_i, j_i);\n"
            "    C.split(k, split_C_k, k_o, k_i);\n"
            "    C.reorder(k_o, i_o, j_o, k_i, i_i, j_i);\n"
            "    C.tag(i_o, par_C);\n"
            "    C_init.tag(i_o, par_C);\n"
            "    C.tag(j_i, vectorize);\n"
            "    C_init.tag(j_i, vectorize);\n"
            "    C.tag(i_i, unroll_C);\n"
            "    C_init.tag(i_i, unroll_C);\n");
  EXPECT_EQ(s[1].name, "split");
  EXPECT_NE(s[1].schedule.find("C.split(j, split_C_j, j_o, j_i);"), std::string::npos);
  EXPECT_NE(s[1].schedule.find("C.tag(i, par_C);"), std::string::npos);
}

TEST(Autosched, ALoopThatCarriesADependenceIsNotRunInParallel) {
  // A prefix sum: i carries a dependence, so no sketch may run it in parallel.
  ir::Func f = parse_one(R"(func prefix {
  param N = 64;
  input A : f32[N];
  output S : f32[N];
  compute first(i) in 0 <= i < 1: S[i] = A[i];
  compute rest(i) in 1 <= i < N: S[i] = S[i - 1] + A[i];
})");
  std::vector<autosched::Sketch> sketches = autosched::sketches(f);
  ASSERT_FALSE(sketches.empty());
  for (const autosched::Sketch& s : sketches) {
    SCOPED_TRACE(s.schedule);
    EXPECT_NE(s.schedule.find("rest.split(i, split_rest_i, i_o, i_i);"), std::string::npos);
    EXPECT_EQ(s.schedule.find("rest.tag(i_o, par_rest)"), std::string::npos);
    EXPECT_EQ(s.schedule.find("rest.tag(i_i, vectorize)"), std::string::npos);
    EXPECT_TRUE(differential(autosched::apply(f, s)).ok);
  }
}

TEST(Autosched, PolyBenchKernelsSketchedComputeWhatTheReferenceDoes) {
  // The benchmark's PolyBench kernels (written without a schedule), small: every size 13 (a
  // tile of 8 or 16 does not divide it), 3 time steps.
  std::vector<std::string> files = kiln_files("tests/bench/polybench");
  ASSERT_EQ(files.size(), 9u);
  for (const std::string& file : files) {
    ir::Func f = frontend::parse_module(read_source(file), file).funcs.at(0);
    ir::Overrides small;
    for (const ir::Param& p : f.params) small[p.name] = p.name == "T" ? 3 : 13;
    ir::Func base = ir::apply_overrides(f, small);
    std::vector<autosched::Sketch> sketches = autosched::sketches(base);
    EXPECT_FALSE(sketches.empty()) << file;
    for (const autosched::Sketch& s : sketches) {
      SCOPED_TRACE(file + ", " + s.name + " sketch:\n" + s.schedule);
      expect_reference_at(autosched::apply(base, s), 2);
    }
  }
}

TEST(Autosched, AStencilIsTiledInTimeByTheSmallestSkewItsDependencesAllow) {
  ir::Func f = autosched::algorithm_of(parse_one(read_example("jacobi2d")));
  std::optional<autosched::Sketch> s = autosched::first_sketch(f);
  ASSERT_TRUE(s);
  // s2 reads what s1 wrote around it in the same step, and s1 what s2 wrote in the last:
  // a skew of 1 is illegal, 2 with s2 one point further is not (the hand schedule's).
  EXPECT_EQ(s->schedule,
            "    knob tile_s1_t = 8 in [2, 4, 8, 16];\n"
            "    knob tile_s1_i = 32 in [8, 16, 32, 64];\n"
            "    s1.skew(t, i, 2);\n"
            "    s1.tile(t, i, tile_s1_t, tile_s1_i, t_o, i_o, t_i, i_i);\n"
            "    s1.tag(j, vectorize);\n"
            "    s2.skew(t, i, 2);\n"
            "    s2.shift(i, 1);\n"
            "    s2.tile(t, i, tile_s1_t, tile_s1_i, t_o, i_o, t_i, i_i);\n"
            "    s2.after(s1, i_i);\n"
            "    s2.tag(j, vectorize);\n");
  ir::Func g = ir::apply_overrides(autosched::apply(f, *s), {{"T", 5}, {"N", 21}});
  interp::Mismatch mm = differential(g);
  EXPECT_TRUE(mm.ok) << mm.describe();
  // The other sketch runs each step's rows in parallel.
  std::vector<autosched::Sketch> all = autosched::sketches(f);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_NE(all[1].schedule.find("s1.tag(i, par_s1);"), std::string::npos);
}

// atax: tmp[i] sums A's row i, y[j] += A[i, j] * tmp[i] reads the same row: the fused sketch
// reads each block of rows once for both, tmp's rows a register tile of sums inside its column
// loop, y's columns vectorized inside its rows, y's initialization before the whole nest.
TEST(Autosched, TwoComputationsReadingOneMatrixAreFusedOverItsRows) {
  ir::Func f =
      frontend::parse_module(read_source("tests/bench/polybench/atax.kiln"), "atax").funcs.at(0);
  f = ir::apply_overrides(f, {{"M", 19}, {"N", 23}});
  // Its computations have one data-parallel loop each: the tiled sketch is the split one.
  std::vector<autosched::Sketch> all = autosched::sketches(f);
  ASSERT_EQ(all.size(), 2u);
  const autosched::Sketch& fused = all[1];
  EXPECT_EQ(fused.name, "fused");
  EXPECT_EQ(fused.schedule,
            "    knob fuse_tmp = 4 in [2, 4, 8, 16, 32];\n"
            "    knob unroll_tmp = unroll_explicit in [none, unroll_explicit];\n"
            "    tmp_init.after(y_init, root);\n"
            "    tmp.after(tmp_init, root);\n"
            "    tmp.split(i, fuse_tmp, i_o, i_i);\n"
            "    tmp_init.split(i, fuse_tmp, i_o, i_i);\n"
            "    tmp.reorder(i_o, j, i_i);\n"
            "    tmp.after(tmp_init, i_o);\n"
            "    y.split(i, fuse_tmp, i_o, i_i);\n"
            "    y.reorder(i_o, i_i, j);\n"
            "    y.after(tmp, i_o);\n"
            "    y.tag(j, vectorize);\n"
            "    tmp.tag(i_i, unroll_tmp);\n");
  // One nest over A's rows after y's initialization: A's row block read by both.
  std::string loops = loops_of(autosched::apply(f, fused));
  EXPECT_LT(loops.find("y[j] = 0"), loops.find("tmp[")) << loops;
  expect_reference_at(autosched::apply(f, fused), 3);

  // mvt: x1[i] += A[i, j] * y1[j] along A's rows, x2[i] += A[j, i] * y2[j] along its columns;
  // fused over the rows, x2's loops swapped so that its vector loop runs along a row.
  ir::Func mvt =
      frontend::parse_module(read_source("tests/bench/polybench/mvt.kiln"), "mvt").funcs.at(0);
  mvt = ir::apply_overrides(mvt, {{"N", 21}});
  all = autosched::sketches(mvt);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].name, "fused");
  EXPECT_NE(all[1].schedule.find("x2.reorder(j_o, j_i, i);"), std::string::npos) << all[1].schedule;
  EXPECT_NE(all[1].schedule.find("x2.after(x1, j_o);"), std::string::npos) << all[1].schedule;
  expect_reference_at(autosched::apply(mvt, all[1]), 3);

  // A matmul reads no matrix with another computation: no fused sketch.
  EXPECT_EQ(autosched::sketches(autosched::algorithm_of(parse_one(read_example("matmul")))).size(),
            2u);
}

TEST(Autosched, AnUpdateWhoseStoreDoesNotNameItsLastLoopIsAReduction) {
  // y[i] += A[j, i] * x[j]: j is reduced over, so it goes between i's split parts, and the
  // points, a row of y, are vectorized.
  ir::Func f = parse_one(R"(func tmv {
  param N = 37;
  input A : f64[N, N];
  input x : f64[N];
  output y : f64[N];
  compute y(i, j) in 0 <= i < N, 0 <= j < N: y[i] += A[j, i] * x[j];
})");
  std::optional<autosched::Sketch> s = autosched::first_sketch(f);
  ASSERT_TRUE(s);
  EXPECT_NE(s->schedule.find("y.split(i, split_y_i, i_o, i_i);"), std::string::npos);
  EXPECT_NE(s->schedule.find("y.reorder(i_o, j, i_i);"), std::string::npos);
  EXPECT_NE(s->schedule.find("y.tag(i_i, vectorize);"), std::string::npos);
  EXPECT_TRUE(differential(autosched::apply(f, *s)).ok);
}

TEST(Autosched, AnInputReadAcrossTheVectorLoopAndReusedIsPackedSoTheVectorReadsItInRuns) {
  // syrk: C[i, j] += A[i, k] * A[j, k] vectorized along j reads A[j, k] a row apart, and
  // reads it again for every i: A is copied once as [k][j]. A[i, k] names no j: a broadcast.
  ir::Func f = frontend::parse_module(read_source("tests/bench/polybench/syrk.kiln"), "syrk.kiln")
                   .funcs.at(0);
  std::optional<autosched::Sketch> s = autosched::first_sketch(f);
  ASSERT_TRUE(s);
  EXPECT_NE(s->schedule.find(
                R"(C.cache(A, root, heap, ["M", "N"], "{ [e0, e1] -> [e1, e0] }", parallel);)"),
            std::string::npos)
      << s->schedule;
  expect_reference_at(ir::apply_overrides(autosched::apply(f, *s), {{"N", 21}, {"M", 19}}), 3);
  // A matmul's B[k, j] is read in runs along j already, and A[i, k] names no j: no copy.
  std::optional<autosched::Sketch> mm =
      autosched::first_sketch(autosched::algorithm_of(parse_one(read_example("matmul"))));
  ASSERT_TRUE(mm);
  EXPECT_EQ(mm->schedule.find(".cache("), std::string::npos) << mm->schedule;
}

TEST(Autosched, AScatterIsChunkedAndItsChunksUpdateCopiesOfTheirOwnInParallel) {
  // hist[bin[k]] += w[k]: iterations of k may update one bin together, so k runs in parallel
  // only with an update rule: each chunk privatized (examples/histogram.kiln's hand schedule).
  ir::Func f = autosched::algorithm_of(parse_one(read_example("histogram")));
  std::optional<autosched::Sketch> s = autosched::first_sketch(f);
  ASSERT_TRUE(s);
  EXPECT_NE(s->schedule.find("knob split_h_k = 4096 in [256, 1024, 4096, 16384, 65536];"),
            std::string::npos)
      << s->schedule;
  EXPECT_NE(s->schedule.find("h.split(k, split_h_k, k_o, k_i);\n"
                             "    h.tag(k_o, par_h);\n"
                             "    h.privatize(k_o);"),
            std::string::npos)
      << s->schedule;
  EXPECT_EQ(s->schedule.find("h.tag(k_i, vectorize)"), std::string::npos);
  expect_reference_at(autosched::apply(f, *s), 3);
}

TEST(Autosched, ALoopWhoseInnerBoundsAreReadAtRunTimeRunsInParallelWhole) {
  // acc's j runs from offsets[i] to offsets[i + 1]: i cannot be cut around j, so it runs in
  // parallel as it is, j inside it.
  ir::Func f = autosched::algorithm_of(parse_one(read_example("segment_sum")));
  std::optional<autosched::Sketch> s = autosched::first_sketch(f);
  ASSERT_TRUE(s);
  EXPECT_NE(s->schedule.find("    acc.tag(i, par_acc);\n"), std::string::npos) << s->schedule;
  interp::Mismatch mm = differential(autosched::apply(f, *s), {{"m", 23}});
  EXPECT_TRUE(mm.ok) << mm.describe();
}

// A fusion over the matrix's rows legal only while one block holds every row (y reads tmp along
// its columns, so it needs every row of tmp first) is not offered: at 4 rows the default block
// holds them all, and the sketch is checked at the smallest block too. The fusion offered is
// over y's own rows, j, which read only tmp's same rows.
TEST(Autosched, AFusionLegalOnlyInOneBlockIsNotOffered) {
  ir::Func f = parse_one(R"(func both {
  param M = 4, N = 4;
  input A : f64[M, N];
  input x : f64[N];
  output y : f64[N];
  temp tmp : f64[M];
  compute tmp_init(i) in 0 <= i < M: tmp[i] = 0.0;
  compute tmp(i, j) in 0 <= i < M, 0 <= j < N: tmp[i] += A[i, j] * x[j];
  compute y_init(j) in 0 <= j < N: y[j] = 0.0;
  compute y(j, i) in 0 <= j < N, 0 <= i < M: y[j] += A[i, j] * tmp[j];
})");
  for (const autosched::Sketch& s : autosched::sketches(f)) {
    SCOPED_TRACE(s.name + " sketch:\n" + s.schedule);
    EXPECT_EQ(s.schedule.find("y.split(i, "), std::string::npos);
    if (s.name == "fused") {
      EXPECT_NE(s.schedule.find("y.split(j, fuse_tmp, j_o, j_i);"), std::string::npos);
      EXPECT_NE(s.schedule.find("y.after(y_init, j_o);"), std::string::npos);
    }
    expect_reference_at(autosched::apply(f, s), 4);
  }
}

// A size knob offers the sizes up to the first that holds its whole loop: a larger one cuts the
// loop no differently, so the tuner would measure the same program twice. A loop whose bounds
// are known only at run time keeps them all.
TEST(Autosched, SizesBeyondTheirLoopAreNotOffered) {
  auto copy = [](const std::string& n) {
    return parse_one("func copy {\n  param " + n +
                     ";\n  input A : f32[N];\n  output B : f32[N];\n"
                     "  compute B(i) in 0 <= i < N: B[i] = A[i];\n}\n");
  };
  std::optional<autosched::Sketch> small = autosched::first_sketch(copy("N = 13"));
  ASSERT_TRUE(small);
  EXPECT_NE(small->schedule.find("knob split_B_i = 16 in [4, 8, 16];"), std::string::npos)
      << small->schedule;
  std::optional<autosched::Sketch> tiny = autosched::first_sketch(copy("N = 3"));
  ASSERT_TRUE(tiny);
  EXPECT_NE(tiny->schedule.find("knob split_B_i = 4 in [4];"), std::string::npos) << tiny->schedule;
  std::optional<autosched::Sketch> runtime = autosched::first_sketch(copy("N"));
  ASSERT_TRUE(runtime);
  EXPECT_NE(runtime->schedule.find("knob split_B_i = 16 in [4, 8, 16, 32, 64];"), std::string::npos)
      << runtime->schedule;
}

// A GPU sketch at one point: CUDA for sm_90 whose kernels fit a block (the CUDA writer refuses
// more threads or shared memory than a block has), compiled by NVRTC where the build has it;
// and its loops -- after kiln's passes, and after the GPU lowering passes -- computing what the
// reference does (the loop interpreter runs GPU loops one iteration after another), and so does
// its CUDA, emulated on the CPU (cuda_emulator.h).
void expect_gpu_point(const ir::Func& g, const std::map<std::string, int64_t>& runtime,
                      bool run = true) {
  CompileResult out;
  ASSERT_NO_THROW(out = gpu_compile(g));
  ASSERT_TRUE(out.cuda);
  std::string why;
  if (cuda::nvrtc_available(&why)) {
    cuda::Binary bin;
    ASSERT_NO_THROW(bin = cuda::compile(*out.cuda, "sm_90")) << out.cuda->source;
    EXPECT_EQ(bin.resources.size(), out.cuda->launches.size());
  }
  if (!run) return;
  GpuLoopsMismatch mm = gpu_loops_against_reference(g, out, 5, interp::tolerance_of(g), runtime);
  EXPECT_TRUE(mm.optimized.ok) << "after kiln's passes: " << mm.optimized.describe();
  EXPECT_TRUE(mm.gpu_lowered.ok) << "after the GPU lowering passes: " << mm.gpu_lowered.describe();
  if (out.cuda->tensor_cores) return;
  interp::Mismatch emulated;
  ASSERT_NO_THROW(emulated =
                      emulated_against_reference(g, *out.cuda, 5, ThreadOrder::Forward, runtime))
      << out.cuda->source;
  EXPECT_TRUE(emulated.ok) << "the CUDA, emulated: " << emulated.describe() << "\n"
                           << out.cuda->source;
}

// A GPU sketch at its largest sizes -- the most threads, with the largest register tiles and
// reduction step the knob constraints then allow (lowered together a notch at a time) -- at its
// defaults, and at `n` other points of its knobs the knob constraints allow (drawn with a fixed
// seed).
void expect_gpu_sketch(const ir::Func& g, int n, const std::map<std::string, int64_t>& runtime,
                       bool run = true) {
  std::vector<ir::Overrides> points;
  for (size_t notch = 0;; ++notch) {
    ir::Overrides point;
    bool lowest = true;
    for (const ir::Knob& knob : g.knobs) {
      size_t last = knob.candidates.size() - 1;
      bool threads = knob.name.starts_with("thread_");
      size_t at = threads ? last : last - std::min(notch, last);
      lowest = lowest && (threads || at == 0);
      point[knob.name] = knob.candidates.at(at);
    }
    try {
      ir::apply_overrides(g, point);
      points.push_back(point);
      break;
    } catch (const CompileError& e) {
      if (lowest) {
        ADD_FAILURE() << "no point with the most threads keeps the knob constraints: " << e.what();
        break;
      }
    }
  }
  points.push_back({});  // the defaults
  std::mt19937 rng(11);
  for (int drawn = 0, k = 0; k < n && drawn < 64 * n; ++drawn) {
    ir::Overrides point;
    for (const ir::Knob& knob : g.knobs)
      point[knob.name] = knob.candidates.at(rng() % knob.candidates.size());
    try {
      ir::apply_overrides(g, point);
    } catch (const CompileError&) {
      continue;  // a point the knob constraints refuse: the tuner never measures it
    }
    points.push_back(point);
    ++k;
  }
  for (const ir::Overrides& point : points) {
    SCOPED_TRACE(fmt::format("knobs {}", fmt::join(point, ", ")));
    expect_gpu_point(ir::apply_overrides(g, point), runtime, run);
  }
}

// Every example at the sizes the differential tests run it at, the GPU examples and PolyBench's
// kernels get GPU sketches (but the stencils in a time loop and the algorithms with nothing to cut)
// that compute what the reference does and compile for a GPU at their defaults and at 3 other
// points.
TEST(Autosched, GpuSketchesComputeWhatTheReferenceDoesAndCompileForAGpu) {
  struct Case {
    std::string source;
    ir::Overrides sizes;
    std::map<std::string, int64_t> runtime = {};
  };
  std::vector<Case> cases;
  for (const ExampleCase& c : example_cases())
    for (const ir::Overrides& sizes : c.params)
      cases.push_back({read_example(c.example), sizes, c.runtime});
  cases.push_back({read_source("examples/gpu/matmul.kiln"), {{"M", 37}, {"N", 45}, {"K", 19}}});
  // PolyBench's kernels at 13 (triangular loops: syrk, trmm, covariance), 3 time steps.
  for (const std::string& file : kiln_files("tests/bench/polybench")) {
    Case c{read_source(file), {}};
    for (const ir::Param& p : parse_one(c.source).params) c.sizes[p.name] = p.name == "T" ? 3 : 13;
    cases.push_back(c);
  }
  cases.push_back({read_source("examples/gpu/conv2d.kiln"),
                   {{"N", 1}, {"C", 5}, {"H", 9}, {"W", 11}, {"F", 3}}});
  int sketched = 0;
  for (const Case& c : cases) {
    ir::Func base = ir::apply_overrides(autosched::algorithm_of(parse_one(c.source)), c.sizes);
    std::vector<autosched::Sketch> sketches =
        autosched::sketches(base, {}, autosched::Machine::Gpu);
    sketched += !sketches.empty();
    for (const autosched::Sketch& s : sketches) {
      SCOPED_TRACE(fmt::format("{} at {}, GPU {} sketch:\n{}", base.name, fmt::join(c.sizes, ", "),
                               s.name, s.schedule));
      EXPECT_NE(s.schedule.find("gpu_thread_x"), std::string::npos);
      expect_gpu_sketch(autosched::apply(base, s), 3, c.runtime);
    }
  }
  EXPECT_GE(sketched, 18);
}

// The GPU sketches of the operator library's funcs in `files`, at their defaults (small layers,
// and the normalizations over the middle axis of an [A, N, 1] tensor, whose innermost axis has
// one element), at their largest sizes and their defaults: the number of sketches.
int expect_library_gpu_sketches(const std::vector<std::string>& files) {
  int sketched = 0;
  for (const std::string& file : files) {
    for (const ir::Func& f : frontend::parse_module(read_source(file), file).funcs) {
      ir::Func base = autosched::algorithm_of(f);
      for (const autosched::Sketch& s : autosched::sketches(base, {}, autosched::Machine::Gpu)) {
        SCOPED_TRACE(fmt::format("{}: {}, GPU {} sketch:\n{}", file, f.name, s.name, s.schedule));
        expect_gpu_sketch(autosched::apply(base, s), 0, {});
        ++sketched;
      }
    }
  }
  return sketched;
}

// The library's elementwise, layout, normalization and pooling funcs get GPU sketches that compile
// for a GPU and compute what the reference does. The softmax's and ReduceMean's tiled sketches
// were refused at these sizes: every block and thread loop of their reduction has one iteration,
// lowering drops those, and the one thread that runs what is left has the reduction's input
// staged in shared memory, which is now its own.
TEST(Autosched, TheLibrarysGpuSketchesComputeWhatTheReferenceDoes) {
  EXPECT_GE(expect_library_gpu_sketches(
                {"compiler/library/elementwise.kiln", "compiler/library/layout.kiln",
                 "compiler/library/normalization.kiln", "compiler/library/pool.kiln"}),
            30);
}

// The same for its convolutions and matrix products (a test of its own: they take longest).
TEST(Autosched, TheLibrarysConvAndMatmulGpuSketchesComputeWhatTheReferenceDoes) {
  EXPECT_GE(
      expect_library_gpu_sketches({"compiler/library/conv.kiln", "compiler/library/matmul.kiln"}),
      10);
}

// At full sizes, where every size a knob offers cuts a loop, the largest points still fit a
// block (ptxas keeps its sums in registers: the register constraint): the kernels are compiled,
// not run (the interpreter would take minutes).
TEST(Autosched, GpuSketchesAtFullSizeFitABlockAtTheirLargestSizes) {
  for (const char* file :
       {"examples/gpu/matmul.kiln", "examples/gpu/conv2d.kiln", "examples/gpu/batch_matmul.kiln"}) {
    ir::Func base = autosched::algorithm_of(parse_one(read_source(file)));
    for (const autosched::Sketch& s : autosched::sketches(base, {}, autosched::Machine::Gpu)) {
      SCOPED_TRACE(fmt::format("{}, GPU {} sketch:\n{}", file, s.name, s.schedule));
      expect_gpu_sketch(autosched::apply(base, s), 1, {}, false);
    }
  }
}

// A matmul's GPU sketch: blocks of (threads x registers) rows and columns, its k loop stepped
// through with both operands' slices in shared memory (A's transposed, so that a thread's rows
// are consecutive), a knob constraint keeping them within a block's 48 KiB; the split sketch
// one row of blocks per i.
TEST(Autosched, AMatmulOnAGpuIsTiledOverBlocksThreadsAndRegistersWithItsSlicesStaged) {
  ir::Func f = autosched::algorithm_of(parse_one(read_source("examples/gpu/matmul.kiln")));
  std::vector<autosched::Sketch> s = autosched::sketches(f, {}, autosched::Machine::Gpu);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "tiled");
  EXPECT_EQ(
      s[0].schedule,
      "    knob thread_C_i = 8 in [2, 4, 8, 16, 32];\n"
      "    knob thread_C_j = 16 in [8, 16, 32];\n"
      "    knob reg_C_i = 4 in [1, 2, 4, 8];\n"
      "    knob reg_C_j = 4 in [1, 2, 4, 8];\n"
      "    knob step_C_k = 8 in [4, 8, 16, 32];\n"
      "    constraint thread_C_i * thread_C_j * reg_C_i * reg_C_j <= 16384;\n"
      "    constraint step_C_k * (thread_C_i * reg_C_i + 4) * 4 + min(step_C_k, 1024) * "
      "min(thread_C_j * reg_C_j, 1024) * 4 <= 49122;\n"
      "    C.split(i, reg_C_i, i_1, i_r);\n"
      "    C_init.split(i, reg_C_i, i_1, i_r);\n"
      "    C.split(i_1, thread_C_i, i_o, i_t);\n"
      "    C_init.split(i_1, thread_C_i, i_o, i_t);\n"
      "    C.split(j, reg_C_j, j_1, j_r);\n"
      "    C_init.split(j, reg_C_j, j_1, j_r);\n"
      "    C.split(j_1, thread_C_j, j_o, j_t);\n"
      "    C_init.split(j_1, thread_C_j, j_o, j_t);\n"
      "    C.split(k, step_C_k, k_o, k_i);\n"
      "    C.reorder(i_o, j_o, k_o, i_t, j_t, k_i, i_r, j_r);\n"
      "    C_init.reorder(i_o, j_o, i_t, j_t, i_r, j_r);\n"
      "    C.after(C_init, j_o);\n"
      "    C.tag(j_o, gpu_block_x);\n"
      "    C_init.tag(j_o, gpu_block_x);\n"
      "    C.tag(i_o, gpu_block_y);\n"
      "    C_init.tag(i_o, gpu_block_y);\n"
      "    C.tag(i_t, gpu_thread_y);\n"
      "    C_init.tag(i_t, gpu_thread_y);\n"
      "    C.tag(j_t, gpu_thread_x);\n"
      "    C_init.tag(j_t, gpu_thread_x);\n"
      "    C.tag(i_r, unroll);\n"
      "    C_init.tag(i_r, unroll);\n"
      "    C.tag(j_r, unroll);\n"
      "    C_init.tag(j_r, unroll);\n"
      "    C.cache(A, k_o, gpu_shared, [\"step_C_k\", \"thread_C_i * reg_C_i + 4\"], \"{ [e0, "
      "e1] -> [e1 - step_C_k * k_o, e0 - thread_C_i * reg_C_i * i_o] }\");\n"
      "    C.cache_identity(B, k_o, gpu_shared);\n");
  EXPECT_EQ(s[1].name, "split");
  EXPECT_NE(s[1].schedule.find("C.tag(i, gpu_block_y);"), std::string::npos);
  EXPECT_NE(s[1].schedule.find("C.after(C_init, j_t);"), std::string::npos);
  // The constraints refuse a point whose sums need more than a block's registers (with them,
  // a matmul's slices always fit its shared memory: at most 32 x (256 + 64) floats).
  ir::Func g = autosched::apply(f, s[0]);
  EXPECT_NO_THROW(ir::apply_overrides(
      g,
      {{"thread_C_i", 32}, {"reg_C_i", 8}, {"step_C_k", 32}, {"thread_C_j", 16}, {"reg_C_j", 4}}));
  EXPECT_THROW(ir::apply_overrides(g, {{"thread_C_i", 32},
                                       {"reg_C_i", 4},
                                       {"step_C_k", 4},
                                       {"thread_C_j", 32},
                                       {"reg_C_j", 8}}),
               CompileError);
}

// More blocks along a loop than a grid's y or z holds (65535): that loop takes x, and a loop
// left on y whose knobs could give it too many gets a knob constraint.
TEST(Autosched, ALoopOfMoreBlocksThanYHoldsTakesTheGridsX) {
  ir::Func spmm = ir::apply_overrides(autosched::algorithm_of(parse_one(read_example("spmm"))),
                                      {{"m", 100000}});
  for (const autosched::Sketch& s : autosched::sketches(spmm, {}, autosched::Machine::Gpu)) {
    SCOPED_TRACE(s.schedule);
    EXPECT_NE(s.schedule.find("Y.tag(i, gpu_block_x);"), std::string::npos);
    EXPECT_NE(s.schedule.find("Y.tag(j_o, gpu_block_y);"), std::string::npos);
  }
  ir::Func mm = ir::apply_overrides(
      autosched::algorithm_of(parse_one(read_source("examples/gpu/matmul.kiln"))),
      {{"M", 300000}, {"N", 600000}, {"K", 16}});
  std::optional<autosched::Sketch> tiled = autosched::first_sketch(mm, {}, autosched::Machine::Gpu);
  ASSERT_TRUE(tiled);
  EXPECT_NE(tiled->schedule.find("C.tag(i_o, gpu_block_x);"), std::string::npos) << tiled->schedule;
  EXPECT_NE(tiled->schedule.find("C.tag(j_o, gpu_block_y);"), std::string::npos) << tiled->schedule;
  EXPECT_NE(tiled->schedule.find("constraint (600000 + thread_C_j * reg_C_j - 1) / (thread_C_j * "
                                 "reg_C_j) <= 65535;"),
            std::string::npos)
      << tiled->schedule;
}

// The CPU sketch of a conv's window does not fit a GPU block's shared memory at the default
// register tile: the GPU sketch halves it by default, keeping both inputs staged.
TEST(Autosched, AGpuSketchShrinksItsDefaultTileWhereTheStagedInputsWouldNotFit) {
  ir::Func f = autosched::algorithm_of(parse_one(read_source("examples/gpu/conv2d.kiln")));
  std::optional<autosched::Sketch> s = autosched::first_sketch(f, {}, autosched::Machine::Gpu);
  ASSERT_TRUE(s);
  EXPECT_NE(s->schedule.find("knob reg_O_y = 2 in [1, 2, 4, 8];"), std::string::npos)
      << s->schedule;
  EXPECT_NE(s->schedule.find("knob reg_O_x = 2 in [1, 2, 4, 8];"), std::string::npos)
      << s->schedule;
  // the 4 x 4 tile would not fit
  EXPECT_THROW(ir::apply_overrides(autosched::apply(f, *s), {{"reg_O_y", 4}, {"reg_O_x", 4}}),
               CompileError);
  EXPECT_NE(s->schedule.find("O.cache_identity(I, c_o, gpu_shared);"), std::string::npos);
  EXPECT_NE(s->schedule.find("O.cache_identity(Wt, c_o, gpu_shared);"), std::string::npos);
  EXPECT_NO_THROW(ir::check_knob_constraints(autosched::apply(f, *s)));
}

// CSR rows (spmm, its nonzeros' loop between the output's two): on a GPU, the loops the store
// names first -- rows over blocks, columns over threads -- and each thread reducing its row's
// nonzeros; its initialization, over other loops than the product's, sketched on its own (on a
// CPU too).
TEST(Autosched, ACsrProductOnAGpuPutsTheLoopsItStoresOverBlocksAndThreads) {
  ir::Func f = autosched::algorithm_of(parse_one(read_example("spmm")));
  std::vector<autosched::Sketch> gpu = autosched::sketches(f, {}, autosched::Machine::Gpu);
  ASSERT_FALSE(gpu.empty());
  for (const autosched::Sketch& s : gpu) {
    SCOPED_TRACE(s.schedule);
    EXPECT_NE(s.schedule.find("Y.reorder(i, j, k);\n"
                              "    Y.split(j, thread_Y_j, j_o, j_t);\n"
                              "    Y.tag(j_o, gpu_block_x);\n"
                              "    Y.tag(i, gpu_block_y);\n"
                              "    Y.tag(j_t, gpu_thread_x);\n"),
              std::string::npos);
    EXPECT_NE(s.schedule.find("Y_init.tag(j_t, gpu_thread_x);"), std::string::npos);
  }
  for (const autosched::Sketch& s : autosched::sketches(f))
    EXPECT_NE(s.schedule.find(s.name == "fused" ? "Y_init.tag(j, vectorize);"
                                                : "Y_init.tag(j_i, vectorize);"),
              std::string::npos)
        << s.schedule;
}

// A stencil in a time loop would need kernels inside a loop, which GPU code does not have yet:
// no GPU sketch.
TEST(Autosched, AStencilInATimeLoopHasNoGpuSketch) {
  ir::Func f = autosched::algorithm_of(parse_one(read_example("jacobi2d")));
  EXPECT_TRUE(autosched::sketches(f, {}, autosched::Machine::Gpu).empty());
  EXPECT_FALSE(autosched::sketches(f).empty());
}

TEST(Autosched, AFuncWithAScheduleOfItsOwnIsRefused) {
  EXPECT_THROW(autosched::sketches(parse_one(read_example("matmul"))), std::invalid_argument);
}

}  // namespace
}  // namespace kiln::testing
