// The graph passes: constant folding, operator CSE, dead-operator removal, elementwise
// epilogue fusion and sketches for operators without a schedule (graph_passes.h says what
// each does).
#include "kiln/passes/graph_passes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ranges>
#include <set>
#include <sstream>

#include "kiln/autosched.h"
#include "kiln/digest.h"
#include "kiln/error.h"
#include "kiln/interp.h"
#include "kiln/poly.h"

namespace kiln::passes {

namespace {

bool is_output(const ir::Graph& g, const std::string& t) {
  return std::find(g.outputs.begin(), g.outputs.end(), t) != g.outputs.end();
}

// A pass's decision, for the instrument (printed beside the graph after the pass).
void log_line(const PassContext& ctx, const std::string& pass, const std::string& line) {
  if (ctx.instrument) ctx.instrument(PassEvent{.pass = pass, .remark = line});
}

// Renames buffers (loads and stores) and substitutes names in expressions.
class Rewriter final : public ir::IRMutator {
 public:
  Rewriter(std::map<std::string, std::string> bufs, std::map<std::string, ir::Expr> vars,
           std::map<std::string, std::string> comps = {})
      : bufs_(std::move(bufs)), vars_(std::move(vars)), comps_(std::move(comps)) {}

  ir::Expr rewrite(const ir::Expr& e) { return ir::substitute(mutate(e), vars_); }
  std::string buf(const std::string& b) const {
    auto it = bufs_.find(b);
    return it == bufs_.end() ? b : it->second;
  }

 protected:
  ir::Expr mutate_load(const ir::Expr& e, const ir::Load& n) override {
    bool changed = false;
    std::vector<ir::Expr> idx = mutate_all(n.indices, &changed);
    std::string b = buf(n.buf);
    if (!changed && b == n.buf) return e;
    return ir::load(b, std::move(idx), n.type, n.where);
  }
  ir::Expr mutate_access(const ir::Expr& e, const ir::Access& n) override {
    bool changed = false;
    std::vector<ir::Expr> idx = mutate_all(n.indices, &changed);
    auto it = comps_.find(n.comp);
    if (!changed && it == comps_.end()) return e;
    return ir::access(it == comps_.end() ? n.comp : it->second, std::move(idx), n.type, n.where);
  }

