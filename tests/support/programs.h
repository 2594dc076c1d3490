// Helpers shared by the polyhedral tests: parse a program, swap its schedule, run both
// interpreters.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/frontend.h"
#include "kiln/interp.h"
#include "kiln/ir.h"
#include "kiln/poly.h"

namespace kiln::testing {

// A file's text ("" where it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file of the source tree, by its path from the root.
inline std::string read_source(const std::string& path) {
  return read_file(std::string(KILN_SOURCE_DIR) + "/" + path);
}

// The .kiln files of a folder of the source tree, by their paths from the
// root, sorted.
inline std::vector<std::string> kiln_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(KILN_SOURCE_DIR) + "/" + dir))
    if (e.path().extension() == ".kiln") out.push_back(dir + "/" + e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string read_example(const std::string& name) {
  return read_source("examples/" + name + ".kiln");
}

// How many times `what` occurs in `text` (overlaps counted).
inline int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Replaces the body of the `schedule { ... }` block of `src` (braces inside
// quoted strings do not count).
inline std::string with_schedule(const std::string& src, const std::string& body) {
  size_t at = src.find("schedule {");
  if (at == std::string::npos) {
    size_t end = src.rfind('}');
    return src.substr(0, end) + "  schedule {\n" + body + "\n  }\n}\n";
  }
  size_t open = src.find('{', at);
  int depth = 0;
  bool quoted = false;
  size_t close = open;
  for (size_t i = open; i < src.size(); ++i) {
    char c = src[i];
    if (c == '"') quoted = !quoted;
    if (quoted) continue;
    if (c == '{') ++depth;
    if (c == '}' && --depth == 0) {
      close = i;
      break;
    }
  }
  return src.substr(0, open + 1) + "\n" + body + "\n  " + src.substr(close);
}

inline ir::Func parse_one(const std::string& src, const ir::Overrides& set = {}) {
  ir::Module m = frontend::parse_module(src, "test.kiln");
  return ir::apply_overrides(m.funcs.at(0), set);
}

// Runs the reference interpreter and the scheduled loop nest on the same
// inputs and returns the comparison.
inline interp::Mismatch differential(const ir::Func& f, const Bindings& inputs) {
  Bindings expected = inputs, actual = inputs;
  interp::run_reference(f, expected);
  interp::run_loops(poly::lower(poly::schedule(f)), actual);
  return interp::compare_outputs(f, expected, actual);
}

inline interp::Mismatch differential(const ir::Func& f,
                                     const std::map<std::string, int64_t>& runtime = {},
                                     uint64_t seed = 1) {
  auto params = interp::param_values(f, runtime);
  return differential(f, interp::random_bindings(f, params, seed));
}

// What scheduling f throws, as CompileError::what() says it
// ("file:line:col: legality error: ..."), or "(accepted)".
inline std::string schedule_error(const ir::Func& f) {
  try {
    poly::schedule(f);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "(accepted)";
}

// Temp T holds two values one after the other: a's, read by b, then c's,
// read by d (legality and codegen tests of storage reuse).
inline std::string reused_temp(const std::string& schedule, int64_t n) {
  return "func reuse {\n"
         "  param N = " +
         std::to_string(n) +
         ";\n"
         "  input A : f32[N];\n"
         "  output B : f32[N];\n"
         "  output D : f32[N];\n"
         "  temp T : f32[N];\n"
         "  compute a(i) in 0 <= i < N: T[i] = A[i] * 2.0;\n"
         "  compute b(i) in 0 <= i < N: B[i] = T[i] + 1.0;\n"
         "  compute c(i) in 0 <= i < N: T[i] = A[i] * 3.0;\n"
         "  compute d(i) in 0 <= i < N: D[i] = T[i] - 1.0;\n"
         "  schedule {\n    " +
         schedule + "\n  }\n}\n";
}

// LU decomposition in place, as one computation: for k < j the update,
// for k == j the division by the pivot A[j, j], which only that side of the
// select reads (legality and codegen tests of conditional accesses).
inline std::string lu_in_one_computation(const std::string& schedule, int64_t n) {
  return "func lu {\n"
         "  param N = " +
         std::to_string(n) +
         ";\n"
         "  output A : f32[N, N];\n"
         "  compute lu(i, j, k) in 0 <= i < N, 0 <= j < N, 0 <= k <= j, k < i:\n"
         "    A[i, j] = select(k == j, A[i, j] / A[j, j], A[i, j] - A[i, k] * A[k, j]);\n"
         "  schedule {\n    " +
         schedule + "\n  }\n}\n";
}

// A scatter: instance k of h updates out[bin[k]] by `update` (a statement
// such as "out[bin[k]] += w[k]") into an `out` of `type` set to `init` first;
// with `rows`, out and w have that many columns and h an iterator j over them
// (legality, interpreter and codegen tests of scatter stores).
inline std::string scatter(const std::string& update, const std::string& schedule, int64_t n,
                           int64_t bins, const std::string& type = "f32",
                           const std::string& init = "0", int64_t rows = 0) {
  std::string cols = rows ? ", " + std::to_string(rows) : "";
  std::string j = rows ? ", j" : "", in_j = rows ? ", 0 <= j < " + std::to_string(rows) : "";
  return "func scatter {\n"
         "  param n = " +
         std::to_string(n) + ", bins = " + std::to_string(bins) +
         ";\n"
         "  input bin : i32[n] in [0, bins);\n"
         "  input w : " +
         type + "[n" + cols +
         "];\n"
         "  output out : " +
         type + "[bins" + cols +
         "];\n"
         "  compute init(b" +
         j + ") in 0 <= b < bins" + in_j + ": out[b" + j + "] = " + init +
         ";\n"
         "  compute h(k" +
         j + ") in 0 <= k < n" + in_j + ": " + update +
         ";\n"
         "  schedule {\n    " +
         schedule + "\n  }\n}\n";
}

inline std::string lowered(const std::string& src, const ir::Overrides& set = {}) {
  return ir::to_string(poly::lower(poly::schedule(parse_one(src, set))));
}

}  // namespace kiln::testing
