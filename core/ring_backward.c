/*
 * ring_backward.c: the backward ring. K/V shards travel as in the forward; each block's backward
 * is fa_backward (in float32 on the host, in the inputs' dtype on a device: ring_mem.c) with the
 * global out and LSE of the local rows, which makes it exact:
 * the probabilities it recomputes, exp(s - lse), are the whole sequence's, and D = rowsum(dO * O)
 * is the whole row's. dq sums on its rank; each shard's dk and dv sum (in float32) as they follow
 * the shard around the ring, and one last shift returns them to the shard's owner. The dk/dv
 * exchange of a step is waited for after the next block's compute, so it is hidden as the K/V
 * exchange is. Summation orders are the ring's, the same on every run.
 */
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "validate.h"

struct fa_ring_backward_bufs {
  fa_ring_mem mem;
  void *kv[2]; /* packed K then V of a shard, in the inputs' dtype */
  size_t kv_bytes;
  void *dkv[2]; /* a shard's dk then dv sums, float32; one travels */
  size_t dkv_bytes;
  void *q, *o, *dout, *lse, *k, *v; /* host only: float32 copies */
  void *dq;                         /* dq's sum, float32 */
  void *dq_blk, *dk_blk, *dv_blk;   /* one block's gradients, in the block dtype */
  void *dkv_step; /* chunk-pair blocks (a window, dropout, ALiBi): a step's blocks' dk then dv,
                     summed before the shard's */
  void *ws;       /* the blocks' workspace (ws_bytes: the most any block needs) */
  size_t ws_bytes;
  fa_ring_shapes sh;
};

void fa_ring_backward_free(fa_ring_backward_bufs *b) {
  if (!b) return;
  void *all[] = {b->kv[0],  b->kv[1],  b->dkv[0],   b->dkv[1], b->q,  b->o,
                 b->dout,   b->lse,    b->k,        b->v,      b->dq, b->dq_blk,
                 b->dk_blk, b->dv_blk, b->dkv_step, b->ws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) fa_ring_mem_free(&b->mem, all[i]);
  free(b);
}

/* The tensors a block's backward reads and writes, whole (fa_ring_rows cuts them per block). */
typedef struct bwd_tensors {
  fa_tensor q, k, v, o, l, d, dq, dk, dv;
} bwd_tensors;

static bwd_tensors tensors_of(const fa_ring_backward_bufs *b, const fa_request *r, void *kv) {
  const fa_ring_mem *m = &b->mem;
  const fa_dtype bt = m->block_dtype;
  bwd_tensors t;
  if (m->plugin) {
    t.q = *r->q, t.o = *r->out, t.l = *r->lse, t.d = *r->dout;
    fa_ring_kv_views(m, &b->sh, kv, bt, &t.k, &t.v);
  } else {
    t.q = fa_ring_view(m, b->q, bt, 4, b->sh.q);
    t.o = fa_ring_view(m, b->o, bt, 4, b->sh.o);
    t.l = fa_ring_view(m, b->lse, FA_F32, 3, b->sh.lse);
    t.d = fa_ring_view(m, b->dout, bt, 4, b->sh.o);
    t.k = fa_ring_view(m, b->k, bt, 4, b->sh.k);
    t.v = fa_ring_view(m, b->v, bt, 4, b->sh.v);
  }
  t.dq = fa_ring_view(m, b->dq_blk, bt, 4, b->sh.q);
  t.dk = fa_ring_view(m, b->dk_blk, bt, 4, b->sh.k);
  t.dv = fa_ring_view(m, b->dv_blk, bt, 4, b->sh.v);
  return t;
}

/* dk then dv of a shard, float32, in one buffer of nk + nv elements. */
static void dkv_views(const fa_ring_backward_bufs *b, void *dkv, fa_tensor *dk, fa_tensor *dv) {
  *dk = fa_ring_view(&b->mem, dkv, FA_F32, 4, b->sh.k);
  *dv = fa_ring_view(&b->mem, (float *)dkv + b->sh.nk, FA_F32, 4, b->sh.v);
}

