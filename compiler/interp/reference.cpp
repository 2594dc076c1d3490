// The reference interpreter: runs a Func's algorithm directly, ignoring its schedule (the oracle).
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "eval.h"
#include "kiln/interp.h"

namespace kiln::interp {

using detail::Value;
using ir::BinaryOp;
using ir::Expr;

namespace {

// ---------------------------------------------------------------------------
// Bounds of an iterator from the domain's comparisons

class VarNames : public ir::IRVisitor {
 public:
  std::set<std::string> names;

 protected:
  void visit_var(const ir::Var& n) override { names.insert(n.name); }
};

// sum(coef[k] * iters[k]) + constant + sum(c * term) >= 0: one condition of a
// domain, affine in the iterators. A term is anything else (params, buffer
// reads, i % 2); `dep` is the last iterator any term reads (-1 for none), so
// the condition can bound iterator d only when dep < d.
struct Affine {
  std::vector<int64_t> coef;
  int64_t constant = 0;
  std::vector<std::pair<int64_t, Expr>> terms;
  int dep = -1;

  Affine scaled(int64_t k) const {
    Affine r = *this;
    for (int64_t& x : r.coef) x *= k;
    r.constant *= k;
    for (auto& t : r.terms) t.first *= k;
    return r;
  }
  Affine plus(const Affine& o) const {
    Affine r = *this;
    for (size_t k = 0; k < coef.size(); ++k) r.coef[k] += o.coef[k];
    r.constant += o.constant;
    for (const auto& [c, e] : o.terms) {
      auto same = std::find_if(r.terms.begin(), r.terms.end(),
                               [&](const auto& t) { return ir::equal(t.second, e); });
      if (same != r.terms.end()) {
        same->first += c;
      } else {
        r.terms.emplace_back(c, e);
      }
    }
    r.terms.erase(
        std::remove_if(r.terms.begin(), r.terms.end(), [](const auto& t) { return t.first == 0; }),
        r.terms.end());
    r.dep = std::max(dep, o.dep);
    return r;
  }
  bool same_as(const Affine& o) const {
    if (coef != o.coef || constant != o.constant || terms.size() != o.terms.size()) return false;
    for (size_t k = 0; k < terms.size(); ++k) {
      if (terms[k].first != o.terms[k].first || !ir::equal(terms[k].second, o.terms[k].second)) {
        return false;
      }
    }
    return true;
  }
};

Affine linearize(const Expr& e, const std::vector<std::string>& iters) {
  Affine r;
  r.coef.assign(iters.size(), 0);
  if (const auto* v = ir::as<ir::Var>(e)) {
    auto it = std::find(iters.begin(), iters.end(), v->name);
    if (it != iters.end()) {
      r.coef[static_cast<size_t>(it - iters.begin())] = 1;
      return r;
    }
  }
  if (const auto* k = ir::as<ir::IntImm>(e)) {
    r.constant = k->value;
    return r;
  }
  if (const auto* c = ir::as<ir::Cast>(e); c && ir::is_int(c->value->type)) {
    return linearize(c->value, iters);
  }
  if (const auto* u = ir::as<ir::Unary>(e); u && u->op == ir::UnaryOp::Neg) {
    return linearize(u->a, iters).scaled(-1);
  }
  if (const auto* b = ir::as<ir::Binary>(e)) {
    if (b->op == BinaryOp::Add) return linearize(b->a, iters).plus(linearize(b->b, iters));
    if (b->op == BinaryOp::Sub) {
      return linearize(b->a, iters).plus(linearize(b->b, iters).scaled(-1));
    }
    if (b->op == BinaryOp::Mul) {
      if (const auto* k = ir::as<ir::IntImm>(b->a)) return linearize(b->b, iters).scaled(k->value);
      if (const auto* k = ir::as<ir::IntImm>(b->b)) return linearize(b->a, iters).scaled(k->value);
    }
  }
  VarNames names;
  names.visit(e);
  for (size_t k = 0; k < iters.size(); ++k) {
    if (names.names.count(iters[k])) r.dep = static_cast<int>(k);
  }
  r.terms.emplace_back(1, e);
  return r;
}

// The comparisons a condition implies: the conjuncts of a conjunction (an
// `or` implies none), `not` pushed inward.
void conjuncts(const Expr& e, bool negated,
               std::vector<std::pair<BinaryOp, const ir::Binary*>>& out) {
  if (const auto* u = ir::as<ir::Unary>(e)) {
    if (u->op == ir::UnaryOp::Not) conjuncts(u->a, !negated, out);
    return;
  }
  const auto* b = ir::as<ir::Binary>(e);
  if (!b) return;
  if ((b->op == BinaryOp::And && !negated) || (b->op == BinaryOp::Or && negated)) {
    conjuncts(b->a, negated, out);  // not (a or b) == not a and not b
    conjuncts(b->b, negated, out);
    return;
  }
  if (!ir::is_comparison(b->op) || !ir::is_int(b->a->type)) return;
  BinaryOp op = b->op;
  if (negated) {
    switch (op) {
      case BinaryOp::Lt:
        op = BinaryOp::Ge;
        break;
      case BinaryOp::Le:
        op = BinaryOp::Gt;
        break;
      case BinaryOp::Gt:
        op = BinaryOp::Le;
        break;
      case BinaryOp::Ge:
        op = BinaryOp::Lt;
        break;
      case BinaryOp::Eq:
        op = BinaryOp::Ne;
        break;
      default:
        op = BinaryOp::Eq;
        break;
    }
  }
  out.emplace_back(op, b);
}

// The domain's comparisons, each as `affine >= 0`.
std::vector<Affine> domain_constraints(const ir::Comp& c) {
  std::vector<std::pair<BinaryOp, const ir::Binary*>> cmps;
  for (const Expr& cond : c.domain) conjuncts(cond, false, cmps);
  std::vector<Affine> out;
  for (const auto& [op, b] : cmps) {
    Affine diff = linearize(b->a, c.iters).plus(linearize(b->b, c.iters).scaled(-1));  // a - b
    switch (op) {
      case BinaryOp::Lt:
        diff = diff.scaled(-1);
        diff.constant -= 1;
        out.push_back(diff);
        break;
      case BinaryOp::Le:
        out.push_back(diff.scaled(-1));
        break;
      case BinaryOp::Gt:
        diff.constant -= 1;
        out.push_back(diff);
        break;
      case BinaryOp::Ge:
        out.push_back(diff);
        break;
      case BinaryOp::Eq:
        out.push_back(diff);
        out.push_back(diff.scaled(-1));
        break;
      default:
        break;
    }
  }
  return out;
}

// Bounds of one iterator: each `coef * x + rest >= 0`, rest in params,
// earlier iterators and reads of them.
struct BoundSource {
  int64_t coef = 0;
  int64_t constant = 0;
  std::vector<std::pair<int64_t, Expr>> terms;
};

struct IterBounds {
  std::vector<BoundSource> sources;
  bool has_lower = false, has_upper = false;
};

// Bounds for every iterator, innermost first: iterator d is bounded by the
// constraints on iterators 0..d, then eliminated (Fourier-Motzkin) so that
// `0 <= i < j < n` bounds i by n too. Constraints that cannot take part are
// dropped, which only loosens the bounds; every point is checked exactly.
std::vector<IterBounds> plan_bounds(const ir::Comp& c) {
  constexpr size_t kMaxConstraints = 4096;
  size_t n = c.iters.size();
  std::vector<IterBounds> out(n);
  std::vector<Affine> live = domain_constraints(c);
  for (size_t d = n; d-- > 0;) {
    std::vector<Affine> lower, upper, kept;
    for (const Affine& a : live) {
      if (a.dep >= static_cast<int>(d)) continue;
      if (a.coef[d] == 0) {
        kept.push_back(a);
        continue;
      }
      (a.coef[d] > 0 ? lower : upper).push_back(a);
      BoundSource s{a.coef[d], a.constant, a.terms};
      for (size_t k = 0; k < d; ++k) {
        if (a.coef[k] != 0) s.terms.emplace_back(a.coef[k], ir::var(c.iters[k]));
      }
      out[d].sources.push_back(std::move(s));
    }
    out[d].has_lower = !lower.empty();
    out[d].has_upper = !upper.empty();
    for (const Affine& l : lower) {
      for (const Affine& u : upper) {
        if (kept.size() >= kMaxConstraints) break;
        Affine sum = l.scaled(-u.coef[d]).plus(u.scaled(l.coef[d]));
        bool trivial = sum.terms.empty() && std::all_of(sum.coef.begin(), sum.coef.end(),
                                                        [](int64_t x) { return x == 0; });
        if (trivial) continue;  // a constant fact about the domain, nothing to bound
        if (std::none_of(kept.begin(), kept.end(),
                         [&](const Affine& k) { return k.same_as(sum); })) {
          kept.push_back(std::move(sum));
        }
      }
    }
    live = std::move(kept);
  }
  return out;
}

// ---------------------------------------------------------------------------
// The interpreter

std::map<std::string, int64_t> run_params(const ir::Func& f, const Bindings& b) {
  std::map<std::string, int64_t> out = b.params;
  for (const ir::Param& p : f.params) {
    if (out.count(p.name)) continue;
    if (!p.value) {
      throw CompileError(ErrorStage::Interp, p.where,
                         fmt::format("no value for run-time param {} of {}", p.name, f.name));
    }
    out[p.name] = *p.value;
  }
  return out;
}

class ReferenceInterpreter final : public detail::Evaluator {
 public:
  ReferenceInterpreter(const ir::Func& f, Bindings& b)
      : Evaluator(run_params(f, b)), f_(f), bindings_(b) {}

