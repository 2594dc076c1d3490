// StoredRelation and the memoized isl reader.
#include "stored_relation.h"

#include <isl/map.h>
#include <isl/mat.h>
#include <isl/set.h>
#include <isl/space.h>
#include <isl/union_map.h>
#include <isl/val.h>

#include <cstdlib>
#include <limits>
#include <memory>

#include "affine_function.h"
#include "model.h"
#include "text_memo.h"

namespace kiln::poly {
namespace {

// A piece keeps coefficients of 64 bits; a relation with a wider one is kept
// as text.
constexpr int64_t kWidest = std::numeric_limits<int64_t>::max();

isl_mat* matrix(isl::ctx ctx, const std::vector<int64_t>& values, size_t columns) {
  size_t rows = columns ? values.size() / columns : 0;
  isl_mat* mat =
      isl_mat_alloc(ctx.get(), static_cast<unsigned>(rows), static_cast<unsigned>(columns));
  for (size_t k = 0; k < values.size() && mat; ++k)
    mat = isl_mat_set_element_val(mat, static_cast<int>(k / columns), static_cast<int>(k % columns),
                                  isl_val_int_from_si(ctx.get(), values[k]));
  return mat;
}

template <typename T>
T checked(isl::ctx ctx, T raw) {
  if (!raw) isl::exception::throw_last_error(ctx);  // out of isl operations
  return raw;
}

}  // namespace

std::optional<StoredRelation::Space> StoredRelation::Space::of(isl_space* space) {
  bool nested = isl_space_is_wrapping(space) == isl_bool_true ||
                (isl_space_is_set(space) != isl_bool_true &&
                 (isl_space_domain_is_wrapping(space) == isl_bool_true ||
                  isl_space_range_is_wrapping(space) == isl_bool_true));
  if (nested) {
    isl_space_free(space);
    return std::nullopt;
  }
  Space out;
  auto name = [](const char* n) { return std::string(n ? n : ""); };
  auto dims = [&](isl_dim_type type, std::vector<std::string>& names) {
    isl_size n = isl_space_dim(space, type);
    for (isl_size k = 0; k < n; ++k)
      names.push_back(name(isl_space_get_dim_name(space, type, static_cast<unsigned>(k))));
  };
  dims(isl_dim_param, out.params);
  if (isl_space_is_params(space) == isl_bool_true) {
    out.kind = Kind::Params;
  } else if (isl_space_is_set(space) == isl_bool_true) {
    out.kind = Kind::Set;
    out.out_tuple = name(isl_space_get_tuple_name(space, isl_dim_set));
    dims(isl_dim_set, out.out_dims);
  } else {
    out.kind = Kind::Map;
    out.in_tuple = name(isl_space_get_tuple_name(space, isl_dim_in));
    out.out_tuple = name(isl_space_get_tuple_name(space, isl_dim_out));
    dims(isl_dim_in, out.in_dims);
    dims(isl_dim_out, out.out_dims);
  }
  isl_space_free(space);
  return out;
}

isl_space* StoredRelation::Space::make(isl::ctx ctx) const {
  auto np = static_cast<unsigned>(params.size()), ni = static_cast<unsigned>(in_dims.size()),
       no = static_cast<unsigned>(out_dims.size());
  isl_space* sp = kind == Kind::Params ? isl_space_params_alloc(ctx.get(), np)
                  : kind == Kind::Set  ? isl_space_set_alloc(ctx.get(), np, no)
                                       : isl_space_alloc(ctx.get(), np, ni, no);
  auto name_dims = [&](isl_dim_type type, const std::vector<std::string>& names) {
    for (size_t k = 0; k < names.size(); ++k)
      if (!names[k].empty())
        sp = isl_space_set_dim_name(sp, type, static_cast<unsigned>(k), names[k].c_str());
  };
  name_dims(isl_dim_param, params);
  if (kind == Kind::Set) {
    if (!out_tuple.empty()) sp = isl_space_set_tuple_name(sp, isl_dim_set, out_tuple.c_str());
    name_dims(isl_dim_set, out_dims);
  } else if (kind == Kind::Map) {
    if (!in_tuple.empty()) sp = isl_space_set_tuple_name(sp, isl_dim_in, in_tuple.c_str());
    if (!out_tuple.empty()) sp = isl_space_set_tuple_name(sp, isl_dim_out, out_tuple.c_str());
    name_dims(isl_dim_in, in_dims);
    name_dims(isl_dim_out, out_dims);
  }
  return sp;
}

size_t StoredRelation::Space::bytes() const {
  size_t n = in_tuple.size() + out_tuple.size();
  for (const auto* names : {&params, &in_dims, &out_dims})
    for (const auto& x : *names) n += x.size() + 1;
  return n;
}

StoredRelation::StoredRelation(const isl::union_map& u) {
  isl_stat walked = isl_union_map_foreach_map(
      u.get(),
      [](isl_map* map, void* user) {
        isl_stat ok = isl_map_foreach_basic_map(map, store_basic_map, user);
        isl_map_free(map);
        return ok;
      },
      this);
  if (walked != isl_stat_ok) {
    pieces_.clear();
    text_ = to_str(u);
  }
}

std::optional<StoredRelation> StoredRelation::of_set(const isl::set& s) {
  StoredRelation out;
  if (isl_set_n_basic_set(s.get()) != 1 ||
      isl_set_foreach_basic_set(s.get(), store_basic_set, &out) != isl_stat_ok)
    return std::nullopt;
  return out;
}

std::optional<StoredRelation> StoredRelation::of_map(const isl::map& m) {
  StoredRelation out;
  if (isl_map_n_basic_map(m.get()) != 1 ||
      isl_map_foreach_basic_map(m.get(), store_basic_map, &out) != isl_stat_ok)
    return std::nullopt;
  return out;
}

isl_stat StoredRelation::store_basic_map(isl_basic_map* bm, void* user) {
  bool stored = static_cast<StoredRelation*>(user)->add_map(bm);
  isl_basic_map_free(bm);
  return stored ? isl_stat_ok : isl_stat_error;
}

isl_stat StoredRelation::store_basic_set(isl_basic_set* bs, void* user) {
  bool stored = static_cast<StoredRelation*>(user)->add_set(bs);
  isl_basic_set_free(bs);
  return stored ? isl_stat_ok : isl_stat_error;
}

bool StoredRelation::add_map(isl_basic_map* bm) {
  if (isl_basic_map_dim(bm, isl_dim_div) != 0) return false;
  return add_piece(Space::of(isl_basic_map_get_space(bm)),
                   isl_basic_map_equalities_matrix(bm, isl_dim_cst, isl_dim_param, isl_dim_in,
                                                   isl_dim_out, isl_dim_div),
                   isl_basic_map_inequalities_matrix(bm, isl_dim_cst, isl_dim_param, isl_dim_in,
                                                     isl_dim_out, isl_dim_div));
}

bool StoredRelation::add_set(isl_basic_set* bs) {
  if (isl_basic_set_dim(bs, isl_dim_div) != 0) return false;
  return add_piece(
      Space::of(isl_basic_set_get_space(bs)),
      isl_basic_set_equalities_matrix(bs, isl_dim_cst, isl_dim_param, isl_dim_set, isl_dim_div),
      isl_basic_set_inequalities_matrix(bs, isl_dim_cst, isl_dim_param, isl_dim_set, isl_dim_div));
}

bool StoredRelation::add_piece(std::optional<Space> space, isl_mat* eq, isl_mat* ineq) {
  Piece p;
  bool ok = space && eq && ineq && matrix_values(eq, kWidest, p.eq) &&
            matrix_values(ineq, kWidest, p.ineq);
  if (ok) {
    p.space = std::move(*space);
    p.columns = static_cast<size_t>(isl_mat_cols(eq));
    pieces_.push_back(std::move(p));
  }
  isl_mat_free(eq);
  isl_mat_free(ineq);
  return ok;
}

isl_map* StoredRelation::load_piece_map(isl::ctx ctx, const Piece& p) const {
  return isl_map_from_basic_map(isl_basic_map_from_constraint_matrices(
      p.space.make(ctx), matrix(ctx, p.eq, p.columns), matrix(ctx, p.ineq, p.columns), isl_dim_cst,
      isl_dim_param, isl_dim_in, isl_dim_out, isl_dim_div));
}

isl::union_map StoredRelation::load_union_map(isl::ctx ctx) const {
  if (text_) return isl::union_map(ctx, *text_);
  isl_union_map* u = isl_union_map_empty(isl_space_params_alloc(ctx.get(), 0));
  for (const Piece& p : pieces_) u = isl_union_map_add_map(u, load_piece_map(ctx, p));
  return isl::manage(checked(ctx, u));
}

isl::map StoredRelation::load_map(isl::ctx ctx) const {
  return isl::manage(checked(ctx, load_piece_map(ctx, pieces_.at(0))));
}

isl::set StoredRelation::load_set(isl::ctx ctx) const {
  const Piece& p = pieces_.at(0);
  return isl::manage(checked(
      ctx, isl_set_from_basic_set(isl_basic_set_from_constraint_matrices(
               p.space.make(ctx), matrix(ctx, p.eq, p.columns), matrix(ctx, p.ineq, p.columns),
               isl_dim_cst, isl_dim_param, isl_dim_set, isl_dim_div))));
}

size_t StoredRelation::bytes() const {
  if (text_) return text_->size();
  size_t n = 0;
  for (const Piece& p : pieces_)
    n += p.space.bytes() + sizeof(int64_t) * (p.eq.size() + p.ineq.size());
  return n;
}

namespace {

using StoredPtr = std::shared_ptr<const StoredRelation>;

TextMemo<StoredPtr>& read_memo() {
  static TextMemo<StoredPtr> memo(TextMemo<StoredPtr>::kUnbounded, size_t{16} << 20);
  return memo;
}

// The isl operations limit is part of the key: a text read under one limit
// does not answer for another (as for the dependences, docs/limits.md).
std::string read_key(isl::ctx ctx, char kind, const std::string& text) {
  return std::to_string(isl_ctx_get_max_operations(ctx.get())) + kind + text;
}

// read_set and read_map: T is isl::set or isl::map, store and load the
// StoredRelation's writer and reader of one.
template <typename T>
T read(isl::ctx ctx, char kind, const std::string& text,
       std::optional<StoredRelation> (*store)(const T&),
       T (StoredRelation::*load)(isl::ctx) const) {
  std::string key = read_key(ctx, kind, text);
  std::optional<StoredPtr> known = read_memo().find(key);
  if (known && *known) return ((**known).*load)(ctx);
  T read(ctx, text);
  if (known) return read;  // remembered as one to read again
  std::optional<StoredRelation> stored = store(read);
  if (!stored) {
    read_memo().add(key, nullptr);
    return read;
  }
  auto kept = std::make_shared<const StoredRelation>(std::move(*stored));
  read_memo().add(key, kept, kept->bytes());
  // The stored form even the first time, so that every compilation starts
  // from the same objects.
  return ((*kept).*load)(ctx);
}

}  // namespace

isl::set read_set(isl::ctx ctx, const std::string& text) {
  return read(ctx, 's', text, &StoredRelation::of_set, &StoredRelation::load_set);
}

isl::map read_map(isl::ctx ctx, const std::string& text) {
  return read(ctx, 'm', text, &StoredRelation::of_map, &StoredRelation::load_map);
}

}  // namespace kiln::poly
