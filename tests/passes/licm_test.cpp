// Specifications of loop-invariant code motion (seed 000): normalization, the cost model, hoisting.
#include "kiln/passes/licm.h"

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
Expr c(int64_t x) { return int_imm(x); }
Expr lt(Expr a, Expr b) { return binary(BinaryOp::Lt, std::move(a), std::move(b)); }
Expr gt(Expr a, Expr b) { return binary(BinaryOp::Gt, std::move(a), std::move(b)); }
Expr all(Expr a, Expr b) { return binary(BinaryOp::And, std::move(a), std::move(b)); }
Expr div(Expr a, Expr b) { return binary(BinaryOp::Div, std::move(a), std::move(b)); }
Stmt loop(const std::string& x, Expr lo, Expr hi, Stmt body) {
  return std::make_shared<For>(x, std::move(lo), std::move(hi), 1, LoopTag::None, std::move(body));
}
Stmt loop(const std::string& x, int64_t hi, Stmt body) { return loop(x, c(0), c(hi), body); }
Stmt store(const std::string& b, Expr i, Expr val) {
  return std::make_shared<Store>(b, std::vector<Expr>{std::move(i)}, std::move(val));
}
Stmt eval(Expr e) { return std::make_shared<Evaluate>(std::move(e)); }
Stmt if_(Expr cond, Stmt t, Stmt e = nullptr) {
  return std::make_shared<IfThenElse>(std::move(cond), std::move(t), std::move(e));
}
Stmt let_(const std::string& x, Expr val, Stmt body) {
  return std::make_shared<LetStmt>(x, std::move(val), std::move(body));
}

// The expression evaluated at the bottom of a nest of Fors.
Expr innermost(const Stmt& s) {
  if (const auto* f = as<For>(s)) return innermost(f->body);
  return as<Evaluate>(s)->value;
}

// ---------------------------------------------------------------------------
// Normalize: the paper's examples, exactly.

// (((3 < i) && (3 < j)) && (i < 56)) && (j < 56), expression (1) of seed 000.
Expr paper_expr_1() {
  return all(all(all(lt(c(3), v("i")), lt(c(3), v("j"))), lt(v("i"), c(56))), lt(v("j"), c(56)));
}
// ((3 < i) && (i < 56)) && ((3 < j) && (j < 56)), expression (2).
Expr paper_expr_2() {
  return all(all(lt(c(3), v("i")), lt(v("i"), c(56))), all(lt(c(3), v("j")), lt(v("j"), c(56))));
}

TEST(Normalize, PaperExpression1BecomesExpression2) {
  // Ranks: i = 1 (outer loop), j = 2; operands stable-sorted by rank, equal ranks grouped.
  Stmt s = normalize(loop("i", 64, loop("j", 64, eval(paper_expr_1()))));
  Expr e = innermost(s);
  EXPECT_TRUE(equal(e, paper_expr_2())) << to_string(e);
  EXPECT_EQ(to_string(e), "3 < i and i < 56 and (3 < j and j < 56)");
}

TEST(Normalize, InvariantConjunctsGroupWhateverTheirRank) {
  // With j invariant (a param, rank 0) and i the only iterator, the same two
  // groups form; the invariant one comes first.
  Expr e = innermost(normalize(loop("i", 64, eval(paper_expr_1()))));
  EXPECT_EQ(to_string(e), "3 < j and j < 56 and (3 < i and i < 56)");
}

TEST(Normalize, PaperExpression3BecomesExpression4) {
  // ((3 < i) && (3 < j)) ? (((i < 56) && (j < 56)) ? 1 : 0) : 0, expression (3).
  Expr e3 = select(all(lt(c(3), v("i")), lt(c(3), v("j"))),
                   select(all(lt(v("i"), c(56)), lt(v("j"), c(56))), c(1), c(0)), c(0));
  Expr e = innermost(normalize(loop("i", 64, loop("j", 64, eval(e3)))));
  // (((3 < i) && (i < 56)) && ((3 < j) && (j < 56))) ? 1 : 0, expression (4).
  EXPECT_TRUE(equal(e, select(paper_expr_2(), c(1), c(0)))) << to_string(e);
  EXPECT_EQ(to_string(e), "select(3 < i and i < 56 and (3 < j and j < 56), 1, 0)");
}

