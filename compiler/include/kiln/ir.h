// The algorithm IR: Func, Buf, Comp and the expressions they are made of (DESIGN.md section 3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/error.h"

namespace kiln::ir {

// ---------------------------------------------------------------------------
// Types

enum class DType : uint8_t { Bool, I32, I64, F32, F64 };

const char* dtype_name(DType t);  // "bool", "i32", "i64", "f32", "f64"
size_t dtype_bytes(DType t);      // one element in memory: bool 1, i32/f32 4, i64/f64 8
// The smallest and largest values t holds (floats: the largest finite ones).
double dtype_min(DType t);
double dtype_max(DType t);
std::optional<DType> dtype_from_name(const std::string& name);
// One element of type t at p (dtype_bytes(t) bytes, any alignment), read or written: the one
// place kiln turns typed bytes into numbers and back (host buffers, constants' data, imported
// tensors). Reads give bool as 0 or 1; a float read as an integer and a double written to an
// integer type saturate (NaN: 0); an integer written to i32 wraps; a write to bool stores 0 or 1.
double read_element(DType t, const void* p);
int64_t read_element_int(DType t, const void* p);
void write_element(DType t, void* p, double v);
void write_element_int(DType t, void* p, int64_t v);
inline bool is_float(DType t) { return t == DType::F32 || t == DType::F64; }
inline bool is_int(DType t) { return t == DType::I32 || t == DType::I64; }
// The type of iterators, loop variables, parameters and index arithmetic.
constexpr DType kIndexType = DType::I64;

// ---------------------------------------------------------------------------
// Expressions: immutable nodes shared by pointer. An IRMutator rebuilds only
// what changed, so unchanged subtrees keep their identity.

enum class ExprKind : uint8_t {
  IntImm,
  FloatImm,
  Var,     // an iterator, loop variable, parameter or let-bound name
  Cast,    // value converted to `type`
  Unary,   // Neg, Not
  Binary,  // arithmetic, comparison, logic
  Select,  // cond ? t : f, both sides evaluated lazily
  Call,    // a pure math intrinsic: exp, log, sqrt, abs, sin, cos, tanh, floor, ceil, pow
  Access,  // the value of another (unstored) computation at given indices
  Load,    // an element of a buffer
  Let,     // let var = value in body
};

enum class UnaryOp : uint8_t { Neg, Not };
// Div and Mod on integers round toward negative infinity (floor semantics, as
// isl and Halide do); on floats Div is ordinary division and Mod is fmod.
enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Mod,
  Min,
  Max,
  Lt,
  Le,
  Gt,
  Ge,
  Eq,
  Ne,
  And,
  Or
};

const char* binary_op_symbol(BinaryOp op);  // "+", "<=", "&&", "min", ...
bool is_comparison(BinaryOp op);
bool is_commutative(BinaryOp op);

// a OP b for a comparison OP (is_comparison(op)): what every constant folder
// and interpreter of kiln computes for it.
template <typename T>
bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Lt:
      return a < b;
    case BinaryOp::Le:
      return a <= b;
    case BinaryOp::Gt:
      return a > b;
    case BinaryOp::Ge:
      return a >= b;
    case BinaryOp::Eq:
      return a == b;
    default:
      return a != b;  // Ne
  }
}

// kiln's integer division and modulo: the quotient rounds toward negative
// infinity and the remainder takes the divisor's sign. b must not be 0;
// dividing the smallest int64 by -1 wraps instead of trapping.
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

struct ExprNode {
  ExprKind kind;
  DType type;
  ExprNode(ExprKind k, DType t) : kind(k), type(t) {}
  virtual ~ExprNode() = default;
};
using Expr = std::shared_ptr<const ExprNode>;

