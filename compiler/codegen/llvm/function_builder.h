// The builder of one kernel's LLVM function, private to the CPU backend.
// FunctionBuilder is one class; each group of its methods lives in the file
// its section comment names, so scalar code, vector lanes and parallel
// outlining can be read apart.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/ValueHandle.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/codegen.h"

namespace kiln::codegen::detail {

// Throws CompileError (stage Codegen).
[[noreturn]] void fail(const std::string& msg);

struct BufInfo {
  llvm::Value* ptr = nullptr;
  ir::DType dtype = ir::DType::F32;
  std::vector<llvm::Value*> shape;  // i64 extents
};

// d(e)/d(var) when e is affine in var with a constant coefficient; nullopt
// when it is not, or when it reads a name whose derivative is unknown.
std::optional<int64_t> derivative(const ir::Expr& e, const std::string& var,
                                  const std::set<std::string>& unknown);

// Whether a loop body is straight-line code a vectorized loop can run per lane.
bool vectorizable_body(const ir::Stmt& s);

class FunctionBuilder {
 public:
  FunctionBuilder(const ir::LoweredFunc& f, const Options& opts, llvm::LLVMContext& ctx,
                  llvm::Module& m)
      : f_(f), opts_(opts), ctx_(ctx), m_(m), b_(ctx) {
    // IEEE order unless the operator allows fast math: then LLVM may
    // reassociate. Either way a * b + c may become one fused multiply-add
    // (LLVM's `contract`), as C compilers do by default.
    llvm::FastMathFlags fmf;
    if (f.fast_math)
      fmf.setFast();
    else
      fmf.setAllowContract(true);
    b_.setFastMathFlags(fmf);
  }

  // Builds f's body function and its entry point in the module.
  void build();

 private:
  // ---------------------------------------------------------------------
  // function_builder.cpp: the function and its entry point, types, names in scope, statements and
  // serial loops

  llvm::Type* reg_type(ir::DType t);
  llvm::Type* mem_type(ir::DType t);
  llvm::Type* vec_of(llvm::Type* t);
  static bool is_vec(llvm::Value* v) { return v->getType()->isVectorTy(); }
  llvm::Value* splat(llvm::Value* v);
  void unify(llvm::Value*& a, llvm::Value*& b);
  // The type t, widened like `like`.
  llvm::Type* like(llvm::Type* t, llvm::Value* like_v);
  llvm::Value* to_i64(llvm::Value* v);
  void decorate(llvm::Function* fn);
  struct Saved {
    std::optional<llvm::Value*> value;
    bool varying = false;
  };
  Saved bind(const std::string& name, llvm::Value* v);
  void restore(const std::string& name, const Saved& s);
  void stmt(const ir::Stmt& s);
  void alloc(const ir::Alloc& n);
  // A codegen CompileError at the first computation s stores (the func when none).
  [[noreturn]] void fail_in(const ir::Stmt& s, const std::string& msg) const;
  // The entry checks of the inputs' value specs: a failing one returns its status at once.
  void input_checks();
  // Records `status` in the kernel's status slot when `bad` (any lane) holds; the first wins.
  // The slot exists when the body can divide by zero or allocates.
  void record_status(llvm::Value* bad, int32_t status);
  // A counted loop: for (v = lo; v < hi; v += step) body(v).
  void counted(llvm::Value* lo, llvm::Value* hi, int64_t step, const std::string& name,
               const std::function<void(llvm::Value*)>& body, llvm::MDNode* loop_md = nullptr);
  // Loop metadata with one hint for LLVM and the loop's name (kLoopNameKey).
  llvm::MDNode* loop_hint(const char* key, const std::string& loop);
  void loop(const ir::For& n);

  // ---------------------------------------------------------------------
  // expressions.cpp: expressions: scalar, or per lane inside a vectorized loop

  llvm::Value* expr(const ir::Expr& e);
  llvm::Value* cast(const ir::Expr& value, ir::DType to);
  llvm::Value* binary(const ir::Binary& n);
  // Integer division and modulo rounding toward negative infinity.
  llvm::Value* floor_div(llvm::Value* a, llvm::Value* b, bool mod);
  // floor_div for n, whose divisor may be 0 or -1: such lanes give 0 and
  // record the status of the computation being stored (checked_status).
  llvm::Value* checked_div(const ir::Binary& n, llvm::Value* a, llvm::Value* b, bool mod);
  // and / or: the right side runs only when it decides the result, if it reads memory.
  llvm::Value* logic(const ir::Binary& n);
  // Evaluates `then` only when cond is `when`; otherwise the result is `other`.
  llvm::Value* branch(llvm::Value* cond, bool when, const std::function<llvm::Value*()>& then,
                      llvm::Value* other);
  llvm::Value* masked(llvm::Value* lane_mask, const std::function<llvm::Value*()>& fn);
  llvm::Value* select(const ir::Select& n);
  llvm::Value* call(const ir::Call& n);

