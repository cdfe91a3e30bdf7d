/*
 * ring_forward.c: the forward ring. At step t the rank holds the K/V shard of rank (rank - t) mod
 * world; it starts passing that shard on to the next rank (and receiving the following one from
 * the previous rank), computes its block with fa_forward in float32, merges the block's output
 * into the running one by the LSEs (fa_softmax_merge_lse, core/math/softmax.h), then waits for the
 * exchange. The merge order is the step order, the same on every run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/softmax.h"
#include "ring.h"

struct fa_ring_forward_bufs {
  void *kv[2];          /* packed K then V of a shard, in the inputs' dtype; one travels */
  size_t kv_bytes;      /* bytes of one packed shard */
  float *q, *k, *v;     /* float32 copies: the local queries, the current shard */
  float *acc, *acc_lse; /* running output [b, nq, hq, dv] and LSE [b, hq, nq] */
  float *blk, *blk_lse; /* one block's output and LSE, same shapes */
  fa_ring_shapes sh;
};

void fa_ring_forward_free(fa_ring_forward_bufs *b) {
  if (!b) return;
  free(b->kv[0]);
  free(b->kv[1]);
  free(b->q);
  free(b->k);
  free(b->v);
  free(b->acc);
  free(b->acc_lse);
  free(b->blk);
  free(b->blk_lse);
  free(b);
}

fa_status fa_ring_forward_prepare(const fa_ring_ctx *ctx, fa_ring_forward_bufs **out) {
  const fa_request *r = ctx->req;
  fa_ring_forward_bufs *b = calloc(1, sizeof *b);
  if (!b) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "ring: no memory for its buffers");
  fa_ring_shapes_of(r, &b->sh);
  const size_t elem = fa_dtype_size(r->dtype);
  b->kv_bytes = (size_t)(b->sh.nk + b->sh.nv) * elem;
  b->kv[0] = fa_ring_alloc((int64_t)b->kv_bytes, 1);
  b->kv[1] = fa_ring_alloc((int64_t)b->kv_bytes, 1);
  b->q = fa_ring_alloc(b->sh.nq, sizeof(float));
  b->k = fa_ring_alloc(b->sh.nk, sizeof(float));
  b->v = fa_ring_alloc(b->sh.nv, sizeof(float));
  b->acc = fa_ring_alloc(b->sh.no, sizeof(float));
  b->blk = fa_ring_alloc(b->sh.no, sizeof(float));
  b->acc_lse = fa_ring_alloc(b->sh.nlse, sizeof(float));
  b->blk_lse = fa_ring_alloc(b->sh.nlse, sizeof(float));
  if (!b->kv[0] || !b->kv[1] || !b->q || !b->k || !b->v || !b->acc || !b->blk || !b->acc_lse ||
      !b->blk_lse) {
    fa_ring_forward_free(b);
    return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "ring: no memory for its buffers");
  }
  /* The blocks are float32 calls of the caller's params: a backend must take them. */
  fa_tensor q = fa_ring_view(b->q, FA_F32, 4, b->sh.q), k = fa_ring_view(b->k, FA_F32, 4, b->sh.k);
  fa_tensor v = fa_ring_view(b->v, FA_F32, 4, b->sh.v),
            o = fa_ring_view(b->blk, FA_F32, 4, b->sh.o);
  fa_tensor l = fa_ring_view(b->blk_lse, FA_F32, 3, b->sh.lse);
  fa_run_info plan;
  fa_run_info_init(&plan);
  fa_status st = fa_plan_forward(&ctx->params, &q, &k, &v, &o, &l, &plan);
  if (st != FA_OK) {
    fa_ring_forward_free(b);
    return st;
  }
  *out = b;
  return FA_OK;
}