struct IntImm final : ExprNode {
  int64_t value;
  IntImm(int64_t v, DType t) : ExprNode(ExprKind::IntImm, t), value(v) {}
};
struct FloatImm final : ExprNode {
  double value;
  FloatImm(double v, DType t) : ExprNode(ExprKind::FloatImm, t), value(v) {}
};
struct Var final : ExprNode {
  std::string name;
  Var(std::string n, DType t) : ExprNode(ExprKind::Var, t), name(std::move(n)) {}
};
struct Cast final : ExprNode {
  Expr value;
  Cast(DType t, Expr v) : ExprNode(ExprKind::Cast, t), value(std::move(v)) {}
};
struct Unary final : ExprNode {
  UnaryOp op;
  Expr a;
  Unary(UnaryOp o, Expr x, DType t) : ExprNode(ExprKind::Unary, t), op(o), a(std::move(x)) {}
};
struct Binary final : ExprNode {
  BinaryOp op;
  Expr a, b;
  Binary(BinaryOp o, Expr x, Expr y, DType t)
      : ExprNode(ExprKind::Binary, t), op(o), a(std::move(x)), b(std::move(y)) {}
};
struct Select final : ExprNode {
  Expr cond, t, f;
  Select(Expr c, Expr x, Expr y, DType ty)
      : ExprNode(ExprKind::Select, ty), cond(std::move(c)), t(std::move(x)), f(std::move(y)) {}
};
struct Call final : ExprNode {
  std::string name;
  std::vector<Expr> args;
  Call(std::string n, std::vector<Expr> a, DType t)
      : ExprNode(ExprKind::Call, t), name(std::move(n)), args(std::move(a)) {}
};
// Reads carry where the source wrote them, for errors about the access (an
// index outside its buffer); equality, hashing and printing ignore it.
struct Access final : ExprNode {
  std::string comp;
  std::vector<Expr> indices;
  SourceLoc where;
  Access(std::string c, std::vector<Expr> i, DType t, SourceLoc w = {})
      : ExprNode(ExprKind::Access, t),
        comp(std::move(c)),
        indices(std::move(i)),
        where(std::move(w)) {}
};
struct Load final : ExprNode {
  std::string buf;
  std::vector<Expr> indices;
  SourceLoc where;
  Load(std::string b, std::vector<Expr> i, DType t, SourceLoc w = {})
      : ExprNode(ExprKind::Load, t),
        buf(std::move(b)),
        indices(std::move(i)),
        where(std::move(w)) {}
};
struct Let final : ExprNode {
  std::string var;
  Expr value, body;
  Let(std::string v, Expr val, Expr b, DType t)
      : ExprNode(ExprKind::Let, t), var(std::move(v)), value(std::move(val)), body(std::move(b)) {}
};

// Downcast helper: as<Binary>(e) is null when e is not a Binary.
template <typename T>
const T* as(const Expr& e) {
  return dynamic_cast<const T*>(e.get());
}

// Constructors that compute the result type. They require operand types to
// agree already (the frontend inserts casts); they throw std::logic_error
// when they do not, since that is a compiler bug, not a user error.
Expr int_imm(int64_t v, DType t = kIndexType);
Expr float_imm(double v, DType t = DType::F32);
Expr bool_imm(bool v);
Expr var(const std::string& name, DType t = kIndexType);
Expr cast(DType t, Expr v);  // returns v itself when it already has type t
Expr unary(UnaryOp op, Expr a);
Expr binary(BinaryOp op, Expr a, Expr b);
Expr select(Expr cond, Expr t, Expr f);
Expr call(const std::string& name, std::vector<Expr> args);  // result type of args[0]
Expr access(const std::string& comp, std::vector<Expr> indices, DType t, SourceLoc where = {});
Expr load(const std::string& buf, std::vector<Expr> indices, DType t, SourceLoc where = {});
Expr let(const std::string& v, Expr value, Expr body);
// The identity of a reduction by op (Add, Mul, Max or Min) over type t: 0, 1,
// the type's lowest value (-inf for floats), its highest.
Expr reduction_identity(BinaryOp op, DType t);