/* Block blk's call: its params (the ring's workspace given) and its rows of the whole tensors. */
typedef struct bwd_block {
  fa_params p;
  fa_positions pos;
  bwd_tensors t;
} bwd_block;

static bwd_block block_of(const fa_ring_ctx *ctx, const fa_ring_backward_bufs *b,
                          const bwd_tensors *w, const fa_ring_block *blk) {
  const int64_t q0 = blk->q_row0, nq = blk->q_rows, k0 = blk->k_row0, nk = blk->k_rows;
  bwd_block c;
  c.p = fa_ring_block_params(&ctx->params, blk);
  c.p.workspace = b->ws;
  c.p.workspace_size = b->ws_bytes;
  c.pos = fa_ring_block_positions(ctx, blk);
  c.t.q = fa_ring_rows(&w->q, 1, q0, nq), c.t.o = fa_ring_rows(&w->o, 1, q0, nq);
  c.t.d = fa_ring_rows(&w->d, 1, q0, nq), c.t.l = fa_ring_rows(&w->l, 2, q0, nq);
  c.t.dq = fa_ring_rows(&w->dq, 1, q0, nq);
  c.t.k = fa_ring_rows(&w->k, 1, k0, nk), c.t.v = fa_ring_rows(&w->v, 1, k0, nk);
  c.t.dk = fa_ring_rows(&w->dk, 1, k0, nk), c.t.dv = fa_ring_rows(&w->dv, 1, k0, nk);
  return c;
}

typedef struct bwd_sizing {
  fa_ring_backward_bufs *b;
  bwd_tensors whole;
} bwd_sizing;

/* Raises b->ws_bytes to what block blk's call needs (fa_ring_each_block's function). */
static fa_status size_block(const fa_ring_ctx *ctx, const fa_ring_block *blk, void *arg) {
  bwd_sizing *s = arg;
  const bwd_block c = block_of(ctx, s->b, &s->whole, blk);
  const bwd_tensors *t = &c.t;
  const fa_call_args a = {&t->q, &t->k, &t->v, &t->o, &t->l, &t->d, &t->dq, &t->dk, &t->dv, NULL};
  return fa_ring_block_workspace(FA_OP_BACKWARD, c.p, &c.pos, &a, &s->b->ws_bytes);
}

fa_status fa_ring_backward_prepare(const fa_ring_ctx *ctx, fa_ring_backward_bufs **out) {
  const fa_request *r = ctx->req;
  fa_ring_backward_bufs *b = calloc(1, sizeof *b);
  if (!b) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "ring: no memory for its buffers");
  b->mem = ctx->mem;
  const fa_ring_mem *m = &b->mem;
  fa_ring_shapes_of(r, &b->sh);
  const int64_t nq = b->sh.nq, nk = b->sh.nk, nv = b->sh.nv, no = b->sh.no;
  const size_t f = sizeof(float), belem = fa_dtype_size(m->block_dtype);
  b->kv_bytes = (size_t)(nk + nv) * fa_dtype_size(r->dtype);
  b->dkv_bytes = (size_t)(nk + nv) * f;
  const fa_ring_need need[] = {{&b->kv[0], (int64_t)b->kv_bytes, 1, 1},
                               {&b->kv[1], (int64_t)b->kv_bytes, 1, 1},
                               {&b->dkv[0], nk + nv, f, 1},
                               {&b->dkv[1], nk + nv, f, 1},
                               {&b->dq, nq, f, 1},
                               {&b->dq_blk, nq, belem, 1},
                               {&b->dk_blk, nk, belem, 1},
                               {&b->dv_blk, nv, belem, 1},
                               {&b->dkv_step, nk + nv, f, fa_ring_chunk_pairs(&ctx->params)},
                               {&b->q, nq, f, !m->plugin},
                               {&b->o, no, f, !m->plugin},
                               {&b->dout, no, f, !m->plugin},
                               {&b->lse, b->sh.nlse, f, !m->plugin},
                               {&b->k, nk, f, !m->plugin},
                               {&b->v, nv, f, !m->plugin}};
  fa_status st = fa_ring_mem_alloc_all(m, need, sizeof need / sizeof need[0]);
  if (st == FA_OK) {
    bwd_tensors t = tensors_of(b, r, b->kv[0]);
    fa_run_info plan;
    fa_run_info_init(&plan);
    st = fa_plan_backward(&ctx->params, &t.q, &t.k, &t.v, &t.o, &t.l, &t.d, &t.dq, &t.dk, &t.dv,
                          &plan);
  }
  if (st == FA_OK) {
    bwd_sizing s = {b, tensors_of(b, r, b->kv[0])};
    st = fa_ring_each_block(ctx, size_block, &s);
  }
  if (st == FA_OK && b->ws_bytes > 0) st = fa_ring_mem_alloc(m, (int64_t)b->ws_bytes, 1, &b->ws);
  if (st != FA_OK) {
    fa_ring_backward_free(b);
    return st;
  }
  *out = b;
  return FA_OK;
}

