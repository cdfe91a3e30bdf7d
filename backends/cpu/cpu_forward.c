/*
 * cpu_forward.c: the FlashAttention forward pass on the CPU.
 *
 * One task per (batch, query head, query tile), spread over the OpenMP team. A task keeps its
 * query tile and its running (m, l, O) in fp32 scratch and streams the key/value tiles its rows
 * can see: S = Q·Kᵀ, the online-softmax step per row, O = alpha·O + P·V; then O / l and the LSE.
 * Each task reads its inputs and writes only its own rows, so the result does not depend on the
 * number of threads or the order the tasks run in.
 */
#include <math.h>
#include <omp.h>

#include "core/mask.h"
#include "core/softmax.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"
#include "cpu_tensor.h"

typedef struct fwd_scratch {
  float *q;  /* [tm][d]  the query tile */
  float *kt; /* [d][tn]  the key tile, transposed */
  float *v;  /* [tn][dv] the value tile */
  float *s;  /* [tm][tn] scores, then probabilities */
  float *o;  /* [tm][dv] running unnormalised output */
  float *m;  /* [tm]     running row max */
  float *l;  /* [tm]     running row sum */
} fwd_scratch;

/* The one layout of a thread's scratch; with base NULL it only counts the bytes. */
static size_t fwd_carve(const cpu_problem *pb, char *base, fwd_scratch *sc) {
  size_t tm = (size_t)pb->tm, tn = (size_t)pb->tn, d = (size_t)pb->d, dv = (size_t)pb->dv;
  size_t at = 0;
  sc->q = cpu_scratch_take(base, &at, tm * d);
  sc->kt = cpu_scratch_take(base, &at, d * tn);
  sc->v = cpu_scratch_take(base, &at, tn * dv);
  sc->s = cpu_scratch_take(base, &at, tm * tn);
  sc->o = cpu_scratch_take(base, &at, tm * dv);
  sc->m = cpu_scratch_take(base, &at, tm);
  sc->l = cpu_scratch_take(base, &at, tm);
  return at;
}

size_t cpu_forward_thread_bytes(const cpu_problem *pb) {
  fwd_scratch unused;
  return fwd_carve(pb, NULL, &unused);
}

static void forward_task(const fa_request *req, const cpu_problem *pb, const cpu_kernels *kern,
                         const fwd_scratch *sc, int64_t b, int64_t h, int64_t r0) {
  const int tn = pb->tn, d = pb->d, dv = pb->dv;
  const int mr = (int)(pb->seqlen_q - r0 < pb->tm ? pb->seqlen_q - r0 : pb->tm);
  const int64_t hk = h / pb->group, sk = pb->seqlen_k;
  int jlo[CPU_MAX_TILE_M], jhi[CPU_MAX_TILE_M];

  cpu_load_tile(req->q, b, r0, mr, h, d, sc->q, d);
  for (int i = 0; i < mr; ++i) {
    sc->m[i] = -INFINITY;
    sc->l[i] = 0.0f;
  }
  for (int64_t x = 0; x < (int64_t)mr * dv; ++x) sc->o[x] = 0.0f;

  /* Key range any row of the tile sees: both ends grow with the row (mask.h). */
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&pb->mask, r0, sk, &lo_first, &hi_first);
  fa_mask_key_range(&pb->mask, r0 + mr - 1, sk, &lo_last, &hi_last);
  for (int64_t c0 = lo_first / tn * tn; c0 < hi_last; c0 += tn) {
    const int nc = (int)(sk - c0 < tn ? sk - c0 : tn);
    fa_tile_class cls = fa_mask_tile_class(&pb->mask, r0, r0 + mr, c0, c0 + nc, sk);
    if (cls == FA_TILE_EMPTY) continue;
    cpu_load_tile_t(req->k, b, c0, nc, hk, d, sc->kt, tn);
    cpu_load_tile(req->v, b, c0, nc, hk, dv, sc->v, dv);
    kern->gemm(mr, nc, d, sc->q, d, 1, sc->kt, tn, sc->s, tn, 0);
    const int *lo = NULL, *hi = NULL;
    if (cls == FA_TILE_PARTIAL) {
      cpu_tile_row_bounds(pb, r0, mr, c0, nc, jlo, jhi);
      lo = jlo;
      hi = jhi;
    }
    kern->softmax_tile(mr, nc, sc->s, tn, pb->scale, lo, hi, sc->m, sc->l, sc->o, dv, dv);
    kern->gemm(mr, dv, nc, sc->s, tn, 1, sc->v, dv, sc->o, dv, 1);
  }

  void *out = fa_tensor_base(req->out);
  for (int i = 0; i < mr; ++i) {
    cpu_store_row(req->out->dtype, out, cpu_row_offset(req->out, b, r0 + i, h),
                  req->out->strides[3], dv, sc->o + (ptrdiff_t)i * dv,
                  fa_softmax_out_scale(sc->l[i]));
    if (req->lse) *cpu_lse_ptr(req->lse, b, h, r0 + i) = fa_softmax_lse(sc->m[i], sc->l[i]);
  }
}

fa_status cpu_forward(const fa_request *req, const cpu_problem *pb, const cpu_workspace *ws) {
  const int64_t tiles = pb->q_tiles, heads = pb->heads_q;
  const int64_t rows = pb->batch * heads; /* (batch, head) pairs */
  const int64_t tasks = rows * tiles;
  if (tasks == 0) return FA_OK;
  const int team = cpu_team_size(ws, tasks);
  if (team < 1)
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: the workspace holds no per-thread scratch");
  const cpu_kernels *kern = cpu_kernels_get();

#pragma omp parallel num_threads(team)
  {
    fwd_scratch sc;
    fwd_carve(pb, ws->threads_base + (size_t)omp_get_thread_num() * ws->thread_bytes, &sc);
    /* Dynamic, and the last query tiles first: under a causal mask they see the most keys, so
       the long tasks start early and the short ones fill the gaps at the end. */
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t tile = tiles - 1 - t / rows, bh = t % rows;
      forward_task(req, pb, kern, &sc, bh / heads, bh % heads, tile * pb->tm);
    }
  }
  return FA_OK;
}
