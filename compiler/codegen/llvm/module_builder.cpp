// Loop IR to LLVM IR: expressions, loops (serial, parallel through the runtime,
// vectorized with LLVM vector types, unrolled), buffers and the packed entry point.
#include "module_builder.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <functional>
#include <map>
#include <optional>
#include <set>

#include "kiln/analysis.h"

namespace kiln::codegen {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw CompileError(ErrorStage::Codegen, {}, msg); }

struct BufInfo {
  llvm::Value* ptr = nullptr;
  ir::DType dtype = ir::DType::F32;
  std::vector<llvm::Value*> shape;  // i64 extents
};

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

class FunctionBuilder {
 public:
  FunctionBuilder(const ir::LoweredFunc& f, const Options& opts, llvm::LLVMContext& ctx,
                  llvm::Module& m)
      : f_(f), opts_(opts), ctx_(ctx), m_(m), b_(ctx) {
    // IEEE order unless the operator allows fast math: then LLVM may fuse
    // a * b + c and reassociate.
    if (f.fast_math) {
      llvm::FastMathFlags fmf;
      fmf.setFast();
      b_.setFastMathFlags(fmf);
    }
  }

  void build() {
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* ptr = b_.getPtrTy();
    // The body: params and noalias buffer pointers.
    std::vector<llvm::Type*> types;
    for (size_t k = 0; k < f_.params.size(); ++k) types.push_back(i64);
    for (size_t k = 0; k < f_.args.size(); ++k) types.push_back(ptr);
    auto* body_ty = llvm::FunctionType::get(b_.getVoidTy(), types, false);
    llvm::Function* body = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage,
                                                  entry_symbol(f_) + "_body", m_);
    decorate(body);
    body->addFnAttr(llvm::Attribute::AlwaysInline);
    for (size_t k = 0; k < f_.args.size(); ++k) {
      unsigned a = static_cast<unsigned>(f_.params.size() + k);
      body->addParamAttr(a, llvm::Attribute::NoAlias);
      body->addParamAttr(a, llvm::Attribute::getWithAlignment(
                                ctx_, llvm::Align(ir::dtype_bytes(f_.args[k].dtype))));
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
    stmt(f_.body);
    b_.CreateRetVoid();

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
    b_.CreateCall(body, call_args);
    b_.CreateRet(b_.getInt32(0));
  }

 private:
  // ---------------------------------------------------------------------
  // Types and constants

  llvm::Type* reg_type(ir::DType t) {
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
  llvm::Type* mem_type(ir::DType t) { return t == ir::DType::Bool ? b_.getInt8Ty() : reg_type(t); }
  llvm::Type* vec_of(llvm::Type* t) {
    return lanes_ ? llvm::FixedVectorType::get(t, static_cast<unsigned>(lanes_)) : t;
  }
  static bool is_vec(llvm::Value* v) { return v->getType()->isVectorTy(); }
  llvm::Value* splat(llvm::Value* v) {
    if (!lanes_ || is_vec(v)) return v;
    return b_.CreateVectorSplat(static_cast<unsigned>(lanes_), v);
  }
  void unify(llvm::Value*& a, llvm::Value*& b) {
    if (is_vec(a) || is_vec(b)) a = splat(a), b = splat(b);
  }
  // The type t, widened like `like`.
  llvm::Type* like(llvm::Type* t, llvm::Value* like_v) {
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(like_v->getType()))
      return llvm::FixedVectorType::get(t, vt->getNumElements());
    return t;
  }
  llvm::Value* to_i64(llvm::Value* v) {
    llvm::Type* t = like(b_.getInt64Ty(), v);
    if (v->getType() == t) return v;
    return b_.CreateSExtOrTrunc(v, t);
  }

  void decorate(llvm::Function* fn) {
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    if (!opts_.target.cpu.empty()) fn->addFnAttr("target-cpu", opts_.target.cpu);
    if (!opts_.target.features.empty()) fn->addFnAttr("target-features", opts_.target.features);
  }

  // ---------------------------------------------------------------------
  // Expressions. In a vectorized loop, a value that varies with the lane is
  // an LLVM vector; one that does not stays scalar until it meets a vector.

