/*
 * cpu_backward.c: the FlashAttention backward pass on the CPU, deterministic without atomics.
 *
 * P is recomputed from the scores and the forward's LSE, never stored. Every gradient element has
 * exactly one owner task, which sums its contributions in a fixed order:
 *   phase D: D = rowsum(dO ∘ O) per query row, into the workspace;
 *   pass 1:  one task per (batch, KV head, key tile) owns those rows of dK and dV and visits every
 *            query head of its group and every query tile that sees the keys, in order;
 *   pass 2:  one task per (batch, query head, query tile) owns those rows of dQ and visits the key
 *            tiles its rows see, in order.
 * S, P and dS are recomputed in both passes (seven tile products per tile pair instead of five):
 * the price of one owner per gradient element, with no atomics and no partial dQ copies to reduce,
 * so the result is the same whatever the thread count or the schedule.
 *
 * Softcap, ALiBi and dropout enter through tile_p_and_ds only: the score transform and the
 * dropout mask are recomputed exactly as the forward pass made them. There is no split-KV here:
 * num_splits only changes how the forward pass sums, not the gradients (see cpu_decide.c).
 *
 * bf16 on the amx table (pb->bf16dp): the products run on kern->gemm_bf16 (AMX-BF16 tiles,
 * cpu_amx.c) with fp32 accumulators, in the structure of the forward's bf16 path: the reduction
 * dimension in bf16 pairs. S = Q·Kᵀ and dP = dO·Vᵀ pair along the head dims (Q, dO, K, V are bf16
 * already: exact), so S is the forward's own product; dV += Pᵀ·dO and dK += dSᵀ·Q pair along the
 * query rows (P and dS transposed, then rounded to bf16; dO and Q rows interleaved by twos);
 * dQ += dS·K along the keys (K rows interleaved by twos), as FlashAttention's GPU kernels round P
 * and dS to the storage dtype for their products. Everything else (the softmax, dS itself, the
 * transform, dropout) stays fp32.
 */
#include <omp.h>

#include "core/math/backward.h"
#include "core/math/mask.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"
#include "cpu_tensor.h"

typedef struct bwd_scratch {
  float *q;    /* [tm][d]  query tile */
  float *dout; /* [tm][dv] dO tile */
  float *lse;  /* [tm]     the rows' LSE */
  float *dd;   /* [tm]     the rows' D */
  float *s;    /* [tm][tn] scores, then P (then P∘Z with dropout) */
  float *dp;   /* [tm][tn] dP, then dS */
  float *g;    /* [tm][tn] softcap only: the cap's derivative per score */
  float *z;    /* [tm][tn] dropout only: Z = keep / (1 - p) */
  float *kt;   /* [d][tn]  key tile, transposed */
  float *vt;   /* [dv][tn] value tile, transposed */
  float *kd;   /* [tn][d]  pass 1: the dK accumulator; pass 2: the key tile */
  float *vd;   /* pass 1: dV accumulator [tn][dv]; pass 2: dQ accumulator [tm][d];
                  phase D: the O tile [tm][dv] */
  /* The bf16 products only (pb->bf16dp). kt and vt then hold K and V transposed as pairs along
     the head dims [d/2][tn], [dv/2][tn]; pass 2's kd holds K rows interleaved by pairs of keys
     [tn/2 + 1][d]. */
  uint32_t *qp;  /* [tm][d/2]  Q as pairs along the head dim: A of S = Q·Kᵀ */
  uint32_t *dop; /* [tm][dv/2] dO likewise: A of dP = dO·Vᵀ */
  uint32_t *qi;  /* [tm/2 + 1][d]  pass 1: Q rows interleaved by pairs: B of dK += dSᵀ·Q */
  uint32_t *doi; /* [tm/2 + 1][dv] pass 1: dO rows likewise: B of dV += Pᵀ·dO */
  float *xt;     /* [tn][tm] pass 1: P or dS transposed, fp32 */
  uint32_t *xp;  /* pass 1: Pᵀ or dSᵀ as pairs along the query rows [tn][tm/2 + 1]; pass 2: dS
                    as pairs along the keys [tm][tn/2 + 1] */
} bwd_scratch;

/* Words per row of the pairs of tm query rows (xp in pass 1, qi, doi), and of tn keys (xp in pass
   2): an odd count gets a padded last pair. */
static int rows_pairs_ld(const cpu_problem *pb) { return pb->tm / 2 + 1; }
static int keys_pairs_ld(const cpu_problem *pb) { return pb->tn / 2 + 1; }