TEST(Normalize, SortsIndexArithmeticByLoopDepth) {
  Expr idx = v("yi") + v("xo") * c(32768) + c(5) + v("xi") * c(1024);
  Expr e = innermost(normalize(loop("xo", 4, loop("xi", 4, loop("yi", 4, eval(idx))))));
  EXPECT_EQ(to_string(e), "xo * 32768 + 5 + xi * 1024 + yi");
}

TEST(Normalize, DoesNotReassociateFloats) {
  Expr f = var("f", DType::F32);
  Expr e = float_imm(1.0) + (var("x", DType::F32) + f);
  Stmt s = loop("i", 4, eval(e));
  EXPECT_EQ(normalize(s), s);
}

TEST(Normalize, DoesNotReorderAGuardBeforeALoad) {
  Expr guarded = all(lt(v("i"), v("n")), gt(load("A", {v("i")}, DType::I64), c(0)));
  Stmt s = loop("i", 4, eval(all(guarded, lt(v("n"), c(3)))));
  EXPECT_EQ(normalize(s), s);
}

TEST(Normalize, CollapsesNestedIfsAndConcatenatesAdjacentIfs) {
  Stmt nested =
      loop("i", 8, if_(lt(v("i"), c(4)), if_(lt(c(1), v("n")), store("B", v("i"), c(1)))));
  EXPECT_EQ(to_string(normalize(nested)),
            "for (i = 0; i < 8; i += 1) {\n"
            "  if (1 < n and i < 4) {\n"
            "    B[i] = 1;\n"
            "  }\n"
            "}\n");
  Stmt adjacent = block({if_(lt(v("n"), c(4)), store("B", c(0), c(1))),
                         if_(lt(v("n"), c(4)), store("B", c(1), c(2)), store("B", c(1), c(3)))});
  EXPECT_EQ(to_string(normalize(adjacent)),
            "if (n < 4) {\n"
            "  B[0] = 1;\n"
            "  B[1] = 2;\n"
            "} else {\n"
            "  B[1] = 3;\n"
            "}\n");
}

// ---------------------------------------------------------------------------
// Hoisting

Stmt matmul_nest() {
  Expr idx = v("xo") * c(32768) + v("xi") * c(1024) + v("yo") * c(32) + v("yi");
  return loop("xo", 4,
              loop("xi", 32, loop("yo", 32, loop("yi", 32, store("C", idx, float_imm(0.0))))));
}

