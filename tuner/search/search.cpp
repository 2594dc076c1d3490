// Random, grid and model-based search (kiln/search.h).
#include "kiln/search.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

namespace kiln::tuner {

std::string strategy_name(const SearchOptions& o) {
  switch (o.strategy) {
    case Strategy::Random:
      return "random";
    case Strategy::Grid:
      return "grid";
    case Strategy::Model:
      return std::string(o.walk == Walk::Evolve ? "evo-" : "xgb-") + loss_name(o.loss);
  }
  return "random";
}

std::optional<SearchOptions> strategy_named(const std::string& name) {
  SearchOptions o;
  if (name == "random") {
    o.strategy = Strategy::Random;
  } else if (name == "grid") {
    o.strategy = Strategy::Grid;
  } else if (name == "xgb-rank" || name == "xgb-reg" || name == "evo-rank" || name == "evo-reg") {
    o.strategy = Strategy::Model;
    o.walk = name.starts_with("evo-") ? Walk::Evolve : Walk::Anneal;
    o.loss = name.ends_with("-reg") ? Loss::Reg : Loss::Rank;
  } else {
    return std::nullopt;
  }
  return o;
}

struct Searcher::Impl {
  const Space& space;
  SearchOptions options;
  FeatureFn features;
  std::mt19937_64 rng;
  CostModel model;

  std::unordered_set<uint64_t> seen;  // proposed or rejected
  std::map<std::string, int64_t> rejected;
  int64_t proposed = 0;
  uint64_t grid_next = 0;

  FeatureRows measured_rows;
  std::vector<double> measured_cost;
  std::vector<uint64_t> measured_index;
  std::optional<std::pair<Config, double>> best;
  int64_t since_improvement = 0;
  std::unordered_map<uint64_t, std::vector<float>> feature_cache;  // by point index
  FeatureRows warm_rows;  // transfer: other shapes' points, and their relative costs
  std::vector<double> warm_cost;
  std::deque<uint64_t> suggested;  // proposed first, in order

  // Trains on this search's measurements and the warm-start rows, those
  // scaled to this search's best; not before min_trained measurements are in
  // unless there are warm-start rows.
  void fit() {
    if (static_cast<int>(measured_cost.size()) < options.min_trained && warm_rows.empty()) return;
    if (space.knobs().empty()) return;  // no features to learn from
    FeatureRows rows = measured_rows;
    std::vector<double> cost = measured_cost;
    double scale = best ? best->second : 1.0;
    rows.insert(rows.end(), warm_rows.begin(), warm_rows.end());
    for (double c : warm_cost) cost.push_back(c * scale);
    model.fit(rows, cost);
  }

  Impl(const Space& s, SearchOptions o, FeatureFn f)
      : space(s), options(o), features(std::move(f)), rng(o.seed), model(o.loss, o.seed) {}

  bool exhausted() const { return seen.size() >= space.size(); }

  // Takes point `index` if it is new and keeps the constraints; a new point
  // that breaks one is rejected (and counted) and never looked at again.
  bool take(uint64_t index, std::vector<Config>& out) {
    if (!seen.insert(index).second) return false;
    Config c = space.point(index);
    if (std::optional<std::string> broken = space.broken_constraint(c)) {
      ++rejected[*broken];
      return false;
    }
    out.push_back(std::move(c));
    ++proposed;
    return true;
  }

  // One new random point into `out`, if the space has one left.
  void random_one(std::vector<Config>& out) {
    size_t before = out.size();
    std::uniform_int_distribution<uint64_t> pick(0, space.size() - 1);
    // Draws while the space is mostly unseen; a scan from a random start once it is crowded.
    for (int tries = 0; tries < 64 && out.size() == before && !exhausted(); ++tries)
      take(pick(rng), out);
    for (uint64_t at = pick(rng), k = 0; out.size() == before && !exhausted() && k < space.size();
         ++k)
      take((at + k) % space.size(), out);
  }

  void random_batch(int n, std::vector<Config>& out) {
    while (static_cast<int>(out.size()) < n && !exhausted()) random_one(out);
  }

  void grid_batch(int n, std::vector<Config>& out) {
    while (static_cast<int>(out.size()) < n && grid_next < space.size()) take(grid_next++, out);
  }

