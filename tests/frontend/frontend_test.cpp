// The .kiln frontend, construct by construct: what each one becomes in the IR.
#include "kiln/frontend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "ir_dump.h"

namespace kiln {
namespace {

using testing::sexpr;

ir::Func parse_func(const std::string& text) {
  ir::Module m = frontend::parse_module(text, "test.kiln");
  EXPECT_EQ(m.funcs.size(), 1u);
  return m.funcs.at(0);
}

// A func body wrapped in `func f { ... }`.
ir::Func body(const std::string& items) { return parse_func("func f {\n" + items + "\n}\n"); }

std::vector<std::string> sexprs(const std::vector<ir::Expr>& es) {
  std::vector<std::string> out;
  for (const ir::Expr& e : es) out.push_back(sexpr(e));
  return out;
}

std::vector<std::string> strings(const std::vector<ir::Expr>& es) {
  std::vector<std::string> out;
  for (const ir::Expr& e : es) out.push_back(ir::to_string(e));
  return out;
}

using Strings = std::vector<std::string>;

// The value of a single comp `c(...)` computing EXPR over declared buffers.
ir::Expr value_of(const std::string& decls, const std::string& expr) {
  ir::Func f = body(decls + "\ncompute v() = " + expr + ";");
  return f.comps.back().value;
}

const char* kMatmul = R"(# C = A * B, tiled.
func matmul {
  param M = 256, N = 256, K = 256;      # compile-time values
  constraint M > 0, N > 0, K > 0;

  input  A : f32[M, K];
  input  B : f32[K, N];
  output C : f32[M, N];

  compute C(i, j) in 0 <= i < M, 0 <= j < N:
    C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];

  schedule {
    knob TI = 32 in [8, 16, 32, 64];
    C.tile(i, j, TI, 32, io, jo, ii, ji);
    C.tag(io, parallel);
  }
}
)";

TEST(Frontend, MatmulFromTheSpec) {
  ir::Module m = frontend::parse_module(kMatmul, "matmul.kiln");
  ASSERT_EQ(m.funcs.size(), 1u);
  const ir::Func& f = m.funcs[0];
  EXPECT_EQ(f.name, "matmul");
  EXPECT_EQ(f.where.str(), "matmul.kiln:2:6");

  ASSERT_EQ(f.params.size(), 3u);
  EXPECT_EQ(f.params[0].name, "M");
  EXPECT_EQ(f.params[0].value, 256);
  EXPECT_EQ(f.params[2].where.str(), "matmul.kiln:3:27");

  EXPECT_EQ(strings({f.constraints[0].cond, f.constraints[1].cond, f.constraints[2].cond}),
            (Strings{"M > 0", "N > 0", "K > 0"}));

  ASSERT_EQ(f.bufs.size(), 3u);
  EXPECT_EQ(f.bufs[0].kind, ir::BufKind::Input);
  EXPECT_EQ(f.bufs[2].kind, ir::BufKind::Output);
  EXPECT_EQ(f.bufs[2].dtype, ir::DType::F32);
  EXPECT_EQ(strings(f.bufs[0].shape), (Strings{"M", "K"}));

  // The reduction became two computations.
  ASSERT_EQ(f.comps.size(), 2u);
  const ir::Comp& init = f.comps[0];
  EXPECT_EQ(init.name, "C_init");
  EXPECT_EQ(init.iters, (Strings{"i", "j"}));
  EXPECT_EQ(strings(init.domain), (Strings{"0 <= i", "i < M", "0 <= j", "j < N"}));
  EXPECT_EQ(sexpr(init.value), "0.0:f32");
  ASSERT_TRUE(init.store);
  EXPECT_EQ(init.store->buf, "C");
  EXPECT_EQ(strings(init.store->indices), (Strings{"i", "j"}));

  const ir::Comp& c = f.comps[1];
  EXPECT_EQ(c.name, "C");
  EXPECT_EQ(c.iters, (Strings{"i", "j", "k"}));
  EXPECT_EQ(strings(c.domain), (Strings{"0 <= i", "i < M", "0 <= j", "j < N", "0 <= k", "k < K"}));
  EXPECT_EQ(sexpr(c.value), "(+:f32 (load:f32 C i j) (*:f32 (load:f32 A i k) (load:f32 B k j)))");
  ASSERT_TRUE(c.store);
  EXPECT_EQ(c.store->buf, "C");
  EXPECT_EQ(strings(c.store->indices), (Strings{"i", "j"}));
  EXPECT_EQ(c.where.str(), "matmul.kiln:10:11");

  ASSERT_EQ(f.knobs.size(), 1u);
  EXPECT_EQ(f.knobs[0].name, "TI");
  EXPECT_EQ(f.knobs[0].value, 32);
  EXPECT_EQ(f.knobs[0].candidates, (std::vector<int64_t>{8, 16, 32, 64}));

  ASSERT_EQ(f.schedule.size(), 2u);
  const ir::ScheduleCommand& tile = f.schedule[0];
  EXPECT_EQ(tile.target, "C");
  EXPECT_EQ(tile.op, "tile");
  EXPECT_EQ(tile.where.str(), "matmul.kiln:15:5");
  ASSERT_EQ(tile.args.size(), 8u);
  EXPECT_EQ(tile.args[2].kind, ir::ScheduleArg::Kind::Name);
  EXPECT_EQ(tile.args[2].text, "TI");
  EXPECT_EQ(tile.args[3].kind, ir::ScheduleArg::Kind::Int);
  EXPECT_EQ(tile.args[3].number, 32);
  EXPECT_EQ(tile.args[3].where.str(), "matmul.kiln:15:22");
  EXPECT_EQ(f.schedule[1].args[1].text, "parallel");
}

