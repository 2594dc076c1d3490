// The limits kiln enforces on what it is given, so that no input can make it
// use unbounded memory or time (docs/limits.md lists each, its default and
// the error it gives). Each exceeded limit is an error naming the limit, its
// value and where.
#pragma once

#include <cstddef>

namespace kiln {

struct Limits {
  // Bytes of one .kiln source (a file, or a request's text).
  size_t max_source_bytes = size_t{16} << 20;
};

}  // namespace kiln
