// Data-dependent bounds (segment sum, SpMM) at their edges: empty rows, one
// long row, all rows empty. Under every schedule the loop nest reads each row
// pointer only inside the loops over valid rows, so no access is ever out of
// bounds (the bug of apache/tvm issue 6596 cannot happen), and the results
// match the reference.
#include "programs.h"

namespace kiln::testing {
namespace {

const std::vector<std::string> kSegmentSchedules = {
    "<file>",
    "",
    "acc.split(j, 4, jo, ji); acc.tag(i, parallel); y_init.tag(i, parallel);",
    "acc.after(y_init, i); y_init.split(i, 3, io, ii); acc.split(i, 3, io, ii);",
    "y_init.separate(i, 4); acc.separate(i, 4); y_init.split(i, 4, io, ii); acc.split(i, 4, io, "
    "ii);",
    "acc.after(y_init, i); y_init.separate(i, 3); acc.separate(i, 3); acc.split(j, 2, jo, ji);",
};

const std::vector<std::string> kSpmmSchedules = {
    "<file>",
    "",
    "Y.reorder(i, j, k); Y.tag(j, parallel);",
    "Y.after(Y_init, i); Y_init.split(i, 5, io, ii); Y.split(i, 5, io, ii); Y.tag(io, parallel);",
    "Y.split(k, 3, ko, ki); Y.reorder(i, j, ko, ki);",
    // The copies' bounds read ptr[i] with i split: the copy must express i
    // through the loops io and ii (refused as out of order before).
    "Y.split(i, 4, io, ii); Y.split(k, 8, ko, ki); Y.cache_identity(val, ko, stack); "
    "Y.cache_identity(idx, ko, stack);",
};

// Row pointers for `rows` rows over `nnz` values, shaped by `pattern`.
std::vector<int64_t> offsets(const std::string& pattern, int64_t rows, int64_t nnz) {
  std::vector<int64_t> o(rows + 1, 0);
  if (pattern == "all_empty") return o;  // every row empty, all at 0
  if (pattern == "all_empty_at_end") return std::vector<int64_t>(rows + 1, nnz);
  if (pattern == "one_long_row") {
    for (int64_t i = 0; i <= rows; ++i) o[i] = i <= rows / 2 ? 0 : nnz;
    return o;
  }
  if (pattern == "empty_rows") {  // every other row empty, the first and last too
    int64_t at = 0;
    for (int64_t i = 1; i <= rows; ++i) {
      if (i % 2 == 0 && i != rows) at = std::min(nnz, at + 3);
      o[i] = at;
    }
    return o;
  }
  for (int64_t i = 0; i <= rows; ++i) o[i] = nnz * i / rows;  // "even"
  return o;
}

void check_all(const std::string& example, const std::vector<std::string>& schedules,
               const std::string& ptr_name, const std::string& rows_param, int64_t rows,
               const ir::Overrides& set, const std::map<std::string, int64_t>& runtime) {
  std::string src = read_example(example);
  for (const auto& sched : schedules) {
    std::string program = sched == "<file>" ? src : with_schedule(src, sched);
    ir::Func f = parse_one(program, set);
    auto params = interp::param_values(f, runtime);
    int64_t nnz = params.at("nnz");
    for (std::string pattern :
         {"even", "all_empty", "all_empty_at_end", "one_long_row", "empty_rows"}) {
      SCOPED_TRACE(example + " schedule '" + sched + "' offsets " + pattern);
      Bindings in = interp::random_bindings(f, params, 3);
      auto o = offsets(pattern, params.at(rows_param), nnz);
      HostBuffer& ptr = in.buffers.at(ptr_name);
      ASSERT_EQ(ptr.size(), rows + 1);
      for (int64_t i = 0; i <= rows; ++i) ptr.set_i(i, o[i]);
      interp::Mismatch mm;
      ASSERT_NO_THROW(mm = differential(f, in));
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
}

TEST(DataDependentBounds, SegmentSumAtTheEdges) {
  check_all("segment_sum", kSegmentSchedules, "offsets", "m", 10, {{"nnz", 40}}, {{"m", 10}});
  check_all("segment_sum", kSegmentSchedules, "offsets", "m", 1, {{"nnz", 5}}, {{"m", 1}});
}

TEST(DataDependentBounds, SpmmAtTheEdges) {
  check_all("spmm", kSpmmSchedules, "ptr", "m", 9, {{"m", 9}, {"nnz", 30}, {"n", 5}}, {});
}

// A schedule that would need a row pointer outside the loop over rows is
// refused at lowering, not turned into code that reads before it checks.
TEST(DataDependentBounds, LoopOverDataBoundCannotLeaveItsRowLoop) {
  std::string src = with_schedule(read_example("segment_sum"), "acc.reorder(j, i);");
  ir::Func f = parse_one(src);
  try {
    poly::lower(poly::schedule(f));
    FAIL() << "expected a lowering error";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Lower);
    EXPECT_NE(e.message().find("cannot generate code for 'acc'"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("offsets[i]"), std::string::npos) << e.what();
  }
}

// The loop nest reads offsets[i] and offsets[i + 1] inside the loop over i.
TEST(DataDependentBounds, BoundsAreReadInsideTheRowLoop) {
  std::string src = with_schedule(read_example("segment_sum"), "");
  std::string loops = lowered(src);
  size_t loop_i =
      loops.find("for (i = 0; i < m; i += 1)", loops.find("acc") == std::string::npos ? 0 : 0);
  size_t second = loops.find("for (i = 0; i < m; i += 1)", loop_i + 1);
  size_t read = loops.find("offsets[i]");
  ASSERT_NE(second, std::string::npos) << loops;
  EXPECT_GT(read, second) << loops;
}

}  // namespace
}  // namespace kiln::testing
