// Unrolling and register accumulators for the CUDA backend (registers.h).
#include "registers.h"

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "kiln/analysis.h"
#include "kiln/simplify.h"
#include "nests.h"

namespace kiln::cuda {
namespace {

using ir::Expr;
using ir::Stmt;

// Replaces one variable by a constant in every expression of a statement.
class Substitute : public ir::StmtMutator {
 public:
  Substitute(std::string var, Expr value) : var_(std::move(var)), value_(std::move(value)) {}

 protected:
  Expr mutate_stmt_expr(const Expr& e) override {
    if (!ir::free_vars(e).count(var_)) return e;
    return ir::simplify(ir::substitute(e, {{var_, value_}}));
  }

 private:
  std::string var_;
  Expr value_;
};

class Unroller : public ir::StmtMutator {
 public:
  explicit Unroller(int64_t max_copies) : budget_(max_copies) {}

 protected:
  Stmt mutate_for(const Stmt& s, const ir::For& n) override {
    if (n.tag == ir::LoopTag::Mma) return s;  // the tensor cores' nest, as it is
    bool unroll = n.tag == ir::LoopTag::Unroll || n.tag == ir::LoopTag::UnrollExplicit;
    std::optional<int64_t> lo = constant(n.min), hi = constant(n.end);
    if (!unroll || !lo || !hi || n.step <= 0) return ir::StmtMutator::mutate_for(s, n);
    int64_t trips = *hi > *lo ? (*hi - *lo + n.step - 1) / n.step : 0;
    if (trips > budget_) return ir::StmtMutator::mutate_for(s, n);
    int64_t saved = budget_;
    budget_ = trips > 0 ? budget_ / trips : budget_;
    Stmt body = mutate(n.body);
    budget_ = saved;
    std::vector<Stmt> copies;
    for (int64_t k = 0; k < trips; ++k)
      copies.push_back(Substitute(n.var, ir::int_imm(*lo + k * n.step)).mutate(body));
    return ir::block(std::move(copies));
  }

 private:
  int64_t budget_;
};

// Unrolls the loops inside gpu_thread loops, as the lowering pass does when it reaches them.
class UnrollInThreads : public ir::StmtMutator {
 protected:
  Stmt mutate_for(const Stmt& s, const ir::For& n) override {
    if (!ir::is_gpu_thread_tag(n.tag)) return ir::StmtMutator::mutate_for(s, n);
    Stmt body = mutate(unroll_constant_loops(n.body));
    return with_body(n, body);
  }
};

// ---------------------------------------------------------------------------------------------

// A gpu_thread loop around an access, its bounds with the surveyed loop's lets expanded.
struct ThreadLoop {
  const ir::For* loop = nullptr;
  Expr min, end;
};

struct Access {
  std::vector<Expr> index;  // with the loop's lets expanded, simplified
  bool store = false;
  std::vector<const ir::For*> threads;  // the gpu_thread loops around it, outermost first
};

// Walks a loop's body with its lets expanded, recording every access of every buffer, and
// which buffers cannot be promoted. With `threads_uniform`, the variables of gpu_thread loops
// inside count as fixed (each thread has its own values for the whole loop), and the thread
// loops around each access are recorded.
class Survey {
 public:
  Survey(std::set<std::string> inner_vars, bool threads_uniform = false)
      : inner_(std::move(inner_vars)), threads_uniform_(threads_uniform) {}

  std::map<const ir::For*, ThreadLoop> thread_loops;

  std::map<std::string, std::vector<Access>> accesses;
  std::set<std::string> excluded;

