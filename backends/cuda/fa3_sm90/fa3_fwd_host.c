/*
 * fa3_fwd_host.c: the FlashAttention-3 forward's host side: the compiled configurations
 * (fa3_tile_size.h) with their entry points, the TMA tensor maps of Q, K, V and (TMA_EPILOGUE) O
 * (4-D: head dim, row, head, batch), the launch.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fa3_args.h"
#include "tma_map.h"

#define FA3_ENTRY(name, hd, wgs, bn, flags) \
  {#name,                                   \
   hd,                                      \
   wgs,                                     \
   64 * (wgs),                              \
   bn,                                      \
   flags,                                   \
   FA3_FWD_SMEM(hd, wgs, bn, flags),        \
   fa3_fwd_launch_##name,                   \
   fa3_fwd_prepare_##name},
static const fa3_fwd_config configs[FA3_FWD_CONFIG_COUNT] = {FA3_FWD_CONFIGS(FA3_ENTRY)};
#undef FA3_ENTRY

const fa3_fwd_config *fa3_fwd_config_of(int id) {
  return id >= 0 && id < FA3_FWD_CONFIG_COUNT ? &configs[id] : NULL;
}

int fa3_fwd_config_named(const char *name) {
  for (int i = 0; i < FA3_FWD_CONFIG_COUNT; ++i)
    if (!strcmp(configs[i].name, name)) return i;
  return -1;
}

size_t fa3_fwd_workspace_bytes(const fa3_fwd_config *c) {
  return c && (c->flags & FA3_DYNAMIC_SCHEDULE) ? FA3_TILE_COUNTER_BYTES : 0;
}

int64_t fa3_fp8_vt_keys(int64_t seqlen_k, int tile_n) {
  return tile_n > 0 ? (seqlen_k + tile_n - 1) / tile_n * tile_n : 0;
}

size_t fa3_fp8_vt_bytes(int64_t batch, int64_t heads_kv, int64_t head_dim, int64_t seqlen_k,
                        int tile_n) {
  return (size_t)batch * (size_t)heads_kv * (size_t)head_dim *
         (size_t)fa3_fp8_vt_keys(seqlen_k, tile_n);
}

int fa3_fwd_pack(const fa3_fwd_config *c, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q) {
  const int64_t group = heads_kv > 0 ? heads_q / heads_kv : 1;
  int pack = 1;
  while (group % (2 * pack) == 0 && (c->tile_m / (2 * pack)) % 8 == 0 &&
         c->tile_m / (2 * pack) >= seqlen_q)
    pack *= 2;
  return pack;
}

int fa3_tensor_map(void *map, int bf16, const void *base, const cuda_strides *st, int32_t batch,
                   int32_t seqlen, int32_t heads, int32_t head_dim, uint32_t rows,
                   uint32_t box_heads, char *err, size_t err_len) {
  const uint64_t dims[4] = {(uint64_t)head_dim, (uint64_t)seqlen, (uint64_t)heads, (uint64_t)batch};
  const uint64_t strides[3] = {(uint64_t)st->row * 2, (uint64_t)st->head * 2,
                               (uint64_t)st->batch * 2};
  const uint32_t box[4] = {64, rows, box_heads, 1};
  return fa_tma_map(map, bf16, base, 4, dims, strides, box, err, err_len);
}

int fa3_seq_tensor_map(void *map, int bf16, const void *base, const cuda_strides *st,
                       const fa3_seq_view *view, int32_t heads, int32_t head_dim, uint32_t rows,
                       uint32_t box_heads, char *err, size_t err_len) {
  const uint64_t dims[4] = {(uint64_t)head_dim, (uint64_t)view->ext, (uint64_t)heads,
                            (uint64_t)view->span + 1};
  const uint64_t strides[3] = {(uint64_t)st->row * 2, (uint64_t)st->head * 2,
                               (uint64_t)st->row * 2};
  const uint32_t box[4] = {64, rows, box_heads, 1};
  /* The base moved back by ext rows: only elements inside the view are addressed, and those lie
     in the tensor. */
  const char *at = (const char *)base - (int64_t)view->ext * st->row * 2;
  return fa_tma_map(map, bf16, at, 4, dims, strides, box, err, err_len);
}

/* A tensor's view: packed (total rows) or padded (ext rows, batches batch_rows apart); -1 where a
   padded tensor's batch stride is no whole number of its rows, or above int32. */