static size_t max3(size_t a, size_t b, size_t c) {
  size_t m = a > b ? a : b;
  return m > c ? m : c;
}

/* The one layout of a thread's scratch; with base NULL it only counts the bytes. */
static size_t bwd_carve(const cpu_problem *pb, char *base, bwd_scratch *sc) {
  size_t tm = (size_t)pb->tm, tn = (size_t)pb->tn, d = (size_t)pb->d, dv = (size_t)pb->dv;
  size_t at = 0;
  sc->q = cpu_scratch_take(base, &at, tm * d);
  sc->dout = cpu_scratch_take(base, &at, tm * dv);
  sc->lse = cpu_scratch_take(base, &at, tm);
  sc->dd = cpu_scratch_take(base, &at, tm);
  sc->s = cpu_scratch_take(base, &at, tm * tn);
  sc->dp = cpu_scratch_take(base, &at, tm * tn);
  sc->g = pb->softcap > 0.0f ? cpu_scratch_take(base, &at, tm * tn) : NULL;
  sc->z = pb->dropout ? cpu_scratch_take(base, &at, tm * tn) : NULL;
  sc->kt = cpu_scratch_take(base, &at, d * tn);
  sc->vt = cpu_scratch_take(base, &at, dv * tn);
  /* pass 2's interleaved K (bf16) is (tn/2 + 1) x d words: within tn x d from tn = 2 up */
  const size_t kd_rows = pb->bf16dp ? (size_t)keys_pairs_ld(pb) : 0;
  sc->kd = cpu_scratch_take(base, &at, (tn > kd_rows ? tn : kd_rows) * d);
  sc->vd = cpu_scratch_take(base, &at, max3(tn * dv, tm * d, tm * dv));
  sc->qp = sc->dop = sc->qi = sc->doi = sc->xp = NULL;
  sc->xt = NULL;
  if (pb->bf16dp) { /* 32-bit words, carved as floats */
    const size_t rp = (size_t)rows_pairs_ld(pb), kp = (size_t)keys_pairs_ld(pb);
    sc->qp = (uint32_t *)cpu_scratch_take(base, &at, tm * (d / 2));
    sc->dop = (uint32_t *)cpu_scratch_take(base, &at, tm * (dv / 2));
    sc->qi = (uint32_t *)cpu_scratch_take(base, &at, rp * d);
    sc->doi = (uint32_t *)cpu_scratch_take(base, &at, rp * dv);
    sc->xt = cpu_scratch_take(base, &at, tn * tm);
    sc->xp = (uint32_t *)cpu_scratch_take(base, &at, max3(tn * rp, tm * kp, 0));
  }
  return at;
}

size_t cpu_backward_thread_bytes(const cpu_problem *pb) {
  bwd_scratch unused;
  return bwd_carve(pb, NULL, &unused);
}

static int tile_rows(int64_t total, int64_t start, int tile) {
  return (int)(total - start < tile ? total - start : tile);
}

static float *d_rows(const cpu_problem *pb, float *dall, int64_t b, int64_t h, int64_t r0) {
  return dall + (b * pb->heads_q + h) * pb->seqlen_q + r0;
}

static void phase_d_task(const cpu_problem *pb, const cpu_seq *sq, const bwd_scratch *sc,
                         float *dall, int64_t h, int64_t r0) {
  if (r0 >= sq->sq) return;
  const int mr = tile_rows(sq->sq, r0, pb->tm), dv = pb->dv;
  cpu_load_tile(pb->kern, &sq->out, r0, mr, h, dv, sc->vd, dv);
  cpu_load_tile(pb->kern, &sq->dout, r0, mr, h, dv, sc->dout, dv);
  float *drow = d_rows(pb, dall, sq->b, h, r0);
  for (int i = 0; i < mr; ++i)
    drow[i] = fa_bwd_rowdot(sc->dout + (ptrdiff_t)i * dv, sc->vd + (ptrdiff_t)i * dv, dv);
}

/* Q, dO, LSE and D of query rows [r0, r0 + mr) of head h (with the bf16 products, Q and dO as
   pairs along the head dims too; exact, both are bf16). */
