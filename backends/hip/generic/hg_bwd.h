/*
 * hg_bwd.h: the generic backward (FlashAttention-2 structure, no matrix instructions), three
 * kernels:
 *   hg_bwd_dot      D = rowsum(dO∘O) per query row (core/math/backward.h's D), into the workspace;
 *   hg_bwd_main     a block owns BN keys of one KV head and keeps their dK and dV in
 *                   registers; it walks every query head of its group and the query rows that
 *                   core/math/mask.h says see its keys, in steps of BM rows through shared
 *                   memory, recomputing P from the saved LSE (exp2), dS = P∘(dP − D), and adds
 *                   scale·dS·K into the fp32 dQ accumulator by atomics;
 *   hg_bwd_convert  the accumulator into dq's storage type and strides.
 * With several key tiles per block (the grid's x smaller than the key tiles: deterministic mode,
 * one block per KV head) the block visits its tiles in order and every dQ element of a step is
 * added by one thread, so the sums come out in one order on every run.
 * MFMA = 1 (cdna/hg_mfma.h): the five products run on CDNA's matrix instructions instead: Sᵀ and
 * dPᵀ into fp32 tiles in shared memory for the same per-element step, whose Pᵀ and dSᵀ (in the
 * storage type, as FlashAttention rounds them for its products) go back through shared memory
 * to dV, dK (in the waves' registers, in place of dk[] and dv[]) and dQ (cdna/hg_mfma_bwd.h).
 */
#ifndef FA_HIP_HG_BWD_H
#define FA_HIP_HG_BWD_H

#include "backends/hip/cdna/hg_mfma_bwd.h"
#include "backends/hip/generic/hg_common.h"

/* One thread per query row: grid (ceil(seqlen_q / HG_THREADS), heads_q, batch). */
template <int BF16>
FA_GPU_DEVICE void hg_bwd_dot(const hg_params &p) {
  const int b = fa_gpu_block_z(), h = fa_gpu_block_y();
  const int64_t i = (int64_t)fa_gpu_block_x() * HG_THREADS + fa_gpu_tid();
  if (i >= p.seqlen_q) return;
  float acc = 0.0f;
  for (int c = 0; c < p.head_dim; ++c)
    acc += hg_get<BF16>(p.dout, b, i, h, c) * hg_get<BF16>(p.out, b, i, h, c);
  p.dsum[((int64_t)b * p.heads_q + h) * p.seqlen_q + i] = acc;
}

/* One thread per element of a head's rows: grid (ceil(seqlen_q * head_dim / HG_THREADS),
   heads_q, batch). */
template <int BF16>
FA_GPU_DEVICE void hg_bwd_convert(const hg_params &p) {
  const int b = fa_gpu_block_z(), h = fa_gpu_block_y();
  const int64_t e = (int64_t)fa_gpu_block_x() * HG_THREADS + fa_gpu_tid();
  const int d = p.head_dim;
  if (e >= (int64_t)p.seqlen_q * d) return;
  const int64_t i = e / d;
  const int c = (int)(e - i * d);
  hg_put<BF16>(p.dq, b, i, h, c, p.dq_accum[((int64_t)b * p.heads_q + h) * p.seqlen_q * d + e]);
}

/* The generic products of a step for the thread (key row kr, sub): dV += Pᵀ·dO and dK += dSᵀ·Q
   (scaled at the end) for its key row, where query il's values live in lane il % TPR of the key
   row's group, slot il / TPR; then dQ += scale·dS·K from dS in shared memory, one thread per
   (row, column) of the step. */
