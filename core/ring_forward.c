/*
 * ring_forward.c: the forward ring. At step t the rank holds the K/V shard of rank (rank - t) mod
 * world; it starts passing that shard on to the next rank (and receiving the following one from
 * the previous rank), computes its block with fa_forward, merges the block's output into the
 * running one (float32) by the LSEs (core/math/softmax.h's rule), then waits for the exchange. The
 * merge order is the step order, the same on every run. On the host the blocks are float32 calls
 * on widened copies; on a device they read the caller's queries and the packed shard as they are
 * (ring_mem.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "validate.h"

struct fa_ring_forward_bufs {
  fa_ring_mem mem;
  void *kv[2];      /* packed K then V of a shard, in the inputs' dtype; one travels */
  size_t kv_bytes;  /* bytes of one packed shard */
  void *q, *k, *v;  /* host only: float32 copies of the local queries and the current shard */
  void *acc, *lse;  /* running output [b, nq, hq, dv] and LSE [b, hq, nq], float32 */
  void *blk, *blse; /* one block's output (the block dtype) and LSE (float32), same shapes */
  void *ws;         /* the blocks' workspace (ws_bytes: the most any block needs) */
  size_t ws_bytes;
  fa_ring_shapes sh;
};

void fa_ring_forward_free(fa_ring_forward_bufs *b) {
  if (!b) return;
  void *all[] = {b->kv[0], b->kv[1], b->q, b->k, b->v, b->acc, b->lse, b->blk, b->blse, b->ws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) fa_ring_mem_free(&b->mem, all[i]);
  free(b);
}

/* The tensors a block call reads and writes, whole (fa_ring_rows cuts them per block): the
   queries and the shard held in kv (block dtype), and the block's output. */
typedef struct fwd_tensors {
  fa_tensor q, k, v, o, l;
} fwd_tensors;

static fwd_tensors tensors_of(const fa_ring_forward_bufs *b, const fa_request *r, void *kv) {
  const fa_ring_mem *m = &b->mem;
  const fa_dtype bt = m->block_dtype;
  fwd_tensors t;
  if (m->plugin) {
    t.q = *r->q;
    fa_ring_kv_views(m, &b->sh, kv, bt, &t.k, &t.v);
  } else {
    t.q = fa_ring_view(m, b->q, bt, 4, b->sh.q);
    t.k = fa_ring_view(m, b->k, bt, 4, b->sh.k);
    t.v = fa_ring_view(m, b->v, bt, 4, b->sh.v);
  }
  t.o = fa_ring_view(m, b->blk, bt, 4, b->sh.o);
  t.l = fa_ring_view(m, b->blse, FA_F32, 3, b->sh.lse);
  return t;
}

/* Block blk's call: its params (the ring's workspace given) and its rows of the whole tensors. */
typedef struct fwd_block {
  fa_params p;
  fa_positions pos;
  fwd_tensors t;
} fwd_block;

static fwd_block block_of(const fa_ring_ctx *ctx, const fa_ring_forward_bufs *b,
                          const fwd_tensors *whole, const fa_ring_block *blk) {
  fwd_block c;
  c.p = fa_ring_block_params(&ctx->params, blk);
  c.p.workspace = b->ws;
  c.p.workspace_size = b->ws_bytes;
  c.pos = fa_ring_block_positions(ctx, blk);
  c.t.q = fa_ring_rows(&whole->q, 1, blk->q_row0, blk->q_rows);
  c.t.k = fa_ring_rows(&whole->k, 1, blk->k_row0, blk->k_rows);
  c.t.v = fa_ring_rows(&whole->v, 1, blk->k_row0, blk->k_rows);
  c.t.o = fa_ring_rows(&whole->o, 1, blk->q_row0, blk->q_rows);
  c.t.l = fa_ring_rows(&whole->l, 2, blk->q_row0, blk->q_rows);
  return c;
}

typedef struct fwd_sizing {
  fa_ring_forward_bufs *b;
  fwd_tensors whole;
} fwd_sizing;

/* Raises b->ws_bytes to what block blk's call needs (fa_ring_each_block's function). */
static fa_status size_block(const fa_ring_ctx *ctx, const fa_ring_block *blk, void *arg) {
  fwd_sizing *s = arg;
  const fwd_block c = block_of(ctx, s->b, &s->whole, blk);
  const fa_call_args a = {&c.t.q, &c.t.k, &c.t.v, &c.t.o, &c.t.l, NULL, NULL, NULL, NULL, NULL};
  return fa_ring_block_workspace(FA_OP_FORWARD, c.p, &c.pos, &a, &s->b->ws_bytes);
}

