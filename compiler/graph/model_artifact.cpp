// A whole graph compiled to one artifact (kiln/graph.h): the kernels in one shared object, the
// plan that runs them, the constants in a weights blob. The plan's text format is described in
// runtime/README.md, beside the loader that reads it (runtime/src/model.c).
#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <map>

#include "kiln/digest.h"
#include "kiln/graph.h"
#include "kiln/interp.h"
#include "kiln/json.h"

namespace kiln::graph {
namespace {

// `s` as a C identifier: every other character an underscore, a digit first prefixed.
std::string identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) != 0 ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0])) != 0) out = "m_" + out;
  return out;
}

// A name in the plan: one word, so space, control bytes, bytes past ASCII and '%' as %XX.
std::string plan_word(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c <= 0x20 || c >= 0x7f || c == '%') {
      out += fmt::format("%{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out.empty() ? "%00" : out;
}

const char* kind_word(TensorPlace::Kind k) {
  switch (k) {
    case TensorPlace::Kind::Input:
      return "input";
    case TensorPlace::Kind::Output:
      return "output";
    case TensorPlace::Kind::Const:
      return "const";
    case TensorPlace::Kind::Arena:
      return "arena";
  }
  return "?";
}

std::string tensor_json(const ModelTensor& t) {
  JsonObject o;
  o.str("name", t.name).str("dtype", ir::dtype_name(t.dtype)).raw("shape", json_int_array(t.shape));
  if (t.batched) o.boolean("batched", true);
  return o.done();
}

}  // namespace

