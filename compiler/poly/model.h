// The polyhedral model of a Func: per computation its domain, accesses and
// schedule as isl objects. Private to compiler/poly.
#pragma once

#include <isl/cpp.h>
#include <isl/ctx.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/limits.h"
#include "kiln/loop_ir.h"
#include "kiln/poly.h"

namespace kiln::poly {

// Owns an isl_ctx. Declared first in Impl so that it is destroyed last, after
// every isl object that lives in it.
class IslContext {
 public:
  IslContext();
  ~IslContext();
  IslContext(const IslContext&) = delete;
  IslContext& operator=(const IslContext&) = delete;
  isl::ctx get() const { return isl::ctx(raw_); }

 private:
  isl_ctx* raw_;
};

// A value read at run time that stands in a domain where a param could: the
// isl parameter `name` means `value` (a Load over the computation's iterators)
// for the instance at hand.
struct DataParam {
  std::string name;
  ir::Expr value;
};

// A direct dependence between two computations through one buffer: flow
// relates a read to the write whose value it reads (value-based), anti a read
// to the next write of its element, output a write to the next write of its
// element. Dependences between further instances follow from these by
// transitivity, so a schedule that respects these respects them all.
struct Dependence {
  enum class Kind { Flow, Anti, Output } kind;
  std::string buf;
  isl::union_map relation;  // source instance -> sink instance, source first in the original order
  // An anti or output dependence through a temp whose writes are all
  // must-writes: the schedule may break it as long as no live range of the
  // temp (LiveRanges) is broken, which is how storage is reused.
  bool relaxable = false;
};

// The live ranges of a temp whose anti and output dependences are
// relaxable: `flow` relates each write to the reads of its value, `writes`
// is the temp's write accesses (instance -> element). A schedule is legal
// for the temp when no other write to an element runs between its write and
// a read of its value (and, in a parallel loop, no other iteration writes it).
struct LiveRanges {
  isl::union_map flow;
  isl::union_map writes;
};

struct CompModel {
  std::string name;
  const ir::Comp* comp = nullptr;  // points into Impl::func
  std::vector<std::string> iters;
  ir::Expr value;          // with value computations inlined / redirected to their buffers
  ir::StoreTarget target;  // where each instance writes
  std::vector<DataParam> data_params;
  isl::set domain;               // exact, may use data params
  isl::set domain_approx;        // data-dependent conditions dropped: a superset, for dependences
  isl::union_map reads, writes;  // over domain_approx; per buffer tuple
  // The reads where they run, for dependences: a read in one side of a
  // select (or after && and ||) only where the affine part of its condition
  // chooses that side. `reads` names every element an access may touch
  // wherever its guard is false, which is what sizes a copy of the buffer.
  isl::union_map reads_run;
  // Whether every instance of domain_approx runs and writes exactly the
  // element `writes` names (no data-dependent condition was dropped, every
  // store index is affine): its writes then kill the values they overwrite.
  bool must_write = true;
  // Schedule: name[iters] -> [s0, d0, s1, d1, ..., sn]: static dims at even
  // positions order computations, dynamic dims at odd positions are loops.
  isl::map sched;
  std::vector<std::string> loop_names;  // one per dynamic dim
  std::vector<ir::LoopTag> tags;        // one per dynamic dim
  int loops() const { return static_cast<int>(loop_names.size()); }
  // Set once a memory schedule (cache_identity, alloc_at) refers to c's
  // loops: loop schedules after it would move the loops under it.
  std::optional<SourceLoc> memory_scheduled;
  // c.atomic(): its update is an atomic read-modify-write, so parallel
  // iterations may update one element (see updates.cpp).
  bool atomic = false;
  // c.privatize(L): each iteration of loop L updates a copy of c's target of
  // its own, and the copies are combined into the target after the loop.
  std::set<std::string> privatized;

