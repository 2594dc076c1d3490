// Legality: a schedule must run the source of every dependence before its sink,
// and a loop bound to parallel hardware must carry no dependence.
#include <isl/map.h>
#include <isl/set.h>
#include <isl/val.h>

#include <functional>
#include <map>
#include <optional>
#include <set>

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

// One relation of a dependence, between two computations of the model, with
// their schedules padded to `dims`. The order is checked on the pairs of
// instances themselves (`pairs`, the relation as a set of [source -> sink]),
// with each end's schedule as a function of the pair: zero[k] holds the pairs
// whose schedule vectors agree on dims 0..k, as far as there are any. (The
// differences of the schedule vectors, isl's deltas, would cost a projection
// of the relation composed with both schedules, which took most of the time
// of the check.)
struct DependencePair {
  const Dependence& dep;
  isl::map rel;
  const CompModel& src;
  const CompModel& dst;
  isl::map s_src, s_dst;
  isl::set pairs;
  // Each end's schedule vector on `pairs`; unset when a schedule is not a
  // function (then `deltas` holds sink - source).
  std::optional<isl::pw_multi_aff> t_src, t_dst;
  std::optional<isl::set> deltas;
  std::vector<isl::set> zero;
  bool broken = false;  // a relaxable dependence the schedule breaks
  // later_by(k), by k.
  mutable std::map<int, isl::pw_aff> differences = {};

  // The pairs of schedule vectors of the dependence's ends.
  isl::map times() const { return rel.apply_domain(s_src).apply_range(s_dst); }

  // Of the pairs `in` (on which dims before k agree), those whose sink runs
  // earlier (sign < 0), at the same time (0) or later (> 0) than the source at dim k.
  isl::set at_dim(const isl::set& in, int k, int sign) const {
    if (deltas) {
      isl_set* d = in.copy();
      if (sign < 0) return isl::manage(isl_set_upper_bound_si(d, isl_dim_set, k, -1));
      if (sign > 0) return isl::manage(isl_set_lower_bound_si(d, isl_dim_set, k, 1));
      return isl::manage(isl_set_fix_si(d, isl_dim_set, k, 0));
    }
    const isl::pw_aff& d = later_by(k);
    // A constant difference everywhere (two static dims, whose values are
    // constants) answers without a question about the pairs.
    if (std::optional<isl::val> v = constant(d)) {
      bool holds = sign < 0 ? v->is_neg() : sign > 0 ? v->is_pos() : v->is_zero();
      return holds ? in : isl::manage(isl_set_empty(isl_set_get_space(in.get())));
    }
    isl_set* where = sign < 0   ? isl_pw_aff_pos_set(isl_pw_aff_neg(d.copy()))
                     : sign > 0 ? isl_pw_aff_pos_set(d.copy())
                                : isl_pw_aff_zero_set(d.copy());
    return in.intersect(isl::manage(where));
  }

 private:
  // The sink's schedule dim k minus the source's, as a function of the pair:
  // made once for the two or three questions asked at dim k.
  const isl::pw_aff& later_by(int k) const {
    auto [it, added] = differences.try_emplace(k);
    if (added)
      it->second = isl::manage(isl_pw_aff_sub(isl_pw_multi_aff_get_pw_aff(t_dst->get(), k),
                                              isl_pw_multi_aff_get_pw_aff(t_src->get(), k)));
    return it->second;
  }
  // d's value when it is one constant on all of the pairs' space.
  static std::optional<isl::val> constant(const isl::pw_aff& d) {
    if (isl_pw_aff_n_piece(d.get()) != 1 || isl_pw_aff_is_cst(d.get()) != isl_bool_true)
      return std::nullopt;
    isl::set where = isl::manage(isl_pw_aff_domain(d.copy()));
    if (isl_set_plain_is_universe(where.get()) != isl_bool_true) return std::nullopt;
    isl_aff* value = isl_pw_aff_as_aff(d.copy());
    isl::val out = isl::manage(isl_aff_get_constant_val(value));
    isl_aff_free(value);
    return out;
  }
};

std::string instance_of(const ScheduledFunc::Impl& m, const isl::point& pt, int offset,
                        const std::string& isl_tuple) {
  const CompModel* c = m.find_tuple(isl_tuple);
  return c ? instance_text(pt, offset, *c) : isl_tuple;
}

