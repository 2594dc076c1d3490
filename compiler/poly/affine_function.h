// Affine functions built with isl's functions, not parsed from text:
// schedule maps, and the loop space functions of lowering. Parsing was a
// third of the time the schedule commands took. Private to compiler/poly.
#pragma once

#include <isl/cpp.h>
#include <isl/mat.h>

#include <cstdint>
#include <map>
#include <optional>
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

// The values of an isl constraint matrix, row after row, appended to out;
// false when one is not an integer within [-bound, bound].
bool matrix_values(isl_mat* mat, int64_t bound, std::vector<int64_t>& out);

// The function m is, read off its constraints where they say it plainly: in
// each basic map of m, without existential variables, each output, in order,
// is fixed by an equality with coefficient 1 or -1 or is the floor of an
// expression e / d by the pair d * o <= e <= d * o + d - 1, over the inputs,
// params and the outputs before it; the other constraints name no output and
// make the piece's domain; the pieces' domains do not overlap. One basic map
// gives isl's own form; several (a separated loop) give isl's pieces, maybe in
// another order. Nullopt otherwise (isl_pw_multi_aff_from_map then decides,
// which for a tiled schedule computes an affine hull for every floor).
std::optional<isl::pw_multi_aff> plain_function(const isl::map& m);

// The inputs of m as affine functions of its outputs, where m's equalities
// alone determine them (its existential variables taken for unknowns): a
// tile's schedule gives back its iterators (i = 256 * io + 4 * ir + im). Input
// k is row k: its constant, then the coefficients of the params and of the
// outputs. Nullopt where m is not one basic map or its equalities leave an
// input open.
std::optional<std::vector<std::vector<int64_t>>> inputs_from_outputs(const isl::map& m);

}  // namespace kiln::poly