  void stmt(const Stmt& s, bool conditional) {
    if (!s) return;
    switch (s->kind) {
      case ir::StmtKind::Block:
        for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts) stmt(c, conditional);
        return;
      case ir::StmtKind::LetStmt: {
        const auto& n = static_cast<const ir::LetStmt&>(*s);
        expr(n.value, conditional);
        auto it = lets_.find(n.var);
        bool had = it != lets_.end();
        Expr saved = had ? it->second : nullptr;
        Expr value = expand(n.value);
        lets_[n.var] = value;
        stmt(n.body, conditional);
        if (had)
          lets_[n.var] = saved;
        else
          lets_.erase(n.var);
        return;
      }
      case ir::StmtKind::For: {
        const auto& n = static_cast<const ir::For&>(*s);
        expr(n.min, conditional);
        expr(n.end, conditional);
        if (threads_uniform_ && ir::is_gpu_thread_tag(n.tag)) {
          thread_loops[&n] = {&n, expand(n.min), expand(n.end)};
          threads_.push_back(&n);
          stmt(n.body, conditional);
          threads_.pop_back();
          return;
        }
        inner_.insert(n.var);
        stmt(n.body, conditional);
        return;
      }
      case ir::StmtKind::If: {
        const auto& n = static_cast<const ir::IfThenElse&>(*s);
        expr(n.cond, conditional);
        stmt(n.then_case, true);
        stmt(n.else_case, true);
        return;
      }
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        excluded.insert(n.buf);
        stmt(n.body, conditional);
        return;
      }
      case ir::StmtKind::Store: {
        const auto& n = static_cast<const ir::Store&>(*s);
        for (const Expr& i : n.indices) expr(i, conditional);
        expr(n.value, conditional);
        if (n.atomic) excluded.insert(n.buf);
        record(n.buf, n.indices, true, conditional);
        return;
      }
      case ir::StmtKind::Evaluate:
        expr(static_cast<const ir::Evaluate&>(*s).value, conditional);
        return;
    }
  }

  Expr expand(const Expr& e) const { return expand_lets(e, lets_); }

 private:
  void expr(const Expr& e, bool conditional) {
    ir::any_subexpr(e, [&](const Expr& x) {
      if (const ir::Load* l = ir::as<ir::Load>(x)) record(l->buf, l->indices, false, conditional);
      // a select or an and/or evaluates a side only sometimes
      if (x->kind == ir::ExprKind::Select || x->kind == ir::ExprKind::Let) {
        ir::any_subexpr(x, [&](const Expr& y) {
          if (const ir::Load* l = ir::as<ir::Load>(y)) excluded.insert(l->buf);
          return false;
        });
      }
      if (const ir::Binary* b = ir::as<ir::Binary>(x);
          b && (b->op == ir::BinaryOp::And || b->op == ir::BinaryOp::Or)) {
        ir::any_subexpr(x, [&](const Expr& y) {
          if (const ir::Load* l = ir::as<ir::Load>(y)) excluded.insert(l->buf);
          return false;
        });
      }
      return false;
    });
  }

  void record(const std::string& buf, const std::vector<Expr>& index, bool store,
              bool conditional) {
    if (conditional) excluded.insert(buf);
    Access a{{}, store, threads_};
    for (const Expr& i : index) {
      Expr x = expand(i);
      for (const std::string& v : ir::free_vars(x))
        if (inner_.count(v)) excluded.insert(buf);
      if (ir::reads_memory(x)) excluded.insert(buf);
      a.index.push_back(x);
    }
    accesses[buf].push_back(std::move(a));
  }

  std::set<std::string> inner_;
  bool threads_uniform_;
  std::vector<const ir::For*> threads_;
  std::map<std::string, Expr> lets_;

 public:
  // Whether e names a variable of a loop inside the surveyed one (its values change there).
  bool varies(const Expr& e) const {
    for (const std::string& v : ir::free_vars(e))
      if (inner_.count(v)) return true;
    return false;
  }
};

bool same(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  for (size_t d = 0; d < a.size(); ++d)
    if (!ir::equal(a[d], b[d])) return false;
  return true;
}

// An index, each dimension split into the part that varies (and its text) and a constant.
struct SplitIndex {
  std::vector<Expr> index;
  std::vector<std::pair<Expr, int64_t>> dims;
  std::string text;  // the varying parts and constants, dimension after dimension
};

