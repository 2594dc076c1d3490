// Lowering: isl's AST for the scheduled computations, turned into kiln's loop IR,
// with data-dependent bounds read inside the loops that define them.
#include <isl/ast.h>
#include <isl/ast_build.h>
#include <isl/id.h>
#include <isl/map.h>
#include <isl/schedule.h>
#include <isl/union_map.h>
#include <isl/val.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <set>

#include "affine_function.h"
#include "kiln/analysis.h"
#include "kiln/timing.h"
#include "model.h"

namespace kiln::poly {
namespace {

using Impl = ScheduledFunc::Impl;

[[noreturn]] void fail(const SourceLoc& where, const std::string& msg) {
  throw CompileError(ErrorStage::Lower, where, msg);
}

ir::Expr plus(const ir::Expr& e, int64_t k) {
  if (k == 0) return e;
  if (auto* i = ir::as<ir::IntImm>(e)) return ir::int_imm(i->value + k, e->type);
  if (auto* b = ir::as<ir::Binary>(e)) {
    if (b->op == ir::BinaryOp::Min || b->op == ir::BinaryOp::Max)
      return ir::binary(b->op, plus(b->a, k), plus(b->b, k));
    if (auto* c = ir::as<ir::IntImm>(b->b)) {
      if (b->op == ir::BinaryOp::Add) return plus(b->a, c->value + k);
      if (b->op == ir::BinaryOp::Sub) return plus(b->a, k - c->value);
    }
  }
  if (k < 0) return ir::binary(ir::BinaryOp::Sub, e, ir::int_imm(-k, e->type));
  return ir::binary(ir::BinaryOp::Add, e, ir::int_imm(k, e->type));
}

// Calls f on n and, while f returns true for a node, on the nodes below it,
// top down: isl's foreach_descendant_top_down, on owned handles.
void for_each_descendant(const isl::ast_node& n,
                         const std::function<bool(const isl::ast_node&)>& f) {
  if (!f(n)) return;
  if (n.isa<isl::ast_node_for>()) {
    for_each_descendant(n.as<isl::ast_node_for>().body(), f);
  } else if (n.isa<isl::ast_node_if>()) {
    isl::ast_node_if i = n.as<isl::ast_node_if>();
    for_each_descendant(i.then_node(), f);
    if (i.has_else_node()) for_each_descendant(i.else_node(), f);
  } else if (n.isa<isl::ast_node_block>()) {
    isl::ast_node_list children = n.as<isl::ast_node_block>().children();
    for (unsigned k = 0; k < children.size(); ++k) for_each_descendant(children.at(k), f);
  } else if (n.isa<isl::ast_node_mark>()) {
    for_each_descendant(n.as<isl::ast_node_mark>().node(), f);
  }
}

// The name of an identifier expression (a loop iterator, a statement).
std::string id_name(const isl::ast_expr& e) { return e.as<isl::ast_expr_id>().id().name(); }

// The statement a user node runs: the name of its call.
std::string statement_of(const isl::ast_node_user& n) {
  return id_name(n.expr().as<isl::ast_expr_op>().arg(0));
}

// The name of the mark above each band of the schedule tree; its user
// pointer is the band's members, the schedule dims its loops iterate over.
constexpr const char* kBandMark = "kiln.band";

// Comp names of the user statements below an AST node.
std::set<std::string> statements_in(const isl::ast_node& node) {
  std::set<std::string> names;
  for_each_descendant(node, [&](const isl::ast_node& n) {
    if (!n.isa<isl::ast_node_user>()) return true;
    names.insert(statement_of(n.as<isl::ast_node_user>()));
    return false;
  });
  return names;
}

class AstLowering {
 public:
  explicit AstLowering(const Impl& m) : m_(m) {
    for (const auto& [name, v] : m.constants) constants_[name] = ir::int_imm(v);
    for (const auto& c : m.comps) {
      by_isl_name_[isl_name(c.name)] = &c;
      for (const auto& dp : c.data_params) data_owner_[dp.name].push_back({&c, dp.value});
    }
  }

  // Finds the schedule dim of each loop below n. isl names a loop's iterator
  // by its depth, "cD" at depth D, and a band's members differ from
  // path to path (schedule_tree leaves out the dims of one value where they
  // have one): the marks above the bands on the loop's path give the dims,
  // one per depth.
  void map_loop_dims(const isl::ast_node& n, std::vector<int>& path) {
    if (n.isa<isl::ast_node_mark>()) {
      isl::ast_node_mark mark = n.as<isl::ast_node_mark>();
      isl::id id = mark.id();
      size_t outer = path.size();
      if (id.name() == kBandMark) {
        const auto* members = static_cast<const std::vector<int>*>(isl_id_get_user(id.get()));
        path.insert(path.end(), members->begin(), members->end());
      }
      map_loop_dims(mark.node(), path);
      path.resize(outer);
      return;
    }
    if (n.isa<isl::ast_node_for>()) {
      isl::ast_node_for loop = n.as<isl::ast_node_for>();
      size_t depth = static_cast<size_t>(std::stoi(id_name(loop.iterator()).substr(1)));
      if (depth >= path.size())
        fail(m_.func.where, "isl generated a loop outside the bands of " + m_.func.name);
      dim_of_[loop.get()] = path[depth];
      map_loop_dims(loop.body(), path);
      return;
    }
    if (n.isa<isl::ast_node_if>()) {
      isl::ast_node_if i = n.as<isl::ast_node_if>();
      map_loop_dims(i.then_node(), path);
      if (i.has_else_node()) map_loop_dims(i.else_node(), path);
      return;
    }
    if (n.isa<isl::ast_node_block>()) {
      isl::ast_node_list children = n.as<isl::ast_node_block>().children();
      for (unsigned k = 0; k < children.size(); ++k) map_loop_dims(children.at(k), path);
    }
  }

  // Lowers an AST node, and allocates there each temporary of an alloc site
  // (alloc_at, caches) whose loop this node lies inside (see site_starts_at).
  ir::Stmt node(const isl::ast_node& n) {
    std::vector<const AllocSite*> here;
    for (const auto& site : m_.alloc_sites)
      if (!allocated_.count(site.buf) && site_starts_at(n, site)) here.push_back(&site);
    for (const AllocSite* site : here) allocated_.insert(site->buf);
    ir::Stmt body = lower_node(n);
    for (const AllocSite* site : here) {
      allocated_.erase(site->buf);
      placed_.insert(site->buf);
      const ir::Buf* b = m_.func.find_buf(site->buf);
      std::vector<ir::Expr> shape;
      for (const auto& e : b->shape) shape.push_back(folded(e, m_.constants));
      body = std::make_shared<ir::Alloc>(b->name, b->dtype, shape, m_.buf_locs.at(b->name), body);
    }
    return body;
  }

  ir::Stmt lower_node(const isl::ast_node& n) {
    if (n.isa<isl::ast_node_for>()) return for_node(n.as<isl::ast_node_for>());
    if (n.isa<isl::ast_node_if>()) return if_node(n.as<isl::ast_node_if>());
    if (n.isa<isl::ast_node_user>()) return user_node(n.as<isl::ast_node_user>());
    if (n.isa<isl::ast_node_mark>()) return node(n.as<isl::ast_node_mark>().node());
    if (n.isa<isl::ast_node_block>()) {
      isl::ast_node_list children = n.as<isl::ast_node_block>().children();
      std::vector<ir::Stmt> stmts;
      for (unsigned k = 0; k < children.size(); ++k) stmts.push_back(node(children.at(k)));
      return ir::block(stmts);
    }
    fail(m_.func.where, "isl produced an AST node kiln does not know");
  }

