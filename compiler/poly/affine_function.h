// Affine functions built with isl's functions, not parsed from text:
// schedule maps, and the loop space functions of lowering. Parsing was a
// third of the time the schedule commands took. Private to compiler/poly.
#pragma once

#include <isl/cpp.h>

#include <cstdint>
#include <map>
#include <vector>

namespace kiln::poly {

// One output: an affine function of input dims. (A split is a relation
// between the dims, not a floor: split_map in primitives.cpp.)
struct Lin {
  std::map<int, int64_t> coef;  // input dim -> coefficient
  int64_t cst = 0;

  static Lin var(int k);
  static Lin num(int64_t v);
};
Lin operator+(Lin a, const Lin& b);
Lin operator*(int64_t s, Lin a);

// l on the set space `domain` (its tuple and params kept).
isl::aff affine(const isl::space& domain, const Lin& l);
// { domain -> [out...] }, the range tuple unnamed.
isl::multi_aff affine_function(const isl::space& domain, const std::vector<Lin>& out);
// The same as a map (a schedule map, a schedule's part).
isl::map affine_map(const isl::space& domain, const std::vector<Lin>& out);
// The set space [x0, ..., x{n-1}], no params.
isl::space plain_space(isl::ctx ctx, int n);

}  // namespace kiln::poly
