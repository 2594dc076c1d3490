// Affinity: which expressions isl can take (sums of c*x, x/c, x%c), which
// conditions bound which iterators, and the rule for data-dependent bounds.
#include "affine.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "typing.h"

namespace kiln::frontend {

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

// An affine expression, as far as the checks need it.
struct Form {
  std::map<size_t, double> coef;    // iterator position -> coefficient
  std::set<size_t> uses;            // iterators used outside buffer reads
  std::set<size_t> read_uses;       // iterators used in the indices of buffer reads
  const Ast* read = nullptr;        // the first buffer read, for messages
  std::optional<int64_t> constant;  // set for a compile-time integer
};

class Affine {
 public:
  Affine(const Source& src, const Scope& scope, const AffineContext& ctx)
      : src_(src), scope_(scope), ctx_(ctx) {}

  Form form(const Ast& e) {
    switch (e.kind) {
      case AstKind::Int: {
        Form f;
        f.constant = e.int_value;
        return f;
      }
      case AstKind::Name: {
        Form f;
        if (auto k = scope_.iter(e.name)) {
          f.coef[*k] = 1;
          f.uses.insert(*k);
        }
        return f;  // a param: symbolic, no iterator
      }
      case AstKind::Index: {
        if (!ctx_.reads) fail(e, "a buffer read is not allowed in " + ctx_.what);
        Form f;
        f.read = &e;
        for (const AstPtr& a : e.args) collect_iters(*a, f.read_uses);
        return f;
      }
      case AstKind::Call:
        if (e.name == "i64" && e.args.size() == 1) return form(*e.args[0]);
        break;
      case AstKind::Unary:
        if (e.unary_op == ir::UnaryOp::Neg) {
          Form f = form(*e.args[0]);
          scale(f, -1);
          if (f.constant) f.constant = -*f.constant;
          return f;
        }
        break;
      case AstKind::Binary:
        return binary(e);
      default:
        break;
    }
    fail(e, ctx_.what +
                " may only use sums of terms c*x, x/c and x%c (x an iterator or param, "
                "c an integer constant)");
  }

  void condition(const Ast& e, int link, Bounds* bounds) {
    if (link >= 0) return comparison(*e.args[link], e.cmp_ops[link], *e.args[link + 1], bounds);
    switch (e.kind) {
      case AstKind::Bool:
        return;
      case AstKind::Compare:
        for (size_t k = 0; k < e.cmp_ops.size(); ++k) {
          comparison(*e.args[k], e.cmp_ops[k], *e.args[k + 1], bounds);
        }
        return;
      case AstKind::Binary:
        if (e.binary_op == ir::BinaryOp::And) {
          condition(*e.args[0], -1, bounds);
          condition(*e.args[1], -1, bounds);
          return;
        }
        if (e.binary_op == ir::BinaryOp::Or) {
          condition(*e.args[0], -1, nullptr);
          condition(*e.args[1], -1, nullptr);
          return;
        }
        break;
      case AstKind::Unary:
        if (e.unary_op == ir::UnaryOp::Not) return condition(*e.args[0], -1, nullptr);
        break;
      default:
        break;
    }
    src_.validate_error(e.start, "a condition in " + ctx_.what +
                                     " must be a comparison such as '0 <= i < N', found " +
                                     q(quote(src_, e)));
  }

 private:
  [[noreturn]] void fail(const Ast& e, const std::string& why) const {
    src_.validate_error(e.pos, q(quote(src_, e)) + " is not affine: " + why);
  }

  static void scale(Form& f, double c) {
    for (auto& [k, v] : f.coef) v *= c;
  }

  // Iterators anywhere below e, reads included.
  void collect_iters(const Ast& e, std::set<size_t>& out) const {
    if (e.kind == AstKind::Name) {
      if (auto k = scope_.iter(e.name)) out.insert(*k);
    }
    for (const AstPtr& a : e.args) collect_iters(*a, out);
  }

  static void merge(Form& into, const Form& f, double sign) {
    for (const auto& [k, v] : f.coef) into.coef[k] += sign * v;
    into.uses.insert(f.uses.begin(), f.uses.end());
    into.read_uses.insert(f.read_uses.begin(), f.read_uses.end());
    if (!into.read) into.read = f.read;
  }

