/*
 * backward.cl: the FlashAttention backward pass in three kernels, no atomics (deterministic):
 *   fa_bwd_dot   D_i = rowsum(dO_i ∘ O_i) (core/math/backward.h), one work-item per query row
 *   fa_bwd_dkdv  a work-group per (key tile of FA_BR keys, KV head, batch) keeping the tile's
 *                dK and dV rows; Q, dO, LSE and D of FA_BC query rows at a time in local memory,
 *                over every query head of the group and every row that sees the tile
 *                (core/math/mask.h's row range); P recomputed from the LSE
 *   fa_bwd_dq    a work-group per (query tile, query head, batch) keeping its dQ rows; K and V of
 *                FA_BC keys at a time in local memory
 * dS = P ∘ (dP − D) times the softcap derivative; dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO.
 * GPU kernels: a work-item per key (dK/dV) or query row (dQ), FA_WG = FA_BR of them. CPU kernels
 * (FA_CPU): FA_WG work-items (1), each holding FA_RV vectors of 16 keys or rows, one per lane
 * (rowmath.cl), as the forward's CPU kernel does; a staged tile serves all of them.
 */
__kernel void fa_bwd_dot(__global const st_t *out, long8 os, __global const st_t *dout, long8 dos,
                         __global float *dsum, int seqlen_q, int heads_q) {
  const long row = get_global_id(0);
  const int h = get_global_id(1), b = get_global_id(2);
  if (row >= seqlen_q) return;
  float o[FA_D], g[FA_D];
  for (int d = 0; d < FA_D; ++d) {
    o[d] = st_load(out, st_index(os, b, row, h, d));
    g[d] = st_load(dout, st_index(dos, b, row, h, d));
  }
  dsum[((long)b * heads_q + h) * seqlen_q + row] = fa_bwd_rowdot(g, o, FA_D);
}

#if FA_CPU

/* dK/dV: one vector of 16 keys (a key per lane): its K and V rows and dK, dV accumulators. */
typedef struct bwd_keys {
  lanes_t k[FA_D], v[FA_D], dk[FA_D], dv[FA_D];
  lanes_i key;
  long k0, own_lo, own_hi;
  int nk; /* keys of the 16 that exist */
} bwd_keys;

/* One tile of n query rows from r0 (qt, gt: Q and dO rows; lt, dt: their LSE and D). */
inline void bwd_keys_tile(bwd_keys *w, const fa_mask *mask, __local const float (*qt)[FA_D],
                          __local const float (*gt)[FA_D], __local const float *lt,
                          __local const float *dt, long r0, int n, int seqlen_k, float scale,
                          float softcap, lanes_t *sv, lanes_t *gv) {
  if (r0 >= w->own_hi || r0 + n <= w->own_lo) return;
  const fa_tile_class cls = fa_mask_tile_class(mask, r0, r0 + n, w->k0, w->k0 + w->nk, seqlen_k);
  if (cls == FA_TILE_EMPTY) return;
  lanes_scores2(w->k, qt, w->v, gt, n, sv, gv);
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    lanes_t z = sv[i] * scale, grad = 1.0f;
    if (softcap > 0.0f) {
      z = lanes_softcap(z, softcap);
      grad = lanes_softcap_grad(z, softcap);
    }
    /* core/math/softmax.h's fa_softmax_prob_from_lse with this row's one LSE */
    const float li = lt[i];
    lanes_t p = li == -INFINITY ? (lanes_t)0.0f : exp(z - li);
    if (cls == FA_TILE_PARTIAL) {
      long lo, hi;
      fa_mask_key_range(mask, r0 + i, seqlen_k, &lo, &hi);
      p = select(p, (lanes_t)0.0f, (w->key < (int)lo) | (w->key >= (int)hi));
    }
    sv[i] = p;
    gv[i] = lanes_bwd_ds(p, gv[i], (lanes_t)dt[i]) * grad;
  }
  lanes_accumulate2(w->dv, sv, gt, w->dk, gv, qt, n);
}

