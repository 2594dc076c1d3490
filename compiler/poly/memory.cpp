// Memory schedules: cache_identity (a local copy of what a loop reads) and alloc_at.
#include <isl/aff.h>
#include <isl/id.h>
#include <isl/map.h>
#include <isl/set.h>
#include <isl/space.h>
#include <isl/val.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "affine_function.h"
#include "affine_printer.h"
#include "kiln/analysis.h"
#include "model.h"
#include "stored_relation.h"

namespace kiln::poly {
namespace {

using Impl = ScheduledFunc::Impl;

[[noreturn]] void fail(const SourceLoc& where, const std::string& msg) {
  throw CompileError(ErrorStage::Schedule, where, msg);
}

int64_t to_int(isl_val* v) {
  int64_t x = isl_val_get_num_si(v);
  isl_val_free(v);
  return x;
}

int loop_of(const CompModel& c, const ir::ScheduleArg& a, const std::string& op) {
  if (a.kind != ir::ScheduleArg::Kind::Name || a.text.empty())
    fail(a.where, op + ": expected a loop name of '" + c.name + "'");
  for (int k = 0; k < c.loops(); ++k)
    if (c.loop_names[k] == a.text) return k;
  std::string names;
  for (const auto& n : c.loop_names) names += (names.empty() ? "" : ", ") + n;
  fail(a.where, "'" + c.name + "' has no loop '" + a.text + "'; its loops are " + names);
}

// A buffer name not used yet in f.
std::string fresh_buffer(const ir::Func& f, const std::string& want) {
  std::string name = want;
  for (int k = 2; f.find_buf(name) || f.find_comp(name) || f.find_param(name); ++k)
    name = want + std::to_string(k);
  return name;
}

// Replaces every read of one buffer.
class RedirectLoads : public ir::IRMutator {
 public:
  RedirectLoads(std::string from, std::function<ir::Expr(const ir::Load&)> to)
      : from_(std::move(from)), to_(std::move(to)) {}

 protected:
  ir::Expr mutate_load(const ir::Expr& e, const ir::Load& n) override {
    if (n.buf != from_) return ir::IRMutator::mutate_load(e, n);
    return to_(n);
  }

