// The schedule primitives: each rewrites a computation's schedule map (PLANT's layered commands).
#include <isl/aff.h>
#include <isl/map.h>
#include <isl/set.h>
#include <isl/val.h>

#include <algorithm>
#include <optional>
#include <set>

#include "affine_function.h"
#include "model.h"

namespace kiln::poly {
namespace {

using Impl = ScheduledFunc::Impl;
using Arg = ir::ScheduleArg;

[[noreturn]] void fail(const SourceLoc& where, const std::string& msg) {
  throw CompileError(ErrorStage::Schedule, where, msg);
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s.empty() ? "(none)" : s;
}

Lin x(int k) { return Lin::var(k); }
Lin num(int64_t v) { return Lin::num(v); }

// { [x0, ..., x{n-1}] -> [out...] }
isl::map range_map(isl::ctx ctx, int n, const std::vector<Lin>& out) {
  return affine_map(plain_space(ctx, n), out);
}

std::vector<Lin> identity_out(int n) {
  std::vector<Lin> out;
  for (int k = 0; k < n; ++k) out.push_back(x(k));
  return out;
}

// Checks the argument count of a command.
void expect_args(const ir::ScheduleCommand& cmd, size_t n, const std::string& usage) {
  if (cmd.args.size() != n)
    fail(cmd.where, cmd.op + " expects " + std::to_string(n) + " argument" + (n == 1 ? "" : "s") +
                        ": " + usage + " (got " + std::to_string(cmd.args.size()) + ")");
}

const std::string& name_arg(const ir::ScheduleCommand& cmd, size_t i, const std::string& what) {
  const Arg& a = cmd.args[i];
  if (a.kind != Arg::Kind::Name || a.text.empty())
    fail(a.where, cmd.op + ": argument " + std::to_string(i + 1) + " must be " + what);
  return a.text;
}

int64_t int_arg(const Impl& m, const ir::ScheduleCommand& cmd, size_t i, const std::string& what) {
  const Arg& a = cmd.args[i];
  if (a.kind == Arg::Kind::Int) return a.number;
  if (a.kind == Arg::Kind::Name && !a.text.empty()) {
    if (const ir::Knob* k = m.func.find_knob(a.text)) {
      if (k->tag())
        fail(a.where, cmd.op + ": '" + a.text + "' is a tag knob: it names a tag (" + what +
                          " must be a number)");
      return k->value;
    }
    auto c = m.constants.find(a.text);
    if (c != m.constants.end()) return c->second;
    fail(a.where, cmd.op + ": '" + a.text + "' is not a knob or a compile-time param (" + what +
                      " must be a number)");
  }
  fail(a.where, cmd.op + ": argument " + std::to_string(i + 1) + " must be " + what);
}

int loop_index(const CompModel& c, const ir::ScheduleCommand& cmd, size_t i) {
  const std::string& n = name_arg(cmd, i, "a loop name");
  for (int k = 0; k < c.loops(); ++k)
    if (c.loop_names[k] == n) return k;
  fail(cmd.args[i].where,
       "'" + c.name + "' has no loop '" + n + "'; its loops are " + joined(c.loop_names));
}

void check_new_name(const CompModel& c, const ir::ScheduleCommand& cmd, size_t i,
                    const std::set<std::string>& replaced) {
  const std::string& n = name_arg(cmd, i, "a new loop name");
  for (const auto& l : c.loop_names)
    if (l == n && !replaced.count(n))
      fail(cmd.args[i].where, "'" + c.name + "' already has a loop named '" + n + "'");
}

// The range of c's schedule over its domain.
isl::set scheduled(const CompModel& c) { return c.domain_approx.apply(c.sched); }

// Makes room right after position v of static dimension q among the
// computations that share loops 0..q-1: those later than v move one place on.
void open_slot(Impl& m, const std::string& except, const std::vector<int64_t>& prefix, int q,
               int64_t v) {
  remap_static(m, except, prefix, q, StaticMove{.from = v + 1, .scale = 1, .shift = 1});
}

// { [x0, ..., xn-1] -> [..., xk-1, xo, 0, xi, xk+1, ...] : xk = f xo + xi, 0 <= xi < f }:
// dim k split by f, as constraints between the dims. (As a function, with
// xo = floor(xk / f) and xi = xk mod f, every map made from it carried the
// floor as an existential variable that later questions had to eliminate.)
isl::map split_map(isl::ctx ctx, int n, int k, int64_t f) {
  // Built the other way, from the split dims back to xk (an affine function),
  // then reversed.
  std::vector<Lin> back;
  for (int q = 0; q < n; ++q) back.push_back(q == k ? f * x(k) + x(k + 2) : x(q < k ? q : q + 2));
  isl_map* m = range_map(ctx, n + 2, back).release();
  m = isl_map_fix_si(m, isl_dim_in, static_cast<unsigned>(k + 1), 0);
  m = isl_map_lower_bound_si(m, isl_dim_in, static_cast<unsigned>(k + 2), 0);
  m = isl_map_upper_bound_val(m, isl_dim_in, static_cast<unsigned>(k + 2),
                              isl_val_int_from_si(ctx.get(), f - 1));
  return isl::manage(isl_map_reverse(m));
}

void split(CompModel& c, int p, int64_t f, const std::string& outer, const std::string& inner,
           isl::ctx ctx) {
  c.sched = c.sched.apply_range(split_map(ctx, 2 * c.loops() + 1, 2 * p + 1, f));
  c.loop_names[p] = outer;
  c.loop_names.insert(c.loop_names.begin() + p + 1, inner);
  c.tags.insert(c.tags.begin() + p + 1, ir::LoopTag::None);
}

void reorder(CompModel& c, const std::vector<int>& loops, isl::ctx ctx) {
  std::vector<int> slots = loops;
  std::sort(slots.begin(), slots.end());
  int n = 2 * c.loops() + 1;
  std::vector<Lin> out = identity_out(n);
  auto names = c.loop_names;
  auto tags = c.tags;
  for (size_t k = 0; k < slots.size(); ++k) {
    out[2 * slots[k] + 1] = x(2 * loops[k] + 1);
    names[slots[k]] = c.loop_names[loops[k]];
    tags[slots[k]] = c.tags[loops[k]];
  }
  c.sched = c.sched.apply_range(range_map(ctx, n, out));
  c.loop_names = names;
  c.tags = tags;
}

void cmd_split(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 4, "split(LOOP, FACTOR, OUTER, INNER)");
  int p = loop_index(c, cmd, 0);
  int64_t f = int_arg(m, cmd, 1, "the split factor");
  if (f <= 0) fail(cmd.args[1].where, "split factor must be positive, got " + std::to_string(f));
  check_new_name(c, cmd, 2, {c.loop_names[p]});
  check_new_name(c, cmd, 3, {c.loop_names[p]});
  if (cmd.args[2].text == cmd.args[3].text)
    fail(cmd.args[3].where, "the two new loops need different names");
  split(c, p, f, cmd.args[2].text, cmd.args[3].text, m.ctx.get());
}

void cmd_tile(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 8, "tile(I, J, FI, FJ, IO, JO, II, JI)");
  int pi = loop_index(c, cmd, 0), pj = loop_index(c, cmd, 1);
  if (pi == pj) fail(cmd.args[1].where, "tile needs two different loops");
  int64_t fi = int_arg(m, cmd, 2, "a tile size"), fj = int_arg(m, cmd, 3, "a tile size");
  if (fi <= 0) fail(cmd.args[2].where, "tile size must be positive, got " + std::to_string(fi));
  if (fj <= 0) fail(cmd.args[3].where, "tile size must be positive, got " + std::to_string(fj));
  std::set<std::string> replaced = {c.loop_names[pi], c.loop_names[pj]};
  std::set<std::string> fresh;
  for (size_t k = 4; k < 8; ++k) {
    check_new_name(c, cmd, k, replaced);
    if (!fresh.insert(cmd.args[k].text).second)
      fail(cmd.args[k].where, "tile's new loops need four different names");
  }
  std::string jname = c.loop_names[pj];
  split(c, pi, fi, cmd.args[4].text, cmd.args[6].text, m.ctx.get());
  int pj2 = static_cast<int>(std::find(c.loop_names.begin(), c.loop_names.end(), jname) -
                             c.loop_names.begin());
  split(c, pj2, fj, cmd.args[5].text, cmd.args[7].text, m.ctx.get());
  std::vector<int> order;
  for (size_t k : {4, 5, 6, 7})
    order.push_back(
        static_cast<int>(std::find(c.loop_names.begin(), c.loop_names.end(), cmd.args[k].text) -
                         c.loop_names.begin()));
  reorder(c, order, m.ctx.get());
}

