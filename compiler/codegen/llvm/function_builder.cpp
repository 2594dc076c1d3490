// FunctionBuilder: the function and its packed entry point, LLVM types, names in
// scope, statements and serial loops.
#include "function_builder.h"

#include <llvm/IR/MDBuilder.h>

#include "kiln/analysis.h"
#include "module_builder.h"
#include "target_machine.h"

namespace kiln::codegen::detail {

static_assert(ir::kStatusCheckBase == KILN_ERR_CHECK && ir::kStatusArith == KILN_ERR_ARITH,
              "the compiler's kernel statuses are the runtime's");

[[noreturn]] void fail(const std::string& msg) { throw CompileError(ErrorStage::Codegen, {}, msg); }

bool vectorizable_body(const ir::Stmt& s) {
  if (!s) return true;
  if (ir::as<ir::Store>(s) || ir::as<ir::Evaluate>(s)) return true;
  if (auto* l = ir::as<ir::LetStmt>(s)) return vectorizable_body(l->body);
  if (auto* b = ir::as<ir::Block>(s)) {
    for (const auto& x : b->stmts)
      if (!vectorizable_body(x)) return false;
    return true;
  }
  return false;
}

void FunctionBuilder::build() {
  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Type* ptr = b_.getPtrTy();
  // The body: params and noalias buffer pointers.
  std::vector<llvm::Type*> types;
  for (size_t k = 0; k < f_.params.size(); ++k) types.push_back(i64);
  for (size_t k = 0; k < f_.args.size(); ++k) types.push_back(ptr);
  auto* body_ty = llvm::FunctionType::get(b_.getInt32Ty(), types, false);
  llvm::Function* body = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage,
                                                entry_symbol(f_) + "_body", m_);
  decorate(body);
  body->addFnAttr(llvm::Attribute::AlwaysInline);
  for (size_t k = 0; k < f_.args.size(); ++k) {
    unsigned a = static_cast<unsigned>(f_.params.size() + k);
    body->addParamAttr(a, llvm::Attribute::NoAlias);
    body->addParamAttr(
        a, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(ir::dtype_bytes(f_.args[k].dtype))));
  }
  fn_ = body;
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", body));
  for (size_t k = 0; k < f_.params.size(); ++k) {
    body->getArg(static_cast<unsigned>(k))->setName(f_.params[k]);
    vars_[f_.params[k]] = body->getArg(static_cast<unsigned>(k));
  }
  for (size_t k = 0; k < f_.args.size(); ++k) {
    llvm::Value* p = body->getArg(static_cast<unsigned>(f_.params.size() + k));
    p->setName(f_.args[k].name);
    BufInfo info{p, f_.args[k].dtype, {}};
    for (const auto& e : f_.args[k].shape) info.shape.push_back(to_i64(expr(e)));
    bufs_[f_.args[k].name] = info;
  }
  input_checks();
  llvm::Value* status = nullptr;
  if (ir::may_trap(f_.body) || has_alloc(f_.body)) {
    llvm::IRBuilder<> at_entry(&body->getEntryBlock(), body->getEntryBlock().begin());
    status = at_entry.CreateAlloca(b_.getInt32Ty(), nullptr, "status");
    b_.CreateStore(b_.getInt32(0), status);
    vars_[kStatusSlot] = status;
  }
  stmt(f_.body);
  b_.CreateRet(status ? static_cast<llvm::Value*>(b_.CreateLoad(b_.getInt32Ty(), status))
                      : b_.getInt32(0));

  // The entry point: unpack kiln_value args, check their count, call the body.
  auto* entry_ty = llvm::FunctionType::get(b_.getInt32Ty(), {ptr, b_.getInt32Ty()}, false);
  llvm::Function* entry =
      llvm::Function::Create(entry_ty, llvm::Function::ExternalLinkage, entry_symbol(f_), m_);
  decorate(entry);
  fn_ = entry;
  llvm::Value* args = entry->getArg(0);
  args->setName("args");
  entry->getArg(1)->setName("nargs");
  auto* start = llvm::BasicBlock::Create(ctx_, "entry", entry);
  auto* bad = llvm::BasicBlock::Create(ctx_, "bad_args", entry);
  auto* good = llvm::BasicBlock::Create(ctx_, "call", entry);
  b_.SetInsertPoint(start);
  int32_t expected = static_cast<int32_t>(f_.params.size() + f_.args.size());
  b_.CreateCondBr(b_.CreateICmpEQ(entry->getArg(1), b_.getInt32(expected)), good, bad);
  b_.SetInsertPoint(bad);
  b_.CreateRet(b_.getInt32(1));  // KILN_ERR_ARGS
  b_.SetInsertPoint(good);
  std::vector<llvm::Value*> call_args;
  for (int32_t k = 0; k < expected; ++k) {
    llvm::Value* slot = b_.CreateConstInBoundsGEP1_64(i64, args, static_cast<uint64_t>(k));
    call_args.push_back(
        b_.CreateLoad(k < static_cast<int32_t>(f_.params.size()) ? i64 : ptr, slot));
  }
  b_.CreateRet(b_.CreateCall(body, call_args));
}

