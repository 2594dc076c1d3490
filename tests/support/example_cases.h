// Every example with the schedules and param values the differential tests run it under.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/ir.h"

namespace kiln::testing {

struct ExampleCase {
  std::string example;
  std::vector<std::string> schedules;  // "<file>" = the example's own schedule
  std::vector<ir::Overrides> params;
  std::map<std::string, int64_t> runtime = {};
};

inline const std::vector<ExampleCase>& example_cases() {
  static const std::vector<ExampleCase> all = {
      {"matmul",
       {"<file>", "", "C.reorder(k, i, j);",
        "C.split(k, 4, ko, ki); C.reorder(ko, i, j, ki); C.tag(j, vectorize);",
        "C_init.tile(i, j, 5, 7, io, jo, ii, ji); C.tile(i, j, 5, 7, io, jo, ii, ji);"
        "C.after(C_init, ji);",
        "C.apply_sch(\"{ [i, j, k] -> [j, i, k] }\"); C.tag(i, parallel);",
        "C.skew(i, j, 1); C.shift(k, 3); C_init.shift(i, -2);",
        "C.fuse(i, j, ij); C_init.fuse(i, j, ij); C.after(C_init, ij); C.tag(ij, parallel);",
        "C.split(k, 4, ko, ki); C.reorder(i, ko, j, ki); C.cache_identity(A, ko, heap);"
        "C.cache_identity(B, i, stack);",
        "C.tile(i, j, 4, 4, io, jo, ii, ji); C.reorder(io, jo, k, ii, ji); "
        "C.cache(B, jo, stack, [4, K], \"{ [e0, e1] -> [e1 - 4 * jo, e0] }\");"},
       {{{"M", 13}, {"N", 17}, {"K", 9}},
        {{"M", 8}, {"N", 8}, {"K", 8}},
        {{"M", 1}, {"N", 3}, {"K", 1}}}},
      {"batch_matmul",
       {"<file>", "", "C.reorder(k, b, i, j);",
        "C.tile(i, j, 4, 8, io, jo, ii, ji); C.tag(b, parallel); C.tag(ji, vectorize);"},
       {{{"BATCH", 3}, {"M", 7}, {"N", 10}, {"K", 5}},
        {{"BATCH", 1}, {"M", 16}, {"N", 16}, {"K", 3}}}},
      {"conv2d",
       {"<file>", "", "O.reorder(c, ky, kx, n, f, y, x);",
        "O.tile(y, x, 3, 4, yo, xo, yi, xi); O_init.tile(y, x, 3, 4, yo, xo, yi, xi);"
        "O.after(O_init, xi); O.tag(n, parallel);",
        "pad.store(Padded); O.tag(f, parallel);"},
       {{{"N", 1}, {"C", 3}, {"H", 7}, {"W", 6}, {"F", 2}},
        {{"N", 2}, {"C", 2}, {"H", 5}, {"W", 5}, {"F", 3}, {"P", 0}}}},
      {"segment_sum",
       {"<file>", "", "acc.split(j, 4, jo, ji); acc.tag(i, parallel); y_init.tag(i, parallel);",
        "acc.after(y_init, i); y_init.split(i, 3, io, ii); acc.split(i, 3, io, ii);",
        "y_init.separate(i, 5); acc.separate(i, 5);"},
       {{}, {{"nnz", 7}}},
       {{"m", 10}}},
      {"spmm",
       {"<file>", "", "Y.reorder(i, j, k); Y.tag(j, parallel);",
        "Y.after(Y_init, i); Y_init.split(i, 5, io, ii); Y.split(i, 5, io, ii); Y.tag(io, "
        "parallel);",
        "Y.reorder(i, j, k); Y.split(k, 4, ko, ki); Y.cache_identity(idx, ko, heap);",
        "Y.split(i, 4, io, ii); Y.split(k, 8, ko, ki); Y.cache_identity(val, ko, stack); "
        "Y.tag(io, parallel);"},
       {{}, {{"m", 7}, {"nnz", 9}}}},
      {"trmm",
       {"<file>", "", "upd.reorder(k, i, j);",
        "upd.tile(i, j, 8, 4, io, jo, ii, ji); upd.tag(io, parallel);"},
       {{{"M", 13}, {"N", 6}}, {{"M", 1}, {"N", 1}}}},
      {"heat2d",
       {"<file>", "", "step.skew(t, i, 1); step.skew(t, j, 1);",
        "step.skew(t, j, 2); step.skew(i, j, 1); step.reorder(j, t, i); step.split(i, 4, io, ii); "
        "step.tag(io, parallel);"},
       {{{"T", 3}, {"N", 9}}, {{"T", 1}, {"N", 3}}}},
      {"jacobi2d",
       {"<file>", "", "s1.tag(i, parallel); s2.tag(i, parallel);",
        "s1.skew(t, i, 2); s2.skew(t, i, 2); s2.shift(i, 1); s1.tile(t, i, 3, 5, to, io, ti, "
        "ii); s2.tile(t, i, 3, 5, to, io, ti, ii); s2.after(s1, ii);"},
       {{{"T", 5}, {"N", 13}}, {{"T", 1}, {"N", 3}}}},
      {"lu",
       {"<file>", "", "s3.split(k, 3, ko, ki); s1.tag(k, unroll);"},
       {{{"N", 17}}, {{"N", 1}}, {{"N", 2}}}},
      {"histogram",
       {"<file>", "", "h.split(k, 64, ko, ki); h.tag(ko, parallel); h.atomic();",
        "h.split(k, 100, ko, ki); h.privatize(ko); h.tag(ko, parallel); h_init.tag(b, "
        "parallel);"},
       {{{"n", 1000}, {"bins", 16}}, {{"n", 1}, {"bins", 1}}}},
  };
  return all;
}

inline void PrintTo(const ExampleCase& c, std::ostream* os) { *os << c.example; }

}  // namespace kiln::testing
