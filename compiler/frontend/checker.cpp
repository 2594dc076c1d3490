// The checker: walks each func's items in order (names are declared before
// use), validates them and builds the IR, desugaring +=, reductions and
// chained comparisons on the way.
#include "checker.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "affine.h"
#include "kiln/analysis.h"
#include "kiln/loop_ir.h"
#include "scope.h"
#include "typing.h"

namespace kiln::frontend {

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }
std::string at_pos(Pos p) { return std::to_string(p.line) + ":" + std::to_string(p.col); }

// One condition of a domain or constraint: top-level `and`s and chains are
// split, so `0 <= i < N` gives two.
struct Piece {
  const Ast* ast;
  int link;  // >= 0: that comparison of a Compare chain; -1: the whole node
  Pos start() const { return link >= 0 ? ast->args[link]->start : ast->start; }
};

void split(const Ast& c, std::vector<Piece>& out) {
  if (c.kind == AstKind::Binary && c.binary_op == ir::BinaryOp::And) {
    split(*c.args[0], out);
    split(*c.args[1], out);
  } else if (c.kind == AstKind::Compare) {
    for (size_t k = 0; k < c.cmp_ops.size(); ++k) out.push_back({&c, static_cast<int>(k)});
  } else {
    out.push_back({&c, -1});
  }
}

ir::BinaryOp reduction_op(const std::string& op) {
  if (op == "sum") return ir::BinaryOp::Add;
  if (op == "prod") return ir::BinaryOp::Mul;
  if (op == "max") return ir::BinaryOp::Max;
  return ir::BinaryOp::Min;
}

class FuncChecker {
 public:
  FuncChecker(const Source& src, const FuncDecl& decl, const Limits& limits)
      : src_(src), decl_(decl), limits_(limits) {}

  ir::Func run() {
    for (const Item& item : decl_.items) note_future_names(item);
    auto note_knob = [&](const KnobDecl& k) {
      knob_names_.insert(k.name.name);
      for (const Ident& part : k.parts) knob_names_.insert(part.name);
    };
    for (const Item& item : decl_.items) {
      if (const auto* k = std::get_if<KnobDecl>(&item)) note_knob(*k);
      if (const auto* s = std::get_if<ScheduleDecl>(&item))
        for (const KnobDecl& k : s->knobs) note_knob(k);
    }
    func_.name = decl_.name.name;
    func_.where = src_.loc(decl_.name.pos);
    for (const Item& item : decl_.items) {
      std::visit([&](const auto& d) { check(d); }, item);
    }
    // Knob constraints once every knob is declared, wherever it is; knob
    // splits once every param is.
    for (const Piece& p : knob_pieces_) check_knob_constraint(p);
    for (const KnobDecl* d : fitted_) check_fit(*d);
    ir::resolve_knob_splits(func_);
    check_schedule_targets();
    return std::move(func_);
  }

 private:
  [[noreturn]] void fail(Pos p, const std::string& msg) const { src_.validate_error(p, msg); }

  // ---- names

  void note_future_names(const Item& item) {
    if (const auto* p = std::get_if<ParamDecl>(&item)) scope_.add_future(p->name.name, p->name.pos);
    if (const auto* b = std::get_if<BufferDecl>(&item))
      scope_.add_future(b->name.name, b->name.pos);
    if (const auto* k = std::get_if<KnobDecl>(&item)) {
      scope_.add_future(k->name.name, k->name.pos);
      for (size_t i = 1; i < k->parts.size(); ++i)
        scope_.add_future(k->parts[i].name, k->parts[i].pos);
    }
    if (const auto* c = std::get_if<ComputeDecl>(&item))
      scope_.add_future(c->name.name, c->name.pos);
  }

  void check_not_builtin(const Ident& id, const char* what) const {
    if (is_builtin_name(id.name)) {
      fail(id.pos, q(id.name) + " is a built-in function and cannot name " + what);
    }
  }

  std::string where_declared(const Decl& d) const {
    if (!d.made_by.empty()) return " (made by " + d.made_by + " at " + at_pos(d.pos) + ")";
    return " at " + at_pos(d.pos);
  }