// Shorthands for index arithmetic (both sides kIndexType or same type).
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);

// The math intrinsics Call accepts, with their arity.
bool is_math_intrinsic(const std::string& name, size_t* arity = nullptr);

// Prints an expression in .kiln syntax, fully parenthesized only where needed.
std::string to_string(const Expr& e);

// The value of an integer (or bool, as 0/1) expression whose names are all
// bound in `env`: literals, Vars, integer casts, arithmetic (Div and Mod
// round toward negative infinity), comparisons, logic, select and let.
// nullopt when it reads anything else (a buffer, a float, an unbound name)
// or divides by zero.
std::optional<int64_t> eval_int(const Expr& e, const std::map<std::string, int64_t>& env);

// Structural equality (same kinds, ops, names, values and types).
bool equal(const Expr& a, const Expr& b);

// Replaces free Vars by name. Let-bound names shadow the substitution inside
// their bodies.
Expr substitute(const Expr& e, const std::map<std::string, Expr>& replacements);

// Visitors. IRVisitor walks every subexpression; override the visit_* you
// need and call the base to keep walking. IRMutator rebuilds a node only when
// one of its children changed.
class IRVisitor {
 public:
  virtual ~IRVisitor() = default;
  void visit(const Expr& e);

 protected:
  virtual void visit_int(const IntImm&) {}
  virtual void visit_float(const FloatImm&) {}
  virtual void visit_var(const Var&) {}
  virtual void visit_cast(const Cast& n);
  virtual void visit_unary(const Unary& n);
  virtual void visit_binary(const Binary& n);
  virtual void visit_select(const Select& n);
  virtual void visit_call(const Call& n);
  virtual void visit_access(const Access& n);
  virtual void visit_load(const Load& n);
  virtual void visit_let(const Let& n);
};

class IRMutator {
 public:
  virtual ~IRMutator() = default;
  Expr mutate(const Expr& e);

 protected:
  virtual Expr mutate_int(const Expr& e, const IntImm&) { return e; }
  virtual Expr mutate_float(const Expr& e, const FloatImm&) { return e; }
  virtual Expr mutate_var(const Expr& e, const Var&) { return e; }
  virtual Expr mutate_cast(const Expr& e, const Cast& n);
  virtual Expr mutate_unary(const Expr& e, const Unary& n);
  virtual Expr mutate_binary(const Expr& e, const Binary& n);
  virtual Expr mutate_select(const Expr& e, const Select& n);
  virtual Expr mutate_call(const Expr& e, const Call& n);
  virtual Expr mutate_access(const Expr& e, const Access& n);
  virtual Expr mutate_load(const Expr& e, const Load& n);
  virtual Expr mutate_let(const Expr& e, const Let& n);
  std::vector<Expr> mutate_all(const std::vector<Expr>& es, bool* changed);
};

// ---------------------------------------------------------------------------
// Func, Buf, Comp

enum class BufKind : uint8_t { Input, Output, Temp };
// Where a buffer lives (set_loc). Stack and the GPU levels matter to codegen;
// the interpreters treat them all alike.
enum class MemLoc : uint8_t { Heap, Stack, GpuGlobal, GpuShared, GpuLocal, GpuConstant };
const char* buf_kind_name(BufKind k);
const char* mem_loc_name(MemLoc l);
std::optional<MemLoc> mem_loc_from_name(const std::string& name);

// What the values of an input buffer satisfy, used to make valid random test
// inputs (a CSR row pointer must be sorted and stay within the value array).
struct ValueSpec {
  Expr lo, hi;                // bounds in params; absent = the dtype's default test range
  bool lo_inclusive = true;   // [lo  vs  (lo
  bool hi_inclusive = false;  // hi)  vs  hi]
  bool sorted = false;        // non-decreasing in row-major order
};
// "in [0, nnz] sorted" as the source writes it; "" for no spec.
std::string value_spec_text(const ValueSpec& v);