SplitIndex split_index(const std::vector<Expr>& index) {
  SplitIndex out{index, {}, {}};
  for (const Expr& e : index) {
    out.dims.push_back(split_constant(e));
    out.text += ir::to_string(out.dims.back().first) + " + " +
                std::to_string(out.dims.back().second) + "; ";
  }
  return out;
}

// Whether two indices provably name different elements: in some dimension they differ by a
// nonzero constant. Where the varying parts are the same, the constants say so at once; only
// the other dimensions are simplified (a register tile of 64 elements compares 2016 pairs).
bool distinct(const SplitIndex& a, const SplitIndex& b) {
  std::vector<size_t> other;
  for (size_t d = 0; d < a.dims.size(); ++d) {
    if (!ir::equal(a.dims[d].first, b.dims[d].first))
      other.push_back(d);
    else if (a.dims[d].second != b.dims[d].second)
      return true;
  }
  for (size_t d : other) {
    std::optional<int64_t> diff = constant(a.index[d] - b.index[d]);
    if (diff && *diff != 0) return true;
  }
  return false;
}

// Rewrites the accesses of the promoted elements to their temporaries.
class Redirect : public ir::StmtMutator {
 public:
  struct Slot {
    std::string buf;
    std::vector<Expr> index;
    std::string temp;
    ir::DType dtype;
  };
  Redirect(const std::vector<Slot>& slots, Survey& survey) : slots_(slots), survey_(survey) {}

 protected:
  Stmt mutate_let_stmt(const Stmt& s, const ir::LetStmt& n) override {
    (void)s;
    Expr value = mutate(n.value);
    lets_.push_back({n.var, n.value});
    Stmt body = mutate(n.body);
    lets_.pop_back();
    return std::make_shared<ir::LetStmt>(n.var, value, body);
  }
  Stmt mutate_store(const Stmt& s, const ir::Store& n) override {
    Expr value = mutate(n.value);
    if (const Slot* slot = find(n.buf, n.indices))
      return std::make_shared<ir::Store>(slot->temp, std::vector<Expr>{}, value, n.comp,
                                         n.instance);
    (void)s;
    std::vector<Expr> idx;
    for (const Expr& i : n.indices) idx.push_back(mutate(i));
    return std::make_shared<ir::Store>(n.buf, idx, value, n.comp, n.instance, n.atomic);
  }
  Expr mutate_load(const Expr& e, const ir::Load& n) override {
    if (const Slot* slot = find(n.buf, n.indices))
      return ir::load(slot->temp, {}, slot->dtype, n.where);
    return ir::StmtMutator::mutate_load(e, n);
  }

 private:
  const Slot* find(const std::string& buf, const std::vector<Expr>& index) {
    bool any = false;
    for (const Slot& s : slots_) any = any || s.buf == buf;
    if (!any) return nullptr;
    std::vector<Expr> expanded;
    for (const Expr& i : index) {
      Expr x = i;
      for (auto it = lets_.rbegin(); it != lets_.rend(); ++it)
        x = ir::substitute(x, {{it->first, it->second}});
      expanded.push_back(survey_.expand(x));
    }
    for (const Slot& s : slots_)
      if (s.buf == buf && same(s.index, expanded)) return &s;
    return nullptr;
  }

  const std::vector<Slot>& slots_;
  Survey& survey_;
  std::vector<std::pair<std::string, Expr>> lets_;
};

}  // namespace

Expr expand_lets(const Expr& e, const std::map<std::string, Expr>& lets) {
  Expr r = e;
  for (int round = 0; round < 64; ++round) {
    std::map<std::string, Expr> sub;
    for (const std::string& v : ir::free_vars(r)) {
      auto it = lets.find(v);
      if (it != lets.end()) sub[v] = it->second;
    }
    if (sub.empty()) break;
    r = ir::substitute(r, sub);
  }
  return ir::simplify(r);
}

void bind_let(std::map<std::string, Expr>& lets, const std::string& var, const Expr& value) {
  if (ir::is_int(value->type) && !ir::reads_memory(value))
    lets[var] = value;
  else
    lets.erase(var);
}

