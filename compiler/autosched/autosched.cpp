// Sketches from the algorithm (kiln/autosched.h).
#include "kiln/autosched.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <tuple>

#include "kiln/analysis.h"
#include "kiln/error.h"
#include "kiln/frontend.h"
#include "kiln/poly.h"
#include "parts.h"

namespace kiln::autosched {
namespace detail {

Extents loop_extents(const ir::Func& f, const Limits& limits) {
  struct Walk : ir::StmtVisitor {
    Extents out;
    std::vector<const ir::For*> loops;
    void visit_for(const ir::For& n) override {
      loops.push_back(&n);
      ir::StmtVisitor::visit_for(n);
      loops.pop_back();
    }
    void visit_store(const ir::Store& n) override {
      for (const ir::For* l : loops) {
        std::optional<int64_t> lo = ir::eval_int(l->min, {}), hi = ir::eval_int(l->end, {});
        if (lo && hi && l->step == 1) {
          int64_t& e = out[n.comp][l->var];
          e = std::max(e, *hi - *lo);
        }
      }
      // An iterator that takes one value has no loop (lowering leaves none): its extent is 1.
      for (const auto& [iter, value] : n.instance)
        if (ir::as<ir::IntImm>(value)) {
          int64_t& e = out[n.comp][iter];
          e = std::max<int64_t>(e, 1);
        }
    }
  } walk;
  try {
    walk.visit(poly::lower(poly::schedule(f, true, limits)).body);
  } catch (const CompileError&) {
    return {};
  }
  return std::move(walk.out);
}

std::vector<int64_t> sizes_for(std::vector<int64_t> sizes, int64_t extent) {
  if (extent > 0) {
    auto whole = std::find_if(sizes.begin(), sizes.end(), [&](int64_t v) { return v >= extent; });
    if (whole != sizes.end()) sizes.erase(whole + 1, sizes.end());
  }
  return sizes;
}

std::string size_knob(const std::string& name, int64_t fallback, std::vector<int64_t> sizes,
                      int64_t extent) {
  sizes = sizes_for(std::move(sizes), extent);
  return fmt::format("knob {} = {} in [{}];", name, std::min(fallback, sizes.back()),
                     fmt::join(sizes, ", "));
}

int64_t extent_of(const Extents& extents, const std::string& c, const std::string& iter) {
  auto comp = extents.find(c);
  if (comp == extents.end()) return 0;
  auto it = comp->second.find(iter);
  return it == comp->second.end() ? 0 : it->second;
}

std::string fresh(const std::string& base, std::set<std::string>& taken) {
  std::string name = base;
  while (!taken.insert(name).second) name += "_";
  return name;
}

bool legal(const ir::Func& f, const std::string& body, const Limits& limits) {
  try {
    ir::Func g = apply(f, Sketch{"", body}, limits);
    ir::check_knob_constraints(g);
    poly::lower(poly::schedule(g, true, limits));
    ir::Overrides smallest;
    for (const ir::Knob& k : g.knobs)
      if (k.candidates.front() != k.value) smallest[k.name] = k.candidates.front();
    if (!smallest.empty()) {
      std::optional<ir::Func> at_smallest;
      try {
        at_smallest = ir::apply_overrides(g, smallest);
      } catch (const CompileError&) {
        // a point the knob constraints refuse (too many blocks along a GPU grid's y): the
        // tuner never measures it
      }
      if (at_smallest) poly::lower(poly::schedule(*at_smallest, true, limits));
    }
    return true;
  } catch (const CompileError&) {
    return false;
  }
}

std::vector<std::string> data_parallel(const ir::Comp& c) {
  if (!c.store) return c.iters;
  std::set<std::string> stored;
  for (const ir::Expr& e : c.store->indices) stored.merge(ir::free_vars(e));
  size_t k = 0;
  while (k < c.iters.size() && stored.count(c.iters[k])) ++k;
  for (size_t m = k; m < c.iters.size(); ++m)
    if (stored.count(c.iters[m])) return c.iters;
  if (k == 0) return c.iters;
  return std::vector<std::string>(c.iters.begin(), c.iters.begin() + static_cast<long>(k));
}

CompLoops::CompLoops(const ir::Comp& comp, const ir::Comp* initialization)
    : c(comp),
      init(initialization),
      par(init ? init->iters : data_parallel(c)),
      red(c.iters.begin() + static_cast<long>(std::min(par.size(), c.iters.size())), c.iters.end()),
      taken(c.iters.begin(), c.iters.end()) {}

std::vector<std::string> CompLoops::both(const std::string& command) const {
  std::vector<std::string> out = {c.name + "." + command};
  if (init) out.push_back(init->name + "." + command);
  return out;
}

const ir::Comp* init_of(const ir::Func& f, const ir::Comp& c) {
  const ir::Comp* init = f.find_comp(c.name + "_init");
  if (init && (init->iters.size() > c.iters.size() ||
               !std::equal(init->iters.begin(), init->iters.end(), c.iters.begin())))
    return nullptr;
  return init;
}

bool is_init(const ir::Func& f, const ir::Comp& c) {
  if (!c.name.ends_with("_init")) return false;
  const ir::Comp* reduction = f.find_comp(c.name.substr(0, c.name.size() - 5));
  return reduction && init_of(f, *reduction) == &c;
}

bool scatters(const ir::Comp& c) {
  if (!c.store) return false;
  for (const ir::Expr& e : c.store->indices)
    if (ir::reads_memory(e)) return true;
  return false;
}

}  // namespace detail

namespace {

using namespace detail;

// The sizes a tile or split knob may take, and its default for the loop it cuts: the
// innermost (vectorized) one a vector of f32 on AVX-512, the others a few rows of it.
const std::vector<int64_t> kSizes = {4, 8, 16, 32, 64};
constexpr int kInnerSize = 16;
constexpr int kOuterSize = 8;
// The sizes of a reduction's block (its outermost loop split, the outer part outside the
// tiles), and the default: 64 rows of a GEMM's B panel, 4 KiB of each of A's rows in f64.
const std::vector<int64_t> kReductionSizes = {16, 32, 64, 128, 256, 512};
constexpr int kReductionSize = 64;
// The sizes of a scatter's chunks (each updating a copy of the target of its own), and the
// default.
const std::vector<int64_t> kChunkSizes = {256, 1024, 4096, 16384, 65536};
constexpr int kChunkSize = 4096;
// A stencil's time tile and space tile, and a fused pair's block of rows.
const std::vector<int64_t> kTimeSizes = {2, 4, 8, 16, 32};
const std::vector<int64_t> kSpaceSizes = {8, 16, 32, 64, 128};
const std::vector<int64_t> kBlockSizes = {2, 4, 8, 16, 32};

// A sketch's shape: for a CPU, tiled, split or fused (kiln/autosched.h); for a GPU, tiled or
// split (gpu.cpp).
enum class Shape { Tiled, Split, Fused, GpuTiled, GpuSplit };

// Packed copies for c, whose vector loop runs along its iterator `b`: each input c reads
// across b with a stride (an index other than the last names b) and reuses across a loop of
// `par` (that read names it not) is copied once per call (root), shared out among the
// threads, with the dimension b moves along last, so that the vector loop reads it in runs:
// syrk's A[j, k] as [k][j], a convolution's filters Wt[16 * fo + fi, c, ky, kx] as
// [c][ky][kx][f]. None where a buffer is read across b along two dimensions.
std::vector<std::string> packed_copies(const ir::Func& f, const ir::Comp& c, const std::string& b,
                                       const std::vector<std::string>& par) {
  Reads reads(c.value);
  std::map<std::string, size_t> across;  // buffer -> the dimension b moves along
  std::set<std::string> refused, reused;
  for (const ir::Load* load : reads.loads) {
    const ir::Buf* buf = f.find_buf(load->buf);
    if (!buf || buf->kind != ir::BufKind::Input || buf->shape.size() < 2 ||
        load->indices.size() != buf->shape.size()) {
      refused.insert(load->buf);
      continue;
    }
    std::set<std::string> named;
    std::optional<size_t> along;
    for (size_t d = 0; d < load->indices.size(); ++d) {
      std::set<std::string> vars = ir::free_vars(load->indices[d]);
      if (ir::reads_memory(load->indices[d])) refused.insert(load->buf);  // a gather
      named.insert(vars.begin(), vars.end());
      if (!vars.count(b)) continue;
      if (along && *along != d) refused.insert(load->buf);
      along = d;
    }
    if (!along) continue;
    if (*along + 1 == load->indices.size()) refused.insert(load->buf);  // read in runs already
    auto [seen, first] = across.emplace(load->buf, *along);
    if (!first && seen->second != *along) refused.insert(load->buf);
    for (const std::string& p : par)
      if (!named.count(p)) reused.insert(load->buf);
  }
  std::vector<std::string> out;
  for (const auto& [name, along] : across) {
    if (refused.count(name) || !reused.count(name)) continue;
    const ir::Buf& buf = *f.find_buf(name);
    std::vector<std::string> from, to, sizes;
    for (size_t d = 0; d < buf.shape.size(); ++d) from.push_back(fmt::format("e{}", d));
    for (size_t d = 0; d < buf.shape.size(); ++d) {
      if (d == along) continue;
      to.push_back(from[d]);
      sizes.push_back(fmt::format("\"{}\"", ir::to_string(buf.shape[d])));
    }
    to.push_back(from[along]);
    sizes.push_back(fmt::format("\"{}\"", ir::to_string(buf.shape[along])));
    out.push_back(fmt::format("{}.cache({}, root, heap, [{}], \"{{ [{}] -> [{}] }}\", parallel);",
                              c.name, name, fmt::join(sizes, ", "), fmt::join(from, ", "),
                              fmt::join(to, ", ")));
  }
  return out;
}

// Zero-padded copies for c: each input a value computation c reads selects from, with 0 where
// the window leaves the input (a convolution's `select(0 <= y + ky - P and ..., I[...], 0.0)`),
// copied with its zero border at each iteration of loop `at` (cache_identity), so that the
// select leaves the inner loop.
std::vector<std::string> padded_copies(const ir::Func& f, const ir::Comp& c,
                                       const std::string& at) {
  Reads reads(c.value);
  std::set<std::string> padded;
  for (const std::string& name : reads.comps) {
    const ir::Comp* v = f.find_comp(name);
    if (!v || v->store || !v->value || !ir::any_subexpr(v->value, [](const ir::Expr& e) {
          return e->kind == ir::ExprKind::Select;
        }))
      continue;
    for (const std::string& b : Reads(v->value).bufs) {
      const ir::Buf* buf = f.find_buf(b);
      if (buf && buf->kind == ir::BufKind::Input && !reads.bufs.count(b)) padded.insert(b);
    }
  }
  std::vector<std::string> out;
  for (const std::string& b : padded)
    out.push_back(fmt::format("{}.cache_identity({}, {}, heap, parallel);", c.name, b, at));
  return out;
}

// What one computation `c` (with its initialization `init`, for a reduction) is given in a
// sketch of `shape`: the whole of it, then less and less (no vectorization, no parallel
// loop, neither), the first variant that is legal beside what `before` holds.
Part part_of(const ir::Func& f, const ir::Comp& c, const ir::Comp* init, Shape shape,
             const Part& before, const Extents& extents, const Limits& limits) {
  // The data-parallel loops: the initialization's (a reduction's result); the reduction's own
  // loops come after them in c.
  CompLoops loops(c, init);
  const std::vector<std::string>&par = loops.par, &red = loops.red;
  if (par.empty()) return {};
  std::set<std::string>& taken = loops.taken;
  auto both = [&](const std::string& command) { return loops.both(command); };
  Part cut;  // the loops cut (and the reduction's moved), always in
  // Tiled, a reduction: first its outermost loop split and the outer part moved outside the
  // tiles, the initialization a loop nest of its own before (each block of the reduction
  // sweeps every tile while the operands' blocks are in cache, the order of each element's
  // sum kept), else `cut` alone.
  std::optional<Part> blocked;
  std::string block_loop;  // the blocked reduction's outer loop, outermost
  std::string outer, inner;
  std::vector<std::string> untouched;  // the data-parallel loops outside the cut ones
  std::string rows;  // tiled: the point loop outside the vector one, a register tile's rows
  std::string par_knob = "par_" + c.name;
  bool scatter = scatters(c);
  if (shape == Shape::Tiled && par.size() >= 2) {
    const std::string& a = par[par.size() - 2];
    const std::string& b = par.back();
    std::string ta = "tile_" + c.name + "_" + a, tb = "tile_" + c.name + "_" + b;
    std::string ao = fresh(a + "_o", taken), bo = fresh(b + "_o", taken);
    std::string ai = fresh(a + "_i", taken), bi = fresh(b + "_i", taken);
    cut.knobs = {size_knob(ta, kOuterSize, kSizes, extent_of(extents, c.name, a)),
                 size_knob(tb, kInnerSize, kSizes, extent_of(extents, c.name, b))};
    for (const std::string& cmd :
         both(fmt::format("tile({}, {}, {}, {}, {}, {}, {}, {});", a, b, ta, tb, ao, bo, ai, bi)))
      cut.commands.push_back(cmd);
    untouched.assign(par.begin(), par.end() - 2);
    if (!red.empty()) {
      const std::string& r = red.front();
      std::string tr = "split_" + c.name + "_" + r;
      std::string ro = fresh(r + "_o", taken), ri = fresh(r + "_i", taken);
      std::vector<std::string> order = {ro};
      order.insert(order.end(), untouched.begin(), untouched.end());
      order.insert(order.end(), {ao, bo, ri});
      order.insert(order.end(), red.begin() + 1, red.end());
      order.insert(order.end(), {ai, bi});
      blocked = cut;
      block_loop = ro;
      blocked->knobs.push_back(
          size_knob(tr, kReductionSize, kReductionSizes, extent_of(extents, c.name, r)));
      blocked->commands.push_back(fmt::format("{}.split({}, {}, {}, {});", c.name, r, tr, ro, ri));
      blocked->commands.push_back(fmt::format("{}.reorder({});", c.name, fmt::join(order, ", ")));
      cut.commands.push_back(fmt::format("{}.reorder({}, {}, {}, {}, {});", c.name, ao, bo,
                                         fmt::join(red, ", "), ai, bi));
    }
    if (init) cut.commands.push_back(fmt::format("{}.after({}, {});", c.name, init->name, bo));
    outer = par.size() > 2 ? par.front() : ao;
    inner = bi;
    rows = ai;
  } else {
    const std::string& b = par.back();
    std::string tb = "split_" + c.name + "_" + b;
    std::string bo = fresh(b + "_o", taken), bi = fresh(b + "_i", taken);
    // A scatter's loop is cut into chunks that update copies of their own (privatize), so
    // chunks of thousands; other loops into vectors.
    cut.knobs = {scatter ? size_knob(tb, kChunkSize, kChunkSizes, extent_of(extents, c.name, b))
                         : size_knob(tb, kInnerSize, kSizes, extent_of(extents, c.name, b))};
    for (const std::string& cmd : both(fmt::format("split({}, {}, {}, {});", b, tb, bo, bi)))
      cut.commands.push_back(cmd);
    if (!red.empty())
      cut.commands.push_back(
          fmt::format("{}.reorder({}, {}, {});", c.name, bo, fmt::join(red, ", "), bi));
    if (init) cut.commands.push_back(fmt::format("{}.after({}, {});", c.name, init->name, bo));
    outer = par.size() > 1 ? par.front() : bo;
    untouched.assign(par.begin(), par.end() - 1);
    inner = bi;
  }
  // The parallel loop: the data-parallel loops outside the cut ones fused into one (a batch
  // of 1 outermost leaves no parallelism of its own), else the outermost loop, else none.
  std::vector<Part> parallels;
  Part knob{{fmt::format("knob {} = parallel in [none, parallel];", par_knob)}, {}};
  if (untouched.size() >= 2) {
    Part fused = knob;
    std::string so_far = untouched[0];
    for (size_t i = 1; i < untouched.size(); ++i) {
      std::string name = fresh(so_far + "_" + untouched[i], taken);
      for (const std::string& cmd :
           both(fmt::format("fuse({}, {}, {});", so_far, untouched[i], name)))
        fused.commands.push_back(cmd);
      so_far = name;
    }
    for (const std::string& cmd : both(fmt::format("tag({}, {});", so_far, par_knob)))
      fused.commands.push_back(cmd);
    parallels.push_back(fused);
  }
  Part outermost = knob;
  outermost.commands = both(fmt::format("tag({}, {});", outer, par_knob));
  if (scatter) {
    // Updates where the data say, from parallel iterations: each chunk on copies of its own
    // (the same result on any number of threads), else each update atomic.
    Part privatized = outermost;
    privatized.commands.push_back(fmt::format("{}.privatize({});", c.name, outer));
    parallels.push_back(privatized);
    Part atomic = outermost;
    atomic.commands.insert(atomic.commands.begin(), c.name + ".atomic();");
    parallels.push_back(atomic);
  }
  parallels.push_back(outermost);
  parallels.push_back(Part{});
  Part vector{{}, both(fmt::format("tag({}, vectorize);", inner))};
  // A register tile: the rows around the vector loop copied out (the tuner chooses).
  std::string unroll_knob = "unroll_" + c.name;
  Part unroll{{fmt::format("knob {} = unroll_explicit in [none, unroll_explicit];", unroll_knob)},
              both(fmt::format("tag({}, {});", rows, unroll_knob))};
  // Each cut with the packed copies first (memory schedules, after the loop ones), then
  // without.
  // A blocked reduction's cut tries the zero-padded copies at its block loop with them.
  Part packs{{}, packed_copies(f, c, par.back(), par)};
  Part padded = packs;
  if (blocked)
    for (const std::string& p : padded_copies(f, c, block_loop)) padded.commands.push_back(p);
  std::vector<std::pair<Part, Part>> cuts;  // a cut and the memory schedules after it
  if (blocked) {
    if (padded.commands.size() > packs.commands.size()) cuts.emplace_back(*blocked, padded);
    if (!packs.commands.empty()) cuts.emplace_back(*blocked, packs);
    cuts.emplace_back(*blocked, Part{});
  }
  if (!packs.commands.empty()) cuts.emplace_back(cut, packs);
  cuts.emplace_back(cut, Part{});
  for (const auto& [cut_as, memory] : cuts) {
    for (const Part& parallel : parallels) {
      for (int v : {2, 1, 0}) {  // vectorized with its rows unrolled, vectorized, neither
        if (v == 2 && rows.empty()) continue;
        Part candidate = cut_as;
        candidate += parallel;
        if (v >= 1) candidate += vector;
        if (v == 2) candidate += unroll;
        candidate += memory;
        Part whole = before;
        whole += candidate;
        if (legal(f, whole.text(), limits)) return candidate;
      }
    }
  }
  // Nothing cut is legal (the loop inside has bounds read at run time, in the loop outside):
  // the outermost loop in parallel alone, as the algorithm orders the rest.
  Part whole_loops = knob;
  whole_loops.commands = both(fmt::format("tag({}, {});", par.front(), par_knob));
  Part whole = before;
  whole += whole_loops;
  if (legal(f, whole.text(), limits)) return whole_loops;
  return {};
}

// What the computations `group` inside one algorithm loop (a time loop of a stencil, each
// computation with two or more loops of its own) are given in a sketch of `shape`. Tiled: time
// tiling -- each computation's first loop skewed by the time loop (by s, the k-th computation
// shifted k * d further, since it reads what those before it wrote around it in the same
// step), then the time loop and that loop tiled, the computations after one another in each
// tile, their innermost loop vectorized: the first (s, d) the dependences allow, from the
// smallest. Split, or when no skew is legal: within a time step, each computation's first loop
// in parallel and its innermost vectorized.
Part part_of_loop(const ir::Func& f, const std::vector<const ir::Comp*>& group, Shape shape,
                  const Part& before, const Extents& extents, const Limits& limits) {
  const std::string& t = group.front()->iters.front();
  std::set<std::string> taken;
  for (const ir::Comp* c : group) taken.insert(c->iters.begin(), c->iters.end());
  auto legal_beside = [&](const Part& candidate) {
    Part whole = before;
    whole += candidate;
    return legal(f, whole.text(), limits);
  };
  const std::string& first = group.front()->name;
  if (shape == Shape::Tiled) {
    const std::string& space = group.front()->iters.at(1);  // the loop tiled with time
    std::string tt = "tile_" + first + "_" + t, ti = "tile_" + first + "_" + space;
    std::string to = fresh(t + "_o", taken), io = fresh(space + "_o", taken);
    std::string tp = fresh(t + "_i", taken), ip = fresh(space + "_i", taken);
    Part knobs{{size_knob(tt, 8, kTimeSizes, extent_of(extents, first, t)),
                size_knob(ti, 32, kSpaceSizes, extent_of(extents, first, space))},
               {}};
    for (int skew = 1; skew <= 2 * static_cast<int>(group.size()); ++skew) {
      for (int step = 0; step <= skew; ++step) {
        for (bool vectorized : {true, false}) {
          Part candidate = knobs;
          for (size_t k = 0; k < group.size(); ++k) {
            const ir::Comp& c = *group[k];
            const std::string& i = c.iters.at(1);
            candidate.commands.push_back(fmt::format("{}.skew({}, {}, {});", c.name, t, i, skew));
            if (k > 0 && step > 0)
              candidate.commands.push_back(
                  fmt::format("{}.shift({}, {});", c.name, i, static_cast<int>(k) * step));
            candidate.commands.push_back(fmt::format("{}.tile({}, {}, {}, {}, {}, {}, {}, {});",
                                                     c.name, t, i, tt, ti, to, io, tp, ip));
            if (k > 0)
              candidate.commands.push_back(
                  fmt::format("{}.after({}, {});", c.name, group[k - 1]->name, ip));
            if (vectorized)
              candidate.commands.push_back(
                  fmt::format("{}.tag({}, vectorize);", c.name, c.iters.back()));
          }
          if (legal_beside(candidate)) return candidate;
        }
      }
    }
  }
  // Within each time step: the first loop in parallel, the innermost vectorized.
  std::string par_knob = "par_" + first;
  for (int v : {3, 2, 1}) {  // both, vectorized only, parallel only
    Part candidate;
    if (v & 1)
      candidate.knobs.push_back(fmt::format("knob {} = parallel in [none, parallel];", par_knob));
    for (const ir::Comp* c : group) {
      if (v & 1)
        candidate.commands.push_back(
            fmt::format("{}.tag({}, {});", c->name, c->iters.at(1), par_knob));
      if (v & 2)
        candidate.commands.push_back(
            fmt::format("{}.tag({}, vectorize);", c->name, c->iters.back()));
    }
    if (legal_beside(candidate)) return candidate;
  }
  return {};
}

// How a computation of two loops reads a matrix: the iterator that indexes its rows and the one
// that indexes its columns, for each two-dimensional buffer it loads with its two iterators as
// the indices.
std::map<std::string, std::pair<std::string, std::string>> matrix_reads(const ir::Comp& c) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  if (c.iters.size() != 2) return out;
  for (const ir::Load* l : Reads(c.value).loads) {
    if (l->indices.size() != 2) continue;
    const ir::Var* row = ir::as<ir::Var>(l->indices[0]);
    const ir::Var* col = ir::as<ir::Var>(l->indices[1]);
    if (!row || !col || row->name == col->name) continue;
    auto is_iter = [&](const std::string& v) {
      return std::find(c.iters.begin(), c.iters.end(), v) != c.iters.end();
    };
    if (is_iter(row->name) && is_iter(col->name)) out[l->buf] = {row->name, col->name};
  }
  return out;
}

// Whether c's store index names its iterator `it` and nothing else of its own.
bool stores_along(const ir::Comp& c, const std::string& it) {
  if (!c.store) return false;
  std::set<std::string> named;
  for (const ir::Expr& e : c.store->indices) named.merge(ir::free_vars(e));
  for (const std::string& i : c.iters)
    if (named.count(i) != (i == it ? 1u : 0u)) return false;
  return true;
}

// `base` with the most of `a` and `b` legal beside what `before` holds: both, `a`, `b`, neither;
// none when not even `base` is.
std::optional<Part> first_legal(const ir::Func& f, const Part& before, const Part& base,
                                const Part& a, const Part& b, const Limits& limits) {
  for (int v : {3, 1, 2, 0}) {
    Part candidate = base;
    if (v & 1) candidate += a;
    if (v & 2) candidate += b;
    Part whole = before;
    whole += candidate;
    if (legal(f, whole.text(), limits)) return candidate;
  }
  return std::nullopt;
}

// Two computations of two loops each that read one matrix (atax's tmp and y, mvt's x1 and x2),
// with their initializations, fused over the matrix's rows (the fused sketch), so that each
// block of rows is read once for both: each computation's row loop split by one knob
// (`fuse_P`), the second computation after the first in each block. In a computation that sums
// into one element per row, the row loop goes inside the column loop: a register tile of
// independent sums (`unroll_X`); in one that updates a vector along the columns, the column loop
// goes innermost, vectorized. An initialization along the rows is computed in the block; one
// along the columns before the whole nest. None when they share no matrix or no variant is
// legal beside what `before` holds.
std::optional<Part> part_of_pair(const ir::Func& f, const ir::Comp& p, const ir::Comp* p_init,
                                 const ir::Comp& c, const ir::Comp* c_init, const Part& before,
                                 const Extents& extents, const Limits& limits) {
  if (scatters(p) || scatters(c)) return std::nullopt;
  auto p_reads = matrix_reads(p), c_reads = matrix_reads(c);
  std::optional<std::pair<std::string, std::string>> rows;  // p's row iterator, c's
  for (const auto& [buf, p_at] : p_reads)
    if (auto it = c_reads.find(buf); it != c_reads.end()) {
      rows = {p_at.first, it->second.first};
      break;
    }
  if (!rows) return std::nullopt;
  const std::string knob = "fuse_" + p.name;
  Part pair{{size_knob(knob, 4, kBlockSizes, extent_of(extents, p.name, rows->first))}, {}};
  // An initialization along the columns runs before the nest: the first computation's group
  // moved after it.
  auto along_rows = [](const ir::Comp* init, const std::string& row) {
    return init && std::find(init->iters.begin(), init->iters.end(), row) != init->iters.end();
  };
  if (c_init && !along_rows(c_init, rows->second)) {
    if (p_init) {
      pair.commands.push_back(fmt::format("{}.after({}, root);", p_init->name, c_init->name));
      pair.commands.push_back(fmt::format("{}.after({}, root);", p.name, p_init->name));
    } else {
      pair.commands.push_back(fmt::format("{}.after({}, root);", p.name, c_init->name));
    }
  }
  if (p_init && !along_rows(p_init, rows->first) && c_init && along_rows(c_init, rows->second))
    return std::nullopt;  // not a pattern this sketch knows
  Part vectors, unrolls;
  std::string c_block;  // the second computation's block loop
  for (const auto& [x, init, row] :
       {std::tuple{&p, p_init, rows->first}, std::tuple{&c, c_init, rows->second}}) {
    std::set<std::string> taken(x->iters.begin(), x->iters.end());
    const std::string& col = x->iters[0] == row ? x->iters[1] : x->iters[0];
    std::string ro = fresh(row + "_o", taken), ri = fresh(row + "_i", taken);
    if (x == &c) c_block = ro;
    std::string split = fmt::format("split({}, {}, {}, {});", row, knob, ro, ri);
    pair.commands.push_back(x->name + "." + split);
    bool init_in_block = along_rows(init, row);
    if (init_in_block) pair.commands.push_back(init->name + "." + split);
    if (stores_along(*x, row)) {
      std::string unroll = "unroll_" + x->name;
      pair.commands.push_back(fmt::format("{}.reorder({}, {}, {});", x->name, ro, col, ri));
      unrolls.knobs.push_back(
          fmt::format("knob {} = unroll_explicit in [none, unroll_explicit];", unroll));
      unrolls.commands.push_back(fmt::format("{}.tag({}, {});", x->name, ri, unroll));
    } else if (stores_along(*x, col)) {
      pair.commands.push_back(fmt::format("{}.reorder({}, {}, {});", x->name, ro, ri, col));
      vectors.commands.push_back(fmt::format("{}.tag({}, vectorize);", x->name, col));
    } else {
      return std::nullopt;
    }
    if (init_in_block)
      pair.commands.push_back(fmt::format("{}.after({}, {});", x->name, init->name, ro));
  }
  // The second computation (its initialization first, when that is in the block) after the
  // first in each block.
  if (along_rows(c_init, rows->second)) {
    pair.commands.push_back(fmt::format("{}.after({}, {});", c_init->name, p.name, c_block));
    pair.commands.push_back(fmt::format("{}.after({}, {});", c.name, c_init->name, c_block));
  } else {
    pair.commands.push_back(fmt::format("{}.after({}, {});", c.name, p.name, c_block));
  }
  return first_legal(f, before, pair, vectors, unrolls, limits);
}

// An elementwise computation `c` that reads what `p` stores only in the rows it computes itself
// (the buffer's first index is c's first loop, as it is p's: covariance's cov[i, j], read by
// cov_scale(i, j)), fused with p over those rows: the row loop of both (and of their
// initializations) split by one knob (`fuse_P`), p's rows then c's in each block, while they are in
// cache. In each, a reduction's loops go outside the last data-parallel loop, which is vectorized;
// the blocks run in parallel where the dependences allow. None when c reads p otherwise or no
// variant is legal beside what `before` holds.
std::optional<Part> part_of_chain(const ir::Func& f, const ir::Comp& p, const ir::Comp* p_init,
                                  const ir::Comp& c, const ir::Comp* c_init, const Part& before,
                                  const Extents& extents, const Limits& limits) {
  if (scatters(p) || scatters(c) || !p.store || !c.store || p.store->indices.empty())
    return std::nullopt;
  CompLoops pl(p, p_init), cl(c, c_init);
  // An elementwise consumer: one that reduces would stream its other operand once a block
  // (2mm's D through C), which its own tiles do better.
  if (pl.par.empty() || cl.par.empty() || !cl.red.empty() || c_init) return std::nullopt;
  const ir::Var* stored_row = ir::as<ir::Var>(p.store->indices[0]);
  if (!stored_row || stored_row->name != pl.par[0]) return std::nullopt;
  bool reads = false;
  for (const ir::Load* l : Reads(c.value).loads) {
    if (l->buf != p.store->buf) continue;
    const ir::Var* row = l->indices.empty() ? nullptr : ir::as<ir::Var>(l->indices[0]);
    if (!row || row->name != cl.par[0]) return std::nullopt;
    reads = true;
  }
  const int64_t rows = extent_of(extents, p.name, pl.par[0]);
  if (!reads || rows <= 0 || rows != extent_of(extents, c.name, cl.par[0])) return std::nullopt;
  const std::string knob = "fuse_" + p.name, par_knob = "par_fuse_" + p.name;
  Part chain{{size_knob(knob, 8, kBlockSizes, rows)}, {}};
  Part vectors, parallel{{fmt::format("knob {} = parallel in [none, parallel];", par_knob)}, {}};
  std::string block;  // c's block loop
  for (CompLoops* x : {&pl, &cl}) {
    const std::string& row = x->par[0];
    std::string ro = fresh(row + "_o", x->taken), ri = fresh(row + "_i", x->taken);
    for (const std::string& cmd : x->both(fmt::format("split({}, {}, {}, {});", row, knob, ro, ri)))
      chain.commands.push_back(cmd);
    // the loops inside the block's rows: a reduction's, then the data-parallel ones (ri alone
    // for one such loop), the last vectorized
    std::vector<std::string> inner(x->par.begin() + 1, x->par.end());
    if (inner.empty()) inner = {ri};
    if (!x->red.empty()) {
      std::vector<std::string> order = {ro};
      if (inner.front() != ri) order.push_back(ri);
      order.insert(order.end(), x->red.begin(), x->red.end());
      order.insert(order.end(), inner.begin(), inner.end());
      chain.commands.push_back(fmt::format("{}.reorder({});", x->c.name, fmt::join(order, ", ")));
    }
    if (x == &pl && x->init)
      chain.commands.push_back(fmt::format("{}.after({}, {});", p.name, x->init->name, ro));
    for (const std::string& cmd : x->both(fmt::format("tag({}, vectorize);", inner.back())))
      vectors.commands.push_back(cmd);
    for (const std::string& cmd : x->both(fmt::format("tag({}, {});", ro, par_knob)))
      parallel.commands.push_back(cmd);
    block = ro;
  }
  // c's rows after p's in each block.
  chain.commands.push_back(fmt::format("{}.after({}, {});", c.name, p.name, block));
  return first_legal(f, before, chain, vectors, parallel, limits);
}

std::string sketch_of(const ir::Func& f, Shape shape, const Extents& extents,
                      const Limits& limits) {
  Part sketch;
  std::set<std::string> fused;  // computations sketched with the one before them
  for (size_t n = 0; n < f.comps.size(); ++n) {
    const ir::Comp& c = f.comps[n];
    if (!c.loops.empty()) {
      // The computations inside one outermost algorithm loop, sketched together when each is
      // directly inside it with two loops of its own or more (a stencil's time loop); left as
      // the algorithm orders them otherwise.
      std::vector<const ir::Comp*> group;
      bool stencil = true;
      size_t m = n;
      for (; m < f.comps.size() && !f.comps[m].loops.empty() &&
             f.comps[m].loops.front() == c.loops.front();
           ++m) {
        const ir::Comp& g = f.comps[m];
        stencil = stencil && g.loops.size() == 1 && g.iters.size() >= 3;
        group.push_back(&g);
      }
      if (stencil)
        sketch += part_of_loop(f, group, shape == Shape::Split ? Shape::Split : Shape::Tiled,
                               sketch, extents, limits);
      n = m - 1;
      continue;
    }
    if (is_init(f, c) || fused.count(c.name)) continue;
    const ir::Comp* init = init_of(f, c);
    if (shape == Shape::Fused) {
      // The next computation outside every algorithm loop (its initialization skipped).
      const ir::Comp* next = nullptr;
      for (size_t m = n + 1; m < f.comps.size() && !next; ++m) {
        const ir::Comp& d = f.comps[m];
        if (!d.loops.empty()) break;
        if (!is_init(f, d)) next = &d;
      }
      if (next) {
        std::optional<Part> pair =
            part_of_pair(f, c, init, *next, init_of(f, *next), sketch, extents, limits);
        if (!pair)
          pair = part_of_chain(f, c, init, *next, init_of(f, *next), sketch, extents, limits);
        if (pair) {
          sketch += *pair;
          fused.insert(next->name);
          continue;
        }
      }
    }
    sketch += part_of(f, c, init, shape == Shape::Split ? Shape::Split : Shape::Tiled, sketch,
                      extents, limits);
  }
  return sketch.text();
}

}  // namespace

