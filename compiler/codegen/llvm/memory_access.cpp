// FunctionBuilder's buffers: element addresses, loads and stores; contiguous lanes
// become vector loads and stores, others gathers and scatters.
#include <llvm/IR/MDBuilder.h>

#include <set>

#include "function_builder.h"

namespace kiln::codegen::detail {

namespace {

// Whether a and b compute the same value: the same value, or identical
// instructions (no memory reads) of operands that are, a few levels deep
// (an address: a GEP per dimension over its index arithmetic).
bool same_value(llvm::Value* a, llvm::Value* b, int depth = 16) {
  if (a == b) return true;
  auto* i = llvm::dyn_cast<llvm::Instruction>(a);
  auto* j = llvm::dyn_cast<llvm::Instruction>(b);
  if (!i || !j || depth == 0 || i->mayReadOrWriteMemory() || llvm::isa<llvm::PHINode>(i) ||
      !i->isSameOperationAs(j) || i->getNumOperands() != j->getNumOperands())
    return false;
  for (unsigned k = 0; k < i->getNumOperands(); ++k)
    if (!same_value(i->getOperand(k), j->getOperand(k), depth - 1)) return false;
  return true;
}

}  // namespace

BufInfo& FunctionBuilder::buffer(const std::string& name) {
  auto it = bufs_.find(name);
  if (it == bufs_.end()) fail("unknown buffer '" + name + "' in " + f_.name);
  return it->second;
}

llvm::Value* FunctionBuilder::element_ptr(BufInfo& buf, const std::vector<ir::Expr>& idx) {
  if (idx.size() != buf.shape.size()) fail("wrong number of indices for a buffer");
  llvm::Type* mt = mem_type(buf.dtype);
  llvm::Value* p = buf.ptr;
  for (size_t k = 0; k < idx.size(); ++k) {
    llvm::Value* stride = b_.getInt64(1);
    for (size_t d = k + 1; d < idx.size(); ++d)
      stride = b_.CreateMul(stride, buf.shape[d], "", /*HasNUW=*/false, /*HasNSW=*/true);
    llvm::Value* i = to_i64(expr(idx[k]));
    llvm::Value* off = i;
    if (k + 1 < idx.size()) {
      llvm::Value* st = stride;
      unify(off, st);
      off = b_.CreateMul(off, st, "", false, true);
    }
    p = b_.CreateInBoundsGEP(mt, p, off);
  }
  return p;
}

template <class F>
llvm::Value* FunctionBuilder::at_lane0(F&& emit) {
  int saved = lanes_;
  llvm::Value* saved_var = vars_[lane_var_];
  lanes_ = 0;
  vars_[lane_var_] = lane_base_;
  llvm::Value* v = emit();
  vars_[lane_var_] = saved_var;
  lanes_ = saved;
  return v;
}

llvm::Value* FunctionBuilder::lane0_ptr(BufInfo& buf, const std::vector<ir::Expr>& idx) {
  return at_lane0([&] { return element_ptr(buf, with_lane_defs(idx)); });
}

llvm::Value* FunctionBuilder::lane0_value(const ir::Expr& e) {
  return at_lane0([&] { return expr(with_lane_defs({e}).front()); });
}

void FunctionBuilder::mark_buffer(llvm::Instruction* access, const std::string& buf) {
  if (scope_of_.empty()) {
    // Every buffer name of the function, in one domain.
    std::set<std::string> names;
    for (const auto& a : f_.args) names.insert(a.name);
    struct Allocs : ir::StmtVisitor {
      std::set<std::string>* names;
      void visit_alloc(const ir::Alloc& n) override {
        names->insert(n.buf);
        ir::StmtVisitor::visit_alloc(n);
      }
    } allocs;
    allocs.names = &names;
    allocs.visit(f_.body);
    llvm::MDBuilder md(ctx_);
    llvm::MDNode* domain = md.createAnonymousAliasScopeDomain(f_.name);
    std::map<std::string, llvm::Metadata*> scopes;
    for (const auto& name : names) {
      llvm::MDNode* scope = md.createAnonymousAliasScope(domain, name);
      scopes[name] = scope;
      scope_of_[name] = llvm::MDNode::get(ctx_, {scope});
    }
    for (const auto& name : names) {
      std::vector<llvm::Metadata*> rest;
      for (const auto& [other, scope] : scopes)
        if (other != name) rest.push_back(scope);
      others_of_[name] = llvm::MDNode::get(ctx_, rest);
    }
  }
  // Columns transposed from buf before a write to it are stale after it.
  if (access->mayWriteToMemory())
    std::erase_if(transposed_, [&](const Transposed& t) { return t.buf == buf; });
  auto scope = scope_of_.find(buf);
  if (scope == scope_of_.end()) return;  // unknown to the walk: LLVM assumes the worst
  access->setMetadata(llvm::LLVMContext::MD_alias_scope, scope->second);
  access->setMetadata(llvm::LLVMContext::MD_noalias, others_of_.at(buf));
}

llvm::Value* FunctionBuilder::load(const ir::Load& n) {
  BufInfo& buf = buffer(n.buf);
  llvm::Type* mt = mem_type(buf.dtype);
  llvm::Align align(ir::dtype_bytes(buf.dtype));
  auto stride = lane_stride(n.indices);
  llvm::Value* v = nullptr;
  auto marked = [&](llvm::Value* access) {
    mark_buffer(llvm::cast<llvm::Instruction>(access), n.buf);
    return access;
  };
  if (lanes_ && stride && *stride == 0) {
    // Uniform across lanes; under a mask, guard the scalar load by "any lane"
    // (a partial vector's lane 0 is always on).
    llvm::Value* at = lane0_ptr(buf, n.indices);
    if (mask_ && mask_ != tail_mask_) {
      llvm::Value* any = b_.CreateOrReduce(mask_);
      v = branch(
          any, true, [&] { return marked(b_.CreateLoad(mt, at)); },
          llvm::Constant::getNullValue(mt));
    } else {
      v = marked(b_.CreateLoad(mt, at));
    }
  } else if (lanes_ && stride && *stride == 1) {
    llvm::Value* at = lane0_ptr(buf, n.indices);
    llvm::Type* vt = vec_of(mt);
    if (mask_)
      v = marked(b_.CreateMaskedLoad(vt, at, align, mask_, llvm::Constant::getNullValue(vt)));
    else
      v = marked(b_.CreateAlignedLoad(vt, at, align));
  } else if (lanes_ && stride && *stride >= 2 && *stride <= kMaxShuffledStride) {
    v = marked(strided_load(mt, lane0_ptr(buf, n.indices), align, static_cast<int>(*stride)));
    v = b_.CreateShuffleVector(v, every_nth_lane(static_cast<int>(*stride)));
  } else if (llvm::Value* column = mask_ ? nullptr : transposed_column(buf, n.buf, n.indices)) {
    v = column;
  } else {
    llvm::Value* at = element_ptr(buf, n.indices);
    if (is_vec(at)) {
      llvm::Value* ptrs = at;
      llvm::Type* vt = vec_of(mt);
      llvm::Value* m = mask_ ? mask_ : llvm::Constant::getAllOnesValue(vec_of(b_.getInt1Ty()));
      v = marked(b_.CreateMaskedGather(vt, ptrs, align, m, llvm::Constant::getNullValue(vt)));
    } else if (mask_) {
      llvm::Value* any = b_.CreateOrReduce(mask_);
      v = branch(
          any, true, [&] { return marked(b_.CreateLoad(mt, at)); },
          llvm::Constant::getNullValue(mt));
    } else {
      v = marked(b_.CreateAlignedLoad(mt, at, align));
    }
  }
  if (buf.dtype == ir::DType::Bool)
    v = b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
  return v;
}

llvm::Value* FunctionBuilder::transposed_column(BufInfo& buf, const std::string& name,
                                                const std::vector<ir::Expr>& idx) {
  const int n = lanes_;
  if (n < 2 || (n & (n - 1)) != 0 || !lanes_walk_rows(idx)) return nullptr;
  auto* row_length = llvm::dyn_cast<llvm::ConstantInt>(buf.shape.back());
  if (!row_length || row_length->getSExtValue() != n) return nullptr;
  // The column, the same for every lane (the last index does not move).
  auto* column = llvm::dyn_cast<llvm::ConstantInt>(lane0_value(idx.back()));
  if (!column || column->getSExtValue() < 0 || column->getSExtValue() >= n) return nullptr;
  const int64_t c = column->getSExtValue();
  std::vector<ir::Expr> row0 = idx;
  row0.back() = ir::int_imm(0);
  llvm::Value* at = lane0_ptr(buf, row0);
  for (const Transposed& t : transposed_)
    if (t.buf == name && t.first_row &&
        llvm::cast<llvm::Instruction>(t.first_row)->getParent() == b_.GetInsertBlock() &&
        same_value(t.rows_at, at))
      return t.columns[c];
  llvm::Type* mt = mem_type(buf.dtype);
  llvm::Type* vt = vec_of(mt);
  llvm::Align align(ir::dtype_bytes(buf.dtype));
  std::vector<llvm::Value*> rows;
  llvm::Instruction* first_row = nullptr;
  for (int r = 0; r < n; ++r) {
    llvm::Value* p = b_.CreateInBoundsGEP(mt, at, b_.getInt64(static_cast<uint64_t>(r * n)));
    auto* row = b_.CreateAlignedLoad(vt, p, align);
    mark_buffer(row, name);
    if (r == 0) first_row = row;
    rows.push_back(row);
  }
  // Round j swaps bit j of the row with bit j of the column: rows r and
  // r + 2^j (bit j of r clear) exchange the elements whose column has bit j
  // set in r and clear in r + 2^j.
  for (int half = 1; half < n; half *= 2) {
    std::vector<int> low(n), high(n);
    for (int col = 0; col < n; ++col) {
      bool set = (col & half) != 0;
      low[col] = set ? n + col - half : col;
      high[col] = set ? n + col : col + half;
    }
    for (int r = 0; r < n; ++r) {
      if (r & half) continue;
      llvm::Value* a = rows[r];
      llvm::Value* b = rows[r + half];
      rows[r] = b_.CreateShuffleVector(a, b, low);
      rows[r + half] = b_.CreateShuffleVector(a, b, high);
    }
  }
  transposed_.push_back({name, llvm::WeakVH(first_row), at, rows});
  return rows[c];
}

// Lanes k * s of a vector of lanes_ * s.
std::vector<int> FunctionBuilder::every_nth_lane(int s) const {
  std::vector<int> lanes;
  for (int k = 0; k < lanes_; ++k) lanes.push_back(k * s);
  return lanes;
}

// The elements from lane 0's to the last lane's, s apart, as one masked
// vector load of lanes_ * s elements: the elements past the last lane's, and
// under a mask those between and at the masked-off lanes, are not read, so the
// load can fault no more than a gather would. Two or three contiguous loads and
// a shuffle cost a fraction of a gather (the 7x7 stride-2 conv's input rows).
llvm::Value* FunctionBuilder::strided_load(llvm::Type* mt, llvm::Value* at, llvm::Align align,
                                           int s) {
  auto* wide = llvm::FixedVectorType::get(mt, static_cast<unsigned>(lanes_ * s));
  llvm::Value* read = nullptr;
  if (mask_) {
    read = spread_mask(mask_, s);
  } else {
    std::vector<llvm::Constant*> on;
    for (int j = 0; j < lanes_ * s; ++j) on.push_back(b_.getInt1(j <= (lanes_ - 1) * s));
    read = llvm::ConstantVector::get(on);
  }
  return b_.CreateMaskedLoad(wide, at, align, read, llvm::PoisonValue::get(wide));
}

bool FunctionBuilder::stores_under_a_mask(ir::DType t) {
  return target_has_feature(opts_.target, ir::dtype_bytes(t) >= 4 ? "avx512f" : "avx512bw");
}

void FunctionBuilder::strided_store(const std::string& name, llvm::Value* v, llvm::Value* at,
                                    llvm::Align align, int s) {
  strided_stores_ = true;
  // Element j of the wide store is lane j / s's when j is a multiple of s and
  // that lane is on; the others are not written.
  std::vector<int> spread;
  for (int j = 0; j < lanes_ * s; ++j) spread.push_back(j % s == 0 ? j / s : -1);
  llvm::Value* spread_v = b_.CreateShuffleVector(v, spread);
  llvm::Value* on =
      tail_mask_ ? tail_mask_ : llvm::Constant::getAllOnesValue(vec_of(b_.getInt1Ty()));
  mark_buffer(b_.CreateMaskedStore(spread_v, at, align, spread_mask(on, s)), name);
}

llvm::Value* FunctionBuilder::spread_mask(llvm::Value* on, int s) {
  std::vector<int> lane_of;
  for (int j = 0; j < lanes_ * s; ++j) lane_of.push_back(j % s == 0 ? j / s : lanes_);
  return b_.CreateShuffleVector(on, llvm::Constant::getNullValue(on->getType()), lane_of);
}

void FunctionBuilder::atomic_update(ir::BinaryOp op, const std::string& buf, ir::DType t,
                                    llvm::Value* at, llvm::Value* v) {
  using RMW = llvm::AtomicRMWInst::BinOp;
  bool fp = ir::is_float(t);
  llvm::Align align(ir::dtype_bytes(t));
  auto ordering = llvm::AtomicOrdering::Monotonic;  // the launch's join orders the rest
  std::optional<RMW> rmw;
  switch (op) {
    case ir::BinaryOp::Add:
      rmw = fp ? RMW::FAdd : RMW::Add;
      break;
    case ir::BinaryOp::Sub:
      rmw = fp ? RMW::FSub : RMW::Sub;
      break;
    case ir::BinaryOp::Max:
      rmw = fp ? RMW::FMax : RMW::Max;
      break;
    case ir::BinaryOp::Min:
      rmw = fp ? RMW::FMin : RMW::Min;
      break;
    default:
      break;
  }
  if (rmw) {
    mark_buffer(b_.CreateAtomicRMW(*rmw, at, v, align, ordering), buf);
    return;
  }
  if (op != ir::BinaryOp::Mul) fail("an atomic update by an operator other than + - * min max");
  // old * v, swapped in when the element still holds old; else again with
  // what it holds now. On the bits, as cmpxchg takes integers.
  llvm::Type* vt = v->getType();
  llvm::Type* bits = b_.getIntNTy(static_cast<unsigned>(8 * ir::dtype_bytes(t)));
  llvm::BasicBlock* entry = b_.GetInsertBlock();
  llvm::BasicBlock* retry = llvm::BasicBlock::Create(ctx_, "atomic.retry", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "atomic.done", fn_);
  llvm::LoadInst* first = b_.CreateAlignedLoad(bits, at, align);
  first->setAtomic(ordering);
  mark_buffer(first, buf);
  b_.CreateBr(retry);
  b_.SetInsertPoint(retry);
  llvm::PHINode* old = b_.CreatePHI(bits, 2);
  old->addIncoming(first, entry);
  llvm::Value* prod = fp ? b_.CreateFMul(b_.CreateBitCast(old, vt), v) : b_.CreateMul(old, v);
  llvm::AtomicCmpXchgInst* pair = b_.CreateAtomicCmpXchg(
      at, old, fp ? b_.CreateBitCast(prod, bits) : prod, align, ordering, ordering);
  mark_buffer(pair, buf);
  old->addIncoming(b_.CreateExtractValue(pair, 0), retry);
  b_.CreateCondBr(b_.CreateExtractValue(pair, 1), done, retry);
  b_.SetInsertPoint(done);
}

void FunctionBuilder::store(const ir::Store& n) {
  BufInfo& buf = buffer(n.buf);
  llvm::Align align(ir::dtype_bytes(buf.dtype));
  std::string outer = storing_;
  storing_ = n.comp;
  llvm::Value* v = expr(n.value);
  storing_ = outer;
  if (n.atomic) {
    // Lane by lane inside a vectorized loop: each lane's update is one
    // atomic step, whatever element the others update.
    llvm::Value* at = element_ptr(buf, n.indices);
    if (!is_vec(at) && !is_vec(v)) return atomic_update(*n.atomic, n.buf, buf.dtype, at, v);
    for (int l = 0; l < lanes_; ++l) {
      llvm::Value* lane_at = is_vec(at) ? b_.CreateExtractElement(at, b_.getInt32(l)) : at;
      llvm::Value* lane_v = is_vec(v) ? b_.CreateExtractElement(v, b_.getInt32(l)) : v;
      if (!tail_mask_ || l == 0) {
        atomic_update(*n.atomic, n.buf, buf.dtype, lane_at, lane_v);
        continue;
      }
      // A lane of a partial vector: only if it is on.
      auto* on = llvm::BasicBlock::Create(ctx_, "lane.on", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "lane.done", fn_);
      b_.CreateCondBr(b_.CreateExtractElement(tail_mask_, b_.getInt32(l)), on, done);
      b_.SetInsertPoint(on);
      atomic_update(*n.atomic, n.buf, buf.dtype, lane_at, lane_v);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    }
    return;
  }
  auto to_mem = [&](llvm::Value* x) {
    return buf.dtype == ir::DType::Bool ? b_.CreateZExt(x, like(b_.getInt8Ty(), x)) : x;
  };
  auto stride = lane_stride(n.indices);
  if (lanes_ && stride && *stride == 1) {
    llvm::Value* at = lane0_ptr(buf, n.indices);
    if (tail_mask_)
      mark_buffer(b_.CreateMaskedStore(to_mem(splat(v)), at, align, tail_mask_), n.buf);
    else
      mark_buffer(b_.CreateAlignedStore(to_mem(splat(v)), at, align), n.buf);
    return;
  }
  if (auto flat = lanes_ ? flat_lane_stride(buf, n.indices) : std::nullopt;
      flat && *flat >= 2 && *flat <= kMaxStridedStore && stores_under_a_mask(buf.dtype)) {
    strided_store(n.buf, to_mem(splat(v)), lane0_ptr(buf, n.indices), align,
                  static_cast<int>(*flat));
    return;
  }
  llvm::Value* at = element_ptr(buf, n.indices);
  if (is_vec(at)) {
    llvm::Value* ptrs = at;
    llvm::Value* on =
        tail_mask_ ? tail_mask_ : llvm::Constant::getAllOnesValue(vec_of(b_.getInt1Ty()));
    mark_buffer(b_.CreateMaskedScatter(to_mem(splat(v)), ptrs, align, on), n.buf);
    return;
  }
  if (is_vec(v))
    fail("vectorized loop '" + lane_var_ + "' stores different lanes to one element of '" + n.buf +
         "'");
  mark_buffer(b_.CreateAlignedStore(to_mem(v), at, align), n.buf);
}

}  // namespace kiln::codegen::detail
