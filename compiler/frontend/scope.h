// What the checker knows while it walks a func: declared names and iterators in scope.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ast.h"
#include "kiln/ir.h"

namespace kiln::frontend {

// A declared name: a param, buffer, knob (one namespace) or computation (its
// own namespace, since a computation usually shares the name of the buffer
// it stores to).
struct Decl {
  enum class Kind : uint8_t { Param, Buffer, Knob, Comp } kind = Kind::Param;
  Pos pos;
  ir::DType dtype = ir::kIndexType;  // a buffer's element type, a computation's value type
  size_t rank = 0;                   // a buffer's dimensions, a computation's iterators
  ir::BufKind buf_kind = ir::BufKind::Input;
  bool stores = false;  // a computation that stores to a buffer
  std::string made_by;  // a computation made by desugaring: what made it
};

const char* decl_kind_name(Decl::Kind k);  // "a param", "a buffer", ...

class Scope {
 public:
  const Decl* name(const std::string& n) const { return find(names_, n); }
  const Decl* comp(const std::string& n) const { return find(comps_, n); }
  void add_name(const std::string& n, Decl d) { names_[n] = std::move(d); }
  void add_comp(const std::string& n, Decl d) { comps_[n] = std::move(d); }

  // Iterators in scope, in declaration order (a computation's, then its
  // reduction's); a position orders data-dependent bounds.
  const std::vector<Ident>& iters() const { return iters_; }
  std::optional<size_t> iter(const std::string& n) const;
  void clear_iters() { iters_.clear(); }
  void push_iter(Ident i) { iters_.push_back(std::move(i)); }

  // The computation being checked (it cannot read itself).
  std::string current_comp;

  // " (did you mean 'x'?)" for a near miss among everything declared, or "".
  std::string suggest(const std::string& n) const;

  // Every name the func declares anywhere, so that a use before the
  // declaration can say where the declaration is.
  void add_future(const std::string& n, Pos p) { future_.emplace(n, p); }
  // What to append to "unknown name 'n'" (used at `at`): where it is
  // declared later, or a near miss, or "".
  std::string unknown_hint(const std::string& n, Pos at) const;

 private:
  static const Decl* find(const std::map<std::string, Decl>& m, const std::string& n) {
    auto it = m.find(n);
    return it == m.end() ? nullptr : &it->second;
  }
  std::map<std::string, Decl> names_;
  std::map<std::string, Decl> comps_;
  std::vector<Ident> iters_;
  std::multimap<std::string, Pos> future_;
};

// Built-in function and type names: select, min, max, sum, prod, the math
// intrinsics and the dtype names. They cannot be declared.
bool is_builtin_name(const std::string& n);

}  // namespace kiln::frontend
