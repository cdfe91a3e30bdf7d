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
 */
#include "ring.h"

fa_ring_block fa_ring_plan_block(int32_t layout, int32_t causal, int32_t rank, int32_t src,
                                 int64_t seqlen_q, int64_t seqlen_k) {
  fa_ring_block all = {0, seqlen_q, 0, seqlen_k, 0};
  if (!causal) return all;
  if (src == rank) {
    all.causal = 1;
    return all;
  }
  if (layout == FA_RING_ZIGZAG) {
    const int64_t c = seqlen_q / 2;
    fa_ring_block past = {0, seqlen_q, 0, c, 0};
    fa_ring_block future = {c, seqlen_q - c, 0, seqlen_k, 0};
    return src < rank ? past : future;
  }
  fa_ring_block none = {0, 0, 0, 0, 0};
  return src < rank ? all : none;
}

fa_status fa_ring_step_begin(const fa_ring_ctx *ctx, int32_t t, void *kv_cur, void *kv_next,
                             size_t kv_bytes, void **pending, fa_ring_block *blk) {
  *pending = NULL;
  if (t + 1 < ctx->world) {
    const int32_t next = (ctx->rank + 1) % ctx->world;
    const int32_t prev = (ctx->rank + ctx->world - 1) % ctx->world;
    const fa_status st = ctx->ops->exchange_start(ctx->comm, FA_RING_CHANNEL_KV, kv_cur, next,
                                                  kv_next, prev, kv_bytes, pending);
    if (st != FA_OK) return st;
  }
  const int32_t src = (ctx->rank - t + ctx->world) % ctx->world;
  *blk = fa_ring_plan_block(ctx->layout, ctx->params.causal, ctx->rank, src, ctx->req->seqlen_q,
                            ctx->req->seqlen_k);
  return FA_OK;
}
