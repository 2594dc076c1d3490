// Specifications of the reference and loop-IR interpreters, on IR built by hand.
#include "kiln/interp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "kiln/error.h"
#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::interp {
namespace {

using namespace kiln::ir;  // NOLINT: the tests build a lot of IR

Expr v(const std::string& n) { return var(n); }
Expr c(int64_t x) { return int_imm(x); }
Expr lt(Expr a, Expr b) { return binary(BinaryOp::Lt, std::move(a), std::move(b)); }
Expr le(Expr a, Expr b) { return binary(BinaryOp::Le, std::move(a), std::move(b)); }
Expr eq(Expr a, Expr b) { return binary(BinaryOp::Eq, std::move(a), std::move(b)); }
Expr all(Expr a, Expr b) { return binary(BinaryOp::And, std::move(a), std::move(b)); }
Expr any(Expr a, Expr b) { return binary(BinaryOp::Or, std::move(a), std::move(b)); }
// lo <= x < hi, as the frontend turns a chain into a conjunction.
Expr in_range(Expr lo, const std::string& x, Expr hi) { return all(le(lo, v(x)), lt(v(x), hi)); }
Expr f32(double x) { return float_imm(x); }
Expr ld(const std::string& b, std::vector<Expr> idx, DType t = DType::F32) {
  return load(b, std::move(idx), t);
}

Buf buf(const std::string& name, DType t, std::vector<Expr> shape, BufKind kind) {
  Buf b;
  b.name = name;
  b.dtype = t;
  b.shape = std::move(shape);
  b.kind = kind;
  return b;
}

Comp comp(const std::string& name, std::vector<std::string> iters, std::vector<Expr> domain,
          Expr value, std::optional<StoreTarget> store = std::nullopt) {
  Comp cp;
  cp.name = name;
  cp.iters = std::move(iters);
  cp.domain = std::move(domain);
  cp.value = std::move(value);
  cp.store = std::move(store);
  return cp;
}

Param param(const std::string& n, std::optional<int64_t> value = std::nullopt) {
  Param p;
  p.name = n;
  p.value = value;
  return p;
}

HostBuffer filled(DType t, std::vector<int64_t> shape, const std::vector<double>& values) {
  HostBuffer b(t, std::move(shape));
  for (size_t k = 0; k < values.size(); ++k) b.set_f(static_cast<int64_t>(k), values[k]);
  return b;
}

std::vector<double> contents(const HostBuffer& b) {
  std::vector<double> out;
  for (int64_t k = 0; k < b.size(); ++k) out.push_back(b.get_f(k));
  return out;
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Interp);
    return e.what();
  }
  return "no error";
}

// --- matmul -------------------------------------------------------------------

// C(i, j) = sum(k) A[i, k] * B[k, j], as the frontend desugars it: C_init, then C.
Func matmul() {
  Func f;
  f.name = "matmul";
  f.params = {param("M", 2), param("N", 3), param("K", 4)};
  f.bufs = {buf("A", DType::F32, {v("M"), v("K")}, BufKind::Input),
            buf("B", DType::F32, {v("K"), v("N")}, BufKind::Input),
            buf("C", DType::F32, {v("M"), v("N")}, BufKind::Output)};
  std::vector<Expr> ij = {in_range(c(0), "i", v("M")), in_range(c(0), "j", v("N"))};
  f.comps.push_back(comp("C_init", {"i", "j"}, ij, f32(0), StoreTarget{"C", {v("i"), v("j")}}));
  std::vector<Expr> ijk = ij;
  ijk.push_back(in_range(c(0), "k", v("K")));
  Expr prod = ld("A", {v("i"), v("k")}) * ld("B", {v("k"), v("j")});
  f.comps.push_back(comp("C", {"i", "j", "k"}, ijk, ld("C", {v("i"), v("j")}) + prod,
                         StoreTarget{"C", {v("i"), v("j")}}));
  return f;
}

TEST(Reference, MatmulComputesTheProduct) {
  Func f = matmul();
  Bindings b;
  b.params = param_values(f);
  b.buffers["A"] = filled(DType::F32, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.buffers["B"] = filled(DType::F32, {4, 3}, {1, 0, 2, 0, 1, 3, 1, 1, 0, 2, 0, 1});
  b.buffers["C"] = filled(DType::F32, {2, 3}, {9, 9, 9, 9, 9, 9});  // C_init must clear it
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["C"]), (std::vector<double>{12, 5, 12, 28, 13, 36}));
}

TEST(Reference, RefusesBuffersOfTheWrongShape) {
  Func f = matmul();
  Bindings b = random_bindings(f, param_values(f), 1);
  b.buffers["B"] = HostBuffer(DType::F32, {4, 4});
  EXPECT_EQ(error_of([&] { run_reference(f, b); }),
            "<input>: interp error: buffer B is f32[4, 4] but matmul declares it f32[4, 3]");
}

