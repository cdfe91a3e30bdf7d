/*
 * fa2_args.h: what the host side hands the FlashAttention-2 kernels (plain C, shared by the
 * plugin's C code and the CUDA launchers). Strides are in elements; the last dimension of every
 * tensor is contiguous (decide() refuses anything else), so a row is (batch, token, head).
 */
#ifndef FA_CUDA_FA2_ARGS_H
#define FA_CUDA_FA2_ARGS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fa2_strides {
  int64_t batch, row, head;
} fa2_strides;

typedef struct fa2_lse_strides {
  int64_t batch, head, row;
} fa2_lse_strides;

/* The mask of core/math/mask.h, resolved by the host (shift, left, right; -1 = unbounded). */
typedef struct fa2_mask_args {
  int64_t shift, left, right;
} fa2_mask_args;

/* What both passes share: the problem's sizes, the score transform, the mask and where to run. */
typedef struct fa2_problem {
  int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  float scale;   /* softmax scale */
  float softcap; /* 0: off */
  fa2_mask_args mask;
  int32_t bf16; /* 0: f16 storage */
  void *stream; /* cudaStream_t */
} fa2_problem;

/* Whether the problem's mask bounds any row's keys (-1 on both sides bounds none). */
static inline int fa2_problem_masked(const fa2_problem *p) {
  return p->mask.left >= 0 || p->mask.right >= 0;
}

typedef struct fa2_fwd_args {
  const void *q, *k, *v;
  void *out;
  float *lse; /* NULL: not written */
  fa2_strides q_str, k_str, v_str, o_str;
  fa2_lse_strides lse_str;
  fa2_problem p;
  int32_t size_class; /* FA2_WIDE or FA2_COMPACT (fa2_tiles.h): which tiles run */
} fa2_fwd_args;

/* Layouts of a row of the backward's fp32 dQ accumulator (head_dim_padded columns):
   FA2_DQ_NATURAL  column c at c (per-thread pairs of atomics: sm_80 code);
   FA2_DQ_ROTATED  8-column chunks rotated by the row's index r within its query tile
                   (r mod tile_m): chunk j at chunk (j + r) mod (head_dim_padded / 8), the layout
                   in which the bulk-reduction path stages a tile in shared memory without bank
                   conflicts (sm_90 code, head dims up to 192);
   FA2_DQ_FRAGMENT not by rows: a head's [seqlen_q_padded x head_dim_padded] accumulator is
                   [seqlen_q_padded / 16][head_dim_padded / 8] blocks of 128 floats, each a 16-row
                   x 8-column mma accumulator tile in lane order: row 8r + g, column 2t + e of a
                   block at 4 (4g + t) + 2r + e (g < 8, t < 4, r, e < 2). Each lane adds its
                   four accumulator values by one 16-byte vector reduction straight from its
                   registers, and a warp's 32 reductions cover 512 contiguous bytes (sm_90 code
                   above head dim 192). */
enum { FA2_DQ_NATURAL = 0, FA2_DQ_ROTATED = 1, FA2_DQ_FRAGMENT = 2 };

typedef struct fa2_bwd_args {
  const void *q, *k, *v, *out, *dout;
  const float *lse;
  void *dq, *dk, *dv;
  fa2_strides q_str, k_str, v_str, o_str, do_str, dq_str, dk_str, dv_str;
  fa2_lse_strides lse_str;
  fa2_problem p;
  /* Workspace (device memory, carved by the host): D = rowsum(dO∘O) and the LSE in log2 units
     (+inf where the row saw no key, so P = 0 there), both [batch, heads_q, seqlen_q_padded] with
     the padding rows filled (D 0, LSE +inf) so query tiles load them whole with cp.async; and
     the fp32 dQ accumulator [dq_splits][batch, heads_q, seqlen_q_padded, head_dim_padded]
     (its padding is written by the main kernel and never read back). Within each row, the
     columns are laid out as dq_layout says (FA2_DQ_*): the layout that lets the code running
     on the device add into it the cheapest way. */
  int32_t seqlen_q_padded; /* seqlen_q rounded up to the backward's query tile */
  int32_t head_dim_padded; /* head_dim rounded up to the kernels' granule (FA2_PAD_HD) */
  int32_t size_class;      /* FA2_WIDE or FA2_COMPACT (fa2_tiles.h): which tiles run */
  int32_t tile_m;          /* the backward's query tile */
  int32_t tile_n;          /* its key tile (set by fa2_bwd_plan_tail) */
  int32_t dq_layout;       /* FA2_DQ_* (fa2_bwd_dq_layout) */
  float *dsum;
  float *lse_log2;
  float *dq_accum;
  /* deterministic = 0: one accumulator (dq_splits = 1), one block per key tile, atomics in any
     order. deterministic = 1: block s of dq_splits owns accumulator s and visits key tiles
     s, s + dq_splits, ... in order; the accumulators are summed in split order. */
  int32_t deterministic;
  int32_t dq_splits;
  /* The balanced last wave (fa2_bwd_plan_tail): where every key tile costs the same (no mask),
     the key tiles that would run as a last, partial wave of blocks are cut into tail_pieces runs
     of tail_piece_steps consecutive (key tile, query step) units, one block each, so that the
     last wave keeps every SM busy for the same time. A tile cut in several pieces has its dK, dV
     added into tail_acc (fp32, [tail_tiles][2][key tile x head_dim_padded] in the kernel's
     register order) and written by the piece that finishes last (tail_count: one counter per
     tile). The whole tiles run first, one block per key tile, grid (key tile, KV head, batch);
     with a tail, the first tail_first of them (linear index: key tile fastest, then KV head,
     then batch), then a second launch runs the pieces over the rest. Workspace after the dQ
     accumulator, cleared with it. */
  int32_t tail_tiles, tail_first, tail_piece_steps, tail_pieces;
  float *tail_acc;
  uint32_t *tail_count;
  /* Work counters of a main kernel that schedules its blocks itself (fa3's persistent grid):
     sched_counters (at most 256) of them at sched_count, after the tail's (256 bytes), cleared
     by fa2_bwd_prologue's preprocessing kernel. */
  int32_t sched_counters;
  uint32_t *sched_count;
} fa2_bwd_args;

