// The dependences of a model: isl's dataflow analysis over the original
// order of its computations, remembered for the process by the text of what
// it was computed from.
#include <isl/cpp.h>
#include <isl/map.h>
#include <isl/schedule.h>
#include <isl/space.h>
#include <isl/union_map.h>
#include <isl/val.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "model.h"
#include "stored_relation.h"
#include "text_memo.h"

namespace kiln::poly {
namespace {

// Fills m->deps and m->live_ranges.
void analyse_dataflow(ScheduledFunc::Impl* m) {
  const ir::Func& F = m->func;
  isl::ctx ctx = m->ctx.get();

  // Direct dependences by isl's dataflow analysis over the original schedule.
  // A write that may not happen (a dropped data-dependent condition) is a
  // may-source: it kills nothing. A read through a non-affine index reads its
  // whole dimension, which can only add dependences.
  //
  // The original order of some computations as a schedule tree: a sequence
  // of them, each one band over its iterators, which isl analyses level by
  // level. Only the computations an analysis involves go in it: isl walks the
  // whole tree for every sink.
  //
  // Computations in an algorithm loop are a sequence inside the loop's band.
  auto iter_dims = [&](const CompModel& c, size_t from, size_t to) {
    std::string out = "[";
    for (size_t d = from; d < to; ++d) out += (d > from ? ", " : "") + isl_name(c.iters[d]);
    // Not restricted to the domain: an empty one would leave isl no space.
    return isl::union_map(isl::map(ctx, "{ " + isl_tuple(c.name, c.iters) + " -> " + out + "] }"));
  };
  auto loops_of = [&](size_t k) -> const std::vector<int>& { return m->comps[k].comp->loops; };
  std::vector<isl::schedule> bands;  // each computation over its own iterators
  for (size_t k = 0; k < m->comps.size(); ++k) {
    const CompModel& c = m->comps[k];
    isl_schedule* one = isl_schedule_from_domain(isl_union_set_from_set(c.domain_approx.copy()));
    if (c.iters.size() > loops_of(k).size())
      one = isl_schedule_insert_partial_schedule(
          one, isl_multi_union_pw_aff_from_union_map(
                   iter_dims(c, loops_of(k).size(), c.iters.size()).release()));
    bands.push_back(isl::manage(one));
  }
  std::function<isl::schedule(const std::vector<size_t>&, size_t)> order =
      [&](const std::vector<size_t>& ks, size_t depth) {
        isl_schedule* tree = nullptr;
        for (const ir::LevelItem& item : ir::level_items(ks, depth, loops_of)) {
          isl_schedule* part;
          if (item.loop < 0) {
            part = bands[item.comps.front()].copy();
          } else {
            isl::union_map band = isl::union_map::empty(ctx);
            for (size_t k : item.comps) band = band.unite(iter_dims(m->comps[k], depth, depth + 1));
            part = isl_schedule_insert_partial_schedule(
                order(item.comps, depth + 1).release(),
                isl_multi_union_pw_aff_from_union_map(band.release()));
          }
          tree = tree ? isl_schedule_sequence(tree, part) : part;
        }
        return isl::manage(tree);
      };
  auto original_order = [&](const std::set<size_t>& comps) {
    return order(std::vector<size_t>(comps.begin(), comps.end()), 0);
  };
  // Whether instances of computation a may run before instances of s in the
  // original order: a comes first in the text, or a loop holds both.
  auto may_precede = [&](size_t a, size_t s) {
    return a <= s || (!loops_of(a).empty() && !loops_of(s).empty() &&
                      loops_of(a).front() == loops_of(s).front());
  };
  // One computation's access to the buffer at hand (or the part of a read
  // that no write reaches). Reads are never must-sources.
  struct Access {
    size_t comp;
    isl::map rel;
    isl::set footprint;
    bool write;
    bool must;
  };
  // Whether two accesses may meet, memoized by computation and direction:
  // each pair is asked up to three times. (The part of a read is asked as
  // the read: a superset, which only lets more sources through.)
  std::map<std::tuple<size_t, bool, size_t, bool>, bool> meet_memo;
  auto meet = [&](const Access& a, const Access& b) {
    auto key = std::make_tuple(a.comp, a.write, b.comp, b.write);
    if (std::make_pair(b.comp, b.write) < std::make_pair(a.comp, a.write))
      key = std::make_tuple(b.comp, b.write, a.comp, a.write);
    auto [it, added] = meet_memo.try_emplace(key, false);
    if (added) it->second = !a.footprint.is_disjoint(b.footprint);
    return it->second;
  };
  // The dependences of one sink, against the accesses of the computations
  // that may run before it (up to its own in the text, or in a loop with it)
  // and whose elements meet its own; `no_source`, when given, collects the
  // part of the sink no source reaches.
  const std::vector<Access> no_kills;
  auto analyse = [&](const Access& s, const std::vector<Access>& sources,
                     const std::vector<Access>& kills, isl::union_map* no_source = nullptr) {
    isl::union_map must = isl::union_map::empty(ctx), may = must, kill = must;
    std::set<size_t> comps{s.comp};
    for (const auto& a : sources)
      if (may_precede(a.comp, s.comp) && meet(a, s)) {
        comps.insert(a.comp);
        (a.must ? must : may) = (a.must ? must : may).unite(isl::union_map(a.rel));
      }
    if (must.is_empty() && may.is_empty()) {
      if (no_source) *no_source = isl::union_map(s.rel);
      return isl::union_map::empty(ctx);
    }
    for (const auto& k : kills)
      if (k.must && may_precede(k.comp, s.comp) && meet(k, s)) {
        comps.insert(k.comp);
        kill = kill.unite(isl::union_map(k.rel));
      }
    isl::union_access_info info(isl::union_map(s.rel));
    info = info.set_must_source(must).set_may_source(may).set_kill(kill).set_schedule(
        original_order(comps));
    isl::union_flow flow = info.compute_flow();
    if (no_source) *no_source = flow.get_may_no_source();
    return flow.get_may_dependence();
  };
  for (const auto& buf : F.bufs) {
    const std::string& b = buf.name;
    std::vector<Access> W, R;
    for (size_t k = 0; k < m->comps.size(); ++k) {
      const CompModel& c = m->comps[k];
      for (const auto& mp : maps_of(c.writes))
        if (range_name(mp) == isl_name(b)) W.push_back({k, mp, mp.range(), true, c.must_write});
      for (const auto& mp : maps_of(c.reads_run))
        if (range_name(mp) == isl_name(b)) R.push_back({k, mp, mp.range(), false, false});
    }
    if (W.empty()) continue;
    meet_memo.clear();
    // A read-modify-write (its read of b is its write of b: C[i] = C[i] + ...)
    // reads each element just before it writes it. Its output dependences
    // are then its flow ones, and its anti dependences its output ones.
    std::set<size_t> rmw;
    for (const auto& r : R)
      for (const auto& w : W)
        if (w.comp == r.comp && w.rel.is_equal(r.rel)) rmw.insert(r.comp);
    // Flow: each read from the last write before it. Anti: each write from
    // the reads since the write before it. Output: each write from the last
    // write before it.
    isl::union_map flow = isl::union_map::empty(ctx), anti = flow, output = flow;
    std::map<size_t, isl::union_map> rmw_flow;
    std::vector<Access> pure_reads, first_reads;
    for (const auto& r : R) {
      isl::union_map unreached;
      isl::union_map d = analyse(r, W, no_kills, &unreached);
      flow = flow.unite(d);
      if (rmw.count(r.comp))
        rmw_flow[r.comp] = d;
      else
        pure_reads.push_back(r);
      for (const auto& mp : maps_of(unreached))
        first_reads.push_back({r.comp, mp, mp.range(), false, false});
    }
    for (const auto& w : W) {
      auto same = rmw_flow.find(w.comp);
      output = output.unite(same != rmw_flow.end() ? same->second : analyse(w, W, no_kills));
    }
    // A temp's final contents are never read: only its live ranges matter,
    // so a schedule may reorder its writes and reads around them (storage
    // reuse). That needs writes that surely happen, each to its element.
    bool relax = buf.kind == ir::BufKind::Temp &&
                 std::all_of(W.begin(), W.end(), [](const Access& a) { return a.must; });
    std::vector<isl::union_map> kept;
    auto add = [&](Dependence::Kind kind, const isl::union_map& rel, bool relaxable) {
      if (rel.is_empty()) return;
      // Flow, anti and output may give the same relation: checking it once
      // is enough, and the first (flow) reads best.
      for (const auto& k : kept)
        if (k.is_equal(rel)) return;
      kept.push_back(rel);
      m->deps.push_back({kind, b, rel, relaxable});
    };
    add(Dependence::Kind::Flow, flow, false);
    if (relax) {
      // A read of what the temp held before any write must still come
      // before the writes that followed it.
      isl::union_map first = isl::union_map::empty(ctx);
      for (const auto& w : W) first = first.unite(analyse(w, first_reads, W));
      add(Dependence::Kind::Anti, first, false);
      isl::union_map writes = isl::union_map::empty(ctx);
      for (const auto& w : W) writes = writes.unite(isl::union_map(w.rel));
      m->live_ranges[b] = LiveRanges{flow, writes};
    }
    for (const auto& w : W) anti = anti.unite(analyse(w, pure_reads, W));
    add(Dependence::Kind::Anti, anti, relax);
    add(Dependence::Kind::Output, output, relax);
  }
}

// What analyse_dataflow found for one operator, as remembered.
struct StoredDependences {
  struct Dep {
    Dependence::Kind kind;
    std::string buf;
    StoredRelation relation;
    bool relaxable;
  };
  struct Live {
    StoredRelation flow, writes;
  };
  std::vector<Dep> deps;
  std::map<std::string, Live> live_ranges;

