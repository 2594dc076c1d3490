// Legality: a schedule must run the source of every dependence before its sink,
// and a loop bound to parallel hardware must carry no dependence.
#include <isl/map.h>
#include <isl/set.h>
#include <isl/val.h>

#include <functional>
#include <optional>

#include "model.h"

namespace kiln::poly {
namespace {

const char* kind_name(Dependence::Kind k) {
  switch (k) {
    case Dependence::Kind::Flow:
      return "flow (read after write)";
    case Dependence::Kind::Anti:
      return "anti (write after read)";
    case Dependence::Kind::Output:
      return "output (write after write)";
  }
  return "?";
}

// "C(i=1, j=0, k=2)" for the point of a wrapped set in c's space, and the
// values of params that matter for it.
std::string instance_text(const isl::point& pt, int offset, const CompModel& c) {
  std::string s = c.name + "(";
  for (size_t k = 0; k < c.iters.size(); ++k) {
    isl_val* v = isl_point_get_coordinate_val(pt.get(), isl_dim_set, offset + static_cast<int>(k));
    s += (k ? ", " : "") + c.iters[k] + "=" + std::to_string(isl_val_get_num_si(v));
    isl_val_free(v);
  }
  return s + ")";
}

std::string params_text(const isl::point& pt) {
  isl_space* sp = isl_point_get_space(pt.get());
  int n = static_cast<int>(isl_space_dim(sp, isl_dim_param));
  std::string s;
  for (int k = 0; k < n; ++k) {
    const char* nm = isl_space_get_dim_name(sp, isl_dim_param, k);
    if (!nm || nm[0] == '_') continue;
    isl_val* v = isl_point_get_coordinate_val(pt.get(), isl_dim_param, k);
    s += (s.empty() ? " (with " : ", ") + std::string(nm) + "=" +
         std::to_string(isl_val_get_num_si(v));
    isl_val_free(v);
  }
  isl_space_free(sp);
  return s.empty() ? s : s + ")";
}

std::string describe_violation(const Dependence& d, const isl::map& bad, const CompModel& src,
                               const CompModel& dst) {
  isl::set pairs = bad.wrap();
  isl::point pt = pairs.sample_point();
  std::string a = instance_text(pt, 0, src),
              b = instance_text(pt, static_cast<int>(src.iters.size()), dst);
  std::string what;
  switch (d.kind) {
    case Dependence::Kind::Flow:
      what = b + " reads " + d.buf + " written by " + a;
      break;
    case Dependence::Kind::Anti:
      what = b + " overwrites " + d.buf + " read by " + a;
      break;
    case Dependence::Kind::Output:
      what = b + " overwrites " + d.buf + " written by " + a;
      break;
  }
  return what + params_text(pt);
}

struct Violation {
  std::string message;
};

// Pairs of schedule vectors (x, y) that agree on dims [0, k) and have x_k < y_k.
isl::map carried_at(isl::ctx ctx, int dims, int k) {
  std::string in = "[", out = "[", cond;
  for (int i = 0; i < dims; ++i) {
    in += (i ? ", " : "") + std::string("x") + std::to_string(i);
    out += (i ? ", " : "") + std::string("y") + std::to_string(i);
    if (i < k) cond += "x" + std::to_string(i) + " = y" + std::to_string(i) + " and ";
  }
  cond += "x" + std::to_string(k) + " < y" + std::to_string(k);
  return isl::map(ctx, "{ " + in + "] -> " + out + "] : " + cond + " }");
}

// One relation of a dependence, between two computations of the model, with
// their schedules padded to `dims`.
struct DependencePair {
  const Dependence& dep;
  const isl::map& rel;
  const CompModel& src;
  const CompModel& dst;
  isl::map s_src, s_dst;
};

// Calls check on every pair of every dependence; the first violation it finds.
std::optional<Violation> first_violation(
    const ScheduledFunc::Impl& m, int dims,
    const std::function<std::optional<Violation>(const DependencePair&)>& check) {
  for (const auto& d : m.deps) {
    for (const auto& rel : maps_of(d.relation)) {
      const CompModel* src = m.find(domain_name(rel));
      const CompModel* dst = m.find(range_name(rel));
      if (!src || !dst) continue;
      DependencePair pair{
          d, rel, *src, *dst, padded_schedule(*src, dims), padded_schedule(*dst, dims)};
      if (std::optional<Violation> v = check(pair)) return v;
    }
  }
  return std::nullopt;
}

std::optional<Violation> find_violation(const ScheduledFunc::Impl& m) {
  int dims = schedule_dims(m);
  isl::ctx ctx = m.ctx.get();
  // x <lex y: the sink runs strictly after the source.
  isl::map later = isl::manage(isl_map_lex_lt(isl_space_set_alloc(ctx.get(), 0, dims)));
  std::optional<Violation> order = first_violation(m, dims, [&](const DependencePair& p) {
    // The schedule vectors of the two ends of each dependence.
    isl::map bad_times = p.rel.apply_domain(p.s_src).apply_range(p.s_dst).subtract(later);
    if (bad_times.is_empty()) return std::optional<Violation>();
    isl::map pairs = p.s_src.apply_range(bad_times).apply_range(p.s_dst.reverse()).intersect(p.rel);
    return std::optional<Violation>(Violation{
        std::string("breaks the ") + kind_name(p.dep.kind) + " dependence from " + p.src.name +
        " to " + p.dst.name + ": " + describe_violation(p.dep, pairs, p.src, p.dst) +
        ", but the schedule no longer runs " + p.src.name + " first"});
  });
  if (order) return order;
  // A loop bound to parallel hardware must carry no dependence between any
  // two instances that run inside it, whichever computations they belong to.
  for (const auto& c : m.comps) {
    for (int p = 0; p < c.loops(); ++p) {
      ir::LoopTag t = c.tags[p];
      if (t == ir::LoopTag::None || t == ir::LoopTag::Unroll || t == ir::LoopTag::UnrollExplicit)
        continue;
      // The instances of this loop: c's schedule vectors cut after dim 2p.
      isl::set inside = c.domain_approx.apply(padded_schedule(c, dims));
      isl_set* prefix =
          isl_set_project_out(inside.release(), isl_dim_set, 2 * p + 1, dims - 2 * p - 1);
      prefix = isl_set_flat_product(
          prefix, isl_set_universe(isl_space_set_alloc(ctx.get(), 0, dims - 2 * p - 1)));
      isl::set in_loop = isl::manage(prefix);
      isl::map carried = carried_at(ctx, dims, 2 * p + 1);
      std::optional<Violation> v = first_violation(m, dims, [&](const DependencePair& d) {
        isl::map times =
            d.rel.apply_domain(d.s_src).apply_range(d.s_dst).intersect_domain(in_loop).intersect(
                carried);
        if (times.is_empty()) return std::optional<Violation>();
        isl::map pairs = d.s_src.apply_range(times).apply_range(d.s_dst.reverse()).intersect(d.rel);
        return std::optional<Violation>(
            Violation{std::string("loop '") + c.loop_names[p] + "' of " + c.name + " is tagged " +
                      ir::loop_tag_name(t) + " but carries the " + kind_name(d.dep.kind) +
                      " dependence from " + d.src.name + " to " + d.dst.name + ": " +
                      describe_violation(d.dep, pairs, d.src, d.dst) +
                      "; its iterations cannot run at the same time"});
      });
      if (v) return v;
    }
  }
  return std::nullopt;
}

}  // namespace

bool is_legal(const ScheduledFunc::Impl& m) { return !find_violation(m).has_value(); }

void check_legality(const ScheduledFunc::Impl& m, const ir::ScheduleCommand* cmd) {
  auto v = find_violation(m);
  if (!v) return;
  std::string blame;
  if (cmd) blame = "'" + cmd->target + "." + cmd->op + "' ";
  throw CompileError(ErrorStage::Legality, cmd ? cmd->where : m.func.where,
                     "schedule command " + blame + v->message);
}

}  // namespace kiln::poly
