// Loop IR to CUDA C++ (kiln/cuda.h): kernels from GPU-tagged nests, their launch configuration,
// shared-memory temporaries and the __syncthreads() between block-level steps.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "kiln/analysis.h"
#include "kiln/cuda.h"
#include "kiln/error.h"
#include "kiln/passes/simplify.h"
#include "registers.h"

namespace kiln::cuda {
namespace {

using ir::BinaryOp;
using ir::DType;
using ir::Expr;
using ir::LoopTag;
using ir::Stmt;

bool is_block_tag(LoopTag t) {
  return t == LoopTag::GpuBlockX || t == LoopTag::GpuBlockY || t == LoopTag::GpuBlockZ;
}
bool is_thread_tag(LoopTag t) {
  return t == LoopTag::GpuThreadX || t == LoopTag::GpuThreadY || t == LoopTag::GpuThreadZ;
}
int axis_of(LoopTag t) {
  switch (t) {
    case LoopTag::GpuBlockY:
    case LoopTag::GpuThreadY:
      return 1;
    case LoopTag::GpuBlockZ:
    case LoopTag::GpuThreadZ:
      return 2;
    default:
      return 0;
  }
}
const char* axis_name(int a) { return a == 0 ? "x" : a == 1 ? "y" : "z"; }

// What one block may declare as static shared memory on every CUDA GPU.
constexpr int64_t kMaxStaticShared = 48 * 1024;

const char* ctype(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::I32:
      return "int";
    case DType::I64:
      return "long long";
    case DType::F32:
      return "float";
    case DType::F64:
      return "double";
  }
  return "?";
}

// Whether s holds a loop with a tag that satisfies pred.
bool has_loop(const Stmt& s, bool (*pred)(LoopTag)) {
  if (!s) return false;
  switch (s->kind) {
    case ir::StmtKind::For: {
      const auto& n = static_cast<const ir::For&>(*s);
      return pred(n.tag) || has_loop(n.body, pred);
    }
    case ir::StmtKind::If: {
      const auto& n = static_cast<const ir::IfThenElse&>(*s);
      return has_loop(n.then_case, pred) || has_loop(n.else_case, pred);
    }
    case ir::StmtKind::LetStmt:
      return has_loop(static_cast<const ir::LetStmt&>(*s).body, pred);
    case ir::StmtKind::Alloc:
      return has_loop(static_cast<const ir::Alloc&>(*s).body, pred);
    case ir::StmtKind::Block:
      for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts)
        if (has_loop(c, pred)) return true;
      return false;
    default:
      return false;
  }
}

// The stores of s.
void stores_of(const Stmt& s, std::vector<const ir::Store*>& out) {
  if (!s) return;
  switch (s->kind) {
    case ir::StmtKind::Store:
      out.push_back(static_cast<const ir::Store*>(s.get()));
      break;
    case ir::StmtKind::For:
      stores_of(static_cast<const ir::For&>(*s).body, out);
      break;
    case ir::StmtKind::If: {
      const auto& n = static_cast<const ir::IfThenElse&>(*s);
      stores_of(n.then_case, out);
      stores_of(n.else_case, out);
      break;
    }
    case ir::StmtKind::LetStmt:
      stores_of(static_cast<const ir::LetStmt&>(*s).body, out);
      break;
    case ir::StmtKind::Alloc:
      stores_of(static_cast<const ir::Alloc&>(*s).body, out);
      break;
    case ir::StmtKind::Block:
      for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts) stores_of(c, out);
      break;
    default:
      break;
  }
}

// The buffers an expression or statement reads and writes.
struct Effects {
  std::set<std::string> reads, writes;
  bool conflicts(const Effects& later) const {
    for (const std::string& w : writes)
      if (later.reads.count(w) || later.writes.count(w)) return true;
    for (const std::string& r : reads)
      if (later.writes.count(r)) return true;
    return false;
  }
  void add(const Effects& o) {
    reads.insert(o.reads.begin(), o.reads.end());
    writes.insert(o.writes.begin(), o.writes.end());
  }
};

class LoadCollector : public ir::StmtVisitor {
 public:
  Effects fx;

 protected:
  void visit_load(const ir::Load& n) override {
    fx.reads.insert(n.buf);
    ir::StmtVisitor::visit_load(n);
  }
  void visit_store(const ir::Store& n) override {
    fx.writes.insert(n.buf);
    if (n.atomic) fx.reads.insert(n.buf);
    ir::StmtVisitor::visit_store(n);
  }
};

Effects effects_of(const Stmt& s) {
  LoadCollector c;
  c.visit(s);
  return c.fx;
}

std::string float_literal(double v, DType t) {
  bool f32 = t == DType::F32;
  if (std::isnan(v))
    return f32 ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v)) {
    if (f32) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float((int)0xff800000u)";
    return v > 0 ? "__longlong_as_double(0x7ff0000000000000LL)"
                 : "__longlong_as_double((long long)0xfff0000000000000ULL)";
  }
  std::string s = fmt::format("{:a}", f32 ? static_cast<double>(static_cast<float>(v)) : v);
  return f32 ? s + "f" : s;
}

std::string int_literal(int64_t v, DType t) {
  if (t == DType::Bool) return v ? "true" : "false";
  if (t == DType::I32) return v == INT32_MIN ? "(-2147483647 - 1)" : fmt::format("{}", v);
  if (v == INT64_MIN) return "(-9223372036854775807LL - 1)";
  return fmt::format("{}LL", v);
}