void cmd_reorder(Impl& m, CompModel& c, const ir::ScheduleCommand& given) {
  ir::ScheduleCommand cmd = given;
  // An order knob: the loops of the order its value names.
  if (cmd.args.size() == 1 && cmd.args[0].kind == Arg::Kind::Name) {
    if (const ir::Knob* k = m.func.find_knob(cmd.args[0].text)) {
      if (k->orders.empty())
        fail(cmd.args[0].where,
             "reorder: knob '" + k->name + "' is not an order knob (knob order O of (a, b, c);)");
      ir::ScheduleArg loop = cmd.args[0];
      cmd.args.clear();
      for (const std::string& name : k->orders.at(static_cast<size_t>(k->value))) {
        loop.text = name;
        cmd.args.push_back(loop);
      }
    }
  }
  if (cmd.args.size() < 2)
    fail(cmd.where, "reorder expects at least two loops: reorder(A, B, ...)");
  std::vector<int> loops;
  for (size_t k = 0; k < cmd.args.size(); ++k) {
    int p = loop_index(c, cmd, k);
    if (std::find(loops.begin(), loops.end(), p) != loops.end())
      fail(cmd.args[k].where, "reorder names loop '" + c.loop_names[p] + "' twice");
    loops.push_back(p);
  }
  reorder(c, loops, m.ctx.get());
}

