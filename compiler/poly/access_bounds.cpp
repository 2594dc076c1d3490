// Static access safety: isl proves that every access of every instance lies
// inside its buffer, for every param value the constraints allow and every
// value the inputs' value specs allow. An access that can fall outside is
// refused with an instance that shows it.
#include <isl/point.h>
#include <isl/set.h>
#include <isl/val.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <regex>
#include <set>

#include "access_sites.h"
#include "affine_printer.h"
#include "kiln/analysis.h"
#include "model.h"
#include "text_memo.h"

namespace kiln::poly {
namespace {

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t k = 0; k < parts.size(); ++k) s += (k ? sep : "") + parts[k];
  return s;
}

// The smallest and largest value of an integer type, as text (exactly: the
// largest i64 is no double).
std::string type_min_text(ir::DType t) {
  return t == ir::DType::I32 ? std::to_string(INT32_MIN) : std::to_string(INT64_MIN);
}
std::string type_max_text(ir::DType t) {
  return t == ir::DType::I32 ? std::to_string(INT32_MAX) : std::to_string(INT64_MAX);
}

std::string val_text(const isl::val& v) { return to_str(v); }

// e as the source wrote it: without the widening casts the frontend put
// around integer indices (i64(idx[k]) is idx[k]).
std::string source_text(const ir::Expr& e) {
  std::function<ir::Expr(const ir::Expr&)> strip = [&](const ir::Expr& x) -> ir::Expr {
    if (auto* c = ir::as<ir::Cast>(x); c && ir::is_int(c->type) && ir::is_int(c->value->type))
      return strip(c->value);
    return ir::map_children(x, strip);
  };
  return ir::to_string(strip(e));
}

const ir::Load* loaded(const ir::Expr& e) {
  if (auto* c = ir::as<ir::Cast>(e)) return loaded(c->value);
  return ir::as<ir::Load>(e);
}

// The texts of the sets the check found empty, with the context they were
// cut to, for every compilation in the process (TextMemo): from the second
// candidate of an operator on, the check is a lookup. Only empty sets are
// kept (a non-empty one is an error, which builds the set again to show an
// instance); up to 2^14 of them.
TextMemo<bool>& empty_sets() {
  static TextMemo<bool> sets(size_t{1} << 14, TextMemo<bool>::kUnbounded);
  return sets;
}

class BoundsChecker {
 public:
  BoundsChecker(const ScheduledFunc::Impl& m, const CompModel& c, const std::string& context)
      : m_(m), c_(c), context_(context) {}

  void check() {
    const ir::Comp& comp = *c_.comp;
    std::set<std::string> iters(c_.iters.begin(), c_.iters.end());
    AffinePrinter ap(m_, iters, c_.name, &data_);
    // The exact domain, with data params, and the domain without the
    // conditions that read buffers: where the bounds' own reads happen.
    std::vector<ir::Expr> exact, outer;
    std::vector<Site> bound_reads;
    for (const auto& cond : comp.domain) {
      size_t before = data_.size();
      if (!ap.cond(cond)) return;  // build_model has refused it already
      exact.push_back(cond);
      std::vector<Site> reads;
      SiteCollector(reads).visit(cond);
      if (reads.empty() && data_.size() == before) outer.push_back(cond);
      bound_reads.insert(bound_reads.end(), reads.begin(), reads.end());
    }
    for (const auto& s : bound_reads) check_site(s, outer, ap);

    std::vector<Site> sites;
    sites.push_back({c_.target.buf,
                     c_.target.indices,
                     true,
                     c_.target.where.known() ? c_.target.where : comp.where,
                     {}});
    SiteCollector collect(sites);
    for (const auto& x : c_.target.indices) collect.visit(x);
    collect.visit(c_.value);
    for (const auto& s : sites) check_site(s, exact, ap);
  }

 private:
  // Checks each index of s against its dimension over the instances where
  // `domain` and s's path hold. The set is over the iterators those
  // conditions and the index use: a bound's read does not depend on the
  // inner iterators the bound defines.
  void check_site(const Site& s, const std::vector<ir::Expr>& domain, AffinePrinter& ap) {
    const ir::Buf* b = m_.func.find_buf(s.buf);
    if (!b) return;  // a compiler temporary: lowering sizes it from its footprint
    std::vector<ir::Expr> where = domain;
    for (const auto& p : s.path)
      if (ap.cond(p))
        where.push_back(p);  // a path condition isl cannot read is dropped: a superset
    AffinePrinter shape_printer(m_, {}, "", nullptr);
    // All dimensions in one set first, which is all the usual access needs;
    // dimension by dimension only when that set is not empty, to say which.
    std::vector<size_t> dims;
    bool affine = true;
    for (size_t k = 0; k < s.indices.size() && k < b->shape.size(); ++k) {
      if (!ap.expr(s.indices[k])) affine = false;
      if (shape_printer.expr(b->shape[k])) dims.push_back(k);  // the frontend keeps shapes affine
    }
    if (affine && none_outside(s, *b, where, dims, ap, shape_printer)) return;
    for (size_t k = 0; k < s.indices.size() && k < b->shape.size(); ++k) {
      if (!ap.expr(s.indices[k])) refuse_not_affine(s, k);
      if (!shape_printer.expr(b->shape[k])) continue;
      Outside o = outside(s, *b, where, {k}, ap, shape_printer);
      isl::set bad = instances(o);
      if (bad.is_empty()) continue;
      // The data params the conditions and the index mention: those worth naming.
      std::set<std::string> data_used;
      for (const auto& d : data_)
        if (std::regex_search(o.said, std::regex("\\b" + d.name + "\\b"))) data_used.insert(d.name);
      refuse(s, k, *b, o.shown, data_used, first_point(bad));
    }
  }