/* Merges rows [row0, row0 + rows) of the block into the running output and LSE. */
static void merge_rows(const fa_ring_forward_bufs *b, int64_t row0, int64_t rows) {
  const int64_t B = b->sh.o[0], N = b->sh.o[1], H = b->sh.o[2], D = b->sh.o[3];
  for (int64_t z = 0; z < B; ++z)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = row0; i < row0 + rows; ++i) {
        float *lse = &b->acc_lse[(z * H + h) * N + i];
        float w1, w2;
        *lse = fa_softmax_merge_lse(*lse, b->blk_lse[(z * H + h) * N + i], &w1, &w2);
        float *o = &b->acc[((z * N + i) * H + h) * D];
        const float *x = &b->blk[((z * N + i) * H + h) * D];
        for (int64_t d = 0; d < D; ++d) o[d] = w1 * o[d] + w2 * x[d];
      }
}

fa_status fa_ring_forward_run(const fa_ring_ctx *ctx, fa_ring_forward_bufs *b, fa_run_info *info) {
  const fa_request *r = ctx->req;
  const int64_t nk = b->sh.nk, nv = b->sh.nv;
  const size_t elem = fa_dtype_size(r->dtype);

  fa_ring_to_f32(r->q, b->q);
  fa_ring_pack(r->k, b->kv[0]);
  fa_ring_pack(r->v, (char *)b->kv[0] + (size_t)nk * elem);
  memset(b->acc, 0, (size_t)b->sh.no * sizeof(float));
  for (int64_t i = 0; i < b->sh.nlse; ++i) b->acc_lse[i] = -INFINITY;

  fa_tensor q = fa_ring_view(b->q, FA_F32, 4, b->sh.q);
  fa_tensor k = fa_ring_view(b->k, FA_F32, 4, b->sh.k);
  fa_tensor v = fa_ring_view(b->v, FA_F32, 4, b->sh.v);
  fa_tensor o = fa_ring_view(b->blk, FA_F32, 4, b->sh.o);
  fa_tensor l = fa_ring_view(b->blk_lse, FA_F32, 3, b->sh.lse);
  int cur = 0;
  for (int32_t t = 0; t < ctx->world; ++t) {
    void *pending = NULL;
    fa_status st;
    fa_ring_step step;
    st = fa_ring_step_begin(ctx, t, b->kv[cur], b->kv[!cur], b->kv_bytes, &pending, &step);
    if (st != FA_OK) return st;
    if (step.n > 0) fa_ring_widen_kv(b->kv[cur], r->dtype, nk, nv, b->k, b->v);
    for (int32_t i = 0; i < step.n; ++i) {
      const fa_ring_block *blk = &step.b[i];
      const fa_params p = fa_ring_block_params(&ctx->params, blk);
      fa_tensor qb = fa_ring_rows(&q, 1, blk->q_row0, blk->q_rows);
      fa_tensor kb = fa_ring_rows(&k, 1, blk->k_row0, blk->k_rows);
      fa_tensor vb = fa_ring_rows(&v, 1, blk->k_row0, blk->k_rows);
      fa_tensor ob = fa_ring_rows(&o, 1, blk->q_row0, blk->q_rows);
      fa_tensor lb = fa_ring_rows(&l, 2, blk->q_row0, blk->q_rows);
      const fa_positions pos = fa_ring_block_positions(ctx, blk);
      st = fa_forward_at(&p, &pos, &qb, &kb, &vb, &ob, &lb, t == 0 && i == 0 ? info : NULL);
      if (st != FA_OK) {
        if (pending) ctx->ops->exchange_wait(ctx->comm, pending);
        return st;
      }
      merge_rows(b, blk->q_row0, blk->q_rows);
    }
    if (pending) {
      st = ctx->ops->exchange_wait(ctx->comm, pending);
      if (st != FA_OK) return st;
    }
    cur = !cur;
  }
  fa_ring_from_f32(b->acc, (fa_tensor *)r->out);
  if (r->lse) fa_ring_from_f32(b->acc_lse, (fa_tensor *)r->lse);
  return FA_OK;
}