// --- domains --------------------------------------------------------------------

TEST(Reference, TriangularDomainVisitsOnlyJBelowI) {
  Func f;
  f.name = "prefix";
  f.params = {param("n", 5)};
  f.bufs = {buf("x", DType::F32, {v("n")}, BufKind::Input),
            buf("y", DType::F32, {v("n")}, BufKind::Output)};
  // 0 <= i < n, 0 <= j < i
  f.comps.push_back(comp("L", {"i", "j"},
                         {in_range(c(0), "i", v("n")), in_range(c(0), "j", v("i"))},
                         ld("y", {v("i")}) + ld("x", {v("j")}), StoreTarget{"y", {v("i")}}));
  Bindings b;
  b.params = param_values(f);
  b.buffers["x"] = filled(DType::F32, {5}, {1, 2, 4, 8, 16});
  b.buffers["y"] = HostBuffer(DType::F32, {5});
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{0, 1, 3, 7, 15}));
}

TEST(Reference, RunsInLexicographicOrderSoTheLastPointWritesLast) {
  Func f;
  f.name = "order";
  f.bufs = {buf("z", DType::I64, {c(1)}, BufKind::Output)};
  f.comps.push_back(comp("W", {"i", "j"}, {in_range(c(0), "i", c(3)), in_range(c(0), "j", c(3))},
                         v("i") * c(10) + v("j"), StoreTarget{"z", {c(0)}}));
  Bindings b;
  b.buffers["z"] = HostBuffer(DType::I64, {1});
  run_reference(f, b);
  EXPECT_EQ(b.buffers["z"].get_i(0), 22);
}

TEST(Reference, NonConvexAndModuloConditionsAreExact) {
  Func f;
  f.name = "mask";
  f.bufs = {buf("y", DType::I32, {c(10)}, BufKind::Output)};
  Expr i = v("i");
  Expr cond = any(eq(binary(BinaryOp::Mod, i, c(3)), c(0)), eq(i, c(4)));
  // 0 <= i < 10, i % 3 == 0 or i == 4; written 10 > i as well, and negated: not (i < 0)
  f.comps.push_back(comp("M", {"i"},
                         {unary(UnaryOp::Not, lt(i, c(0))), binary(BinaryOp::Gt, c(10), i), cond},
                         int_imm(1, DType::I32), StoreTarget{"y", {i}}));
  Bindings b;
  b.buffers["y"] = HostBuffer(DType::I32, {10});
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{1, 0, 0, 1, 1, 0, 1, 0, 0, 1}));
}

TEST(Reference, ScaledAndShiftedBoundsUseFloorAndCeil) {
  // 3 <= 2 * i + 1, 3 * i < 17 - i   =>   1 <= i <= 4 ;  -7 <= -2 * k  =>  k <= 3
  Func f;
  f.name = "affine";
  f.bufs = {buf("y", DType::I64, {c(8)}, BufKind::Output)};
  Expr i = v("i"), k = v("k");
  f.comps.push_back(
      comp("S", {"i", "k"},
           {le(c(3), c(2) * i + c(1)), lt(c(3) * i, c(17) - i), le(c(-7), c(-2) * k), le(i, k)},
           ld("y", {i}, DType::I64) + c(1), StoreTarget{"y", {i}}));
  Bindings b;
  b.buffers["y"] = HostBuffer(DType::I64, {8});
  run_reference(f, b);
  // i in [1, 4], k in [i, 3]
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{0, 3, 2, 1, 0, 0, 0, 0}));
}

TEST(Reference, IteratorBoundedOnlyThroughALaterOneIsProjected) {
  // 0 <= i < j < n with iterators (i, j): i's upper bound n - 2 comes from eliminating j.
  Func f;
  f.name = "upper";
  f.params = {param("n", 5)};
  f.bufs = {buf("y", DType::I64, {v("n")}, BufKind::Output)};
  Expr i = v("i"), j = v("j");
  f.comps.push_back(comp("U", {"i", "j"}, {all(all(le(c(0), i), lt(i, j)), lt(j, v("n")))},
                         ld("y", {i}, DType::I64) + c(1), StoreTarget{"y", {i}}));
  Bindings b = random_bindings(f, param_values(f), 0);
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{4, 3, 2, 1, 0}));
}

