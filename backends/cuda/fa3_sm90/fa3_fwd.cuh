/*
 * fa3_fwd.cuh: the FlashAttention-3 forward kernel (Hopper, sm_90a).
 *
 * One block per tile (64 x WGS query rows of one query head and batch; with GQA packing, rows of
 * 2^pack_log2 query heads sharing a K/V head), or with FA3_PERSISTENT at most one per SM looping
 * over tiles (fa3_tile_index; with FA3_DYNAMIC the producer takes each next tile from a global
 * counter). The producer hands each tile, its coordinates and the final "none left" to the
 * consumers through shared memory with the tile's Q. WGS + 1 warpgroups:
 *
 * The producer (warpgroup 0, one thread; registers given back with setmaxnreg) loads a tile's Q,
 * then K and V tiles of BN keys by TMA (4-D tensor maps: head dim, row, head, batch; rows and
 * columns past the tensor read as zeros) into a two-stage ring. K and V of a stage complete on
 * their own mbarriers ("full") and are released separately ("empty"): K once Q Kᵀ has read it, V
 * once P V has, so the next K streams in while P V still runs.
 *
 * WGS consumers (64 query rows each; registers taken with setmaxnreg): S = Q Kᵀ by wgmma from
 * shared memory, online softmax in registers (core/ mask and softmax rules, exp2 with log2-scaled
 * scores), O += P V by wgmma with P from registers, where the S accumulator's layout is the A
 * operand's; at the end O / l and the LSE, stored from registers or (FA3_OSTORE) written into the
 * tile's Q buffer for a second producer thread to store by TMA.
 *
 * FLAGS (fa3_args.h): FA3_OVERLAP issues Q Kᵀ of tile j + 1 with P V of tile j and runs the
 * softmax of j + 1 under P V (in the machine code only with FA3_PINNED: otherwise ptxas waits for
 * P V first); FA3_PINGPONG makes the consumers take turns issuing their MMAs (named barrier 1 + c
 * waits for consumer c's turn), so one's softmax runs under the others' MMAs.
 * HD is the padded head dim (64, 128, 256); the real one (a.p.head_dim, 96 or 192 as well) bounds
 * the stores: the columns past it are zeros read by TMA in Q, K and V.
 */
#ifndef FA_CUDA_FA3_FWD_CUH
#define FA_CUDA_FA3_FWD_CUH

#include <math.h>

#include "../common/ptx.cuh"
#include "../common/sm90_async.cuh"
#include "../fa2_sm80/fa2_common.cuh"
#include "core/math/mask.h"
#include "fa3_schedule.h"
#include "core/math/softmax.h"
#include "fa3_args.h"

/* Registers per thread of the producer and of each consumer warpgroup (setmaxnreg). Their sum
   must fit in what the launch gave the block (65536 / threads per thread, in units of 8: 168 x
   384 with two consumers, 128 x 512 with three), or setmaxnreg's increase waits forever. Three
   consumers: 32 / 160. Two: 40 / 232 under the dynamic schedule (its producer spilled at 24);
   the static ones keep 24 / 240: at 40 / 232, same main-loop SASS, hd128 without a mask lost 3-4%
   at 4k-16k keys (bench/NOTES.md, session 13), and the 12-28 bytes their producer spills (the
   loads, outside the consumers' loop) measured no cost. */
template <int WGS, bool DYNAMIC>
struct fa3_regs {
  static constexpr int producer = WGS == 3 ? 32 : DYNAMIC ? 40 : 24;
  static constexpr int consumer = WGS == 3 ? 160 : DYNAMIC ? 232 : 240;
  static constexpr int at_launch = 65536 / (128 * (WGS + 1)) / 8 * 8;
  static_assert(producer * 128 + consumer * 128 * WGS <= at_launch * 128 * (WGS + 1),
                "register file");
};

/* S = Q Kᵀ of one consumer: k-step ks is 16 columns, 32 bytes into 64-column box ks / 4. One
   descriptor per operand from an opaque base, stepped by adding the k-step's offset to its
   start-address field (16-byte units; no carry: shared addresses are below 256 KiB). Built per
   k-step from addresses, the compiler hoisted all 2 x HD / 16 descriptors out of the loop into
   registers, which spilled once the tile loop held more state. */
template <int HD, int BN, int BOXQ, int BOXK, bool F16>
__device__ __forceinline__ void fa3_issue_s(float (&s)[BN / 2], const unsigned char *q,
                                            const unsigned char *k) {
  const uint64_t dq = wgmma_desc_sw128_at(smem_addr_opaque(q), 16, 1024);
  const uint64_t dk = wgmma_desc_sw128_at(smem_addr_opaque(k), 16, 1024);
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int qoff = (ks / 4) * BOXQ + (ks % 4) * 32, koff = (ks / 4) * BOXK + (ks % 4) * 32;
    wgmma_n<BN>::template ss<0, F16>(s, dq + (qoff >> 4), dk + (koff >> 4), ks > 0);
  }
}

/* O += P V (O = P V for a tile's first key tile, add 0: its first k-step does not read O, so O
   needs no clearing between tiles): V MN-major, k-step kk is 16 keys (2048 bytes) on; 64-column
   boxes lbo bytes apart (V's own, BOXK; with ROWSUM, NP = HD + 8 and the second box is the box of
   ones, whatever its distance from this stage). */
template <int NP, int BN, bool F16>
__device__ __forceinline__ void fa3_issue_pv(float (&o)[NP / 2], const uint32_t (&pa)[BN / 16][4],
                                             const unsigned char *v, uint32_t lbo, int add) {
  const uint64_t dv = wgmma_desc_sw128_at(smem_addr_opaque(v), lbo, 1024);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
    wgmma_n<NP>::template rs<1, F16>(o, pa[kk], dv + (kk * 2048 >> 4), kk > 0 || add);
}

/* A consumer's running softmax state for its thread's two rows (8 apart). */
struct fa3_rows {
  int lo[2], hi[2]; /* each row's key range under the mask */
  float max[2], sum[2];
};

/* The mask of a partial tile (keys c0..c0 + BN): a score whose key lies outside its row's range
   [lo, hi) becomes -inf. Element 4 j + i is key c0 + 8 j + 2 t + i % 2 of row i / 2, so for each
   i the kept j form one run [jlo, jhi): a bit mask per i, made once per tile, then one bit test
   and one select per score. Comparing each key with both bounds took two compares a score (128
   a thread per partial tile, 5% of the instructions at head dim 64 under a causal mask at 1k:
   bench/NOTES.md, session 19). */
