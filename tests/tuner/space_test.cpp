// Search spaces (kiln/space.h): exact counts for each knob kind, points
// numbered one to one, constraints that reject points and say which, and
// neighbours that move one knob.
#include "kiln/space.h"

#include <gtest/gtest.h>

#include <set>

#include "kiln/cost_model.h"
#include "kiln/frontend.h"

namespace kiln::tuner {
namespace {

using ir::BinaryOp;

uint64_t size_of(KnobDef k) { return Space({std::move(k)}).size(); }

TEST(SpaceCounts, ValuesTagsAndReorders) {
  EXPECT_EQ(size_of(KnobDef::values_of("U", {1, 2, 4, 8})), 4u);
  EXPECT_EQ(size_of(KnobDef::tag("T", {"none", "parallel", "vectorize"})), 3u);
  EXPECT_EQ(size_of(KnobDef::reorder("R", {"i", "j", "k"})), 6u);
  EXPECT_EQ(size_of(KnobDef::reorder("R", {"i", "j", "k", "l"})), 24u);
  Space r({KnobDef::reorder("R", {"k", "i", "j"})});
  EXPECT_EQ(r.order(r.point(0), "R"), (std::vector<std::string>{"k", "i", "j"}));  // as given
  std::set<std::vector<std::string>> orders;
  for (uint64_t p = 0; p < r.size(); ++p) orders.insert(r.order(r.point(p), "R"));
  EXPECT_EQ(orders.size(), 6u);
  EXPECT_EQ(size_of(KnobDef::reorder("R", {"i", "j", "k"}, {{"i", "j", "k"}, {"k", "i", "j"}})),
            2u);
}

TEST(SpaceCounts, ExactSplitsAreTheOrderedFactorizations) {
  // 12 = o * i: i in {1, 2, 3, 4, 6, 12}.
  Space two({KnobDef::split({"O", "I"}, 12)});
  EXPECT_EQ(two.size(), 6u);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (uint64_t p = 0; p < two.size(); ++p) {
    Config c = two.point(p);
    EXPECT_EQ(c.at("O") * c.at("I"), 12) << records::config_text(c);
    seen.insert({c.at("O"), c.at("I")});
  }
  EXPECT_EQ(seen.size(), 6u);
  // Three parts: (m, i) with m * i dividing 12: the sum over d | 12 of d's divisors, 18.
  EXPECT_EQ(size_of(KnobDef::split({"O", "M", "I"}, 12)), 18u);
  // A largest factor: i in {1, 2, 3, 4}.
  EXPECT_EQ(size_of(KnobDef::split({"O", "I"}, 12, false, 4)), 4u);
  // A prime extent splits two ways.
  EXPECT_EQ(size_of(KnobDef::split({"O", "I"}, 13)), 2u);
}

TEST(SpaceCounts, PowerOfTwoSplitsLeaveATail) {
  // 100 = ceil(100 / i) * i with a guarded tail: i in {1, 2, 4, ..., 64}.
  Space s({KnobDef::split({"O", "I"}, 100, true)});
  EXPECT_EQ(s.size(), 7u);
  Config last = s.point(6);
  EXPECT_EQ(last.at("I"), 64);
  EXPECT_EQ(last.at("O"), 2);
  // (a, b) powers of two with a * b <= 16: 5 + 4 + 3 + 2 + 1.
  EXPECT_EQ(size_of(KnobDef::split({"O", "A", "B"}, 16, true)), 15u);
  EXPECT_EQ(size_of(KnobDef::split({"O", "I"}, 100, true, 16)), 5u);
}

TEST(SpacePoints, EveryNumberIsOnePointAndBack) {
  Space s({KnobDef::values_of("U", {1, 2, 4, 8}), KnobDef::split({"O", "I"}, 12),
           KnobDef::reorder("R", {"i", "j", "k"}), KnobDef::tag("T", {"none", "parallel"})});
  ASSERT_EQ(s.size(), 4u * 6 * 6 * 2);
  std::set<std::string> texts;
  for (uint64_t p = 0; p < s.size(); ++p) {
    Config c = s.point(p);
    EXPECT_EQ(s.index_of(c), p);
    texts.insert(records::config_text(c));
  }
  EXPECT_EQ(texts.size(), s.size());
  EXPECT_THROW(s.point(s.size()), std::invalid_argument);
  Config c = s.point(0);
  c["U"] = 3;
  EXPECT_THROW(s.index_of(c), std::invalid_argument);
  c.erase("U");
  EXPECT_THROW(s.index_of(c), std::invalid_argument);

  Config p = s.point(37);
  const std::vector<std::string>& order = s.order(p, "R");
  EXPECT_EQ(order.size(), 3u);
  EXPECT_TRUE(s.tag(p, "T") == "none" || s.tag(p, "T") == "parallel");
  EXPECT_THROW(s.tag(p, "R"), std::invalid_argument);
}

TEST(SpaceConstraints, PointsThatBreakOneAreRejectedNamingIt) {
  // MB % MR == 0 over MB in {32, 48, 64}, MR in {4, 6, 8}: 2 + 3 + 2 points keep it.
  ir::Expr divides = ir::binary(
      BinaryOp::Eq, ir::binary(BinaryOp::Mod, ir::var("MB"), ir::var("MR")), ir::int_imm(0));
  ir::Expr bounded = ir::binary(
      BinaryOp::Le, ir::binary(BinaryOp::Mul, ir::var("MB"), ir::var("MR")), ir::int_imm(384));
  Space s({KnobDef::values_of("MB", {32, 48, 64}), KnobDef::values_of("MR", {4, 6, 8})},
          {{divides, "MB % MR == 0"}, {bounded, "MB * MR <= 384"}});
  int kept = 0;
  std::map<std::string, int> why;
  for (uint64_t p = 0; p < s.size(); ++p) {
    std::optional<std::string> broken = s.broken_constraint(s.point(p));
    if (broken) {
      ++why[*broken];
    } else {
      ++kept;
    }
  }
  // Kept: (32,4) (32,8) (48,4) (48,6) (48,8) (64,4); (64,8) is 512 > 384.
  EXPECT_EQ(kept, 6);
  EXPECT_EQ(why["MB % MR == 0"], 2);    // (32,6) (64,6)
  EXPECT_EQ(why["MB * MR <= 384"], 1);  // (64,8)
  EXPECT_EQ(s.broken_constraint({{"MB", 64}, {"MR", 6}}), "MB % MR == 0");
}

TEST(SpaceConstraints, ASpaceThatCannotBeIsRefused) {
  EXPECT_THROW(Space({KnobDef::values_of("U", {})}), std::invalid_argument);
  EXPECT_THROW(Space({KnobDef::split({"O"}, 12)}), std::invalid_argument);
  EXPECT_THROW(Space({KnobDef::split({"O", "I"}, 0)}), std::invalid_argument);
  EXPECT_THROW(Space({KnobDef::values_of("U", {1}), KnobDef::tag("U", {"none"})}),
               std::invalid_argument);
  EXPECT_THROW(Space({KnobDef::reorder("R", {"i", "j"}, {{"i", "k"}})}), std::invalid_argument);
  try {
    Space({KnobDef::values_of("U", {1, 2})},
          {{ir::binary(BinaryOp::Lt, ir::var("V"), ir::int_imm(4)), "V < 4"}});
    ADD_FAILURE() << "a constraint on a name that is no knob was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "constraint V < 4: 'V' is not a knob of the space");
  }
}

TEST(SpaceMoves, ANeighbourChangesOneKnob) {
  Space s({KnobDef::values_of("U", {1, 2, 4, 8}), KnobDef::split({"O", "M", "I"}, 64, true),
           KnobDef::values_of("FIXED", {7}), KnobDef::reorder("R", {"i", "j"})});
  std::mt19937_64 rng(11);
  std::map<std::string, int> moved;
  for (int k = 0; k < 500; ++k) {
    Config c = s.random_point(rng);
    Config n = s.neighbour(c, rng);
    EXPECT_NE(n, c);
    EXPECT_NO_THROW(s.index_of(n));
    std::set<std::string> knobs_changed;
    for (const auto& [name, value] : c) {
      if (n.at(name) == value) continue;
      knobs_changed.insert(name == "O" || name == "M" || name == "I" ? "split" : name);
    }
    EXPECT_EQ(knobs_changed.size(), 1u);
    if (!knobs_changed.empty()) ++moved[*knobs_changed.begin()];
    EXPECT_EQ(n.at("FIXED"), 7);
  }
  EXPECT_GT(moved["U"], 100);
  EXPECT_GT(moved["split"], 100);
  EXPECT_GT(moved["R"], 100);
}

TEST(SpaceOfAFunc, ItsKnobsAndKnobConstraints) {
  ir::Func f = frontend::parse_module(R"(func tiles {
  param N = 64;
  constraint MB % MR == 0, MB * MR <= 4 * N;
  input x : f32[N];
  output y : f32[N];
  knob MB = 32 in [16, 32, 48];
  knob MR = 4 in [4, 6, 8];
  compute c(i) in 0 <= i < N: y[i] = x[i];
}
)",
                                      "tiles.kiln")
                   .funcs.at(0);
  Space s = space_of(f);
  EXPECT_EQ(s.size(), 9u);
  int kept = 0;
  for (uint64_t p = 0; p < s.size(); ++p) kept += !s.broken_constraint(s.point(p));
  EXPECT_EQ(kept, 5);  // (16,4) (16,8) (32,4) (32,8) (48,4)
  EXPECT_EQ(s.broken_constraint({{"MB", 48}, {"MR", 8}}), "MB * MR <= 4 * N");