  // Places `let p = value` for every data-dependent param p at the outermost
  // point where it is used, which must lie inside the loops its value reads.
  ir::Stmt place_data_params(const ir::Stmt& s, std::set<std::string> bound) {
    if (!s) return s;
    std::set<std::string> used = own_data_uses(s, bound);
    if (!used.empty()) {
      const std::string& p = *used.begin();
      auto def = definition_at(s, p);
      if (!def || !all_bound(*def, bound)) {
        if (auto pushed = push_if_down(s)) return place_data_params(pushed, bound);
        const auto& [comp, value] = data_owner_.at(p).front();
        fail(comp->comp ? comp->comp->where : m_.func.where,
             "cannot generate code for '" + comp->name +
                 "': its schedule needs the data-dependent bound " + ir::to_string(value) +
                 " outside the loops that define it (a loop over a bound read "
                 "at run time must stay inside the loops the read depends on)");
      }
      bound.insert(p);
      return std::make_shared<ir::LetStmt>(p, *def, place_data_params(s, bound));
    }
    if (auto* f = ir::as<ir::For>(s)) {
      auto inner = bound;
      inner.insert(f->var);
      return std::make_shared<ir::For>(f->var, f->min, f->end, f->step, f->tag,
                                       place_data_params(f->body, inner));
    }
    if (auto* i = ir::as<ir::IfThenElse>(s))
      return std::make_shared<ir::IfThenElse>(i->cond, place_data_params(i->then_case, bound),
                                              place_data_params(i->else_case, bound));
    if (auto* l = ir::as<ir::LetStmt>(s)) {
      auto inner = bound;
      inner.insert(l->var);
      return std::make_shared<ir::LetStmt>(l->var, l->value, place_data_params(l->body, inner));
    }
    if (auto* b = ir::as<ir::Block>(s)) {
      std::vector<ir::Stmt> out;
      for (const auto& x : b->stmts) out.push_back(place_data_params(x, bound));
      return ir::block(out);
    }
    if (auto* a = ir::as<ir::Alloc>(s))
      return std::make_shared<ir::Alloc>(a->buf, a->dtype, a->shape, a->loc,
                                         place_data_params(a->body, bound));
    return s;
  }

 private:
  struct DataOwner {
    const CompModel* comp;
    ir::Expr value;
  };

  ir::Expr expr(const isl::ast_expr& e) {
    if (e.isa<isl::ast_expr_int>()) return ir::int_imm(e.as<isl::ast_expr_int>().val().num_si());
    if (e.isa<isl::ast_expr_id>()) {
      std::string name = id_name(e);
      auto it = loop_vars_.find(name);
      if (it != loop_vars_.end()) return ir::var(it->second);
      for (const auto& p : m_.runtime_params)
        if (isl_name(p) == name) return ir::var(p);
      return ir::var(name);  // a data-dependent param
    }
    if (!e.isa<isl::ast_expr_op>())
      fail(m_.func.where, "isl produced an expression kiln does not know");
    isl::ast_expr_op op = e.as<isl::ast_expr_op>();
    std::vector<ir::Expr> a;
    for (unsigned i = 0; i < op.n_arg(); ++i) a.push_back(expr(op.arg(static_cast<int>(i))));
    using ir::BinaryOp;
    auto fold = [&](BinaryOp op) {
      ir::Expr r = a[0];
      for (size_t i = 1; i < a.size(); ++i) r = ir::binary(op, r, a[i]);
      return r;
    };
    // The operator's kind, read through the handle (nothing is taken).
    switch (isl_ast_expr_op_get_type(op.get())) {
      case isl_ast_expr_op_and:
      case isl_ast_expr_op_and_then:
        return fold(BinaryOp::And);
      case isl_ast_expr_op_or:
      case isl_ast_expr_op_or_else:
        return fold(BinaryOp::Or);
      case isl_ast_expr_op_max:
        return fold(BinaryOp::Max);
      case isl_ast_expr_op_min:
        return fold(BinaryOp::Min);
      case isl_ast_expr_op_minus:
        return ir::unary(ir::UnaryOp::Neg, a[0]);
      case isl_ast_expr_op_add:
        return fold(BinaryOp::Add);
      case isl_ast_expr_op_sub:
        return fold(BinaryOp::Sub);
      case isl_ast_expr_op_mul:
        return fold(BinaryOp::Mul);
      case isl_ast_expr_op_div:
      case isl_ast_expr_op_fdiv_q:
      case isl_ast_expr_op_pdiv_q:
        return fold(BinaryOp::Div);
      case isl_ast_expr_op_pdiv_r:
      case isl_ast_expr_op_zdiv_r:
        return fold(BinaryOp::Mod);
      case isl_ast_expr_op_eq:
        return fold(BinaryOp::Eq);
      case isl_ast_expr_op_le:
        return fold(BinaryOp::Le);
      case isl_ast_expr_op_lt:
        return fold(BinaryOp::Lt);
      case isl_ast_expr_op_ge:
        return fold(BinaryOp::Ge);
      case isl_ast_expr_op_gt:
        return fold(BinaryOp::Gt);
      case isl_ast_expr_op_cond:
      case isl_ast_expr_op_select:
        return ir::select(a[0], a[1], a[2]);
      default:
        fail(m_.func.where, "isl produced an operator kiln does not lower");
    }
  }

  std::string unique_name(const std::string& want) {
    std::string name = want;
    for (int k = 1; in_scope_.count(name) || reserved_names().count(name); ++k)
      name = want + "_" + std::to_string(k);
    return name;
  }

  const std::set<std::string>& reserved_names() {
    if (reserved_.empty()) {
      for (const auto& p : m_.func.params) reserved_.insert(p.name);
      for (const auto& b : m_.func.bufs) reserved_.insert(b.name);
      reserved_.insert("");
    }
    return reserved_;
  }

  // The schedule dim a loop node iterates over (map_loop_dims).
  int schedule_dim_of(const isl::ast_node_for& n) const { return dim_of_.at(n.get()); }

  // A loop's name and tag are those of the computations that share it.
  std::string loop_name(const isl::ast_node_for& n) const {
    int k = schedule_dim_of(n);
    if (k % 2 == 1) {
      std::set<std::string> names = statements_in(n);
      for (const auto& c : m_.comps)
        if (names.count(isl_name(c.name)) && c.loops() > (k - 1) / 2)
          return c.loop_names[(k - 1) / 2];
    }
    return "s" + std::to_string(k);
  }

  ir::LoopTag loop_tag(const isl::ast_node_for& n) const {
    int k = schedule_dim_of(n);
    if (k % 2 == 0) return ir::LoopTag::None;
    std::set<std::string> names = statements_in(n);
    for (const auto& c : m_.comps)
      if (names.count(isl_name(c.name)) && c.loops() > (k - 1) / 2 &&
          c.tags[(k - 1) / 2] != ir::LoopTag::None)
        return c.tags[(k - 1) / 2];
    return ir::LoopTag::None;
  }