template <int BN>
__device__ __forceinline__ void fa3_mask_partial(float (&s)[BN / 2], const fa3_rows &r, int c0,
                                                 int t) {
  static_assert(BN / 8 < 32, "one bit per key group of a row in a 32-bit mask");
  uint32_t keep[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int first = c0 + 2 * t + (i & 1), w = i >> 1;
    /* j kept iff lo <= first + 8 j < hi: jlo = ceil((lo - first) / 8), jhi = ceil((hi - first)
       / 8), both clamped to [0, BN / 8] */
    const int jlo = (min(max(r.lo[w] - first, 0), BN) + 7) >> 3;
    const int jhi = (min(max(r.hi[w] - first, 0), BN) + 7) >> 3;
    keep[i] = ((1u << jhi) - 1u) & ~((1u << jlo) - 1u);
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (!((keep[i] >> j) & 1u)) s[4 * j + i] = -INFINITY;
}

/* Mask and online softmax of one tile of scores (keys c0..c0 + BN), in place: s becomes P; alpha
   gets each row's rescale factor for O (the caller applies it once P V of the previous tile no
   longer reads O). (FlashAttention-4's conditional rescaling and partial exp2 emulation were
   tried here and measured no gain: bench/NOTES.md, commit ce7b292.) SUM: the row sums kept here
   (without it P V's ones columns form them). SPLITMAX: the second row's max made to depend on an
   early exp of the first (an FFMA adding 0 times it), so that ptxas cannot hoist it above the first
   row's exps: its FMNMX chain then runs in the issue gaps of the first row's MUFU block instead of
   before it, where the XU pipe idles. */
template <int BN, bool SUM, bool SPLITMAX>
__device__ __forceinline__ void fa3_softmax(float (&s)[BN / 2], fa3_rows &r, fa_tile_class cls,
                                            int c0, int t, float sl2, float (&alpha)[2]) {
  if (cls != FA_TILE_FULL) {
    fa3_mask_partial<BN>(s, r, c0, t);
  }
  /* Per row: a row's pieces sit in the 4 threads of a quad. */
  float early = 0.0f; /* SPLITMAX: an exp of row 0 */
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float mx = r.max[w];
    if (SPLITMAX && w == 1) mx = fmaf(early, 0.0f, mx); /* early is finite: mx unchanged */
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * w], s[4 * j + 2 * w + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float ms = fa_softmax_safe_max(mx) * sl2;
    alpha[w] = r.max[w] == -INFINITY ? 0.0f : fast_exp2(r.max[w] * sl2 - ms);
    r.max[w] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = fast_exp2(s[4 * j + 2 * w + e] * sl2 - ms);
        s[4 * j + 2 * w + e] = pe;
        if (SUM) sum += pe;
        if (SPLITMAX && w == 0 && j == 1 && e == 0) early = pe;
      }
    if (SUM) r.sum[w] = r.sum[w] * alpha[w] + sum;
  }
}