  void run() {
    check_and_allocate_buffers();
    // The value specs that keep data-dependent accesses in bounds, as a kernel checks them.
    for (const ir::Buf* in : f_.inputs_read_as_data()) {
      std::string error = value_spec_error(*in, bindings_.buffers.at(in->name), params());
      if (!error.empty()) throw CompileError(ErrorStage::Interp, in->where, error);
    }
    std::vector<std::vector<IterBounds>> plans;
    for (const ir::Comp& c : f_.comps) {
      std::vector<IterBounds> iters;
      if (c.store) {
        iters = plan_bounds(c);
        for (size_t d = 0; d < c.iters.size(); ++d) {
          const IterBounds& ib = iters[d];
          if (!ib.has_lower || !ib.has_upper) {
            throw CompileError(ErrorStage::Interp, c.where,
                               fmt::format("unbounded domain: iterator {} of {} has no {} bound",
                                           c.iters[d], c.name, ib.has_lower ? "upper" : "lower"));
          }
        }
      }
      plans.push_back(std::move(iters));
    }
    // The algorithm loops, each as a computation over the iterators of the
    // loops around it and its own, with their conditions: what bounds it.
    for (size_t l = 0; l < f_.loops.size(); ++l) {
      ir::Comp nest;
      for (int at = static_cast<int>(l); at >= 0; at = f_.loops[static_cast<size_t>(at)].parent) {
        const ir::AlgorithmLoop& outer = f_.loops[static_cast<size_t>(at)];
        nest.iters.insert(nest.iters.begin(), outer.iter);
        nest.domain.insert(nest.domain.begin(), outer.domain.begin(), outer.domain.end());
      }
      std::vector<IterBounds> plan = plan_bounds(nest);
      const IterBounds& own = plan.back();
      if (!own.has_lower || !own.has_upper) {
        throw CompileError(ErrorStage::Interp, f_.loops[l].where,
                           fmt::format("unbounded loop: 'for {}' has no {} bound", f_.loops[l].iter,
                                       own.has_lower ? "upper" : "lower"));
      }
      loop_plans_.push_back(std::move(plan));
    }
    plans_ = std::move(plans);
    if (points_ != nullptr) {
      run_demanded();
      return;
    }
    std::vector<size_t> all(f_.comps.size());
    for (size_t k = 0; k < all.size(); ++k) all[k] = k;
    run_in_order(all, 0);
  }