TEST(Frontend, IteratorsAndParamsAreIndexTyped) {
  ir::Func f = parse_func(kMatmul);
  struct VarTypes : ir::IRVisitor {
    int vars = 0;
    void visit_var(const ir::Var& v) override {
      ++vars;
      EXPECT_EQ(v.type, ir::kIndexType) << v.name;
    }
  } check;
  for (const ir::Comp& c : f.comps) {
    for (const ir::Expr& d : c.domain) check.visit(d);
    check.visit(c.value);
    for (const ir::Expr& i : c.store->indices) check.visit(i);
  }
  for (const ir::Constraint& c : f.constraints) check.visit(c.cond);
  EXPECT_GT(check.vars, 20);
}

// ---------------------------------------------------------------------------
// Items

TEST(Frontend, Params) {
  ir::Func f = body("param M = 512;\nparam n;\nparam a = 1, b;\nparam neg = -3;");
  ASSERT_EQ(f.params.size(), 5u);
  EXPECT_EQ(f.params[0].value, 512);
  EXPECT_FALSE(f.params[1].value);
  EXPECT_EQ(f.params[2].name, "a");
  EXPECT_EQ(f.params[2].value, 1);
  EXPECT_EQ(f.params[3].name, "b");
  EXPECT_FALSE(f.params[3].value);
  EXPECT_EQ(f.params[4].value, -3);
  EXPECT_EQ(f.params[3].where.str(), "test.kiln:4:14");
}

TEST(Frontend, ConstraintsSplitChainsAndTopLevelAnd) {
  ir::Func f = body(
      "param n, m;\n"
      "constraint 0 < n <= 1024, n % 4 == 0 and m > 0, not (m > 5) or n == 2, 2 * n + m / 3 >= 1;");
  EXPECT_EQ(strings([&] {
              std::vector<ir::Expr> es;
              for (const auto& c : f.constraints) es.push_back(c.cond);
              return es;
            }()),
            (Strings{"0 < n", "n <= 1024", "n % 4 == 0", "m > 0", "not m > 5 or n == 2",
                     "2 * n + m / 3 >= 1"}));
  EXPECT_EQ(f.constraints[1].where.str(), "test.kiln:3:16");
  EXPECT_EQ(f.constraints[3].where.str(), "test.kiln:3:42");
}

TEST(Frontend, BuffersKindsTypesShapes) {
  ir::Func f = body(
      "param M, K;\n"
      "input A : f32[M, K];\n"
      "output y : f64[M + 1];\n"
      "temp T : i32[2 * M, K / 2, 7];\n"
      "input s : f32[];\n"
      "input mask : bool[K];\n"
      "input idx : i64[K];");
  ASSERT_EQ(f.bufs.size(), 6u);
  EXPECT_EQ(f.bufs[1].kind, ir::BufKind::Output);
  EXPECT_EQ(f.bufs[1].dtype, ir::DType::F64);
  EXPECT_EQ(strings(f.bufs[1].shape), (Strings{"M + 1"}));
  EXPECT_EQ(f.bufs[2].kind, ir::BufKind::Temp);
  EXPECT_EQ(f.bufs[2].dtype, ir::DType::I32);
  EXPECT_EQ(sexprs(f.bufs[2].shape), (Strings{"(*:i64 2:i64 M)", "(/:i64 K 2:i64)", "7:i64"}));
  EXPECT_TRUE(f.bufs[3].shape.empty());
  EXPECT_EQ(f.bufs[4].dtype, ir::DType::Bool);
  EXPECT_EQ(f.bufs[5].dtype, ir::DType::I64);
  EXPECT_EQ(f.bufs[0].loc, ir::MemLoc::Heap);
  EXPECT_EQ(f.bufs[0].where.str(), "test.kiln:3:7");
}

TEST(Frontend, ValueSpecs) {
  ir::Func f = body(
      "param m, nnz, N;\n"
      "input ptr : i32[m + 1] in [0, nnz] sorted;\n"
      "input idx : i32[nnz] in [0, N);\n"
      "input w : f32[N] in (-1, 1.5];\n"
      "input d : f64[N] in [0.5, 2e3);\n"
      "input s : i64[N] sorted;\n"
      "input x : f32[N];");
  const ir::ValueSpec& ptr = f.bufs[0].values;
  EXPECT_EQ(sexpr(ptr.lo), "0:i64");
  EXPECT_EQ(sexpr(ptr.hi), "nnz");
  EXPECT_TRUE(ptr.lo_inclusive);
  EXPECT_TRUE(ptr.hi_inclusive);
  EXPECT_TRUE(ptr.sorted);
  const ir::ValueSpec& idx = f.bufs[1].values;
  EXPECT_TRUE(idx.lo_inclusive);
  EXPECT_FALSE(idx.hi_inclusive);
  EXPECT_FALSE(idx.sorted);
  const ir::ValueSpec& w = f.bufs[2].values;
  EXPECT_EQ(sexpr(w.lo), "-1.0:f32");
  EXPECT_EQ(sexpr(w.hi), "1.5:f32");
  EXPECT_FALSE(w.lo_inclusive);
  EXPECT_TRUE(w.hi_inclusive);
  EXPECT_EQ(sexpr(f.bufs[3].values.hi), "2000.0:f64");
  EXPECT_FALSE(f.bufs[4].values.lo);
  EXPECT_TRUE(f.bufs[4].values.sorted);
  EXPECT_FALSE(f.bufs[5].values.lo);
  EXPECT_FALSE(f.bufs[5].values.hi);
  EXPECT_FALSE(f.bufs[5].values.sorted);
}

