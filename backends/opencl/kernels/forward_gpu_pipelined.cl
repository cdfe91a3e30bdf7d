/*
 * forward_gpu_pipelined.cl: the GPU kernel set's forward pass for head dims up to 128 (FA_FWD 2
 * or 3; ocl_decide.c's fwd_kernel says when it runs, forward_gpu.cl serves the rest). The work
 * split and arithmetic are forward_gpu.cl's: 128 work-items over 64 query rows and 64-key tiles,
 * work-item (tx, ty) = (lid % 8, lid / 8) computing a 4 x 8 block of scores and a 4-row block of
 * the output from local memory, each score one fma chain in d order (rowmath.cl's rule). It adds:
 *
 *  - software pipelining: every chunk (32 head-dim columns of Q and K, or VC keys of V) is loaded
 *    from global memory into registers while the previous chunk is computed, then stored to local
 *    memory between two barriers, so the loads' latency is hidden behind the arithmetic;
 *  - 16-byte vector loads of 8 elements (bf16/f16 kept as raw bits in registers, widened when
 *    stored to local memory) with 32-bit offsets from a per-head base pointer, when the head dim
 *    is contiguous and 8-aligned (FA_FWD 2; else FA_FWD 3: element by element, 32-bit);
 *  - Q and K chunks row-major in local memory (stride 36: conflict-free float4 reads along d),
 *    each work-item's rows ty + 16i and keys tx + 8e, so a chunk is stored with two float4 writes
 *    per 8 elements instead of eight scalar transposed ones.
 *
 * Head dims up to 128: the Q/K area holds one 32-column chunk, the V area VC x (DP + 4) floats.
 */
#if !FA_CPU && FA_FWD >= 2

#define PL_VEC (FA_FWD == 2) /* 3: element by element */

#define PL_WG 128
#define PL_DC 32                                /* head-dim columns of Q and K per chunk */
#define PL_DP (((FA_D) + 31) / 32 * 32)         /* the head dim padded with zeros */
#define PL_QS (PL_DC + 4)                       /* row stride of the Q and K chunks */
#define PL_VS (PL_DP + 4)                       /* row stride of the V chunk */
#define PL_PS 68                                /* row stride of P^T */
#define PL_AREA (2 * 64 * PL_QS)                /* floats: Q and K chunks, or a V chunk */
#define PL_VC (PL_AREA / PL_VS >= 64 ? 64 : 32) /* keys of V per chunk */
#define PL_NC (PL_DP / 32)                      /* float4 column groups of the output */
#define PL_NQ (PL_DP / PL_DC)                   /* Q/K chunks per tile */
#define PL_NV (64 / PL_VC)                      /* V chunks per tile */
#define PL_VR (PL_DP / 8)                       /* 8-element groups per V row */
#define PL_VG (PL_VC * PL_VR / PL_WG)           /* V groups per work-item per chunk (<= 4) */

#if FA_DTYPE == 0
typedef float8 raw8;
#else
typedef uint4 raw8; /* 8 bf16 or f16 values as bits, element 2j in the low half of word j */
#endif

/* n (0..8) elements p[off + j * stride] as raw8, the rest zeros; with PL_VEC one 16- or 32-byte
   load (n is 8 or 0 then: the host checked the head dim and the alignment). A compile-time choice,
   so the element-wise path's registers are not live in the vector one. */