  // The computation that privatizes loop n (c.privatize(L)), if any.
  const CompModel* privatizer(const isl::ast_node_for& n) const {
    int k = schedule_dim_of(n);
    if (k % 2 == 0) return nullptr;
    std::set<std::string> names = statements_in(n);
    for (const auto& c : m_.comps)
      if (names.count(isl_name(c.name)) && c.loops() > (k - 1) / 2 &&
          c.privatized.count(c.loop_names[(k - 1) / 2])) {
        if (names.size() > 1) {
          std::string others;
          for (const auto& o : m_.comps)
            if (&o != &c && names.count(isl_name(o.name)))
              others += (others.empty() ? "'" : ", '") + o.name + "'";
          fail(c.comp->where, "cannot privatize loop '" + c.loop_names[(k - 1) / 2] + "' of '" +
                                  c.name + "': " + others +
                                  " also runs inside it, and would not see the updates its "
                                  "copies hold until the loop ends");
        }
        return &c;
      }
    return nullptr;
  }

  ir::Stmt for_node(const isl::ast_node_for& n) {
    std::string iter = id_name(n.iterator());
    std::string var = unique_name(loop_name(n));
    ir::LoopTag tag = loop_tag(n);
    const CompModel* priv = privatizer(n);

    ir::Expr lo = expr(n.init());
    loop_vars_[iter] = var;
    in_scope_.insert(var);

    isl::ast_expr_op cond = n.cond().as<isl::ast_expr_op>();
    ir::Expr hi = expr(cond.arg(1));
    if (cond.isa<isl::ast_expr_op_le>()) {
      hi = plus(hi, 1);
    } else if (!cond.isa<isl::ast_expr_op_lt>()) {
      fail(m_.func.where, "isl produced a loop condition kiln does not lower");
    }
    int64_t step = n.inc().as<isl::ast_expr_int>().val().num_si();
    std::optional<Copies> copies;
    if (priv && !together_.empty())
      fail(priv->comp->where, "cannot privatize loop '" + loop_name(n) + "' of '" + priv->name +
                                  "': it runs inside loop '" + together_.back() + "', tagged " +
                                  ir::loop_tag_name(outer_tag_) +
                                  ", whose iterations would combine their copies " +
                                  "into all of '" + priv->target.buf + "' at the same time");
    if (priv) {
      // Copy number (var - lo) / step of the target, one per iteration.
      const auto* lo_int = ir::as<ir::IntImm>(lo);
      ir::Expr slot = lo_int ? plus(ir::var(var), -lo_int->value)
                             : ir::binary(ir::BinaryOp::Sub, ir::var(var), lo);
      if (step != 1) slot = ir::binary(ir::BinaryOp::Div, slot, ir::int_imm(step));
      copies = Copies{unique_buffer(priv->target.buf + "_" + priv->name), slot};
      copies_[priv->name] = *copies;
    }
    bool runs_together = tag != ir::LoopTag::None && tag != ir::LoopTag::Unroll &&
                         tag != ir::LoopTag::UnrollExplicit;
    ir::LoopTag saved_tag = outer_tag_;
    if (runs_together) {
      together_.push_back(var);
      outer_tag_ = tag;
    }
    ir::Stmt body = node(n.body());
    if (runs_together) {
      together_.pop_back();
      outer_tag_ = saved_tag;
    }
    in_scope_.erase(var);
    loop_vars_.erase(iter);
    if (priv) copies_.erase(priv->name);
    ir::Stmt loop = std::make_shared<ir::For>(var, lo, hi, step, tag, body);
    if (!priv) return loop;
    return privatized(*priv, copies->buf, loop, lo, hi, step, tag);
  }

  // loop, which updates copies of c's target, one per iteration: the
  // copies allocated and set to the update's identity before it, and
  // combined into the target after it.
  ir::Stmt privatized(const CompModel& c, const std::string& buf, const ir::Stmt& loop,
                      const ir::Expr& lo, const ir::Expr& hi, int64_t step, ir::LoopTag tag) {
    const ir::Buf* target = m_.func.find_buf(c.target.buf);
    Update u = lowered_update(c);
    ir::Expr trips;
    const auto *lo_int = ir::as<ir::IntImm>(lo), *hi_int = ir::as<ir::IntImm>(hi);
    if (lo_int && hi_int) {
      trips = ir::int_imm(std::max<int64_t>(0, (hi_int->value - lo_int->value + step - 1) / step));
    } else {
      trips = ir::binary(ir::BinaryOp::Sub, hi, lo);
      if (step != 1)
        trips = ir::binary(ir::BinaryOp::Div, plus(trips, step - 1), ir::int_imm(step));
      trips = ir::binary(ir::BinaryOp::Max, trips, ir::int_imm(0));
    }
    std::vector<ir::Expr> shape = {trips};
    for (const auto& e : target->shape) shape.push_back(folded(e, m_.constants));
    // Loops over every element of the copies: `outer` first when given.
    std::vector<std::string> vars;
    for (size_t d = 0; d < shape.size(); ++d) {
      vars.push_back(unique_name(d == 0 ? "copy" : "e" + std::to_string(d - 1)));
      in_scope_.insert(vars.back());
    }
    for (const auto& v : vars) in_scope_.erase(v);
    // In parallel when L is, over the outermost loop when its iterations
    // write apart: the copies for the init, the target's elements for the
    // combine (none for a target with no dimension).
    auto nest = [&](const std::vector<size_t>& order, ir::Stmt inner, bool combine) {
      for (size_t k = order.size(); k-- > 0;) {
        size_t d = order[k];
        bool apart = k == 0 && (!combine || d != 0);
        ir::LoopTag t = apart && tag == ir::LoopTag::Parallel ? tag : ir::LoopTag::None;
        inner =
            std::make_shared<ir::For>(vars[d], ir::int_imm(0), shape[d], 1, t, std::move(inner));
      }
      return inner;
    };
    std::vector<ir::Expr> all, elem;
    for (size_t d = 0; d < shape.size(); ++d) {
      all.push_back(ir::var(vars[d]));
      if (d) elem.push_back(ir::var(vars[d]));
    }
    // The copies accumulate what the loop subtracts; the target then loses their sum.
    ir::BinaryOp acc = u.op == ir::BinaryOp::Sub ? ir::BinaryOp::Add : u.op;
    std::vector<size_t> copies_first, elements_first;
    for (size_t d = 0; d < shape.size(); ++d) copies_first.push_back(d);
    for (size_t d = 1; d < shape.size(); ++d) elements_first.push_back(d);
    elements_first.push_back(0);
    // The init and the combine run no instance of c: their stores name none.
    ir::Stmt init = nest(
        copies_first,
        std::make_shared<ir::Store>(buf, all, ir::reduction_identity(acc, target->dtype)), false);
    ir::Expr sum = ir::binary(u.op, ir::load(c.target.buf, elem, target->dtype),
                              ir::load(buf, all, target->dtype));
    ir::Stmt combine =
        nest(elements_first, std::make_shared<ir::Store>(c.target.buf, elem, sum), true);
    return std::make_shared<ir::Alloc>(buf, target->dtype, shape, ir::MemLoc::Heap,
                                       ir::block({init, loop, combine}));
  }

  std::string unique_buffer(const std::string& want) {
    std::string name = want;
    for (int k = 1; reserved_names().count(name) || copy_names_.count(name); ++k)
      name = want + "_" + std::to_string(k);
    copy_names_.insert(name);
    return name;
  }

  ir::Stmt if_node(const isl::ast_node_if& n) {
    ir::Expr cond = expr(n.cond());
    ir::Stmt then_case = node(n.then_node());
    ir::Stmt else_case = n.has_else_node() ? node(n.else_node()) : nullptr;
    return std::make_shared<ir::IfThenElse>(cond, then_case, else_case);
  }

