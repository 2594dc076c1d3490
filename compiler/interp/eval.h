// Private to the interpreters: typed run-time values and the expression evaluator both share.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/interp.h"
#include "kiln/ir.h"

namespace kiln::interp::detail {

// A run-time value: integers and bools in `i`, floats in `f`, always already
// wrapped (i32) or rounded (f32) to `type`.
struct Value {
  ir::DType type = ir::kIndexType;
  int64_t i = 0;
  double f = 0;

  static Value of_int(ir::DType t, int64_t v);   // wraps to t (or converts, for a float t)
  static Value of_float(ir::DType t, double v);  // rounds to t (or truncates, for an int t)
  static Value of_bool(bool b) { return Value{ir::DType::Bool, b ? 1 : 0, 0}; }

  double as_double() const { return ir::is_float(type) ? f : static_cast<double>(i); }
  int64_t as_int() const;
  std::string str() const;
};

Value convert(const Value& v, ir::DType t);

// Integer division rounding toward positive infinity; b != 0.
inline int64_t ceil_div(int64_t a, int64_t b) { return -ir::floor_div(-a, b); }

// Row-major helpers.
std::string format_index(const std::vector<int64_t>& idx);    // "1, 2"
std::string format_shape(const std::vector<int64_t>& shape);  // "[4, 8]"
Value load_element(const HostBuffer& b, int64_t flat);
// A buffer of a run by name: one of its temporaries, else one of its bindings; null if neither.
HostBuffer* run_buffer(std::map<std::string, HostBuffer>& temps, Bindings& b,
                       const std::string& name);
void store_element(HostBuffer& b, int64_t flat, const Value& v);

// Evaluates expressions over named values: params (looked up last) and a stack
// of local bindings (iterators, loop variables, let variables). Subclasses
// supply the buffers, computation reads and the "where" of error messages.
class Evaluator {
 public:
  explicit Evaluator(std::map<std::string, int64_t> params) : params_(std::move(params)) {}
  virtual ~Evaluator() = default;

  Value eval(const ir::Expr& e);
  int64_t eval_int(const ir::Expr& e);
  bool eval_bool(const ir::Expr& e);

  void push(const std::string& name, Value v) { locals_.emplace_back(name, v); }
  void pop() { locals_.pop_back(); }
  void set_top(Value v) { locals_.back().second = v; }
  // Starts a scope that sees only params (an Access evaluates another
  // computation's expression); returns what end_scope needs to restore.
  size_t begin_scope();
  void end_scope(size_t saved);
  const Value* lookup(const std::string& name) const;
  const std::map<std::string, int64_t>& params() const { return params_; }

  // Throws CompileError(stage "interp") at error_loc(), message + context().
  [[noreturn]] void fail(const std::string& message);

  // The flat index of buf[idx] after checking rank and bounds; `what` is
  // "read" or "write".
  int64_t checked_flat(const char* what, const std::string& buf, const HostBuffer& b,
                       const std::vector<int64_t>& idx);

 protected:
  virtual HostBuffer* find_buffer(const std::string& name) = 0;
  virtual Value eval_access(const ir::Access& a, const std::vector<int64_t>& idx);
  // " in acc(i=3, j=1024)": appended to every error message.
  virtual std::string context() = 0;
  virtual SourceLoc error_loc() const { return {}; }
  // "x[1024] (x has shape [1024])" or "y[8] (shape [8])".
  virtual std::string describe_element(const std::string& buf, const std::vector<int64_t>& idx,
                                       const std::vector<int64_t>& shape) const;
  // a OP b for an arithmetic OP or comparison (not and/or), as eval computes
  // it; `e` names the expression in errors.
  Value apply_binary(ir::BinaryOp op, Value a, Value b, const ir::Expr& e);

 private:
  Value eval_binary(const ir::Binary& n, const ir::Expr& e);
  Value eval_call(const ir::Call& n);
  std::vector<int64_t> eval_indices(const std::vector<ir::Expr>& es);

  std::map<std::string, int64_t> params_;
  std::vector<std::pair<std::string, Value>> locals_;
  size_t scope_start_ = 0;
};

}  // namespace kiln::interp::detail

namespace kiln::interp {

// Fills `out` with reproducible random values honoring b's value spec; the
// stream depends on the seed and `name` only.
void fill_random_named(HostBuffer& out, const ir::Buf& b,
                       const std::map<std::string, int64_t>& params, uint64_t seed,
                       const std::string& name);

}  // namespace kiln::interp
