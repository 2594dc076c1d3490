// The loop IR: what a scheduled Func lowers to, and what passes and code generators consume.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir.h"

namespace kiln::ir {

// Hardware a loop is bound to (the schedule's `tag`).
enum class LoopTag : uint8_t {
  None,
  Parallel,        // iterations run on the runtime's thread pool
  Vectorize,       // iterations become lanes of vector operations
  Unroll,          // a hint for the backend's unroller
  UnrollExplicit,  // kiln unrolls the loop itself
  GpuBlockX,
  GpuBlockY,
  GpuBlockZ,
  GpuThreadX,
  GpuThreadY,
  GpuThreadZ,
  // The 16 x 16 x k nest it heads, C[m, n] += A[m, k] * B[k, n], runs on a warp's tensor cores
  // (CUDA's warp matrix operations; TF32 for f32 operands): the CUDA backend's `mma`.
  Mma,
  // Not a schedule's: the CUDA backend's place_barriers marks the serial loops (around thread
  // loops) that its pipeline_tiles writes as a pipeline of shared tiles, so that the two decide
  // alike (the printer refuses a loop still so tagged).
  GpuPipelined,
  // Not a schedule's either: the CUDA backend's distribute_fills tags the outermost loop of each
  // cache fill at block level, whose iterations (those of the perfect nest it heads) the block's
  // threads deal out among themselves: thread t runs t, t + threads, ...
  GpuDistributed,
  // And the loop it puts inside such a fill's innermost loop where that loop copies floats (and
  // pipeline_tiles in each group a thread copies): its iterations copy consecutive elements (4, 2
  // or 1) as one value, a float4, float2 or float.
  GpuLanes,
  // And the loop the CUDA backend's pipeline_tiles puts around the code each of a block's threads
  // runs once at block level, `for (t = 0; t < gpu_block_threads(n); t++)`: its iterations are
  // the block's threads, t a thread's rank in the block (the loop interpreter runs them one
  // after another, each with its own registers).
  GpuRank,
};
const char* loop_tag_name(LoopTag t);  // "parallel", "vectorize", "gpu_block_x", ...
// Whether t binds a loop to the GPU's blocks (gpu_block_x/y/z), its threads
// (gpu_thread_x/y/z), or either; and the axis it binds (x 0, y 1, z 2).
bool is_gpu_block_tag(LoopTag t);
bool is_gpu_thread_tag(LoopTag t);
inline bool is_gpu_tag(LoopTag t) { return is_gpu_block_tag(t) || is_gpu_thread_tag(t); }
int gpu_tag_axis(LoopTag t);
std::optional<LoopTag> loop_tag_from_name(const std::string& name);

enum class StmtKind : uint8_t { For, If, LetStmt, Store, Alloc, Block, Evaluate };

struct StmtNode {
  StmtKind kind;
  explicit StmtNode(StmtKind k) : kind(k) {}
  virtual ~StmtNode() = default;
};
using Stmt = std::shared_ptr<const StmtNode>;

// for (var = min; var < end; var += step) body
struct For final : StmtNode {
  std::string var;
  Expr min, end;
  int64_t step = 1;
  LoopTag tag = LoopTag::None;
  Stmt body;
  For(std::string v, Expr lo, Expr hi, int64_t s, LoopTag t, Stmt b)
      : StmtNode(StmtKind::For),
        var(std::move(v)),
        min(std::move(lo)),
        end(std::move(hi)),
        step(s),
        tag(t),
        body(std::move(b)) {}
};
struct IfThenElse final : StmtNode {
  Expr cond;
  Stmt then_case, else_case;  // else_case may be null
  IfThenElse(Expr c, Stmt t, Stmt e)
      : StmtNode(StmtKind::If),
        cond(std::move(c)),
        then_case(std::move(t)),
        else_case(std::move(e)) {}
};
struct LetStmt final : StmtNode {
  std::string var;
  Expr value;
  Stmt body;
  LetStmt(std::string v, Expr val, Stmt b)
      : StmtNode(StmtKind::LetStmt), var(std::move(v)), value(std::move(val)), body(std::move(b)) {}
};
// buf[indices] = value. `comp` and `instance` say which computation instance
// this store executes (the original iterators as expressions of loop
// variables); they are for diagnostics only.
//
// With `atomic` set, the store is an atomic read-modify-write and `value` is
// its operand: buf[indices] = buf[indices] OP value, as one indivisible step
// (OP is Add, Sub, Mul, Min or Max), so parallel iterations may update the
// same element (a computation's `atomic()` schedule).
struct Store final : StmtNode {
  std::string buf;
  std::vector<Expr> indices;
  Expr value;
  std::string comp;
  std::vector<std::pair<std::string, Expr>> instance;
  std::optional<BinaryOp> atomic;
  Store(std::string b, std::vector<Expr> i, Expr v, std::string c = {},
        std::vector<std::pair<std::string, Expr>> inst = {},
        std::optional<BinaryOp> atomic_op = std::nullopt)
      : StmtNode(StmtKind::Store),
        buf(std::move(b)),
        indices(std::move(i)),
        value(std::move(v)),
        comp(std::move(c)),
        instance(std::move(inst)),
        atomic(atomic_op) {}
};
// A temporary buffer that exists while body runs.
struct Alloc final : StmtNode {
  std::string buf;
  DType dtype;
  std::vector<Expr> shape;
  MemLoc loc;
  Stmt body;
  Alloc(std::string b, DType t, std::vector<Expr> s, MemLoc l, Stmt body_)
      : StmtNode(StmtKind::Alloc),
        buf(std::move(b)),
        dtype(t),
        shape(std::move(s)),
        loc(l),
        body(std::move(body_)) {}
};
struct Block final : StmtNode {
  std::vector<Stmt> stmts;
  explicit Block(std::vector<Stmt> s) : StmtNode(StmtKind::Block), stmts(std::move(s)) {}
};
struct Evaluate final : StmtNode {
  Expr value;
  explicit Evaluate(Expr v) : StmtNode(StmtKind::Evaluate), value(std::move(v)) {}
};

template <typename T>
const T* as(const Stmt& s) {
  return dynamic_cast<const T*>(s.get());
}

// Builds a Block, flattening nested Blocks and dropping null statements; a
// single statement is returned as itself.
Stmt block(std::vector<Stmt> stmts);

// A barrier of a GPU block's threads (CUDA's __syncthreads()): Evaluate of the call
// kGpuBarrier, which the CUDA backend's place_barriers pass puts between the steps of a block
// (kiln/cuda.h) and the loop interpreter, running a block's threads one after another, passes
// over.
inline constexpr const char* kGpuBarrier = "gpu_barrier";
Stmt gpu_barrier();
bool is_gpu_barrier(const Stmt& s);

// The number of a GPU block's threads, which is at least n (the block is as wide as its widest
// thread loops, known once the whole kernel is printed): the call kGpuBlockThreads(n), an i64,
// which the CUDA backend's pipeline_tiles writes, the printer writes as the block's size and
// the loop interpreter takes to be n. At most kMaxBlockThreads.
inline constexpr const char* kGpuBlockThreads = "gpu_block_threads";
inline constexpr int64_t kMaxBlockThreads = 1024;
Expr gpu_block_threads(int64_t at_least);
// n where e is gpu_block_threads(n).
std::optional<int64_t> gpu_block_threads_at_least(const Expr& e);

// s with its free variables replaced by name; a name a loop or a let binds is
// not replaced inside it (ir::substitute of an expression, for statements).
Stmt substitute(const Stmt& s, const std::map<std::string, Expr>& replacements);

// The kernel statuses (runtime/include/kiln/runtime.h) the compiler needs.
inline constexpr int32_t kStatusArith = 3;       // KILN_ERR_ARITH
inline constexpr int32_t kStatusCheckBase = 16;  // KILN_ERR_CHECK

// The most bytes one temporary may take (docs/limits.md): on the stack (a
// thread's stack is a few MiB) and on the heap. Lowering refuses a constant
// size beyond them; a size in run-time params is checked by the kernel, which
// returns KILN_ERR_ALLOC.
inline constexpr int64_t kMaxStackTempBytes = int64_t{1} << 20;
inline constexpr int64_t kMaxHeapTempBytes = int64_t{1} << 32;
// The most copies of one statement nested unroll_explicit loops may make
// (each loop also runs at most 4096 times); lowering and codegen refuse more.
inline constexpr int64_t kMaxUnrolledCopies = 65536;

// What a kernel checks at run time, and the status it returns when the check
// fails: kStatusCheckBase + its index in LoweredFunc::checks.
struct RuntimeCheck {
  enum class Kind : uint8_t {
    // At the kernel's entry, before any access relies on it: an input whose
    // values index buffers or bound loops meets its value spec (range, sorted).
    InputSpec,
    // An integer division or modulo in a computation's value by zero, or of
    // the type's smallest value by -1. The kernel finishes with 0 in its place
    // and returns the status; its outputs are not to be used.
    Arithmetic,
  };
  Kind kind = Kind::InputSpec;
  // "input_spec" or "arithmetic": the kind as artifacts and kilnd name it.
  static const char* kind_name(Kind k) {
    return k == Kind::InputSpec ? "input_spec" : "arithmetic";
  }
  std::string subject;  // InputSpec: the input; Arithmetic: the computation
  std::string message;  // what failed, for the caller to report
  SourceLoc where;      // the input's declaration, or the computation
  // InputSpec: every element in [lo, hi] (i64 bounds in the run-time params;
  // null: no bound) and, when sorted, none below the one before it.
  Expr lo{}, hi{};
  bool sorted = false;
};

// A lowered function: its arguments and its body.
struct LoweredFunc {
  std::string name;
  std::vector<std::string> params;  // run-time params (Vars in the body), in declaration order
  std::vector<Buf> args;            // input and output buffers, in declaration order
  Stmt body;                        // temporaries are Alloc nodes inside
  bool fast_math = false;           // the func's `option fast_math`
  SourceLoc where{};                // the func's
  std::map<std::string, SourceLoc> comp_where{};  // each computation's, for errors
  std::vector<RuntimeCheck> checks{};
};

// The first computation s stores ("" when none): the one an error about a
// loop names, at comp_where.
std::string first_stored_computation(const Stmt& s);

// The check behind a kernel status of f (null for 0 and the runtime's codes).
const RuntimeCheck* runtime_check(const LoweredFunc& f, int32_t status);
// A CompileError (stage Run) for a nonzero status a kernel of f returned:
// at the check's position, with its message, or naming the runtime's code.
CompileError status_error(const LoweredFunc& f, int32_t status);

// Prints loop IR as C-like pseudo code (`kiln emit --stage loops`).
std::string to_string(const Stmt& s, int indent = 0);
std::string to_string(const LoweredFunc& f);

// The floating-point operations one run of f performs: for each Store, the
// float +, -, * and / in its value (a multiply-add counts 2), times the
// number of times it runs. `params` gives the run-time params' values.
// Returns -1 when that number is unknown: a loop bound or condition read from
// a buffer (data-dependent bounds), a run-time param without a value, or a
// nest too irregular to count quickly.
int64_t flop_count(const LoweredFunc& f, const std::map<std::string, int64_t>& params = {});

// Statement visitors and mutators, in the style of the expression ones.
class StmtVisitor : public IRVisitor {
 public:
  using IRVisitor::visit;
  void visit(const Stmt& s);

