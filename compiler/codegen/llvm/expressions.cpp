// FunctionBuilder's expressions: scalar code, or one value per lane inside a
// vectorized loop (a value that does not vary stays scalar until it meets a vector).
#include <llvm/IR/Intrinsics.h>

#include <algorithm>

#include "function_builder.h"
#include "kiln/analysis.h"

namespace kiln::codegen::detail {

llvm::Value* FunctionBuilder::expr(const ir::Expr& e) {
  switch (e->kind) {
    case ir::ExprKind::IntImm: {
      auto* n = ir::as<ir::IntImm>(e);
      return llvm::ConstantInt::get(reg_type(e->type), static_cast<uint64_t>(n->value), true);
    }
    case ir::ExprKind::FloatImm:
      return llvm::ConstantFP::get(reg_type(e->type), ir::as<ir::FloatImm>(e)->value);
    case ir::ExprKind::Var: {
      auto* n = ir::as<ir::Var>(e);
      auto it = vars_.find(n->name);
      if (it == vars_.end()) fail("unbound variable '" + n->name + "' in " + f_.name);
      return it->second;
    }
    case ir::ExprKind::Cast:
      return cast(ir::as<ir::Cast>(e)->value, e->type);
    case ir::ExprKind::Unary: {
      auto* n = ir::as<ir::Unary>(e);
      llvm::Value* a = expr(n->a);
      if (n->op == ir::UnaryOp::Not) return b_.CreateNot(a);
      return ir::is_float(e->type) ? b_.CreateFNeg(a) : b_.CreateNeg(a);
    }
    case ir::ExprKind::Binary:
      return binary(*ir::as<ir::Binary>(e));
    case ir::ExprKind::Select:
      return select(*ir::as<ir::Select>(e));
    case ir::ExprKind::Call:
      return call(*ir::as<ir::Call>(e));
    case ir::ExprKind::Load:
      return load(*ir::as<ir::Load>(e));
    case ir::ExprKind::Let: {
      auto* n = ir::as<ir::Let>(e);
      llvm::Value* v = expr(n->value);
      auto saved = bind(n->var, v);
      auto def = define_lane_value(n->var, n->value, v);
      llvm::Value* r = expr(n->body);
      undefine_lane_value(n->var, def);
      restore(n->var, saved);
      return r;
    }
    case ir::ExprKind::Access:
      fail("read of computation '" + ir::as<ir::Access>(e)->comp + "' survived lowering");
  }
  fail("unknown expression");
}

llvm::Value* FunctionBuilder::cast(const ir::Expr& value, ir::DType to) {
  llvm::Value* v = expr(value);
  ir::DType from = value->type;
  llvm::Type* t = like(reg_type(to), v);
  if (from == to) return v;
  if (to == ir::DType::Bool) {
    if (ir::is_float(from)) return b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
    return b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  if (from == ir::DType::Bool) {
    if (ir::is_float(to)) return b_.CreateUIToFP(v, t);
    return b_.CreateZExt(v, t);
  }
  if (ir::is_int(from) && ir::is_int(to)) return b_.CreateSExtOrTrunc(v, t);
  if (ir::is_int(from) && ir::is_float(to)) return b_.CreateSIToFP(v, t);
  if (ir::is_float(from) && ir::is_int(to)) return b_.CreateFPToSI(v, t);
  return b_.CreateFPCast(v, t);
}

llvm::Value* FunctionBuilder::binary(const ir::Binary& n) {
  using Op = ir::BinaryOp;
  if (n.op == Op::And || n.op == Op::Or) return logic(n);
  llvm::Value* a = expr(n.a);
  llvm::Value* b = expr(n.b);
  unify(a, b);
  bool fl = ir::is_float(n.a->type);
  switch (n.op) {
    case Op::Add:
      return fl ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
    case Op::Sub:
      return fl ? b_.CreateFSub(a, b) : b_.CreateSub(a, b);
    case Op::Mul:
      return fl ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
    case Op::Div:
      return fl ? b_.CreateFDiv(a, b) : checked_div(n, a, b, false);
    case Op::Mod:
      return fl ? b_.CreateFRem(a, b) : checked_div(n, a, b, true);
    case Op::Min:
      return b_.CreateSelect(fl ? b_.CreateFCmpOLT(b, a) : b_.CreateICmpSLT(b, a), b, a);
    case Op::Max:
      return b_.CreateSelect(fl ? b_.CreateFCmpOLT(a, b) : b_.CreateICmpSLT(a, b), b, a);
    case Op::Lt:
      return fl ? b_.CreateFCmpOLT(a, b) : b_.CreateICmpSLT(a, b);
    case Op::Le:
      return fl ? b_.CreateFCmpOLE(a, b) : b_.CreateICmpSLE(a, b);
    case Op::Gt:
      return fl ? b_.CreateFCmpOGT(a, b) : b_.CreateICmpSGT(a, b);
    case Op::Ge:
      return fl ? b_.CreateFCmpOGE(a, b) : b_.CreateICmpSGE(a, b);
    case Op::Eq:
      return fl ? b_.CreateFCmpOEQ(a, b) : b_.CreateICmpEQ(a, b);
    case Op::Ne:
      return fl ? b_.CreateFCmpUNE(a, b) : b_.CreateICmpNE(a, b);
    default:
      break;
  }
  fail("unknown binary operator");
}

llvm::Value* FunctionBuilder::floor_div(llvm::Value* a, llvm::Value* b, bool mod) {
  llvm::Value* q = b_.CreateSDiv(a, b);
  llvm::Value* r = b_.CreateSRem(a, b);
  llvm::Value* zero = llvm::Constant::getNullValue(a->getType());
  llvm::Value* fix = b_.CreateAnd(
      b_.CreateICmpNE(r, zero), b_.CreateXor(b_.CreateICmpSLT(r, zero), b_.CreateICmpSLT(b, zero)));
  if (mod) return b_.CreateSelect(fix, b_.CreateAdd(r, b), r);
  return b_.CreateSelect(fix, b_.CreateSub(q, llvm::ConstantInt::get(a->getType(), 1)), q);
}

llvm::Value* FunctionBuilder::checked_div(const ir::Binary& n, llvm::Value* a, llvm::Value* b,
                                          bool mod) {
  if (!ir::traps(n)) return floor_div(a, b, mod);
  // Lanes dividing by 0, or the smallest value by -1, divide by 1 instead
  // (so nothing traps), give 0 and record the status.
  auto* int_ty = llvm::cast<llvm::IntegerType>(a->getType()->getScalarType());
  llvm::Value* zero = llvm::Constant::getNullValue(a->getType());
  llvm::Value* minus_one = llvm::Constant::getAllOnesValue(a->getType());
  llvm::Value* smallest =
      llvm::ConstantInt::get(a->getType(), llvm::APInt::getSignedMinValue(int_ty->getBitWidth()));
  llvm::Value* bad =
      b_.CreateOr(b_.CreateICmpEQ(b, zero),
                  b_.CreateAnd(b_.CreateICmpEQ(a, smallest), b_.CreateICmpEQ(b, minus_one)));
  llvm::Value* safe = b_.CreateSelect(bad, llvm::ConstantInt::get(a->getType(), 1), b);
  llvm::Value* r = b_.CreateSelect(bad, zero, floor_div(a, safe, mod));
  auto check = std::find_if(f_.checks.begin(), f_.checks.end(), [&](const ir::RuntimeCheck& c) {
    return c.kind == ir::RuntimeCheck::Kind::Arithmetic && c.subject == storing_ &&
           !storing_.empty();
  });
  record_status(bad, check == f_.checks.end()
                         ? ir::kStatusArith
                         : ir::kStatusCheckBase + static_cast<int32_t>(check - f_.checks.begin()));
  return r;
}

llvm::Value* FunctionBuilder::logic(const ir::Binary& n) {
  bool is_and = n.op == ir::BinaryOp::And;
  llvm::Value* a = expr(n.a);
  if (!ir::reads_memory(n.b)) {
    llvm::Value* b = expr(n.b);
    unify(a, b);
    return is_and ? b_.CreateAnd(a, b) : b_.CreateOr(a, b);
  }
  if (is_vec(a) || lanes_) {
    llvm::Value* lane_mask = splat(a);
    if (!is_and) lane_mask = b_.CreateNot(lane_mask);
    llvm::Value* b = masked(lane_mask, [&] { return expr(n.b); });
    b = splat(b);
    return is_and ? b_.CreateAnd(splat(a), b) : b_.CreateOr(splat(a), b);
  }
  return branch(
      a, is_and, [&] { return expr(n.b); }, b_.getInt1(!is_and));
}

llvm::Value* FunctionBuilder::branch(llvm::Value* cond, bool when,
                                     const std::function<llvm::Value*()>& then,
                                     llvm::Value* other) {
  llvm::BasicBlock* from = b_.GetInsertBlock();
  auto* yes = llvm::BasicBlock::Create(ctx_, "then", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "merge", fn_);
  if (when)
    b_.CreateCondBr(cond, yes, done);
  else
    b_.CreateCondBr(cond, done, yes);
  b_.SetInsertPoint(yes);
  llvm::Value* v = then();
  llvm::BasicBlock* yes_end = b_.GetInsertBlock();
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  llvm::PHINode* phi = b_.CreatePHI(v->getType(), 2);
  phi->addIncoming(v, yes_end);
  phi->addIncoming(other, from);
  return phi;
}

llvm::Value* FunctionBuilder::masked(llvm::Value* lane_mask,
                                     const std::function<llvm::Value*()>& fn) {
  llvm::Value* saved = mask_;
  mask_ = saved ? b_.CreateAnd(saved, lane_mask) : lane_mask;
  llvm::Value* v = fn();
  mask_ = saved;
  return v;
}

llvm::Value* FunctionBuilder::select(const ir::Select& n) {
  llvm::Value* c = expr(n.cond);
  bool guarded = ir::reads_memory(n.t) || ir::reads_memory(n.f);
  if (!guarded) {
    llvm::Value* t = expr(n.t);
    llvm::Value* f = expr(n.f);
    unify(t, f);
    // A vector condition picks between lanes: scalar sides (constants) become vectors too.
    if (is_vec(t) || is_vec(c)) c = splat(c), t = splat(t), f = splat(f);
    return b_.CreateSelect(c, t, f);
  }
  if (lanes_) {
    llvm::Value* m = splat(c);
    llvm::Value* t = masked(m, [&] { return expr(n.t); });
    llvm::Value* f = masked(b_.CreateNot(m), [&] { return expr(n.f); });
    t = splat(t), f = splat(f);
    return b_.CreateSelect(m, t, f);
  }
  // Only the chosen side runs: it may read where the other may not.
  llvm::BasicBlock* yes = llvm::BasicBlock::Create(ctx_, "sel.t", fn_);
  llvm::BasicBlock* no = llvm::BasicBlock::Create(ctx_, "sel.f", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "sel.end", fn_);
  b_.CreateCondBr(c, yes, no);
  b_.SetInsertPoint(yes);
  llvm::Value* t = expr(n.t);
  llvm::BasicBlock* yes_end = b_.GetInsertBlock();
  b_.CreateBr(done);
  b_.SetInsertPoint(no);
  llvm::Value* f = expr(n.f);
  llvm::BasicBlock* no_end = b_.GetInsertBlock();
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  llvm::PHINode* phi = b_.CreatePHI(t->getType(), 2);
  phi->addIncoming(t, yes_end);
  phi->addIncoming(f, no_end);
  return phi;
}

llvm::Value* FunctionBuilder::call(const ir::Call& n) {
  std::vector<llvm::Value*> args;
  for (const auto& a : n.args) args.push_back(expr(a));
  if (args.size() == 2) unify(args[0], args[1]);
  llvm::Type* t = args[0]->getType();
  static const std::map<std::string, llvm::Intrinsic::ID> intrinsics = {
      {"exp", llvm::Intrinsic::exp},   {"log", llvm::Intrinsic::log},
      {"sqrt", llvm::Intrinsic::sqrt}, {"sin", llvm::Intrinsic::sin},
      {"cos", llvm::Intrinsic::cos},   {"floor", llvm::Intrinsic::floor},
      {"ceil", llvm::Intrinsic::ceil}, {"pow", llvm::Intrinsic::pow}};
  if (n.name == "abs") {
    if (ir::is_float(n.type)) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, args[0]);
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, args[0], b_.getFalse());
  }
  if (n.name == "tanh") {
    // tanh(x) = 1 - 2 / (exp(2x) + 1): no libm call, so shared objects stay libc-free.
    llvm::Value* two = llvm::ConstantFP::get(t, 2.0);
    llvm::Value* one = llvm::ConstantFP::get(t, 1.0);
    llvm::Value* e2 = b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, b_.CreateFMul(two, args[0]));
    return b_.CreateFSub(one, b_.CreateFDiv(two, b_.CreateFAdd(e2, one)));
  }
  auto it = intrinsics.find(n.name);
  if (it == intrinsics.end()) fail("no CPU code for call '" + n.name + "'");
  llvm::Function* fn = llvm::Intrinsic::getDeclaration(&m_, it->second, {t});
  return b_.CreateCall(fn, args);
}

}  // namespace kiln::codegen::detail
