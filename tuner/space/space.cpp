// Search spaces: the choices of each knob kind, points by number, constraints (kiln/space.h).
#include "kiln/space.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>

#include "kiln/analysis.h"

namespace kiln::tuner {
namespace {

// The inner factors of a split, innermost last: every tuple of `n` factors
// whose product divides `extent` (exact) or, powers of two, is at most
// `extent`; each factor at most `max_factor` when that is positive.
void inner_factors(int64_t extent, size_t n, bool pow2, int64_t max_factor,
                   std::vector<int64_t>& prefix, int64_t product,
                   std::vector<std::vector<int64_t>>& out) {
  if (prefix.size() == n) {
    out.push_back(prefix);
    return;
  }
  int64_t left = extent / product;  // the most the next factor may be
  if (max_factor > 0) left = std::min(left, max_factor);
  for (int64_t f = 1; f <= left; f = pow2 ? f * 2 : f + 1) {
    if (!pow2 && (extent / product) % f != 0) continue;
    prefix.push_back(f);
    inner_factors(extent, n, pow2, max_factor, prefix, product * f, out);
    prefix.pop_back();
  }
}

std::vector<std::vector<int64_t>> split_choices(const KnobDef& k) {
  std::vector<std::vector<int64_t>> inner;
  std::vector<int64_t> prefix;
  inner_factors(k.extent, k.names.size() - 1, k.pow2, k.max_factor, prefix, 1, inner);
  std::vector<std::vector<int64_t>> out;
  for (std::vector<int64_t>& f : inner) {
    int64_t product = 1;
    for (int64_t x : f) product *= x;
    std::vector<int64_t> parts = {(k.extent + product - 1) / product};
    parts.insert(parts.end(), f.begin(), f.end());
    out.push_back(std::move(parts));
  }
  return out;
}

std::vector<std::vector<int64_t>> choices_of(KnobDef& k) {
  std::vector<std::vector<int64_t>> out;
  switch (k.kind) {
    case KnobDef::Kind::Values:
      for (int64_t v : k.values) out.push_back({v});
      break;
    case KnobDef::Kind::Split:
      out = split_choices(k);
      break;
    case KnobDef::Kind::Tag:
      for (size_t t = 0; t < k.tags.size(); ++t) out.push_back({static_cast<int64_t>(t)});
      break;
    case KnobDef::Kind::Reorder:
      if (k.orders.empty()) {
        // Every permutation, the loops' own order first.
        std::vector<size_t> at(k.loops.size());
        for (size_t i = 0; i < at.size(); ++i) at[i] = i;
        do {
          std::vector<std::string> order;
          for (size_t i : at) order.push_back(k.loops[i]);
          k.orders.push_back(std::move(order));
        } while (std::next_permutation(at.begin(), at.end()));
      }
      for (size_t o = 0; o < k.orders.size(); ++o) out.push_back({static_cast<int64_t>(o)});
      break;
  }
  return out;
}

}  // namespace

KnobDef KnobDef::values_of(std::string name, std::vector<int64_t> candidates) {
  KnobDef k;
  k.kind = Kind::Values;
  k.names = {std::move(name)};
  k.values = std::move(candidates);
  return k;
}

KnobDef KnobDef::split(std::vector<std::string> parts, int64_t extent, bool pow2,
                       int64_t max_factor) {
  KnobDef k;
  k.kind = Kind::Split;
  k.names = std::move(parts);
  k.extent = extent;
  k.pow2 = pow2;
  k.max_factor = max_factor;
  return k;
}

KnobDef KnobDef::tag(std::string name, std::vector<std::string> tags) {
  KnobDef k;
  k.kind = Kind::Tag;
  k.names = {std::move(name)};
  k.tags = std::move(tags);
  return k;
}

KnobDef KnobDef::reorder(std::string name, std::vector<std::string> loops,
                         std::vector<std::vector<std::string>> orders) {
  KnobDef k;
  k.kind = Kind::Reorder;
  k.names = {std::move(name)};
  k.loops = std::move(loops);
  k.orders = std::move(orders);
  return k;
}

Space::Space(std::vector<KnobDef> knobs, std::vector<SpaceConstraint> constraints)
    : knobs_(std::move(knobs)), constraints_(std::move(constraints)) {
  std::set<std::string> names;
  for (KnobDef& k : knobs_) {
    std::string label = k.names.empty() ? "?" : k.names.front();
    if (k.names.empty()) throw std::invalid_argument("a knob without a name");
    for (const std::string& n : k.names)
      if (!names.insert(n).second)
        throw std::invalid_argument(fmt::format("knob name '{}' is used twice", n));
    if (k.kind == KnobDef::Kind::Split && (k.extent < 1 || k.names.size() < 2))
      throw std::invalid_argument(
          fmt::format("split knob {}: needs an extent of at least 1 and two parts or more "
                      "(extent {}, {} parts)",
                      fmt::join(k.names, ", "), k.extent, k.names.size()));
    if (k.kind == KnobDef::Kind::Reorder) {
      for (const std::vector<std::string>& o : k.orders) {
        std::vector<std::string> a = o, b = k.loops;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        if (a != b)
          throw std::invalid_argument(fmt::format("reorder knob {}: [{}] is not an order of [{}]",
                                                  label, fmt::join(o, ", "),
                                                  fmt::join(k.loops, ", ")));
      }
    }
    choices_.push_back(choices_of(k));
    if (choices_.back().empty())
      throw std::invalid_argument(fmt::format("knob {}: no choice to make", label));
    uint64_t n = choices_.back().size();
    if (size_ > std::numeric_limits<uint64_t>::max() / n)
      throw std::invalid_argument("the space has more than 2^64 points");
    size_ *= n;
  }
  for (const SpaceConstraint& c : constraints_) {
    for (const std::string& n : ir::free_vars(c.cond))
      if (!names.count(n))
        throw std::invalid_argument(
            fmt::format("constraint {}: '{}' is not a knob of the space", c.text, n));
  }
}

Config Space::point(uint64_t index) const {
  if (index >= size_)
    throw std::invalid_argument(fmt::format("point {} of a space of {}", index, size_));
  Config c;
  for (size_t k = 0; k < knobs_.size(); ++k) {
    uint64_t n = choices_[k].size();
    const std::vector<int64_t>& choice = choices_[k][index % n];
    index /= n;
    for (size_t p = 0; p < choice.size(); ++p) c[knobs_[k].names[p]] = choice[p];
  }
  return c;
}

uint64_t Space::index_of(const Config& c) const {
  uint64_t index = 0, scale = 1;
  for (size_t k = 0; k < knobs_.size(); ++k) {
    std::vector<int64_t> want;
    for (const std::string& n : knobs_[k].names) {
      auto it = c.find(n);
      if (it == c.end())
        throw std::invalid_argument(
            fmt::format("configuration {}: no value for knob {}", records::config_text(c), n));
      want.push_back(it->second);
    }
    auto at = std::find(choices_[k].begin(), choices_[k].end(), want);
    if (at == choices_[k].end())
      throw std::invalid_argument(fmt::format("configuration {}: [{}] is not a choice of knob {}",
                                              records::config_text(c), fmt::join(want, ", "),
                                              knobs_[k].names.front()));
    index += static_cast<uint64_t>(at - choices_[k].begin()) * scale;
    scale *= choices_[k].size();
  }
  return index;
}

std::optional<std::string> Space::broken_constraint(const Config& c) const {
  for (const SpaceConstraint& k : constraints_) {
    std::optional<int64_t> v = ir::eval_int(k.cond, c);
    if (!v || *v == 0) return k.text;
  }
  return std::nullopt;
}

Config Space::random_point(std::mt19937_64& rng) const {
  return point(std::uniform_int_distribution<uint64_t>(0, size_ - 1)(rng));
}

std::optional<size_t> Space::movable_knob(std::mt19937_64& rng) const {
  std::vector<size_t> movable;
  for (size_t k = 0; k < knobs_.size(); ++k)
    if (choices_[k].size() > 1) movable.push_back(k);
  if (movable.empty()) return std::nullopt;
  return movable[std::uniform_int_distribution<size_t>(0, movable.size() - 1)(rng)];
}

std::vector<int64_t> Space::choice_in(const Config& c, size_t k) const {
  std::vector<int64_t> now;
  for (const std::string& n : knobs_[k].names) now.push_back(c.at(n));
  return now;
}

Config Space::with_choice(Config c, size_t k, size_t pick) const {
  for (size_t p = 0; p < knobs_[k].names.size(); ++p) c[knobs_[k].names[p]] = choices_[k][pick][p];
  return c;
}

Config Space::neighbour(const Config& c, std::mt19937_64& rng) const {
  // A knob with another choice to make, then another of its choices.
  std::optional<size_t> movable = movable_knob(rng);
  if (!movable) return c;
  size_t k = *movable;
  std::vector<int64_t> now = choice_in(c, k);
  size_t pick;
  do {
    pick = std::uniform_int_distribution<size_t>(0, choices_[k].size() - 1)(rng);
  } while (choices_[k][pick] == now);
  return with_choice(c, k, pick);
}

Config Space::nudge(const Config& c, std::mt19937_64& rng) const {
  std::optional<size_t> movable = movable_knob(rng);
  if (!movable) return c;
  size_t k = *movable;
  const std::vector<std::vector<int64_t>>& all = choices_[k];
  size_t at = static_cast<size_t>(std::find(all.begin(), all.end(), choice_in(c, k)) - all.begin());
  size_t pick;
  if (at == all.size()) {
    pick = std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng);  // not a choice of it
  } else if (at == 0) {
    pick = 1;
  } else if (at + 1 == all.size()) {
    pick = at - 1;
  } else {
    pick = std::bernoulli_distribution(0.5)(rng) ? at + 1 : at - 1;
  }
  return with_choice(c, k, pick);
}