  // Whether the points of the outputs can be traced back through f's computations: no
  // algorithm loop; every buffer a stored computation reads that is not an input (a temporary
  // or an output) is written only by computations before it, or by itself at the very element
  // it stores; and no such read is inside an inlined computation.
  bool traceable() {
    if (!f_.loops.empty()) return false;
    std::map<std::string, size_t> last_writer;
    for (size_t k = 0; k < f_.comps.size(); ++k) {
      const ir::Comp& c = f_.comps[k];
      if (!c.store) {
        if (reads_produced(c.value, nullptr)) return false;
        continue;
      }
      std::vector<const ir::Load*> reads;
      if (reads_produced(c.value, &reads)) return false;
      for (const ir::Load* r : reads) {
        bool self = r->buf == c.store->buf;
        if (self) {
          if (r->indices.size() != c.store->indices.size()) return false;
          for (size_t d = 0; d < r->indices.size(); ++d)
            if (!ir::equal(r->indices[d], c.store->indices[d])) return false;
        } else if (last_writer.count(r->buf) == 0) {
          return false;  // written after it (or never)
        }
      }
      last_writer[c.store->buf] = k;
    }
    return true;
  }

  void set_points(const std::map<std::string, std::vector<int64_t>>* points) { points_ = points; }

 private:
  // Whether a buffer is written by f (a temporary or an output), not given.
  bool produced(const std::string& buf) const {
    const ir::Buf* b = f_.find_buf(buf);
    return b != nullptr && b->kind != ir::BufKind::Input;
  }