inline raw8 pl_load(__global const st_t *p, int off, int stride, int n) {
#if FA_DTYPE == 0 && PL_VEC
  return n ? *(__global const float8 *)(p + off) : (float8)0.0f;
#elif FA_DTYPE == 0
  float e[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) e[j] = j < n ? p[off + j * stride] : 0.0f;
  return (float8)(e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
#elif PL_VEC
  return n ? *(__global const uint4 *)(p + off) : (uint4)0u;
#else
  __global const ushort *u = (__global const ushort *)p;
  uint e[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) e[j] = j < n ? u[off + j * stride] : 0u;
  return (uint4)(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
#endif
}

/* The 8 values of a raw8 in float, stored at l[0..7] (16-byte aligned) as two float4 writes. The
   conversions are storage.cl's: bf16 bits shifted into a float's upper half, f16 by vload_half. */
inline void pl_store(__local float *l, raw8 w) {
#if FA_DTYPE == 0
  *(__local float4 *)l = w.lo;
  *(__local float4 *)(l + 4) = w.hi;
#elif FA_DTYPE == 1
  uint t[4] = {w.x, w.y, w.z, w.w};
  *(__local float4 *)l = vload_half4(0, (__private const half *)t);
  *(__local float4 *)(l + 4) = vload_half4(1, (__private const half *)t);
#else
  *(__local float4 *)l = (float4)(as_float(w.x << 16), as_float(w.x & 0xffff0000u),
                                  as_float(w.y << 16), as_float(w.y & 0xffff0000u));
  *(__local float4 *)(l + 4) = (float4)(as_float(w.z << 16), as_float(w.z & 0xffff0000u),
                                        as_float(w.w << 16), as_float(w.w & 0xffff0000u));
#endif
}

inline int pl_count(int d0) { return clamp((FA_D)-d0, 0, 8); }

/* Chunk qc of Q (rows m0..m0+63) and K (keys c0..c0+63): group g = lid + 128t of 256 per tensor
   is row g / 4, columns 32qc + 8(g % 4) + 0..7; a warp reads 8 rows x 64 contiguous bytes. */
inline void pl_load_qk(raw8 *buf, __global const st_t *qb, int qs2, int qs4,
                       __global const st_t *kb, int ks2, int ks4, int m0, int c0, int qc,
                       int seqlen_q, int seqlen_k, int lid) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int g = lid + PL_WG * t, r = g >> 2, d0 = PL_DC * qc + 8 * (g & 3);
    const int n = pl_count(d0);
    buf[t] = pl_load(qb, (m0 + r) * qs2 + d0 * qs4, qs4, m0 + r < seqlen_q ? n : 0);
    buf[2 + t] = pl_load(kb, (c0 + r) * ks2 + d0 * ks4, ks4, c0 + r < seqlen_k ? n : 0);
  }
}

inline void pl_store_qk(__local float *area, const raw8 *buf, int lid) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int g = lid + PL_WG * t, at = (g >> 2) * PL_QS + 8 * (g & 3);
    pl_store(area + at, buf[t]);
    pl_store(area + 64 * PL_QS + at, buf[2 + t]);
  }
}

/* Chunk vc of V: keys c0 + VC vc + j, group g = lid + 128t is key g / VR, columns 8(g % VR). */
inline void pl_load_v(raw8 *buf, __global const st_t *vb, int vs2, int vs4, int c0, int vc,
                      int seqlen_k, int lid) {
#pragma unroll
  for (int t = 0; t < PL_VG; ++t) {
    const int g = lid + PL_WG * t, key = c0 + PL_VC * vc + g / PL_VR, d0 = 8 * (g % PL_VR);
    buf[t] = pl_load(vb, key * vs2 + d0 * vs4, vs4, key < seqlen_k ? pl_count(d0) : 0);
  }
}

inline void pl_store_v(__local float *area, const raw8 *buf, int lid) {
#pragma unroll
  for (int t = 0; t < PL_VG; ++t) {
    const int g = lid + PL_WG * t;
    pl_store(area + (g / PL_VR) * PL_VS + 8 * (g % PL_VR), buf[t]);
  }
}