  // A point's features, computed once.
  const std::vector<float>& feature_row(const Config& c) {
    uint64_t index = space.index_of(c);
    auto it = feature_cache.find(index);
    if (it == feature_cache.end()) it = feature_cache.emplace(index, features(space, c)).first;
    return it->second;
  }
  // The features of `points`, on options.threads threads.
  FeatureRows rows_of(const std::vector<const Config*>& points) {
    FeatureRows rows(points.size());
    size_t threads =
        std::min<size_t>(static_cast<size_t>(std::max(1, options.threads)), points.size());
    if (threads <= 1) {
      for (size_t i = 0; i < points.size(); ++i) rows[i] = features(space, *points[i]);
      return rows;
    }
    std::atomic<size_t> next{0};
    std::vector<std::future<void>> workers;
    for (size_t t = 0; t < threads; ++t)
      workers.push_back(std::async(std::launch::async, [&] {
        for (size_t i = next++; i < points.size(); i = next++)
          rows[i] = features(space, *points[i]);
      }));
    for (std::future<void>& w : workers) w.get();  // rethrows a worker's exception
    return rows;
  }
  // The features of points not computed yet, into the cache.
  void prefetch(const std::vector<Config>& points) {
    std::vector<const Config*> todo;
    std::vector<uint64_t> index;
    std::unordered_set<uint64_t> queued;
    for (const Config& c : points) {
      uint64_t i = space.index_of(c);
      if (feature_cache.count(i) || !queued.insert(i).second) continue;
      todo.push_back(&c);
      index.push_back(i);
    }
    if (todo.size() < 2) return;
    FeatureRows rows = rows_of(todo);
    for (size_t i = 0; i < todo.size(); ++i) feature_cache[index[i]] = std::move(rows[i]);
  }

  std::vector<double> scores(const std::vector<Config>& points) {
    prefetch(points);
    FeatureRows rows;
    rows.reserve(points.size());
    for (const Config& c : points) rows.push_back(feature_row(c));
    return model.predict(rows);
  }

  // n points to start a walk from: the best measured (up to half of them), then random ones.
  std::vector<Config> starting_points(size_t n) {
    std::vector<size_t> order(measured_cost.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return measured_cost[a] < measured_cost[b]; });
    std::vector<Config> out;
    for (size_t i = 0; i < order.size() && out.size() < n / 2; ++i)
      out.push_back(space.point(measured_index[order[i]]));
    while (out.size() < n) out.push_back(space.random_point(rng));
    return out;
  }

  // The `want` best of the unseen points a walk found, by index with their scores; best first.
  static std::vector<uint64_t> best_found(const std::map<uint64_t, double>& found, size_t want) {
    std::vector<std::pair<double, uint64_t>> ranked;
    for (const auto& [index, s] : found) ranked.push_back({s, index});
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::vector<uint64_t> out;
    for (size_t i = 0; i < ranked.size() && out.size() < want; ++i) out.push_back(ranked[i].second);
    return out;
  }

  // Simulated annealing on the model's predictions: the best unseen points it
  // walked through, best first.
  std::vector<uint64_t> anneal(size_t want) {
    std::vector<Config> walkers =
        starting_points(static_cast<size_t>(std::max(1, options.population)));
    std::vector<double> score = scores(walkers);

    std::map<uint64_t, double> found;  // unseen points walked through, by index
    auto consider = [&](const Config& c, double s) {
      uint64_t index = space.index_of(c);
      if (!seen.count(index)) found[index] = s;
    };
    for (size_t w = 0; w < walkers.size(); ++w) consider(walkers[w], score[w]);
    std::uniform_real_distribution<double> unit(0, 1);
    int steps = std::max(1, options.annealing_steps);
    for (int step = 0; step < steps; ++step) {
      double temperature = 1.0 - static_cast<double>(step) / steps;
      std::vector<Config> next;
      next.reserve(walkers.size());
      for (const Config& c : walkers) next.push_back(space.neighbour(c, rng));
      std::vector<double> next_score = scores(next);
      for (size_t w = 0; w < walkers.size(); ++w) {
        consider(next[w], next_score[w]);
        double gain = next_score[w] - score[w];
        if (gain > 0 || (temperature > 0 && unit(rng) < std::exp(gain / temperature))) {
          walkers[w] = std::move(next[w]);
          score[w] = next_score[w];
        }
      }
    }
    return best_found(found, want);
  }