ModelArtifact compile_model(const ir::Graph& source, const CompileOptions& opts, FoldBy by) {
  ModelArtifact a;
  a.name = identifier(source.name);
  a.batch = source.batch;
  a.target = opts.target;
  a.opt_level = opts.opt_level;
  a.calls_before = source.calls.size();

  ir::Graph g = optimize(source, opts, by);
  a.calls = g.calls.size();
  a.memory = plan_memory(g);

  std::map<std::string, const ir::GraphTensor*> tensors;
  for (const ir::GraphTensor& t : g.tensors) tensors.emplace(t.name, &t);
  for (const ir::GraphTensor& t : g.tensors) {
    if (t.kind != ir::TensorKind::Input) continue;
    bool batched = std::find(source.batched_inputs.begin(), source.batched_inputs.end(), t.name) !=
                   source.batched_inputs.end();
    a.inputs.push_back({t.name, t.dtype, t.shape, batched});
  }
  for (const std::string& name : g.outputs) {
    auto it = tensors.find(name);
    if (it == tensors.end() || a.memory.places.count(name) == 0) {
      throw CompileError(ErrorStage::Validate, g.where,
                         fmt::format("graph {}: output {} has no value", g.name, name));
    }
    a.outputs.push_back({name, it->second->dtype, it->second->shape, !source.batch.empty()});
  }

  // The constants the calls read, and those returned, into the weights blob.
  std::vector<std::string> used;
  for (const auto& [name, place] : a.memory.places) {
    if (place.kind == TensorPlace::Kind::Const) used.push_back(name);
  }
  Tensors values = interp::graph_constants(g);
  std::map<std::string, uint64_t> weight_offset;
  for (const std::string& name : used) {
    const HostBuffer& v = values.at(name);
    size_t bytes = static_cast<size_t>(v.size()) * ir::dtype_bytes(v.dtype());
    a.weights.resize((a.weights.size() + 63) / 64 * 64);
    weight_offset[name] = a.weights.size();
    a.weights.resize(a.weights.size() + bytes);
    if (bytes > 0) std::memcpy(a.weights.data() + weight_offset[name], v.data(), bytes);
  }
  a.weights_sha256 = sha256_hex(std::string_view(a.weights.data(), a.weights.size()));

  // Every distinct operator lowered once; its kernel named after the func and its number.
  std::vector<ir::LoweredFunc> kernels;
  std::map<std::string, size_t> by_key;
  std::vector<size_t> kernel_of;
  for (const ir::GraphCall& c : g.calls) {
    ir::Overrides knobs;
    if (!opts.workload_knobs.empty()) {
      auto tuned = opts.workload_knobs.find(workload_hash(ir::apply_overrides(c.op, {})));
      if (tuned != opts.workload_knobs.end()) knobs = tuned->second;
    }
    CompileRequest r{
        .func = c.op, .overrides = knobs, .options = opts, .output = CompileOutput::Loops};
    auto [it, added] = by_key.emplace(cache_key(r), kernels.size());
    kernel_of.push_back(it->second);
    if (!added) continue;
    CompileResult compiled = compile(r);
    ir::LoweredFunc f = std::move(compiled.optimized);
    f.name = fmt::format("{}_{}", identifier(c.op.name), kernels.size());
    kernels.push_back(std::move(f));
  }

  // The plan: the tensors (in a fixed order: by name), the calls, the copies.
  std::map<std::string, size_t> index;
  std::string plan = "kiln-model 1\n";
  plan += fmt::format("name {}\n", plan_word(a.name));
  plan += fmt::format("weights {} {}\n", a.weights.size(), a.weights_sha256);
  plan += fmt::format("arena {}\n", a.memory.arena_bytes);
  plan += fmt::format("kernels {}\n", kernels.size());
  if (!a.batch.empty()) {
    // The inputs that hold one sample of the run-time batch (every output does).
    std::string batched;
    size_t count = 0;
    for (size_t k = 0; k < a.inputs.size(); ++k) {
      if (!a.inputs[k].batched) continue;
      batched += fmt::format(" {}", k);
      ++count;
    }
    plan += fmt::format("batch {} {}{}\n", plan_word(a.batch), count, batched);
  }
  // Inputs and outputs first, in their order: the loader numbers them as they come.
  std::vector<std::string> order;
  for (const ModelTensor& t : a.inputs) order.push_back(t.name);
  for (const auto& [name, place] : a.memory.places) {
    if (place.kind == TensorPlace::Kind::Output) continue;
    if (place.kind != TensorPlace::Kind::Input) order.push_back(name);
  }
  std::vector<std::string> outputs_in_order(g.outputs.size());
  for (const auto& [name, place] : a.memory.places) {
    if (place.kind == TensorPlace::Kind::Output) outputs_in_order[place.index] = name;
  }
  // An output given by a copy has a tensor line of its own, named as the output.
  std::vector<std::string> lines;
  auto tensor_line = [&](const char* kind, size_t idx, uint64_t offset, const ir::GraphTensor& t,
                         const std::string& name) {
    uint64_t bytes = ir::dtype_bytes(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    std::string dims;
    for (int64_t d : t.shape) dims += fmt::format(" {}", d);
    plan += fmt::format("tensor {} {} {} {} {} {}{} {}\n", kind, idx, offset, bytes,
                        ir::dtype_name(t.dtype), t.shape.size(), dims, plan_word(name));
  };
  size_t next = 0;
  for (const std::string& name : order) {
    const TensorPlace& p = a.memory.places.at(name);
    uint64_t offset = p.kind == TensorPlace::Kind::Const   ? weight_offset.at(name)
                      : p.kind == TensorPlace::Kind::Arena ? p.offset
                                                           : 0;
    tensor_line(kind_word(p.kind), p.index, offset, *tensors.at(name), name);
    index[name] = next++;
  }
  std::vector<std::pair<size_t, size_t>> copy_lines;  // (destination, source) tensor lines
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const std::string& name = g.outputs[k];
    tensor_line("output", k, 0, *tensors.at(name), name);
    if (outputs_in_order[k] == name) {
      index[name] = next;
    } else {
      copy_lines.emplace_back(next, 0);
    }
    ++next;
  }
  // Sources of the copies, now that every tensor has its line.
  {
    size_t c = 0;
    for (const auto& [k, name] : a.memory.copies) copy_lines.at(c++).second = index.at(name);
  }
  for (size_t k = 0; k < g.calls.size(); ++k) {
    const ir::GraphCall& c = g.calls[k];
    const ir::LoweredFunc& f = kernels[kernel_of[k]];
    std::map<std::string, int64_t> params = interp::param_values(c.op);
    std::map<std::string, std::string> buffer_tensor;
    std::vector<const ir::Buf*> ins = c.op.bufs_of_kind(ir::BufKind::Input);
    std::vector<const ir::Buf*> outs = c.op.bufs_of_kind(ir::BufKind::Output);
    for (size_t i = 0; i < ins.size(); ++i) buffer_tensor[ins[i]->name] = c.args.at(i);
    for (size_t i = 0; i < outs.size(); ++i) buffer_tensor[outs[i]->name] = c.results.at(i);
    std::string args;
    size_t nargs = 0;
    for (const std::string& p : f.params) {
      args += fmt::format(" p={}", params.at(p));
      ++nargs;
    }
    for (const ir::Buf& b : f.args) {
      args += fmt::format(" t={}", index.at(buffer_tensor.at(b.name)));
      ++nargs;
    }
    plan += fmt::format("call {} {}{}\n", kernel_of[k], nargs, args);
  }
  for (const auto& [dst, src] : copy_lines) plan += fmt::format("copy {} {}\n", dst, src);
  plan += "end\n";
  a.plan = plan;

  codegen::Options llvm{opts.target, opts.opt_level,
                        [&a](const std::string& note) { a.notes.push_back(note); }};
  a.code = codegen::compile_model_shared_object(kernels, a.name, a.plan, llvm);
  a.code_sha256 = sha256_hex(std::string_view(a.code.data(), a.code.size()));
  a.imports = codegen::shared_object_imports(a.code);
  for (const ir::LoweredFunc& f : kernels) a.kernels.push_back(codegen::entry_symbol(f));
  return a;
}

std::string ModelArtifact::metadata_json() const {
  std::vector<std::string> ins, outs;
  for (const ModelTensor& t : inputs) ins.push_back(tensor_json(t));
  for (const ModelTensor& t : outputs) outs.push_back(tensor_json(t));
  return JsonObject()
      .str("kind", "model")
      .str("name", name)
      .str("triple", target.triple)
      .str("cpu", target.cpu)
      .str("features", target.features)
      .integer("opt_level", opt_level)
      .str("loader", "kiln_model_open")
      .str("batch", batch)
      .raw("inputs", json_array(ins))
      .raw("outputs", json_array(outs))
      .integer("calls", static_cast<int64_t>(calls))
      .integer("calls_before_graph_passes", static_cast<int64_t>(calls_before))
      .raw("kernels", json_string_array(kernels))
      .raw("imports", json_string_array(imports))
      .integer("size", static_cast<int64_t>(code.size()))
      .str("code_sha256", code_sha256)
      .integer("weights_bytes", static_cast<int64_t>(weights.size()))
      .str("weights_sha256", weights_sha256)
      .integer("arena_bytes", static_cast<int64_t>(memory.arena_bytes))
      .integer("unshared_bytes", static_cast<int64_t>(memory.unshared_bytes))
      .done();
}

}  // namespace kiln::graph