template <int NP>
__device__ __forceinline__ void fa3_rescale(float (&o)[NP / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < NP / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[4 * j + i] *= alpha[i >> 1];
}

/* P as the A operand: the accumulator of keys 16 kk.. is kk's A fragment. */
template <typename Tr, int BN>
__device__ __forceinline__ void fa3_pack_p(const float (&s)[BN / 2], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) pa[kk][i] = Tr::pack(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

/* One tile of the grid's work: query block m0.. (rows_per_head positions) of query heads h ..
   h + 2^pack_log2 - 1 (GQA packing: heads of one K/V head, the tile's rows head-major), K/V head
   hk, batch b, and the key tiles n_begin..n_end that hold keys for any of its rows; m_end: the
   end of its rows (per packed head), seqlen_q at most. part (TAILSPLIT): -1, or the tail tile
   (counted from the first) of which this is one block's piece of key tiles. */
struct fa3_tile {
  int m0, m_end, h, hk, b, n_begin, n_end, part;
};
/* The grid's tiles: (query heads / pack) x batch head groups, each of ceil(seqlen_q / rows per
   head) query blocks. */
template <int BM>
__device__ __forceinline__ void fa3_grid_of(const fa3_fwd_args &A, int &hb_count, int &total) {
  const int rows = BM >> A.pack_log2;
  hb_count = (A.a.p.heads_q >> A.pack_log2) * A.a.p.batch;
  total = (A.a.p.seqlen_q + rows - 1) / rows * hb_count;
}
template <int BM, int BN, bool LPT, bool LEADRAG>
__device__ __forceinline__ void fa3_tile_of(int k, int total, int hb_count, const fa3_fwd_args &A,
                                            fa3_tile &ti) {
  const fa2_problem &p = A.a.p;
  const fa_mask mask = fa2_mask_of(p); /* from the parameter space: no registers kept */
  const int num_m = total / hb_count, rows = BM >> A.pack_log2;
  const int groups = p.heads_q >> A.pack_log2;
  int hb, m_idx;
  if (LPT) { /* chunks of (head, batch) pairs, the remainder first; largest first in each */
    fa_sched_lpt_tile(k, num_m, hb_count, A.chunk, &m_idx, &hb);
  } else {
    hb = k / num_m;
    m_idx = k % num_m;
  }
  fa_sched_query_block(m_idx, num_m, p.seqlen_q, rows, 64, LEADRAG && A.pack_log2 == 0, &ti.m0,
                       &ti.m_end);
  ti.h = (hb % groups) << A.pack_log2;
  ti.b = hb / groups;
  ti.hk = ti.h / (p.heads_q / p.heads_kv);
  int64_t lo, hi;
  fa_mask_key_range(&mask, ti.m0, p.seqlen_k, &lo, &hi);
  const int lo_first = (int)lo; /* key indices fit int: seqlen_k is one */
  fa_mask_key_range(&mask, ti.m_end - 1, p.seqlen_k, &lo, &hi);
  const int hi_last = (int)hi;
  ti.n_begin = lo_first / BN;
  ti.n_end = hi_last > lo_first ? (hi_last + BN - 1) / BN : ti.n_begin;
  ti.part = -1;
}

/* TAILSKIP: the end of consumer c's key tiles in tile ti: past the last key its 64 rows see
   (each row's end grows with the row), at least one tile (rows that see no key take the masked
   path and write zeros). The whole tile where its rows are packed heads or all past the tile's
   (the idle consumer releases its stages itself), or where the tile has no key tile. */
template <int BN>
__device__ __forceinline__ int fa3_own_end(const fa3_fwd_args &A, const fa3_tile &ti, int c) {
  const fa2_problem &p = A.a.p;
  const int first = ti.m0 + 64 * c;
  if (A.pack_log2 != 0 || first >= ti.m_end || ti.n_end == ti.n_begin) return ti.n_end;
  const fa_mask mask = fa2_mask_of(p);
  int64_t lo, hi;
  fa_mask_key_range(&mask, min(first + 63, ti.m_end - 1), p.seqlen_k, &lo, &hi);
  return max(min((int)((hi + BN - 1) / BN), ti.n_end), ti.n_begin + 1);
}

/* A tile row's query head (offset from the tile's first) and position (offset from m0): the rows
   are rows_per_head positions of each packed head in turn. */
template <int BM>
__device__ __forceinline__ void fa3_row_of(const fa3_fwd_args &A, int rr, int &head, int &pos) {
  if (A.pack_log2 == 0) {
    head = 0;
    pos = rr;
  } else {
    const int rows = BM >> A.pack_log2;
    head = rr / rows;
    pos = rr - head * rows;
  }
}

/* The block's j-th tile under the static deal: round j of gridDim.x tiles, in block order. */
__device__ __forceinline__ int fa3_tile_index(int j) {
  return j * (int)gridDim.x + (int)blockIdx.x;
}

/* The TMA store of a tile's output (its coordinates tf) from its Q buffer buf (64-column boxes
   of BOXQ bytes, as the Q load wrote them), waiting until TMA has read the buffer so that a later
   Q may be loaded there. by_slab (LEADRAG without packing: O's box is 64 rows): the slabs that
   hold the tile's rows, each a store, so that a short first block writes none of the next
   block's rows; else one box, the whole tile. */
__device__ __forceinline__ void fa3_store_o(const fa3_fwd_args &A, const fa3_tile &tf,
                                            const unsigned char *buf, int boxq, bool by_slab) {
  const int slabs = by_slab ? (tf.m_end - tf.m0 + 63) / 64 : 1;
  for (int sb = 0; sb < slabs; ++sb)
    for (int cb = 0; cb * 64 < A.a.p.head_dim; ++cb)
      tma_store_4d(A.to, buf + cb * boxq + sb * 64 * 128, cb * 64, tf.m0 + 64 * sb, tf.h, tf.b);
  bulk_commit();
  bulk_wait_read<0>();
}

/* OSTAGE: the TMA store of a tile's output from the two consumers' regions (64 rows each, in
   64-column boxes of 64 x 128 bytes; the O tensor map's box is 64 rows of a query head, or of
   several packed ones). Consumer 1's rows start 64 rows into the tile: at that position of the
   first head, or (rows per head <= 64) at a later head. */
__device__ __forceinline__ void fa3_store_o_staged(const fa3_fwd_args &A, const fa3_tile &tf,
                                                   const unsigned char *c0, const unsigned char *c1,
                                                   int rows) {
  for (int c = 0; c < 2; ++c) {
    const unsigned char *region = c ? c1 : c0;
    const int head = (64 * c) / rows, pos = (64 * c) % rows;
    for (int cb = 0; cb * 64 < A.a.p.head_dim; ++cb)
      tma_store_4d(A.to, region + cb * 64 * 128, cb * 64, tf.m0 + pos, tf.h + head, tf.b);
  }
  bulk_commit();
  bulk_wait_read<0>();
}

/* A tile's end for this thread's row w (of two): the row's sum of P, from the ones columns of
   P V (ROWSUM) or the quad's four partial sums, and its LSE in natural log from the row max
   (__log2f: one MUFU.LG2, abs. error ~2^-22, where logf took ~25 instructions a row). */
template <int NP, bool ROWSUM>
__device__ __forceinline__ float fa3_row_sum(const float (&o)[NP / 2], const float (&sum)[2],
                                             int w) {
  if constexpr (ROWSUM) return o[(NP - 8) / 2 + 2 * w];
  float l = sum[w];
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  return l + __shfl_xor_sync(0xffffffffu, l, 2);
}
__device__ __forceinline__ float fa3_row_lse(float mx, float l, float sl2) {
  return l > 0.0f ? (mx * sl2 + __log2f(l)) * FA2_LN2 : -INFINITY;
}

/* TAILSPLIT: the end of a block's piece of tail tile tf.part (some of its key tiles). Each
   consumer thread writes its rows' normalised O (fp32, every padded column) and LSE into the
   piece's slot, tf.part + blockIdx.x: the tail's segments in order of tile and block, so the sum
   is unique to the segment (both grow by one from segment to segment, or by two where a piece
   and a tile start together). The consumers then count the piece in (the tile's counter, after
   a fence); the block whose piece completes the tile merges every piece of it in block order
   (core/math/softmax.h fa_softmax_merge_lse: the same result whatever the order of arrival) and
   stores O and the LSE. The host splits only where every piece holds a key tile, so the
   tile's pieces are those of blocks first..last, the owners of its first and last key tiles.
   All NC consumer threads take part (named barrier 7). */
template <typename Tr, int HD, int NP, int BM, int NC, bool ROWSUM>
__device__ __forceinline__ void fa3_finish_part(const fa3_fwd_args &A, const fa3_tile &tf,
                                                const float (&o)[NP / 2], const float (&sum)[2],
                                                const float (&mx)[2], int rl, int t, bool leader,
                                                float sl2, int *is_last) {
  const fa2_fwd_args &a = A.a;
  const int nkt = A.tail_nkt, grid = (int)gridDim.x;
  const int64_t slot = tf.part + (int)blockIdx.x;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const float l = fa3_row_sum<NP, ROWSUM>(o, sum, w), inv = fa_softmax_out_scale(l);
    const int r = rl + 8 * w;
    float *row = A.part_o + (slot * BM + r) * HD + 2 * t;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      *reinterpret_cast<float2 *>(row + 8 * j) =
          make_float2(o[4 * j + 2 * w] * inv, o[4 * j + 2 * w + 1] * inv);
    if (t == 0) A.part_lse[slot * BM + r] = fa3_row_lse(mx[w], l, sl2);
  }
  __threadfence();
  bar_sync(7, NC);
  const int first = fa_sched_tail_owner((int64_t)tf.part * nkt, grid, A.tail, nkt);
  const int last = fa_sched_tail_owner((int64_t)tf.part * nkt + nkt - 1, grid, A.tail, nkt);
  if (leader) *is_last = atomicAdd(&A.part_count[tf.part], 1) == last - first;
  bar_sync(7, NC);
  if (!*is_last) return;
  __threadfence();
  typedef typename Tr::elem E;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const int r = rl + 8 * w;
    float acc[HD / 4], lse = -INFINITY;
#pragma unroll
    for (int i = 0; i < HD / 4; ++i) acc[i] = 0.0f;
    for (int bb = first; bb <= last; ++bb) {
      const int64_t sl = tf.part + bb;
      float w1, w2;
      lse = fa_softmax_merge_lse(lse, __ldcg(A.part_lse + sl * BM + r), &w1, &w2);
      const float *src = A.part_o + (sl * BM + r) * HD + 2 * t;
#pragma unroll
      for (int j = 0; j < HD / 8; ++j) {
        const float2 v = __ldcg(reinterpret_cast<const float2 *>(src + 8 * j));
        acc[2 * j] = w1 * acc[2 * j] + w2 * v.x;
        acc[2 * j + 1] = w1 * acc[2 * j + 1] + w2 * v.y;
      }
    }
    int head, pos;
    fa3_row_of<BM>(A, r, head, pos);
    const int i = tf.m0 + pos;
    if (i >= a.p.seqlen_q) continue;
    E *out = static_cast<E *>(a.out) + tf.b * a.o_str.batch + (tf.h + head) * a.o_str.head +
             (int64_t)i * a.o_str.row;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
      if (8 * j < a.p.head_dim)
        *reinterpret_cast<uint32_t *>(out + 8 * j + 2 * t) = Tr::pack(acc[2 * j], acc[2 * j + 1]);
    if (a.lse && t == 0)
      a.lse[tf.b * a.lse_str.batch + (tf.h + head) * a.lse_str.head + (int64_t)i * a.lse_str.row] =
          lse;
  }
}