__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void fa_bwd_dkdv(
    __global const st_t *q, long8 qs, __global const st_t *k, long8 ks, __global const st_t *v,
    long8 vs, __global const st_t *dout, long8 dos, __global const float *lse, long4 ls,
    __global const float *dsum, __global st_t *dk, long8 dks, __global st_t *dv, long8 dvs,
    int seqlen_q, int seqlen_k, int heads_q, int heads_kv, float scale, float softcap,
    long mask_shift, long mask_left, long mask_right) {
  __local float qt[FA_BC][FA_D];
  __local float gt[FA_BC][FA_D];
  __local float lt[FA_BC], dt[FA_BC];
  const int il = get_local_id(0);
  const long n0 = (long)get_group_id(0) * FA_BR;
  const int hk = get_group_id(1), b = get_group_id(2);
  const int group = heads_q / heads_kv;

  const fa_mask mask = mask_of(mask_shift, mask_left, mask_right);
  long r_lo, r_hi;
  fa_mask_row_range(&mask, n0, min(n0 + FA_BR, (long)seqlen_k), seqlen_q, &r_lo, &r_hi);
  /* This work-item's keys: FA_RV vectors of 16, from n0 + il * FA_RV * 16. */
  bwd_keys w[FA_RV];
  int nv = 0;
#pragma unroll 1
  for (int t = 0; t < FA_RV; ++t) {
    bwd_keys *x = &w[t];
    x->k0 = n0 + ((long)il * FA_RV + t) * FA_LN;
    if (x->k0 >= seqlen_k) break;
    nv = t + 1;
    x->nk = (int)min((long)seqlen_k - x->k0, (long)FA_LN);
    fa_mask_row_range(&mask, x->k0, x->k0 + x->nk, seqlen_q, &x->own_lo, &x->own_hi);
    int ka[FA_LN];
#pragma unroll 1
    for (int l = 0; l < FA_LN; ++l) ka[l] = (int)(x->k0 + l);
    x->key = vload16(0, ka);
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      float a[FA_LN], c[FA_LN];
#pragma unroll 1
      for (int l = 0; l < FA_LN; ++l) {
        a[l] = l < x->nk ? st_load(k, st_index(ks, b, x->k0 + l, hk, d)) : 0.0f;
        c[l] = l < x->nk ? st_load(v, st_index(vs, b, x->k0 + l, hk, d)) : 0.0f;
      }
      x->k[d] = vload16(0, a);
      x->v[d] = vload16(0, c);
      x->dk[d] = 0.0f;
      x->dv[d] = 0.0f;
    }
  }

  lanes_t sv[FA_BC], gv[FA_BC];
  for (int hq = hk * group; hq < (hk + 1) * group; ++hq) {
    for (long r0 = (r_lo / FA_BC) * FA_BC; r0 < r_hi; r0 += FA_BC) {
      barrier(CLK_LOCAL_MEM_FENCE);
      stage_rows_vec(qt, q, qs, gt, dout, dos, b, hq, r0, seqlen_q, il);
      for (int i = il; i < FA_BC; i += FA_WG) {
        const long row = r0 + i;
        const int in = row < seqlen_q;
        lt[i] = in ? lse[ls.s0 + b * ls.s1 + hq * ls.s2 + row * ls.s3] : -INFINITY;
        dt[i] = in ? dsum[((long)b * heads_q + hq) * seqlen_q + row] : 0.0f;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      const int n = (int)min((long)FA_BC, seqlen_q - r0);
#pragma unroll 1
      for (int t = 0; t < nv; ++t)
        bwd_keys_tile(&w[t], &mask, qt, gt, lt, dt, r0, n, seqlen_k, scale, softcap, sv, gv);
    }
  }
#pragma unroll 1
  for (int t = 0; t < nv; ++t) {
    const bwd_keys *x = &w[t];
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      float a[FA_LN], c[FA_LN];
      vstore16(x->dk[d] * scale, 0, a);
      vstore16(x->dv[d], 0, c);
#pragma unroll 1
      for (int l = 0; l < x->nk; ++l) {
        st_store(dk, st_index(dks, b, x->k0 + l, hk, d), a[l]);
        st_store(dv, st_index(dvs, b, x->k0 + l, hk, d), c[l]);
      }
    }
  }
}

