// FunctionBuilder's vectorized loops: lanes, lets that vary across lanes, and the
// stride of an access, from the derivative of its index in the lane variable.
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/ConstantRange.h>

#include "function_builder.h"

namespace kiln::codegen::detail {

// d(e)/d(var) when e is affine in var with a constant coefficient; nullopt
// when it is not, or when it reads a name whose derivative is unknown.
std::optional<int64_t> derivative(const ir::Expr& e, const std::string& var,
                                  const std::set<std::string>& unknown) {
  if (ir::as<ir::IntImm>(e)) return 0;
  if (auto* v = ir::as<ir::Var>(e)) {
    if (v->name == var) return 1;
    if (unknown.count(v->name)) return std::nullopt;
    return 0;
  }
  if (auto* c = ir::as<ir::Cast>(e)) {
    if (!ir::is_int(c->type) || !ir::is_int(c->value->type)) return std::nullopt;
    return derivative(c->value, var, unknown);
  }
  if (auto* u = ir::as<ir::Unary>(e)) {
    auto d = derivative(u->a, var, unknown);
    if (!d || u->op != ir::UnaryOp::Neg) return std::nullopt;
    return -*d;
  }
  if (auto* b = ir::as<ir::Binary>(e)) {
    auto da = derivative(b->a, var, unknown), db = derivative(b->b, var, unknown);
    if (!da || !db) return std::nullopt;
    switch (b->op) {
      case ir::BinaryOp::Add:
        return *da + *db;
      case ir::BinaryOp::Sub:
        return *da - *db;
      case ir::BinaryOp::Mul: {
        auto* ca = ir::as<ir::IntImm>(b->a);
        auto* cb = ir::as<ir::IntImm>(b->b);
        if (cb) return *da * cb->value;
        if (ca) return *db * ca->value;
        if (*da == 0 && *db == 0) return 0;
        return std::nullopt;
      }
      default:
        if (*da == 0 && *db == 0) return 0;
        return std::nullopt;
    }
  }
  // Loads, selects, calls: uniform only if nothing below varies.
  struct Uses : ir::IRVisitor {
    const std::string* var;
    const std::set<std::string>* unknown;
    bool uses = false;
    void visit_var(const ir::Var& v) override {
      if (v.name == *var || unknown->count(v.name)) uses = true;
    }
  } uses;
  uses.var = &var;
  uses.unknown = &unknown;
  uses.visit(e);
  if (uses.uses) return std::nullopt;
  return 0;
}

std::optional<ir::Expr> FunctionBuilder::define_lane_value(const std::string& name,
                                                           const ir::Expr& value, llvm::Value* v) {
  std::optional<ir::Expr> old;
  auto it = lane_defs_.find(name);
  if (it != lane_defs_.end()) old = it->second;
  if (lanes_ && is_vec(v) && ir::is_int(value->type))
    lane_defs_[name] = ir::substitute(value, lane_defs_);
  else
    lane_defs_.erase(name);
  return old;
}

void FunctionBuilder::undefine_lane_value(const std::string& name,
                                          const std::optional<ir::Expr>& old) {
  if (old)
    lane_defs_[name] = *old;
  else
    lane_defs_.erase(name);
}

std::vector<ir::Expr> FunctionBuilder::with_lane_defs(const std::vector<ir::Expr>& idx) {
  if (lane_defs_.empty()) return idx;
  std::vector<ir::Expr> out;
  for (const auto& e : idx) out.push_back(ir::substitute(e, lane_defs_));
  return out;
}

std::optional<std::vector<int64_t>> FunctionBuilder::lane_derivatives(
    const std::vector<ir::Expr>& raw) {
  std::vector<ir::Expr> idx = with_lane_defs(raw);
  std::set<std::string> unknown = varying_;
  unknown.erase(lane_var_);
  for (const auto& [name, def] : lane_defs_) unknown.erase(name);
  std::vector<int64_t> out;
  for (const ir::Expr& e : idx) {
    auto d = derivative(e, lane_var_, unknown);
    if (!d) return std::nullopt;
    out.push_back(*d);
  }
  return out;
}

std::optional<int64_t> FunctionBuilder::lane_stride(const std::vector<ir::Expr>& raw) {
  if (!lanes_) return std::nullopt;
  auto d = lane_derivatives(raw);
  if (!d) return std::nullopt;
  if (d->empty()) return 0;
  for (size_t k = 0; k + 1 < d->size(); ++k)
    if ((*d)[k] != 0) return std::nullopt;
  return d->back();
}

std::optional<int64_t> FunctionBuilder::flat_lane_stride(const BufInfo& buf,
                                                         const std::vector<ir::Expr>& raw) {
  if (!lanes_) return std::nullopt;
  auto d = lane_derivatives(raw);
  if (!d || d->size() != buf.shape.size()) return std::nullopt;
  size_t first = 0;
  while (first < d->size() && (*d)[first] == 0) ++first;
  if (first == d->size()) return 0;
  // stride = sum over k >= first of d[k] * (the elements of one step of k).
  int64_t stride = 0, step = 1;
  for (size_t k = d->size(); k-- > first;) {
    int64_t move = 0;
    if (__builtin_mul_overflow((*d)[k], step, &move) ||
        __builtin_add_overflow(stride, move, &stride))
      return std::nullopt;
    if (k == first) break;
    auto* size = llvm::dyn_cast<llvm::ConstantInt>(buf.shape[k]);
    if (!size || __builtin_mul_overflow(step, size->getSExtValue(), &step)) return std::nullopt;
  }
  return stride;
}

bool FunctionBuilder::lanes_walk_rows(const std::vector<ir::Expr>& raw) {
  if (!lanes_ || raw.size() < 2) return false;
  auto d = lane_derivatives(raw);
  if (!d) return false;
  for (size_t k = 0; k < d->size(); ++k)
    if ((*d)[k] != (k + 2 == d->size() ? 1 : 0)) return false;
  return true;
}

void FunctionBuilder::vector_body(const ir::For& n, llvm::Value* v, int w, llvm::Value* end) {
  lanes_ = w;
  lane_var_ = n.var;
  lane_base_ = v;
  std::vector<llvm::Constant*> steps;
  for (int k = 0; k < w; ++k) steps.push_back(b_.getInt64(static_cast<uint64_t>(k)));
  llvm::Value* lanes = b_.CreateAdd(b_.CreateVectorSplat(static_cast<unsigned>(w), v),
                                    llvm::ConstantVector::get(steps), n.var);
  llvm::Value* saved_mask = mask_;
  if (end) {
    tail_mask_ =
        b_.CreateICmpSLT(lanes, b_.CreateVectorSplat(static_cast<unsigned>(w), end), n.var + ".on");
    mask_ = tail_mask_;
  }
  auto saved = bind(n.var, lanes);
  stmt(n.body);
  restore(n.var, saved);
  lanes_ = 0;
  lane_var_.clear();
  lane_base_ = nullptr;
  tail_mask_ = nullptr;
  mask_ = saved_mask;
}

void FunctionBuilder::straight_line_vectors(const ir::For& n, int64_t from, int64_t to,
                                            llvm::Value* end) {
  for (int64_t at = from; at < to; at += kMaxLanes) {
    llvm::Value* first = b_.getInt64(static_cast<uint64_t>(at));
    int w = static_cast<int>(std::min<int64_t>(kMaxLanes, to - at));
    if (!end) {
      vector_body(n, first, w);
      continue;
    }
    auto* on = llvm::BasicBlock::Create(ctx_, n.var + ".part", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, n.var + ".part.end", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(first, end), on, done);
    b_.SetInsertPoint(on);
    vector_body(n, first, w, end);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
}

void FunctionBuilder::vectorized(const ir::For& n, llvm::Value* lo, llvm::Value* hi) {
  auto* a = ir::as<ir::IntImm>(n.min);
  auto* b = ir::as<ir::IntImm>(n.end);
  if (a && !b) {
    // An end a constant bounds: vectors up to the bound, each under "its
    // first lane is in the loop", its lanes past the end off.
    llvm::ConstantRange ends = llvm::computeConstantRange(hi, /*ForSigned=*/true);
    if (!ends.isFullSet() && !ends.isEmptySet() &&
        ends.getSignedMax().sle(a->value + kStraightLineLanes))
      return straight_line_vectors(n, a->value, ends.getSignedMax().getSExtValue(), hi);
  }
  if (!a || !b) return vector_loop(n, lo, hi, kLoopLanes, /*scalar_rest=*/true);
  int64_t extent = b->value - a->value;
  // A few vectors (the last one narrower when kMaxLanes does not divide the
  // extent) and no loop at all, so the loops around them see straight-line
  // code and LLVM keeps a register tile's accumulators in registers: a GEMM's
  // partial tile of 40 columns is 16 + 16 + 8 lanes.
  if (extent <= kStraightLineLanes) return straight_line_vectors(n, a->value, b->value, nullptr);
  // Whole vectors in a loop, then the rest, whose size is known, as one
  // narrower vector.
  int64_t rest = extent % kMaxLanes;
  llvm::Value* whole_end = b_.getInt64(b->value - rest);
  vector_loop(n, lo, whole_end, kMaxLanes, /*scalar_rest=*/false);
  if (rest != 0) vector_body(n, whole_end, static_cast<int>(rest));
}

void FunctionBuilder::vector_loop(const ir::For& n, llvm::Value* lo, llvm::Value* hi, int w,
                                  bool scalar_rest) {
  // Whole vectors while v + w <= hi.
  llvm::Value* last = b_.CreateSub(hi, b_.getInt64(w - 1));
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* head = llvm::BasicBlock::Create(ctx_, n.var + ".vhead", fn_);
  auto* inside = llvm::BasicBlock::Create(ctx_, n.var + ".vbody", fn_);
  auto* tail = llvm::BasicBlock::Create(ctx_, n.var + ".tail", fn_);
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  llvm::PHINode* v = b_.CreatePHI(b_.getInt64Ty(), 2, n.var + ".v");
  v->addIncoming(lo, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(v, last), inside, tail);
  b_.SetInsertPoint(inside);
  strided_stores_ = false;
  vector_body(n, v, w);
  llvm::Value* next = b_.CreateAdd(v, b_.getInt64(w), "", false, true);
  llvm::BranchInst* back = b_.CreateBr(head);
  // A body of wide masked stores stays one loop: LLVM unrolled the 8 vectors
  // of the GEMM's A copy fully, and its instruction selection over the 8
  // copies of each store took 7 ms of a 55 ms compile, for no speed.
  if (strided_stores_)
    back->setMetadata(llvm::LLVMContext::MD_loop, loop_hint("llvm.loop.unroll.disable", n.var));
  v->addIncoming(next, b_.GetInsertBlock());
  b_.SetInsertPoint(tail);
  if (!scalar_rest) return;
  // The remainder, one element at a time.
  counted(v, hi, 1, n.var + ".rest", [&](llvm::Value* x) {
    auto saved = bind(n.var, x);
    stmt(n.body);
    restore(n.var, saved);
  });
}

}  // namespace kiln::codegen::detail