TEST(Licm, HoistsTheTiledIndexOutOfTheInnermostLoop) {
  EXPECT_EQ(to_string(licm(normalize(matmul_nest()))),
            "for (xo = 0; xo < 4; xo += 1) {\n"
            "  let licm_var_1 = xo * 32768;\n"
            "  for (xi = 0; xi < 32; xi += 1) {\n"
            "    let licm_var_2 = licm_var_1 + xi * 1024;\n"
            "    for (yo = 0; yo < 32; yo += 1) {\n"
            "      let licm_var_3 = licm_var_2 + yo * 32;\n"
            "      for (yi = 0; yi < 32; yi += 1) {\n"
            "        C[licm_var_3 + yi] = 0.0;\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(Licm, CostThresholdKeepsCheapExpressionsInPlace) {
  Stmt s = loop("i", 8, loop("j", 8, store("B", v("i") + c(1) + v("j"), c(0))));
  EXPECT_EQ(licm(s, {.threshold = 3}), s);  // cost(i + 1) = 1 < 3
  EXPECT_EQ(to_string(licm(s)),
            "for (i = 0; i < 8; i += 1) {\n"
            "  let licm_var_1 = i + 1;\n"
            "  for (j = 0; j < 8; j += 1) {\n"
            "    B[licm_var_1 + j] = 0;\n"
            "  }\n"
            "}\n");
}

TEST(Licm, OnGpusSmallConstantLoopsCostNothing) {
  Stmt s = loop("i", c(0), v("n"), loop("k", 4, store("B", v("i") * c(64) + v("k"), c(0))));
  EXPECT_EQ(licm(s, {.gpu = true}), s);
  EXPECT_NE(licm(s, {.gpu = false}), s);
  // A loop longer than small_loop is not unrolled by the backend: hoist.
  Stmt big = loop("i", c(0), v("n"), loop("k", 64, store("B", v("i") * c(64) + v("k"), c(0))));
  EXPECT_NE(licm(big, {.gpu = true}), big);
}

// CPU (the pipeline sets unrolled_serial_loops): LLVM unrolls a small serial
// loop completely and needs each copy's index as base + constant in the copy,
// so the base xo * 4 of O[xo * 4 + xi] stays in the loop (maxpool).
TEST(Licm, OnCpusSmallSerialLoopsKeepTheirIndexBase) {
  Stmt s = loop("xo", c(0), v("n"), loop("xi", 4, store("B", v("xo") * c(4) + v("xi"), c(0))));
  EXPECT_EQ(licm(s, {.unrolled_serial_loops = true}), s);
  EXPECT_NE(licm(s), s);
  // A vectorized loop is not unrolled by LLVM, nor is a long one: hoist.
  Stmt vec = loop("xo", c(0), v("n"),
                  std::make_shared<For>("xi", c(0), c(4), 1, LoopTag::Vectorize,
                                        store("B", v("xo") * c(4) + v("xi"), c(0))));
  EXPECT_NE(licm(vec, {.unrolled_serial_loops = true}), vec);
  Stmt big = loop("xo", c(0), v("n"), loop("xi", 64, store("B", v("xo") * c(64) + v("xi"), c(0))));
  EXPECT_NE(licm(big, {.unrolled_serial_loops = true}), big);
}

TEST(Licm, NeverHoistsLoads) {
  // A[0] is invariant in the expression but the store to A changes it.
  Stmt s = loop("j", 8, store("A", v("j"), load("A", {c(0)}, DType::I64) + c(1)));
  EXPECT_EQ(licm(s), s);
  // The load's index may move; the load itself stays.
  Stmt t = loop("i", 8, loop("j", 8, store("B", v("j"), load("A", {v("i") * c(2)}, DType::I64))));
  EXPECT_EQ(to_string(licm(t)),
            "for (i = 0; i < 8; i += 1) {\n"
            "  let licm_var_1 = i * 2;\n"
            "  for (j = 0; j < 8; j += 1) {\n"
            "    B[j] = A[licm_var_1];\n"
            "  }\n"
            "}\n");
}

TEST(Licm, DividesOutsideTheLoopOnlyByNonzeroConstants) {
  // The loop may run zero times with m == 0: x / m must stay inside.
  Stmt s = loop("i", c(0), v("n"), store("B", v("i"), div(v("x"), v("m"))));
  EXPECT_EQ(licm(s), s);
  Stmt t = loop("i", c(0), v("n"), store("B", v("i"), div(v("x"), c(4))));
  EXPECT_EQ(to_string(licm(t)),
            "let licm_var_1 = x / 4;\n"
            "for (i = 0; i < n; i += 1) {\n"
            "  B[i] = licm_var_1;\n"
            "}\n");
}

TEST(Licm, HoistsInvariantLetStatements) {
  Stmt s = loop("i", 8, loop("j", 8, let_("t", v("i") * c(4), store("B", v("t") + v("j"), c(0)))));
  EXPECT_EQ(to_string(licm(s)),
            "for (i = 0; i < 8; i += 1) {\n"
            "  let t = i * 4;\n"
            "  for (j = 0; j < 8; j += 1) {\n"
            "    B[t + j] = 0;\n"
            "  }\n"
            "}\n");
}

TEST(Licm, HoistsInvariantIfOutOfTheLoop) {
  Stmt s = loop("i", c(0), v("n"),
                if_(lt(c(2), v("m")), store("B", v("i"), c(1)), store("B", v("i"), c(2))));
  EXPECT_EQ(to_string(licm(s, {.threshold = 2})),
            "if (2 < m) {\n"
            "  for (i = 0; i < n; i += 1) {\n"
            "    B[i] = 1;\n"
            "  }\n"
            "} else {\n"
            "  for (i = 0; i < n; i += 1) {\n"
            "    B[i] = 2;\n"
            "  }\n"
            "}\n");
  // A condition that reads memory stays.
  Stmt r = loop("i", c(0), v("n"),
                if_(lt(c(2), load("A", {c(0)}, DType::I64)), store("A", v("i"), c(1))));
  EXPECT_EQ(licm(r), r);
}

// A condition on the loop's own variable is not invariant in it, even when it
// is the loop's whole body (segment_sum under `separate` gave
// `if (m + i % 5 >= i + 5) for (i ...)`, reading i before its loop).
TEST(Licm, KeepsAnIfOnTheLoopVariableInsideTheLoop) {
  Expr cond = binary(BinaryOp::Ge, v("m") + binary(BinaryOp::Mod, v("i"), c(5)), v("i") + c(5));
  Stmt s = loop("i", c(0), v("m"), if_(cond, store("B", v("i"), c(0))));
  EXPECT_EQ(licm(s), s);
  Stmt nested = if_(lt(c(4), v("m")), s);
  EXPECT_EQ(licm(nested), nested);
}

// ---------------------------------------------------------------------------
// Differential: the loop interpreter gives the same results before and after.

Buf buf(const std::string& name, int64_t size, BufKind kind) {
  Buf b;
  b.name = name;
  b.dtype = DType::I64;
  b.shape = {c(size)};
  b.kind = kind;
  return b;
}

std::vector<int64_t> run(const Stmt& body, int64_t n, int64_t m) {
  LoweredFunc f;
  f.name = "f";
  f.params = {"n", "m"};
  f.args = {buf("A", 64, BufKind::Input), buf("B", 4096, BufKind::Output)};
  f.body = body;
  Bindings b;
  b.params = {{"n", n}, {"m", m}};
  b.buffers["A"] = HostBuffer(DType::I64, {64});
  b.buffers["B"] = HostBuffer(DType::I64, {4096});
  for (int64_t k = 0; k < 64; ++k) b.buffers["A"].set_i(k, (k * 7) % 13 - 6);
  interp::run_loops(f, b);
  std::vector<int64_t> out;
  for (int64_t k = 0; k < 4096; ++k) out.push_back(b.buffers["B"].get_i(k));
  return out;
}

TEST(Licm, DifferentialOnHandBuiltNests) {
  Expr tiled = v("xo") * c(1024) + v("xi") * c(256) + v("yo") * c(16) + v("yi");
  Expr guard = select(all(lt(c(3), v("i")), lt(c(1), v("m"))),
                      select(all(lt(v("i"), c(56)), lt(v("m"), c(56))), c(1), c(0)), c(0));
  std::vector<Stmt> nests = {
      loop("xo", 2,
           loop("xi", 4, loop("yo", 16, loop("yi", 16, store("B", tiled, v("yi") * v("m")))))),
      loop("i", c(0), v("n"),
           loop("j", 64,
                let_("t", v("i") * c(64) + c(1),
                     store("B", v("t") + v("j") - c(1), guard + load("A", {v("j")}, DType::I64))))),
      loop("i", c(0), v("n"),
           if_(lt(c(2), v("m")), store("B", v("i") * c(3) + c(1), div(v("i") + v("m"), c(3))),
               store("B", v("i"), binary(BinaryOp::Mod, v("i") * c(7) - v("m"), c(5))))),
      loop("i", c(0), v("n"),
           loop("k", 4, store("B", v("i") * c(4) + v("k"), div(v("m"), c(2)) * v("k")))),
  };
  for (const Stmt& s : nests) {
    for (bool gpu : {false, true}) {
      for (int k : {1, 3}) {
        Stmt t = licm(normalize(s), {.threshold = k, .gpu = gpu});
        for (auto [n, m] : {std::pair<int64_t, int64_t>{0, 0}, {5, 1}, {60, 7}, {8, -3}}) {
          EXPECT_EQ(run(s, n, m), run(t, n, m)) << to_string(s) << "\n->\n" << to_string(t);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::passes
