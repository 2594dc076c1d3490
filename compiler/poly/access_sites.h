// The accesses of an expression, each with the conditions under which it
// runs. Private to compiler/poly.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "kiln/ir.h"

namespace kiln::poly {

// One access of a computation instance, with the conditions under which it
// runs: a read in one side of a select, or after && or ||, runs only when
// that side is chosen (codegen and the interpreters evaluate it only then).
struct Site {
  std::string buf;
  std::vector<ir::Expr> indices;
  bool write = false;
  SourceLoc where;
  // Every condition holds where the access runs; a conjunction is split
  // into its conjuncts, so a reader that cannot read one keeps the others.
  std::vector<ir::Expr> path;
};

// Appends the reads of the expressions it visits, nested ones (in indices)
// included, to `out`.
class SiteCollector {
 public:
  explicit SiteCollector(std::vector<Site>& out) : out_(out) {}

  void visit(const ir::Expr& e);

  // The buffers e reads.
  static void loads_of(const ir::Expr& e, std::set<std::string>& out);

 private:
  void under(const ir::Expr& cond, const ir::Expr& e);

  std::vector<Site>& out_;
  std::vector<ir::Expr> path_;
};

}  // namespace kiln::poly