// The live ranges of one temp (see LiveRanges) against the current schedules.
class LiveRangeCheck {
 public:
  LiveRangeCheck(const ScheduledFunc::Impl& m, const std::string& buf, int dims)
      : m_(m), buf_(buf) {
    const LiveRanges& lr = m.live_ranges.at(buf);
    isl::union_set involved = lr.flow.domain().unite(lr.flow.range()).unite(lr.writes.domain());
    theta_ = isl::union_map::empty(m.ctx.get());
    for (const auto& c : m.comps) theta_ = theta_.unite(isl::union_map(padded_schedule(c, dims)));
    theta_ = theta_.intersect_domain(involved);
    // W -> W': another write of the element whose value W's readers read.
    isl::union_map other =
        lr.writes.intersect_domain(lr.flow.domain()).apply_range(lr.writes.reverse());
    other = other.subtract(isl::manage(isl_union_set_identity(other.domain().release())));
    overwrites_ = other;
    flow_ = lr.flow;
  }

  // A write the schedule runs after a write and before a read of its value.
  std::optional<std::string> broken() const {
    // Not after: before or at the same time, which for two instances leaves
    // their order to chance. An instance that reads and writes an element
    // reads it first: W' is never R itself.
    isl::union_map not_after =
        isl::manage(isl_union_map_lex_le_union_map(theta_.copy(), theta_.copy()));
    isl::union_map others =
        not_after.subtract(isl::manage(isl_union_set_identity(not_after.domain().release())));
    // W -> [W' -> R]: W' does not run before W, R reads W's value, W' does
    // not run after R.
    isl::union_map bad =
        overwrites_.intersect(not_after).range_product(flow_).intersect_range(others.wrap());
    if (bad.is_empty()) return std::nullopt;
    isl::map one = maps_of(bad).front();
    isl::map wr = one.range().unwrap();
    isl::point pt = one.wrap().sample_point();
    int nw = static_cast<int>(one.domain_tuple_dim()),
        nw2 = static_cast<int>(wr.domain_tuple_dim());
    return instance_of(m_, pt, nw + nw2, range_name(wr)) + " reads the " + buf_ + " that " +
           instance_of(m_, pt, 0, domain_name(one)) + " writes, but the schedule runs " +
           instance_of(m_, pt, nw, domain_name(wr)) + ", which overwrites it, in between";
  }

  // Within the loop instances `in_loop` at `level`, whose iterations run in
  // any order: a write in one iteration to an element whose live range has
  // its write or its read in another (either may run between them).
  std::optional<std::string> race(const isl::set& in_loop, int level) const {
    isl::union_map to_read = overwrites_.range_product(flow_).range().unwrap();  // W' -> R
    isl::union_map to_write = overwrites_.reverse();                             // W' -> W
    for (bool reads : {false, true}) {
      const isl::union_map& pairs = reads ? to_read : to_write;
      isl::union_map times_u = pairs.apply_domain(theta_).apply_range(theta_);
      if (times_u.is_empty()) continue;
      isl_map* t = isl_map_from_union_map(times_u.release());
      for (int k = 0; k < level; ++k) t = isl_map_equate(t, isl_dim_in, k, isl_dim_out, k);
      isl_map* lt = isl_map_order_lt(isl_map_copy(t), isl_dim_in, level, isl_dim_out, level);
      t = isl_map_union(lt, isl_map_order_gt(t, isl_dim_in, level, isl_dim_out, level));
      isl::map times = isl::manage(t).intersect_range(in_loop);
      if (times.is_empty()) continue;
      isl::union_map bad =
          theta_.apply_range(isl::union_map(times)).apply_range(theta_.reverse()).intersect(pairs);
      isl::map one = maps_of(bad).front();
      isl::point pt = one.wrap().sample_point();
      std::string other =
          instance_of(m_, pt, static_cast<int>(one.domain_tuple_dim()), range_name(one));
      return instance_of(m_, pt, 0, domain_name(one)) + " in one iteration overwrites the " + buf_ +
             (reads ? " whose value " + other + " reads in another"
                    : " that " + other + " writes in another, and that value is read");
    }
    return std::nullopt;
  }

 private:
  const ScheduledFunc::Impl& m_;
  std::string buf_;
  isl::union_map theta_;       // instance -> schedule vector
  isl::union_map overwrites_;  // W -> W'
  isl::union_map flow_;        // W -> R
};

// The schedule respects a dependence when every pair's sink runs after its
// source: level by level, no sink may run earlier at dim k where dims
// 0..k-1 agree, and none may agree throughout. Fills p.zero; returns the
// first level at which the schedule runs a sink before its source (dims when
// at the same time), or -1.
int order_violation_level(DependencePair& p, int dims) {
  isl::set d = p.deltas ? *p.deltas : p.pairs;
  for (int k = 0; k < dims; ++k) {
    if (!p.at_dim(d, k, -1).is_empty()) return k;
    d = p.at_dim(d, k, 0);
    if (d.is_empty()) return -1;
    p.zero.push_back(d);
  }
  return dims;
}

