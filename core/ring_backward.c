/*
 * ring_backward.c: the backward ring. K/V shards travel as in the forward; each block's backward
 * is fa_backward in float32 with the global out and LSE of the local rows, which makes it exact:
 * the probabilities it recomputes, exp(s - lse), are the whole sequence's, and D = rowsum(dO * O)
 * is the whole row's. dq sums on its rank; each shard's dk and dv sum (in float32) as they follow
 * the shard around the ring, and one last shift returns them to the shard's owner. The dk/dv
 * exchange of a step is waited for after the next block's compute, so it is hidden as the K/V
 * exchange is. Summation orders are the ring's, the same on every run.
 */
#include <stdlib.h>
#include <string.h>

#include "ring.h"

struct fa_ring_backward_bufs {
  void *kv[2]; /* packed K then V of a shard, in the inputs' dtype */
  size_t kv_bytes;
  float *dkv[2]; /* a shard's dk then dv sums, float32; one travels */
  size_t dkv_bytes;
  float *q, *o, *dout, *lse, *k, *v; /* float32 copies */
  float *dq, *dq_blk, *dk_blk, *dv_blk;
  float *dkv_step; /* chunk-pair blocks (a window, dropout, ALiBi): a step's blocks' dk then dv,
                      summed before the shard's */
  fa_ring_shapes sh;
};

void fa_ring_backward_free(fa_ring_backward_bufs *b) {
  if (!b) return;
  void *all[] = {b->kv[0], b->kv[1], b->dkv[0], b->dkv[1], b->q,      b->o,      b->dout,    b->lse,
                 b->k,     b->v,     b->dq,     b->dq_blk, b->dk_blk, b->dv_blk, b->dkv_step};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
  free(b);
}

fa_status fa_ring_backward_prepare(const fa_ring_ctx *ctx, fa_ring_backward_bufs **out) {
  const fa_request *r = ctx->req;
  fa_ring_backward_bufs *b = calloc(1, sizeof *b);
  if (!b) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "ring: no memory for its buffers");
  fa_ring_shapes_of(r, &b->sh);
  const int64_t nq = b->sh.nq, nk = b->sh.nk, nv = b->sh.nv, no = b->sh.no;
  b->kv_bytes = (size_t)(nk + nv) * fa_dtype_size(r->dtype);
  b->dkv_bytes = (size_t)(nk + nv) * sizeof(float);
  b->kv[0] = fa_ring_alloc((int64_t)b->kv_bytes, 1);
  b->kv[1] = fa_ring_alloc((int64_t)b->kv_bytes, 1);
  b->dkv[0] = fa_ring_alloc(nk + nv, sizeof(float));
  b->dkv[1] = fa_ring_alloc(nk + nv, sizeof(float));
  b->q = fa_ring_alloc(nq, sizeof(float));
  b->dq = fa_ring_alloc(nq, sizeof(float));
  b->dq_blk = fa_ring_alloc(nq, sizeof(float));
  b->o = fa_ring_alloc(no, sizeof(float));
  b->dout = fa_ring_alloc(no, sizeof(float));
  b->lse = fa_ring_alloc(b->sh.nlse, sizeof(float));
  b->k = fa_ring_alloc(nk, sizeof(float));
  b->dk_blk = fa_ring_alloc(nk, sizeof(float));
  b->v = fa_ring_alloc(nv, sizeof(float));
  b->dv_blk = fa_ring_alloc(nv, sizeof(float));
  const int pairs = fa_ring_chunk_pairs(&ctx->params);
  if (pairs) b->dkv_step = fa_ring_alloc(nk + nv, sizeof(float));
  if (!b->kv[0] || !b->kv[1] || !b->dkv[0] || !b->dkv[1] || !b->q || !b->dq || !b->dq_blk ||
      !b->o || !b->dout || !b->lse || !b->k || !b->dk_blk || !b->v || !b->dv_blk ||
      (pairs && !b->dkv_step)) {
    fa_ring_backward_free(b);
    return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "ring: no memory for its buffers");
  }
  fa_tensor q = fa_ring_view(b->q, FA_F32, 4, b->sh.q), k = fa_ring_view(b->k, FA_F32, 4, b->sh.k);
  fa_tensor v = fa_ring_view(b->v, FA_F32, 4, b->sh.v), o = fa_ring_view(b->o, FA_F32, 4, b->sh.o);
  fa_tensor l = fa_ring_view(b->lse, FA_F32, 3, b->sh.lse),
            d = fa_ring_view(b->dout, FA_F32, 4, b->sh.o);
  fa_tensor dq = fa_ring_view(b->dq_blk, FA_F32, 4, b->sh.q);
  fa_tensor dk = fa_ring_view(b->dk_blk, FA_F32, 4, b->sh.k);
  fa_tensor dv = fa_ring_view(b->dv_blk, FA_F32, 4, b->sh.v);
  fa_run_info plan;
  fa_run_info_init(&plan);
  fa_status st = fa_plan_backward(&ctx->params, &q, &k, &v, &o, &l, &d, &dq, &dk, &dv, &plan);
  if (st != FA_OK) {
    fa_ring_backward_free(b);
    return st;
  }
  *out = b;
  return FA_OK;
}

