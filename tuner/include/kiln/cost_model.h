// Cost models (DESIGN.md section 7, seed 002 section 4.3): XGBoost, through
// its C API, trained on the configurations measured so far and asked which
// unmeasured ones look fastest. Rank loss (pairwise) learns only the order of
// candidates; Reg loss learns their relative speed. Features come from the
// knob values (knob_features) or from the lowered loops (Iter features).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/loop_ir.h"
#include "kiln/space.h"

namespace kiln::tuner {

enum class Loss { Rank, Reg };
const char* loss_name(Loss l);  // "rank", "reg"

using FeatureRows = std::vector<std::vector<float>>;

class CostModel {
 public:
  explicit CostModel(Loss loss, uint64_t seed = 0, int rounds = 60);
  ~CostModel();
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  // Trains from scratch on measured points: a feature row each (all of one
  // length) and its cost (a time: lower is better; a failed point is a cost
  // of +infinity, the worst). Throws std::invalid_argument for rows of
  // different lengths or a count that does not match, std::runtime_error
  // with XGBoost's message when it fails.
  void fit(const FeatureRows& rows, const std::vector<double>& cost);
  bool trained() const;
  // A score a row: higher looks faster. Throws std::logic_error before fit.
  std::vector<double> predict(const FeatureRows& rows) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The Knob features of a point (seed 002 section 4.3.1): a Values knob its
// value, a Split its factors (log2, so that the model sees ratios), a Tag and
// a Reorder one-hot over their choices. The same length for every point of
// the space.
std::vector<float> knob_features(const Space& space, const Config& point);

// The Iter features of the loops a point lowers to (seed 002 section 4.3.2):
// for each loop, in program order, log2(1 + its extent), its tag one-hot
// (none, parallel, vectorize, unroll), log2(1 + the float and the integer
// operations it runs), and for each of the first kIterBuffers buffers the
// function accesses, log2(1 + x) of the access's stride along the loop, how
// many times it runs under the loop, and its reuse (iterations that touch the
// same element); then whether the loop is a GPU block loop and a GPU thread
// loop, and for each of those buffers where it lives on a GPU (0 device or
// host memory, 1 a block's shared memory, 2 a thread's registers or local
// memory); padded with zeros to kIterLoops loops. `params` gives the
// run-time params their values.
inline constexpr size_t kIterLoops = 12;
inline constexpr size_t kIterBuffers = 5;
inline constexpr size_t kIterFeaturesPerLoop = 7 + 3 * kIterBuffers + 2 + kIterBuffers;
inline constexpr size_t kIterFeatureLength = kIterLoops * kIterFeaturesPerLoop;
std::vector<float> iter_features(const ir::LoweredFunc& f,
                                 const std::map<std::string, int64_t>& params = {});

}  // namespace kiln::tuner