struct Buf {
  std::string name;
  DType dtype = DType::F32;
  std::vector<Expr> shape;  // extents, affine in params; empty = a scalar
  BufKind kind = BufKind::Input;
  MemLoc loc = MemLoc::Heap;
  ValueSpec values;
  SourceLoc where;
};

struct Param {
  std::string name;
  std::optional<int64_t> value;  // known at compile time; absent = a run-time argument
  SourceLoc where;
};

// A condition on params the user promises holds (`constraint m % 4 == 0`).
struct Constraint {
  Expr cond;
  SourceLoc where;
};

// Where a computation's value is stored: buf[indices], indices in the
// computation's iterators and params.
struct StoreTarget {
  std::string buf;
  std::vector<Expr> indices;
  SourceLoc where{};  // of the target as written
};

// One statement in a loop nest. Its iteration domain is the set of integer
// points of `iters` satisfying every condition in `domain`; conditions are
// affine in iterators and params, except that a buffer read of outer
// iterators may stand where a param could (data-dependent bounds).
// With `store`, each instance writes `value` to the target; without, the
// computation is a pure value that others read through Access, inlined into
// them unless the schedule stores it.
// The original execution order is the textual order of computations, each
// over its domain in lexicographic order of `iters`; computations inside an
// algorithm loop (AlgorithmLoop) run interleaved in textual order for each of
// its values.
struct Comp {
  std::string name;
  std::vector<std::string> iters;
  std::vector<Expr> domain;
  Expr value;
  std::optional<StoreTarget> store;
  SourceLoc where;
  // The algorithm loops around it (indices into Func::loops), outermost
  // first. Their iterators are the first of `iters`, and their conditions,
  // in the same order, the first of `domain`.
  std::vector<int> loops{};
};

// A loop of the algorithm, `for t in 0 <= t < T { ... }`: the computations in
// it share its iterator and, for each of its values in increasing order, run
// one after another in textual order, as the statements of a loop body do.
struct AlgorithmLoop {
  std::string iter;
  // Its own conditions, over the iterators of the loops around it and its own.
  std::vector<Expr> domain;
  int parent = -1;  // the loop around it (an index into Func::loops), or -1
  SourceLoc where;
};

// How many algorithm loops, from the outermost, two paths of them (as
// Comp::loops gives one) share.
size_t shared_loops(const std::vector<int>& a, const std::vector<int>& b);

// The items at one level of the algorithm: computations `comps` (in textual
// order, all inside the same loops above `depth`, whose paths `loops_of`
// gives) in runs, each a computation directly at that level (loop -1) or
// every computation inside one loop at `depth` (that loop).
struct LevelItem {
  int loop = -1;
  std::vector<size_t> comps;
};
std::vector<LevelItem> level_items(const std::vector<size_t>& comps, size_t depth,
                                   const std::function<const std::vector<int>&(size_t)>& loops_of);

struct Knob {
  std::string name;
  int64_t value = 0;  // the default; `--set` or the tuner replaces it
  std::vector<int64_t> candidates;
  SourceLoc where;
  // A tag knob (`knob T = parallel in [none, parallel];`) names a loop tag in
  // `tag` commands: its tags, and its value and candidates are their numbers
  // in this list. Empty for a number knob.
  std::vector<std::string> tags{};
  const std::string* tag() const { return tags.empty() ? nullptr : &tags.at(value); }
  // An order knob (`knob order O of (io, jo, k);`) names an order of loops in
  // `reorder(O)`: its loops, the orders it may take (every permutation, the
  // loops' own order first, unless a list was given: all_orders false), and
  // its value and candidates are their numbers. Empty for other knobs.
  std::vector<std::string> order_loops{};
  std::vector<std::vector<std::string>> orders{};
  bool all_orders = false;
  // Defaults by target (`knob NR = 16 in [16, 64] for avx512f = 64;`): on a
  // target with the CPU feature, the default is its value (the last listed
  // feature the target has wins); `value` is the default elsewhere.
  // apply_target_defaults resolves them.
  struct TargetDefault {
    std::string feature;  // an LLVM CPU feature name: avx2, avx512f, neon, sve, ...
    int64_t value = 0;
  };
  std::vector<TargetDefault> target_defaults{};
  // A default fitted to the target (`fit KB * (MR + NR) * 4 <= l1d_bytes`): a condition on
  // knobs, params and the target's sizes (kTargetSizes); apply_target_defaults makes the
  // largest candidate that meets it the default. Null without one.
  Expr fit{};
};

