// Builds the polyhedral model of a Func: domains, accesses, the original schedule and dependences.
#include "model.h"

#include <isl/ctx.h>
#include <isl/options.h>
#include <isl/union_map.h>
#include <isl/version.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "access_sites.h"
#include "affine_function.h"
#include "affine_printer.h"
#include "kiln/analysis.h"
#include "kiln/timing.h"
#include "stored_relation.h"

namespace kiln::poly {

IslContext::IslContext() : raw_(isl_ctx_alloc()) {
  // Errors become isl::exception (cpp.h) instead of messages on stderr.
  isl_options_set_on_error(raw_, ISL_ON_ERROR_CONTINUE);
}
IslContext::~IslContext() { isl_ctx_free(raw_); }

std::string isl_version_name() {
  std::string v = isl_version();
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
  return v;
}

CompModel* ScheduledFunc::Impl::find(const std::string& name) {
  for (auto& c : comps)
    if (c.name == name) return &c;
  return nullptr;
}
const CompModel* ScheduledFunc::Impl::find(const std::string& name) const {
  for (const auto& c : comps)
    if (c.name == name) return &c;
  return nullptr;
}

const CompModel* ScheduledFunc::Impl::find_tuple(const std::string& tuple) const {
  for (const auto& c : comps)
    if (isl_name(c.name) == tuple) return &c;
  return nullptr;
}

std::string isl_tuple(const std::string& name, const std::vector<std::string>& vars) {
  std::string s = isl_name(name) + "[";
  for (size_t i = 0; i < vars.size(); ++i) s += (i ? ", " : "") + isl_name(vars[i]);
  return s + "]";
}

std::string isl_name(const std::string& name) {
  static const std::set<std::string> reserved = {
      "and",   "or",    "not", "mod",     "floor", "ceil", "min",    "max",   "exists", "true",
      "false", "infty", "NaN", "implies", "xor",   "rat",  "floord", "ceild", "div"};
  if (reserved.count(name)) return "v_" + name;
  return name;
}

namespace {

[[noreturn]] void fail(const SourceLoc& where, const std::string& msg) {
  throw CompileError(ErrorStage::Schedule, where, msg);
}

// Replaces reads of value computations: inlined ones by their expression,
// stored ones by a read of their buffer.
class ValueResolver : public ir::IRMutator {
 public:
  ValueResolver(const ir::Func& f, const std::map<std::string, ir::StoreTarget>& stored,
                size_t max_nodes)
      : f_(f), stored_(stored), max_nodes_(max_nodes) {}

  // Resolves the value of `comp`; inlining may not make it larger than the limit
  // (value computations reading each other twice over double with each level).
  ir::Expr resolve(const ir::Comp& comp) {
    comp_ = &comp;
    nodes_ = 0;
    return mutate(comp.value);
  }

 protected:
  ir::Expr mutate_access(const ir::Expr& e, const ir::Access& n) override {
    if (depth_ == 0) top_ = n.comp;
    if (++depth_ > 64)
      throw CompileError(ErrorStage::Schedule, f_.where,
                         "computations read each other in a cycle through '" + n.comp + "'");
    const ir::Comp* c = f_.find_comp(n.comp);
    if (!c)
      throw CompileError(ErrorStage::Schedule, f_.where,
                         "read of unknown computation '" + n.comp + "'");
    bool changed = false;
    std::vector<ir::Expr> idx = mutate_all(n.indices, &changed);
    std::map<std::string, ir::Expr> sub;
    for (size_t i = 0; i < c->iters.size() && i < idx.size(); ++i) sub[c->iters[i]] = idx[i];
    ir::Expr result;
    auto st = stored_.find(n.comp);
    if (st != stored_.end()) {
      std::vector<ir::Expr> at;
      for (const auto& x : st->second.indices) at.push_back(ir::substitute(x, sub));
      const ir::Buf* b = f_.find_buf(st->second.buf);
      result = ir::load(st->second.buf, at, b ? b->dtype : e->type, n.where);
    } else {
      ir::Expr inlined = ir::substitute(c->value, sub);
      ir::any_subexpr(inlined, [&](const ir::Expr&) { return ++nodes_ > max_nodes_; });
      if (nodes_ > max_nodes_)
        throw CompileError(ErrorStage::Schedule, comp_ ? comp_->where : f_.where,
                           "the value of '" + (comp_ ? comp_->name : n.comp) +
                               "', with the value computations it reads inlined, has more than " +
                               std::to_string(max_nodes_) +
                               " expression nodes (max_expression_nodes, docs/limits.md); store "
                               "'" +
                               top_ + "' in a temp buffer instead (store / store_at)");
      result = mutate(inlined);
    }
    --depth_;
    return result;
  }