/* dQ: one vector of 16 query rows: Q and dO rows, the dQ accumulator, LSE and D per lane. */
typedef struct bwd_rows {
  lanes_t q[FA_D], g[FA_D], dq[FA_D];
  lanes_t lse, dd;
  lanes_i lo, hi;
  long r0, lo_first, hi_first, lo_last, hi_last;
} bwd_rows;

inline void bwd_rows_tile(bwd_rows *w, __local const float (*kt)[FA_D],
                          __local const float (*vt)[FA_D], long c0, int n, float scale,
                          float softcap, lanes_t *sv, lanes_t *pv) {
  const fa_tile_class cls =
      fa_mask_tile_class_from_ranges(w->lo_first, w->hi_first, w->lo_last, w->hi_last, c0, c0 + n);
  if (cls == FA_TILE_EMPTY) return;
  lanes_scores2(w->q, kt, w->g, vt, n, sv, pv);
#pragma unroll 1
  for (int j = 0; j < n; ++j) {
    lanes_t z = sv[j] * scale, grad = 1.0f;
    if (softcap > 0.0f) {
      z = lanes_softcap(z, softcap);
      grad = lanes_softcap_grad(z, softcap);
    }
    lanes_t p = lanes_prob_from_lse(z, w->lse);
    if (cls == FA_TILE_PARTIAL) {
      const lanes_i kj = (lanes_i)((int)(c0 + j));
      p = select(p, (lanes_t)0.0f, (kj < w->lo) | (kj >= w->hi));
    }
    sv[j] = lanes_bwd_ds(p, pv[j], w->dd) * grad;
  }
  lanes_accumulate(w->dq, (lanes_t)1.0f, sv, kt, n);
}

__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void fa_bwd_dq(
    __global const st_t *q, long8 qs, __global const st_t *k, long8 ks, __global const st_t *v,
    long8 vs, __global const st_t *dout, long8 dos, __global const float *lse, long4 ls,
    __global const float *dsum, __global st_t *dq, long8 dqs, int seqlen_q, int seqlen_k,
    int heads_q, int heads_kv, float scale, float softcap, long mask_shift, long mask_left,
    long mask_right) {
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
  bwd_rows w[FA_RV];
  int nv = 0;
#pragma unroll 1
  for (int t = 0; t < FA_RV; ++t) {
    bwd_rows *x = &w[t];
    x->r0 = m0 + ((long)il * FA_RV + t) * FA_LN;
    if (x->r0 >= seqlen_q) break;
    nv = t + 1;
    lanes_key_ranges(&mask, x->r0, seqlen_q, seqlen_k, &x->lo, &x->hi, &x->lo_first, &x->hi_first,
                     &x->lo_last, &x->hi_last);
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      float a[FA_LN], c[FA_LN];
#pragma unroll 1
      for (int l = 0; l < FA_LN; ++l) {
        const int in = x->r0 + l < seqlen_q;
        a[l] = in ? st_load(q, st_index(qs, b, x->r0 + l, h, d)) : 0.0f;
        c[l] = in ? st_load(dout, st_index(dos, b, x->r0 + l, h, d)) : 0.0f;
      }
      x->q[d] = vload16(0, a);
      x->g[d] = vload16(0, c);
      x->dq[d] = 0.0f;
    }
    float la[FA_LN], da[FA_LN];
#pragma unroll 1
    for (int l = 0; l < FA_LN; ++l) {
      const long row = x->r0 + l;
      const int in = row < seqlen_q;
      la[l] = in ? lse[ls.s0 + b * ls.s1 + h * ls.s2 + row * ls.s3] : -INFINITY;
      da[l] = in ? dsum[((long)b * heads_q + h) * seqlen_q + row] : 0.0f;
    }
    x->lse = vload16(0, la);
    x->dd = vload16(0, da);
  }

  lanes_t sv[FA_BC], pv[FA_BC];
  for (long c0 = (group_lo / FA_BC) * FA_BC; c0 < group_hi; c0 += FA_BC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    stage_rows_vec(kt, k, ks, vt, v, vs, b, hk, c0, seqlen_k, il);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int n = (int)min((long)FA_BC, seqlen_k - c0);
#pragma unroll 1
    for (int t = 0; t < nv; ++t) bwd_rows_tile(&w[t], kt, vt, c0, n, scale, softcap, sv, pv);
  }