  // ---------------------------------------------------------------------
  // memory_access.cpp: buffers: addresses, loads and stores (gathers and scatters across lanes)

  BufInfo& buffer(const std::string& name);
  // The address of buf[idx] (a vector of addresses when an index varies
  // across lanes). Row-major, one GEP per dimension: LLVM's alias analysis
  // then sees that rows i and i + 1 are a constant distance apart, which a
  // single flattened index hides (and with it the chance to keep a tile of
  // accumulators in registers).
  llvm::Value* element_ptr(BufInfo& buf, const std::vector<ir::Expr>& idx);
  // The address of lane 0's element, and the value of e at lane 0, computed
  // as scalar code.
  llvm::Value* lane0_ptr(BufInfo& buf, const std::vector<ir::Expr>& idx);
  llvm::Value* lane0_value(const ir::Expr& e);
  template <class F>
  llvm::Value* at_lane0(F&& emit);
  llvm::Value* load(const ir::Load& n);
  // Lanes s apart, s from 2 to kMaxShuffledStride, load as one wide masked
  // load of the elements they span, whose lanes every_nth_lane(s) picks out;
  // wider strides gather.
  static constexpr int kMaxShuffledStride = 4;
  llvm::Value* strided_load(llvm::Type* mt, llvm::Value* at, llvm::Align align, int s);
  std::vector<int> every_nth_lane(int s) const;
  // A mask of lanes_ * s elements whose element k * s is lane k's of `on`,
  // the others off: the wide access's elements that the lanes own.
  llvm::Value* spread_mask(llvm::Value* on, int s);
  // A store whose lanes are s elements apart, s from 2 to kMaxStridedStore,
  // in a buffer whose dimensions inside the first that moves are constants
  // (the GEMM's block of A, [MB / MR][KB][MR], stored along KB): one wide
  // masked store of the elements the lanes span, each lane at its place, so
  // the elements between are left as they were. The MR stores of a vector
  // of k fill those elements in turn, in cache, where a scatter would send
  // each lane alone. Wider strides scatter.
  // Only where the target stores under a mask in one fast instruction:
  // AVX-512's mask registers (AVX-512F for 4- and 8-byte elements, BW for
  // smaller). Elsewhere (aarch64, x86-64 without AVX) LLVM breaks the wide
  // store into a branch per element, which made the code twice the
  // scatter's; and AVX2's vmaskmovps is microcode on AMD's Zen 1-4 (42
  // micro-ops, one per 12 cycles in LLVM's Zen 3 and 4 models), where an
  // AVX2 GEMM's A copy (stride 6) would take 6 of them per 8 floats.
  static constexpr int kMaxStridedStore = 8;
  bool stores_under_a_mask(ir::DType t);
  void strided_store(const std::string& name, llvm::Value* v, llvm::Value* at, llvm::Align align,
                     int s);
  // A read of column c (a constant) of lanes_ consecutive rows whose length
  // is lanes_ (Ob[.., x, fi] over lanes x, with fi's extent the vector
  // width): the rows load as lanes_ vectors and a transpose in registers
  // (log2(lanes_) rounds of two-vector shuffles) gives column c. Reads of the
  // other columns of the same rows in the same basic block, with no write to
  // the buffer between, take theirs from the same transpose: 16 loads and 64
  // shuffles for 16 columns where there were 16 gathers. nullptr when the
  // read is not of that form.
  llvm::Value* transposed_column(BufInfo& buf, const std::string& name,
                                 const std::vector<ir::Expr>& idx);
  void store(const ir::Store& n);
  // Tells LLVM which buffer an access touches: kiln's buffers never overlap
  // (arguments are noalias, temps are allocations of their own), so each
  // gets an alias scope and its accesses are noalias with every other's.
  // Inlining and closures (parallel tasks) lose what noalias arguments say;
  // the scopes keep it, so LLVM can keep an accumulator in a register across
  // loads of another temp.
  void mark_buffer(llvm::Instruction* access, const std::string& buf);
  // *at = *at OP v as one atomic step (a Store's `atomic`).
  void atomic_update(ir::BinaryOp op, const std::string& buf, ir::DType t, llvm::Value* at,
                     llvm::Value* v);

  // ---------------------------------------------------------------------
  // vector_lanes.cpp: vectorized loops: lanes, lane-varying lets and the stride of an access

