// The IR queries every pass shares (kiln/analysis.h): one rule for what may
// trap, what reads memory, what may be evaluated early, and which names are free.
#include "kiln/analysis.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kiln::ir {
namespace {

Expr x() { return var("x"); }
Expr y() { return var("y"); }
Expr fx() { return var("f", DType::F32); }
Expr div(Expr a, Expr b) { return binary(BinaryOp::Div, std::move(a), std::move(b)); }
Expr mod(Expr a, Expr b) { return binary(BinaryOp::Mod, std::move(a), std::move(b)); }

TEST(Analysis, IntegerDivisionTrapsUnlessByAConstantOtherThanZeroAndMinusOne) {
  EXPECT_FALSE(may_trap(div(x(), int_imm(4))));
  EXPECT_FALSE(may_trap(mod(x(), int_imm(-3))));
  EXPECT_TRUE(may_trap(div(x(), y())));
  EXPECT_TRUE(may_trap(div(x(), int_imm(0))));
  EXPECT_TRUE(may_trap(div(x(), int_imm(-1))));  // INT_MIN / -1
  EXPECT_TRUE(may_trap(mod(x(), int_imm(-1))));
  EXPECT_TRUE(may_trap(x() + div(int_imm(1), y())));  // anywhere inside
  // Float division does not trap, whatever the divisor.
  EXPECT_FALSE(may_trap(div(fx(), var("g", DType::F32))));
  EXPECT_FALSE(may_trap(div(fx(), float_imm(0.0))));
}

TEST(Analysis, MemoryReadsAndUnknownCalls) {
  Expr l = load("A", {x()}, DType::F32);
  EXPECT_TRUE(reads_memory(l));
  EXPECT_TRUE(reads_memory(access("c", {x()}, DType::F32) * float_imm(2.0)));
  EXPECT_FALSE(reads_memory(x() + y()));
  EXPECT_TRUE(reads_memory(x() + cast(DType::I64, load("B", {y()}, DType::I32))));
  EXPECT_FALSE(calls_unknown(call("exp", {fx()})));
  EXPECT_TRUE(calls_unknown(std::make_shared<Call>("printf", std::vector<Expr>{fx()}, DType::F32)));
}

TEST(Analysis, SpeculatableIsPureAndCannotTrap) {
  EXPECT_TRUE(speculatable(x() * int_imm(4) + y()));
  EXPECT_TRUE(speculatable(call("sqrt", {div(fx(), var("g", DType::F32))})));
  EXPECT_FALSE(speculatable(load("A", {x()}, DType::F32)));
  EXPECT_FALSE(speculatable(div(x(), y())));
  EXPECT_FALSE(speculatable(div(x(), int_imm(-1))));
}

TEST(Analysis, FreeVarsLeaveOutWhatLetsAndLoopsBind) {
  Expr e = let("t", x() + int_imm(1), var("t") * y());
  EXPECT_EQ(free_vars(e), (std::set<std::string>{"x", "y"}));
  EXPECT_EQ(names_in(e), (std::set<std::string>{"t", "x", "y"}));
  // A let's name is free in its own value when an outer binding does not cover it.
  EXPECT_EQ(free_vars(let("t", var("t"), var("t"))), (std::set<std::string>{"t"}));

  Stmt store = std::make_shared<Store>("B", std::vector<Expr>{var("i") + var("n")}, var("v"));
  Stmt body = std::make_shared<LetStmt>("v", var("i") * var("k"), store);
  Stmt loop = std::make_shared<For>("i", int_imm(0), var("n"), 1, LoopTag::None, body);
  EXPECT_EQ(free_vars(loop), (std::set<std::string>{"k", "n"}));
  EXPECT_EQ(names_in(loop), (std::set<std::string>{"i", "k", "n", "v"}));
}

TEST(Analysis, ChildrenAreVisitedAndRebuiltOnlyWhenChanged) {
  Expr e = select(binary(BinaryOp::Lt, x(), y()), x() + int_imm(1), y());
  std::vector<std::string> seen;
  for_each_child(e, [&](const Expr& c) { seen.push_back(to_string(c)); });
  EXPECT_EQ(seen, (std::vector<std::string>{"x < y", "x + 1", "y"}));
  EXPECT_EQ(map_children(e, [](const Expr& c) { return c; }), e);
  Expr swapped = map_children(e, [](const Expr& c) { return equal(c, y()) ? x() : c; });
  EXPECT_EQ(to_string(swapped), "select(x < y, x + 1, x)");
  EXPECT_TRUE(any_subexpr(e, [](const Expr& c) { return c->kind == ExprKind::IntImm; }));
  EXPECT_FALSE(any_subexpr(e, [](const Expr& c) { return c->kind == ExprKind::Load; }));
}

}  // namespace
}  // namespace kiln::ir