  // What schedule_function last found, and for which schedule: legality and
  // lowering both need the function, and finding it is one of isl's costly
  // questions about a tiled schedule (lowering asking again took 1.5 ms of a
  // GEMM candidate).
  struct ScheduleFunctionMemo {
    isl::map sched;  // holds the map, so that no other map can take its place
    int dims = 0;
    std::optional<isl::pw_multi_aff> fn;
  };
  mutable std::optional<ScheduleFunctionMemo> schedule_function_memo;
};

// An update of the element a computation writes: target = target OP operand
// (+=, -=, *=, max(t, v), min(t, v)), with an operand that does not read the
// target's buffer. Instances that update one element may then run in any
// order, up to the rounding of floats.
struct Update {
  ir::BinaryOp op;
  ir::Expr operand;
};
// c's update, or nullopt when its value is not one. Defined in updates.cpp.
std::optional<Update> update_of(const CompModel& c);
// c's update for lowering c.atomic() or c.privatize(L); a lower error when a
// later memory schedule left c's value no update of the element it writes.
Update lowered_update(const CompModel& c);

// A temporary allocated inside loop `loop` (a dynamic dim) of computation
// `comp` instead of around the whole function (alloc_at, caches).
struct AllocSite {
  std::string buf;
  std::vector<std::string> comps;  // computations that use it inside the loop
  int loop;
  std::string loop_name;
  SourceLoc where;  // the command that placed it
};

struct ScheduledFunc::Impl {
  IslContext ctx;
  ir::Func func;
  std::map<std::string, int64_t> constants;  // params with compile-time values
  std::vector<std::string> runtime_params;
  isl::set context;                            // what the constraints promise about runtime params
  std::vector<CompModel> comps;                // scheduled computations, in textual order
  std::map<std::string, ir::MemLoc> buf_locs;  // set_loc
  std::vector<Dependence> deps;
  std::map<std::string, LiveRanges> live_ranges;  // per temp with relaxable dependences
  std::vector<std::string> applied;               // the commands applied, as written
  // (static prefix, level) pairs whose static positions separate has doubled.
  std::set<std::pair<std::vector<int64_t>, int>> separated;
  std::vector<AllocSite> alloc_sites;
  Limits limits;

