// Specifications of common subexpression elimination: seed 004's examples, normalization, safety.
#include "kiln/passes/cse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/interp.h"
#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::passes {
namespace {

using namespace kiln::ir;  // NOLINT: the tests build a lot of IR

Expr v(const std::string& n) { return var(n); }
Expr f(const std::string& n) { return var(n, DType::F32); }
Expr c(int64_t x) { return int_imm(x); }
Expr operator/(Expr a, Expr b) { return binary(BinaryOp::Div, std::move(a), std::move(b)); }
Expr operator%(Expr a, Expr b) { return binary(BinaryOp::Mod, std::move(a), std::move(b)); }
Expr bin(BinaryOp op, Expr a, Expr b) { return binary(op, std::move(a), std::move(b)); }
Stmt store(const std::string& buf, Expr index, Expr value) {
  return std::make_shared<Store>(buf, std::vector<Expr>{std::move(index)}, std::move(value));
}
Stmt let_stmt(const std::string& name, Expr value, Stmt body) {
  return std::make_shared<LetStmt>(name, std::move(value), std::move(body));
}
Stmt loop(const std::string& name, Expr end, Stmt body) {
  return std::make_shared<For>(name, c(0), std::move(end), 1, LoopTag::None, std::move(body));
}
Stmt if_then_else(Expr cond, Stmt t, Stmt e) {
  return std::make_shared<IfThenElse>(std::move(cond), std::move(t), std::move(e));
}

std::string after(const Stmt& s) { return to_string(cse(s)); }

// Seed 004, test_cse: z1 + z2 is shared where z1 and z2 are both bound, x + y
// only below the lets of x and y.
TEST(Cse, SeedExampleSharesEachComputationWhereItsVariablesAreBound) {
  Expr x = v("x"), y = v("y"), z1 = v("z1"), z2 = v("z2");
  Stmt inner = let_stmt("x", c(1),
                        let_stmt("y", c(1),
                                 let_stmt("a", (x + y) + (z1 + z2),
                                          let_stmt("b", (x + y) + v("z3"),
                                                   store("buffer", v("i2"), v("a") + v("b"))))));
  Stmt s =
      let_stmt("z1", c(1), let_stmt("z2", c(2), block({store("buffer", v("i1"), z1 + z2), inner})));
  EXPECT_EQ(after(s),
            "let z1 = 1;\n"
            "let z2 = 2;\n"
            "let cse_var_1 = z1 + z2;\n"
            "buffer[i1] = cse_var_1;\n"
            "let x = 1;\n"
            "let y = 1;\n"
            "let cse_var_2 = x + y;\n"
            "let a = cse_var_2 + cse_var_1;\n"
            "let b = cse_var_2 + z3;\n"
            "buffer[i2] = a + b;\n");
}

// Seed 004, test_cse_cascade: the longer computation is shared first, then the
// shorter one inside it, whose let goes outside.
TEST(Cse, SeedCascadePutsLongerComputationsInsideShorterOnes) {
  Stmt s = block({store("buffer", v("i1"), (v("x") + v("y")) + v("z")),
                  store("buffer", v("i2"), (v("x") + v("y")) + v("z")),
                  store("buffer", v("i3"), v("x") + v("y"))});
  EXPECT_EQ(after(s),
            "let cse_var_2 = x + y;\n"
            "let cse_var_1 = cse_var_2 + z;\n"
            "buffer[i1] = cse_var_1;\n"
            "buffer[i2] = cse_var_1;\n"
            "buffer[i3] = cse_var_2;\n");
}

TEST(Cse, IntegerSumsAreOneComputationWhateverTheirOrderAndGrouping) {
  Stmt s = block({store("buffer", v("i1"), (v("x") + v("y")) + v("z")),
                  store("buffer", v("i2"), v("z") + (v("x") + v("y"))),
                  store("buffer", v("i3"), v("y") + (v("z") + v("x")))});
  EXPECT_EQ(after(s),
            "let cse_var_1 = x + y + z;\n"
            "buffer[i1] = cse_var_1;\n"
            "buffer[i2] = cse_var_1;\n"
            "buffer[i3] = cse_var_1;\n");
}

// Without commutative matching (TVM's rule) only equal trees are one
// computation: x + y is shared as the left of the first two sums, and the
// third, (z + x) under y, has nothing in common with them.
TEST(Cse, WithoutCommutativeMatchingOnlyEqualTreesAreShared) {
  Stmt s = block({store("buffer", v("i1"), (v("x") + v("y")) + v("z")),
                  store("buffer", v("i2"), v("z") + (v("x") + v("y"))),
                  store("buffer", v("i3"), v("y") + (v("z") + v("x")))});
  CseOptions structural;
  structural.commutative = false;
  EXPECT_EQ(to_string(cse(s, structural)),
            "let cse_var_1 = x + y;\n"
            "buffer[i1] = cse_var_1 + z;\n"
            "buffer[i2] = z + cse_var_1;\n"
            "buffer[i3] = y + (z + x);\n");
}

TEST(Cse, IntegerMinMaxAndLogicChainsAreNormalizedToo) {
  Expr lo = bin(BinaryOp::Min, bin(BinaryOp::Min, v("a"), v("b")), v("c"));
  Expr lo2 = bin(BinaryOp::Min, v("c"), bin(BinaryOp::Min, v("b"), v("a")));
  Expr p = bin(BinaryOp::Lt, v("a"), v("b")), q = bin(BinaryOp::Lt, v("b"), v("c"));
  Stmt s = block({store("o", v("i"), lo), store("o", v("j"), lo2),
                  store("m", v("i"), select(bin(BinaryOp::And, p, q), c(1), c(0))),
                  store("m", v("j"), select(bin(BinaryOp::And, q, p), c(2), c(3)))});
  EXPECT_EQ(after(s),
            "let cse_var_2 = min(min(a, b), c);\n"
            "let cse_var_1 = a < b and b < c;\n"
            "o[i] = cse_var_2;\n"
            "o[j] = cse_var_2;\n"
            "m[i] = select(cse_var_1, 1, 0);\n"
            "m[j] = select(cse_var_1, 2, 3);\n");
}

TEST(Cse, FloatProductsCommuteButFloatSumsAreNeverReassociated) {
  Stmt products = block({store("o", v("i"), f("a") * f("b")), store("o", v("j"), f("b") * f("a"))});
  EXPECT_EQ(after(products),
            "let cse_var_1 = a * b;\n"
            "o[i] = cse_var_1;\n"
            "o[j] = cse_var_1;\n");

  Stmt sums = block({store("o", v("i"), (f("a") + f("b")) + f("c")),
                     store("o", v("j"), f("a") + (f("b") + f("c")))});
  EXPECT_EQ(after(sums), to_string(sums));
}

TEST(Cse, LoadsAreNeverSharedButTheirIndicesAre) {
  Expr idx = v("i") * c(4) + v("j");
  Expr a = load("A", {idx}, DType::F32);
  Stmt s = block({store("A", v("k"), a + float_imm(1.0)), store("o", v("i"), a + float_imm(1.0))});
  EXPECT_EQ(after(s),
            "let cse_var_1 = i * 4 + j;\n"
            "A[k] = A[cse_var_1] + 1.0;\n"
            "o[i] = A[cse_var_1] + 1.0;\n");

  Stmt only_loads = block({store("o", v("i"), load("A", {v("i")}, DType::F32) * float_imm(2.0)),
                           store("o", v("j"), load("A", {v("i")}, DType::F32) * float_imm(2.0))});
  EXPECT_EQ(after(only_loads), to_string(only_loads));
}

TEST(Cse, CallsToMathIntrinsicsAreSharedOthersAreNot) {
  Expr e = call("exp", {f("a")});
  Expr g = call("rand", {f("a")});
  Stmt s = block({store("o", v("i"), e + g), store("o", v("j"), e * g)});
  EXPECT_EQ(after(s),
            "let cse_var_1 = exp(a);\n"
            "o[i] = cse_var_1 + rand(a);\n"
            "o[j] = cse_var_1 * rand(a);\n");
}

TEST(Cse, ALetIsNotHoistedAboveTheLoopThatBindsOneOfItsVariables) {
  Stmt body = block({store("A", v("j"), v("j") * c(4) + v("k") * v("k")),
                     store("B", v("j"), v("j") * c(4) + v("k") * v("k") + c(1))});
  Stmt s = loop("j", v("n"), body);
  EXPECT_EQ(after(s),
            "let cse_var_1 = k * k;\n"
            "for (j = 0; j < n; j += 1) {\n"
            "  let cse_var_2 = j * 4 + cse_var_1;\n"
            "  A[j] = cse_var_2;\n"
            "  B[j] = cse_var_2 + 1;\n"
            "}\n");
}

TEST(Cse, ADivisionThatMayTrapIsNotEvaluatedWhereItWasNot) {
  // The loop may run zero times with d == 0: x / d stays inside it.
  Stmt s = loop("j", v("n"),
                block({store("A", v("j"), v("x") / v("d")), store("B", v("j"), v("x") / v("d"))}));
  EXPECT_EQ(after(s),
            "for (j = 0; j < n; j += 1) {\n"
            "  let cse_var_1 = x / d;\n"
            "  A[j] = cse_var_1;\n"
            "  B[j] = cse_var_1;\n"
            "}\n");
}

// Decision (seed 004's intersection): a computation done in both branches of
// an if is evaluated on every path, so it may move above the if; one done twice
// in a single branch gets its let inside that branch. Only whole computations
// are matched across branches: x * y inside x * y + 1 and x * y - 1 stays.
TEST(Cse, IfBranchesHaveTheirOwnTablesAndShareWhatBothCompute) {
  Expr xy = v("x") * v("y");
  Stmt s = if_then_else(bin(BinaryOp::Lt, v("i"), v("n")),
                        block({store("A", v("i"), xy / v("d")),
                               store("B", v("i"), (v("x") + v("z")) * (v("x") + v("z")))}),
                        store("C", v("i"), v("y") * v("x") / v("d")));
  EXPECT_EQ(after(s),
            "let cse_var_1 = x * y / d;\n"
            "if (i < n) {\n"
            "  let cse_var_2 = x + z;\n"
            "  A[i] = cse_var_1;\n"
            "  B[i] = cse_var_2 * cse_var_2;\n"
            "} else {\n"
            "  C[i] = cse_var_1;\n"
            "}\n");

  Stmt partial = if_then_else(bin(BinaryOp::Lt, v("i"), v("n")), store("A", v("i"), xy + c(1)),
                              store("A", v("i"), xy - c(1)));
  EXPECT_EQ(after(partial), to_string(partial));

  // Without an else, nothing in the then branch runs on every path.
  Stmt one_sided = block({if_then_else(bin(BinaryOp::Lt, v("i"), v("n")),
                                       store("A", v("i"), v("x") / v("d")), nullptr),
                          store("B", v("i"), v("x") / v("d"))});
  EXPECT_EQ(after(one_sided), to_string(one_sided));
}

TEST(Cse, SelectBranchesAndTheRightOfShortCircuitsGetTheirOwnScopes) {
  Expr q = v("x") / v("d");
  Expr e = select(bin(BinaryOp::Ne, v("d"), c(0)), q + q, c(0));
  EXPECT_EQ(to_string(cse(e)),
            "select(d != 0, (let cse_var_1 = x / d in cse_var_1 + cse_var_1), 0)");
}

TEST(Cse, ExpressionsGetLetExpressions) {
  Expr s = v("x") + v("y");
  EXPECT_EQ(to_string(cse(s * s)), "(let cse_var_1 = x + y in cse_var_1 * cse_var_1)");
  EXPECT_EQ(to_string(cse(v("x") + v("y"))), "x + y");
}

TEST(Cse, NewNamesDoNotCollideWithNamesInUse) {
  Stmt s = let_stmt("cse_var_1", c(3),
                    block({store("o", v("i"), v("cse_var_1") * v("y") + c(1)),
                           store("o", v("j"), v("cse_var_1") * v("y") + c(2))}));
  EXPECT_EQ(after(s),
            "let cse_var_1 = 3;\n"
            "let cse_var_2 = cse_var_1 * y;\n"
            "o[i] = cse_var_2 + 1;\n"
            "o[j] = cse_var_2 + 2;\n");
}

// Below the let of t, a computation equal to t's value is replaced by t. (With
// the default min_uses, t's value and the use below would first be counted as
// two and get their own variable, as in TVM.)
TEST(Cse, AVariableInScopeIsReusedForItsValue) {
  Stmt s = let_stmt("t", v("x") + v("y"), store("o", v("i"), (v("y") + v("x")) * c(2)));
  EXPECT_EQ(to_string(cse(s, CseOptions{.min_uses = 3})),
            "let t = x + y;\n"
            "o[i] = t * 2;\n");
  EXPECT_EQ(after(s),
            "let cse_var_1 = x + y;\n"
            "let t = cse_var_1;\n"
            "o[i] = cse_var_1 * 2;\n");
}

Stmt nest() {
  Expr flat = v("i") * c(6) + v("j");
  Expr a = load("A", {flat}, DType::F32);
  Expr w = cast(DType::F32, (v("i") + v("j")) * (v("j") + v("i")));
  Expr q = (v("i") * v("j") + c(3)) / (v("j") + c(1));
  Expr r = (v("j") * v("i") + c(3)) % c(5);
  return loop("i", c(4),
              loop("j", c(6),
                   block({store("out", v("i") * c(6) + v("j"), a * w + a * w),
                          store("out2", v("j") + c(6) * v("i"),
                                select(bin(BinaryOp::Gt, v("j"), c(2)), q + q, r) +
                                    (v("j") * v("i") + c(3)))})));
}

TEST(Cse, RunningTwiceChangesNothingMore) {
  for (const Stmt& s :
       {nest(),
        loop("j", v("n"),
             block({store("A", v("j"), v("x") / v("d")), store("B", v("j"), v("x") / v("d"))}))}) {
    Stmt once = cse(s);
    EXPECT_EQ(to_string(cse(once)), to_string(once));
  }
}

TEST(Cse, TheLoopInterpreterGivesIdenticalResultsBeforeAndAfter) {
  LoweredFunc fn;
  fn.name = "nest";
  fn.args = {Buf{"A", DType::F32, {c(24)}, BufKind::Input, MemLoc::Heap, {}, {}},
             Buf{"out", DType::F32, {c(24)}, BufKind::Output, MemLoc::Heap, {}, {}},
             Buf{"out2", DType::I64, {c(24)}, BufKind::Output, MemLoc::Heap, {}, {}}};
  fn.body = nest();
  LoweredFunc optimized = fn;
  optimized.body = cse(fn.body);
  ASSERT_NE(to_string(optimized.body), to_string(fn.body));

  auto bindings = [] {
    Bindings b;
    b.buffers["A"] = HostBuffer(DType::F32, {24});
    for (int64_t k = 0; k < 24; ++k) b.buffers["A"].set_f(k, 0.25 * static_cast<double>(k) - 2.0);
    b.buffers["out"] = HostBuffer(DType::F32, {24});
    b.buffers["out2"] = HostBuffer(DType::I64, {24});
    return b;
  };
  Bindings before = bindings(), now = bindings();
  interp::run_loops(fn, before);
  interp::run_loops(optimized, now);
  for (int64_t k = 0; k < 24; ++k) {
    EXPECT_EQ(before.buffers["out"].get_f(k), now.buffers["out"].get_f(k)) << k;
    EXPECT_EQ(before.buffers["out2"].get_i(k), now.buffers["out2"].get_i(k)) << k;
  }
}

// CPU (the pipeline sets small_loop): xo * 4 + xi in two 4-iteration serial
// loops, which LLVM unrolls; xo * 4 is not bound before them, only what
// repeats inside one loop is shared there (maxpool).
TEST(Cse, OnCpusSmallSerialLoopsShareOnlyInside) {
  Expr idx = v("xo") * c(4) + v("xi");
  Stmt s = loop("xo", v("n"),
                block({loop("xi", c(4), store("B", idx, c(0))),
                       loop("xi", c(4), store("B", idx, bin(BinaryOp::Add, idx, c(1))))}));
  std::string pinned = to_string(cse(s, {.small_loop = 8}));
  EXPECT_EQ(pinned.find("= xo * 4;"), std::string::npos) << pinned;
  EXPECT_NE(pinned.find("let cse_var_1 = xo * 4 + xi;"), std::string::npos) << pinned;
  std::string shared = after(s);
  EXPECT_NE(shared.find("let cse_var_1 = xo * 4;"), std::string::npos) << shared;
}

}  // namespace
}  // namespace kiln::passes
