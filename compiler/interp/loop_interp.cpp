// The loop-IR interpreter: runs lowered, scheduled code sequentially, checking every access.
#include <fmt/format.h>

#include "eval.h"
#include "kiln/interp.h"

namespace kiln::interp {

using detail::Value;

namespace {

class LoopInterpreter final : public detail::Evaluator {
 public:
  LoopInterpreter(const ir::LoweredFunc& f, Bindings& b)
      : Evaluator(b.params), f_(f), bindings_(b) {}

  void run() {
    for (const std::string& p : f_.params) {
      if (!params().count(p)) {
        throw CompileError(ErrorStage::Interp, {},
                           fmt::format("no value for param {} of {}", p, f_.name));
      }
    }
    for (const ir::Buf& b : f_.args) bound_buffer(bindings_, b, f_.name);
    // What the kernel checks at its entry, before anything relies on it.
    for (const ir::RuntimeCheck& check : f_.checks) {
      if (check.kind != ir::RuntimeCheck::Kind::InputSpec) continue;
      for (const ir::Buf& b : f_.args) {
        if (b.name != check.subject) continue;
        std::string error = value_spec_error(b, bindings_.buffers.at(b.name), params());
        if (!error.empty()) throw CompileError(ErrorStage::Interp, check.where, error);
      }
    }
    exec(f_.body);
  }

 protected:
  HostBuffer* find_buffer(const std::string& name) override {
    if (auto t = per_thread_.find(name); t != per_thread_.end()) return &thread_copy(t->second);
    return detail::run_buffer(temps_, bindings_, name);
  }

  // The computation being stored, where the source defines it.
  SourceLoc error_loc() const override {
    if (store_) {
      auto w = f_.comp_where.find(store_->comp);
      if (w != f_.comp_where.end()) return w->second;
    }
    return f_.where;
  }

  // " in computation init at instance (i=8) with loops io=2, ii=0"
  std::string context() override {
    std::string s;
    if (store_ && !store_->comp.empty()) {
      s += " in computation " + store_->comp;
      if (!store_->instance.empty()) {
        s += " at instance (";
        for (size_t k = 0; k < store_->instance.size(); ++k) {
          const auto& [name, e] = store_->instance[k];
          s += fmt::format("{}{}={}", k ? ", " : "", name, instance_value(e));
        }
        s += ")";
      }
    }
    if (!loops_.empty()) {
      s += " with loops ";
      for (size_t k = 0; k < loops_.size(); ++k) {
        const Value* v = lookup(loops_[k]);
        s += fmt::format("{}{}={}", k ? ", " : "", loops_[k], v ? v->str() : "?");
      }
    }
    return s;
  }

 private:
  // Evaluated only to describe an error, so it must not fail itself.
  std::string instance_value(const ir::Expr& e) {
    const ir::Store* saved = store_;
    store_ = nullptr;
    std::string s;
    try {
      s = eval(e).str();
    } catch (const CompileError&) {
      s = ir::to_string(e);
    }
    store_ = saved;
    return s;
  }

  // A gpu_local temporary allocated outside every gpu_thread loop is each GPU thread's own
  // (its registers): one copy per value of the thread loop variables around an access. Code
  // outside the thread loops runs in every thread, so it reads and writes the copy the threads'
  // copies start from.
  struct PerThread {
    HostBuffer common;
    std::map<std::vector<int64_t>, HostBuffer> threads;
  };
  HostBuffer& thread_copy(PerThread& t) {
    if (thread_loops_.empty()) return t.common;
    std::vector<int64_t> key;
    for (const std::string& v : thread_loops_) key.push_back(lookup(v)->i);
    auto it = t.threads.find(key);
    if (it == t.threads.end()) it = t.threads.emplace(std::move(key), t.common).first;
    return it->second;
  }

  // Runs body with `temps[name]` holding `value`; an outer temporary of the same name is hidden
  // while it lives.
  template <typename T>
  void scoped(std::map<std::string, T>& temps, const std::string& name, T value,
              const ir::Stmt& body) {
    auto old = temps.find(name);
    std::optional<T> hidden;
    if (old != temps.end()) hidden = std::move(old->second);
    temps.insert_or_assign(name, std::move(value));
    exec(body);
    if (hidden) {
      temps.insert_or_assign(name, std::move(*hidden));
    } else {
      temps.erase(name);
    }
  }

