// The semantic fuzzer's programs: one func over a fixed set of buffers, with
// computations drawn from templates whose expressions are random, and a
// random schedule over the loops those computations have. Each choice is made
// in a statement of its own, never two in one call's arguments: the order of
// those is unspecified, and a seed must give the same program with any compiler.
#include "program_generator.h"

#include <fmt/format.h>

#include <map>
#include <vector>

namespace kiln::fuzz {
namespace {

// A random f32 expression of the instance (i, j) of depth at most `depth`.
std::string float_expr(Choices& c, int depth, bool has_j, const std::vector<std::string>& values) {
  if (depth <= 0 || c.below(4) == 0) {
    switch (c.below(has_j ? 9 : 5)) {
      case 0: {
        int64_t whole = c.in(-4, 4);
        uint32_t tenths = c.below(10);
        return fmt::format("{}.{}", whole, tenths);
      }
      case 1:
        return "v[i]";
      case 2:
        return "select(i >= 1, v[i - 1], 0.5)";
      case 3:
        return "b[idx[i]]";  // a gather proved in bounds by idx's value spec
      case 4:
        return values.empty() ? "v[i]" : values[c.below(static_cast<uint32_t>(values.size()))];
      case 5:
        return "a[i, j]";
      case 6:
        return "b[j]";
      case 7:
        return "select(j + 1 < M, a[i, j + 1], -1.0)";
      default:
        return "select(i >= 1 and j >= 1, a[i - 1, j - 1], 0.25)";
    }
  }
  std::string x = float_expr(c, depth - 1, has_j, values);
  std::string y = float_expr(c, depth - 1, has_j, values);
  switch (c.below(7)) {
    case 0:
      return "(" + x + " + " + y + ")";
    case 1:
      return "(" + x + " - " + y + ")";
    case 2:
      return "(" + x + " * " + y + ")";
    case 3:
      return "min(" + x + ", " + y + ")";
    case 4:
      return "max(" + x + ", " + y + ")";
    case 5:
      return "select(" + x + " > " + y + ", " + x + ", " + y + " * 0.5)";
    default:
      return "-" + x;
  }
}

struct Comp {
  std::string name;
  std::vector<std::string> loops;  // current loop names, outermost first
  bool reduction = false;          // a `C_init` sibling exists
};

}  // namespace

Program generate_program(Choices& c) {
  Program p;
  p.opt_level = static_cast<int>(c.below(4));
  int64_t n = c.in(1, 17), m = c.in(1, 9);
  bool zero_divisor = c.below(4) == 0;
  std::string s = fmt::format(R"(func f {{
  param N = {}, M = {};
  input a : f32[N, M];
  input b : f32[M];
  input v : f32[N];
  input idx : i32[N] in [0, M);
  input q : i32[N] in [{}, 4);
  input r : i32[N] in [-1000, 1000];
  temp t : f32[N, M];
  output y : f32[N, M];
  output z : f32[N];
  output w : i32[N];
)",
                              n, m, zero_divisor ? -3 : 1);

  std::vector<Comp> comps;
  std::vector<std::string> values;  // value computations others may read
  if (c.coin()) {
    s += "  compute sq(i, j) in 0 <= i < N, 0 <= j < M = a[i, j] * a[i, j] + 1.0;\n";
    values.push_back("sq(i, j)");
  }
  std::vector<std::string> values_1d;
  if (c.coin()) {
    s += "  compute hv(i) in 0 <= i < N = v[i] * 0.5 - 1.0;\n";
    values_1d.push_back("hv(i)");
  }
  std::vector<std::string> all_values = values;
  all_values.insert(all_values.end(), values_1d.begin(), values_1d.end());