template <int BF16, int HC, int BN, int BM>
FA_GPU_DEVICE void hg_bwd_products(float *dk, float *dv, const float *pv, const float *dsv,
                                   const uint16_t *sq, const uint16_t *sdo, const uint16_t *sk,
                                   const float *sds, const hg_params &p, int64_t head_rows,
                                   int64_t m0) {
  constexpr int TPR = HG_BWD_TPR(BN), CPT = HC / TPR;
  const int d = p.head_dim, tid = fa_gpu_tid(), sub = tid % TPR;
#pragma unroll
  for (int il = 0; il < BM; ++il) {
    const float pi = fa_gpu_shfl(pv[il / TPR], il % TPR, TPR);
    const float dsi = fa_gpu_shfl(dsv[il / TPR], il % TPR, TPR);
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
      const int c = sub + TPR * j;
      if (c < d) {
        dv[j] += pi * fa_gpu_load<BF16>(sdo + il * d + c);
        dk[j] += dsi * fa_gpu_load<BF16>(sq + il * d + c);
      }
    }
  }
  fa_gpu_barrier(); /* dS of the whole tile is in shared memory */
  for (int e = tid; e < BM * d; e += HG_THREADS) {
    const int il = e / d, c = e - il * d;
    const int64_t gi = m0 + il;
    if (gi >= p.seqlen_q) continue;
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < BN; ++r) acc += sds[r * BM + il] * fa_gpu_load<BF16>(sk + r * d + c);
    if (acc != 0.0f) fa_gpu_atomic_add(p.dq_accum + (head_rows + gi) * d + c, acc * p.scale);
  }
}

/* The generic store of key row gj's dK (scaled) and dV: the thread's columns sub, sub + TPR, ... */
template <int BF16, int HC, int BN>
FA_GPU_DEVICE void hg_bwd_store_kv(const float *dk, const float *dv, const hg_params &p, int b,
                                   int64_t gj, int hk, int sub) {
  constexpr int TPR = HG_BWD_TPR(BN), CPT = HC / TPR;
#pragma unroll
  for (int j = 0; j < CPT; ++j) {
    const int c = sub + TPR * j;
    if (c < p.head_dim) {
      hg_put<BF16>(p.dk, b, gj, hk, c, dk[j] * p.scale);
      hg_put<BF16>(p.dv, b, gj, hk, c, dv[j]);
    }
  }
}

