/*
 * fa3_bwd_block.cuh: a FlashAttention-3 backward block's registers per role, named barriers and
 * shared-memory layout (fa3_bwd_kernel.cuh; the tiles and their sizes: fa3_tile_size.h).
 */
#ifndef FA_CUDA_FA3_BWD_BLOCK_CUH
#define FA_CUDA_FA3_BWD_BLOCK_CUH

#include "fa3_tile_size.h"

/* Registers per thread of warpgroup 0 and of each consumer warpgroup (setmaxnreg): 384 threads
   start with 168 each, and 40 + 2 x 232 = 24 + 2 x 240 = 3 x 168. Narrow kernels: 40 / 232 (the
   producer spills a few words at 40, in its loop over key tiles; at 24 it spills hundreds of
   bytes, and at 32 / 232 the dQ writer spills). Wide kernel (no dQ writer): 24 / 240, +0.5..+3.7%
   on the H200 (the producer's spills are one thread's, outside the consumers' loop). */
#define FA3_BWD_PRODUCER_REGS(wide) ((wide) ? 24 : 40)
#define FA3_BWD_CONSUMER_REGS(wide) ((wide) ? 240 : 232)

/* Named barriers (0 is __syncthreads): both consumers' halves of a stage's dS written (narrow
   kernels: even steps; odd steps on FA3_BWD_BAR_DS_ODD, so that a consumer's arrival for one
   step never meets its own wait of the next in one generation); the dQ staging tile filled (by
   the consumer whose dQ it is; to the writer warp); the tile read by the last reduction (from
   the writer warp). */
#define FA3_BWD_BAR_DS 1
#define FA3_BWD_BAR_DS_ODD 6
#define FA3_BWD_BAR_FULL_DQ 2
#define FA3_BWD_BAR_EMPTY_DQ 3
/* Per consumer (4 + consumer), its own warpgroup: a scheduling fence (below). */
#define FA3_BWD_BAR_PIN 4

/* The shared-memory layout (offsets from a 1024-byte aligned base; every tile 1024-aligned for
   the 128-byte swizzle). A stage's DS_BYTES: narrow, dS (64 queries x 128 keys), each consumer's
   64 keys a half; wide, Pᵀ then dSᵀ (64 keys x 64 queries each), each consumer's 32 queries a
   half of both. */
template <int HD>
struct fa3_bwd_layout {
  static constexpr bool WIDE = FA3_BWD_WIDE(HD);
  static constexpr int BM = FA3_BWD_TILE_M, BN = FA3_BWD_TILE_N(HD);
  static constexpr int KV_BOX = BN * 128, Q_BOX = BM * 128; /* bytes of one 64-column box */
  static constexpr int KV_BYTES = BN * HD * 2, Q_BYTES = BM * HD * 2;
  static constexpr int DS_HALF = BM * 64 * 2; /* 64 x 64 16-bit values */
  static constexpr int DS_BYTES = 2 * DS_HALF;
  static constexpr int DQ_BYTES = WIDE ? 0 : BM * HD * 4; /* the fp32 dQ staging tile */
  /* K/V buffers (fa3_args.h); K and V of slot s at K + s KV_SLOT, V + s KV_SLOT. */
  static constexpr int KV_ST = WIDE ? 1 : FA3_BWD_KV_STAGES(HD), KV_SLOT = 2 * KV_BYTES;
  static constexpr int K = 0, V = KV_BYTES, Q = KV_ST * KV_SLOT, DO = Q + 2 * Q_BYTES;
  static constexpr int DS = DO + 2 * Q_BYTES, DQ = DS + 2 * DS_BYTES;
  static constexpr int LSED = DQ + DQ_BYTES, BARS = LSED + 2 * 2 * BM * 4;
  /* mbarriers: kv_full and kv_empty per K/V slot, full and empty per Q/dO stage, item_full per
     K/V slot (narrow kernels: its item published, learnt before its K and V arrive) */
  static constexpr int KV_FULL = 0, KV_EMPTY = KV_ST, FULL = 2 * KV_ST, EMPTY = FULL + 2;
  static constexpr int ITEM_FULL = EMPTY + 2;
  static constexpr int END = BARS + (ITEM_FULL + KV_ST) * 8;
  static_assert(END + 1024 <= (int)FA3_BWD_SMEM(HD), "FA3_BWD_SMEM covers the layout");
};

#endif /* FA_CUDA_FA3_BWD_BLOCK_CUH */