  bool wrote_t = false;
  int count = static_cast<int>(c.in(1, 4));
  for (int k = 0; k < count; ++k) {
    switch (c.below(6)) {
      case 0:  // a 2-D map into t (or y)
        s += fmt::format("  compute m{}(i, j) in 0 <= i < N, 0 <= j < M: {}[i, j] = {};\n", k,
                         wrote_t ? "y" : "t", float_expr(c, 3, true, all_values));
        comps.push_back({fmt::format("m{}", k), {"i", "j"}, false});
        wrote_t = true;
        break;
      case 1:  // reads what t holds
        if (!wrote_t) {
          s += fmt::format("  compute m{}(i, j) in 0 <= i < N, 0 <= j < M: t[i, j] = {};\n", k,
                           float_expr(c, 2, true, all_values));
          comps.push_back({fmt::format("m{}", k), {"i", "j"}, false});
          wrote_t = true;
          break;
        }
        s += fmt::format(
            "  compute u{}(i, j) in 0 <= i < N, 0 <= j < M: y[i, j] = t[i, j] * 2.0 + {};\n", k,
            float_expr(c, 2, true, all_values));
        comps.push_back({fmt::format("u{}", k), {"i", "j"}, false});
        break;
      case 2: {  // a reduction
        const char* op = c.coin() ? "sum" : "max";
        const char* body = c.coin() ? "a[i, k] * b[k]" : "a[i, k] + v[i]";
        s += fmt::format("  compute red{}(i) in 0 <= i < N: z[i] = {}(k in 0 <= k < M) {};\n", k,
                         op, body);
        comps.push_back({fmt::format("red{}", k), {"i", "k"}, true});
        break;
      }
      case 3:  // integer division and modulo: by zero when q may be 0
        s += fmt::format("  compute d{}(i) in 0 <= i < N: w[i] = r[i] / q[i] + r[i] % {};\n", k,
                         c.in(1, 5));
        comps.push_back({fmt::format("d{}", k), {"i"}, false});
        break;
      case 4:  // a triangle
        s += fmt::format("  compute tri{}(i, j) in 0 <= i < N, 0 <= j <= i, j < M: y[i, j] = {};\n",
                         k, float_expr(c, 2, true, all_values));
        comps.push_back({fmt::format("tri{}", k), {"i", "j"}, false});
        break;
      default:  // 1-D, with the value computations
        s += fmt::format("  compute o{}(i) in 0 <= i < N: z[i] = {};\n", k,
                         float_expr(c, 3, false, values_1d));
        comps.push_back({fmt::format("o{}", k), {"i"}, false});
        break;
    }
  }

  // The schedule: commands on the loops each computation has so far.
  std::string sched;
  int commands = static_cast<int>(c.below(6));
  for (int k = 0; k < commands && !comps.empty(); ++k) {
    Comp& comp = comps[c.below(static_cast<uint32_t>(comps.size()))];
    auto loop = [&]() -> std::string {
      return comp.loops[c.below(static_cast<uint32_t>(comp.loops.size()))];
    };
    std::string fresh = fmt::format("l{}", k);
    switch (c.below(10)) {
      case 0:
      case 1: {
        std::string l = loop();
        int64_t factor = std::vector<int64_t>{2, 3, 4, 8}[c.below(4)];
        sched += fmt::format(" {}.split({}, {}, {}o, {}i);", comp.name, l, factor, fresh, fresh);
        std::vector<std::string> next;
        for (const auto& x : comp.loops) {
          if (x == l) {
            next.push_back(fresh + "o");
            next.push_back(fresh + "i");
          } else {
            next.push_back(x);
          }
        }
        comp.loops = next;
        break;
      }
      case 2:
        if (comp.loops.size() >= 2) {
          std::vector<std::string> order = comp.loops;
          std::swap(order[0], order[order.size() - 1]);
          std::string list;
          for (size_t q = 0; q < order.size(); ++q) list += (q ? ", " : "") + order[q];
          sched += fmt::format(" {}.reorder({});", comp.name, list);
          comp.loops = order;
        }
        break;
      case 3:
        sched += fmt::format(" {}.tag({}, parallel);", comp.name, loop());
        break;
      case 4:
        sched += fmt::format(" {}.tag({}, vectorize);", comp.name, comp.loops.back());
        break;
      case 5:
        sched += fmt::format(" {}.tag({}, unroll);", comp.name, loop());
        break;
      case 6: {
        std::string l = loop();
        int64_t by = c.in(-3, 3);
        sched += fmt::format(" {}.shift({}, {});", comp.name, l, by);
        break;
      }
      case 7:
        if (comp.loops.size() >= 2)
          sched += fmt::format(" {}.skew({}, {}, {});", comp.name, comp.loops[0], comp.loops[1],
                               c.in(1, 2));
        break;
      case 8: {
        const Comp& other = comps[c.below(static_cast<uint32_t>(comps.size()))];
        if (other.name != comp.name)
          sched += fmt::format(" {}.after({}, {});", comp.name, other.name,
                               c.coin() ? "root" : comp.loops.front());
        break;
      }
      default: {
        const char* buf = c.coin() ? "a" : "v";
        std::string l = loop();
        const char* where = c.coin() ? "stack" : "heap";
        sched += fmt::format(" {}.cache_identity({}, {}, {});", comp.name, buf, l, where);
        break;
      }
    }
  }
  if (!sched.empty()) s += "  schedule {" + sched + " }\n";
  s += "}\n";
  p.source = s;
  return p;
}

}  // namespace kiln::fuzz