  // The reads of produced buffers in e, in `out`; true when one is where it cannot be traced:
  // inside an inlined computation (`out` null) or in an index that a `let` binds.
  bool reads_produced(const Expr& e, std::vector<const ir::Load*>* out) {
    struct Finder : ir::IRVisitor {
      ReferenceInterpreter* self;
      std::vector<const ir::Load*>* out;
      int lets = 0;
      bool untraceable = false;
      void visit_load(const ir::Load& n) override {
        if (self->produced(n.buf)) {
          if (out == nullptr || lets > 0) untraceable = true;
          if (out != nullptr) out->push_back(&n);
        }
        ir::IRVisitor::visit_load(n);
      }
      void visit_let(const ir::Let& n) override {
        visit(n.value);
        ++lets;
        visit(n.body);
        --lets;
      }
      void visit_access(const ir::Access& n) override {
        for (const Expr& i : n.indices) visit(i);
        const ir::Comp* c = self->f_.find_comp(n.comp);
        if (c != nullptr && !c->store && self->reads_produced(c->value, nullptr))
          untraceable = true;
      }
    } finder;
    finder.self = this;
    finder.out = out;
    finder.visit(e);
    return finder.untraceable;
  }

  // The flat index of a buffer element, or -1 outside it.
  static int64_t flat_of(const HostBuffer& b, const std::vector<int64_t>& idx) {
    if (idx.size() != b.shape().size()) return -1;
    int64_t flat = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      if (idx[d] < 0 || idx[d] >= b.shape()[d]) return -1;
      flat = flat * b.shape()[d] + idx[d];
    }
    return flat;
  }

