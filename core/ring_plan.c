/*
 * ring_plan.c: which block of attention a ring step computes, from the layout alone.
 *
 * Contiguous shards: the shard of an earlier rank lies wholly in the past (every key seen), the
 * rank's own shard is the causal diagonal, a later rank's shard lies in the future (skipped), so
 * rank r computes the diagonal and r whole blocks: the work grows with the rank.
 *
 * Zig-zag shards (rank r holds chunks r and 2w-1-r of c tokens each, c = n/2): against its own
 * shard a rank's local causal mask is the right one, because chunk r precedes chunk 2w-1-r; the
 * shard of an earlier rank s < r has its chunk s before both local chunks and its chunk 2w-1-s
 * after both, so every local query sees the first half of it; the shard of a later rank s > r lies
 * wholly after chunk r and wholly before chunk 2w-1-r, so the second half of the local queries sees
 * all of it. Every off-diagonal step is then n x n/2: the same work on every rank.
 *
 * Under a sliding window the tokens' global positions decide, chunk by chunk: query chunk (global
 * start gq) and key chunk (gk) see each other where gq + i - left <= gk + j <= gq + i + right,
 * a band at offset d = gq - gk. The rows and keys outside the band are cut off, which moves the
 * band's diagonal into the block, where a top-left window expresses it with bounds >= 0.
 * Dropout and ALiBi take the same chunk pairs (a causal mask is the band with right = 0), so that
 * each block's rows and keys are consecutive global positions, passed to its call (fa_positions).
 */
#include "ring.h"

fa_ring_block fa_ring_plan_block(int32_t layout, int32_t causal, int32_t rank, int32_t src,
                                 int64_t seqlen_q, int64_t seqlen_k) {
  fa_ring_block all = {0, seqlen_q, 0, seqlen_k, 0, 0, -1, -1, 0, 0};
  if (!causal) return all;
  if (src == rank) {
    all.causal = 1;
    return all;
  }
  if (layout == FA_RING_ZIGZAG) {
    const int64_t c = seqlen_q / 2;
    fa_ring_block past = {0, seqlen_q, 0, c, 0, 0, -1, -1, 0, 0};
    fa_ring_block future = {c, seqlen_q - c, 0, seqlen_k, 0, 0, -1, -1, 0, 0};
    return src < rank ? past : future;
  }
  fa_ring_block none = {0, 0, 0, 0, 0, 0, -1, -1, 0, 0};
  return src < rank ? all : none;
}

/* The band block of query chunk [qa, qa + lq) (global start gq) against key chunk [ka, ka + lk)
   (global start gk): keys j of row i with d - wl <= j - i <= d + wr (wl, wr: -1 unbounded).
   0 where no key is seen. */
static int band_block(int64_t qa, int64_t lq, int64_t gq, int64_t ka, int64_t lk, int64_t gk,
                      int64_t wl, int64_t wr, fa_ring_block *blk) {
  const int64_t d = gq - gk;
  int64_t j0 = 0, j1 = lk, i0 = 0, i1 = lq;
  if (wl >= 0) {
    if (d - wl > j0) j0 = d - wl;           /* keys left of every row's band */
    if (lk - d + wl < i1) i1 = lk - d + wl; /* rows whose band starts past the chunk */
  }
  if (wr >= 0) {
    if (lq + d + wr < j1) j1 = lq + d + wr; /* keys right of every row's band */
    if (-d - wr > i0) i0 = -d - wr;         /* rows whose band ends before the chunk */
  }
  if (j0 >= j1 || i0 >= i1) return 0;
  const int64_t s = j0 - i0; /* the block's top-left corner is at offset s from the band's d */
  blk->q_row0 = qa + i0;
  blk->q_rows = i1 - i0;
  blk->k_row0 = ka + j0;
  blk->k_rows = j1 - j0;
  blk->causal = 0;
  blk->left = wl >= 0 ? s - d + wl : -1;
  blk->right = wr >= 0 ? d + wr - s : -1;
  /* A side that reaches past the block's far corner hides nothing. */
  if (blk->left >= blk->q_rows - 1) blk->left = -1;
  if (blk->right >= blk->k_rows - 1) blk->right = -1;
  blk->window = blk->left >= 0 || blk->right >= 0;
  blk->q_pos = gq + i0;
  blk->k_pos = gk + j0;
  return 1;
}

int fa_ring_positioned(const fa_params *p) {
  return p->dropout_p > 0.0f || p->alibi_slopes != NULL;
}

int fa_ring_chunk_pairs(const fa_params *p) { return p->window_enabled || fa_ring_positioned(p); }

