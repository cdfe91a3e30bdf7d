/*
 * cpu_rowops.c: the per-element steps between the tile products (see cpu_kernels.h), compiled
 * once per instruction set like cpu_gemm.c. The softmax and backward algebra itself is core's
 * (softmax.h, backward.h); this file only applies it to whole rows.
 */
#include <math.h>

#include "core/backward.h"
#include "core/softmax.h"
#include "cpu_exp.h"
#include "cpu_kernels.h"

/* Lanes of the row reductions: wide enough for the vectoriser, and a fixed number so the
   summation order (and thus every rounding) depends on the tile width only. */
#define LANES 16

static float row_max(const float *restrict x, int n) {
  float lane[LANES];
  for (int u = 0; u < LANES; ++u) lane[u] = -INFINITY;
  int j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int u = 0; u < LANES; ++u) lane[u] = x[j + u] > lane[u] ? x[j + u] : lane[u];
  for (; j < n; ++j) lane[0] = x[j] > lane[0] ? x[j] : lane[0];
  float mx = -INFINITY;
  for (int u = 0; u < LANES; ++u) mx = lane[u] > mx ? lane[u] : mx;
  return mx;
}

/* x[j] = exp(x[j] - shift), returning the sum of the new values. */
static float row_exp_sum(float *restrict x, int n, float shift) {
  float lane[LANES];
  for (int u = 0; u < LANES; ++u) lane[u] = 0.0f;
  int j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int u = 0; u < LANES; ++u) {
      float e = cpu_expf(x[j + u] - shift);
      x[j + u] = e;
      lane[u] += e;
    }
  for (; j < n; ++j) {
    float e = cpu_expf(x[j] - shift);
    x[j] = e;
    lane[0] += e;
  }
  float sum = 0.0f;
  for (int u = 0; u < LANES; ++u) sum += lane[u];
  return sum;
}

static void row_zero_outside(float *restrict x, int n, int lo, int hi) {
  for (int j = 0; j < lo; ++j) x[j] = 0.0f;
  for (int j = hi; j < n; ++j) x[j] = 0.0f;
}

/* The visible columns [*lo, *hi) of row i; every column when the tile is not masked. */
static inline void row_bounds(const int *jlo, const int *jhi, int i, int nc, int *lo, int *hi) {
  *lo = jlo ? jlo[i] : 0;
  *hi = jhi ? jhi[i] : nc;
  if (*hi < *lo) *hi = *lo;
}

void CPU_KFN(softmax_tile)(int mr, int nc, float *s, ptrdiff_t lds, float scale, const int *jlo,
                           const int *jhi, float *m, float *l, float *o, ptrdiff_t ldo, int dv) {
  for (int i = 0; i < mr; ++i) {
    float *restrict row = s + i * lds;
    int lo, hi;
    row_bounds(jlo, jhi, i, nc, &lo, &hi);
    for (int j = lo; j < hi; ++j) row[j] *= scale;
    /* A row that sees nothing here brings tile_max = -inf: alpha is then 1 (or 0 while the row
       has seen nothing at all), and its probabilities are all 0. */
    float tile_max = row_max(row + lo, hi - lo);
    float alpha = fa_softmax_online_step(&m[i], &l[i], tile_max);
    l[i] += row_exp_sum(row + lo, hi - lo, fa_softmax_safe_max(m[i]));
    row_zero_outside(row, nc, lo, hi);
    if (alpha != 1.0f) {
      float *restrict orow = o + i * ldo;
      for (int c = 0; c < dv; ++c) orow[c] *= alpha;
    }
  }
}

void CPU_KFN(probs_tile)(int mr, int nc, float *s, ptrdiff_t lds, float scale, const float *lse,
                         const int *jlo, const int *jhi) {
  for (int i = 0; i < mr; ++i) {
    float *restrict row = s + i * lds;
    int lo, hi;
    row_bounds(jlo, jhi, i, nc, &lo, &hi);
    float row_lse = lse[i];
    for (int j = lo; j < hi; ++j) row[j] = fa_softmax_prob_from_lse(row[j] * scale, row_lse);
    row_zero_outside(row, nc, lo, hi);
  }
}

void CPU_KFN(ds_tile)(int mr, int nc, const float *p, float *dp, ptrdiff_t ld, const float *d) {
  for (int i = 0; i < mr; ++i) {
    const float *restrict prow = p + i * ld;
    float *restrict dprow = dp + i * ld;
    float di = d[i];
    for (int j = 0; j < nc; ++j) dprow[j] = fa_bwd_ds(prow[j], dprow[j], di);
  }
}