  llvm::Value* expr(const ir::Expr& e) {
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

  struct Saved {
    std::optional<llvm::Value*> value;
    bool varying = false;
  };
  Saved bind(const std::string& name, llvm::Value* v) {
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
  void restore(const std::string& name, const Saved& s) {
    if (s.value)
      vars_[name] = *s.value;
    else
      vars_.erase(name);
    if (s.varying)
      varying_.insert(name);
    else
      varying_.erase(name);
  }

  llvm::Value* cast(const ir::Expr& value, ir::DType to) {
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

  llvm::Value* binary(const ir::Binary& n) {
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
        return fl ? b_.CreateFDiv(a, b) : floor_div(a, b, false);
      case Op::Mod:
        return fl ? b_.CreateFRem(a, b) : floor_div(a, b, true);
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

  // Integer division and modulo rounding toward negative infinity.
  llvm::Value* floor_div(llvm::Value* a, llvm::Value* b, bool mod) {
    llvm::Value* q = b_.CreateSDiv(a, b);
    llvm::Value* r = b_.CreateSRem(a, b);
    llvm::Value* zero = llvm::Constant::getNullValue(a->getType());
    llvm::Value* fix =
        b_.CreateAnd(b_.CreateICmpNE(r, zero),
                     b_.CreateXor(b_.CreateICmpSLT(r, zero), b_.CreateICmpSLT(b, zero)));
    if (mod) return b_.CreateSelect(fix, b_.CreateAdd(r, b), r);
    return b_.CreateSelect(fix, b_.CreateSub(q, llvm::ConstantInt::get(a->getType(), 1)), q);
  }

  // and / or: the right side runs only when it decides the result, if it reads memory.
  llvm::Value* logic(const ir::Binary& n) {
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

  // Evaluates `then` only when cond is `when`; otherwise the result is `other`.
  llvm::Value* branch(llvm::Value* cond, bool when, const std::function<llvm::Value*()>& then,
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

  llvm::Value* masked(llvm::Value* lane_mask, const std::function<llvm::Value*()>& fn) {
    llvm::Value* saved = mask_;
    mask_ = saved ? b_.CreateAnd(saved, lane_mask) : lane_mask;
    llvm::Value* v = fn();
    mask_ = saved;
    return v;
  }

  llvm::Value* select(const ir::Select& n) {
    llvm::Value* c = expr(n.cond);
    bool guarded = ir::reads_memory(n.t) || ir::reads_memory(n.f);
    if (!guarded) {
      llvm::Value* t = expr(n.t);
      llvm::Value* f = expr(n.f);
      unify(t, f);
      if (is_vec(t)) c = splat(c);
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

  llvm::Value* call(const ir::Call& n) {
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

  // ---------------------------------------------------------------------
  // Memory

  BufInfo& buffer(const std::string& name) {
    auto it = bufs_.find(name);
    if (it == bufs_.end()) fail("unknown buffer '" + name + "' in " + f_.name);
    return it->second;
  }

  // The address of buf[idx] (a vector of addresses when an index varies
  // across lanes). Row-major, one GEP per dimension: LLVM's alias analysis
  // then sees that rows i and i + 1 are a constant distance apart, which a
  // single flattened index hides (and with it the chance to keep a tile of
  // accumulators in registers).
  llvm::Value* element_ptr(BufInfo& buf, const std::vector<ir::Expr>& idx) {
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

  // How a vectorized access walks memory: 1 = contiguous lanes.
  // A let inside a vectorized loop whose value varies across lanes: its
  // definition, in terms of the lane variable, so that an index using it can
  // still be seen to be contiguous (CSE and LICM introduce such lets).
  std::optional<ir::Expr> define_lane_value(const std::string& name, const ir::Expr& value,
                                            llvm::Value* v) {
    std::optional<ir::Expr> old;
    auto it = lane_defs_.find(name);
    if (it != lane_defs_.end()) old = it->second;
    if (lanes_ && is_vec(v) && ir::is_int(value->type))
      lane_defs_[name] = ir::substitute(value, lane_defs_);
    else
      lane_defs_.erase(name);
    return old;
  }
  void undefine_lane_value(const std::string& name, const std::optional<ir::Expr>& old) {
    if (old)
      lane_defs_[name] = *old;
    else
      lane_defs_.erase(name);
  }

  std::vector<ir::Expr> with_lane_defs(const std::vector<ir::Expr>& idx) {
    if (lane_defs_.empty()) return idx;
    std::vector<ir::Expr> out;
    for (const auto& e : idx) out.push_back(ir::substitute(e, lane_defs_));
    return out;
  }

  std::optional<int64_t> lane_stride(const std::vector<ir::Expr>& raw) {
    if (!lanes_) return std::nullopt;
    std::vector<ir::Expr> idx = with_lane_defs(raw);
    std::set<std::string> unknown = varying_;
    unknown.erase(lane_var_);
    for (const auto& [name, def] : lane_defs_) unknown.erase(name);
    for (size_t k = 0; k + 1 < idx.size(); ++k) {
      auto d = derivative(idx[k], lane_var_, unknown);
      if (!d || *d != 0) return std::nullopt;
    }
    if (idx.empty()) return 0;
    return derivative(idx.back(), lane_var_, unknown);
  }

  // The address of lane 0's element, computed as scalar code.
  llvm::Value* lane0_ptr(BufInfo& buf, const std::vector<ir::Expr>& idx) {
    int saved = lanes_;
    llvm::Value* saved_var = vars_[lane_var_];
    lanes_ = 0;
    vars_[lane_var_] = lane_base_;
    llvm::Value* i = element_ptr(buf, with_lane_defs(idx));
    vars_[lane_var_] = saved_var;
    lanes_ = saved;
    return i;
  }

  llvm::Value* load(const ir::Load& n) {
    BufInfo& buf = buffer(n.buf);
    llvm::Type* mt = mem_type(buf.dtype);
    llvm::Align align(ir::dtype_bytes(buf.dtype));
    auto stride = lane_stride(n.indices);
    llvm::Value* v = nullptr;
    if (lanes_ && stride && *stride == 0) {
      // Uniform across lanes; under a mask, guard the scalar load by "any lane".
      llvm::Value* at = lane0_ptr(buf, n.indices);
      if (mask_) {
        llvm::Value* any = b_.CreateOrReduce(mask_);
        v = branch(
            any, true, [&] { return b_.CreateLoad(mt, at); }, llvm::Constant::getNullValue(mt));
      } else {
        v = b_.CreateLoad(mt, at);
      }
    } else if (lanes_ && stride && *stride == 1) {
      llvm::Value* at = lane0_ptr(buf, n.indices);
      llvm::Type* vt = vec_of(mt);
      if (mask_)
        v = b_.CreateMaskedLoad(vt, at, align, mask_, llvm::Constant::getNullValue(vt));
      else
        v = b_.CreateAlignedLoad(vt, at, align);
    } else {
      llvm::Value* at = element_ptr(buf, n.indices);
      if (is_vec(at)) {
        llvm::Value* ptrs = at;
        llvm::Type* vt = vec_of(mt);
        llvm::Value* m = mask_ ? mask_ : llvm::Constant::getAllOnesValue(vec_of(b_.getInt1Ty()));
        v = b_.CreateMaskedGather(vt, ptrs, align, m, llvm::Constant::getNullValue(vt));
      } else if (mask_) {
        llvm::Value* any = b_.CreateOrReduce(mask_);
        v = branch(
            any, true, [&] { return b_.CreateLoad(mt, at); }, llvm::Constant::getNullValue(mt));
      } else {
        v = b_.CreateAlignedLoad(mt, at, align);
      }
    }
    if (buf.dtype == ir::DType::Bool)
      v = b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    return v;
  }

  void store(const ir::Store& n) {
    BufInfo& buf = buffer(n.buf);
    llvm::Align align(ir::dtype_bytes(buf.dtype));
    llvm::Value* v = expr(n.value);
    auto to_mem = [&](llvm::Value* x) {
      return buf.dtype == ir::DType::Bool ? b_.CreateZExt(x, like(b_.getInt8Ty(), x)) : x;
    };
    auto stride = lane_stride(n.indices);
    if (lanes_ && stride && *stride == 1) {
      llvm::Value* at = lane0_ptr(buf, n.indices);
      b_.CreateAlignedStore(to_mem(splat(v)), at, align);
      return;
    }
    llvm::Value* at = element_ptr(buf, n.indices);
    if (is_vec(at)) {
      llvm::Value* ptrs = at;
      b_.CreateMaskedScatter(to_mem(splat(v)), ptrs, align,
                             llvm::Constant::getAllOnesValue(vec_of(b_.getInt1Ty())));
      return;
    }
    if (is_vec(v))
      fail("vectorized loop '" + lane_var_ + "' stores different lanes to one element of '" +
           n.buf + "'");
    b_.CreateAlignedStore(to_mem(v), at, align);
  }

  // ---------------------------------------------------------------------
  // Statements

  void stmt(const ir::Stmt& s) {
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

  void alloc(const ir::Alloc& n) {
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
    llvm::Value* saved_stack = nullptr;
    if (on_stack) {
      saved_stack = b_.CreateStackSave();
      auto* a = b_.CreateAlloca(b_.getInt8Ty(), bytes, n.buf);
      a->setAlignment(llvm::Align(64));
      info.ptr = a;
    } else {
      llvm::FunctionCallee alloc_fn =
          m_.getOrInsertFunction("kiln_alloc", b_.getPtrTy(), b_.getInt64Ty(), b_.getInt64Ty());
      info.ptr = b_.CreateCall(alloc_fn, {bytes, b_.getInt64(64)}, n.buf);
    }
    auto old = bufs_.find(n.buf);
    std::optional<BufInfo> shadowed;
    if (old != bufs_.end()) shadowed = old->second;
    bufs_[n.buf] = info;
    stmt(n.body);
    if (on_stack) {
      b_.CreateStackRestore(saved_stack);
    } else {
      llvm::FunctionCallee free_fn =
          m_.getOrInsertFunction("kiln_free", b_.getVoidTy(), b_.getPtrTy());
      b_.CreateCall(free_fn, {info.ptr});
    }
    if (shadowed)
      bufs_[n.buf] = *shadowed;
    else
      bufs_.erase(n.buf);
  }

  // A counted loop: for (v = lo; v < hi; v += step) body(v).
  void counted(llvm::Value* lo, llvm::Value* hi, int64_t step, const std::string& name,
               const std::function<void(llvm::Value*)>& body, llvm::MDNode* loop_md = nullptr) {
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

  llvm::MDNode* loop_hint(const char* key) {
    llvm::Metadata* hint = llvm::MDNode::get(
        ctx_, {llvm::MDString::get(ctx_, key), llvm::ConstantAsMetadata::get(b_.getTrue())});
    llvm::MDNode* self = llvm::MDNode::getDistinct(ctx_, {nullptr, hint});
    self->replaceOperandWith(0, self);
    return self;
  }

  void loop(const ir::For& n) {
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
        counted(lo, hi, n.step, n.var, body_at, loop_hint("llvm.loop.vectorize.enable"));
        return;
      case ir::LoopTag::UnrollExplicit: {
        auto* a = ir::as<ir::IntImm>(n.min);
        auto* b = ir::as<ir::IntImm>(n.end);
        if (!a || !b)
          fail("loop '" + n.var + "' is tagged unroll_explicit but its bounds (" +
               ir::to_string(n.min) + ", " + ir::to_string(n.end) + ") are not constants");
        if ((b->value - a->value) / n.step > 4096)
          fail("loop '" + n.var + "' is tagged unroll_explicit but runs more than 4096 times");
        for (int64_t i = a->value; i < b->value; i += n.step) body_at(b_.getInt64(i));
        return;
      }
      case ir::LoopTag::Unroll:
        counted(lo, hi, n.step, n.var, body_at, loop_hint("llvm.loop.unroll.enable"));
        return;
      default:
        counted(lo, hi, n.step, n.var, body_at);
        return;
    }
  }

  // Lanes of a vector: the loop's extent when it is a small constant, else a
  // fixed width with a scalar loop for the remainder.
  static constexpr int kMaxLanes = 16;
  int vector_width(const ir::For& n) {
    auto* a = ir::as<ir::IntImm>(n.min);
    auto* b = ir::as<ir::IntImm>(n.end);
    if (a && b && b->value - a->value >= 1 && b->value - a->value <= kMaxLanes)
      return static_cast<int>(b->value - a->value);
    if (a && b && (b->value - a->value) % kMaxLanes == 0) return kMaxLanes;
    return 8;
  }

  // The body once, on lanes v, v + 1, ..., v + w - 1.
  void vector_body(const ir::For& n, llvm::Value* v, int w) {
    lanes_ = w;
    lane_var_ = n.var;
    lane_base_ = v;
    std::vector<llvm::Constant*> steps;
    for (int k = 0; k < w; ++k) steps.push_back(b_.getInt64(static_cast<uint64_t>(k)));
    llvm::Value* lanes = b_.CreateAdd(b_.CreateVectorSplat(static_cast<unsigned>(w), v),
                                      llvm::ConstantVector::get(steps), n.var);
    auto saved = bind(n.var, lanes);
    stmt(n.body);
    restore(n.var, saved);
    lanes_ = 0;
    lane_var_.clear();
    lane_base_ = nullptr;
  }

  void vectorized(const ir::For& n, llvm::Value* lo, llvm::Value* hi) {
    int w = vector_width(n);
    auto* a = ir::as<ir::IntImm>(n.min);
    auto* b = ir::as<ir::IntImm>(n.end);
    if (a && b && (b->value - a->value) % w == 0 && (b->value - a->value) / w <= 4) {
      // A few whole vectors: no loop at all, so the loops around it see
      // straight-line code (LLVM then keeps accumulators in registers).
      for (int64_t at = a->value; at < b->value; at += w) vector_body(n, b_.getInt64(at), w);
      return;
    }
    // Main part: whole vectors while v + w <= hi.
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
    vector_body(n, v, w);
    llvm::Value* next = b_.CreateAdd(v, b_.getInt64(w), "", false, true);
    b_.CreateBr(head);
    v->addIncoming(next, b_.GetInsertBlock());
    // The remainder, one element at a time.
    b_.SetInsertPoint(tail);
    counted(v, hi, 1, n.var + ".rest", [&](llvm::Value* x) {
      auto saved = bind(n.var, x);
      stmt(n.body);
      restore(n.var, saved);
    });
  }

  // A parallel loop: its body becomes a function of (begin, end, closure)
  // that the runtime's thread pool calls on chunks of the iterations.
  void parallel(const ir::For& n, llvm::Value* lo, llvm::Value* hi) {
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

    auto* task_ty = llvm::FunctionType::get(
        b_.getVoidTy(), {b_.getInt64Ty(), b_.getInt64Ty(), b_.getPtrTy()}, false);
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

  const ir::LoweredFunc& f_;
  const Options& opts_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  std::map<std::string, llvm::Value*> vars_;
  std::map<std::string, BufInfo> bufs_;
  int outlined_ = 0;
  // Vectorization state: lanes_ > 0 inside a vectorized loop over lane_var_.
  int lanes_ = 0;
  std::string lane_var_;
  llvm::Value* lane_base_ = nullptr;
  std::set<std::string> varying_;
  llvm::Value* mask_ = nullptr;
  std::map<std::string, ir::Expr> lane_defs_;  // varying integer lets, by definition
};

}  // namespace

std::string entry_symbol(const ir::LoweredFunc& f) { return "kiln_" + f.name; }

std::unique_ptr<llvm::Module> build_module(const ir::LoweredFunc& f, const Options& opts,
                                           llvm::LLVMContext& ctx) {
  auto m = std::make_unique<llvm::Module>("kiln." + f.name, ctx);
  FunctionBuilder(f, opts, ctx, *m).build();
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os))
    fail("generated LLVM IR for " + f.name + " is invalid: " + problems);
  return m;
}

}  // namespace kiln::codegen