 private:
  const ir::Func& f_;
  const std::map<std::string, ir::StoreTarget>& stored_;
  size_t max_nodes_;
  const ir::Comp* comp_ = nullptr;
  std::string top_;  // the computation the value reads directly, being inlined
  size_t nodes_ = 0;
  int depth_ = 0;
};

// The value computations the schedule stores (store / store_at), with where.
std::map<std::string, ir::StoreTarget> stored_values(const ir::Func& f) {
  std::map<std::string, ir::StoreTarget> out;
  for (const auto& cmd : f.schedule) {
    if (!cmd.is(ir::ScheduleOp::Store) && !cmd.is(ir::ScheduleOp::StoreAt)) continue;
    const ir::Comp* c = f.find_comp(cmd.target);
    if (!c) fail(cmd.where, "'" + cmd.target + "' is not a computation of " + f.name);
    if (c->store)
      fail(cmd.where, "'" + c->name + "' already stores to '" + c->store->buf +
                          "'; store applies to value computations (compute NAME(...) = expr)");
    if (cmd.args.empty() || cmd.args[0].kind != ir::ScheduleArg::Kind::Name ||
        cmd.args[0].text.empty())
      fail(cmd.where, cmd.op + " expects a temp buffer name as its first argument");
    const ir::Buf* b = f.find_buf(cmd.args[0].text);
    if (!b) fail(cmd.args[0].where, "unknown buffer '" + cmd.args[0].text + "'");
    if (b->kind == ir::BufKind::Input)
      fail(cmd.args[0].where, "cannot store into input buffer '" + b->name + "'");
    if (b->dtype != c->value->type)
      fail(cmd.where, std::string("'") + c->name + "' has type " + ir::dtype_name(c->value->type) +
                          " but buffer '" + b->name + "' holds " + ir::dtype_name(b->dtype));
    ir::StoreTarget t{b->name, {}, cmd.where};
    if (cmd.is(ir::ScheduleOp::Store)) {
      if (cmd.args.size() != 1) fail(cmd.where, "store expects one argument: store(BUFFER)");
      for (const auto& it : c->iters) t.indices.push_back(ir::var(it));
    } else {
      if (cmd.args.size() != 2 || cmd.args[1].kind != ir::ScheduleArg::Kind::Name ||
          !cmd.args[1].text.empty())
        fail(cmd.where, "store_at expects a buffer and an index list: store_at(BUFFER, [i, j])");
      for (const auto& a : cmd.args[1].list) {
        if (a.kind == ir::ScheduleArg::Kind::Int) {
          t.indices.push_back(ir::int_imm(a.number));
        } else if (a.kind == ir::ScheduleArg::Kind::Name &&
                   std::find(c->iters.begin(), c->iters.end(), a.text) != c->iters.end()) {
          t.indices.push_back(ir::var(a.text));
        } else {
          fail(a.where, "store_at indices must be iterators of '" + c->name + "' or integers");
        }
      }
    }
    if (t.indices.size() != b->shape.size())
      fail(cmd.where, "buffer '" + b->name + "' has " + std::to_string(b->shape.size()) +
                          " dimensions but " + std::to_string(t.indices.size()) +
                          " indices were given");
    out[c->name] = t;
  }
  return out;
}

}  // namespace

std::optional<int64_t> const_value(const ir::Expr& e,
                                   const std::map<std::string, int64_t>& consts) {
  return ir::eval_int(e, consts);
}

ir::Expr folded(const ir::Expr& e, const std::map<std::string, int64_t>& consts) {
  if (auto v = const_value(e, consts)) return ir::int_imm(*v, e->type);
  std::map<std::string, ir::Expr> sub;
  for (const auto& [name, v] : consts) sub[name] = ir::int_imm(v);
  return ir::substitute(e, sub);
}

std::vector<isl::map> maps_of(const isl::union_map& u) {
  std::vector<isl::map> out;
  u.foreach_map([&](isl::map m) { out.push_back(m); });
  return out;
}
std::string range_name(const isl::map& m) {
  const char* n = isl_map_get_tuple_name(m.get(), isl_dim_out);
  return n ? n : "";
}
std::optional<isl::pw_multi_aff> pw_multi_aff_from_map(const isl::map& m) {
  // Schedules and a tile's loops back to its iterators say their function
  // plainly, and reading it off their constraints gives the loops and code
  // isl's own answer gives (for every example and test): isl computes an
  // affine hull for each floor, 1.6 ms of a GEMM candidate's schedule
  // functions and 5 ms of the bench conv's.
  if (std::optional<isl::pw_multi_aff> f = plain_function(m)) return f;
  isl_pw_multi_aff* raw = isl_pw_multi_aff_from_map(m.copy());
  if (raw == nullptr) {
    isl_ctx_reset_error(m.ctx().get());  // a question answered no, not an error to carry
    return std::nullopt;
  }
  return isl::manage(raw);
}
std::string domain_name(const isl::map& m) {
  const char* n = isl_map_get_tuple_name(m.get(), isl_dim_in);
  return n ? n : "";
}

std::string param_list(const ScheduledFunc::Impl& m, const std::vector<DataParam>& extra) {
  std::string s = "[";
  bool first = true;
  for (const auto& p : m.runtime_params) {
    s += (first ? "" : ", ") + isl_name(p);
    first = false;
  }
  for (const auto& p : extra) {
    s += (first ? "" : ", ") + p.name;
    first = false;
  }
  return s + "]";
}

int schedule_dims(const ScheduledFunc::Impl& m) {
  int n = 1;
  for (const auto& c : m.comps) n = std::max(n, 2 * c.loops() + 1);
  return n;
}

isl::map padded_schedule(const CompModel& c, int dims) {
  int have = 2 * c.loops() + 1;
  if (have == dims) return c.sched;
  isl_map* padded =
      isl_map_add_dims(c.sched.copy(), isl_dim_out, static_cast<unsigned>(dims - have));
  for (int k = have; k < dims; ++k) padded = isl_map_fix_si(padded, isl_dim_out, k, 0);
  return isl::manage(padded);
}

std::optional<isl::pw_multi_aff> schedule_function(const CompModel& c, int dims) {
  // The same isl object: a schedule command replaces c.sched by another map
  // (isl copies a map it shares before changing it), so an object that is
  // still c's schedule has the meaning it had.
  const auto& memo = c.schedule_function_memo;
  if (memo && memo->sched.get() == c.sched.get() && memo->dims == dims) return memo->fn;
  std::optional<isl::pw_multi_aff> fn = pw_multi_aff_from_map(padded_schedule(c, dims));
  c.schedule_function_memo = CompModel::ScheduleFunctionMemo{c.sched, dims, fn};
  return fn;
}

namespace {

void fill_model(ScheduledFunc::Impl* m, bool apply_commands, const Limits& limits);

}  // namespace

std::unique_ptr<ScheduledFunc::Impl> build_model(const ir::Func& f, bool apply_commands,
                                                 const Limits& limits) {
  auto m = std::make_unique<ScheduledFunc::Impl>();
  m->limits = limits;
  m->func = f;
  isl_ctx_set_max_operations(m->ctx.get().get(), limits.max_isl_operations);
  try {
    {
      TimedPart part("model");
      fill_model(m.get(), apply_commands, limits);
    }
    TimedPart part("dependences");
    compute_dependences(*m);
  } catch (const isl::exception& e) {
    isl_failed(*m, ErrorStage::Schedule, "build the model of " + f.name, e);
  }
  return m;
}

namespace {

// The static dims of the original schedule: a computation's place among the
// items of the func and of each algorithm loop around it, counted in textual
// order (computations in the same loop share the places above it).
class OriginalPositions {
 public:
  std::vector<int64_t> next(const std::vector<int>& loops) {
    size_t common = ir::shared_loops(loops, loops_);
    std::vector<int64_t> pos(loops.size() + 1, 0);
    for (size_t d = 0; d < common; ++d) pos[d] = pos_[d];
    pos[common] = pos_[common] + 1;
    loops_ = loops;
    pos_ = pos;
    return pos;
  }

