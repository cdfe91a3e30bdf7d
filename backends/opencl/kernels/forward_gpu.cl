/*
 * forward_gpu.cl: the FlashAttention forward pass of the GPU kernel set for every head dim up to
 * 256 (FA_FWD == OCL_FWD_TILED; forward_gpu_pipelined.cl serves head dims up to 128 where it
 * applies: ocl_decide.c's fwd_kernel says when). A work-group owns 64 query rows (FA_BR) of one
 * head; K and V stream through local memory 64 keys at a time; each row keeps its running max and
 * sum (core/math/softmax.h) and writes its output row and LSE once; the mask and score transform
 * are core/math/mask.h's and core/math/score.h's. Work-groups: (query tiles, heads_q, batch).
 *
 * 128 work-items; work-item (tx, ty) = (lid % 8, lid / 8) computes a 4 x 8 block of the score tile
 * (rows 4ty..4ty+3, keys 4tx + {0..3, 32..35}) and a 4-row x (FA_DP / 8)-column block of the
 * output (columns 4tx + 32c + {0..3}): every value read from local memory feeds 4 or 8 fmas, and
 * the 8 work-items of a row (neighbours in a warp) read neighbouring float4s, so the inner loops
 * are fma-bound. Q and K go through local memory transposed, 32 head-dim columns at a time; the
 * probabilities through local memory transposed; V in chunks of keys. Row maxima are combined
 * through local memory each tile; row sums only at the end (each work-item's partial sum is
 * rescaled by the same factor as the row's).
 */
#if !FA_CPU && FA_FWD == 1
#define GF_WG 128
#define GF_DC 32                                     /* head-dim columns of Q and K per step */
#define GF_DP (((FA_D) + GF_DC - 1) / GF_DC * GF_DC) /* the head dim padded with zeros */
#define GF_S 68                                      /* row stride of the transposed tiles */
#define GF_AREA (2 * GF_DC * GF_S)                   /* floats of the Q/K (or V) area */
#define GF_VC (GF_AREA / GF_DP >= 64 ? 64 : (GF_AREA / GF_DP >= 32 ? 32 : 16)) /* V keys */
#define GF_NC (GF_DP / 32) /* float4 column groups per work-item */

