/*
 * backward.cl: the FlashAttention backward pass in three kernels, no atomics (deterministic):
 *   fa_bwd_dot   D_i = rowsum(dO_i ∘ O_i) (core/backward.h), one work-item per query row
 *   fa_bwd_dkdv  a work-group per (key tile of FA_BR keys, KV head, batch), a work-item per key
 *                row keeping its dK and dV rows; Q, dO, LSE and D of FA_BC query rows at a time
 *                in local memory, over every query head of the group and every row that sees
 *                the tile (core/mask.h's row range); P recomputed from the LSE
 *   fa_bwd_dq    a work-group per (query tile, query head, batch), a work-item per query row
 *                keeping its dQ row; K and V of FA_BC keys at a time in local memory
 * dS = P ∘ (dP − D) times the softcap derivative; dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO.
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