TEST(Frontend, KnobsAtFuncLevelAndInSchedule) {
  ir::Func f = body(
      "param N = 64;\n"
      "output y : f32[N];\n"
      "knob U = -1 in [-1, 0, 4];\n"
      "compute c(i) in 0 <= i < N: y[i] = 0.0;\n"
      "schedule {\n"
      "  knob V = 8 in [8];\n"
      "  c.split(i, V, io, ii);\n"
      "}");
  ASSERT_EQ(f.knobs.size(), 2u);
  EXPECT_EQ(f.knobs[0].name, "U");
  EXPECT_EQ(f.knobs[0].value, -1);
  EXPECT_EQ(f.knobs[0].candidates, (std::vector<int64_t>{-1, 0, 4}));
  EXPECT_EQ(f.knobs[1].name, "V");
  EXPECT_EQ(f.knobs[1].where.str(), "test.kiln:7:8");
}

TEST(Frontend, ScheduleArgumentsAreRecordedNotInterpreted) {
  ir::Func f = body(
      "param N;\n"
      "temp B : f32[N];\n"
      "output y : f32[N];\n"
      "compute c(i) in 0 <= i < N: y[i] = 1.0;\n"
      "compute p(i) in 0 <= i < N = 2.0;\n"
      "schedule {\n"
      "  c.shift(i, -1);\n"
      "  c.apply_sch(\"{ c[i] -> c[\\\"x\\\" + i] }\\n\");\n"
      "  p.store_at(B, [i, [0, -2], []]);\n"
      "  p.inline();\n"
      "  B.set_loc(stack);\n"
      "  c.after(p, root);\n"
      "}");
  ASSERT_EQ(f.schedule.size(), 6u);
  const auto& shift = f.schedule[0];
  EXPECT_EQ(shift.args[1].kind, ir::ScheduleArg::Kind::Int);
  EXPECT_EQ(shift.args[1].number, -1);
  const auto& apply = f.schedule[1];
  EXPECT_EQ(apply.args[0].kind, ir::ScheduleArg::Kind::Text);
  EXPECT_EQ(apply.args[0].text, "{ c[i] -> c[\"x\" + i] }\n");
  const auto& store = f.schedule[2];
  ASSERT_EQ(store.args.size(), 2u);
  const ir::ScheduleArg& list = store.args[1];
  EXPECT_EQ(list.kind, ir::ScheduleArg::Kind::Name);
  EXPECT_TRUE(list.text.empty());
  ASSERT_EQ(list.list.size(), 3u);
  EXPECT_EQ(list.list[0].text, "i");
  ASSERT_EQ(list.list[1].list.size(), 2u);
  EXPECT_EQ(list.list[1].list[1].number, -2);
  EXPECT_TRUE(list.list[2].list.empty());
  EXPECT_EQ(list.where.str(), "test.kiln:10:17");
  EXPECT_TRUE(f.schedule[3].args.empty());
  EXPECT_EQ(f.schedule[4].target, "B");
  EXPECT_EQ(f.schedule[5].args[1].text, "root");
}

TEST(Frontend, StoresAndCompoundAssignment) {
  ir::Func f = body(
      "param N;\n"
      "input x : f32[N];\n"
      "output y : f32[N];\n"
      "output z : i32[N];\n"
      "compute a(i) in 0 <= i < N: y[i] = x[i];\n"
      "compute b(i) in 0 <= i < N: y[i] += 2 * x[i];\n"
      "compute c(i) in 0 <= i < N: y[i] -= 1;\n"
      "compute d(i) in 0 <= i < N: y[i] *= x[N - 1 - i];\n"
      "compute e(i) in 0 <= i < N: z[i] += 1;");
  EXPECT_EQ(sexpr(f.comps[0].value), "(load:f32 x i)");
  EXPECT_EQ(sexpr(f.comps[1].value), "(+:f32 (load:f32 y i) (*:f32 2.0:f32 (load:f32 x i)))");
  EXPECT_EQ(sexpr(f.comps[2].value), "(-:f32 (load:f32 y i) 1.0:f32)");
  EXPECT_EQ(sexpr(f.comps[3].value),
            "(*:f32 (load:f32 y i) (load:f32 x (-:i64 (-:i64 N 1:i64) i)))");
  EXPECT_EQ(sexpr(f.comps[4].value), "(+:i32 (load:i32 z i) 1:i32)");
  for (const auto& c : f.comps) {
    ASSERT_TRUE(c.store);
    EXPECT_EQ(strings(c.store->indices), (Strings{"i"}));
  }
}

TEST(Frontend, ValueComputationsAndTheirReads) {
  ir::Func f = body(
      "param C, H, W;\n"
      "input img : f32[C, H, W];\n"
      "output out : f32[C, H, W];\n"
      "compute pad(c, h, w) in 0 <= c < C, 0 <= h < H + 2, 0 <= w < W + 2 =\n"
      "  select(1 <= h <= H and 1 <= w <= W, img[c, h - 1, w - 1], 0);\n"
      "compute ones(i) in 0 <= i < 3 = 1;\n"
      "compute blur(c, h, w) in 0 <= c < C, 0 <= h < H, 0 <= w < W:\n"
      "  out[c, h, w] = (pad(c, h, w + 1) + pad(c, h + 2, w + 1)) / 2;");
  ASSERT_EQ(f.comps.size(), 3u);
  const ir::Comp& pad = f.comps[0];
  EXPECT_FALSE(pad.store);
  EXPECT_EQ(pad.value->type, ir::DType::F32);
  EXPECT_EQ(sexpr(pad.value),
            "(select:f32 (and (and (<=:bool 1:i64 h) (<=:bool h H)) (and (<=:bool 1:i64 w) "
            "(<=:bool w W))) (load:f32 img c (-:i64 h 1:i64) (-:i64 w 1:i64)) 0.0:f32)");
  EXPECT_EQ(f.comps[1].value->type, ir::DType::I64);  // a constant alone is i64
  EXPECT_EQ(sexpr(f.comps[2].value),
            "(/:f32 (+:f32 (access:f32 pad c h (+:i64 w 1:i64)) (access:f32 pad c (+:i64 h 2:i64) "
            "(+:i64 w 1:i64))) 2.0:f32)");
}