 private:
  std::map<std::string, std::string> bufs_;
  std::map<std::string, ir::Expr> vars_;
  std::map<std::string, std::string> comps_;
};

}  // namespace

// ---------------------------------------------------------------------------
// fold_constants

ir::Graph fold_constants(const ir::Graph& g, const PassContext& ctx) {
  ir::Graph out = g;
  out.calls.clear();
  std::set<std::string> constant;
  for (const ir::GraphTensor& t : g.tensors) {
    if (t.kind == ir::TensorKind::Const) constant.insert(t.name);
  }
  StageTimer timer(ErrorStage::Passes, ctx.limits);
  for (const ir::GraphCall& c : g.calls) {
    bool foldable = std::all_of(c.args.begin(), c.args.end(),
                                [&](const std::string& a) { return constant.count(a) != 0; });
    if (!foldable) {
      out.calls.push_back(c);
      continue;
    }
    // What evaluating it takes: its arguments, and its results as buffers and as values.
    uint64_t bytes = 0;
    auto add = [&](const std::string& name, uint64_t extra_per_element) {
      const ir::GraphTensor* t = out.find_tensor(name);
      // saturating: a size past 64 bits is past any budget
      uint64_t size = ir::dtype_bytes(t->dtype) + extra_per_element;
      for (int64_t e : t->shape)
        if (__builtin_mul_overflow(size, static_cast<uint64_t>(std::max<int64_t>(e, 0)), &size))
          size = UINT64_MAX;
      if (__builtin_add_overflow(bytes, size, &bytes)) bytes = UINT64_MAX;
    };
    for (const std::string& a : c.args) add(a, 0);
    for (const std::string& r : c.results) add(r, sizeof(double));
    if (bytes > ctx.limits.max_fold_bytes) {
      log_line(
          ctx, "fold_constants",
          fmt::format("kept {} = {}(...) in the graph: folding it takes {} bytes, more than "
                      "the limit of {} (max_fold_bytes, docs/limits.md)",
                      fmt::join(c.results, ", "), c.op.name, bytes, ctx.limits.max_fold_bytes));
      out.calls.push_back(c);
      continue;
    }
    timer.check(c.where, "before folding " + c.op.name);
    // A graph of this call alone, its arguments as constants, run on the host.
    ir::Graph one;
    one.name = g.name;
    one.where = g.where;
    for (const std::string& a : c.args) {
      if (!one.find_tensor(a)) one.tensors.push_back(*out.find_tensor(a));
    }
    one.calls.push_back(c);
    one.outputs = c.results;
    Tensors values =
        interp::run_graph(one, {}, [&](size_t, const ir::GraphCall& call, Bindings& b) {
          if (ctx.evaluate) {
            ctx.evaluate(call.op, b);
          } else {
            interp::run_reference(call.op, b);
          }
        });
    for (const std::string& r : c.results) {
      ir::GraphTensor& t = *out.find_tensor(r);
      const HostBuffer& v = values.at(r);
      t.kind = ir::TensorKind::Const;
      t.init = ir::ConstInit{};
      t.init.kind = ir::ConstInit::Kind::Data;
      const auto* bytes = static_cast<const unsigned char*>(v.data());
      t.init.data = std::make_shared<const std::vector<unsigned char>>(
          bytes, bytes + static_cast<size_t>(v.size()) * ir::dtype_bytes(v.dtype()));
      constant.insert(r);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// eliminate_common_operators

namespace {

// What makes two calls compute the same thing: the algorithm and the
// arguments. Not the func's name, schedule or knobs, nor the names of its
// buffers and computations: those are renamed by kind and position.
std::string call_key(const ir::GraphCall& c) {
  ir::Func algo = c.op;
  algo.name.clear();
  algo.schedule.clear();
  algo.knobs.clear();
  std::map<std::string, std::string> bufs, comps;
  std::map<ir::BufKind, int> seen;
  for (ir::Buf& b : algo.bufs) {
    std::string n = fmt::format("{}{}", ir::buf_kind_name(b.kind), seen[b.kind]++);
    bufs[b.name] = n;
    b.name = n;
  }
  for (size_t k = 0; k < algo.comps.size(); ++k) comps[algo.comps[k].name] = fmt::format("c{}", k);
  Rewriter rw(bufs, {}, comps);
  for (ir::AlgorithmLoop& loop : algo.loops)
    for (ir::Expr& d : loop.domain) d = rw.rewrite(d);
  for (ir::Comp& comp : algo.comps) {
    comp.name = comps[comp.name];
    comp.value = rw.rewrite(comp.value);
    for (ir::Expr& d : comp.domain) d = rw.rewrite(d);
    if (comp.store) {
      comp.store->buf = rw.buf(comp.store->buf);
      for (ir::Expr& i : comp.store->indices) i = rw.rewrite(i);
    }
  }
  return ir::to_string(algo) + "\n(" + fmt::format("{}", fmt::join(c.args, ", ")) + ")";
}

std::string const_key(const ir::GraphTensor& t) {
  std::ostringstream os;
  os.precision(17);
  os << ir::dtype_name(t.dtype) << "[" << fmt::format("{}", fmt::join(t.shape, ",")) << "] "
     << static_cast<int>(t.init.kind) << " ";
  switch (t.init.kind) {
    case ir::ConstInit::Kind::Fill:
      os << t.init.fill;
      break;
    case ir::ConstInit::Kind::Random:
      os << t.init.seed << " " << t.init.lo << " " << t.init.hi;
      break;
    case ir::ConstInit::Kind::Values:
      for (double v : t.init.values) os << v << ",";
      break;
    case ir::ConstInit::Kind::Data:
      // Bytes, not values: 0.0 and -0.0 stay apart, as they would in a kernel.
      os << (t.init.data
                 ? sha256_hex(std::string_view(reinterpret_cast<const char*>(t.init.data->data()),
                                               t.init.data->size()))
                 : std::string("-"));
      break;
  }
  return os.str();
}

}  // namespace

ir::Graph eliminate_common_operators(const ir::Graph& g) {
  ir::Graph out = g;
  std::map<std::string, std::string> replace;  // dropped tensor -> the one kept
  std::map<std::string, std::string> seen_const;
  for (const ir::GraphTensor& t : g.tensors) {
    if (t.kind != ir::TensorKind::Const) continue;
    auto [it, fresh] = seen_const.emplace(const_key(t), t.name);
    if (!fresh && !is_output(g, t.name)) replace[t.name] = it->second;
  }
  std::vector<ir::GraphCall> kept;
  std::map<std::string, size_t> seen_call;
  for (ir::GraphCall& c : out.calls) {
    for (std::string& a : c.args) {
      auto it = replace.find(a);
      if (it != replace.end()) a = it->second;
    }
    std::string key = call_key(c);
    auto it = seen_call.find(key);
    bool returns = std::any_of(c.results.begin(), c.results.end(),
                               [&](const std::string& r) { return is_output(g, r); });
    if (it == seen_call.end() || returns) {
      seen_call.emplace(key, kept.size());
      kept.push_back(std::move(c));
      continue;
    }
    const ir::GraphCall& first = kept[it->second];
    for (size_t r = 0; r < c.results.size(); ++r) replace[c.results[r]] = first.results[r];
  }
  out.calls = std::move(kept);
  std::erase_if(out.tensors, [&](const ir::GraphTensor& t) { return replace.count(t.name) != 0; });
  return out;
}

// ---------------------------------------------------------------------------
// remove_unused_operators

ir::Graph remove_unused_operators(const ir::Graph& g) {
  std::set<std::string> live(g.outputs.begin(), g.outputs.end());
  std::vector<bool> keep(g.calls.size(), false);
  for (size_t k = g.calls.size(); k-- > 0;) {
    const ir::GraphCall& c = g.calls[k];
    keep[k] = std::any_of(c.results.begin(), c.results.end(),
                          [&](const std::string& r) { return live.count(r) != 0; });
    if (keep[k]) live.insert(c.args.begin(), c.args.end());
  }
  ir::Graph out = g;
  out.calls.clear();
  std::set<std::string> defined;
  for (size_t k = 0; k < g.calls.size(); ++k) {
    if (!keep[k]) continue;
    out.calls.push_back(g.calls[k]);
    defined.insert(g.calls[k].results.begin(), g.calls[k].results.end());
  }
  std::erase_if(out.tensors, [&](const ir::GraphTensor& t) {
    switch (t.kind) {
      case ir::TensorKind::Input:
        return false;
      case ir::TensorKind::Const:
        return live.count(t.name) == 0;
      case ir::TensorKind::Value:
        return defined.count(t.name) == 0;
    }
    return false;
  });
  return out;
}

// ---------------------------------------------------------------------------
// fuse_elementwise

namespace {

// Whether every load of `buf` in e reads exactly [iters...].
class IdentityReads final : public ir::IRVisitor {
 public:
  IdentityReads(std::string buf, const std::vector<std::string>& iters)
      : buf_(std::move(buf)), iters_(iters) {}
  bool ok = true;
  bool any_access = false;

 protected:
  void visit_load(const ir::Load& n) override {
    if (n.buf == buf_) {
      if (n.indices.size() != iters_.size()) ok = false;
      for (size_t q = 0; ok && q < n.indices.size(); ++q) {
        const auto* v = ir::as<ir::Var>(n.indices[q]);
        if (!v || v->name != iters_[q]) ok = false;
      }
    }
    IRVisitor::visit_load(n);
  }
  void visit_access(const ir::Access& n) override {
    any_access = true;
    IRVisitor::visit_access(n);
  }

 private:
  std::string buf_;
  const std::vector<std::string>& iters_;
};

// The extent of each of c's iterators, in order, when c's domain is exactly a
// box: `0 <= it` and `it < E` once each for every iterator, E a constant under
// f's params. Nullopt for any other domain.
std::optional<std::vector<int64_t>> box_extents(const ir::Func& f, const ir::Comp& c) {
  std::map<std::string, int64_t> env = interp::param_values(f);
  std::vector<int> lower(c.iters.size(), 0), upper(c.iters.size(), 0);
  std::vector<int64_t> extent(c.iters.size(), 0);
  auto iter_index = [&](const ir::Expr& x) -> int {
    const auto* v = ir::as<ir::Var>(x);
    if (!v) return -1;
    auto it = std::find(c.iters.begin(), c.iters.end(), v->name);
    return it == c.iters.end() ? -1 : static_cast<int>(it - c.iters.begin());
  };
  for (const ir::Expr& cond : c.domain) {
    const auto* b = ir::as<ir::Binary>(cond);
    if (!b) return std::nullopt;
    if (b->op == ir::BinaryOp::Le && ir::eval_int(b->a, env) == 0 && iter_index(b->b) >= 0) {
      ++lower[static_cast<size_t>(iter_index(b->b))];
    } else if (b->op == ir::BinaryOp::Lt && iter_index(b->a) >= 0) {
      std::optional<int64_t> e = ir::eval_int(b->b, env);
      if (!e) return std::nullopt;
      size_t q = static_cast<size_t>(iter_index(b->a));
      ++upper[q];
      extent[q] = *e;
    } else {
      return std::nullopt;
    }
  }
  for (size_t q = 0; q < c.iters.size(); ++q) {
    if (lower[q] != 1 || upper[q] != 1) return std::nullopt;
  }
  return extent;
}

// The one computation of an elementwise operator writing `out` (of the given
// shape) from `in`, or null when g is not elementwise in `in`.
const ir::Comp* elementwise_comp(const ir::Func& g, const std::string& in,
                                 const std::vector<int64_t>& shape) {
  std::vector<const ir::Buf*> outs = g.bufs_of_kind(ir::BufKind::Output);
  if (outs.size() != 1 || g.comps.size() != 1 || !g.bufs_of_kind(ir::BufKind::Temp).empty())
    return nullptr;
  const ir::Comp& e = g.comps[0];
  if (!e.store || e.store->buf != outs[0]->name || e.iters.size() != shape.size()) return nullptr;
  for (size_t q = 0; q < e.iters.size(); ++q) {
    const auto* v = ir::as<ir::Var>(e.store->indices[q]);
    if (!v || v->name != e.iters[q]) return nullptr;
  }
  // The domain is exactly the box 0 <= it_q < shape[q].
  if (box_extents(g, e) != shape) return nullptr;
  IdentityReads reads(in, e.iters);
  reads.visit(e.value);
  if (!reads.ok || reads.any_access) return nullptr;
  return &e;
}

std::string fresh(const std::string& base, const std::set<std::string>& taken) {
  if (!taken.count(base)) return base;
  for (int k = 2;; ++k) {
    std::string n = base + "_" + std::to_string(k);
    if (!taken.count(n)) return n;
  }
}

ir::ScheduleArg name_arg(const std::string& n) {
  ir::ScheduleArg a;
  a.kind = ir::ScheduleArg::Kind::Name;
  a.text = n;
  return a;
}

// W's loop commands replayed on E, whose loops start as `loops` (W's first
// dimensions). Commands that name a loop E does not have are left out, or
// narrowed (reorder). Returns E's loops afterwards, outermost first.
std::vector<std::string> replay(const ir::Func& f, const std::string& w, const std::string& e,
                                std::vector<std::string> loops,
                                std::vector<ir::ScheduleCommand>& out) {
  auto has = [&](const std::string& n) {
    return std::find(loops.begin(), loops.end(), n) != loops.end();
  };
  auto at = [&](const std::string& n) {
    return static_cast<size_t>(std::find(loops.begin(), loops.end(), n) - loops.begin());
  };
  auto text = [](const ir::ScheduleCommand& c, size_t k) {
    return k < c.args.size() && c.args[k].kind == ir::ScheduleArg::Kind::Name ? c.args[k].text
                                                                              : std::string();
  };
  for (const ir::ScheduleCommand& c : f.schedule) {
    if (c.target != w) continue;
    ir::ScheduleCommand copy = c;
    copy.target = e;
    if (c.is(ir::ScheduleOp::Split) && c.args.size() == 4 && has(text(c, 0))) {
      size_t p = at(text(c, 0));
      loops[p] = text(c, 3);
      loops.insert(loops.begin() + static_cast<std::ptrdiff_t>(p), text(c, 2));
    } else if (c.is(ir::ScheduleOp::Tile) && c.args.size() == 8 && has(text(c, 0)) &&
               has(text(c, 1)) && at(text(c, 1)) == at(text(c, 0)) + 1) {
      size_t p = at(text(c, 0));
      loops.erase(loops.begin() + static_cast<std::ptrdiff_t>(p),
                  loops.begin() + static_cast<std::ptrdiff_t>(p) + 2);
      loops.insert(loops.begin() + static_cast<std::ptrdiff_t>(p),
                   {text(c, 4), text(c, 5), text(c, 6), text(c, 7)});
    } else if (c.is(ir::ScheduleOp::Fuse) && c.args.size() == 3 && has(text(c, 0)) &&
               has(text(c, 1)) && at(text(c, 1)) == at(text(c, 0)) + 1) {
      size_t p = at(text(c, 0));
      loops.erase(loops.begin() + static_cast<std::ptrdiff_t>(p) + 1);
      loops[p] = text(c, 2);
    } else if (c.is(ir::ScheduleOp::Reorder)) {
      std::vector<std::string> names;
      for (size_t k = 0; k < c.args.size(); ++k) {
        if (has(text(c, k))) names.push_back(text(c, k));
      }
      if (names.size() < 2) continue;
      std::vector<size_t> slots;
      for (const std::string& n : names) slots.push_back(at(n));
      std::sort(slots.begin(), slots.end());
      bool same = true;
      for (size_t k = 0; k < names.size(); ++k) same = same && loops[slots[k]] == names[k];
      if (same) continue;  // already in this order for E
      for (size_t k = 0; k < names.size(); ++k) loops[slots[k]] = names[k];
      copy.args.clear();
      for (const std::string& n : names) copy.args.push_back(name_arg(n));
    } else if ((c.is(ir::ScheduleOp::Tag) || c.is(ir::ScheduleOp::Separate)) && has(text(c, 0))) {
      // Same loops: nothing to track.
    } else {
      continue;
    }
    out.push_back(std::move(copy));
  }
  return loops;
}

// Every load of `buf` replaced by a load of `to` at `indices` (loads of an
// elementwise consumer's input, which read it at its own point).
class ReplaceLoads final : public ir::IRMutator {
 public:
  ReplaceLoads(std::string buf, std::string to, std::vector<ir::Expr> indices)
      : buf_(std::move(buf)), to_(std::move(to)), indices_(std::move(indices)) {}

 protected:
  ir::Expr mutate_load(const ir::Expr& e, const ir::Load& n) override {
    if (n.buf != buf_) return IRMutator::mutate_load(e, n);
    return ir::load(to_, indices_, n.type, n.where);
  }

 private:
  std::string buf_, to_;
  std::vector<ir::Expr> indices_;
};

std::string indices_text(const std::vector<ir::Expr>& indices) {
  std::string s;
  for (const ir::Expr& i : indices) s += ir::to_string(i) + ",";
  return s;
}

// Whether every load of `buf` in e reads it at `at` (the point e stores to).
class ReadsOnlyAt final : public ir::IRVisitor {
 public:
  ReadsOnlyAt(std::string buf, std::string at) : buf_(std::move(buf)), at_(std::move(at)) {}
  bool ok = true;

 protected:
  void visit_load(const ir::Load& n) override {
    if (n.buf == buf_ && indices_text(n.indices) != at_) ok = false;
    IRVisitor::visit_load(n);
  }

 private:
  std::string buf_, at_;
};

// Whether the writer w stores to each element of its buffer (of shape
// `shape`) exactly once over its domain, its iterators used each once in
// indices that are either an iterator or `c * a + b` with 0 <= b < c (a
// channel-blocked write-back): the store is a bijection of w's box onto the
// buffer, checked from the text, without isl.
bool stores_each_element_once(const ir::Func& f, const ir::Comp& w,
                              const std::vector<int64_t>& shape) {
  if (w.store->indices.size() != shape.size()) return false;
  std::optional<std::vector<int64_t>> box = box_extents(f, w);
  if (!box) return false;
  std::map<std::string, int64_t> extent;
  for (size_t q = 0; q < w.iters.size(); ++q) extent[w.iters[q]] = (*box)[q];
  std::set<std::string> used;
  auto use = [&](const ir::Expr& e) -> std::optional<int64_t> {
    const auto* v = ir::as<ir::Var>(e);
    if (!v || !extent.count(v->name) || !used.insert(v->name).second) return std::nullopt;
    return extent[v->name];
  };
  for (size_t q = 0; q < shape.size(); ++q) {
    const ir::Expr& idx = w.store->indices[q];
    if (ir::as<ir::Var>(idx)) {
      if (use(idx) != shape[q]) return false;
      continue;
    }
    // c * a + b, in either order of the sum and of the product.
    const auto* sum = ir::as<ir::Binary>(idx);
    if (!sum || sum->op != ir::BinaryOp::Add) return false;
    const ir::Expr* prod_side = &sum->a;
    const ir::Expr* var_side = &sum->b;
    if (!ir::as<ir::Binary>(*prod_side)) std::swap(prod_side, var_side);
    const auto* prod = ir::as<ir::Binary>(*prod_side);
    if (!prod || prod->op != ir::BinaryOp::Mul) return false;
    const ir::Expr* c = &prod->a;
    const ir::Expr* a = &prod->b;
    if (!ir::as<ir::IntImm>(*c)) std::swap(c, a);
    const auto* ci = ir::as<ir::IntImm>(*c);
    if (!ci || ci->value <= 0) return false;
    std::optional<int64_t> ea = use(*a), eb = use(*var_side);
    if (!ea || !eb || *eb != ci->value || *ea * ci->value != shape[q]) return false;
  }
  return used.size() == w.iters.size();
}

struct Fusion {
  ir::Func op;
  std::string placement;  // "inside loop xo of O", "after the loops of O"
};

// Builds the fused operator of producer f (whose output `fout` is the
// consumer's input) and elementwise consumer g, with the deepest legal
// placement. Null when no placement is legal.
std::optional<Fusion> fuse(const ir::Func& f, const std::string& fout, const ir::Func& g,
                           const std::string& gin, const ir::Comp& e_comp) {
  // The last computation that writes fout, storing to fout[its first dims].
  const ir::Comp* w = nullptr;
  for (const ir::Comp& c : f.comps) {
    if (c.store && c.store->buf == fout) w = &c;
  }
  if (!w) return std::nullopt;
  size_t rank = e_comp.iters.size();
  // The consumer runs at each point of w's first `rank` loops, reading fout
  // where w wrote it (w's store is the identity on them)...
  bool identity = w->iters.size() >= rank && w->store->indices.size() == rank;
  for (size_t q = 0; identity && q < rank; ++q) {
    const auto* v = ir::as<ir::Var>(w->store->indices[q]);
    identity = v && v->name == w->iters[q];
  }
  // ... or at each point of w's whole domain, when w stores each element of
  // fout once (a blocked write-back: O[n, 16 * fo + fi, y, x]), reads fout
  // only where it stores, and the consumer sees fout in its shape or as one
  // flat row.
  std::vector<int64_t> shape;
  for (const ir::Buf& b : f.bufs) {
    if (b.name == fout) shape = ir::bound_shape(f, b);
  }
  std::vector<int64_t> view;
  for (const ir::Buf& b : g.bufs) {
    if (b.name == gin) view = ir::bound_shape(g, b);
  }
  int64_t count = 1;
  for (int64_t e : shape) count *= e;
  bool whole = !identity && stores_each_element_once(f, *w, shape) &&
               (view == shape || view == std::vector<int64_t>{count});
  if (whole) {
    ReadsOnlyAt reads(fout, indices_text(w->store->indices));
    reads.visit(w->value);
    whole = reads.ok;
  }
  if (!identity && !whole) return std::nullopt;

  ir::Func base = f;
  base.name = f.name + "_" + g.name;
  base.fast_math = f.fast_math && g.fast_math;
  std::set<std::string> taken;
  for (const ir::Buf& b : f.bufs) taken.insert(b.name);
  for (const ir::Comp& c : f.comps) taken.insert(c.name);
  for (const ir::Param& p : f.params) taken.insert(p.name);
  for (const ir::Knob& k : f.knobs) taken.insert(k.name);
  std::map<std::string, std::string> buf_names{{gin, fout}};
  for (const ir::Buf& b : g.bufs) {
    if (b.kind != ir::BufKind::Input || b.name == gin) continue;
    std::string n = fresh(b.name, taken);
    taken.insert(n);
    buf_names[b.name] = n;
    ir::Buf nb = b;
    nb.name = n;
    nb.shape.clear();
    for (int64_t x : ir::bound_shape(g, b)) nb.shape.push_back(ir::int_imm(x));
    nb.values = {};  // in g's params; the values come from the graph anyway
    base.bufs.push_back(std::move(nb));
  }
  std::map<std::string, ir::Expr> vars;
  for (const auto& [name, value] : interp::param_values(g)) vars[name] = ir::int_imm(value);
  ir::Comp e;
  e.name = fresh(g.name, taken);
  e.where = e_comp.where;
  if (identity) {
    for (size_t q = 0; q < rank; ++q) vars[e_comp.iters[q]] = ir::var(w->iters[q]);
    Rewriter rw(buf_names, vars);
    e.iters.assign(w->iters.begin(), w->iters.begin() + static_cast<std::ptrdiff_t>(rank));
    for (const ir::Expr& c : e_comp.domain) e.domain.push_back(rw.rewrite(c));
    e.value = rw.rewrite(e_comp.value);
    e.store = ir::StoreTarget{fout, {}, e_comp.where};
    for (const std::string& it : e.iters) e.store->indices.push_back(ir::var(it));
  } else {
    // The consumer's point in terms of w's: w's store indices, or their
    // row-major flat index (constants: every param of f is bound).
    const std::vector<ir::Expr>& at = w->store->indices;
    if (view == shape) {
      for (size_t q = 0; q < rank; ++q) vars[e_comp.iters[q]] = at[q];
    } else {
      ir::Expr flat = at[0];
      for (size_t q = 1; q < at.size(); ++q) {
        flat = ir::binary(ir::BinaryOp::Add,
                          ir::binary(ir::BinaryOp::Mul, flat, ir::int_imm(shape[q])), at[q]);
      }
      vars[e_comp.iters[0]] = flat;
    }
    buf_names.erase(gin);
    Rewriter rw(buf_names, vars);
    e.iters = w->iters;
    e.domain = w->domain;
    e.value = ReplaceLoads(gin, fout, at).mutate(rw.rewrite(e_comp.value));
    e.store = ir::StoreTarget{fout, at, e_comp.where};
  }
  base.comps.push_back(e);

  // Candidates, best first: E with W's loop schedule inside each shared loop
  // from the deepest out; then without it; then after everything.
  struct Candidate {
    std::vector<ir::ScheduleCommand> commands;
    std::string placement;
  };
  std::vector<Candidate> candidates;
  for (bool with_replay : {true, false}) {
    std::vector<ir::ScheduleCommand> cmds;
    std::vector<std::string> loops(e.iters);
    if (with_replay) loops = replay(f, w->name, e.name, loops, cmds);
    if (with_replay && cmds.empty()) continue;  // the same as without
    for (size_t level = loops.size(); level-- > 0;) {
      ir::ScheduleCommand after;
      after.target = e.name;
      after.op = ir::schedule_op_name(ir::ScheduleOp::After);
      after.args = {name_arg(w->name), name_arg(loops[level])};
      after.where = e.where;
      Candidate c{cmds, fmt::format("inside loop {} of {}", loops[level], w->name)};
      c.commands.push_back(after);
      candidates.push_back(std::move(c));
    }
  }
  candidates.push_back({{}, fmt::format("after the loops of {}", f.name)});

  for (const Candidate& c : candidates) {
    ir::Func op = base;
    // Loop commands for E go before the first memory command: memory schedules
    // come after the loop schedules they depend on.
    auto memory = std::find_if(op.schedule.begin(), op.schedule.end(), [](const auto& s) {
      std::optional<ir::ScheduleOp> k = s.kind();
      return k && ir::is_memory_schedule(*k);
    });
    op.schedule.insert(memory, c.commands.begin(), c.commands.end());
    try {
      poly::schedule(op, true);
      return Fusion{std::move(op), c.placement};
    } catch (const CompileError&) {
      // Illegal or malformed here: try the next placement.
    }
  }
  return std::nullopt;
}

}  // namespace

ir::Graph fuse_elementwise(const ir::Graph& g, const PassContext& ctx) {
  ir::Graph out = g;
  for (bool changed = true; changed;) {
    changed = false;
    std::map<std::string, int> readers;
    for (const ir::GraphCall& c : out.calls) {
      for (const std::string& a : c.args) ++readers[a];
    }
    for (size_t ci = 0; !changed && ci < out.calls.size(); ++ci) {
      const ir::GraphCall& consumer = out.calls[ci];
      if (consumer.results.size() != 1) continue;
      std::vector<const ir::Buf*> g_ins = consumer.op.bufs_of_kind(ir::BufKind::Input);
      for (size_t ai = 0; !changed && ai < consumer.args.size(); ++ai) {
        const std::string t = consumer.args[ai];  // a copy: the call is replaced below
        if (readers[t] != 1 || is_output(out, t)) continue;
        // The producer: the call defining t, before every other argument's
        // definition is needed (the fused call takes the producer's place).
        size_t pi = 0, ri = 0;
        bool found = false;
        for (; pi < ci && !found; ++pi) {
          for (ri = 0; ri < out.calls[pi].results.size(); ++ri) {
            if (out.calls[pi].results[ri] == t) {
              found = true;
              break;
            }
          }
        }
        if (!found) continue;
        --pi;
        const ir::GraphCall& producer = out.calls[pi];
        std::set<std::string> later;  // results of calls from the producer on
        for (size_t k = pi; k < ci; ++k)
          later.insert(out.calls[k].results.begin(), out.calls[k].results.end());
        bool args_ready = std::all_of(consumer.args.begin(), consumer.args.end(),
                                      [&](const auto& a) { return a == t || later.count(a) == 0; });
        const ir::GraphTensor* tt = out.find_tensor(t);
        const ir::GraphTensor* rt = out.find_tensor(consumer.results.at(0));
        if (!args_ready || !tt || !rt || tt->dtype != rt->dtype) continue;
        // The consumer's elements are its input's, in the shape it reads them
        // (an imported model's relu reads a conv's output as one flat row).
        std::vector<int64_t> view = ir::bound_shape(consumer.op, *g_ins[ai]);
        std::vector<const ir::Buf*> g_outs = consumer.op.bufs_of_kind(ir::BufKind::Output);
        if (g_outs.size() != 1 || ir::bound_shape(consumer.op, *g_outs[0]) != view) continue;
        const ir::Comp* e = elementwise_comp(consumer.op, g_ins[ai]->name, view);
        if (!e) continue;
        std::vector<const ir::Buf*> f_outs = producer.op.bufs_of_kind(ir::BufKind::Output);
        std::optional<Fusion> fused =
            fuse(producer.op, f_outs[ri]->name, consumer.op, g_ins[ai]->name, *e);
        if (!fused) continue;
        log_line(
            ctx, "fuse_elementwise",
            fmt::format("{} into {} ({})", consumer.op.name, producer.op.name, fused->placement));
        ir::GraphCall call;
        call.op = std::move(fused->op);
        call.where = producer.where;
        call.args = producer.args;
        for (size_t k = 0; k < consumer.args.size(); ++k) {
          if (k != ai) call.args.push_back(consumer.args[k]);
        }
        call.results = producer.results;
        call.results[ri] = consumer.results[0];
        out.calls[pi] = std::move(call);
        out.calls.erase(out.calls.begin() + static_cast<std::ptrdiff_t>(ci));
        std::erase_if(out.tensors, [&](const ir::GraphTensor& x) { return x.name == t; });
        changed = true;
      }
    }
  }
  return out;
}

ir::Graph sketch_operators(const ir::Graph& g, const PassContext& ctx) {
  const autosched::Machine machine =
      ctx.target.is_gpu() ? autosched::Machine::Gpu : autosched::Machine::Cpu;
  ir::Graph out = g;
  std::map<std::string, ir::Func> sketched;  // an operator's text -> it sketched (or as it was)
  for (ir::GraphCall& c : out.calls) {
    if (c.op.has_schedule()) continue;
    std::string text = ir::to_string(c.op);
    auto it = sketched.find(text);
    if (it == sketched.end()) {
      ir::Func op = c.op;
      try {
        std::optional<autosched::Sketch> s = autosched::first_sketch(c.op, ctx.limits, machine);
        if (s) {
          op = autosched::apply(c.op, *s, ctx.limits);
          log_line(ctx, "sketch_operators",
                   fmt::format("{}: sketched, knobs {}", c.op.name,
                               fmt::join(op.knobs | std::views::transform(&ir::Knob::name), ", ")));
        }
      } catch (const CompileError& e) {
        // An operator kiln cannot sketch runs as its algorithm orders it, as before the pass.
        log_line(ctx, "sketch_operators", fmt::format("{}: not sketched: {}", c.op.name, e.what()));
      }
      it = sketched.emplace(text, std::move(op)).first;
    }
    c.op = it->second;
  }
  return out;
}

}  // namespace kiln::passes