// The target's sizes a knob's fit reads: its caches in bytes (l1d_bytes, l2_bytes, l3_bytes),
// the bytes of its widest vector register and how many of those it has (vector_bytes,
// vector_registers).
bool is_target_size(const std::string& name);
inline constexpr const char* kTargetSizes[] = {"l1d_bytes", "l2_bytes", "l3_bytes", "vector_bytes",
                                               "vector_registers"};

// Every order of `loops`, their own order first, in the order of
// std::next_permutation over their positions (as the tuner numbers them).
std::vector<std::vector<std::string>> all_orders_of(const std::vector<std::string>& loops);

// `knob split (IO, II = 16) of N max 64;`: knobs that split an extent into
// parts, outermost first, each part a knob of the func. The inner parts are
// chosen: each divides what the parts outside it leave (with `pow2`: each a
// power of two, their product at most the extent), none above max_factor.
// The outermost is what they leave, rounded up: never chosen, always derived.
struct KnobSplit {
  std::vector<std::string> parts;
  std::string extent_param;  // the param the extent is; "" when it is a number
  int64_t extent = 0;        // the extent (the param's value once known)
  bool pow2 = false;
  int64_t max_factor = 0;  // 0: no bound
  SourceLoc where;
};

// One schedule command: `target.op(args...)`.
struct ScheduleArg {
  enum class Kind : uint8_t { Int, Name, Text } kind = Kind::Int;
  int64_t number = 0;  // Kind::Int
  std::string text;    // Kind::Name: an identifier (loop, comp, buffer, knob, tag, location);
                       // Kind::Text: a quoted string (an isl map for apply_sch)
  std::vector<ScheduleArg> list;  // a bracketed list `[a, b]` (Kind::Name with empty text)
  SourceLoc where;
};

// The schedule commands (DESIGN.md section 3): loop schedules, then memory schedules.
enum class ScheduleOp : uint8_t {
  Split,
  Fuse,
  Reorder,
  Tile,
  Skew,
  Shift,
  After,
  Separate,
  Inline,
  Tag,
  ApplySch,
  Store,
  StoreAt,
  SetLoc,
  CacheIdentity,
  Cache,
  AllocAt,
  Atomic,
  Privatize,
};
const char* schedule_op_name(ScheduleOp op);  // "split", "apply_sch", "cache_identity", ...
std::optional<ScheduleOp> schedule_op_from_name(std::string_view name);
// Every command, in the order above: "split, fuse, ..., alloc_at", for messages.
std::string schedule_op_list();
// store, store_at, set_loc, cache_identity, cache, alloc_at: where values live, not loop order.
bool is_memory_schedule(ScheduleOp op);

struct ScheduleCommand {
  std::string target;  // a computation or buffer name
  std::string op;      // as written: split, fuse, reorder, tile, ...
  std::vector<ScheduleArg> args;
  SourceLoc where;

  // The command op names; nullopt for a name that is no command (poly refuses it).
  std::optional<ScheduleOp> kind() const { return schedule_op_from_name(op); }
  bool is(ScheduleOp o) const { return kind() == o; }
};