std::optional<int64_t> constant(const Expr& e) {
  if (const ir::IntImm* i = ir::as<ir::IntImm>(ir::simplify(e))) return i->value;
  return std::nullopt;
}

Expr flat_offset(const std::vector<Expr>& indices, const std::vector<Expr>& shape) {
  if (indices.empty()) return ir::int_imm(0);
  Expr flat = indices[0];
  for (size_t d = 1; d < indices.size() && d < shape.size(); ++d)
    flat = flat * shape[d] + indices[d];
  return flat;
}

std::pair<Expr, int64_t> split_constant(const Expr& e) {
  if (const ir::IntImm* c = ir::as<ir::IntImm>(e)) return {ir::int_imm(0, e->type), c->value};
  if (const ir::Binary* b = ir::as<ir::Binary>(e)) {
    if (const ir::IntImm* c = ir::as<ir::IntImm>(b->b)) {
      if (b->op == ir::BinaryOp::Add) return {b->a, c->value};
      if (b->op == ir::BinaryOp::Sub && c->value != INT64_MIN) return {b->a, -c->value};
    }
  }
  return {e, 0};
}

Stmt unroll_constant_loops(const Stmt& s, int64_t max_copies) {
  return Unroller(max_copies).mutate(s);
}

namespace {

// The elements to keep in registers: of each buffer the survey left in that `eligible` gives a
// type and `fits` accepts, stored to at least once, with provably distinct indices.
std::vector<Redirect::Slot> choose_slots(
    const Survey& survey,
    const std::function<std::optional<ir::DType>(const std::string&)>& eligible,
    const std::function<bool(const std::vector<Access>&)>& fits,
    const std::function<std::string()>& fresh) {
  std::vector<Redirect::Slot> slots;
  for (const auto& [buf, list] : survey.accesses) {
    if (survey.excluded.count(buf)) continue;
    std::optional<ir::DType> dtype = eligible(buf);
    if (!dtype || !fits(list)) continue;
    bool stores = false;
    for (const Access& a : list) stores = stores || a.store;
    if (!stores) continue;
    // The different indices, in the order of their first access (found by their text, then
    // compared), each to be told apart from every other.
    std::vector<SplitIndex> distinct_indices;
    std::multimap<std::string, size_t> by_text;
    for (const Access& a : list) {
      SplitIndex split = split_index(a.index);
      auto [from, to] = by_text.equal_range(split.text);
      if (std::any_of(from, to, [&](const auto& kv) {
            return same(distinct_indices[kv.second].index, a.index);
          }))
        continue;
      by_text.emplace(split.text, distinct_indices.size());
      distinct_indices.push_back(std::move(split));
    }
    if (distinct_indices.size() > 64) continue;
    bool ok = true;
    for (size_t u = 0; ok && u < distinct_indices.size(); ++u)
      for (size_t v = 0; ok && v < u; ++v) ok = distinct(distinct_indices[v], distinct_indices[u]);
    if (!ok) continue;
    for (const SplitIndex& idx : distinct_indices)
      slots.push_back({buf, idx.index, fresh(), *dtype});
  }
  return slots;
}

// The slots' temporaries around `s`, one gpu_local element each.
Stmt allocate(const std::vector<Redirect::Slot>& slots, Stmt s) {
  for (auto it = slots.rbegin(); it != slots.rend(); ++it)
    s = std::make_shared<ir::Alloc>(it->temp, it->dtype, std::vector<Expr>{}, ir::MemLoc::GpuLocal,
                                    std::move(s));
  return s;
}

}  // namespace