  size_t bytes() const {
    size_t n = 0;
    for (const Dep& d : deps) n += d.buf.size() + d.relation.bytes();
    for (const auto& [buf, l] : live_ranges) n += buf.size() + l.flow.bytes() + l.writes.bytes();
    return n;
  }
};

// The dependences of every operator compiled in the process, by the text of
// the analysis's inputs (memo_key), up to 64 MB.
using StoredDependencesPtr = std::shared_ptr<const StoredDependences>;
TextMemo<StoredDependencesPtr>& dependence_memo() {
  static TextMemo<StoredDependencesPtr> memo(TextMemo<StoredDependencesPtr>::kUnbounded,
                                             size_t{64} << 20);
  return memo;
}

// Everything analyse_dataflow reads: the buffers (a temp's dependences may
// be relaxed), and per computation its instances, the algorithm loops around
// it (the original order), whether its writes surely happen, and its
// accesses. And the isl operations limit: an analysis that failed under a
// limit is not remembered, so under the same limit it fails again, and no
// other limit's success answers for it (docs/limits.md).
std::string memo_key(const ScheduledFunc::Impl& m) {
  std::string key = "max_isl_operations " + std::to_string(m.limits.max_isl_operations) + "\n";
  for (const auto& b : m.func.bufs)
    key += b.name + (b.kind == ir::BufKind::Temp ? " temp\n" : "\n");
  for (const CompModel& c : m.comps) {
    key += isl_tuple(c.name, c.iters) + " in loops";
    for (int loop : c.comp->loops) key += " " + std::to_string(loop);
    key += c.must_write ? ", must write\n" : ", may write\n";
    key += to_str(c.domain_approx) + "\n" + to_str(c.writes) + "\n" + to_str(c.reads_run) + "\n";
  }
  return key;
}

StoredDependencesPtr stored_dependences(const ScheduledFunc::Impl& m) {
  auto stored = std::make_shared<StoredDependences>();
  for (const Dependence& d : m.deps)
    stored->deps.push_back({d.kind, d.buf, StoredRelation(d.relation), d.relaxable});
  for (const auto& [buf, l] : m.live_ranges)
    stored->live_ranges.emplace(
        buf, StoredDependences::Live{StoredRelation(l.flow), StoredRelation(l.writes)});
  return stored;
}

// The dependences and live ranges of `stored`, read back into ctx.
struct LoadedDependences {
  std::vector<Dependence> deps;
  std::map<std::string, LiveRanges> live_ranges;
};
LoadedDependences load(const StoredDependences& stored, isl::ctx ctx) {
  LoadedDependences out;
  for (const auto& d : stored.deps)
    out.deps.push_back({d.kind, d.buf, d.relation.load_union_map(ctx), d.relaxable});
  for (const auto& [buf, l] : stored.live_ranges)
    out.live_ranges[buf] = LiveRanges{l.flow.load_union_map(ctx), l.writes.load_union_map(ctx)};
  return out;
}

// Whether `loaded` holds the relations the analysis found in m.
bool equal(const LoadedDependences& loaded, const ScheduledFunc::Impl& m) {
  if (loaded.deps.size() != m.deps.size() || loaded.live_ranges.size() != m.live_ranges.size())
    return false;
  for (size_t k = 0; k < m.deps.size(); ++k)
    if (!loaded.deps[k].relation.is_equal(m.deps[k].relation)) return false;
  for (const auto& [buf, l] : m.live_ranges) {
    auto it = loaded.live_ranges.find(buf);
    if (it == loaded.live_ranges.end() || !it->second.flow.is_equal(l.flow) ||
        !it->second.writes.is_equal(l.writes))
      return false;
  }
  return true;
}

}  // namespace

void compute_dependences(ScheduledFunc::Impl& m) {
  std::string key = memo_key(m);
  isl::ctx ctx = m.ctx.get();
  LoadedDependences loaded;
  if (std::optional<StoredDependencesPtr> known = dependence_memo().find(key)) {
    loaded = load(**known, ctx);
  } else {
    analyse_dataflow(&m);
    // The first compilation uses what it stored too: a union map's pieces
    // come out in the order they went in, which differs from the analysis's,
    // and every compilation of the operator should describe its dependences
    // alike (kiln emit --stage schedule, the server's Schedule output). What
    // is stored must read back equal to what the analysis found, or it is
    // neither used nor remembered.
    StoredDependencesPtr stored = stored_dependences(m);
    loaded = load(*stored, ctx);
    if (!equal(loaded, m)) {
      spdlog::warn(
          "{}: its dependences did not read back equal from their stored form; they "
          "are not remembered",
          m.func.name);
      return;
    }
    dependence_memo().add(key, stored, stored->bytes());
  }
  m.deps = std::move(loaded.deps);
  m.live_ranges = std::move(loaded.live_ranges);
}

}  // namespace kiln::poly