static int seq_view(const cuda_strides *st, int packed, int64_t total, int64_t ext, int32_t batch,
                    fa3_seq_view *v) {
  int64_t rows = 0;
  if (!packed && batch > 1) {
    if (st->row <= 0 || st->batch < 0 || st->batch % st->row != 0 ||
        st->batch / st->row > INT32_MAX)
      return -1;
    rows = st->batch / st->row;
  }
  v->ext = (int32_t)(packed ? total : ext);
  v->batch_rows = (int32_t)rows;
  v->span = packed ? total : (int64_t)(batch > 0 ? batch - 1 : 0) * rows + ext;
  return 0;
}

int fa3_seq_views(const cuda_seq_index *ix, const cuda_problem *p, const cuda_strides *q,
                  const cuda_strides *q_like, const cuda_strides *k, const cuda_strides *v,
                  fa3_seq_view views[4], char *err, size_t err_len) {
  const int pq = ix->cu_q != NULL, pk = ix->cu_k != NULL;
  if (seq_view(q, pq, ix->total_q, p->seqlen_q, p->batch, &views[0]) ||
      seq_view(q_like, pq, ix->total_q, p->seqlen_q, p->batch, &views[1]) ||
      seq_view(k, pk, ix->total_k, p->seqlen_k, p->batch, &views[2]) ||
      seq_view(v, pk, ix->total_k, p->seqlen_k, p->batch, &views[3])) {
    snprintf(err, err_len,
             "cuda.fa3 over sequences needs each padded tensor's batch stride to be a whole "
             "number of its rows");
    return -1;
  }
  if (views[0].ext <= 0 || views[2].ext <= 0) {
    snprintf(err, err_len, "cuda.fa3 over sequences needs rows and keys in the tensors");
    return -1;
  }
  return 0;
}

/* The FP8 forward's maps: Q and K as bytes (boxes of one row of head-dim bytes, at most 128, under
   the swizzle of that width; rows q_rows and tile_n, q_heads heads of Q), Vᵀ
   [batch][heads_kv][head_dim][vt_keys] in boxes of tile_n keys x head_dim rows under the 128-byte
   swizzle. Without keys, none of K and Vᵀ: no tile loads them. */
static int fp8_maps(fa3_fwd_args *x, const fa3_fwd_config *cfg, uint32_t q_rows, uint32_t q_heads,
                    char *err, size_t err_len) {
  const cuda_fwd_args *a = &x->a;
  const cuda_problem *p = &a->p;
  const uint32_t row = p->head_dim < 128 ? (uint32_t)p->head_dim : 128;
  const uint64_t qd[4] = {(uint64_t)p->head_dim, (uint64_t)p->seqlen_q, (uint64_t)p->heads_q,
                          (uint64_t)p->batch};
  const uint64_t qs[3] = {(uint64_t)a->q_str.row, (uint64_t)a->q_str.head,
                          (uint64_t)a->q_str.batch};
  const uint32_t qb[4] = {row, q_rows, q_heads, 1};
  if (fa_tma_map_u8(x->tq, a->q, 4, qd, qs, qb, row, err, err_len)) return -1;
  if (p->seqlen_k == 0) return 0;
  const uint64_t kd[4] = {(uint64_t)p->head_dim, (uint64_t)p->seqlen_k, (uint64_t)p->heads_kv,
                          (uint64_t)p->batch};
  const uint64_t ks[3] = {(uint64_t)a->k_str.row, (uint64_t)a->k_str.head,
                          (uint64_t)a->k_str.batch};
  const uint32_t kb[4] = {row, (uint32_t)cfg->tile_n, 1, 1};
  if (fa_tma_map_u8(x->tk, a->k, 4, kd, ks, kb, row, err, err_len)) return -1;
  const uint64_t keys = (uint64_t)x->fp8.vt_keys;
  const uint64_t vd[4] = {keys, (uint64_t)p->head_dim, (uint64_t)p->heads_kv, (uint64_t)p->batch};
  const uint64_t vs[3] = {keys, keys * (uint64_t)p->head_dim,
                          keys * (uint64_t)p->head_dim * (uint64_t)p->heads_kv};
  const uint32_t vb[4] = {(uint32_t)cfg->tile_n, (uint32_t)p->head_dim, 1, 1};
  return fa_tma_map_u8(x->tv, x->fp8.vt, 4, vd, vs, vb, 128, err, err_len);
}