// Helpers every program starts with: kiln's integer division and modulo (rounding down), the
// float min and max as kiln defines them, checked division, and atomic updates.
constexpr const char* kPrelude = R"(// Generated by kiln: do not edit.
template <typename T> __device__ __forceinline__ T kiln_min(T a, T b) { return b < a ? b : a; }
template <typename T> __device__ __forceinline__ T kiln_max(T a, T b) { return a < b ? b : a; }
template <typename T> __device__ __forceinline__ T kiln_floordiv(T a, T b) {
  T q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> __device__ __forceinline__ T kiln_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> __device__ __forceinline__ bool kiln_traps(T a, T b) {
  return b == 0 || (b == -1 && a == (T)((unsigned long long)1 << (sizeof(T) * 8 - 1)));
}
// Division by 0 (or of the smallest value by -1) gives 0 and records `code` in *status.
template <typename T> __device__ __forceinline__ T kiln_checked_div(T a, T b, int* status, int code) {
  if (kiln_traps(a, b)) { atomicCAS(status, 0, code); return 0; }
  return kiln_floordiv(a, b);
}
template <typename T> __device__ __forceinline__ T kiln_checked_mod(T a, T b, int* status, int code) {
  if (kiln_traps(a, b)) { atomicCAS(status, 0, code); return 0; }
  return kiln_floormod(a, b);
}
template <typename T> __device__ __forceinline__ T kiln_iabs(T a) { return a < 0 ? (T)(0 - a) : a; }
__device__ __forceinline__ unsigned kiln_to_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned long long kiln_to_bits(double v) { return (unsigned long long)__double_as_longlong(v); }
__device__ __forceinline__ unsigned kiln_to_bits(int v) { return (unsigned)v; }
__device__ __forceinline__ unsigned long long kiln_to_bits(long long v) { return (unsigned long long)v; }
__device__ __forceinline__ void kiln_from_bits(unsigned b, float* v) { *v = __uint_as_float(b); }
__device__ __forceinline__ void kiln_from_bits(unsigned long long b, double* v) { *v = __longlong_as_double((long long)b); }
__device__ __forceinline__ void kiln_from_bits(unsigned b, int* v) { *v = (int)b; }
__device__ __forceinline__ void kiln_from_bits(unsigned long long b, long long* v) { *v = (long long)b; }
// *p = f(*p, v) as one indivisible step.
template <typename T, typename F> __device__ void kiln_atomic_update(T* p, T v, F f) {
  auto* a = reinterpret_cast<decltype(kiln_to_bits(v))*>(p);
  auto old = *a, assumed = old;
  do {
    assumed = old;
    T cur;
    kiln_from_bits(assumed, &cur);
    old = atomicCAS(a, assumed, kiln_to_bits(f(cur, v)));
  } while (old != assumed);
}
__device__ __forceinline__ void kiln_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}
template <typename T> __device__ __forceinline__ void kiln_atomic_sub(T* p, T v) { kiln_atomic_add(p, (T)(0 - v)); }
template <typename T> __device__ __forceinline__ void kiln_atomic_mul(T* p, T v) {
  kiln_atomic_update(p, v, [](T a, T b) { return a * b; });
}
template <typename T> __device__ __forceinline__ void kiln_atomic_min(T* p, T v) {
  kiln_atomic_update(p, v, [](T a, T b) { return kiln_min(a, b); });
}
template <typename T> __device__ __forceinline__ void kiln_atomic_max(T* p, T v) {
  kiln_atomic_update(p, v, [](T a, T b) { return kiln_max(a, b); });
}
)";

class Writer {
 public:
  explicit Writer(const ir::LoweredFunc& f) : f_(f) {}

  Program run() {
    p_.name = f_.name;
    p_.params = f_.params;
    p_.args = f_.args;
    p_.checks = f_.checks;
    p_.fast_math = f_.fast_math;
    for (const std::string& param : f_.params) var_types_[param] = ir::kIndexType;
    for (const ir::Buf& b : f_.args)
      bufs_[b.name] = {b.dtype, b.shape, Space::Global, b.kind == ir::BufKind::Input};
    collect_temps(f_.body);
    for (const DeviceTemp& t : p_.temps) bufs_[t.name] = {t.dtype, t.shape, Space::Global, false};
    input_check_kernel();
    host(f_.body);
    p_.source = std::string(kPrelude) + "\n" + kernels_;
    return std::move(p_);
  }

 private:
  enum class Space { Global, Shared, Local };
  struct BufInfo {
    DType dtype = DType::F32;
    std::vector<Expr> shape;
    Space space = Space::Global;
    bool input = false;
  };

  [[noreturn]] void fail(const std::string& message) const {
    throw CompileError(ErrorStage::Codegen, where_, message);
  }

  // ---------------------------------------------------------------------------------------
  // Outside the kernels

