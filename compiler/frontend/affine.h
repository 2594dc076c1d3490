// Affinity checks for domains, constraints, shapes and indices, and the
// syntactic check that every iterator is bounded on both sides.
#pragma once

#include <string>
#include <vector>

#include "ast.h"
#include "scope.h"

namespace kiln::frontend {

struct AffineContext {
  std::string what;    // "the domain of 'C'", "a constraint", ...
  bool reads = false;  // buffer reads may stand for params (data-dependent bounds)
};

// Which sides each iterator (by position in the scope) is bounded on.
struct Bounds {
  std::vector<bool> lower, upper;
  explicit Bounds(size_t n) : lower(n, false), upper(n, false) {}
};

// Throws unless e is affine in the iterators and params in scope: sums of
// c*x, x/c, x%c with integer constants c (and, with ctx.reads, buffer reads).
void check_affine(const Source& src, const Scope& scope, const AffineContext& ctx, const Ast& e);

// Checks one condition of a domain or constraint: `link` >= 0 picks one
// comparison of a Compare chain; -1 takes e whole. A top-level comparison
// records which iterators it bounds in *bounds (pass null below or/not).
void check_condition(const Source& src, const Scope& scope, const AffineContext& ctx, const Ast& e,
                     int link, Bounds* bounds);

}  // namespace kiln::frontend