static void load_query_side(const cpu_problem *pb, const cpu_kernels *kern, const cpu_seq *sq,
                            const bwd_scratch *sc, float *dall, int64_t h, int64_t r0, int mr) {
  cpu_load_tile(pb->kern, &sq->q, r0, mr, h, pb->d, sc->q, pb->d);
  cpu_load_tile(pb->kern, &sq->dout, r0, mr, h, pb->dv, sc->dout, pb->dv);
  const float *drow = d_rows(pb, dall, sq->b, h, r0);
  for (int i = 0; i < mr; ++i) {
    sc->lse[i] = *cpu_lse_ptr(sq, h, r0 + i);
    sc->dd[i] = drow[i];
  }
  if (pb->bf16dp) {
    kern->bf16_pairs(mr, pb->d, sc->q, pb->d, sc->qp, pb->d / 2);
    kern->bf16_pairs(mr, pb->dv, sc->dout, pb->dv, sc->dop, pb->dv / 2);
  }
}

/* Key rows [c0, c0 + nc) of KV head hk: K and V transposed for S and dP, and for dQ (with_k)
   K itself, each in the layout its product takes. */
static void load_key_side(const cpu_problem *pb, const cpu_kernels *kern, const cpu_seq *sq,
                          const bwd_scratch *sc, int64_t hk, int64_t c0, int nc, int with_k) {
  const int tn = pb->tn, d = pb->d, dv = pb->dv;
  if (pb->bf16dp) {
    cpu_load_tile_pairs_t(kern, &sq->k, c0, nc, hk, d, (uint32_t *)sc->kt, tn);
    cpu_load_tile_pairs_t(kern, &sq->v, c0, nc, hk, dv, (uint32_t *)sc->vt, tn);
    if (with_k) cpu_load_tile_pairs_v(kern, &sq->k, c0, nc, hk, d, (uint32_t *)sc->kd);
  } else {
    cpu_load_tile_t(kern, &sq->k, c0, nc, hk, d, sc->kt, tn);
    cpu_load_tile_t(kern, &sq->v, c0, nc, hk, dv, sc->vt, tn);
    if (with_k) cpu_load_tile(pb->kern, &sq->k, c0, nc, hk, d, sc->kd, d);
  }
}

/* The mr x nc fp32 tile x (row stride ldx) transposed through xt and rounded to bf16 pairs along
   its rows: dst[j * ldd + p] = (x[2p][j], x[2p + 1][j]), for Pᵀ and dSᵀ. */
static void pairs_transposed(const cpu_problem *pb, const cpu_kernels *kern, const bwd_scratch *sc,
                             int mr, int nc, const float *x, ptrdiff_t ldx, uint32_t *dst,
                             ptrdiff_t ldd) {
  for (int r0 = 0; r0 < mr; r0 += CPU_T_BLOCK)
    kern->transpose(mr - r0 < CPU_T_BLOCK ? mr - r0 : CPU_T_BLOCK, nc, x + (ptrdiff_t)r0 * ldx, ldx,
                    sc->xt + r0, pb->tm);
  kern->bf16_pairs(nc, mr, sc->xt, pb->tm, dst, ldd);
}

/* With the query side and the transposed key/value tiles loaded: P into s, dS into dp (times the
   softcap's derivative, so dQ and dK are plain products), and with dropout P∘Z into s for dV. */
static void tile_p_and_ds(const cpu_problem *pb, const cpu_kernels *kern, const bwd_scratch *sc,
                          const cpu_seq *sq, int64_t h, int64_t r0, int mr, int64_t c0, int nc,
                          fa_tile_class cls) {
  const int tn = pb->tn;
  int jlo[CPU_MAX_TILE_M], jhi[CPU_MAX_TILE_M];
  const int *lo = NULL, *hi = NULL;
  if (cls == FA_TILE_PARTIAL) {
    cpu_tile_row_bounds(sq, r0, mr, c0, nc, jlo, jhi);
    lo = jlo;
    hi = jhi;
  }
  if (pb->bf16dp) /* the forward's score product (cpu_forward.c), so the forward's scores */
    kern->gemm_bf16(mr, nc, pb->d / 2, sc->qp, pb->d / 2, (const uint32_t *)sc->kt, tn, sc->s, tn,
                    0);
  else
    kern->gemm(mr, nc, pb->d, sc->q, pb->d, 1, sc->kt, tn, sc->s, tn, 0);
  float scale = pb->scale;
  if (pb->transform) {
    cpu_score_tile(pb, sq, h, r0, mr, c0, nc, sc->s, tn, lo, hi, sc->g);
    scale = 1.0f; /* the transform has scaled them */
  }
  kern->probs_tile(mr, nc, sc->s, tn, scale, sc->lse, lo, hi);
  if (pb->bf16dp)
    kern->gemm_bf16(mr, nc, pb->dv / 2, sc->dop, pb->dv / 2, (const uint32_t *)sc->vt, tn, sc->dp,
                    tn, 0);
  else
    kern->gemm(mr, nc, pb->dv, sc->dout, pb->dv, 1, sc->vt, tn, sc->dp, tn, 0);
  if (pb->dropout) {
    /* dS = P ∘ (dP∘Z − D): Z enters dP before the row's D is taken off. */
    cpu_dropout_factors(pb, sq, h, r0, mr, c0, nc, sc->z, tn);
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nc; ++j) sc->dp[i * tn + j] *= sc->z[i * tn + j];
  }
  kern->ds_tile(mr, nc, sc->s, sc->dp, tn, sc->dd);
  if (sc->g) {
    /* Only visible scores have a derivative (the rest of g is never written; dS is 0 there). */
    for (int i = 0; i < mr; ++i) {
      int a = lo ? lo[i] : 0, e = hi ? hi[i] : nc;
      for (int j = a; j < e; ++j) sc->dp[i * tn + j] *= sc->g[i * tn + j];
    }
  }
  if (pb->dropout)
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nc; ++j) sc->s[i * tn + j] *= sc->z[i * tn + j];
}