TEST(Frontend, ComputationWithoutIterators) {
  ir::Func f = body("output s : f32[];\ncompute total(): s[] = 0;\ncompute k() = 2.5;");
  EXPECT_TRUE(f.comps[0].iters.empty());
  EXPECT_TRUE(f.comps[0].domain.empty());
  EXPECT_EQ(sexpr(f.comps[0].value), "0.0:f32");
  EXPECT_TRUE(f.comps[0].store->indices.empty());
  EXPECT_EQ(sexpr(f.comps[1].value), "2.5:f32");
}

TEST(Frontend, ComputationMayShareItsBuffersName) {
  ir::Func f = body("param N;\noutput y : f32[N];\ncompute y(i) in 0 <= i < N: y[i] = 1.0;");
  EXPECT_EQ(f.comps[0].name, "y");
  EXPECT_EQ(f.comps[0].store->buf, "y");
}

// ---------------------------------------------------------------------------
// Domains

TEST(Frontend, DomainConditionsAreSplit) {
  ir::Func f = body(
      "param N, M;\n"
      "output A : f32[N, N];\n"
      "compute t(i, j) in 0 <= i < N and 0 <= j, j <= i, (i + j) % 2 == 0 or i == j,\n"
      "                   not (i == 3), i / 2 != M:\n"
      "  A[i, j] = 1.0;");
  EXPECT_EQ(strings(f.comps[0].domain),
            (Strings{"0 <= i", "i < N", "0 <= j", "j <= i", "(i + j) % 2 == 0 or i == j",
                     "not i == 3", "i / 2 != M"}));
}

TEST(Frontend, ChainInsideOrBecomesAnd) {
  ir::Func f = body(
      "param N;\noutput y : f32[N];\n"
      "compute c(i) in 0 <= i < N, 0 <= i < 4 or 8 <= i < 12: y[i] = 1.0;");
  EXPECT_EQ(sexpr(f.comps[0].domain[2]),
            "(or (and (<=:bool 0:i64 i) (<:bool i 4:i64)) (and (<=:bool 8:i64 i) (<:bool i "
            "12:i64)))");
}

TEST(Frontend, DataDependentBoundsCsr) {
  ir::Func f = body(
      "param m, n, nnz;\n"
      "input ptr : i32[m + 1] in [0, nnz] sorted;\n"
      "input col : i32[nnz] in [0, n);\n"
      "input val : f32[nnz];\n"
      "input x : f32[n];\n"
      "output y : f32[m];\n"
      "compute zero(i) in 0 <= i < m: y[i] = 0;\n"
      "compute acc(i, j) in 0 <= i < m, ptr[i] <= j < ptr[i + 1]:\n"
      "  y[i] += val[j] * x[col[j]];");
  const ir::Comp& acc = f.comps[1];
  EXPECT_EQ(sexprs(acc.domain),
            (Strings{"(<=:bool 0:i64 i)", "(<:bool i m)", "(<=:bool (i64 (load:i32 ptr i)) j)",
                     "(<:bool j (i64 (load:i32 ptr (+:i64 i 1:i64))))"}));
  EXPECT_EQ(sexpr(acc.value),
            "(+:f32 (load:f32 y i) (*:f32 (load:f32 val j) (load:f32 x (i64 (load:i32 col j)))))");
}

TEST(Frontend, DataDependentBoundInReduction) {
  ir::Func f = body(
      "param nseg, n;\n"
      "input seg : i64[nseg + 1] sorted;\n"
      "input x : f64[n];\n"
      "output s : f64[nseg];\n"
      "compute s(g) in 0 <= g < nseg: s[g] = max(j in seg[g] <= j < seg[g + 1]) x[j];");
  ASSERT_EQ(f.comps.size(), 2u);
  EXPECT_EQ(sexpr(f.comps[0].value), "-inf:f64");
  EXPECT_EQ(strings(f.comps[1].domain),
            (Strings{"0 <= g", "g < nseg", "seg[g] <= j", "j < seg[g + 1]"}));
  EXPECT_EQ(sexpr(f.comps[1].value), "(max:f64 (load:f64 s g) (load:f64 x j))");
}

TEST(Frontend, AffineTermsAccepted) {
  ir::Func f = body(
      "param N, M;\noutput y : f32[N];\n"
      "compute c(i) in 0 <= 2 * i + 1, 3 * (i - M) / 4 + i % 3 < N - -M, (2 * 3) * i <= N * 6:"
      " y[i] = 0.0;");
  EXPECT_EQ(f.comps[0].domain.size(), 3u);
}

TEST(Frontend, BoundsMayComeFromOtherIterators) {
  // j is bounded above by i, i by N: a triangle.
  ir::Func f = body(
      "param N;\noutput A : f32[N, N];\n"
      "compute t(i, j) in 0 <= j <= i, i < N: A[i, j] = 1.0;");
  EXPECT_EQ(strings(f.comps[0].domain), (Strings{"0 <= j", "j <= i", "i < N"}));
}

TEST(Frontend, EqualityBoundsBothSides) {
  ir::Func f = body(
      "param N;\noutput A : f32[N, N];\n"
      "compute diag(i, j) in 0 <= i < N, j == i: A[i, j] = 1.0;");
  EXPECT_EQ(f.comps[0].domain.size(), 3u);
}

// ---------------------------------------------------------------------------
// Reductions

