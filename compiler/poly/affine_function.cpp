// Quasi-affine functions built with isl's functions (affine_function.h).
#include "affine_function.h"

#include <isl/aff.h>
#include <isl/local_space.h>
#include <isl/map.h>
#include <isl/mat.h>
#include <isl/set.h>
#include <isl/space.h>
#include <isl/val.h>

#include <cstdlib>
#include <memory>
#include <numeric>

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

bool matrix_values(isl_mat* mat, int64_t bound, std::vector<int64_t>& out) {
  const isl_size rows = isl_mat_rows(mat), cols = isl_mat_cols(mat);
  if (rows < 0 || cols < 0) return false;
  for (isl_size r = 0; r < rows; ++r) {
    for (isl_size k = 0; k < cols; ++k) {
      isl_val* v = isl_mat_get_element_val(mat, r, k);
      const bool fits = v && isl_val_is_int(v) == isl_bool_true && isl_val_cmp_si(v, bound) <= 0 &&
                        isl_val_cmp_si(v, -bound) >= 0;
      if (fits) out.push_back(isl_val_get_num_si(v));
      isl_val_free(v);
      if (!fits) return false;
    }
  }
  return true;
}

namespace {

// A constraint as a row of coefficients: the constant, the params, the inputs
// and the outputs, in this order.
using Row = std::vector<int64_t>;
using Mat = std::unique_ptr<isl_mat, decltype(&isl_mat_free)>;

// The rows of mat; false where a coefficient is beyond what the rows keep
// (below 2^40: sums of a few products stay far inside 64 bits).
constexpr int64_t kLimit = (int64_t{1} << 40) - 1;
bool rows_of(const Mat& mat, std::vector<Row>& out) {
  const isl_size cols = isl_mat_cols(mat.get());
  std::vector<int64_t> values;
  if (cols < 0 || !matrix_values(mat.get(), kLimit, values)) return false;
  for (size_t at = 0; at < values.size(); at += static_cast<size_t>(cols))
    out.emplace_back(values.begin() + static_cast<std::ptrdiff_t>(at),
                     values.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(cols)));
  return true;
}

// mat without the rows `used` marks and the columns [first, first + n).
isl_mat* rest_of(Mat mat, const std::vector<bool>& used, size_t first, size_t n) {
  isl_mat* m = mat.release();
  for (size_t r = used.size(); r-- > 0;)
    if (used[r]) m = isl_mat_drop_rows(m, static_cast<unsigned>(r), 1);
  return isl_mat_drop_cols(m, static_cast<unsigned>(first), static_cast<unsigned>(n));
}

isl_stat take_basic_map(isl_basic_map* bm, void* user) {
  *static_cast<isl_basic_map**>(user) = bm;
  return isl_stat_ok;
}

// The constraints of a map that is one basic map: rows of the constant, the
// params, the inputs, the outputs and the existential variables.
struct Constraints {
  size_t params = 0, ins = 0, outs = 0, divs = 0;
  Mat eq_mat{nullptr, isl_mat_free}, ineq_mat{nullptr, isl_mat_free};
  std::vector<Row> eqs, ineqs;
};
std::optional<Constraints> constraints_of(const isl::map& m) {
  if (isl_map_n_basic_map(m.get()) != 1) return std::nullopt;
  isl_basic_map* bm = nullptr;
  if (isl_map_foreach_basic_map(m.get(), take_basic_map, &bm) != isl_stat_ok || bm == nullptr)
    return std::nullopt;
  Constraints c;
  const isl_size params = isl_basic_map_dim(bm, isl_dim_param);
  const isl_size ins = isl_basic_map_dim(bm, isl_dim_in);
  const isl_size outs = isl_basic_map_dim(bm, isl_dim_out);
  const isl_size divs = isl_basic_map_dim(bm, isl_dim_div);
  if (params >= 0 && ins >= 0 && outs >= 0 && divs >= 0) {
    c.params = static_cast<size_t>(params);
    c.ins = static_cast<size_t>(ins);
    c.outs = static_cast<size_t>(outs);
    c.divs = static_cast<size_t>(divs);
    c.eq_mat.reset(isl_basic_map_equalities_matrix(bm, isl_dim_cst, isl_dim_param, isl_dim_in,
                                                   isl_dim_out, isl_dim_div));
    c.ineq_mat.reset(isl_basic_map_inequalities_matrix(bm, isl_dim_cst, isl_dim_param, isl_dim_in,
                                                       isl_dim_out, isl_dim_div));
  }
  isl_basic_map_free(bm);
  if (!c.eq_mat || !c.ineq_mat || !rows_of(c.eq_mat, c.eqs) || !rows_of(c.ineq_mat, c.ineqs))
    return std::nullopt;
  return c;
}