__kernel __attribute__((reqd_work_group_size(PL_WG, 1, 1))) void fa_forward(
    __global const st_t *q, long8 qs, __global const st_t *k, long8 ks, __global const st_t *v,
    long8 vs, __global st_t *out, long8 os, __global float *lse, long4 ls, int has_lse,
    int seqlen_q, int seqlen_k, int heads_q, int heads_kv, float scale, float softcap,
    long mask_shift, long mask_left, long mask_right) {
  __local float4 area4[PL_AREA / 4];  /* Q [64][36] and K [64][36] chunks; or V [VC][DP + 4] */
  __local float4 pt4[64 * PL_PS / 4]; /* P^T [key][4 ty + i] = P[row ty + 16 i][key] */
  __local float red[8 * 64];          /* per-row partial maxima (then sums) of the 8 work-items */
  __local int rng[2 * 64];            /* each row's key range [lo, hi) (core/math/mask.h) */
  __local float *area = (__local float *)area4, *pt = (__local float *)pt4;
  const int lid = get_local_id(0), tx = lid & 7, ty = lid >> 3;
  const int m0 = get_group_id(0) * 64;
  const int h = get_group_id(1), b = get_group_id(2);
  const int hk = h / (heads_q / heads_kv);
  /* The head's base pointers (64-bit once), then 32-bit offsets: the host runs this kernel only
     when every offset within a head fits (ocl_decide.c). */
  __global const st_t *qb = q + (qs.s0 + b * qs.s1 + h * qs.s3);
  __global const st_t *kb = k + (ks.s0 + b * ks.s1 + hk * ks.s3);
  __global const st_t *vb = v + (vs.s0 + b * vs.s1 + hk * vs.s3);
  const int qs2 = (int)qs.s2, qs4 = (int)qs.s4, ks2 = (int)ks.s2, ks4 = (int)ks.s4;
  const int vs2 = (int)vs.s2, vs4 = (int)vs.s4;

  const fa_mask mask = mask_of(mask_shift, mask_left, mask_right);
  long group_lo, group_hi;
  group_key_range(&mask, m0, seqlen_q, seqlen_k, &group_lo, &group_hi);
  long lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&mask, m0, seqlen_k, &lo_first, &hi_first);
  fa_mask_key_range(&mask, min(m0 + 64, seqlen_q) - 1, seqlen_k, &lo_last, &hi_last);
  float m_run[4], l_run[4], o[4][4 * PL_NC];
  /* Read after the first tile's barriers (none are read if there is no tile). */
  if (lid < 64) {
    long x = 0, y = 0;
    if (m0 + lid < seqlen_q) fa_mask_key_range(&mask, m0 + lid, seqlen_k, &x, &y);
    rng[lid] = (int)x;
    rng[64 + lid] = (int)y;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4 * PL_NC; ++c) o[i][c] = 0.0f;
  }

  raw8 buf[4];
  /* Every tile in [first, group_hi) has a key some row of the group sees (fa_mask's ranges are
     monotone), so none is skipped: the prefetch always knows the next chunk. */
  const int first = (int)(group_lo / 64) * 64, end = (int)group_hi;
  if (first < end)
    pl_load_qk(buf, qb, qs2, qs4, kb, ks2, ks4, m0, first, 0, seqlen_q, seqlen_k, lid);
  for (int c0 = first; c0 < end; c0 += 64) {
    float s[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 8; ++e) s[i][e] = 0.0f;
#pragma unroll 1
    for (int qc = 0; qc < PL_NQ; ++qc) {
      barrier(CLK_LOCAL_MEM_FENCE);
      pl_store_qk(area, buf, lid);
      barrier(CLK_LOCAL_MEM_FENCE);
      if (qc + 1 < PL_NQ)
        pl_load_qk(buf, qb, qs2, qs4, kb, ks2, ks4, m0, c0, qc + 1, seqlen_q, seqlen_k, lid);
      else
        pl_load_v(buf, vb, vs2, vs4, c0, 0, seqlen_k, lid);
      __local const float *qr = area + ty * PL_QS, *kr = area + (64 + tx) * PL_QS;
#pragma unroll 2
      for (int d = 0; d < PL_DC; d += 4) {
        float4 a[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = *(__local const float4 *)(qr + 16 * i * PL_QS + d);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float4 kk = *(__local const float4 *)(kr + 8 * e * PL_QS + d);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float x = fma(a[i].x, kk.x, s[i][e]);
            x = fma(a[i].y, kk.y, x);
            x = fma(a[i].z, kk.z, x);
            s[i][e] = fma(a[i].w, kk.w, x);
          }
        }
      }
    }
    /* Score transform and mask (keys past the last are masked too), then each row's maximum. */
    const int n = min(64, seqlen_k - c0);
    const fa_tile_class cls =
        fa_mask_tile_class_from_ranges(lo_first, hi_first, lo_last, hi_last, c0, c0 + n);
    const int masked = cls != FA_TILE_FULL || n < 64;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
      /* The row's key range from local memory, read only for a tile that needs it: held in
         registers, the compiler hoists 32 + 32 loop-invariant differences (lo - tx - 8e ...) out
         of the tile loop, at the cost of some 60 registers. */
      int lo_rel = 0, hi_rel = 64;
      if (masked) {
        lo_rel = rng[ty + 16 * i] - c0 - tx;
        hi_rel = rng[64 + ty + 16 * i] - c0 - tx;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float z = fa_score_softcap(s[i][e] * scale, softcap);
        if (8 * e < lo_rel || 8 * e >= hi_rel) z = -INFINITY;
        s[i][e] = z;
        mx = fmax(mx, z);
      }
      red[tx * 64 + ty + 16 * i] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int t = 0; t < 8; ++t) mx = fmax(mx, red[t * 64 + ty + 16 * i]);
      const float alpha = fa_softmax_online_step(&m_run[i], &l_run[i], mx);
      const float ms = fa_softmax_safe_max(m_run[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float p = exp(s[i][e] - ms);
        l_run[i] += p;
        s[i][e] = p;
      }
#pragma unroll
      for (int c = 0; c < 4 * PL_NC; ++c) o[i][c] *= alpha;
    }
    /* P^T: the previous tile's P·V finished before this tile's first barrier. */
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      pt4[(tx + 8 * e) * (PL_PS / 4) + ty] = (float4)(s[0][e], s[1][e], s[2][e], s[3][e]);
    }
    /* O += P V, VC keys at a time. */
