// Affine integer expressions and conditions of the IR as isl text: how the
// model writes domains, accesses and constraints for isl to parse. Private to
// compiler/poly.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model.h"

namespace kiln::poly {

// Prints affine integer expressions and conditions in isl's syntax: iterators
// in `iters` and run-time params by name, compile-time params folded. Buffer
// reads become data-dependent params (named after `owner`, appended to
// `*data`) when `data` is given, and make the expression non-affine otherwise.
// nullopt means "not affine".
class AffinePrinter {
 public:
  AffinePrinter(const ScheduledFunc::Impl& m, std::set<std::string> iters, std::string owner,
                std::vector<DataParam>* data)
      : m_(m), iters_(std::move(iters)), owner_(std::move(owner)), data_(data) {}

  std::optional<std::string> expr(const ir::Expr& e);
  std::optional<std::string> cond(const ir::Expr& e);

 private:
  const ScheduledFunc::Impl& m_;
  std::set<std::string> iters_;
  std::string owner_;
  std::vector<DataParam>* data_;
};

}  // namespace kiln::poly
