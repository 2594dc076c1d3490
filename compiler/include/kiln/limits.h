// The limits kiln enforces on what it is given, so that no input can make it
// use unbounded memory or time (docs/limits.md lists each, its default and
// the error it gives). Each exceeded limit is an error naming the limit, its
// value and where.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

struct Limits {
  // Bytes of one .kiln source (a file, or a request's text).
  size_t max_source_bytes = size_t{16} << 20;
  // Computations in one func, the ones reductions make included.
  size_t max_computations = 256;
  // Iterators of one computation, a reduction's included.
  size_t max_domain_dims = 16;
  // Expression nodes of one computation's value as written, and once the
  // value computations it reads are inlined into it.
  size_t max_expression_nodes = 65536;
  // isl operations (isl_ctx_set_max_operations) to schedule one func, and
  // again to lower it: the bound on the polyhedral work of a compilation.
  uint64_t max_isl_operations = 10'000'000;
};

}  // namespace kiln
