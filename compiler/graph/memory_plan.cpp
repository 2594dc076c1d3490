// Buffers planned (kiln/graph.h): the intermediate tensors of a graph share one arena, each
// placed by greedy-by-size over the calls' order.
#include <algorithm>
#include <set>

#include "kiln/graph.h"

namespace kiln::graph {
namespace {

constexpr uint64_t kAlign = 64;

uint64_t tensor_bytes(const ir::GraphTensor& t) {
  uint64_t n = ir::dtype_bytes(t.dtype);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t aligned(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Interval {
  std::string name;
  uint64_t bytes = 0;
  size_t first = 0, last = 0;  // the calls that write and last read it, inclusive
};

}  // namespace

MemoryPlan plan_memory(const ir::Graph& g) {
  MemoryPlan plan;
  std::map<std::string, const ir::GraphTensor*> tensors;
  for (const ir::GraphTensor& t : g.tensors) tensors.emplace(t.name, &t);
  auto bytes_of = [&](const std::string& name) {
    auto it = tensors.find(name);
    return it == tensors.end() ? uint64_t{0} : tensor_bytes(*it->second);
  };

  std::set<std::string> read(g.outputs.begin(), g.outputs.end());
  for (const ir::GraphCall& c : g.calls) read.insert(c.args.begin(), c.args.end());
  size_t inputs = 0;
  for (const ir::GraphTensor& t : g.tensors) {
    if (t.kind == ir::TensorKind::Input) {
      plan.places[t.name] = {TensorPlace::Kind::Input, inputs++, 0, tensor_bytes(t)};
    } else if (t.kind == ir::TensorKind::Const && read.count(t.name) > 0) {
      plan.places[t.name] = {TensorPlace::Kind::Const, 0, 0, tensor_bytes(t)};
    }
  }
  std::set<std::string> written;
  for (const ir::GraphCall& c : g.calls) written.insert(c.results.begin(), c.results.end());
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const std::string& name = g.outputs[k];
    auto placed = plan.places.find(name);
    if (placed != plan.places.end()) {
      plan.copies.emplace_back(k, name);  // an input, a constant, or an output given already
    } else if (written.count(name) > 0) {
      plan.places[name] = {TensorPlace::Kind::Output, k, 0, bytes_of(name)};
    }
  }

  // Every other tensor a call writes lives from that call to its last reader.
  std::map<std::string, Interval> live;
  for (size_t k = 0; k < g.calls.size(); ++k) {
    const ir::GraphCall& c = g.calls[k];
    for (const std::string& a : c.args) {
      auto it = live.find(a);
      if (it != live.end()) it->second.last = k;
    }
    for (const std::string& r : c.results) {
      if (plan.places.count(r) > 0 || live.count(r) > 0) continue;
      live[r] = Interval{r, aligned(bytes_of(r)), k, k};
    }
  }
  std::vector<Interval> order;
  for (auto& [name, iv] : live) order.push_back(iv);
  // The largest first; among equals, the earliest written (which packs a chain of equal
  // tensors into as many slots as are alive at once, where names' order could take more).
  std::stable_sort(order.begin(), order.end(), [](const Interval& a, const Interval& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.first < b.first;
  });
  struct Placed {
    uint64_t offset, bytes;
    size_t first, last;
  };
  std::vector<Placed> placed;
  for (const Interval& iv : order) {
    plan.unshared_bytes += iv.bytes;
    // The ranges taken by tensors alive at the same time, by offset; the first gap that holds
    // this one.
    std::vector<std::pair<uint64_t, uint64_t>> taken;
    for (const Placed& p : placed) {
      if (p.first <= iv.last && iv.first <= p.last) taken.emplace_back(p.offset, p.bytes);
    }
    std::sort(taken.begin(), taken.end());
    uint64_t offset = 0;
    for (const auto& [at, size] : taken) {
      if (offset + iv.bytes <= at) break;
      offset = std::max(offset, at + size);
    }
    placed.push_back({offset, iv.bytes, iv.first, iv.last});
    plan.places[iv.name] = {TensorPlace::Kind::Arena, 0, offset, bytes_of(iv.name)};
    plan.arena_bytes = std::max(plan.arena_bytes, offset + iv.bytes);
  }
  return plan;
}

}  // namespace kiln::graph