void cmd_fuse(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 3, "fuse(OUTER, INNER, FUSED)");
  int p = loop_index(c, cmd, 0), q = loop_index(c, cmd, 1);
  if (q != p + 1)
    fail(cmd.where, "fuse needs loop '" + cmd.args[1].text + "' directly inside '" +
                        cmd.args[0].text + "'; the loops are " + joined(c.loop_names));
  check_new_name(c, cmd, 2, {c.loop_names[p], c.loop_names[q]});
  isl::set r = c.domain.apply(c.sched);
  isl::val lo = r.dim_min_val(2 * q + 1), hi = r.dim_max_val(2 * q + 1);
  if (!lo.is_int() || !hi.is_int())
    fail(cmd.where, "fuse needs loop '" + c.loop_names[q] +
                        "' to have constant bounds (it depends on a run-time value)");
  int64_t l = lo.get_num_si(), extent = hi.get_num_si() - l + 1;
  int n = 2 * c.loops() + 1;
  std::vector<Lin> out;
  for (int k = 0; k < n; ++k) {
    if (k == 2 * p + 1)
      out.push_back(extent * x(k) + x(2 * q + 1) + num(-l));
    else if (k == 2 * p + 2 || k == 2 * q + 1)
      continue;
    else
      out.push_back(x(k));
  }
  c.sched = c.sched.apply_range(range_map(m.ctx.get(), n, out));
  c.loop_names[p] = cmd.args[2].text;
  c.loop_names.erase(c.loop_names.begin() + q);
  c.tags[p] = ir::LoopTag::None;
  c.tags.erase(c.tags.begin() + q);
}

void cmd_skew(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 3, "skew(I, J, FACTOR)");
  int p = loop_index(c, cmd, 0), q = loop_index(c, cmd, 1);
  if (p == q) fail(cmd.args[1].where, "skew needs two different loops");
  int64_t f = int_arg(m, cmd, 2, "the skew factor");
  int n = 2 * c.loops() + 1;
  std::vector<Lin> out = identity_out(n);
  out[2 * q + 1] = x(2 * q + 1) + f * x(2 * p + 1);
  c.sched = c.sched.apply_range(range_map(m.ctx.get(), n, out));
}