static void zero(float *x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = 0.0f;
}

/* Pass 1: dK and dV of key rows [c0, c0 + tn) of KV head hk (those the tensor holds). Keys past
   the sequence's used length (seqused_k) get zero gradients. */
static void dkdv_task(const cpu_problem *pb, const cpu_kernels *kern, const bwd_scratch *sc,
                      const cpu_seq *sq, float *dall, int64_t hk, int64_t c0) {
  const int tn = pb->tn, tm = pb->tm, d = pb->d, dv = pb->dv;
  if (c0 >= sq->k_rows) return; /* a shorter packed sequence has fewer key tiles */
  const int rows = tile_rows(sq->k_rows, c0, tn);
  const int nc = c0 < sq->sk ? tile_rows(sq->sk, c0, tn) : 0;
  zero(sc->kd, (size_t)rows * (size_t)d);
  zero(sc->vd, (size_t)rows * (size_t)dv);
  if (nc > 0) load_key_side(pb, kern, sq, sc, hk, c0, nc, 0);
  for (int64_t g = 0; g < pb->group && nc > 0; ++g) {
    const int64_t h = hk * pb->group + g;
    for (int64_t r0 = 0; r0 < sq->sq; r0 += tm) {
      const int mr = tile_rows(sq->sq, r0, tm);
      fa_tile_class cls = fa_mask_tile_class(&sq->mask, r0, r0 + mr, c0, c0 + nc, sq->sk);
      if (cls == FA_TILE_EMPTY) continue;
      load_query_side(pb, kern, sq, sc, dall, h, r0, mr);
      tile_p_and_ds(pb, kern, sc, sq, h, r0, mr, c0, nc, cls);
      if (pb->bf16dp) {
        const int k2 = (mr + 1) / 2, ld = rows_pairs_ld(pb);
        cpu_load_tile_pairs_v(kern, &sq->dout, r0, mr, h, dv, sc->doi);
        cpu_load_tile_pairs_v(kern, &sq->q, r0, mr, h, d, sc->qi);
        pairs_transposed(pb, kern, sc, mr, nc, sc->s, tn, sc->xp, ld);
        kern->gemm_bf16(nc, dv, k2, sc->xp, ld, sc->doi, dv, sc->vd, dv, 1); /* dV += Pᵀ·dO */
        pairs_transposed(pb, kern, sc, mr, nc, sc->dp, tn, sc->xp, ld);
        kern->gemm_bf16(nc, d, k2, sc->xp, ld, sc->qi, d, sc->kd, d, 1); /* dK += dSᵀ·Q */
      } else {
        kern->gemm(nc, dv, mr, sc->s, 1, tn, sc->dout, dv, sc->vd, dv, 1); /* dV += Pᵀ·dO */
        kern->gemm(nc, d, mr, sc->dp, 1, tn, sc->q, d, sc->kd, d, 1);      /* dK += dSᵀ·Q */
      }
    }
  }
  cpu_store_tile(&sq->dk, c0, rows, hk, d, sc->kd, d, pb->scale);
  cpu_store_tile(&sq->dv, c0, rows, hk, dv, sc->vd, dv, 1.0f);
}