 private:
  std::string from_;
  std::function<ir::Expr(const ir::Load&)> to_;
};

// a - b, leaving a alone when b is zero.
ir::Expr minus(const ir::Expr& a, const ir::Expr& b) {
  if (auto* z = ir::as<ir::IntImm>(b); z && z->value == 0) return a;
  return ir::binary(ir::BinaryOp::Sub, a, b);
}

}  // namespace

ir::Expr aff_to_expr(const isl::aff& a, const std::vector<ir::Expr>& inputs) {
  isl_aff* raw = a.get();
  int64_t den = to_int(isl_aff_get_denominator_val(raw));
  auto scaled = [&](isl_val* v) {  // v * den, which is an integer
    isl_val* s = isl_val_mul(v, isl_val_int_from_si(isl_aff_get_ctx(raw), den));
    return to_int(s);
  };
  ir::Expr sum = ir::int_imm(scaled(isl_aff_get_constant_val(raw)));
  auto add = [&](int64_t coef, const ir::Expr& term) {
    if (coef == 0) return;
    auto* z = ir::as<ir::IntImm>(sum);
    bool zero = z && z->value == 0;
    int64_t mag = (coef < 0 && !zero) ? -coef : coef;
    ir::Expr t = mag == 1 ? term : ir::binary(ir::BinaryOp::Mul, ir::int_imm(mag), term);
    if (zero)
      sum = t;
    else
      sum = ir::binary(coef < 0 ? ir::BinaryOp::Sub : ir::BinaryOp::Add, sum, t);
  };
  int n_in = static_cast<int>(isl_aff_dim(raw, isl_dim_in));
  for (int k = 0; k < n_in; ++k)
    add(scaled(isl_aff_get_coefficient_val(raw, isl_dim_in, k)), inputs.at(k));
  int n_par = static_cast<int>(isl_aff_dim(raw, isl_dim_param));
  for (int k = 0; k < n_par; ++k) {
    int64_t coef = scaled(isl_aff_get_coefficient_val(raw, isl_dim_param, k));
    if (coef) add(coef, ir::var(isl_aff_get_dim_name(raw, isl_dim_param, k)));
  }
  int n_div = static_cast<int>(isl_aff_dim(raw, isl_dim_div));
  for (int k = 0; k < n_div; ++k) {
    int64_t coef = scaled(isl_aff_get_coefficient_val(raw, isl_dim_div, k));
    if (!coef) continue;
    isl::aff div = isl::manage(isl_aff_get_div(raw, k));
    // div is a rational expression; the div variable is its floor.
    int64_t dd = to_int(isl_aff_get_denominator_val(div.get()));
    isl::aff whole =
        isl::manage(isl_aff_scale_val(div.copy(), isl_val_int_from_si(isl_aff_get_ctx(raw), dd)));
    ir::Expr e = aff_to_expr(whole, inputs);
    if (dd != 1) e = ir::binary(ir::BinaryOp::Div, e, ir::int_imm(dd));
    add(coef, e);
  }
  if (den != 1) sum = ir::binary(ir::BinaryOp::Div, sum, ir::int_imm(den));
  return sum;
}

namespace {

// isl's C++ interface has no operations on dims by position: these take and
// give owned handles around the C calls.
isl::map project_out_inputs(isl::map m, int first, int n) {
  return isl::manage(isl_map_project_out(m.release(), isl_dim_in, first, n));
}
isl::set project_out(isl::set s, int first, int n) {
  return isl::manage(isl_set_project_out(s.release(), isl_dim_set, first, n));
}
isl::map without_tuple_ids(isl::map m) {
  return isl::manage(
      isl_map_reset_tuple_id(isl_map_reset_tuple_id(m.release(), isl_dim_in), isl_dim_out));
}
isl::set without_tuple_id(isl::set s) { return isl::manage(isl_set_reset_tuple_id(s.release())); }
// s as the statement `name` with its dims named `dims`.
isl::set named(isl::set s, const std::string& name, const std::vector<std::string>& dims) {
  isl_set* raw = isl_set_set_tuple_name(s.release(), isl_name(name).c_str());
  for (size_t k = 0; k < dims.size(); ++k) {
    raw =
        isl_set_set_dim_name(raw, isl_dim_set, static_cast<unsigned>(k), isl_name(dims[k]).c_str());
  }
  return isl::manage(raw);
}
// Output dim k of m alone.
isl::map output_dim(isl::map m, int k) {
  int n = static_cast<int>(isl_map_dim(m.get(), isl_dim_out));
  isl_map* raw = isl_map_project_out(m.release(), isl_dim_out, k + 1, n - k - 1);
  return isl::manage(isl_map_project_out(raw, isl_dim_out, 0, k));
}
// How messages name loop L of c: its name, or the top level for root (-1).
std::string loop_label(const CompModel& c, int p) {
  return p < 0 ? std::string("root") : c.loop_names[p];
}

// For each dim of set after its first `outer`: whether the outer dims leave
// it more than one value.
std::vector<bool> dims_that_vary(const isl::set& set, int outer) {
  isl_map* raw = isl_map_from_range(set.copy());
  raw = isl_map_move_dims(raw, isl_dim_in, 0, isl_dim_out, 0, static_cast<unsigned>(outer));
  isl::map inner = isl::manage(raw);
  int n = static_cast<int>(isl_map_dim(inner.get(), isl_dim_out));
  std::vector<bool> varies;
  for (int d = 0; d < n; ++d) varies.push_back(!output_dim(inner, d).is_single_valued());
  return varies;
}
int outputs_of(const isl::multi_aff& f) {
  return static_cast<int>(isl_multi_aff_dim(f.get(), isl_dim_out));
}

// A parallel copy's loop is one of at least this many iterations when it has
// one (below it, threads wait on the last share), unless only the innermost has.
constexpr int64_t kMinSharedTrips = 16;

// The shortest row of a CPU copy that is written as one vector when it is not
// a run of B (a gather; shorter rows as 4-lane gathers ran slower than scalar
// copies).
constexpr int64_t kMinVectorRow = 8;

// What a cache command asks for, its arguments checked.
struct CacheRequest {
  const ir::Buf* src;  // B
  int loop;            // L, as an index into c's loops
  ir::MemLoc loc;
  bool manual;    // cache (shape and map given) rather than cache_identity
  bool parallel;  // the copy's outermost loop that varies runs in parallel
  bool cpu;       // a copy in CPU memory (heap, stack), made by CPU threads
};

CacheRequest parse_cache_request(const Impl& m, const CompModel& c,
                                 const ir::ScheduleCommand& cmd) {
  CacheRequest r{};
  r.manual = cmd.is(ir::ScheduleOp::Cache);
  // An optional last argument, `parallel`, shares the copy out among threads.
  const size_t n = r.manual ? 5 : 3;
  if (cmd.args.size() == n + 1) {
    const ir::ScheduleArg& parg = cmd.args[n];
    if (parg.kind != ir::ScheduleArg::Kind::Name ||
        ir::loop_tag_from_name(parg.text) != ir::LoopTag::Parallel)
      fail(parg.where, cmd.op + ": the argument after " +
                           (r.manual ? std::string("the map") : std::string("the location")) +
                           " can only be 'parallel' (the copy's outermost loop runs in "
                           "parallel), not '" +
                           parg.text + "'");
    r.parallel = true;
  } else if (!r.manual && cmd.args.size() != n) {
    fail(cmd.where,
         "cache_identity expects 3 or 4 arguments: cache_identity(BUFFER, LOOP, LOCATION[, "
         "parallel])");
  } else if (r.manual && cmd.args.size() != n) {
    fail(cmd.where,
         "cache expects 5 or 6 arguments: cache(BUFFER, LOOP, LOCATION, [SIZES], \"{ [e0, ...] "
         "-> [c0, ...] }\"[, parallel])");
  }
  const ir::ScheduleArg& barg = cmd.args[0];
  if (barg.kind != ir::ScheduleArg::Kind::Name || barg.text.empty())
    fail(barg.where, "cache_identity: expected the name of the buffer to cache");
  r.src = m.func.find_buf(barg.text);
  if (!r.src) fail(barg.where, "unknown buffer '" + barg.text + "'");
  // root: one copy before c's loops, of all c reads.
  const ir::ScheduleArg& larg0 = cmd.args[1];
  r.loop = larg0.kind == ir::ScheduleArg::Kind::Name && larg0.text == "root"
               ? -1
               : loop_of(c, larg0, "cache_identity");
  const ir::ScheduleArg& larg = cmd.args[2];
  auto loc =
      larg.kind == ir::ScheduleArg::Kind::Name ? ir::mem_loc_from_name(larg.text) : std::nullopt;
  if (!loc)
    fail(larg.where, cmd.op + ": unknown memory location '" + larg.text +
                         "'; locations are heap, stack, gpu_global, gpu_shared, gpu_local, "
                         "gpu_constant");
  r.loc = *loc;
  r.cpu = r.loc == ir::MemLoc::Heap || r.loc == ir::MemLoc::Stack;
  if (r.parallel && !r.cpu)
    fail(cmd.args.back().where,
         cmd.op + ": parallel shares a copy out among CPU threads; a copy into " + larg.text +
             " inside a GPU kernel is already shared out among the block's threads");
  if (r.src->shape.empty())
    fail(barg.where, "cache_identity: '" + r.src->name + "' is a scalar; nothing to cache");
  return r;
}

// The values of c's static schedule dims through loop L (prefix), and of the
// one just inside it (inner): the copy runs at c's place inside L, so c must
// be one piece there.
struct StaticPlace {
  std::vector<int64_t> prefix;
  int64_t inner = 0;
};

StaticPlace static_place(const CompModel& c, int p, const ir::ScheduleCommand& cmd) {
  StaticPlace place;
  for (int q = 0; q <= p; ++q) {
    auto v = static_value(c, q);
    if (!v)
      fail(cmd.where, "cache_identity: '" + c.name +
                          "' is split into pieces (separate) above loop '" + loop_label(c, p) +
                          "'");
    place.prefix.push_back(*v);
  }
  auto inner = static_value(c, p + 1);
  if (!inner)
    fail(cmd.where, "cache_identity: '" + c.name + "' is split into pieces inside loop '" +
                        loop_label(c, p) + "'");
  place.inner = *inner;
  return place;
}

// Nobody may write B inside loop L: the copy would go stale.
void check_not_written_inside(const Impl& m, const CompModel& c, int p, const StaticPlace& place,
                              const std::string& bname, const ir::ScheduleCommand& cmd) {
  for (const auto& e : m.comps) {
    bool shares = e.loops() > p;
    for (int q = 0; shares && q <= p; ++q) shares = static_value(e, q) == place.prefix[q];
    // At root the copy runs right before c's loops: only what runs inside them can stale it.
    if (p < 0) shares = static_value(e, 0) == place.inner;
    if (!shares) continue;
    for (const auto& w : maps_of(e.writes))
      if (range_name(w) == isl_name(bname))
        fail(cmd.where, p < 0 ? "cache_identity: '" + e.name + "' writes '" + bname +
                                    "' inside the loops of '" + c.name +
                                    "', so a copy made before them (root) would be stale"
                              : "cache_identity: '" + e.name + "' writes '" + bname +
                                    "' inside loop '" + c.loop_names[p] +
                                    "', so a copy made at the start of the loop would be stale");
  }
}

// What c reads of B, per iteration of L: prefix_of maps c's instances to the
// schedule dims through L; footprint maps that prefix to the elements read.
struct Footprint {
  isl::map prefix_of;
  isl::map reads;
  isl::map footprint;  // only elements inside B: what the copy reads
  isl::map extent;     // every element an access relation names: what sizes the copy
};

Footprint footprint_of(const Impl& m, const CompModel& c, int p, const std::string& bname,
                       const ir::ScheduleArg& barg) {
  isl::ctx ctx = m.ctx.get();
  const int n = 2 * c.loops() + 1;
  const int outer = 2 * p + 2;  // schedule dims up to and including loop L
  isl::union_map reads_b = isl::union_map::empty(ctx);
  for (const auto& r : maps_of(c.reads))
    if (range_name(r) == isl_name(bname))
      reads_b = reads_b.unite(isl::union_map(r.intersect_domain(c.domain)));
  if (reads_b.is_empty())
    fail(barg.where, "cache_identity: '" + c.name + "' does not read '" + bname + "'");
  Footprint f;
  f.reads = reads_b.as_map();
  isl::map all_reads = f.reads;
  // Only elements inside B: a guarded read (select(i >= 1, B[i - 1], 0)) has
  // an access relation beyond B where its guard is false, and is proved in
  // bounds where it runs; the copy must not read what the code never does.
  if (const ir::Buf* b = m.func.find_buf(bname)) {
    AffinePrinter shape(m, {}, "", nullptr);
    std::string elems = isl_name(bname) + "[", conds;
    for (size_t k = 0; k < b->shape.size(); ++k) {
      std::string a = "a" + std::to_string(k);
      elems += (k ? ", " : "") + a;
      if (auto e = shape.expr(b->shape[k]))
        conds += (conds.empty() ? "" : " and ") + ("0 <= " + a + " < " + *e);
    }
    isl::set inside = read_set(
        ctx, param_list(m) + " -> { " + elems + "] : " + (conds.empty() ? "1 = 1" : conds) + " }");
    f.reads = f.reads.intersect_range(inside);
  }
  f.prefix_of = isl::manage(isl_map_project_out(c.sched.intersect_domain(c.domain).release(),
                                                isl_dim_out, static_cast<unsigned>(outer),
                                                static_cast<unsigned>(n - outer)));
  f.footprint = f.prefix_of.reverse().apply_range(f.reads);
  f.extent = f.prefix_of.reverse().apply_range(all_reads);
  return f;
}

// A zero of any type: what a padded copy holds outside its buffer.
bool is_zero(const ir::Expr& e) {
  if (const auto* i = ir::as<ir::IntImm>(e)) return i->value == 0;
  if (const auto* f = ir::as<ir::FloatImm>(e)) return f->value == 0.0 && !std::signbit(f->value);
  return false;
}

// The guarded reads of B in c that a copy with zeros outside B can serve
// without their guard: select(g, B[idx], 0) where, on c's domain, g is false
// only where idx lies outside B (a convolution's zero padding). isl decides
// it; a guard or index it cannot read keeps its select.
std::set<const ir::Select*> padding_selects(const Impl& m, const CompModel& c, const ir::Buf& b) {
  std::vector<const ir::Select*> candidates;
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
    if (const auto* s = ir::as<ir::Select>(e)) {
      const auto* l = ir::as<ir::Load>(s->t);
      if (l && l->buf == b.name && l->indices.size() == b.shape.size() && is_zero(s->f))
        candidates.push_back(s);
    }
    ir::for_each_child(e, walk);
  };
  walk(c.value);
  std::set<const ir::Select*> out;
  if (candidates.empty()) return out;
  AffinePrinter ap(m, std::set<std::string>(c.iters.begin(), c.iters.end()), c.name, nullptr);
  AffinePrinter shape(m, {}, "", nullptr);
  std::string space = isl_name(c.name) + "[";
  for (size_t k = 0; k < c.iters.size(); ++k) space += (k ? ", " : "") + isl_name(c.iters[k]);
  space += "]";
  for (const ir::Select* s : candidates) {
    std::optional<std::string> off = ap.cond(ir::unary(ir::UnaryOp::Not, s->cond));
    if (!off) continue;
    std::string conds = "(" + *off + ")";
    const auto& l = static_cast<const ir::Load&>(*s->t);
    bool affine = true;
    for (size_t d = 0; d < l.indices.size() && affine; ++d) {
      std::optional<std::string> at = ap.expr(l.indices[d]), n = shape.expr(b.shape[d]);
      affine = at && n;
      if (affine) conds += " and 0 <= " + *at + " < " + *n;
    }
    if (!affine) continue;
    // Where the guard says no but the element exists: the copy would give it.
    isl::set wrong(m.ctx.get(), param_list(m) + " -> { " + space + " : " + conds + " }");
    if (wrong.intersect(c.domain).is_empty()) out.insert(s);
  }
  return out;
}

// The selects of `drop` become their first branch.
class DropSelects : public ir::IRMutator {
 public:
  explicit DropSelects(const std::set<const ir::Select*>& drop) : drop_(drop) {}

