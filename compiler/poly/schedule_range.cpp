// Schedule values must fit the 64-bit loop variables the code computes them in.
// isl computes in arbitrary precision, so a shift by 2^63 - 1 or a skew by
// 2^62 gives loop bounds no int64 holds; they are refused here, not wrapped.
#include <isl/aff.h>
#include <isl/ilp.h>
#include <isl/point.h>
#include <isl/val.h>

#include <optional>
#include <vector>

#include "model.h"
#include "stored_relation.h"

namespace kiln::poly {
namespace {

// A closed range of rationals, owned (isl_val is not shared here).
struct Interval {
  isl::val lo, hi;
};

Interval scaled(const Interval& x, const isl::val& c) {
  isl::val a = x.lo.mul(c), b = x.hi.mul(c);
  return c.is_neg() ? Interval{b, a} : Interval{a, b};
}

// The values an affine expression of iterators takes where each iterator k
// lies in box[k]: a range that holds them all (interval arithmetic; a floor
// of a range is the range of its ends' floors). Nullopt when the expression
// involves a param.
std::optional<Interval> range_of(const isl::aff& aff, const std::vector<Interval>& box) {
  isl_aff* a = aff.get();
  if (isl_aff_dim(a, isl_dim_in) != static_cast<isl_size>(box.size())) return std::nullopt;
  for (int k = 0; k < isl_aff_dim(a, isl_dim_param); ++k)
    if (!isl::manage(isl_aff_get_coefficient_val(a, isl_dim_param, k)).is_zero())
      return std::nullopt;
  isl::val cst = isl::manage(isl_aff_get_constant_val(a));
  Interval out{cst, cst};
  auto add = [&](const Interval& term) {
    out.lo = out.lo.add(term.lo);
    out.hi = out.hi.add(term.hi);
  };
  for (int k = 0; k < isl_aff_dim(a, isl_dim_in); ++k) {
    isl::val c = isl::manage(isl_aff_get_coefficient_val(a, isl_dim_in, k));
    if (!c.is_zero()) add(scaled(box[static_cast<size_t>(k)], c));
  }
  for (int k = 0; k < isl_aff_dim(a, isl_dim_div); ++k) {
    isl::val c = isl::manage(isl_aff_get_coefficient_val(a, isl_dim_div, k));
    if (c.is_zero()) continue;
    std::optional<Interval> inner = range_of(isl::manage(isl_aff_get_div(a, k)), box);
    if (!inner) return std::nullopt;
    add(scaled(Interval{inner->lo.floor(), inner->hi.floor()}, c));
  }
  return out;
}

// True when interval arithmetic proves every loop value of c within the
// limit on `domain` (its instances, params within their range): a few small
// questions on the domain instead of one on every instance's schedule
// vector, which the tiled schedules' floors make costly. False says nothing.
bool plainly_in_range(const ScheduledFunc::Impl& m, const CompModel& c, const isl::set& domain) {
  std::optional<isl::pw_multi_aff> f = schedule_function(c, schedule_dims(m));
  if (!f) return false;
  std::vector<Interval> box;
  for (int k = 0; k < isl_set_dim(domain.get(), isl_dim_set); ++k) {
    isl::val lo = isl::manage(isl_set_dim_min_val(domain.copy(), k));
    isl::val hi = isl::manage(isl_set_dim_max_val(domain.copy(), k));
    if (!lo.is_int() || !hi.is_int()) return false;  // unbounded, or an empty domain (NaN)
    box.push_back({lo, hi});
  }
  isl::val limit(m.ctx.get(), kMaxLoopValue);
  const int loops = c.loops();
  bool proved = true;
  f->foreach_piece([&](const isl::set&, const isl::multi_aff& ma) {
    for (int k = 0; proved && k < loops; ++k) {
      std::optional<Interval> v = range_of(ma.at(2 * k + 1), box);
      proved = v && v->hi.le(limit) && v->lo.ge(limit.neg());
    }
  });
  return proved;
}

}  // namespace

std::optional<std::string> schedule_range_problem(const ScheduledFunc::Impl& m) {
  isl::ctx ctx = m.ctx.get();
  // Run-time params as large as kMaxParamMagnitude, within the constraints.
  std::string box;
  for (const auto& p : m.runtime_params) {
    std::string n = isl_name(p);
    box += (box.empty() ? "" : " and ") + std::string("-") + std::to_string(kMaxParamMagnitude) +
           " <= " + n + " <= " + std::to_string(kMaxParamMagnitude);
  }
  isl::set params = read_set(ctx, param_list(m) + " -> { : " + (box.empty() ? "1 = 1" : box) + " }")
                        .intersect(m.context);
  const std::string limit = std::to_string(kMaxLoopValue);
  for (const auto& c : m.comps) {
    // The exact domain: data-dependent bounds within what the value specs allow.
    std::string data;
    for (const auto& r : data_param_ranges(m, c.data_params))
      data += (data.empty() ? "" : " and ") + r;
    auto instances = [&] {
      isl::set t = c.domain.intersect_params(params);
      if (!data.empty())
        t = t.intersect_params(
            read_set(ctx, param_list(m, c.data_params) + " -> { : " + data + " }"));
      return t;
    };
    if (plainly_in_range(m, c, instances())) continue;
    auto times_of = [&] { return instances().apply(c.sched); };
    isl::set times = times_of();
    int dims = static_cast<int>(c.sched.range_tuple_dim());
    // Loop k's values past the limit.
    auto beyond = [&](int k) {
      isl_set* all = isl_set_universe(isl_set_get_space(times.get()));
      isl_val* over = isl_val_int_from_si(ctx.get(), kMaxLoopValue);
      isl_set* above =
          isl_set_lower_bound_val(isl_set_copy(all), isl_dim_set, static_cast<unsigned>(k),
                                  isl_val_add_ui(isl_val_copy(over), 1));
      isl_set* below = isl_set_upper_bound_val(all, isl_dim_set, static_cast<unsigned>(k),
                                               isl_val_neg(isl_val_add_ui(over, 1)));
      return isl::manage(isl_set_union(above, below));
    };
    // Every loop within the limit, asked at once: one question where all is
    // well, which it nearly always is.
    isl_set* inside = isl_set_universe(isl_set_get_space(times.get()));
    for (int k = 1; k < dims; k += 2) {
      isl_val* lim = isl_val_int_from_si(ctx.get(), kMaxLoopValue);
      inside =
          isl_set_upper_bound_val(inside, isl_dim_set, static_cast<unsigned>(k), isl_val_copy(lim));
      inside =
          isl_set_lower_bound_val(inside, isl_dim_set, static_cast<unsigned>(k), isl_val_neg(lim));
    }
    if (times.is_subset(isl::manage(inside))) continue;
    // Some loop leaves the range: find which, and where. (isl simplifies a
    // set it answers about in place, and the point it samples below depends
    // on the form: the set is made again for the same answer every time.)
    times = times_of();
    isl::set outside = isl::manage(isl_set_empty(isl_set_get_space(times.get())));
    for (int k = 1; k < dims; k += 2) outside = outside.unite(beyond(k));
    if (times.intersect(outside).is_empty()) continue;
    for (int k = 1; k < dims; k += 2) {
      isl::set bad = times.intersect(beyond(k));
      if (bad.is_empty()) continue;
      isl::point p = bad.sample_point();
      isl::val v = isl::manage(isl_point_get_coordinate_val(p.get(), isl_dim_set, k));
      std::string where;
      int np = static_cast<int>(m.runtime_params.size());
      for (int q = 0; q < np; ++q) {  // run-time params come first, data params after
        isl::val pv = isl::manage(isl_point_get_coordinate_val(p.get(), isl_dim_param, q));
        where += (q ? ", " : " when ") + m.runtime_params[q] + " = " + to_str(pv);
      }
      return "loop " + c.loop_names[(k - 1) / 2] + " of " + c.name + " reaches " + to_str(v) +
             where + ", beyond +-" + limit +
             " (2^62), the most a loop value may reach (64-bit loop variables; docs/limits.md)";
    }
  }
  return std::nullopt;
}

}  // namespace kiln::poly
