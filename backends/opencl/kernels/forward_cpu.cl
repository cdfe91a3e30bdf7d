/*
 * forward_cpu.cl: the FlashAttention forward pass of the CPU kernel set (FA_CPU = 1: ocl_probe.c's
 * ocl_plan gives it to CPU devices). A work-group owns FA_BR query rows of one head; K and V stream
 * through local memory a tile of FA_BC keys at a time; each row keeps its running max and sum
 * (core/math/softmax.h) and writes its output row and LSE once; the mask and score transform are
 * core/math/mask.h's and core/math/score.h's. Work-groups: (query tiles, heads_q, batch).
 *
 * FA_WG work-items (1: ocl_probe.c says why), each holding FA_RV vectors of 16 query rows, a row
 * per lane of its vectors (rowmath.cl), q and output rows in private memory; per tile of FA_BC
 * keys and per row vector, the 16 x FA_BC scores, the softmax step per lane, then the 16 output
 * rows. The tile is staged once for the FA_RV x 16 rows.
 */
#if FA_CPU

/* One vector of 16 query rows: q and the output accumulator (FA_D lanes_t each, element d holding
   dimension d of the 16 rows), the running max and sum of each row, and its key range. */
typedef struct fwd_rows {
  lanes_t q[FA_D], acc[FA_D];
  float m_run[FA_LN], l_run[FA_LN];
  lanes_i lo, hi;
  long r0, lo_first, hi_first, lo_last, hi_last;
} fwd_rows;

/* One key tile (n keys of kt/vt from key c0) for one row vector; s is scratch. */
inline void fwd_rows_tile(fwd_rows *w, __local const float (*kt)[FA_D],
                          __local const float (*vt)[FA_D], long c0, int n, float scale,
                          float softcap, lanes_t *s) {
  const fa_tile_class cls =
      fa_mask_tile_class_from_ranges(w->lo_first, w->hi_first, w->lo_last, w->hi_last, c0, c0 + n);
  if (cls == FA_TILE_EMPTY) return;
  lanes_scores(w->q, kt, n, s);
  lanes_t tile_max = -INFINITY;
#pragma unroll 1
  for (int j = 0; j < n; ++j) {
    lanes_t z = s[j] * scale;
    if (softcap > 0.0f) z = lanes_softcap(z, softcap);
    if (cls == FA_TILE_PARTIAL) {
      const lanes_i key = (lanes_i)((int)(c0 + j));
      z = select(z, (lanes_t)(-INFINITY), (key < w->lo) | (key >= w->hi));
    }
    s[j] = z;
    tile_max = fmax(tile_max, z);
  }
  float tm[FA_LN], al[FA_LN], ms[FA_LN];
  vstore16(tile_max, 0, tm);
#pragma unroll 1
  for (int l = 0; l < FA_LN; ++l) {
    al[l] = fa_softmax_online_step(&w->m_run[l], &w->l_run[l], tm[l]);
    ms[l] = fa_softmax_safe_max(w->m_run[l]);
  }
  const lanes_t mx = vload16(0, ms);
  lanes_t sum = 0.0f;
#pragma unroll 1
  for (int j = 0; j < n; ++j) {
    const lanes_t p = exp(s[j] - mx);
    sum += p;
    s[j] = p;
  }
  vstore16(vload16(0, w->l_run) + sum, 0, w->l_run);
  lanes_accumulate(w->acc, vload16(0, al), s, vt, n);
}

__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void fa_forward(
    __global const st_t *q, long8 qs, __global const st_t *k, long8 ks, __global const st_t *v,
    long8 vs, __global st_t *out, long8 os, __global float *lse, long4 ls, int has_lse,
    int seqlen_q, int seqlen_k, int heads_q, int heads_kv, float scale, float softcap,
    long mask_shift, long mask_left, long mask_right) {
  __local float kt[FA_BC][FA_D];
  __local float vt[FA_BC][FA_D];
  const int il = get_local_id(0);
  const long m0 = (long)get_group_id(0) * FA_BR;
  const int h = get_group_id(1), b = get_group_id(2);
  const int hk = h / (heads_q / heads_kv);

  const fa_mask mask = mask_of(mask_shift, mask_left, mask_right);
  long group_lo, group_hi;
  group_key_range(&mask, m0, seqlen_q, seqlen_k, &group_lo, &group_hi);
  /* This work-item's rows: FA_RV vectors of 16, from m0 + il * FA_RV * 16. */
  fwd_rows w[FA_RV];
  int nv = 0;
#pragma unroll 1
  for (int t = 0; t < FA_RV; ++t) {
    fwd_rows *x = &w[t];
    x->r0 = m0 + ((long)il * FA_RV + t) * FA_LN;
    if (x->r0 >= seqlen_q) break;
    nv = t + 1;
    lanes_key_ranges(&mask, x->r0, seqlen_q, seqlen_k, &x->lo, &x->hi, &x->lo_first, &x->hi_first,
                     &x->lo_last, &x->hi_last);
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      float a[FA_LN];
#pragma unroll 1
      for (int l = 0; l < FA_LN; ++l)
        a[l] = x->r0 + l < seqlen_q ? st_load(q, st_index(qs, b, x->r0 + l, h, d)) : 0.0f;
      x->q[d] = vload16(0, a);
      x->acc[d] = 0.0f;
    }
#pragma unroll 1
    for (int l = 0; l < FA_LN; ++l) {
      x->m_run[l] = -INFINITY;
      x->l_run[l] = 0.0f;
    }
  }

  lanes_t s[FA_BC];
  for (long c0 = (group_lo / FA_BC) * FA_BC; c0 < group_hi; c0 += FA_BC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    stage_rows_vec(kt, k, ks, vt, v, vs, b, hk, c0, seqlen_k, il);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int n = (int)min((long)FA_BC, seqlen_k - c0);
#pragma unroll 1
    for (int t = 0; t < nv; ++t) fwd_rows_tile(&w[t], kt, vt, c0, n, scale, softcap, s);
  }

#pragma unroll 1
  for (int t = 0; t < nv; ++t) {
    const fwd_rows *x = &w[t];
    float inv[FA_LN];
#pragma unroll 1
    for (int l = 0; l < FA_LN; ++l) inv[l] = fa_softmax_out_scale(x->l_run[l]);
    const lanes_t iv = vload16(0, inv);
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      float a[FA_LN];
      vstore16(x->acc[d] * iv, 0, a);
#pragma unroll 1
      for (int l = 0; l < FA_LN; ++l)
        if (x->r0 + l < seqlen_q) st_store(out, st_index(os, b, x->r0 + l, h, d), a[l]);
    }
    if (!has_lse) continue;
#pragma unroll 1
    for (int l = 0; l < FA_LN; ++l)
      if (x->r0 + l < seqlen_q)
        lse[ls.s0 + b * ls.s1 + h * ls.s2 + (x->r0 + l) * ls.s3] =
            fa_softmax_lse(x->m_run[l], x->l_run[l]);
  }
}

#endif /* FA_CPU */
