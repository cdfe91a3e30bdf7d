/*
 * forward.cl: the FlashAttention forward pass. A work-group owns FA_BR query rows of one head
 * (one work-item per row, its q and output rows in private memory); K and V stream through local
 * memory FA_BC keys at a time; each row keeps its running max and sum (core/softmax.h) and writes
 * its output row and LSE once. The mask and score transform are core/mask.h's and core/score.h's.
 * Work-groups: (query tiles, heads_q, batch).
 */
__kernel __attribute__((reqd_work_group_size(FA_BR, 1, 1))) void fa_forward(
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
  const long row = m0 + il;
  const int valid = row < seqlen_q;

  const fa_mask mask = mask_of(mask_shift, mask_left, mask_right);
  long lo, hi, group_lo, group_hi;
  query_tile_ranges(&mask, m0, row, seqlen_q, seqlen_k, &lo, &hi, &group_lo, &group_hi);

  float qrow[FA_D], acc[FA_D];
  for (int d = 0; d < FA_D; ++d) {
    qrow[d] = valid ? st_load(q, st_index(qs, b, row, h, d)) : 0.0f;
    acc[d] = 0.0f;
  }
  float m_run = -INFINITY, l_run = 0.0f;

  for (long c0 = (group_lo / FA_BC) * FA_BC; c0 < group_hi; c0 += FA_BC) {
    barrier(CLK_LOCAL_MEM_FENCE);
    stage_rows(kt, k, ks, vt, v, vs, b, hk, c0, seqlen_k, il);
    barrier(CLK_LOCAL_MEM_FENCE);
    float s[FA_BC];
    float tile_max = -INFINITY;
    for (int j = 0; j < FA_BC; ++j) {
      const long key = c0 + j;
      float z = -INFINITY;
      if (key >= lo && key < hi) {
        z = fa_score_softcap(row_dot(qrow, kt[j]) * scale, softcap);
      }
      s[j] = z;
      tile_max = fmax(tile_max, z);
    }
    const float alpha = fa_softmax_online_step(&m_run, &l_run, tile_max);
    const float ms = fa_softmax_safe_max(m_run);
    for (int d = 0; d < FA_D; ++d) acc[d] *= alpha;
    for (int j = 0; j < FA_BC; ++j) {
      const float p = exp(s[j] - ms);
      l_run += p;
      if (p != 0.0f) row_axpy(acc, p, vt[j]);
    }
  }

  if (valid) {
    const float inv = fa_softmax_out_scale(l_run);
    for (int d = 0; d < FA_D; ++d) st_store(out, st_index(os, b, row, h, d), acc[d] * inv);
    if (has_lse) lse[ls.s0 + b * ls.s1 + h * ls.s2 + row * ls.s3] = fa_softmax_lse(m_run, l_run);
  }
}