  ir::Func n128 = ir::apply_overrides(f, {{"N", 128}});
  kept = 0;
  Space wider = space_of(n128);
  for (uint64_t p = 0; p < wider.size(); ++p) kept += !wider.broken_constraint(wider.point(p));
  EXPECT_EQ(kept, 7);  // (48,6) and (48,8) too: 288 and 384 <= 512

  Space fixed = space_of(f, {"MB"});
  EXPECT_EQ(fixed.size(), 3u);
  EXPECT_EQ(fixed.point(0).at("MB"), 32);
}

TEST(SpaceOfAFunc, ATagKnobIsATagKnobOfTheSpace) {
  ir::Func f = frontend::parse_module(R"(func scale {
  param N = 64;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i];
  schedule {
    knob V = 8 in [8, 16];
    knob U = vectorize in [none, vectorize, unroll];
    c.split(i, V, io, ii);
    c.tag(ii, U);
  }
}
)",
                                      "scale.kiln")
                   .funcs.at(0);
  Space s = space_of(f);
  EXPECT_EQ(s.size(), 6u);
  const KnobDef& u = s.knobs().at(1);
  EXPECT_EQ(u.kind, KnobDef::Kind::Tag);
  EXPECT_EQ(u.tags, (std::vector<std::string>{"none", "vectorize", "unroll"}));
  std::set<std::string> tags;
  for (uint64_t p = 0; p < s.size(); ++p) tags.insert(s.tag(s.point(p), "U"));
  EXPECT_EQ(tags, (std::set<std::string>{"none", "vectorize", "unroll"}));
  // A point's value is what --set takes: the tag's number.
  for (uint64_t p = 0; p < s.size(); ++p) {
    Config c = s.point(p);
    EXPECT_EQ(*ir::apply_overrides(f, c).find_knob("U")->tag(), s.tag(c, "U"));
  }
  EXPECT_EQ(knob_features(s, s.point(0)).size(), 1u + 3u);  // V, and U one-hot
  Space fixed = space_of(ir::apply_overrides(f, {{"U", 2}}), {"U"});
  EXPECT_EQ(fixed.size(), 2u);
  EXPECT_EQ(fixed.point(0).at("U"), 2);
}