bool has_alloc(const ir::Stmt& s) {
  struct Finder : ir::StmtVisitor {
    bool found = false;
    void visit_alloc(const ir::Alloc& n) override {
      found = true;
      ir::StmtVisitor::visit_alloc(n);
    }
  } f;
  f.visit(s);
  return f.found;
}

void FunctionBuilder::input_checks() {
  for (size_t k = 0; k < f_.checks.size(); ++k) {
    const ir::RuntimeCheck& check = f_.checks[k];
    if (check.kind != ir::RuntimeCheck::Kind::InputSpec) continue;
    const ir::Buf* arg = nullptr;
    for (const auto& a : f_.args)
      if (a.name == check.subject) arg = &a;
    if (!arg || !ir::is_int(arg->dtype))
      fail("input check of unknown integer input " + check.subject);
    BufInfo& buf = buffer(arg->name);
    llvm::Value* count = b_.getInt64(1);
    for (llvm::Value* e : buf.shape) count = b_.CreateMul(count, e);
    llvm::Value* lo = check.lo ? to_i64(expr(check.lo)) : nullptr;
    llvm::Value* hi = check.hi ? to_i64(expr(check.hi)) : nullptr;
    int32_t code = ir::kStatusCheckBase + static_cast<int32_t>(k);
    auto* failed = llvm::BasicBlock::Create(ctx_, check.subject + ".bad", fn_);
    llvm::Type* elem = mem_type(arg->dtype);
    // Blocks of elements, each checked without a branch (a loop LLVM can
    // vectorize), then one branch per block.
    constexpr int64_t kBlock = 4096;
    llvm::IRBuilder<> at_entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::Value* any_bad = at_entry.CreateAlloca(b_.getInt1Ty(), nullptr, check.subject + ".any");
    auto block = [&](llvm::Value* from) {
      llvm::Value* to = b_.CreateAdd(from, b_.getInt64(kBlock));
      to = b_.CreateSelect(b_.CreateICmpSLT(to, count), to, count);
      b_.CreateStore(b_.getFalse(), any_bad);
      counted(from, to, 1, check.subject + ".check", [&](llvm::Value* i) {
        llvm::Value* v = b_.CreateSExt(b_.CreateLoad(elem, b_.CreateInBoundsGEP(elem, buf.ptr, i)),
                                       b_.getInt64Ty());
        llvm::Value* bad = b_.getFalse();
        if (lo) bad = b_.CreateOr(bad, b_.CreateICmpSLT(v, lo));
        if (hi) bad = b_.CreateOr(bad, b_.CreateICmpSGT(v, hi));
        if (check.sorted) {
          // v < buf[i - 1], for i > 0 (buf[i - 1] is read only then).
          llvm::Value* first = b_.CreateICmpEQ(i, b_.getInt64(0));
          llvm::Value* prev_at = b_.CreateInBoundsGEP(
              elem, buf.ptr, b_.CreateSelect(first, i, b_.CreateSub(i, b_.getInt64(1))));
          llvm::Value* prev = b_.CreateSExt(b_.CreateLoad(elem, prev_at), b_.getInt64Ty());
          bad = b_.CreateOr(bad, b_.CreateAnd(b_.CreateNot(first), b_.CreateICmpSLT(v, prev)));
        }
        b_.CreateStore(b_.CreateOr(b_.CreateLoad(b_.getInt1Ty(), any_bad), bad), any_bad);
      });
      auto* next = llvm::BasicBlock::Create(ctx_, check.subject + ".ok", fn_);
      b_.CreateCondBr(b_.CreateLoad(b_.getInt1Ty(), any_bad), failed, next);
      b_.SetInsertPoint(next);
    };
    counted(b_.getInt64(0),
            b_.CreateSDiv(b_.CreateAdd(count, b_.getInt64(kBlock - 1)), b_.getInt64(kBlock)), 1,
            check.subject + ".blocks",
            [&](llvm::Value* k) { block(b_.CreateMul(k, b_.getInt64(kBlock))); });
    llvm::IRBuilderBase::InsertPoint after = b_.saveIP();
    b_.SetInsertPoint(failed);
    b_.CreateRet(b_.getInt32(code));
    b_.restoreIP(after);
  }
}