  ir::Stmt user_node(const isl::ast_node_user& n) {
    isl::ast_expr_op call = n.expr().as<isl::ast_expr_op>();
    std::string name = statement_of(n);
    auto found = by_isl_name_.find(name);
    if (found == by_isl_name_.end())
      fail(m_.func.where, "isl produced an unknown statement " + name);
    const CompModel& c = *found->second;
    std::map<std::string, ir::Expr> sub = constants_;
    std::vector<std::pair<std::string, ir::Expr>> instance;
    for (size_t k = 0; k < c.iters.size(); ++k) {
      ir::Expr v = expr(call.arg(static_cast<int>(k) + 1));
      sub[c.iters[k]] = v;
      instance.emplace_back(c.iters[k], v);
    }
    int n_args = static_cast<int>(call.n_arg());
    for (int k = static_cast<int>(c.iters.size()) + 1; k < n_args; ++k) {
      sub[schedule_dim_var(k - 1 - static_cast<int>(c.iters.size()))] = expr(call.arg(k));
    }
    std::vector<ir::Expr> idx;
    for (const auto& x : c.target.indices) idx.push_back(ir::substitute(x, sub));
    if (c.atomic) {
      Update u = lowered_update(c);
      return std::make_shared<ir::Store>(c.target.buf, idx, ir::substitute(u.operand, sub), c.name,
                                         instance, u.op);
    }
    auto copy = copies_.find(c.name);
    if (copy != copies_.end()) {  // inside the loop it privatizes: its own copy
      Update u = lowered_update(c);
      idx.insert(idx.begin(), copy->second.slot);
      ir::BinaryOp acc = u.op == ir::BinaryOp::Sub ? ir::BinaryOp::Add : u.op;
      ir::Expr v = ir::binary(acc, ir::load(copy->second.buf, idx, c.value->type),
                              ir::substitute(u.operand, sub));
      return std::make_shared<ir::Store>(copy->second.buf, idx, v, c.name, instance);
    }
    return std::make_shared<ir::Store>(c.target.buf, idx, ir::substitute(c.value, sub), c.name,
                                       instance);
  }

  // Data params that s uses in its own expressions (not in nested statements).
  std::set<std::string> own_data_uses(const ir::Stmt& s, const std::set<std::string>& bound) {
    std::vector<ir::Expr> own;
    if (auto* f = ir::as<ir::For>(s)) own = {f->min, f->end};
    if (auto* i = ir::as<ir::IfThenElse>(s)) own = {i->cond};
    if (auto* l = ir::as<ir::LetStmt>(s)) own = {l->value};
    if (auto* a = ir::as<ir::Alloc>(s)) own = a->shape;
    if (auto* st = ir::as<ir::Store>(s)) {
      own = st->indices;
      own.push_back(st->value);
    }
    struct Uses : ir::IRVisitor {
      const std::map<std::string, std::vector<DataOwner>>* owners;
      std::set<std::string> found;
      void visit_var(const ir::Var& v) override {
        if (owners->count(v.name)) found.insert(v.name);
      }
    } uses;
    uses.owners = &data_owner_;
    for (const auto& e : own) uses.visit(e);
    std::set<std::string> out;
    for (const auto& p : uses.found)
      if (!bound.count(p)) out.insert(p);
    return out;
  }

  // The value of data param p in terms of the loop variables at statement s,
  // from the instances of its computation below s (all must agree).
  std::optional<ir::Expr> definition_at(const ir::Stmt& s, const std::string& p) {
    std::optional<ir::Expr> def;
    for (const DataOwner& owner : data_owner_.at(p)) {
      struct Stores : ir::StmtVisitor {
        std::string comp;
        std::vector<const ir::Store*> found;
        void visit_store(const ir::Store& st) override {
          if (st.comp == comp) found.push_back(&st);
        }
      } stores;
      stores.comp = owner.comp->name;
      stores.visit(s);
      for (const auto* st : stores.found) {
        std::map<std::string, ir::Expr> sub = constants_;
        for (const auto& [it, v] : st->instance) sub[it] = v;
        ir::Expr d = ir::substitute(owner.value, sub);
        if (def && !ir::equal(*def, d)) return std::nullopt;
        def = d;
      }
    }
    return def;
  }

  bool all_bound(const ir::Expr& e, const std::set<std::string>& bound) {
    for (const auto& n : ir::free_vars(e)) {
      if (bound.count(n)) continue;
      if (std::find(m_.runtime_params.begin(), m_.runtime_params.end(), n) !=
          m_.runtime_params.end())
        continue;
      return false;
    }
    return true;
  }

  // if (c) S with c on a data param nobody has defined yet: evaluate c inside
  // S instead, where the loops that define the param are open. isl hoists
  // such guards because it takes params for constants; the guard itself is
  // exact per instance, so moving it inward keeps the meaning.
  ir::Stmt push_if_down(const ir::Stmt& s) {
    auto* i = ir::as<ir::IfThenElse>(s);
    if (!i || i->else_case) return nullptr;
    const ir::Stmt& t = i->then_case;
    auto guard = [&](const ir::Stmt& body) {
      return std::make_shared<ir::IfThenElse>(i->cond, body, nullptr);
    };
    if (auto* f = ir::as<ir::For>(t))
      return std::make_shared<ir::For>(f->var, f->min, f->end, f->step, f->tag, guard(f->body));
    if (auto* b = ir::as<ir::Block>(t)) {
      std::vector<ir::Stmt> out;
      for (const auto& x : b->stmts) out.push_back(guard(x));
      return ir::block(out);
    }
    if (auto* l = ir::as<ir::LetStmt>(t))
      return std::make_shared<ir::LetStmt>(l->var, l->value, guard(l->body));
    if (auto* inner = ir::as<ir::IfThenElse>(t)) {
      if (inner->else_case) return nullptr;
      return std::make_shared<ir::IfThenElse>(ir::binary(ir::BinaryOp::And, i->cond, inner->cond),
                                              inner->then_case, nullptr);
    }
    return nullptr;
  }

  // Whether a loop over a schedule dim in (lo, hi] that runs statements of
  // `comps` is nested in n.
  // The site's computations that a node runs.
  std::set<std::string> site_statements(const isl::ast_node& n, const AllocSite& site) const {
    std::set<std::string> names = statements_in(n), out;
    for (const auto& c : site.comps)
      if (names.count(isl_name(c))) out.insert(isl_name(c));
    return out;
  }