template <typename Tr, int HD, int WGS, int BN, int FLAGS>
__global__ void __launch_bounds__(128 * (WGS + 1), 1)
    fa3_fwd_kernel(const __grid_constant__ fa3_fwd_args A) {
  constexpr int BM = 64 * WGS, CB = HD / 64; /* 64-column boxes */
  constexpr bool F16 = Tr::is_f16;
  /* The one-tile-at-a-time loop (no overlap) was measured (bench/NOTES.md) and removed. */
  static_assert(FLAGS & FA3_OVERLAP, "every configuration overlaps S and P V");
  constexpr bool PINGPONG = (FLAGS & FA3_PINGPONG) != 0, PINNED = (FLAGS & FA3_PINNED) != 0;
  constexpr bool OSTORE = (FLAGS & FA3_OSTORE) != 0, DYNAMIC = (FLAGS & FA3_DYNAMIC) != 0;
  constexpr bool OSTAGE = (FLAGS & FA3_OSTAGE) != 0;
  constexpr int STAGES = FA3_FWD_STAGES_OF(FLAGS); /* K/V ring */
  /* STAGGER: consumer 1 starts a tile after consumer 0's first softmax of it (after its second
     measured the same: bench/NOTES.md, session 18). */
  constexpr bool STAGGER = (FLAGS & FA3_STAGGER) != 0;
  static_assert(!STAGGER || (WGS == 2 && !PINGPONG), "STAGGER: two consumers, no turns");
  static_assert(!OSTAGE || (OSTORE && WGS == 2 && BN >= 64),
                "OSTAGE: two consumers' 64 x HD outputs in a K and a V stage, stored by TMA");
  constexpr bool LPT = DYNAMIC; /* largest first within L2-sized chunks (core/schedule.h) */
  constexpr int BOXQ = BM * 128, BOXK = BN * 128;   /* bytes of one 64-column box */
  constexpr int NC = 128 * WGS;                     /* consumer threads */
  constexpr int QB = (FLAGS & FA3_QDOUBLE) ? 2 : 1; /* Q buffers */
  /* ROWSUM: P V's accumulator has 8 columns past V's, whose B operand is a box of ones */
  constexpr bool ROWSUM = (FLAGS & FA3_ROWSUM) != 0;
  constexpr int NP = HD + (ROWSUM ? 8 : 0);
  constexpr bool SPLITMAX = (FLAGS & FA3_SPLITMAX) != 0;
  constexpr bool TAILSKIP = (FLAGS & FA3_TAILSKIP) != 0;
  constexpr bool LEADRAG = (FLAGS & FA3_LEADRAG) != 0;
  constexpr bool SPLIT = (FLAGS & FA3_TAILSPLIT) != 0;
  static_assert(!SPLIT || (OSTORE && !OSTAGE && !DYNAMIC && !TAILSKIP),
                "TAILSPLIT: the static deal's last round cut by keys; a piece's output bypasses "
                "the Q buffer's TMA store");
  static_assert(!LEADRAG || (OSTORE && !OSTAGE && WGS == 3),
                "LEADRAG: O stored by slab from the Q buffer; the short block's other consumers "
                "idle");
  static_assert(!TAILSKIP || OSTORE, "TAILSKIP: q_info still the tile's after its loop (OSTORE)");
  static_assert(!ROWSUM || (CB == 1 && !PINNED),
                "ROWSUM: V in one 64-column box (the descriptor's second box is the ones); "
                "PINNED pins on the softmax's row sums");
  const fa2_fwd_args &a = A.a;

  extern __shared__ unsigned char smem_raw[];
  /* The 128-byte swizzle repeats every 1024 bytes: boxes start on such a boundary. */
  unsigned char *sQ = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  unsigned char *sK =
      sQ + QB * CB * BOXQ; /* Q buffer b at b * CB * BOXQ; K stage s at s * CB * BOXK */
  unsigned char *sV = sK + STAGES * CB * BOXK;
  unsigned char *sOnes = sV + STAGES * CB * BOXK; /* ROWSUM: BN rows of 128 bytes */
  __shared__ uint64_t q_full[2], q_empty[2], k_full[STAGES], v_full[STAGES];
  __shared__ uint64_t k_empty[STAGES], v_empty[STAGES];
  /* OSTORE: Q buffer b's output stored (its smem read by TMA): the buffer may take a new Q.
     OSTAGE: slot s's tile stored (o_free[s]) after its output was written (o_ready[s]). */
  __shared__ uint64_t o_free[2], o_ready[2];
  /* PINNED: one slot per consumer thread, never read; each stores its row sums there once its
     softmax is done, which keeps ptxas from moving the wait for the previous P V above the
     softmax (pin_after). */
  __shared__ float pin_slot[PINNED ? 128 * WGS : 1];
  /* The tile of Q buffer use u, in slot u % 2, for the consumers (published by the completion of
     its Q buffer's q_full; total or more: no tile is left, they stop) and for the store thread.
     A tile without keys takes a use too, with no Q loaded. */
  __shared__ int q_tile[2];
  /* The coordinates of q_tile[b] (valid when it is below the tile count), published with it, so
     that the consumers do not compute them (integer divisions) at the start and end of every
     tile. */
  __shared__ fa3_tile q_info[2];
  /* TAILSKIP: each consumer's copy of q_info, its n_end its own (fa3_own_end) */
  __shared__ fa3_tile q_own[TAILSKIP ? 2 * WGS : 1];
  __shared__ int part_last; /* TAILSPLIT: whether this block's piece completed its tile */

  /* The warpgroup by a shuffle from lane 0, so that ptxas keeps what derives from it in uniform
     registers (fa3_bwd.cuh; bench/NOTES.md session 29). */
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int seqlen_q = a.p.seqlen_q, seqlen_k = a.p.seqlen_k;
  /* The grid's tiles (after each role's setmaxnreg: values live across it cost registers). */
  int hb_count, total;

  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(&q_full[b], 1);
      mbar_init(&q_empty[b], NC);
      mbar_init(&o_free[b], 1);
      mbar_init(&o_ready[b], NC);
    }
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], NC); /* every consumer thread releases */
      mbar_init(&v_empty[s], NC);
    }
    mbar_init_fence();
  }
  if (ROWSUM) { /* written by the generic proxy, read by wgmma's (async) proxy */
    const uint32_t ones = F16 ? 0x3C003C00u : 0x3F803F80u;
    for (int i = threadIdx.x; i < BN * 128 / 16; i += blockDim.x)
      reinterpret_cast<uint4 *>(sOnes)[i] = make_uint4(ones, ones, ones, ones);
    fence_proxy_async_smem();
  }
  __syncthreads();

  /* The block's tiles: blockIdx.x, then gridDim.x on (a grid smaller than the tile count makes the
     kernel persistent: the producer loads the next tile's Q, K and V during this tile's last
     P V and epilogue). Tile k is query block num_m - 1 - k % num_m (largest first: under a causal
     mask they hold the most key tiles) of (head, batch) k / num_m: blocks running together share
     a head's K and V in L2 (ordered by head first, 132 heads' K/V at once missed L2 and cost
     8-15%). The consumers learn each tile, one without keys included, from the producer
     (q_tile, q_info); the producer's last use of a Q buffer says that none is left. */
  fa3_tile ti;
  if (wg == 0) {
    setmaxnreg_dec<fa3_regs<WGS, DYNAMIC>::producer>();
    fa3_grid_of<BM>(A, hb_count, total);
    if (tid == 0) {
      int kv = 0, qn = 0; /* K/V tiles loaded so far, Q buffer uses */
      int j = 0, k = (int)blockIdx.x;
      /* The block's next tile: from the counter (DYNAMIC) or the static deal's next round. */
      auto next_tile = [&]() {
        return DYNAMIC ? (int)gridDim.x + atomicAdd(A.tile_counter, 1) : fa3_tile_index(++j);
      };
      /* TAILSPLIT: the rounds below `whole` dealt whole, then this block's piece of the last
         round's key tiles (units u..u_end, core/schedule.h), one segment per tail tile it
         touches, each published as a tile with its key range (part: the tail tile, or -1 where
         the piece holds the whole tile). A.tail is 0 where the host does not split. */
      const int whole = SPLIT ? total - A.tail : total;
      int u = 0, u_end = 0;
      if (SPLIT)
        fa_sched_tail_piece((int)blockIdx.x, (int)gridDim.x, A.tail, A.tail_nkt, &u, &u_end);
      for (;;) {
        int seg_begin = 0, seg_end = 0, part = -1;
        if (SPLIT && k >= whole) {
          if (u < u_end) {
            const int tt = u / A.tail_nkt;
            seg_begin = u - tt * A.tail_nkt;
            seg_end = min(A.tail_nkt, seg_begin + (u_end - u));
            part = seg_end - seg_begin == A.tail_nkt ? -1 : tt;
            u += seg_end - seg_begin;
            k = whole + tt;
          } else {
            k = total;
          }
        }
        const bool done = k >= total;
        bool empty = true;
        if (!done) {
          fa3_tile_of<BM, BN, LPT, LEADRAG>(k, total, hb_count, A, ti);
          if (SPLIT && k >= whole) { /* unmasked: the tile's key tiles are 0..tail_nkt */
            ti.n_end = ti.n_begin + seg_end;
            ti.n_begin += seg_begin;
            ti.part = part;
          }
          empty = ti.n_end == ti.n_begin;
        }
        const int qb = qn % QB, quse = qn / QB, slot = qn & 1;
        if (OSTAGE) {
          /* the slot's last tile stored; the Q buffer's last tile past its last Q Kᵀ */
          if (qn >= 2) mbar_wait(&o_free[slot], ((qn >> 1) - 1) & 1);
          if (quse > 0) mbar_wait(&q_empty[qb], (quse - 1) & 1);
        } else if (quse > 0) { /* the buffer's last tile done with it (OSTORE: its O stored) */
          mbar_wait(OSTORE ? &o_free[qb] : &q_empty[qb], (quse - 1) & 1);
        }
        ++qn;
        q_tile[slot] = k;
        if (!done) q_info[slot] = ti;
        if (TAILSKIP && !done)
          for (int cc = 0; cc < WGS; ++cc) {
            q_own[slot * WGS + cc] = ti;
            q_own[slot * WGS + cc].n_end = fa3_own_end<BN>(A, ti, cc);
          }
        if (empty) { /* tell the consumers (no Q), then take the next tile */
          mbar_arrive(&q_full[qb]);
          if (done) break;
          k = next_tile();
          continue;
        }
        mbar_arrive_expect_tx(&q_full[qb], CB * BOXQ);
        for (int cb = 0; cb < CB; ++cb)
          tma_load_4d(sQ + (qb * CB + cb) * BOXQ, A.tq, &q_full[qb], cb * 64, ti.m0, ti.h, ti.b);
        for (int n = ti.n_begin; n < ti.n_end; ++n, ++kv) {
          const int st = kv % STAGES, use = kv / STAGES;
          /* TAILSKIP: the consumers whose key tiles end before n release this use of the
             stage here (its previous use is complete, so the arrivals count toward this one) */
          int skip = 0;
          if (TAILSKIP && !(OSTAGE && n + 1 == ti.n_end)) /* OSTAGE: the store thread's */
            for (int cc = 0; cc < WGS; ++cc) skip += n >= q_own[slot * WGS + cc].n_end;
          if (use > 0) mbar_wait(&k_empty[st], (use - 1) & 1);
          mbar_arrive_expect_tx(&k_full[st], CB * BOXK);
          for (int cb = 0; cb < CB; ++cb)
            tma_load_4d(sK + (st * CB + cb) * BOXK, A.tk, &k_full[st], cb * 64, n * BN, ti.hk,
                        ti.b);
          if (skip) mbar_arrive_n(&k_empty[st], 128 * skip);
          if (use > 0) mbar_wait(&v_empty[st], (use - 1) & 1);
          mbar_arrive_expect_tx(&v_full[st], CB * BOXK);
          for (int cb = 0; cb < CB; ++cb)
            tma_load_4d(sV + (st * CB + cb) * BOXK, A.tv, &v_full[st], cb * 64, n * BN, ti.hk,
                        ti.b);
          if (skip) mbar_arrive_n(&v_empty[st], 128 * skip);
        }
        k = next_tile();
      }
    } else if (OSTAGE && tid == 32) {
      /* The output store (OSTAGE): each tile in turn once the consumers have written its O into
         its last K/V stage (o_ready), then that stage handed back to the loads on behalf of the
         consumers (they did not release it) and the slot to the producer (o_free). */
      const int rows = BM >> A.pack_log2;
      for (int u = 0, kvs = 0;; ++u) {
        const int sl = u & 1;
        mbar_wait_sleepy(&o_ready[sl], (u >> 1) & 1, 1000000);
        if (q_tile[sl] >= total) break;
        const fa3_tile tf = q_info[sl];
        if (tf.n_end != tf.n_begin) {
          kvs += tf.n_end - tf.n_begin;
          const int ls = (kvs - 1) % STAGES;
          fa3_store_o_staged(A, tf, sK + ls * CB * BOXK, sV + ls * CB * BOXK, rows);
          mbar_arrive_n(&k_empty[ls], NC);
          mbar_arrive_n(&v_empty[ls], NC);
        }
        mbar_arrive(&o_free[sl]);
      }
      bulk_wait<0>();
    } else if (OSTORE && tid == 32) {
      /* The output store, in a thread (warp) of its own so that waiting for TMA to read a Q
         buffer never holds up the loads: each Q buffer use in turn, once the consumers release
         it, its tile's O stored (none for a tile without keys), then the buffer handed back to
         the loads (o_free). The use that says no tile is left ends it. (When the loading thread
         stored them, its wait for the store's read delayed the next tile's Q at 1k keys.) */
      for (int u = 0;; ++u) {
        const int b = u % QB;
        mbar_wait_sleepy(&q_full[b], (u / QB) & 1, 1000000);
        if (q_tile[u & 1] >= total) break;
        const fa3_tile tf = q_info[u & 1];
        mbar_wait_sleepy(&q_empty[b], (u / QB) & 1, 1000000);
        if (tf.n_end != tf.n_begin && tf.part < 0) /* a piece's output is not in the buffer */
          fa3_store_o(A, tf, sQ + b * CB * BOXQ, BOXQ, LEADRAG && A.pack_log2 == 0);
        mbar_arrive(&o_free[b]);
      }
      bulk_wait<0>();
    }
    return;
  }
  setmaxnreg_inc<fa3_regs<WGS, DYNAMIC>::consumer>();
  fa3_grid_of<BM>(A, hb_count, total);

  /* Consumer c: rows m0 + 64 c + [0, 64) of each tile; this thread's two rows (8 apart). */
  const int c = wg - 1, ctid = tid - 128 * wg, warp = ctid / 32, lane = ctid % 32;
  const int t = lane % 4, rl = 64 * c + 16 * warp + lane / 4; /* first row within the tile */
  const float sl2 = a.p.scale * FA2_LOG2E;
  /* Ping-pong: wait for this consumer's turn to issue MMAs; pass the turn on after issuing. The
     last consumer passes the first turn to consumer 0 (before its own first turn), and consumer
     0 takes one more turn at the very end (the last consumer's final pass), so that every
     barrier completes as often as it is waited for. */
  auto turn_wait = [&]() {
    if (PINGPONG) bar_sync(1 + c, 256);
  };
  auto turn_pass = [&]() {
    if (PINGPONG) bar_arrive(1 + (c + 1) % WGS, 256);
  };
  bool turned = false;
  int kv = 0, qn = 0; /* as the producer counts */
  typedef typename Tr::elem E;
  const int hd = a.p.head_dim;

  /* The output of tile kt: O / l and the LSE in natural log (sum, mx: the rows' running sum and
     max). Straight from the accumulators to global memory (4-byte stores of the real head dim's
     columns), or (OSTORE) into Q buffer qbuf in Q's swizzled layout for the store thread's TMA
     store, or (OSTAGE) into this consumer's region of K/V stage ls (64-row boxes). The tile's
     coordinates are read again from q_info (OSTORE: slot `slot` is still this tile's) or
     computed again from an opaque copy of kt, rather than kept in registers through the main
     loop (at head dim 256 that spilled). */
  auto finish = [&](int kt, const float(&o)[NP / 2], const float(&sum)[2], const float(&mx)[2],
                    int qbuf, int slot, int ls) {
    fa3_tile tf;
    if (OSTORE) { /* still published: the slot is handed back after the store */
      tf = q_info[slot];
      if (SPLIT && tf.part >= 0) { /* a piece of a tail tile: merged through global memory */
        fa3_finish_part<Tr, HD, NP, BM, NC, ROWSUM>(A, tf, o, sum, mx, rl, t, c == 0 && ctid == 0,
                                                    sl2, &part_last);
        mbar_arrive(&q_empty[qbuf]);
        return;
      }
    } else {
      int k_again = kt;
      asm volatile("" : "+r"(k_again));
      fa3_tile_of<BM, BN, LPT, LEADRAG>(k_again, total, hb_count, A, tf);
    }
    /* OSTAGE: consumer 0 writes into the K stage once consumer 1's last Q Kᵀ has read it
       (named barrier 3), consumer 1 into the V stage once consumer 0's last P V has (4). */
    if (OSTAGE) bar_sync(3 + c, 256);
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const float l = fa3_row_sum<NP, ROWSUM>(o, sum, w), inv = fa_softmax_out_scale(l);
      int head, pos;
      fa3_row_of<BM>(A, rl + 8 * w, head, pos);
      const int i = tf.m0 + pos;
      E *out = static_cast<E *>(a.out) + tf.b * a.o_str.batch + (tf.h + head) * a.o_str.head;
      if (OSTORE) {
        /* Row rl + 8 w of each 64-column box (OSTAGE: row rl - 64 c of this consumer's boxes of
           64 rows); 16-byte chunk j % 8 swizzled by the row's position in its 8-row atom, lane /
           4 (rows past seqlen_q are not stored by TMA). */
        unsigned char *row =
            OSTAGE ? (c == 0 ? sK : sV) + ls * CB * BOXK + (rl - 64 * c + 8 * w) * 128 + 4 * t
                   : sQ + qbuf * CB * BOXQ + (rl + 8 * w) * 128 + 4 * t;
        constexpr int box = OSTAGE ? 64 * 128 : BOXQ;
#pragma unroll
        for (int j = 0; j < HD / 8; ++j)
          *reinterpret_cast<uint32_t *>(row + (j / 8) * box + (((j % 8) ^ (lane / 4)) * 16)) =
              Tr::pack(o[4 * j + 2 * w] * inv, o[4 * j + 2 * w + 1] * inv);
      } else if (i < seqlen_q) {
#pragma unroll
        for (int j = 0; j < HD / 8; ++j)
          if (8 * j < hd)
            *reinterpret_cast<uint32_t *>(out + (int64_t)i * a.o_str.row + 8 * j + 2 * t) =
                Tr::pack(o[4 * j + 2 * w] * inv, o[4 * j + 2 * w + 1] * inv);
      }
      if (a.lse && t == 0 && i < seqlen_q)
        a.lse[tf.b * a.lse_str.batch + (tf.h + head) * a.lse_str.head +
              (int64_t)i * a.lse_str.row] = fa3_row_lse(mx[w], l, sl2);
    }
    if (OSTORE) {
      fence_proxy_async_smem();
      mbar_arrive(OSTAGE ? &o_ready[slot] : &q_empty[qbuf]);
    }
  };
  /* A tile whose rows see no key (no Q loaded): zeros and an LSE of -inf, straight to memory. */
  auto finish_empty = [&](int slot) {
    const fa3_tile tf = q_info[slot]; /* released after this */
    for (int w = 0; w < 2; ++w) {
      int head, pos;
      fa3_row_of<BM>(A, rl + 8 * w, head, pos);
      const int i = tf.m0 + pos;
      if (i >= tf.m_end) continue; /* LEADRAG: a short first block's */
      E *out = static_cast<E *>(a.out) + tf.b * a.o_str.batch + (tf.h + head) * a.o_str.head;
      for (int col = 2 * t; col < hd; col += 8)
        *reinterpret_cast<uint32_t *>(out + (int64_t)i * a.o_str.row + col) = 0u;
      if (a.lse && t == 0)
        a.lse[tf.b * a.lse_str.batch + (tf.h + head) * a.lse_str.head +
              (int64_t)i * a.lse_str.row] = -INFINITY;
    }
  };

  float o[NP / 2], s[BN / 2], alpha[2];
  uint32_t pa[BN / 16][4];
  /* P V's leading-byte offset: V's next box, or (ROWSUM) the box of ones after the stages */
  auto pv_lbo = [&](int stage) -> uint32_t {
    return ROWSUM ? (uint32_t)((STAGES - stage) * BOXK) : (uint32_t)BOXK;
  };
