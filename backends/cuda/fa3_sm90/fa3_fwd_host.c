/*
 * fa3_host.c: the FlashAttention-3 forward's host side: the compiled configurations per head
 * dim, the TMA tensor maps of Q, K, V and (OSTORE) O (4-D: head dim, row, head, batch), the
 * launch.
 */
#include <stdio.h>
#include <string.h>

#include "fa3_plan.h"
#include "fa3_schedule.h"
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
static const fa3_fwd_config configs[] = {FA3_FWD_CONFIGS(FA3_ENTRY)};
#undef FA3_ENTRY
#define CONFIG_COUNT ((int)(sizeof configs / sizeof configs[0]))

const fa3_fwd_config *fa3_fwd_configs(int *count) {
  *count = CONFIG_COUNT;
  return configs;
}

int fa3_fwd_padded_head_dim(int64_t head_dim) {
  switch (head_dim) {
    case 64:
      return 64;
    case 96:
    case 128:
      return 128;
    case 192:
    case 256:
      return 256;
    default:
      return 0;
  }
}

/* strcmp(a, b) == 0, without GCC's -Wstring-compare false positive once fa3_fwd_pick's literal
   names are inlined into the loop. */
static int same_name(const char *a, const char *b) {
  const size_t n = strlen(a);
  return n == strlen(b) && memcmp(a, b, n) == 0;
}

const fa3_fwd_config *fa3_fwd_config_for(int64_t head_dim, const char *name) {
  const int padded = fa3_fwd_padded_head_dim(head_dim);
  for (int i = 0; i < CONFIG_COUNT; ++i)
    if (configs[i].head_dim_padded == padded && (!name || same_name(name, configs[i].name)))
      return &configs[i];
  return NULL;
}

/* The compiled configuration of core/plan's Hopper plan, NULL when none matches. */
static const fa3_fwd_config *config_of_plan(int padded, const fa_hopper_fwd_plan *p) {
  const int flags = FA3_OVERLAP | FA3_PINGPONG | (p->persistent ? FA3_PERSISTENT : 0) |
                    (p->q_buffers == 2 ? FA3_QDOUBLE : 0) | (p->smem_epilogue ? FA3_OSTORE : 0) |
                    (p->dynamic ? FA3_DYNAMIC : 0) | (p->pinned ? FA3_PINNED : 0) |
                    (p->o_in_stage ? FA3_OSTAGE : 0) | (p->kv_stages == 3 ? FA3_STAGES3 : 0) |
                    (p->mma_row_sum ? FA3_ROWSUM : 0) | (p->split_max ? FA3_SPLITMAX : 0) |
                    (p->own_key_end ? FA3_TAILSKIP : 0) | (p->short_block_first ? FA3_LEADRAG : 0);
  for (int i = 0; i < CONFIG_COUNT; ++i)
    if (configs[i].head_dim_padded == padded && configs[i].warpgroups == p->consumers &&
        configs[i].tile_m == p->tile_m && configs[i].tile_n == p->tile_n &&
        configs[i].flags == flags)
      return &configs[i];
  return NULL;
}

const fa3_fwd_config *fa3_fwd_planned(int64_t head_dim, int masked, int64_t seqlen_k) {
  const int padded = fa3_fwd_padded_head_dim(head_dim);
  const fa_hopper_fwd_plan plan = fa_plan_hopper_fwd(padded, masked, seqlen_k);
  return padded && plan.tile_m ? config_of_plan(padded, &plan) : NULL;
}

const fa3_fwd_config *fa3_fwd_pick(int64_t head_dim, int masked, int64_t seqlen_k,
                                   int64_t smem_limit) {
  const int padded = fa3_fwd_padded_head_dim(head_dim);
  if (!padded) return NULL;
  const fa3_fwd_config *c = fa3_fwd_planned(head_dim, masked, seqlen_k);
  if (c && (int64_t)c->smem_bytes <= smem_limit) return c;
  for (int i = 0; i < CONFIG_COUNT; ++i)
    if (configs[i].head_dim_padded == padded && (int64_t)configs[i].smem_bytes <= smem_limit)
      return &configs[i];
  return NULL;
}

/* The key tiles of every tile of an unmasked problem. */
static int32_t key_tiles(const fa3_fwd_config *c, const fa2_problem *p) {
  return (p->seqlen_k + c->tile_n - 1) / c->tile_n;
}

int fa3_fwd_tail_tiles(const fa3_fwd_config *c, const fa2_problem *p, int32_t grid) {
  if (!c || !(c->flags & FA3_TAILSPLIT) || fa2_problem_masked(p) || grid <= 0 || p->seqlen_q <= 0)
    return 0;
  const int pack = fa3_fwd_pack(c, p->heads_q, p->heads_kv, p->seqlen_q);
  const int64_t rows = c->tile_m / pack;
  const int64_t tiles = (p->seqlen_q + rows - 1) / rows * (p->heads_q / pack) * p->batch;
  const int64_t tail = tiles > grid ? tiles % grid : 0;
  /* every piece at least one key tile: the owners of a tile's key tiles are then consecutive
     blocks (fa3_finish_part merges first..last) */
  return tail * key_tiles(c, p) >= grid ? (int)tail : 0;
}

/* TAILSPLIT's workspace: the tail's counters, then the pieces' LSEs, then their outputs (each
   part 256-byte aligned); the slots are tail + grid (fa3_fwd.cuh, fa3_finish_part). */