  Form binary(const Ast& e) {
    ir::BinaryOp op = e.binary_op;
    if (op == ir::BinaryOp::Add || op == ir::BinaryOp::Sub) {
      Form a = form(*e.args[0]);
      Form b = form(*e.args[1]);
      double sign = op == ir::BinaryOp::Add ? 1 : -1;
      merge(a, b, sign);
      if (a.constant && b.constant) {
        int64_t r = 0;
        bool bad = op == ir::BinaryOp::Add ? __builtin_add_overflow(*a.constant, *b.constant, &r)
                                           : __builtin_sub_overflow(*a.constant, *b.constant, &r);
        a.constant = bad ? std::nullopt : std::optional<int64_t>(r);
      } else {
        a.constant.reset();
      }
      return a;
    }
    if (op == ir::BinaryOp::Mul) {
      Form a = form(*e.args[0]);
      Form b = form(*e.args[1]);
      if (!a.constant && !b.constant) {
        fail(e, "one factor of a product in " + ctx_.what + " must be an integer constant");
      }
      Form& v = a.constant ? b : a;
      int64_t c = a.constant ? *a.constant : *b.constant;
      if (a.constant && b.constant) {
        int64_t r = 0;
        if (__builtin_mul_overflow(*a.constant, *b.constant, &r)) fail(e, "it overflows");
        v.constant = r;
        return v;
      }
      scale(v, static_cast<double>(c));
      return v;
    }
    if (op == ir::BinaryOp::Div || op == ir::BinaryOp::Mod) {
      Form a = form(*e.args[0]);
      Form b = form(*e.args[1]);
      if (!b.constant || *b.constant <= 0) {
        fail(e, std::string("the ") + (op == ir::BinaryOp::Div ? "divisor" : "modulus") + " in " +
                    ctx_.what + " must be a positive integer constant");
      }
      int64_t c = *b.constant;
      if (a.constant) {
        int64_t x = *a.constant;
        int64_t d = x / c, m = x % c;
        if (m < 0) {
          m += c;
          --d;
        }
        a.constant = op == ir::BinaryOp::Div ? d : m;
        return a;
      }
      if (op == ir::BinaryOp::Div) {
        scale(a, 1.0 / static_cast<double>(c));
      } else {
        a.coef.clear();  // x % c is bounded whatever x is: it bounds no iterator
      }
      return a;
    }
    fail(e, ctx_.what +
                " may only use sums of terms c*x, x/c and x%c (x an iterator or param, "
                "c an integer constant)");
  }

  void comparison(const Ast& l, ir::BinaryOp op, const Ast& r, Bounds* bounds) {
    Form a = form(l);
    Form b = form(r);
    merge(a, b, -1);  // a now describes l - r
    if (a.read) data_dependent(a);
    if (!bounds) return;
    for (const auto& [k, c] : a.coef) {
      if (c == 0) continue;
      // l - r <= 0 bounds x from above when its coefficient is positive.
      bool pos = c > 0;
      switch (op) {
        case ir::BinaryOp::Lt:
        case ir::BinaryOp::Le:
          (pos ? bounds->upper : bounds->lower)[k] = true;
          break;
        case ir::BinaryOp::Gt:
        case ir::BinaryOp::Ge:
          (pos ? bounds->lower : bounds->upper)[k] = true;
          break;
        case ir::BinaryOp::Eq:
          bounds->lower[k] = bounds->upper[k] = true;
          break;
        default:
          break;
      }
    }
  }

  // A read in a domain stands for a value known before the iterators it
  // bounds start: its indices may use only iterators declared before them.
  void data_dependent(const Form& f) const {
    const Ast& read = *f.read;
    if (f.uses.empty()) {
      src_.validate_error(read.pos,
                          "the buffer read " + q(quote(src_, read)) + " in " + ctx_.what +
                              " bounds no iterator: a domain may read a buffer only to bound an "
                              "iterator declared after those it reads at (for a data-dependent "
                              "test, use select in the value)");
    }
    size_t first = *f.uses.begin();
    if (!f.read_uses.empty() && *f.read_uses.rbegin() >= first) {
      const auto& it = scope_.iters();
      src_.validate_error(read.pos, "the data-dependent bound " + q(quote(src_, read)) + " on " +
                                        q(it[first].name) + " reads at iterator " +
                                        q(it[*f.read_uses.rbegin()].name) +
                                        ": a buffer read in a domain may only use iterators "
                                        "declared before the one it bounds");
    }
  }

  const Source& src_;
  const Scope& scope_;
  const AffineContext& ctx_;
};

}  // namespace

void check_affine(const Source& src, const Scope& scope, const AffineContext& ctx, const Ast& e) {
  Affine(src, scope, ctx).form(e);
}

void check_condition(const Source& src, const Scope& scope, const AffineContext& ctx, const Ast& e,
                     int link, Bounds* bounds) {
  Affine(src, scope, ctx).condition(e, link, bounds);
}

}  // namespace kiln::frontend
