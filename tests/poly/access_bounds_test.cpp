// Static access safety: every access is proved inside its buffer at schedule
// time, or refused at the access with an instance that leaves it. Reads that
// run only under a condition (a select's side, the right of && and ||) are
// proved under that condition.
#include "programs.h"

namespace kiln::testing {
namespace {

// The bounds error f gives, or "" when it is accepted.
std::string bounds_error(const std::string& body, const std::string& decls = "") {
  std::string src = "func f {\n  param n = 16;\n  input x : f32[n];\n  output y : f32[n];\n" +
                    decls + body + "\n}\n";
  ir::Func f = parse_one(src);
  try {
    poly::schedule(f);
    return "";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Bounds) << e.what();
    return e.what();
  }
}

TEST(AccessBounds, EveryExampleIsProvedInBounds) {
  for (const char* name : {"matmul", "conv2d", "segment_sum", "spmm", "heat2d", "batch_matmul"}) {
    ir::Func f = parse_one(read_example(name));
    EXPECT_NO_THROW(poly::schedule(f)) << name;
  }
}

// A buffer with no dimension has no index to prove (this once crashed the
// check: an empty set built from a null string).
TEST(AccessBounds, BuffersWithNoDimensionNeedNoProof) {
  EXPECT_EQ(bounds_error("  output s : f32[];\n  compute t(): s[] = 0.5;\n"
                         "  compute a(i) in 0 <= i < n: s[] += x[i];\n"
                         "  compute b(i) in 0 <= i < n: y[i] = x[i] * s[];"),
            "");
}

TEST(AccessBounds, ShiftedWriteIsRefusedWithItsLastInstance) {
  std::string e = bounds_error("  compute c(i) in 0 <= i < n: y[i + 1] = x[i];");
  EXPECT_NE(e.find("test.kiln:5:31: bounds error: the write y[i + 1] in computation c can fall "
                   "outside y: index 0 (i + 1) is 16 at c(i=15), but dimension 0 of y has "
                   "extent n = 16"),
            std::string::npos)
      << e;
}

TEST(AccessBounds, GuardedReadsAreProvedUnderTheirGuard) {
  // Padding as conv2d writes it: the read runs only where the guard holds.
  EXPECT_EQ(bounds_error("  compute c(i) in 0 <= i < n: y[i] = select(i >= 1, x[i - 1], 0.0);"),
            "");
  EXPECT_EQ(bounds_error("  compute c(i) in 0 <= i < n: y[i] = select(i < 1, 0.0, x[i - 1]);"), "");
  EXPECT_EQ(
      bounds_error("  compute c(i) in 0 <= i < n: y[i] = select(i >= 1 and x[i - 1] > 0.0, 1.0, "
                   "0.0);"),
      "");
  EXPECT_EQ(
      bounds_error("  compute c(i) in 0 <= i < n: y[i] = select(i == 0 or x[i - 1] > 0.0, 1.0, "
                   "0.0);"),
      "");
}

TEST(AccessBounds, AGuardOnTheWrongSideIsRefused) {
  std::string e =
      bounds_error("  compute c(i) in 0 <= i < n: y[i] = select(i >= 1, 0.0, x[i - 1]);");
  EXPECT_NE(e.find("the read x[i - 1] in computation c can fall outside x: index 0 (i - 1) is -1 "
                   "at c(i=0)"),
            std::string::npos)
      << e;
  e = bounds_error(
      "  compute c(i) in 0 <= i < n: y[i] = select(i >= 1 or x[i - 1] > 0.0, 1.0, 0.0);");
  EXPECT_NE(e.find("index 0 (i - 1) is -1 at c(i=0)"), std::string::npos) << e;
}

TEST(AccessBounds, ConstraintsOnRunTimeParamsAreUsed) {
  // y has m elements; m >= n is what makes y[i] safe for i < n.
  std::string src = R"(func f {
  param n;  param m;
  constraint m >= n;
  input x : f32[n];
  output y : f32[m];
  compute c(i) in 0 <= i < n: y[i] = x[i];
})";
  EXPECT_NO_THROW(poly::schedule(parse_one(src)));
  std::string without = src;
  without.replace(without.find("constraint m >= n;"), 18, "");
  try {
    poly::schedule(parse_one(without));
    FAIL() << "expected a bounds error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("index 0 (i) is 0 at c(i=0) when n = 1, m = 0"),
              std::string::npos)
        << e.what();
  }
}

// The proofs are remembered for the process (a tuner's candidates share their
// accesses): a proved operator is proved again by lookup, but a param value
// that changes what an access may reach is checked anew, and a refused
// operator is refused every time.
TEST(AccessBounds, RememberedProofsHoldOnlyForTheSameAccessesAndParams) {
  auto with_n = [](int n) {
    return "func f {\n  param n = " + std::to_string(n) +
           ";\n  input x : f32[16];\n  output y : f32[n];\n"
           "  compute c(i) in 0 <= i < n: y[i] = x[i];\n}\n";
  };
  for (int round = 0; round < 2; ++round) {
    EXPECT_NO_THROW(poly::schedule(parse_one(with_n(16)))) << "round " << round;
    try {
      poly::schedule(parse_one(with_n(17)));
      ADD_FAILURE() << "round " << round << ": x[i] at i = 16 was accepted";
    } catch (const CompileError& e) {
      EXPECT_EQ(e.stage(), ErrorStage::Bounds) << e.what();
      EXPECT_NE(std::string(e.what()).find("index 0 (i) is 16 at c(i=16)"), std::string::npos)
          << e.what();
    }
  }
}

TEST(AccessBounds, DataDependentIndicesAreProvedFromValueSpecs) {
  const std::string decls = "  input idx : i32[n] in [0, n);\n";
  EXPECT_EQ(bounds_error("  compute g(i) in 0 <= i < n: y[i] = x[idx[i]];", decls), "");
  // (0, n]: one too far at the top.
  std::string e = bounds_error("  compute g(i) in 0 <= i < n: y[i] = x[idx[i]];",
                               "  input idx : i32[n] in (0, n];\n");
  EXPECT_NE(e.find("index 0 (idx[i]) is 16 at g(i=0) when idx[i] = 16"), std::string::npos) << e;
  EXPECT_NE(e.find("idx is declared in (0, n]"), std::string::npos) << e;
  // An index computed from the value: idx[i] + 1 needs idx below n - 1.
  e = bounds_error("  compute g(i) in 0 <= i < n: y[i] = x[idx[i] + 1];", decls);
  EXPECT_NE(e.find("index 0 (idx[i] + 1) is 16"), std::string::npos) << e;
}

TEST(AccessBounds, ReadsOfTheBoundsThemselvesAreChecked) {
  // offsets[i + 1] for i < m needs m + 1 elements; m is one short here.
  std::string src = R"(func f {
  param m = 4, nnz = 10;
  input offsets : i32[m] in [0, nnz] sorted;
  input x : f32[nnz];
  output y : f32[m];
  compute z(i) in 0 <= i < m: y[i] = 0.0;
  compute acc(i, j) in 0 <= i < m, offsets[i] <= j < offsets[i + 1]: y[i] += x[j];
})";
  try {
    poly::schedule(parse_one(src));
    FAIL() << "expected a bounds error";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Bounds);
    EXPECT_NE(std::string(e.what()).find("the read offsets[i + 1] in computation acc can fall "
                                         "outside offsets: index 0 (i + 1) is 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::testing