/* The host copies of the local rows' inputs (a device's blocks read the caller's tensors). */
static fa_status widen_inputs(const fa_ring_backward_bufs *b, const fa_request *r) {
  const fa_ring_mem *m = &b->mem;
  if (m->plugin) return FA_OK;
  fa_tensor q = fa_ring_view(m, b->q, FA_F32, 4, b->sh.q);
  fa_tensor o = fa_ring_view(m, b->o, FA_F32, 4, b->sh.o);
  fa_tensor d = fa_ring_view(m, b->dout, FA_F32, 4, b->sh.o);
  fa_tensor l = fa_ring_view(m, b->lse, FA_F32, 3, b->sh.lse);
  TRY(fa_ring_copy(m, r->q, &q));
  TRY(fa_ring_copy(m, r->out, &o));
  TRY(fa_ring_copy(m, r->dout, &d));
  return fa_ring_copy(m, r->lse, &l);
}

/* A block's dk/dv (rows k_row0.. of the block buffers) added to the same rows of the sums. */
static fa_status add_kv_rows(const fa_ring_mem *m, const bwd_tensors *w, const fa_ring_block *blk,
                             const fa_tensor *dk_sum, const fa_tensor *dv_sum) {
  const int64_t k0 = blk->k_row0, nk = blk->k_rows;
  fa_tensor dkb = fa_ring_rows(&w->dk, 1, k0, nk), dvb = fa_ring_rows(&w->dv, 1, k0, nk);
  fa_tensor ks = fa_ring_rows(dk_sum, 1, k0, nk), vs = fa_ring_rows(dv_sum, 1, k0, nk);
  TRY(fa_ring_add(m, &dkb, &ks));
  return fa_ring_add(m, &dvb, &vs);
}

/* One block's backward: its dq added to the rows' sum, and its dk/dv to dk_sum/dv_sum when given
   (a step of several blocks sums them first); else they stay in the block buffers. */
static fa_status block_backward(const fa_ring_ctx *ctx, const fa_ring_backward_bufs *b,
                                const bwd_tensors *w, const fa_ring_block *blk, fa_tensor *dq_sum,
                                const fa_tensor *dk_sum, const fa_tensor *dv_sum,
                                fa_run_info *info) {
  const fa_ring_mem *m = &b->mem;
  bwd_block c = block_of(ctx, b, w, blk);
  bwd_tensors *t = &c.t;
  TRY(fa_backward_at(&c.p, &c.pos, &t->q, &t->k, &t->v, &t->o, &t->l, &t->d, &t->dq, &t->dk, &t->dv,
                     info));
  fa_tensor qs = fa_ring_rows(dq_sum, 1, blk->q_row0, blk->q_rows);
  TRY(fa_ring_add(m, &t->dq, &qs));
  if (!dk_sum) return FA_OK;
  return add_kv_rows(m, w, blk, dk_sum, dv_sum);
}

