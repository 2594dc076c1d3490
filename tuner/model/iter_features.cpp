// Iter features: the loops a point lowers to, as numbers a cost model reads (kiln/cost_model.h).
#include <algorithm>
#include <cmath>
#include <set>

#include "kiln/analysis.h"
#include "kiln/cost_model.h"
#include "kiln/cuda.h"
#include "kiln/loop_ir.h"

namespace kiln::tuner {
namespace {

float log1p2(double x) { return static_cast<float>(std::log2(1.0 + std::max(0.0, x))); }

// Floating-point and integer operations in an expression.
struct OpCount : ir::IRVisitor {
  double float_ops = 0, int_ops = 0;
  void visit_binary(const ir::Binary& n) override {
    (ir::is_float(n.a->type) ? float_ops : int_ops) += 1;
    IRVisitor::visit_binary(n);
  }
  void visit_call(const ir::Call& n) override {
    float_ops += 1;
    IRVisitor::visit_call(n);
  }
  void visit_select(const ir::Select& n) override {
    int_ops += 1;
    IRVisitor::visit_select(n);
  }
};

// Buffer reads (Load) in an expression, with their indices.
struct Loads : ir::IRVisitor {
  std::vector<std::pair<std::string, std::vector<ir::Expr>>> found;
  void visit_load(const ir::Load& n) override {
    found.push_back({n.buf, n.indices});
    IRVisitor::visit_load(n);
  }
};

struct Access {
  std::string buf;
  std::vector<ir::Expr> indices;
};

// One loop as the walk met it.
struct LoopInfo {
  std::string var;
  int64_t extent = 1;
  ir::LoopTag tag = ir::LoopTag::None;
  double float_ops = 0, int_ops = 0;  // in its body, once per iteration of the loop
  std::vector<Access> accesses;       // in its body
  std::vector<std::string> inner;     // the loops inside it
  std::vector<int64_t> inner_extent;
};

// Whether s has a loop tagged gpu_block or gpu_thread.
bool has_gpu_loop(const ir::Stmt& s) {
  struct Find : ir::StmtVisitor {
    bool found = false;
    void visit_for(const ir::For& f) override {
      found = found || ir::is_gpu_tag(f.tag);
      if (!found) ir::StmtVisitor::visit_for(f);
    }
  } find;
  find.visit(s);
  return find.found;
}

class Walker : public ir::StmtVisitor {
 public:
  // `gpu`: the loops are a GPU func's (they have GPU loops), whose temporaries get their places.
  Walker(std::map<std::string, int64_t> env, bool gpu) : env_(std::move(env)), gpu_(gpu) {}
  std::vector<LoopInfo> loops;
  std::map<std::string, std::vector<ir::Expr>> shapes;
  // Where a temporary lives on a GPU: 1 a block's shared memory, 2 a thread's own.
  std::map<std::string, float> gpu_level;

 protected:
  void visit_for(const ir::For& n) override {
    // An extent with the outer loop variables at 0: exact for rectangular
    // nests, an estimate for a tile's tail.
    std::optional<int64_t> lo = ir::eval_int(n.min, env_), hi = ir::eval_int(n.end, env_);
    LoopInfo info;
    info.var = n.var;
    info.extent = lo && hi ? std::max<int64_t>(1, (*hi - *lo + n.step - 1) / n.step) : 1;
    info.tag = n.tag;
    size_t me = loops.size();
    loops.push_back(info);
    for (size_t open : open_) {
      loops[open].inner.push_back(n.var);
      loops[open].inner_extent.push_back(info.extent);
    }
    open_.push_back(me);
    env_[n.var] = lo.value_or(0);
    const int blocks = blocks_, threads = threads_;
    const bool gpu_kernel = gpu_kernel_, serial = serial_;
    const bool gpu_loop = ir::is_gpu_tag(n.tag);
    if (open_.size() == 1)  // a kernel's outermost loop
      gpu_kernel_ = gpu_loop || has_gpu_loop(n.body);
    // A nest with no GPU loop inside a kernel's GPU loops runs as code of a thread (the block's
    // threads share out a fill's iterations, or one thread runs it). Inside one, or inside a
    // thread loop, nothing is left to ask.
    if (gpu_kernel_ && !serial_ && threads_ == 0 && !gpu_loop && !has_gpu_loop(n.body))
      serial_ = true;
    blocks_ += ir::is_gpu_block_tag(n.tag);
    threads_ += ir::is_gpu_thread_tag(n.tag);
    visit(n.body);
    blocks_ = blocks;
    threads_ = threads;
    gpu_kernel_ = gpu_kernel;
    serial_ = serial;
    env_.erase(n.var);
    open_.pop_back();
  }
  void visit_store(const ir::Store& n) override {
    OpCount ops;
    ops.visit(n.value);
    Loads loads;
    loads.visit(n.value);
    for (size_t open : open_) {
      loops[open].float_ops += ops.float_ops;
      loops[open].int_ops += ops.int_ops;
      loops[open].accesses.push_back({n.buf, n.indices});
      for (auto& [buf, idx] : loads.found) loops[open].accesses.push_back({buf, idx});
    }
  }
  void visit_alloc(const ir::Alloc& n) override {
    shapes[n.buf] = n.shape;
    if (!gpu_) return visit(n.body);
    // Where the CUDA writer places it: outside every loop on the host; a nest of GPU loops is a
    // kernel over blocks and threads, a nest with none a kernel of one thread.
    cuda::CodeLevel level = open_.empty()                             ? cuda::CodeLevel::Host
                            : threads_ > 0 || serial_ || !gpu_kernel_ ? cuda::CodeLevel::Thread
                                                                      : cuda::CodeLevel::Block;
    switch (cuda::temp_space(n.loc, level)) {
      case cuda::TempSpace::Thread:
        gpu_level[n.buf] = 2;
        break;
      case cuda::TempSpace::Shared:
        gpu_level[n.buf] = 1;
        break;
      case cuda::TempSpace::Device:
        break;
    }
    visit(n.body);
  }