  // Params, buffers and knobs share one namespace; computations may share a
  // name with a buffer only.
  void declare_name(const Ident& id, Decl d) {
    check_not_builtin(id, decl_kind_name(d.kind));
    if (const Decl* old = scope_.name(id.name)) {
      fail(id.pos, "duplicate name " + q(id.name) + ": already declared as " +
                       decl_kind_name(old->kind) + where_declared(*old));
    }
    if (d.kind != Decl::Kind::Buffer) {
      if (const Decl* c = scope_.comp(id.name)) {
        fail(id.pos, "duplicate name " + q(id.name) + ": already declared as a computation" +
                         where_declared(*c));
      }
    }
    d.pos = id.pos;
    scope_.add_name(id.name, std::move(d));
  }

  void check_comp_name(const Ident& id, const std::string& made_by = "") const {
    if (made_by.empty()) check_not_builtin(id, "a computation");
    std::string intro = made_by.empty() ? "duplicate name " + q(id.name)
                                        : "the computation " + q(id.name) + " made by " + made_by +
                                              " clashes with a name";
    if (const Decl* c = scope_.comp(id.name)) {
      fail(id.pos, intro + ": already declared as a computation" + where_declared(*c));
    }
    if (const Decl* d = scope_.name(id.name); d && d->kind != Decl::Kind::Buffer) {
      fail(id.pos, intro + ": already declared as " + decl_kind_name(d->kind) + where_declared(*d));
    }
  }

  void check_iter_name(const Ident& id, const std::string& comp) const {
    check_not_builtin(id, "an iterator");
    if (id.name == "root") {
      fail(id.pos, "'root' names the outermost level in schedules and cannot name an iterator");
    }
    if (const Decl* d = scope_.name(id.name)) {
      fail(id.pos, "iterator " + q(id.name) + " has the name of " + decl_kind_name(d->kind) +
                       " declared" + where_declared(*d) + "; iterators may not reuse names");
    }
    if (const Decl* c = scope_.comp(id.name)) {
      fail(id.pos, "iterator " + q(id.name) + " has the name of a computation declared" +
                       where_declared(*c) + "; iterators may not reuse names");
    }
    if (id.name == comp) {
      fail(id.pos, "iterator " + q(id.name) + " has the name of its own computation");
    }
    if (auto k = scope_.iter(id.name)) {
      fail(id.pos, "iterator " + q(id.name) + " is declared twice in " + q(comp) + " (first at " +
                       at_pos(scope_.iters()[*k].pos) + ")");
    }
  }

  // ---- items

  void check(const ParamDecl& d) {
    Decl decl;
    decl.kind = Decl::Kind::Param;
    declare_name(d.name, decl);
    func_.params.push_back(ir::Param{d.name.name, d.value, src_.loc(d.name.pos)});
  }

  // Whether a piece of a condition names a knob.
  bool mentions_knob(const Ast& a) const {
    if (a.kind == AstKind::Name && knob_names_.count(a.name)) return true;
    for (const AstPtr& x : a.args)
      if (x && mentions_knob(*x)) return true;
    return false;
  }
  bool mentions_knob(const Piece& p) const {
    if (p.link < 0) return mentions_knob(*p.ast);
    return mentions_knob(*p.ast->args[p.link]) || mentions_knob(*p.ast->args[p.link + 1]);
  }

  // A condition on knob values (and compile-time params): not affine, not
  // part of the polyhedral model; checked when the knobs get their values.
  void check_knob_constraint(const Piece& p) {
    scope_.clear_iters();
    ExprContext ctx{"a knob constraint", false, false, false, false, true};
    Typer typer(src_, scope_, ctx);
    ir::Expr e =
        p.link >= 0 ? typer.comparison(*p.ast, p.link) : typer.as_bool(*p.ast, "a knob constraint");
    func_.knob_constraints.push_back(ir::Constraint{e, src_.loc(p.start())});
  }

  // A knob's fit, once every knob is declared: a condition on knobs, params and the target's
  // sizes (ir::kTargetSizes).
  void check_fit(const KnobDecl& d) {
    scope_.clear_iters();
    ExprContext ctx{"the fit of knob " + q(d.name.name), false, false, false, false, true, true};
    Typer typer(src_, scope_, ctx);
    ir::Expr e = typer.as_bool(*d.fit, "the fit of knob " + q(d.name.name));
    for (ir::Knob& k : func_.knobs)
      if (k.name == d.name.name) k.fit = e;
  }

