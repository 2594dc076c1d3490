// The functions compiler/poly reads off a relation's constraints without
// asking isl (affine_function.h): a schedule's function and a tile's
// iterators from its loops. Each is checked against isl's own answer, in the
// form isl gives it, since the AST generation sees that form.
#include "affine_function.h"

#include <gtest/gtest.h>
#include <isl/aff.h>
#include <isl/ctx.h>
#include <isl/map.h>
#include <isl/options.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::poly {
namespace {

class AffineFunction : public ::testing::Test {
 protected:
  AffineFunction() : ctx_(isl_ctx_alloc(), isl_ctx_free) {
    isl_options_set_on_error(ctx_.get(), ISL_ON_ERROR_CONTINUE);
  }
  isl::map map(const std::string& text) {
    isl_map* raw = isl_map_read_from_str(ctx_.get(), text.c_str());
    return raw ? isl::manage(raw) : isl::map();
  }
  static std::string text(const isl::pw_multi_aff& f) {
    char* s = isl_pw_multi_aff_to_str(f.get());
    std::string out = s;
    free(s);
    return out;
  }
  // plain_function of rel is isl_pw_multi_aff_from_map's function, and with
  // same_form its text too.
  void expect_isls_function(const isl::map& rel, bool same_form) {
    std::optional<isl::pw_multi_aff> mine = plain_function(rel);
    ASSERT_TRUE(mine.has_value());
    isl::pw_multi_aff isls = isl::manage(isl_pw_multi_aff_from_map(rel.copy()));
    if (same_form) {
      EXPECT_EQ(text(*mine), text(isls));
    }
    EXPECT_EQ(isl_pw_multi_aff_is_equal(mine->get(), isls.get()), isl_bool_true)
        << text(*mine) << "\n"
        << text(isls);
  }
  std::unique_ptr<isl_ctx, decltype(&isl_ctx_free)> ctx_;
};

TEST_F(AffineFunction, PlainFunctionIsIslsFunctionInIslsForm) {
  for (const char* m : {
           // A tiled GEMM schedule: static dims, floors of floors, equalities.
           "{ C[i, j, k] -> [0, o1, 1, o3, 1, o5, 1, o7, 0, o9, 0, k - 128o3, 0, "
           "i - 256o5 - 4o9, 0, j - 2048o1 - 64o7, 0] : -2047 + j <= 2048o1 <= j and "
           "-127 + k <= 128o3 <= k and -255 + i <= 256o5 <= i and "
           "-63 + j - 2048o1 <= 64o7 <= j - 2048o1 and -3 + i - 256o5 <= 4o9 <= i - 256o5 }",
           // Params in the floor, a skew, a shift.
           "[N, M] -> { S[i, j] -> [o0, i + j, j - N, 2i] : -7 + i + M <= 8o0 <= i + M }",
           // Constraints without an output make the domain.
           "[N] -> { S[i] -> [o0, i] : 0 <= i < N and -3 + i <= 4o0 <= i }",
           "{ S[i] -> [-i, 5] : i >= 3 }",
           // A loop space back to iterators, as lowering builds it.
           "{ C[i0, i1, i2] -> C[i = 256i0 + 4i1 + i2] : 0 <= i2 <= 3 and 0 <= i1 <= 63 }",
       }) {
    SCOPED_TRACE(m);
    isl::map rel = map(m);
    ASSERT_FALSE(rel.is_null());
    expect_isls_function(rel, true);
  }
}

TEST_F(AffineFunction, PlainFunctionLeavesTheRestToIsl) {
  for (const char* m : {
           // Two basic maps whose domains overlap: adding the pieces would
           // double the value where they meet.
           "{ S[i] -> [i, o1] : i <= 5 and -3 + i <= 4o1 <= i; S[i] -> [i, o1] : i >= 3 and "
           "-3 + i <= 4o1 <= i }",
           // A piece that is not plain makes the whole a question for isl.
           "{ S[i] -> [0, i] : i < 10; S[i] -> [o0, i] : i >= 10 and 2o0 = i }",
           // An output bound beyond its definition.
           "{ S[i] -> [o0] : -3 + i <= 4o0 <= i and o0 >= 2 }",
           // A floor pair that does not cover every value: o0 is not defined for all i.
           "{ S[i] -> [o0] : -2 + i <= 4o0 <= i }",
           // An equality that divides.
           "{ S[i] -> [o0] : 2o0 = i }",
           // Not a function at all.
           "{ S[i] -> [o0] : i <= o0 <= i + 1 }",
           // An existential variable.
           "{ S[i] -> [i] : exists (e : i = 2e) }",
       }) {
    SCOPED_TRACE(m);
    isl::map rel = map(m);
    ASSERT_FALSE(rel.is_null());
    EXPECT_FALSE(plain_function(rel).has_value());
  }
}

TEST_F(AffineFunction, PlainFunctionOfASeparatedLoopIsIslsFunction) {
  // A loop separated into its full tiles and the rest: one basic map per
  // piece, on domains apart. The pieces may come in another order than
  // isl's; the function is the same.
  for (const char* m : {
           "{ S[i] -> [0, i] : i < 10; S[i] -> [1, i] : i >= 10 }",
           "{ out[fo, x] -> [1, o1, 0, fo - 2o1, 1, o5, 0, x - 16o5] : -1 + fo <= 2o1 <= fo and "
           "-15 + x <= 16o5 <= x and x >= 48; out[fo, x] -> [1, o1, 0, fo - 2o1, 1, o5, 0, "
           "x - 16o5] : -1 + fo <= 2o1 <= fo and -15 + x <= 16o5 <= x and x < 0; "
           "out[fo, x] -> [1, o1, 0, fo - 2o1, 0, o5, 0, x - 16o5] : 0 <= x <= 47 and "
           "-1 + fo <= 2o1 <= fo and -15 + x <= 16o5 <= x }",
       }) {
    SCOPED_TRACE(m);
    isl::map rel = map(m);
    ASSERT_FALSE(rel.is_null());
    ASSERT_GT(isl_map_n_basic_map(rel.get()), 1);
    expect_isls_function(rel, false);
  }
}

TEST_F(AffineFunction, InputsFromOutputsUndoATile) {
  // i = 256 o5 + 4 o7 + o9 (dims 5, 7, 9), k = 128 o3 + o11; columns: the
  // constant, then schedule dims 0..11 (no params).
  std::optional<std::vector<std::vector<int64_t>>> rows = inputs_from_outputs(
      map("{ C[i, k] -> [0, o1, 1, o3, 0, o5, 0, o7, 0, i - 256o5 - 4o7, 0, k - 128o3] : "
          "-127 + k <= 128o3 <= k and -255 + i <= 256o5 <= i and "
          "-3 + i - 256o5 <= 4o7 <= i - 256o5 and o1 = 0 }"));
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<std::vector<int64_t>>{{0, 0, 0, 0, 0, 0, 256, 0, 4, 0, 1, 0, 0},
                                                      {0, 0, 0, 0, 128, 0, 0, 0, 0, 0, 0, 0, 1}}));
  // A param: i = o0 + N (columns: the constant, N, o0).
  rows = inputs_from_outputs(map("[N] -> { S[i] -> [i - N] }"));
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<std::vector<int64_t>>{{0, 1, 1}}));
  // A skew: i = o0, j = o1 - o0.
  rows = inputs_from_outputs(map("{ S[i, j] -> [i, i + j] }"));
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<std::vector<int64_t>>{{0, 1, 0}, {0, -1, 1}}));
  // An equality that multiplies: i = 2 o0 (where o0 = floor(i / 2) is not one).
  rows = inputs_from_outputs(map("{ S[i] -> [o0] : 2o0 = i }"));
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<std::vector<int64_t>>{{0, 2}}));
}

TEST_F(AffineFunction, InputsFromOutputsRefuseWhatTheEqualitiesLeaveOpen) {
  for (const char* m : {
           "{ S[i, j] -> [i + j] }",                          // two inputs, one output
           "{ S[i] -> [o0] : -3 + i <= 4o0 <= i }",           // a floor alone
           "{ S[i] -> [o0] : 2i = o0 }",                      // i = o0 / 2
           "{ S[i] -> [i] : i < 0; S[i] -> [-i] : i >= 0 }",  // two basic maps
           "{ S[i] -> [o0] : exists (e : i = 2e + o0 and 0 <= o0 <= 1) }",  // through a div
       }) {
    SCOPED_TRACE(m);
    isl::map rel = map(m);
    ASSERT_FALSE(rel.is_null());
    EXPECT_FALSE(inputs_from_outputs(rel).has_value());
  }
}

}  // namespace
}  // namespace kiln::poly
