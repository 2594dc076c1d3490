// flop_count: the floating-point operations of a lowered function, from its loop nest, for
// GFLOP/s figures. Each example's count is the one its algorithm implies, whatever the
// schedule; counts that depend on data are unknown (-1).
#include <gtest/gtest.h>

#include "kiln/loop_ir.h"
#include "programs.h"

namespace kiln::testing {
namespace {

int64_t flops(const std::string& program, const ir::Overrides& set = {},
              const std::map<std::string, int64_t>& runtime = {}) {
  return ir::flop_count(poly::lower(poly::schedule(parse_one(program, set))), runtime);
}

TEST(FlopCount, MatmulIsTwoFlopsPerMultiplyAdd) {
  std::string src = read_example("matmul");
  EXPECT_EQ(flops(src), 2 * 128 * 128 * 128);
  // Tiles with remainders (13 = 8 + 5) count the same work.
  EXPECT_EQ(flops(src, {{"M", 13}, {"N", 17}, {"K", 9}, {"TI", 8}, {"TJ", 8}}), 2 * 13 * 17 * 9);
  EXPECT_EQ(flops(with_schedule(src, "")), 2 * 128 * 128 * 128);
  EXPECT_EQ(flops(with_schedule(src, "C.skew(i, j, 1); C.shift(k, 3);"), {{"M", 20}}),
            2 * 20 * 128 * 128);
}

TEST(FlopCount, EveryOperationInTheStoredValueCounts) {
  // heat2d's step: four additions and a multiplication per point, on a skewed nest.
  EXPECT_EQ(flops(read_example("heat2d")), 5 * 4 * 10 * 10);
  // conv2d: the padding is a select (no arithmetic); each update is a multiply-add.
  EXPECT_EQ(flops(read_example("conv2d")), 2 * 2 * 6 * 10 * 10 * 4 * 3 * 3);
  // trmm: a triangular domain (k > i), then one multiplication per element.
  EXPECT_EQ(flops(read_example("trmm")), 2 * 24 * (40 * 39 / 2) + 40 * 24);
}

TEST(FlopCount, RunTimeParamsNeedValues) {
  const char* program = R"(func scale {
    param n;
    constraint n > 0;
    input a : f32[n];
    output b : f32[n];
    compute s(i) in 0 <= i < n: b[i] = a[i] * 3.0 + 1.0;
    schedule { s.split(i, 4, io, ii); }
  })";
  EXPECT_EQ(flops(program), -1);
  EXPECT_EQ(flops(program, {}, {{"n", 13}}), 2 * 13);
}

TEST(FlopCount, DataDependentBoundsAreUnknown) {
  EXPECT_EQ(flops(read_example("segment_sum"), {}, {{"m", 10}}), -1);
  EXPECT_EQ(flops(read_example("spmm")), -1);
}

TEST(FlopCount, IntegerArithmeticIsNotCounted) {
  const char* program = R"(func count {
    param N = 8;
    input a : i32[N];
    output b : i32[N];
    compute s(i) in 0 <= i < N: b[i] = a[i] * 3 + 1;
  })";
  EXPECT_EQ(flops(program), 0);
}

}  // namespace
}  // namespace kiln::testing
