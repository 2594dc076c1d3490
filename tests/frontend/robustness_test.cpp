// Whatever the input, the frontend either returns IR or throws CompileError:
// prefixes of a valid file, random mutations, token soup, binary garbage.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kiln/frontend.h"

namespace kiln {
namespace {

// Uses every construct of the language, graphs included.
const char* kProgram = R"(# Every construct, once.
func spmv {
  param m, n, nnz;
  constraint m > 0, 0 < n <= 1024 or n == 1, nnz % 4 == 0 and not (nnz < 0);
  input ptr : i32[m + 1] in [0, nnz] sorted;
  input col : i32[nnz] in [0, n);
  input val : f32[nnz] in (-1.0, 1e3];
  input x : f32[n];
  output y : f32[m];
  compute zero(i) in 0 <= i < m: y[i] = 0;
  compute acc(i, j) in 0 <= i < m, ptr[i] <= j < ptr[i + 1]:
    y[i] += val[j] * x[col[j]];
  schedule { acc.tag(i, parallel); }
}

func conv {
  param C = 3, H = 32, W = 32;
  input img : f32[C, H, W];
  input ker : f64[3, 3];
  output out : f64[C, H, W];
  temp t : i64[C];
  knob U = 4 in [1, 2, 4, -1];
  compute pad(c, h, w) in 0 <= c < C, 0 <= h < H + 2, 0 <= w < W + 2 =
    select(1 <= h <= H && 1 <= w <= W, f64(img[c, h - 1, w - 1]), 0);
  compute conv(c, h, w) in 0 <= c < C, 0 <= h < H, 0 <= w < W:
    out[c, h, w] = sum(kh, kw in 0 <= kh < 3, 0 <= kw < 3) pad(c, h + kh, w + kw) * ker[kh, kw];
  compute mx(c) in 0 <= c < C, c % 2 == 0 || c / 2 != 1: t[c] = max(h in 0 <= h < H) i64(img[c, h, 0]);
  compute misc(c) in 0 <= c < C: t[c] *= min(abs(-3), i64(exp(2.0e-3) + pow(1.5, 2)));
  schedule {
    knob V = 8 in [8, 16];
    conv.tile(h, w, V, 16, ho, wo, hi, wi);
    conv.apply_sch("{ conv[c, h, w] -> conv[h, c, w] }");
    pad.store_at(t, [c, [h, -1], []]);
    conv.shift(c, -1);
    out.set_loc(gpu_shared);
  }
}

graph net {
  input im : f32[3, 8, 8];
  const k : f64[3, 3] = [1.0, -2, 3e-1, 0, 0, 0, 1, 1, 1];
  const k2 : f64[3, 3] = random(7, -0.5, 0.5);
  const k3 : f64[3, 3] = fill(true);
  o = conv(im, k, H = 8, W = 8);
  p = conv(im, k2);
  output o, p;
}
)";

// Parses text; fails the test if anything but CompileError escapes.
void parse_expecting_only_compile_errors(const std::string& text) {
  try {
    frontend::parse_module(text, "fuzz.kiln");
  } catch (const CompileError& e) {
    ASSERT_FALSE(e.message().empty());
    ASSERT_TRUE(e.stage() == ErrorStage::Parse || e.stage() == ErrorStage::Validate) << e.what();
    ASSERT_EQ(e.loc().file, "fuzz.kiln");
    // Lines end at LF, CR LF or a lone CR.
    int lines = 1;
    for (size_t i = 0; i < text.size(); ++i) {
      lines +=
          text[i] == '\n' || (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'));
    }
    ASSERT_GE(e.loc().line, 1) << e.what();
    ASSERT_LE(e.loc().line, lines) << e.what();
    ASSERT_GE(e.loc().col, 1) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "non-CompileError exception: " << e.what() << "\ninput:\n" << text;
  }
}

TEST(Robustness, TheProgramIsValid) {
  ir::Module m = frontend::parse_module(kProgram);
  EXPECT_EQ(m.funcs.size(), 2u);
  EXPECT_EQ(m.graphs.size(), 1u);
}

TEST(Robustness, EveryPrefix) {
  std::string p = kProgram;
  for (size_t n = 0; n <= p.size(); ++n) {
    parse_expecting_only_compile_errors(p.substr(0, n));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Robustness, EverySuffix) {
  std::string p = kProgram;
  for (size_t n = 0; n <= p.size(); n += 3) {
    parse_expecting_only_compile_errors(p.substr(n));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Robustness, RandomByteMutations) {
  std::mt19937 rng(20240611);
  const std::string base = kProgram;
  const std::string alphabet = "()[]{},;:.=<>!&|+-*/%#\"\\ \n\t0123456789eE._abcijkxyzNMK";
  for (int round = 0; round < 6000; ++round) {
    std::string s = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      size_t at = rng() % s.size();
      switch (rng() % 6) {
        case 0:  // any byte at all, NUL and high bytes included
          s[at] = static_cast<char>(rng() % 256);
          break;
        case 1:  // a byte the lexer knows
          s[at] = alphabet[rng() % alphabet.size()];
          break;
        case 2:
          s.erase(at, 1 + rng() % 8);
          break;
        case 3:
          s.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 4: {  // duplicate a chunk elsewhere
          size_t len = 1 + rng() % 40;
          std::string chunk = s.substr(at, len);
          s.insert(rng() % s.size(), chunk);
          break;
        }
        default: {  // swap two chunks' first bytes
          size_t other = rng() % s.size();
          std::swap(s[at], s[other]);
          break;
        }
      }
    }
    parse_expecting_only_compile_errors(s);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Robustness, RandomTokenSoup) {
  const std::vector<std::string> tokens = {
      "func",   "f",          "{",     "}",      "param", "N",   "=",      "4",    ",",
      ";",      "constraint", "input", "output", "temp",  "A",   ":",      "f32",  "i32",
      "bool",   "[",          "]",     "in",     "(",     ")",   "sorted", "knob", "compute",
      "c",      "i",          "j",     "<=",     "<",     ">",   ">=",     "==",   "!=",
      "and",    "or",         "not",   "&&",     "||",    "!",   "+",      "-",    "*",
      "/",      "%",          "+=",    "-=",     "*=",    "sum", "max",    "min",  "select",
      "exp",    "schedule",   ".",     "split",  "\"s\"", "1.5", "true",   "0",    "k",
      "c_init", "root",       "pad"};
  std::mt19937 rng(7);
  for (int round = 0; round < 4000; ++round) {
    std::string s = "func f { param N; input A : f32[N]; output y : f32[N]; ";
    int n = 1 + static_cast<int>(rng() % 60);
    for (int k = 0; k < n; ++k) s += tokens[rng() % tokens.size()] + " ";
    if (rng() % 2) s += "}";
    parse_expecting_only_compile_errors(s);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Robustness, BinaryGarbage) {
  std::mt19937 rng(99);
  for (int round = 0; round < 2000; ++round) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    if (round % 2) s = "func f { " + s;
    parse_expecting_only_compile_errors(s);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Robustness, PathologicalSizes) {
  const std::string head =
      "func f { param N; output y : f32[N]; compute c(i) in 0 <= i < N: y[i] = ";
  const std::vector<std::string> inputs = {
      head + std::string(100000, '('),
      head + std::string(100000, '-'),
      head + std::string(100000, '!'),
      "func f { schedule { c.f(" + std::string(100000, '['),
      "func f { param N = " + std::string(100000, '9') + "; }",
      "func " + std::string(100000, 'a') + " {",
      std::string(100000, '{'),
      std::string(100000, '\n') + "@",
      std::string(100000, '#'),
      head + "1.0" +
          [] {
            std::string s;
            for (int k = 0; k < 20000; ++k) s += " * 1.0";
            return s;
          }() +
          ";}",
      [] {
        std::string s;
        for (int k = 0; k < 5000; ++k) s += "func f" + std::to_string(k) + " { }\n";
        return s + "func f0 { }";
      }(),
  };
  for (const std::string& s : inputs) {
    parse_expecting_only_compile_errors(s);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace kiln
