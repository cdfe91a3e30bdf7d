/*
 * fa2_tiles.h: the tile shapes compiled for each padded head dim, as macros so the C host code
 * (decide, workspace) and the CUDA templates read one table.
 *
 * Head dims are padded up to a multiple of 32 (the kernels' granule: two 16-wide mma k-steps);
 * columns past the real head dim are zero-filled on load and never stored.
 * Forward (query rows x key rows per tile, warps along the query rows): 128 x 128 with 4 warps up
 * to head dim 64, 128 x 64 with 4 warps up to head dim 128, 128 x 64 with 8 warps up to 224,
 * 64 x 64 with 4 warps and single K and V buffers at 256 (two blocks per SM, FlashAttention-2's
 * choice); each warp keeps its share of the output in registers (32 or 16 rows x head dim).
 * Backward (key rows per block x query rows per step): 128 x 128 with 8 warps up to head dim 64
 * (each warp's Sᵀ tile in two parts of 32 queries), 128 x 64 up to head dim 128, 64 x 64 with 8
 * warps above, so dK and dV stay in registers.
 * These are the wide tiles; the compact class (below) runs 64 x 64 everywhere.
 */
#ifndef FA_CUDA_FA2_TILES_H
#define FA_CUDA_FA2_TILES_H

#define FA2_HD_GRANULE 32
#define FA2_MAX_HEAD_DIM 256
#define FA2_PAD_HD(d) ((((d) + FA2_HD_GRANULE - 1) / FA2_HD_GRANULE) * FA2_HD_GRANULE)

/* Two size classes of tiles per head dim (c below): FA2_WIDE (0), sized for the 227 KiB a block
   may use on an H100/H200, and FA2_COMPACT (1) for smaller shared memories (an A100's 163 KiB,
   sm_86/89's 99 KiB): 64 x 64 tiles everywhere, single K/V buffers in the forward, single Q/dO
   buffers and no dQ staging in the backward (an A100 then runs every head dim, sm_86/89 up to
   128 in the backward). A device runs the wide tiles where they fit and the compact ones
   otherwise (fa2_fwd_config / fa2_bwd_config). Where both classes come out the same, one kernel
   serves both. */
#define FA2_WIDE 0
#define FA2_COMPACT 1

/* Shared-memory rows of the Q/K/V/dO tiles (common/tile_io.cuh): at head dims that are multiples
   of 64, 128-byte lines with the 16-byte chunks XOR-swizzled by the row; otherwise padded by 8
   elements against bank conflicts. FA2_TILE_LD is a row's length in elements. */
#define FA2_SWIZZLED(hd) ((hd) % 64 == 0)
#define FA2_TILE_LD(hd) (FA2_SWIZZLED(hd) ? (hd) : (hd) + 8)

/* Head dim 256 (and the compact class everywhere) takes 64 x 64 tiles with 4 warps and single K
   and V buffers (the V copy overlaps S = Q Kᵀ, the next K copy overlaps P V), so that two blocks
   share an SM: 3-11% faster than 128 x 64 at head dim 256, slower at 192 on long non-causal rows.
   Head dims up to 64 take 128-key tiles (7-9% faster than 128 x 64). */
#define FA2_FWD_SINGLE(hd, c) ((c) || (hd) >= 256)
#define FA2_FWD_TILE_M(hd, c) (FA2_FWD_SINGLE(hd, c) ? 64 : 128)
#define FA2_FWD_TILE_N(hd, c) (!(c) && (hd) <= 64 ? 128 : 64)
#define FA2_FWD_WARPS(hd, c) ((hd) <= 128 || FA2_FWD_SINGLE(hd, c) ? 4 : 8)
#define FA2_FWD_KV_STAGES(hd, c) (FA2_FWD_SINGLE(hd, c) ? 1 : 2)
/* Q once, K and V in one or two stages. */
#define FA2_FWD_SMEM(hd, c)                                                                 \
  ((size_t)(FA2_FWD_TILE_M(hd, c) + 2 * FA2_FWD_KV_STAGES(hd, c) * FA2_FWD_TILE_N(hd, c)) * \
   FA2_TILE_LD(hd) * 2)

/* The backward's key tile; its query steps are 128 rows up to head dim 64, else 64. */
#define FA2_BWD_TILE_N(hd, c) (!(c) && (hd) <= 128 ? 128 : 64)
#define FA2_BWD_TILE_M(hd, c) (!(c) && (hd) <= 64 ? 128 : 64)
#define FA2_BWD_WARPS(hd, c) 8
/* Warps along the keys for Sᵀ (32 keys each) and for dK/dV (32 keys each where the head dim
   splits into 16-column multiples, else 16), along the queries for dQ (32 queries each where the
   head dim splits four ways into 16-column multiples and the step has 64 queries, else 16 or 32).
 */
#define FA2_BWD_S_WK(hd, c) (FA2_BWD_TILE_N(hd, c) / 32)
#define FA2_BWD_KV_WK(hd, c) (FA2_BWD_TILE_N(hd, c) == 128 ? 4 : ((hd) % 64 == 0 ? 2 : 4))
#define FA2_BWD_DQ_WQ(hd, c) (FA2_BWD_TILE_M(hd, c) == 64 && (hd) % 64 == 0 ? 2 : 4)
/* The backward computes a warp's Sᵀ/dPᵀ tile in parts of at most this many queries (at head dim
   64, 64-query parts would spill). */
#define FA2_BWD_S_PART_MAX 32

