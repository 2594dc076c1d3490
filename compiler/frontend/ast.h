// The syntax tree: what the parser builds and the checker turns into IR.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kiln/ir.h"
#include "source.h"

namespace kiln::frontend {

enum class AstKind : uint8_t {
  Int,      // 42
  Float,    // 1.5
  Bool,     // true
  Name,     // i, M
  Index,    // A[i, k]        (name, args)
  Call,     // f(a, b)        (name, args): builtins, casts, computation reads
  Unary,    // -a, not a      (unary_op, args[0])
  Binary,   // a + b, a and b (binary_op, args[0], args[1])
  Compare,  // a < b <= c     (args: the operands, cmp_ops/cmp_pos: the operators)
};

struct Ast {
  AstKind kind = AstKind::Int;
  Pos pos;         // the token the node is about: operator, name or literal
  Pos start;       // the node's first token
  size_t end = 0;  // offset one past the node's last character
  int depth = 1;   // height of the tree below, this node included
  int64_t int_value = 0;
  double float_value = 0;
  bool bool_value = false;
  std::string name;
  ir::UnaryOp unary_op = ir::UnaryOp::Neg;
  ir::BinaryOp binary_op = ir::BinaryOp::Add;
  std::vector<std::unique_ptr<Ast>> args;
  std::vector<ir::BinaryOp> cmp_ops;
  std::vector<Pos> cmp_pos;
};
using AstPtr = std::unique_ptr<Ast>;

struct Ident {
  std::string name;
  Pos pos;
};

struct ParamDecl {
  Ident name;
  std::optional<int64_t> value;
};

// One comma-separated condition of a `constraint` item.
struct ConstraintDecl {
  AstPtr cond;
};

struct ValueRange {
  AstPtr lo, hi;
  bool lo_inclusive = true;
  bool hi_inclusive = false;
  Pos pos;  // the opening bracket
};

struct BufferDecl {
  ir::BufKind kind = ir::BufKind::Input;
  Ident name;
  ir::DType dtype = ir::DType::F32;
  std::vector<AstPtr> shape;
  std::optional<ValueRange> range;
  bool sorted = false;
  Pos sorted_pos;
};

struct KnobDecl {
  Ident name;
  int64_t value = 0;
  Pos value_pos;
  std::vector<int64_t> candidates;
  std::vector<Pos> candidate_pos;
  // A tag knob (`knob T = parallel in [none, parallel];`): its default and
  // candidates are tags, not numbers.
  bool is_tag = false;
  std::string tag_value;
  std::vector<std::string> tags;
  // Defaults by target (`... for avx512f = 64, sve = 32;`): a CPU feature and
  // the default on a target that has it.
  std::vector<std::pair<Ident, int64_t>> target_defaults;
  std::vector<Pos> target_default_pos;
  // A default fitted to the target (`... fit KB * NR * 4 <= l1d_bytes / 2;`): the largest
  // candidate for which the condition holds on the target. Null without one.
  AstPtr fit;
  // A knob split (`knob split (IO, II = 16) of N max 64 pow2;`): its parts
  // (name is the first), the inner parts' defaults, the extent (a number, or
  // a param's name), and its rules.
  bool is_split = false;
  std::vector<Ident> parts;
  std::vector<int64_t> part_values;  // of parts[1..]
  std::vector<Pos> part_value_pos;
  std::string extent_param;
  int64_t extent = 0;
  Pos extent_pos;
  bool pow2 = false;
  int64_t max_factor = 0;
  // An order knob (`knob order O of (io, jo, k) in [(io, jo, k), (jo, io, k)]
  // = (jo, io, k);`): its loops, the orders listed (none: every one), and the
  // default (none: the first).
  bool is_order = false;
  std::vector<Ident> order_loops;
  std::vector<std::vector<Ident>> orders;
  std::vector<Ident> default_order;
};

enum class AssignOp : uint8_t { Set, Add, Sub, Mul };

// `sum(k, l in D) body`: the whole right-hand side of a store.
struct ReductionAst {
  Ident op;  // sum, prod, max, min
  std::vector<Ident> iters;
  std::vector<AstPtr> domain;
  AstPtr body;
};

// `for t in 0 <= t < T { ... }`: a loop of the algorithm around the
// computations (and loops) in its braces, which share its iterator and run
// interleaved in textual order for each of its values. The parser flattens
// it: the LoopDecl item comes before the items of its body, each of which
// names its innermost loop.
struct LoopDecl {
  int id = 0;       // its number among the func's loops, in textual order
  int parent = -1;  // the loop around it, or -1
  Pos pos;          // the `for`
  Ident iter;
  std::vector<AstPtr> domain;
};

struct ComputeDecl {
  int loop = -1;  // the innermost `for` around it, or -1
  Ident name;
  std::vector<Ident> iters;
  std::vector<AstPtr> domain;
  bool stores = false;
  // A store: target[target_indices] ASSIGN value (or reduction).
  Ident target;
  std::vector<AstPtr> target_indices;
  AssignOp assign = AssignOp::Set;
  Pos assign_pos;
  AstPtr value;  // the value; null when `reduction` is set
  std::optional<ReductionAst> reduction;
};

// `option fast_math;`: a switch on how the func may be compiled.
struct OptionDecl {
  Ident name;
};

struct ScheduleDecl {
  Pos pos;  // the `schedule` keyword
  std::vector<ir::ScheduleCommand> commands;
  std::vector<KnobDecl> knobs;
  std::vector<ConstraintDecl> constraints;  // knob constraints written in the block
};

using Item = std::variant<ParamDecl, ConstraintDecl, BufferDecl, KnobDecl, ComputeDecl,
                          ScheduleDecl, OptionDecl, LoopDecl>;

struct FuncDecl {
  Ident name;
  std::vector<Item> items;
};

// ---- graphs

// `input x : f32[1, 64];` or `const w : f32[64] = INIT;`.
struct TensorDecl {
  ir::TensorKind kind = ir::TensorKind::Input;
  Ident name;
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> shape;
  std::vector<Pos> shape_pos;
  ir::ConstInit init;  // Const
  Pos init_pos;        // Const: the first token of the initializer
};

// `y, z = op(a, b, P = 3);`
struct CallDecl {
  std::vector<Ident> results;
  Ident op;
  std::vector<Ident> args;
  std::vector<std::pair<Ident, int64_t>> bindings;  // P = 3
  std::vector<Pos> binding_value_pos;
};

// `output y, z;`
struct OutputDecl {
  std::vector<Ident> names;
};

using GraphItem = std::variant<TensorDecl, CallDecl, OutputDecl>;

struct GraphDecl {
  Ident name;
  std::vector<GraphItem> items;
};

struct ModuleDecl {
  std::vector<FuncDecl> funcs;
  std::vector<GraphDecl> graphs;
};

}  // namespace kiln::frontend
