// Func, Buf, Comp: look-ups, name tables, --set overrides and the .kiln printer for a whole func.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "kiln/analysis.h"
#include "kiln/ir.h"

namespace kiln::ir {

namespace {
template <typename T>
const T* find_named(const std::vector<T>& items, const std::string& name) {
  for (const T& x : items) {
    if (x.name == name) return &x;
  }
  return nullptr;
}
}  // namespace

const Buf* Func::find_buf(const std::string& n) const { return find_named(bufs, n); }
const Comp* Func::find_comp(const std::string& n) const { return find_named(comps, n); }
size_t shared_loops(const std::vector<int>& a, const std::vector<int>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

std::vector<LevelItem> level_items(const std::vector<size_t>& comps, size_t depth,
                                   const std::function<const std::vector<int>&(size_t)>& loops_of) {
  std::vector<LevelItem> out;
  for (size_t k : comps) {
    const std::vector<int>& path = loops_of(k);
    int loop = path.size() > depth ? path[depth] : -1;
    if (loop < 0 || out.empty() || out.back().loop != loop) out.push_back({loop, {}});
    out.back().comps.push_back(k);
  }
  return out;
}

size_t Func::outer_conditions(const Comp& c) const {
  size_t n = 0;
  for (int l : c.loops) n += loops.at(static_cast<size_t>(l)).domain.size();
  return n;
}
const Param* Func::find_param(const std::string& n) const { return find_named(params, n); }
const Knob* Func::find_knob(const std::string& n) const { return find_named(knobs, n); }
std::vector<const Buf*> Func::bufs_of_kind(BufKind kind) const {
  std::vector<const Buf*> out;
  for (const Buf& b : bufs) {
    if (b.kind == kind) out.push_back(&b);
  }
  return out;
}
const Func* Module::find(const std::string& name) const { return find_named(funcs, name); }

const char* buf_kind_name(BufKind k) {
  switch (k) {
    case BufKind::Input:
      return "input";
    case BufKind::Output:
      return "output";
    case BufKind::Temp:
      return "temp";
  }
  return "?";
}

const char* mem_loc_name(MemLoc l) {
  switch (l) {
    case MemLoc::Heap:
      return "heap";
    case MemLoc::Stack:
      return "stack";
    case MemLoc::GpuGlobal:
      return "gpu_global";
    case MemLoc::GpuShared:
      return "gpu_shared";
    case MemLoc::GpuLocal:
      return "gpu_local";
    case MemLoc::GpuConstant:
      return "gpu_constant";
  }
  return "?";
}

std::optional<MemLoc> mem_loc_from_name(const std::string& name) {
  for (MemLoc l : {MemLoc::Heap, MemLoc::Stack, MemLoc::GpuGlobal, MemLoc::GpuShared,
                   MemLoc::GpuLocal, MemLoc::GpuConstant}) {
    if (name == mem_loc_name(l)) return l;
  }
  return std::nullopt;
}

namespace {
constexpr ScheduleOp kScheduleOps[] = {
    ScheduleOp::Split,   ScheduleOp::Fuse,   ScheduleOp::Reorder,       ScheduleOp::Tile,
    ScheduleOp::Skew,    ScheduleOp::Shift,  ScheduleOp::After,         ScheduleOp::Separate,
    ScheduleOp::Inline,  ScheduleOp::Tag,    ScheduleOp::ApplySch,      ScheduleOp::Store,
    ScheduleOp::StoreAt, ScheduleOp::SetLoc, ScheduleOp::CacheIdentity, ScheduleOp::Cache,
    ScheduleOp::AllocAt, ScheduleOp::Atomic, ScheduleOp::Privatize,
};
}  // namespace

const char* schedule_op_name(ScheduleOp op) {
  switch (op) {
    case ScheduleOp::Split:
      return "split";
    case ScheduleOp::Fuse:
      return "fuse";
    case ScheduleOp::Reorder:
      return "reorder";
    case ScheduleOp::Tile:
      return "tile";
    case ScheduleOp::Skew:
      return "skew";
    case ScheduleOp::Shift:
      return "shift";
    case ScheduleOp::After:
      return "after";
    case ScheduleOp::Separate:
      return "separate";
    case ScheduleOp::Inline:
      return "inline";
    case ScheduleOp::Tag:
      return "tag";
    case ScheduleOp::ApplySch:
      return "apply_sch";
    case ScheduleOp::Store:
      return "store";
    case ScheduleOp::StoreAt:
      return "store_at";
    case ScheduleOp::SetLoc:
      return "set_loc";
    case ScheduleOp::CacheIdentity:
      return "cache_identity";
    case ScheduleOp::Cache:
      return "cache";
    case ScheduleOp::AllocAt:
      return "alloc_at";
    case ScheduleOp::Atomic:
      return "atomic";
    case ScheduleOp::Privatize:
      return "privatize";
  }
  return "?";
}

std::optional<ScheduleOp> schedule_op_from_name(std::string_view name) {
  for (ScheduleOp op : kScheduleOps) {
    if (name == schedule_op_name(op)) return op;
  }
  return std::nullopt;
}

std::string schedule_op_list() {
  std::string out;
  for (ScheduleOp op : kScheduleOps)
    out += (out.empty() ? "" : ", ") + std::string(schedule_op_name(op));
  return out;
}

bool is_memory_schedule(ScheduleOp op) {
  switch (op) {
    case ScheduleOp::Store:
    case ScheduleOp::StoreAt:
    case ScheduleOp::SetLoc:
    case ScheduleOp::CacheIdentity:
    case ScheduleOp::Cache:
    case ScheduleOp::AllocAt:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------
// --set NAME=VALUE

std::vector<std::vector<std::string>> all_orders_of(const std::vector<std::string>& loops) {
  std::vector<size_t> at(loops.size());
  for (size_t i = 0; i < at.size(); ++i) at[i] = i;
  std::vector<std::vector<std::string>> out;
  do {
    std::vector<std::string> order;
    for (size_t i : at) order.push_back(loops[i]);
    out.push_back(std::move(order));
  } while (std::next_permutation(at.begin(), at.end()));
  return out;
}

const KnobSplit* split_of(const Func& f, const std::string& knob) {
  for (const KnobSplit& s : f.knob_splits)
    if (std::find(s.parts.begin(), s.parts.end(), knob) != s.parts.end()) return &s;
  return nullptr;
}

void resolve_knob_splits(Func& f) {
  for (KnobSplit& s : f.knob_splits) {
    if (!s.extent_param.empty()) {
      const Param* p = f.find_param(s.extent_param);
      if (!p || !p->value)
        throw CompileError(ErrorStage::Validate, s.where,
                           fmt::format("the extent {} of knob split ({}) must have a value when "
                                       "compiling (a param with a value, or --set {}=N)",
                                       s.extent_param, fmt::join(s.parts, ", "), s.extent_param));
      s.extent = *p->value;
    }
    if (s.extent <= 0)
      throw CompileError(ErrorStage::Validate, s.where,
                         fmt::format("knob split ({}) splits the extent {}; it must be positive",
                                     fmt::join(s.parts, ", "), s.extent));
    int64_t product = 1;
    for (size_t i = 1; i < s.parts.size(); ++i) {
      Knob* k = nullptr;
      for (Knob& x : f.knobs)
        if (x.name == s.parts[i]) k = &x;
      int64_t v = k->value;
      std::string rule;
      if (v < 1) {
        rule = "a part is at least 1";
      } else if (s.max_factor > 0 && v > s.max_factor) {
        rule = fmt::format("a part is at most {} (max)", s.max_factor);
      } else if (s.pow2 && (v & (v - 1)) != 0) {
        rule = "a part is a power of two (pow2)";
      } else if (s.pow2 && product * v > s.extent) {
        rule = fmt::format("the inner parts' product is at most the extent {}", s.extent);
      } else if (!s.pow2 && (s.extent / product) % v != 0) {
        rule =
            fmt::format("a part divides what the parts outside it leave ({})", s.extent / product);
      }
      if (!rule.empty())
        throw CompileError(ErrorStage::Validate, k->where,
                           fmt::format("{}={} does not split {} ({}): {}", k->name, v, s.extent,
                                       fmt::join(s.parts, ", "), rule));
      product *= v;
    }
    for (Knob& x : f.knobs)
      if (x.name == s.parts.front()) x.value = (s.extent + product - 1) / product;
  }
}

bool is_target_size(const std::string& name) {
  return std::any_of(std::begin(kTargetSizes), std::end(kTargetSizes),
                     [&](const char* s) { return name == s; });
}

namespace {

// Whether `cond` holds with `env`; nullopt when it reads a name env lacks.
std::optional<bool> holds(const Expr& cond, const std::map<std::string, int64_t>& env) {
  std::optional<int64_t> v = eval_int(cond, env);
  if (!v) return std::nullopt;
  return *v != 0;
}

}  // namespace

Func apply_target_defaults(const Func& f, const TargetFacts& target) {
  Func out = f;
  for (Knob& k : out.knobs) {
    for (const Knob::TargetDefault& d : k.target_defaults)
      if (target.has_feature(d.feature)) k.value = d.value;
    k.target_defaults.clear();
  }
  // Knobs whose value is final: those without a fit, then each fitted one in its turn. A knob
  // being fitted answers to the knob constraints among it and these, not to knobs whose fit is
  // still to come (MR fitted before MB answers to MB % MR == 0 when MB's turn comes).
  std::set<std::string> settled;
  for (const Knob& k : out.knobs)
    if (!k.fit) settled.insert(k.name);
  for (Knob& k : out.knobs) {
    if (!k.fit) continue;
    Expr fit = k.fit;
    k.fit = nullptr;
    std::map<std::string, int64_t> env = target.sizes;
    for (const Param& p : out.params)
      if (p.value) env[p.name] = *p.value;
    for (const Knob& other : out.knobs) env[other.name] = other.value;
    std::vector<const Constraint*> binding;
    for (const Constraint& c : out.knob_constraints) {
      bool ours = true;
      for (const std::string& n : free_vars(c.cond))
        ours = ours && (n == k.name || settled.count(n) || !out.find_knob(n));
      if (ours) binding.push_back(&c);
    }
    auto allowed = [&](int64_t c) {
      env[k.name] = c;
      for (const Constraint* kc : binding)
        if (holds(kc->cond, env) == false) return false;
      return true;
    };
    std::vector<int64_t> order = k.candidates;
    std::sort(order.begin(), order.end(), std::greater<>());
    bool known = true;
    for (const std::string& n : free_vars(fit)) known = known && env.count(n) != 0;
    std::optional<int64_t> chosen;
    if (known) {
      // The largest candidate that fits, else the smallest allowed.
      for (int64_t c : order) {
        if (allowed(c) && holds(fit, env) == true) {
          chosen = c;
          break;
        }
      }
      for (auto c = order.rbegin(); !chosen && c != order.rend(); ++c)
        if (allowed(*c)) chosen = *c;
    } else if (int64_t value = k.value; !allowed(value)) {
      // A size the target does not tell: the default, or the allowed candidate nearest it.
      for (int64_t c : order) {
        if (allowed(c) && (!chosen || std::abs(c - value) <= std::abs(*chosen - value))) chosen = c;
      }
    }
    if (chosen) k.value = *chosen;
    settled.insert(k.name);
  }
  return out;
}

Func apply_overrides(const Func& f, const Overrides& overrides) {
  Func out = f;
  for (const auto& entry : overrides) {
    // Not a structured binding: lambdas below capture it, which older clang refuses.
    const std::string& name = entry.first;
    int64_t value = entry.second;
    auto param = std::find_if(out.params.begin(), out.params.end(),
                              [&](const Param& p) { return p.name == name; });
    if (param != out.params.end()) {
      param->value = value;
      continue;
    }
    auto knob = std::find_if(out.knobs.begin(), out.knobs.end(),
                             [&](const Knob& k) { return k.name == name; });
    if (knob != out.knobs.end()) {
      if (!knob->orders.empty() &&
          (value < 0 || value >= static_cast<int64_t>(knob->orders.size()))) {
        throw CompileError(
            ErrorStage::Validate, knob->where,
            fmt::format("value {} for order knob {} is not the number of one of "
                        "its {} orders (0 is ({}))",
                        value, name, knob->orders.size(), fmt::join(knob->orders.front(), ", ")));
      }
      if (!knob->tags.empty() && (value < 0 || value >= static_cast<int64_t>(knob->tags.size()))) {
        std::vector<std::string> choices;
        for (size_t i = 0; i < knob->tags.size(); ++i)
          choices.push_back(fmt::format("{} {}", i, knob->tags[i]));
        throw CompileError(ErrorStage::Validate, knob->where,
                           fmt::format("value {} for tag knob {} is not the number of one of its "
                                       "tags ({})",
                                       value, name, fmt::join(choices, ", ")));
      }
      if (!knob->candidates.empty() && std::find(knob->candidates.begin(), knob->candidates.end(),
                                                 value) == knob->candidates.end()) {
        throw CompileError(ErrorStage::Validate, knob->where,
                           fmt::format("value {} for knob {} is not one of its candidates [{}]",
                                       value, name, fmt::join(knob->candidates, ", ")));
      }
      knob->value = value;
      knob->target_defaults.clear();  // a value set is final, whatever the target
      knob->fit = nullptr;
      continue;
    }
    std::vector<std::string> known;
    for (const Param& p : f.params) known.push_back(p.name);
    for (const Knob& k : f.knobs) known.push_back(k.name);
    throw CompileError(
        ErrorStage::Validate, f.where,
        fmt::format(
            "--set {}: func {} has no param or knob named {} (known: {})", name, f.name, name,
            known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
  }
  resolve_knob_splits(out);
  for (const KnobSplit& s : out.knob_splits) {
    auto given = overrides.find(s.parts.front());
    const Knob* outer = out.find_knob(s.parts.front());
    if (given != overrides.end() && given->second != outer->value)
      throw CompileError(
          ErrorStage::Validate, outer->where,
          fmt::format("{} is the outer part of knob split ({}) of {}: it is what "
                      "the inner parts leave ({} here), not set",
                      outer->name, fmt::join(s.parts, ", "), s.extent, outer->value));
  }
  check_knob_constraints(out);
  check_buffer_sizes(out);
  return out;
}

void check_buffer_sizes(const Func& f) {
  std::map<std::string, int64_t> env;
  for (const Param& p : f.params)
    if (p.value) env[p.name] = *p.value;
  for (const Buf& b : f.bufs) {
    std::vector<int64_t> extents;
    for (const Expr& e : b.shape) {
      std::optional<int64_t> v = eval_int(e, env);
      if (!v) break;  // known at run time: the run checks it
      extents.push_back(*v);
    }
    if (extents.size() != b.shape.size()) continue;
    int64_t bytes = static_cast<int64_t>(dtype_bytes(b.dtype));
    bool fits = true;
    for (int64_t e : extents) fits = fits && e >= 0 && !__builtin_mul_overflow(bytes, e, &bytes);
    if (fits && bytes <= kMaxBufferBytes) continue;
    if (std::any_of(extents.begin(), extents.end(), [](int64_t e) { return e < 0; })) continue;
    std::vector<std::string> values;
    for (const Param& p : f.params)
      if (p.value) values.push_back(fmt::format("{} = {}", p.name, *p.value));
    throw CompileError(
        ErrorStage::Validate, b.where,
        fmt::format("buffer {} would be {}[{}] with {}: {} bytes, where a buffer spans at most "
                    "2^62, what 64-bit index arithmetic reaches (docs/limits.md)",
                    b.name, dtype_name(b.dtype), fmt::join(extents, ", "), fmt::join(values, ", "),
                    fits ? std::to_string(bytes) : std::string("more than 2^63")));
  }
}

void check_knob_constraints(const Func& f) {
  if (f.knob_constraints.empty()) return;
  std::map<std::string, int64_t> env;
  for (const Param& p : f.params)
    if (p.value) env[p.name] = *p.value;
  for (const Knob& k : f.knobs) env[k.name] = k.value;
  for (const Constraint& c : f.knob_constraints) {
    std::optional<int64_t> holds = eval_int(c.cond, env);
    std::vector<std::string> values;
    for (const std::string& n : free_vars(c.cond)) {
      auto it = env.find(n);
      values.push_back(it == env.end() ? n + " (a run-time param)"
                                       : fmt::format("{}={}", n, it->second));
    }
    if (!holds)
      throw CompileError(ErrorStage::Validate, c.where,
                         fmt::format("the knob constraint {} cannot be decided when compiling "
                                     "({}): it may read only knobs and params with values",
                                     to_string(c.cond), fmt::join(values, ", ")));
    if (*holds == 0)
      throw CompileError(ErrorStage::Validate, c.where,
                         fmt::format("{} break the knob constraint {}", fmt::join(values, ", "),
                                     to_string(c.cond)));
  }
}

// ---------------------------------------------------------------------------
// Printing a func in .kiln syntax

namespace {

std::string join_exprs(const std::vector<Expr>& es) {
  std::string s;
  for (size_t i = 0; i < es.size(); ++i) {
    if (i) s += ", ";
    s += to_string(es[i]);
  }
  return s;
}

std::string quote(const std::string& text) {
  std::string s = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s + "\"";
}

std::string schedule_arg(const ScheduleArg& a) {
  switch (a.kind) {
    case ScheduleArg::Kind::Int:
      return std::to_string(a.number);
    case ScheduleArg::Kind::Text:
      return quote(a.text);
    case ScheduleArg::Kind::Name: {
      if (!a.text.empty()) return a.text;
      std::string s = "[";
      for (size_t i = 0; i < a.list.size(); ++i) {
        if (i) s += ", ";
        s += schedule_arg(a.list[i]);
      }
      return s + "]";
    }
  }
  return "?";
}

}  // namespace

std::string value_spec_text(const ValueSpec& v) {
  std::string s;
  if (v.lo && v.hi) {
    s = std::string("in ") + (v.lo_inclusive ? "[" : "(") + to_string(v.lo) + ", " +
        to_string(v.hi) + (v.hi_inclusive ? "]" : ")");
  }
  if (v.sorted) s += std::string(s.empty() ? "" : " ") + "sorted";
  return s;
}

namespace {

void print_buf(std::ostringstream& os, const Buf& b) {
  os << "  " << buf_kind_name(b.kind) << " " << b.name << " : " << dtype_name(b.dtype) << "["
     << join_exprs(b.shape) << "]";
  std::string spec = value_spec_text(b.values);
  os << (spec.empty() ? "" : " ") << spec << ";\n";
}

// c inside the algorithm loops around it: its own iterators and conditions.
void print_comp(std::ostringstream& os, const Func& f, const Comp& c) {
  std::string indent(2 * (c.loops.size() + 1), ' ');
  size_t outer = f.outer_conditions(c);
  os << indent << "compute " << c.name << "(";
  for (size_t i = c.loops.size(); i < c.iters.size(); ++i)
    os << (i > c.loops.size() ? ", " : "") << c.iters[i];
  os << ")";
  std::vector<Expr> own(c.domain.begin() + static_cast<std::ptrdiff_t>(outer), c.domain.end());
  if (!own.empty()) os << " in " << join_exprs(own);
  if (c.store) {
    os << ": " << c.store->buf << "[" << join_exprs(c.store->indices)
       << "] = " << to_string(c.value) << ";\n";
  } else {
    os << " = " << to_string(c.value) << ";\n";
  }
}

}  // namespace

std::vector<const Buf*> Func::inputs_read_as_data() const {
  // Every load inside a domain condition, or inside an index.
  struct Collector : IRVisitor {
    std::set<std::string> names;
    int in_index = 0;
    void visit_load(const Load& n) override {
      if (in_index) names.insert(n.buf);
      ++in_index;
      IRVisitor::visit_load(n);
      --in_index;
    }
    void visit_access(const Access& n) override {
      ++in_index;
      IRVisitor::visit_access(n);
      --in_index;
    }
  } c;
  for (const Comp& comp : comps) {
    ++c.in_index;
    for (const Expr& d : comp.domain) c.visit(d);
    if (comp.store)
      for (const Expr& x : comp.store->indices) c.visit(x);
    --c.in_index;
    if (comp.value) c.visit(comp.value);
  }
  std::vector<const Buf*> out;
  for (const Buf& b : bufs)
    if (b.kind == BufKind::Input && c.names.count(b.name)) out.push_back(&b);
  return out;
}

std::string to_string(const Func& f) {
  std::ostringstream os;
  os << "func " << f.name << " {\n";
  if (!f.params.empty()) {
    os << "  param ";
    for (size_t i = 0; i < f.params.size(); ++i) {
      const Param& p = f.params[i];
      os << (i ? ", " : "") << p.name;
      if (p.value) os << " = " << *p.value;
    }
    os << ";\n";
  }
  if (!f.constraints.empty()) {
    os << "  constraint ";
    for (size_t i = 0; i < f.constraints.size(); ++i) {
      os << (i ? ", " : "") << to_string(f.constraints[i].cond);
    }
    os << ";\n";
  }
  if (f.fast_math) os << "  option fast_math;\n";
  if (!f.bufs.empty()) os << "\n";
  for (const Buf& b : f.bufs) print_buf(os, b);
  if (!f.comps.empty()) os << "\n";
  // The algorithm loops open around the computation printed last.
  std::vector<int> open;
  auto close_to = [&](size_t depth) {
    while (open.size() > depth) {
      open.pop_back();
      os << std::string(2 * (open.size() + 1), ' ') << "}\n";
    }
  };
  for (const Comp& c : f.comps) {
    size_t common = shared_loops(open, c.loops);
    close_to(common);
    for (size_t d = common; d < c.loops.size(); ++d) {
      const AlgorithmLoop& l = f.loops.at(static_cast<size_t>(c.loops[d]));
      os << std::string(2 * (d + 1), ' ') << "for " << l.iter << " in " << join_exprs(l.domain)
         << " {\n";
      open.push_back(c.loops[d]);
    }
    print_comp(os, f, c);
  }
  close_to(0);
  if (!f.knobs.empty()) os << "\n";
  os << schedule_to_string(f) << "}\n";
  return os.str();
}

std::string schedule_to_string(const Func& f) {
  std::ostringstream os;
  for (const KnobSplit& s : f.knob_splits) {
    os << "  knob split (";
    for (size_t i = 0; i < s.parts.size(); ++i) {
      os << (i ? ", " : "") << s.parts[i];
      if (i > 0) os << " = " << f.find_knob(s.parts[i])->value;
    }
    os << ") of " << (s.extent_param.empty() ? std::to_string(s.extent) : s.extent_param);
    if (s.max_factor > 0) os << " max " << s.max_factor;
    if (s.pow2) os << " pow2";
    os << ";\n";
  }
  for (const Knob& k : f.knobs) {
    if (split_of(f, k.name)) continue;
    if (!k.orders.empty()) {
      auto group = [](const std::vector<std::string>& loops) {
        return fmt::format("({})", fmt::join(loops, ", "));
      };
      os << "  knob order " << k.name << " of " << group(k.order_loops);
      if (!k.all_orders) {
        os << " in [";
        for (size_t i = 0; i < k.orders.size(); ++i) os << (i ? ", " : "") << group(k.orders[i]);
        os << "]";
      }
      if (k.value != 0) os << " = " << group(k.orders.at(static_cast<size_t>(k.value)));
      os << ";\n";
      continue;
    }
    if (const std::string* t = k.tag()) {
      os << "  knob " << k.name << " = " << *t << " in ["
         << fmt::format("{}", fmt::join(k.tags, ", ")) << "];\n";
      continue;
    }
    os << "  knob " << k.name << " = " << k.value;
    if (!k.candidates.empty())
      os << " in [" << fmt::format("{}", fmt::join(k.candidates, ", ")) << "]";
    for (size_t i = 0; i < k.target_defaults.size(); ++i)
      os << (i ? ", " : " for ") << k.target_defaults[i].feature << " = "
         << k.target_defaults[i].value;
    if (k.fit) os << " fit " << to_string(k.fit);
    os << ";\n";
  }
  if (!f.knob_constraints.empty()) {
    os << "  constraint ";
    for (size_t i = 0; i < f.knob_constraints.size(); ++i)
      os << (i ? ", " : "") << to_string(f.knob_constraints[i].cond);
    os << ";\n";
  }
  if (!f.schedule.empty()) {
    os << "\n  schedule {\n";
    for (const ScheduleCommand& c : f.schedule) {
      os << "    " << c.target << "." << c.op << "(";
      for (size_t i = 0; i < c.args.size(); ++i) os << (i ? ", " : "") << schedule_arg(c.args[i]);
      os << ");\n";
    }
    os << "  }\n";
  }
  return os.str();
}

}  // namespace kiln::ir
