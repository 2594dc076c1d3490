// Knob features: a point of a space as numbers a cost model reads (kiln/cost_model.h).
#include <cmath>

#include "kiln/cost_model.h"

namespace kiln::tuner {

std::vector<float> knob_features(const Space& space, const Config& point) {
  std::vector<float> f;
  for (size_t k = 0; k < space.knobs().size(); ++k) {
    const KnobDef& d = space.knobs()[k];
    switch (d.kind) {
      case KnobDef::Kind::Values:
        f.push_back(static_cast<float>(point.at(d.names.front())));
        break;
      case KnobDef::Kind::Split:
        for (const std::string& n : d.names)
          f.push_back(static_cast<float>(std::log2(static_cast<double>(point.at(n)))));
        break;
      case KnobDef::Kind::Tag:
      case KnobDef::Kind::Reorder: {
        size_t at = f.size();
        f.resize(at + space.choices(k), 0.0f);
        f[at + static_cast<size_t>(point.at(d.names.front()))] = 1.0f;
        break;
      }
    }
  }
  return f;
}

}  // namespace kiln::tuner
