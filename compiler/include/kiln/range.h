// Integer expressions as linear forms (coefficients over atoms) and the
// ranges they take when the variables in them stay in known ranges: what
// Simplify rewrites with, and what code generators ask for a constant bound
// (a GPU block's thread count, an index that fits 32 bits).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ir.h"

namespace kiln::ir {

// A closed integer range [min, max]; an absent end is unbounded.
struct Interval {
  std::optional<int64_t> min, max;
};
// What is known about the integer variables in scope.
using Bounds = std::map<std::string, Interval>;

// The range an integer expression takes when its variables stay in `known`
// (a variable not in it is unbounded); unbounded for anything else.
Interval range_of(const Expr& e, const Bounds& known);

// The value of e when it is an integer constant.
std::optional<int64_t> int_value(const Expr& e);

// An integer sum as coefficients over atoms (anything not +, -, * by a constant).
struct LinearTerm {
  Expr atom;
  int64_t coeff;
};
struct LinearForm {
  std::vector<LinearTerm> terms;
  int64_t constant = 0;
  bool ok = true;  // false on overflow: use the expression as it is

  void add_term(const Expr& atom, int64_t c) {
    for (LinearTerm& t : terms) {
      if (ir::equal(t.atom, atom)) {
        if (__builtin_add_overflow(t.coeff, c, &t.coeff)) ok = false;
        return;
      }
    }
    terms.push_back({atom, c});
  }
  void add_linear(const LinearForm& o, int64_t c) {
    if (!o.ok) ok = false;
    for (const LinearTerm& t : o.terms) {
      int64_t k = 0;
      if (__builtin_mul_overflow(t.coeff, c, &k)) ok = false;
      add_term(t.atom, k);
    }
    int64_t k = 0;
    if (__builtin_mul_overflow(o.constant, c, &k) ||
        __builtin_add_overflow(constant, k, &constant)) {
      ok = false;
    }
  }
  bool is_constant() const {
    for (const LinearTerm& t : terms) {
      if (t.coeff != 0) return false;
    }
    return true;
  }
  // A single term with coefficient and no constant: scaling it keeps it one term.
  bool is_monomial() const {
    int n = 0;
    for (const LinearTerm& t : terms) n += t.coeff != 0 ? 1 : 0;
    return n == 1 && constant == 0;
  }
};

// e as a linear form. With `distribute`, c * (a + b) is split into c * a + c * b
// (for the division analysis); without, it stays one atom (the simplified form).
LinearForm linearize(const Expr& e, bool distribute);
// A linear form as an expression of type t: positive terms first, in order of
// first appearance, coefficients in front, the constant last.
Expr linear_expr(const LinearForm& l, DType t);

}  // namespace kiln::ir
