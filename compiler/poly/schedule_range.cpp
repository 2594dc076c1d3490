// Schedule values must fit the 64-bit loop variables the code computes them in.
// isl computes in arbitrary precision, so a shift by 2^63 - 1 or a skew by
// 2^62 gives loop bounds no int64 holds; they are refused here, not wrapped.
#include <isl/point.h>
#include <isl/val.h>

#include "model.h"

namespace kiln::poly {

std::optional<std::string> schedule_range_problem(const ScheduledFunc::Impl& m) {
  isl::ctx ctx = m.ctx.get();
  // Run-time params as large as kMaxParamMagnitude, within the constraints.
  std::string box;
  for (const auto& p : m.runtime_params) {
    std::string n = isl_name(p);
    box += (box.empty() ? "" : " and ") + std::string("-") + std::to_string(kMaxParamMagnitude) +
           " <= " + n + " <= " + std::to_string(kMaxParamMagnitude);
  }
  isl::set params = isl::set(ctx, param_list(m) + " -> { : " + (box.empty() ? "1 = 1" : box) + " }")
                        .intersect(m.context);
  const std::string limit = std::to_string(kMaxLoopValue);
  for (const auto& c : m.comps) {
    // The exact domain: data-dependent bounds within what the value specs allow.
    std::string data;
    for (const auto& r : data_param_ranges(m, c.data_params))
      data += (data.empty() ? "" : " and ") + r;
    isl::set times = c.domain.intersect_params(params);
    if (!data.empty())
      times = times.intersect_params(
          isl::set(ctx, param_list(m, c.data_params) + " -> { : " + data + " }"));
    times = times.apply(c.sched);
    int dims = static_cast<int>(c.sched.range_tuple_dim());
    // Loop k's values past the limit, and then the same for every loop at once:
    // one question where all is well, which it nearly always is.
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