TEST(SpaceOfAFunc, AnOrderKnobIsAReorderOfTheSpace) {
  ir::Func f = frontend::parse_module(R"(func add3 {
  param A = 8, B = 12, C = 16;
  input x : f32[A, B, C];
  output y : f32[A, B, C];
  compute c(i, j, k) in 0 <= i < A, 0 <= j < B, 0 <= k < C: y[i, j, k] = x[i, j, k] + 1.0;
  schedule {
    knob order O of (i, j, k);
    knob order P of (i, j) in [(i, j), (j, i)] = (j, i);
    c.reorder(O);
  }
}
)",
                                      "order.kiln")
                   .funcs.at(0);
  Space s = space_of(f);
  EXPECT_EQ(s.size(), 12u);
  EXPECT_EQ(s.knobs()[0].kind, KnobDef::Kind::Reorder);
  for (uint64_t p = 0; p < s.size(); ++p) {
    Config c = s.point(p);
    ir::Func g = ir::apply_overrides(f, c);
    const ir::Knob* o = g.find_knob("O");
    EXPECT_EQ(o->orders.at(static_cast<size_t>(o->value)), s.order(c, "O"));
  }
}

TEST(SpaceOfAFunc, AKnobSplitIsASplitOfTheSpace) {
  ir::Func f = frontend::parse_module(R"(func scale3 {
  param N = 1024;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 3.0;
  schedule {
    knob split (IO, IM = 4, II = 16) of N max 64;
    knob V = 1 in [1, 2];
    c.split(i, II, i1, ii);
    c.split(i1, IM, io, im);
  }
}
)",
                                      "split.kiln")
                   .funcs.at(0);
  Space s = space_of(f);
  ASSERT_EQ(s.knobs().size(), 2u);
  EXPECT_EQ(s.knobs()[0].kind, KnobDef::Kind::Split);
  EXPECT_EQ(s.knobs()[0].names, (std::vector<std::string>{"IO", "IM", "II"}));
  // (IM, II): powers of two up to 64 whose product divides 1024.
  uint64_t pairs = 0;
  for (int64_t im = 1; im <= 64; im *= 2)
    for (int64_t ii = 1; ii <= 64; ii *= 2) pairs += im * ii <= 1024 ? 1 : 0;
  EXPECT_EQ(s.size(), pairs * 2);
  // Every point is one apply_overrides takes, its outer part the one it derives.
  for (uint64_t p = 0; p < s.size(); ++p) {
    Config c = s.point(p);
    ir::Func g = ir::apply_overrides(f, c);
    EXPECT_EQ(g.find_knob("IO")->value, c.at("IO")) << records::config_text(c);
  }
  // At another shape, another split.
  Space wider = space_of(ir::apply_overrides(f, {{"N", 4096}}));
  EXPECT_GT(wider.size(), s.size());
  // A part set by hand holds the whole split.
  Space held = space_of(ir::apply_overrides(f, {{"II", 8}}), {"II"});
  EXPECT_EQ(held.size(), 2u);
  EXPECT_EQ(held.point(0).at("IM"), 4);
  EXPECT_EQ(held.point(0).at("IO"), 32);
}

}  // namespace
}  // namespace kiln::tuner
