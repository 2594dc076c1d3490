// The operator library, parsed from the .kiln files built into kiln.
#include "kiln/library.h"

#include <stdexcept>

#include "kiln/frontend.h"

namespace kiln::library {

namespace detail {
const std::vector<std::pair<std::string, std::string>>& embedded_files();
}  // namespace detail

const std::vector<std::pair<std::string, std::string>>& files() { return detail::embedded_files(); }

const ir::Module& module() {
  static const ir::Module m = [] {
    ir::Module all;
    for (const auto& [name, text] : files()) {
      ir::Module part = frontend::parse_module(text, "library/" + name);
      for (ir::Func& f : part.funcs) all.funcs.push_back(std::move(f));
    }
    return all;
  }();
  return m;
}

const ir::Func& func(const std::string& name) {
  const ir::Func* f = module().find(name);
  if (!f) throw std::logic_error("the operator library has no func " + name);
  return *f;
}

}  // namespace kiln::library