Stmt keep_accumulators_in_registers(
    const Stmt& loop, const std::function<std::optional<ir::DType>(const std::string&)>& eligible,
    const std::function<std::string()>& fresh) {
  const ir::For* n = ir::as<ir::For>(loop);
  if (!n) return loop;
  Survey survey({n->var});
  survey.stmt(n->body, false);
  std::vector<Redirect::Slot> slots = choose_slots(
      survey, eligible, [](const std::vector<Access>&) { return true; }, fresh);
  if (slots.empty()) return loop;
  Stmt body = Redirect(slots, survey).mutate(n->body);
  std::vector<Stmt> steps;
  for (const Redirect::Slot& s : slots)
    steps.push_back(std::make_shared<ir::Store>(s.temp, std::vector<Expr>{},
                                                ir::load(s.buf, s.index, s.dtype)));
  steps.push_back(with_body(*n, body));
  for (const Redirect::Slot& s : slots)
    steps.push_back(std::make_shared<ir::Store>(s.buf, s.index, ir::load(s.temp, {}, s.dtype)));
  // The elements are read and written back only when the loop runs: its indices may be valid
  // only then.
  return allocate(slots,
                  std::make_shared<ir::IfThenElse>(ir::binary(ir::BinaryOp::Lt, n->min, n->end),
                                                   ir::block(std::move(steps)), nullptr));
}

Stmt keep_accumulators_across_block_loop(
    const Stmt& loop, const std::function<std::optional<ir::DType>(const std::string&)>& eligible,
    const std::function<std::string()>& fresh) {
  const ir::For* n = ir::as<ir::For>(loop);
  if (!n || ir::is_gpu_tag(n->tag)) return loop;
  // The survey sees the unrolled register tile (ri, rj become constants in the indices).
  Stmt unrolled = UnrollInThreads().mutate(n->body);
  Survey survey({n->var}, true);
  survey.stmt(unrolled, false);
  // Every access of the buffer inside the same thread loops, whose bounds the loop does not
  // change: the same thread loops around a copy before the loop and one after it give each
  // thread the same elements.
  std::vector<const ir::For*> threads;
  auto fits = [&](const std::vector<Access>& list) {
    const std::vector<const ir::For*>& t = list.front().threads;
    if (t.empty()) return false;
    for (const Access& a : list)
      if (a.threads != t) return false;
    for (const ir::For* f : t) {
      const ThreadLoop& l = survey.thread_loops.at(f);
      if (survey.varies(l.min) || survey.varies(l.end) || ir::free_vars(l.min).count(n->var) ||
          ir::free_vars(l.end).count(n->var) || ir::reads_memory(l.min) || ir::reads_memory(l.end))
        return false;
    }
    if (threads.empty()) threads = t;
    return threads == t;  // one nest for every promoted buffer: one copy before, one after
  };
  std::vector<Redirect::Slot> slots = choose_slots(survey, eligible, fits, fresh);
  if (slots.empty()) return loop;
  Stmt body = Redirect(slots, survey).mutate(unrolled);
  // The thread loops around `inner`, with their bounds as they are outside the loop.
  auto in_threads = [&](Stmt inner) {
    for (auto it = threads.rbegin(); it != threads.rend(); ++it) {
      const ThreadLoop& l = survey.thread_loops.at(*it);
      inner = std::make_shared<ir::For>((*it)->var, l.min, l.end, (*it)->step, (*it)->tag,
                                        std::move(inner));
    }
    return inner;
  };
  std::vector<Stmt> loads, stores;
  for (const Redirect::Slot& s : slots) {
    loads.push_back(std::make_shared<ir::Store>(s.temp, std::vector<Expr>{},
                                                ir::load(s.buf, s.index, s.dtype)));
    stores.push_back(std::make_shared<ir::Store>(s.buf, s.index, ir::load(s.temp, {}, s.dtype)));
  }
  std::vector<Stmt> steps;
  steps.push_back(in_threads(ir::block(std::move(loads))));
  steps.push_back(with_body(*n, body));
  steps.push_back(in_threads(ir::block(std::move(stores))));
  return allocate(slots,
                  std::make_shared<ir::IfThenElse>(ir::binary(ir::BinaryOp::Lt, n->min, n->end),
                                                   ir::block(std::move(steps)), nullptr));
}

}  // namespace kiln::cuda
