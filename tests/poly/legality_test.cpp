// Legality: schedules that break a dependence, or bind a loop that carries one
// to parallel hardware, are refused with a message naming both computations,
// the dependence and the command; malformed commands get a clear error too.
#include "programs.h"

namespace kiln::testing {
namespace {

struct Illegal {
  std::string name;
  std::string example;
  std::string schedule;
  std::string command;                // the command blamed, as 'target.op'
  std::vector<std::string> mentions;  // substrings the message must contain
};

const std::vector<Illegal>& illegal_schedules() {
  static const std::vector<Illegal> all = {
      {"InitAfterUpdate",
       "matmul",
       "C_init.after(C, root);",
       "C_init.after",
       {"flow (read after write) dependence from C_init to C", "reads C written by C_init"}},
      {"ParallelReduction",
       "matmul",
       "C.tag(k, parallel);",
       "C.tag",
       {"loop 'k' of C is tagged parallel", "dependence from C to C"}},
      {"VectorizedReduction",
       "matmul",
       "C.split(k, 4, ko, ki); C.tag(ki, vectorize);",
       "C.tag",
       {"loop 'ki' of C is tagged vectorize"}},
      {"ReversedReduction",
       "matmul",
       "C.apply_sch(\"{ [i, j, k] -> [i, j, -k] }\");",
       "C.apply_sch",
       {"dependence from C to C"}},
      {"ReorderAcrossDependence",
       "heat2d",
       "step.reorder(i, t, j);",
       "step.reorder",
       {"dependence from step to step", "step(t="}},
      {"WrongSkew",
       "heat2d",
       "step.skew(t, i, -1); step.reorder(i, t, j);",
       "step.reorder",
       {"dependence from step to step"}},
      {"ParallelWithoutSkew",
       "heat2d",
       "step.tag(i, parallel);",
       "step.tag",
       {"loop 'i' of step is tagged parallel"}},
      {"ParallelWavefrontWrongSkew",
       "heat2d",
       "step.skew(t, j, 1); step.skew(i, j, 1); step.reorder(j, t, i); step.tag(t, parallel);",
       "step.tag",
       {"loop 't' of step is tagged parallel"}},
      {"ParallelSegmentAccumulation",
       "segment_sum",
       "acc.tag(j, parallel);",
       "acc.tag",
       {"loop 'j' of acc is tagged parallel", "reads y written by acc"}},
      {"InitAfterAccumulation",
       "segment_sum",
       "y_init.after(acc, root);",
       "y_init.after",
       {"dependence from y_init to acc"}},
      {"UpdateBeforeItsInput",
       "trmm",
       "upd.after(scale, i);",
       "upd.after",
       {"dependence from upd to scale"}},
      {"ConvInitAfterUpdates",
       "conv2d",
       "O_init.after(O, f);",
       "O_init.after",
       {"dependence from O_init to O"}},
      // Tiled schedules are single-piece functions: legality compares the
      // ends of each dependence pair directly (legality.cpp, DependencePair).
      {"TiledReductionOutOfOrder",
       "matmul",
       "C.split(k, 4, ko, ki); C.reorder(i, j, ki, ko);",
       "C.reorder",
       {"dependence from C to C", "reads C written by C"}},
      {"TiledReductionBlocksInParallel",
       "matmul",
       "C.split(k, 4, ko, ki); C.tag(ko, parallel);",
       "C.tag",
       {"loop 'ko' of C is tagged parallel", "dependence from C to C"}},
      // Separated schedules have several pieces: legality takes the deltas
      // of the composed relation instead.
      {"SeparatedInitAfterAccumulation",
       "segment_sum",
       "y_init.after(acc, root); y_init.separate(i, 4); acc.separate(i, 4);",
       "y_init.after",
       {"dependence from y_init to acc"}},
      {"SeparatedAccumulationInParallel",
       "segment_sum",
       "acc.separate(i, 4); acc.tag(j, parallel);",
       "acc.tag",
       {"loop 'j' of acc is tagged parallel", "reads y written by acc"}},
      {"CopyAfterStencil",
       "heat2d",
       "init.after(step, root);",
       "init.after",
       {"dependence from init to step"}},
  };
  return all;
}

void PrintTo(const Illegal& c, std::ostream* os) { *os << c.name << ": " << c.schedule; }

class IllegalSchedule : public ::testing::TestWithParam<Illegal> {};

TEST_P(IllegalSchedule, IsRefusedWithItsReason) {
  const Illegal& c = GetParam();
  ir::Func f = parse_one(with_schedule(read_example(c.example), c.schedule));
  try {
    poly::schedule(f);
    FAIL() << "schedule was accepted: " << c.schedule;
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Legality) << e.what();
    EXPECT_NE(e.message().find("'" + c.command + "'"), std::string::npos) << e.what();
    for (const auto& m : c.mentions) EXPECT_NE(e.message().find(m), std::string::npos) << e.what();
    EXPECT_TRUE(e.loc().known()) << "the error points at the command: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, IllegalSchedule, ::testing::ValuesIn(illegal_schedules()),
                         [](const ::testing::TestParamInfo<Illegal>& info) {
                           return info.param.name;
                         });

// The error's position is the offending command's, even when later commands
// follow it.
TEST(Legality, BlamesTheFirstOffendingCommand) {
  std::string src = with_schedule(read_example("matmul"),
                                  "    C.split(i, 4, io, ii);\n"
                                  "    C.tag(k, parallel);\n"
                                  "    C.tag(io, parallel);");
  ir::Func f = parse_one(src);
  try {
    poly::schedule(f);
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("'C.tag'"), std::string::npos);
    EXPECT_NE(e.message().find("loop 'k'"), std::string::npos) << e.what();
    const ir::ScheduleCommand& bad = f.schedule.at(1);
    EXPECT_EQ(e.loc().line, bad.where.line);
  }
}

// Legal schedules of the same programs are accepted.
TEST(Legality, AcceptsTheExamplesOwnSchedules) {
  for (std::string ex :
       {"matmul", "batch_matmul", "conv2d", "segment_sum", "spmm", "trmm", "heat2d"}) {
    SCOPED_TRACE(ex);
    EXPECT_NO_THROW(poly::schedule(parse_one(read_example(ex))));
  }
}

// Dependences are direct: each read depends on the write whose value it
// reads, each write on the write it overwrites and on the reads since.
TEST(Dependences, AreDirect) {
  std::string s = poly::schedule(parse_one(read_example("matmul")), false).describe_schedule();
  EXPECT_NE(s.find("C[i, j, k] -> C[i' = i, j' = j, k' = 1 + k]"), std::string::npos) << s;
  EXPECT_NE(s.find("C_init[i, j] -> C[i' = i, j' = j, k = 0]"), std::string::npos) << s;
  // The reduction's output dependences are its flow dependences: listed once.
  EXPECT_EQ(s.find("output through C"), std::string::npos) << s;
}

// T is written by a, then by b, then read by c.
std::string overwritten_temp(const std::string& b_domain, const std::string& schedule,
                             const std::string& kind = "temp") {
  return "func f {\n"
         "  param N = 8;\n"
         "  input n : i32[1] in [0, N];\n"
         "  input x : f32[N];\n"
         "  output O : f32[N];\n"
         "  " +
         kind +
         " T : f32[N];\n"
         "  compute a(i) in 0 <= i < N: T[i] = x[i];\n"
         "  compute b(i) in " +
         b_domain +
         ": T[i] = 2.0 * x[i];\n"
         "  compute c(i) in 0 <= i < N: O[i] = T[i];\n"
         "  schedule {\n    " +
         schedule + "\n  }\n}\n";
}

// b overwrites all of a's values: c reads none of them, and moving a after c
// breaks only the order of the two writes. That order is T's final contents:
// it matters when T is an output, not when T is a temp.
TEST(Dependences, AnOverwrittenValueFlowsNowhere) {
  std::string s =
      poly::schedule(parse_one(overwritten_temp("0 <= i < N", "")), false).describe_schedule();
  EXPECT_NE(s.find("flow through T: { b[i] -> c[i' = i]"), std::string::npos) << s;
  EXPECT_EQ(s.find("a[i] -> c["), std::string::npos) << s;
  ir::Func f = parse_one(overwritten_temp("0 <= i < N", "a.after(c, root);"));
  interp::Mismatch mm = differential(f);
  EXPECT_TRUE(mm.ok) << mm.describe();
  std::string e =
      schedule_error(parse_one(overwritten_temp("0 <= i < N", "a.after(c, root);", "output")));
  EXPECT_NE(e.find("output (write after write) dependence from a to b"), std::string::npos) << e;
}

// A write under a condition read at run time may not happen: it kills
// nothing, and c may read what a wrote.
TEST(Dependences, AWriteThatMayNotHappenKillsNothing) {
  std::string b_domain = "0 <= i < N, i < n[0]";
  std::string s =
      poly::schedule(parse_one(overwritten_temp(b_domain, "")), false).describe_schedule();
  EXPECT_NE(s.find("a[i] -> c[i' = i]"), std::string::npos) << s;
  std::string e = schedule_error(parse_one(overwritten_temp(b_domain, "a.after(c, root);")));
  EXPECT_NE(e.find("flow (read after write) dependence from a to c"), std::string::npos) << e;
  EXPECT_NE(e.find("reads T written by a"), std::string::npos) << e;
}

// Many computations over disjoint parts of one buffer: each is analysed
// against the few whose elements meet its own, well inside the isl budget.
TEST(Dependences, ManyComputationsOverDisjointRowsStayCheap) {
  std::string text =
      "func many {\n  param N = 64;\n  input x : f32[N];\n  output y : f32[250, N];\n";
  for (int k = 0; k < 250; ++k)
    text += "  compute c" + std::to_string(k) + "(i) in 0 <= i < N: y[" + std::to_string(k) +
            ", i] = x[i] + 1.0;\n";
  text += "  compute last(i) in 0 <= i < N: y[0, i] = y[249, i];\n}\n";
  std::string s = poly::schedule(parse_one(text), false).describe_schedule();
  EXPECT_NE(s.find("flow through y: { c249[i] -> last[i' = i]"), std::string::npos) << s;
  EXPECT_NE(s.find("output through y: { c0[i] -> last[i' = i]"), std::string::npos) << s;
}

// A computation named like an isl keyword (isl sees it as v_xor) keeps its
// dependences: moving it after its reader is refused.
TEST(Dependences, AComputationNamedLikeAnIslKeywordKeepsThem) {
  std::string text =
      "func f {\n  param N = 8;\n  input A : f32[N];\n  output B : f32[N];\n"
      "  temp T : f32[N];\n"
      "  compute xor(i) in 0 <= i < N: T[i] = A[i] * 2.0;\n"
      "  compute b(i) in 0 <= i < N: B[i] = T[i] + 1.0;\n"
      "  schedule {\n    xor.after(b, root);\n  }\n}\n";
  std::string e = schedule_error(parse_one(text));
  EXPECT_NE(e.find("flow (read after write) dependence from xor to b"), std::string::npos) << e;
}

// c and d fused ahead of a and b in one parallel loop: T's element i holds
// c's value, then a's, in each iteration. Every pair of memory accesses
// would forbid it (a's write used to come before c's); the live ranges allow it.
TEST(StorageReuse, AFusionThatReordersTheLiveRangesOfATempIsAccepted) {
  for (std::string sched : {"d.after(c, i); a.after(d, i); b.after(a, i);",
                            "d.after(c, i); a.after(d, i); b.after(a, i); c.tag(i, parallel);",
                            "c.after(b, root); d.after(c, root); a.after(d, root); "
                            "b.after(a, root);"}) {
    SCOPED_TRACE(sched);
    ir::Func f = parse_one(reused_temp(sched, 37));
    interp::Mismatch mm = differential(f);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

TEST(StorageReuse, AWriteInsideALiveRangeIsRefused) {
  std::string e =
      schedule_error(parse_one(reused_temp("c.after(a, i); b.after(c, i); d.after(b, i);", 37)));
  EXPECT_NE(e.find("legality error: schedule command 'c.after'"), std::string::npos) << e;
  EXPECT_NE(e.find("breaks a live range of temp T: b(i="), std::string::npos) << e;
  EXPECT_NE(e.find("which overwrites it, in between"), std::string::npos) << e;
}

// One element of T written by every iteration: the last one's value is read
// after the loop, so the loop cannot run in parallel.
TEST(StorageReuse, ParallelWritesOfAnElementStillReadAreRefused) {
  std::string text =
      "func last {\n  param N = 16;\n  input A : f32[N];\n  output B : f32[1];\n"
      "  temp T : f32[1];\n"
      "  compute a(i) in 0 <= i < N: T[0] = A[i];\n"
      "  compute b(i) in 0 <= i < 1: B[0] = T[0] + 1.0;\n"
      "  schedule {\n    a.tag(i, parallel);\n  }\n}\n";
  std::string e = schedule_error(parse_one(text));
  EXPECT_NE(e.find("loop 'i' of a is tagged parallel but its iterations share temp T: "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("writes in another, and that value is read"), std::string::npos) << e;
}

// Every iteration of i reads the T that a wrote before the loop; the last
// iteration overwrites it, after all reads in the loop's order but not when
// the iterations run at once.
TEST(StorageReuse, AParallelOverwriteOfAValueOtherIterationsReadIsRefused) {
  std::string text =
      "func late {\n  param N = 16;\n  input A : f32[N];\n  output B : f32[N];\n"
      "  output D : f32[1];\n  temp T : f32[1];\n"
      "  compute a(i) in 0 <= i < 1: T[0] = 1.0;\n"
      "  compute b(i) in 0 <= i < N: B[i] = T[0] + A[i];\n"
      "  compute c(i) in N - 1 <= i < N: T[0] = A[i];\n"
      "  compute d(i) in 0 <= i < 1: D[0] = T[0];\n"
      "  schedule {\n    c.after(b, i);\n    b.tag(i, parallel);\n  }\n}\n";
  std::string sequential = text;
  sequential.replace(sequential.find("    b.tag(i, parallel);\n"), 24, "");
  interp::Mismatch mm = differential(parse_one(sequential));
  EXPECT_TRUE(mm.ok) << mm.describe();
  std::string e = schedule_error(parse_one(text));
  EXPECT_NE(e.find("loop 'i' of b is tagged parallel but its iterations share temp T: c(i=15) in "
                   "one iteration overwrites the T whose value b(i="),
            std::string::npos)
      << e;
}

// Its live ranges inside one iteration: a parallel loop may reuse the temp.
TEST(StorageReuse, ParallelIterationsWithTheirOwnElementsAreAccepted) {
  ir::Func f = parse_one(
      reused_temp("b.after(a, i); c.after(b, i); d.after(c, i); a.tag(i, parallel);", 37));
  interp::Mismatch mm = differential(f);
  EXPECT_TRUE(mm.ok) << mm.describe();
}

// The division's read of the pivot A[j, j] runs only where k == j: there,
// row j is final. Counted everywhere, it made the k-outer order (and the
// parallel rows in it) look illegal.
TEST(ConditionalAccesses, LuInKOuterOrderIsAccepted) {
  for (std::string sched : {"lu.reorder(k, i, j);", "lu.reorder(k, i, j); lu.tag(i, parallel);",
                            "lu.reorder(k, j, i); lu.tag(i, parallel);"}) {
    SCOPED_TRACE(sched);
    for (int64_t n : {1, 2, 7, 24}) {
      ir::Func f = parse_one(lu_in_one_computation(sched, n));
      interp::Mismatch mm = differential(f);
      EXPECT_TRUE(mm.ok) << n << ": " << mm.describe();
    }
  }
}

// The side that runs keeps its reads: the division at (i, j = k) comes
// before the updates of row i that read A[i, k].
TEST(ConditionalAccesses, TheReadsOfTheSideThatRunsStillCount) {
  std::string e = schedule_error(
      parse_one(lu_in_one_computation("lu.reorder(k, i, j); lu.tag(j, vectorize);", 24)));
  EXPECT_NE(e.find("legality error: "), std::string::npos) << e;
  EXPECT_NE(e.find("lu(i=1, j=1, k=0) reads A written by lu(i=1, j=0, k=0)"), std::string::npos)
      << e;
  std::string s =
      poly::schedule(parse_one(lu_in_one_computation("", 24)), false).describe_domains();
  EXPECT_NE(s.find("reads where they run:"), std::string::npos) << s;
  EXPECT_NE(s.find("lu[i, j, k = j] -> A[a0 = j, a1 = j]"), std::string::npos) << s;
}

// A condition read from memory cannot be decided by isl: the reads of both
// sides count everywhere, and a loop they would make race stays sequential.
TEST(ConditionalAccesses, AConditionReadAtRunTimeKeepsBothSides) {
  const std::string text =
      "func f {\n  param N = 16;\n  input m : i32[N];\n  output y : f32[N];\n"
      "  compute s(i) in 1 <= i < N: y[i] = select(m[i] > 0, y[i - 1] + 1.0, 0.0);\n"
      "  schedule {\n    s.tag(i, parallel);\n  }\n}\n";
  std::string e = schedule_error(parse_one(text));
  EXPECT_NE(e.find("loop 'i' of s is tagged parallel"), std::string::npos) << e;
}

struct Malformed {
  std::string schedule;
  std::string message;
};

void PrintTo(const Malformed& c, std::ostream* os) { *os << c.schedule; }

class MalformedCommand : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedCommand, IsRefused) {
  const Malformed& c = GetParam();
  ir::Func f = parse_one(with_schedule(read_example("matmul"), c.schedule));
  try {
    poly::schedule(f);
    FAIL() << "accepted: " << c.schedule;
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Schedule) << e.what();
    EXPECT_NE(e.message().find(c.message), std::string::npos) << e.what();
    EXPECT_TRUE(e.loc().known()) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Commands, MalformedCommand,
    ::testing::Values(
        Malformed{"C.split(q, 4, qo, qi);", "'C' has no loop 'q'; its loops are i, j, k"},
        Malformed{"C.split(i, 0, io, ii);", "split factor must be positive, got 0"},
        Malformed{"C.split(i, 4, j, ii);", "'C' already has a loop named 'j'"},
        Malformed{"C.split(i, 4, io);", "split expects 4 arguments"},
        Malformed{"C.split(i, NOPE, io, ii);", "'NOPE' is not a knob or a compile-time param"},
        Malformed{"C.fuse(i, k, ik);", "fuse needs loop 'k' directly inside 'i'"},
        Malformed{"C.twist(i);", "unknown schedule command 'twist'"},
        Malformed{"C.tag(i, warp);", "unknown tag 'warp'"},
        Malformed{"C.after(Q, i);", "unknown computation 'Q'"},
        Malformed{"C.after(C, i);", "a computation cannot run after itself"},
        Malformed{"C.apply_sch(\"{ [i, j] -> [j, i] }\");", "the map takes 2 loops but 'C' has 3"},
        Malformed{"C.apply_sch(\"{ [i, j, k] -> [i + j] }\");", "not one-to-one"},
        Malformed{"C.reorder(i, i);", "reorder names loop 'i' twice"},
        Malformed{"A.set_loc(moon);", "unknown memory location 'moon'"},
        Malformed{"A.tag(i, parallel);", "'A' is a buffer; tag applies to computations"},
        Malformed{"C.store(A);", "'C' already stores to 'C'"},
        Malformed{"C.cache_identity(C, k, stack);",
                  "cache_identity: 'C' writes 'C' inside loop 'k'"},
        Malformed{"C.cache_identity(B, k, attic);", "unknown memory location 'attic'"},
        Malformed{"C.cache_identity(B, i, stack); C.split(j, 4, jo, ji);",
                  "loop schedules of 'C' must come before its memory schedules"},
        Malformed{"C.cache(B, j, stack, [4, 4], \"{ [e0, e1] -> [e0] }\");",
                  "cache: the map gives 1 indices but the shape has 2"},
        Malformed{"C.cache(B, i, stack, [128], \"{ [e0, e1] -> [e0] }\");",
                  "cache: the map sends two elements 'C' reads in one iteration of 'i' to the same "
                  "place"},
        Malformed{"C.cache(B, j, stack, [100, 1], \"{ [e0, e1] -> [e0, e1 - j] }\");",
                  "cache: the map sends elements that 'C' reads outside the copy's shape"},
        Malformed{"C.alloc_at(A, i);", "only temp buffers are allocated by the kernel"}));

// A cache whose size depends on run-time data has no fixed size: refused.
TEST(MemorySchedules, CacheOfADataDependentRangeIsRefused) {
  ir::Func f = parse_one(with_schedule(read_example("spmm"), "Y.cache_identity(val, i, stack);"));
  try {
    poly::schedule(f);
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_NE(e.message().find("has no size known at compile time"), std::string::npos) << e.what();
  }
}

// cache_identity's box (memory.cpp: fixed_box): what one iteration reads of
// a run-time length has no size known at compile time unless a constraint
// bounds the length; bounded, the copy is the bound's size and its kernel
// computes what the reference does.
std::string prefix_sums(const std::string& constraint) {
  return "func prefix {\n"
         "  param M = 8, N;\n"
         "  constraint N >= 1" +
         constraint +
         ";\n"
         "  input A : f32[N];\n"
         "  output B : f32[M];\n"
         "  compute b(j) in 0 <= j < M: B[j] = sum(k in 0 <= k < N) A[k] * 1.5;\n"
         "  schedule {\n    b.cache_identity(A, j, heap);\n  }\n}\n";
}

TEST(MemorySchedules, ACacheOfARunTimeLengthNeedsABound) {
  std::string e = schedule_error(parse_one(prefix_sums("")));
  EXPECT_NE(e.find("cache_identity: the part of 'A' that one iteration of loop 'j' reads has no "
                   "size known at compile time"),
            std::string::npos)
      << e;
  ir::Func bounded = parse_one(prefix_sums(", N <= 40"));
  std::string loops = ir::to_string(poly::lower(poly::schedule(bounded)).body);
  EXPECT_NE(loops.find("A_b_cache: f32[40]"), std::string::npos) << loops;
  for (int64_t n : {1, 17, 40}) {
    interp::Mismatch mm = differential(bounded, {{"N", n}});
    EXPECT_TRUE(mm.ok) << "N = " << n << ": " << mm.describe();
  }
}

}  // namespace
}  // namespace kiln::testing