void FunctionBuilder::fail_in(const ir::Stmt& s, const std::string& msg) const {
  auto w = f_.comp_where.find(ir::first_stored_computation(s));
  throw CompileError(ErrorStage::Codegen, w == f_.comp_where.end() ? f_.where : w->second, msg);
}

void FunctionBuilder::record_status(llvm::Value* bad, int32_t status) {
  auto slot = vars_.find(kStatusSlot);
  if (slot == vars_.end()) fail("a division that can trap outside the kernel's status scope");
  // Lanes a mask switches off (a guarded read's, whose masked load gave 0)
  // compute nothing the program asked for: their faults do not count.
  if (mask_)
    bad = is_vec(bad) ? b_.CreateAnd(bad, mask_) : b_.CreateAnd(bad, b_.CreateOrReduce(mask_));
  if (is_vec(bad)) bad = b_.CreateOrReduce(bad);
  auto* yes = llvm::BasicBlock::Create(ctx_, "div.bad", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "div.ok", fn_);
  b_.CreateCondBr(bad, yes, done, llvm::MDBuilder(ctx_).createBranchWeights(1, 1 << 20));
  b_.SetInsertPoint(yes);
  b_.CreateAtomicCmpXchg(slot->second, b_.getInt32(0), b_.getInt32(status), llvm::MaybeAlign(4),
                         llvm::AtomicOrdering::Monotonic, llvm::AtomicOrdering::Monotonic);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

llvm::Type* FunctionBuilder::reg_type(ir::DType t) {
  switch (t) {
    case ir::DType::Bool:
      return b_.getInt1Ty();
    case ir::DType::I32:
      return b_.getInt32Ty();
    case ir::DType::I64:
      return b_.getInt64Ty();
    case ir::DType::F32:
      return b_.getFloatTy();
    case ir::DType::F64:
      return b_.getDoubleTy();
  }
  return nullptr;
}

llvm::Type* FunctionBuilder::mem_type(ir::DType t) {
  return t == ir::DType::Bool ? b_.getInt8Ty() : reg_type(t);
}

llvm::Type* FunctionBuilder::vec_of(llvm::Type* t) {
  return lanes_ ? llvm::FixedVectorType::get(t, static_cast<unsigned>(lanes_)) : t;
}

llvm::Value* FunctionBuilder::splat(llvm::Value* v) {
  if (!lanes_ || is_vec(v)) return v;
  return b_.CreateVectorSplat(static_cast<unsigned>(lanes_), v);
}

void FunctionBuilder::unify(llvm::Value*& a, llvm::Value*& b) {
  if (is_vec(a) || is_vec(b)) a = splat(a), b = splat(b);
}

llvm::Type* FunctionBuilder::like(llvm::Type* t, llvm::Value* like_v) {
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(like_v->getType()))
    return llvm::FixedVectorType::get(t, vt->getNumElements());
  return t;
}