struct Func {
  std::string name;
  std::vector<Param> params;
  std::vector<Constraint> constraints;
  std::vector<Buf> bufs;
  std::vector<Comp> comps;
  std::vector<AlgorithmLoop> loops;  // the `for` loops of the algorithm, in textual order
  std::vector<Knob> knobs;
  std::vector<KnobSplit> knob_splits;  // their parts are in `knobs`
  // Conditions on knob values (and compile-time params): `constraint MB % MR == 0`.
  // A point of the knobs that breaks one is refused before anything compiles it.
  std::vector<Constraint> knob_constraints;
  std::vector<ScheduleCommand> schedule;
  // `option fast_math;`: float arithmetic may be reassociated (off by default).
  bool fast_math = false;
  SourceLoc where;

  const Buf* find_buf(const std::string& n) const;
  const Comp* find_comp(const std::string& n) const;
  // How many of c's domain conditions come from the loops around it.
  size_t outer_conditions(const Comp& c) const;
  const Param* find_param(const std::string& n) const;
  const Knob* find_knob(const std::string& n) const;
  // Whether it comes with a schedule of its own (commands or knobs); without one, kiln
  // sketches schedules from its algorithm (kiln/autosched.h).
  bool has_schedule() const { return !schedule.empty() || !knobs.empty(); }
  // Its buffers of one kind, in declaration order (an operator's inputs or outputs).
  std::vector<const Buf*> bufs_of_kind(BufKind kind) const;
  // The inputs whose values it uses as data: read in a domain condition (a
  // loop bound) or inside the indices of another access. Their value specs
  // are what proves those accesses in bounds, so every run checks them
  // first. In declaration order.
  std::vector<const Buf*> inputs_read_as_data() const;
};

// ---------------------------------------------------------------------------
// Graphs: several operators connected by tensors (conv -> batch norm -> relu).

// A tensor of a graph: an input (given at run time), a constant (its values
// known at compile time) or the result of a call. Shapes are concrete.
enum class TensorKind : uint8_t { Input, Const, Value };
const char* tensor_kind_name(TensorKind k);

// How a constant's values are made.
struct ConstInit {
  enum class Kind : uint8_t {
    Fill,    // every element `fill`
    Random,  // uniform in [lo, hi) from `seed`, reproducibly (integers: [lo, hi) rounded down)
    Values,  // `values`, row-major (literals)
    Data,    // `data`: the elements as the dtype stores them, row-major, little-endian
             // (an imported model's weights, what constant folding computed)
  } kind = Kind::Fill;
  double fill = 0;
  uint64_t seed = 0;
  double lo = -1, hi = 1;
  std::vector<double> values;  // integers are exact up to 2^53
  // Shared: graphs are copied by every pass, and a model's weights are large.
  std::shared_ptr<const std::vector<unsigned char>> data;
};

struct GraphTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // empty = a scalar
  TensorKind kind = TensorKind::Input;
  ConstInit init;  // Const only
  SourceLoc where;
};

// One operator application: `y = conv2d(x, w, stride = 2);`. `op` is the
// callee with every param bound to its value in this call, so a call is
// self-contained: graph passes may replace it by a new operator (a fused one)
// without a func of that name in the file. An argument or result whose tensor
// has another shape with as many elements is seen in the buffer's shape
// (row-major, as a reshape): the graph checker allows it only for imported
// models, whose Reshape and Flatten cost nothing this way.
struct GraphCall {
  Func op;
  std::vector<std::string> args;     // one tensor per input buffer of op, in declaration order
  std::vector<std::string> results;  // one tensor per output buffer of op, in declaration order
  SourceLoc where;
};

// A graph: its tensors, the calls in a valid execution order (every argument
// defined before it is used) and the tensors it returns.
struct Graph {
  std::string name;
  std::vector<GraphTensor> tensors;
  std::vector<GraphCall> calls;
  std::vector<std::string> outputs;
  SourceLoc where;
  // A model imported with a run-time batch (a symbolic leading dimension,
  // docs/models.md): its name. The graph is the model for one sample, shown to
  // keep the samples of a batch apart: a run on n samples is n runs, each on
  // one sample of every input that leads with it (batched_inputs) and of
  // every output. "" for a graph of static shapes.
  std::string batch;
  std::vector<std::string> batched_inputs;