  void exec(const ir::Stmt& s) {
    if (!s) return;
    switch (s->kind) {
      case ir::StmtKind::For: {
        const auto& n = static_cast<const ir::For&>(*s);
        int64_t lo = eval_int(n.min);
        int64_t end = eval_int(n.end);
        if (n.step <= 0) fail(fmt::format("loop {} has step {}", n.var, n.step));
        loops_.push_back(n.var);
        // a GPU thread's loop, or the loop over a block's threads by rank
        bool thread = ir::is_gpu_thread_tag(n.tag) || n.tag == ir::LoopTag::GpuRank;
        if (thread) thread_loops_.push_back(n.var);
        push(n.var, Value::of_int(ir::kIndexType, lo));
        for (int64_t x = lo; x < end; x += n.step) {
          set_top(Value::of_int(ir::kIndexType, x));
          exec(n.body);
          if (end - x <= n.step) break;  // x += step would pass end (and might overflow)
        }
        pop();
        loops_.pop_back();
        if (thread) thread_loops_.pop_back();
        return;
      }
      case ir::StmtKind::If: {
        const auto& n = static_cast<const ir::IfThenElse&>(*s);
        if (eval_bool(n.cond)) {
          exec(n.then_case);
        } else {
          exec(n.else_case);
        }
        return;
      }
      case ir::StmtKind::LetStmt: {
        const auto& n = static_cast<const ir::LetStmt&>(*s);
        push(n.var, eval(n.value));
        exec(n.body);
        pop();
        return;
      }
      case ir::StmtKind::Store: {
        const auto& n = static_cast<const ir::Store&>(*s);
        store_ = &n;
        Value v = eval(n.value);
        std::vector<int64_t> idx;
        for (const ir::Expr& e : n.indices) idx.push_back(eval_int(e));
        HostBuffer* b = find_buffer(n.buf);
        if (!b) fail("write to unknown buffer " + n.buf);
        int64_t flat = checked_flat("write", n.buf, *b, idx);
        // One thread: an atomic update is the plain one, on the element addressed.
        if (n.atomic) v = apply_binary(*n.atomic, detail::load_element(*b, flat), v, n.value);
        detail::store_element(*b, flat, detail::convert(v, b->dtype()));
        store_ = nullptr;
        return;
      }
      case ir::StmtKind::Alloc: {
        const auto& n = static_cast<const ir::Alloc&>(*s);
        std::vector<int64_t> shape;
        for (const ir::Expr& e : n.shape) {
          shape.push_back(eval_int(e));
          if (shape.back() < 0) {
            fail(fmt::format("alloc {} with negative extent {}", n.buf, shape.back()));
          }
        }
        // The limits a kernel checks (kiln/loop_ir.h), so that both agree.
        bool stack = n.loc == ir::MemLoc::Stack;
        int64_t limit = stack ? ir::kMaxStackTempBytes : ir::kMaxHeapTempBytes;
        int64_t bytes = ir::dtype_bytes(n.dtype);
        for (int64_t e : shape)
          if (__builtin_mul_overflow(bytes, e, &bytes)) bytes = INT64_MAX;
        if (bytes > limit) {
          fail(
              fmt::format("temporary {} needs {} bytes, more than the limit of {} for a "
                          "temporary on the {} (docs/limits.md)",
                          n.buf, bytes, limit, stack ? "stack" : "heap"));
        }
        if (n.loc == ir::MemLoc::GpuLocal && thread_loops_.empty()) {
          scoped(per_thread_, n.buf, PerThread{HostBuffer(n.dtype, std::move(shape)), {}}, n.body);
        } else {
          scoped(temps_, n.buf, HostBuffer(n.dtype, std::move(shape)), n.body);
        }
        return;
      }
      case ir::StmtKind::Block:
        for (const ir::Stmt& x : static_cast<const ir::Block&>(*s).stmts) exec(x);
        return;
      case ir::StmtKind::Evaluate:
        if (ir::is_gpu_barrier(s)) return;  // the threads run one after another here
        eval(static_cast<const ir::Evaluate&>(*s).value);
        return;
    }
  }

  const ir::LoweredFunc& f_;
  Bindings& bindings_;
  std::map<std::string, HostBuffer> temps_;
  std::map<std::string, PerThread> per_thread_;
  std::vector<std::string> loops_;         // the loop variables bound now, outermost first
  std::vector<std::string> thread_loops_;  // those of gpu_thread loops
  const ir::Store* store_ = nullptr;       // the store being executed, for error messages
};

}  // namespace

void run_loops(const ir::LoweredFunc& f, Bindings& b) { LoopInterpreter(f, b).run(); }

}  // namespace kiln::interp