void cmd_shift(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 2, "shift(LOOP, AMOUNT)");
  int p = loop_index(c, cmd, 0);
  int64_t v = int_arg(m, cmd, 1, "the shift amount");
  int n = 2 * c.loops() + 1;
  std::vector<Lin> out = identity_out(n);
  out[2 * p + 1] = x(2 * p + 1) + num(v);
  c.sched = c.sched.apply_range(range_map(m.ctx.get(), n, out));
}

void cmd_after(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 2, "after(COMPUTATION, LOOP) or after(COMPUTATION, root)");
  const std::string& dname = name_arg(cmd, 0, "a computation name");
  if (dname == c.name) fail(cmd.args[0].where, "a computation cannot run after itself");
  CompModel* d = m.find(dname);
  if (!d) {
    if (m.func.find_comp(dname))
      fail(cmd.args[0].where, "'" + dname + "' is inlined into its users and has no loops");
    fail(cmd.args[0].where, "unknown computation '" + dname + "'");
  }
  int level = -1;
  if (name_arg(cmd, 1, "a loop name or root") != "root") level = loop_index(c, cmd, 1);
  if (level >= d->loops())
    fail(cmd.args[1].where, "'" + d->name + "' has only " + std::to_string(d->loops()) +
                                " loops; it cannot share loop '" + cmd.args[1].text + "' with '" +
                                c.name + "'");
  std::vector<int64_t> prefix;
  for (int q = 0; q <= level + 1; ++q) {
    auto v = static_value(*d, q);
    if (!v)
      fail(cmd.where, "'" + d->name + "' is split into pieces at loop level " + std::to_string(q) +
                          " (separate); apply after before separate");
    prefix.push_back(*v);
  }
  open_slot(m, c.name, prefix, level + 1, prefix[level + 1]);
  int n = 2 * c.loops() + 1;
  std::vector<Lin> out = identity_out(n);
  for (int q = 0; q <= level; ++q) out[2 * q] = num(prefix[q]);
  out[2 * (level + 1)] = num(prefix[level + 1] + 1);
  c.sched = c.sched.apply_range(range_map(m.ctx.get(), n, out));
}

// separate(i, F): instances of loop i in complete groups of F (counted from
// the loop's lowest value) stay; the rest move to a second copy of the loop
// that runs right after the first.
void cmd_separate(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 2, "separate(LOOP, FACTOR)");
  int p = loop_index(c, cmd, 0);
  int64_t f = int_arg(m, cmd, 1, "the factor");
  if (f <= 0) fail(cmd.args[1].where, "separate factor must be positive, got " + std::to_string(f));
  int n = 2 * c.loops() + 1;
  std::vector<int64_t> prefix;
  for (int q = 0; q <= p; ++q) {
    auto v = static_value(c, q);
    if (!v) fail(cmd.where, "'" + c.name + "' is already separated at an outer level");
    prefix.push_back(*v);
  }
  isl::ctx ctx = m.ctx.get();
  // P: the values loop i takes; lo and hi its extremes.
  isl::set r = scheduled(c);
  isl_set* proj = isl_set_project_out(r.copy(), isl_dim_set, 2 * p + 2, n - 2 * p - 2);
  proj = isl_set_project_out(proj, isl_dim_set, 0, 2 * p + 1);
  isl::set P = isl::manage(proj);
  isl::set lo = P.lexmin(), hi = P.lexmax();
  isl_set* lht = isl_set_flat_product(isl_set_flat_product(lo.copy(), hi.copy()), P.copy());
  std::string full_cond = "{ [l, h, t] : t - ((t - l) mod " + std::to_string(f) + ") + " +
                          std::to_string(f - 1) + " <= h }";
  isl::set full3 = isl::manage(lht).intersect(isl::set(ctx, full_cond));
  isl::set full = isl::manage(isl_set_project_out(full3.release(), isl_dim_set, 0, 2));
  // Pull the condition back to the schedule space.
  isl_multi_aff* pick = affine_function(plain_space(ctx, n), {x(2 * p + 1)}).release();
  isl::set in_full = isl::manage(isl_set_preimage_multi_aff(full.release(), pick));

  // Static positions at this level are doubled once, so that the remainder
  // of every computation separated here lands in the same odd slot right
  // after its full part: computations that shared the loop share both copies.
  std::vector<int64_t> outer(prefix.begin(), prefix.begin() + p);
  if (m.separated.insert({outer, p}).second) {
    remap_static(m, "", outer, p, StaticMove{.from = std::nullopt, .scale = 2, .shift = 0});
    prefix[p] = *static_value(c, p);
  }
  std::vector<Lin> rest_out = identity_out(n);
  rest_out[2 * p] = num(prefix[p] + 1);
  isl::map keep = range_map(ctx, n, identity_out(n)).intersect_domain(in_full);
  isl::map move = range_map(ctx, n, rest_out).intersect_domain(in_full.complement());
  c.sched = c.sched.apply_range(keep.unite(move));
}

