// Search (kiln/search.h): random and grid search propose every point once and
// reject constraint-breaking ones without proposing them; model-based search
// reaches the optimum of a synthetic cost in far fewer trials than random
// search, with fixed seeds, under either loss and either walk (annealing,
// evolution).
#include "kiln/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <set>

namespace kiln::tuner {
namespace {

using ir::BinaryOp;

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

// 4 x 6 points, of which those with (A + B) % 3 == 0 keep the constraint: 8.
Space small_space() {
  ir::Expr keep =
      ir::binary(BinaryOp::Eq,
                 ir::binary(BinaryOp::Mod, ir::binary(BinaryOp::Add, ir::var("A"), ir::var("B")),
                            ir::int_imm(3)),
                 ir::int_imm(0));
  return Space({KnobDef::values_of("A", range(4)), KnobDef::values_of("B", range(6))},
               {{keep, "(A + B) % 3 == 0"}});
}

class EveryPointOnce : public ::testing::TestWithParam<Strategy> {};

TEST_P(EveryPointOnce, ProposedOnceAndRejectedWithoutBeingProposed) {
  Space space = small_space();
  SearchOptions o;
  o.strategy = GetParam();
  o.min_trained = 4;
  o.annealing_steps = 20;
  o.population = 8;
  Searcher s(space, o);
  std::set<std::string> seen;
  for (int round = 0; round < 20 && !s.exhausted(); ++round) {
    std::vector<Config> batch = s.next_batch(3);
    std::vector<double> cost;
    for (const Config& c : batch) {
      EXPECT_FALSE(space.broken_constraint(c)) << records::config_text(c);
      EXPECT_TRUE(seen.insert(records::config_text(c)).second) << "proposed twice";
      cost.push_back(1.0 + static_cast<double>(c.at("A") + c.at("B")));
    }
    s.update(batch, cost);
  }
  EXPECT_TRUE(s.exhausted());
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(s.proposed(), 8);
  EXPECT_EQ(s.rejected().at("(A + B) % 3 == 0"), 16);
  EXPECT_TRUE(s.next_batch(3).empty());
  ASSERT_TRUE(s.best());
  EXPECT_EQ(s.best()->second, 1.0);  // A = B = 0
}

INSTANTIATE_TEST_SUITE_P(Strategies, EveryPointOnce,
                         ::testing::Values(Strategy::Random, Strategy::Grid, Strategy::Model),
                         [](const auto& info) {
                           return info.param == Strategy::Random ? std::string("random")
                                  : info.param == Strategy::Grid ? std::string("grid")
                                                                 : std::string("model");
                         });

TEST_P(EveryPointOnce, SuggestedPointsComeFirstOnceEachIfTheyKeepTheConstraints) {
  Space space = small_space();
  SearchOptions o;
  o.strategy = GetParam();
  Searcher s(space, o);
  s.suggest({{{"A", 2}, {"B", 4}},            // first
             {{"A", 1}, {"B", 1}},            // breaks the constraint: dropped
             {{"A", 9}, {"B", 0}},            // not a value of A: dropped
             {{"A", 0}},                      // no B: dropped
             {{"A", 2}, {"B", 4}, {"Z", 1}},  // the first again (Z is no knob): once
             {{"A", 3}, {"B", 3}}});          // second
  std::vector<Config> batch = s.next_batch(1);
  EXPECT_EQ(batch, (std::vector<Config>{{{"A", 2}, {"B", 4}}}));
  batch = s.next_batch(3);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0], (Config{{"A", 3}, {"B", 3}}));
  for (const Config& c : batch) EXPECT_FALSE(space.broken_constraint(c));
  EXPECT_NE(batch[1], (Config{{"A", 2}, {"B", 4}}));
  EXPECT_NE(batch[2], (Config{{"A", 2}, {"B", 4}}));
  // The suggestion that broke the constraint was counted as the search's own would be.
  ASSERT_TRUE(s.rejected().count("(A + B) % 3 == 0"));
  EXPECT_GE(s.rejected().at("(A + B) % 3 == 0"), 1);
}

