// The reference interpreter at sampled output points (interp::run_reference_at): at every
// point asked for it gives exactly what the whole run gives, for every func of the operator
// library and the examples, and it refuses what it cannot trace back.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "kiln/frontend.h"
#include "kiln/interp.h"
#include "kiln/library.h"
#include "programs.h"

namespace kiln {
namespace {

// Points of each output: a few fixed ones and some random ones.
std::map<std::string, std::vector<int64_t>> some_points(const ir::Func& f, const Bindings& b,
                                                        uint64_t seed) {
  std::map<std::string, std::vector<int64_t>> out;
  std::mt19937_64 rng(seed);
  for (const ir::Buf* o : f.bufs_of_kind(ir::BufKind::Output)) {
    int64_t n = b.buffers.at(o->name).size();
    if (n == 0) continue;
    std::set<int64_t> s = {0, n - 1, n / 2};
    for (int k = 0; k < 20; ++k) s.insert(static_cast<int64_t>(rng() % static_cast<uint64_t>(n)));
    out[o->name].assign(s.begin(), s.end());
  }
  return out;
}

// Run-time params at small values (the examples' segment sums and sparse products have them).
std::map<std::string, int64_t> test_params(const ir::Func& f) {
  std::map<std::string, int64_t> out;
  for (const ir::Param& p : f.params)
    if (!p.value) out[p.name] = 8;
  return out;
}

// run_reference_at agrees with run_reference, bit for bit, at the points; returns whether f
// could be traced.
bool expect_same_at_points(const ir::Func& f, uint64_t seed) {
  std::map<std::string, int64_t> params = interp::param_values(f, test_params(f));
  Bindings whole = interp::random_bindings(f, params, seed);
  Bindings sampled = whole;
  interp::run_reference(f, whole);
  auto points = some_points(f, whole, seed);
  if (!interp::run_reference_at(f, sampled, points)) return false;
  for (const auto& [name, flats] : points) {
    for (int64_t flat : flats) {
      double got = sampled.buffers.at(name).get_f(flat), want = whole.buffers.at(name).get_f(flat);
      EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
          << f.name << ": " << name << "[flat " << flat << "]: " << got << " vs " << want;
    }
  }
  return true;
}

TEST(ReferenceAt, EveryLibraryFuncGivesTheWholeRunsValuesAtItsPoints) {
  size_t traced = 0;
  for (const ir::Func& f : library::module().funcs) {
    SCOPED_TRACE(f.name);
    if (expect_same_at_points(f, 3)) ++traced;
  }
  // The convolutions, products, pooling, normalizations and elementwise funcs all trace.
  EXPECT_EQ(traced, library::module().funcs.size());
}

TEST(ReferenceAt, ExamplesGiveTheWholeRunsValuesOrAreRefused) {
  for (const std::string& file : testing::kiln_files("examples")) {
    ir::Module m = frontend::parse_module(testing::read_source(file), file);
    for (const ir::Func& f : m.funcs) {
      SCOPED_TRACE(file + ": " + f.name);
      bool traced = expect_same_at_points(f, 5);
      // Time steps (algorithm loops) and in-place stencils cannot be traced back.
      if (f.name == "matmul" || f.name == "conv2d") {
        EXPECT_TRUE(traced);
      }
    }
  }
}

TEST(ReferenceAt, WhatCannotBeTracedIsRefusedAndLeftAlone) {
  ir::Module m = frontend::parse_module(R"(
func prefix {
  param N = 16;
  input x : f32[N];
  output y : f32[N];
  compute first(i) in i == 0: y[i] = x[i];
  compute rest(i) in 1 <= i, i < N: y[i] = y[i - 1] + x[i];
}
)",
                                        "prefix.kiln");
  const ir::Func& f = m.funcs.at(0);
  Bindings b = interp::random_bindings(f, interp::param_values(f), 1);
  Bindings before = b;
  EXPECT_FALSE(interp::run_reference_at(f, b, {{"y", {3}}}));
  EXPECT_EQ(b.buffers.at("y").get_f(3), before.buffers.at("y").get_f(3));
}

// The spot check of a kernel's run finds an element a kernel got wrong when it is among the
// points, and names its buffer and index.
TEST(CheckAtPoints, FindsAWrongElementAndNamesIt) {
  const ir::Func& f = library::func("relu");
  std::map<std::string, int64_t> params = interp::param_values(f);
  Bindings ran = interp::random_bindings(f, params, 2);
  interp::run_reference(f, ran);  // a kernel that got everything right
  int64_t compared = 0;
  interp::Mismatch ok = interp::check_at_points(f, ran, 16, 7, &compared);
  EXPECT_TRUE(ok.ok) << ok.describe();
  HostBuffer& y = ran.buffers.at(f.bufs_of_kind(ir::BufKind::Output).front()->name);
  EXPECT_EQ(compared, std::min<int64_t>(16, y.size()));
  // Wrong at the last element, which every sample holds.
  y.set_f(y.size() - 1, y.get_f(y.size() - 1) + 1.0);
  interp::Mismatch bad = interp::check_at_points(f, ran, 16, 7);
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.buffer, f.bufs_of_kind(ir::BufKind::Output).front()->name);
  std::vector<int64_t> last;
  int64_t flat = y.size() - 1;
  for (size_t d = y.shape().size(); d-- > 0;) {
    last.insert(last.begin(), flat % y.shape()[d]);
    flat /= y.shape()[d];
  }
  EXPECT_EQ(bad.index, last);
  EXPECT_NEAR(bad.abs_error, 1.0, 1e-6);  // in f32
}

}  // namespace
}  // namespace kiln