 private:
  std::map<std::string, int64_t> env_;
  std::vector<size_t> open_;
  int blocks_ = 0, threads_ = 0;  // GPU block and thread loops around the walk
  bool gpu_ = false;
  bool gpu_kernel_ = false;  // whether the kernel being walked has GPU loops
  bool serial_ = false;      // inside a nest with no GPU loop, in such a kernel
};

// d(flat index)/d(var) of an access, row-major, the other names at their env values.
int64_t stride_of(const Access& a, const std::vector<ir::Expr>& shape, const std::string& var,
                  const std::map<std::string, int64_t>& env) {
  auto flat = [&](int64_t v) -> std::optional<int64_t> {
    std::map<std::string, int64_t> e = env;
    e[var] = v;
    int64_t index = 0;
    for (size_t d = 0; d < a.indices.size(); ++d) {
      std::optional<int64_t> i = ir::eval_int(a.indices[d], e);
      if (!i) return std::nullopt;
      int64_t extent = 1;
      if (d < shape.size()) {
        std::optional<int64_t> s = ir::eval_int(shape[d], e);
        extent = s.value_or(1);
      }
      index = index * extent + *i;
    }
    return index;
  };
  std::optional<int64_t> at0 = flat(0), at1 = flat(1);
  return at0 && at1 ? std::abs(*at1 - *at0) : 0;
}

}  // namespace

std::vector<float> iter_features(const ir::LoweredFunc& f,
                                 const std::map<std::string, int64_t>& params) {
  std::map<std::string, int64_t> env = params;
  Walker w(env, has_gpu_loop(f.body));
  for (const ir::Buf& b : f.args) w.shapes[b.name] = b.shape;
  w.visit(f.body);

  // The buffers, in the order the loops first access them.
  std::vector<std::string> buffers;
  for (const LoopInfo& l : w.loops)
    for (const Access& a : l.accesses)
      if (std::find(buffers.begin(), buffers.end(), a.buf) == buffers.end())
        buffers.push_back(a.buf);

  // Strides are taken with every loop variable at 0 but the one that moves.
  for (const LoopInfo& l : w.loops) env.emplace(l.var, 0);

  std::vector<float> out;
  out.reserve(kIterFeatureLength);
  for (size_t li = 0; li < kIterLoops; ++li) {
    if (li >= w.loops.size()) {
      out.resize(out.size() + kIterFeaturesPerLoop, 0.0f);
      continue;
    }
    const LoopInfo& l = w.loops[li];
    out.push_back(log1p2(static_cast<double>(l.extent)));
    out.push_back(l.tag == ir::LoopTag::None ? 1.0f : 0.0f);
    out.push_back(l.tag == ir::LoopTag::Parallel ? 1.0f : 0.0f);
    out.push_back(l.tag == ir::LoopTag::Vectorize ? 1.0f : 0.0f);
    out.push_back(l.tag == ir::LoopTag::Unroll || l.tag == ir::LoopTag::UnrollExplicit ? 1.0f
                                                                                       : 0.0f);
    double inner = 1;
    for (int64_t e : l.inner_extent) inner *= static_cast<double>(e);
    out.push_back(log1p2(l.float_ops * inner));
    out.push_back(log1p2(l.int_ops * inner));
    for (size_t bi = 0; bi < kIterBuffers; ++bi) {
      double stride = 0, count = 0, reuse = 0;
      if (bi < buffers.size()) {
        for (const Access& a : l.accesses) {
          if (a.buf != buffers[bi]) continue;
          const std::vector<ir::Expr>& shape = w.shapes[a.buf];
          stride = std::max(stride, static_cast<double>(stride_of(a, shape, l.var, env)));
          count += inner * static_cast<double>(l.extent);
          // Reuse: the iterations of the inner loops the access does not move with.
          double r = 1;
          std::set<std::string> used;
          for (const ir::Expr& i : a.indices)
            for (const std::string& n : ir::free_vars(i)) used.insert(n);
          for (size_t k = 0; k < l.inner.size(); ++k)
            if (!used.count(l.inner[k])) r *= static_cast<double>(l.inner_extent[k]);
          if (!used.count(l.var)) r *= static_cast<double>(l.extent);
          reuse = std::max(reuse, r);
        }
      }
      out.push_back(log1p2(stride));
      out.push_back(log1p2(count));
      out.push_back(log1p2(reuse));
    }
    out.push_back(ir::is_gpu_block_tag(l.tag) ? 1.0f : 0.0f);
    out.push_back(ir::is_gpu_thread_tag(l.tag) ? 1.0f : 0.0f);
    for (size_t bi = 0; bi < kIterBuffers; ++bi) {
      auto level = bi < buffers.size() ? w.gpu_level.find(buffers[bi]) : w.gpu_level.end();
      out.push_back(level == w.gpu_level.end() ? 0.0f : level->second);
    }
  }
  return out;
}

}  // namespace kiln::tuner
