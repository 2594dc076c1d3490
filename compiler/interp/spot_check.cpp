// A kernel's outputs against the reference interpreter at sampled elements (kiln/interp.h,
// check_at_points): how a whole model's run is checked, call by call.
#include <random>
#include <set>

#include "kiln/interp.h"

namespace kiln::interp {

Mismatch check_at_points(const ir::Func& f, const Bindings& ran, int64_t points_per_output,
                         uint64_t seed, int64_t* compared) {
  Bindings ref;
  ref.params = ran.params;
  std::vector<const ir::Buf*> outs = f.bufs_of_kind(ir::BufKind::Output);
  for (const ir::Buf* in : f.bufs_of_kind(ir::BufKind::Input))
    ref.buffers[in->name] = ran.buffers.at(in->name);
  std::map<std::string, std::vector<int64_t>> sample;
  std::mt19937_64 rng(seed);
  for (const ir::Buf* o : outs) {
    const HostBuffer& out = ran.buffers.at(o->name);
    ref.buffers[o->name] = HostBuffer(out.dtype(), out.shape());
    if (out.size() <= points_per_output) continue;  // all of it
    std::set<int64_t> chosen = {0, out.size() - 1};
    while (static_cast<int64_t>(chosen.size()) < points_per_output)
      chosen.insert(static_cast<int64_t>(rng() % static_cast<uint64_t>(out.size())));
    sample[o->name].assign(chosen.begin(), chosen.end());
  }
  if (!run_reference_at(f, ref, sample)) {
    sample.clear();
    run_reference(f, ref);
  }
  Mismatch worst;
  if (compared != nullptr) *compared = 0;
  for (const ir::Buf* o : outs) {
    const std::string& name = o->name;
    const HostBuffer &expected = ref.buffers.at(name), &actual = ran.buffers.at(name);
    auto at = sample.find(name);
    std::vector<int64_t> flats;
    if (at != sample.end()) {
      flats = at->second;
    } else {
      flats.resize(static_cast<size_t>(actual.size()));
      for (size_t k = 0; k < flats.size(); ++k) flats[k] = static_cast<int64_t>(k);
    }
    if (compared != nullptr) *compared += static_cast<int64_t>(flats.size());
    // The elements as two buffers of their own, compared as a graph's outputs are.
    int64_t n = static_cast<int64_t>(flats.size());
    std::map<std::string, HostBuffer> e, a;
    HostBuffer& eb = e[name] = HostBuffer(actual.dtype(), {n});
    HostBuffer& ab = a[name] = HostBuffer(actual.dtype(), {n});
    for (int64_t p = 0; p < n; ++p) {
      int64_t flat = flats[static_cast<size_t>(p)];
      if (ir::is_float(actual.dtype())) {
        eb.set_f(p, expected.get_f(flat));
        ab.set_f(p, actual.get_f(flat));
      } else {
        eb.set_i(p, expected.get_i(flat));
        ab.set_i(p, actual.get_i(flat));
      }
    }
    Mismatch m = compare_buffers({name}, e, a);
    if (!m.index.empty()) {  // back from the sample's numbering to the output's index
      int64_t flat = flats.at(static_cast<size_t>(m.index[0]));
      m.index.assign(actual.shape().size(), 0);
      for (size_t d = m.index.size(); d-- > 0;) {
        m.index[d] = flat % actual.shape()[d];
        flat /= actual.shape()[d];
      }
    }
    if (!m.ok) return m;
    if (m.rel_error > worst.rel_error || worst.buffer.empty()) worst = m;
  }
  return worst;
}

}  // namespace kiln::interp
