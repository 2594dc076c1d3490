// Search (DESIGN.md section 7, seed 002 section 4.4): which points of a space
// to measure next. Random and grid search, and model-based search as AutoTVM
// and PLANT do it: a cost model retrained on every measurement so far, a
// population of points walked by simulated annealing on the model's
// predictions (at least 500 steps a round) -- or bred by an evolutionary
// search, as Ansor does (Zheng et al., OSDI 2020, section 5.2) -- the best
// unmeasured points of the walk proposed as a batch, and a fraction epsilon of
// each batch drawn at random. No point is proposed twice; a point that breaks
// a constraint is rejected, and counted, before anything compiles it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "kiln/cost_model.h"
#include "kiln/space.h"

namespace kiln::tuner {

enum class Strategy { Random, Grid, Model };
// How a Model strategy looks for the points its model scores best.
//  - Anneal: simulated annealing, each walker moving to a point one knob away.
//  - Evolve: a population bred for `generations` generations. Parents are picked by tournament
//    on the model's score; a child is their crossover (each knob from either) or a copy of one,
//    then mutated (most often a size moved one step, else any knob to any of its values). The
//    best eighth of each generation is kept as it is.
enum class Walk { Anneal, Evolve };

struct SearchOptions {
  Strategy strategy = Strategy::Model;
  Loss loss = Loss::Rank;
  Walk walk = Walk::Anneal;
  double epsilon = 0.05;      // the fraction of a model batch drawn at random
  int annealing_steps = 500;  // a round's simulated-annealing steps
  int population = 128;       // points the annealing walks at once (evolution breeds twice that)
  int generations = 16;       // a round's generations of evolution
  int min_trained = 16;       // measurements before the model is trusted (random until then)
  uint64_t seed = 1;
  // > 0: instead of annealing, each round the model scores a pool of this
  // many unseen points -- neighbours of the best measured ones and random
  // ones -- for features that cost a compile a point (Iter). Their features
  // are computed on `threads` threads (the FeatureFn must allow it).
  int pool = 0;
  int threads = 1;
};

// What a user calls the strategy: "random", "grid", "xgb-rank", "xgb-reg" (a Model strategy
// with its loss, annealing), "evo-rank", "evo-reg" (the same model, evolution).
std::string strategy_name(const SearchOptions& o);
// The options a strategy's name gives (seed and sizes at their defaults); nullopt for a name
// that is none.
std::optional<SearchOptions> strategy_named(const std::string& name);
// The names, for messages: "xgb-rank, xgb-reg, evo-rank, evo-reg, random, grid".
inline constexpr const char* kStrategyNames = "xgb-rank, xgb-reg, evo-rank, evo-reg, random, grid";

// A point's features for the model (knob_features by default). The searcher
// asks once a point: it keeps them.
using FeatureFn = std::function<std::vector<float>(const Space&, const Config&)>;

class Searcher {
 public:
  Searcher(const Space& space, SearchOptions options, FeatureFn features = knob_features);
  ~Searcher();

  // Up to n points never proposed before that keep every constraint; fewer
  // when the space has no more.
  std::vector<Config> next_batch(int n);
  // What points cost when measured (a time; +infinity when the measurement
  // failed): those proposed, or measured before (a resumed job), which are
  // then never proposed. The model is retrained on everything measured.
  void update(const std::vector<Config>& points, const std::vector<double>& cost);
  // Transfer: what points cost on the same operator at other shapes (relative
  // to the best there, 1 the best). The model learns them, beside this
  // search's own measurements (scaled so that the best of both agree); they
  // are not measurements of this space and are still proposed. Points that
  // lack a knob of this space, or name a choice it does not have, are left out.
  void warm_start(const std::vector<Config>& points, const std::vector<double>& relative_cost);
  // Points to propose before any other, in this order (a task's first: the best of related
  // shapes, its defaults), whatever the strategy. Each is proposed once, when it gives every
  // knob of this space one of its values (other names are ignored), is new, and keeps the
  // constraints; the others are dropped.
  void suggest(const std::vector<Config>& points);
  // The model's scores of `points` (higher: faster), or nullopt while it is not trained.
  std::optional<std::vector<double>> score(const std::vector<Config>& points);

  // Points rejected by a constraint, by the constraint's text.
  const std::map<std::string, int64_t>& rejected() const;
  int64_t proposed() const;  // points handed out by next_batch
  bool exhausted() const;    // every point proposed or rejected
  // The best measured point and its cost.
  std::optional<std::pair<Config, double>> best() const;
  // Measurements since the best last improved (for early stopping).
  int64_t since_improvement() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::tuner