  // A constraint at the func's level, or in the schedule block (`in_schedule`), where only a
  // knob constraint may stand: a fact about params there would change the algorithm.
  void check(const ConstraintDecl& d, bool in_schedule = false) {
    scope_.clear_iters();
    ExprContext ctx{"a constraint", false, false, false, false};
    AffineContext actx{"a constraint", false};
    Typer typer(src_, scope_, ctx);
    std::vector<Piece> pieces;
    split(*d.cond, pieces);
    for (const Piece& p : pieces) {
      if (mentions_knob(p)) {
        knob_pieces_.push_back(p);  // checked once every knob is declared
        continue;
      }
      if (in_schedule)
        fail(p.start(),
             "a constraint in the schedule block names no knob: a fact about params goes at the "
             "func's level (constraint ...; beside the params), a knob constraint in the block");
      ir::Expr e =
          p.link >= 0 ? typer.comparison(*p.ast, p.link) : typer.as_bool(*p.ast, "a constraint");
      check_condition(src_, scope_, actx, *p.ast, p.link, nullptr);
      func_.constraints.push_back(ir::Constraint{e, src_.loc(p.start())});
    }
  }

  void check(const BufferDecl& d) {
    const std::string name = q(d.name.name);
    Decl decl;
    decl.kind = Decl::Kind::Buffer;
    decl.dtype = d.dtype;
    decl.rank = d.shape.size();
    decl.buf_kind = d.kind;
    scope_.clear_iters();
    ir::Buf b;
    b.name = d.name.name;
    b.dtype = d.dtype;
    b.kind = d.kind;
    b.where = src_.loc(d.name.pos);
    ExprContext ctx{"the shape of " + name, false, false, false, false};
    AffineContext actx{"the shape of " + name, false};
    Typer typer(src_, scope_, ctx);
    for (size_t k = 0; k < d.shape.size(); ++k) {
      const Ast& a = *d.shape[k];
      std::string what = "extent " + std::to_string(k + 1) + " of buffer " + name;
      ir::Expr e = typer.as_index(a, what);
      check_affine(src_, scope_, actx, a);
      if (const auto* c = ir::as<ir::IntImm>(e); c && c->value <= 0) {
        fail(a.start, what + " must be positive, found " + std::to_string(c->value));
      }
      b.shape.push_back(e);
    }
    if (d.kind != ir::BufKind::Input && (d.range || d.sorted)) {
      fail(d.range ? d.range->pos : d.sorted_pos,
           std::string(d.range ? "a value range" : "'sorted'") +
               " is only allowed on input buffers; " + name + " is " +
               (d.kind == ir::BufKind::Output ? "an output" : "a temp"));
    }
    if (d.range) check_range(d, b, name);
    b.values.sorted = d.sorted;
    declare_name(d.name, decl);
    func_.bufs.push_back(std::move(b));
  }

  void check_range(const BufferDecl& d, ir::Buf& b, const std::string& name) {
    const ValueRange& r = *d.range;
    if (d.dtype == ir::DType::Bool)
      fail(r.pos, "bool buffer " + name + " cannot have a value range");
    ExprContext ctx{"the value range of " + name, false, false, false, false};
    Typer typer(src_, scope_, ctx);
    auto bound = [&](const Ast& a, const char* which) {
      std::string what = std::string("the ") + which + " bound of the value range of " + name;
      return ir::is_int(d.dtype) ? typer.as_index(a, what) : typer.as_type(a, d.dtype, what);
    };
    b.values.lo = bound(*r.lo, "lower");
    b.values.hi = bound(*r.hi, "upper");
    b.values.lo_inclusive = r.lo_inclusive;
    b.values.hi_inclusive = r.hi_inclusive;
    auto number = [](const ir::Expr& e) -> std::optional<double> {
      if (const auto* i = ir::as<ir::IntImm>(e)) return static_cast<double>(i->value);
      if (const auto* f = ir::as<ir::FloatImm>(e)) return f->value;
      return std::nullopt;
    };
    auto lo = number(b.values.lo), hi = number(b.values.hi);
    // Integers compare exactly: near 2^63, neighbours are one double.
    const auto* ilo = ir::as<ir::IntImm>(b.values.lo);
    const auto* ihi = ir::as<ir::IntImm>(b.values.hi);
    bool empty =
        ilo && ihi ? ilo->value > ihi->value ||
                         (ilo->value == ihi->value && !(r.lo_inclusive && r.hi_inclusive))
                   : lo && hi && (*lo > *hi || (*lo == *hi && !(r.lo_inclusive && r.hi_inclusive)));
    if (empty) {
      fail(r.pos, "the value range of " + name + " is empty");
    }
    // The values the range allows must be values of the type: the ends as
    // written, an exclusive one counting as itself (it bounds the others).
    double lowest = ir::dtype_min(d.dtype), highest = ir::dtype_max(d.dtype);
    if ((lo && *lo < lowest - (r.lo_inclusive ? 0.0 : 1.0)) ||
        (hi && *hi > highest + (r.hi_inclusive ? 0.0 : 1.0))) {
      fail(r.pos, fmt::format("the value range of {} goes beyond its type {}, which holds {} to {}",
                              name, ir::dtype_name(d.dtype), lowest, highest));
    }
  }