llvm::Value* FunctionBuilder::to_i64(llvm::Value* v) {
  llvm::Type* t = like(b_.getInt64Ty(), v);
  if (v->getType() == t) return v;
  return b_.CreateSExtOrTrunc(v, t);
}

void FunctionBuilder::decorate(llvm::Function* fn) {
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  if (!opts_.target.cpu.empty()) fn->addFnAttr("target-cpu", opts_.target.cpu);
  if (!opts_.target.features.empty()) fn->addFnAttr("target-features", llvm_features(opts_.target));
}

FunctionBuilder::Saved FunctionBuilder::bind(const std::string& name, llvm::Value* v) {
  Saved s;
  auto it = vars_.find(name);
  if (it != vars_.end()) s.value = it->second;
  s.varying = varying_.count(name) > 0;
  vars_[name] = v;
  if (is_vec(v))
    varying_.insert(name);
  else
    varying_.erase(name);
  return s;
}

void FunctionBuilder::restore(const std::string& name, const Saved& s) {
  if (s.value)
    vars_[name] = *s.value;
  else
    vars_.erase(name);
  if (s.varying)
    varying_.insert(name);
  else
    varying_.erase(name);
}

void FunctionBuilder::stmt(const ir::Stmt& s) {
  if (!s) return;
  switch (s->kind) {
    case ir::StmtKind::Block:
      for (const auto& x : ir::as<ir::Block>(s)->stmts) stmt(x);
      return;
    case ir::StmtKind::Store:
      store(*ir::as<ir::Store>(s));
      return;
    case ir::StmtKind::Evaluate:
      expr(ir::as<ir::Evaluate>(s)->value);
      return;
    case ir::StmtKind::LetStmt: {
      auto* n = ir::as<ir::LetStmt>(s);
      llvm::Value* v = expr(n->value);
      v->setName(n->var);
      auto saved = bind(n->var, v);
      auto def = define_lane_value(n->var, n->value, v);
      stmt(n->body);
      undefine_lane_value(n->var, def);
      restore(n->var, saved);
      return;
    }
    case ir::StmtKind::If: {
      auto* n = ir::as<ir::IfThenElse>(s);
      llvm::Value* c = expr(n->cond);
      if (is_vec(c)) fail("a condition that varies across a vectorized loop's lanes");
      auto* yes = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
      auto* no = n->else_case ? llvm::BasicBlock::Create(ctx_, "if.else", fn_) : nullptr;
      auto* done = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
      b_.CreateCondBr(c, yes, no ? no : done);
      b_.SetInsertPoint(yes);
      stmt(n->then_case);
      b_.CreateBr(done);
      if (no) {
        b_.SetInsertPoint(no);
        stmt(n->else_case);
        b_.CreateBr(done);
      }
      b_.SetInsertPoint(done);
      return;
    }
    case ir::StmtKind::Alloc:
      alloc(*ir::as<ir::Alloc>(s));
      return;
    case ir::StmtKind::For:
      loop(*ir::as<ir::For>(s));
      return;
  }
}

