// What a kernel checks at run time: the value specs that its bounds proof
// relied on (checked at the entry, before any access that needs them), and
// integer divisions that can trap (checked where they happen).
#include <algorithm>
#include <functional>
#include <set>

#include "kiln/analysis.h"
#include "model.h"

namespace kiln::poly {
namespace {

// The integer divisions and modulos of e that can trap, as text.
void trapping_divisions(const ir::Expr& e, std::vector<std::string>& out) {
  if (auto* b = ir::as<ir::Binary>(e); b && ir::traps(*b)) {
    std::string text = ir::to_string(e);
    if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
  }
  ir::for_each_child(e, [&](const ir::Expr& c) { trapping_divisions(c, out); });
}

// The Stores of s, by computation: what each computation's instances compute
// once lowered (value computations inlined into their readers).
void stores_by_comp(const ir::Stmt& s, std::map<std::string, std::vector<std::string>>& out,
                    std::vector<std::string>& order) {
  struct V : ir::StmtVisitor {
    std::map<std::string, std::vector<std::string>>* out;
    std::vector<std::string>* order;
    void visit_store(const ir::Store& n) override {
      if (!out->count(n.comp)) order->push_back(n.comp);
      auto& divs = (*out)[n.comp];
      trapping_divisions(n.value, divs);
    }
  } v;
  v.out = &out;
  v.order = &order;
  v.visit(s);
}

}  // namespace

void add_runtime_checks(const ScheduledFunc::Impl& m, ir::LoweredFunc& out) {
  for (const ir::Buf* b : m.func.inputs_read_as_data()) {
    const ir::ValueSpec& spec = b->values;
    if (!ir::is_int(b->dtype) || (!spec.lo && !spec.sorted)) continue;
    ir::RuntimeCheck check{
        ir::RuntimeCheck::Kind::InputSpec, b->name,
        "input " + b->name + " breaks its value spec " + ir::value_spec_text(spec), b->where};
    if (spec.lo)
      check.lo = folded(spec.lo_inclusive
                            ? spec.lo
                            : ir::binary(ir::BinaryOp::Add, spec.lo, ir::int_imm(1, spec.lo->type)),
                        m.constants);
    if (spec.hi)
      check.hi = folded(spec.hi_inclusive
                            ? spec.hi
                            : ir::binary(ir::BinaryOp::Sub, spec.hi, ir::int_imm(1, spec.hi->type)),
                        m.constants);
    check.sorted = spec.sorted;
    out.checks.push_back(check);
  }
  std::map<std::string, std::vector<std::string>> divisions;
  std::vector<std::string> order;
  stores_by_comp(out.body, divisions, order);
  for (const auto& comp : order) {
    if (divisions[comp].empty() || comp.empty()) continue;
    // Named as the source writes them: in the computation's value and in
    // the value computations it reads (lowering inlined those).
    std::vector<std::string> divs;
    std::set<std::string> seen;
    std::function<void(const std::string&)> source = [&](const std::string& name) {
      const ir::Comp* c = m.func.find_comp(name);
      if (!c || !seen.insert(name).second || !c->value) return;
      trapping_divisions(c->value, divs);
      ir::any_subexpr(c->value, [&](const ir::Expr& e) {
        if (auto* a = ir::as<ir::Access>(e)) source(a->comp);
        return false;
      });
    };
    source(comp);
    if (divs.empty()) divs = divisions[comp];
    std::string list;
    for (size_t k = 0; k < divs.size(); ++k) list += (k ? ", " : "") + divs[k];
    auto w = out.comp_where.find(comp);
    out.checks.push_back({ir::RuntimeCheck::Kind::Arithmetic, comp,
                          "integer division by zero, or of the smallest integer by -1, in "
                          "computation " +
                              comp + " (" + list + ")",
                          w == out.comp_where.end() ? out.where : w->second});
  }
}

}  // namespace kiln::poly