  // Evolution on the model's predictions (Walk::Evolve): the best unseen points bred, best
  // first.
  std::vector<uint64_t> evolve(size_t want) {
    const size_t population = static_cast<size_t>(std::max(4, 2 * options.population));
    std::vector<Config> pop = starting_points(population);
    std::vector<double> score = scores(pop);
    std::map<uint64_t, double> found;  // unseen points bred, by index
    auto consider = [&](const Config& c, double s) {
      uint64_t index = space.index_of(c);
      if (!seen.count(index)) found[index] = s;
    };
    for (size_t i = 0; i < pop.size(); ++i) consider(pop[i], score[i]);
    std::uniform_int_distribution<size_t> any(0, population - 1);
    std::uniform_real_distribution<double> unit(0, 1);
    auto tournament = [&] {  // the best of three drawn
      size_t best = any(rng);
      for (int k = 0; k < 2; ++k) {
        size_t other = any(rng);
        if (score[other] > score[best]) best = other;
      }
      return best;
    };
    for (int g = 0; g < std::max(1, options.generations); ++g) {
      std::vector<size_t> rank(pop.size());
      for (size_t i = 0; i < rank.size(); ++i) rank[i] = i;
      std::sort(rank.begin(), rank.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
      std::vector<Config> next;
      std::vector<double> next_score;
      for (size_t i = 0; i < std::max<size_t>(1, population / 8); ++i) {
        next.push_back(pop[rank[i]]);
        next_score.push_back(score[rank[i]]);
      }
      std::vector<Config> children;
      while (next.size() + children.size() < population) {
        Config child = pop[tournament()];
        if (unit(rng) < 0.3) child = space.crossover(child, pop[tournament()], rng);
        child = unit(rng) < 0.7 ? space.nudge(child, rng) : space.neighbour(child, rng);
        children.push_back(std::move(child));
      }
      std::vector<double> child_score = scores(children);
      for (size_t i = 0; i < children.size(); ++i) {
        consider(children[i], child_score[i]);
        next.push_back(std::move(children[i]));
        next_score.push_back(child_score[i]);
      }
      pop = std::move(next);
      score = std::move(next_score);
    }
    return best_found(found, want);
  }

  // A pool of unseen points that keep the constraints -- half neighbours of
  // the best measured points, the rest random -- ranked by the model, best
  // first. A point of the pool that breaks a constraint is rejected (and
  // counted) here.
  std::vector<uint64_t> pool_ranked(size_t want) {
    size_t size = static_cast<size_t>(std::max(options.pool, 1));
    std::vector<size_t> order(measured_cost.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return measured_cost[a] < measured_cost[b]; });
    std::vector<Config> pool;
    std::unordered_set<uint64_t> in_pool;
    auto consider = [&](Config c) {
      uint64_t index = space.index_of(c);
      if (seen.count(index) || !in_pool.insert(index).second) return;
      if (std::optional<std::string> broken = space.broken_constraint(c)) {
        seen.insert(index);
        ++rejected[*broken];
        return;
      }
      pool.push_back(std::move(c));
    };
    size_t tops = std::min<size_t>(order.size(), 8);
    for (int tries = 0; tops > 0 && pool.size() < size / 2 && tries < static_cast<int>(size) * 8;
         ++tries)
      consider(space.neighbour(space.point(measured_index[order[tries % tops]]), rng));
    for (int tries = 0; pool.size() < size && tries < static_cast<int>(size) * 8 && !exhausted();
         ++tries)
      consider(space.random_point(rng));
    std::vector<double> score = scores(pool);
    std::vector<size_t> rank(pool.size());
    for (size_t i = 0; i < rank.size(); ++i) rank[i] = i;
    std::sort(rank.begin(), rank.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
    std::vector<uint64_t> out;
    for (size_t i = 0; i < rank.size() && out.size() < want; ++i)
      out.push_back(space.index_of(pool[rank[i]]));
    return out;
  }

  void model_batch(int n, std::vector<Config>& out) {
    if (!model.trained() ||
        (static_cast<int>(measured_cost.size()) < options.min_trained && warm_rows.empty())) {
      random_batch(n, out);
      return;
    }
    int from_model = n - static_cast<int>(std::lround(options.epsilon * n));
    // More candidates than needed: some break a constraint.
    const size_t want = static_cast<size_t>(2 * n);
    std::vector<uint64_t> ranked = options.pool > 0               ? pool_ranked(want)
                                   : options.walk == Walk::Evolve ? evolve(want)
                                                                  : anneal(want);
    for (uint64_t index : ranked) {
      if (static_cast<int>(out.size()) >= from_model) break;
      take(index, out);
    }
    random_batch(n, out);  // epsilon-greedy, and whatever the model could not fill
  }
};

Searcher::Searcher(const Space& space, SearchOptions options, FeatureFn features)
    : impl_(std::make_unique<Impl>(space, options, std::move(features))) {}
Searcher::~Searcher() = default;

std::vector<Config> Searcher::next_batch(int n) {
  std::vector<Config> out;
  if (n <= 0) return out;
  Impl& s = *impl_;
  while (static_cast<int>(out.size()) < n && !s.suggested.empty()) {
    s.take(s.suggested.front(), out);
    s.suggested.pop_front();
  }
  if (static_cast<int>(out.size()) >= n) return out;
  // Each strategy fills `out` up to n.
  switch (impl_->options.strategy) {
    case Strategy::Random:
      impl_->random_batch(n, out);
      break;
    case Strategy::Grid:
      impl_->grid_batch(n, out);
      break;
    case Strategy::Model:
      impl_->model_batch(n, out);
      break;
  }
  return out;
}

void Searcher::update(const std::vector<Config>& points, const std::vector<double>& cost) {
  Impl& s = *impl_;
  s.prefetch(points);
  for (size_t i = 0; i < points.size() && i < cost.size(); ++i) {
    uint64_t index = s.space.index_of(points[i]);
    s.seen.insert(index);  // measured elsewhere (a resumed job): never proposed again
    s.measured_index.push_back(index);
    s.measured_rows.push_back(s.feature_row(points[i]));
    s.measured_cost.push_back(cost[i]);
    if (std::isfinite(cost[i]) && (!s.best || cost[i] < s.best->second)) {
      s.best = {points[i], cost[i]};
      s.since_improvement = 0;
    } else {
      ++s.since_improvement;
    }
  }
  if (s.options.strategy == Strategy::Model) s.fit();
}

void Searcher::warm_start(const std::vector<Config>& points,
                          const std::vector<double>& relative_cost) {
  Impl& s = *impl_;
  const std::vector<KnobDef>& knobs = s.space.knobs();
  std::vector<const Config*> fitting;
  for (size_t i = 0; i < points.size() && i < relative_cost.size(); ++i) {
    bool fits = true;
    for (size_t k = 0; k < knobs.size() && fits; ++k) {
      for (const std::string& n : knobs[k].names) {
        auto it = points[i].find(n);
        fits = fits && it != points[i].end();
        if (fits &&
            (knobs[k].kind == KnobDef::Kind::Tag || knobs[k].kind == KnobDef::Kind::Reorder))
          fits = it->second >= 0 && static_cast<uint64_t>(it->second) < s.space.choices(k);
      }
    }
    if (!fits) continue;
    fitting.push_back(&points[i]);
    s.warm_cost.push_back(relative_cost[i]);
  }
  // Not points of this space's cache: computed here, on every thread.
  for (std::vector<float>& row : s.rows_of(fitting)) s.warm_rows.push_back(std::move(row));
  if (s.options.strategy == Strategy::Model) s.fit();
}

void Searcher::suggest(const std::vector<Config>& points) {
  for (const Config& c : points) {
    try {
      impl_->suggested.push_back(impl_->space.index_of(c));  // names it has no knob of ignored
    } catch (const std::invalid_argument&) {
      // not a point of this space: a knob without a value, or a value it does not offer
    }
  }
}

std::optional<std::vector<double>> Searcher::score(const std::vector<Config>& points) {
  if (!impl_->model.trained()) return std::nullopt;
  return impl_->scores(points);
}

const std::map<std::string, int64_t>& Searcher::rejected() const { return impl_->rejected; }
int64_t Searcher::proposed() const { return impl_->proposed; }
bool Searcher::exhausted() const {
  return impl_->options.strategy == Strategy::Grid ? impl_->grid_next >= impl_->space.size()
                                                   : impl_->exhausted();
}
std::optional<std::pair<Config, double>> Searcher::best() const { return impl_->best; }
int64_t Searcher::since_improvement() const { return impl_->since_improvement; }

}  // namespace kiln::tuner
