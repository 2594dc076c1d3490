// Search spaces (DESIGN.md section 7, seed 002 chapter 4): the knobs of an
// operator, each of one kind -- Values (a list), Split (factorizations of a
// loop extent), Tag (a loop's hardware tag), Reorder (a permutation of loops)
// -- and constraints between them. A point is a Config: one integer a name
// (a Split gives one a factor; a Tag or Reorder the number of its choice).
// Points are numbered, so a tuner can draw them without replacement, and a
// point that breaks a constraint is rejected, saying which, before anything
// compiles it.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/records.h"

namespace kiln::tuner {

using records::Config;

struct KnobDef {
  enum class Kind { Values, Split, Tag, Reorder };
  Kind kind = Kind::Values;
  // Values, Tag, Reorder: one name. Split: a name a part, outermost first;
  // the outermost part is what the inner ones leave (the extent divided by
  // their product, rounded up), the inner ones are chosen.
  std::vector<std::string> names;
  std::vector<int64_t> values;  // Values: the candidates
  // Split: the extent, and how its inner factors are chosen: exact (their
  // product divides the extent) or powers of two (product at most the extent,
  // the tail guarded), each at most max_factor (0: no bound).
  int64_t extent = 0;
  bool pow2 = false;
  int64_t max_factor = 0;
  std::vector<std::string> tags;  // Tag: the candidates ("none", "parallel", "vectorize", ...)
  // Reorder: the loops, and the orders to try (empty: every permutation).
  std::vector<std::string> loops;
  std::vector<std::vector<std::string>> orders;

  static KnobDef values_of(std::string name, std::vector<int64_t> candidates);
  static KnobDef split(std::vector<std::string> parts, int64_t extent, bool pow2 = false,
                       int64_t max_factor = 0);
  static KnobDef tag(std::string name, std::vector<std::string> tags);
  static KnobDef reorder(std::string name, std::vector<std::string> loops,
                         std::vector<std::vector<std::string>> orders = {});
};

// A condition on knob values (`MB % MR == 0`, `TI * TJ <= 4096`), written as
// the .kiln expression it came from.
struct SpaceConstraint {
  ir::Expr cond;
  std::string text;  // for messages
};

class Space {
 public:
  // Throws std::invalid_argument for a knob that has no choice (an empty list,
  // a Split of extent < 1 or of no parts), a name used twice, or a constraint
  // that reads a name no knob has.
  Space(std::vector<KnobDef> knobs, std::vector<SpaceConstraint> constraints = {});

  const std::vector<KnobDef>& knobs() const { return knobs_; }
  // Points, constraints not applied: the product of the knobs' choices.
  uint64_t size() const { return size_; }
  // Each knob's number of choices.
  uint64_t choices(size_t knob) const { return choices_[knob].size(); }

  // Point `index` (< size()); its number back.
  Config point(uint64_t index) const;
  uint64_t index_of(const Config& c) const;  // throws std::invalid_argument for a non-point

  // The first constraint the point breaks, as text; nullopt when it keeps all.
  std::optional<std::string> broken_constraint(const Config& c) const;

  // A point drawn uniformly; a point that differs from `c` in one knob.
  Config random_point(std::mt19937_64& rng) const;
  Config neighbour(const Config& c, std::mt19937_64& rng) const;
  // Evolution's operators: a point that differs from `c` in one knob, moved to the choice next
  // to its own (a size a step larger or smaller, the next tag); and a point that takes each
  // knob's choice from `a` or from `b`, at random.
  Config nudge(const Config& c, std::mt19937_64& rng) const;
  Config crossover(const Config& a, const Config& b, std::mt19937_64& rng) const;

  // What a Tag or Reorder knob's number means in a point.
  const std::string& tag(const Config& c, const std::string& knob) const;
  const std::vector<std::string>& order(const Config& c, const std::string& knob) const;

 private:
  const KnobDef& knob_named(const std::string& name) const;
  std::optional<size_t> movable_knob(std::mt19937_64& rng) const;      // one with a choice to make
  std::vector<int64_t> choice_in(const Config& c, size_t knob) const;  // its names' values in c
  Config with_choice(Config c, size_t knob, size_t pick) const;        // c, knob at choice pick

  std::vector<KnobDef> knobs_;
  std::vector<SpaceConstraint> constraints_;
  // Per knob, its choices: the values of its names, in the order of `names`.
  std::vector<std::vector<std::vector<int64_t>>> choices_;
  uint64_t size_ = 1;
};

// The space of a func's knobs: a Values knob each, over its candidates (a Tag
// knob for a tag knob, its values the numbers of its tags; a Reorder for an
// order knob, its values the numbers of its orders; a Split for a knob
// split, its extent the param's value; a part set by hand holds the whole
// split at its values), and
// its knob constraints with the values of its compile-time params put in.
// Knobs named in `fixed` (set by hand) keep their one value. Throws
// std::invalid_argument for a knob constraint that reads a run-time param.
Space space_of(const ir::Func& f, const std::set<std::string>& fixed = {});

}  // namespace kiln::tuner
