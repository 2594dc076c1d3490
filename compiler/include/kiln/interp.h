// The two interpreters: the reference one (the oracle, the algorithm without its
// schedule) and the loop-IR one (the scheduled, lowered program), plus the
// random inputs and output comparisons of a run. The host data they run on is
// kiln/buffers.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/buffers.h"
#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::interp {

// Params take their compile-time values; run-time params must be in
// `runtime_params` (CompileError otherwise, naming the missing one).
std::map<std::string, int64_t> param_values(
    const ir::Func& f, const std::map<std::string, int64_t>& runtime_params = {});

// Allocates every input and output of f, fills inputs with reproducible random
// values honoring each buffer's ValueSpec (range, sorted), and zeroes outputs.
Bindings random_bindings(const ir::Func& f, const std::map<std::string, int64_t>& params,
                         uint64_t seed);

// Runs the algorithm of f directly: computations in textual order, each over
// its domain in lexicographic order, reading unstored computations by
// evaluating their expression. The schedule is ignored. Throws CompileError
// (stage "interp") on an out-of-bounds access, naming the access and the
// instance, or on an unbounded domain.
void run_reference(const ir::Func& f, Bindings& b);

// Runs lowered loop IR, checking every load and store against its buffer's
// bounds (CompileError naming the access, the computation instance and the
// loop variables). Temporaries (Alloc) are created and freed by the run. Tags
// are ignored, but for what GPU threads own: a gpu_local temporary allocated
// outside the gpu_thread loops has one copy per thread (per value of the
// thread loops' variables around an access), as the GPU lowering passes'
// register accumulators need.
void run_loops(const ir::LoweredFunc& f, Bindings& b);

// The largest difference between two runs' outputs.
struct Mismatch {
  bool ok = true;
  std::string buffer;
  std::vector<int64_t> index;  // of the worst element
  double expected = 0, actual = 0;
  double abs_error = 0, rel_error = 0;
  // Set instead of an element when the buffers cannot be compared at all
  // ("expected f32[4], got f32[5]", "missing from the actual run").
  std::string problem;
  std::string describe() const;  // "y[3, 1]: expected 2.5, got 2.75 (abs 0.25, rel 0.1)"
};
// Compares every output buffer of f. Integers must match exactly; floats
// within rtol * max(|expected|, the mean |expected| of the buffer) + atol: an
// element that is the small result of a sum of large terms (cancellation) is
// as accurate as the terms are, so contraction into fused multiply-adds or
// reassociation (fast_math) may change it by more than its own magnitude
// allows.
Mismatch compare_outputs(const ir::Func& f, const Bindings& expected, const Bindings& actual,
                         double rtol, double atol);

// How closely a compiled kernel of f must match the reference, by the arithmetic its schedule
// asks for: rtol 1e-5 and atol 1e-6 for f32 and f64 as they are; rtol 1e-2 and atol 1e-5 where
// a loop is tagged mma (TF32 tensor cores: each factor rounded to 10 bits of mantissa, sums in
// f32 in the hardware's order).
struct Tolerance {
  double rtol = 1e-5, atol = 1e-6;
};
Tolerance tolerance_of(const ir::Func& f);
// compare_outputs at f's tolerance.
Mismatch compare_outputs(const ir::Func& f, const Bindings& expected, const Bindings& actual);

// The same comparison for the buffers named, as two runs of a graph give them.
Mismatch compare_buffers(const std::vector<std::string>& names,
                         const std::map<std::string, HostBuffer>& expected,
                         const std::map<std::string, HostBuffer>& actual, double rtol = 1e-5,
                         double atol = 1e-6);

// ---------------------------------------------------------------------------
// Graphs

// The values of a graph constant, as its ConstInit says.
HostBuffer const_value(const ir::GraphTensor& t);

// A buffer for every input of g with reproducible random values: each input
// honors the value spec of the first operator that reads it (a CSR row
// pointer stays sorted and in range).
Tensors random_graph_inputs(const ir::Graph& g, uint64_t seed);

// Runs one call: `b` holds the call's op params and a buffer for each of its
// inputs and outputs (by the op's buffer names); the runner fills the outputs.
using CallRunner = std::function<void(size_t call_index, const ir::GraphCall& call, Bindings& b)>;

// Runs g call by call in order with `run_call`, from `inputs` (one buffer per
// graph input, checked against its dtype and shape: CompileError, stage
// "interp", otherwise). The constants are made from their initializers, or
// taken from `constants` when given (made once by whoever runs g often).
// Returns the graph's outputs by tensor name.
Tensors run_graph(const ir::Graph& g, const Tensors& inputs, const CallRunner& run_call,
                  const Tensors* constants = nullptr);

// The values of every constant of g, by name.
Tensors graph_constants(const ir::Graph& g);

// The reference interpreter at some elements of f's outputs only: `points` gives, for an
// output buffer, the flat indices of the elements to compute (an output not named is computed
// whole); f's other output elements are left as they were. Every element of a temporary or an
// output those depend on is computed, each by the computations that store it, in the order
// run_reference would: the elements asked for get exactly the values it gives them, and a
// reduction runs only for the elements it feeds. False, with nothing run, when f cannot be
// traced back so (an algorithm loop; a computation reading a temporary or an output that no
// computation before it writes, or its own buffer elsewhere than where it stores; such a read
// inside an inlined computation or under a `let`): then run_reference.
bool run_reference_at(const ir::Func& f, Bindings& b,
                      const std::map<std::string, std::vector<int64_t>>& points);

// A spot check of a kernel's run: `ran` holds f's inputs and the outputs a compiled kernel
// gave for them; the reference interpreter computes `points_per_output` elements of each output
// (chosen from `seed`, the first and last among them; all of an output that has no more) from
// the same inputs (run_reference_at, or run_reference when f cannot be traced), and they are
// compared as compare_buffers compares (the mean magnitude taken over the points). The worst
// element names its output buffer and its index there. `compared`, when given, receives how
// many elements were compared.
Mismatch check_at_points(const ir::Func& f, const Bindings& ran, int64_t points_per_output,
                         uint64_t seed, int64_t* compared = nullptr);

// run_graph with the reference interpreter for every call: the oracle.
Tensors run_reference(const ir::Graph& g, const Tensors& inputs);

}  // namespace kiln::interp
