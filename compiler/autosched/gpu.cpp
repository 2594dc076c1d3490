// GPU sketches (kiln/autosched.h): Ansor's GPU structure for a func without a schedule. A
// computation's two innermost data-parallel loops are each cut three ways -- blocks, the
// threads of a block, and each thread's register tile -- its reduction stepped through (the
// step's inputs staged in the block's shared memory, which its threads fill together), the
// loops outside the two over blocks as well. Or, split: the innermost data-parallel loop over
// blocks and threads, each thread reducing alone. Every size a knob, every size list within
// what one block holds on every CUDA GPU, so that no point the tuner draws is refused for
// threads, registers or shared memory.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>

#include "kiln/analysis.h"
#include "kiln/range.h"
#include "parts.h"

namespace kiln::autosched::detail {
namespace {

// Threads along a tile's rows and along its columns (at most 32 x 32 = 1024, a block's most),
// each thread's register tile along each (at most 8 x 8 sums), and the reduction's step.
const std::vector<int64_t> kThreadRows = {2, 4, 8, 16, 32};
const std::vector<int64_t> kThreadColumns = {8, 16, 32};
const std::vector<int64_t> kRegisterSizes = {1, 2, 4, 8};
const std::vector<int64_t> kStepSizes = {4, 8, 16, 32};
constexpr int64_t kThreadRowsDefault = 8, kThreadColumnsDefault = 16, kRegisterDefault = 4,
                  kStepDefault = 8;
// A block's threads along one loop (the split sketch).
const std::vector<int64_t> kBlockThreads = {32, 64, 128, 256, 512, 1024};
constexpr int64_t kBlockThreadsDefault = 256;
// The static shared memory one block may declare on every CUDA GPU, and the alignment of each
// staged input's array in it.
constexpr int64_t kSharedBytes = 48 * 1024;
constexpr int64_t kSharedAlign = 16;
// The sums of a block's register tiles, at most: 64 a thread at 256 threads, 16 at 1024, so
// that a block's sums and operands stay within its 65536 registers, spilling none.
constexpr int64_t kBlockSums = 16384;
// The most blocks along a grid's y and z (x holds 2^31 - 1).
constexpr int64_t kGridYZ = 65535;

// A loop over blocks: its name, the most blocks it may have (0: not known), and, when knobs
// set how many it has, that count as an expression of them.
struct BlockLoop {
  std::string loop;
  int64_t most = 0;
  std::string count{};
};

// The grid axes of `loops`, given in the order x, y, z they take by default: where one but the
// first may have more blocks than y and z hold, the one that may have the most takes x, the
// others keep their order; a y or z loop whose knobs may give it too many gets a knob
// constraint. False when a y or z loop has too many whatever the knobs (the cut does not fit).
bool tag_blocks(std::vector<BlockLoop> loops, Part& p,
                const std::function<void(Part&, const std::string&)>& add_both) {
  bool over = false;
  for (size_t k = 1; k < loops.size(); ++k) over = over || loops[k].most > kGridYZ;
  if (over) {
    auto most = std::max_element(loops.begin(), loops.end(),
                                 [](const auto& a, const auto& b) { return a.most < b.most; });
    std::rotate(loops.begin(), most, most + 1);
  }
  static const char* const kAxes[] = {"gpu_block_x", "gpu_block_y", "gpu_block_z"};
  for (size_t k = 0; k < loops.size(); ++k) {
    if (loops[k].loop.empty()) continue;
    if (k > 0 && loops[k].most > kGridYZ) {
      if (loops[k].count.empty()) return false;
      p.knobs.push_back(fmt::format("constraint {} <= {};", loops[k].count, kGridYZ));
    }
    add_both(p, fmt::format("tag({}, {});", loops[k].loop, kAxes[k]));
  }
  return true;
}

// The input loads of c's value: its own, and those of the value computations it reads (with
// their iterators replaced by the indices c reads them at); none when one of those reads
// another value computation (its loads are not followed further).
// Each input load: the buffer, and the indices it is read at.
using Loads = std::vector<std::pair<std::string, std::vector<ir::Expr>>>;

std::optional<Loads> input_loads(const ir::Func& f, const ir::Comp& c) {
  Loads out;
  auto add = [&](const ir::Load& l, const std::map<std::string, ir::Expr>& bind) {
    const ir::Buf* buf = f.find_buf(l.buf);
    if (!buf || buf->kind != ir::BufKind::Input) return;
    std::vector<ir::Expr> at;
    for (const ir::Expr& e : l.indices) at.push_back(bind.empty() ? e : ir::substitute(e, bind));
    out.emplace_back(l.buf, std::move(at));
  };
  Reads reads(c.value);
  for (const ir::Load* l : reads.loads) add(*l, {});
  for (const ir::Access* a : reads.accesses) {
    const ir::Comp* v = f.find_comp(a->comp);
    if (!v || v->store || !v->value || v->iters.size() != a->indices.size()) continue;
    Reads reads_of_v(v->value);
    if (!reads_of_v.comps.empty()) return std::nullopt;  // a value computation read in one
    std::map<std::string, ir::Expr> bind;
    for (size_t k = 0; k < v->iters.size(); ++k) bind[v->iters[k]] = a->indices[k];
    for (const ir::Load* l : reads_of_v.loads) add(*l, bind);
  }
  return out;
}

// How many elements of each input of c (its `loads`, input_loads's) one step of one block reads,
// as an expression in the knobs: `spans` gives, for each iterator of c that varies within the step,
// the expression of how many values it takes there (any other takes one). Each index must be a sum
// of c's iterators times constants (params at their values), the same sum in every read of the
// input but for a constant; an input read otherwise is left out.
std::map<std::string, std::string> footprints(const ir::Func& f, const ir::Comp& c,
                                              const std::optional<Loads>& loads,
                                              const std::map<std::string, std::string>& spans) {
  std::map<std::string, ir::Expr> values;
  for (const ir::Param& p : f.params)
    if (p.value) values[p.name] = ir::int_imm(*p.value);
  struct Dim {
    std::map<std::string, int64_t> coeffs;  // iterator -> coefficient
    int64_t lo = 0, hi = 0;                 // the constants read at
  };
  std::map<std::string, std::vector<Dim>> dims;
  std::set<std::string> unknown;
  if (!loads) return {};
  for (const auto& [name, at] : *loads) {
    std::vector<Dim> these;
    for (const ir::Expr& index : at) {
      ir::LinearForm l = ir::linearize(ir::substitute(index, values), true);
      Dim d;
      d.lo = d.hi = l.constant;
      bool ok = l.ok;
      for (const ir::LinearTerm& t : l.terms) {
        const ir::Var* v = ir::as<ir::Var>(t.atom);
        if (!v || std::find(c.iters.begin(), c.iters.end(), v->name) == c.iters.end()) {
          ok = false;
          break;
        }
        d.coeffs[v->name] += t.coeff;
      }
      if (!ok) unknown.insert(name);
      these.push_back(std::move(d));
    }
    auto [it, first] = dims.emplace(name, these);
    if (first) continue;
    std::vector<Dim>& seen = it->second;
    if (seen.size() != these.size()) unknown.insert(name);
    for (size_t k = 0; k < seen.size() && k < these.size(); ++k) {
      if (seen[k].coeffs != these[k].coeffs) unknown.insert(name);
      seen[k].lo = std::min(seen[k].lo, these[k].lo);
      seen[k].hi = std::max(seen[k].hi, these[k].hi);
    }
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, ds] : dims) {
    if (unknown.count(name)) continue;
    std::vector<std::string> factors;
    for (const Dim& d : ds) {
      // the dimension's extent: the reads' spread, plus |coefficient| x (span - 1) for each
      // iterator that varies in the step
      std::vector<std::pair<int64_t, std::string>> terms;
      int64_t width = d.hi - d.lo + 1;
      for (const auto& [iter, coeff] : d.coeffs) {
        auto span = spans.find(iter);
        if (coeff == 0 || span == spans.end()) continue;
        if (std::all_of(span->second.begin(), span->second.end(), ::isdigit))
          width += std::abs(coeff) * (std::stoll(span->second) - 1);  // a constant span
        else
          terms.emplace_back(std::abs(coeff), span->second);
      }
      if (terms.size() == 1 && terms[0].first == 1) {
        factors.push_back(width == 1 ? terms[0].second
                                     : fmt::format("({} + {})", terms[0].second, width - 1));
      } else if (!terms.empty()) {
        std::string sum = std::to_string(width);
        for (const auto& [coeff, span] : terms)
          sum += coeff == 1 ? fmt::format(" + ({} - 1)", span)
                            : fmt::format(" + {} * ({} - 1)", coeff, span);
        factors.push_back("(" + sum + ")");
      } else if (width > 1) {
        factors.push_back(std::to_string(width));
      }
    }
    std::string bytes = std::to_string(ir::dtype_bytes(f.find_buf(name)->dtype));
    out[name] = factors.empty() ? bytes : fmt::format("{} * {}", fmt::join(factors, " * "), bytes);
  }
  return out;
}

// What computation c (with its initialization `init`, for a reduction) is given in a GPU sketch:
// the whole of it (staged inputs and unrolled register tiles), then less, the first variant
// legal beside what `before` holds; none for a computation with no data-parallel loop.
Part gpu_part_of(const ir::Func& f, const ir::Comp& c, const ir::Comp* init, bool tiled,
                 const Part& before, const Extents& extents, const Limits& limits) {
  CompLoops loops(c, init);
  // An update whose store names some of its loops, but not only the leading ones (spmm's
  // Y[i, j] += val[k] * B[idx[k], j] over (i, k, j)): those loops first, over blocks and
  // threads, the others reduced inside them.
  Part first;
  if (!init && c.store && loops.red.empty() && !scatters(c)) {
    std::set<std::string> named;
    for (const ir::Expr& e : c.store->indices) named.merge(ir::free_vars(e));
    std::vector<std::string> stored, rest;
    for (const std::string& it : c.iters) (named.count(it) ? stored : rest).push_back(it);
    if (!stored.empty() && !rest.empty()) {
      first.commands.push_back(fmt::format("{}.reorder({}, {});", c.name, fmt::join(stored, ", "),
                                           fmt::join(rest, ", ")));
      loops.par = stored;
      loops.red = rest;
    }
  }
  const std::vector<std::string>&par = loops.par, &red = loops.red;
  if (par.empty()) return {};
  auto extent = [&](const std::string& it) { return extent_of(extents, c.name, it); };
  // The loops cut over blocks and threads are those with more than one iteration (a softmax over
  // the last axis, [A, N, 1], has a third of one); the others go outside them with the rest.
  std::vector<std::string> wide;
  for (const std::string& it : par)
    if (extent(it) != 1) wide.push_back(it);
  auto others = [&](std::initializer_list<std::string> cut) {
    std::vector<std::string> out;
    for (const std::string& it : par)
      if (extent(it) == 1 && std::find(cut.begin(), cut.end(), it) == cut.end()) out.push_back(it);
    for (const std::string& it : par)
      if (extent(it) != 1 && std::find(cut.begin(), cut.end(), it) == cut.end()) out.push_back(it);
    return out;
  };
  std::set<std::string>& taken = loops.taken;
  auto add_both = [&](Part& p, const std::string& command) {
    for (const std::string& cmd : loops.both(command)) p.commands.push_back(cmd);
  };
  bool scatter = scatters(c);
  // The data-parallel loops outside the cut ones, fused into one loop over blocks: its name
  // ("" for none) and the most blocks it has (0: not known).
  auto outer_blocks = [&](Part& p, const std::vector<std::string>& outside) {
    if (outside.empty()) return BlockLoop{};
    std::string so_far = outside[0];
    int64_t blocks = extent(outside[0]);
    for (size_t i = 1; i < outside.size(); ++i) {
      std::string name = fresh(so_far + "_" + outside[i], taken);
      add_both(p, fmt::format("fuse({}, {}, {});", so_far, outside[i], name));
      so_far = name;
      if (__builtin_mul_overflow(blocks, extent(outside[i]), &blocks)) blocks = INT64_MAX;
    }
    return BlockLoop{so_far, blocks};
  };
  // How many blocks a loop of `it` cut by `per_block` (an expression of knobs, at least
  // `least`) has: at most, and as an expression.
  auto cut_blocks = [&](const std::string& loop, const std::string& it,
                        const std::string& per_block, int64_t least) {
    int64_t e = extent(it);
    if (e <= 0) return BlockLoop{loop};
    return BlockLoop{loop, (e + least - 1) / least,
                     fmt::format("({} + {} - 1) / ({})", e, per_block, per_block)};
  };
  std::vector<Part> variants;  // the most first
  if (tiled && wide.size() >= 2 && !scatter) {
    const std::string& a = wide[wide.size() - 2];
    const std::string& b = wide.back();
    std::vector<std::string> outside = others({a, b});
    std::string ta = "thread_" + c.name + "_" + a, tb = "thread_" + c.name + "_" + b;
    std::string ra = "reg_" + c.name + "_" + a, rb = "reg_" + c.name + "_" + b;
    std::string a1 = fresh(a + "_1", taken), b1 = fresh(b + "_1", taken);
    std::string ao = fresh(a + "_o", taken), bo = fresh(b + "_o", taken);
    std::string at = fresh(a + "_t", taken), bt = fresh(b + "_t", taken);
    std::string ar = fresh(a + "_r", taken), br = fresh(b + "_r", taken);
    Part cut;
    cut.knobs = {size_knob(ta, kThreadRowsDefault, kThreadRows, extent(a)),
                 size_knob(tb, kThreadColumnsDefault, kThreadColumns, extent(b)),
                 size_knob(ra, kRegisterDefault, kRegisterSizes, extent(a)),
                 size_knob(rb, kRegisterDefault, kRegisterSizes, extent(b))};
    // a = (a_o * threads + a_t) * registers + a_r, and b the same: thread (a_t, b_t) computes
    // a register tile of a_r x b_r elements, consecutive along b.
    add_both(cut, fmt::format("split({}, {}, {}, {});", a, ra, a1, ar));
    add_both(cut, fmt::format("split({}, {}, {}, {});", a1, ta, ao, at));
    add_both(cut, fmt::format("split({}, {}, {}, {});", b, rb, b1, br));
    add_both(cut, fmt::format("split({}, {}, {}, {});", b1, tb, bo, bt));
    std::vector<std::string> order = outside, init_order = outside;
    order.insert(order.end(), {ao, bo});
    init_order.insert(init_order.end(), {ao, bo, at, bt, ar, br});
    std::string step_loop, step;  // the reduction's step loop, outside the threads; its knob
    // How many values each iterator takes in one step of one block: the knobs' expressions.
    std::map<std::string, std::string> spans;
    auto bounded = [&](const std::string& product, const std::string& it) {
      return extent(it) > 0 ? fmt::format("min({}, {})", product, extent(it)) : product;
    };
    spans[a] = bounded(ta + " * " + ra, a);
    spans[b] = bounded(tb + " * " + rb, b);
    if (!red.empty()) {
      const std::string& r = red.front();
      step = "step_" + c.name + "_" + r;
      std::string ro = fresh(r + "_o", taken), ri = fresh(r + "_i", taken);
      cut.knobs.push_back(size_knob(step, kStepDefault, kStepSizes, extent(r)));
      cut.commands.push_back(fmt::format("{}.split({}, {}, {}, {});", c.name, r, step, ro, ri));
      order.push_back(ro);
      step_loop = ro;
      spans[r] = bounded(step, r);
      for (size_t k = 1; k < red.size(); ++k)
        spans[red[k]] = extent(red[k]) > 0 ? std::to_string(extent(red[k])) : "";
      order.insert(order.end(), {at, bt, ri});
      order.insert(order.end(), red.begin() + 1, red.end());
    } else {
      order.insert(order.end(), {at, bt});
    }
    order.insert(order.end(), {ar, br});
    cut.commands.push_back(fmt::format("{}.reorder({});", c.name, fmt::join(order, ", ")));
    if (init)
      cut.commands.push_back(
          fmt::format("{}.reorder({});", init->name, fmt::join(init_order, ", ")));
    BlockLoop z = outer_blocks(cut, outside);
    if (init) cut.commands.push_back(fmt::format("{}.after({}, {});", c.name, init->name, bo));
    // A block's sums within its registers.
    cut.knobs.push_back(
        fmt::format("constraint {} * {} * {} * {} <= {};", ta, tb, ra, rb, kBlockSums));
    bool fits = tag_blocks({cut_blocks(bo, b, tb + " * " + rb, kThreadColumns[0]),
                            cut_blocks(ao, a, ta + " * " + ra, kThreadRows[0]), z},
                           cut, add_both);
    for (const auto& [loop, tag] : {std::pair{at, "gpu_thread_y"}, std::pair{bt, "gpu_thread_x"}})
      add_both(cut, fmt::format("tag({}, {});", loop, tag));
    Part unrolled;
    for (const std::string& r : {ar, br}) add_both(unrolled, fmt::format("tag({}, unroll);", r));
    // A reduction's inputs staged in shared memory at each step (all of them, transposed where
    // that makes a thread's rows consecutive, then as they are; else each alone; else none),
    // where one step's elements are known: a knob constraint keeps them within what a block
    // may declare.
    // An input staged: the command, and its bytes as an expression of the knobs.
    struct Staged {
      std::string command, bytes;
    };
    // An input read only as X[a, r] (a matmul's A[i, k]) staged transposed, [r][a], its rows
    // padded by 4 elements: a thread's register rows are then consecutive (one vector read a
    // step, as for B's columns), and the transposing stores of a warp fall in different banks.
    const auto loads = input_loads(f, c);
    auto transposed = [&](const std::string& buf) -> std::optional<Staged> {
      if (!loads || red.empty()) return std::nullopt;
      for (const auto& [name, at] : *loads) {
        if (name != buf) continue;
        const ir::Var* row = at.size() == 2 ? ir::as<ir::Var>(at[0]) : nullptr;
        const ir::Var* col = at.size() == 2 ? ir::as<ir::Var>(at[1]) : nullptr;
        if (!row || !col || row->name != a || col->name != red.front()) return std::nullopt;
      }
      std::string rows = fmt::format("{} * {} + 4", ta, ra);
      return Staged{
          fmt::format("{}.cache({}, {}, gpu_shared, [\"{}\", \"{}\"], \"{{ [e0, e1] -> [e1 - {} "
                      "* {}, e0 - {} * {} * {}] }}\");",
                      c.name, buf, step_loop, step, rows, step, step_loop, ta, ra, ao),
          fmt::format("{} * ({}) * {}", step, rows, ir::dtype_bytes(f.find_buf(buf)->dtype))};
    };
    std::vector<std::vector<Staged>> stagings;
    bool known = !step_loop.empty();
    for (const auto& [it, span] : spans) known = known && !span.empty();
    if (known) {
      std::vector<Staged> plain, turned;
      for (const auto& [buf, footprint] : footprints(f, c, loads, spans)) {
        Staged identity{
            fmt::format("{}.cache_identity({}, {}, gpu_shared);", c.name, buf, step_loop),
            footprint};
        plain.push_back(identity);
        turned.push_back(transposed(buf).value_or(identity));
      }
      auto same = [](const std::vector<Staged>& x, const std::vector<Staged>& y) {
        return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                          [](const Staged& p, const Staged& q) { return p.command == q.command; });
      };
      if (!same(turned, plain)) stagings.push_back(turned);
      if (!plain.empty()) stagings.push_back(plain);
      if (plain.size() > 1)
        for (const Staged& one : plain) stagings.push_back({one});
    }
    stagings.emplace_back();
    if (!fits) stagings.clear();  // more blocks than the grid holds along y or z
    for (const std::vector<Staged>& staging : stagings) {
      Part staged;
      std::vector<std::string> bytes;
      for (const Staged& one : staging) {
        staged.commands.push_back(one.command);
        bytes.push_back(one.bytes);
      }
      // each array aligned: up to kSharedAlign - 1 bytes of padding before it
      if (!bytes.empty())
        staged.knobs.push_back(
            fmt::format("constraint {} <= {};", fmt::join(bytes, " + "),
                        kSharedBytes - (kSharedAlign - 1) * static_cast<int64_t>(bytes.size())));
      // Smaller register tiles by default where the default tile's inputs do not fit.
      std::vector<int64_t> registers = {kRegisterDefault};
      if (!bytes.empty()) registers = {kRegisterDefault, kRegisterDefault / 2, 1};
      for (bool unroll : {true, false}) {
        for (int64_t r : registers) {
          Part p = cut;
          p.knobs[2] = size_knob(ra, r, kRegisterSizes, extent(a));
          p.knobs[3] = size_knob(rb, r, kRegisterSizes, extent(b));
          if (unroll) p += unrolled;
          p += staged;
          variants.push_back(p);
        }
      }
    }
  }
  // The split cut (the tiled sketch's last resort): one loop over blocks and threads, each
  // thread computing its element whole.
  {
    taken = std::set<std::string>(c.iters.begin(), c.iters.end());  // a variant of its own
    const std::string& b = wide.empty() ? par.back() : wide.back();
    std::vector<std::string> outside = others({b});
    std::string tb = "thread_" + c.name + "_" + b;
    std::string bo = fresh(b + "_o", taken), bt = fresh(b + "_t", taken);
    Part cut;
    cut.knobs = {size_knob(tb, kBlockThreadsDefault, kBlockThreads, extent(b))};
    // Updates where the data say, from every thread at once: each one atomic.
    if (scatter) cut.commands.push_back(c.name + ".atomic();");
    add_both(cut, fmt::format("split({}, {}, {}, {});", b, tb, bo, bt));
    BlockLoop y = outer_blocks(cut, outside);
    if (init) cut.commands.push_back(fmt::format("{}.after({}, {});", c.name, init->name, bt));
    bool fits = tag_blocks({cut_blocks(bo, b, tb, kBlockThreads[0]), y}, cut, add_both);
    add_both(cut, fmt::format("tag({}, gpu_thread_x);", bt));
    if (fits) variants.push_back(cut);
  }
  for (const Part& variant : variants) {
    Part candidate = first;
    candidate += variant;
    Part whole = before;
    whole += candidate;
    if (legal(f, whole.text(), limits)) return candidate;
  }
  return {};
}

}  // namespace

std::string gpu_sketch_of(const ir::Func& f, bool tiled, const Extents& extents,
                          const Limits& limits) {
  // A computation inside an algorithm loop (a stencil's time loop) would need a loop around
  // kernels, which kiln's GPU code does not have yet.
  for (const ir::Comp& c : f.comps)
    if (!c.loops.empty()) return "";
  Part sketch;
  for (const ir::Comp& c : f.comps) {
    if (!c.store) continue;       // a value computation: computed where it is read
    if (is_init(f, c)) continue;  // sketched with its reduction
    sketch += gpu_part_of(f, c, init_of(f, c), tiled, sketch, extents, limits);
  }
  return sketch.text();
}

}  // namespace kiln::autosched::detail