 protected:
  ir::Expr mutate_select(const ir::Expr& e, const ir::Select& n) override {
    if (drop_.count(&n)) return mutate(n.t);
    return ir::IRMutator::mutate_select(e, n);
  }

 private:
  const std::set<const ir::Select*>& drop_;
};

// A box of fixed sizes that holds the range of a map { D -> R }, its origin
// an affine function of D: what isl's range_simple_fixed_box_hull gives. That
// function is one of the few that the isl in libLLVM, which kiln runs, does
// not export; Debian's libisl ran it on libLLVM's objects, a second isl build
// (GMP integers where libLLVM's has IMath's) in the same process
// (compiler/poly/CMakeLists.txt).
struct FixedBox {
  isl::multi_aff offset;  // D -> R
  std::vector<int64_t> sizes;
};

// Per dim of R, the origins tried are the pieces of its smallest value as a
// function of D; each, moved by the least difference to it, spans the
// differences to the largest, and the one whose span is smallest is the box's.
// nullopt when no origin gives a bounded span, or the map is empty (as isl's
// box is then invalid).
std::optional<FixedBox> fixed_box(const isl::map& m) {
  const int in = static_cast<int>(isl_map_dim(m.get(), isl_dim_in));
  const int rank = static_cast<int>(isl_map_dim(m.get(), isl_dim_out));
  if (m.is_empty()) return std::nullopt;
  FixedBox box{isl::manage(isl_multi_aff_zero(m.space().release())), {}};
  for (int d = 0; d < rank; ++d) {
    // { D -> [e_d] } and its pairs [D -> [e_d]].
    isl_map* one = isl_map_project_out(m.copy(), isl_dim_out, static_cast<unsigned>(d + 1),
                                       static_cast<unsigned>(rank - d - 1));
    one = isl_map_project_out(one, isl_dim_out, 0, static_cast<unsigned>(d));
    isl::map dim_map = isl::manage(one);
    isl::set pairs = dim_map.wrap();
    isl::multi_aff to_domain = isl::manage(isl_multi_aff_domain_map(dim_map.space().release()));
    isl::aff value = isl::manage(isl_aff_var_on_domain(
        isl_local_space_from_space(pairs.space().release()), isl_dim_set, in));
    std::vector<isl::aff> origins;
    try {
      dim_map.lexmin_pw_multi_aff().foreach_piece(
          [&](isl::set, isl::multi_aff low) { origins.push_back(low.at(0)); });
    } catch (const isl::exception&) {
      // No smallest value (the dim is unbounded below): no box. An isl that
      // ran out of operations says so to the caller.
      if (isl_quota_exceeded(m.ctx())) throw;
      return std::nullopt;
    }
    std::optional<std::pair<isl::aff, int64_t>> best;
    for (const isl::aff& origin : origins) {
      isl::aff diff = value.sub(origin.pullback(to_domain));
      isl::val lo = pairs.min_val(diff), hi = pairs.max_val(diff);
      if (!lo.is_int() || !hi.is_int()) continue;
      int64_t size = hi.sub(lo).get_num_si() + 1;
      if (!best || size < best->second) best = {origin.add_constant(lo), size};
    }
    if (!best) return std::nullopt;
    box.offset = box.offset.set_at(d, best->first);
    box.sizes.push_back(best->second);
  }
  return box;
}

// The copy's shape, and index_of(dyn, e): where element e of B goes in the
// copy during the iteration whose loop variables (through L) are dyn.
using IndexOf = std::function<std::vector<ir::Expr>(const std::vector<ir::Expr>&,
                                                    const std::vector<ir::Expr>&)>;
struct CacheLayout {
  std::vector<int64_t> sizes;
  IndexOf index_of;
  std::optional<FixedBox> box;  // cache_identity's, per iteration of L
  // Whether the copy's innermost index moves with B's innermost index: a
  // row of the copy is then a run of B.
  bool rows_in_runs = false;
  // Whether the copy's last two loops run in swapped order: rows of the copy
  // too short to be a vector, whose next index moves with B's innermost
  // index (the GEMM's block of A, [MB / MR][KB][MR]). The loop over that
  // index is then innermost and a vector: one load of a run of B, stored
  // into every row (FunctionBuilder's strided stores).
  bool swap_last_loops = false;
  // The copy's index that its loop k runs over, in the copy's order: k, but
  // for the last two loops when they are swapped.
  size_t index_of_loop(size_t k) const {
    const size_t n = sizes.size();
    if (!swap_last_loops || k + 2 < n || k >= n) return k;
    return k + 2 == n ? n - 1 : n - 2;
  }
  // cache's map, from the loops through L and B's indices to the copy's:
  // { [L..., e...] -> [c...] }, when the copy runs in the copy's order.
  std::optional<isl::map> order;
};

// cache_identity: the smallest fixed box around what one iteration reads,
// its origin moving with the loops through L.
CacheLayout box_layout(const CompModel& c, int p, int rank, const StaticPlace& place,
                       const Footprint& f, const std::string& bname,
                       const ir::ScheduleCommand& cmd) {
  std::optional<FixedBox> box = fixed_box(f.extent);
  if (!box)
    fail(cmd.where, "cache_identity: the part of '" + bname + "' that one iteration of loop '" +
                        loop_label(c, p) + "' reads has no size known at compile time");
  CacheLayout layout;
  layout.box = box;
  layout.sizes = box->sizes;
  // Origin of the box as expressions of the loop prefix, with static dims
  // replaced by their values.
  isl::multi_aff offset = box->offset;
  const int outer = 2 * p + 2;
  std::vector<int64_t> prefix = place.prefix;
  layout.rows_in_runs = true;
  layout.index_of = [=](const std::vector<ir::Expr>& dyn, const std::vector<ir::Expr>& e) {
    std::vector<ir::Expr> inputs;
    for (int k = 0; k < outer; ++k)
      inputs.push_back(k % 2 == 0 ? ir::int_imm(prefix[k / 2]) : dyn[k / 2]);
    std::vector<ir::Expr> at;
    for (int d = 0; d < rank; ++d) at.push_back(minus(e[d], aff_to_expr(offset.at(d), inputs)));
    return at;
  };
  return layout;
}

// `text` with each number knob and compile-time param, as a whole word, replaced
// by its value: what a cache's map and size expressions may name.
std::string with_values(const Impl& m, const std::string& text,
                        const std::vector<std::string>& keep = {}) {
  std::map<std::string, int64_t> values = m.constants;
  for (const ir::Knob& k : m.func.knobs)
    if (!k.tag() && k.order_loops.empty()) values[k.name] = k.value;
  std::string out;
  for (size_t at = 0; at < text.size();) {
    char ch = text[at];
    if (!(std::isalpha(static_cast<unsigned char>(ch)) || ch == '_')) {
      out += ch;
      ++at;
      continue;
    }
    size_t end = at;
    while (end < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_'))
      ++end;
    std::string word = text.substr(at, end - at);
    auto v = values.find(word);
    bool kept = std::find(keep.begin(), keep.end(), word) != keep.end();
    // In parentheses only when negative: isl takes a divisor as a bare number.
    std::string value = v == values.end() ? "" : std::to_string(v->second);
    if (v != values.end() && v->second < 0) value = "(" + value + ")";
    out += v != values.end() && !kept ? value : word;
    at = end;
  }
  return out;
}

// An integer expression of numbers with + - * / % and parentheses (/ and %
// round toward minus infinity, as isl's floor and mod), or nullopt.
class IntExpression {
 public:
  explicit IntExpression(const std::string& text) : s_(text) {}
  std::optional<int64_t> value() {
    auto v = sum();
    skip();
    if (!v || at_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool eat(char c) {
    skip();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  std::optional<int64_t> sum() {
    auto v = product();
    while (v) {
      if (eat('+')) {
        auto r = product();
        if (!r || __builtin_add_overflow(*v, *r, &*v)) return std::nullopt;
      } else if (eat('-')) {
        auto r = product();
        if (!r || __builtin_sub_overflow(*v, *r, &*v)) return std::nullopt;
      } else {
        break;
      }
    }
    return v;
  }
  std::optional<int64_t> product() {
    auto v = atom();
    while (v) {
      char op = eat('*') ? '*' : eat('/') ? '/' : eat('%') ? '%' : 0;
      if (!op) break;
      auto r = atom();
      if (!r) return std::nullopt;
      if (op == '*') {
        if (__builtin_mul_overflow(*v, *r, &*v)) return std::nullopt;
        continue;
      }
      if (*r <= 0) return std::nullopt;
      int64_t q = *v / *r, m = *v % *r;
      if (m < 0) m += *r, --q;
      v = op == '/' ? q : m;
    }
    return v;
  }
  std::optional<int64_t> atom() {
    if (eat('(')) {
      auto v = sum();
      return v && eat(')') ? v : std::nullopt;
    }
    if (eat('-')) {
      auto v = atom();
      return v ? std::optional<int64_t>(-*v) : std::nullopt;
    }
    skip();
    size_t start = at_;
    while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_;
    if (start == at_ || at_ - start > 18) return std::nullopt;
    return std::stoll(s_.substr(start, at_ - start));
  }

  const std::string& s_;
  size_t at_ = 0;
};

// The copy's sizes from cache's fourth argument: numbers, knobs, compile-time
// params, or a quoted integer expression of them ("NB / NR", rounded down).
std::vector<int64_t> cache_sizes(const Impl& m, const ir::ScheduleArg& sarg) {
  if (sarg.kind != ir::ScheduleArg::Kind::Name || !sarg.text.empty())
    fail(sarg.where, "cache: the fourth argument is the copy's shape, a list like [32, 8]");
  std::vector<int64_t> sizes;
  for (const auto& a : sarg.list) {
    int64_t v = 0;
    if (a.kind == ir::ScheduleArg::Kind::Int) {
      v = a.number;
    } else if (const ir::Knob* k =
                   a.kind == ir::ScheduleArg::Kind::Name ? m.func.find_knob(a.text) : nullptr) {
      v = k->value;
    } else if (a.kind == ir::ScheduleArg::Kind::Name && m.constants.count(a.text)) {
      v = m.constants.at(a.text);
    } else if (a.kind == ir::ScheduleArg::Kind::Text) {
      std::string text = with_values(m, a.text);
      std::optional<int64_t> e = IntExpression(text).value();
      if (!e)
        fail(a.where, "cache: size \"" + a.text + "\" (" + text +
                          ") is not an integer expression of numbers, knobs and compile-time "
                          "params with + - * / % and parentheses");
      v = *e;
    } else {
      fail(a.where,
           "cache: sizes must be numbers, knobs, compile-time params or a quoted expression of "
           "them");
    }
    if (v <= 0) fail(a.where, "cache: sizes must be positive, got " + std::to_string(v));
    sizes.push_back(v);
  }
  return sizes;
}

// cache: the shape and the map given by hand, checked to be one affine
// function, one-to-one on what an iteration reads, and inside the shape.
CacheLayout user_layout(const Impl& m, const CompModel& c, int p, int rank, const Footprint& f,
                        const std::string& bname, bool cpu, const ir::ScheduleCommand& cmd) {
  isl::ctx ctx = m.ctx.get();
  const int outer = 2 * p + 2;
  CacheLayout layout;
  layout.sizes = cache_sizes(m, cmd.args[3]);
  const std::vector<int64_t>& sizes = layout.sizes;
  const ir::ScheduleArg& marg = cmd.args[4];
  if (marg.kind != ir::ScheduleArg::Kind::Text)
    fail(marg.where, "cache: the fifth argument is an isl map in quotes, from the indices of '" +
                         bname + "' to the copy's");
  std::string params;
  for (int q = 0; q <= p; ++q) params += (q ? ", " : "") + isl_name(c.loop_names[q]);
  // A malformed map is an error to report, not an exception: the C reader says null.
  std::vector<std::string> loops(c.loop_names.begin(), c.loop_names.begin() + p + 1);
  isl_map* raw = isl_map_read_from_str(
      ctx.get(), ("[" + params + "] -> " + with_values(m, marg.text, loops)).c_str());
  if (!raw) fail(marg.where, "cache: cannot parse the isl map \"" + marg.text + "\"");
  isl::map user = without_tuple_ids(isl::manage(raw));
  if (static_cast<int>(user.domain_tuple_dim()) != rank)
    fail(marg.where, "cache: the map takes " + std::to_string(user.domain_tuple_dim()) +
                         " indices but '" + bname + "' has " + std::to_string(rank));
  if (user.range_tuple_dim() != sizes.size())
    fail(marg.where, "cache: the map gives " + std::to_string(user.range_tuple_dim()) +
                         " indices but the shape has " + std::to_string(sizes.size()));
  // What one iteration reads, with the loop variables as params.
  isl::map fp = f.prefix_of.reverse().apply_range(f.reads);
  for (int k = outer - 2; k >= 0; k -= 2) fp = project_out_inputs(fp, k, 1);
  isl::id_list ids(ctx, p + 1);
  for (int q = 0; q <= p; ++q) ids = ids.add(isl::id(ctx, isl_name(c.loop_names[q])));
  isl::multi_id mid = isl::manage(
      isl_multi_id_from_id_list(isl_space_set_alloc(ctx.get(), 0, p + 1), ids.release()));
  isl::set read = without_tuple_id(fp.bind_domain(mid));
  isl::map on_read = user.intersect_domain(read);
  if (!on_read.is_injective())
    fail(marg.where, "cache: the map sends two elements '" + c.name +
                         "' reads in one iteration of '" + loop_label(c, p) +
                         "' to the same place");
  isl_set* inside = isl_set_universe(isl_space_set_alloc(ctx.get(), 0, sizes.size()));
  for (size_t d = 0; d < sizes.size(); ++d) {
    auto k = static_cast<unsigned>(d);
    inside = isl_set_lower_bound_si(inside, isl_dim_set, k, 0);
    inside = isl_set_upper_bound_val(inside, isl_dim_set, k,
                                     isl_val_int_from_si(ctx.get(), sizes[d] - 1));
  }
  if (!on_read.range().is_subset(isl::manage(inside)))
    fail(marg.where,
         "cache: the map sends elements that '" + c.name + "' reads outside the copy's shape");
  std::optional<isl::pw_multi_aff> pma = pw_multi_aff_from_map(user);
  if (!pma || pma->n_piece() != 1) fail(marg.where, "cache: the map must be one affine function");
  isl::multi_aff fn = pma->as_multi_aff();
  std::vector<std::string> loop_names(c.loop_names.begin(), c.loop_names.begin() + p + 1);
  layout.index_of = [fn, loop_names](const std::vector<ir::Expr>& dyn,
                                     const std::vector<ir::Expr>& e) {
    std::map<std::string, ir::Expr> sub;
    for (size_t q = 0; q < loop_names.size(); ++q) sub[isl_name(loop_names[q])] = dyn[q];
    std::vector<ir::Expr> at;
    int n_out = outputs_of(fn);
    for (int d = 0; d < n_out; ++d) at.push_back(ir::substitute(aff_to_expr(fn.at(d), e), sub));
    return at;
  };
  layout.rows_in_runs = isl_aff_involves_dims(fn.at(outputs_of(fn) - 1).get(), isl_dim_in,
                                              static_cast<unsigned>(rank - 1), 1) == isl_bool_true;
  // The order the copy runs in. A copy in CPU memory runs in the copy's
  // order, and each row of the copy is written at once (see
  // cmd_cache_identity). In B's order the store index divides by the row's
  // length, LLVM keeps the copy scalar and unrolls it into hundreds of
  // stores that its memory passes then compare pairwise (the conv's filters:
  // three times the LLVM time of the kernel; the GEMM's A: a third of its
  // machine-code time). A copy into GPU memory is shared out among a block's
  // threads: it runs in the copy's order only when both sides then walk
  // memory in runs.
  if (!cpu && !layout.rows_in_runs) return layout;
  const int n_out = outputs_of(fn);
  layout.swap_last_loops =
      cpu && !layout.rows_in_runs && n_out >= 2 && sizes.back() < kMinVectorRow &&
      sizes[n_out - 2] >= kMinVectorRow &&
      isl_aff_involves_dims(fn.at(n_out - 2).get(), isl_dim_in, static_cast<unsigned>(rank - 1),
                            1) == isl_bool_true;
  // The loops' names, params of the map, become its first inputs.
  isl_map* order = user.copy();
  for (int q = 0; q <= p; ++q) {
    int at = isl_map_find_dim_by_name(order, isl_dim_param, isl_name(c.loop_names[q]).c_str());
    order = at < 0 ? isl_map_insert_dims(order, isl_dim_in, static_cast<unsigned>(q), 1)
                   : isl_map_move_dims(order, isl_dim_in, static_cast<unsigned>(q), isl_dim_param,
                                       static_cast<unsigned>(at), 1);
  }
  layout.order = isl::manage(order);
  return layout;
}

// The copy statement: for every iteration of c's loops through L and every
// element of B read there, cache[index_of(loops, e)] = B[e], scheduled inside
// L just before c.
// padded: the copy is the whole box, every element of it outside B a zero
// (the box's offset and sizes per iteration of L as box_layout took them).
CompModel copy_statement(const Impl& m, const CompModel& c, int p, const StaticPlace& place,
                         const Footprint& f, const CacheLayout& layout, const ir::Buf& b,
                         const std::string& cache, const std::optional<FixedBox>& padded) {
  const std::string& bname = b.name;
  const ir::DType dtype = b.dtype;
  const int rank = static_cast<int>(b.shape.size());
  isl::ctx ctx = m.ctx.get();
  const int outer = 2 * p + 2;
  CompModel fill;
  fill.name = cache + "_fill";
  // In the copy's order the loops are the copy's indices (cache_0, ...) and B's
  // indices are computed from them (cache_e0, ...).
  const std::string elem_name = layout.order ? cache + "_e" : cache + "_";
  for (int q = 0; q <= p; ++q) fill.iters.push_back(c.loop_names[q]);
  for (int d = 0; d < rank; ++d) fill.iters.push_back(elem_name + std::to_string(d));
  std::vector<ir::Expr> dyn, elem;
  for (int q = 0; q <= p; ++q) dyn.push_back(ir::var(fill.iters[q]));
  for (int d = 0; d < rank; ++d) elem.push_back(ir::var(fill.iters[p + 1 + d]));
  fill.value = ir::load(bname, elem, dtype);
  fill.target.buf = cache;
  fill.target.indices = layout.index_of(dyn, elem);

  // Domain: the footprint, or the whole box when padded, with the static dims dropped.
  isl::set domain = f.footprint.wrap().flatten();
  if (padded) {
    // { prefix -> offset(prefix) + t : 0 <= t < size } where c runs.
    isl::map at = isl::manage(isl_map_from_multi_aff(padded->offset.copy()));
    isl::map box = isl::map::universe(at.space());
    for (int d = 0; d < rank; ++d) {
      box = isl::manage(isl_map_lower_bound_si(box.release(), isl_dim_out, d, 0));
      box = isl::manage(isl_map_upper_bound_si(box.release(), isl_dim_out, d,
                                               padded->sizes[static_cast<size_t>(d)] - 1));
    }
    isl::map whole =
        isl::manage(isl_map_sum(at.release(), box.release())).intersect_domain(f.extent.domain());
    domain = whole.wrap().flatten();
    ir::Expr inside;
    for (int d = 0; d < rank; ++d) {
      for (ir::Expr cond : {ir::binary(ir::BinaryOp::Le, ir::int_imm(0), elem[d]),
                            ir::binary(ir::BinaryOp::Lt, elem[d], b.shape[d])})
        inside = inside ? ir::binary(ir::BinaryOp::And, inside, cond) : cond;
    }
    ir::Expr zero = ir::is_float(dtype) ? ir::float_imm(0.0, dtype) : ir::int_imm(0, dtype);
    fill.value = ir::select(inside, fill.value, zero);
  }
  for (int k = outer - 2; k >= 0; k -= 2) domain = project_out(domain, k, 1);
  fill.domain = named(domain, fill.name, fill.iters);
  fill.domain_approx = fill.domain;

  // Data-dependent params the footprint uses are defined as for c, in terms
  // of c's iterators; express those through the loop prefix. Each iterator
  // the prefix determines (one affine function of it) is replaced; the others
  // (inside L) are not the copy's to know.
  if (!c.data_params.empty()) {
    isl::map iters_of = f.prefix_of.reverse();
    for (int k = outer - 2; k >= 0; k -= 2) iters_of = project_out_inputs(iters_of, k, 1);
    std::map<std::string, ir::Expr> sub;
    for (size_t k = 0; k < c.iters.size(); ++k) {
      std::optional<isl::pw_multi_aff> pma =
          pw_multi_aff_from_map(output_dim(iters_of, static_cast<int>(k)));
      if (!pma) continue;
      isl::pw_aff pa = pma->at(0).coalesce();
      if (pa.n_piece() != 1 || pa.involves_nan()) continue;
      // The one piece's function: it holds wherever the copy runs.
      pa.foreach_piece([&](const isl::set&, const isl::multi_aff& a) {
        sub[c.iters[k]] = aff_to_expr(a.at(0), dyn);
      });
    }
    for (const auto& dp : c.data_params) {
      fill.data_params.push_back({dp.name, ir::substitute(dp.value, sub)});
    }
  }
  // The copy adds no dependence the model must check: it reads B, which
  // nothing writes inside L, and writes a buffer only c reads, after it.
  fill.reads = fill.reads_run = isl::union_map::empty(ctx);
  fill.writes = isl::union_map::empty(ctx);

  // Schedule: c's loops through L with their static positions, then the
  // copy's own place inside L, then B's indices.
  isl::space in = isl::manage(
      isl_space_set_tuple_name(plain_space(ctx, static_cast<int>(fill.iters.size())).release(),
                               isl_dim_set, isl_name(fill.name).c_str()));
  std::vector<Lin> head;
  for (int q = 0; q <= p; ++q) {
    head.push_back(Lin::num(place.prefix[q]));
    head.push_back(Lin::var(q));
  }
  head.push_back(Lin::num(place.inner));
  std::vector<Lin> out = head;
  for (int d = 0; d < rank; ++d) {
    out.push_back(Lin::var(p + 1 + d));
    out.push_back(Lin::num(0));
  }
  fill.sched = affine_map(in, out);
  fill.loop_names = fill.iters;
  if (layout.order) {
    // The copy's order: c's loops through L, then the copy's indices, so
    // that each row of the copy is written in one run.
    isl::map prefix = affine_map(in, head);
    isl::map order = isl::manage(
        isl_map_set_tuple_name(layout.order->copy(), isl_dim_in, isl_name(fill.name).c_str()));
    order = isl::manage(isl_map_align_params(order.release(), prefix.get_space().release()));
    prefix = isl::manage(isl_map_align_params(prefix.release(), order.get_space().release()));
    const int n_head = 2 * p + 3;
    const int n_copy = static_cast<int>(layout.sizes.size());
    std::vector<Lin> spread;
    for (int k = 0; k < n_head; ++k) spread.push_back(Lin::var(k));
    for (int j = 0; j < n_copy; ++j) {
      spread.push_back(
          Lin::var(n_head + static_cast<int>(layout.index_of_loop(static_cast<size_t>(j)))));
      spread.push_back(Lin::num(0));
    }
    isl::map spread_map = affine_map(plain_space(ctx, n_head + n_copy), spread);
    fill.sched = isl::manage(isl_map_flat_range_product(prefix.release(), order.release()))
                     .apply_range(spread_map);
    fill.loop_names.resize(p + 1);
    for (int j = 0; j < n_copy; ++j)
      fill.loop_names.push_back(cache + "_" +
                                std::to_string(layout.index_of_loop(static_cast<size_t>(j))));
  }
  fill.tags.assign(fill.loop_names.size(), ir::LoopTag::None);
  return fill;
}

}  // namespace

// cache_identity(B, L, LOC): for every iteration of loop L of c, copy the part
// of B that c reads during that iteration into a small buffer right before c
// runs there, and read it from the copy. The copy's size is the smallest
// fixed box that holds what one iteration reads; its origin moves with the
// outer loops (fixed_box, as isl's range_simple_fixed_box_hull).
// cache(B, L, LOC, [sizes], "{ [e...] -> [c...] }") is the same with the
// copy's shape and the map from B's indices to the copy's given by hand
// (a transpose, padding against bank conflicts); the map may use the names
// of c's loops down to L. kiln checks that it is one-to-one and stays inside
// the copy for everything the loop reads.
void cmd_cache_identity(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  const CacheRequest r = parse_cache_request(m, c, cmd);
  const ir::Buf src = *r.src;  // r.src points into m.func.bufs, which grows below
  const std::string& bname = src.name;
  const ir::DType dtype = src.dtype;
  const int rank = static_cast<int>(src.shape.size());
  const int p = r.loop;

  const StaticPlace place = static_place(c, p, cmd);
  check_not_written_inside(m, c, p, place, bname, cmd);
  const Footprint f = footprint_of(m, c, p, bname, cmd.args[0]);
  const CacheLayout layout = r.manual ? user_layout(m, c, p, rank, f, bname, r.cpu, cmd)
                                      : box_layout(c, p, rank, place, f, bname, cmd);

  // The cache buffer, allocated inside loop L.
  std::string cache = fresh_buffer(m.func, bname + "_" + c.name + "_cache");
  ir::Buf buf;
  buf.name = cache;
  buf.dtype = dtype;
  for (int64_t v : layout.sizes) buf.shape.push_back(ir::int_imm(v));
  buf.kind = ir::BufKind::Temp;
  buf.loc = r.loc;
  buf.where = cmd.where;
  m.func.bufs.push_back(buf);
  m.buf_locs[cache] = r.loc;
  // At root the copy lives as long as the kernel, as a temp does.
  if (p >= 0)
    m.alloc_sites.push_back({cache, {c.name, cache + "_fill"}, p, c.loop_names[p], cmd.where});

  // Zero padding: when the copy can hold zeros around B that some guarded
  // reads then take unguarded, it is the whole box.
  std::set<const ir::Select*> unguarded;
  if (layout.box) unguarded = padding_selects(m, c, src);
  std::optional<FixedBox> padded;
  if (!unguarded.empty()) padded = layout.box;
  CompModel fill = copy_statement(m, c, p, place, f, layout, src, cache, padded);
  fill.memory_scheduled = cmd.where;
  // Each element of B goes to its own place in the copy (the layout is one to
  // one), so the copy's iterations write apart and may run at once. The loop
  // shared out is the copy's outermost with more than one iteration (a copy of
  // one image of a batch has no loop over images), passing over loops of fewer
  // than kMinSharedTrips iterations to an inner one, not the innermost: the
  // 7x7 conv's 3 input channels left one of 2 threads idle a third of the
  // copy, its 229 rows do not. A copy that may run in
  // parallel walks the copy in the copy's order (a cache's in CPU memory
  // always; a cache_identity's box is in B's order and the copy's alike), so
  // each iteration of that loop writes a block of the copy of its own: threads
  // share its cache lines only where their blocks meet.
  if (r.parallel) {
    const int first = layout.order ? 2 * p + 3 : p + 1;
    const int stride = layout.order ? 2 : 1;  // the copy's loops and the 0s between them
    isl::set runs = layout.order ? fill.sched.intersect_domain(fill.domain).range() : fill.domain;
    std::vector<bool> varies = dims_that_vary(runs, first);
    const size_t loops = (varies.size() + stride - 1) / stride;
    std::optional<size_t> shared;
    for (size_t k = 0; k < loops; ++k) {
      if (!varies[k * stride]) continue;
      if (!shared) shared = k;
      const size_t index = layout.index_of_loop(k);
      bool few = index < layout.sizes.size() && layout.sizes[index] < kMinSharedTrips;
      if (!few && k + 1 < loops) {
        shared = k;
        break;
      }
    }
    if (shared) fill.tags[p + 1 + *shared] = ir::LoopTag::Parallel;
  }
  // A CPU copy in the copy's order writes each row as one vector: from one
  // vector load when the copy's innermost index moves with B's (the GEMM's
  // panels of B, [NB / NR][KB][NR] from rows of B), from a gather otherwise
  // (the conv's filters, [F / 16][C][KH][KW][16]). Rows shorter than
  // kMinVectorRow whose next index moves with B's innermost (the GEMM's A
  // block, [MB / MR][KB][MR]) run that index innermost instead
  // (swap_last_loops), as a vector: each vector load of B is stored across MR
  // rows. Other short rows are LLVM's to copy, unrolled.
  if (r.cpu && layout.order && fill.tags.back() == ir::LoopTag::None &&
      (layout.rows_in_runs ? layout.sizes.back() > 1
                           : layout.swap_last_loops || layout.sizes.back() >= kMinVectorRow))
    fill.tags.back() = ir::LoopTag::Vectorize;

  // Everything inside L from c's position on moves one slot later.
  remap_static(m, "", place.prefix, p + 1, StaticMove{.from = place.inner, .scale = 1, .shift = 1});

  // c reads the copy: B[idx] becomes cache[idx - origin(prefix of c's instance)].
  // c's instance knows its loop variables: lowering binds schedule_dim_var(k)
  // to schedule dim k of each instance, so the copy's index is read straight
  // off the loops rather than recomputed from c's iterators.
  std::vector<ir::Expr> cdyn;
  for (int q = 0; q <= p; ++q) cdyn.push_back(ir::var(schedule_dim_var(2 * q + 1)));
  RedirectLoads redirect(bname, [&](const ir::Load& l) {
    return ir::load(cache, layout.index_of(cdyn, l.indices), dtype);
  });
  c.value = redirect.mutate(DropSelects(unguarded).mutate(c.value));
  c.memory_scheduled = cmd.where;
  // The copy goes right before c in the list, which is the order isl sees
  // statements in; its static position already orders it.
  auto at = std::find_if(m.comps.begin(), m.comps.end(),
                         [&](const CompModel& x) { return x.name == c.name; });
  m.comps.insert(at, std::move(fill));
}

void cmd_alloc_at(Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  if (cmd.args.size() != 2) fail(cmd.where, "alloc_at expects 2 arguments: alloc_at(BUFFER, LOOP)");
  const ir::ScheduleArg& barg = cmd.args[0];
  const ir::Buf* b =
      barg.kind == ir::ScheduleArg::Kind::Name ? m.func.find_buf(barg.text) : nullptr;
  if (!b) fail(barg.where, "alloc_at: unknown buffer '" + barg.text + "'");
  if (b->kind != ir::BufKind::Temp)
    fail(barg.where, "alloc_at: '" + b->name + "' is an " + ir::buf_kind_name(b->kind) +
                         " buffer; only temp buffers are allocated by the kernel");
  int p = loop_of(c, cmd.args[1], "alloc_at");
  for (const auto& s : m.alloc_sites)
    if (s.buf == b->name) fail(cmd.where, "alloc_at: '" + b->name + "' already has a place");
  m.alloc_sites.push_back({b->name, {c.name}, p, c.loop_names[p], cmd.where});
  c.memory_scheduled = cmd.where;
}

}  // namespace kiln::poly