TEST(Reference, UnboundedIteratorIsRefused) {
  Func f;
  f.name = "f";
  f.bufs = {buf("y", DType::F32, {c(4)}, BufKind::Output)};
  Comp cp = comp("acc", {"i", "j"}, {in_range(c(0), "i", c(4)), le(c(0), v("j"))}, f32(1),
                 StoreTarget{"y", {v("i")}});
  cp.where = SourceLoc{"f.kiln", 4, 3};
  f.comps.push_back(cp);
  Bindings b;
  b.buffers["y"] = HostBuffer(DType::F32, {4});
  EXPECT_EQ(error_of([&] { run_reference(f, b); }),
            "f.kiln:4:3: interp error: unbounded domain: iterator j of acc has no upper bound");
}

// --- data-dependent bounds: segment sum over CSR rows ------------------------------

Func segment_sum() {
  Func f;
  f.name = "segsum";
  f.params = {param("m"), param("nnz")};
  f.bufs = {buf("ptr", DType::I32, {v("m") + c(1)}, BufKind::Input),
            buf("x", DType::F32, {v("nnz")}, BufKind::Input),
            buf("y", DType::F32, {v("m")}, BufKind::Output)};
  f.bufs[0].values.lo = c(0);
  f.bufs[0].values.hi = v("nnz");
  f.bufs[0].values.hi_inclusive = true;
  f.bufs[0].values.sorted = true;
  f.bufs[0].where = SourceLoc{"segsum.kiln", 3, 9};
  auto ptr = [](Expr i) { return cast(DType::I64, load("ptr", {std::move(i)}, DType::I32)); };
  f.comps.push_back(
      comp("init", {"i"}, {in_range(c(0), "i", v("m"))}, f32(0), StoreTarget{"y", {v("i")}}));
  Comp acc = comp("acc", {"i", "j"},
                  {in_range(c(0), "i", v("m")), in_range(ptr(v("i")), "j", ptr(v("i") + c(1)))},
                  ld("y", {v("i")}) + ld("x", {v("j")}), StoreTarget{"y", {v("i")}});
  acc.where = SourceLoc{"segsum.kiln", 9, 3};
  f.comps.push_back(acc);
  return f;
}

std::vector<double> run_segment_sum(const std::vector<double>& ptr, int64_t nnz) {
  Func f = segment_sum();
  int64_t m = static_cast<int64_t>(ptr.size()) - 1;
  Bindings b;
  b.params = param_values(f, {{"m", m}, {"nnz", nnz}});
  b.buffers["ptr"] = filled(DType::I32, {m + 1}, ptr);
  std::vector<double> x;
  for (int64_t k = 0; k < nnz; ++k) x.push_back(static_cast<double>(int64_t{1} << k));
  b.buffers["x"] = filled(DType::F32, {nnz}, x);
  b.buffers["y"] = filled(DType::F32, {m}, std::vector<double>(static_cast<size_t>(m), 99));
  run_reference(f, b);
  return contents(b.buffers["y"]);
}

TEST(Reference, SegmentSumWithEmptyRows) {
  EXPECT_EQ(run_segment_sum({0, 2, 2, 5, 5}, 5), (std::vector<double>{3, 0, 28, 0}));
}

TEST(Reference, SegmentSumWithAllRowsEmpty) {
  EXPECT_EQ(run_segment_sum({3, 3, 3}, 4), (std::vector<double>{0, 0}));
}

TEST(Reference, SegmentSumWithOneLongRow) {
  EXPECT_EQ(run_segment_sum({0, 6}, 6), (std::vector<double>{63}));
}

TEST(Reference, SegmentSumOnRandomSortedRowPointers) {
  Func f = segment_sum();
  Bindings b = random_bindings(f, param_values(f, {{"m", 50}, {"nnz", 200}}), 7);
  const HostBuffer& ptr = b.buffers["ptr"];
  std::vector<double> expected(50, 0.0);
  for (int64_t i = 0; i < 50; ++i) {
    float s = 0;
    for (int64_t j = ptr.get_i(i); j < ptr.get_i(i + 1); ++j) {
      s += static_cast<float>(b.buffers["x"].get_f(j));
    }
    expected[static_cast<size_t>(i)] = s;
  }
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]), expected);
}

TEST(Reference, AnInputBreakingItsValueSpecIsRefusedBeforeAnyAccess) {
  // ptr[2] = 5 reaches past x's 4 elements: the spec [0, nnz] says it may not.
  EXPECT_EQ(error_of([] {
              run_segment_sum({0, 1, 5}, 4);
            }),
            "segsum.kiln:3:9: interp error: input ptr breaks its value spec in [0, nnz] sorted: "
            "ptr[2] = 5 is above nnz = 4");
  EXPECT_EQ(error_of([] {
              run_segment_sum({0, 3, 1}, 4);
            }),
            "segsum.kiln:3:9: interp error: input ptr breaks its value spec in [0, nnz] sorted: "
            "ptr[2] = 1 is below ptr[1] = 3, so it is not sorted");
}