  // A site's temporary belongs to one iteration of its loop (and of the loops
  // around it). It is allocated at the outermost node that runs some of the
  // site's computations and is not inside a loop over the site's loop, or an
  // outer one, that runs all of them there: the body of the site's loop
  // where isl made it, and where isl left that loop out because it runs once
  // there, the node that stands for that iteration. isl may also take a
  // cache's fill out of the loop when it runs at one iteration only (in a
  // triangular domain, say): the temporary then goes around the fill and the
  // loop, which run one after the other as the schedule orders them, and the
  // loop must not write it from parallel iterations.
  bool site_starts_at(const isl::ast_node& n, const AllocSite& site) const {
    std::set<std::string> runs = site_statements(n, site);
    if (runs.empty()) return false;
    const int depth = 2 * site.loop + 1;
    bool inside = false;
    for_each_descendant(n, [&](const isl::ast_node& d) {
      if (inside || !d.isa<isl::ast_node_for>()) return !inside;
      if (schedule_dim_of(d.as<isl::ast_node_for>()) > depth) return false;
      inside = site_statements(d, site) == runs;
      return !inside;
    });
    if (inside) return false;
    for_each_descendant(n, [&](const isl::ast_node& d) {
      if (!d.isa<isl::ast_node_for>()) return true;
      const isl::ast_node_for& loop = d.as<isl::ast_node_for>();
      int k = schedule_dim_of(loop);
      if (k > depth) return false;
      if (loop_tag(loop) != ir::LoopTag::Parallel) return true;
      for (const auto& name : site_statements(d, site))
        if (by_isl_name_.at(name)->target.buf == site.buf)
          fail(site.where, "cannot allocate '" + site.buf + "' inside loop '" + site.loop_name +
                               "' of '" + site.comps[0] +
                               "': isl generated code that runs some of its statements outside "
                               "that loop, and the copy would be shared by the loop's parallel "
                               "iterations; tag the loop serial or cache at an inner loop");
      return true;
    });
    return true;
  }

 public:
  std::set<std::string> placed_;  // alloc sites placed inside a loop

 private:
  std::set<std::string> allocated_;  // alloc sites allocated around the node being lowered

