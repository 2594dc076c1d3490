#include "accumulators.h"

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>

#include <vector>

namespace kiln::codegen {

namespace {

// The parts of one sum that the rewrite touches.
struct Sum {
  llvm::PHINode* phi;       // in the header: start from the preheader, next from the latch
  llvm::LoadInst* start;    // the old value, loaded in the preheader
  llvm::Instruction* next;  // the last fadd of the chain, the latch's value
  llvm::StoreInst* store;   // next (or its LCSSA phi) stored to start's pointer after the loop
};

bool writes_memory(const llvm::Loop& loop) {
  for (const llvm::BasicBlock* b : loop.blocks())
    for (const llvm::Instruction& i : *b)
      if (i.mayWriteToMemory()) return true;
  return false;
}

bool reassociable_fadd(const llvm::Value* v, const llvm::Loop& loop) {
  const auto* add = llvm::dyn_cast<llvm::BinaryOperator>(v);
  return add && add->getOpcode() == llvm::Instruction::FAdd && add->hasAllowReassoc() &&
         loop.contains(add);
}

// The phi's sum, if the rewrite may apply to it.
std::optional<Sum> sum_of(llvm::PHINode* phi, const llvm::Loop& loop, llvm::BasicBlock* preheader,
                          llvm::BasicBlock* exit) {
  if (phi->getNumIncomingValues() != 2 || !phi->getType()->isFPOrFPVectorTy()) return std::nullopt;
  auto* start = llvm::dyn_cast<llvm::LoadInst>(phi->getIncomingValueForBlock(preheader));
  if (!start || !start->isSimple() || start->getParent() != preheader || !start->hasOneUse())
    return std::nullopt;
  llvm::BasicBlock* latch = loop.getLoopLatch();
  auto* next = llvm::dyn_cast<llvm::Instruction>(phi->getIncomingValueForBlock(latch));
  if (!next || !reassociable_fadd(next, loop)) return std::nullopt;
  // phi -> fadd -> fadd -> ... -> next, each feeding only the next.
  llvm::Value* at = phi;
  for (int steps = 0; at != next; ++steps) {
    if (steps > 64 || !at->hasOneUse()) return std::nullopt;
    llvm::User* user = *at->user_begin();
    if (!reassociable_fadd(user, loop)) return std::nullopt;
    at = user;
  }
  // next feeds the phi and, after the loop, the store (through an LCSSA phi
  // or not), nothing else.
  llvm::StoreInst* store = nullptr;
  for (llvm::User* user : next->users()) {
    if (user == phi) continue;
    llvm::Value* stored = next;
    if (auto* lcssa = llvm::dyn_cast<llvm::PHINode>(user);
        lcssa && lcssa->getParent() == exit && lcssa->hasOneUse()) {
      stored = lcssa;
      user = *lcssa->user_begin();
    }
    auto* s = llvm::dyn_cast<llvm::StoreInst>(user);
    if (store || !s || !s->isSimple() || s->getParent() != exit || s->getValueOperand() != stored ||
        s->getPointerOperand() != start->getPointerOperand())
      return std::nullopt;
    store = s;
  }
  if (!store) return std::nullopt;
  return Sum{phi, start, next, store};
}

void rewrite(const Sum& s) {
  llvm::Type* t = s.phi->getType();
  llvm::Value* p = s.start->getPointerOperand();
  // Where the old value was loaded, a prefetch of it (read, keep in all levels).
  llvm::IRBuilder<> at_start(s.start);
  at_start.CreateIntrinsic(llvm::Intrinsic::prefetch, {p->getType()},
                           {p, at_start.getInt32(0), at_start.getInt32(3), at_start.getInt32(1)});
  s.phi->setIncomingValueForBlock(s.start->getParent(), llvm::ConstantFP::getZero(t, true));
  // After the loop: old value + the loop's sum.
  llvm::IRBuilder<> at_store(s.store);
  llvm::LoadInst* old = at_store.CreateAlignedLoad(t, p, s.start->getAlign());
  old->copyMetadata(*s.start);
  at_store.setFastMathFlags(s.next->getFastMathFlags());
  s.store->setOperand(0, at_store.CreateFAdd(old, s.store->getValueOperand()));
  s.start->eraseFromParent();
}

}  // namespace

llvm::PreservedAnalyses AccumulateFromZero::run(llvm::Function& f,
                                                llvm::FunctionAnalysisManager& fam) {
  llvm::LoopInfo& loops = fam.getResult<llvm::LoopAnalysis>(f);
  std::vector<Sum> sums;
  for (llvm::Loop* loop : loops.getLoopsInPreorder()) {
    llvm::BasicBlock* preheader = loop->getLoopPreheader();
    llvm::BasicBlock* exit = loop->getExitBlock();
    if (!loop->isInnermost() || !preheader || !exit || !loop->getLoopLatch() ||
        !exit->getSinglePredecessor() || writes_memory(*loop))
      continue;
    for (llvm::PHINode& phi : loop->getHeader()->phis())
      if (auto s = sum_of(&phi, *loop, preheader, exit)) sums.push_back(*s);
  }
  for (const Sum& s : sums) rewrite(s);
  if (sums.empty()) return llvm::PreservedAnalyses::all();
  llvm::PreservedAnalyses kept;
  kept.preserveSet<llvm::CFGAnalyses>();
  return kept;
}

}  // namespace kiln::codegen