Config Space::crossover(const Config& a, const Config& b, std::mt19937_64& rng) const {
  Config out = a;
  std::bernoulli_distribution from_b(0.5);
  for (const KnobDef& k : knobs_) {
    if (!from_b(rng)) continue;
    for (const std::string& n : k.names) out[n] = b.at(n);  // a knob's parts go together
  }
  return out;
}

const KnobDef& Space::knob_named(const std::string& name) const {
  for (const KnobDef& k : knobs_)
    if (k.names.front() == name) return k;
  throw std::invalid_argument(fmt::format("no knob {}", name));
}

const std::string& Space::tag(const Config& c, const std::string& knob) const {
  const KnobDef& k = knob_named(knob);
  if (k.kind != KnobDef::Kind::Tag) throw std::invalid_argument(knob + " is not a tag knob");
  return k.tags.at(static_cast<size_t>(c.at(knob)));
}

const std::vector<std::string>& Space::order(const Config& c, const std::string& knob) const {
  const KnobDef& k = knob_named(knob);
  if (k.kind != KnobDef::Kind::Reorder)
    throw std::invalid_argument(knob + " is not a reorder knob");
  return k.orders.at(static_cast<size_t>(c.at(knob)));
}

Space space_of(const ir::Func& f, const std::set<std::string>& fixed) {
  std::vector<KnobDef> knobs;
  for (const ir::KnobSplit& s : f.knob_splits) {
    bool held = false;
    for (const std::string& part : s.parts) held = held || fixed.count(part);
    if (!held) knobs.push_back(KnobDef::split(s.parts, s.extent, s.pow2, s.max_factor));
  }
  for (const ir::Knob& k : f.knobs) {
    if (const ir::KnobSplit* s = ir::split_of(f, k.name)) {
      bool held = false;
      for (const std::string& part : s->parts) held = held || fixed.count(part);
      if (!held) continue;  // in its split's KnobDef
    }
    if (!k.orders.empty() && !fixed.count(k.name)) {
      knobs.push_back(KnobDef::reorder(k.name, k.order_loops, k.orders));
      continue;
    }
    if (!k.tags.empty() && !fixed.count(k.name)) {
      knobs.push_back(KnobDef::tag(k.name, k.tags));  // a choice's number is its value
      continue;
    }
    knobs.push_back(KnobDef::values_of(k.name, fixed.count(k.name) || k.candidates.empty()
                                                   ? std::vector<int64_t>{k.value}
                                                   : k.candidates));
  }
  std::map<std::string, ir::Expr> values;
  for (const ir::Param& p : f.params)
    if (p.value) values[p.name] = ir::int_imm(*p.value);
  std::vector<SpaceConstraint> constraints;
  for (const ir::Constraint& c : f.knob_constraints) {
    ir::Expr cond = ir::substitute(c.cond, values);
    for (const std::string& n : ir::free_vars(cond))
      if (!f.find_knob(n))
        throw std::invalid_argument(
            fmt::format("knob constraint {} reads run-time param {}: a tuner cannot decide it",
                        ir::to_string(c.cond), n));
    constraints.push_back({cond, ir::to_string(c.cond)});
  }
  return Space(std::move(knobs), std::move(constraints));
}

}  // namespace kiln::tuner