namespace {

void refuse_scheduled(const ir::Func& f) {
  if (f.has_schedule())
    throw std::invalid_argument(
        fmt::format("{} has a schedule of its own: sketches are for a func without one", f.name));
}

constexpr std::pair<Shape, const char*> kCpuShapes[] = {
    {Shape::Tiled, "tiled"}, {Shape::Split, "split"}, {Shape::Fused, "fused"}};
constexpr std::pair<Shape, const char*> kGpuShapes[] = {{Shape::GpuTiled, "tiled"},
                                                        {Shape::GpuSplit, "split"}};

// The sketches of f for machine m, in order, each a schedule body ("" when none applies).
template <typename Each>
void each_sketch(const ir::Func& f, Machine m, const Limits& limits, Each each) {
  refuse_scheduled(f);
  const Extents extents = loop_extents(f, limits);
  using Shapes = std::span<const std::pair<Shape, const char*>>;
  Shapes shapes = m == Machine::Gpu ? Shapes(kGpuShapes) : Shapes(kCpuShapes);
  for (auto [shape, name] : shapes) {
    std::string body = m == Machine::Gpu
                           ? gpu_sketch_of(f, shape == Shape::GpuTiled, extents, limits)
                           : sketch_of(f, shape, extents, limits);
    if (!body.empty() && !each(Sketch{name, body})) return;
  }
}

}  // namespace