/* Fills a's tail_* plan (tail_acc/tail_count stay for the launcher) for a backward whose key
   tiles are tile_n keys and query steps a->tile_m rows, on a device that runs `slots` blocks at
   once (its SM count: every fa2 backward kernel takes one SM, 8 warps x ~255 registers); reads
   a->p (sizes, mask) and a->deterministic. No tail (tail_tiles = 0) where a mask makes tiles
   differ, in deterministic mode (fixed order), where the blocks fill whole waves or nearly, or
   where a tile has fewer than FA2_BWD_TAIL_MIN_STEPS steps. Pure: decide and the launcher call it
   alike. */
void fa2_bwd_plan_tail(fa2_bwd_args *a, int32_t tile_n, int32_t slots);

/* The kernels a device runs for a head dim: the wide tiles where they fit its shared memory
   (smem_limit bytes per block), else the compact ones (fa2_tiles.h). smem_bytes is what the
   kernel asks for on that device, the sm_90 dQ staging included; when it exceeds smem_limit the
   shape is refused with it. */
typedef struct fa2_tile_config {
  int32_t head_dim_padded;
  int32_t size_class; /* FA2_WIDE or FA2_COMPACT */
  int32_t tile_m, tile_n, warps;
  int32_t dq_layout; /* backward: FA2_DQ_* of the code that runs (fa2_bwd_dq_layout) */
  size_t smem_bytes;
} fa2_tile_config;

/* 0 when the head dim has no kernels. cc_major: the device's compute capability major; the sm_90
   code runs exactly where it is 9 or more (the plugin refuses a device whose major it was not
   built for). */
int fa2_fwd_config(int32_t head_dim, int cc_major, int64_t smem_limit, fa2_tile_config *cfg);
int fa2_bwd_config(int32_t head_dim, int cc_major, int64_t smem_limit, fa2_tile_config *cfg);

/* The dQ accumulator layout of the backward code that runs on a device of compute capability
   cc_major, for a padded head dim and size class: the sm_80 code adds pairs of atomics
   (FA2_DQ_NATURAL); the sm_90 code bulk-reduces a staging tile where the wide tiles leave room
   for it (FA2_DQ_ROTATED), else adds 16-byte vectors (FA2_DQ_FRAGMENT). Pure: decide, prepare and
   the launcher read the same answer. */
int32_t fa2_bwd_dq_layout(int cc_major, int32_t head_dim_padded, int32_t size_class);

/* Bytes of device workspace the backward needs (D and the dQ accumulators). */
size_t fa2_bwd_workspace_bytes(const fa2_bwd_args *a);

/* Launch on a->stream; return a cudaError_t value (0 = success). The caller has made the
   tensors' device current. The forward goes through fa2_fwd_for (fa2_launch.h); the backward:
   a->size_class, head_dim_padded, tile_m and dq_layout as fa2_bwd_config says, tile_n its key tile.
 */
int fa2_bwd_launch(const fa2_bwd_args *a, int32_t tile_n, void *workspace);

/* The backward's steps around its main kernel, which fa3's backward shares: fa2_bwd_carve sets
   a->seqlen_q_padded (from a->tile_m) and points D, the log2 LSE, the dQ accumulator(s) and the
   tail's sums into the workspace (fa2_bwd_workspace_bytes of a); fa2_bwd_prologue clears the
   tail's sums and runs the preprocessing kernel (D, LSE; it clears the dQ accumulator(s) too);
   fa2_bwd_convert_dq_launch
   (fa2_launch.h) ends it. Each returns a cudaError_t value where it launches. */
void fa2_bwd_carve(fa2_bwd_args *a, void *workspace);
int fa2_bwd_prologue(const fa2_bwd_args *a);

/* The kernels' attributes set once per process and device (shared memory opt-in), and whether
   the loaded module has code for the current device (cudaErrorNoKernelImageForDevice if not).
   Kernels that need more than smem_limit bytes (the device's opt-in maximum) are left as they
   are: decide() refuses their shapes with the reason, and every other kernel still runs. */
int fa2_prepare_device(int smem_limit, int cc_major);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_FA2_ARGS_H */
