// XGBoost cost models (kiln/cost_model.h).
#include "kiln/cost_model.h"

#include <fmt/format.h>
#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace kiln::tuner {
namespace {

void check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(fmt::format("XGBoost: {}: {}", what, XGBGetLastError()));
}

// A dense matrix of rows, freed at the end of its scope.
class Matrix {
 public:
  explicit Matrix(const FeatureRows& rows) {
    size_t cols = rows.empty() ? 0 : rows.front().size();
    std::vector<float> flat;
    flat.reserve(rows.size() * cols);
    for (const std::vector<float>& r : rows) {
      if (r.size() != cols)
        throw std::invalid_argument(fmt::format(
            "feature rows of {} and {} values: every row must have one length", cols, r.size()));
      flat.insert(flat.end(), r.begin(), r.end());
    }
    check(XGDMatrixCreateFromMat(flat.data(), rows.size(), cols,
                                 std::numeric_limits<float>::quiet_NaN(), &handle_),
          "making a matrix");
  }
  ~Matrix() { XGDMatrixFree(handle_); }
  Matrix(const Matrix&) = delete;
  Matrix& operator=(const Matrix&) = delete;
  DMatrixHandle get() const { return handle_; }

 private:
  DMatrixHandle handle_ = nullptr;
};

}  // namespace

const char* loss_name(Loss l) { return l == Loss::Rank ? "rank" : "reg"; }

struct CostModel::Impl {
  Loss loss;
  uint64_t seed;
  int rounds;
  BoosterHandle booster = nullptr;
  size_t columns = 0;
  ~Impl() {
    if (booster) XGBoosterFree(booster);
  }
};

CostModel::CostModel(Loss loss, uint64_t seed, int rounds)
    : impl_(std::make_unique<Impl>(Impl{loss, seed, rounds})) {}
CostModel::~CostModel() = default;

bool CostModel::trained() const { return impl_->booster != nullptr; }

void CostModel::fit(const FeatureRows& rows, const std::vector<double>& cost) {
  if (rows.size() != cost.size())
    throw std::invalid_argument(
        fmt::format("{} feature rows for {} costs", rows.size(), cost.size()));
  if (rows.empty()) throw std::invalid_argument("nothing to train on");
  Matrix train(rows);
  // The label: speed relative to the best point (1 for the best, towards 0
  // for slow ones, 0 for failed ones), as AutoTVM normalizes throughput.
  double best = std::numeric_limits<double>::infinity();
  for (double c : cost)
    if (std::isfinite(c) && c > 0) best = std::min(best, c);
  std::vector<float> label(cost.size());
  for (size_t i = 0; i < cost.size(); ++i)
    label[i] = std::isfinite(cost[i]) && cost[i] > 0 && std::isfinite(best)
                   ? static_cast<float>(best / cost[i])
                   : 0.0f;
  check(XGDMatrixSetFloatInfo(train.get(), "label", label.data(), label.size()), "labels");
  if (impl_->loss == Loss::Rank) {
    unsigned group = static_cast<unsigned>(rows.size());  // one list to order
    check(XGDMatrixSetUIntInfo(train.get(), "group", &group, 1), "groups");
  }
  BoosterHandle booster = nullptr;
  DMatrixHandle sets[1] = {train.get()};
  check(XGBoosterCreate(sets, 1, &booster), "making a booster");
  auto set = [&](const char* name, const std::string& value) {
    int rc = XGBoosterSetParam(booster, name, value.c_str());
    if (rc != 0) XGBoosterFree(booster);
    check(rc, name);
  };
  set("objective", impl_->loss == Loss::Rank ? "rank:pairwise" : "reg:squarederror");
  set("max_depth", "6");
  set("eta", "0.3");
  set("gamma", "0.0001");
  set("min_child_weight", "1");
  set("subsample", "1.0");
  set("seed", std::to_string(impl_->seed));
  set("nthread", "1");  // the tuner's own threads compile; results do not depend on cores
  set("verbosity", "0");
  for (int iter = 0; iter < impl_->rounds; ++iter) {
    int rc = XGBoosterUpdateOneIter(booster, iter, train.get());
    if (rc != 0) XGBoosterFree(booster);
    check(rc, "training");
  }
  if (impl_->booster) XGBoosterFree(impl_->booster);
  impl_->booster = booster;
  impl_->columns = rows.front().size();
}

std::vector<double> CostModel::predict(const FeatureRows& rows) const {
  if (!impl_->booster) throw std::logic_error("CostModel::predict before fit");
  if (rows.empty()) return {};
  if (rows.front().size() != impl_->columns)
    throw std::invalid_argument(fmt::format("rows of {} features for a model trained on {}",
                                            rows.front().size(), impl_->columns));
  Matrix m(rows);
  bst_ulong n = 0;
  const float* out = nullptr;
  check(XGBoosterPredict(impl_->booster, m.get(), 0, 0, 0, &n, &out), "predicting");
  return std::vector<double>(out, out + n);
}

}  // namespace kiln::tuner