// plain_function of a map of one basic map.
std::optional<isl::pw_multi_aff> plain_piece(const isl::map& m) {
  std::optional<Constraints> c = constraints_of(m);
  if (!c || c->divs != 0) return std::nullopt;
  const std::vector<Row>& eqs = c->eqs;
  const std::vector<Row>& ineqs = c->ineqs;
  const size_t params = c->params;
  const size_t first_out = 1 + params + c->ins;
  const size_t n_out = c->outs;
  // The last output a row names, or -1.
  auto last_out = [&](const Row& r) {
    for (size_t q = n_out; q-- > 0;)
      if (r[first_out + q] != 0) return static_cast<int>(q);
    return -1;
  };

  isl::space space = m.space().domain();
  isl_ctx* ctx = space.ctx().get();
  using LocalSpace = std::unique_ptr<isl_local_space, decltype(&isl_local_space_free)>;
  LocalSpace ls(isl_local_space_from_space(space.copy()), isl_local_space_free);
  std::vector<isl::aff> out;
  // The sum of row[k] * (dim k) over the constant, params, inputs and the
  // outputs found so far, output q left out.
  auto expression = [&](const Row& r, size_t q) {
    isl::aff a = isl::manage(
        isl_aff_val_on_domain(isl_local_space_copy(ls.get()), isl_val_int_from_si(ctx, r[0])));
    for (size_t k = 1; k < r.size(); ++k) {
      if (r[k] == 0 || k == first_out + q) continue;
      const bool param = k <= params;
      isl::aff t = k >= first_out
                       ? out[k - first_out]
                       : isl::manage(isl_aff_var_on_domain(
                             isl_local_space_copy(ls.get()), param ? isl_dim_param : isl_dim_set,
                             static_cast<unsigned>(param ? k - 1 : k - 1 - params)));
      a = a.add(isl::manage(isl_aff_scale_val(t.release(), isl_val_int_from_si(ctx, r[k]))));
    }
    return a;
  };
  std::vector<bool> eq_used(eqs.size()), ineq_used(ineqs.size());
  for (size_t q = 0; q < n_out; ++q) {
    const size_t col = first_out + q;
    bool found = false;
    // c * o + rest = 0 with c = 1 or -1: o = -rest / c.
    for (size_t r = 0; !found && r < eqs.size(); ++r) {
      if (eq_used[r] || last_out(eqs[r]) != static_cast<int>(q) || std::labs(eqs[r][col]) != 1)
        continue;
      isl::aff rest = expression(eqs[r], q);
      out.push_back(eqs[r][col] == 1 ? rest.neg() : rest);
      eq_used[r] = found = true;
    }
    // e - d * o >= 0 and d * o - e + d - 1 >= 0: o = floor(e / d).
    for (size_t a = 0; !found && a < ineqs.size(); ++a) {
      const int64_t d = -ineqs[a][col];
      if (ineq_used[a] || d <= 0 || last_out(ineqs[a]) != static_cast<int>(q)) continue;
      for (size_t b = 0; !found && b < ineqs.size(); ++b) {
        if (ineq_used[b] || b == a || ineqs[b][col] != d) continue;
        bool pair = ineqs[a][0] + ineqs[b][0] == d - 1;
        for (size_t k = 1; pair && k < ineqs[a].size(); ++k)
          pair = k == col || ineqs[a][k] + ineqs[b][k] == 0;
        if (!pair) continue;
        out.push_back(isl::manage(isl_aff_floor(
            isl_aff_scale_down_ui(expression(ineqs[a], q).release(), static_cast<unsigned>(d)))));
        ineq_used[a] = ineq_used[b] = found = true;
      }
    }
    if (!found) return std::nullopt;
  }
  // The constraints left make the domain; one that names an output is a
  // question for isl.
  for (size_t r = 0; r < eqs.size(); ++r)
    if (!eq_used[r] && last_out(eqs[r]) >= 0) return std::nullopt;
  for (size_t r = 0; r < ineqs.size(); ++r)
    if (!ineq_used[r] && last_out(ineqs[r]) >= 0) return std::nullopt;
  isl_basic_set* domain = isl_basic_set_from_constraint_matrices(
      space.copy(), rest_of(std::move(c->eq_mat), eq_used, first_out, n_out),
      rest_of(std::move(c->ineq_mat), ineq_used, first_out, n_out), isl_dim_cst, isl_dim_param,
      isl_dim_set, isl_dim_div);
  isl_aff_list* list = isl_aff_list_alloc(ctx, static_cast<int>(out.size()));
  for (isl::aff& a : out) list = isl_aff_list_add(list, a.release());
  isl_multi_aff* ma = isl_multi_aff_from_aff_list(m.space().release(), list);
  return isl::manage(isl_pw_multi_aff_alloc(isl_set_from_basic_set(domain), ma));
}

}  // namespace

