// A structured operator (kiln.v1.OperatorDef) whose one expression nests
// `depth` negations around a constant: y[0] = -(-(...(leaf))). For the tests
// of how deep a request's messages may nest.
#pragma once

#include "kiln/v1/operator.pb.h"

namespace kiln::testing {

inline v1::Operator deep_operator(int depth, double leaf) {
  v1::Operator op;
  v1::OperatorDef* d = op.mutable_def();
  d->set_name("deep");
  v1::Buffer* y = d->add_buffers();
  y->set_name("y");
  y->set_kind(v1::Buffer::OUTPUT);
  y->set_dtype(v1::F32);
  y->add_shape()->set_int_value(1);
  v1::Computation* c = d->add_computations();
  c->set_name("c");
  c->add_iterators("i");
  v1::Binary* lo = c->add_domain()->mutable_binary();
  lo->set_op(v1::LE);
  lo->mutable_lhs()->set_int_value(0);
  lo->mutable_rhs()->set_name("i");
  v1::Binary* hi = c->add_domain()->mutable_binary();
  hi->set_op(v1::LT);
  hi->mutable_lhs()->set_name("i");
  hi->mutable_rhs()->set_int_value(1);
  c->mutable_store()->set_buffer("y");
  c->mutable_store()->add_indices()->set_name("i");
  v1::Expr* e = c->mutable_value();
  for (int k = 0; k < depth; ++k) e = e->mutable_unary()->mutable_operand();
  e->set_float_value(leaf);
  return op;
}

}  // namespace kiln::testing