TEST(Frontend, ReductionIdentities) {
  struct Case {
    const char* op;
    const char* dtype;
    const char* identity;
    const char* combine;
  };
  const Case cases[] = {
      {"sum", "f32", "0.0:f32", "+:f32"},
      {"prod", "f64", "1.0:f64", "*:f64"},
      {"max", "f32", "-inf:f32", "max:f32"},
      {"min", "f64", "inf:f64", "min:f64"},
      {"sum", "i32", "0:i32", "+:i32"},
      {"prod", "i64", "1:i64", "*:i64"},
      {"max", "i32", "-2147483648:i32", "max:i32"},
      {"min", "i32", "2147483647:i32", "min:i32"},
      {"max", "i64", "-9223372036854775808:i64", "max:i64"},
      {"min", "i64", "9223372036854775807:i64", "min:i64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.op) + " " + c.dtype);
    std::string dt = c.dtype;
    ir::Func f =
        body("param N, K;\ninput A : " + dt + "[N, K];\noutput r : " + dt +
             "[N];\ncompute r(i) in 0 <= i < N: r[i] = " + c.op + "(k in 0 <= k < K) A[i, k];");
    ASSERT_EQ(f.comps.size(), 2u);
    EXPECT_EQ(f.comps[0].name, "r_init");
    EXPECT_EQ(sexpr(f.comps[0].value), c.identity);
    EXPECT_EQ(sexpr(f.comps[1].value),
              std::string("(") + c.combine + " (load:" + dt + " r i) (load:" + dt + " A i k))");
  }
}

TEST(Frontend, ReductionOverSeveralIteratorsConv) {
  ir::Func f = body(
      "param H, W;\n"
      "input img : f32[H + 2, W + 2];\n"
      "input ker : f32[3, 3];\n"
      "output out : f32[H, W];\n"
      "compute conv(h, w) in 0 <= h < H, 0 <= w < W:\n"
      "  out[h, w] = sum(kh, kw in 0 <= kh < 3, 0 <= kw < 3) img[h + kh, w + kw] * ker[kh, kw];");
  ASSERT_EQ(f.comps.size(), 2u);
  EXPECT_EQ(f.comps[0].name, "conv_init");
  EXPECT_EQ(f.comps[0].iters, (Strings{"h", "w"}));
  EXPECT_EQ(f.comps[0].store->buf, "out");
  EXPECT_EQ(f.comps[1].iters, (Strings{"h", "w", "kh", "kw"}));
  EXPECT_EQ(strings(f.comps[1].domain), (Strings{"0 <= h", "h < H", "0 <= w", "w < W", "0 <= kh",
                                                 "kh < 3", "0 <= kw", "kw < 3"}));
  EXPECT_EQ(ir::to_string(f.comps[1].value), "out[h, w] + img[h + kh, w + kw] * ker[kh, kw]");
  EXPECT_EQ(f.comps[0].where.str(), "test.kiln:7:15");  // the reduction
  EXPECT_EQ(f.comps[1].where.str(), "test.kiln:6:9");   // the computation's name
}

TEST(Frontend, ReductionDomainMayUseOuterIterators) {
  ir::Func f = body(
      "param N;\ninput L : f64[N, N];\ninput b : f64[N];\noutput y : f64[N];\n"
      "compute y(i) in 0 <= i < N: y[i] = sum(k in 0 <= k <= i) L[i, k] * b[k];");
  EXPECT_EQ(strings(f.comps[1].domain), (Strings{"0 <= i", "i < N", "0 <= k", "k <= i"}));
}

TEST(Frontend, MaxIsAFunctionUnlessIteratorsAndInFollow) {
  ir::Expr e = value_of("input x : f32[4];", "max(x[0], x[1]) + min(1.0, x[2])");
  EXPECT_EQ(sexpr(e),
            "(+:f32 (max:f32 (load:f32 x 0:i64) (load:f32 x 1:i64)) (min:f32 1.0:f32 "
            "(load:f32 x 2:i64)))");
}

// ---------------------------------------------------------------------------
// Expressions and types

TEST(Frontend, Precedence) {
  const char* decls = "input a : i64[]; input b : i64[]; input c : i64[]; input p : bool[];";
  EXPECT_EQ(sexpr(value_of(decls, "a[] + b[] * c[]")),
            "(+:i64 (load:i64 a) (*:i64 (load:i64 b) (load:i64 c)))");
  EXPECT_EQ(sexpr(value_of(decls, "-a[] * b[]")), "(*:i64 (neg:i64 (load:i64 a)) (load:i64 b))");
  EXPECT_EQ(sexpr(value_of(decls, "a[] - b[] - c[]")),
            "(-:i64 (-:i64 (load:i64 a) (load:i64 b)) (load:i64 c))");
  EXPECT_EQ(sexpr(value_of(decls, "a[] / b[] % c[]")),
            "(%:i64 (/:i64 (load:i64 a) (load:i64 b)) (load:i64 c))");
  EXPECT_EQ(sexpr(value_of(decls, "not a[] < b[] and p[] or p[]")),
            "(or (and (not (<:bool (load:i64 a) (load:i64 b))) (load:bool p)) (load:bool p))");
  EXPECT_EQ(sexpr(value_of(decls, "!p[] && p[] || !!p[]")),
            "(or (and (not (load:bool p)) (load:bool p)) (not (not (load:bool p))))");
  EXPECT_EQ(sexpr(value_of(decls, "(a[] + b[]) * c[]")),
            "(*:i64 (+:i64 (load:i64 a) (load:i64 b)) (load:i64 c))");
  EXPECT_EQ(sexpr(value_of(decls, "a[] == b[] != c[]")),
            "(and (==:bool (load:i64 a) (load:i64 b)) (!=:bool (load:i64 b) (load:i64 c)))")
      << "a chain compares neighbours";
}

TEST(Frontend, LiteralsAdaptToTheOtherOperand) {
  const char* decls = "input h : f32[]; input d : f64[]; input s : i32[]; input l : i64[];";
  EXPECT_EQ(sexpr(value_of(decls, "h[] * 2")), "(*:f32 (load:f32 h) 2.0:f32)");
  EXPECT_EQ(sexpr(value_of(decls, "0.5 * d[]")), "(*:f64 0.5:f64 (load:f64 d))");
  EXPECT_EQ(sexpr(value_of(decls, "s[] + 1")), "(+:i32 (load:i32 s) 1:i32)");
  EXPECT_EQ(sexpr(value_of(decls, "l[] + 1")), "(+:i64 (load:i64 l) 1:i64)");
  EXPECT_EQ(sexpr(value_of(decls, "7")), "7:i64");
  EXPECT_EQ(sexpr(value_of(decls, "1.5")), "1.5:f32");
  EXPECT_EQ(sexpr(value_of(decls, "2.0e-3")), "0.002:f32");
  EXPECT_EQ(sexpr(value_of(decls, "1e3 + 1E+2")), "1100.0:f32");
  EXPECT_EQ(sexpr(value_of(decls, "-2 * d[]")), "(*:f64 -2.0:f64 (load:f64 d))");
}

TEST(Frontend, ConstantExpressionsFoldExactly) {
  const char* decls = "input h : f32[]; input s : i32[];";
  // Integer constants fold with integer (floor) arithmetic before adapting.
  EXPECT_EQ(sexpr(value_of(decls, "1 / 2 * h[]")), "(*:f32 0.0:f32 (load:f32 h))");
  EXPECT_EQ(sexpr(value_of(decls, "1.0 / 2 * h[]")), "(*:f32 0.5:f32 (load:f32 h))");
  EXPECT_EQ(sexpr(value_of(decls, "(2 + 3) * s[]")), "(*:i32 5:i32 (load:i32 s))");
  EXPECT_EQ(sexpr(value_of(decls, "-7 / 2")), "-4:i64");
  EXPECT_EQ(sexpr(value_of(decls, "-7 % 3")), "2:i64");
  EXPECT_EQ(sexpr(value_of(decls, "min(3, 2) + max(1, 4.5)")), "6.5:f32");
  EXPECT_EQ(sexpr(value_of(decls, "1 < 2")), "true");
  EXPECT_EQ(sexpr(value_of(decls, "sqrt(4) * h[]")), "(*:f32 2.0:f32 (load:f32 h))");
  EXPECT_EQ(sexpr(value_of(decls, "abs(-3)")), "3:i64");
}

TEST(Frontend, IntegerPromotionInsertsCasts) {
  const char* decls = "input s : i32[4]; input l : i64[4];";
  EXPECT_EQ(sexpr(value_of(decls, "s[0] + l[1]")),
            "(+:i64 (i64 (load:i32 s 0:i64)) (load:i64 l 1:i64))");
  EXPECT_EQ(sexpr(value_of(decls, "s[0] * s[1]")), "(*:i32 (load:i32 s 0:i64) (load:i32 s 1:i64))");
  EXPECT_EQ(sexpr(value_of(decls, "s[0] < l[1]")),
            "(<:bool (i64 (load:i32 s 0:i64)) (load:i64 l 1:i64))");
  // Indices are i64: an i32 index is widened.
  EXPECT_EQ(sexpr(value_of(decls, "l[s[2]]")), "(load:i64 l (i64 (load:i32 s 2:i64)))");
}

TEST(Frontend, BuiltinFunctionsAndCasts) {
  const char* decls = "input x : f32[]; input d : f64[]; input n : i32[]; input p : bool[];";
  EXPECT_EQ(
      sexpr(value_of(decls, "exp(x[]) + log(x[]) + sqrt(x[])")),
      "(+:f32 (+:f32 (exp:f32 (load:f32 x)) (log:f32 (load:f32 x))) (sqrt:f32 (load:f32 x)))");
  EXPECT_EQ(
      sexpr(value_of(decls, "tanh(d[]) * sin(d[]) - cos(d[])")),
      "(-:f64 (*:f64 (tanh:f64 (load:f64 d)) (sin:f64 (load:f64 d))) (cos:f64 (load:f64 d)))");
  EXPECT_EQ(sexpr(value_of(decls, "floor(x[]) + ceil(x[])")),
            "(+:f32 (floor:f32 (load:f32 x)) (ceil:f32 (load:f32 x)))");
  EXPECT_EQ(sexpr(value_of(decls, "pow(x[], 2)")), "(pow:f32 (load:f32 x) 2.0:f32)");
  EXPECT_EQ(sexpr(value_of(decls, "abs(n[])")), "(abs:i32 (load:i32 n))");
  EXPECT_EQ(sexpr(value_of(decls, "abs(x[])")), "(abs:f32 (load:f32 x))");
  EXPECT_EQ(sexpr(value_of(decls, "f32(n[]) * x[]")), "(*:f32 (f32 (load:i32 n)) (load:f32 x))");
  EXPECT_EQ(sexpr(value_of(decls, "f64(x[])")), "(f64 (load:f32 x))");
  EXPECT_EQ(sexpr(value_of(decls, "i32(x[])")), "(i32 (load:f32 x))");
  EXPECT_EQ(sexpr(value_of(decls, "i64(n[])")), "(i64 (load:i32 n))");
  EXPECT_EQ(sexpr(value_of(decls, "bool(n[])")), "(bool (load:i32 n))");
  EXPECT_EQ(sexpr(value_of(decls, "f32(n[]) == f32(1)")), "(==:bool (f32 (load:i32 n)) 1.0:f32)");
  EXPECT_EQ(sexpr(value_of(decls, "i32(2.9)")), "2:i32");
  EXPECT_EQ(sexpr(value_of(decls, "select(p[], x[], 0)")),
            "(select:f32 (load:bool p) (load:f32 x) 0.0:f32)");
  EXPECT_EQ(sexpr(value_of(decls, "select(p[], p[], false)")),
            "(select:bool (load:bool p) (load:bool p) false)");
  EXPECT_EQ(sexpr(value_of(decls, "min(n[], 3) + max(n[], n[])")),
            "(+:i32 (min:i32 (load:i32 n) 3:i32) (max:i32 (load:i32 n) (load:i32 n)))");
}

TEST(Frontend, StoreValueTakesTheBufferType) {
  ir::Func f = body(
      "param N;\noutput a : f64[N];\noutput b : i32[N];\noutput c : bool[N];\n"
      "compute x(i) in 0 <= i < N: a[i] = 1;\n"
      "compute y(i) in 0 <= i < N: b[i] = 1;\n"
      "compute z(i) in 0 <= i < N: c[i] = i < 3;");
  EXPECT_EQ(sexpr(f.comps[0].value), "1.0:f64");
  EXPECT_EQ(sexpr(f.comps[1].value), "1:i32");
  EXPECT_EQ(sexpr(f.comps[2].value), "(<:bool i 3:i64)");
}

// ---------------------------------------------------------------------------
// Files, modules, lexical details

TEST(Frontend, SeveralFuncsInOneFile) {
  ir::Module m = frontend::parse_module(
      "func a { param N; output y : f32[N]; compute c(i) in 0 <= i < N: y[i] = 1.0; }\n"
      "func b { param N; output y : f32[N]; compute c(i) in 0 <= i < N: y[i] = 2.0; }\n");
  ASSERT_EQ(m.funcs.size(), 2u);
  EXPECT_EQ(m.funcs[1].name, "b");
  ASSERT_NE(m.find("a"), nullptr);
  // Names are per func: both have N, y and c.
  EXPECT_EQ(m.funcs[1].comps[0].name, "c");
}

TEST(Frontend, FastMathIsAnOptionOffByDefault) {
  const char* plain =
      "func a { param N; output y : f32[N]; compute c(i) in 0 <= i < N: y[i] = 1.0; }";
  EXPECT_FALSE(frontend::parse_module(plain).funcs[0].fast_math);
  ir::Module m = frontend::parse_module(
      "func a { option fast_math; param N; output y : f32[N];\n"
      "  compute c(i) in 0 <= i < N: y[i] = 1.0; }");
  EXPECT_TRUE(m.funcs[0].fast_math);
  EXPECT_NE(ir::to_string(m.funcs[0]).find("  option fast_math;\n"), std::string::npos);
  try {
    frontend::parse_module("func a { option turbo; }", "o.kiln");
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()),
              "o.kiln:1:17: validate error: unknown option 'turbo'; the options are: fast_math");
  }
}