#pragma unroll 1
  for (int t = 0; t < nv; ++t) {
    const bwd_rows *x = &w[t];
#pragma unroll 1
    for (int d = 0; d < FA_D; ++d) {
      float a[FA_LN];
      vstore16(x->dq[d] * scale, 0, a);
#pragma unroll 1
      for (int l = 0; l < FA_LN; ++l)
        if (x->r0 + l < seqlen_q) st_store(dq, st_index(dqs, b, x->r0 + l, h, d), a[l]);
    }
  }
}

#else /* GPU */

/* P and dS for one (query row, key) pair: z the transformed score. Returns P; *ds gets dS. */
inline float bwd_pair(float raw, float scale, float softcap, float lse, float dp, float dd,
                      float *ds) {
  const float z = fa_score_softcap(raw * scale, softcap);
  const float p = fa_softmax_prob_from_lse(z, lse);
  *ds = fa_bwd_ds(p, dp, dd) * fa_score_softcap_grad(z, softcap);
  return p;
}

__kernel __attribute__((reqd_work_group_size(FA_BR, 1, 1))) void fa_bwd_dkdv(
    __global const st_t *q, long8 qs, __global const st_t *k, long8 ks, __global const st_t *v,
    long8 vs, __global const st_t *dout, long8 dos, __global const float *lse, long4 ls,
    __global const float *dsum, __global st_t *dk, long8 dks, __global st_t *dv, long8 dvs,
    int seqlen_q, int seqlen_k, int heads_q, int heads_kv, float scale, float softcap,
    long mask_shift, long mask_left, long mask_right) {
  __local float qt[FA_BC][FA_D];
  __local float gt[FA_BC][FA_D];
  __local float lt[FA_BC], dt[FA_BC];
  const int jl = get_local_id(0);
  const long n0 = (long)get_group_id(0) * FA_BR;
  const int hk = get_group_id(1), b = get_group_id(2);
  const int group = heads_q / heads_kv;
  const long key = n0 + jl;
  const int valid = key < seqlen_k;

  const fa_mask mask = mask_of(mask_shift, mask_left, mask_right);
  long r_lo, r_hi;
  fa_mask_row_range(&mask, n0, min(n0 + FA_BR, (long)seqlen_k), seqlen_q, &r_lo, &r_hi);

  float krow[FA_D], vrow[FA_D], dkr[FA_D], dvr[FA_D];
  for (int d = 0; d < FA_D; ++d) {
    krow[d] = valid ? st_load(k, st_index(ks, b, key, hk, d)) : 0.0f;
    vrow[d] = valid ? st_load(v, st_index(vs, b, key, hk, d)) : 0.0f;
    dkr[d] = 0.0f;
    dvr[d] = 0.0f;
  }

  for (int hq = hk * group; hq < (hk + 1) * group; ++hq) {
    for (long r0 = (r_lo / FA_BC) * FA_BC; r0 < r_hi; r0 += FA_BC) {
      barrier(CLK_LOCAL_MEM_FENCE);
      stage_rows(qt, q, qs, gt, dout, dos, b, hq, r0, seqlen_q, jl);
      for (int i = jl; i < FA_BC; i += FA_BR) {
        const long row = r0 + i;
        const int in = row < seqlen_q;
        lt[i] = in ? lse[ls.s0 + b * ls.s1 + hq * ls.s2 + row * ls.s3] : -INFINITY;
        dt[i] = in ? dsum[((long)b * heads_q + hq) * seqlen_q + row] : 0.0f;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (!valid) continue;
      for (int i = 0; i < FA_BC; ++i) {
        const long row = r0 + i;
        if (row >= seqlen_q || !fa_mask_allows(&mask, row, key, seqlen_k)) continue;
        float ds;
        const float p =
            bwd_pair(row_dot(krow, qt[i]), scale, softcap, lt[i], row_dot(vrow, gt[i]), dt[i], &ds);
        row_axpy(dvr, p, gt[i]);
        row_axpy(dkr, ds, qt[i]);
      }
    }
  }
  if (valid)
    for (int d = 0; d < FA_D; ++d) {
      st_store(dk, st_index(dks, b, key, hk, d), dkr[d] * scale);
      st_store(dv, st_index(dvs, b, key, hk, d), dvr[d]);
    }
}

__kernel __attribute__((reqd_work_group_size(FA_BR, 1, 1))) void fa_bwd_dq(
    __global const st_t *q, long8 qs, __global const st_t *k, long8 ks, __global const st_t *v,
    long8 vs, __global const st_t *dout, long8 dos, __global const float *lse, long4 ls,
    __global const float *dsum, __global st_t *dq, long8 dqs, int seqlen_q, int seqlen_k,
    int heads_q, int heads_kv, float scale, float softcap, long mask_shift, long mask_left,
    long mask_right) {
  __local float kt[FA_BC][FA_D];
  __local float vt[FA_BC][FA_D];
  const int il = get_local_id(0);
  const long m0 = (long)get_group_id(0) * FA_BR;
  const int h = get_group_id(1), b = get_group_id(2);
  const int hk = h / (heads_q / heads_kv);
  const long row = m0 + il;
  const int valid = row < seqlen_q;

  const fa_mask mask = mask_of(mask_shift, mask_left, mask_right);
  long lo, hi, group_lo, group_hi;
  query_tile_ranges(&mask, m0, row, seqlen_q, seqlen_k, &lo, &hi, &group_lo, &group_hi);

  float qrow[FA_D], grow[FA_D], dqr[FA_D];
  for (int d = 0; d < FA_D; ++d) {
    qrow[d] = valid ? st_load(q, st_index(qs, b, row, h, d)) : 0.0f;
    grow[d] = valid ? st_load(dout, st_index(dos, b, row, h, d)) : 0.0f;
    dqr[d] = 0.0f;
  }
  const float lrow = valid ? lse[ls.s0 + b * ls.s1 + h * ls.s2 + row * ls.s3] : -INFINITY;
  const float drow = valid ? dsum[((long)b * heads_q + h) * seqlen_q + row] : 0.0f;

  for (long c0 = (group_lo / FA_BC) * FA_BC; c0 < group_hi; c0 += FA_BC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    stage_rows(kt, k, ks, vt, v, vs, b, hk, c0, seqlen_k, il);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < FA_BC; ++j) {
      const long key = c0 + j;
      if (key < lo || key >= hi) continue;
      float ds;
      bwd_pair(row_dot(qrow, kt[j]), scale, softcap, lrow, row_dot(grow, vt[j]), drow, &ds);
      row_axpy(dqr, ds, kt[j]);
    }
  }
  if (valid)
    for (int d = 0; d < FA_D; ++d) st_store(dq, st_index(dqs, b, row, h, d), dqr[d] * scale);
}

#endif /* FA_CPU */
