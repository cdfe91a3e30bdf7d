/*
 * fa3_host.c: the FlashAttention-3 forward's host side: which head dims have kernels, the TMA
 * tensor maps of Q, K and V (4-D: head dim, row, head, batch), the launch.
 */
#include <stdio.h>

#include "fa3_args.h"
#include "tma_map.h"

int fa3_fwd_has_head_dim(int32_t head_dim) { return head_dim == 64 || head_dim == 128; }

/* A (batch, seqlen, heads, head dim) tensor with strides in elements, boxes of `rows` rows x 64
   columns. */
static int map_of(void *map, int bf16, const void *base, const fa2_strides *st, int32_t batch,
                  int32_t seqlen, int32_t heads, int32_t head_dim, uint32_t rows, char *err,
                  size_t err_len) {
  const uint64_t dims[4] = {(uint64_t)head_dim, (uint64_t)seqlen, (uint64_t)heads, (uint64_t)batch};
  const uint64_t strides[3] = {(uint64_t)st->row * 2, (uint64_t)st->head * 2,
                               (uint64_t)st->batch * 2};
  const uint32_t box[4] = {64, rows, 1, 1};
  if (st->row < 0 || st->head < 0 || st->batch < 0) {
    snprintf(err, err_len, "negative strides cannot be described to TMA");
    return -1;
  }
  return fa_tma_map(map, bf16, base, 4, dims, strides, box, err, err_len);
}

int fa3_fwd_launch(fa3_fwd_args *x, char *err, size_t err_len) {
  const fa2_fwd_args *a = &x->a;
  const fa2_problem *p = &a->p;
  if (!fa3_fwd_has_head_dim(p->head_dim)) {
    snprintf(err, err_len, "head_dim %d has no fa3 kernel", (int)p->head_dim);
    return -1;
  }
  if (p->seqlen_q == 0 || p->batch == 0 || p->heads_q == 0) return 0;
  if (map_of(x->tq, p->bf16, a->q, &a->q_str, p->batch, p->seqlen_q, p->heads_q, p->head_dim,
             FA3_FWD_TILE_M, err, err_len) ||
      map_of(x->tk, p->bf16, a->k, &a->k_str, p->batch, p->seqlen_k, p->heads_kv, p->head_dim,
             FA3_FWD_TILE_N, err, err_len) ||
      map_of(x->tv, p->bf16, a->v, &a->v_str, p->batch, p->seqlen_k, p->heads_kv, p->head_dim,
             FA3_FWD_TILE_N, err, err_len))
    return -1;
  return p->head_dim == 64 ? fa3_fwd_launch_hd64(x) : fa3_fwd_launch_hd128(x);
}