/* Pass 2: dQ of query rows [r0, r0 + mr) of head h. */
static void dq_task(const cpu_problem *pb, const cpu_kernels *kern, const bwd_scratch *sc,
                    const cpu_seq *sq, float *dall, int64_t h, int64_t r0) {
  const int tn = pb->tn, d = pb->d;
  if (r0 >= sq->sq) return;
  const int mr = tile_rows(sq->sq, r0, pb->tm);
  const int64_t hk = h / pb->group, sk = sq->sk;
  load_query_side(pb, kern, sq, sc, dall, h, r0, mr);
  zero(sc->vd, (size_t)mr * (size_t)d);
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&sq->mask, r0, sk, &lo_first, &hi_first);
  fa_mask_key_range(&sq->mask, r0 + mr - 1, sk, &lo_last, &hi_last);
  for (int64_t c0 = lo_first / tn * tn; c0 < hi_last; c0 += tn) {
    const int nc = tile_rows(sk, c0, tn);
    fa_tile_class cls = fa_mask_tile_class(&sq->mask, r0, r0 + mr, c0, c0 + nc, sk);
    if (cls == FA_TILE_EMPTY) continue;
    load_key_side(pb, kern, sq, sc, hk, c0, nc, 1);
    tile_p_and_ds(pb, kern, sc, sq, h, r0, mr, c0, nc, cls);
    if (pb->bf16dp) { /* dQ += dS·K, dS rounded to bf16 pairs along the keys */
      const int ld = keys_pairs_ld(pb);
      kern->bf16_pairs(mr, nc, sc->dp, tn, sc->xp, ld);
      kern->gemm_bf16(mr, d, (nc + 1) / 2, sc->xp, ld, (const uint32_t *)sc->kd, d, sc->vd, d, 1);
    } else {
      kern->gemm(mr, d, nc, sc->dp, tn, 1, sc->kd, d, sc->vd, d, 1); /* dQ += dS·K */
    }
  }
  cpu_store_tile(&sq->dq, r0, mr, h, d, sc->vd, d, pb->scale);
}

fa_status cpu_backward(const fa_request *req, const cpu_problem *pb, const cpu_workspace *ws) {
  const int64_t q_rows = pb->batch * pb->heads_q, k_rows = pb->batch * pb->heads_kv;
  const int64_t q_tasks = q_rows * pb->q_tiles, k_tasks = k_rows * pb->k_tiles;
  const int64_t q_tiles = pb->q_tiles;
  const int q_team = cpu_team_size(ws, q_tasks), k_team = cpu_team_size(ws, k_tasks);
  if ((q_tasks > 0 && q_team < 1) || (k_tasks > 0 && k_team < 1))
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: the workspace holds no per-thread scratch");
  if (q_tasks > 0 && !ws->shared)
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: the workspace has no room for D");
  const cpu_kernels *kern = pb->kern;
  float *dall = ws->shared;

  if (q_tasks > 0) {
#pragma omp parallel num_threads(q_team)
    {
      bwd_scratch sc;
      bwd_carve(pb, ws->threads_base + (size_t)omp_get_thread_num() * ws->thread_bytes, &sc);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < q_tasks; ++t) {
        cpu_seq sq;
        cpu_seq_init(req, pb, t / q_tiles / pb->heads_q, &sq);
        phase_d_task(pb, &sq, &sc, dall, t / q_tiles % pb->heads_q, t % q_tiles * pb->tm);
      }
    }
  }

  if (k_tasks > 0) {
#pragma omp parallel num_threads(k_team)
    {
      bwd_scratch sc;
      bwd_carve(pb, ws->threads_base + (size_t)omp_get_thread_num() * ws->thread_bytes, &sc);
      /* The first key tiles first: under a causal mask they are seen by the most rows. */
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < k_tasks; ++t) {
        int64_t tile = t / k_rows, bh = t % k_rows;
        cpu_seq sq;
        cpu_seq_init(req, pb, bh / pb->heads_kv, &sq);
        dkdv_task(pb, kern, &sc, &sq, dall, bh % pb->heads_kv, tile * pb->tn);
      }
    }
  }

  if (q_tasks > 0) {
#pragma omp parallel num_threads(q_team)
    {
      bwd_scratch sc;
      bwd_carve(pb, ws->threads_base + (size_t)omp_get_thread_num() * ws->thread_bytes, &sc);
      /* The last query tiles first: under a causal mask they see the most keys. */
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < q_tasks; ++t) {
        int64_t tile = q_tiles - 1 - t / q_rows, bh = t % q_rows;
        cpu_seq sq;
        cpu_seq_init(req, pb, bh / pb->heads_q, &sq);
        dq_task(pb, kern, &sc, &sq, dall, bh % pb->heads_q, tile * pb->tm);
      }
    }
  }
  return FA_OK;
}