#pragma unroll 1
    for (int vc = 0; vc < PL_NV; ++vc) {
      barrier(CLK_LOCAL_MEM_FENCE);
      pl_store_v(area, buf, lid);
      barrier(CLK_LOCAL_MEM_FENCE);
      if (vc + 1 < PL_NV)
        pl_load_v(buf, vb, vs2, vs4, c0, vc + 1, seqlen_k, lid);
      else if (c0 + 64 < end)
        pl_load_qk(buf, qb, qs2, qs4, kb, ks2, ks4, m0, c0 + 64, 0, seqlen_q, seqlen_k, lid);
      __local const float *pr = pt + PL_VC * vc * PL_PS + 4 * ty, *vr = area + 4 * tx;
#pragma unroll 4
      for (int j = 0; j < PL_VC; ++j) {
        const float4 p = *(__local const float4 *)(pr + j * PL_PS);
        const float pv[4] = {p.s0, p.s1, p.s2, p.s3};
#pragma unroll
        for (int c = 0; c < PL_NC; ++c) {
          const float4 x = *(__local const float4 *)(vr + j * PL_VS + 32 * c);
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
  for (int i = 0; i < 4; ++i) red[tx * 64 + ty + 16 * i] = l_run[i];
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + ty + 16 * i;
    float l = 0.0f;
#pragma unroll
    for (int t = 0; t < 8; ++t) l += red[t * 64 + ty + 16 * i];
    if (row >= seqlen_q) continue;
    const float inv = fa_softmax_out_scale(l);
#pragma unroll
    for (int c = 0; c < PL_NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = 4 * tx + 32 * c + e;
        if (d < FA_D) st_store(out, st_index(os, b, row, h, d), o[i][4 * c + e] * inv);
      }
    if (has_lse && tx == 0)
      lse[ls.s0 + b * ls.s1 + h * ls.s2 + row * ls.s3] = fa_softmax_lse(m_run[i], l);
  }
}

#endif /* !FA_CPU && FA_FWD >= 2 */