std::vector<Sketch> sketches(const ir::Func& f, const Limits& limits, Machine m) {
  std::vector<Sketch> out;
  each_sketch(f, m, limits, [&](Sketch s) {
    bool seen = false;
    for (const Sketch& o : out) seen = seen || o.schedule == s.schedule;
    if (!seen) out.push_back(std::move(s));
    return true;
  });
  return out;
}

std::optional<Sketch> first_sketch(const ir::Func& f, const Limits& limits, Machine m) {
  std::optional<Sketch> out;
  each_sketch(f, m, limits, [&](Sketch s) {
    out = std::move(s);
    return false;
  });
  return out;
}

ir::Func algorithm_of(ir::Func f) {
  f.schedule.clear();
  f.knobs.clear();
  f.knob_splits.clear();
  f.knob_constraints.clear();
  return f;
}

ir::Func apply(const ir::Func& f, const Sketch& s, const Limits& limits) {
  std::string text = ir::to_string(f);
  if (text.find("schedule {") != std::string::npos)
    throw std::invalid_argument(f.name + " has a schedule of its own");
  size_t end = text.rfind('}');
  if (end == std::string::npos) throw std::invalid_argument("not a func: " + text);
  text = text.substr(0, end) + "  schedule {\n" + s.schedule + "  }\n}\n";
  return frontend::parse_module(text, fmt::format("<{} sketch of {}>", s.name, f.name), limits)
      .funcs.at(0);
}

}  // namespace kiln::autosched