int fa3_fwd_launch(fa3_fwd_args *x, const fa3_fwd_config *cfg, char *err, size_t err_len) {
  const cuda_fwd_args *a = &x->a;
  const cuda_problem *p = &a->p;
  if (!cfg || cfg->head_dim_padded != fa3_fwd_padded_head_dim(p->head_dim)) {
    snprintf(err, err_len, "head_dim %d has no such fa3 configuration", (int)p->head_dim);
    return -1;
  }
  if (p->seqlen_q == 0 || p->batch == 0 || p->heads_q == 0) return 0;
  const int pack = fa3_fwd_pack(cfg, p->heads_q, p->heads_kv, p->seqlen_q);
  x->pack_log2 = 0;
  while ((1 << x->pack_log2) < pack) ++x->pack_log2;
  const uint32_t rows = (uint32_t)(cfg->tile_m / pack);
  /* O's box: the tile (as Q's), or (EPILOGUE_IN_KV_STAGE) one consumer's 64 rows, of one query
     head or of 64 / rows packed ones, or (SHORT_BLOCK_FIRST, unpacked) one 64-row slab. */
  const int in_kv = (cfg->flags & FA3_EPILOGUE_IN_KV_STAGE) != 0;
  const uint32_t o_rows =
      (in_kv && rows > 64) || ((cfg->flags & FA3_SHORT_BLOCK_FIRST) && pack == 1) ? 64 : rows;
  const uint32_t o_heads = in_kv ? (rows > 64 ? 1 : 64 / rows) : (uint32_t)pack;
  if (cfg->flags & FA3_FP8) {
    if (x->fp8.vt_keys != fa3_fp8_vt_keys(p->seqlen_k, cfg->tile_n) ||
        (p->seqlen_k > 0 && !x->fp8.vt)) {
      snprintf(err, err_len, "the FP8 forward's Vᵀ is not sized for %d keys", (int)p->seqlen_k);
      return -1;
    }
    if (fp8_maps(x, cfg, rows, (uint32_t)pack, err, err_len)) return -1;
    x->chunk = fa3_sched_chunk((int64_t)(p->heads_q / pack) * p->batch,
                               2 * (int64_t)p->seqlen_k * p->head_dim);
    const int e = fa3_fp8_vt_launch(x);
    return e ? e : cfg->launch(x);
  }
  if (cfg->flags & FA3_SEQS) {
    fa3_seq_view vw[4]; /* q, out, k, v */
    if (fa3_seq_views(&x->ix, p, &a->q_str, &a->o_str, &a->k_str, &a->v_str, vw, err, err_len))
      return -1;
    x->q_ext = vw[0].ext;
    x->k_ext = vw[2].ext;
    x->q_batch_rows = vw[0].batch_rows;
    x->o_batch_rows = vw[1].batch_rows;
    x->k_batch_rows = vw[2].batch_rows;
    x->v_batch_rows = vw[3].batch_rows;
    return fa3_seq_tensor_map(x->tq, p->bf16, a->q, &a->q_str, &vw[0], p->heads_q, p->head_dim,
                              rows, (uint32_t)pack, err, err_len) ||
                   fa3_seq_tensor_map(x->tk, p->bf16, a->k, &a->k_str, &vw[2], p->heads_kv,
                                      p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
                   fa3_seq_tensor_map(x->tv, p->bf16, a->v, &a->v_str, &vw[3], p->heads_kv,
                                      p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
                   fa3_seq_tensor_map(x->to, p->bf16, a->out, &a->o_str, &vw[1], p->heads_q,
                                      p->head_dim, o_rows, o_heads, err, err_len)
               ? -1
               : cfg->launch(x);
  }
  if (fa3_tensor_map(x->tq, p->bf16, a->q, &a->q_str, p->batch, p->seqlen_q, p->heads_q,
                     p->head_dim, rows, (uint32_t)pack, err, err_len) ||
      fa3_tensor_map(x->tk, p->bf16, a->k, &a->k_str, p->batch, p->seqlen_k, p->heads_kv,
                     p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
      fa3_tensor_map(x->tv, p->bf16, a->v, &a->v_str, p->batch, p->seqlen_k, p->heads_kv,
                     p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
      ((cfg->flags & FA3_TMA_EPILOGUE) &&
       fa3_tensor_map(x->to, p->bf16, a->out, &a->o_str, p->batch, p->seqlen_q, p->heads_q,
                      p->head_dim, o_rows, o_heads, err, err_len)))
    return -1;
  /* The dynamic schedule's chunk of (head, batch) pairs (fa3_tile_scheduler.h) */
  x->chunk = fa3_sched_chunk((int64_t)(p->heads_q / pack) * p->batch,
                             4 * (int64_t)p->seqlen_k * p->head_dim);
  return cfg->launch(x);
}