std::optional<isl::pw_multi_aff> plain_function(const isl::map& m) {
  const isl_size n = isl_map_n_basic_map(m.get());
  if (n == 1) return plain_piece(m);
  if (n < 2) return std::nullopt;
  // Several basic maps (a separated loop): each plain, on domains that do not
  // overlap (two that did would be added where they meet).
  std::vector<isl::map> parts;
  isl_map_foreach_basic_map(
      m.get(),
      [](isl_basic_map* bm, void* user) {
        static_cast<std::vector<isl::map>*>(user)->push_back(
            isl::manage(isl_map_from_basic_map(bm)));
        return isl_stat_ok;
      },
      &parts);
  std::optional<isl::pw_multi_aff> whole;
  std::vector<isl::set> domains;
  for (const isl::map& part : parts) {
    std::optional<isl::pw_multi_aff> f = plain_piece(part);
    if (!f) return std::nullopt;
    isl::set domain = f->domain();
    for (const isl::set& d : domains)
      if (!d.is_disjoint(domain)) return std::nullopt;
    domains.push_back(domain);
    whole = whole ? whole->union_add(*f) : *f;
  }
  return whole;
}

namespace {

// Elimination over 64-bit integers, refusing what would overflow.
bool mul_add(int64_t a, int64_t x, int64_t b, int64_t y, int64_t& out) {
  int64_t p, q;
  return !__builtin_mul_overflow(a, x, &p) && !__builtin_mul_overflow(b, y, &q) &&
         !__builtin_sub_overflow(p, q, &out);
}

void divide_by_gcd(Row& r) {
  int64_t g = 0;
  for (int64_t v : r) g = std::gcd(g, v);
  if (g > 1)
    for (int64_t& v : r) v /= g;
}

}  // namespace

std::optional<std::vector<std::vector<int64_t>>> inputs_from_outputs(const isl::map& m) {
  std::optional<Constraints> c = constraints_of(m);
  if (!c) return std::nullopt;
  std::vector<Row>& rows = c->eqs;
  const size_t first_x = 1 + c->params, n_x = c->ins;
  const size_t first_y = first_x + n_x, n_y = c->outs;
  const size_t first_div = first_y + n_y, n_div = c->divs;
  // Reduced row echelon form over the unknowns, the divs first: where x is
  // determined, the row whose pivot is x names no other unknown.
  std::vector<size_t> unknowns;
  for (size_t k = 0; k < n_div; ++k) unknowns.push_back(first_div + k);
  for (size_t k = 0; k < n_x; ++k) unknowns.push_back(first_x + k);
  std::map<size_t, size_t> pivot_of;  // column -> row
  size_t next = 0;
  for (size_t col : unknowns) {
    size_t p = next;
    while (p < rows.size() && rows[p][col] == 0) ++p;
    if (p == rows.size()) continue;
    std::swap(rows[p], rows[next]);
    for (size_t t = 0; t < rows.size(); ++t) {
      if (t == next || rows[t][col] == 0) continue;
      const int64_t a = rows[next][col], b = rows[t][col];
      for (size_t k = 0; k < rows[t].size(); ++k)
        if (!mul_add(a, rows[t][k], b, rows[next][k], rows[t][k])) return std::nullopt;
      divide_by_gcd(rows[t]);
    }
    pivot_of[col] = next++;
  }
  std::vector<Row> out;
  for (size_t i = 0; i < n_x; ++i) {
    auto it = pivot_of.find(first_x + i);
    if (it == pivot_of.end()) return std::nullopt;
    const Row& r = rows[it->second];
    // p * x + known = 0, no other unknown, and known a multiple of p.
    for (size_t col : unknowns)
      if (col != first_x + i && r[col] != 0) return std::nullopt;
    const int64_t p = r[first_x + i];
    Row x;
    for (size_t k = 0; k < first_div; ++k) {
      if (k >= first_x && k < first_y) continue;
      if (r[k] % p != 0) return std::nullopt;
      x.push_back(-r[k] / p);
    }
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace kiln::poly