  // The demanded run: the elements of the outputs in *points_, and every element of a
  // temporary or an output they are computed from, each computation run at exactly the points
  // that store a demanded element, in its own order.
  void run_demanded() {
    for (const auto& [name, flats] : *points_) demand_[name].insert(flats.begin(), flats.end());
    for (const ir::Buf* o : f_.bufs_of_kind(ir::BufKind::Output)) {
      if (points_->count(o->name) > 0) continue;
      const HostBuffer* b = find_buffer(o->name);
      for (int64_t k = 0; k < b->size(); ++k) demand_[o->name].insert(k);
    }
    // Backward: what each computation reads at the points it runs at is demanded of the
    // computations before it.
    for (size_t k = f_.comps.size(); k-- > 0;) {
      const ir::Comp& c = f_.comps[k];
      if (!c.store) continue;
      std::vector<const ir::Load*> reads;
      reads_produced(c.value, &reads);
      std::vector<const ir::Load*> others;
      for (const ir::Load* r : reads)
        if (r->buf != c.store->buf) others.push_back(r);
      if (others.empty()) continue;
      for_each_demanded_point(c, k, [&] {
        for (const ir::Load* r : others) {
          std::vector<int64_t> idx;
          for (const Expr& e : r->indices) idx.push_back(eval_int(e));
          int64_t flat = flat_of(*find_buffer(r->buf), idx);
          if (flat >= 0) demand_[r->buf].insert(flat);
        }
      });
    }
    // Forward: each computation at its demanded points.
    for (size_t k = 0; k < f_.comps.size(); ++k) {
      const ir::Comp& c = f_.comps[k];
      if (c.store) for_each_demanded_point(c, k, [&] { execute(c); });
    }
  }

  // Calls `body` with c's iterators bound, at every point of c's domain that stores an element
  // demanded of its buffer, in lexicographic order for each element. Where c stores at distinct
  // plain iterators, those are fixed from each element and only the others enumerated.
  void for_each_demanded_point(const ir::Comp& c, size_t k, const std::function<void()>& body) {
    const std::set<int64_t>& want = demand_[c.store->buf];
    if (want.empty()) return;
    const HostBuffer* b = find_buffer(c.store->buf);
    std::vector<int> by_iter(c.store->indices.size(), -1);
    std::set<int> used;
    bool plain = true;
    for (size_t d = 0; d < by_iter.size(); ++d) {
      const auto* v = ir::as<ir::Var>(c.store->indices[d]);
      auto it = v ? std::find(c.iters.begin(), c.iters.end(), v->name) : c.iters.end();
      if (it == c.iters.end() || !used.insert(static_cast<int>(it - c.iters.begin())).second) {
        plain = false;
        break;
      }
      by_iter[d] = static_cast<int>(it - c.iters.begin());
    }
    frames_.push_back({&c, loop_values_});
    if (plain && b != nullptr && b->shape().size() == by_iter.size()) {
      std::vector<std::optional<int64_t>> fixed(c.iters.size());
      for (int64_t flat : want) {
        int64_t rest = flat;
        for (size_t d = by_iter.size(); d-- > 0;) {
          fixed[static_cast<size_t>(by_iter[d])] = rest % b->shape()[d];
          rest /= b->shape()[d];
        }
        enumerate_fixed(c, plans_[k], 0, fixed, body);
      }
    } else {
      std::vector<std::optional<int64_t>> none(c.iters.size());
      enumerate_fixed(c, plans_[k], 0, none, [&] {
        std::vector<int64_t> idx;
        for (const Expr& e : c.store->indices) idx.push_back(eval_int(e));
        int64_t flat = b != nullptr ? flat_of(*b, idx) : -1;
        if (flat >= 0 && want.count(flat) > 0) body();
      });
    }
    frames_.pop_back();
  }

  void enumerate_fixed(const ir::Comp& c, const std::vector<IterBounds>& plan, size_t d,
                       const std::vector<std::optional<int64_t>>& fixed,
                       const std::function<void()>& body) {
    if (d == c.iters.size()) {
      for (const Expr& cond : c.domain) {
        if (!eval_bool(cond)) return;
      }
      body();
      return;
    }
    auto [lo, hi] = range_of(plan[d]);
    if (fixed[d]) {
      if (*fixed[d] < lo || *fixed[d] > hi) return;
      lo = hi = *fixed[d];
    }
    frames_.back().values.push_back(lo);
    push(c.iters[d], Value::of_int(ir::kIndexType, lo));
    for (int64_t x = lo; x <= hi; ++x) {
      set_top(Value::of_int(ir::kIndexType, x));
      frames_.back().values[d] = x;
      enumerate_fixed(c, plan, d + 1, fixed, body);
      if (x == hi) break;
    }
    pop();
    frames_.back().values.pop_back();
  }

