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
  return c && (c->flags & FA3_DYNAMIC_SCHEDULE) ? sizeof(int32_t) : 0;
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

int fa3_seq_tensor_map(void *map, int bf16, const void *base, const cuda_strides *st, int64_t ext,
                       int64_t span, int32_t heads, int32_t head_dim, uint32_t rows,
                       uint32_t box_heads, char *err, size_t err_len) {
  const uint64_t dims[4] = {(uint64_t)head_dim, (uint64_t)ext, (uint64_t)heads, (uint64_t)span + 1};
  const uint64_t strides[3] = {(uint64_t)st->row * 2, (uint64_t)st->head * 2,
                               (uint64_t)st->row * 2};
  const uint32_t box[4] = {64, rows, box_heads, 1};
  /* The base moved back by ext rows: only elements inside the view are addressed, and those lie
     in the tensor. */
  const char *view = (const char *)base - ext * st->row * 2;
  return fa_tma_map(map, bf16, view, 4, dims, strides, box, err, err_len);
}

int64_t fa3_seq_batch_rows(const cuda_strides *st, int32_t batch) {
  if (batch <= 1) return 0;
  if (st->row <= 0 || st->batch < 0 || st->batch % st->row != 0 || st->batch / st->row > INT32_MAX)
    return -1;
  return st->batch / st->row;
}

int fa3_fwd_seqs_of(fa3_fwd_args *x, const cuda_seq_index *ix, char *err, size_t err_len) {
  const cuda_fwd_args *a = &x->a;
  const int32_t batch = a->p.batch;
  x->ix = *ix;
  x->q_ext = ix->cu_q ? ix->total_q : a->p.seqlen_q;
  x->k_ext = ix->cu_k ? ix->total_k : a->p.seqlen_k;
  const int64_t rq = ix->cu_q ? 0 : fa3_seq_batch_rows(&a->q_str, batch);
  const int64_t ro = ix->cu_q ? 0 : fa3_seq_batch_rows(&a->o_str, batch);
  const int64_t rk = ix->cu_k ? 0 : fa3_seq_batch_rows(&a->k_str, batch);
  const int64_t rv = ix->cu_k ? 0 : fa3_seq_batch_rows(&a->v_str, batch);
  if (rq < 0 || ro < 0 || rk < 0 || rv < 0) {
    snprintf(err, err_len,
             "cuda.fa3 over sequences needs each padded tensor's batch stride to be a whole "
             "number of its rows");
    return -1;
  }
  x->q_batch_rows = (int32_t)rq;
  x->o_batch_rows = (int32_t)ro;
  x->k_batch_rows = (int32_t)rk;
  x->v_batch_rows = (int32_t)rv;
  return 0;
}

int64_t fa3_seq_span(int packed, int64_t total, int64_t ext, int32_t batch, int32_t batch_rows) {
  return packed ? total : (int64_t)(batch > 0 ? batch - 1 : 0) * batch_rows + ext;
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
  if (cfg->flags & FA3_SEQS) {
    const cuda_seq_index *ix = &x->ix;
    const int pq = ix->cu_q != NULL, pk = ix->cu_k != NULL;
    if (x->q_ext <= 0 || x->k_ext <= 0) {
      snprintf(err, err_len, "cuda.fa3 over sequences needs rows and keys in the tensors");
      return -1;
    }
    return fa3_seq_tensor_map(x->tq, p->bf16, a->q, &a->q_str, x->q_ext,
                              fa3_seq_span(pq, ix->total_q, x->q_ext, p->batch, x->q_batch_rows),
                              p->heads_q, p->head_dim, rows, (uint32_t)pack, err, err_len) ||
                   fa3_seq_tensor_map(
                       x->tk, p->bf16, a->k, &a->k_str, x->k_ext,
                       fa3_seq_span(pk, ix->total_k, x->k_ext, p->batch, x->k_batch_rows),
                       p->heads_kv, p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
                   fa3_seq_tensor_map(
                       x->tv, p->bf16, a->v, &a->v_str, x->k_ext,
                       fa3_seq_span(pk, ix->total_k, x->k_ext, p->batch, x->v_batch_rows),
                       p->heads_kv, p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
                   fa3_seq_tensor_map(
                       x->to, p->bf16, a->out, &a->o_str, x->q_ext,
                       fa3_seq_span(pq, ix->total_q, x->q_ext, p->batch, x->o_batch_rows),
                       p->heads_q, p->head_dim, o_rows, o_heads, err, err_len)
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