  const GraphTensor* find_tensor(const std::string& n) const;
  GraphTensor* find_tensor(const std::string& n);
};

// Element k of constant t's values as a double (any init kind but Random).
double const_element(const GraphTensor& t, size_t k);
// How many values t's init holds: its element count for Fill, Random and a
// well-formed Values or Data init.
size_t const_value_count(const GraphTensor& t);

// The tensors `op`'s input and output buffers have in a call: each buffer's
// shape under op's (all bound) params. Throws CompileError (stage
// "validate") for a run-time param or a negative extent.
std::vector<int64_t> bound_shape(const Func& op, const Buf& b);

// Prints a graph in .kiln syntax (`kiln emit --stage graph`). A call prints
// every param it binds; a constant with more than `max_values` values
// prints its first ones and the count.
std::string to_string(const Graph& g, size_t max_values = 8);

// A .kiln file: funcs, and graphs that call them.
struct Module {
  std::vector<Func> funcs;
  std::vector<Graph> graphs;
  const Func* find(const std::string& name) const;
  const Graph* find_graph(const std::string& name) const;
};

// Values for params and knobs given on the command line (`--set NAME=VALUE`).
// apply_overrides sets each named param or knob and throws CompileError
// (stage "validate") for a name that is neither, a knob value that is not
// one of its candidates, or knob values that break a knob constraint.
using Overrides = std::map<std::string, int64_t>;
// Each knob split's extent from its param, its inner parts checked and its
// outer part derived; throws CompileError (validate) naming the part and the
// rule it breaks.
void resolve_knob_splits(Func& f);
// The split a knob is a part of, or null.
const KnobSplit* split_of(const Func& f, const std::string& knob);
// f with the params and knobs of `overrides` set; a knob set keeps its value
// whatever the target (its defaults by target are dropped).
Func apply_overrides(const Func& f, const Overrides& overrides);
// What a target is, for knob defaults: whether it has a CPU feature, and those of its sizes
// (kTargetSizes) that are known.
struct TargetFacts {
  std::function<bool(const std::string&)> has_feature;
  std::map<std::string, int64_t> sizes;
};
// f with each knob's default by target resolved, and its `for` list and fit dropped: first
// every knob's value becomes the one of the last feature in its `for` list the target has
// (else its own); then, knob by knob in declaration order, a knob with a fit whose target
// sizes are all known takes the largest candidate that meets the fit and the knob
// constraints, the other knobs at their values so far (the smallest candidate that meets the
// constraints when none fits). The knob constraints are checked by apply_overrides, which
// comes after.
Func apply_target_defaults(const Func& f, const TargetFacts& target);
// Throws CompileError (stage "validate") naming the knob constraint the
// func's knob values break, with the values it read.
void check_knob_constraints(const Func& f);
// The most bytes a buffer may span: its flat index, and every loop value, stay
// within 64-bit arithmetic with room to spare (2^62, as kMaxLoopValue).
inline constexpr int64_t kMaxBufferBytes = int64_t{1} << 62;
// Throws CompileError (stage "validate") naming the first buffer whose
// extents, known from the compile-time params, make it larger than
// kMaxBufferBytes (apply_overrides checks it).
void check_buffer_sizes(const Func& f);

// Prints the algorithm part of a Func (params, buffers, computations) in
// .kiln syntax; `kiln emit --stage ir`.
std::string to_string(const Func& f);
// The part of to_string(f) after the algorithm: its knob lines (knob splits, knobs at their
// values, knob constraints), then its `schedule { ... }` block after a blank line, each line
// indented as inside the func: what a user pastes into a func.
std::string schedule_to_string(const Func& f);

}  // namespace kiln::ir