void cmd_tag(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 2, "tag(LOOP, TAG)");
  int p = loop_index(c, cmd, 0);
  std::string t = name_arg(cmd, 1, "a tag");
  if (const ir::Knob* k = m.func.find_knob(t)) {
    if (!k->tag())
      fail(cmd.args[1].where, "tag: knob '" + t +
                                  "' is a number; a tag knob names tags (knob T = parallel in "
                                  "[none, parallel];)");
    t = *k->tag();
  }
  auto tag = ir::loop_tag_from_name(t);
  if (!tag)
    fail(cmd.args[1].where,
         "unknown tag '" + t +
             "'; tags are parallel, vectorize, unroll, unroll_explicit, gpu_block_x, gpu_block_y, "
             "gpu_block_z, gpu_thread_x, gpu_thread_y, gpu_thread_z, mma, none");
  c.tags[p] = *tag;
}

void cmd_apply_sch(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 1, "apply_sch(\"{ [i, j] -> [j, i] }\")");
  if (cmd.args[0].kind != Arg::Kind::Text)
    fail(cmd.args[0].where, "apply_sch expects an isl map in quotes");
  isl::ctx ctx = m.ctx.get();
  isl_map* raw = isl_map_read_from_str(ctx.get(), cmd.args[0].text.c_str());
  if (!raw) {
    isl_union_map* pieces = isl_union_map_read_from_str(ctx.get(), cmd.args[0].text.c_str());
    isl_size spaces = pieces ? isl_union_map_n_map(pieces) : 0;
    isl_union_map_free(pieces);
    if (spaces > 1)
      fail(cmd.args[0].where, "apply_sch: \"" + cmd.args[0].text +
                                  "\" is a union of maps of different shapes; a schedule map is "
                                  "one map: give every piece the same inputs and outputs");
    fail(cmd.args[0].where, "apply_sch: cannot parse isl map \"" + cmd.args[0].text + "\"");
  }
  // The map takes c's loops; a name on them must be c's (another statement's
  // map given to c by mistake would otherwise be taken without a word).
  if (isl_map_has_tuple_name(raw, isl_dim_in) == isl_bool_true) {
    std::string named = isl_map_get_tuple_name(raw, isl_dim_in);
    if (named != c.name && named != isl_name(c.name)) {
      isl_map_free(raw);
      fail(cmd.args[0].where, "apply_sch: the map is for '" + named + "', but it is applied to '" +
                                  c.name + "'; name its input '" + c.name +
                                  "' or leave it unnamed");
    }
  }
  raw = isl_map_reset_tuple_id(isl_map_reset_tuple_id(raw, isl_dim_in), isl_dim_out);
  // Its params must be the func's: a compile-time one takes its value, an
  // unknown name is refused here rather than left for code generation.
  for (int p = static_cast<int>(isl_map_dim(raw, isl_dim_param)) - 1; p >= 0; --p) {
    unsigned pos = static_cast<unsigned>(p);
    std::string name = isl_map_get_dim_name(raw, isl_dim_param, pos);
    if (std::any_of(m.runtime_params.begin(), m.runtime_params.end(),
                    [&](const std::string& r) { return isl_name(r) == name; }))
      continue;
    auto constant = std::find_if(m.constants.begin(), m.constants.end(),
                                 [&](const auto& kv) { return isl_name(kv.first) == name; });
    if (constant == m.constants.end()) {
      isl_map_free(raw);
      std::vector<std::string> known = m.runtime_params;
      for (const auto& kv : m.constants) known.push_back(kv.first);
      fail(cmd.args[0].where, "apply_sch: the map uses '" + name + "', which is not a param of " +
                                  m.func.name +
                                  (known.empty() ? " (it has none)" : " (" + joined(known) + ")"));
    }
    raw =
        isl_map_fix_val(raw, isl_dim_param, pos, isl_val_int_from_si(ctx.get(), constant->second));
    raw = isl_map_project_out(raw, isl_dim_param, pos, 1);
  }
  isl::map u = isl::manage(raw);
  int in = static_cast<int>(u.domain_tuple_dim()), out = static_cast<int>(u.range_tuple_dim());
  if (in != c.loops())
    fail(cmd.args[0].where, "apply_sch: the map takes " + std::to_string(in) + " loops but '" +
                                c.name + "' has " + std::to_string(c.loops()) + " (" +
                                joined(c.loop_names) + ")");
  if (out == 0) fail(cmd.args[0].where, "apply_sch: the map must produce at least one loop");
  int n = 2 * c.loops() + 1;
  std::vector<Lin> dyn;
  for (int k = 0; k < c.loops(); ++k) dyn.push_back(x(2 * k + 1));
  isl::map extract = range_map(ctx, n, dyn);
  isl::map first = range_map(ctx, n, {x(0)});
  isl::map moved =
      isl::manage(isl_map_flat_range_product(first.release(), extract.apply_range(u).release()));
  std::vector<Lin> spread = {x(0)};
  for (int k = 0; k < out; ++k) {
    spread.push_back(x(k + 1));
    spread.push_back(num(0));
  }
  c.sched = c.sched.apply_range(moved).apply_range(range_map(ctx, out + 1, spread));
  std::vector<std::string> names;
  for (int k = 0; k < out; ++k) {
    const char* nm = isl_map_get_dim_name(u.get(), isl_dim_out, k);
    if (nm && *nm) {
      names.push_back(nm);
      continue;
    }
    // An output that is one of the old loops keeps that loop's name.
    std::string kept;
    for (int q = 0; q < in && kept.empty(); ++q) {
      std::vector<std::string> ins, outs;
      for (int i = 0; i < in; ++i) ins.push_back("i" + std::to_string(i));
      for (int o = 0; o < out; ++o) outs.push_back("o" + std::to_string(o));
      std::string eq = "{ [" + joined(ins) + "] -> [" + joined(outs) + "] : o" + std::to_string(k) +
                       " = i" + std::to_string(q) + " }";
      if (u.is_subset(isl::map(ctx, eq))) kept = c.loop_names[q];
    }
    names.push_back(kept.empty() ? "t" + std::to_string(k) : kept);
  }
  std::set<std::string> seen;
  for (auto& nm : names)
    if (!seen.insert(nm).second)
      fail(cmd.args[0].where, "apply_sch: two loops would be named '" + nm + "'");
  c.loop_names = names;
  c.tags.assign(out, ir::LoopTag::None);
  // Total on the domain: an instance the map leaves out would never run.
  isl::set dropped = c.domain.subtract(c.sched.domain());
  if (!dropped.is_empty())
    fail(cmd.args[0].where, "apply_sch: the map leaves out instances of '" + c.name + "' (" +
                                to_str(dropped.coalesce()) +
                                "), which would never run; a schedule map must give every "
                                "instance a time");
  if (!c.sched.is_injective())
    fail(cmd.args[0].where, "apply_sch: the map is not one-to-one on '" + c.name +
                                "' (two instances would run at the same time)");
}