  // A let inside a vectorized loop whose value varies across lanes: its
  // definition, in terms of the lane variable, so that an index using it can
  // still be seen to be contiguous (CSE and LICM introduce such lets).
  std::optional<ir::Expr> define_lane_value(const std::string& name, const ir::Expr& value,
                                            llvm::Value* v);
  void undefine_lane_value(const std::string& name, const std::optional<ir::Expr>& old);
  std::vector<ir::Expr> with_lane_defs(const std::vector<ir::Expr>& idx);
  // How much each index of an access moves per lane; nullopt when one
  // index's move is not a known constant.
  std::optional<std::vector<int64_t>> lane_derivatives(const std::vector<ir::Expr>& raw);
  // How a vectorized access walks memory: 1 = contiguous lanes.
  std::optional<int64_t> lane_stride(const std::vector<ir::Expr>& raw);
  // How far apart buf's elements of two neighbouring lanes lie, when every
  // dimension inside the first that moves has a constant size; nullopt else.
  std::optional<int64_t> flat_lane_stride(const BufInfo& buf, const std::vector<ir::Expr>& raw);
  // Whether lane k of an access reads row k of its last two dimensions: the
  // next-to-last index moves by one per lane and no other index moves.
  bool lanes_walk_rows(const std::vector<ir::Expr>& raw);
  // A vectorized loop of constant extent is vectors of kMaxLanes and one
  // narrower vector for the rest: straight-line code up to
  // kStraightLineLanes, a loop beyond. One whose extent is known only at run
  // time but whose end a constant bounds within kStraightLineLanes (a
  // partial tile's min(64, N - 64 * jr)) is the same vectors up to the
  // bound, each run only when its first lane is in the loop, with the lanes
  // past the end switched off (masked loads and stores). Any other is a loop
  // of kLoopLanes and a scalar loop for the remainder.
  static constexpr int kMaxLanes = 16;
  static constexpr int kStraightLineLanes = 4 * kMaxLanes;
  static constexpr int kLoopLanes = 8;
  void vectorized(const ir::For& n, llvm::Value* lo, llvm::Value* hi);
  // Whole vectors of w lanes from lo while they fit below hi; then, with
  // scalar_rest, the elements left one at a time.
  void vector_loop(const ir::For& n, llvm::Value* lo, llvm::Value* hi, int w, bool scalar_rest);
  // The body once, on lanes v, v + 1, ..., v + w - 1; with `end`, the lanes
  // at or past it are off (lane 0 must be on).
  void vector_body(const ir::For& n, llvm::Value* v, int w, llvm::Value* end = nullptr);
  // Vectors of kMaxLanes (the last narrower) over [from, to) as straight-line
  // code; with `end`, each runs only when its first lane is below end, with
  // its lanes at or past end off.
  void straight_line_vectors(const ir::For& n, int64_t from, int64_t to, llvm::Value* end);

  // ---------------------------------------------------------------------
  // parallel_outline.cpp: parallel loops: the body outlined into a function the runtime calls

  // A parallel loop: its body becomes a function of (begin, end, closure)
  // that the runtime's thread pool calls on chunks of the iterations.
  void parallel(const ir::For& n, llvm::Value* lo, llvm::Value* hi);

  // ---------------------------------------------------------------------
  // State

  const ir::LoweredFunc& f_;
  const Options& opts_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  std::map<std::string, llvm::Value*> vars_;
  std::map<std::string, BufInfo> bufs_;
  int outlined_ = 0;
  // Columns transposed from rows of a buffer (transposed_column), for the
  // reads of the other columns; a write to the buffer forgets them.
  struct Transposed {
    std::string buf;
    // The first row's load: null once erased, so a block freed and another
    // allocated at its address cannot match; its block is where the columns are.
    llvm::WeakVH first_row;
    llvm::Value* rows_at;  // row 0's address at lane 0: which rows
    std::vector<llvm::Value*> columns;
  };
  std::vector<Transposed> transposed_;

  // Vectorization state: lanes_ > 0 inside a vectorized loop over lane_var_.
  int lanes_ = 0;
  std::string lane_var_;
  llvm::Value* lane_base_ = nullptr;
  std::set<std::string> varying_;
  llvm::Value* mask_ = nullptr;
  // The lanes a vectorized loop's end leaves on in its last, partial vector
  // (lane 0 always is), or null; mask_ includes them. Stores honour it.
  llvm::Value* tail_mask_ = nullptr;
  std::map<std::string, ir::Expr> lane_defs_;  // varying integer lets, by definition
  // The computation whose Store is being built: whose check a division records.
  std::string storing_;
  // Copies of the current statement that unroll_explicit loops around it make.
  int64_t unrolled_ = 1;
  // Whether the vector body being built stored by strided_store: its loop is
  // then kept a loop (vector_loop).
  bool strided_stores_ = false;
  // mark_buffer's scopes, one per buffer name (arguments and every Alloc),
  // and for each name the list of all the others'.
  std::map<std::string, llvm::MDNode*> scope_of_, others_of_;
};

// The name under which the status slot (an i32 the kernel returns) is in
// scope: it travels into parallel tasks with the other values. No .kiln name
// can clash with it.
inline constexpr const char* kStatusSlot = "@status";

// Whether s allocates a temporary (whose allocation can fail).
bool has_alloc(const ir::Stmt& s);

}  // namespace kiln::codegen::detail