fa_status fa_ring_backward_run(const fa_ring_ctx *ctx, fa_ring_backward_bufs *b,
                               fa_run_info *info) {
  const fa_request *r = ctx->req;
  const fa_ring_mem *m = &b->mem;
  const int32_t next = (ctx->rank + 1) % ctx->world;
  const int32_t prev = (ctx->rank + ctx->world - 1) % ctx->world;

  TRY(widen_inputs(b, r));
  TRY(fa_ring_pack_kv(m, &b->sh, r, b->kv[0]));
  fa_tensor dq = fa_ring_view(m, b->dq, FA_F32, 4, b->sh.q);
  fa_tensor dkv_k, dkv_v, step_k, step_v;
  TRY(fa_ring_fill(m, &dq, 0.0f));
  dkv_views(b, b->dkv[0], &dkv_k, &dkv_v);
  TRY(fa_ring_fill(m, &dkv_k, 0.0f));
  TRY(fa_ring_fill(m, &dkv_v, 0.0f));

  int cur = 0, dcur = 0;
  void *dkv_pending = NULL; /* the previous step's dk/dv exchange, into dkv[dcur] */
  fa_status st = FA_OK;
  for (int32_t t = 0; t < ctx->world && st == FA_OK; ++t) {
    void *pending = NULL;
    fa_ring_step step;
    st = fa_ring_step_begin(ctx, t, b->kv[cur], b->kv[!cur], b->kv_bytes, &pending, &step);
    if (st != FA_OK) break;
    if (step.n > 0 && !m->plugin) st = fa_ring_widen_kv(m, &b->sh, r, b->kv[cur], b->k, b->v);
    const bwd_tensors whole = tensors_of(b, r, b->kv[cur]);
    /* Several blocks (chunk pairs) sum their dk/dv in dkv_step first; a single block keeps its
       own in the block buffers. Either is added to the shard's sums once they have arrived from
       the previous rank, so that exchange is hidden under the blocks' compute. */
    const int summed = step.n > 1;
    if (summed) {
      dkv_views(b, b->dkv_step, &step_k, &step_v);
      if (st == FA_OK) st = fa_ring_fill(m, &step_k, 0.0f);
      if (st == FA_OK) st = fa_ring_fill(m, &step_v, 0.0f);
    }
    for (int32_t i = 0; i < step.n && st == FA_OK; ++i)
      st = block_backward(ctx, b, &whole, &step.b[i], &dq, summed ? &step_k : NULL,
                          summed ? &step_v : NULL, t == 0 && i == 0 ? info : NULL);
    /* Waited for even after a failure: its buffers are freed when the call returns. */
    if (dkv_pending) {
      const fa_status w = ctx->ops->exchange_wait(ctx->comm, dkv_pending);
      if (st == FA_OK) st = w;
      dkv_pending = NULL;
    }
    dkv_views(b, b->dkv[dcur], &dkv_k, &dkv_v);
    if (st == FA_OK && step.n == 1) st = add_kv_rows(m, &whole, &step.b[0], &dkv_k, &dkv_v);
    if (st == FA_OK && summed) st = fa_ring_add(m, &step_k, &dkv_k);
    if (st == FA_OK && summed) st = fa_ring_add(m, &step_v, &dkv_v);
    /* The sums move on to the next rank; a ring of one keeps them where they are. */
    if (st == FA_OK && ctx->world > 1) {
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
  dkv_views(b, b->dkv[dcur], &dkv_k, &dkv_v);
  TRY(fa_ring_copy(m, &dq, r->dq));
  TRY(fa_ring_copy(m, &dkv_k, r->dk));
  return fa_ring_copy(m, &dkv_v, r->dv);
}