void cmd_set_loc(Impl& m, const ir::ScheduleCommand& cmd) {
  expect_args(cmd, 1, "set_loc(LOCATION)");
  const std::string& l = name_arg(cmd, 0, "a memory location");
  auto loc = ir::mem_loc_from_name(l);
  if (!loc)
    fail(cmd.args[0].where, "unknown memory location '" + l +
                                "'; locations are heap, stack, gpu_global, gpu_shared, gpu_local, "
                                "gpu_constant");
  m.buf_locs[cmd.target] = *loc;
}

}  // namespace

// The value of static dimension q of c, which must be the same for all its instances.
namespace {

// Static dim q of the schedule vectors `r` of a computation's instances,
// when it is one value.
std::optional<int64_t> static_value_of(const isl::set& r, int q) {
  if (r.is_empty()) return 0;
  isl::val lo = r.dim_min_val(2 * q), hi = r.dim_max_val(2 * q);
  if (!lo.is_int() || !hi.is_int() || !lo.eq(hi)) return std::nullopt;
  return lo.get_num_si();
}

// Static dim q of c when every piece of its schedule map fixes it to one
// value, as schedules are until separate splits a computation into pieces.
// isl sees it in the map's equalities, where static_value_of takes the image
// of the domain and its extremes (a tenth of a GEMM candidate's isl time).
std::optional<int64_t> plainly_fixed(const CompModel& c, int q) {
  isl::val v = isl::manage(
      isl_map_plain_get_val_if_fixed(c.sched.get(), isl_dim_out, static_cast<unsigned>(2 * q)));
  if (v.is_null() || !v.is_int()) return std::nullopt;
  return v.get_num_si();
}

}  // namespace