void fa_ring_plan_step(const fa_params *p, int32_t layout, int32_t rank, int32_t src, int32_t world,
                       int64_t seqlen_q, int64_t seqlen_k, fa_ring_step *step) {
  step->n = 0;
  if (!fa_ring_chunk_pairs(p)) {
    step->b[0] = fa_ring_plan_block(layout, p->causal, rank, src, seqlen_q, seqlen_k);
    step->n = step->b[0].q_rows > 0;
    return;
  }
  /* The window's bounds as fa_mask_make resolves them (causal: nothing right of the diagonal);
     causal masks and windows run on equal local lengths (core/ring.c), so the global diagonal is
     the same in both alignments. */
  int64_t wl = -1, wr = -1;
  if (p->window_enabled) {
    wl = p->window_left < 0 ? -1 : p->window_left;
    wr = p->window_right < 0 ? -1 : p->window_right;
  }
  if (p->causal && wr != 0) wr = 0;
  const int zig = layout == FA_RING_ZIGZAG;
  const int64_t cq = zig ? seqlen_q / 2 : seqlen_q, ck = zig ? seqlen_k / 2 : seqlen_k;
  const int chunks = zig ? 2 : 1;
  for (int a = 0; a < chunks; ++a) {
    const int64_t gq = (a == 0 ? rank : 2 * (int64_t)world - 1 - rank) * cq;
    for (int x = 0; x < chunks; ++x) {
      const int64_t gk = (x == 0 ? src : 2 * (int64_t)world - 1 - src) * ck;
      step->n += band_block(a * cq, cq, gq, x * ck, ck, gk, wl, wr, &step->b[step->n]);
    }
  }
}

fa_params fa_ring_block_params(const fa_params *p, const fa_ring_block *blk) {
  fa_params b = *p;
  b.causal = blk->causal;
  if (fa_ring_chunk_pairs(p)) {
    b.window_enabled = blk->window;
    b.window_left = blk->left;
    b.window_right = blk->right;
    b.causal_align = FA_CAUSAL_TOP_LEFT;
  }
  return b;
}

fa_positions fa_ring_block_positions(const fa_ring_ctx *ctx, const fa_ring_block *blk) {
  fa_positions pos = {0, 0, 0, 0};
  if (!fa_ring_positioned(&ctx->params)) return pos;
  pos.set = 1;
  pos.q0 = blk->q_pos;
  pos.k0 = blk->k_pos;
  if (ctx->params.causal_align != FA_CAUSAL_TOP_LEFT)
    pos.shift = (int64_t)ctx->world * (ctx->req->seqlen_k - ctx->req->seqlen_q);
  return pos;
}

/* Whether two blocks are the same call but for their global positions. */
static int same_block(const fa_ring_block *a, const fa_ring_block *b) {
  return a->q_row0 == b->q_row0 && a->q_rows == b->q_rows && a->k_row0 == b->k_row0 &&
         a->k_rows == b->k_rows && a->causal == b->causal && a->window == b->window &&
         a->left == b->left && a->right == b->right;
}

fa_status fa_ring_each_block(const fa_ring_ctx *ctx, fa_ring_block_fn fn, void *arg) {
  /* A ring has few distinct blocks (the diagonal, whole shards, halves, a window's bands). */
  enum { SEEN = 16 };
  fa_ring_block seen[SEEN];
  int32_t nseen = 0;
  for (int32_t t = 0; t < ctx->world; ++t) {
    const int32_t src = (ctx->rank - t + ctx->world) % ctx->world;
    fa_ring_step step;
    fa_ring_plan_step(&ctx->params, ctx->layout, ctx->rank, src, ctx->world, ctx->req->seqlen_q,
                      ctx->req->seqlen_k, &step);
    for (int32_t i = 0; i < step.n; ++i) {
      const fa_ring_block *blk = &step.b[i];
      int known = 0;
      for (int32_t j = 0; j < nseen && !known; ++j) known = same_block(&seen[j], blk);
      if (known) continue;
      if (nseen < SEEN) seen[nseen++] = *blk;
      const fa_status st = fn(ctx, blk, arg);
      if (st != FA_OK) return st;
    }
  }
  return FA_OK;
}

fa_status fa_ring_step_begin(const fa_ring_ctx *ctx, int32_t t, void *kv_cur, void *kv_next,
                             size_t kv_bytes, void **pending, fa_ring_step *step) {
  *pending = NULL;
  if (t + 1 < ctx->world) {
    const int32_t next = (ctx->rank + 1) % ctx->world;
    const int32_t prev = (ctx->rank + ctx->world - 1) % ctx->world;
    const fa_status st = ctx->ops->exchange_start(ctx->comm, FA_RING_CHANNEL_KV, kv_cur, next,
                                                  kv_next, prev, kv_bytes, pending);
    if (st != FA_OK) return st;
  }
  const int32_t src = (ctx->rank - t + ctx->world) % ctx->world;
  fa_ring_plan_step(&ctx->params, ctx->layout, ctx->rank, src, ctx->world, ctx->req->seqlen_q,
                    ctx->req->seqlen_k, step);
  return FA_OK;
}