/* grid (key tiles or fewer, heads_kv, batch). BN x BM: one of the class's tiles (hg_args.h). */
template <int BF16, int HC, int MFMA, int BN, int BM>
FA_GPU_DEVICE void hg_bwd_main(const hg_params &p) {
  constexpr int TPR = HG_BWD_TPR(BN);
  static_assert(BM % TPR == 0, "every lane of a key row holds the same number of query rows");
  constexpr int QPT = BM / TPR; /* query rows per thread and step */
  constexpr int CPT = HC / TPR; /* dK/dV columns per thread: sub, sub + TPR, ... */
  FA_GPU_DYNAMIC_SMEM(smem);
  const int d = p.head_dim;
  uint16_t *sk = (uint16_t *)smem;
  uint16_t *sv = sk + BN * d;
  uint16_t *sq = sv + BN * d;
  uint16_t *sdo = sq + BM * d;
  float *sds = (float *)(sdo + BM * d);          /* [BN][BM] dS of the step (MFMA: Sᵀ) */
  float *slse = sds + BN * BM;                   /* the step's LSE in log2 units, +inf: P = 0 */
  float *sdsum = slse + BM;                      /* the step's D */
  float *sdpt = sdsum + BM;                      /* MFMA only: [BN][BM] dPᵀ */
  uint16_t *sp16 = (uint16_t *)(sdpt + BN * BM); /* MFMA only: [BN][BM] Pᵀ (16-bit) */
  uint16_t *sds16 = sp16 + BN * BM;              /* MFMA only: [BN][BM] dSᵀ (16-bit) */
  static_assert(!MFMA || CPT == HG_MFMA_ACC_REGS(BN, HC), "dk[], dv[] hold the MFMA tiles");
  const int tid = fa_gpu_tid(), kr = tid / TPR, sub = tid % TPR;
  const int b = fa_gpu_block_z(), hk = fa_gpu_block_y();
  const int group = p.heads_q / p.heads_kv;
  const fa_mask m = hg_mask(p);
  const int n_tiles = (p.seqlen_k + BN - 1) / BN;

  for (int kt = fa_gpu_block_x(); kt < n_tiles; kt += fa_gpu_grid_x()) {
    const int64_t c0 = (int64_t)kt * BN;
    const int64_t c1 = c0 + BN < p.seqlen_k ? c0 + BN : (int64_t)p.seqlen_k;
    const int64_t gj = c0 + kr;
    fa_gpu_barrier(); /* the previous tile's readers are done */
    hg_load_tile<BF16>(sk, p.k, b, c0, BN, p.seqlen_k, hk, d);
    hg_load_tile<BF16>(sv, p.v, b, c0, BN, p.seqlen_k, hk, d);
    float dk[CPT], dv[CPT];
#pragma unroll
    for (int j = 0; j < CPT; ++j) dk[j] = dv[j] = 0.0f;
    int64_t rbeg, rend; /* the query rows that see a key of this tile */
    fa_mask_row_range(&m, c0, c1, p.seqlen_q, &rbeg, &rend);

    for (int hq = hk * group; hq < (hk + 1) * group; ++hq) {
      const int64_t head_rows = ((int64_t)b * p.heads_q + hq) * p.seqlen_q;
      for (int64_t m0 = rbeg / BM * BM; m0 < rend; m0 += BM) {
        fa_gpu_barrier(); /* the previous step's readers are done */
        hg_load_tile<BF16>(sq, p.q, b, m0, BM, p.seqlen_q, hq, d);
        hg_load_tile<BF16>(sdo, p.dout, b, m0, BM, p.seqlen_q, hq, d);
        for (int r = tid; r < BM; r += HG_THREADS) {
          const int64_t gi = m0 + r;
          float l2 = INFINITY, dd = 0.0f;
          if (gi < p.seqlen_q) {
            const float lse =
                p.lse[(int64_t)b * p.lse_batch + (int64_t)hq * p.lse_head + gi * p.lse_row];
            l2 = lse == -INFINITY ? INFINITY : lse * HG_LOG2E; /* an empty row: P = 0 */
            dd = p.dsum[head_rows + gi];
          }
          slse[r] = l2;
          sdsum[r] = dd;
        }
        fa_gpu_barrier();
        if constexpr (MFMA) {
          hg_mfma_store<BF16, BN, BM>(sds, BM, sk, sq, hg_mm_abt(d, BM), 0);
          hg_mfma_store<BF16, BN, BM>(sdpt, BM, sv, sdo, hg_mm_abt(d, BM), HG_MI_WAVES(HG_MI) / 2);
          fa_gpu_barrier();
        }

        float pv[QPT], dsv[QPT];
#pragma unroll
        for (int t = 0; t < QPT; ++t) {
          const int il = sub + TPR * t;
          const int64_t gi = m0 + il;
          float pr = 0.0f, ds = 0.0f;
          if (gj < p.seqlen_k && gi < p.seqlen_q && fa_mask_allows(&m, gi, gj, p.seqlen_k)) {
            float s = 0.0f, dp = 0.0f;
            if constexpr (MFMA) {
              s = sds[kr * BM + il];
              dp = sdpt[kr * BM + il];
            } else {
              for (int c = 0; c < d; ++c) {
                s += fa_gpu_load<BF16>(sk + kr * d + c) * fa_gpu_load<BF16>(sq + il * d + c);
                dp += fa_gpu_load<BF16>(sv + kr * d + c) * fa_gpu_load<BF16>(sdo + il * d + c);
              }
            }
            const float z = fa_score_softcap(s * p.scale, p.softcap);
            pr = fa_gpu_exp2(z * HG_LOG2E - slse[il]);
            ds = fa_bwd_ds(pr, dp, sdsum[il]) * fa_score_softcap_grad(z, p.softcap);
          }
          pv[t] = pr;
          dsv[t] = ds;
          if constexpr (MFMA) {
            sp16[kr * BM + il] = fa_gpu_to_storage<BF16>(pr);
            sds16[kr * BM + il] = fa_gpu_to_storage<BF16>(ds);
          } else {
            sds[kr * BM + il] = ds;
          }
        }
        if constexpr (MFMA) {
          fa_gpu_barrier(); /* Pᵀ and dSᵀ of the whole tile are in shared memory */
          hg_bwd_mfma_products<BF16, HC, BN, BM>(dk, dv, sp16, sds16, sq, sdo, sk, p, head_rows,
                                                 m0);
        } else {
          hg_bwd_products<BF16, HC, BN, BM>(dk, dv, pv, dsv, sq, sdo, sk, sds, p, head_rows, m0);
        }
      }
    }
    if constexpr (MFMA)
      hg_bwd_mfma_store_kv<BF16, HC, BN>(dk, dv, p, b, c0, hk);
    else if (gj < p.seqlen_k)
      hg_bwd_store_kv<BF16, HC, BN>(dk, dv, p, b, gj, hk, sub);
  }
}

#endif /* FA_HIP_HG_BWD_H */