std::optional<int64_t> static_value(const CompModel& c, int q) {
  if (auto v = plainly_fixed(c, q)) return v;
  return static_value_of(c.domain_approx.apply(c.sched), q);
}

std::vector<std::optional<int64_t>> static_values(const CompModel& c) {
  std::vector<std::optional<int64_t>> out;
  for (int q = 0; q <= c.loops(); ++q) out.push_back(plainly_fixed(c, q));
  if (std::all_of(out.begin(), out.end(), [](const auto& v) { return v.has_value(); })) return out;
  isl::set r = c.domain_approx.apply(c.sched);
  for (int q = 0; q <= c.loops(); ++q)
    if (!out[q]) out[q] = static_value_of(r, q);
  return out;
}

// Rewrites static dimension q of the computations whose static dims 0..q-1
// equal `prefix` (they share loops 0..q-1 with each other): the positions
// `move` moves get their new value.
void remap_static(Impl& m, const std::string& except, const std::vector<int64_t>& prefix, int q,
                  const StaticMove& move) {
  for (auto& e : m.comps) {
    if (e.name == except || e.loops() < q) continue;
    int n = 2 * e.loops() + 1;
    // Static dims 0..q fixed by every piece of e's map: e moves whole, to a
    // constant, or stays.
    std::vector<int64_t> fixed;
    for (int k = 0; k <= q; ++k) {
      std::optional<int64_t> v = plainly_fixed(e, k);
      if (!v) break;
      fixed.push_back(*v);
    }
    if (static_cast<int>(fixed.size()) == q + 1) {
      if (std::equal(prefix.begin(), prefix.begin() + q, fixed.begin()) && move.moves(fixed[q])) {
        std::vector<Lin> out = identity_out(n);
        out[2 * q] = num(move(fixed[q]));
        e.sched = e.sched.apply_range(range_map(m.ctx.get(), n, out));
      }
      continue;
    }
    // Otherwise its pieces where the prefix and `move` hold move, the others stay.
    isl_set* where = isl_set_universe(isl_space_set_alloc(m.ctx.get().get(), 0, n));
    for (int k = 0; k < q; ++k) where = isl_set_fix_si(where, isl_dim_set, 2 * k, prefix[k]);
    if (move.from) where = isl_set_lower_bound_si(where, isl_dim_set, 2 * q, *move.from);
    isl::set moved_dom = isl::manage(where);
    std::vector<Lin> out = identity_out(n);
    out[2 * q] = move.scale * x(2 * q) + num(move.shift);
    isl::map moved = range_map(m.ctx.get(), n, out).intersect_domain(moved_dom);
    isl::map stay =
        range_map(m.ctx.get(), n, identity_out(n)).intersect_domain(moved_dom.complement());
    e.sched = e.sched.apply_range(moved.unite(stay));
  }
}