TEST(Reference, OutOfBoundsReadNamesTheAccessAndTheInstance) {
  // Without a value spec nothing is checked first: the read itself is reported.
  Func f = segment_sum();
  f.bufs[0].values = {};
  Bindings b;
  b.params = param_values(f, {{"m", 2}, {"nnz", 4}});
  b.buffers["ptr"] = filled(DType::I32, {3}, {0, 1, 5});
  b.buffers["x"] = filled(DType::F32, {4}, {1, 2, 3, 4});
  b.buffers["y"] = filled(DType::F32, {2}, {0, 0});
  EXPECT_EQ(error_of([&] { run_reference(f, b); }),
            "segsum.kiln:9:3: interp error: out-of-bounds read x[4] (x has shape [4]) in "
            "acc(i=1, j=4)");
}

TEST(Reference, MissingRuntimeParamIsNamed) {
  Func f = segment_sum();
  EXPECT_EQ(error_of([&] {
              param_values(f, {{"m", 3}});
            }),
            "<input>: interp error: no value for run-time param nnz of segsum");
}

// --- value computations read through Access -------------------------------------

Func padded_sum() {
  Func f;
  f.name = "conv";
  f.params = {param("n", 4)};
  f.bufs = {buf("x", DType::F32, {v("n")}, BufKind::Input),
            buf("y", DType::F32, {v("n")}, BufKind::Output)};
  Expr i = v("i");
  // pad(i) in 0 <= i < n + 2 = select(1 <= i and i <= n, x[i - 1], 0.0)
  f.comps.push_back(comp("pad", {"i"}, {in_range(c(0), "i", v("n") + c(2))},
                         select(all(le(c(1), i), le(i, v("n"))), ld("x", {i - c(1)}), f32(0))));
  auto pad = [](Expr e) { return access("pad", {std::move(e)}, DType::F32); };
  f.comps.push_back(comp("conv", {"i"}, {in_range(c(0), "i", v("n"))},
                         pad(i) + pad(i + c(1)) + pad(i + c(2)), StoreTarget{"y", {i}}));
  return f;
}

TEST(Reference, AccessEvaluatesTheValueComputationAtThePoint) {
  Func f = padded_sum();
  Bindings b;
  b.params = param_values(f);
  b.buffers["x"] = filled(DType::F32, {4}, {1, 2, 4, 8});
  b.buffers["y"] = HostBuffer(DType::F32, {4});
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{3, 7, 14, 12}));
}

TEST(Reference, AccessOutsideTheDomainIsReported) {
  Func f = padded_sum();
  f.comps[1].value = access("pad", {v("i") - c(1)}, DType::F32);
  Bindings b = random_bindings(f, param_values(f), 3);
  EXPECT_EQ(error_of([&] { run_reference(f, b); }),
            "<input>: interp error: read of pad(-1) outside its domain in conv(i=0)");
}

// --- arithmetic -------------------------------------------------------------------

