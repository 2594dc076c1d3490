// Vector copies (copies.h).
#include "copies.h"

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <set>

#include "kiln/analysis.h"
#include "kiln/error.h"
#include "kiln/simplify.h"
#include "nests.h"
#include "registers.h"

namespace kiln::cuda {

using ir::Expr;

bool multiple_of(const Expr& e, int width) {
  std::optional<int64_t> r =
      ir::eval_int(ir::simplify(ir::binary(ir::BinaryOp::Mod, e, ir::int_imm(width))), {});
  return r && *r == 0;
}

bool consecutive(const Expr& offset, const std::string& var) {
  std::optional<int64_t> d = ir::eval_int(
      ir::simplify(ir::substitute(offset, {{var, ir::var(var) + ir::int_imm(1)}}) - offset), {});
  return d && *d == 1;
}

VectorCopy vector_copy(const std::vector<const ir::For*>& chain,
                       const std::vector<const ir::LetStmt*>& lets, const ir::Stmt& body,
                       const std::map<std::string, Expr>& outer, const BufTable& bufs) {
  VectorCopy none;
  none.width = 0;
  const ir::For& inner = *chain.back();
  std::optional<int64_t> extent = ir::eval_int(expand_lets(extent_of(inner), outer), {});
  if (inner.step != 1 || !extent || *extent <= 0) return none;
  // the copy's lets, expanded into its indices (the code that copies binds none of them)
  std::map<std::string, Expr> values = outer;
  std::set<std::string> names;
  auto bind = [&](const ir::LetStmt& l) {
    names.insert(l.var);
    bind_let(values, l.var, l.value);
  };
  for (const ir::LetStmt* l : lets) bind(*l);
  ir::Stmt s = body;
  while (const ir::LetStmt* l = ir::as<ir::LetStmt>(s)) {
    bind(*l);
    s = l->body;
  }
  const ir::Store* st = ir::as<ir::Store>(s);
  if (!st || st->atomic) return none;
  const ir::Load* ld = ir::as<ir::Load>(st->value);
  if (!ld || ld->type != ir::DType::F32 || !bufs.count(ld->buf) || !bufs.count(st->buf))
    return none;
  const BufInfo& from = bufs.at(ld->buf);
  const BufInfo& to = bufs.at(st->buf);
  if (from.space != Space::Global || from.constant || from.dtype != ir::DType::F32 ||
      to.dtype != ir::DType::F32 || to.space == Space::Local || from.shape.empty() ||
      to.shape.empty())
    return none;
  auto expanded = [&](const std::vector<Expr>& indices) {
    std::vector<Expr> out;
    for (const Expr& i : indices) out.push_back(expand_lets(i, values));
    return out;
  };
  auto flat = [](const BufInfo& b, const std::vector<Expr>& indices) {
    Expr f = indices[0];
    for (size_t d = 1; d < indices.size(); ++d) f = f * b.shape[d] + indices[d];
    return ir::simplify(f);
  };
  Expr group = expand_lets(inner.min, values);  // + width * kiln_q: a group's start
  // consecutive in the innermost variable, and offset(group start) a multiple of the width
  auto aligned = [&](const Expr& offset, int width) {
    return multiple_of(
        ir::substitute(offset, {{inner.var, group + ir::int_imm(width) * ir::var("kiln_q")}}),
        width);
  };
  VectorCopy vc;
  vc.from = ld->buf;
  vc.to = st->buf;
  vc.var = inner.var;
  vc.from_at = expanded(ld->indices);
  vc.to_at = expanded(st->indices);
  for (const std::vector<Expr>* at : {&vc.from_at, &vc.to_at})
    for (const Expr& i : *at)
      for (const std::string& n : ir::free_vars(i))
        if (names.count(n)) return none;  // a let the expansion could not remove
  Expr from_offset = flat(from, vc.from_at), to_offset = flat(to, vc.to_at);
  vc.width = 1;
  if (!consecutive(from_offset, inner.var)) return vc;
  for (int width : {4, 2}) {
    if (*extent % width != 0 || !aligned(from_offset, width)) continue;
    vc.width = width;
    vc.vector_store = consecutive(to_offset, inner.var) && aligned(to_offset, width);
    return vc;
  }
  return vc;
}

ir::Stmt element_body(const CopyNest& nest) {
  const ir::For* lanes = ir::as<ir::For>(nest.body);
  if (!lanes || lanes->tag != ir::LoopTag::GpuLanes) return nest.body;
  return ir::substitute(lanes->body, {{lanes->var, ir::var(nest.chain.back()->var)}});
}

VectorCopy fill_copy(const CopyNest& nest, const std::map<std::string, Expr>& outer,
                     const BufTable& bufs) {
  const ir::For* lanes = ir::as<ir::For>(nest.body);
  if (!lanes || lanes->tag != ir::LoopTag::GpuLanes) {
    VectorCopy none;
    none.width = 0;
    return none;
  }
  // the innermost loop as it was: one element each step
  const ir::For& inner = *nest.chain.back();
  auto one =
      std::make_shared<ir::For>(inner.var, inner.min, inner.end, 1, inner.tag, element_body(nest));
  std::vector<const ir::For*> chain = nest.chain;
  chain.back() = one.get();
  VectorCopy vc = vector_copy(chain, nest.lets, one->body, outer, bufs);
  std::optional<int64_t> width = constant(lanes->end - lanes->min);
  if (!width || vc.width != *width || inner.step != vc.width)
    throw CompileError(
        ErrorStage::Codegen, {},
        fmt::format("internal error: the gpu_lanes loop '{}' copies {} elements, the fill "
                    "groups {} (report this to kiln's developers)",
                    lanes->var, ir::to_string(ir::simplify(lanes->end - lanes->min)), vc.width));
  return vc;
}

}  // namespace kiln::cuda