TEST(GridSearch, WalksThePointsInOrder) {
  Space space({KnobDef::values_of("A", range(3)), KnobDef::values_of("B", range(2))});
  SearchOptions o;
  o.strategy = Strategy::Grid;
  Searcher s(space, o);
  std::vector<Config> all = s.next_batch(10);
  ASSERT_EQ(all.size(), 6u);
  for (uint64_t i = 0; i < 6; ++i) EXPECT_EQ(space.index_of(all[i]), i);
}

// 32 x 32 x 8 points; the optimum is X = 21, Y = 9, Z = 5. Measurements that
// would have X = 0 fail (a crash), as some configurations do.
double synthetic_cost(const Config& c) {
  if (c.at("X") == 0) return std::numeric_limits<double>::infinity();
  double x = static_cast<double>(c.at("X") - 21), y = static_cast<double>(c.at("Y") - 9);
  return 1 + x * x + 2 * y * y + 3 * std::abs(static_cast<double>(c.at("Z") - 5));
}

// Trials until the optimum is measured (batches of 16), at most `budget`.
// `pool` > 0: the model scores a pool of candidates instead of annealing,
// with features that count how often they were asked for.
int trials_to_optimum(Strategy strategy, Loss loss, uint64_t seed, int budget, int pool = 0,
                      std::atomic<int>* feature_calls = nullptr, Walk walk = Walk::Anneal) {
  Space space({KnobDef::values_of("X", range(32)), KnobDef::values_of("Y", range(32)),
               KnobDef::values_of("Z", range(8))});
  SearchOptions o;
  o.strategy = strategy;
  o.loss = loss;
  o.walk = walk;
  o.seed = seed;
  o.pool = pool;
  o.threads = 2;
  Searcher s(space, o, [feature_calls](const Space& sp, const Config& c) {
    if (feature_calls) ++*feature_calls;
    return knob_features(sp, c);
  });
  int trials = 0;
  while (trials < budget) {
    std::vector<Config> batch = s.next_batch(16);
    std::vector<double> cost;
    for (const Config& c : batch) {
      ++trials;
      cost.push_back(synthetic_cost(c));
      if (cost.back() == 1.0) return trials;
    }
    s.update(batch, cost);
  }
  return budget + 1;
}

TEST(ModelSearch, FindsTheOptimumInFarFewerTrialsThanRandom) {
  for (uint64_t seed : {1, 2, 3}) {
    int random = trials_to_optimum(Strategy::Random, Loss::Rank, seed, 8192);
    int rank = trials_to_optimum(Strategy::Model, Loss::Rank, seed, 8192);
    int reg = trials_to_optimum(Strategy::Model, Loss::Reg, seed, 8192);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ": random " << random << ", xgb-rank "
                                      << rank << ", xgb-reg " << reg);
    RecordProperty("trials_seed_" + std::to_string(seed),
                   std::to_string(random) + " " + std::to_string(rank) + " " + std::to_string(reg));
    EXPECT_LT(rank, random);
    EXPECT_LT(reg, random);
    EXPECT_LE(rank, 200);
    EXPECT_LE(reg, 200);
  }
}

TEST(ModelSearch, EvolutionFindsTheOptimumInFarFewerTrialsThanRandom) {
  for (uint64_t seed : {1, 2, 3}) {
    int random = trials_to_optimum(Strategy::Random, Loss::Rank, seed, 8192);
    int rank = trials_to_optimum(Strategy::Model, Loss::Rank, seed, 8192, 0, nullptr, Walk::Evolve);
    int reg = trials_to_optimum(Strategy::Model, Loss::Reg, seed, 8192, 0, nullptr, Walk::Evolve);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ": random " << random << ", evo-rank "
                                      << rank << ", evo-reg " << reg);
    RecordProperty("evo_trials_seed_" + std::to_string(seed),
                   std::to_string(random) + " " + std::to_string(rank) + " " + std::to_string(reg));
    EXPECT_LT(rank, random);
    EXPECT_LT(reg, random);
    EXPECT_LE(rank, 200);
    EXPECT_LE(reg, 200);
  }
}