 public:
 protected:
  HostBuffer* find_buffer(const std::string& name) override {
    return detail::run_buffer(temps_, bindings_, name);
  }

  Value eval_access(const ir::Access& a, const std::vector<int64_t>& idx) override {
    const ir::Comp* c = f_.find_comp(a.comp);
    if (!c) fail("read of unknown computation " + a.comp);
    if (idx.size() != c->iters.size()) {
      fail(fmt::format("read of {} with {} indices, but it has {} iterators", a.comp, idx.size(),
                       c->iters.size()));
    }
    if (frames_.size() > 256) fail("computations read each other without end: " + a.comp);
    size_t saved = begin_scope();
    for (size_t k = 0; k < idx.size(); ++k)
      push(c->iters[k], Value::of_int(ir::kIndexType, idx[k]));
    for (const Expr& cond : c->domain) {
      if (!eval_bool(cond)) {
        end_scope(saved);
        fail(fmt::format("read of {}({}) outside its domain", a.comp, detail::format_index(idx)));
      }
    }
    frames_.push_back({c, idx});
    Value v = eval(c->value);
    frames_.pop_back();
    end_scope(saved);
    return v;
  }

  std::string context() override {
    std::string s;
    for (size_t k = frames_.size(); k > 0; --k) {
      const Frame& fr = frames_[k - 1];
      s += k == frames_.size() ? " in " : " read by ";
      s += fr.comp->name + "(";
      for (size_t d = 0; d < fr.values.size(); ++d) {
        s += fmt::format("{}{}={}", d ? ", " : "", fr.comp->iters[d], fr.values[d]);
      }
      s += ")";
    }
    return s;
  }

  SourceLoc error_loc() const override {
    return frames_.empty() ? f_.where : frames_.back().comp->where;
  }

  std::string describe_element(const std::string& buf, const std::vector<int64_t>& idx,
                               const std::vector<int64_t>& shape) const override {
    return fmt::format("{}[{}] ({} has shape {})", buf, detail::format_index(idx), buf,
                       detail::format_shape(shape));
  }

 private:
  struct Frame {
    const ir::Comp* comp;
    std::vector<int64_t> values;  // of the iterators bound so far
  };

  void check_and_allocate_buffers() {
    for (const ir::Buf& b : f_.bufs) {
      if (b.kind == ir::BufKind::Temp) {
        temps_[b.name] = HostBuffer(b.dtype, buffer_shape(b, params()));
        continue;
      }
      bound_buffer(bindings_, b, f_.name);
    }
  }

  // The part of a bound that is not the iterator: constant + sum(c * term).
  int64_t rest_of(const BoundSource& s) {
    int64_t r = s.constant;
    for (const auto& [k, term] : s.terms) r += k * eval_int(term);
    return r;
  }