TEST(Reference, IntegerDivisionAndModuloRoundTowardNegativeInfinity) {
  Func f;
  f.name = "divmod";
  f.bufs = {buf("q", DType::I64, {c(7)}, BufKind::Output),
            buf("r", DType::I64, {c(7)}, BufKind::Output),
            buf("s", DType::I32, {c(2)}, BufKind::Output)};
  Expr i = v("i");
  std::vector<Expr> dom = {in_range(c(-3), "i", c(4))};
  f.comps.push_back(
      comp("Q", {"i"}, dom, binary(BinaryOp::Div, i, c(2)), StoreTarget{"q", {i + c(3)}}));
  f.comps.push_back(
      comp("R", {"i"}, dom, binary(BinaryOp::Mod, i, c(2)), StoreTarget{"r", {i + c(3)}}));
  Expr seven = int_imm(7, DType::I32), m2 = int_imm(-2, DType::I32);
  f.comps.push_back(comp("S0", {}, {}, binary(BinaryOp::Div, seven, m2), StoreTarget{"s", {c(0)}}));
  f.comps.push_back(comp("S1", {}, {}, binary(BinaryOp::Mod, seven, m2), StoreTarget{"s", {c(1)}}));
  Bindings b = random_bindings(f, {}, 0);
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["q"]), (std::vector<double>{-2, -1, -1, 0, 0, 1, 1}));
  EXPECT_EQ(contents(b.buffers["r"]), (std::vector<double>{1, 0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(contents(b.buffers["s"]), (std::vector<double>{-4, -1}));
}

TEST(Reference, IntegerDivisionByZeroNamesTheExpression) {
  Func f;
  f.name = "z";
  f.bufs = {buf("q", DType::I64, {c(2)}, BufKind::Output)};
  f.comps.push_back(comp("Z", {"i"}, {in_range(c(0), "i", c(2))},
                         binary(BinaryOp::Div, c(12), v("i") - c(1)), StoreTarget{"q", {v("i")}}));
  Bindings b = random_bindings(f, {}, 0);
  EXPECT_EQ(error_of([&] { run_reference(f, b); }),
            "<input>: interp error: integer division by zero in 12 / (i - 1) in Z(i=1)");
}

TEST(Reference, SmallestIntegerDividedByMinusOneIsAnError) {
  // Compiled kernels return an error status for it; the oracle agrees.
  Func f;
  f.name = "z";
  f.bufs = {buf("q", DType::I32, {c(2)}, BufKind::Output)};
  Expr smallest = cast(DType::I32, c(-2147483648LL));
  f.comps.push_back(comp("Z", {"i"}, {in_range(c(0), "i", c(2))},
                         binary(BinaryOp::Mod, smallest, cast(DType::I32, v("i") - c(1))),
                         StoreTarget{"q", {v("i")}}));
  Bindings b = random_bindings(f, {}, 0);
  EXPECT_EQ(error_of([&] { run_reference(f, b); }),
            "<input>: interp error: integer overflow: the smallest i32 divided by -1 in "
            "i32(-2147483648) % i32(i - 1) in Z(i=0)");
}

Func accumulate(DType t) {
  Func f;
  f.name = "acc";
  f.bufs = {buf("s", t, {}, BufKind::Output)};
  f.comps.push_back(comp("A", {"k"}, {in_range(c(0), "k", c(10))},
                         load("s", {}, t) + float_imm(0.1, t), StoreTarget{"s", {}}));
  return f;
}

TEST(Reference, F32ArithmeticRoundsToFloatAfterEveryOperation) {
  Func f = accumulate(DType::F32);
  Bindings b = random_bindings(f, {}, 0);
  run_reference(f, b);
  float expected = 0;
  for (int k = 0; k < 10; ++k) expected += 0.1f;
  EXPECT_EQ(b.buffers["s"].get_f(0), static_cast<double>(expected));
  EXPECT_NE(expected, 1.0f);  // what double arithmetic, rounded once, would give
}

TEST(Reference, F64ArithmeticStaysDouble) {
  Func f = accumulate(DType::F64);
  Bindings b = random_bindings(f, {}, 0);
  run_reference(f, b);
  double expected = 0;
  for (int k = 0; k < 10; ++k) expected += 0.1;
  EXPECT_EQ(b.buffers["s"].get_f(0), expected);
}

TEST(Reference, SelectEvaluatesOnlyTheChosenSideAndLetBinds) {
  Func f;
  f.name = "sel";
  f.bufs = {buf("x", DType::F32, {c(3)}, BufKind::Input),
            buf("y", DType::F32, {c(3)}, BufKind::Output)};
  Expr i = v("i");
  // select(i < 3, x[i], x[i + 1000]): the far read never happens.
  Expr value =
      let("t", ld("x", {i}),
          select(lt(i, c(3)), var("t", DType::F32) * var("t", DType::F32), ld("x", {i + c(1000)})));
  f.comps.push_back(comp("S", {"i"}, {in_range(c(0), "i", c(3))}, value, StoreTarget{"y", {i}}));
  Bindings b;
  b.buffers["x"] = filled(DType::F32, {3}, {1.5, -2, 3});
  b.buffers["y"] = HostBuffer(DType::F32, {3});
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{2.25, 4, 9}));
}

TEST(Reference, MathIntrinsicsUseTheOperandPrecision) {
  Func f;
  f.name = "m";
  f.bufs = {buf("y", DType::F32, {c(4)}, BufKind::Output)};
  Expr two = f32(2.0);
  f.comps.push_back(comp("E", {}, {}, call("exp", {f32(1.0)}), StoreTarget{"y", {c(0)}}));
  f.comps.push_back(comp("P", {}, {}, call("pow", {two, f32(0.5)}), StoreTarget{"y", {c(1)}}));
  f.comps.push_back(comp("A", {}, {}, call("abs", {f32(-3.0)}), StoreTarget{"y", {c(2)}}));
  f.comps.push_back(comp("F", {}, {}, call("floor", {f32(-2.5)}), StoreTarget{"y", {c(3)}}));
  Bindings b = random_bindings(f, {}, 0);
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]),
            (std::vector<double>{std::exp(1.0f), std::pow(2.0f, 0.5f), 3, -3}));
}

