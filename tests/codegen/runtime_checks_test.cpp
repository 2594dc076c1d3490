// What compiled kernels check at run time: inputs that index or bound loops
// meet their value specs before anything relies on them, and integer
// division by zero or of the smallest integer by -1 ends in an error status
// that names the computation — never a signal — in agreement with both
// interpreters.
#include "kiln/codegen.h"
#include "kiln/runtime.h"
#include "programs.h"

namespace kiln::testing {
namespace {

codegen::Kernel compiled(const ir::Func& f, int opt = 3) {
  codegen::Options o;
  o.opt_level = opt;
  return codegen::jit_compile(poly::lower(poly::schedule(f)), o);
}

std::string run_error(const codegen::Kernel& k, Bindings& b) {
  try {
    k.run(b);
    return "";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Run) << e.what();
    return e.what();
  }
}

// segment_sum's offsets, set by hand.
Bindings segment_inputs(const ir::Func& f, const std::vector<int64_t>& offsets) {
  auto params = interp::param_values(f, {{"m", static_cast<int64_t>(offsets.size()) - 1}});
  Bindings b = interp::random_bindings(f, params, 2);
  for (size_t k = 0; k < offsets.size(); ++k)
    b.buffers.at("offsets").set_i(static_cast<int64_t>(k), offsets[k]);
  return b;
}

TEST(InputChecks, LoopsShowWhatTheKernelChecksAtItsEntry) {
  std::string loops = lowered(read_example("spmm"));
  EXPECT_NE(loops.find("check ptr in [0, nnz] sorted;  // else status 16\n"), std::string::npos)
      << loops;
  EXPECT_NE(loops.find("check idx in [0, p);  // else status 17\n"), std::string::npos) << loops;
  // val and B are read, but never as indices or bounds: nothing to check.
  EXPECT_EQ(loops.find("check val"), std::string::npos) << loops;
}

TEST(InputChecks, OffsetsOutsideTheirRangeOrUnsortedAreRefusedBeforeAnyRead) {
  ir::Func f = parse_one(read_example("segment_sum"));  // offsets in [0, nnz] sorted, nnz = 200
  for (int opt : {0, 3}) {
    codegen::Kernel k = compiled(f, opt);
    struct Case {
      std::vector<int64_t> offsets;
      std::string error;
    };
    for (const Case& c : std::vector<Case>{
             {{0, 3, 100000000, 200}, "offsets[2] = 100000000 is above nnz = 200"},
             {{0, 3, -1, 200}, "offsets[2] = -1 is below 0"},
             {{0, 30, 20, 200}, "offsets[2] = 20 is below offsets[1] = 30, so it is not sorted"}}) {
      SCOPED_TRACE(c.error);
      Bindings b = segment_inputs(f, c.offsets);
      // The packed call returns the check's status...
      auto args = codegen::pack_arguments(k.func(), b);
      EXPECT_EQ(k.call(args.data(), static_cast<int32_t>(args.size())), KILN_ERR_CHECK);
      // ...which run() reports like the interpreters, naming the element.
      std::string e = run_error(k, b);
      EXPECT_NE(e.find("test.kiln:8:10: run error: input offsets breaks its value spec in "
                       "[0, nnz] sorted: " +
                       c.error),
                std::string::npos)
          << e;
      Bindings ref = segment_inputs(f, c.offsets);
      try {
        interp::run_reference(f, ref);
        ADD_FAILURE() << "the reference accepted what the kernel refused";
      } catch (const CompileError& err) {
        EXPECT_NE(std::string(err.what()).find(c.error), std::string::npos) << err.what();
      }
    }
    // The edges of the range are fine.
    Bindings ok = segment_inputs(f, {0, 0, 200, 200});
    EXPECT_EQ(run_error(k, ok), "");
  }
}

// A scatter's index read from an input: a bin outside the range refused
// before any write, whatever the schedule.
TEST(InputChecks, ScatterIndicesOutsideTheirRangeAreRefused) {
  for (std::string sched : {"", "h.split(k, 16, ko, ki); h.tag(ko, parallel); h.atomic();",
                            "h.split(k, 16, ko, ki); h.tag(ko, parallel); h.privatize(ko);"}) {
    SCOPED_TRACE(sched);
    ir::Func f = parse_one(scatter("out[bin[k]] += w[k]", sched, 100, 8));
    codegen::Kernel k = compiled(f);
    for (int64_t bad : {-3, 8}) {
      Bindings b = interp::random_bindings(f, interp::param_values(f), 4);
      b.buffers.at("bin").set_i(99, bad);
      auto args = codegen::pack_arguments(k.func(), b);
      EXPECT_EQ(k.call(args.data(), static_cast<int32_t>(args.size())), KILN_ERR_CHECK);
      std::string e = run_error(k, b);
      EXPECT_NE(e.find("test.kiln:3:9: run error: input bin breaks its value spec in [0, bins): "
                       "bin[99] = " +
                       std::to_string(bad)),
                std::string::npos)
          << e;
    }
    Bindings ok = interp::random_bindings(f, interp::param_values(f), 4);
    EXPECT_EQ(run_error(k, ok), "");
  }
}

const char* kDivide = R"(func d {
  param N = 37;
  input a : T[N];
  input b : T[N] in [-1, 2);
  output y : T[N];
  compute c(i) in 0 <= i < N:
    y[i] = a[i] / b[i] + a[i] % b[i];
  schedule { SCHEDULE }
})";

