// isl objects kept beyond their isl_ctx: each basic set or map as its space and
// constraint matrices, which isl turns back into the object in microseconds,
// where its parser takes up to half a millisecond (it computes an affine hull
// for every term it reads). read_set and read_map are isl's reader with a
// memo for the process on top: the candidates of one operator build the same
// domains and accesses from the same text. Private to compiler/poly.
#pragma once

#include <isl/cpp.h>
#include <isl/mat.h>
#include <isl/space.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::poly {

// A relation as it is remembered. A union map with existential variables
// (isl's matrices would lose how they are defined) or a coefficient beyond 64
// bits is kept as isl text. A set or map is kept only as one basic set or map
// without them, which reads back in the form it had.
class StoredRelation {
 public:
  explicit StoredRelation(const isl::union_map& u);
  // Nullopt unless s (m) is one basic set (map) without existential
  // variables and coefficients beyond 64 bits.
  static std::optional<StoredRelation> of_set(const isl::set& s);
  static std::optional<StoredRelation> of_map(const isl::map& m);

  isl::union_map load_union_map(isl::ctx ctx) const;
  isl::set load_set(isl::ctx ctx) const;  // of one made by of_set
  isl::map load_map(isl::ctx ctx) const;  // of one made by of_map

  // What it holds, roughly: for the memos' bounds.
  size_t bytes() const;

 private:
  // A space by its names, which isl's own text of it would not keep: read
  // back, "[o0, o1]" names dims that had no name.
  struct Space {
    enum class Kind { Params, Set, Map } kind = Kind::Set;
    std::vector<std::string> params;
    std::string in_tuple, out_tuple;             // a set's tuple is out_tuple
    std::vector<std::string> in_dims, out_dims;  // "" for a dim without a name

    // Takes space; nullopt for a nested space (a wrapped map in a tuple).
    static std::optional<Space> of(isl_space* space);
    isl_space* make(isl::ctx ctx) const;
    size_t bytes() const;
  };
  struct Piece {
    Space space;
    size_t columns = 0;
    std::vector<int64_t> eq, ineq;  // row after row
  };
  // Add a piece (false when it must be kept as text); the store_ forms are
  // isl's callbacks, which take the piece.
  bool add_map(isl_basic_map* bm);
  bool add_set(isl_basic_set* bs);
  static isl_stat store_basic_map(isl_basic_map* bm, void* user);
  static isl_stat store_basic_set(isl_basic_set* bs, void* user);
  // Takes eq and ineq, a piece's constraints (cst, params, dims, divs).
  bool add_piece(std::optional<Space> space, isl_mat* eq, isl_mat* ineq);
  isl_map* load_piece_map(isl::ctx ctx, const Piece& p) const;

  StoredRelation() = default;
  std::optional<std::string> text_;
  std::vector<Piece> pieces_;
};

// isl_set_read_from_str and isl_map_read_from_str, remembered by text for the
// process (up to 16 MB) where the result is one basic set or map without
// existential variables (StoredRelation::of_set, of_map): read back, it has
// the form isl's reader gave it.
// Malformed text throws isl::exception, as isl's reader does.
isl::set read_set(isl::ctx ctx, const std::string& text);
isl::map read_map(isl::ctx ctx, const std::string& text);

}  // namespace kiln::poly
