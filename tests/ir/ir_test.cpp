// Specifications of the IR core: printing, equality, substitution, mutators, type rules.
#include "kiln/ir.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "kiln/error.h"
#include "kiln/loop_ir.h"

namespace kiln::ir {
namespace {

Expr i() { return var("i"); }
Expr j() { return var("j"); }
Expr k() { return var("k"); }
Expr c(int64_t v) { return int_imm(v); }
Buf buf(const std::string& name, std::vector<Expr> shape, BufKind kind) {
  Buf b;
  b.name = name;
  b.shape = std::move(shape);
  b.kind = kind;
  return b;
}

// --- errors -----------------------------------------------------------------

TEST(CompileError, RendersLocationStageAndMessage) {
  CompileError e(ErrorStage::Parse, SourceLoc{"a.kiln", 3, 7}, "expected ';'");
  EXPECT_STREQ(e.what(), "a.kiln:3:7: parse error: expected ';'");
  EXPECT_EQ(e.stage(), ErrorStage::Parse);
  EXPECT_EQ(e.message(), "expected ';'");
}

TEST(CompileError, EveryStageHasItsName) {
  std::set<std::string> names;
  for (ErrorStage s :
       {ErrorStage::Parse, ErrorStage::Validate, ErrorStage::Schedule, ErrorStage::Legality,
        ErrorStage::Lower, ErrorStage::Passes, ErrorStage::Codegen, ErrorStage::Link,
        ErrorStage::Interp, ErrorStage::Run, ErrorStage::Output, ErrorStage::Import}) {
    std::string name = error_stage_name(s);
    EXPECT_NE(name, "?");
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
  }
  EXPECT_STREQ(error_stage_name(ErrorStage::Legality), "legality");
  CompileError e(ErrorStage::Output, SourceLoc{"k.so", 0, 0}, "cannot write the file");
  EXPECT_STREQ(e.what(), "k.so: output error: cannot write the file");
}

TEST(ScheduleOp, NamesRoundTripAndUnknownNamesAreNone) {
  std::string list = ir::schedule_op_list();
  EXPECT_EQ(list,
            "split, fuse, reorder, tile, skew, shift, after, separate, inline, tag, apply_sch, "
            "store, store_at, set_loc, cache_identity, cache, alloc_at, atomic, privatize");
  for (ir::ScheduleOp op :
       {ir::ScheduleOp::Split, ir::ScheduleOp::ApplySch, ir::ScheduleOp::CacheIdentity,
        ir::ScheduleOp::AllocAt, ir::ScheduleOp::Atomic, ir::ScheduleOp::Privatize}) {
    EXPECT_EQ(ir::schedule_op_from_name(ir::schedule_op_name(op)), op);
  }
  EXPECT_FALSE(ir::schedule_op_from_name("twist").has_value());
  EXPECT_TRUE(ir::is_memory_schedule(ir::ScheduleOp::Cache));
  EXPECT_FALSE(ir::is_memory_schedule(ir::ScheduleOp::Tag));
  ir::ScheduleCommand c;
  c.op = "split";
  EXPECT_TRUE(c.is(ir::ScheduleOp::Split));
}

TEST(SourceLoc, UnknownPositionPrintsFileOrInput) {
  EXPECT_EQ((SourceLoc{"a.kiln", 0, 0}).str(), "a.kiln");
  EXPECT_EQ(SourceLoc{}.str(), "<input>");
  EXPECT_EQ((SourceLoc{"", 2, 5}).str(), "<input>:2:5");
}

// --- printing ---------------------------------------------------------------

// The integer semantics every folder and interpreter shares.
TEST(IntegerSemantics, FloorDivisionModuloAndComparisons) {
  EXPECT_EQ(floor_div(-7, 2), -4);
  EXPECT_EQ(floor_mod(-7, 2), 1);
  EXPECT_EQ(floor_div(7, -2), -4);
  EXPECT_EQ(floor_mod(7, -2), -1);
  EXPECT_EQ(floor_div(6, 3), 2);
  EXPECT_EQ(floor_mod(6, -3), 0);
  int64_t lowest = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(floor_div(lowest, -1), lowest);  // wraps, no trap
  EXPECT_EQ(floor_mod(lowest, -1), 0);
  EXPECT_EQ(eval_int(binary(BinaryOp::Div, int_imm(lowest), int_imm(-1)), {}), lowest);
  EXPECT_TRUE(compare(BinaryOp::Le, 2, 2));
  EXPECT_FALSE(compare(BinaryOp::Ne, 1.5, 1.5));
  EXPECT_FALSE(compare(BinaryOp::Eq, NAN, NAN));
  EXPECT_TRUE(compare(BinaryOp::Ne, NAN, NAN));
  EXPECT_EQ(dtype_bytes(DType::Bool), 1u);
  EXPECT_EQ(dtype_bytes(DType::I32), 4u);
  EXPECT_EQ(dtype_bytes(DType::F64), 8u);
}

TEST(ExprPrinting, ParenthesizesOnlyWherePrecedenceRequires) {
  EXPECT_EQ(to_string(i() + j() * k()), "i + j * k");
  EXPECT_EQ(to_string((i() + j()) * k()), "(i + j) * k");
  EXPECT_EQ(to_string(i() - (j() - k())), "i - (j - k)");
  EXPECT_EQ(to_string((i() - j()) - k()), "i - j - k");
  EXPECT_EQ(to_string(binary(BinaryOp::Div, i() + c(1), c(2))), "(i + 1) / 2");
  EXPECT_EQ(to_string(binary(BinaryOp::Mod, i(), c(4))), "i % 4");
  EXPECT_EQ(to_string(unary(UnaryOp::Neg, i() + j())), "-(i + j)");
  EXPECT_EQ(to_string(i() - c(-3)), "i - -3");
}

TEST(ExprPrinting, LogicUsesWordsAndComparisonsDoNotChain) {
  Expr lo = binary(BinaryOp::Le, c(0), i());
  Expr hi = binary(BinaryOp::Lt, i(), var("M"));
  EXPECT_EQ(to_string(binary(BinaryOp::And, lo, hi)), "0 <= i and i < M");
  EXPECT_EQ(to_string(binary(BinaryOp::Or, binary(BinaryOp::And, lo, hi), lo)),
            "0 <= i and i < M or 0 <= i");
  EXPECT_EQ(to_string(binary(BinaryOp::And, binary(BinaryOp::Or, lo, hi), lo)),
            "(0 <= i or i < M) and 0 <= i");
  EXPECT_EQ(to_string(unary(UnaryOp::Not, lo)), "not 0 <= i");
  EXPECT_EQ(to_string(binary(BinaryOp::Eq, lo, bool_imm(true))), "(0 <= i) == true");
}

TEST(ExprPrinting, CallsLoadsAccessesCastsSelectsAndLets) {
  Expr a = load("A", {i(), k()}, DType::F32);
  EXPECT_EQ(to_string(a), "A[i, k]");
  EXPECT_EQ(to_string(load("s", {}, DType::F32)), "s[]");
  EXPECT_EQ(to_string(access("pad", {i() + c(1), j()}, DType::F32)), "pad(i + 1, j)");
  EXPECT_EQ(to_string(cast(DType::F32, i())), "f32(i)");
  EXPECT_EQ(to_string(binary(BinaryOp::Min, i(), j())), "min(i, j)");
  EXPECT_EQ(to_string(binary(BinaryOp::Max, i(), j()) * k()), "max(i, j) * k");
  EXPECT_EQ(to_string(select(binary(BinaryOp::Lt, i(), j()), a, float_imm(0.0))),
            "select(i < j, A[i, k], 0.0)");
  EXPECT_EQ(to_string(call("exp", {a})), "exp(A[i, k])");
  EXPECT_EQ(to_string(let("x", i() + c(1), var("x") * var("x"))), "(let x = i + 1 in x * x)");
}

TEST(ExprPrinting, TheSmallestIntegerIsASumThatParsesBack) {
  Expr lowest = int_imm(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(to_string(lowest), "-9223372036854775807 - 1");
  EXPECT_EQ(to_string(var("x") * lowest), "x * (-9223372036854775807 - 1)");
  EXPECT_EQ(to_string(int_imm(-5)), "-5");
}

TEST(ExprPrinting, FloatLiteralsRoundTripAndLookLikeFloats) {
  EXPECT_EQ(to_string(float_imm(0.0)), "0.0");
  EXPECT_EQ(to_string(float_imm(1.5)), "1.5");
  EXPECT_EQ(to_string(float_imm(0.1)), "0.1");  // f32: shortest text of the float
  EXPECT_EQ(to_string(float_imm(0.1, DType::F64)), "0.1");
  EXPECT_EQ(to_string(float_imm(3.0, DType::F64)), "3.0");
  EXPECT_EQ(to_string(float_imm(1e20, DType::F64)), "1e+20");
  EXPECT_EQ(to_string(int_imm(42, DType::I32)), "42");
  EXPECT_EQ(to_string(bool_imm(false)), "false");
}

// --- types ------------------------------------------------------------------

TEST(ExprTypes, ComparisonsGiveBoolAndLogicNeedsBool) {
  EXPECT_EQ(binary(BinaryOp::Lt, i(), j())->type, DType::Bool);
  EXPECT_EQ((i() + j())->type, DType::I64);
  EXPECT_THROW(binary(BinaryOp::And, i(), j()), std::logic_error);
  EXPECT_THROW(i() + var("x", DType::I32), std::logic_error);
  EXPECT_THROW(unary(UnaryOp::Not, i()), std::logic_error);
  EXPECT_THROW(select(i(), i(), j()), std::logic_error);
}

TEST(ExprTypes, CallTakesTypeOfFirstArgumentAndCastIsIdentityOnSameType) {
  Expr x = var("x", DType::F64);
  EXPECT_EQ(call("pow", {x, x})->type, DType::F64);
  EXPECT_THROW(call("pow", {x}), std::logic_error);
  EXPECT_EQ(cast(DType::F64, x), x);
  EXPECT_EQ(cast(DType::F32, x)->type, DType::F32);
  EXPECT_EQ(let("y", i(), x)->type, DType::F64);
  size_t arity = 0;
  EXPECT_TRUE(is_math_intrinsic("tanh", &arity));
  EXPECT_EQ(arity, 1u);
  EXPECT_TRUE(is_math_intrinsic("pow", &arity));
  EXPECT_EQ(arity, 2u);
  EXPECT_FALSE(is_math_intrinsic("sum"));
}

TEST(Names, RoundTrip) {
  EXPECT_EQ(dtype_from_name("f64"), DType::F64);
  EXPECT_EQ(dtype_from_name("float"), std::nullopt);
  EXPECT_EQ(mem_loc_from_name(mem_loc_name(MemLoc::GpuShared)), MemLoc::GpuShared);
  EXPECT_EQ(loop_tag_from_name("gpu_thread_y"), LoopTag::GpuThreadY);
  EXPECT_STREQ(loop_tag_name(LoopTag::UnrollExplicit), "unroll_explicit");
  EXPECT_STREQ(buf_kind_name(BufKind::Temp), "temp");
  EXPECT_STREQ(binary_op_symbol(BinaryOp::Le), "<=");
}

// --- equality and substitution ------------------------------------------------

TEST(Equal, IsStructural) {
  EXPECT_TRUE(equal(i() + c(1), i() + c(1)));
  EXPECT_FALSE(equal(i() + c(1), c(1) + i()));
  EXPECT_FALSE(equal(int_imm(1, DType::I32), int_imm(1, DType::I64)));
  EXPECT_FALSE(equal(load("A", {i()}, DType::F32), load("B", {i()}, DType::F32)));
}

TEST(Substitute, ReplacesFreeVarsButNotLetBoundOnes) {
  Expr e = i() + let("i", j(), i() * c(2));
  Expr r = substitute(e, {{"i", k()}, {"j", c(5)}});
  EXPECT_EQ(to_string(r), "k + (let i = 5 in i * 2)");
}

TEST(Substitute, ReturnsSameNodeWhenNothingMatches) {
  Expr e = i() + j();
  EXPECT_EQ(substitute(e, {{"z", c(0)}}), e);
}

// --- mutators -----------------------------------------------------------------

class RenameK : public IRMutator {
 protected:
  Expr mutate_var(const Expr& e, const Var& n) override { return n.name == "k" ? var("kk") : e; }
};

TEST(IRMutator, KeepsIdentityOfUnchangedSubtrees) {
  Expr left = load("A", {i(), j()}, DType::F32);
  Expr right = load("B", {k()}, DType::F32);
  Expr e = binary(BinaryOp::Add, left, right);
  Expr r = RenameK().mutate(e);
  ASSERT_NE(r, e);
  EXPECT_EQ(as<Binary>(r)->a, left);
  EXPECT_EQ(to_string(r), "A[i, j] + B[kk]");
  Expr untouched = i() + j();
  EXPECT_EQ(RenameK().mutate(untouched), untouched);
}

class RenameKStmt : public StmtMutator {
 protected:
  Expr mutate_var(const Expr& e, const Var& n) override { return n.name == "k" ? var("kk") : e; }
};

TEST(StmtMutator, RebuildsOnlyChangedStatements) {
  Stmt s1 = std::make_shared<Store>("y", std::vector<Expr>{i()}, float_imm(0.0));
  Stmt s2 = std::make_shared<Store>("z", std::vector<Expr>{k()}, float_imm(1.0));
  Stmt b = block({s1, s2});
  Stmt r = RenameKStmt().mutate(b);
  ASSERT_NE(r, b);
  EXPECT_EQ(as<Block>(r)->stmts[0], s1);
  Stmt loop = std::make_shared<For>("i", c(0), c(4), 1, LoopTag::None, s1);
  EXPECT_EQ(RenameKStmt().mutate(loop), loop);
}

// --- loop IR ------------------------------------------------------------------

TEST(Block, FlattensAndDropsNulls) {
  Stmt s1 = std::make_shared<Evaluate>(i());
  Stmt s2 = std::make_shared<Evaluate>(j());
  EXPECT_EQ(block({nullptr, s1}), s1);
  Stmt b = block({block({s1, s2}), nullptr, s1});
  ASSERT_NE(as<Block>(b), nullptr);
  EXPECT_EQ(as<Block>(b)->stmts.size(), 3u);
}

TEST(LoopPrinting, CLikePseudoCode) {
  Expr io = var("io"), ii = var("ii");
  Expr idx = io * c(4) + ii;
  Stmt store = std::make_shared<Store>("T", std::vector<Expr>{ii}, load("x", {idx}, DType::F32));
  Stmt guarded = std::make_shared<IfThenElse>(
      binary(BinaryOp::Lt, idx, var("n")), store,
      std::make_shared<Store>("T", std::vector<Expr>{ii}, float_imm(0.0)));
  Stmt inner = std::make_shared<For>("ii", c(0), c(4), 1, LoopTag::Vectorize, guarded);
  Stmt let_s = std::make_shared<LetStmt>("base", io * c(4), inner);
  Stmt alloc =
      std::make_shared<Alloc>("T", DType::F32, std::vector<Expr>{c(4)}, MemLoc::Stack, let_s);
  Stmt outer = std::make_shared<For>("io", c(0), c(8), 1, LoopTag::Parallel, alloc);
  EXPECT_EQ(to_string(outer),
            "for (io = 0; io < 8; io += 1) {  // parallel\n"
            "  alloc T: f32[4] @stack {\n"
            "    let base = io * 4;\n"
            "    for (ii = 0; ii < 4; ii += 1) {  // vectorize\n"
            "      if (io * 4 + ii < n) {\n"
            "        T[ii] = x[io * 4 + ii];\n"
            "      } else {\n"
            "        T[ii] = 0.0;\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}\n");
  LoweredFunc f{"copy", {"n"}, {buf("x", {var("n")}, BufKind::Input)}, outer};
  EXPECT_EQ(to_string(f).substr(0, 38), "func copy(n, input x: f32[n]) {\n  for ");
}

// --- funcs --------------------------------------------------------------------

Func matmul() {
  Func f;
  f.name = "matmul";
  f.where = SourceLoc{"mm.kiln", 1, 1};
  f.params = {{"M", 64, {}}, {"N", 64, {}}, {"K", std::nullopt, {}}};
  f.constraints = {{binary(BinaryOp::Gt, var("K"), c(0)), {}}};
  Expr M = var("M"), N = var("N"), K = var("K");
  f.bufs = {buf("A", {M, K}, BufKind::Input), buf("B", {K, N}, BufKind::Input),
            buf("C", {M, N}, BufKind::Output)};
  f.bufs[0].values.lo = float_imm(-1.0);
  f.bufs[0].values.hi = float_imm(1.0);
  f.bufs[0].values.hi_inclusive = true;
  auto in_range = [](Expr x, Expr hi) {
    return binary(BinaryOp::And, binary(BinaryOp::Le, c(0), x), binary(BinaryOp::Lt, x, hi));
  };
  f.comps.push_back(Comp{"C_init",
                         {"i", "j"},
                         {in_range(i(), M), in_range(j(), N)},
                         float_imm(0.0),
                         StoreTarget{"C", {i(), j()}},
                         {}});
  Expr prod = load("A", {i(), k()}, DType::F32) * load("B", {k(), j()}, DType::F32);
  f.comps.push_back(Comp{"C",
                         {"i", "j", "k"},
                         {in_range(i(), M), in_range(j(), N), in_range(k(), K)},
                         load("C", {i(), j()}, DType::F32) + prod,
                         StoreTarget{"C", {i(), j()}},
                         {}});
  f.knobs = {Knob{"TI", 32, {8, 16, 32}, {}}};
  ScheduleCommand tile{"C", "tile", {}, {}};
  for (const char* n : {"i", "j", "TI"})
    tile.args.push_back({ScheduleArg::Kind::Name, 0, n, {}, {}});
  tile.args.push_back({ScheduleArg::Kind::Int, 32, "", {}, {}});
  ScheduleArg list{ScheduleArg::Kind::Name, 0, "", {}, {}};
  list.list = {{ScheduleArg::Kind::Name, 0, "io", {}, {}},
               {ScheduleArg::Kind::Name, 0, "jo", {}, {}}};
  tile.args.push_back(list);
  f.schedule = {
      tile, ScheduleCommand{
                "C", "apply_sch", {{ScheduleArg::Kind::Text, 0, "{ C[i] -> C[i] }", {}, {}}}, {}}};
  return f;
}

TEST(FuncPrinting, PrintsKilnSyntax) {
  EXPECT_EQ(to_string(matmul()),
            "func matmul {\n"
            "  param M = 64, N = 64, K;\n"
            "  constraint K > 0;\n"
            "\n"
            "  input A : f32[M, K] in [-1.0, 1.0];\n"
            "  input B : f32[K, N];\n"
            "  output C : f32[M, N];\n"
            "\n"
            "  compute C_init(i, j) in 0 <= i and i < M, 0 <= j and j < N: C[i, j] = 0.0;\n"
            "  compute C(i, j, k) in 0 <= i and i < M, 0 <= j and j < N, 0 <= k and k < K: "
            "C[i, j] = C[i, j] + A[i, k] * B[k, j];\n"
            "\n"
            "  knob TI = 32 in [8, 16, 32];\n"
            "\n"
            "  schedule {\n"
            "    C.tile(i, j, TI, 32, [io, jo]);\n"
            "    C.apply_sch(\"{ C[i] -> C[i] }\");\n"
            "  }\n"
            "}\n");
}

TEST(FuncPrinting, ValueComputationUsesEqualsForm) {
  Func f;
  f.name = "p";
  f.comps.push_back(Comp{
      "pad", {"i"}, {binary(BinaryOp::Lt, i(), c(4))}, cast(DType::F32, i()), std::nullopt, {}});
  EXPECT_EQ(to_string(f), "func p {\n\n  compute pad(i) in i < 4 = f32(i);\n}\n");
}

TEST(Func, FindsByName) {
  Func f = matmul();
  EXPECT_EQ(f.find_buf("B")->name, "B");
  EXPECT_EQ(f.find_comp("C_init")->iters.size(), 2u);
  EXPECT_EQ(f.find_param("X"), nullptr);
  EXPECT_EQ(f.find_knob("TI")->value, 32);
  Module m{{f}, {}};
  EXPECT_EQ(m.find("matmul")->name, "matmul");
  EXPECT_EQ(m.find("conv"), nullptr);
}

TEST(ApplyOverrides, SetsParamsAndKnobs) {
  Func f = apply_overrides(matmul(), {{"M", 100}, {"K", 7}, {"TI", 16}});
  EXPECT_EQ(f.find_param("M")->value, 100);
  EXPECT_EQ(f.find_param("K")->value, 7);  // a run-time param becomes a compile-time one
  EXPECT_EQ(f.find_knob("TI")->value, 16);
}

TEST(ApplyOverrides, RefusesUnknownNamesAndNonCandidates) {
  try {
    apply_overrides(matmul(), {{"Q", 1}});
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Validate);
    EXPECT_STREQ(e.what(),
                 "mm.kiln:1:1: validate error: --set Q: func matmul has no param or knob named Q "
                 "(known: M, N, K, TI)");
  }
  try {
    apply_overrides(matmul(), {{"TI", 7}});
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_EQ(e.message(), "value 7 for knob TI is not one of its candidates [8, 16, 32]");
  }
}

}  // namespace
}  // namespace kiln::ir
