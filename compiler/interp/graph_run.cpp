// Graphs on the host: constants made from their initializers, random inputs,
// and running the calls one after another.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <random>

#include "eval.h"
#include "kiln/interp.h"

namespace kiln::interp {

HostBuffer const_value(const ir::GraphTensor& t) {
  HostBuffer out(t.dtype, t.shape);
  const ir::ConstInit& c = t.init;
  switch (c.kind) {
    case ir::ConstInit::Kind::Fill:
      for (int64_t k = 0; k < out.size(); ++k) out.set_f(k, c.fill);
      break;
    case ir::ConstInit::Kind::Random: {
      ir::Buf spec;
      spec.name = t.name;
      spec.dtype = t.dtype;
      spec.where = t.where;
      if (ir::is_float(t.dtype)) {
        spec.values.lo = ir::float_imm(c.lo, ir::DType::F64);
        spec.values.hi = ir::float_imm(c.hi, ir::DType::F64);
      } else {
        spec.values.lo = ir::int_imm(static_cast<int64_t>(std::floor(c.lo)));
        spec.values.hi = ir::int_imm(static_cast<int64_t>(std::ceil(c.hi)));
      }
      fill_random_named(out, spec, {}, c.seed, t.name);
      break;
    }
    case ir::ConstInit::Kind::Values:
      if (static_cast<int64_t>(c.values.size()) != out.size()) {
        throw CompileError(ErrorStage::Interp, t.where,
                           fmt::format("const {} has {} elements but {} values", t.name, out.size(),
                                       c.values.size()));
      }
      for (int64_t k = 0; k < out.size(); ++k) {
        double v = c.values[static_cast<size_t>(k)];
        if (ir::is_float(t.dtype)) {
          out.set_f(k, v);
        } else {
          out.set_i(k, static_cast<int64_t>(v));
        }
      }
      break;
    case ir::ConstInit::Kind::Data: {
      size_t bytes = static_cast<size_t>(out.size()) * ir::dtype_bytes(t.dtype);
      if (!c.data || c.data->size() != bytes) {
        throw CompileError(ErrorStage::Interp, t.where,
                           fmt::format("const {} has {} elements ({} bytes) but {} bytes of data",
                                       t.name, out.size(), bytes, c.data ? c.data->size() : 0));
      }
      if (bytes != 0) std::memcpy(out.data(), c.data->data(), bytes);
      break;
    }
  }
  return out;
}

Tensors random_graph_inputs(const ir::Graph& g, uint64_t seed) {
  Tensors out;
  for (const ir::GraphTensor& t : g.tensors) {
    if (t.kind != ir::TensorKind::Input) continue;
    HostBuffer buf(t.dtype, t.shape);
    // The first reader's buffer says what the values must satisfy.
    const ir::Buf* spec = nullptr;
    const ir::Func* reader = nullptr;
    for (const ir::GraphCall& c : g.calls) {
      std::vector<const ir::Buf*> ins = c.op.bufs_of_kind(ir::BufKind::Input);
      for (size_t i = 0; i < c.args.size() && i < ins.size() && !spec; ++i) {
        if (c.args[i] == t.name) spec = ins[i], reader = &c.op;
      }
      if (spec) break;
    }
    if (spec) {
      fill_random_named(buf, *spec, param_values(*reader), seed, t.name);
    } else {
      ir::Buf plain;
      plain.name = t.name;
      plain.dtype = t.dtype;
      fill_random_named(buf, plain, {}, seed, t.name);
    }
    out[t.name] = std::move(buf);
  }
  return out;
}

Tensors graph_constants(const ir::Graph& g) {
  Tensors out;
  for (const ir::GraphTensor& t : g.tensors) {
    if (t.kind == ir::TensorKind::Const) out[t.name] = const_value(t);
  }
  return out;
}

Tensors run_graph(const ir::Graph& g, const Tensors& inputs, const CallRunner& run_call,
                  const Tensors* constants) {
  Tensors values;
  for (const ir::GraphTensor& t : g.tensors) {
    if (t.kind == ir::TensorKind::Const) {
      auto made = constants != nullptr ? constants->find(t.name) : Tensors::const_iterator{};
      values[t.name] =
          constants != nullptr && made != constants->end() ? made->second : const_value(t);
    } else if (t.kind == ir::TensorKind::Input) {
      auto it = inputs.find(t.name);
      if (it == inputs.end()) {
        throw CompileError(ErrorStage::Interp, t.where,
                           fmt::format("graph {}: no value for input {}", g.name, t.name));
      }
      if (it->second.dtype() != t.dtype || it->second.shape() != t.shape) {
        throw CompileError(ErrorStage::Interp, t.where,
                           fmt::format("graph {}: input {} must be {}{}, got {}{}", g.name, t.name,
                                       ir::dtype_name(t.dtype), detail::format_shape(t.shape),
                                       ir::dtype_name(it->second.dtype()),
                                       detail::format_shape(it->second.shape())));
      }
      values[t.name] = it->second;
    }
  }
  // By name, once: a run looks up every call's results (Graph::find_tensor is a scan).
  std::map<std::string, const ir::GraphTensor*> tensors;
  for (const ir::GraphTensor& t : g.tensors) tensors.emplace(t.name, &t);
  for (size_t k = 0; k < g.calls.size(); ++k) {
    const ir::GraphCall& c = g.calls[k];
    Bindings b;
    b.params = param_values(c.op);
    std::vector<const ir::Buf*> ins = c.op.bufs_of_kind(ir::BufKind::Input);
    std::vector<const ir::Buf*> outs = c.op.bufs_of_kind(ir::BufKind::Output);
    for (size_t i = 0; i < ins.size(); ++i) {
      auto it = values.find(c.args.at(i));
      if (it == values.end()) {
        throw CompileError(ErrorStage::Interp, c.where,
                           fmt::format("graph {}: {} reads {} before it has a value", g.name,
                                       c.op.name, c.args.at(i)));
      }
      HostBuffer& arg = b.buffers[ins[i]->name] = it->second;
      // A tensor is read in the shape the input declares when they hold as many
      // elements (an imported model's reshapes cost nothing).
      std::vector<int64_t> declared = buffer_shape(*ins[i], b.params);
      if (arg.shape() != declared && arg.dtype() == ins[i]->dtype) arg.reshape(declared);
    }
    for (const ir::Buf* o : outs)
      b.buffers[o->name] = HostBuffer(o->dtype, buffer_shape(*o, b.params));
    run_call(k, c, b);
    for (size_t o = 0; o < outs.size(); ++o) {
      HostBuffer& result = values[c.results.at(o)] = std::move(b.buffers.at(outs[o]->name));
      // ... and a result takes its tensor's shape the same way.
      auto t = tensors.find(c.results.at(o));
      if (t != tensors.end() && t->second->shape != result.shape())
        result.reshape(t->second->shape);
    }
  }
  Tensors out;
  for (const std::string& name : g.outputs) {
    auto it = values.find(name);
    if (it == values.end()) {
      throw CompileError(ErrorStage::Interp, g.where,
                         fmt::format("graph {}: output {} has no value", g.name, name));
    }
    out[name] = it->second;
  }
  return out;
}

Tensors run_reference(const ir::Graph& g, const Tensors& inputs) {
  return run_graph(g, inputs,
                   [](size_t, const ir::GraphCall& c, Bindings& b) { run_reference(c.op, b); });
}

}  // namespace kiln::interp