void apply_command(Impl& m, const ir::ScheduleCommand& cmd) {
  using ir::ScheduleOp;
  std::optional<ScheduleOp> op = cmd.kind();
  if (!op) {
    fail(cmd.where,
         "unknown schedule command '" + cmd.op + "'; commands are " + ir::schedule_op_list());
  }
  if (*op == ScheduleOp::SetLoc) {
    if (!m.func.find_buf(cmd.target))
      fail(cmd.where,
           "set_loc applies to a buffer; '" + cmd.target + "' is not a buffer of " + m.func.name);
    cmd_set_loc(m, cmd);
    return;
  }
  const ir::Comp* comp = m.func.find_comp(cmd.target);
  if (!comp) {
    if (m.func.find_buf(cmd.target))
      fail(cmd.where, "'" + cmd.target + "' is a buffer; " + cmd.op + " applies to computations");
    fail(cmd.where, "unknown computation '" + cmd.target + "' in " + m.func.name);
  }
  if (*op == ScheduleOp::Store || *op == ScheduleOp::StoreAt) return;  // applied with the model
  CompModel* c = m.find(cmd.target);
  if (*op == ScheduleOp::Inline) {
    expect_args(cmd, 0, "inline()");
    if (comp->store)
      fail(cmd.where, "'" + comp->name + "' writes buffer '" + comp->store->buf +
                          "'; only value computations (compute NAME(...) = expr) can be inlined");
    if (c) fail(cmd.where, "'" + comp->name + "' is both stored (store/store_at) and inlined");
    return;
  }
  if (!c)
    fail(cmd.where, "'" + cmd.target +
                        "' is a value computation inlined into its users, so it has no loops to " +
                        cmd.op + "; store it first (store_at)");
  // A tag names a loop; every other loop schedule changes the loops a memory schedule used.
  if (c->memory_scheduled && *op != ScheduleOp::Tag && *op != ScheduleOp::Atomic &&
      *op != ScheduleOp::Privatize && !ir::is_memory_schedule(*op))
    fail(cmd.where, "loop schedules of '" + c->name +
                        "' must come before its memory schedules (line " +
                        std::to_string(c->memory_scheduled->line) + "), which depend on its loops");
  switch (*op) {
    case ScheduleOp::CacheIdentity:
    case ScheduleOp::Cache:
      return cmd_cache_identity(m, *c, cmd);
    case ScheduleOp::AllocAt:
      return cmd_alloc_at(m, *c, cmd);
    case ScheduleOp::Atomic:
      return cmd_atomic(m, *c, cmd);
    case ScheduleOp::Privatize:
      return cmd_privatize(m, *c, cmd);
    case ScheduleOp::Split:
      return cmd_split(m, *c, cmd);
    case ScheduleOp::Tile:
      return cmd_tile(m, *c, cmd);
    case ScheduleOp::Reorder:
      return cmd_reorder(m, *c, cmd);
    case ScheduleOp::Fuse:
      return cmd_fuse(m, *c, cmd);
    case ScheduleOp::Skew:
      return cmd_skew(m, *c, cmd);
    case ScheduleOp::Shift:
      return cmd_shift(m, *c, cmd);
    case ScheduleOp::After:
      return cmd_after(m, *c, cmd);
    case ScheduleOp::Separate:
      return cmd_separate(m, *c, cmd);
    case ScheduleOp::Tag:
      return cmd_tag(m, *c, cmd);
    case ScheduleOp::ApplySch:
      return cmd_apply_sch(m, *c, cmd);
    case ScheduleOp::SetLoc:
    case ScheduleOp::Store:
    case ScheduleOp::StoreAt:
    case ScheduleOp::Inline:
      return;  // handled above
  }
}

}  // namespace kiln::poly
