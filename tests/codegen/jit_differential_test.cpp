// The CPU backend against the oracle: every example, under every schedule of
// the differential suite, compiled by kiln's pipeline (passes and LLVM) at each
// optimization level, computes what the reference interpreter computes.
#include "example_cases.h"
#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/runtime.h"
#include "programs.h"

namespace kiln::testing {
namespace {

interp::Mismatch jit_differential(const ir::Func& f, const Bindings& inputs, int opt) {
  Bindings expected = inputs, actual = inputs;
  interp::run_reference(f, expected);
  CompileRequest r{.func = f};
  r.options.opt_level = opt;
  compile(r).kernel->run(actual);
  return interp::compare_outputs(f, expected, actual);
}

class JitDifferential : public ::testing::TestWithParam<ExampleCase> {};

TEST_P(JitDifferential, CompiledKernelMatchesReference) {
  const ExampleCase& c = GetParam();
  std::string src = read_example(c.example);
  for (const auto& sched : c.schedules) {
    std::string program = sched == "<file>" ? src : with_schedule(src, sched);
    for (size_t p = 0; p < c.params.size(); ++p) {
      ir::Func f = parse_one(program, c.params[p]);
      Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 11);
      // Every level on the first sizes, the default level on the others.
      std::vector<int> levels = p == 0 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{3};
      for (int opt : levels) {
        SCOPED_TRACE("schedule: " + (sched.empty() ? std::string("(none)") : sched) + ", -O" +
                     std::to_string(opt) + ", sizes #" + std::to_string(p));
        interp::Mismatch mm = jit_differential(f, in, opt);
        EXPECT_TRUE(mm.ok) << mm.describe();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, JitDifferential, ::testing::ValuesIn(example_cases()),
                         [](const ::testing::TestParamInfo<ExampleCase>& info) {
                           return info.param.example;
                         });

// Row pointers at their edges, compiled: empty rows, all rows empty, one long row.
TEST(JitDataDependentBounds, SegmentSumAtTheEdges) {
  std::string src = read_example("segment_sum");
  for (std::string sched : {std::string("<file>"), std::string(""),
                            std::string("acc.split(j, 4, jo, ji); acc.tag(i, parallel);")}) {
    ir::Func f = parse_one(sched == "<file>" ? src : with_schedule(src, sched), {{"nnz", 40}});
    auto params = interp::param_values(f, {{"m", 10}});
    for (int pattern = 0; pattern < 4; ++pattern) {
      SCOPED_TRACE("schedule '" + sched + "', pattern " + std::to_string(pattern));
      Bindings in = interp::random_bindings(f, params, 5);
      HostBuffer& off = in.buffers.at("offsets");
      for (int64_t i = 0; i <= 10; ++i) {
        int64_t v = pattern == 0   ? 4 * i                         // even
                    : pattern == 1 ? 0                             // all empty
                    : pattern == 2 ? (i <= 5 ? 0 : 40)             // one long row
                                   : (i % 2 ? 4 * i : 4 * i - 4);  // every other row empty
        off.set_i(i, std::min<int64_t>(std::max<int64_t>(v, 0), 40));
      }
      interp::Mismatch mm = jit_differential(f, in, 3);
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
}

// The benchmark GEMM with register tiles that do not divide its blocks, nor the
// blocks the matrix: the last tile of a block is unrolled with guards (MR = 6,
// BLIS's AVX2 tile), on one thread and on two.
TEST(JitRegisterTiles, GemmWithTilesThatDoNotDivideItsBlocks) {
  const std::string text = read_source("tests/bench/kernels/gemm.kiln");
  int before = kiln_runtime_threads();
  for (ir::Overrides set :
       std::vector<ir::Overrides>{{{"MB", 48}, {"MR", 6}, {"NB", 64}, {"NR", 16}, {"KB", 64}},
                                  {{"MB", 96}, {"MR", 6}, {"NB", 64}, {"NR", 32}, {"KB", 64}},
                                  {{"MB", 16}, {"MR", 8}, {"NB", 64}, {"NR", 16}, {"KB", 128}}}) {
    set.insert({{"M", 100}, {"N", 70}, {"K", 33}});
    ir::Func f = parse_one(text, set);
    Bindings in = interp::random_bindings(f, interp::param_values(f), 7);
    for (int threads : {1, 2}) {
      kiln_runtime_set_threads(threads);
      SCOPED_TRACE("MB " + std::to_string(set.at("MB")) + ", MR " + std::to_string(set.at("MR")) +
                   ", " + std::to_string(threads) + " threads");
      interp::Mismatch mm = jit_differential(f, in, 3);
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
  kiln_runtime_set_threads(before);
}

// The benchmark convolution: channel blocks of 16 in vectors, a padded copy of
// the input whose zeros replace the padding's selects, repacked filters, and
// rows of output pixels that XR may not divide, FB channel blocks per tile
// (3 blocks in tiles of 2: a partial one); stride 1 and 2, 1 and 2 threads.
TEST(JitRegisterTiles, ConvWithPaddedInputAndRepackedFilters) {
  const std::string text = read_source("tests/bench/kernels/conv2d.kiln");
  int before = kiln_runtime_threads();
  const std::vector<ir::Overrides> shapes = {{{"N", 2},
                                              {"C", 5},
                                              {"H", 9},
                                              {"W", 11},
                                              {"F", 32},
                                              {"KH", 3},
                                              {"KW", 3},
                                              {"S", 1},
                                              {"P", 1},
                                              {"OH", 9},
                                              {"OW", 11},
                                              {"XR", 4},
                                              {"FB", 2}},
                                             {{"N", 1},
                                              {"C", 3},
                                              {"H", 20},
                                              {"W", 18},
                                              {"F", 48},
                                              {"KH", 7},
                                              {"KW", 7},
                                              {"S", 2},
                                              {"P", 3},
                                              {"OH", 10},
                                              {"OW", 9},
                                              {"XR", 14},
                                              {"FB", 2}},
                                             {{"N", 1},
                                              {"C", 4},
                                              {"H", 6},
                                              {"W", 6},
                                              {"F", 16},
                                              {"KH", 1},
                                              {"KW", 1},
                                              {"S", 1},
                                              {"P", 0},
                                              {"OH", 6},
                                              {"OW", 6},
                                              {"XR", 7},
                                              {"FB", 1}}};
  for (const ir::Overrides& set : shapes) {
    ir::Func f = parse_one(text, set);
    Bindings in = interp::random_bindings(f, interp::param_values(f), 5);
    for (int threads : {1, 2}) {
      kiln_runtime_set_threads(threads);
      SCOPED_TRACE("KH " + std::to_string(set.at("KH")) + ", S " + std::to_string(set.at("S")) +
                   ", XR " + std::to_string(set.at("XR")) + ", FB " + std::to_string(set.at("FB")) +
                   ", " + std::to_string(threads) + " threads");
      interp::Mismatch mm = jit_differential(f, in, 3);
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
  kiln_runtime_set_threads(before);
}

// The operator library's conv2d with the threads sharing rows (YB = 1), blocks of rows that
// OH does not divide (YB = 4 of 9), and filter blocks alone (YB past OH), on few and many
// channels (C >= 128 fits YB past OH by default), stride 1 and 2, 1 and 2 threads.
TEST(JitRegisterTiles, LibraryConvEveryWayTheThreadsShareIt) {
  const std::string text = read_source("compiler/library/conv.kiln");
  int before = kiln_runtime_threads();
  struct Shape {
    int64_t c, h, s, oh;
    std::vector<int64_t> yb;  // 0: the fitted default
  };
  for (const Shape& sh : {Shape{5, 9, 1, 9, {1, 4, 256}}, Shape{130, 5, 2, 3, {0, 1}}}) {
    for (int64_t yb : sh.yb) {
      ir::Overrides set = {{"N", 1},  {"C", sh.c},   {"H", sh.h},  {"W", 7},  {"F", 32},
                           {"KH", 3}, {"KW", 3},     {"SH", sh.s}, {"SW", 1}, {"PH", 1},
                           {"PW", 1}, {"OH", sh.oh}, {"OW", 7}};
      if (yb > 0) set["YB"] = yb;
      ir::Func f = parse_one(text, set);
      Bindings in = interp::random_bindings(f, interp::param_values(f), 7);
      for (int threads : {1, 2}) {
        kiln_runtime_set_threads(threads);
        SCOPED_TRACE("C " + std::to_string(sh.c) + ", YB " + std::to_string(yb) + ", " +
                     std::to_string(threads) + " threads");
        interp::Mismatch mm = jit_differential(f, in, 3);
        EXPECT_TRUE(mm.ok) << mm.describe();
      }
    }
  }
  kiln_runtime_set_threads(before);
}

// f compiled at -O3 against the reference on `in`, on 1 and then 2 threads.
void on_one_and_two_threads(const ir::Func& f, const Bindings& in) {
  int before = kiln_runtime_threads();
  for (int threads : {1, 2}) {
    kiln_runtime_set_threads(threads);
    SCOPED_TRACE(std::to_string(threads) + " threads");
    interp::Mismatch mm = jit_differential(f, in, 3);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
  kiln_runtime_set_threads(before);
}

// cache copies run in the copy's order, and the loops say which rows kiln
// writes as vectors: a gather of a column of a (rows of 8 and 13), LLVM's
// scalar copy (rows of 4, shorter than the gather rule's 8), a contiguous load
// (the panel stored as it is), a load stored across rows of 4 (the copy's
// last two loops swapped); rows cut short at the matrix's edge (runtime
// sizes no tile divides), serial and shared out among threads.
TEST(JitCopies, RowsOfACopyAsGathersLoadsAndScalars) {
  struct Case {
    std::string loops;  // the schedule before the copy
    std::string copy;
    bool vector_rows;                // whether kiln writes the copy's rows as vectors
    std::string parallel_loop = "";  // the copy's loop shared out, if any
  };
  const std::string tiles =
      "s.split(i, 2, io, ii); s.split(j, JB, jo, ji); s.reorder(io, jo, ii, ji);";
  auto with = [&](int64_t jb) {
    std::string t = tiles;
    return t.replace(t.find("JB"), 2, std::to_string(jb));
  };
  for (
      const Case& c : std::vector<Case>{
          {with(8),
           R"(s.cache(a, jo, heap, [2, 8], "{ [e0, e1] -> [e1 - 2 * io, e0 - 8 * jo] }");)", true},
          {with(4),
           R"(s.cache(a, jo, heap, [2, 4], "{ [e0, e1] -> [e1 - 2 * io, e0 - 4 * jo] }");)", false},
          {with(8),
           R"(s.cache(a, jo, heap, [2, 8], "{ [e0, e1] -> [e1 - 2 * io, e0 - 8 * jo] }", parallel);)",
           true, "a_s_cache_0"},
          {with(8),
           R"(s.cache(a, jo, heap, [8, 2], "{ [e0, e1] -> [e0 - 8 * jo, e1 - 2 * io] }");)", true},
          {"s.split(i, 2, io, ii);",
           R"(s.cache(a, io, heap, [2, 13], "{ [e0, e1] -> [e1 - 2 * io, e0] }");)", true},
          // Panels of rows of 4 (the GEMM's block of A, [MB / MR][KB][MR]):
          // the 16-long index moves with a's innermost, so it runs innermost,
          // one vector load of a's row stored across the panel's rows.
          {"s.split(i, 16, io, ii);",
           R"(s.cache(a, io, heap, [4, 16, 4], "{ [e0, e1] -> [floor(e0 / 4), e1 - 16 * io, e0 mod 4] }");)",
           true},
          // The same shared out: the loop over panels, not the (now outer)
          // loop over a panel's 4 rows, which the 16 of the index it swapped
          // with must not pass for.
          {"s.split(i, 16, io, ii);",
           R"(s.cache(a, io, heap, [4, 16, 4], "{ [e0, e1] -> [floor(e0 / 4), e1 - 16 * io, e0 mod 4] }", parallel);)",
           true, "a_s_cache_0"}}) {
    const std::string program = R"(func tr {
  param N, M = 13;
  input a : f32[M, N];
  output b : f32[N, M];
  compute s(i, j) in 0 <= i < N, 0 <= j < M: b[i, j] = a[j, i] * 2.0 + 1.0;
  schedule { )" + c.loops + " " +
                                c.copy + R"( }
})";
    SCOPED_TRACE(c.copy);
    const std::string loops = lowered(program);
    EXPECT_EQ(loops.find("a_s_cache_1 += 1) {  // vectorize") != std::string::npos, c.vector_rows)
        << loops;
    for (const char* loop : {"a_s_cache_0", "a_s_cache_1", "a_s_cache_2"})
      EXPECT_EQ(loops.find(std::string(loop) + " += 1) {  // parallel") != std::string::npos,
                loop == c.parallel_loop)
          << loop << "\n"
          << loops;
    ir::Func f = parse_one(program);
    for (int n : {7, 4, 1}) {
      SCOPED_TRACE("N = " + std::to_string(n));
      on_one_and_two_threads(f, interp::random_bindings(f, interp::param_values(f, {{"N", n}}), 3));
    }
  }
}

// A temp reused for two values in one parallel loop: c's value of T[i],
// read by d, then a's, read by b, in each iteration (legal on the temp's live
// ranges), compiled, on 1 and 2 threads.
TEST(JitStorageReuse, FusedLiveRangesOfATempInAParallelLoop) {
  const std::string text = reused_temp(
      "d.after(c, i); a.after(d, i); b.after(a, i);\n"
      "    c.split(i, 16, io, ii); d.split(i, 16, io, ii);\n"
      "    a.split(i, 16, io, ii); b.split(i, 16, io, ii);\n"
      "    c.tag(io, parallel);",
      1000);
  ir::Func f = parse_one(text);
  on_one_and_two_threads(f, interp::random_bindings(f, interp::param_values(f), 5));
}

// lu as one computation in k-outer order with parallel rows: the pivot is
// read only on the division's side of the select.
TEST(JitConditionalAccesses, LuInKOuterOrderWithParallelRows) {
  ir::Func f = parse_one(lu_in_one_computation("lu.reorder(k, i, j); lu.tag(i, parallel);", 61));
  on_one_and_two_threads(f, interp::random_bindings(f, interp::param_values(f), 9));
}

// Scatter updates from parallel iterations, compiled: atomic read-modify-
// writes (LLVM's atomicrmw, and a compare-and-swap loop for *=, one per lane
// in a vectorized loop) and privatized copies, on 1 and 2 threads, for every
// update operator and element type. Many iterations update each element, so
// two threads do race for them.
TEST(JitScatter, AtomicAndPrivatizedUpdates) {
  struct Case {
    std::string update, type, init;
  };
  for (const Case& c : std::vector<Case>{
           {"out[bin[k]] += w[k]", "f32", "0.0"},
           {"out[bin[k]] -= w[k]", "f64", "0.0"},
           {"out[bin[k]] *= w[k]", "f32", "1.0"},
           {"out[bin[k]] *= w[k]", "i64", "1"},
           {"out[bin[k]] = max(out[bin[k]], w[k])", "f32", "-1000.0"},
           {"out[bin[k]] = min(w[k], out[bin[k]])", "f64", "1000.0"},
           {"out[bin[k]] += w[k]", "i32", "0"},
           {"out[bin[k]] = max(out[bin[k]], w[k])", "i64", "-1000"},
       }) {
    for (std::string sched : {"h.split(k, 64, ko, ki); h.tag(ko, parallel); h.atomic();",
                              "h.tag(k, parallel); h.atomic();",
                              "h.split(k, 256, ko, ki); h.tag(ko, parallel); h.privatize(ko);"}) {
      SCOPED_TRACE(c.update + " (" + c.type + "): " + sched);
      // *= on few elements per bin, so products stay in range.
      int64_t n = c.update.find("*=") != std::string::npos ? 96 : 5000;
      ir::Func f = parse_one(scatter(c.update, sched, n, 32, c.type, c.init));
      on_one_and_two_threads(f, interp::random_bindings(f, interp::param_values(f), 6));
    }
  }
  // A target of one element, its copies combined one after another.
  ir::Func total = parse_one(
      "func total {\n  param n = 3000;\n  input w : f32[n];\n  output s : f32[];\n"
      "  compute s_init(): s[] = 1.0;\n  compute h(k) in 0 <= k < n: s[] += w[k];\n"
      "  schedule {\n    h.split(k, 64, ko, ki); h.tag(ko, parallel); h.privatize(ko);\n"
      "  }\n}\n");
  on_one_and_two_threads(total, interp::random_bindings(total, interp::param_values(total), 8));
  // Rows: each lane of the vectorized j loop updates its own column.
  for (std::string sched :
       {"h.tag(k, parallel); h.atomic(); h.tag(j, vectorize);",
        "h.split(k, 64, ko, ki); h.tag(ko, parallel); h.privatize(ko); h.tag(j, vectorize);"}) {
    SCOPED_TRACE(sched);
    ir::Func f = parse_one(scatter("out[bin[k], j] += w[k, j]", sched, 700, 5, "f32", "0.0", 19));
    on_one_and_two_threads(f, interp::random_bindings(f, interp::param_values(f), 7));
  }
}

// PolyBench kernels written with algorithm loops (tests/data/polybench),
// compiled under parallel and time-tiled schedules, on 1 and 2 threads.
TEST(JitAlgorithmLoops, PolyBenchKernels) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"lu", "s3.split(k, 4, ko, ki);"},
      {"jacobi2d", "s1.tag(i, parallel); s2.tag(i, parallel); s1.tag(j, vectorize);"},
      {"jacobi2d",
       "s1.skew(t, i, 2); s1.skew(t, j, 2); s2.skew(t, i, 2); s2.skew(t, j, 2); "
       "s2.shift(i, 1); s2.shift(j, 1); s1.tile(t, i, 4, 16, to, io, ti, ii); "
       "s2.tile(t, i, 4, 16, to, io, ti, ii); s2.after(s1, ii);"},
      {"heat3d", "s1.tag(i, parallel); s2.tag(i, parallel);"},
      {"seidel2d", "s.skew(t, i, 1); s.skew(t, j, 2); s.skew(i, j, 1);"},
      {"fdtd2d", "s2.tag(i, parallel); s3.tag(i, parallel); s4.tag(i, parallel);"},
      {"adi", "c4.tag(i, parallel); r4.tag(i, parallel);"},
  };
  for (const auto& [kernel, sched] : cases) {
    SCOPED_TRACE(kernel + ": " + sched);
    ir::Func f =
        parse_one(with_schedule(read_source("tests/data/polybench/" + kernel + ".kiln"), sched));
    on_one_and_two_threads(f, interp::random_bindings(f, interp::param_values(f), 4));
  }
}

}  // namespace
}  // namespace kiln::testing