static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }
static void tail_layout(const fa3_fwd_config *c, int tail, int32_t grid, size_t *lse_at,
                        size_t *o_at, size_t *end) {
  const size_t slots = (size_t)tail + (size_t)grid;
  *lse_at = round256((size_t)tail * sizeof(int32_t));
  *o_at = *lse_at + round256(slots * (size_t)c->tile_m * sizeof(float));
  *end = *o_at + slots * (size_t)c->tile_m * (size_t)c->head_dim_padded * sizeof(float);
}

size_t fa3_fwd_workspace_bytes(const fa3_fwd_config *c, const fa2_problem *p, int32_t grid) {
  if (!c) return 0;
  if (c->flags & FA3_DYNAMIC) return sizeof(int32_t);
  const int tail = fa3_fwd_tail_tiles(c, p, grid);
  if (tail == 0) return 0;
  size_t lse_at, o_at, end;
  tail_layout(c, tail, grid, &lse_at, &o_at, &end);
  return end;
}

int fa3_fwd_pack(const fa3_fwd_config *c, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q) {
  const int64_t group = heads_kv > 0 ? heads_q / heads_kv : 1;
  int pack = 1;
  while (group % (2 * pack) == 0 && (c->tile_m / (2 * pack)) % 8 == 0 &&
         c->tile_m / (2 * pack) >= seqlen_q)
    pack *= 2;
  return pack;
}

int fa3_tensor_map(void *map, int bf16, const void *base, const fa2_strides *st, int32_t batch,
                   int32_t seqlen, int32_t heads, int32_t head_dim, uint32_t rows,
                   uint32_t box_heads, char *err, size_t err_len) {
  const uint64_t dims[4] = {(uint64_t)head_dim, (uint64_t)seqlen, (uint64_t)heads, (uint64_t)batch};
  const uint64_t strides[3] = {(uint64_t)st->row * 2, (uint64_t)st->head * 2,
                               (uint64_t)st->batch * 2};
  const uint32_t box[4] = {64, rows, box_heads, 1};
  return fa_tma_map(map, bf16, base, 4, dims, strides, box, err, err_len);
}

int fa3_fwd_launch(fa3_fwd_args *x, const fa3_fwd_config *cfg, char *err, size_t err_len) {
  const fa2_fwd_args *a = &x->a;
  const fa2_problem *p = &a->p;
  if (!cfg || cfg->head_dim_padded != fa3_fwd_padded_head_dim(p->head_dim)) {
    snprintf(err, err_len, "head_dim %d has no such fa3 configuration", (int)p->head_dim);
    return -1;
  }
  if (p->seqlen_q == 0 || p->batch == 0 || p->heads_q == 0) return 0;
  const int pack = fa3_fwd_pack(cfg, p->heads_q, p->heads_kv, p->seqlen_q);
  x->pack_log2 = 0;
  while ((1 << x->pack_log2) < pack) ++x->pack_log2;
  const uint32_t rows = (uint32_t)(cfg->tile_m / pack);
  /* O's box: the tile (as Q's), or (OSTAGE) one consumer's 64 rows, of one query head or of
     64 / rows packed ones, or (LEADRAG, unpacked) one 64-row slab of the tile. */
  const uint32_t o_rows =
      ((cfg->flags & FA3_OSTAGE) && rows > 64) || ((cfg->flags & FA3_LEADRAG) && pack == 1) ? 64
                                                                                            : rows;
  const uint32_t o_heads = (cfg->flags & FA3_OSTAGE) ? (rows > 64 ? 1 : 64 / rows) : (uint32_t)pack;
  if (fa3_tensor_map(x->tq, p->bf16, a->q, &a->q_str, p->batch, p->seqlen_q, p->heads_q,
                     p->head_dim, rows, (uint32_t)pack, err, err_len) ||
      fa3_tensor_map(x->tk, p->bf16, a->k, &a->k_str, p->batch, p->seqlen_k, p->heads_kv,
                     p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
      fa3_tensor_map(x->tv, p->bf16, a->v, &a->v_str, p->batch, p->seqlen_k, p->heads_kv,
                     p->head_dim, (uint32_t)cfg->tile_n, 1, err, err_len) ||
      ((cfg->flags & FA3_OSTORE) &&
       fa3_tensor_map(x->to, p->bf16, a->out, &a->o_str, p->batch, p->seqlen_q, p->heads_q,
                      p->head_dim, o_rows, o_heads, err, err_len)))
    return -1;
  /* TAILSPLIT: the workspace (at x->tile_counter, sized by fa3_fwd_workspace_bytes for this
     grid) holds the pieces; its counters are cleared by the launch */
  x->tail = fa3_fwd_tail_tiles(cfg, p, x->sm_count);
  x->tail_nkt = key_tiles(cfg, p);
  if (x->tail > 0) {
    if (!x->tile_counter) {
      snprintf(err, err_len, "fa3 %s: no workspace for the last round's pieces", cfg->name);
      return -1;
    }
    size_t lse_at, o_at, end;
    tail_layout(cfg, x->tail, x->sm_count, &lse_at, &o_at, &end);
    unsigned char *ws = (unsigned char *)x->tile_counter;
    x->part_count = (int32_t *)ws;
    x->part_lse = (float *)(ws + lse_at);
    x->part_o = (float *)(ws + o_at);
  }
  /* DYNAMIC's chunk of (head, batch) pairs (core/schedule.h) */
  x->chunk = fa_sched_chunk((int64_t)(p->heads_q / pack) * p->batch,
                            4 * (int64_t)p->seqlen_k * p->head_dim);
  return cfg->launch(x);
}
