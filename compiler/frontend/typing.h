// Expression typing: names resolved, types computed and checked, literals
// adapted, i32 promoted to i64, AST turned into IR.
#pragma once

#include <string>
#include <utility>

#include "ast.h"
#include "kiln/ir.h"
#include "scope.h"

namespace kiln::frontend {

// Where an expression stands, which decides what it may use.
struct ExprContext {
  std::string what;  // for messages: "the domain of 'C'", "a constraint", ...
  bool iterators = true;
  bool buffer_reads = true;
  bool only_input_reads = false;  // domains read input buffers only
  bool comp_reads = true;
  bool knobs = false;   // knob names are values (a constraint on knobs)
  bool target = false;  // the target's sizes are values (ir::kTargetSizes: a knob's fit)
};

// A typed expression, or a constant not yet given a type: constant
// expressions made only of literals are folded exactly and take the type of
// what they meet (docs/language.md, "Types").
struct Value {
  ir::Expr expr;  // null for an untyped constant
  enum class Const : uint8_t { None, Int, Float } konst = Const::None;
  int64_t i = 0;
  double f = 0;
  bool untyped() const { return expr == nullptr; }
};

class Typer {
 public:
  Typer(const Source& src, const Scope& scope, ExprContext ctx)
      : src_(src), scope_(scope), ctx_(std::move(ctx)) {}

  Value check(const Ast& e);
  // e converted to exactly type t (constants adapt); `purpose` starts the
  // message when it cannot be: "the value stored to 'C' must be f32, ...".
  ir::Expr as_type(const Ast& e, ir::DType t, const std::string& purpose);
  // An integer, as i64.
  ir::Expr as_index(const Ast& e, const std::string& purpose);
  ir::Expr as_bool(const Ast& e, const std::string& purpose);
  // Constants at their default types (i64, f32).
  ir::Expr as_default(const Ast& e);
  // The k-th comparison of a Compare chain.
  ir::Expr comparison(const Ast& chain, size_t k);

 private:
  Value name(const Ast& e);
  Value load(const Ast& e);
  Value call(const Ast& e);
  Value cast(const Ast& e, ir::DType t);
  Value select(const Ast& e);
  Value math(const Ast& e);
  Value unary(const Ast& e);
  Value binary(const Ast& e);
  Value fold(ir::BinaryOp op, const Value& a, const Value& b, const Ast& at);

  // Brings two operands to one type; `what` names them in messages
  // ("operands of '+'").
  std::pair<ir::Expr, ir::Expr> unify(const Value& a, const Ast& ea, const Value& b, const Ast& eb,
                                      Pos at, const std::string& what, bool allow_bool);
  ir::Expr constant_as(const Value& v, ir::DType t, const Ast& at);
  std::string describe(const Value& v, const Ast& e) const;
  void require_args(const Ast& e, size_t n) const;
  [[noreturn]] void fail(Pos p, const std::string& msg) const { src_.validate_error(p, msg); }

  const Source& src_;
  const Scope& scope_;
  ExprContext ctx_;
};

// The source text of a node, for messages.
std::string quote(const Source& src, const Ast& e);

}  // namespace kiln::frontend