std::string divide(const std::string& type, const std::string& schedule) {
  std::string s = kDivide;
  for (size_t at;
       (at = s.find('T', s.find("input a"))) != std::string::npos && at < s.find("compute");)
    s.replace(at, 1, type);
  s.replace(s.find("SCHEDULE"), 8, schedule);
  return s;
}

TEST(Arithmetic, DivisionByZeroIsAStatusInEveryLoopKind) {
  for (std::string type : {"i32", "i64"}) {
    for (std::string sched :
         {std::string(""), std::string("c.split(i, 8, io, ii); c.tag(ii, vectorize);"),
          std::string("c.split(i, 8, io, ii); c.tag(io, parallel); c.tag(ii, vectorize);"),
          std::string("c.tag(i, parallel);")}) {
      SCOPED_TRACE(type + " '" + sched + "'");
      ir::Func f = parse_one(divide(type, sched));
      Bindings b = interp::random_bindings(f, interp::param_values(f), 4);
      HostBuffer& div = b.buffers.at("b");
      for (int64_t k = 0; k < div.size(); ++k) div.set_i(k, k == 29 ? 0 : (k % 2 ? 1 : -1));
      for (int opt : {0, 3}) {
        codegen::Kernel k = compiled(f, opt);
        Bindings run = b;
        auto args = codegen::pack_arguments(k.func(), run);
        int32_t status = k.call(args.data(), static_cast<int32_t>(args.size()));
        EXPECT_EQ(status, KILN_ERR_CHECK) << "opt " << opt;
        EXPECT_EQ(run_error(k, run),
                  "test.kiln:6:11: run error: integer division by zero, or of the smallest integer "
                  "by -1, in computation c (a[i] / b[i], a[i] % b[i])");
      }
      // Both interpreters refuse it too, at the same computation.
      Bindings ref = b;
      try {
        interp::run_reference(f, ref);
        ADD_FAILURE() << "the reference accepted a division by zero";
      } catch (const CompileError& e) {
        EXPECT_NE(
            std::string(e.what()).find("test.kiln:6:11: interp error: integer division by zero"),
            std::string::npos)
            << e.what();
      }
      Bindings loops = b;
      try {
        interp::run_loops(poly::lower(poly::schedule(f)), loops);
        ADD_FAILURE() << "the loop interpreter accepted a division by zero";
      } catch (const CompileError& e) {
        EXPECT_NE(
            std::string(e.what()).find("test.kiln:6:11: interp error: integer division by zero"),
            std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(Arithmetic, SmallestIntegerByMinusOneIsAStatusToo) {
  for (std::string type : {"i32", "i64"}) {
    SCOPED_TRACE(type);
    ir::Func f = parse_one(divide(type, "c.split(i, 8, io, ii); c.tag(ii, vectorize);"));
    Bindings b = interp::random_bindings(f, interp::param_values(f), 4);
    for (int64_t k = 0; k < b.buffers.at("b").size(); ++k) {
      b.buffers.at("b").set_i(k, -1);
      b.buffers.at("a").set_i(k,
                              k == 20 ? static_cast<int64_t>(ir::dtype_min(f.bufs[0].dtype)) : k);
    }
    codegen::Kernel k = compiled(f);
    Bindings run = b;
    EXPECT_NE(run_error(k, run).find("run error: integer division by zero, or of the smallest "
                                     "integer by -1, in computation c"),
              std::string::npos);
    Bindings ref = b;
    EXPECT_THROW(interp::run_reference(f, ref), CompileError);
  }
}

// A division under a guard, vectorized: the lanes the guard switches off
// read nothing (their masked load gives 0) and divide by nothing the program
// asked for, so they report nothing; an active lane that divides by 0 does.
TEST(Arithmetic, LanesAGuardSwitchesOffReportNoDivision) {
  std::string p = R"(func d {
    param N = 16;
    input a : i32[N];
    output b : i32[N];
    compute s(j) in 0 <= j < N:
      b[j] = select(j >= 1, 1000 / a[j - 1], 0);
    schedule { s.tag(j, vectorize); }
  })";
  ir::Func f = parse_one(p);
  for (int opt : {0, 3}) {
    SCOPED_TRACE("opt " + std::to_string(opt));
    codegen::Kernel k = compiled(f, opt);
    Bindings b = interp::random_bindings(f, interp::param_values(f), 5);
    for (int64_t i = 0; i < 16; ++i) b.buffers.at("a").set_i(i, i + 1);
    Bindings expected = b, run = b;
    interp::run_reference(f, expected);
    EXPECT_EQ(run_error(k, run), "");
    EXPECT_TRUE(interp::compare_outputs(f, expected, run).ok);
    b.buffers.at("a").set_i(6, 0);  // read by lane 7
    EXPECT_NE(run_error(k, b).find("run error: integer division by zero"), std::string::npos);
  }
}

TEST(Arithmetic, DivisorsThatCannotTrapAreNotChecked) {
  // A constant divisor other than 0 and -1 compiles to the plain division.
  std::string p = R"(func d {
    param N = 16;
    input a : i32[N];
    output y : i32[N];
    compute c(i) in 0 <= i < N: y[i] = a[i] / 3 + a[i] % 7;
  })";
  ir::LoweredFunc lf = poly::lower(poly::schedule(parse_one(p)));
  EXPECT_TRUE(lf.checks.empty());
  std::string llvm = codegen::emit_llvm(lf);
  EXPECT_EQ(llvm.find("cmpxchg"), std::string::npos) << llvm;
}

}  // namespace
}  // namespace kiln::testing