  // The instances where `where` holds and some index k of s, k in `dims`
  // (each affine, with an affine extent), falls outside its dimension, as
  // the text of a set over the iterators the conditions and those indices
  // use, then each index's value and extent (empty when no index is
  // checked); `instances` makes the set.
  struct Outside {
    std::string text;
    std::vector<std::string> shown;  // the iterators, as named in the source
    std::string said;                // the constraints, but for the value specs
  };
  isl::set instances(const Outside& o) const {
    // (A set space with no dimension: isl::space(ctx, 0) would parse a
    // string from a null pointer.)
    if (o.text.empty())
      return isl::manage(isl_set_empty(isl_space_set_alloc(m_.ctx.get().get(), 0, 0)));
    return isl::set(m_.ctx.get(), o.text).intersect_params(m_.context);
  }

  // Whether outside(...) has no instance, remembered by its text (empty_sets).
  bool none_outside(const Site& s, const ir::Buf& b, const std::vector<ir::Expr>& where,
                    const std::vector<size_t>& dims, AffinePrinter& ap,
                    AffinePrinter& shape_printer) const {
    Outside o = outside(s, b, where, dims, ap, shape_printer);
    std::string key = o.text + " in " + context_;
    if (o.text.empty() || empty_sets().find(key)) return true;
    bool none = instances(o).is_empty();
    if (none) empty_sets().add(key, true);
    return none;
  }
  Outside outside(const Site& s, const ir::Buf& b, const std::vector<ir::Expr>& where,
                  const std::vector<size_t>& dims, AffinePrinter& ap,
                  AffinePrinter& shape_printer) const {
    std::set<std::string> used;
    std::vector<std::string> all, out_of, values;
    for (const auto& c : where) {
      all.push_back("(" + *ap.cond(c) + ")");
      for (const auto& v : ir::free_vars(c)) used.insert(v);
    }
    for (size_t k : dims) {
      for (const auto& v : ir::free_vars(s.indices[k])) used.insert(v);
      std::string v = fresh("_v" + std::to_string(k)), n = fresh("_n" + std::to_string(k));
      all.push_back(v + " = " + *ap.expr(s.indices[k]));
      all.push_back(n + " = " + *shape_printer.expr(b.shape[k]));
      out_of.push_back(v + " < 0 or " + v + " >= " + n);
      values.push_back(v);
      values.push_back(n);
    }
    Outside o;
    if (out_of.empty()) return o;
    all.push_back("(" + join(out_of, " or ") + ")");
    o.said = join(all, " ");
    for (const auto& r : data_param_ranges(m_, data_)) all.push_back(r);
    std::vector<std::string> names;
    for (const auto& it : c_.iters)
      if (used.count(it)) {
        o.shown.push_back(it);
        names.push_back(isl_name(it));
      }
    names.insert(names.end(), values.begin(), values.end());
    o.text =
        param_list(m_, data_) + " -> { [" + join(names, ", ") + "] : " + join(all, " and ") + " }";
    return o;
  }

  // The lexicographically first point of a non-empty set, or any point
  // when the set has no first one.
  static isl::point first_point(const isl::set& s) {
    try {
      return s.lexmin().sample_point();
    } catch (const isl::exception&) {
      if (isl_quota_exceeded(s.ctx())) throw;
      isl_ctx_reset_error(s.ctx().get());
      return s.sample_point();
    }
  }

  // A set dimension name that no iterator, param or data param uses.
  std::string fresh(const std::string& base) const {
    std::set<std::string> taken(c_.iters.begin(), c_.iters.end());
    taken.insert(m_.runtime_params.begin(), m_.runtime_params.end());
    for (const auto& d : data_) taken.insert(d.name);
    std::string name = base;
    for (int k = 0; taken.count(name); ++k) name = base + std::to_string(k);
    return name;
  }

  static std::string access_text(const std::string& buf, const std::vector<ir::Expr>& indices) {
    std::vector<std::string> idx;
    for (const auto& x : indices) idx.push_back(source_text(x));
    return buf + "[" + join(idx, ", ") + "]";
  }
  static std::string access_text(const Site& s) { return access_text(s.buf, s.indices); }

