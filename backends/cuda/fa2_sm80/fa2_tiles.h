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
 * 128 x 128 at head dim 64 fits 252 registers since v12 and is 7-9% faster than 128 x 64
 * (bench/NOTES.md, v15). The 64 x 64 single-buffer shape is 3-11% faster than 128 x 64 at head
 * dim 256 since v16's copies, but at 192 slower on long non-causal rows (v16).
 * Backward (key rows per block x query rows per step): 128 x 128 with 8 warps up to head dim 64
 * (each warp's Sᵀ tile in two parts of 32 queries), 128 x 64 up to head dim 128, 64 x 64 with 8
 * warps above, so dK and dV stay in registers.
 */
#ifndef FA_CUDA_FA2_TILES_H
#define FA_CUDA_FA2_TILES_H

#define FA2_HD_GRANULE 32
#define FA2_MAX_HEAD_DIM 256
#define FA2_PAD_HD(d) ((((d) + FA2_HD_GRANULE - 1) / FA2_HD_GRANULE) * FA2_HD_GRANULE)

/* Head dims from FA2_FWD_SINGLE_MIN_HD on take 64 x 64 tiles with 4 warps and single K and V
   buffers (the V copy overlaps S = Q Kᵀ, the next K copy overlaps P V), so that two blocks share
   an SM (overridable for A/B builds). */
#ifndef FA2_FWD_SINGLE_MIN_HD
#define FA2_FWD_SINGLE_MIN_HD 256
#endif
#define FA2_FWD_SINGLE(hd) ((hd) >= FA2_FWD_SINGLE_MIN_HD)
#define FA2_FWD_TILE_M(hd) (FA2_FWD_SINGLE(hd) ? 64 : 128)
/* Head dims up to FA2_FWD_WIDE_N_MAX_HD take 128-key tiles (overridable for A/B builds). */
#ifndef FA2_FWD_WIDE_N_MAX_HD
#define FA2_FWD_WIDE_N_MAX_HD 64
#endif
#define FA2_FWD_TILE_N(hd) ((hd) <= FA2_FWD_WIDE_N_MAX_HD ? 128 : 64)
#define FA2_FWD_WARPS(hd) ((hd) <= 128 || FA2_FWD_SINGLE(hd) ? 4 : 8)
#define FA2_FWD_KV_STAGES(hd) (FA2_FWD_SINGLE(hd) ? 1 : 2)
/* Q once, K and V in one or two stages; rows padded by 8 elements against bank conflicts. */
#define FA2_FWD_SMEM(hd) \
  ((size_t)(FA2_FWD_TILE_M(hd) + 2 * FA2_FWD_KV_STAGES(hd) * FA2_FWD_TILE_N(hd)) * ((hd) + 8) * 2)

#define FA2_BWD_TILE_N(hd) ((hd) <= 128 ? 128 : 64)
#define FA2_BWD_TILE_M(hd) ((hd) <= 64 ? 128 : 64)
#define FA2_BWD_WARPS(hd) 8
/* Warps along the keys for Sᵀ (32 keys each) and for dK/dV (32 keys each where the head dim
   splits into 16-column multiples, else 16), along the queries for dQ (32 queries each where the
   head dim splits four ways into 16-column multiples and the step has 64 queries, else 16 or 32).
 */
#define FA2_BWD_S_WK(hd) (FA2_BWD_TILE_N(hd) / 32)
#define FA2_BWD_KV_WK(hd) (FA2_BWD_TILE_N(hd) == 128 ? 4 : ((hd) % 64 == 0 ? 2 : 4))
#define FA2_BWD_DQ_WQ(hd) (FA2_BWD_TILE_M(hd) == 64 && (hd) % 64 == 0 ? 2 : 4)
/* On sm_90 the dQ of a step is staged in shared memory ([BM][hd] fp32, 32-byte chunks rotated
   by the row) and added to the accumulator by one bulk reduction (TMA) instead of per-thread
   atomics, where the staging fits the 227 KB a block may use (head dims up to 192); above, by
   16-byte vector reductions. FA2_BWD_DQ_BULK_MAX_HD lowers the limit for A/B measurements (a
   build with -DFA2_BWD_DQ_BULK_MAX_HD=32 runs head dim 64 with vector reductions). */
#ifndef FA2_BWD_DQ_BULK_MAX_HD
#define FA2_BWD_DQ_BULK_MAX_HD 192
#endif
#define FA2_BWD_DQ_BULK(hd) ((hd) <= FA2_BWD_DQ_BULK_MAX_HD)
#define FA2_BWD_DQ_STAGE_SMEM(hd) \
  (FA2_BWD_DQ_BULK(hd) ? (size_t)FA2_BWD_TILE_M(hd) * (hd)*4 : (size_t)0)
/* K and V once; Q and dO double-buffered; Pᵀ and dSᵀ staged; LSE and D of a query tile
   (two buffers each). */
#define FA2_BWD_SMEM(hd)                                                        \
  ((size_t)(2 * FA2_BWD_TILE_N(hd) + 4 * FA2_BWD_TILE_M(hd)) * ((hd) + 8) * 2 + \
   (size_t)2 * FA2_BWD_TILE_N(hd) * (FA2_BWD_TILE_M(hd) + 8) * 2 +              \
   (size_t)4 * FA2_BWD_TILE_M(hd) * 4)

#endif /* FA_CUDA_FA2_TILES_H */