void FunctionBuilder::alloc(const ir::Alloc& n) {
  BufInfo info;
  info.dtype = n.dtype;
  llvm::Value* count = b_.getInt64(1);
  for (const auto& e : n.shape) {
    llvm::Value* ext = to_i64(expr(e));
    info.shape.push_back(ext);
    count = b_.CreateMul(count, ext);
  }
  llvm::Value* bytes = b_.CreateMul(count, b_.getInt64(ir::dtype_bytes(n.dtype)));
  bool on_stack = n.loc == ir::MemLoc::Stack;
  // A size beyond the limit (sizes in run-time params are known only now),
  // or a heap that says no, skips the temporary's statements and returns
  // KILN_ERR_ALLOC; the kernel's outputs are then not to be used.
  int64_t limit = on_stack ? ir::kMaxStackTempBytes : ir::kMaxHeapTempBytes;
  llvm::Value* too_big = b_.CreateICmpUGT(bytes, b_.getInt64(limit));
  llvm::Value* saved_stack = nullptr;
  auto* use = llvm::BasicBlock::Create(ctx_, n.buf + ".use", fn_);
  auto* skip = llvm::BasicBlock::Create(ctx_, n.buf + ".skip", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, n.buf + ".done", fn_);
  if (on_stack) {
    auto* make = llvm::BasicBlock::Create(ctx_, n.buf + ".alloca", fn_);
    b_.CreateCondBr(too_big, skip, make);
    b_.SetInsertPoint(make);
    saved_stack = b_.CreateStackSave();
    auto* a = b_.CreateAlloca(b_.getInt8Ty(), bytes, n.buf);
    a->setAlignment(llvm::Align(64));
    info.ptr = a;
    b_.CreateBr(use);
  } else {
    // kiln_alloc returns fresh memory, as malloc does: its result aliases no
    // other pointer (noalias), so LLVM may keep a temp's values in registers
    // across loads of the kernel's other buffers.
    llvm::AttributeList attrs =
        llvm::AttributeList().addRetAttribute(ctx_, llvm::Attribute::NoAlias);
    llvm::FunctionCallee alloc_fn = m_.getOrInsertFunction("kiln_alloc", attrs, b_.getPtrTy(),
                                                           b_.getInt64Ty(), b_.getInt64Ty());
    // Asked for nothing when too big: kiln_alloc(0) still gives a pointer, freed below.
    info.ptr = b_.CreateCall(
        alloc_fn, {b_.CreateSelect(too_big, b_.getInt64(0), bytes), b_.getInt64(64)}, n.buf);
    llvm::Value* failed = b_.CreateOr(too_big, b_.CreateIsNull(info.ptr));
    b_.CreateCondBr(failed, skip, use, llvm::MDBuilder(ctx_).createBranchWeights(1, 1 << 20));
  }
  b_.SetInsertPoint(skip);
  record_status(b_.getTrue(), KILN_ERR_ALLOC);
  b_.CreateBr(done);
  b_.SetInsertPoint(use);
  auto old = bufs_.find(n.buf);
  std::optional<BufInfo> shadowed;
  if (old != bufs_.end()) shadowed = old->second;
  bufs_[n.buf] = info;
  stmt(n.body);
  if (on_stack) b_.CreateStackRestore(saved_stack);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  if (!on_stack) {
    llvm::FunctionCallee free_fn =
        m_.getOrInsertFunction("kiln_free", b_.getVoidTy(), b_.getPtrTy());
    b_.CreateCall(free_fn, {info.ptr});
  }
  if (shadowed)
    bufs_[n.buf] = *shadowed;
  else
    bufs_.erase(n.buf);
}

void FunctionBuilder::counted(llvm::Value* lo, llvm::Value* hi, int64_t step,
                              const std::string& name,
                              const std::function<void(llvm::Value*)>& body,
                              llvm::MDNode* loop_md) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* head = llvm::BasicBlock::Create(ctx_, name + ".head", fn_);
  auto* inside = llvm::BasicBlock::Create(ctx_, name + ".body", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, name + ".end", fn_);
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  llvm::PHINode* v = b_.CreatePHI(b_.getInt64Ty(), 2, name);
  v->addIncoming(lo, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(v, hi), inside, done);
  b_.SetInsertPoint(inside);
  body(v);
  llvm::Value* next = b_.CreateAdd(v, b_.getInt64(step), name + ".next", false, true);
  llvm::BranchInst* back = b_.CreateBr(head);
  if (loop_md) back->setMetadata(llvm::LLVMContext::MD_loop, loop_md);
  v->addIncoming(next, b_.GetInsertBlock());
  b_.SetInsertPoint(done);
}