 protected:
  virtual void visit_for(const For& n);
  virtual void visit_if(const IfThenElse& n);
  virtual void visit_let_stmt(const LetStmt& n);
  virtual void visit_store(const Store& n);
  virtual void visit_alloc(const Alloc& n);
  virtual void visit_block(const Block& n);
  virtual void visit_evaluate(const Evaluate& n);
};

class StmtMutator : public IRMutator {
 public:
  using IRMutator::mutate;
  Stmt mutate(const Stmt& s);

 protected:
  virtual Stmt mutate_for(const Stmt& s, const For& n);
  virtual Stmt mutate_if(const Stmt& s, const IfThenElse& n);
  virtual Stmt mutate_let_stmt(const Stmt& s, const LetStmt& n);
  virtual Stmt mutate_store(const Stmt& s, const Store& n);
  virtual Stmt mutate_alloc(const Stmt& s, const Alloc& n);
  virtual Stmt mutate_block(const Stmt& s, const Block& n);
  virtual Stmt mutate_evaluate(const Stmt& s, const Evaluate& n);
  // Every expression the default statement hooks meet (bounds, conditions,
  // values, indices, shapes) goes through here; a pass with its own
  // expression rewriting overrides this one hook instead of every statement.
  virtual Expr mutate_stmt_expr(const Expr& e) { return mutate(e); }

 private:
  std::vector<Expr> mutate_stmt_exprs(const std::vector<Expr>& es, bool* changed);
};

}  // namespace kiln::ir
