/*
 * cpu_score.c: the score transform of core/math/score.h (softcap, ALiBi) applied to a tile of raw
 * q·k products. Only requests with softcap or ALiBi come here: plain attention keeps the kernels'
 * fused scaling. The transform is core's, element by element; this file only finds each element's
 * (row, key, slope) and, in the backward pass, keeps the softcap's derivative.
 */
#include "core/math/score.h"
#include "cpu_internal.h"

/* The slope of query head h: alibi_slopes is [heads_q] or [batch, heads_q], strides applied. */
static float alibi_slope(const cpu_problem *pb, int64_t b, int64_t h) {
  const fa_tensor *al = pb->alibi;
  const float *base = (const float *)fa_tensor_base(al);
  if (al->ndim == 1) return base[h * al->strides[0]];
  return base[b * al->strides[0] + h * al->strides[1]];
}

void cpu_score_tile(const cpu_problem *pb, const cpu_seq *sq, int64_t h, int64_t r0, int mr,
                    int64_t c0, int nc, float *s, ptrdiff_t lds, const int *jlo, const int *jhi,
                    float *grad) {
  const int has_alibi = pb->alibi != NULL;
  const float slope = has_alibi ? alibi_slope(pb, sq->b, h) : 0.0f;
  const float scale = pb->scale, cap = pb->softcap;
  /* ALiBi's distance in the sequence's positions: a ring block's offsets and diagonal, else the
     call's own. */
  const int64_t shift = pb->positioned ? pb->pos_shift : sq->mask.shift;
  c0 += pb->pos_k0;
  for (int i = 0; i < mr; ++i) {
    float *row = s + i * lds;
    int lo = jlo ? jlo[i] : 0, hi = jhi ? jhi[i] : nc;
    const int64_t qi = pb->pos_q0 + r0 + i;
    if (grad) {
      /* The backward pass needs the capped score before the bias: the softcap's derivative is a
         function of it (score.h), the bias has none. */
      float *g = grad + i * lds;
      for (int j = lo; j < hi; ++j) {
        float capped = fa_score_softcap(row[j] * scale, cap);
        g[j] = fa_score_softcap_grad(capped, cap);
        row[j] = has_alibi ? capped + fa_score_alibi(slope, qi, c0 + j, shift) : capped;
      }
    } else {
      for (int j = lo; j < hi; ++j)
        row[j] = fa_score(row[j], scale, cap, has_alibi, slope, qi, c0 + j, shift);
    }
  }
}
