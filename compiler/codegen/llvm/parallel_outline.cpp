// FunctionBuilder's parallel loops: the body is outlined into a function of
// (begin, end, closure) that the runtime's thread pool calls on chunks.
#include "function_builder.h"

namespace kiln::codegen::detail {

void FunctionBuilder::parallel(const ir::For& n, llvm::Value* lo, llvm::Value* hi) {
  // Everything in scope travels in the closure, except constants, which
  // stay constants (a row stride LLVM knows lets it keep rows apart).
  std::vector<std::pair<std::string, llvm::Value*>> vals;
  for (auto& [name, v] : vars_)
    if (!llvm::isa<llvm::Constant>(v)) vals.emplace_back(name, v);
  std::vector<std::pair<std::string, BufInfo>> bufs(bufs_.begin(), bufs_.end());
  auto travels = [](llvm::Value* v) { return !llvm::isa<llvm::Constant>(v); };
  std::vector<llvm::Type*> fields = {b_.getInt64Ty()};  // lo
  for (auto& [name, v] : vals) fields.push_back(v->getType());
  for (auto& [name, bi] : bufs) {
    fields.push_back(b_.getPtrTy());
    for (auto* sz : bi.shape)
      if (travels(sz)) fields.push_back(b_.getInt64Ty());
  }
  llvm::StructType* closure_ty = llvm::StructType::get(ctx_, fields);
  // In the entry block, so a parallel loop inside a serial one reuses one slot.
  llvm::IRBuilder<> at_entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::Value* closure = at_entry.CreateAlloca(closure_ty, nullptr, n.var + ".closure");
  unsigned f = 0;
  auto put = [&](llvm::Value* v) {
    b_.CreateStore(v, b_.CreateStructGEP(closure_ty, closure, f++));
  };
  put(lo);
  for (auto& [name, v] : vals) put(v);
  for (auto& [name, bi] : bufs) {
    put(bi.ptr);
    for (auto* sz : bi.shape)
      if (travels(sz)) put(sz);
  }

  auto* task_ty = llvm::FunctionType::get(b_.getVoidTy(),
                                          {b_.getInt64Ty(), b_.getInt64Ty(), b_.getPtrTy()}, false);
  llvm::Function* task = llvm::Function::Create(
      task_ty, llvm::Function::InternalLinkage,
      entry_symbol(f_) + "_par_" + n.var + "_" + std::to_string(++outlined_), m_);
  decorate(task);

  // The loop body goes in its own function whose buffer pointers are
  // noalias again (they were lost passing through the closure); the task
  // unpacks the closure and calls it, and LLVM inlines it back.
  std::vector<llvm::Type*> body_params = {b_.getInt64Ty(), b_.getInt64Ty(), b_.getInt64Ty()};
  for (auto& [name, v] : vals) body_params.push_back(v->getType());
  for (auto& [name, bi] : bufs) {
    body_params.push_back(b_.getPtrTy());
    for (auto* sz : bi.shape)
      if (travels(sz)) body_params.push_back(b_.getInt64Ty());
  }
  llvm::Function* inner =
      llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), body_params, false),
                             llvm::Function::InternalLinkage, task->getName() + "_body", m_);
  decorate(inner);
  inner->addFnAttr(llvm::Attribute::AlwaysInline);

  // Build both with their own state, then come back.
  llvm::Function* saved_fn = fn_;
  llvm::IRBuilderBase::InsertPoint saved_ip = b_.saveIP();
  auto saved_vars = vars_;
  auto saved_bufs = bufs_;

  fn_ = task;
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", task));
  llvm::Value* cl = task->getArg(2);
  f = 0;
  std::vector<llvm::Value*> call_args = {task->getArg(0), task->getArg(1)};
  for (llvm::Type* t : fields)
    call_args.push_back(b_.CreateLoad(t, b_.CreateStructGEP(closure_ty, cl, f++)));
  b_.CreateCall(inner, call_args);
  b_.CreateRetVoid();

  fn_ = inner;
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", inner));
  unsigned a = 2;
  llvm::Value* tlo = inner->getArg(a++);
  std::map<std::string, llvm::Value*> constants;
  for (auto& [name, v] : vars_)
    if (llvm::isa<llvm::Constant>(v)) constants[name] = v;
  vars_ = constants;
  for (auto& [name, v] : vals) vars_[name] = inner->getArg(a++);
  bufs_.clear();
  for (auto& [name, bi] : bufs) {
    BufInfo copy = bi;
    inner->addParamAttr(a, llvm::Attribute::NoAlias);
    copy.ptr = inner->getArg(a++);
    for (auto& sz : copy.shape)
      if (travels(sz)) sz = inner->getArg(a++);
    bufs_[name] = copy;
  }
  counted(inner->getArg(0), inner->getArg(1), 1, n.var + ".it", [&](llvm::Value* it) {
    llvm::Value* v = b_.CreateAdd(tlo, b_.CreateMul(it, b_.getInt64(n.step)), n.var);
    auto saved = bind(n.var, v);
    stmt(n.body);
    restore(n.var, saved);
  });
  b_.CreateRetVoid();
  fn_ = saved_fn;
  b_.restoreIP(saved_ip);
  vars_ = saved_vars;
  bufs_ = saved_bufs;

  // iterations = ceil((hi - lo) / step), at least 0.
  llvm::Value* span = b_.CreateSub(hi, lo);
  llvm::Value* count =
      b_.CreateSDiv(b_.CreateAdd(span, b_.getInt64(n.step - 1)), b_.getInt64(n.step));
  count = b_.CreateSelect(b_.CreateICmpSGT(count, b_.getInt64(0)), count, b_.getInt64(0));
  llvm::FunctionCallee launch = m_.getOrInsertFunction(
      "kiln_parallel_launch", b_.getInt32Ty(), b_.getPtrTy(), b_.getPtrTy(), b_.getInt64Ty());
  b_.CreateCall(launch, {task, closure, count});
}

}  // namespace kiln::codegen::detail