 private:
  const Impl& m_;
  std::map<std::string, ir::Expr> constants_;
  std::map<std::string, const CompModel*> by_isl_name_;
  std::map<std::string, std::vector<DataOwner>>
      data_owner_;                                // a param may serve several statements
  std::map<std::string, std::string> loop_vars_;  // isl iterator -> loop variable
  std::map<const isl_ast_node*, int> dim_of_;     // loop -> its schedule dim
  std::set<std::string> in_scope_;
  std::set<std::string> reserved_;
  // The copies of a target that a privatized loop being lowered updates, by
  // computation: the buffer and the copy of the current iteration.
  struct Copies {
    std::string buf;
    ir::Expr slot;
  };
  std::map<std::string, Copies> copies_;
  std::set<std::string> copy_names_;
  // The loops around the node being lowered whose iterations run together
  // (parallel, vectorized, GPU), innermost last, and the innermost's tag.
  std::vector<std::string> together_;
  ir::LoopTag outer_tag_ = ir::LoopTag::None;
};

// Every temporary is used only where it is allocated (alloc_at, caches).
void check_allocations(const Impl& m, const ir::Stmt& body) {
  struct Scopes : ir::StmtVisitor {
    const Impl* m;
    std::multiset<std::string> live;
    // A size known now must be within the limits; one in run-time params is
    // checked by the kernel.
    void check_size(const ir::Alloc& n) {
      bool stack = n.loc == ir::MemLoc::Stack;
      int64_t limit = stack ? ir::kMaxStackTempBytes : ir::kMaxHeapTempBytes;
      int64_t bytes = ir::dtype_bytes(n.dtype);
      std::string dims;
      for (const auto& e : n.shape) {
        auto* k = ir::as<ir::IntImm>(e);
        if (!k) return;
        dims += (dims.empty() ? "" : ", ") + std::to_string(k->value);
        if (k->value < 0 || __builtin_mul_overflow(bytes, k->value, &bytes)) bytes = -1;
        if (bytes < 0) break;
      }
      if (bytes >= 0 && bytes <= limit) return;
      SourceLoc where = m->func.where;
      if (const ir::Buf* b = m->func.find_buf(n.buf)) where = b->where;
      for (const auto& s : m->alloc_sites)
        if (s.buf == n.buf) where = s.where;
      throw CompileError(
          ErrorStage::Lower, where,
          "temporary '" + n.buf + "' (" + ir::dtype_name(n.dtype) + "[" + dims + "]) needs " +
              (bytes < 0 ? std::string("more bytes than 64 bits count")
                         : std::to_string(bytes) + " bytes") +
              ", more than the limit of " + std::to_string(limit) + " for a temporary on the " +
              (stack ? "stack" : "heap") + " (" + (stack ? "stack" : "heap") +
              " temp bytes, docs/limits.md)" + (stack ? "; place it on the heap" : ""));
    }
    void use(const std::string& buf) {
      const ir::Buf* b = m->func.find_buf(buf);
      if (!b || b->kind != ir::BufKind::Temp || live.count(buf)) return;
      for (const auto& s : m->alloc_sites)
        if (s.buf == buf)
          throw CompileError(ErrorStage::Lower, s.where,
                             "temp buffer '" + buf + "' is used outside loop '" + s.loop_name +
                                 "' of '" + s.comps[0] + "', where it is allocated");
      throw CompileError(ErrorStage::Lower, m->func.where,
                         "temp buffer '" + buf + "' is used outside the place it is allocated");
    }
    void visit_alloc(const ir::Alloc& n) override {
      check_size(n);
      auto it = live.insert(n.buf);
      ir::StmtVisitor::visit_alloc(n);
      live.erase(it);
    }
    void visit_store(const ir::Store& n) override {
      use(n.buf);
      ir::StmtVisitor::visit_store(n);
    }
    void visit_load(const ir::Load& n) override {
      use(n.buf);
      ir::IRVisitor::visit_load(n);
    }
  } scopes;
  scopes.m = &m;
  scopes.visit(body);
}

// unroll_explicit copies a loop's body once per iteration, and nested ones
// multiply: the copies of one body are bounded (codegen checks it again
// after the passes, where every bound is a constant).
void check_unrolling(const Impl& m, const ir::Stmt& body) {
  struct Walk : ir::StmtVisitor {
    const Impl* m;
    int64_t copies = 1;
    void visit_for(const ir::For& n) override {
      int64_t outer = copies;
      if (n.tag == ir::LoopTag::UnrollExplicit) {
        auto lo = ir::eval_int(n.min, m->constants), hi = ir::eval_int(n.end, m->constants);
        if (lo && hi && *hi > *lo && n.step > 0) {
          __int128 trips = (static_cast<__int128>(*hi) - *lo + n.step - 1) / n.step;
          if (trips * copies > ir::kMaxUnrolledCopies) {
            const ir::Comp* c = m->func.find_comp(ir::first_stored_computation(n.body));
            throw CompileError(
                ErrorStage::Lower, c ? c->where : m->func.where,
                "loop '" + n.var + "' is tagged unroll_explicit inside other unrolled loops: " +
                    std::to_string(
                        static_cast<int64_t>(std::min<__int128>(trips * copies, INT64_MAX))) +
                    " copies of its body, more than the limit of " +
                    std::to_string(ir::kMaxUnrolledCopies) + " (unrolled copies, docs/limits.md)");
          }
          copies *= static_cast<int64_t>(trips);
        }
      }
      ir::StmtVisitor::visit_for(n);
      copies = outer;
    }
  } walk;
  walk.m = &m;
  walk.visit(body);
}

// A statement's padded schedule as a function, for at_each_domain, and which
// of its dims the statement's expressions read (schedule_dim_var): only those
// need isl's expression in the loops around it.
struct StatementSchedule {
  isl::pw_multi_aff dims;
  std::vector<bool> read;
  // Set when the statement's domain is given to isl in the space of its loops
  // (see loop_pieces): its iterators as a function of its loops.
  std::optional<isl::pw_multi_aff> iterators;
};
// By isl name.
using ScheduleTable = std::map<std::string, StatementSchedule>;

// The schedule dims, of `dims`, that c's stored value or index reads.
std::vector<bool> dims_read(const CompModel& c, int dims) {
  std::set<std::string> names = ir::free_vars(c.value);
  for (const auto& x : c.target.indices) {
    std::set<std::string> more = ir::free_vars(x);
    names.insert(more.begin(), more.end());
  }
  std::vector<bool> read(static_cast<size_t>(dims));
  for (int k = 0; k < dims; ++k)
    read[static_cast<size_t>(k)] = names.count(schedule_dim_var(k)) > 0;
  return read;
}

// Part of a computation's instances on its way down the schedule tree: those
// whose static dims so far took one path.
struct Piece {
  isl::set domain;
  const isl::pw_multi_aff* sched;  // the computation's padded schedule
  // Its computation's loops: schedule dims past them are padding (0).
  int loops = 0;
  // Whether the domain lies in loop space (loop_pieces): its dims are the
  // loops themselves, everywhere in the space.
  bool in_loops = false;
};

// A computation's instances in the space of its loops (its dynamic schedule
// dims), when each piece of its schedule function has constant static dims
// and gives each instance a time of its own. isl then generates the loops
// over sets whose dims are the loops themselves (a tile's loops are bounded
// by affine constraints), where, given the domain and a schedule of floors
// and mods, each step of the AST generation projected the iterators out of
// existentially quantified constraints. The sets, the schedule dims on them
// (loops, and the static dims as constants) and the iterators as functions
// of the loops; nullopt when the schedule does not have that form.
struct LoopPieces {
  std::vector<isl::set> domains;
  std::vector<std::vector<int64_t>> statics;  // of each domain
  isl::pw_multi_aff dims;
  isl::pw_multi_aff iterators;
};
// c's iterators as functions of its loops on `domain` (in loop space), from
// `inverse`, what inputs_from_outputs gave for c's schedule, with its static
// dims at `statics`. Nullopt where an iterator depends on a param.
std::optional<isl::pw_multi_aff> iterators_of_loops(
    const CompModel& c, const std::vector<std::vector<int64_t>>& inverse,
    const std::vector<int64_t>& statics, const isl::set& domain) {
  const size_t params = isl_map_dim(c.sched.get(), isl_dim_param);
  isl::space loops = domain.space();
  isl_aff_list* list = isl_aff_list_alloc(loops.ctx().get(), static_cast<int>(inverse.size()));
  for (const std::vector<int64_t>& row : inverse) {
    Lin x = Lin::num(row[0]);
    bool plain = true;
    for (size_t k = 1; k < row.size(); ++k) {
      if (row[k] == 0) continue;
      if (k <= params) {
        plain = false;
        break;
      }
      const size_t q = k - 1 - params;  // schedule dim q
      x = x + row[k] * (q % 2 ? Lin::var(static_cast<int>(q / 2)) : Lin::num(statics.at(q / 2)));
    }
    if (!plain) {
      isl_aff_list_free(list);
      return std::nullopt;
    }
    list = isl_aff_list_add(list, affine(loops, x).release());
  }
  isl_space* space =
      isl_space_map_from_domain_and_range(loops.release(), c.domain.space().release());
  return isl::manage(
      isl_pw_multi_aff_alloc(domain.copy(), isl_multi_aff_from_aff_list(space, list)));
}

std::optional<LoopPieces> loop_pieces(const CompModel& c, const isl::pw_multi_aff& f) {
  std::string tuple = isl_name(c.name);
  // The iterators from the schedule dims, where its equalities give them.
  const std::optional<std::vector<std::vector<int64_t>>> inverse = inputs_from_outputs(c.sched);
  std::vector<std::pair<isl::set, isl::multi_aff>> parts;
  f.intersect_domain(c.domain).foreach_piece(
      [&](isl::set where, isl::multi_aff ma) { parts.emplace_back(where, ma); });
  LoopPieces out;
  for (const auto& [where, ma] : parts) {
    int n = static_cast<int>(isl_multi_aff_dim(ma.get(), isl_dim_out));
    std::vector<int64_t> statics;
    for (int q = 0; q < n; q += 2) {
      isl::aff v = ma.at(q);
      if (!v.is_cst() || !v.constant_val().is_int()) return std::nullopt;
      statics.push_back(v.constant_val().get_num_si());
    }
    // The loops are c's own: the dims past them pad c's schedule to the
    // widest computation's and are 0. Left out of the loop space, lowering
    // ran 5% fewer instructions for the GEMM kernel and 10% for the conv.
    const int own = c.loops();
    for (int q = 2 * own + 1; q < n; q += 2) {
      isl::aff v = ma.at(q);
      if (!v.is_cst() || !v.constant_val().is_zero()) return std::nullopt;
    }
    isl_multi_aff* loops = ma.copy();
    for (int q = n - 1; q >= 0; q -= 2) loops = isl_multi_aff_drop_dims(loops, isl_dim_out, q, 1);
    loops = isl_multi_aff_drop_dims(loops, isl_dim_out, static_cast<unsigned>(own),
                                    static_cast<unsigned>(n / 2 - own));
    isl::map everywhere = isl::manage(isl_map_from_multi_aff(loops));
    everywhere =
        isl::manage(isl_map_set_tuple_name(everywhere.release(), isl_dim_out, tuple.c_str()));
    isl::map to_loops = everywhere.intersect_domain(where);
    // With its equalities explicit: a block loop of one iteration (the
    // GEMM's jo where NB >= N) is a fixed value rather than a floor that
    // every step of the AST generation carried (about 1 ms of the GEMM's).
    isl::set domain = isl::manage(isl_set_detect_equalities(to_loops.range().release()));
    // Two instances at one time cannot be told apart by the loops. A tile's
    // loops give back its iterators by linear algebra (i = 4 * io + ii);
    // otherwise isl is asked, with the equalities found on the whole space:
    // a tile's hold there, and without the instances' constraints isl finds
    // them in a fraction of the time.
    std::optional<isl::pw_multi_aff> iters;
    if (inverse) iters = iterators_of_loops(c, *inverse, statics, domain);
    if (!iters) {
      isl::map back = isl::manage(isl_map_detect_equalities(everywhere.reverse().release()))
                          .intersect_range(where);
      if (isl_map_plain_is_single_valued(back.get()) != isl_bool_true && !back.is_single_valued())
        return std::nullopt;
      iters = pw_multi_aff_from_map(back);
      if (!iters) return std::nullopt;
    }
    for (size_t k = 0; k < out.domains.size(); ++k)
      if (out.statics[k] == statics && !out.domains[k].intersect(domain).is_empty())
        return std::nullopt;
    // The schedule dims on the loop space: loop K is dim 2K + 1, 0 past c's loops.
    std::vector<Lin> dims;
    for (int q = 0; q < n; ++q)
      dims.push_back(q % 2 ? (q / 2 < own ? Lin::var(q / 2) : Lin::num(0))
                           : Lin::num(statics[static_cast<size_t>(q / 2)]));
    isl::pw_multi_aff piece_dims = isl::manage(
        isl_pw_multi_aff_alloc(domain.copy(), affine_function(domain.space(), dims).release()));
    out.dims = out.domains.empty() ? piece_dims : out.dims.union_add(piece_dims);
    out.iterators = out.domains.empty() ? *iters : out.iterators.union_add(*iters);
    out.domains.push_back(domain);
    out.statics.push_back(statics);
  }
  if (out.domains.empty()) return std::nullopt;
  return out;
}

// The value of each static dim is a constant on each piece of the schedule's
// function (separate and the like give a computation several); the instances
// of `p` by the value their static dim q takes.
std::map<int64_t, isl::set> static_values(const Piece& p, int q) {
  std::map<int64_t, isl::set> out;
  isl::pw_aff dim = p.sched->at(q).intersect_domain(p.domain);
  bool constant = true;
  dim.foreach_piece([&](isl::set where, isl::multi_aff piece) {
    isl::aff value = piece.at(0);
    if (!value.is_cst()) {
      constant = false;
      return;
    }
    isl::val v = value.constant_val();
    if (!v.is_int()) {
      constant = false;
      return;
    }
    auto [at, fresh] = out.try_emplace(v.get_num_si(), where);
    if (!fresh) at->second = at->second.unite(where);
  });
  if (constant) return out;
  // A static dim that varies within a piece (an apply_sch map): its values,
  // one at a time.
  out.clear();
  isl::set values = isl::manage(isl_set_from_pw_aff(dim.copy()));
  values.foreach_point([&](isl::point pt) {
    int64_t v = isl::manage(isl_point_get_coordinate_val(pt.get(), isl_dim_set, 0)).get_num_si();
    isl_pw_aff* is_v =
        isl_pw_aff_val_on_domain(p.domain.copy(), isl_val_int_from_si(dim.ctx().get(), v));
    isl::set where = isl::manage(isl_pw_aff_eq_set(dim.copy(), is_v));
    out.emplace(v, where.intersect(p.domain));
  });
  return out;
}

// Whether schedule dim q lies past the loops of every piece (padding).
bool past_every_loop(const std::vector<Piece>& pieces, int q) {
  return std::all_of(pieces.begin(), pieces.end(), [&](const Piece& p) { return q > 2 * p.loops; });
}

// Whether static dim q has one value, the same, on every instance of `pieces`.
bool one_static_value(const std::vector<Piece>& pieces, int q) {
  std::optional<int64_t> value;
  for (const Piece& p : pieces) {
    std::map<int64_t, isl::set> values = static_values(p, q);
    if (values.size() > 1) return false;
    if (values.empty()) continue;
    if (value && *value != values.begin()->first) return false;
    value = values.begin()->first;
  }
  return true;
}

// Whether dynamic dim q takes one value, the same, on every instance of
// `pieces`: a loop of one iteration around all of them (the GEMM's jo when
// NB >= N, the conv's batch loop at N = 1 under its filters' repacking,
// which has a loop of its own there). It orders nothing among the pieces,
// whose order against the others is settled above, and isl generates no
// loop for it; left out of the tree, it spares its AST generator, at its
// band, the test of which statements under it may run after which,
// pair by pair over the whole subtree (30% of the GEMM's AST build and of
// the conv's, callgrind).
bool one_value(const std::vector<Piece>& pieces, int q) {
  std::optional<int64_t> value;
  for (const Piece& p : pieces) {
    if (!p.in_loops) return false;  // its dims are not its own coordinates
    int64_t v = 0;                  // past its loops: padding
    if (q / 2 < p.loops) {
      isl::val fixed = isl::manage(isl_set_plain_get_val_if_fixed(p.domain.get(), isl_dim_set,
                                                                  static_cast<unsigned>(q / 2)));
      if (fixed.is_null() || !fixed.is_int()) return false;
      v = fixed.get_num_si();
    }
    if (value && *value != v) return false;
    value = v;
  }
  return value.has_value();
}

// The schedule tree of `pieces` from schedule dim q on: a static dim is a
// sequence of the groups of instances that take each of its values, in
// order; a dynamic dim is a loop, a member of a band with the loops below it
// down to the next static dim that orders anything; past every piece's own
// loops, a leaf; a dynamic dim with one value on every piece is no loop at
// all (one_value). Each band has a mark above it whose user pointer is
// its members in `bands` (map_loop_dims reads them). isl generates code from
// the tree without the static dims ever being loops of their own, which the
// same schedules as one relation over every dim made it treat as such.
isl::schedule schedule_tree(isl::ctx ctx, const std::vector<Piece>& pieces, int q, int dims,
                            std::deque<std::vector<int>>& bands) {
  auto leaf = [&](const std::vector<Piece>& of) {
    isl::union_set domain = isl::union_set::empty(ctx);
    for (const Piece& p : of) domain = domain.unite(isl::union_set(p.domain));
    return isl::manage(isl_schedule_from_domain(domain.release()));
  };
  // Past the loops of every piece, the dims are padding, 0 for all: no
  // band of one iteration each (isl's work per band is the same as for a
  // real loop's).
  if (q == dims || past_every_loop(pieces, q)) return leaf(pieces);
  if (q % 2 == 0) {
    std::map<int64_t, std::vector<Piece>> groups;
    for (const Piece& p : pieces)
      for (auto& [v, where] : static_values(p, q))
        groups[v].push_back(Piece{where, p.sched, p.loops, p.in_loops});
    isl::schedule out;
    for (const auto& [v, group] : groups) {
      isl::schedule child = schedule_tree(ctx, group, q + 1, dims, bands);
      out = out.is_null() ? child
                          : isl::manage(isl_schedule_sequence(out.release(), child.release()));
    }
    // No instance at all (every domain empty for these params): nothing runs.
    return out.is_null() ? leaf({}) : out;
  }
  if (one_value(pieces, q)) return schedule_tree(ctx, pieces, q + 1, dims, bands);
  // The loops at q, q + 2, ... down to the next static dim that orders
  // anything (or the end of every piece's loops) are one band of several
  // members: isl sets up a band once, and its work for that (the build's
  // product space, the checks of the partial schedule) was as much as for
  // the loop itself.
  std::vector<int> members{q};
  int last = q;
  for (int next = q + 2; next < dims; next += 2) {
    if (past_every_loop(pieces, next) || !one_static_value(pieces, next - 1)) break;
    last = next;
    if (!one_value(pieces, next)) members.push_back(next);
  }
  isl::schedule child = schedule_tree(ctx, pieces, last + 1, dims, bands);
  isl_union_pw_aff_list* loops =
      isl_union_pw_aff_list_alloc(ctx.get(), static_cast<int>(members.size()));
  for (int d : members) {
    isl::union_pw_aff loop =
        isl::manage(isl_union_pw_aff_empty(isl_space_params_alloc(ctx.get(), 0)));
    std::set<std::string> in_loops;
    for (const Piece& p : pieces) {
      if (!p.in_loops) {
        loop = loop.union_add(isl::union_pw_aff(p.sched->at(d).intersect_domain(p.domain)));
        continue;
      }
      // Dim d on the whole space, not on the piece's instances: isl checks
      // that the loop's domain holds every instance, which is then a trivial
      // check.
      if (!in_loops.insert(isl_set_get_tuple_name(p.domain.get())).second) continue;
      Lin at = d / 2 < p.loops ? Lin::var(d / 2) : Lin::num(0);  // past its loops: padding
      loop = loop.union_add(isl::union_pw_aff(isl::pw_aff(affine(p.domain.space(), at))));
    }
    loops = isl_union_pw_aff_list_add(loops, loop.release());
  }
  isl_multi_union_pw_aff* band_schedule = isl_multi_union_pw_aff_from_union_pw_aff_list(
      isl_space_set_alloc(ctx.get(), 0, static_cast<unsigned>(members.size())), loops);
  isl_schedule* tree = isl_schedule_insert_partial_schedule(child.release(), band_schedule);
  // Each loop over all its instances (atomic), as the relation form had it:
  // isl would otherwise split a loop where the instances inside it differ,
  // which for a data-dependent bound means testing it before it is read.
  isl_schedule_node* band = isl_schedule_node_child(isl_schedule_get_root(tree), 0);
  isl_schedule_free(tree);
  for (size_t k = 0; k < members.size(); ++k)
    band = isl_schedule_node_band_member_set_ast_loop_type(band, static_cast<int>(k),
                                                           isl_ast_loop_atomic);
  bands.push_back(members);
  band = isl_schedule_node_insert_mark(band, isl_id_alloc(ctx.get(), kBandMark, &bands.back()));
  tree = isl_schedule_node_get_schedule(band);
  isl_schedule_node_free(band);
  return isl::manage(tree);
}
using ExprList = std::unique_ptr<isl_ast_expr_list, decltype(&isl_ast_expr_list_free)>;

// Turns isl's user node into a call f(iterators..., schedule dims...): the
// computation's iterators and the value of each of its schedule dims, both as
// expressions of the loops around it. isl simplifies them with what it knows
// there (a split's floor(k / 4) becomes the loop ko).
isl::ast_node at_each_domain(const ScheduleTable& table, const isl::ast_build& build) {
  isl::pw_multi_aff iters = pw_multi_aff_from_map(build.schedule().as_map().reverse()).value();
  const StatementSchedule& sched =
      table.at(isl_pw_multi_aff_get_tuple_name(iters.get(), isl_dim_out));
  isl::ast_expr_op call =
      build.call_from(sched.iterators ? sched.iterators->pullback(iters) : iters)
          .as<isl::ast_expr_op>();
  isl::ast_expr fn = call.arg(0);
  // isl's C++ interface has no expression lists: this one is owned by a
  // unique_ptr until isl_ast_expr_call takes it.
  ExprList list(isl_ast_expr_list_alloc(build.ctx().get(), 8), isl_ast_expr_list_free);
  auto add = [&](isl::ast_expr e) {
    list.reset(isl_ast_expr_list_add(list.release(), e.release()));
  };
  for (unsigned i = 1; i < call.n_arg(); ++i) add(call.arg(static_cast<int>(i)));
  int count = static_cast<int>(isl_pw_multi_aff_dim(sched.dims.get(), isl_dim_out));
  for (int k = 0; k < count; ++k) {
    if (sched.read[static_cast<size_t>(k)])
      add(build.expr_from(sched.dims.at(k).pullback(iters)));
    else  // a place holder the statement never reads
      add(isl::manage(isl_ast_expr_from_val(isl_val_zero(build.ctx().get()))));
  }
  return isl::manage(isl_ast_node_alloc_user(isl_ast_expr_call(fn.release(), list.release())));
}

}  // namespace

ir::LoweredFunc lower(const ScheduledFunc& s) {
  const Impl& m = *s.impl_;
  isl::ctx ctx = m.ctx.get();
  int dims = schedule_dims(m);

  ir::Stmt body;
  std::set<std::string> placed;
  isl_ctx_reset_operations(ctx.get());  // lowering has a budget of its own
  StageTimer timer(ErrorStage::Lower, m.limits);
  try {
    ScheduleTable table;
    for (const auto& c : m.comps)
      for (const auto& l : c.privatized)
        if (std::find(c.loop_names.begin(), c.loop_names.end(), l) == c.loop_names.end())
          fail(c.comp->where, "'" + c.name + "' privatizes loop '" + l +
                                  "', which a later schedule command replaced; privatize the "
                                  "loop that stands last");
    for (const auto& c : m.comps) {
      std::optional<isl::pw_multi_aff> f = schedule_function(c, dims);
      if (!f)
        fail(c.comp ? c.comp->where : m.func.where,
             "the schedule of " + c.name + " gives an instance more than one time");
      table[isl_name(c.name)] = StatementSchedule{*f, dims_read(c, dims), std::nullopt};
    }
    isl::schedule tree;
    std::deque<std::vector<int>> bands;  // the members of each band, for its mark
    {
      TimedPart part("schedule tree");
      std::vector<Piece> pieces;
      for (const auto& c : m.comps) {
        StatementSchedule& sched = table.at(isl_name(c.name));
        if (std::optional<LoopPieces> l = loop_pieces(c, sched.dims)) {
          sched.dims = l->dims;
          sched.iterators = l->iterators;
          for (const isl::set& d : l->domains)
            pieces.push_back(Piece{d, &sched.dims, c.loops(), true});
        } else {
          pieces.push_back(Piece{c.domain, &sched.dims, c.loops()});
        }
      }
      tree = schedule_tree(ctx, pieces, 0, dims, bands);
    }

    isl::ast_build build = isl::ast_build::from_context(m.context);
    // Iterators c0, c1, ... by depth: the loop over cD is at depth D of its
    // path, whose bands' marks give its schedule dim (map_loop_dims). (No C++
    // call for iterators: the raw result is managed at once.)
    isl::id_list names(ctx, dims / 2);
    for (int d = 0; d < dims / 2; ++d) names = names.add(isl::id(ctx, "c" + std::to_string(d)));
    build = isl::manage(isl_ast_build_set_iterators(build.release(), names.release()));
    build = build.set_at_each_domain(
        [&](isl::ast_node, isl::ast_build b) { return at_each_domain(table, b); });
    isl::ast_node root;
    {
      TimedPart part("ast");
      root = build.node_from(tree);
    }
    if (root.is_null()) fail(m.func.where, "isl could not build the loop nest of " + m.func.name);
    if (spdlog::should_log(spdlog::level::debug))
      spdlog::debug("{}: isl's loop nest:\n{}", m.func.name, root.to_C_str());

    timer.check(m.func.where, "after isl generated the loops of " + m.func.name);
    TimedPart part("ast to loops");
    AstLowering lowering(m);
    std::vector<int> path;
    lowering.map_loop_dims(root, path);
    ir::Stmt loops = lowering.node(root);
    body = split_partial_tiles(lowering.place_data_params(loops, {}));
    placed = lowering.placed_;
  } catch (const isl::exception& e) {
    isl_failed(m, ErrorStage::Lower, "generate code for " + m.func.name, e);
  }

  ir::LoweredFunc out;
  out.name = m.func.name;
  out.params = m.runtime_params;
  out.fast_math = m.func.fast_math;
  for (auto it = m.func.bufs.rbegin(); it != m.func.bufs.rend(); ++it) {
    if (it->kind != ir::BufKind::Temp) continue;
    if (placed.count(it->name)) continue;
    std::vector<ir::Expr> shape;
    for (const auto& e : it->shape) shape.push_back(folded(e, m.constants));
    body = std::make_shared<ir::Alloc>(it->name, it->dtype, shape, m.buf_locs.at(it->name), body);
  }
  for (const auto& b : m.func.bufs) {
    if (b.kind == ir::BufKind::Temp) continue;
    ir::Buf arg = b;
    for (auto& e : arg.shape) e = folded(e, m.constants);
    arg.loc = m.buf_locs.at(b.name);  // where the schedule put it (set_loc)
    out.args.push_back(arg);
  }
  check_allocations(m, body);
  check_unrolling(m, body);
  out.body = body ? body : ir::block({});
  out.where = m.func.where;
  for (const auto& c : m.func.comps) out.comp_where[c.name] = c.where;
  add_runtime_checks(m, out);
  return out;
}

}  // namespace kiln::poly