  void check(const OptionDecl& d) {
    if (d.name.name != "fast_math")
      fail(d.name.pos, "unknown option " + q(d.name.name) + "; the options are: fast_math");
    if (func_.fast_math) fail(d.name.pos, "option " + q(d.name.name) + " is given twice");
    func_.fast_math = true;
  }

  static std::string join_names(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

  void check(const KnobDecl& d) {
    Decl decl;
    decl.kind = Decl::Kind::Knob;
    if (d.is_order) {
      declare_name(d.name, decl);
      ir::Knob k{d.name.name, 0, {}, src_.loc(d.name.pos)};
      std::string name = q(d.name.name);
      auto names = [](const std::vector<Ident>& ids) {
        std::vector<std::string> out;
        for (const Ident& i : ids) out.push_back(i.name);
        return out;
      };
      k.order_loops = names(d.order_loops);
      if (k.order_loops.size() < 2)
        fail(d.name.pos, "order knob " + name + " orders one loop; it needs two or more");
      std::vector<std::string> sorted = k.order_loops;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        fail(d.order_loops.front().pos, "order knob " + name + " names a loop twice");
      auto is_order = [&](const std::vector<std::string>& o) {
        std::vector<std::string> s = o;
        std::sort(s.begin(), s.end());
        return s == sorted;
      };
      if (d.orders.empty()) {
        k.orders = ir::all_orders_of(k.order_loops);
        k.all_orders = true;
      } else {
        for (const std::vector<Ident>& o : d.orders) {
          std::vector<std::string> order = names(o);
          if (!is_order(order))
            fail(o.front().pos, "order knob " + name + ": (" + join_names(order) +
                                    ") is not an order of its loops (" + join_names(k.order_loops) +
                                    ")");
          if (std::find(k.orders.begin(), k.orders.end(), order) != k.orders.end())
            fail(o.front().pos,
                 "order knob " + name + " lists the order (" + join_names(order) + ") twice");
          k.orders.push_back(std::move(order));
        }
      }
      if (!d.default_order.empty()) {
        auto at = std::find(k.orders.begin(), k.orders.end(), names(d.default_order));
        if (at == k.orders.end())
          fail(d.default_order.front().pos, "the default (" + join_names(names(d.default_order)) +
                                                ") of order knob " + name +
                                                " is not one of its orders");
        k.value = at - k.orders.begin();
      }
      for (size_t i = 0; i < k.orders.size(); ++i) k.candidates.push_back(static_cast<int64_t>(i));
      func_.knobs.push_back(std::move(k));
      return;
    }
    if (d.is_split) {
      ir::KnobSplit s;
      for (size_t i = 0; i < d.parts.size(); ++i) {
        declare_name(d.parts[i], decl);
        s.parts.push_back(d.parts[i].name);
        func_.knobs.push_back(ir::Knob{
            d.parts[i].name, i == 0 ? 0 : d.part_values[i - 1], {}, src_.loc(d.parts[i].pos)});
      }
      if (d.max_factor < 0)
        fail(d.extent_pos, "the largest part (max) of a knob split is positive");
      s.extent_param = d.extent_param;
      s.extent = d.extent;
      s.pow2 = d.pow2;
      s.max_factor = d.max_factor;
      s.where = src_.loc(d.extent_pos);
      if (!d.extent_param.empty() && !func_.find_param(d.extent_param)) {
        bool later = false;
        for (const Item& item : decl_.items)
          if (const auto* p = std::get_if<ParamDecl>(&item))
            later = later || p->name.name == d.extent_param;
        if (!later)
          fail(d.extent_pos, "the extent " + q(d.extent_param) +
                                 " of a knob split is not a param of " + q(func_.name));
      }
      func_.knob_splits.push_back(std::move(s));
      return;
    }
    declare_name(d.name, decl);
    if (d.is_tag && d.fit)
      fail(d.fit->start, "tag knob " + q(d.name.name) +
                             " cannot have a default fitted to the target ('fit'); only number "
                             "knobs can");
    if (d.fit) fitted_.push_back(&d);
    if (d.is_tag && !d.target_defaults.empty())
      fail(d.target_defaults.front().first.pos,
           "tag knob " + q(d.name.name) +
               " cannot have defaults by target ('for'); only number knobs can");
    if (d.is_tag) {
      // Its value is the number of its tag in the list: what --set and the tuner give.
      ir::Knob k{d.name.name, 0, {}, src_.loc(d.name.pos), d.tags};
      for (size_t i = 0; i < d.tags.size(); ++i) {
        if (!ir::loop_tag_from_name(d.tags[i]))
          fail(d.candidate_pos[i], "tag knob " + q(d.name.name) + ": '" + d.tags[i] +
                                       "' is not a tag (none, parallel, vectorize, unroll, "
                                       "unroll_explicit, gpu_block_x/y/z, gpu_thread_x/y/z)");
        for (size_t j = 0; j < i; ++j)
          if (d.tags[j] == d.tags[i])
            fail(d.candidate_pos[i],
                 "tag knob " + q(d.name.name) + " lists the tag " + d.tags[i] + " twice");
        k.candidates.push_back(static_cast<int64_t>(i));
      }
      auto at = std::find(d.tags.begin(), d.tags.end(), d.tag_value);
      if (at == d.tags.end())
        fail(d.value_pos, "the default " + d.tag_value + " of tag knob " + q(d.name.name) +
                              " is not one of its tags [" + join_names(d.tags) + "]");
      k.value = at - d.tags.begin();
      func_.knobs.push_back(std::move(k));
      return;
    }
    for (size_t k = 0; k < d.candidates.size(); ++k) {
      for (size_t j = 0; j < k; ++j) {
        if (d.candidates[j] == d.candidates[k]) {
          fail(d.candidate_pos[k], "knob " + q(d.name.name) + " lists the candidate " +
                                       std::to_string(d.candidates[k]) + " twice");
        }
      }
    }
    if (std::find(d.candidates.begin(), d.candidates.end(), d.value) == d.candidates.end()) {
      std::string list;
      for (int64_t c : d.candidates) list += (list.empty() ? "" : ", ") + std::to_string(c);
      fail(d.value_pos, "the default " + std::to_string(d.value) + " of knob " + q(d.name.name) +
                            " is not one of its candidates [" + list + "]");
    }
    ir::Knob knob{d.name.name, d.value, d.candidates, src_.loc(d.name.pos)};
    for (size_t i = 0; i < d.target_defaults.size(); ++i) {
      const auto& [feature, value] = d.target_defaults[i];
      if (std::find(d.candidates.begin(), d.candidates.end(), value) == d.candidates.end()) {
        std::string list;
        for (int64_t c : d.candidates) list += (list.empty() ? "" : ", ") + std::to_string(c);
        fail(d.target_default_pos[i], "the default " + std::to_string(value) + " of knob " +
                                          q(d.name.name) + " on targets with " + feature.name +
                                          " is not one of its candidates [" + list + "]");
      }
      for (size_t j = 0; j < i; ++j)
        if (d.target_defaults[j].first.name == feature.name)
          fail(feature.pos,
               "knob " + q(d.name.name) + " gives a default for " + feature.name + " twice");
      knob.target_defaults.push_back({feature.name, value});
    }
    func_.knobs.push_back(std::move(knob));
  }

  void check(const ScheduleDecl& d) {
    if (schedule_) {
      fail(d.pos, "func " + q(func_.name) + " has a second schedule block (the first is at " +
                      at_pos(*schedule_) + "); a func has at most one");
    }
    schedule_ = d.pos;
    for (const KnobDecl& k : d.knobs) check(k);
    for (const ConstraintDecl& c : d.constraints) check(c, true);
    func_.schedule = d.commands;
  }

  void check_schedule_targets() const {
    for (const ir::ScheduleCommand& c : func_.schedule) {
      if (scope_.comp(c.target)) continue;
      if (const Decl* d = scope_.name(c.target); d && d->kind == Decl::Kind::Buffer) continue;
      throw CompileError(ErrorStage::Validate, c.where,
                         "schedule command " + q(c.target + "." + c.op) + " names " + q(c.target) +
                             ", which is neither a computation nor a buffer of " + q(func_.name) +
                             scope_.suggest(c.target));
    }
  }

  // ---- computations

  // Checks the conditions of a domain with the iterators now in scope,
  // appending them to `out` and marking what they bound.
  void check_domain(const std::vector<AstPtr>& conds, const std::string& what,
                    std::vector<ir::Expr>& out, Bounds& bounds) {
    ExprContext ctx{what, true, true, true, false};
    AffineContext actx{what, true};
    Typer typer(src_, scope_, ctx);
    for (const AstPtr& c : conds) {
      std::vector<Piece> pieces;
      split(*c, pieces);
      for (const Piece& p : pieces) {
        ir::Expr e = p.link >= 0 ? typer.comparison(*p.ast, p.link)
                                 : typer.as_bool(*p.ast, "a condition of " + what);
        check_condition(src_, scope_, actx, *p.ast, p.link, &bounds);
        out.push_back(e);
      }
    }
  }

  void require_bounds(const Bounds& bounds, size_t from, const std::string& comp) const {
    const auto& iters = scope_.iters();
    for (size_t k = from; k < iters.size(); ++k) {
      const std::string& i = iters[k].name;
      if (!bounds.lower[k]) {
        fail(iters[k].pos, "iterator " + q(i) + " of " + q(comp) +
                               " has no lower bound; add a condition such as " + q("0 <= " + i) +
                               " to its domain");
      }
      if (!bounds.upper[k]) {
        fail(iters[k].pos, "iterator " + q(i) + " of " + q(comp) +
                               " has no upper bound; add a condition such as " + q(i + " < N") +
                               " to its domain");
      }
    }
  }

  // The algorithm loops from the outermost to `loop` (-1: none).
  std::vector<int> loop_path(int loop) const {
    std::vector<int> path;
    for (int l = loop; l >= 0; l = func_.loops.at(static_cast<size_t>(l)).parent)
      path.insert(path.begin(), l);
    return path;
  }

  // Puts the iterators of `path` in scope, outermost first.
  void push_loop_iters(const std::vector<int>& path) {
    for (int l : path) scope_.push_iter(loop_iters_.at(static_cast<size_t>(l)));
  }

  void check(const LoopDecl& d) {
    std::string lname = q("for " + d.iter.name);
    std::vector<int> outer = loop_path(d.parent);
    scope_.clear_iters();
    scope_.current_comp.clear();
    push_loop_iters(outer);
    check_iter_name(d.iter, "for " + d.iter.name);
    scope_.push_iter(d.iter);
    ir::AlgorithmLoop loop;
    loop.iter = d.iter.name;
    loop.parent = d.parent;
    loop.where = src_.loc(d.pos);
    Bounds bounds(scope_.iters().size());
    check_domain(d.domain, "the range of " + lname, loop.domain, bounds);
    require_bounds(bounds, outer.size(), "for " + d.iter.name);
    func_.loops.push_back(std::move(loop));
    loop_iters_.push_back(d.iter);
  }

  void check(const ComputeDecl& d) {
    const std::string& cname = d.name.name;
    check_comp_name(d.name);
    scope_.clear_iters();
    scope_.current_comp = cname;
    std::vector<int> path = loop_path(d.loop);
    push_loop_iters(path);
    for (const Ident& i : d.iters) {
      check_iter_name(i, cname);
      scope_.push_iter(i);
    }
    ir::Comp comp;
    comp.name = cname;
    comp.where = src_.loc(d.name.pos);
    comp.loops = path;
    for (const Ident& i : scope_.iters()) comp.iters.push_back(i.name);
    for (int l : path) {
      const auto& outer = func_.loops.at(static_cast<size_t>(l)).domain;
      comp.domain.insert(comp.domain.end(), outer.begin(), outer.end());
    }
    Bounds bounds(scope_.iters().size());
    check_domain(d.domain, "the domain of " + q(cname), comp.domain, bounds);
    require_bounds(bounds, path.size(), cname);

    ExprContext body{"the value of " + q(cname), true, true, false, true};
    Decl decl;
    decl.kind = Decl::Kind::Comp;
    decl.pos = d.name.pos;
    decl.rank = comp.iters.size();
    if (!d.stores && !path.empty()) {
      const ir::AlgorithmLoop& l = func_.loops.at(static_cast<size_t>(path.back()));
      fail(d.name.pos, "value computation " + q(cname) + " is inside " + q("for " + l.iter) +
                           " (at " + at_pos(loop_iters_.at(static_cast<size_t>(path.back())).pos) +
                           "): only computations that store may be; declare it outside the loop, "
                           "with " +
                           q(l.iter) + " as an iterator of its own");
    }
    if (!d.stores) {
      comp.value = Typer(src_, scope_, body).as_default(*d.value);
      decl.dtype = comp.value->type;
      scope_.add_comp(cname, decl);
      check_size(d.name, comp);
      func_.comps.push_back(std::move(comp));
      scope_.current_comp.clear();
      return;
    }

    // A store: the target must be a writable buffer, indexed affinely in the
    // iterators and params or through reads of buffers (a scatter).
    const std::string tname = q(d.target.name);
    const Decl* buf = scope_.name(d.target.name);
    if (!buf || buf->kind != Decl::Kind::Buffer) {
      if (buf) fail(d.target.pos, tname + " is " + decl_kind_name(buf->kind) + ", not a buffer");
      fail(d.target.pos,
           "unknown buffer " + tname + scope_.unknown_hint(d.target.name, d.target.pos));
    }
    if (buf->buf_kind == ir::BufKind::Input) {
      fail(d.target.pos, "cannot store to " + tname +
                             ": it is an input buffer (only output and temp buffers are written)");
    }
    if (d.target_indices.size() != buf->rank) {
      size_t n = d.target_indices.size();
      fail(d.target.pos, "buffer " + tname + " has " + std::to_string(buf->rank) + " dimension" +
                             (buf->rank == 1 ? "" : "s") + " but the store gives " +
                             std::to_string(n) + (n == 1 ? " index" : " indices"));
    }
    ir::DType dt = buf->dtype;
    ir::StoreTarget target{d.target.name, {}, src_.loc(d.target.pos)};
    {
      Typer typer(src_, scope_, body);
      AffineContext actx{"the indices of the store to " + tname, true};
      for (size_t k = 0; k < d.target_indices.size(); ++k) {
        const Ast& a = *d.target_indices[k];
        target.indices.push_back(
            typer.as_index(a, "index " + std::to_string(k + 1) + " of the store to " + tname));
        check_affine(src_, scope_, actx, a);
      }
    }
    ir::Expr current = ir::load(target.buf, target.indices, dt, target.where);

    if (d.reduction) return check_reduction(d, std::move(comp), std::move(target), decl, dt);

    ir::Expr value =
        Typer(src_, scope_, body).as_type(*d.value, dt, "the value stored to " + tname);
    if (d.assign != AssignOp::Set) {
      const char* op = d.assign == AssignOp::Add ? "+=" : d.assign == AssignOp::Sub ? "-=" : "*=";
      if (dt == ir::DType::Bool) {
        fail(d.assign_pos, q(op) + " needs a numeric buffer; " + tname + " is bool");
      }
      ir::BinaryOp bop = d.assign == AssignOp::Add   ? ir::BinaryOp::Add
                         : d.assign == AssignOp::Sub ? ir::BinaryOp::Sub
                                                     : ir::BinaryOp::Mul;
      value = ir::binary(bop, current, value);
    }
    comp.value = value;
    comp.store = std::move(target);
    decl.dtype = dt;
    decl.stores = true;
    scope_.add_comp(cname, decl);
    check_size(d.name, comp);
    func_.comps.push_back(std::move(comp));
    scope_.current_comp.clear();
  }

  // C[i] = sum(k in Dk) e  becomes  C_init(i) in D: C[i] = 0
  //                         and     C(i, k) in D, Dk: C[i] = C[i] + e.
  void check_reduction(const ComputeDecl& d, ir::Comp comp, ir::StoreTarget target, Decl decl,
                       ir::DType dt) {
    const ReductionAst& r = *d.reduction;
    const std::string& cname = d.name.name;
    const std::string rname = q(r.op.name);
    if (dt == ir::DType::Bool) {
      fail(r.op.pos,
           "reduction " + rname + " needs a numeric buffer; " + q(d.target.name) + " is bool");
    }
    size_t outer = scope_.iters().size();
    for (const Ident& i : r.iters) {
      check_iter_name(i, cname);
      scope_.push_iter(i);
    }
    Bounds bounds(scope_.iters().size());
    std::vector<ir::Expr> inner;
    check_domain(r.domain, "the domain of reduction " + rname + " in " + q(cname), inner, bounds);
    require_bounds(bounds, outer, cname);

    ExprContext body{"the value of " + q(cname), true, true, false, true};
    ir::Expr e =
        Typer(src_, scope_, body)
            .as_type(*r.body, dt, "the body of reduction " + rname + " into " + q(d.target.name));

    Ident init_name{cname + "_init", r.op.pos};
    std::string made_by = "the reduction in " + q(cname);
    check_comp_name(init_name, made_by);

    ir::Comp init;
    init.name = init_name.name;
    init.iters = comp.iters;
    init.domain = comp.domain;
    init.value = ir::reduction_identity(reduction_op(r.op.name), dt);
    init.store = target;
    init.where = src_.loc(r.op.pos);
    init.loops = comp.loops;

    for (const Ident& i : r.iters) comp.iters.push_back(i.name);
    comp.domain.insert(comp.domain.end(), inner.begin(), inner.end());
    comp.value = ir::binary(reduction_op(r.op.name),
                            ir::load(target.buf, target.indices, dt, target.where), e);
    comp.store = std::move(target);

    decl.dtype = dt;
    decl.stores = true;
    Decl init_decl = decl;
    init_decl.pos = r.op.pos;
    init_decl.made_by = made_by;
    scope_.add_comp(init.name, init_decl);
    decl.rank = comp.iters.size();
    scope_.add_comp(cname, decl);
    check_size(d.name, init);
    func_.comps.push_back(std::move(init));
    check_size(d.name, comp);
    func_.comps.push_back(std::move(comp));
    scope_.current_comp.clear();
  }

  const Source& src_;
  const FuncDecl& decl_;
  Scope scope_;
  std::vector<Ident> loop_iters_;  // the iterator of each algorithm loop checked so far
  // The size limits on one computation, once it is built (docs/limits.md).
  void check_size(const Ident& name, const ir::Comp& comp) {
    if (comp.iters.size() > limits_.max_domain_dims) {
      fail(name.pos, fmt::format("computation {} has {} iterators, more than the limit of {} "
                                 "(max_domain_dims, docs/limits.md)",
                                 q(comp.name), comp.iters.size(), limits_.max_domain_dims));
    }
    size_t nodes = 0;
    auto count = [&](const ir::Expr& e) {
      ir::any_subexpr(e, [&](const ir::Expr&) { return ++nodes > limits_.max_expression_nodes; });
    };
    if (comp.value) count(comp.value);
    for (const ir::Expr& d : comp.domain) count(d);
    if (nodes > limits_.max_expression_nodes) {
      fail(name.pos, fmt::format("computation {} has more than {} expression nodes "
                                 "(max_expression_nodes, docs/limits.md)",
                                 q(comp.name), limits_.max_expression_nodes));
    }
    if (func_.comps.size() >= limits_.max_computations) {
      fail(name.pos, fmt::format("{} has more than {} computations (max_computations, "
                                 "docs/limits.md)",
                                 q(func_.name), limits_.max_computations));
    }
  }

  ir::Func func_;
  std::optional<Pos> schedule_;
  std::set<std::string> knob_names_;     // every knob of the func, wherever declared
  std::vector<Piece> knob_pieces_;       // constraint pieces that name a knob
  std::vector<const KnobDecl*> fitted_;  // knobs with a fit, checked once every knob is declared
  const Limits& limits_;
};

}  // namespace

ir::Module check(const Source& src, const ModuleDecl& module, const Limits& limits) {
  ir::Module m;
  std::map<std::string, Pos> seen;
  for (const FuncDecl& f : module.funcs) {
    auto [it, fresh] = seen.emplace(f.name.name, f.name.pos);
    if (!fresh) {
      src.validate_error(f.name.pos, "duplicate func " + q(f.name.name) + ": already declared at " +
                                         at_pos(it->second));
    }
    m.funcs.push_back(FuncChecker(src, f, limits).run());
  }
  for (const GraphDecl& g : module.graphs) {
    auto [it, fresh] = seen.emplace(g.name.name, g.name.pos);
    if (!fresh) {
      src.validate_error(g.name.pos, "duplicate name " + q(g.name.name) + ": already declared at " +
                                         at_pos(it->second) +
                                         " (funcs and graphs share one namespace)");
    }
    m.graphs.push_back(check_graph(src, g, m));
  }
  return m;
}

}  // namespace kiln::frontend
