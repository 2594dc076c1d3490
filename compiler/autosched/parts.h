// What the CPU and GPU sketches share (autosched.cpp, gpu.cpp): a sketch's lines as they are
// built, the knobs that size a loop, the facts read off a computation, and the legality check
// every part passes before it is offered. Internal to compiler/autosched.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/limits.h"

namespace kiln::autosched::detail {

// How many iterations each computation's loops make in the algorithm's own order, where both
// bounds are constants (at the shape the func is sketched at): computation -> iterator ->
// count. Loops with bounds in run-time params, or in outer loops, are not in it.
using Extents = std::map<std::string, std::map<std::string, int64_t>>;
Extents loop_extents(const ir::Func& f, const Limits& limits);

// The extent of computation c's loop `iter`, 0 when not known.
int64_t extent_of(const Extents& extents, const std::string& c, const std::string& iter);

// A knob line for a size that cuts a loop of `extent` iterations (0: not known): `sizes` up to
// the first that holds the whole loop (a larger one cuts it no differently), the default
// `fallback` or, when that is cut off, the largest left.
std::string size_knob(const std::string& name, int64_t fallback, std::vector<int64_t> sizes,
                      int64_t extent);
// The sizes size_knob offers for a loop of `extent` iterations.
std::vector<int64_t> sizes_for(std::vector<int64_t> sizes, int64_t extent);

// A sketch's lines, or one computation's part of them: knob lines, then commands, the order
// a schedule block is read in.
struct Part {
  std::vector<std::string> knobs, commands;
  Part& operator+=(const Part& o) {
    knobs.insert(knobs.end(), o.knobs.begin(), o.knobs.end());
    commands.insert(commands.end(), o.commands.begin(), o.commands.end());
    return *this;
  }
  std::string text() const {
    std::string out;
    for (const std::string& k : knobs) out += "    " + k + "\n";
    for (const std::string& c : commands) out += "    " + c + "\n";
    return out;
  }
};

// A loop name made from `base` that none of `taken` has (and then taken).
std::string fresh(const std::string& base, std::set<std::string>& taken);

// A computation's loops as a sketch cuts them: its data-parallel loops (a reduction's: its
// initialization's), the reduction's own after them, the loop names taken so far, and what
// gives a command to c and to its initialization alike.
struct CompLoops {
  CompLoops(const ir::Comp& c, const ir::Comp* init);
  const ir::Comp& c;
  const ir::Comp* init;
  std::vector<std::string> par, red;
  std::set<std::string> taken;
  // "C.command" and, with an initialization, "C_init.command".
  std::vector<std::string> both(const std::string& command) const;
};

// Whether `body` as f's schedule passes the legality check and lowers at the knobs' defaults,
// and at every knob's first candidate (its smallest size, no tag; unless the knob constraints
// refuse that point): at a small shape a default size may hold its whole loop, where a
// dependence between the loop's pieces would pass. The knob constraints must hold at the
// defaults.
bool legal(const ir::Func& f, const std::string& body, const Limits& limits);

// A computation's data-parallel loops, the leading ones (those after them it reduces over):
// for an update of what it stores (`x[i] += A[i, j] * y[j]`), the leading iterators its store
// index names, when the index names none of the rest; else all its iterators.
std::vector<std::string> data_parallel(const ir::Comp& c);

// A reduction's initialization, NAME_init over its leading loops; null when there is none.
const ir::Comp* init_of(const ir::Func& f, const ir::Comp& c);
// Whether c is a reduction's initialization, init_of it (sketched with its reduction); one
// over other loops (spmm's Y_init(i, j) of Y(i, k, j)) is sketched on its own.
bool is_init(const ir::Func& f, const ir::Comp& c);

// Whether c stores where the data say (`hist[bin[k]] += w[k]`): an index reads a buffer.
bool scatters(const ir::Comp& c);

// What an expression reads: its buffer loads and the value computations it accesses.
struct Reads : ir::IRVisitor {
  std::vector<const ir::Load*> loads;
  std::vector<const ir::Access*> accesses;
  std::set<std::string> bufs, comps;
  explicit Reads(const ir::Expr& e) {
    if (e) visit(e);
  }
  void visit_load(const ir::Load& n) override {
    loads.push_back(&n);
    bufs.insert(n.buf);
    ir::IRVisitor::visit_load(n);
  }
  void visit_access(const ir::Access& n) override {
    accesses.push_back(&n);
    comps.insert(n.comp);
    ir::IRVisitor::visit_access(n);
  }
};

// The GPU sketch of f (gpu.cpp): `tiled` -- each computation's two innermost data-parallel
// loops cut into blocks, threads and a register tile, its reduction stepped through with the
// step's inputs staged in shared memory -- else split -- its innermost data-parallel loop over
// blocks and threads. "" when f has nothing a GPU sketch applies to.
std::string gpu_sketch_of(const ir::Func& f, bool tiled, const Extents& extents,
                          const Limits& limits);

}  // namespace kiln::autosched::detail