fa_status fa_ring_forward_prepare(const fa_ring_ctx *ctx, fa_ring_forward_bufs **out) {
  const fa_request *r = ctx->req;
  fa_ring_forward_bufs *b = calloc(1, sizeof *b);
  if (!b) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "ring: no memory for its buffers");
  b->mem = ctx->mem;
  const fa_ring_mem *m = &b->mem;
  fa_ring_shapes_of(r, &b->sh);
  const size_t f = sizeof(float), belem = fa_dtype_size(m->block_dtype);
  b->kv_bytes = (size_t)(b->sh.nk + b->sh.nv) * fa_dtype_size(r->dtype);
  const fa_ring_need need[] = {{&b->kv[0], (int64_t)b->kv_bytes, 1, 1},
                               {&b->kv[1], (int64_t)b->kv_bytes, 1, 1},
                               {&b->acc, b->sh.no, f, 1},
                               {&b->blk, b->sh.no, belem, 1},
                               {&b->lse, b->sh.nlse, f, 1},
                               {&b->blse, b->sh.nlse, f, 1},
                               {&b->q, b->sh.nq, f, !m->plugin},
                               {&b->k, b->sh.nk, f, !m->plugin},
                               {&b->v, b->sh.nv, f, !m->plugin}};
  fa_status st = fa_ring_mem_alloc_all(m, need, sizeof need / sizeof need[0]);
  /* The blocks are calls of the caller's params on these tensors: a backend must take them. */
  if (st == FA_OK) {
    fwd_tensors t = tensors_of(b, r, b->kv[0]);
    fa_run_info plan;
    fa_run_info_init(&plan);
    st = fa_plan_forward(&ctx->params, &t.q, &t.k, &t.v, &t.o, &t.l, &plan);
  }
  if (st == FA_OK) {
    fwd_sizing s = {b, tensors_of(b, r, b->kv[0])};
    st = fa_ring_each_block(ctx, size_block, &s);
  }
  if (st == FA_OK && b->ws_bytes > 0) st = fa_ring_mem_alloc(m, (int64_t)b->ws_bytes, 1, &b->ws);
  if (st != FA_OK) {
    fa_ring_forward_free(b);
    return st;
  }
  *out = b;
  return FA_OK;
}

fa_status fa_ring_forward_run(const fa_ring_ctx *ctx, fa_ring_forward_bufs *b, fa_run_info *info) {
  const fa_request *r = ctx->req;
  const fa_ring_mem *m = &b->mem;
  fa_tensor acc = fa_ring_view(m, b->acc, FA_F32, 4, b->sh.o);
  fa_tensor lse = fa_ring_view(m, b->lse, FA_F32, 3, b->sh.lse);
  if (!m->plugin) {
    fa_tensor q = fa_ring_view(m, b->q, FA_F32, 4, b->sh.q);
    TRY(fa_ring_copy(m, r->q, &q));
  }
  TRY(fa_ring_pack_kv(m, &b->sh, r, b->kv[0]));
  TRY(fa_ring_fill(m, &acc, 0.0f));
  TRY(fa_ring_fill(m, &lse, -INFINITY));
  int cur = 0;
  for (int32_t t = 0; t < ctx->world; ++t) {
    void *pending = NULL;
    fa_ring_step step;
    TRY(fa_ring_step_begin(ctx, t, b->kv[cur], b->kv[!cur], b->kv_bytes, &pending, &step));
    fa_status st = FA_OK;
    if (step.n > 0 && !m->plugin) st = fa_ring_widen_kv(m, &b->sh, r, b->kv[cur], b->k, b->v);
    const fwd_tensors whole = tensors_of(b, r, b->kv[cur]);
    for (int32_t i = 0; i < step.n && st == FA_OK; ++i) {
      const fa_ring_block *blk = &step.b[i];
      fwd_block c = block_of(ctx, b, &whole, blk);
      st = fa_forward_at(&c.p, &c.pos, &c.t.q, &c.t.k, &c.t.v, &c.t.o, &c.t.l,
                         t == 0 && i == 0 ? info : NULL);
      if (st == FA_OK) {
        fa_tensor ab = fa_ring_rows(&acc, 1, blk->q_row0, blk->q_rows);
        fa_tensor al = fa_ring_rows(&lse, 2, blk->q_row0, blk->q_rows);
        st = fa_ring_merge(m, &c.t.o, &c.t.l, &ab, &al);
      }
    }
    if (pending) {
      const fa_status w = ctx->ops->exchange_wait(ctx->comm, pending);
      if (st == FA_OK) st = w;
    }
    if (st != FA_OK) return st;
    cur = !cur;
  }
  TRY(fa_ring_copy(m, &acc, r->out));
  if (r->lse) TRY(fa_ring_copy(m, &lse, r->lse));
  return FA_OK;
}