static void add_rows(float *acc, const float *x, int64_t outer, int64_t rows_total, int64_t row0,
                     int64_t rows, int64_t inner) {
  for (int64_t z = 0; z < outer; ++z)
    for (int64_t i = row0; i < row0 + rows; ++i) {
      const int64_t at = (z * rows_total + i) * inner;
      for (int64_t e = 0; e < inner; ++e) acc[at + e] += x[at + e];
    }
}

fa_status fa_ring_backward_run(const fa_ring_ctx *ctx, fa_ring_backward_bufs *b,
                               fa_run_info *info) {
  const fa_request *r = ctx->req;
  const int32_t next = (ctx->rank + 1) % ctx->world;
  const int32_t prev = (ctx->rank + ctx->world - 1) % ctx->world;
  const int64_t nk = b->sh.nk, nv = b->sh.nv;
  const int64_t B = r->batch, NQ = r->seqlen_q, NK = r->seqlen_k;
  const size_t elem = fa_dtype_size(r->dtype);

  fa_ring_to_f32(r->q, b->q);
  fa_ring_to_f32(r->out, b->o);
  fa_ring_to_f32(r->dout, b->dout);
  fa_ring_to_f32(r->lse, b->lse);
  fa_ring_pack(r->k, b->kv[0]);
  fa_ring_pack(r->v, (char *)b->kv[0] + (size_t)nk * elem);
  memset(b->dq, 0, (size_t)b->sh.nq * sizeof(float));
  memset(b->dkv[0], 0, b->dkv_bytes);

  fa_tensor q = fa_ring_view(b->q, FA_F32, 4, b->sh.q);
  fa_tensor k = fa_ring_view(b->k, FA_F32, 4, b->sh.k);
  fa_tensor v = fa_ring_view(b->v, FA_F32, 4, b->sh.v);
  fa_tensor o = fa_ring_view(b->o, FA_F32, 4, b->sh.o);
  fa_tensor d = fa_ring_view(b->dout, FA_F32, 4, b->sh.o);
  fa_tensor l = fa_ring_view(b->lse, FA_F32, 3, b->sh.lse);
  fa_tensor dq = fa_ring_view(b->dq_blk, FA_F32, 4, b->sh.q);
  fa_tensor dk = fa_ring_view(b->dk_blk, FA_F32, 4, b->sh.k);
  fa_tensor dv = fa_ring_view(b->dv_blk, FA_F32, 4, b->sh.v);
  int cur = 0, dcur = 0;
  void *dkv_pending = NULL; /* the previous step's dk/dv exchange, into dkv[dcur] */
  fa_status st = FA_OK;
  for (int32_t t = 0; t < ctx->world && st == FA_OK; ++t) {
    void *pending = NULL;
    fa_ring_step step;
    st = fa_ring_step_begin(ctx, t, b->kv[cur], b->kv[!cur], b->kv_bytes, &pending, &step);
    if (st != FA_OK) break;
    if (step.n > 0) fa_ring_widen_kv(b->kv[cur], r->dtype, nk, nv, b->k, b->v);
    /* Several blocks (chunk pairs) sum their dk/dv in dkv_step first. */
    const int summed = step.n > 1;
    if (summed) memset(b->dkv_step, 0, b->dkv_bytes);
    for (int32_t i = 0; i < step.n && st == FA_OK; ++i) {
      const fa_ring_block *blk = &step.b[i];
      const fa_params p = fa_ring_block_params(&ctx->params, blk);
      fa_tensor qb = fa_ring_rows(&q, 1, blk->q_row0, blk->q_rows);
      fa_tensor ob = fa_ring_rows(&o, 1, blk->q_row0, blk->q_rows);
      fa_tensor db = fa_ring_rows(&d, 1, blk->q_row0, blk->q_rows);
      fa_tensor lb = fa_ring_rows(&l, 2, blk->q_row0, blk->q_rows);
      fa_tensor dqb = fa_ring_rows(&dq, 1, blk->q_row0, blk->q_rows);
      fa_tensor kb = fa_ring_rows(&k, 1, blk->k_row0, blk->k_rows);
      fa_tensor vb = fa_ring_rows(&v, 1, blk->k_row0, blk->k_rows);
      fa_tensor dkb = fa_ring_rows(&dk, 1, blk->k_row0, blk->k_rows);
      fa_tensor dvb = fa_ring_rows(&dv, 1, blk->k_row0, blk->k_rows);
      const fa_positions pos = fa_ring_block_positions(ctx, blk);
      st = fa_backward_at(&p, &pos, &qb, &kb, &vb, &ob, &lb, &db, &dqb, &dkb, &dvb,
                          t == 0 && i == 0 ? info : NULL);
      if (st != FA_OK) break;
      add_rows(b->dq, b->dq_blk, B, NQ, blk->q_row0, blk->q_rows, r->heads_q * r->head_dim);
      if (summed) {
        add_rows(b->dkv_step, b->dk_blk, B, NK, blk->k_row0, blk->k_rows,
                 r->heads_kv * r->head_dim);
        add_rows(b->dkv_step + nk, b->dv_blk, B, NK, blk->k_row0, blk->k_rows,
                 r->heads_kv * r->head_dim_v);
      }
    }
    /* The shard's dk/dv sums arrive from the previous rank (zero at the first step). */
    if (st == FA_OK && dkv_pending) st = ctx->ops->exchange_wait(ctx->comm, dkv_pending);
    dkv_pending = NULL;
    if (st == FA_OK && step.n == 1) {
      const fa_ring_block *blk = &step.b[0];
      add_rows(b->dkv[dcur], b->dk_blk, B, NK, blk->k_row0, blk->k_rows, r->heads_kv * r->head_dim);
      add_rows(b->dkv[dcur] + nk, b->dv_blk, B, NK, blk->k_row0, blk->k_rows,
               r->heads_kv * r->head_dim_v);
    } else if (st == FA_OK && summed) {
      for (int64_t e = 0; e < nk + nv; ++e) b->dkv[dcur][e] += b->dkv_step[e];
    }
    if (st == FA_OK) {
      st = ctx->ops->exchange_start(ctx->comm, FA_RING_CHANNEL_DKV, b->dkv[dcur], next,
                                    b->dkv[!dcur], prev, b->dkv_bytes, &dkv_pending);
      dcur = !dcur;
    }
    if (pending) {
      fa_status w = ctx->ops->exchange_wait(ctx->comm, pending);
      if (st == FA_OK) st = w;
    }
    cur = !cur;
  }
  /* After the last shift dkv[dcur] holds the sums of this rank's own shard. */
  if (dkv_pending) {
    fa_status w = ctx->ops->exchange_wait(ctx->comm, dkv_pending);
    if (st == FA_OK) st = w;
  }
  if (st != FA_OK) return st;
  fa_ring_from_f32(b->dq, (fa_tensor *)r->dq);
  fa_ring_from_f32(b->dkv[dcur], (fa_tensor *)r->dk);
  fa_ring_from_f32(b->dkv[dcur] + nk, (fa_tensor *)r->dv);
  return FA_OK;
}