/* On sm_90 the dQ of a step is staged in shared memory ([BM][hd] fp32, 32-byte chunks rotated
   by the row) and added to the accumulator by one bulk reduction (TMA) instead of per-thread
   atomics, where the staging fits the 227 KB a block may use (wide tiles, head dims up to 192);
   otherwise by 16-byte vector reductions. */
#define FA2_BWD_DQ_BULK(hd, c) (!(c) && (hd) <= 192)
#define FA2_BWD_DQ_STAGE_SMEM(hd, c) \
  (FA2_BWD_DQ_BULK(hd, c) ? (size_t)FA2_BWD_TILE_M(hd, c) * (hd)*4 : (size_t)0)
/* Q and dO in two stages (the next step's copied during this one), or one in the compact tiles
   (copied between steps, as FlashAttention-2 does on an A100 at head dim 256). */
#define FA2_BWD_Q_STAGES(hd, c) ((c) ? 1 : 2)
/* K and V once; Q and dO in their stages; Pᵀ and dSᵀ staged; LSE and D of a query tile (two
   buffers each). The sm_90 dQ staging comes on top. */
#define FA2_BWD_SMEM(hd, c)                                                                    \
  ((size_t)(2 * FA2_BWD_TILE_N(hd, c) + 2 * FA2_BWD_Q_STAGES(hd, c) * FA2_BWD_TILE_M(hd, c)) * \
       FA2_TILE_LD(hd) * 2 +                                                                   \
   (size_t)2 * FA2_BWD_TILE_N(hd, c) * (FA2_BWD_TILE_M(hd, c) + 8) * 2 +                       \
   (size_t)4 * FA2_BWD_TILE_M(hd, c) * 4)
/* What the backward kernel asks for: the staging on top where the dQ layout is the bulk path's
   (CUDA_DQ_ROTATED). One expression for decide (fa2_host.c) and the launcher (fa2_fwd_inst.cu). */
#define FA2_BWD_SMEM_STAGED(hd, c, staged) \
  (FA2_BWD_SMEM(hd, c) + ((staged) ? FA2_BWD_DQ_STAGE_SMEM(hd, c) : (size_t)0))

/* The forward over sequences (fa2_fwd_splitkv.cuh): 64 query rows (4 warps of 16; with GQA
   packing, 64 / pack positions of each of pack query heads), keys in tiles of 64 up to head dim
   128 and 32 above, K and V in two stages. */
#define FA2_SPLITKV_TILE_M 64
#define FA2_SPLITKV_TILE_N(hd) ((hd) <= 128 ? 64 : 32)
#define FA2_SPLITKV_SMEM(hd) \
  ((size_t)(FA2_SPLITKV_TILE_M + 4 * FA2_SPLITKV_TILE_N(hd)) * FA2_TILE_LD(hd) * 2)

/* Its decoding kernel (fa2_fwd_decode.cuh): 16 query rows, key tiles of 64 (16 per warp) in as
   many cp.async stages as keep two blocks on an SM up to head dim 128 (three at 64); above 192,
   where two whole stages would leave one block an SM, K and V staged as halves in three tile
   buffers (fa2_fwd_decode.cuh's HALVES). */
#define FA2_DECODE_TILE_M 16
#define FA2_DECODE_TILE_N 64
#define FA2_DECODE_STAGES(hd) ((hd) <= 64 ? 4 : (hd) <= 128 ? 3 : 2)
#define FA2_DECODE_HALVES_HD(hd) ((hd) > 192)
#define FA2_DECODE_SMEM(hd)                                                                   \
  ((size_t)(FA2_DECODE_TILE_M +                                                               \
            (FA2_DECODE_HALVES_HD(hd) ? 3 : 2 * FA2_DECODE_STAGES(hd)) * FA2_DECODE_TILE_N) * \
   FA2_TILE_LD(hd) * 2)

/* The bulk-copy form on sm_90 (fa2_fwd_decode_bulk.cuh): rows padded to hd + 8, each warp's 16 keys
   of K and of V as half-tiles in as many buffers a warp (at most 8) as fit 108 KiB with the Q
   tile, so that two blocks share an SM: 3 at head dim 256, 4 at 192, 6 at 128, 8 at 96 and below.
   Where it is the faster (H100, batch 8, 32k keys, bench/NOTES.md): above head dim 192 (MHA
   +2-9%), and over paged caches above 128 (+2-15% at 160-192, hd256 1.6x); at 128 and below the
   cp.async stages, paged too (3-6% faster than bulk copies over paged caches at 128, up to 1.5x
   at 64). */
#define FA2_DECODE_BULK_WANTED(cc_major, hd, paged) \
  ((cc_major) >= 9 && ((hd) > 192 || ((paged) && (hd) > 128)))
#define FA2_DECODE_BULK_FIT(hd) \
  ((110592 / (2 * ((hd) + 8)) - FA2_DECODE_TILE_M) / (4 * (FA2_DECODE_TILE_N / 4)))
#define FA2_DECODE_BULK_BUFS(hd) (FA2_DECODE_BULK_FIT(hd) > 8 ? 8 : FA2_DECODE_BULK_FIT(hd))
#define FA2_DECODE_BULK_SMEM(hd) \
  ((size_t)(FA2_DECODE_TILE_M + FA2_DECODE_BULK_BUFS(hd) * FA2_DECODE_TILE_N) * ((hd) + 8) * 2)

#endif /* FA_CUDA_FA2_TILES_H */