TEST(Frontend, CommentsAndWhitespace) {
  ir::Func f = parse_func(
      "// a line comment\n"
      "func f { # another\r\n"
      "\tparam N = 4; // trailing\n"
      "  output y : f32[N]; # y\n"
      "  compute c(i) in 0 <= i < N: # the domain\n"
      "    y[i] = 1.0; // the value\n"
      "}\n# the end, no newline after");
  EXPECT_EQ(f.params[0].where.str(), "test.kiln:3:8");
  EXPECT_EQ(f.comps[0].where.str(), "test.kiln:5:11");
}

TEST(Frontend, ParseFileReadsAndNamesTheFile) {
  std::string path = ::testing::TempDir() + "/frontend_test_file.kiln";
  {
    std::ofstream out(path);
    out << kMatmul;
  }
  ir::Module m = frontend::parse_file(path);
  EXPECT_EQ(m.funcs[0].where.str(), path + ":2:6");
  std::remove(path.c_str());
  try {
    frontend::parse_file(path);
    FAIL() << "no error for a missing file";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Parse);
    EXPECT_EQ(std::string(e.what()),
              path + ": parse error: cannot open " + path + ": No such file or directory");
  }
  try {
    frontend::parse_file(::testing::TempDir());
    FAIL() << "no error for a directory";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a directory"), std::string::npos);
  }
}

