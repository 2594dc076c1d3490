// What a run needs and what it produced: param values, buffer shapes, random inputs, output
// comparison.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include "eval.h"
#include "kiln/interp.h"
#include "kiln/loop_ir.h"

namespace kiln::interp {

using detail::Value;

namespace {

// Evaluates expressions in params only (shapes, value ranges).
class ParamEvaluator final : public detail::Evaluator {
 public:
  ParamEvaluator(const std::map<std::string, int64_t>& params, std::string where, SourceLoc loc)
      : Evaluator(params), where_(std::move(where)), loc_(std::move(loc)) {}

 protected:
  HostBuffer* find_buffer(const std::string&) override { return nullptr; }
  std::string context() override { return where_; }
  SourceLoc error_loc() const override { return loc_; }

 private:
  std::string where_;
  SourceLoc loc_;
};

// A stable 64-bit hash (FNV-1a), so a buffer's random values depend on the
// seed and its name only, not on std::hash or on the other buffers.
uint64_t stable_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

void fill_random_named(HostBuffer& out, const ir::Buf& b,
                       const std::map<std::string, int64_t>& params, uint64_t seed,
                       const std::string& name) {
  std::mt19937_64 rng(seed ^ stable_hash(name));
  ParamEvaluator ev(params, " in the value range of buffer " + b.name, b.where);
  const ir::ValueSpec& spec = b.values;
  if (ir::is_float(b.dtype)) {
    double lo = spec.lo ? ev.eval(spec.lo).as_double() : -1.0;
    double hi = spec.hi ? ev.eval(spec.hi).as_double() : 1.0;
    if (!spec.hi && hi <= lo) hi = lo + 2.0;
    if (!spec.lo && hi <= lo) lo = hi - 2.0;
    if (hi < lo) {
      throw CompileError(ErrorStage::Interp, b.where,
                         fmt::format("empty value range [{}, {}) for buffer {}", lo, hi, b.name));
    }
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t k = 0; k < out.size(); ++k) out.set_f(k, hi == lo ? lo : dist(rng));
  } else if (b.dtype == ir::DType::Bool) {
    for (int64_t k = 0; k < out.size(); ++k) out.set_i(k, static_cast<int64_t>(rng() & 1));
  } else {
    // [lo, hi], both ends inclusive, in 128 bits: the ends of i64 do not wrap.
    using Wide = __int128;
    auto text = [](Wide v) {
      if (v == 0) return std::string("0");
      std::string s;
      bool neg = v < 0;
      for (; v != 0; v /= 10)
        s.insert(s.begin(), static_cast<char>('0' + (neg ? -(v % 10) : v % 10)));
      return neg ? "-" + s : s;
    };
    Wide lo = spec.lo ? Wide{ev.eval(spec.lo).as_int()} + (spec.lo_inclusive ? 0 : 1) : Wide{-8};
    Wide hi = spec.hi ? Wide{ev.eval(spec.hi).as_int()} - (spec.hi_inclusive ? 0 : 1) : Wide{7};
    if (!spec.hi && hi < lo) hi = lo + 15;
    if (!spec.lo && hi < lo) lo = hi - 15;
    if (hi < lo && out.size() > 0) {
      throw CompileError(
          ErrorStage::Interp, b.where,
          fmt::format("empty value range [{}, {}] for buffer {}", text(lo), text(hi), b.name));
    }
    // Bounds in params are known only now: the range must still fit the type.
    Wide type_min = b.dtype == ir::DType::I32 ? Wide{INT32_MIN} : Wide{INT64_MIN};
    Wide type_max = b.dtype == ir::DType::I32 ? Wide{INT32_MAX} : Wide{INT64_MAX};
    if (lo < type_min || hi > type_max) {
      throw CompileError(
          ErrorStage::Interp, b.where,
          fmt::format("the value range [{}, {}] of buffer {} goes beyond its type {}, which holds "
                      "{} to {}",
                      text(lo), text(hi), b.name, ir::dtype_name(b.dtype), text(type_min),
                      text(type_max)));
    }
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    for (int64_t k = 0; k < out.size(); ++k) out.set_i(k, dist(rng));
  }
  if (spec.sorted) {
    if (ir::is_float(b.dtype)) {
      std::vector<double> v(static_cast<size_t>(out.size()));
      for (int64_t k = 0; k < out.size(); ++k) v[static_cast<size_t>(k)] = out.get_f(k);
      std::sort(v.begin(), v.end());
      for (int64_t k = 0; k < out.size(); ++k) out.set_f(k, v[static_cast<size_t>(k)]);
    } else {
      std::vector<int64_t> v(static_cast<size_t>(out.size()));
      for (int64_t k = 0; k < out.size(); ++k) v[static_cast<size_t>(k)] = out.get_i(k);
      std::sort(v.begin(), v.end());
      for (int64_t k = 0; k < out.size(); ++k) out.set_i(k, v[static_cast<size_t>(k)]);
    }
  }
}

namespace {

std::vector<int64_t> unflatten(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d > 0; --d) {
    idx[d - 1] = flat % shape[d - 1];
    flat /= shape[d - 1];
  }
  return idx;
}

}  // namespace

std::map<std::string, int64_t> param_values(const ir::Func& f,
                                            const std::map<std::string, int64_t>& runtime_params) {
  std::map<std::string, int64_t> out;
  for (const ir::Param& p : f.params) {
    auto it = runtime_params.find(p.name);
    if (p.value) {
      if (it != runtime_params.end() && it->second != *p.value) {
        throw CompileError(ErrorStage::Interp, p.where,
                           fmt::format("param {} is {} at compile time; a run cannot make it {}",
                                       p.name, *p.value, it->second));
      }
      out[p.name] = *p.value;
    } else if (it != runtime_params.end()) {
      out[p.name] = it->second;
    } else {
      throw CompileError(ErrorStage::Interp, p.where,
                         fmt::format("no value for run-time param {} of {}", p.name, f.name));
    }
  }
  return out;
}

