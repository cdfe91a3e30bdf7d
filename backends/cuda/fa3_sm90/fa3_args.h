/*
 * fa3_args.h: what the host passes to the FlashAttention-3 forward kernels (Hopper, sm_90a): the
 * FlashAttention-2 family's arguments (pointers, strides, sizes, mask) and the TMA tensor maps of
 * Q, K and V, which must sit in the kernel's parameter space (a __grid_constant__ argument); and
 * the compiled configurations (tile shape, consumer warpgroups, scheduling) per head dim.
 */
#ifndef FA_CUDA_FA3_ARGS_H
#define FA_CUDA_FA3_ARGS_H

#include "../fa2_sm80/fa2_args.h"
#include "fa3_schedule.h"

#ifdef __cplusplus
#define FA3_ALIGN64 alignas(64)
extern "C" {
#else
#define FA3_ALIGN64 _Alignas(64)
#endif

/* Scheduling features of a configuration (flags). OVERLAP: a consumer issues Q Kᵀ of tile j + 1
   before P V of tile j and does the softmax of j + 1 while P V runs. PINGPONG: the consumer
   warpgroups take turns issuing their MMAs (named barriers), so one's softmax runs under the
   others' MMAs. */
#define FA3_OVERLAP 1
#define FA3_PINGPONG 2
/* PERSISTENT: at most one block per SM, each looping over tiles, so that the producer loads the
   next tile while the consumers finish this one (host side: the grid). */
#define FA3_PERSISTENT 4
/* (8 was SNAKE, a static deal of the tiles largest first in a snake order, measured and
   superseded by DYNAMIC: bench/NOTES.md, sessions 9-11.) */
/* QDOUBLE: two Q buffers, so that the next tile's Q loads while this tile still reads its own
   (with one, it can load only after this tile's last Q Kᵀ). */
#define FA3_QDOUBLE 16
/* OSTORE: the epilogue writes O into its tile's Q buffer (Q is no longer read) and a thread of
   the producer warpgroup (not the one that loads) stores it by TMA, then hands the buffer back
   for a later tile's Q (with one Q buffer, the next tile's). */
#define FA3_OSTORE 32
/* DYNAMIC (with PERSISTENT): after its first tile (blockIdx.x), a block's producer takes the next
   from a global counter (atomicAdd; zeroed before the launch in the call's workspace) and passes
   it to the consumers through shared memory. Tiles largest first within chunks of (head, batch)
   pairs whose K and V fit in a share of L2, the chunk of the remaining pairs first
   (core/schedule.h), so that whichever block is free takes the largest tile left: under a
   causal mask a static deal leaves some blocks with ~15% more work than the mean, and the
   remainder chunk last cost 2-9% at head dim 128 and 256 (bench/NOTES.md, session 16). */
#define FA3_DYNAMIC 64
/* PINNED: the wait for the previous tile's P V is pinned after this tile's softmax (a shared
   store of the softmax's row sums, pin_after). Without it ptxas schedules that wait
   right after the wait for S, so the softmax never runs under its own warpgroup's P V (OVERLAP
   in name only). Pinned gains 3-6% at head dim 128 and 256 without a mask and loses 1-7% at
   head dim 64 (bench/NOTES.md, session 12); under a mask it lost at <= 8k keys with one block
   per tile, but with the dynamic schedule at head dim 128 it gains 1-5% (session 23): core/plan
   picks. */
#define FA3_PINNED 128
/* OSTAGE (with OSTORE, two consumers): the epilogue writes O into the tile's last K/V stage
   instead of its Q buffer (consumer 0's rows into the K stage once consumer 1 has read it,
   consumer 1's into the V stage once consumer 0's last P V has), and the store thread releases
   that stage after the TMA store. The Q buffer is released after the tile's last Q Kᵀ, so that
   with one Q buffer (head dim 256) the next tile's Q loads during the last P V and the epilogue
   rather than after the store. The tile's coordinates then pass through a ring of two slots
   (one per tile in flight) of their own. */
#define FA3_OSTAGE 256
/* STAGES3: three K/V stages instead of two, so that the producer runs two key tiles ahead (head
   dim 64, where they fit beside two Q buffers: +0-3% at 1k-16k keys; at head dim 128, with one
   Q buffer and OSTAGE to make room, -1..-5%: bench/NOTES.md, session 15). */
#define FA3_STAGES3 512
/* STAGGER (two consumers, instead of PINGPONG): no turns; at each tile, consumer 1 issues its
   first Q Kᵀ only after consumer 0 has done the softmax of the tile's first key tile, so that
   their tile boundaries (last P V, epilogue, first S and its softmax) fall apart and each runs
   beside the other's full key tiles. hd64 under a mask at 1k keys +2% against ping-pong, +1-3%
   against no turns and no stagger (bench/NOTES.md, session 18). Planned there until TAILSKIP's
   three consumers beat it (session 22); kept for A/B. */
#define FA3_STAGGER 1024
/* ROWSUM (head dim 64): the tensor core forms each row's sum of P: P V runs at N = 72, the 8
   columns past V reading a box of ones (BN rows of 128 bytes after the K/V stages, reached
   through the descriptor's leading-byte offset), so the softmax drops its 64 additions a thread
   per key tile and the rescale of O covers the sum. The sum is then that of the rounded P that P V
   multiplies (its relative error that of the dtype, as O's is). */
#define FA3_ROWSUM 2048
/* SPLITMAX: the softmax's second row's max computed under the first row's exps (fa3_softmax). */
#define FA3_SPLITMAX 16384
/* TAILSKIP: a consumer computes only up to the last key tile its own 64 rows see; the producer
   releases the block's later key tiles' stages on its behalf and the consumer takes their
   ping-pong turns without work, so that a block under a causal mask does not compute the key
   tiles its first consumers' rows do not reach (192-row blocks of 128-key tiles; 128-row blocks
   of 80-key tiles). */
#define FA3_TAILSKIP 32768
/* LEADRAG (three consumers, OSTORE, no OSTAGE): the query blocks cut from the sequence's end in
   64-row slabs, so that the short block (1k rows are 5 1/3 blocks of 192) comes first, where under
   a causal mask it sees one key tile, instead of last, where one consumer works through every key
   tile while the others idle (core/schedule.h, fa_sched_query_block). Without GQA packing; O is
   stored in 64-row boxes, the tile's slabs that hold rows. */
#define FA3_LEADRAG 65536
/* TAILSPLIT (the static deal, OSTORE, no OSTAGE): the balanced last wave. The tiles of the last,
   partial round (total % grid of them: 2048 tiles on 132 SMs leave 68, so 64 blocks idle for
   a whole tile) are cut by key tiles into one equal piece per block (core/schedule.h
   fa_sched_tail_piece); a tile cut in pieces is finished by the last of its pieces to arrive,
   from the others' fp32 partial outputs in the workspace. Only without a mask (the host sets no
   tail otherwise) and where the workspace was sized for it (fa3_fwd_workspace_bytes). */
#define FA3_TAILSPLIT 131072

/* The compiled configurations: X(name, padded head dim, consumer warpgroups, key tile, flags).
   A block holds 64 query rows per consumer warpgroup. The name's letters after the tile: o
   OVERLAP, p PINGPONG or g STAGGER (neither: no turns), then p PERSISTENT or d DYNAMIC, q
   QDOUBLE, o OSTORE, s OSTAGE, w PINNED, 3 STAGES3, r ROWSUM, x SPLITMAX, t TAILSKIP,
   l LEADRAG, k TAILSPLIT.
   core/plan (fa3_fwd_pick) names the defaults; the first of each head dim is the fallback where
   shared memory is small (fa3_fwd_pick takes the first that fits); the rest are the defaults' twins
   without their last feature or an earlier default, kept for A/B runs (FA_CUDA_FA3_CONFIG=name).
   Head dims 96 and 192 run the 128 and 256 kernels: TMA reads the missing columns as zeros, the
   epilogue stores the real ones. */
#define FA3_OP (FA3_OVERLAP | FA3_PINGPONG)
#define FA3_OPP (FA3_OVERLAP | FA3_PINGPONG | FA3_PERSISTENT)
#define FA3_OPPQO (FA3_OPP | FA3_QDOUBLE | FA3_OSTORE)
#define FA3_OPDQO (FA3_OPPQO | FA3_DYNAMIC)
#define FA3_ODQO (FA3_OVERLAP | FA3_PERSISTENT | FA3_DYNAMIC | FA3_QDOUBLE | FA3_OSTORE)
#define FA3_FWD_CONFIGS(X)                                                                         \
  X(hd64_3x128_op, 64, 3, 128, FA3_OP)                                                             \
  X(hd64_3x128_oppqo3, 64, 3, 128, FA3_OPPQO | FA3_STAGES3)                                        \
  X(hd64_3x128_opdqo3, 64, 3, 128, FA3_OPDQO | FA3_STAGES3)                                        \
  X(hd64_3x128_oppqo3r, 64, 3, 128, FA3_OPPQO | FA3_STAGES3 | FA3_ROWSUM)                          \
  X(hd64_2x128_ogdqo3rx, 64, 2, 128,                                                               \
    FA3_ODQO | FA3_STAGES3 | FA3_STAGGER | FA3_ROWSUM | FA3_SPLITMAX)                              \
  X(hd64_3x128_oppqo3rx, 64, 3, 128, FA3_OPPQO | FA3_STAGES3 | FA3_ROWSUM | FA3_SPLITMAX)          \
  X(hd64_3x128_oppqo3rxk, 64, 3, 128,                                                              \
    FA3_OPPQO | FA3_STAGES3 | FA3_ROWSUM | FA3_SPLITMAX | FA3_TAILSPLIT)                           \
  X(hd64_3x128_opdqo3r, 64, 3, 128, FA3_OPDQO | FA3_STAGES3 | FA3_ROWSUM)                          \
  X(hd64_3x128_opdqo3rx, 64, 3, 128, FA3_OPDQO | FA3_STAGES3 | FA3_ROWSUM | FA3_SPLITMAX)          \
  X(hd64_3x128_opdqo3rxt, 64, 3, 128,                                                              \
    FA3_OPDQO | FA3_STAGES3 | FA3_ROWSUM | FA3_SPLITMAX | FA3_TAILSKIP)                            \
  X(hd64_3x128_opdqo3rxtl, 64, 3, 128,                                                             \
    FA3_OPDQO | FA3_STAGES3 | FA3_ROWSUM | FA3_SPLITMAX | FA3_TAILSKIP | FA3_LEADRAG)              \
  X(hd128_2x128_oppqo, 128, 2, 128, FA3_OPPQO)                                                     \
  X(hd128_2x128_oppqow, 128, 2, 128, FA3_OPPQO | FA3_PINNED)                                       \
  X(hd128_2x128_opo, 128, 2, 128, FA3_OP | FA3_OSTORE)                                             \
  X(hd128_2x128_opdqo, 128, 2, 128, FA3_OPDQO)                                                     \
  X(hd128_2x128_oppqowx, 128, 2, 128, FA3_OPPQO | FA3_PINNED | FA3_SPLITMAX)                       \
  X(hd128_2x128_oppqowxk, 128, 2, 128, FA3_OPPQO | FA3_PINNED | FA3_SPLITMAX | FA3_TAILSPLIT)      \
  X(hd128_2x128_opdqowx, 128, 2, 128, FA3_OPDQO | FA3_PINNED | FA3_SPLITMAX)                       \
  X(hd256_2x80_op, 256, 2, 80, FA3_OP)                                                             \
  X(hd256_2x80_opo, 256, 2, 80, FA3_OP | FA3_OSTORE)                                               \
  X(hd256_2x80_opdos, 256, 2, 80, FA3_OPP | FA3_DYNAMIC | FA3_OSTORE | FA3_OSTAGE)                 \
  X(hd256_2x80_oppos, 256, 2, 80, FA3_OPP | FA3_OSTORE | FA3_OSTAGE)                               \
  X(hd256_2x80_opposw, 256, 2, 80, FA3_OPP | FA3_OSTORE | FA3_OSTAGE | FA3_PINNED)                 \
  X(hd256_2x80_opdosx, 256, 2, 80, FA3_OPP | FA3_DYNAMIC | FA3_OSTORE | FA3_OSTAGE | FA3_SPLITMAX) \
  X(hd256_2x80_opposwx, 256, 2, 80, FA3_OPP | FA3_OSTORE | FA3_OSTAGE | FA3_PINNED | FA3_SPLITMAX) \
  X(hd256_2x80_opdosxt, 256, 2, 80,                                                                \
    FA3_OPP | FA3_DYNAMIC | FA3_OSTORE | FA3_OSTAGE | FA3_SPLITMAX | FA3_TAILSKIP)

/* Two (STAGES3: three) K/V stages, one or two Q buffers, each in 64-column boxes; ROWSUM's box of
   ones (BN rows of 128 bytes); 1 KiB for the alignment the 128-byte swizzle needs. */
#define FA3_FWD_STAGES_OF(flags) ((flags)&FA3_STAGES3 ? 3 : 2)
#define FA3_FWD_SMEM(hd, wgs, bn, flags)                   \
  (((size_t)64 * (wgs) * ((flags)&FA3_QDOUBLE ? 2 : 1) +   \
    2 * (size_t)FA3_FWD_STAGES_OF(flags) * (size_t)(bn)) * \
       (size_t)(hd)*2 +                                    \
   ((flags)&FA3_ROWSUM ? (size_t)(bn)*128 : 0) + 1024)

typedef struct fa3_fwd_args {
  FA3_ALIGN64 unsigned char tq[128]; /* CUtensorMap of Q: (head dim, seqlen, heads, batch) */
  FA3_ALIGN64 unsigned char tk[128];
  FA3_ALIGN64 unsigned char tv[128];
  FA3_ALIGN64 unsigned char to[128]; /* of O (OSTORE configurations only) */
  fa2_fwd_args a;
  int32_t sm_count;      /* the device's SMs: the grid of a persistent configuration */
  int32_t chunk;         /* DYNAMIC: (head, batch) pairs per chunk of the order */
  int32_t pack_log2;     /* GQA packing: a tile holds 2^pack_log2 query heads of one K/V head */
  int32_t *tile_counter; /* DYNAMIC: tiles taken past the first grid's worth (4 device bytes) */
  /* TAILSPLIT (fa3_fwd_launch sets them): the last round's tiles cut in pieces (0: none), their
     key tiles each, the pieces' outputs (tail + grid slots of tile_m rows x the padded head
     dim, fp32) and LSEs (tail + grid slots x tile_m), and a counter per tail tile */
  int32_t tail, tail_nkt;
  float *part_o, *part_lse;
  int32_t *part_count;
} fa3_fwd_args;

typedef int (*fa3_fwd_fn)(const fa3_fwd_args *a);
typedef struct fa3_fwd_config {
  const char *name;
  int head_dim_padded, warpgroups, tile_m, tile_n, flags;
  size_t smem_bytes;
  fa3_fwd_fn launch;    /* NULL where not built */
  int (*prepare)(void); /* the shared-memory opt-in of both dtypes' kernels */
} fa3_fwd_config;

/* The padded head dim of a head dim fa3 runs (64, 96, 128, 192, 256), else 0. */
int fa3_fwd_padded_head_dim(int64_t head_dim);
/* The configuration for a head dim: the one named (NULL: the head dim's default). NULL when there
   is none (the head dim is not fa3's, or the name is not one of its configurations). */
const fa3_fwd_config *fa3_fwd_config_for(int64_t head_dim, const char *name);
/* The compiled configuration core/plan's Hopper plan (fa_plan_hopper_fwd: the measured best for
   the head dim, mask and key count) names; NULL when it is not compiled (cuda.fa3_pick checks
   that every plan is). */
const fa3_fwd_config *fa3_fwd_planned(int64_t head_dim, int masked, int64_t seqlen_k);
/* The configuration a request runs by default: the planned one for its head dim, mask (causal or
   window: masked != 0) and key count; if that needs more shared memory than smem_limit, the
   first of the head dim's configurations that fits; NULL when none does. */
const fa3_fwd_config *fa3_fwd_pick(int64_t head_dim, int masked, int64_t seqlen_k,
                                   int64_t smem_limit);
/* GQA packing: the query heads a tile of c holds (a power of two): as many of one K/V head's
   group as divide it while each keeps at least seqlen_q rows (and 8, the swizzle's atom). 1 for
   MHA and for query blocks longer than half a tile. */
int fa3_fwd_pack(const fa3_fwd_config *c, int64_t heads_q, int64_t heads_kv, int64_t seqlen_q);
/* TAILSPLIT: the tiles of the last, partial round of a grid of `grid` blocks that a launch of
   problem p cuts in pieces (0 where it does not: a mask that bounds any row's keys, a grid not
   smaller than the tile count, no remainder, fewer of the tail's key tiles than blocks, so that
   some piece would be empty, or not a TAILSPLIT configuration). */
int fa3_fwd_tail_tiles(const fa3_fwd_config *c, const fa2_problem *p, int32_t grid);
/* Device bytes of workspace a configuration's launch of problem p needs with a grid of `grid`
   blocks (DYNAMIC: its tile counter; TAILSPLIT with a tail: the pieces' outputs and counters),
   else 0. Decide and run call it alike, so the launch finds what it needs. */
size_t fa3_fwd_workspace_bytes(const fa3_fwd_config *c, const fa2_problem *p, int32_t grid);
/* Every configuration (count of them). */
const fa3_fwd_config *fa3_fwd_configs(int *count);

/* Fills the tensor maps from a->a (16-byte aligned bases, row/head/batch strides multiples of 8
   elements) and launches the configuration (a DYNAMIC one clears a->tile_counter first, in
   stream order); returns a cudaError_t value, or -1 with a message in
   err when a tensor cannot be described to TMA. */
int fa3_fwd_launch(fa3_fwd_args *a, const fa3_fwd_config *cfg, char *err, size_t err_len);

/* The backward (fa3_bwd.cuh): query tiles of 64 rows; kernel head dims 64, 128 (96 runs on 128)
   and 256 (192 runs on 256).
   Narrow (hd 64, 128): one block per 128-key tile, two consumers of 64 keys. Shared memory: K and
   V (128 x hd each); Q, dO, dS (64 x 128) and the step's LSE and D (64 floats each) in two stages;
   the fp32 dQ staging tile (64 x hd); up to ten mbarriers; 1 KiB for the swizzle's alignment.
   Wide (hd 256): one block per 64-key tile, each consumer half of the head dim of dK and dV (their
   accumulators of 128 keys would not fit in registers). Shared memory: K and V (64 x hd each); Q
   and dO in two stages; Pᵀ and dSᵀ (64 keys x 64 queries each) in two stages; LSE and D in two
   stages; no dQ staging (the consumers add dQ from registers); the mbarriers and alignment. */
/* Whether the backward kernel of a padded head dim is the wide one (else narrow). */
#define FA3_BWD_WIDE(hd) ((hd) > 128)
#define FA3_BWD_TILE_M 64
#define FA3_BWD_TILE_N(hd) (FA3_BWD_WIDE(hd) ? 64 : 128)
/* K/V buffers of the narrow kernels: two at hd64 (the next key tile's loaded during the last
   steps of the current one, in the persistent schedule), one at hd128 (no room: there the next
   tile's load runs under the current one's dK/dV stores). */
#define FA3_BWD_KV_STAGES(hd) ((hd) <= 64 ? 2 : 1)
#define FA3_BWD_SMEM_NARROW(hd)                                                             \
  ((size_t)FA3_BWD_KV_STAGES(hd) * 2 * 128 * (hd)*2 + (size_t)4 * FA3_BWD_TILE_M * (hd)*2 + \
   (size_t)2 * FA3_BWD_TILE_M * 128 * 2 + (size_t)FA3_BWD_TILE_M * (hd)*4 +                 \
   (size_t)4 * FA3_BWD_TILE_M * 4 + (size_t)10 * 8 + 1024)
#define FA3_BWD_SMEM_WIDE(hd)                                      \
  ((size_t)2 * 64 * (hd)*2 + (size_t)4 * FA3_BWD_TILE_M * (hd)*2 + \
   (size_t)4 * FA3_BWD_TILE_M * 64 * 2 + (size_t)4 * FA3_BWD_TILE_M * 4 + (size_t)7 * 8 + 1024)
#define FA3_BWD_SMEM(hd) (FA3_BWD_WIDE(hd) ? FA3_BWD_SMEM_WIDE(hd) : FA3_BWD_SMEM_NARROW(hd))

typedef struct fa3_bwd_args {
  FA3_ALIGN64 unsigned char tq[128]; /* CUtensorMap of Q: (head dim, seqlen, heads, batch) */
  FA3_ALIGN64 unsigned char tk[128];
  FA3_ALIGN64 unsigned char tv[128];
  FA3_ALIGN64 unsigned char tdo[128]; /* of dO */
  /* of the workspace's log2 LSE and D (fp32, (seqlen_q_padded, batch x heads_q), boxes of one
     query tile's rows), made after fa2_bwd_carve */
  FA3_ALIGN64 unsigned char tlse[128];
  FA3_ALIGN64 unsigned char tdsum[128];
  /* The persistent grid's blocks (the narrow kernels, hd64 and hd128, not deterministic:
     each block walks the key tiles blockIdx.x, + grid_blocks, ... of all K/V heads and batches);
     0: one block per key tile. */
  int32_t grid_blocks;
  /* The persistent grid's order under a mask (fa3_bwd_sched): 0, none (no mask: the key tile
     fastest); else the (K/V head, batch) pairs in chunks of sched_chunk, within a chunk the key
     tiles longest first (core/schedule.h's fa_sched_lpt_tile), the first key tile the longest
     (a causal-type mask) or, with sched_reverse, the last (a left bound only). */
  int32_t sched_chunk, sched_reverse;
  /* The persistent grid's schedule: dynamic (requested by the caller) takes a block's items
     past its first from tile_counter (atomicAdd; the workspace's sched_count, cleared by
     fa2_bwd_prologue); else (tile_counter NULL) the fixed deal, block i items i, i + grid, ... */
  int32_t dynamic;
  uint32_t *tile_counter;
  /* fa2's arguments, the workspace carved as fa2's backward carves it (fa2_bwd_carve: D, the
     log2 LSE, the fp32 dQ accumulator (fa3_bwd_sizing's layout), one split or more) */
  fa2_bwd_args a;
} fa3_bwd_args;

/* The 4-D TMA map (fa_tma_map) of a (batch, seqlen, heads, head dim) tensor with strides in
   elements, read in boxes of `rows` rows x 64 columns of `box_heads` heads (columns past
   head_dim, up to the padded head dim, and rows past seqlen read as zeros, are not written).
   0, or -1 with a message in err. */
int fa3_tensor_map(void *map, int bf16, const void *base, const fa2_strides *st, int32_t batch,
                   int32_t seqlen, int32_t heads, int32_t head_dim, uint32_t rows,
                   uint32_t box_heads, char *err, size_t err_len);
/* The head dim of the backward kernel that runs a head dim: 64, 128 and 256 their own, 96 the
   128 kernel's and 192 the 256 kernel's (TMA reads the columns past the head dim as zeros, which
   add nothing to S, dP, dK, dV or dQ; the forward does the same); 0: no fa3 backward. */
static inline int fa3_bwd_padded_head_dim(int64_t head_dim) {
  return head_dim == 64                       ? 64
         : head_dim == 96 || head_dim == 128  ? 128
         : head_dim == 192 || head_dim == 256 ? 256
                                              : 0;
}
/* The dQ accumulator's layout (fa2_args.h) that the backward kernel of a padded head dim writes:
   the narrow kernels stage it rotated, the wide one adds fragments from registers. */
static inline int32_t fa3_bwd_dq_layout(int padded_head_dim) {
  return FA3_BWD_WIDE(padded_head_dim) ? FA2_DQ_FRAGMENT : FA2_DQ_ROTATED;
}
/* Under a mask the persistent grid with the fixed deal runs only up to this many key tiles a
   head (1k keys): there a tile's fixed costs weigh most (hd64 causal 1k +4%), while from 2k the
   fixed deal's balance and L2 reach cost more than they save (2k -1%, 4k -4%, 16k -6%;
   bench/NOTES.md session 29). The dynamic schedule has no such bound. */
#define FA3_BWD_PERSISTENT_MASKED_TILES 8
/* The persistent grid's block count for a launch (fa3_bwd_args.grid_blocks): requested (the SM
   count, or fewer for tests; <= 0: none) where it pays, 0 (a block per key tile) elsewhere. It
   pays in the narrow kernels (hd64 with two K/V buffers; hd128 with one, +0.1..+2.8% on the H200,
   bench/NOTES.md session 31; the wide kernel's fixed deal measured -0.1..+0.7%), not in
   deterministic mode (which has its own grid, of splits), without a mask, or under one (in
   fa3_bwd_sched's order) with the dynamic schedule or at most FA3_BWD_PERSISTENT_MASKED_TILES
   key tiles. At most one block per tile. */
static inline int32_t fa3_bwd_grid_blocks(const fa2_bwd_args *a, int padded_head_dim,
                                          int32_t requested, int32_t dynamic) {
  const fa2_problem *p = &a->p;
  if (requested <= 0 || FA3_BWD_WIDE(padded_head_dim) || a->deterministic || p->seqlen_k <= 0)
    return 0;
  const int64_t tile_n = FA3_BWD_TILE_N(padded_head_dim);
  const int64_t n_tiles = (p->seqlen_k + tile_n - 1) / tile_n;
  if (!dynamic && fa2_problem_masked(p) && n_tiles > FA3_BWD_PERSISTENT_MASKED_TILES) return 0;
  const int64_t items = n_tiles * p->heads_kv * p->batch;
  if (items > INT32_MAX) return 0;
  return requested < items ? requested : (int32_t)items;
}
/* The persistent grid's order (fa3_bwd_args.sched_chunk, sched_reverse): under a mask, chunks of
   (K/V head, batch) pairs whose Q and dO take about half of L2 (core/schedule.h fa_sched_chunk),
   the longest key tiles first within each, so that the fixed deal (block i: items i, i + grid,
   ...) gives every block tiles of about the same lengths (the key tile fastest, as without a
   mask, gave some blocks twice the work of others: -15% at causal 1k); without a mask, 0 (the
   key tile fastest, the blocks running together on one head's Q and dO). */
static inline void fa3_bwd_sched(const fa2_bwd_args *a, int padded_head_dim, int32_t *chunk,
                                 int32_t *reverse) {
  const fa2_problem *p = &a->p;
  *chunk = *reverse = 0;
  if (!fa2_problem_masked(p)) return;
  const int64_t pairs = (int64_t)p->heads_kv * p->batch;
  const int64_t qdo_bytes = (int64_t)(p->heads_q / (p->heads_kv > 0 ? p->heads_kv : 1)) *
                            p->seqlen_q * padded_head_dim * 2 * 2;
  *chunk = fa_sched_chunk(pairs > 0 ? pairs : 1, qdo_bytes);
  *reverse = p->mask.right < 0; /* a left bound only: later keys are seen by more rows */
}
/* The launch of the main kernel (fa3_bwd_hd<N>.cu) and the shared-memory opt-in of both dtypes'
   kernels. */
int fa3_bwd_main_launch_hd64(const fa3_bwd_args *a);
int fa3_bwd_main_launch_hd128(const fa3_bwd_args *a);
int fa3_bwd_main_launch_hd256(const fa3_bwd_args *a);
int fa3_bwd_prepare_hd64(void);
int fa3_bwd_prepare_hd128(void);
int fa3_bwd_prepare_hd256(void);
/* The whole backward on a->a's stream: the tensor maps, the workspace carved, dQ's accumulator
   cleared, D and the log2 LSE (fa2's preprocessing kernel), the main kernel, dQ converted (fa2's
   kernel). a->a must be sized for it (fa3_bwd_sizing). Returns a cudaError_t value, or -1 with
   a message in err when a tensor cannot be described to TMA. */
int fa3_bwd_launch(fa3_bwd_args *a, void *workspace, char *err, size_t err_len);
/* Fills what decides the backward's workspace (fa2_bwd_workspace_bytes of the result): the
   padded head dim, the query tile, the key tile, the dQ accumulator's layout (narrow kernels:
   FA2_DQ_ROTATED, which they stage; wide: FA2_DQ_FRAGMENT, which their consumers add from
   registers): one, or with deterministic != 0 dq_splits of them (one block each, its key tiles
   in order; at least 1), no balanced last wave. a->p must be set. */
void fa3_bwd_sizing(fa2_bwd_args *a, int32_t deterministic, int32_t dq_splits);

#define FA3_DECLARE(name, hd, wgs, bn, flags)       \
  int fa3_fwd_launch_##name(const fa3_fwd_args *a); \
  int fa3_fwd_prepare_##name(void);
FA3_FWD_CONFIGS(FA3_DECLARE)
#undef FA3_DECLARE

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_FA3_ARGS_H */