TEST(Frontend, PrintedFuncParsesBackToTheSame) {
  // to_string prints .kiln syntax; reparsing the algorithm gives the same IR.
  const char* src = R"(func f {
  param N = 8, M;
  constraint N > 0, M % 4 == 0;
  input x : f32[N] in [-1.0, 1.0);
  input p : i32[N + 1] in [0, M] sorted;
  output y : f32[N];
  compute a(i) in 0 <= i < N: y[i] = exp(x[i]) * 2.0 + f32(i);
  compute b(i, j) in 0 <= i < N, p[i] <= j < p[i + 1]: y[i] = y[i] + 1.0;
})";
  ir::Func f = parse_func(src);
  ir::Func g = parse_func(ir::to_string(f));
  EXPECT_EQ(ir::to_string(g), ir::to_string(f));
  ASSERT_EQ(g.comps.size(), f.comps.size());
  for (size_t k = 0; k < f.comps.size(); ++k) {
    EXPECT_TRUE(ir::equal(f.comps[k].value, g.comps[k].value)) << k;
    for (size_t d = 0; d < f.comps[k].domain.size(); ++d) {
      EXPECT_TRUE(ir::equal(f.comps[k].domain[d], g.comps[k].domain[d])) << k << " " << d;
    }
  }
}

TEST(Frontend, ASourceBeyondTheLimitIsRefusedBeforeParsing) {
  std::string src =
      "func f { param N = 4; output y : f32[N]; compute c(i) in 0 <= i < N: y[i] = 1.0; }";
  Limits small;
  small.max_source_bytes = src.size();
  EXPECT_NO_THROW(frontend::parse_module(src, "ok.kiln", small));
  small.max_source_bytes = src.size() - 1;
  try {
    frontend::parse_module(src, "big.kiln", small);
    ADD_FAILURE() << "accepted";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Parse);
    EXPECT_EQ(std::string(e.what()),
              "big.kiln: parse error: the source is larger than the limit of " +
                  std::to_string(src.size() - 1) + " bytes (max_source_bytes, docs/limits.md)");
  }
}