Bindings random_bindings(const ir::Func& f, const std::map<std::string, int64_t>& params,
                         uint64_t seed) {
  Bindings out;
  out.params = params;
  for (const ir::Buf& b : f.bufs) {
    if (b.kind == ir::BufKind::Temp) continue;
    HostBuffer buf(b.dtype, buffer_shape(b, params));
    if (b.kind == ir::BufKind::Input) fill_random_named(buf, b, params, seed, b.name);
    out.buffers[b.name] = std::move(buf);
  }
  return out;
}

Mismatch compare_outputs(const ir::Func& f, const Bindings& expected, const Bindings& actual,
                         double rtol, double atol) {
  std::vector<std::string> names;
  for (const ir::Buf& b : f.bufs) {
    if (b.kind == ir::BufKind::Output) names.push_back(b.name);
  }
  return compare_buffers(names, expected.buffers, actual.buffers, rtol, atol);
}

Tolerance tolerance_of(const ir::Func& f) {
  for (const ir::ScheduleCommand& c : f.schedule) {
    if (!c.is(ir::ScheduleOp::Tag) || c.args.size() < 2) continue;
    std::string tag = c.args[1].text;
    if (const ir::Knob* k = f.find_knob(tag); k && k->tag()) tag = *k->tag();
    if (tag == ir::loop_tag_name(ir::LoopTag::Mma)) return {1e-2, 1e-5};
  }
  return {};
}

Mismatch compare_outputs(const ir::Func& f, const Bindings& expected, const Bindings& actual) {
  Tolerance t = tolerance_of(f);
  return compare_outputs(f, expected, actual, t.rtol, t.atol);
}

Mismatch compare_buffers(const std::vector<std::string>& names,
                         const std::map<std::string, HostBuffer>& expected,
                         const std::map<std::string, HostBuffer>& actual, double rtol,
                         double atol) {
  Mismatch worst;      // the largest error among failing elements
  Mismatch worst_any;  // the largest error overall, reported when all pass
  for (const std::string& name : names) {
    ir::Buf b;  // only the name, for the messages below
    b.name = name;
    auto e = expected.find(b.name);
    auto a = actual.find(b.name);
    if (e == expected.end() || a == actual.end()) {
      Mismatch m;
      m.ok = false;
      m.buffer = b.name;
      m.problem =
          e == expected.end() ? "missing from the expected run" : "missing from the actual run";
      return m;
    }
    const HostBuffer& eb = e->second;
    const HostBuffer& ab = a->second;
    if (eb.shape() != ab.shape() || eb.dtype() != ab.dtype()) {
      Mismatch m;
      m.ok = false;
      m.buffer = b.name;
      m.problem = fmt::format("expected {}{}, got {}{}", ir::dtype_name(eb.dtype()),
                              detail::format_shape(eb.shape()), ir::dtype_name(ab.dtype()),
                              detail::format_shape(ab.shape()));
      return m;
    }
    bool exact = !ir::is_float(eb.dtype());
    // A float that came out of cancellation in a sum (a dot product near 0)
    // is as accurate as the sum's terms, not as itself: an element is held to
    // the larger of its own magnitude and the buffer's mean magnitude.
    double scale = 0;
    if (!exact) {
      double sum = 0;
      int64_t finite = 0;
      for (int64_t k = 0; k < eb.size(); ++k) {
        double x = eb.get_f(k);
        if (std::isfinite(x)) {
          sum += std::fabs(x);
          ++finite;
        }
      }
      scale = finite > 0 ? sum / static_cast<double>(finite) : 0;
    }
    for (int64_t k = 0; k < eb.size(); ++k) {
      double x = eb.get_f(k), y = ab.get_f(k);
      double err = 0;
      bool bad = false;
      if (exact) {
        int64_t xi = eb.get_i(k), yi = ab.get_i(k);
        bad = xi != yi;
        err = std::fabs(static_cast<double>(xi) - static_cast<double>(yi));
      } else if (std::isnan(x) || std::isnan(y)) {
        bad = std::isnan(x) != std::isnan(y);
        err = bad ? INFINITY : 0;
      } else if (x != y) {  // also covers equal infinities
        err = std::fabs(x - y);
        bad = !(err <= rtol * std::max(std::fabs(x), scale) + atol);
      }
      Mismatch& slot = bad ? worst : worst_any;
      bool first = bad ? worst.ok : worst_any.buffer.empty();
      if (first || err > slot.abs_error) {
        slot.ok = !bad;
        slot.buffer = b.name;
        slot.index = unflatten(k, eb.shape());
        slot.expected = x;
        slot.actual = y;
        slot.abs_error = err;
        slot.rel_error = x != 0 ? err / std::fabs(x) : (err != 0 ? INFINITY : 0);
      }
    }
  }
  return worst.ok ? worst_any : worst;
}

std::string Mismatch::describe() const {
  if (!problem.empty()) return buffer + ": " + problem;
  if (buffer.empty()) return "no outputs";
  std::string what =
      fmt::format("{}[{}]: expected {}, got {} (abs {}, rel {})", buffer,
                  detail::format_index(index), expected, actual, abs_error, rel_error);
  return ok ? "outputs match; largest difference " + what : what;
}

}  // namespace kiln::interp
