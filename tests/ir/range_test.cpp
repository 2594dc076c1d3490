// Linear forms and ranges of integer expressions (kiln/range.h): the
// analysis Simplify rewrites with and the GPU code generator asks for bounds.
#include "kiln/range.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

Expr v(const char* name) { return var(name); }
Expr c(int64_t x) { return int_imm(x); }

TEST(Range, ATiledIndexStaysInsideItsTile) {
  Bounds known{{"io", {0, 7}}, {"ii", {0, 3}}};
  Interval r = range_of(c(4) * v("io") + v("ii"), known);
  EXPECT_EQ(r.min, 0);
  EXPECT_EQ(r.max, 31);
  Interval q = range_of(binary(BinaryOp::Div, c(4) * v("io") + v("ii"), c(4)), known);
  EXPECT_EQ(q.min, 0);
  EXPECT_EQ(q.max, 7);
  Interval m = range_of(binary(BinaryOp::Mod, v("ii") + c(8), c(4)), known);
  EXPECT_EQ(m.min, 0);
  EXPECT_EQ(m.max, 3);
}

TEST(Range, AnUnknownVariableOrAnOverflowLeavesTheEndOpen) {
  Interval r = range_of(v("n") + c(1), {});
  EXPECT_FALSE(r.min);
  EXPECT_FALSE(r.max);
  Interval big = range_of(c(INT64_MAX) * v("i"), {{"i", {0, 2}}});
  EXPECT_EQ(big.min, 0);
  EXPECT_FALSE(big.max);
  Interval neg = range_of(c(0) - v("i"), {{"i", {1, 5}}});
  EXPECT_EQ(neg.min, -5);
  EXPECT_EQ(neg.max, -1);
}

TEST(Range, MinAndMaxTakeTheTighterEnd) {
  Bounds known{{"i", {0, 100}}};
  Interval r = range_of(binary(BinaryOp::Min, v("i"), c(16)), known);
  EXPECT_EQ(r.min, 0);
  EXPECT_EQ(r.max, 16);
  Interval s = range_of(binary(BinaryOp::Max, v("j"), c(3)), {});
  EXPECT_EQ(s.min, 3);
  EXPECT_FALSE(s.max);
}

TEST(LinearForm, LikeTermsCollectAndRebuildInCanonicalOrder) {
  // 4 * io + ii - 4 * io + 3 - ii * 2 is -ii + 3.
  Expr e = c(4) * v("io") + v("ii") - c(4) * v("io") + c(3) - v("ii") * c(2);
  LinearForm l = linearize(e, true);
  ASSERT_TRUE(l.ok);
  EXPECT_EQ(l.constant, 3);
  EXPECT_EQ(to_string(linear_expr(l, kIndexType)), "-ii + 3");  // the constant last
  // Without distributing, 2 * (a + b) stays one atom.
  LinearForm kept = linearize(c(2) * (v("a") + v("b")), false);
  EXPECT_EQ(kept.terms.size(), 1u);
  LinearForm split = linearize(c(2) * (v("a") + v("b")), true);
  EXPECT_EQ(split.terms.size(), 2u);
}

}  // namespace
}  // namespace kiln::ir