llvm::MDNode* FunctionBuilder::loop_hint(const char* key, const std::string& loop) {
  llvm::Metadata* hint = llvm::MDNode::get(
      ctx_, {llvm::MDString::get(ctx_, key), llvm::ConstantAsMetadata::get(b_.getTrue())});
  llvm::Metadata* name = llvm::MDNode::get(
      ctx_, {llvm::MDString::get(ctx_, kLoopNameKey), llvm::MDString::get(ctx_, loop)});
  llvm::MDNode* self = llvm::MDNode::getDistinct(ctx_, {nullptr, hint, name});
  self->replaceOperandWith(0, self);
  return self;
}

void FunctionBuilder::loop(const ir::For& n) {
  if (lanes_) fail("a loop inside vectorized loop '" + lane_var_ + "'");
  llvm::Value* lo = to_i64(expr(n.min));
  llvm::Value* hi = to_i64(expr(n.end));
  auto body_at = [&](llvm::Value* v) {
    v->setName(n.var);
    auto saved = bind(n.var, v);
    stmt(n.body);
    restore(n.var, saved);
  };
  switch (n.tag) {
    case ir::LoopTag::Parallel:
      parallel(n, lo, hi);
      return;
    case ir::LoopTag::Vectorize:
      if (n.step == 1 && vectorizable_body(n.body)) {
        vectorized(n, lo, hi);
        return;
      }
      counted(lo, hi, n.step, n.var, body_at, loop_hint("llvm.loop.vectorize.enable", n.var));
      return;
    case ir::LoopTag::UnrollExplicit: {
      auto* a = ir::as<ir::IntImm>(n.min);
      auto* b = ir::as<ir::IntImm>(n.end);
      if (!a || !b)
        fail_in(n.body, "loop '" + n.var + "' is tagged unroll_explicit but its bounds (" +
                            ir::to_string(n.min) + ", " + ir::to_string(n.end) +
                            ") are not constants");
      int64_t span = 0;
      if (__builtin_sub_overflow(b->value, a->value, &span) || span / n.step > 4096)
        fail_in(n.body,
                "loop '" + n.var + "' is tagged unroll_explicit but runs more than 4096 times");
      int64_t trips = std::max<int64_t>(0, (span + n.step - 1) / n.step);
      // Unrolled loops inside unrolled loops multiply: bound the copies of the body.
      if (unrolled_ * trips > ir::kMaxUnrolledCopies)
        fail_in(n.body,
                "loop '" + n.var + "' is tagged unroll_explicit inside other unrolled loops: " +
                    std::to_string(unrolled_ * trips) +
                    " copies of its body, more than the limit of " +
                    std::to_string(ir::kMaxUnrolledCopies) + " (unrolled copies, docs/limits.md)");
      int64_t outer = unrolled_;
      unrolled_ *= std::max<int64_t>(1, trips);
      for (int64_t i = a->value; i < b->value; i += n.step) body_at(b_.getInt64(i));
      unrolled_ = outer;
      return;
    }
    case ir::LoopTag::Unroll:
      counted(lo, hi, n.step, n.var, body_at, loop_hint("llvm.loop.unroll.enable", n.var));
      return;
    default:
      // LLVM unrolls a fill whose body kiln vectorized into hundreds of
      // stores (the GEMM's C_init: 512 in one block), for no speed, and its
      // machine scheduler relates every pair of them (37 of the GEMM
      // kernel's 62 ms of machine code). Other loops are LLVM's to unroll.
      counted(lo, hi, n.step, n.var, body_at,
              !ir::reads_memory(n.body) ? loop_hint("llvm.loop.unroll.disable", n.var) : nullptr);
      return;
  }
}

}  // namespace kiln::codegen::detail