 private:
  std::vector<int> loops_;        // of the computation before
  std::vector<int64_t> pos_{-1};  // its places
};

// Builds the model of m->func into m.
void fill_model(ScheduledFunc::Impl* m, bool apply_commands, const Limits& limits) {
  const ir::Func& F = m->func;
  for (const auto& p : F.params) {
    if (p.value)
      m->constants[p.name] = *p.value;
    else
      m->runtime_params.push_back(p.name);
  }
  for (const auto& b : F.bufs) m->buf_locs[b.name] = b.loc;
  isl::ctx ctx = m->ctx.get();

  // What the constraints promise about run-time params.
  {
    AffinePrinter ap(*m, {}, "", nullptr);
    std::string conds;
    for (const auto& c : F.constraints) {
      auto t = ap.cond(c.cond);
      if (!t)
        throw CompileError(ErrorStage::Schedule, c.where, "constraint is not affine in params");
      conds += (conds.empty() ? "" : " and ") + ("(" + *t + ")");
    }
    std::string text = param_list(*m) + " -> { : " + (conds.empty() ? "1 = 1" : conds) + " }";
    m->context = read_set(ctx, text);
    if (m->context.is_empty())
      throw CompileError(ErrorStage::Schedule, F.where,
                         "the constraints of " + F.name + " cannot all hold for the param values");
  }

  std::map<std::string, ir::StoreTarget> stored;
  if (apply_commands) stored = stored_values(F);
  ValueResolver resolve(F, stored, limits.max_expression_nodes);
  OriginalPositions positions;

  for (const auto& comp : F.comps) {
    CompModel c;
    c.name = comp.name;
    c.comp = &comp;
    c.iters = comp.iters;
    if (comp.store) {
      c.target = *comp.store;
    } else {
      auto st = stored.find(comp.name);
      if (st == stored.end()) continue;  // a value computation, inlined into its users
      c.target = st->second;
    }
    c.value = resolve.resolve(comp);
    std::vector<ir::Expr> idx;
    for (const auto& x : c.target.indices) idx.push_back(resolve.mutate(x));
    c.target.indices = idx;

    std::set<std::string> iter_set(comp.iters.begin(), comp.iters.end());
    // Domain: exact (with data params) and approximate (without them).
    std::string exact, approx;
    {
      AffinePrinter ap(*m, iter_set, comp.name, &c.data_params);
      for (const auto& cond : comp.domain) {
        size_t before = c.data_params.size();
        auto t = ap.cond(cond);
        if (!t)
          throw CompileError(ErrorStage::Schedule, comp.where,
                             "domain condition '" + ir::to_string(cond) + "' of " + comp.name +
                                 " is not affine in its iterators and params");
        exact += (exact.empty() ? "" : " and ") + ("(" + *t + ")");
        if (ir::reads_memory(cond) || c.data_params.size() != before)
          c.must_write = false;
        else
          approx += (approx.empty() ? "" : " and ") + ("(" + *t + ")");
      }
    }
    std::string tup = isl_tuple(comp.name, comp.iters);
    try {
      c.domain = read_set(ctx, param_list(*m, c.data_params) + " -> { " + tup + " : " +
                                   (exact.empty() ? "1 = 1" : exact) + " }");
      c.domain_approx = read_set(ctx, param_list(*m) + " -> { " + tup + " : " +
                                          (approx.empty() ? "1 = 1" : approx) + " }");
    } catch (const isl::exception& e) {
      if (isl_quota_exceeded(ctx)) throw;  // build_model reports the limit
      throw CompileError(ErrorStage::Schedule, comp.where,
                         "cannot build the domain of " + comp.name + ": " + e.what());
    }
    c.domain = c.domain.intersect_params(m->context);
    c.domain_approx = c.domain_approx.intersect_params(m->context);

    // Accesses, over the approximate domain. A non-affine index leaves its
    // dimension unconstrained: the access may touch any element along it.
    AffinePrinter ap(*m, iter_set, comp.name, nullptr);
    auto relation = [&](const std::string& buf, const std::vector<ir::Expr>& indices,
                        const std::string& where = "") {
      std::string out = isl_name(buf) + "[", conds = where;
      for (size_t k = 0; k < indices.size(); ++k) {
        std::string a = "a" + std::to_string(k);
        out += (k ? ", " : "") + a;
        if (auto t = ap.expr(indices[k])) conds += (conds.empty() ? "" : " and ") + a + " = " + *t;
      }
      out += "]";
      isl::map r = read_map(ctx, param_list(*m) + " -> { " + tup + " -> " + out + " : " +
                                     (conds.empty() ? "1 = 1" : conds) + " }");
      return isl::union_map(r.intersect_domain(c.domain_approx));
    };
    c.writes = relation(c.target.buf, c.target.indices);
    for (const auto& x : c.target.indices)
      if (!ap.expr(x)) c.must_write = false;
    std::vector<Site> sites;
    SiteCollector collect(sites);
    collect.visit(c.value);
    for (const auto& x : c.target.indices) collect.visit(x);
    for (const auto& dp : c.data_params) collect.visit(dp.value);
    c.reads = c.reads_run = isl::union_map::empty(ctx);
    for (const auto& site : sites) {
      isl::union_map all = relation(site.buf, site.indices);
      c.reads = c.reads.unite(all);
      // The conditions isl can read; the rest are dropped, which leaves a
      // superset of where the read runs.
      std::string where;
      for (const auto& p : site.path)
        if (auto t = ap.cond(p)) where += (where.empty() ? "" : " and ") + ("(" + *t + ")");
      c.reads_run =
          c.reads_run.unite(where.empty() ? all : relation(site.buf, site.indices, where));
    }

    // The original schedule: the textual order of the items at each level
    // of the algorithm loops (a static dim), each loop's iterator between
    // them, then c's own iterators in order.
    std::vector<int64_t> pos = positions.next(comp.loops);
    std::string sched = "{ " + tup + " -> [";
    for (size_t d = 0; d <= comp.iters.size(); ++d) {
      sched += std::to_string(d < pos.size() ? pos[d] : 0);
      if (d < comp.iters.size()) sched += ", " + isl_name(comp.iters[d]) + ", ";
    }
    sched += "] }";
    c.sched = read_map(ctx, sched);
    c.loop_names = comp.iters;
    c.tags.assign(comp.iters.size(), ir::LoopTag::None);
    m->comps.push_back(std::move(c));
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// ScheduledFunc

ScheduledFunc::ScheduledFunc(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ScheduledFunc::~ScheduledFunc() = default;
ScheduledFunc::ScheduledFunc(ScheduledFunc&&) noexcept = default;
ScheduledFunc& ScheduledFunc::operator=(ScheduledFunc&&) noexcept = default;

const ir::Func& ScheduledFunc::func() const { return impl_->func; }

std::string ScheduledFunc::describe_domains() const {
  std::ostringstream os;
  os << "func " << impl_->func.name << "\n";
  if (!impl_->runtime_params.empty()) os << "  context: " << to_str(impl_->context) << "\n";
  for (const auto& c : impl_->comps) {
    os << "\n" << c.name << "\n";
    os << "  domain: " << to_str(c.domain) << "\n";
    for (const auto& dp : c.data_params)
      os << "  data param " << dp.name << " = " << ir::to_string(dp.value)
         << " (read at run time)\n";
    os << "  writes: " << to_str(c.writes) << "\n";
    os << "  reads:  " << to_str(c.reads) << "\n";
    if (!c.reads_run.is_equal(c.reads))
      os << "  reads where they run: " << to_str(c.reads_run) << "\n";
    std::vector<ir::Expr> idx = c.target.indices;
    std::string target = c.target.buf + "[";
    for (size_t k = 0; k < idx.size(); ++k) target += (k ? ", " : "") + ir::to_string(idx[k]);
    os << "  " << target << "] = " << ir::to_string(c.value) << "\n";
  }
  return os.str();
}

std::string ScheduledFunc::describe_schedule() const {
  std::ostringstream os;
  os << "func " << impl_->func.name << "\n";
  for (const auto& c : impl_->comps) {
    os << "\n" << c.name << "\n";
    os << "  schedule: " << to_str(c.sched) << "\n";
    os << "  loops:";
    for (int k = 0; k < c.loops(); ++k) {
      os << " " << c.loop_names[k];
      if (c.tags[k] != ir::LoopTag::None) os << "(" << ir::loop_tag_name(c.tags[k]) << ")";
    }
    os << "\n";
  }
  os << "\ndependences\n";
  for (const auto& d : impl_->deps) {
    const char* kind = d.kind == Dependence::Kind::Flow   ? "flow"
                       : d.kind == Dependence::Kind::Anti ? "anti"
                                                          : "output";
    os << "  " << kind << " through " << d.buf << ": " << to_str(d.relation) << "\n";
  }
  if (!impl_->applied.empty()) {
    os << "\napplied\n";
    for (const auto& a : impl_->applied) os << "  " << a << "\n";
  }
  return os.str();
}

}  // namespace kiln::poly