  [[noreturn]] void refuse_not_affine(const Site& s, size_t k) const {
    throw CompileError(ErrorStage::Bounds, s.where.known() ? s.where : c_.comp->where,
                       "cannot prove that " + std::string(s.write ? "the write " : "the read ") +
                           access_text(s) + " in computation " + c_.name + " stays inside " +
                           s.buf + ": index " + std::to_string(k) + " (" +
                           source_text(s.indices[k]) +
                           ") is not affine in the iterators, params and input values");
  }

  [[noreturn]] void refuse(const Site& s, size_t k, const ir::Buf& b,
                           const std::vector<std::string>& shown,
                           const std::set<std::string>& data_used, const isl::point& p) const {
    auto coord = [&](isl_dim_type type, int pos) {
      return val_text(isl::manage(isl_point_get_coordinate_val(p.get(), type, pos)));
    };
    int nd = static_cast<int>(shown.size());
    std::vector<std::string> inst;
    for (int d = 0; d < nd; ++d) inst.push_back(shown[d] + "=" + coord(isl_dim_set, d));
    std::string value = coord(isl_dim_set, nd), extent = coord(isl_dim_set, nd + 1);
    // The param and data values the instance needs.
    std::vector<std::string> given;
    int np = static_cast<int>(m_.runtime_params.size());
    for (int q = 0; q < np; ++q)
      given.push_back(m_.runtime_params[q] + " = " + coord(isl_dim_param, q));
    // The value specs to blame: those of the data the index reads, else
    // those of the data the domain's bounds read.
    std::set<std::string> in_index;
    SiteCollector::loads_of(s.indices[k], in_index);
    std::vector<std::string> specs;
    for (size_t q = 0; q < data_.size(); ++q) {
      const ir::Load* l = loaded(data_[q].value);
      if (!l || !data_used.count(data_[q].name)) continue;
      given.push_back(access_text(l->buf, l->indices) + " = " +
                      coord(isl_dim_param, np + static_cast<int>(q)));
      if (!in_index.empty() && !in_index.count(l->buf)) continue;
      const ir::Buf* lb = m_.func.find_buf(l->buf);
      std::string spec = lb ? ir::value_spec_text(lb->values) : "";
      std::string note = spec.empty()
                             ? l->buf + " has no value range, so it may hold any " +
                                   std::string(ir::dtype_name(lb ? lb->dtype : ir::kIndexType))
                             : l->buf + " is declared " + spec;
      if (std::find(specs.begin(), specs.end(), note) == specs.end()) specs.push_back(note);
    }
    std::string ext_text = ir::to_string(b.shape[k]);
    std::string msg = std::string(s.write ? "the write " : "the read ") + access_text(s) +
                      " in computation " + c_.name + " can fall outside " + b.name + ": index " +
                      std::to_string(k) + " (" + source_text(s.indices[k]) + ") is " + value +
                      " at " + c_.name + "(" + join(inst, ", ") + ")" +
                      (given.empty() ? "" : " when " + join(given, ", ")) + ", but dimension " +
                      std::to_string(k) + " of " + b.name + " has extent " +
                      (ext_text == extent ? extent : ext_text + " = " + extent);
    if (!specs.empty())
      msg += " (" + join(specs, "; ") +
             ": a value range must keep the index inside the dimension it indexes)";
    throw CompileError(ErrorStage::Bounds, s.where.known() ? s.where : c_.comp->where, msg);
  }

  const ScheduledFunc::Impl& m_;
  const CompModel& c_;
  const std::string& context_;  // m_.context's text
  std::vector<DataParam> data_;
};

}  // namespace

std::vector<std::string> data_param_ranges(const ScheduledFunc::Impl& m,
                                           const std::vector<DataParam>& data) {
  std::vector<std::string> out;
  AffinePrinter params(m, {}, "", nullptr);
  for (const auto& d : data) {
    const ir::Load* l = loaded(d.value);
    const ir::Buf* b = l ? m.func.find_buf(l->buf) : nullptr;
    if (!b || !ir::is_int(b->dtype)) continue;
    const ir::ValueSpec& spec = b->values;
    std::optional<std::string> lo, hi;
    if (spec.lo) lo = params.expr(spec.lo);
    if (spec.hi) hi = params.expr(spec.hi);
    out.push_back(lo ? *lo + (spec.lo_inclusive ? " <= " : " < ") + d.name
                     : type_min_text(b->dtype) + " <= " + d.name);
    out.push_back(hi ? d.name + (spec.hi_inclusive ? " <= " : " < ") + *hi
                     : d.name + " <= " + type_max_text(b->dtype));
  }
  return out;
}

void check_access_bounds(const ScheduledFunc::Impl& m) {
  std::string context = to_str(m.context);
  for (const auto& c : m.comps) BoundsChecker(m, c, context).check();
}

}  // namespace kiln::poly
