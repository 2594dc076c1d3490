// Cost models (kiln/cost_model.h): trained on a synthetic cost function they
// order unseen points far better than chance, with Rank and with Reg loss,
// the same way for the same seed; failed points count as the worst; misuse is
// refused; Knob features have one length for every point of a space.
#include "kiln/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace kiln::tuner {
namespace {

// A smooth cost over [0, 1]^4 with a little noise: what the model must learn.
double cost_of(const std::vector<float>& x, std::mt19937_64& rng) {
  std::normal_distribution<double> noise(0, 0.02);
  return 1 + 3 * std::pow(x[0] - 0.3, 2) + 2 * std::abs(x[1] - 0.7) + 0.5 * x[2] + noise(rng);
}

FeatureRows random_rows(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0, 1);
  FeatureRows rows(n, std::vector<float>(4));
  for (auto& r : rows)
    for (float& v : r) v = u(rng);
  return rows;
}

// The fraction of pairs the scores order as the costs do (0.5: chance).
double pairwise_accuracy(const std::vector<double>& score, const std::vector<double>& cost) {
  size_t right = 0, pairs = 0;
  for (size_t i = 0; i < cost.size(); ++i)
    for (size_t j = i + 1; j < cost.size(); ++j) {
      if (cost[i] == cost[j]) continue;
      ++pairs;
      right += (cost[i] < cost[j]) == (score[i] > score[j]);
    }
  return static_cast<double>(right) / static_cast<double>(pairs);
}

class CostModelTest : public ::testing::TestWithParam<Loss> {};

TEST_P(CostModelTest, OrdersUnseenPointsFarBetterThanChance) {
  std::mt19937_64 rng(5);
  FeatureRows train = random_rows(300, rng), test = random_rows(300, rng);
  std::vector<double> train_cost, test_cost;
  for (const auto& r : train) train_cost.push_back(cost_of(r, rng));
  for (const auto& r : test) test_cost.push_back(cost_of(r, rng));
  CostModel model(GetParam(), 1);
  EXPECT_FALSE(model.trained());
  model.fit(train, train_cost);
  EXPECT_TRUE(model.trained());
  double accuracy = pairwise_accuracy(model.predict(test), test_cost);
  EXPECT_GT(accuracy, 0.8) << loss_name(GetParam());
  RecordProperty("pairwise_accuracy", std::to_string(accuracy));
}

TEST_P(CostModelTest, TheSameSeedGivesTheSameModel) {
  std::mt19937_64 rng(9);
  FeatureRows rows = random_rows(100, rng);
  std::vector<double> cost;
  for (const auto& r : rows) cost.push_back(cost_of(r, rng));
  CostModel a(GetParam(), 3), b(GetParam(), 3);
  a.fit(rows, cost);
  b.fit(rows, cost);
  EXPECT_EQ(a.predict(rows), b.predict(rows));
}

TEST_P(CostModelTest, FailedPointsAreTheWorst) {
  // x0 > 0.8 fails (a crash, a timeout): the model must learn to avoid it.
  std::mt19937_64 rng(13);
  FeatureRows rows = random_rows(300, rng);
  std::vector<double> cost;
  for (const auto& r : rows)
    cost.push_back(r[0] > 0.8f ? std::numeric_limits<double>::infinity() : cost_of(r, rng));
  CostModel model(GetParam(), 2);
  model.fit(rows, cost);
  FeatureRows probe = {{0.3f, 0.7f, 0.0f, 0.5f}, {0.95f, 0.7f, 0.0f, 0.5f}};
  std::vector<double> score = model.predict(probe);
  EXPECT_GT(score[0], score[1]);
}

INSTANTIATE_TEST_SUITE_P(Losses, CostModelTest, ::testing::Values(Loss::Rank, Loss::Reg),
                         [](const auto& info) { return std::string(loss_name(info.param)); });

TEST(CostModelUse, MisuseIsRefused) {
  CostModel model(Loss::Reg);
  EXPECT_THROW(model.predict({{1.0f}}), std::logic_error);
  EXPECT_THROW(model.fit({{1.0f}, {1.0f, 2.0f}}, {1.0, 2.0}), std::invalid_argument);
  EXPECT_THROW(model.fit({{1.0f}}, {1.0, 2.0}), std::invalid_argument);
  EXPECT_THROW(model.fit({}, {}), std::invalid_argument);
  model.fit({{1.0f, 0.0f}, {0.0f, 1.0f}}, {1.0, 2.0});
  EXPECT_THROW(model.predict({{1.0f}}), std::invalid_argument);
}

TEST(KnobFeatures, OneLengthForEveryPoint) {
  Space s({KnobDef::values_of("U", {1, 2, 4}), KnobDef::split({"O", "I"}, 64, true),
           KnobDef::tag("T", {"none", "parallel", "vectorize"}),
           KnobDef::reorder("R", {"i", "j", "k"})});
  for (uint64_t p = 0; p < s.size(); ++p) {
    Config c = s.point(p);
    std::vector<float> f = knob_features(s, c);
    ASSERT_EQ(f.size(), 1u + 2 + 3 + 6);
    EXPECT_EQ(f[0], static_cast<float>(c.at("U")));
    EXPECT_EQ(f[2], std::log2(static_cast<float>(c.at("I"))));
    EXPECT_EQ(f[3] + f[4] + f[5], 1.0f);                         // one tag
    EXPECT_EQ(f[3 + static_cast<size_t>(c.at("T"))], 1.0f);      // the chosen one
    EXPECT_EQ(f[6] + f[7] + f[8] + f[9] + f[10] + f[11], 1.0f);  // one order
  }
}

}  // namespace
}  // namespace kiln::tuner