  // Temporaries allocated outside every block loop live in device memory for the whole run.
  void collect_temps(const Stmt& s) {
    if (!s) return;
    switch (s->kind) {
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        p_.temps.push_back({n.buf, n.dtype, n.shape});
        collect_temps(n.body);
        break;
      }
      case ir::StmtKind::Block:
        for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts) collect_temps(c);
        break;
      case ir::StmtKind::LetStmt:
        collect_temps(static_cast<const ir::LetStmt&>(*s).body);
        break;
      case ir::StmtKind::If: {
        const auto& n = static_cast<const ir::IfThenElse&>(*s);
        collect_temps(n.then_case);
        collect_temps(n.else_case);
        break;
      }
      default:
        break;  // a loop: a kernel, whose temporaries are its own
    }
  }

  void host(const Stmt& s) {
    if (!s) return;
    switch (s->kind) {
      case ir::StmtKind::Block:
        for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts) host(c);
        return;
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        for (const Expr& e : n.shape) host_expr_ok(e, "the size of temporary " + n.buf);
        host(n.body);
        return;
      }
      case ir::StmtKind::LetStmt: {
        const auto& n = static_cast<const ir::LetStmt&>(*s);
        host_lets_.push_back({n.var, n.value});
        var_types_[n.var] = n.value->type;
        host(n.body);
        host_lets_.pop_back();
        return;
      }
      case ir::StmtKind::If: {
        const auto& n = static_cast<const ir::IfThenElse&>(*s);
        host_guards_.push_back(n.cond);
        host(n.then_case);
        host_guards_.pop_back();
        if (n.else_case) {
          host_guards_.push_back(ir::unary(ir::UnaryOp::Not, n.cond));
          host(n.else_case);
          host_guards_.pop_back();
        }
        return;
      }
      case ir::StmtKind::For: {
        const auto& n = static_cast<const ir::For&>(*s);
        if (is_block_tag(n.tag)) return kernel(s, false);
        if (has_loop(n.body, is_block_tag)) {
          if (is_thread_tag(n.tag))
            fail(
                fmt::format("loop '{}' is tagged {} outside every gpu_block loop: thread loops "
                            "go inside the block loops of their nest",
                            n.var, ir::loop_tag_name(n.tag)));
          fail(fmt::format(
              "loop '{}' runs around GPU loops: each GPU kernel is one nest whose outermost "
              "loops are tagged gpu_block; a loop around kernels (a time loop) is not supported "
              "on GPUs yet",
              n.var));
        }
        // Thread loops with no block loop around them (or block loops of one iteration, which
        // lowering leaves out): one block.
        if (is_thread_tag(n.tag) || has_loop(n.body, is_thread_tag)) return kernel(s, false);
        return kernel(s, true);
      }
      case ir::StmtKind::Store:
      case ir::StmtKind::Evaluate:
        return kernel(s, true);
    }
  }

  // The names an expression evaluated at launch (on the host) may use: the run-time params.
  void host_expr_ok(const Expr& e, const std::string& what) const {
    if (ir::reads_memory(e))
      fail(what + " reads a buffer (" + ir::to_string(e) +
           "): a GPU launch and its temporaries are sized before any kernel runs");
    for (const std::string& v : ir::free_vars(e)) {
      if (std::find(f_.params.begin(), f_.params.end(), v) == f_.params.end())
        fail(fmt::format("{} ({}) depends on '{}', not only on the run-time params", what,
                         ir::to_string(e), v));
    }
  }

  // e with the host lets around it substituted, so that it uses params only.
  Expr at_launch(const Expr& e) const {
    Expr r = e;
    for (auto it = host_lets_.rbegin(); it != host_lets_.rend(); ++it)
      r = ir::substitute(r, {{it->first, it->second}});
    return r;
  }

  // ---------------------------------------------------------------------------------------
  // One kernel

  std::string kernel_params() const {
    std::vector<std::string> ps;
    for (const std::string& p : f_.params) ps.push_back("long long v_" + p);
    for (const ir::Buf& b : f_.args)
      ps.push_back(fmt::format("{}{}* __restrict__ b_{}",
                               b.kind == ir::BufKind::Input ? "const " : "", ctype(b.dtype),
                               b.name));
    for (const DeviceTemp& t : p_.temps)
      ps.push_back(fmt::format("{}* __restrict__ b_{}", ctype(t.dtype), t.name));
    ps.push_back("int* __restrict__ kiln_status");
    return fmt::format("{}", fmt::join(ps, ", "));
  }

  bool has_input_checks() const {
    return std::any_of(f_.checks.begin(), f_.checks.end(), [](const ir::RuntimeCheck& c) {
      return c.kind == ir::RuntimeCheck::Kind::InputSpec;
    });
  }

  // Inputs whose values index buffers or bound loops are checked against their value spec by a
  // first kernel; every later kernel returns at once when one failed.
  void input_check_kernel() {
    if (!has_input_checks()) return;
    std::string name = f_.name + "_check";
    std::string body;
    for (size_t k = 0; k < f_.checks.size(); ++k) {
      const ir::RuntimeCheck& c = f_.checks[k];
      if (c.kind != ir::RuntimeCheck::Kind::InputSpec) continue;
      const BufInfo& b = bufs_.at(c.subject);
      Expr size = ir::int_imm(1);
      for (const Expr& e : b.shape) size = size * e;
      std::vector<std::string> bad;
      if (c.lo) bad.push_back("v < (" + expr(c.lo) + ")");
      if (c.hi) bad.push_back("v > (" + expr(c.hi) + ")");
      if (c.sorted) bad.push_back(fmt::format("(e > 0 && v < (long long)b_{}[e - 1])", c.subject));
      if (bad.empty()) continue;
      body += fmt::format(
          "  for (long long e = kiln_g; e < {}; e += kiln_gs) {{\n"
          "    const long long v = (long long)b_{}[e];\n"
          "    if ({}) {{ atomicCAS(kiln_status, 0, {}); break; }}\n"
          "  }}\n",
          expr(size), c.subject, fmt::join(bad, " || "), ir::kStatusCheckBase + k);
    }
    kernels_ += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
        "  const long long kiln_g = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  const long long kiln_gs = (long long)gridDim.x * blockDim.x;\n{}}}\n\n",
        name, kernel_params(), body);
    p_.launches.push_back(
        {name, {ir::int_imm(512), ir::int_imm(1), ir::int_imm(1)}, {256, 1, 1}, 0});
  }

  void line(const std::string& text) { body_ += std::string(indent_ * 2, ' ') + text + "\n"; }

  void kernel(const Stmt& root, bool single) {
    std::string name = fmt::format("{}_k{}", f_.name, kernel_count_++);
    body_.clear();
    shared_decls_.clear();
    shared_bytes_ = 0;
    block_dims_ = {1, 1, 1};
    guards_.clear();
    known_.clear();
    indent_ = 1;
    pending_ = {};
    std::array<Expr, 3> grid{ir::int_imm(1), ir::int_imm(1), ir::int_imm(1)};
    if (has_input_checks()) line("if (*kiln_status != 0) return;");
    for (const auto& [v, value] : host_lets_)
      line(fmt::format("const {} v_{} = {};", ctype(value->type), v, expr(value)));
    for (const Expr& g : host_guards_) line("if (!(" + expr(g) + ")) return;");
    if (single) {
      p_.notes.push_back(
          fmt::format("{}: a loop nest with no GPU tag runs as one GPU thread ({}); tag its loops "
                      "gpu_block and gpu_thread to spread it over the GPU",
                      name, describe_root(root)));
      thread(unroll_constant_loops(root));
    } else {
      Stmt s = root;
      std::set<int> axes;
      while (s) {
        if (s->kind == ir::StmtKind::LetStmt) {
          const auto& l = static_cast<const ir::LetStmt&>(*s);
          let_line(l.var, l.value);
          s = l.body;
          continue;
        }
        const ir::For* n = ir::as<ir::For>(s);
        if (!n || !is_block_tag(n->tag)) break;
        int a = axis_of(n->tag);
        if (!axes.insert(a).second)
          fail(
              fmt::format("two loops of one kernel are tagged gpu_block_{}: loop '{}' is the "
                          "second",
                          axis_name(a), n->var));
        Expr extent = extent_of(*n);
        Expr launch = at_launch(extent);
        bool exact = !ir::reads_memory(launch) && uses_params_only(launch);
        bool guard = false;
        if (!exact) {
          passes::Interval r = passes::range_of(extent, known_);
          if (!r.max)
            fail(
                fmt::format("the extent of gpu_block loop '{}' ({}) depends on enclosing loops "
                            "and has no constant bound: the grid is sized before the kernel runs",
                            n->var, ir::to_string(extent)));
          launch = ir::int_imm(*r.max);
          guard = true;
        }
        grid[a] = launch;
        line(fmt::format("const long long v_{} = {} + (long long)blockIdx.{} * {};", n->var,
                         expr(n->min), axis_name(a), n->step));
        var_types_[n->var] = ir::kIndexType;
        if (guard) line(fmt::format("if (!(v_{} < {})) return;", n->var, expr(n->end)));
        bind_range(*n);
        s = n->body;
      }
      block_scope(s);
    }
    int64_t threads = block_dims_[0] * block_dims_[1] * block_dims_[2];
    if (threads > 1024)
      fail(
          fmt::format("kernel {} needs {} threads per block ({} x {} x {}); a GPU block has at "
                      "most 1024: split its thread loops by smaller factors",
                      name, threads, block_dims_[0], block_dims_[1], block_dims_[2]));
    if (shared_bytes_ > kMaxStaticShared)
      fail(
          fmt::format("kernel {} needs {} bytes of shared memory per block; a block has at most "
                      "{} bytes of static shared memory: stage smaller tiles",
                      name, shared_bytes_, kMaxStaticShared));
    for (const Expr& g : grid) postfix(g);  // refused here, not where it is launched
    // A thread loop needs its bound check only when the block is wider than its extent.
    for (const auto& [marker, g] : guards_) {
      bool needed = !(g.constant && *g.constant == block_dims_[g.axis]);
      std::string text = needed ? fmt::format("if (v_{} < {}) ", g.var, g.end) : "";
      for (size_t at = body_.find(marker); at != std::string::npos; at = body_.find(marker))
        body_.replace(at, marker.size(), text);
    }
    kernels_ += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{\n",
                            threads, name, kernel_params());
    kernels_ += shared_decls_;
    kernels_ +=
        "  [[maybe_unused]] const int kiln_tid = threadIdx.x + blockDim.x * (threadIdx.y + "
        "blockDim.y * threadIdx.z);\n"
        "  [[maybe_unused]] const int kiln_nthreads = blockDim.x * blockDim.y * blockDim.z;\n";
    kernels_ += body_ + "}\n\n";
    p_.launches.push_back({name, grid, block_dims_, shared_bytes_});
  }

  std::string describe_root(const Stmt& s) const {
    if (const ir::For* n = ir::as<ir::For>(s)) return "loop '" + n->var + "'";
    std::string c = ir::first_stored_computation(s);
    return c.empty() ? "a statement" : "computation " + c;
  }

  bool uses_params_only(const Expr& e) const {
    for (const std::string& v : ir::free_vars(e))
      if (std::find(f_.params.begin(), f_.params.end(), v) == f_.params.end()) return false;
    return true;
  }

  static Expr extent_of(const ir::For& n) {
    Expr d = n.end - n.min;
    if (n.step != 1)
      d = ir::binary(BinaryOp::Div, d + ir::int_imm(n.step - 1), ir::int_imm(n.step));
    return passes::simplify(d);
  }

  void bind_range(const ir::For& n) {
    passes::Interval lo = passes::range_of(n.min, known_), hi = passes::range_of(n.end, known_);
    passes::Interval r;
    r.min = lo.min;
    if (hi.max) r.max = *hi.max - 1;
    known_[n.var] = r;
  }

  // e with the lets in scope substituted: extents that are constants in disguise
  // (`licm_var_2 - licm_var_1`) become constants.
  Expr expand_lets(const Expr& e) const {
    Expr r = e;
    for (int round = 0; round < 32; ++round) {
      std::map<std::string, Expr> sub;
      for (const std::string& v : ir::free_vars(r)) {
        auto it = let_values_.find(v);
        if (it != let_values_.end()) sub[v] = it->second;
      }
      if (sub.empty()) break;
      r = ir::substitute(r, sub);
    }
    return passes::simplify(r);
  }

  void let_line(const std::string& v, const Expr& value) {
    if (ir::is_int(value->type) && !ir::reads_memory(value))
      let_values_[v] = value;
    else
      let_values_.erase(v);
    var_types_[v] = value->type;
    line(fmt::format("const {} v_{} = {};", ctype(value->type), v, expr(value)));
    if (ir::is_int(value->type)) known_[v] = passes::range_of(value, known_);
  }

  // ---------------------------------------------------------------------------------------
  // Inside the block loops, outside the thread loops: what runs once per block.

  void sync_before(const Effects& fx) {
    if (pending_.conflicts(fx)) {
      line("__syncthreads();");
      pending_ = {};
    }
    pending_.add(fx);
  }

  // Effects on memory more than one thread of a block sees (not per-thread locals).
  Effects shared_effects(const Stmt& s) const {
    Effects all = effects_of(s), out;
    for (const std::string& r : all.reads)
      if (space_of(r) != Space::Local) out.reads.insert(r);
    for (const std::string& w : all.writes)
      if (space_of(w) != Space::Local) out.writes.insert(w);
    return out;
  }

  Space space_of(const std::string& buf) const {
    auto it = bufs_.find(buf);
    return it == bufs_.end() ? Space::Global : it->second.space;
  }

  void block_scope(const Stmt& s) {
    if (!s) return;
    switch (s->kind) {
      case ir::StmtKind::Block:
        for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts) block_scope(c);
        return;
      case ir::StmtKind::LetStmt: {
        const auto& n = static_cast<const ir::LetStmt&>(*s);
        let_line(n.var, n.value);
        block_scope(n.body);
        return;
      }
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        declare(n, n.loc == ir::MemLoc::GpuLocal ? Space::Local : Space::Shared);
        block_scope(n.body);
        return;
      }
      case ir::StmtKind::If: {
        const auto& n = static_cast<const ir::IfThenElse&>(*s);
        sync_before(
            Effects{effects_of(ir::Stmt(std::make_shared<ir::Evaluate>(n.cond))).reads, {}});
        Effects before = pending_;
        line("if (" + expr(n.cond) + ") {");
        ++indent_;
        block_scope(n.then_case);
        --indent_;
        Effects after = pending_;
        if (n.else_case) {
          pending_ = before;
          line("} else {");
          ++indent_;
          block_scope(n.else_case);
          --indent_;
          after.add(pending_);
        } else {
          after.add(before);
        }
        line("}");
        pending_ = after;
        return;
      }
      case ir::StmtKind::For: {
        const auto& n = static_cast<const ir::For&>(*s);
        check_tag(n);
        if (is_thread_tag(n.tag)) {
          sync_before(shared_effects(s));
          return thread_loop(n);
        }
        if (has_loop(n.body, is_thread_tag)) return structural_loop(n);
        return block_level_nest(s);
      }
      case ir::StmtKind::Store: {
        const auto& n = static_cast<const ir::Store&>(*s);
        sync_before(shared_effects(s));
        if (space_of(n.buf) == Space::Local) return thread(s);
        line("if (kiln_tid == 0) {");
        ++indent_;
        thread(s);
        --indent_;
        line("}");
        return;
      }
      case ir::StmtKind::Evaluate:
        sync_before(shared_effects(s));
        return thread(s);
    }
  }

  // A serial loop with thread loops inside: every thread runs it, and the block's threads meet
  // at its __syncthreads() (its bounds depend on block indices only, so they agree).
  void structural_loop(const ir::For& n) {
    Effects body_fx = shared_effects(n.body);
    Effects before = pending_;
    line(fmt::format("for (long long v_{0} = {1}; v_{0} < {2}; v_{0} += {3}) {{", n.var,
                     expr(n.min), expr(n.end), n.step));
    var_types_[n.var] = ir::kIndexType;
    bind_range(n);
    ++indent_;
    block_scope(n.body);
    // The next iteration's first steps must not overtake this one's last.
    bool end_sync = pending_.conflicts(body_fx);
    if (end_sync) line("__syncthreads();");
    --indent_;
    line("}");
    known_.erase(n.var);
    pending_ = before;
    if (!end_sync) pending_.add(body_fx);
  }

  // A nest with no thread loop, at block level. A copy into a temporary (a cache fill) is
  // shared among the block's threads; code that writes only per-thread locals runs in every
  // thread; anything else runs in the block's first thread.
  void block_level_nest(const Stmt& s) {
    sync_before(shared_effects(s));
    std::vector<const ir::Store*> stores;
    stores_of(s, stores);
    bool local_only = std::all_of(stores.begin(), stores.end(), [&](const ir::Store* st) {
      return space_of(st->buf) == Space::Local;
    });
    if (local_only) return thread(s);
    bool copy = std::all_of(stores.begin(), stores.end(), [&](const ir::Store* st) {
      return !st->atomic && st->comp.size() > 5 &&
             st->comp.compare(st->comp.size() - 5, 5, "_fill") == 0;
    });
    if (copy) return distributed(s);
    const auto& n = static_cast<const ir::For&>(*s);
    p_.notes.push_back(fmt::format(
        "loop '{}' ({}) is inside the gpu_block loops but outside every thread loop: it runs on "
        "one thread of each block; tag a loop of it gpu_thread",
        n.var, describe_root(n.body)));
    line("if (kiln_tid == 0) {");
    ++indent_;
    thread(s);
    --indent_;
    line("}");
  }

  // The iterations of a perfect nest of loops, each with bounds the nest does not change,
  // dealt out to the block's threads in turn: thread t takes t, t + threads, ...
  void distributed(const Stmt& s) {
    std::vector<const ir::For*> chain;
    std::vector<const ir::LetStmt*> lets, pending;  // lets between the loops, bound once the
    std::set<std::string> chain_vars;               // indices are known
    Stmt body = s;
    for (;;) {
      if (const ir::LetStmt* l = ir::as<ir::LetStmt>(body); l && !chain.empty()) {
        pending.push_back(l);
        body = l->body;
        continue;
      }
      const ir::For* n = ir::as<ir::For>(body);
      if (!n || n->tag == LoopTag::Parallel) break;
      std::set<std::string> defined = chain_vars;
      for (const ir::LetStmt* l : pending) defined.insert(l->var);
      bool uniform = true;
      for (const Expr& e : {n->min, n->end})
        for (const std::string& v : ir::free_vars(e)) uniform = uniform && !defined.count(v);
      if (!uniform) break;
      lets.insert(lets.end(), pending.begin(), pending.end());
      pending.clear();
      chain_vars = std::move(defined);
      chain.push_back(n);
      chain_vars.insert(n->var);
      body = n->body;
    }
    body = chain.back()->body;  // with the lets after the last loop
    int id = copy_count_++;
    line("{");
    ++indent_;
    std::vector<std::string> extents;
    for (size_t k = 0; k < chain.size(); ++k) {
      std::string e = fmt::format("kiln_e{}_{}", id, k);
      Expr extent = expand_lets(extent_of(*chain[k]));
      if (const ir::IntImm* c = ir::as<ir::IntImm>(extent))
        line(fmt::format("constexpr long long {} = {};", e, std::max<int64_t>(c->value, 0)));
      else
        line(fmt::format("const long long {} = kiln_max({}, 0LL);", e, expr(extent)));
      extents.push_back(e);
    }
    line(
        fmt::format("for (long long kiln_c{0} = kiln_tid; kiln_c{0} < {1}; kiln_c{0} += "
                    "kiln_nthreads) {{",
                    id, fmt::join(extents, " * ")));
    ++indent_;
    line(fmt::format("long long kiln_r{0} = kiln_c{0};", id));
    for (size_t k = chain.size(); k-- > 0;) {
      const ir::For& n = *chain[k];
      var_types_[n.var] = ir::kIndexType;
      if (k > 0) {
        line(fmt::format("const long long v_{} = {} + (kiln_r{} % {}) * {};", n.var, expr(n.min),
                         id, extents[k], n.step));
        line(fmt::format("kiln_r{0} /= {1};", id, extents[k]));
      } else {
        line(fmt::format("const long long v_{} = {} + kiln_r{} * {};", n.var, expr(n.min), id,
                         n.step));
      }
      bind_range(n);
    }
    for (const ir::LetStmt* l : lets) let_line(l->var, l->value);
    thread(unroll_constant_loops(body));
    for (const ir::For* n : chain) known_.erase(n->var);
    --indent_;
    line("}");
    --indent_;
    line("}");
  }

  // ---------------------------------------------------------------------------------------
  // Inside a thread loop (or a one-thread kernel): plain code for one thread.

  // Below the block loops: no CPU tag, and no block tag either.
  void check_tag(const ir::For& n) const {
    if (n.tag == LoopTag::Parallel)
      fail(
          fmt::format("loop '{}' is tagged parallel, a CPU tag: on a GPU target tag it "
                      "gpu_block_x/y/z or gpu_thread_x/y/z",
                      n.var));
    if (is_block_tag(n.tag))
      fail(
          fmt::format("loop '{}' is tagged {} but is not one of the outermost loops of its "
                      "kernel: gpu_block loops must be perfectly nested at the top of a nest",
                      n.var, ir::loop_tag_name(n.tag)));
  }

  void thread_loop(const ir::For& n) {
    int a = axis_of(n.tag);
    if (thread_axes_.count(a))
      fail(
          fmt::format("loop '{}' is tagged {} inside another loop tagged gpu_thread_{}: each "
                      "thread axis binds one loop of a nest",
                      n.var, ir::loop_tag_name(n.tag), axis_name(a)));
    Expr extent = expand_lets(extent_of(n));
    passes::Interval r = passes::range_of(extent, known_);
    if (!r.max)
      fail(
          fmt::format("the extent of gpu_thread loop '{}' ({}) has no constant bound: the "
                      "threads of a block are fixed when the kernel is compiled; split the loop "
                      "by a constant and tag the inner one",
                      n.var, ir::to_string(extent)));
    int64_t width = std::max<int64_t>(*r.max, 1);
    block_dims_[a] = std::max(block_dims_[a], width);
    std::string marker = fmt::format("@@GUARD{}@@", guard_count_++);
    Guard g{n.var, expr(n.end), a, std::nullopt};
    if (const ir::IntImm* c = ir::as<ir::IntImm>(extent)) g.constant = c->value;
    guards_.emplace_back(marker, g);
    line("{");
    ++indent_;
    line(fmt::format("const long long v_{} = {} + (long long)threadIdx.{} * {};", n.var,
                     expr(n.min), axis_name(a), n.step));
    var_types_[n.var] = ir::kIndexType;
    bind_range(n);
    line(marker + "{");
    ++indent_;
    thread_axes_.insert(a);
    thread(unroll_constant_loops(n.body));
    thread_axes_.erase(a);
    known_.erase(n.var);
    --indent_;
    line("}");
    --indent_;
    line("}");
  }

  void declare(const ir::Alloc& n, Space space) {
    int64_t count = 1;
    for (const Expr& e : n.shape) {
      std::optional<int64_t> v = ir::eval_int(e, {});
      if (!v)
        fail(
            fmt::format("temporary {} ({}) has size {} inside a GPU kernel: shared and "
                        "per-thread temporaries need sizes known at compile time",
                        n.buf, ir::mem_loc_name(n.loc), ir::to_string(e)));
      count *= std::max<int64_t>(*v, 0);
    }
    bufs_[n.buf] = {n.dtype, n.shape, space, false};
    if (space == Space::Shared) {
      int64_t bytes = count * static_cast<int64_t>(ir::dtype_bytes(n.dtype));
      shared_bytes_ += bytes;
      shared_decls_ += fmt::format("  __shared__ {} b_{}[{}];\n", ctype(n.dtype), n.buf,
                                   std::max<int64_t>(count, 1));
    } else {
      line(fmt::format("{} b_{}[{}];", ctype(n.dtype), n.buf, std::max<int64_t>(count, 1)));
    }
  }

  void thread(const Stmt& s) {
    if (!s) return;
    switch (s->kind) {
      case ir::StmtKind::Block:
        for (const Stmt& c : static_cast<const ir::Block&>(*s).stmts) thread(c);
        return;
      case ir::StmtKind::LetStmt: {
        const auto& n = static_cast<const ir::LetStmt&>(*s);
        line("{");
        ++indent_;
        let_line(n.var, n.value);
        thread(n.body);
        --indent_;
        line("}");
        return;
      }
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        if (n.loc == ir::MemLoc::GpuShared)
          fail(
              fmt::format("temporary {} is gpu_shared but allocated inside a thread loop, where "
                          "each thread would have its own: allocate it outside the thread loops "
                          "(cache_identity at a loop outside them)",
                          n.buf));
        line("{");
        ++indent_;
        declare(n, Space::Local);
        thread(n.body);
        --indent_;
        line("}");
        return;
      }
      case ir::StmtKind::If: {
        const auto& n = static_cast<const ir::IfThenElse&>(*s);
        line("if (" + expr(n.cond) + ") {");
        ++indent_;
        thread(n.then_case);
        --indent_;
        if (n.else_case) {
          line("} else {");
          ++indent_;
          thread(n.else_case);
          --indent_;
        }
        line("}");
        return;
      }
      case ir::StmtKind::For: {
        const auto& n = static_cast<const ir::For&>(*s);
        check_tag(n);
        if (is_thread_tag(n.tag)) return thread_loop(n);
        // Elements the loop keeps updating stay in registers while it runs.
        if (Stmt kept = keep_accumulators_in_registers(
                s,
                [&](const std::string& b) {
                  auto it = bufs_.find(b);
                  return it == bufs_.end() || it->second.space == Space::Local
                             ? std::nullopt
                             : std::optional<DType>(it->second.dtype);
                },
                [&] { return fmt::format("kiln_acc{}", acc_count_++); });
            kept != s)
          return thread(kept);
        if (n.tag == LoopTag::Unroll || n.tag == LoopTag::UnrollExplicit) line("#pragma unroll");
        line(fmt::format("for (long long v_{0} = {1}; v_{0} < {2}; v_{0} += {3}) {{", n.var,
                         expr(n.min), expr(n.end), n.step));
        var_types_[n.var] = ir::kIndexType;
        bind_range(n);
        ++indent_;
        thread(n.body);
        --indent_;
        known_.erase(n.var);
        line("}");
        return;
      }
      case ir::StmtKind::Store:
        return store(static_cast<const ir::Store&>(*s));
      case ir::StmtKind::Evaluate:
        line("(void)(" + expr(static_cast<const ir::Evaluate&>(*s).value) + ");");
        return;
    }
  }

  std::string element(const std::string& buf, const std::vector<Expr>& indices) {
    auto it = bufs_.find(buf);
    if (it == bufs_.end()) fail("access to unknown buffer " + buf);
    const std::vector<Expr>& shape = it->second.shape;
    if (indices.size() != shape.size())
      fail(fmt::format("access to {} with {} indices; it has {} dimensions", buf, indices.size(),
                       shape.size()));
    if (indices.empty()) return "b_" + buf + "[0]";
    std::string flat = expr(indices[0]);
    for (size_t d = 1; d < indices.size(); ++d)
      flat = fmt::format("({}) * ({}) + ({})", flat, expr(shape[d]), expr(indices[d]));
    return fmt::format("b_{}[{}]", buf, flat);
  }

  void store(const ir::Store& n) {
    std::string saved = storing_;
    storing_ = n.comp;
    std::string target = element(n.buf, n.indices);
    std::string value = expr(n.value);
    storing_ = saved;
    if (!n.atomic) {
      line(fmt::format("{} = {};", target, value));
      return;
    }
    DType t = bufs_.at(n.buf).dtype;
    const char* op = nullptr;
    switch (*n.atomic) {
      case BinaryOp::Add:
        op = "add";
        break;
      case BinaryOp::Sub:
        op = "sub";
        break;
      case BinaryOp::Mul:
        op = "mul";
        break;
      case BinaryOp::Min:
        op = "min";
        break;
      case BinaryOp::Max:
        op = "max";
        break;
      default:
        fail(fmt::format("atomic update {} of {} has no GPU form", ir::binary_op_symbol(*n.atomic),
                         n.buf));
    }
    if (t == DType::Bool) fail("atomic update of bool buffer " + n.buf + " has no GPU form");
    line(fmt::format("kiln_atomic_{}(&{}, ({})({}));", op, target, ctype(t), value));
  }

  // ---------------------------------------------------------------------------------------
  // Expressions, fully parenthesized

  int32_t arith_status() const {
    for (size_t k = 0; k < f_.checks.size(); ++k) {
      const ir::RuntimeCheck& c = f_.checks[k];
      if (c.kind == ir::RuntimeCheck::Kind::Arithmetic && c.subject == storing_ &&
          !storing_.empty())
        return ir::kStatusCheckBase + static_cast<int32_t>(k);
    }
    return ir::kStatusArith;
  }

  std::string expr(const Expr& e) {
    switch (e->kind) {
      case ir::ExprKind::IntImm:
        return int_literal(static_cast<const ir::IntImm&>(*e).value, e->type);
      case ir::ExprKind::FloatImm:
        return float_literal(static_cast<const ir::FloatImm&>(*e).value, e->type);
      case ir::ExprKind::Var: {
        const auto& n = static_cast<const ir::Var&>(*e);
        auto it = var_types_.find(n.name);
        DType declared = it == var_types_.end() ? ir::kIndexType : it->second;
        if (declared == e->type) return "v_" + n.name;
        return fmt::format("(({})v_{})", ctype(e->type), n.name);
      }
      case ir::ExprKind::Cast: {
        const auto& n = static_cast<const ir::Cast&>(*e);
        if (e->type == DType::Bool) return "((" + expr(n.value) + ") != 0)";
        return fmt::format("(({})({}))", ctype(e->type), expr(n.value));
      }
      case ir::ExprKind::Unary: {
        const auto& n = static_cast<const ir::Unary&>(*e);
        if (n.op == ir::UnaryOp::Not) return "(!(" + expr(n.a) + "))";
        if (ir::is_float(e->type)) return "(-(" + expr(n.a) + "))";
        return fmt::format("(({})(0 - ({})))", ctype(e->type), expr(n.a));
      }
      case ir::ExprKind::Binary:
        return binary(static_cast<const ir::Binary&>(*e));
      case ir::ExprKind::Select: {
        const auto& n = static_cast<const ir::Select&>(*e);
        return fmt::format("(({}) ? ({}) : ({}))", expr(n.cond), expr(n.t), expr(n.f));
      }
      case ir::ExprKind::Call:
        return call(static_cast<const ir::Call&>(*e));
      case ir::ExprKind::Access:
        fail("read of computation " + static_cast<const ir::Access&>(*e).comp + " in loop IR");
      case ir::ExprKind::Load: {
        const auto& n = static_cast<const ir::Load&>(*e);
        std::string el = element(n.buf, n.indices);
        DType t = bufs_.at(n.buf).dtype;
        return t == e->type ? el : fmt::format("(({}){})", ctype(e->type), el);
      }
      case ir::ExprKind::Let: {
        const auto& n = static_cast<const ir::Let&>(*e);
        std::string value = expr(n.value);
        var_types_[n.var] = n.value->type;
        return fmt::format("([&]() {{ const {} v_{} = {}; return ({}); }}())", ctype(n.value->type),
                           n.var, value, expr(n.body));
      }
    }
    fail("unknown expression kind");
  }

  std::string binary(const ir::Binary& n) {
    std::string a = expr(n.a), b = expr(n.b);
    DType t = n.a->type;
    switch (n.op) {
      case BinaryOp::Add:
      case BinaryOp::Sub:
      case BinaryOp::Mul:
      case BinaryOp::Lt:
      case BinaryOp::Le:
      case BinaryOp::Gt:
      case BinaryOp::Ge:
      case BinaryOp::Eq:
      case BinaryOp::Ne:
      case BinaryOp::And:
      case BinaryOp::Or: {
        const char* sym = n.op == BinaryOp::And  ? "&&"
                          : n.op == BinaryOp::Or ? "||"
                                                 : ir::binary_op_symbol(n.op);
        if (t == DType::I32 &&
            (n.op == BinaryOp::Add || n.op == BinaryOp::Sub || n.op == BinaryOp::Mul))
          return fmt::format("((int)((unsigned)({}) {} (unsigned)({})))", a, sym, b);
        return fmt::format("(({}) {} ({}))", a, sym, b);
      }
      case BinaryOp::Min:
        return fmt::format("kiln_min<{}>({}, {})", ctype(t), a, b);
      case BinaryOp::Max:
        return fmt::format("kiln_max<{}>({}, {})", ctype(t), a, b);
      case BinaryOp::Div:
      case BinaryOp::Mod: {
        bool div = n.op == BinaryOp::Div;
        if (ir::is_float(t)) {
          if (div) return fmt::format("(({}) / ({}))", a, b);
          return fmt::format("{}({}, {})", t == DType::F32 ? "fmodf" : "fmod", a, b);
        }
        if (ir::traps(n))
          return fmt::format("kiln_checked_{}<{}>({}, {}, kiln_status, {})", div ? "div" : "mod",
                             ctype(t), a, b, arith_status());
        return fmt::format("kiln_floor{}<{}>({}, {})", div ? "div" : "mod", ctype(t), a, b);
      }
    }
    fail("unknown binary operator");
  }

  std::string call(const ir::Call& n) {
    size_t arity = 0;
    if (!ir::is_math_intrinsic(n.name, &arity) || n.args.size() != arity)
      fail("call of unknown function " + n.name);
    DType t = n.args[0]->type;
    std::vector<std::string> args;
    for (const Expr& a : n.args) args.push_back(expr(a));
    if (ir::is_int(t) || t == DType::Bool) {
      if (n.name == "abs") return fmt::format("kiln_iabs<{}>({})", ctype(t), args[0]);
      if (n.name == "floor" || n.name == "ceil") return args[0];
      std::vector<std::string> d;
      for (const std::string& a : args) d.push_back("(double)(" + a + ")");
      std::string fn = n.name == "abs" ? "fabs" : n.name;
      return fmt::format("(({})({}({})))", ctype(n.type), fn, fmt::join(d, ", "));
    }
    std::string fn = n.name == "abs" ? "fabs" : n.name;
    if (t == DType::F32) fn += "f";
    return fmt::format("{}({})", fn, fmt::join(args, ", "));
  }

  struct Guard {
    std::string var, end;
    int axis = 0;
    std::optional<int64_t> constant;
  };

  const ir::LoweredFunc& f_;
  SourceLoc where_ = f_.where;
  Program p_;
  std::map<std::string, BufInfo> bufs_;
  std::map<std::string, DType> var_types_;
  std::map<std::string, Expr> let_values_;  // integer lets emitted so far, for expand_lets
  std::vector<std::pair<std::string, Expr>> host_lets_;
  std::vector<Expr> host_guards_;
  std::string kernels_;
  // The kernel being written
  std::string body_, shared_decls_;
  int indent_ = 1;
  int64_t shared_bytes_ = 0;
  std::array<int64_t, 3> block_dims_{1, 1, 1};
  std::vector<std::pair<std::string, Guard>> guards_;
  std::set<int> thread_axes_;
  passes::Bounds known_;
  Effects pending_;  // what the block's threads did since the last __syncthreads()
  std::string storing_;
  int kernel_count_ = 0, guard_count_ = 0, copy_count_ = 0, acc_count_ = 0;
};

}  // namespace

Program generate(const ir::LoweredFunc& f) { return Writer(f).run(); }

std::string describe_launches(const Program& p) {
  std::string out;
  for (const DeviceTemp& t : p.temps) {
    std::vector<std::string> dims;
    for (const Expr& e : t.shape) dims.push_back(ir::to_string(e));
    out += fmt::format("// temporary {}: {}[{}] in device memory\n", t.name,
                       ir::dtype_name(t.dtype), fmt::join(dims, ", "));
  }
  for (const Launch& l : p.launches) {
    out += fmt::format(
        "// launch {}: grid ({}, {}, {}), block ({}, {}, {}), {} bytes of shared memory\n",
        l.kernel, ir::to_string(l.grid[0]), ir::to_string(l.grid[1]), ir::to_string(l.grid[2]),
        l.block[0], l.block[1], l.block[2], l.shared_bytes);
  }
  for (const std::string& n : p.notes) out += "// note: " + n + "\n";
  return out;
}

}  // namespace kiln::cuda