TEST(Space, NudgeMovesOneKnobToTheChoiceNextToItsOwn) {
  Space space({KnobDef::values_of("A", {4, 8, 16, 32}), KnobDef::values_of("B", {1, 2, 3})});
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    Config c = space.random_point(rng);
    Config n = space.nudge(c, rng);
    int moved = 0;
    for (const char* k : {"A", "B"}) {
      const std::vector<int64_t> values = std::string(k) == "A" ? std::vector<int64_t>{4, 8, 16, 32}
                                                                : std::vector<int64_t>{1, 2, 3};
      auto at = [&](int64_t v) {
        return std::find(values.begin(), values.end(), v) - values.begin();
      };
      if (n.at(k) == c.at(k)) continue;
      ++moved;
      EXPECT_EQ(std::abs(at(n.at(k)) - at(c.at(k))), 1)
          << records::config_text(c) << " -> " << records::config_text(n);
    }
    EXPECT_EQ(moved, 1);
  }
}

TEST(Space, CrossoverTakesEachKnobFromOneParentWithASplitsPartsTogether) {
  Space space({KnobDef::values_of("A", range(8)), KnobDef::split({"P", "Q"}, 64)});
  Config a{{"A", 1}, {"P", 64}, {"Q", 1}}, b{{"A", 6}, {"P", 4}, {"Q", 16}};
  std::mt19937_64 rng(3);
  std::set<std::string> kinds;
  for (int i = 0; i < 64; ++i) {
    Config c = space.crossover(a, b, rng);
    EXPECT_TRUE(c.at("A") == 1 || c.at("A") == 6);
    EXPECT_TRUE((c.at("P") == 64 && c.at("Q") == 1) || (c.at("P") == 4 && c.at("Q") == 16))
        << records::config_text(c);
    EXPECT_NO_THROW(space.index_of(c));
    kinds.insert(records::config_text(c));
  }
  EXPECT_EQ(kinds.size(), 4u);  // every mix of the two knobs
}

// For features that cost a compile a point: a pool of 64 candidates a round
// instead of thousands walked, each point's features computed once.
TEST(ModelSearch, APoolOfCandidatesFindsTheOptimumSoonerThanRandomWithFewFeatureCalls) {
  for (uint64_t seed : {1, 2, 3}) {
    std::atomic<int> calls{0};
    int random = trials_to_optimum(Strategy::Random, Loss::Rank, seed, 8192);
    int pooled = trials_to_optimum(Strategy::Model, Loss::Rank, seed, 8192, 64, &calls);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ": random " << random << ", pool "
                                      << pooled << " with " << calls << " feature rows");
    EXPECT_LT(pooled, random);
    EXPECT_LE(pooled, 400);
    // At most the pool and the batch a round, and every point once.
    int rounds = (pooled + 15) / 16;
    EXPECT_LE(calls.load(), rounds * (64 + 16));
  }
}

TEST(ModelSearch, CountsMeasurementsSinceTheLastImprovement) {
  Space space({KnobDef::values_of("A", range(10))});
  Searcher s(space, SearchOptions{Strategy::Grid});
  s.update({{{"A", 0}}, {{"A", 1}}}, {5.0, 4.0});
  EXPECT_EQ(s.since_improvement(), 0);
  s.update({{{"A", 2}}, {{"A", 3}}, {{"A", 4}}},
           {6.0, std::numeric_limits<double>::infinity(), 4.0});
  EXPECT_EQ(s.since_improvement(), 3);
  EXPECT_EQ(s.best()->first.at("A"), 1);
}

TEST(Strategies, HaveTheirCommandLineNamesBothWays) {
  for (const char* name : {"xgb-rank", "xgb-reg", "evo-rank", "evo-reg", "random", "grid"}) {
    std::optional<SearchOptions> o = strategy_named(name);
    ASSERT_TRUE(o) << name;
    EXPECT_EQ(strategy_name(*o), name);
  }
  EXPECT_EQ(strategy_named("evo-reg")->walk, Walk::Evolve);
  EXPECT_EQ(strategy_named("evo-reg")->loss, Loss::Reg);
  EXPECT_EQ(strategy_named("xgb-rank")->walk, Walk::Anneal);
  EXPECT_FALSE(strategy_named("xgb"));
  EXPECT_FALSE(strategy_named(""));
}

}  // namespace
}  // namespace kiln::tuner
