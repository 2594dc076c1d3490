// The accesses of an expression and the conditions under which each runs.
#include "access_sites.h"

#include <functional>

#include "kiln/analysis.h"

namespace kiln::poly {

void SiteCollector::visit(const ir::Expr& e) {
  if (auto* s = ir::as<ir::Select>(e)) {
    visit(s->cond);
    under(s->cond, s->t);
    under(ir::unary(ir::UnaryOp::Not, s->cond), s->f);
    return;
  }
  if (auto* b = ir::as<ir::Binary>(e);
      b && (b->op == ir::BinaryOp::And || b->op == ir::BinaryOp::Or)) {
    visit(b->a);
    under(b->op == ir::BinaryOp::And ? b->a : ir::unary(ir::UnaryOp::Not, b->a), b->b);
    return;
  }
  if (auto* l = ir::as<ir::Load>(e)) out_.push_back({l->buf, l->indices, false, l->where, path_});
  ir::for_each_child(e, [&](const ir::Expr& c) { visit(c); });
}

void SiteCollector::loads_of(const ir::Expr& e, std::set<std::string>& out) {
  std::vector<Site> sites;
  SiteCollector(sites).visit(e);
  for (const auto& s : sites) out.insert(s.buf);
}

void SiteCollector::under(const ir::Expr& cond, const ir::Expr& e) {
  size_t depth = path_.size();
  std::function<void(const ir::Expr&)> add = [&](const ir::Expr& c) {
    if (auto* b = ir::as<ir::Binary>(c); b && b->op == ir::BinaryOp::And) {
      add(b->a);
      add(b->b);
    } else {
      path_.push_back(c);
    }
  };
  add(cond);
  visit(e);
  path_.resize(depth);
}

}  // namespace kiln::poly