TEST(Reference, TempBuffersAreAllocatedAndZeroed) {
  Func f;
  f.name = "tmp";
  f.params = {param("n", 3)};
  f.bufs = {buf("T", DType::F32, {v("n")}, BufKind::Temp),
            buf("y", DType::F32, {v("n")}, BufKind::Output)};
  Expr i = v("i");
  f.comps.push_back(
      comp("W", {"i"}, {in_range(c(1), "i", v("n"))}, cast(DType::F32, i), StoreTarget{"T", {i}}));
  f.comps.push_back(comp("R", {"i"}, {in_range(c(0), "i", v("n"))}, ld("T", {i}) + f32(0.5),
                         StoreTarget{"y", {i}}));
  Bindings b = random_bindings(f, param_values(f), 0);
  EXPECT_EQ(b.buffers.count("T"), 0u);
  run_reference(f, b);
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{0.5, 1.5, 2.5}));
}

// --- loop IR -----------------------------------------------------------------------

// y[i] = 2 * x[i] for 0 <= i < n, as a Func.
Func doubler(int64_t n) {
  Func f;
  f.name = "dbl";
  f.params = {param("n", n)};
  f.bufs = {buf("x", DType::F32, {v("n")}, BufKind::Input),
            buf("y", DType::F32, {v("n")}, BufKind::Output)};
  f.comps.push_back(comp("init", {"i"}, {in_range(c(0), "i", v("n"))}, f32(2.0) * ld("x", {v("i")}),
                         StoreTarget{"y", {v("i")}}));
  return f;
}

// The same, split by 4 with io < io_end:
//   for io: alloc T[4] { for ii: if (guard) { T[ii] = x[i]; let t = T[ii]; y[i] = 2 * t } }
LoweredFunc split_doubler(const Func& f, int64_t io_end, bool guard) {
  Expr i = v("io") * c(4) + v("ii");
  Stmt copy = std::make_shared<Store>("T", std::vector<Expr>{v("ii")}, ld("x", {i}));
  Stmt out = std::make_shared<LetStmt>(
      "t", ld("T", {v("ii")}),
      std::make_shared<Store>("y", std::vector<Expr>{i}, f32(2.0) * var("t", DType::F32), "init",
                              std::vector<std::pair<std::string, Expr>>{{"i", i}}));
  Stmt body = block({guard ? nullptr : out, guard ? block({copy, out}) : nullptr});
  if (guard) body = std::make_shared<IfThenElse>(lt(i, v("n")), body, nullptr);
  Stmt inner = std::make_shared<For>("ii", c(0), c(4), 1, LoopTag::Vectorize, body);
  Stmt alloc =
      std::make_shared<Alloc>("T", DType::F32, std::vector<Expr>{c(4)}, MemLoc::Stack, inner);
  Stmt outer = std::make_shared<For>("io", c(0), c(io_end), 1, LoopTag::Parallel, alloc);
  return LoweredFunc{f.name, {}, {f.bufs[0], f.bufs[1]}, outer};
}

TEST(Loops, SplitLoopWithGuardMatchesTheReference) {
  Func f = doubler(10);
  Bindings expected = random_bindings(f, param_values(f), 11);
  Bindings actual = random_bindings(f, param_values(f), 11);
  run_reference(f, expected);
  run_loops(split_doubler(f, 3, true), actual);
  Mismatch m = compare_outputs(f, expected, actual, 0, 0);
  EXPECT_TRUE(m.ok) << m.describe();
  EXPECT_EQ(contents(expected.buffers["y"]), contents(actual.buffers["y"]));
  EXPECT_EQ(expected.buffers["y"].get_f(9), 2 * expected.buffers["x"].get_f(9));
}

TEST(Loops, OutOfBoundsWriteNamesComputationInstanceAndLoops) {
  Func f = doubler(8);
  Bindings b = random_bindings(f, param_values(f), 1);
  EXPECT_EQ(error_of([&] { run_loops(split_doubler(f, 3, false), b); }),
            "<input>: interp error: out-of-bounds write y[8] (shape [8]) in computation init at "
            "instance (i=8) with loops io=2, ii=0");
}

TEST(Loops, StepsAndBoundsReadFromBuffersAreChecked) {
  // for (j = 0; j < lim[0]; j += 3) y[j] = f32(j): lim[0] = 8 visits 0, 3, 6.
  Func f;
  f.name = "steps";
  f.bufs = {buf("lim", DType::I64, {c(1)}, BufKind::Input),
            buf("y", DType::F32, {c(8)}, BufKind::Output)};
  Stmt store = std::make_shared<Store>("y", std::vector<Expr>{v("j")}, cast(DType::F32, v("j")));
  Stmt loop =
      std::make_shared<For>("j", c(0), load("lim", {c(0)}, DType::I64), 3, LoopTag::None, store);
  LoweredFunc lf{"steps", {}, f.bufs, loop};
  Bindings b = random_bindings(f, {}, 0);
  b.buffers["lim"].set_i(0, 8);
  run_loops(lf, b);
  EXPECT_EQ(contents(b.buffers["y"]), (std::vector<double>{0, 0, 0, 3, 0, 0, 6, 0}));

  Stmt outer = std::make_shared<For>(
      "i", c(0), c(2), 1, LoopTag::None,
      std::make_shared<For>("j", c(0), load("lim", {v("i")}, DType::I64), 1, LoopTag::None, store));
  EXPECT_EQ(error_of([&] {
              run_loops(LoweredFunc{"steps", {}, f.bufs, outer}, b);
            }),
            "<input>: interp error: out-of-bounds read lim[1] (shape [1]) with loops i=1");
}