__kernel __attribute__((reqd_work_group_size(GF_WG, 1, 1))) void fa_forward(
    __global const st_t *q, long8 qs, __global const st_t *k, long8 ks, __global const st_t *v,
    long8 vs, __global st_t *out, long8 os, __global float *lse, long4 ls, int has_lse,
    int seqlen_q, int seqlen_k, int heads_q, int heads_kv, float scale, float softcap,
    long mask_shift, long mask_left, long mask_right) {
  __local float area[GF_AREA]; /* Q^T [32][68] and K^T [32][68]; or V [GF_VC][GF_DP] */
  __local float pt[64 * GF_S]; /* P^T [key][row] */
  __local float red[8 * 64];   /* per-row partial maxima (then sums) of the 8 work-items */
  __local float *qt = area, *kt2 = area + GF_DC * GF_S;
  const int lid = get_local_id(0), tx = lid & 7, ty = lid >> 3;
  const long m0 = (long)get_group_id(0) * FA_BR;
  const int h = get_group_id(1), b = get_group_id(2);
  const int hk = h / (heads_q / heads_kv);

  const fa_mask mask = mask_of(mask_shift, mask_left, mask_right);
  long group_lo, group_hi;
  group_key_range(&mask, m0, seqlen_q, seqlen_k, &group_lo, &group_hi);
  long lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&mask, m0, seqlen_k, &lo_first, &hi_first);
  fa_mask_key_range(&mask, min(m0 + FA_BR, (long)seqlen_q) - 1, seqlen_k, &lo_last, &hi_last);
  int lo[4], hi[4];
  float m_run[4], l_run[4], o[4][4 * GF_NC];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long row = m0 + 4 * ty + i;
    long x = 0, y = 0;
    if (row < seqlen_q) fa_mask_key_range(&mask, row, seqlen_k, &x, &y);
    lo[i] = (int)x;
    hi[i] = (int)y;
    m_run[i] = -INFINITY;
    l_run[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4 * GF_NC; ++c) o[i][c] = 0.0f;
  }

  for (long c0 = (group_lo / 64) * 64; c0 < group_hi; c0 += 64) {
    const int n = (int)min(64L, seqlen_k - c0);
    const fa_tile_class cls =
        fa_mask_tile_class_from_ranges(lo_first, hi_first, lo_last, hi_last, c0, c0 + n);
    if (cls == FA_TILE_EMPTY) continue; /* the same for the whole work-group */
    float s[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 8; ++e) s[i][e] = 0.0f;
    for (int dc = 0; dc < GF_DP; dc += GF_DC) {
      barrier(CLK_LOCAL_MEM_FENCE);
      /* Work-item lid copies column dc + lid % 32 of rows lid / 32 + 4t: a warp reads 32
         neighbouring elements of a row. */
      {
        const int d = lid & 31, dd = dc + d;
        const long qo = qs.s0 + b * qs.s1 + h * qs.s3 + dd * qs.s4;
        const long ko = ks.s0 + b * ks.s1 + hk * ks.s3 + dd * ks.s4;
        for (int r = lid >> 5; r < 64; r += GF_WG / 32) {
          const long row = m0 + r, key = c0 + r;
          qt[d * GF_S + r] = row < seqlen_q && dd < FA_D ? st_load(q, qo + row * qs.s2) : 0.0f;
          kt2[d * GF_S + r] = key < seqlen_k && dd < FA_D ? st_load(k, ko + key * ks.s2) : 0.0f;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll 4
      for (int d = 0; d < GF_DC; ++d) {
        const float4 a = vload4(0, qt + d * GF_S + 4 * ty);
        const float4 k0 = vload4(0, kt2 + d * GF_S + 4 * tx);
        const float4 k1 = vload4(0, kt2 + d * GF_S + 4 * tx + 32);
        const float av[4] = {a.s0, a.s1, a.s2, a.s3};
        const float kv[8] = {k0.s0, k0.s1, k0.s2, k0.s3, k1.s0, k1.s1, k1.s2, k1.s3};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int e = 0; e < 8; ++e) s[i][e] = fma(av[i], kv[e], s[i][e]);
      }
    }
    /* Score transform and mask (keys past the last are masked too), then each row's maximum. */
    const int masked = cls != FA_TILE_FULL || n < 64;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int key = (int)c0 + 4 * tx + (e & 3) + 32 * (e >> 2);
        float z = fa_score_softcap(s[i][e] * scale, softcap);
        if (masked && (key < lo[i] || key >= hi[i])) z = -INFINITY;
        s[i][e] = z;
        mx = fmax(mx, z);
      }
      red[tx * 64 + 4 * ty + i] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int t = 0; t < 8; ++t) mx = fmax(mx, red[t * 64 + 4 * ty + i]);
      alpha[i] = fa_softmax_online_step(&m_run[i], &l_run[i], mx);
      const float ms = fa_softmax_safe_max(m_run[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float p = exp(s[i][e] - ms);
        l_run[i] += p;
        s[i][e] = p;
      }
#pragma unroll
      for (int c = 0; c < 4 * GF_NC; ++c) o[i][c] *= alpha[i];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int key = 4 * tx + (e & 3) + 32 * (e >> 2);
      vstore4((float4)(s[0][e], s[1][e], s[2][e], s[3][e]), 0, pt + key * GF_S + 4 * ty);
    }
    /* O += P V, GF_VC keys of V at a time. */
    for (int j0 = 0; j0 < 64; j0 += GF_VC) {
      barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
      for (int c = 0; c < GF_NC; ++c) {
        const int d = (lid & 31) + 32 * c;
        const long vo = vs.s0 + b * vs.s1 + hk * vs.s3 + d * vs.s4;
        for (int j = lid >> 5; j < GF_VC; j += GF_WG / 32) {
          const long key = c0 + j0 + j;
          area[j * GF_DP + d] = key < seqlen_k && d < FA_D ? st_load(v, vo + key * vs.s2) : 0.0f;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int j = 0; j < GF_VC; ++j) {
        const float4 p = vload4(0, pt + (j0 + j) * GF_S + 4 * ty);
        const float pv[4] = {p.s0, p.s1, p.s2, p.s3};
#pragma unroll
        for (int c = 0; c < GF_NC; ++c) {
          const float4 x = vload4(0, area + j * GF_DP + 4 * tx + 32 * c);
          const float xv[4] = {x.s0, x.s1, x.s2, x.s3};
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[i][4 * c + e] = fma(pv[i], xv[e], o[i][4 * c + e]);
        }
      }
    }
  }

  /* Row sums: the 8 partial sums of each row, added in a fixed order. */
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (int i = 0; i < 4; ++i) red[tx * 64 + 4 * ty + i] = l_run[i];
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long row = m0 + 4 * ty + i;
    float l = 0.0f;
#pragma unroll
    for (int t = 0; t < 8; ++t) l += red[t * 64 + 4 * ty + i];
    if (row >= seqlen_q) continue;
    const float inv = fa_softmax_out_scale(l);
#pragma unroll
    for (int c = 0; c < GF_NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = 4 * tx + 32 * c + e;
        if (d < FA_D) st_store(out, st_index(os, b, row, h, d), o[i][4 * c + e] * inv);
      }
    if (has_lse && tx == 0)
      lse[ls.s0 + b * ls.s1 + h * ls.s2 + row * ls.s3] = fa_softmax_lse(m_run[i], l);
  }
}

#endif /* !FA_CPU && FA_FWD == 1 */