// The pairs of instances of p whose schedule vectors agree on dims 0..level-1
// and, at `level`, have the sink's earlier (`later` false) or later.
isl::map pairs_at(const DependencePair& p, int level, bool later) {
  isl_map* t = p.times().release();
  for (int k = 0; k < level; ++k) t = isl_map_equate(t, isl_dim_in, k, isl_dim_out, k);
  if (level < isl_map_dim(t, isl_dim_out))
    t = later ? isl_map_order_lt(t, isl_dim_in, level, isl_dim_out, level)
              : isl_map_order_gt(t, isl_dim_in, level, isl_dim_out, level);
  isl::map times = isl::manage(t);
  return p.s_src.apply_range(times).apply_range(p.s_dst.reverse()).intersect(p.rel);
}

std::vector<DependencePair> dependence_pairs(const ScheduledFunc::Impl& m, int dims) {
  // Each computation's padded schedule, as a map and, when it is one, as a function.
  struct Schedule {
    isl::map map;
    std::optional<isl::pw_multi_aff> fn;
  };
  std::map<const CompModel*, Schedule> schedules;
  auto schedule_of = [&](const CompModel& c) -> const Schedule& {
    auto [it, added] = schedules.try_emplace(&c);
    if (added) {
      it->second.map = padded_schedule(c, dims);
      it->second.fn = schedule_function(c, dims);
    }
    return it->second;
  };
  std::vector<DependencePair> out;
  for (const auto& d : m.deps) {
    for (const auto& rel : maps_of(d.relation)) {
      const CompModel* src = m.find_tuple(domain_name(rel));
      const CompModel* dst = m.find_tuple(range_name(rel));
      if (!src || !dst) continue;
      const Schedule& s_src = schedule_of(*src);
      const Schedule& s_dst = schedule_of(*dst);
      DependencePair p{d, rel, *src, *dst, s_src.map, s_dst.map, rel.wrap(), {}, {}, {}, {}};
      // One piece each: with several (separate), the comparisons of the
      // pieces' functions, pair by pair, cost more than the projection.
      if (s_src.fn && s_dst.fn && s_src.fn->n_piece() == 1 && s_dst.fn->n_piece() == 1) {
        isl::space pair = rel.space();
        p.t_src = s_src.fn->pullback(isl::manage(isl_multi_aff_domain_map(pair.copy())));
        p.t_dst = s_dst.fn->pullback(isl::manage(isl_multi_aff_range_map(pair.release())));
      } else {
        p.deltas = p.times().deltas();
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::optional<Violation> find_violation(const ScheduledFunc::Impl& m) {
  int dims = schedule_dims(m);
  isl::ctx ctx = m.ctx.get();
  std::vector<DependencePair> pairs = dependence_pairs(m, dims);
  std::map<std::string, LiveRangeCheck> live;
  auto live_check = [&](const std::string& buf) -> const LiveRangeCheck& {
    auto it = live.find(buf);
    if (it == live.end()) it = live.emplace(buf, LiveRangeCheck(m, buf, dims)).first;
    return it->second;
  };
  std::set<std::string> reused;  // temps whose storage the schedule reuses otherwise
  for (DependencePair& p : pairs) {
    int level = order_violation_level(p, dims);
    if (level < 0) continue;
    if (p.dep.relaxable) {
      p.broken = true;
      reused.insert(p.dep.buf);
      continue;
    }
    return Violation{std::string("breaks the ") + kind_name(p.dep.kind) + " dependence from " +
                     p.src.name + " to " + p.dst.name + ": " +
                     describe_violation(p.dep, pairs_at(p, level, false), p.src, p.dst) +
                     ", but the schedule no longer runs " + p.src.name + " first"};
  }
  for (const auto& buf : reused)
    if (auto what = live_check(buf).broken())
      return Violation{"breaks a live range of temp " + buf + ": " + *what};
  // A loop bound to parallel hardware must carry no dependence between any
  // two instances that run inside it, whichever computations they belong to.
  // Static position q of c (0 past its own, as padded), asked once per
  // computation.
  std::map<const CompModel*, std::vector<std::optional<int64_t>>> statics;
  auto static_at = [&](const CompModel& c, int q) -> std::optional<int64_t> {
    auto [it, added] = statics.try_emplace(&c);
    if (added) it->second = static_values(c);
    return q <= c.loops() ? it->second[q] : 0;
  };
  // False when a's instances cannot lie inside c's loop at `level`: a
  // static position before it differs.
  auto may_share_loop = [&](const CompModel& a, const CompModel& c, int level) {
    for (int q = 0; 2 * q < level; ++q) {
      std::optional<int64_t> va = static_at(a, q), vc = static_at(c, q);
      if (va && vc && *va != *vc) return false;
    }
    return true;
  };
  // A computation's dependences on itself through the element it updates
  // (update_of) do not hold back a loop on parallel hardware (not vector
  // lanes) whose iterations update atomically or privatize the target.
  auto shared_update = [&](const DependencePair& p, const CompModel& c, int loop, ir::LoopTag t) {
    if (&p.src != &p.dst || p.dep.buf != p.src.target.buf || t == ir::LoopTag::Vectorize)
      return false;
    if (p.src.atomic) return true;
    return &p.src == &c && c.privatized.count(c.loop_names[loop]) > 0;
  };
  // For a loop that carries such a dependence: how to let it.
  auto update_hint = [&](const DependencePair& p, const CompModel& c, int loop, ir::LoopTag t) {
    if (&p.src != &p.dst || p.dep.buf != p.src.target.buf || !update_of(p.src))
      return std::string();
    std::string updates = "; " + p.src.name + " updates " + p.dep.buf + " in place";
    if (t == ir::LoopTag::Vectorize)
      return updates + ", and vector lanes cannot update one element together";
    std::string how = p.src.name + ".atomic()";
    if (&p.src == &c) how += " or " + c.name + ".privatize(" + c.loop_names[loop] + ")";
    return updates + ": " + how + " lets iterations update one element together";
  };
  // Whether a pair is carried at a level is asked once: several tagged loops
  // ask the same of a pair.
  std::map<std::pair<size_t, int>, bool> carried_at;
  for (const auto& c : m.comps) {
    for (int loop = 0; loop < c.loops(); ++loop) {
      ir::LoopTag t = c.tags[loop];
      if (t == ir::LoopTag::None || t == ir::LoopTag::Unroll || t == ir::LoopTag::UnrollExplicit)
        continue;
      int level = 2 * loop + 1;
      // The instances of this loop: c's schedule vectors cut after dim level - 1.
      std::optional<isl::set> in_loop;
      std::set<std::string> raced;  // temps checked for this loop
      for (size_t k = 0; k < pairs.size(); ++k) {
        const DependencePair& p = pairs[k];
        if (!may_share_loop(p.src, c, level)) continue;
        // Carried at `level`: deltas 0 before it and positive at it (the order
        // check above left no negative one).
        auto carried = [&] {
          if (static_cast<int>(p.zero.size()) < level) return false;
          auto [it, added] = carried_at.try_emplace({k, level}, false);
          if (added) {
            it->second = !p.at_dim(p.zero[level - 1], level, 1).is_empty();
          }
          return it->second;
        };
        if (!p.broken && !carried()) continue;
        if (shared_update(p, c, loop, t)) continue;
        if (!in_loop) {
          isl::set inside = c.domain_approx.apply(padded_schedule(c, dims));
          isl_set* prefix = isl_set_project_out(inside.release(), isl_dim_set, level, dims - level);
          prefix = isl_set_flat_product(
              prefix, isl_set_universe(isl_space_set_alloc(ctx.get(), 0, dims - level)));
          in_loop = isl::manage(prefix);
        }
        if (p.dep.relaxable) {
          // Iterations may share the temp's storage, one value after another,
          // but not run so that one overwrites a value another still reads.
          if (!raced.insert(p.dep.buf).second) continue;
          if (auto what = live_check(p.dep.buf).race(*in_loop, level))
            return Violation{std::string("loop '") + c.loop_names[loop] + "' of " + c.name +
                             " is tagged " + ir::loop_tag_name(t) +
                             " but its iterations share temp " + p.dep.buf + ": " + *what +
                             "; its iterations cannot run at the same time"};
          continue;
        }
        // Only pairs inside c's loop count: the same static prefix may also
        // hold other loops.
        isl::map carried_pairs = pairs_at(p, level, true);
        isl::map times =
            carried_pairs.apply_domain(p.s_src).apply_range(p.s_dst).intersect_domain(*in_loop);
        if (times.is_empty()) continue;
        isl::map instances =
            p.s_src.apply_range(times).apply_range(p.s_dst.reverse()).intersect(p.rel);
        return Violation{std::string("loop '") + c.loop_names[loop] + "' of " + c.name +
                         " is tagged " + ir::loop_tag_name(t) + " but carries the " +
                         kind_name(p.dep.kind) + " dependence from " + p.src.name + " to " +
                         p.dst.name + ": " + describe_violation(p.dep, instances, p.src, p.dst) +
                         "; its iterations cannot run at the same time" +
                         update_hint(p, c, loop, t)};
      }
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