// The size limits on a func: each at its value passes, one past it is refused
// at the computation that crosses it, naming the limit.
TEST(Frontend, SizeLimitsOnComputationsIteratorsAndExpressions) {
  auto error = [](const std::string& src, const Limits& limits) -> std::string {
    try {
      frontend::parse_module(src, "f.kiln", limits);
      return "";
    } catch (const CompileError& e) {
      EXPECT_EQ(e.stage(), ErrorStage::Validate);
      return e.what();
    }
  };
  std::string three = R"(func f {
  param N = 4;
  input x : f32[N];
  output y : f32[N];
  compute a(i) in 0 <= i < N: y[i] = x[i];
  compute b(i) in 0 <= i < N: y[i] = y[i] + x[i] * x[i];
  compute c(i, j) in 0 <= i < N, 0 <= j < N: y[i] += x[j];
})";
  Limits l;
  l.max_computations = 3;
  EXPECT_EQ(error(three, l), "");
  l.max_computations = 2;
  EXPECT_EQ(error(three, l),
            "f.kiln:7:11: validate error: 'f' has more than 2 computations (max_computations, "
            "docs/limits.md)");
  l = {};
  l.max_domain_dims = 1;
  EXPECT_EQ(error(three, l),
            "f.kiln:7:11: validate error: computation 'c' has 2 iterators, more than the limit of "
            "1 (max_domain_dims, docs/limits.md)");
  l = {};
  // b's value y[i] + x[i] * x[i] (8 nodes) and its domain 0 <= i, i < N (6) take 14;
  // c's take 17.
  l.max_expression_nodes = 14;
  EXPECT_EQ(error(three, l),
            "f.kiln:7:11: validate error: computation 'c' has more than 14 expression nodes "
            "(max_expression_nodes, docs/limits.md)");
  l.max_expression_nodes = 13;
  EXPECT_EQ(error(three, l),
            "f.kiln:6:11: validate error: computation 'b' has more than 13 expression nodes "
            "(max_expression_nodes, docs/limits.md)");
}

// The smallest i64 has no literal of its own; printed, it must parse back.
TEST(Frontend, TheSmallestIntegerPrintsAsTextThatParsesBack) {
  const char* src = R"(func f {
  param N = 4;
  input x : i64[N];
  output y : i64[N];
  compute c(i) in 0 <= i < N: y[i] = max(x[i], -9223372036854775807 - 1);
})";
  ir::Func f = parse_func(src);
  std::string printed = ir::to_string(f);
  EXPECT_NE(printed.find("-9223372036854775807 - 1"), std::string::npos) << printed;
  EXPECT_EQ(ir::to_string(parse_func(printed)), printed);
}

// A max reduction's identity is -inf, which to_string prints as such: it must parse back
// (kiln tune --auto sends a func's algorithm as printed), as must nan; a declared name
// called inf is that name.
TEST(Frontend, InfinityAndNanPrintAsTextThatParsesBack) {
  ir::Func f = parse_func(R"(func f {
  param N = 4, K = 3;
  input x : f32[N, K];
  output y : f32[N];
  output z : f32[N];
  compute y(i) in 0 <= i < N: y[i] = max(k in 0 <= k < K) x[i, k];
  compute z(i) in 0 <= i < N: z[i] = select(x[i, 0] > 0.5, inf, nan);
})");
  std::string printed = ir::to_string(f);
  EXPECT_NE(printed.find("= -inf;"), std::string::npos) << printed;
  EXPECT_NE(printed.find("select(x[i, 0] > 0.5, inf, nan)"), std::string::npos) << printed;
  EXPECT_EQ(ir::to_string(parse_func(printed)), printed);
  ir::Func shadowed = parse_func(R"(func g {
  param inf = 2;
  input x : f32[inf];
  output y : f32[inf];
  compute c(i) in 0 <= i < inf: y[i] = x[i];
})");
  EXPECT_EQ(shadowed.params.at(0).name, "inf");
}

// CR LF and a lone CR end lines as LF does: a CR-only file was one line, so
// its first comment hid everything after it.
TEST(Frontend, EveryLineEndingEndsALine) {
  std::string lf =
      "# a comment\nfunc f {\n  param N = 4;\n  output y : f32[N];\n"
      "  compute c(i) in 0 <= i < N: y[i] = 1.0;\n}\n";
  std::string crlf, cr;
  for (char c : lf) {
    crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    cr += c == '\n' ? '\r' : c;
  }
  std::string expected = ir::to_string(parse_func(lf));
  EXPECT_EQ(ir::to_string(parse_func(crlf)), expected);
  EXPECT_EQ(ir::to_string(parse_func(cr)), expected);
  std::string bad = cr;
  bad.insert(bad.rfind('}'), "  bogus\r");
  try {
    frontend::parse_module(bad, "cr.kiln");
    ADD_FAILURE() << "accepted";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.loc().line, 6);
    EXPECT_EQ(e.loc().col, 3);
  }
}

}  // namespace
}  // namespace kiln
