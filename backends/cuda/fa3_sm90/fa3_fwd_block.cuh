/*
 * fa3_fwd_block.cuh: a FlashAttention-3 forward block's shape (fa3_fwd_traits, from a
 * configuration's template arguments: fa3_tile_size.h) and its shared memory as the roles see it
 * (fa3_fwd_smem: the tile buffers, the mbarriers between the producer, the consumers and the
 * store thread, the published tile records).
 */
#ifndef FA_CUDA_FA3_FWD_BLOCK_CUH
#define FA_CUDA_FA3_FWD_BLOCK_CUH

#include <stdint.h>

#include "fa3_args.h"
#include "fa3_fwd_scheduler.cuh"

template <int HD, int WGS, int BN, int FLAGS>
struct fa3_fwd_traits {
  static constexpr int BM = 64 * WGS, CB = HD / 64; /* query rows; 64-column boxes */
  static constexpr bool PINNED = (FLAGS & FA3_PINNED_SOFTMAX) != 0;
  static constexpr bool TMA_EPI = (FLAGS & FA3_TMA_EPILOGUE) != 0;
  static constexpr bool DYNAMIC = (FLAGS & FA3_DYNAMIC_SCHEDULE) != 0;
  static constexpr bool IN_KV = (FLAGS & FA3_EPILOGUE_IN_KV_STAGE) != 0;
  static constexpr int STAGES = FA3_FWD_STAGES_OF(FLAGS); /* K/V ring */
  static constexpr bool LPT = DYNAMIC;                    /* largest first within L2-sized chunks */
  static constexpr int BOXQ = BM * 128, BOXK = BN * 128;  /* bytes of one 64-column box */
  static constexpr int NC = 128 * WGS;                    /* consumer threads */
  static constexpr int QB = (FLAGS & FA3_TWO_Q_BUFFERS) ? 2 : 1; /* Q buffers */
  /* MMA_ROW_SUM: P V's accumulator has 8 columns past V's, whose B operand is a box of ones */
  static constexpr bool ROW_SUM = (FLAGS & FA3_MMA_ROW_SUM) != 0;
  static constexpr int NP = HD + (ROW_SUM ? 8 : 0);
  static constexpr bool SPLIT_MAX = (FLAGS & FA3_SPLIT_ROW_MAX) != 0;
  static constexpr bool OWN_END = (FLAGS & FA3_OWN_KEY_END) != 0;
  static constexpr bool SHORT_FIRST = (FLAGS & FA3_SHORT_BLOCK_FIRST) != 0;
  static constexpr bool SEQS = (FLAGS & FA3_SEQS) != 0;
  static_assert(!IN_KV || (TMA_EPI && WGS == 2 && BN >= 64),
                "EPILOGUE_IN_KV_STAGE: two consumers' 64 x HD outputs in a K and a V stage, stored "
                "by TMA");
  static_assert(!SHORT_FIRST || (TMA_EPI && !IN_KV && WGS == 3),
                "SHORT_BLOCK_FIRST: O stored by slab from the Q buffer; the short block's other "
                "consumers idle");
  static_assert(!OWN_END || TMA_EPI, "OWN_KEY_END: q_info still the tile's after its loop");
  static_assert(!SEQS || (TMA_EPI && DYNAMIC && !SHORT_FIRST),
                "SEQS: the tile record read from q_info in the epilogue (no tile index to compute "
                "it from), the sequences' order its own");
  static_assert(!ROW_SUM || (CB == 1 && !PINNED),
                "MMA_ROW_SUM: V in one 64-column box (the descriptor's second box is the ones); "
                "PINNED_SOFTMAX pins on the softmax's row sums");
};

/* Registers per thread of the producer and of each consumer warpgroup (setmaxnreg). Their sum
   must fit in what the launch gave the block (65536 / threads per thread, in units of 8: 168 x
   384 with two consumers, 128 x 512 with three), or setmaxnreg's increase waits forever. Three
   consumers: 32 / 160. Two: 40 / 232 under the dynamic schedule (its producer spills at 24); the
   static deal's 24 / 240 (at 40 / 232, with the same main-loop SASS, hd128 without a mask was
   3-4% slower; the 12-28 bytes the producer spills are outside the consumers' loop). */
template <int WGS, bool DYNAMIC>
struct fa3_regs {
  static constexpr int producer = WGS == 3 ? 32 : DYNAMIC ? 40 : 24;
  static constexpr int consumer = WGS == 3 ? 160 : DYNAMIC ? 232 : 240;
  static constexpr int at_launch = 65536 / (128 * (WGS + 1)) / 8 * 8;
  static_assert(producer * 128 + consumer * 128 * WGS <= at_launch * 128 * (WGS + 1),
                "register file");
};

/* The block's shared memory. Q buffer b at q + b CB BOXQ; K and V stage s at k + s CB BOXK,
   v + s CB BOXK. Each Q buffer use u publishes its tile in slot u % 2: q_tile (the tile count or
   more: none is left, the roles stop) and q_info (its record), completed by its q_full; a tile
   without keys takes a use too, with no Q loaded. q_own (OWN_KEY_END): each consumer's copy of
   the record, its n_end its own. */
struct fa3_fwd_smem {
  unsigned char *q, *k, *v;
  uint64_t *q_full, *q_empty, *k_full, *v_full, *k_empty, *v_empty;
  /* TMA_EPILOGUE: Q buffer b's output stored (its smem read by TMA): the buffer may take a new
     Q. EPILOGUE_IN_KV_STAGE: slot s's tile stored (o_free[s]) after its output was written
     (o_ready[s]). */
  uint64_t *o_free, *o_ready;
  int *q_tile;
  fa3_tile *q_info, *q_own;
};

/* A consumer thread's place: consumer c (rows m0 + 64 c + [0, 64) of each tile), its lane, its
   index t in the lane's quad, its first row within the tile (rl; its second is rl + 8), and the
   softmax scale in log2 units (sl2). */
struct fa3_consumer {
  int c, lane, t, rl;
  float sl2;
};

#endif /* FA_CUDA_FA3_FWD_BLOCK_CUH */