TEST(Loops, RunTimeParamsMustBeBound) {
  Func f = doubler(4);
  LoweredFunc lf = split_doubler(f, 1, true);
  lf.params = {"n"};
  Bindings b = random_bindings(f, param_values(f), 0);
  b.params.clear();
  EXPECT_EQ(error_of([&] { run_loops(lf, b); }),
            "<input>: interp error: no value for param n of dbl");
}

// --- host buffers, inputs, comparison ------------------------------------------------

TEST(HostBuffer, StoresElementsInTheirOwnWidth) {
  HostBuffer b(DType::Bool, {2, 3});
  EXPECT_EQ(b.size(), 6);
  b.set_i(4, 7);
  EXPECT_EQ(static_cast<const unsigned char*>(b.data())[4], 1);
  HostBuffer i(DType::I32, {2});
  i.set_i(1, -5);
  int32_t raw[2];
  std::memcpy(raw, i.data(), sizeof raw);
  EXPECT_EQ(raw[1], -5);
  HostBuffer f(DType::F32, {1});
  f.set_f(0, 0.1);
  EXPECT_EQ(f.get_f(0), static_cast<double>(0.1f));
  HostBuffer scalar(DType::F64, {});
  EXPECT_EQ(scalar.size(), 1);
  EXPECT_EQ(scalar.get_f(0), 0.0);
}

TEST(RandomBindings, AreReproducibleAndHonorValueSpecs) {
  Func f = segment_sum();
  f.bufs.push_back(buf("k", DType::I32, {c(100)}, BufKind::Input));
  auto params = param_values(f, {{"m", 20}, {"nnz", 30}});
  Bindings a = random_bindings(f, params, 42);
  Bindings b = random_bindings(f, params, 42);
  Bindings other = random_bindings(f, params, 43);
  EXPECT_EQ(contents(a.buffers["x"]), contents(b.buffers["x"]));
  EXPECT_NE(contents(a.buffers["x"]), contents(other.buffers["x"]));
  const HostBuffer& ptr = a.buffers["ptr"];
  ASSERT_EQ(ptr.shape(), (std::vector<int64_t>{21}));
  for (int64_t i = 0; i < 21; ++i) {
    EXPECT_GE(ptr.get_i(i), 0);
    EXPECT_LE(ptr.get_i(i), 30);  // [0, nnz]: inclusive
    if (i > 0) {
      EXPECT_LE(ptr.get_i(i - 1), ptr.get_i(i));
    }
  }
  for (double x : contents(a.buffers["x"])) {
    EXPECT_GE(x, -1.0);
    EXPECT_LT(x, 1.0);
  }
  for (double x : contents(a.buffers["k"])) {
    EXPECT_GE(x, -8);
    EXPECT_LT(x, 8);
  }
  EXPECT_EQ(contents(a.buffers["y"]), std::vector<double>(20, 0.0));
}

TEST(BufferShape, RefusesNegativeExtents) {
  Buf b = buf("x", DType::F32, {v("n") - c(4)}, BufKind::Input);
  EXPECT_EQ(buffer_shape(b, {{"n", 6}}), (std::vector<int64_t>{2}));
  EXPECT_EQ(error_of([&] {
              buffer_shape(b, {{"n", 1}});
            }),
            "<input>: interp error: buffer x has negative extent -3 in dimension 0 (n - 4)");
}

TEST(BoundBuffer, IsCheckedAgainstTheArgumentsTypeAndShape) {
  Buf b = buf("x", DType::F32, {v("n") * c(2)}, BufKind::Input);
  Bindings in;
  in.params = {{"n", 3}};
  EXPECT_EQ(error_of([&] { bound_buffer(in, b, "f"); }),
            "<input>: interp error: no buffer given for input x of f");
  in.buffers["x"] = HostBuffer(DType::F32, {5});
  EXPECT_EQ(error_of([&] { bound_buffer(in, b, "f"); }),
            "<input>: interp error: buffer x is f32[5] but f declares it f32[6]");
  in.buffers["x"] = HostBuffer(DType::I32, {6});
  try {
    bound_buffer(in, b, "f", ErrorStage::Codegen);
    ADD_FAILURE() << "an i32 buffer was taken for an f32 argument";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Codegen);
    EXPECT_EQ(e.message(), "buffer x is i32[6] but f declares it f32[6]");
  }
  in.buffers["x"] = HostBuffer(DType::F32, {6});
  EXPECT_EQ(&bound_buffer(in, b, "f"), &in.buffers["x"]);
}

