// Scatter stores (an index read from a buffer) and the two ways to update one
// element from parallel iterations: atomic() and privatize(L). Legality keeps
// a loop that may update one element twice serial unless one of them is
// given, the value spec of the index must keep every write inside its buffer,
// and every schedule computes what the reference interpreter computes.
#include "programs.h"

namespace kiln::testing {
namespace {

std::string histogram(const std::string& schedule, int64_t n = 100, int64_t bins = 7) {
  return scatter("out[bin[k]] += w[k]", schedule, n, bins);
}

TEST(Scatter, EveryScheduleMatchesTheReference) {
  const std::vector<std::string> schedules = {
      "",
      "h.split(k, 7, ko, ki);",
      "h.split(k, 16, ko, ki); h.tag(ko, parallel); h.atomic();",
      "h.tag(k, parallel); h.atomic();",
      "h.split(k, 16, ko, ki); h.tag(ko, parallel); h.privatize(ko);",
      // Copies per iteration of an inner loop, combined after each.
      "h.split(k, 16, ko, ki); h.split(ki, 4, kio, kii); h.privatize(kio); h.tag(kio, parallel);",
      // Separated tails: both copies of the loop privatize.
      "h.separate(k, 16); h.split(k, 16, ko, ki); h.tag(ko, parallel); h.privatize(ko);",
      "h.split(k, 3, ko, ki); h.privatize(ko); init.tag(b, parallel);",
  };
  for (const auto& sched : schedules) {
    for (auto [n, bins] : std::vector<std::pair<int64_t, int64_t>>{{100, 7}, {1, 1}, {33, 64}}) {
      SCOPED_TRACE(sched + " n=" + std::to_string(n) + " bins=" + std::to_string(bins));
      interp::Mismatch mm = differential(parse_one(histogram(sched, n, bins)));
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
}

TEST(Scatter, EveryUpdateOperatorAtomicAndPrivatized) {
  struct Case {
    std::string update, type, init;
  };
  for (const Case& c : std::vector<Case>{
           {"out[bin[k]] -= w[k]", "f32", "0.0"},
           {"out[bin[k]] *= w[k]", "f64", "1.0"},
           {"out[bin[k]] = max(out[bin[k]], w[k])", "f32", "-1000.0"},
           {"out[bin[k]] = min(w[k], out[bin[k]])", "i32", "1000"},
           {"out[bin[k]] += w[k] * 2", "i64", "0"},
       }) {
    for (std::string sched : {"h.split(k, 8, ko, ki); h.tag(ko, parallel); h.atomic();",
                              "h.split(k, 8, ko, ki); h.tag(ko, parallel); h.privatize(ko);"}) {
      SCOPED_TRACE(c.update + " (" + c.type + "): " + sched);
      ir::Func f = parse_one(scatter(c.update, sched, 50, 5, c.type, c.init));
      interp::Mismatch mm = differential(f);
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
}

TEST(Scatter, RowsScatteredWithVectorLanes) {
  for (std::string sched :
       {"h.tag(k, parallel); h.atomic(); h.tag(j, vectorize);",
        "h.split(k, 4, ko, ki); h.tag(ko, parallel); h.privatize(ko); h.tag(j, vectorize);"}) {
    SCOPED_TRACE(sched);
    ir::Func f = parse_one(scatter("out[bin[k], j] += w[k, j]", sched, 21, 4, "f32", "0.0", 8));
    interp::Mismatch mm = differential(f);
    EXPECT_TRUE(mm.ok) << mm.describe();
  }
}

// Rows of out, each updated by the k of its row: one copy of out per
// iteration of the privatized loop, combined into all of out after it.
std::string rows(const std::string& schedule) {
  return "func rows {\n  param m = 6, n = 50, bins = 4;\n"
         "  input bin : i32[m, n] in [0, bins);\n  input w : f32[m, n];\n"
         "  output out : f32[m, bins];\n"
         "  compute init(i, b) in 0 <= i < m, 0 <= b < bins: out[i, b] = 0.0;\n"
         "  compute h(i, k) in 0 <= i < m, 0 <= k < n: out[i, bin[i, k]] += w[i, k];\n"
         "  schedule {\n    " +
         schedule + "\n  }\n}\n";
}

// CSR times a vector, transposed: y[col[j]] += val[j] * x[i] over the
// nonzeros j of row i, whose bounds are read at run time.
std::string csr_transposed(const std::string& schedule) {
  return "func spmv_t {\n  param m = 9, n = 5, nnz = 40;\n"
         "  input ptr : i32[m + 1] in [0, nnz] sorted;\n  input col : i32[nnz] in [0, n);\n"
         "  input val : f32[nnz];\n  input x : f32[m];\n  output y : f32[n];\n"
         "  compute y_init(c) in 0 <= c < n: y[c] = 0.0;\n"
         "  compute h(i, j) in 0 <= i < m, ptr[i] <= j < ptr[i + 1]: y[col[j]] += val[j] * x[i];\n"
         "  schedule {\n    " +
         schedule + "\n  }\n}\n";
}

TEST(Scatter, PrivatizedLoopsInsideOtherLoops) {
  for (const std::string& src :
       {rows("h.split(k, 10, ko, ki); h.privatize(ko); h.tag(ko, parallel);"),
        rows("h.tag(i, parallel); h.privatize(i);"),
        rows("h.reorder(k, i); h.tag(k, parallel); h.privatize(k); init.tag(i, parallel);"),
        csr_transposed("h.tag(i, parallel); h.privatize(i);"), csr_transposed("h.privatize(j);"),
        // A target with no dimension: copies of one element.
        std::string(
            "func total {\n  param n = 70;\n  input w : f32[n];\n  output s : f32[];\n"
            "  compute s_init(): s[] = 1.0;\n  compute h(k) in 0 <= k < n: s[] += w[k];\n"
            "  schedule {\n    h.split(k, 8, ko, ki); h.tag(ko, parallel); h.privatize(ko);\n"
            "  }\n}\n"),
        // A loop with a step of 3 (the domain's stride): copy (k - 1) / 3.
        std::string("func strided {\n  param n = 100, bins = 5;\n"
                    "  input bin : i32[n] in [0, bins);\n  input w : f32[n];\n"
                    "  output out : f32[bins];\n"
                    "  compute init(b) in 0 <= b < bins: out[b] = 0.0;\n"
                    "  compute h(k) in 1 <= k < n, k % 3 == 1: out[bin[k]] += w[k];\n"
                    "  schedule {\n    h.privatize(k); h.tag(k, parallel);\n  }\n}\n")}) {
    SCOPED_TRACE(src);
    for (uint64_t seed : {1, 2}) {
      interp::Mismatch mm = differential(parse_one(src), {}, seed);
      EXPECT_TRUE(mm.ok) << mm.describe();
    }
  }
}

TEST(Scatter, LoopsShowTheAtomicUpdateAndTheCopies) {
  std::string atomic = lowered(histogram("h.tag(k, parallel); h.atomic();"));
  EXPECT_NE(atomic.find("atomic_add(out[i64(bin[k])], w[k]);"), std::string::npos) << atomic;
  std::string copies =
      lowered(histogram("h.split(k, 16, ko, ki); h.tag(ko, parallel); h.privatize(ko);"));
  for (const char* part :
       {"alloc out_h: f32[7, 7] @heap {", "out_h[copy, e0] = 0.0;",
        "out_h[ko, i64(bin[16 * ko + ki])] = out_h[ko, i64(bin[16 * ko + ki])] + "
        "w[16 * ko + ki];",
        "out[e0] = out[e0] + out_h[copy, e0];"})
    EXPECT_NE(copies.find(part), std::string::npos) << part << "\n" << copies;
  // A subtraction: the copies add, and the target loses their sum.
  std::string sub = lowered(scatter("out[bin[k]] -= w[k]", "h.privatize(k);", 10, 3));
  EXPECT_NE(sub.find("out[e0] = out[e0] - out_h[copy, e0];"), std::string::npos) << sub;
}

TEST(Scatter, ParallelIsRefusedWithoutAtomicOrPrivatize) {
  EXPECT_EQ(schedule_error(parse_one(histogram("h.split(k, 16, ko, ki); h.tag(ko, parallel);"))),
            "test.kiln:9:29: legality error: schedule command 'h.tag' loop 'ko' of h is tagged "
            "parallel but carries the flow (read after write) dependence from h to h: h(k=74) "
            "reads out written by h(k=49); its iterations cannot run at the same time; h updates "
            "out in place: h.atomic() or h.privatize(ko) lets iterations update one element "
            "together");
  // Vector lanes cannot, atomic or not.
  EXPECT_EQ(schedule_error(parse_one(histogram("h.atomic(); h.tag(k, vectorize);"))),
            "test.kiln:9:17: legality error: schedule command 'h.tag' loop 'k' of h is tagged "
            "vectorize but carries the flow (read after write) dependence from h to h: h(k=99) "
            "reads out written by h(k=98); its iterations cannot run at the same time; h updates "
            "out in place, and vector lanes cannot update one element together");
  // Privatizing one loop lets only that loop run in parallel.
  std::string other = schedule_error(
      parse_one(histogram("h.split(k, 16, ko, ki); h.privatize(ko); h.tag(ki, parallel);")));
  EXPECT_NE(other.find("loop 'ki' of h is tagged parallel but carries"), std::string::npos)
      << other;
}

// atomic() relaxes h's dependences on itself through out, and no others: h
// reading what g wrote in the iteration before still orders the iterations.
TEST(Scatter, AtomicLeavesOtherDependencesAlone) {
  std::string src =
      "func f {\n  param n = 40, bins = 4;\n  input bin : i32[n] in [0, bins);\n"
      "  input w : f32[n];\n  output out : f32[bins];\n  output v : f32[n];\n"
      "  compute g(k) in 0 <= k < n: v[k] = w[k] * 2.0;\n"
      "  compute h(k) in 1 <= k < n: out[bin[k]] += v[k - 1];\n"
      "  schedule {\n    h.after(g, k); h.atomic(); SCHED\n  }\n}\n";
  auto with = [&](const std::string& tags) {
    std::string s = src;
    return s.replace(s.find("SCHED"), 5, tags);
  };
  std::string e = schedule_error(parse_one(with("g.tag(k, parallel);")));
  EXPECT_NE(e.find("loop 'k' of g is tagged parallel but carries the flow (read after write) "
                   "dependence from g to h"),
            std::string::npos)
      << e;
  // Apart, each loop runs in parallel.
  std::string apart = with("h.tag(k, parallel); g.tag(k, parallel);");
  apart.erase(apart.find("h.after(g, k); "), 15);
  interp::Mismatch mm = differential(parse_one(apart));
  EXPECT_TRUE(mm.ok) << mm.describe();
}

TEST(Scatter, CommandErrors) {
  struct Case {
    std::string schedule, error;
  };
  std::string base =
      "func f {\n  param n = 40, bins = 4;\n  input bin : i32[n] in [0, bins);\n"
      "  input w : f32[n];\n  output out : f32[bins];\n  output cnt : f32[bins];\n"
      "  compute h(k) in 0 <= k < n: out[bin[k]] += w[k];\n"
      "  compute s(k) in 0 <= k < n: out[bin[k]] = w[k] + out[0];\n"
      "  compute c(k) in 0 <= k < n: cnt[bin[k]] += 1.0;\n"
      "  schedule {\n    SCHED\n  }\n}\n";
  for (const Case& c : std::vector<Case>{
           {"h.atomic(k);", "11:5: schedule error: atomic expects no arguments: atomic() (got 1)"},
           {"s.atomic();",
            "11:5: schedule error: atomic: s must update the element it writes: out[...] += v, -= "
            "v, *= v, or = max(out[...], v) or min(...), where v does not read out; its value is "
            "w[k] + out[0]"},
           {"h.privatize(q);",
            "11:17: schedule error: privatize: h has no loop 'q' (its loops: k)"},
           {"h.atomic(); h.privatize(k);",
            "11:17: schedule error: privatize: h is atomic already; an update is either atomic or "
            "privatized"},
           {"h.privatize(k); h.atomic();",
            "11:21: schedule error: atomic: h already privatizes loop 'k'; an update is either "
            "atomic or privatized"},
           {"h.split(k, 4, ko, ki); h.privatize(ko); h.privatize(ki);",
            "11:45: schedule error: privatize: h privatizes loop 'ko' already; one loop of a "
            "computation may be privatized"},
           {"h.privatize(k); h.tag(k, vectorize);",
            "11:21: legality error: schedule command 'h.tag' loop 'k' of h is tagged vectorize "
            "but carries the flow (read after write) dependence from h to h: h(k=39) reads out "
            "written by h(k=38); its iterations cannot run at the same time; h updates out in "
            "place, and vector lanes cannot update one element together"},
           {"h.split(k, 8, ko, ki); h.tag(ko, parallel); h.atomic(); "
            "h.cache_identity(bin, ko, stack);",
            "7:11: lower error: atomic() no longer applies to h: a memory schedule rewrote its "
            "value so that it no longer reads the element it writes through the indices of its "
            "store; do not cache the buffers those indices read"},
           {"h.privatize(k); h.split(k, 4, ko, ki);",
            "7:11: lower error: 'h' privatizes loop 'k', which a later schedule command replaced; "
            "privatize the loop that stands last"},
           {"c.after(h, k); h.privatize(k);",
            "7:11: lower error: cannot privatize loop 'k' of 'h': 'c' also runs inside it, and "
            "would not see the updates its copies hold until the loop ends"},
       }) {
    SCOPED_TRACE(c.schedule);
    std::string src = base;
    src.replace(src.find("SCHED"), 5, c.schedule);
    std::string e;
    try {
      poly::lower(poly::schedule(parse_one(src)));
      e = "(accepted)";
    } catch (const CompileError& err) {
      e = err.what();
    }
    EXPECT_EQ(e, "test.kiln:" + c.error);
  }
}

TEST(Scatter, NoPrivatizedLoopInsideALoopWhoseIterationsRunTogether) {
  std::string e;
  try {
    poly::lower(poly::schedule(
        parse_one(rows("h.tag(i, parallel); h.split(k, 10, ko, ki); h.privatize(ko);"))));
  } catch (const CompileError& err) {
    e = err.what();
  }
  EXPECT_EQ(e,
            "test.kiln:7:11: lower error: cannot privatize loop 'ko' of 'h': it runs inside loop "
            "'i', tagged parallel, whose iterations would combine their copies into all of 'out' "
            "at the same time");
}

TEST(Scatter, TheIndexValueSpecMustKeepWritesInside) {
  // bin's spec as declared -> what the error blames.
  for (auto [spec, blame] : std::vector<std::pair<std::string, std::string>>{
           {"", "bin has no value range, so it may hold any i32"},
           {" in [0, bins]", "bin is declared in [0, bins]"}}) {
    std::string src = histogram("");
    src.replace(src.find(" in [0, bins)"), 13, spec);
    EXPECT_EQ(schedule_error(parse_one(src)),
              "test.kiln:7:31: bounds error: the write out[bin[k]] in computation h can fall "
              "outside out: index 0 (bin[k]) is 7 at h(k=0) when bin[k] = 7, but dimension 0 of "
              "out has extent bins = 7 (" +
                  blame + ": a value range must keep the index inside the dimension it indexes)");
  }
  // An index one past what the spec allows, through an offset.
  std::string shifted = scatter("out[bin[k] + 1] += w[k]", "", 10, 4);
  EXPECT_NE(schedule_error(parse_one(shifted)).find("bounds error: the write out[bin[k] + 1]"),
            std::string::npos);
}

// Data that break bin's value spec are caught before any write, by both
// interpreters.
TEST(Scatter, IndicesOutsideTheSpecAreCaughtAtRunTime) {
  ir::Func f = parse_one(histogram("h.split(k, 16, ko, ki); h.privatize(ko);", 40, 5));
  for (int64_t bad : {-1, 5, 1000}) {
    SCOPED_TRACE(bad);
    Bindings b = interp::random_bindings(f, interp::param_values(f), 3);
    b.buffers.at("bin").set_i(17, bad);
    Bindings loops = b;
    std::string want =
        "input bin breaks its value spec in [0, bins): bin[17] = " + std::to_string(bad) +
        (bad < 0 ? " is below 0" : " is not below bins = 5");
    for (bool reference : {true, false}) {
      try {
        if (reference)
          interp::run_reference(f, b);
        else
          interp::run_loops(poly::lower(poly::schedule(f)), loops);
        ADD_FAILURE() << "accepted bin[17] = " << bad;
      } catch (const CompileError& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace kiln::testing
