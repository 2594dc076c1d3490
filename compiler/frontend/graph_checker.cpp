// The graph checker: tensors defined once and before use, calls that match
// their operator's inputs and outputs, every param of a call bound.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "checker.h"

namespace kiln::frontend {

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }
std::string at_pos(Pos p) { return std::to_string(p.line) + ":" + std::to_string(p.col); }

std::string type_text(ir::DType t, const std::vector<int64_t>& shape) {
  return fmt::format("{}[{}]", ir::dtype_name(t), fmt::join(shape, ", "));
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

class GraphChecker {
 public:
  GraphChecker(const Source& src, const GraphDecl& decl, const ir::Module& module)
      : src_(src), decl_(decl), module_(module) {}

  ir::Graph run() {
    g_.name = decl_.name.name;
    g_.where = src_.loc(decl_.name.pos);
    Pos last_output{};
    for (const GraphItem& item : decl_.items) {
      if (const auto* t = std::get_if<TensorDecl>(&item)) {
        tensor(*t);
      } else if (const auto* c = std::get_if<CallDecl>(&item)) {
        call(*c);
      } else {
        const auto& o = std::get<OutputDecl>(item);
        for (const Ident& n : o.names) {
          if (!defined_.count(n.name)) {
            src_.validate_error(n.pos, "output " + q(n.name) + " is not a tensor of graph " +
                                           q(g_.name) + " defined before this line");
          }
          for (const std::string& seen : g_.outputs) {
            if (seen == n.name) src_.validate_error(n.pos, "output " + q(n.name) + " given twice");
          }
          g_.outputs.push_back(n.name);
          last_output = n.pos;
        }
      }
    }
    if (g_.outputs.empty()) {
      src_.validate_error(decl_.name.pos, "graph " + q(g_.name) +
                                              " returns nothing: name its results with "
                                              "`output NAME;`");
    }
    return std::move(g_);
  }

 private:
  void define(const Ident& n) {
    auto [it, fresh] = defined_.emplace(n.name, n.pos);
    if (!fresh) {
      src_.validate_error(n.pos, "tensor " + q(n.name) + " is already defined at " +
                                     at_pos(it->second) + " (a graph's tensors are defined once)");
    }
  }

  void tensor(const TensorDecl& t) {
    define(t.name);
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0) {
        src_.validate_error(t.shape_pos[d], fmt::format("extent {} of tensor {} is negative",
                                                        t.shape[d], q(t.name.name)));
      }
    }
    if (t.kind == ir::TensorKind::Const) {
      const ir::ConstInit& c = t.init;
      int64_t n = element_count(t.shape);
      if (c.kind == ir::ConstInit::Kind::Values && static_cast<int64_t>(c.values.size()) != n) {
        src_.validate_error(
            t.init_pos, fmt::format("const {} : {} has {} elements but {} value{} given",
                                    q(t.name.name), type_text(t.dtype, t.shape), n, c.values.size(),
                                    c.values.size() == 1 ? " is" : "s are"));
      }
      if (c.kind == ir::ConstInit::Kind::Random && !(c.lo < c.hi)) {
        src_.validate_error(t.init_pos,
                            fmt::format("random values of {} need LO < HI, got [{}, {})",
                                        q(t.name.name), c.lo, c.hi));
      }
      check_const_type(t);
    }
    ir::GraphTensor out;
    out.name = t.name.name;
    out.dtype = t.dtype;
    out.shape = t.shape;
    out.kind = t.kind;
    out.init = t.init;
    out.where = src_.loc(t.name.pos);
    g_.tensors.push_back(std::move(out));
  }

  // Every value a const is given must be a value of its type: a whole number
  // for integers and bools (0 or 1), and inside the type's limits.
  void check_const_type(const TensorDecl& t) {
    const ir::ConstInit& c = t.init;
    ir::DType type = t.dtype;
    auto check = [&](double v, const std::string& which) {
      bool whole = ir::is_float(type) || std::floor(v) == v;
      bool inside = std::isfinite(v) && v >= ir::dtype_min(type) && v <= ir::dtype_max(type);
      if (whole && inside) return;
      src_.validate_error(
          t.init_pos,
          fmt::format(
              "{} of const {} is {}, which is not {} {} ({})", which, q(t.name.name), v,
              type == ir::DType::I32 ? "an" : "a", ir::dtype_name(type),
              whole ? fmt::format("it holds {} to {}", ir::dtype_min(type), ir::dtype_max(type))
                    : "not a whole number"));
    };
    switch (c.kind) {
      case ir::ConstInit::Kind::Values:
        for (size_t k = 0; k < c.values.size(); ++k) check(c.values[k], fmt::format("value {}", k));
        break;
      case ir::ConstInit::Kind::Fill:
        check(c.fill, "the fill value");
        break;
      case ir::ConstInit::Kind::Random:
        break;  // drawn inside the type (integers rounded down), checked against specs per call
      case ir::ConstInit::Kind::Data:
        break;  // not written in .kiln text
    }
  }

  // A const passed to an operator must meet the value spec of the input it
  // becomes (a CSR row pointer sorted and inside the values it indexes): the
  // operator's code relies on it, as it does for run-time inputs.
  void check_const_argument(const ir::GraphTensor& t, const ir::Buf& in, const ir::Func& op,
                            const Ident& at) {
    if (t.kind != ir::TensorKind::Const || t.init.kind == ir::ConstInit::Kind::Random) return;
    const ir::ValueSpec& spec = in.values;
    std::map<std::string, int64_t> env;
    for (const ir::Param& p : op.params) {
      if (p.value) env[p.name] = *p.value;
    }
    auto end = [&](const ir::Expr& e) -> std::optional<double> {
      if (!e) return std::nullopt;
      if (const auto* f = ir::as<ir::FloatImm>(e)) return f->value;
      if (std::optional<int64_t> v = ir::eval_int(e, env)) return static_cast<double>(*v);
      return std::nullopt;
    };
    std::optional<double> lo = end(spec.lo), hi = end(spec.hi);
    std::vector<double> values = t.init.kind == ir::ConstInit::Kind::Values
                                     ? t.init.values
                                     : std::vector<double>{t.init.fill};
    auto spec_text = [&] {
      return fmt::format("{}{}, {}{}", spec.lo_inclusive ? "[" : "(", ir::to_string(spec.lo),
                         ir::to_string(spec.hi), spec.hi_inclusive ? "]" : ")");
    };
    for (size_t k = 0; k < values.size(); ++k) {
      double v = values[k];
      bool below = lo && (spec.lo_inclusive ? v < *lo : v <= *lo);
      bool above = hi && (spec.hi_inclusive ? v > *hi : v >= *hi);
      if (below || above) {
        src_.validate_error(
            at.pos, fmt::format("const {} does not meet the value range {} of input {} of {}: "
                                "value {} is {}",
                                q(t.name), spec_text(), in.name, q(op.name), k, v));
      }
      if (spec.sorted && k > 0 && v < values[k - 1]) {
        src_.validate_error(
            at.pos, fmt::format("const {} must be sorted, as input {} of {} is: value {} ({}) "
                                "is below value {} ({})",
                                q(t.name), in.name, q(op.name), k, v, k - 1, values[k - 1]));
      }
    }
  }

  void call(const CallDecl& c) {
    const ir::Func* f = module_.find(c.op.name);
    if (!f) {
      std::vector<std::string> names;
      for (const ir::Func& h : module_.funcs) names.push_back(h.name);
      src_.validate_error(
          c.op.pos,
          fmt::format("unknown operator {}: the funcs of this file are {}", q(c.op.name),
                      names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
    }
    std::vector<const ir::Buf*> ins = f->bufs_of_kind(ir::BufKind::Input);
    std::vector<const ir::Buf*> outs = f->bufs_of_kind(ir::BufKind::Output);
    auto names_of = [](const std::vector<const ir::Buf*>& bs) {
      std::vector<std::string> n;
      for (const ir::Buf* b : bs) n.push_back(b->name);
      return n.empty() ? std::string("none") : fmt::format("{}", fmt::join(n, ", "));
    };
    if (c.args.size() != ins.size()) {
      src_.validate_error(c.op.pos,
                          fmt::format("{} takes {} input{} ({}), given {}", q(f->name), ins.size(),
                                      ins.size() == 1 ? "" : "s", names_of(ins), c.args.size()));
    }
    if (c.results.size() != outs.size()) {
      src_.validate_error(c.results.front().pos,
                          fmt::format("{} has {} output{} ({}), but {} name{} given", q(f->name),
                                      outs.size(), outs.size() == 1 ? "" : "s", names_of(outs),
                                      c.results.size(), c.results.size() == 1 ? " is" : "s are"));
    }
    std::vector<const ir::GraphTensor*> args;
    for (const Ident& a : c.args) {
      const ir::GraphTensor* t = g_.find_tensor(a.name);
      if (!t) {
        src_.validate_error(a.pos, "tensor " + q(a.name) + " is not defined before this call");
      }
      args.push_back(t);
    }

    // Params: bound explicitly, then from the extents of the arguments, then
    // by their defaults.
    std::map<std::string, int64_t> bound;
    for (size_t k = 0; k < c.bindings.size(); ++k) {
      const Ident& name = c.bindings[k].first;
      if (!f->find_param(name.name)) {
        std::vector<std::string> params;
        for (const ir::Param& p : f->params) params.push_back(p.name);
        src_.validate_error(
            name.pos,
            fmt::format("{} has no param {} (its params: {})", q(f->name), q(name.name),
                        params.empty() ? "none" : fmt::format("{}", fmt::join(params, ", "))));
      }
      if (!bound.emplace(name.name, c.bindings[k].second).second) {
        src_.validate_error(name.pos, "param " + q(name.name) + " is bound twice");
      }
    }
    std::map<std::string, std::string> inferred_from;
    for (size_t i = 0; i < ins.size(); ++i) {
      const ir::Buf& b = *ins[i];
      if (b.shape.size() != args[i]->shape.size()) continue;  // reported below
      for (size_t d = 0; d < b.shape.size(); ++d) {
        const auto* v = dynamic_cast<const ir::Var*>(b.shape[d].get());
        if (!v || !f->find_param(v->name) || bound.count(v->name)) continue;
        bound[v->name] = args[i]->shape[d];
        inferred_from[v->name] = fmt::format("extent {} of {}", d, args[i]->name);
      }
    }
    ir::Overrides values;
    for (const ir::Param& p : f->params) {
      auto it = bound.find(p.name);
      if (it != bound.end()) {
        values[p.name] = it->second;
      } else if (p.value) {
        values[p.name] = *p.value;
      } else {
        src_.validate_error(c.op.pos, fmt::format("param {} of {} has no value: it is not an "
                                                  "extent of an input and has no default; "
                                                  "bind it, as in {}(..., {} = 16)",
                                                  q(p.name), q(f->name), f->name, p.name));
      }
    }
    auto bindings_text = [&] {
      std::vector<std::string> parts;
      for (const auto& [n, v] : values) parts.push_back(fmt::format("{} = {}", n, v));
      return fmt::format("{}", fmt::join(parts, ", "));
    };
    ir::GraphCall call;
    call.op = ir::apply_overrides(*f, values);
    call.where = src_.loc(c.op.pos);
    std::map<std::string, int64_t> env(values.begin(), values.end());
    for (const ir::Constraint& k : f->constraints) {
      std::optional<int64_t> holds = ir::eval_int(k.cond, env);
      if (holds && *holds == 0) {
        src_.validate_error(c.op.pos,
                            fmt::format("this call of {} breaks its constraint {} "
                                        "(with {})",
                                        q(f->name), ir::to_string(k.cond), bindings_text()));
      }
    }
    for (size_t i = 0; i < ins.size(); ++i) {
      std::vector<int64_t> want = ir::bound_shape(call.op, *ins[i]);
      if (ins[i]->dtype != args[i]->dtype || want != args[i]->shape) {
        src_.validate_error(
            c.args[i].pos,
            fmt::format("argument {} of {} (its input {}) must be {} with {}; tensor {} is {}",
                        i + 1, q(f->name), ins[i]->name, type_text(ins[i]->dtype, want),
                        bindings_text(), q(args[i]->name),
                        type_text(args[i]->dtype, args[i]->shape)));
      }
      check_const_argument(*args[i], *call.op.find_buf(ins[i]->name), call.op, c.args[i]);
    }
    for (size_t o = 0; o < outs.size(); ++o) {
      define(c.results[o]);
      ir::GraphTensor t;
      t.name = c.results[o].name;
      t.dtype = outs[o]->dtype;
      t.shape = ir::bound_shape(call.op, *outs[o]);
      t.kind = ir::TensorKind::Value;
      t.where = src_.loc(c.results[o].pos);
      g_.tensors.push_back(std::move(t));
      call.results.push_back(c.results[o].name);
    }
    for (const Ident& a : c.args) call.args.push_back(a.name);
    g_.calls.push_back(std::move(call));
  }

  const Source& src_;
  const GraphDecl& decl_;
  const ir::Module& module_;
  ir::Graph g_;
  std::map<std::string, Pos> defined_;
};

}  // namespace

ir::Graph check_graph(const Source& src, const GraphDecl& graph, const ir::Module& module) {
  return GraphChecker(src, graph, module).run();
}

}  // namespace kiln::frontend