TEST(BufferShape, NamesTheParamsWithoutAValue) {
  Buf b = buf("x", DType::F32, {c(2), v("n") * c(3) + v("m")}, BufKind::Input);
  EXPECT_EQ(buffer_shape(b, {{"n", 2}, {"m", 1}}), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(error_of([&] {
              buffer_shape(b, {{"n", 2}});
            }),
            "<input>: interp error: cannot evaluate extent 1 of buffer x (n * 3 + m): no value "
            "for m");
}

TEST(ParamValues, CompileTimeValuesCannotBeChangedByARun) {
  Func f = matmul();
  EXPECT_EQ(param_values(f, {{"M", 2}}).at("K"), 4);
  EXPECT_EQ(error_of([&] {
              param_values(f, {{"M", 5}});
            }),
            "<input>: interp error: param M is 2 at compile time; a run cannot make it 5");
}

TEST(CompareOutputs, ReportsTheWorstElement) {
  Func f;
  f.name = "cmp";
  f.bufs = {buf("x", DType::F32, {c(2)}, BufKind::Input),
            buf("y", DType::F32, {c(4), c(2)}, BufKind::Output),
            buf("n", DType::I32, {c(2)}, BufKind::Output)};
  Bindings e, a;
  e.buffers["y"] = filled(DType::F32, {4, 2}, {0, 0, 1, 0, 0, 0, 0, 2.5});
  a.buffers["y"] = filled(DType::F32, {4, 2}, {0, 0, 1.0000001, 0, 0, 0, 0, 2.75});
  e.buffers["n"] = filled(DType::I32, {2}, {1, 2});
  a.buffers["n"] = filled(DType::I32, {2}, {1, 2});
  Mismatch m = compare_outputs(f, e, a);
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.describe(), "y[3, 1]: expected 2.5, got 2.75 (abs 0.25, rel 0.1)");
  a.buffers["y"].set_f(7, 2.5);
  EXPECT_TRUE(compare_outputs(f, e, a).ok);  // 1 vs 1.0000001 is within rtol
  a.buffers["n"].set_i(1, 3);
  EXPECT_EQ(compare_outputs(f, e, a).describe(), "n[1]: expected 2, got 3 (abs 1, rel 0.5)");
}

// A dot product near 0 is as accurate as its terms: an element is held to the
// buffer's mean magnitude when it is smaller, never to less.
TEST(CompareOutputs, ASmallResultOfCancellationIsHeldToTheBuffersScale) {
  Func f;
  f.name = "cmp";
  f.bufs = {buf("y", DType::F32, {c(4)}, BufKind::Output)};
  Bindings e, a;
  e.buffers["y"] = filled(DType::F32, {4}, {4, -4, 4, -4.8e-5});
  // Mean |y| is 3: within 1e-5 * 3 + 1e-6 of -4.8e-5 passes, though it is 3.7% of it.
  a.buffers["y"] = filled(DType::F32, {4}, {4, -4, 4, -4.625e-5});
  EXPECT_TRUE(compare_outputs(f, e, a).ok) << compare_outputs(f, e, a).describe();
  a.buffers["y"].set_f(3, -4.8e-5 + 4e-5);  // beyond it
  EXPECT_FALSE(compare_outputs(f, e, a).ok);
  // The large elements keep their own relative tolerance.
  a.buffers["y"] = filled(DType::F32, {4}, {4.0002f, -4, 4, -4.8e-5});
  EXPECT_FALSE(compare_outputs(f, e, a).ok);
}

TEST(CompareOutputs, NanEqualsNanAndShapesMustAgree) {
  Func f;
  f.name = "cmp";
  f.bufs = {buf("y", DType::F64, {c(2)}, BufKind::Output)};
  Bindings e, a;
  e.buffers["y"] = filled(DType::F64, {2}, {NAN, 1});
  a.buffers["y"] = filled(DType::F64, {2}, {NAN, 1});
  EXPECT_TRUE(compare_outputs(f, e, a).ok);
  a.buffers["y"].set_f(1, NAN);
  EXPECT_FALSE(compare_outputs(f, e, a).ok);
  a.buffers["y"] = HostBuffer(DType::F64, {3});
  EXPECT_EQ(compare_outputs(f, e, a).describe(), "y: expected f64[2], got f64[3]");
}

}  // namespace
}  // namespace kiln::interp
