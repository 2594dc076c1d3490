// Quasi-affine functions built with isl's functions (affine_function.h).
#include "affine_function.h"

#include <isl/aff.h>
#include <isl/local_space.h>
#include <isl/map.h>
#include <isl/space.h>
#include <isl/val.h>

namespace kiln::poly {

Lin Lin::var(int k) {
  Lin l;
  l.coef[k] = 1;
  return l;
}
Lin Lin::num(int64_t v) {
  Lin l;
  l.cst = v;
  return l;
}
Lin operator+(Lin a, const Lin& b) {
  for (const auto& [k, v] : b.coef) a.coef[k] += v;
  a.cst += b.cst;
  return a;
}
Lin operator*(int64_t s, Lin a) {
  for (auto& [k, v] : a.coef) v *= s;
  a.cst *= s;
  return a;
}

isl::aff affine(const isl::space& domain, const Lin& l) {
  isl_ctx* ctx = domain.ctx().get();
  isl_local_space* ls = isl_local_space_from_space(domain.copy());
  isl_aff* a = isl_aff_val_on_domain(isl_local_space_copy(ls), isl_val_int_from_si(ctx, l.cst));
  for (const auto& [k, v] : l.coef) {
    isl_aff* t = isl_aff_var_on_domain(isl_local_space_copy(ls), isl_dim_set, k);
    a = isl_aff_add(a, isl_aff_scale_val(t, isl_val_int_from_si(ctx, v)));
  }
  isl_local_space_free(ls);
  return isl::manage(a);
}

isl::multi_aff affine_function(const isl::space& domain, const std::vector<Lin>& out) {
  isl_ctx* ctx = domain.ctx().get();
  isl_aff_list* list = isl_aff_list_alloc(ctx, static_cast<int>(out.size()));
  for (const Lin& l : out) list = isl_aff_list_add(list, affine(domain, l).release());
  isl_space* range = isl_space_set_from_params(isl_space_params(domain.copy()));
  range = isl_space_add_dims(range, isl_dim_set, static_cast<unsigned>(out.size()));
  isl_space* space = isl_space_map_from_domain_and_range(domain.copy(), range);
  return isl::manage(isl_multi_aff_from_aff_list(space, list));
}

isl::map affine_map(const isl::space& domain, const std::vector<Lin>& out) {
  return isl::manage(isl_map_from_multi_aff(affine_function(domain, out).release()));
}

isl::space plain_space(isl::ctx ctx, int n) {
  return isl::manage(isl_space_set_alloc(ctx.get(), 0, static_cast<unsigned>(n)));
}

}  // namespace kiln::poly