#pragma unroll
  for (int i = 0; i < NP / 2; ++i) o[i] = 0.0f; /* never read (add 0): defined for the asm */
  for (;;) {
    const int qb = qn % QB, slot = qn & 1;
    mbar_wait(&q_full[qb], (qn / QB) & 1); /* the producer's next tile (its Q loaded) */
    const int k = q_tile[slot];
    if (k >= total) {
      if (OSTAGE) mbar_arrive(&o_ready[slot]); /* the store thread stops too */
      break;
    }
    /* TAILSKIP: this consumer's key tiles end at its own n_end; the producer releases the
       block's later ones for it, and it takes their turns after its last P V. The index goes
       through a shuffle so that ptxas sees it warp-uniform and keeps ti in uniform registers
       (indexed by c itself, the key loop spilled 48 bytes). */
    ti = TAILSKIP ? q_own[slot * WGS + __shfl_sync(0xffffffffu, c, 0)] : q_info[slot];
    if (ti.n_end == ti.n_begin) { /* it took a use of the Q buffer, with no Q */
      finish_empty(slot);
      mbar_arrive(&q_empty[qb]);
      if (OSTAGE) mbar_arrive(&o_ready[slot]);
      ++qn;
      continue;
    }
    fa3_rows r;
    const fa_mask mask = fa2_mask_of(a.p);
    for (int w = 0; w < 2; ++w) {
      int64_t lo, hi;
      int head, pos;
      fa3_row_of<BM>(A, rl + 8 * w, head, pos);
      fa_mask_key_range(&mask, ti.m0 + pos, seqlen_k, &lo, &hi);
      r.lo[w] = (int)lo;
      r.hi[w] = (int)hi;
      r.max[w] = -INFINITY;
      r.sum[w] = 0.0f;
    }
    /* Whether the key tile at c0 holds only keys both of this thread's rows see (their ranges
       end at seqlen_k at most): then no element needs the mask. */
    auto class_of = [&](int n) {
      return n * BN >= max(r.lo[0], r.lo[1]) && n * BN + BN <= min(r.hi[0], r.hi[1])
                 ? FA_TILE_FULL
                 : FA_TILE_PARTIAL;
    };

    if (PINGPONG && !turned && c == WGS - 1) bar_arrive(1, 256);
    turned = true;
    /* A consumer whose 64 rows all lie past the tile's (the rest of the short query block: at head
       dim 64, 1k rows are 5 1/3 blocks of 192) computes nothing: it takes its turns and
       releases each stage in step with the others (every release after the stage's load, so
       that no arrival counts toward an earlier phase) and writes no output (TMA clips those
       rows). Decided at the tile's start, with no wgmma in flight, and broadcast so that ptxas
       sees it warp-uniform. Three consumers only (so never with OSTAGE): hd64 under a mask at
       2k-4k keys +3% (the last block of 2k is 128 rows of 192), without one at 1k -1%; with
       two, where it rarely applies, its mere presence cost 2.5% at hd64 causal 1k
       (bench/NOTES.md, session 17). */
    int idle = 0;
    if (WGS == 3)
      idle = __shfl_sync(0xffffffffu, A.pack_log2 == 0 && ti.m0 + 64 * c >= ti.m_end, 0);
    if (idle) {
      for (int n = ti.n_begin; n < ti.n_end; ++n, ++kv) {
        const int st = kv % STAGES;
        turn_wait();
        mbar_wait(&k_full[st], (kv / STAGES) & 1);
        turn_pass();
        mbar_arrive(&k_empty[st]);
        if (n > ti.n_begin) {
          const int ps = (kv - 1) % STAGES;
          mbar_wait(&v_full[ps], ((kv - 1) / STAGES) & 1);
          mbar_arrive(&v_empty[ps]);
        }
      }
      const int ls = (kv - 1) % STAGES;
      turn_wait();
      mbar_wait(&v_full[ls], ((kv - 1) / STAGES) & 1);
      turn_pass();
      mbar_arrive(&v_empty[ls]);
      if (SPLIT && ti.part >= 0) { /* fa3_finish_part's two barriers; no rows to write */
        bar_sync(7, NC);
        bar_sync(7, NC);
      }
      mbar_arrive(&q_empty[qb]); /* once, as the others (after the loop, or with OSTORE's O) */
      ++qn;
      continue;
    }
    const unsigned char *q = sQ + qb * CB * BOXQ + c * 64 * 128;
    /* STAGGER: consumer 1 starts once consumer 0 has done the softmax of the tile's first key
       tile; named barrier 5 or 6 by the parity of the Q buffer use, so that consumer 0 never
       arrives twice on one before consumer 1 has waited (it cannot be two uses ahead: the Q
       buffer of use u + 2 waits for consumer 1's release of use u). */
    if (STAGGER && c == 1) bar_sync(5 + (qn & 1), 256);
    /* Key tile n_begin: S and its softmax alone. */
    int st = kv % STAGES;
    turn_wait();
    mbar_wait(&k_full[st], (kv / STAGES) & 1);
    wgmma_fence();
    fa3_issue_s<HD, BN, BOXQ, BOXK, F16>(s, q, sK + st * CB * BOXK);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(s);
    /* OSTAGE: the tile's last K stage is released by the store thread (O is written there) */
    if (!OSTAGE || ti.n_begin + 1 < ti.n_end) mbar_arrive(&k_empty[st]);
    fa3_softmax<BN, !ROWSUM, SPLITMAX>(s, r, class_of(ti.n_begin), ti.n_begin * BN, t, sl2, alpha);
    if (STAGGER && c == 0) bar_arrive(5 + (qn & 1), 256);
    fa3_pack_p<Tr, BN>(s, pa);
    ++kv;
    /* Then per key tile: S of this tile and P V of the previous one issued together. */
    for (int n = ti.n_begin + 1; n < ti.n_end; ++n, ++kv) {
      const int ps = (kv - 1) % STAGES;
      st = kv % STAGES;
      turn_wait();
      mbar_wait(&k_full[st], (kv / STAGES) & 1);
      mbar_wait(&v_full[ps], ((kv - 1) / STAGES) & 1);
      wgmma_fence();
      fa3_issue_s<HD, BN, BOXQ, BOXK, F16>(s, q, sK + st * CB * BOXK);
      wgmma_commit();
      fa3_issue_pv<NP, BN, F16>(o, pa, sV + ps * CB * BOXK, pv_lbo(ps), n > ti.n_begin + 1);
      wgmma_commit();
      turn_pass();
      wgmma_wait<1>();
      wgmma_fence_regs(s);
      if (!OSTAGE || n + 1 < ti.n_end) mbar_arrive(&k_empty[st]);
      fa3_softmax<BN, !ROWSUM, SPLITMAX>(s, r, class_of(n), n * BN, t, sl2, alpha);
      if (PINNED) pin_after(&pin_slot[tid - 128], r.sum[0] + r.sum[1]);
      wgmma_wait<0>();
      wgmma_fence_regs(o);
      wgmma_fence_frags(pa);
      mbar_arrive(&v_empty[ps]);
      fa3_rescale<NP>(o, alpha);
      fa3_pack_p<Tr, BN>(s, pa);
    }
    /* Every S of the tile has been read: Q may be replaced (OSTORE: once O is in its place;
       OSTAGE: now, and consumer 1 tells consumer 0 that the K stage is free for its O). */
    if (!OSTORE || OSTAGE) mbar_arrive(&q_empty[qb]);
    if (OSTAGE && c == 1) bar_arrive(3, 256);
    /* Then P V of the last key tile, alone; the output. */
    const int ls = (kv - 1) % STAGES;
    turn_wait();
    mbar_wait(&v_full[ls], ((kv - 1) / STAGES) & 1);
    wgmma_fence();
    fa3_issue_pv<NP, BN, F16>(o, pa, sV + ls * CB * BOXK, pv_lbo(ls), ti.n_end - ti.n_begin > 1);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    wgmma_fence_frags(pa);
    if (!OSTAGE) mbar_arrive(&v_empty[ls]);
    int os = ls;    /* OSTAGE: the stage of the block's last key tile, where O goes */
    if (TAILSKIP) { /* the block's key tiles past this consumer's (q_info read again: no
                       register holds the block's end through the loop) */
      const int end = q_info[slot].n_end;
      /* OSTAGE: this consumer's last stage is not the one the store thread releases */
      if (OSTAGE && ti.n_end < end) {
        mbar_arrive(&k_empty[ls]);
        mbar_arrive(&v_empty[ls]);
      }
      for (; ti.n_end < end; ++ti.n_end, ++kv) {
        turn_wait();
        turn_pass();
      }
      os = (kv - 1) % STAGES;
    }
    if (OSTAGE && c == 0) bar_arrive(4, 256); /* the V stage is free for consumer 1's O */
    finish(k, o, r.sum, r.max, qb, slot, os);
    ++qn;
  }
  if (PINGPONG && c == 0 && turned) turn_wait();
}

#endif /* FA_CUDA_FA3_FWD_CUH */