  CompModel* find(const std::string& name);
  const CompModel* find(const std::string& name) const;
  // The computation whose isl tuple is `tuple` (isl_name of its name: a
  // computation named like an isl keyword has another tuple name).
  const CompModel* find_tuple(const std::string& tuple) const;
};

// Builds the model of f with its original (textual) schedule and its
// dependences (compute_dependences). Defined in model.cpp; times itself as the
// parts "model" and "dependences" (kiln/timing.h).
std::unique_ptr<ScheduledFunc::Impl> build_model(const ir::Func& f, bool apply_commands,
                                                 const Limits& limits);

// Fills m.deps and m.live_ranges from the domains, accesses and textual order
// of m.comps by isl's dataflow analysis. The result is remembered, for the
// process, by the text of what it was computed from: a tuner's candidates of
// one operator differ in knob values, which change its schedule and not its
// dependences, so from the second candidate on they are read back, not
// computed. Defined in dependences.cpp.
void compute_dependences(ScheduledFunc::Impl& m);

// Whether ctx has used up its isl operations (max_isl_operations): after that
// every isl call fails, often with a message (a syntax error) that hides why.
bool isl_quota_exceeded(isl::ctx ctx);
// Throws the CompileError for an isl failure in `stage`: the isl operations
// limit when that is what stopped isl, else isl's own message.
[[noreturn]] void isl_failed(const ScheduledFunc::Impl& m, ErrorStage stage,
                             const std::string& what, const isl::exception& e);

// Throws a bounds CompileError, at the access, naming an instance, unless isl
// proves that every access of every computation stays inside its buffer for
// all params the constraints allow and all values the inputs' value specs
// allow. Defined in access_bounds.cpp.
void check_access_bounds(const ScheduledFunc::Impl& m);
// What the value specs promise about data params, as isl constraints on
// them ("0 <= _acc_0", "_acc_0 <= nnz"); a buffer without a range gives its
// type's.
std::vector<std::string> data_param_ranges(const ScheduledFunc::Impl& m,
                                           const std::vector<DataParam>& data);

// Loop values must stay within kMaxLoopValue in magnitude (2^62: headroom for
// the step and bound arithmetic of 64-bit loops) for run-time params up to
// kMaxParamMagnitude (2^32) within the constraints. The problem, or nullopt.
// Defined in schedule_range.cpp.
inline constexpr int64_t kMaxLoopValue = int64_t{1} << 62;
inline constexpr int64_t kMaxParamMagnitude = int64_t{1} << 32;
std::optional<std::string> schedule_range_problem(const ScheduledFunc::Impl& m);

// Applies one schedule command. Defined in primitives.cpp.
void apply_command(ScheduledFunc::Impl& m, const ir::ScheduleCommand& cmd);

// Throws a legality CompileError (blaming `cmd`, which may be null for the
// whole schedule) if the current schedules break a dependence or tag a loop
// that carries one. Defined in legality.cpp.
void check_legality(const ScheduledFunc::Impl& m, const ir::ScheduleCommand* cmd);
// True when the current schedules respect every dependence and tag.
bool is_legal(const ScheduledFunc::Impl& m);

// Rewrites each loop tagged unroll_explicit or vectorize whose start is a
// constant and whose end varies within a constant bound (the last, partial
// register tile of a block): the loop around it whose variable decides the
// end is split into the case where every iteration runs (the loop's extent
// the constant bound) and the rest, where an unroll_explicit loop is
// unrolled to the bound, each copy under `i < end`. Where the outer loop's
// bounds are constants and the end reads only its variable, the rest gets
// the partial extent as a constant when it is one value, and the outer
// variable's value when one iteration is partial. Defined in partial_tiles.cpp.
ir::Stmt split_partial_tiles(const ir::Stmt& body);

// Memory schedules. Defined in memory.cpp.
void cmd_cache_identity(ScheduledFunc::Impl& m, CompModel& c, const ir::ScheduleCommand& cmd);
void cmd_alloc_at(ScheduledFunc::Impl& m, CompModel& c, const ir::ScheduleCommand& cmd);
// Updates that parallel iterations share. Defined in updates.cpp.
void cmd_atomic(ScheduledFunc::Impl& m, CompModel& c, const ir::ScheduleCommand& cmd);
void cmd_privatize(ScheduledFunc::Impl& m, CompModel& c, const ir::ScheduleCommand& cmd);

// An isl affine expression as a kiln expression: input dim k becomes
// `inputs[k]`, a param becomes a Var of its name (compile-time params are
// folded by isl already). Floor divisions become integer Div.
ir::Expr aff_to_expr(const isl::aff& a, const std::vector<ir::Expr>& inputs);

// The value of static dimension q of c, when it is the same for all its instances.
std::optional<int64_t> static_value(const CompModel& c, int q);
// Every static dim of c, as static_value gives each.
std::vector<std::optional<int64_t>> static_values(const CompModel& c);
// A move of static positions: those at or after `from` (all when it is
// unset) become scale * x + shift.
struct StaticMove {
  std::optional<int64_t> from;
  int64_t scale = 1, shift = 0;
  bool moves(int64_t x) const { return !from || x >= *from; }
  int64_t operator()(int64_t x) const { return scale * x + shift; }
};
// Moves static dim q of the computations whose static dims 0..q-1 equal
// `prefix`; `except` is left alone.
void remap_static(ScheduledFunc::Impl& m, const std::string& except,
                  const std::vector<int64_t>& prefix, int q, const StaticMove& move);

// The name a computation's value uses for schedule dim k of its own instance
// ("@t3"); lowering binds it. No .kiln name can clash with it.
inline std::string schedule_dim_var(int k) { return "@t" + std::to_string(k); }

// Schedule dimension count of the widest computation (2 * loops + 1).
int schedule_dims(const ScheduledFunc::Impl& m);
// m.sched of c padded with zero static dims to `dims` output dimensions.
isl::map padded_schedule(const CompModel& c, int dims);
// padded_schedule(c, dims) as a function (pw_multi_aff_from_map), nullopt
// when isl cannot make it one; remembered on c until its schedule changes.
std::optional<isl::pw_multi_aff> schedule_function(const CompModel& c, int dims);

// isl helpers the C++ bindings lack.
template <typename T>
std::string to_str(const T& obj) {
  std::ostringstream os;
  os << obj;
  return os.str();
}
std::vector<isl::map> maps_of(const isl::union_map& u);
std::string range_name(const isl::map& m);  // "" when the range tuple has no name
std::string domain_name(const isl::map& m);
// m as a piecewise function, as isl_pw_multi_aff_from_map makes it (which,
// unlike map::as_pw_multi_aff, accepts a map that is not single-valued);
// nullopt when isl cannot. A map whose constraints give its function plainly
// is read off them (plain_function): for one basic map in the form isl gives
// it, for several in isl's pieces, maybe in another order.
std::optional<isl::pw_multi_aff> pw_multi_aff_from_map(const isl::map& m);

// The value of an expression made only of integer literals and compile-time
// params (`consts`), if it is one.
std::optional<int64_t> const_value(const ir::Expr& e, const std::map<std::string, int64_t>& consts);

// e with compile-time params replaced by their values, folded to a literal
// when nothing else is left.
ir::Expr folded(const ir::Expr& e, const std::map<std::string, int64_t>& consts);

// The checks the kernel of m makes at run time (LoweredFunc::checks): value
// specs of the inputs read as indices or bounds, integer divisions in each
// computation's stored value. Defined in runtime_checks.cpp.
void add_runtime_checks(const ScheduledFunc::Impl& m, ir::LoweredFunc& out);

// Text helpers.
std::string isl_name(const std::string& name);  // an identifier isl will accept
// The isl tuple of a computation's instances: "name[i, j]" (isl_name of each).
std::string isl_tuple(const std::string& name, const std::vector<std::string>& vars);
std::string param_list(const ScheduledFunc::Impl& m, const std::vector<DataParam>& extra = {});
std::string describe_point(const isl::set& point_of_map, const CompModel& from,
                           const CompModel& to);

}  // namespace kiln::poly