  // Runs the computations `ks` (in textual order), which share the
  // algorithm loops above `depth`, whose iterators are in scope: each one
  // over its own iterators, and those in a deeper loop together, for each
  // value of its iterator.
  void run_in_order(const std::vector<size_t>& ks, size_t depth) {
    auto loops_of = [&](size_t k) -> const std::vector<int>& { return f_.comps[k].loops; };
    for (const ir::LevelItem& item : ir::level_items(ks, depth, loops_of)) {
      if (item.loop < 0) {
        const ir::Comp& c = f_.comps[item.comps.front()];
        if (c.store) {  // a value computation runs where it is read
          frames_.push_back({&c, loop_values_});
          enumerate(c, plans_[item.comps.front()], depth);
          frames_.pop_back();
        }
        continue;
      }
      const ir::AlgorithmLoop& l = f_.loops[static_cast<size_t>(item.loop)];
      auto [lo, hi] = range_of(loop_plans_[static_cast<size_t>(item.loop)][depth]);
      push(l.iter, Value::of_int(ir::kIndexType, lo));
      loop_values_.push_back(lo);
      for (int64_t x = lo; x <= hi; ++x) {
        set_top(Value::of_int(ir::kIndexType, x));
        loop_values_.back() = x;
        if (std::all_of(l.domain.begin(), l.domain.end(),
                        [&](const Expr& cond) { return eval_bool(cond); }))
          run_in_order(item.comps, depth + 1);
        if (x == hi) break;
      }
      loop_values_.pop_back();
      pop();
    }
  }

  // The values an iterator takes, from its bounds and the iterators outside it.
  std::pair<int64_t, int64_t> range_of(const IterBounds& b) {
    int64_t lo = std::numeric_limits<int64_t>::min();
    int64_t hi = std::numeric_limits<int64_t>::max();
    for (const BoundSource& s : b.sources) {
      // coef * x + rest >= 0: x >= ceil(-rest / coef) for coef > 0, x <= floor(..) for coef < 0.
      int64_t m = -rest_of(s);
      if (s.coef > 0) {
        lo = std::max(lo, detail::ceil_div(m, s.coef));
      } else {
        hi = std::min(hi, ir::floor_div(m, s.coef));
      }
    }
    return {lo, hi};
  }

  void enumerate(const ir::Comp& c, const std::vector<IterBounds>& plan, size_t d) {
    if (d == c.iters.size()) {
      for (const Expr& cond : c.domain) {
        if (!eval_bool(cond)) return;
      }
      execute(c);
      return;
    }
    auto [lo, hi] = range_of(plan[d]);
    frames_.back().values.push_back(lo);
    push(c.iters[d], Value::of_int(ir::kIndexType, lo));
    for (int64_t x = lo; x <= hi; ++x) {
      set_top(Value::of_int(ir::kIndexType, x));
      frames_.back().values[d] = x;
      enumerate(c, plan, d + 1);
      if (x == hi) break;
    }
    pop();
    frames_.back().values.pop_back();
  }

  void execute(const ir::Comp& c) {
    Value v = eval(c.value);
    std::vector<int64_t> idx;
    for (const Expr& e : c.store->indices) idx.push_back(eval_int(e));
    HostBuffer* b = find_buffer(c.store->buf);
    if (!b) fail("write to unknown buffer " + c.store->buf);
    int64_t flat = checked_flat("write", c.store->buf, *b, idx);
    detail::store_element(*b, flat, detail::convert(v, b->dtype()));
  }

  const ir::Func& f_;
  Bindings& bindings_;
  std::map<std::string, HostBuffer> temps_;
  std::vector<Frame> frames_;
  std::vector<std::vector<IterBounds>> plans_;       // per computation
  std::vector<std::vector<IterBounds>> loop_plans_;  // per algorithm loop
  std::vector<int64_t> loop_values_;                 // of the algorithm loops in scope
  // A demanded run (run_reference_at): the output elements asked for, and the elements of
  // every buffer they need, by flat index.
  const std::map<std::string, std::vector<int64_t>>* points_ = nullptr;
  std::map<std::string, std::set<int64_t>> demand_;
};

}  // namespace

void run_reference(const ir::Func& f, Bindings& b) { ReferenceInterpreter(f, b).run(); }

bool run_reference_at(const ir::Func& f, Bindings& b,
                      const std::map<std::string, std::vector<int64_t>>& points) {
  ReferenceInterpreter interpreter(f, b);
  if (!interpreter.traceable()) return false;
  interpreter.set_points(&points);
  interpreter.run();
  return true;
}

}  // namespace kiln::interp
