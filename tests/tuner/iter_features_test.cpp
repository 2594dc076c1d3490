// Iter features (kiln/cost_model.h) of lowered loops: one length on every
// example and schedule, the numbers a small nest should give, and different
// features for different schedules of one operator.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "example_cases.h"
#include "kiln/compile.h"
#include "kiln/cost_model.h"
#include "programs.h"

namespace kiln::tuner {
namespace {

ir::LoweredFunc lowered(const ir::Func& f, const ir::Overrides& set = {}) {
  return compile(CompileRequest{.func = f, .overrides = set, .output = CompileOutput::Loops})
      .optimized;
}

TEST(IterFeatures, OneLengthOnEveryExample) {
  int lowered_count = 0;
  for (const testing::ExampleCase& c : testing::example_cases()) {
    ir::Module m = frontend::parse_module(testing::read_example(c.example), c.example + ".kiln");
    for (const ir::Func& f : m.funcs) {
      for (const ir::Overrides& params : c.params) {
        SCOPED_TRACE(c.example + " " + f.name);
        ir::Overrides set;
        for (const auto& [name, value] : params)
          if (f.find_param(name) || f.find_knob(name)) set[name] = value;
        std::vector<float> features = iter_features(lowered(f, set), c.runtime);
        EXPECT_EQ(features.size(), kIterFeatureLength);
        for (float x : features) EXPECT_TRUE(std::isfinite(x) && x >= 0);
        ++lowered_count;
      }
    }
  }
  EXPECT_GT(lowered_count, 8);
}

TEST(IterFeatures, ASmallNestGivesItsNumbers) {
  ir::Func f = testing::parse_one(
      "func scale { input x : f32[8, 16]; output y : f32[8, 16];\n"
      "  compute c(i, j) in 0 <= i < 8 and 0 <= j < 16: y[i, j] = x[i, j] * 2.0 + 1.0; }");
  std::vector<float> v = iter_features(lowered(f));
  auto at = [&](size_t loop, size_t k) { return v[loop * kIterFeaturesPerLoop + k]; };
  EXPECT_FLOAT_EQ(at(0, 0), std::log2(9.0f));           // i: 8 iterations
  EXPECT_FLOAT_EQ(at(1, 0), std::log2(17.0f));          // j: 16
  EXPECT_EQ(at(0, 1), 1.0f);                            // untagged
  EXPECT_FLOAT_EQ(at(0, 5), std::log2(1.0f + 2 * 16));  // two float ops a j iteration
  EXPECT_FLOAT_EQ(at(1, 5), std::log2(3.0f));
  // Buffers in order y, x: strides along i are a row, along j one element.
  EXPECT_FLOAT_EQ(at(0, 7), std::log2(17.0f));
  EXPECT_FLOAT_EQ(at(1, 7), 1.0f);
  EXPECT_FLOAT_EQ(at(1, 10), 1.0f);
  // No reuse: every iteration touches its own element.
  EXPECT_FLOAT_EQ(at(1, 9), 1.0f);
  for (size_t k = 0; k < kIterFeaturesPerLoop; ++k) EXPECT_EQ(at(2, k), 0.0f);  // padding
}

TEST(IterFeatures, ScheduleChoicesShowInTheFeatures) {
  ir::Func f = testing::parse_one(
      "func mm { input a : f32[64, 64]; input b : f32[64, 64]; output c : f32[64, 64];\n"
      "  knob T = 8 in [4, 8, 16];\n"
      "  compute c(i, j) in 0 <= i < 64, 0 <= j < 64:\n"
      "    c[i, j] = sum(k in 0 <= k < 64) a[i, k] * b[k, j];\n"
      "  schedule { c.split(j, T, jo, ji); c.tag(ji, vectorize); } }");
  std::vector<float> t4 = iter_features(lowered(f, {{"T", 4}}));
  std::vector<float> t16 = iter_features(lowered(f, {{"T", 16}}));
  EXPECT_NE(t4, t16);
  bool vectorized = false;
  for (size_t loop = 0; loop < kIterLoops; ++loop)
    vectorized |= t16[loop * kIterFeaturesPerLoop + 3] == 1.0f;
  EXPECT_TRUE(vectorized);
}

// The GPU matmul: its block loops and thread loops are marked, and the tiles of A and B it
// stages in shared memory say so for every loop, apart from C in device memory.
TEST(IterFeatures, GpuLoopsAndSharedMemoryShowInTheFeatures) {
  ir::Func f = testing::parse_one(testing::read_source("examples/gpu/matmul.kiln"),
                                  {{"M", 256}, {"N", 256}, {"K", 64}});
  CompileRequest r{.func = f, .output = CompileOutput::Loops};
  r.options.target = Target{"nvptx64-nvidia-cuda", "sm_90", ""};
  std::vector<float> v = iter_features(compile(r).optimized);
  ASSERT_EQ(v.size(), kIterFeatureLength);
  const size_t gpu = 7 + 3 * kIterBuffers;  // the block flag; the thread flag after it
  auto at = [&](size_t loop, size_t k) { return v[loop * kIterFeaturesPerLoop + k]; };
  int blocks = 0, threads = 0;
  for (size_t loop = 0; loop < kIterLoops; ++loop) {
    blocks += at(loop, gpu) == 1.0f;
    threads += at(loop, gpu + 1) == 1.0f;
  }
  EXPECT_GE(blocks, 2);   // io and jo, of C_init and C
  EXPECT_GE(threads, 2);  // ty and tx
  // Buffers in the order the loops first access them: C first (C_init), then the tiles.
  EXPECT_EQ(at(0, gpu + 2), 0.0f);
  bool shared = false;
  for (size_t bi = 1; bi < kIterBuffers; ++bi) shared |= at(0, gpu + 2 + bi) == 1.0f;
  EXPECT_TRUE(shared);
  // A CPU schedule has none of it.
  std::vector<float> cpu = iter_features(lowered(testing::parse_one(
      testing::read_source("examples/matmul.kiln"), {{"M", 64}, {"N", 64}, {"K", 64}})));
  for (size_t loop = 0; loop < kIterLoops; ++loop)
    for (size_t k = gpu; k < kIterFeaturesPerLoop; ++k)
      EXPECT_EQ(cpu[loop * kIterFeaturesPerLoop + k], 0.0f);
}

// The features place a temporary where the CUDA writer does in a kernel of one block (block
// loops of one iteration, which lowering leaves out: the staged tiles in shared memory) and in a
// kernel of one thread (a nest with no GPU loop, beside C's initialization over blocks and
// threads: a gpu_local tile in its registers), not in device memory. A func with no GPU loop at
// all is taken for a CPU's: its temporaries get no place.
TEST(IterFeatures, KernelsOfOneBlockAndOfOneThreadPlaceTheirTemporariesAsThePrinterDoes) {
  const std::string matmul = testing::read_source("examples/gpu/matmul.kiln");
  auto levels = [](const ir::Func& f) {
    CompileRequest r{.func = f, .output = CompileOutput::Loops};
    r.options.target = Target{"nvptx64-nvidia-cuda", "sm_90", ""};
    std::vector<float> v = iter_features(compile(r).optimized);
    const size_t first = 7 + 3 * kIterBuffers + 2;  // the buffers' levels, after the GPU flags
    std::set<float> out;
    for (size_t loop = 0; loop < kIterLoops; ++loop)
      for (size_t bi = 0; bi < kIterBuffers; ++bi)
        out.insert(v[loop * kIterFeaturesPerLoop + first + bi]);
    return out;
  };
  EXPECT_TRUE(levels(testing::parse_one(matmul, {{"M", 64}, {"N", 64}, {"K", 32}})).count(1.0f));
  ir::Func one_thread = testing::parse_one(
      testing::with_schedule(matmul,
                             "C_init.tag(i, gpu_block_x); C_init.tag(j, gpu_thread_x);"
                             "C.split(k, 8, ko, ki); C.cache_identity(B, ko, gpu_local);"),
      {{"M", 8}, {"N", 8}, {"K", 16}});
  EXPECT_TRUE(levels(one_thread).count(2.0f));
}

}  // namespace
}  // namespace kiln::tuner
