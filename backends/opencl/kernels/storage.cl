/*
 * storage.cl: loads and stores of the program's storage dtype, in float. A tensor is a buffer, an
 * element offset and strides (long8: offset, batch, row, head, dim) as the API describes it, so
 * any stride the API allows works here.
 */
#if FA_DTYPE == 0
typedef float st_t;
inline float st_load(__global const st_t *p, long i) { return p[i]; }
inline void st_store(__global st_t *p, long i, float v) { p[i] = v; }
#elif FA_DTYPE == 1
typedef half st_t;
inline float st_load(__global const st_t *p, long i) { return vload_half((size_t)i, p); }
inline void st_store(__global st_t *p, long i, float v) { vstore_half_rte(v, (size_t)i, p); }
#else
typedef ushort st_t;
inline float st_load(__global const st_t *p, long i) { return fa_bf16_to_f32(p[i]); }
inline void st_store(__global st_t *p, long i, float v) { p[i] = fa_f32_to_bf16(v); }
#endif

/* Eight consecutive elements p[i .. i + 7] in float (the same conversions as st_load: bf16 is
   core/math/dtype.h's fa_bf16_to_f32, the bits shifted into a float's upper half). */
inline float8 st_load8(__global const st_t *p, long i) {
#if FA_DTYPE == 0
  return vload8(0, p + i);
#elif FA_DTYPE == 1
  return vload_half8(0, p + i);
#else
  return as_float8(convert_uint8(vload8(0, p + i)) << 16);
#endif
}

/* Element (b, row, h, d) of a tensor described by t = (offset, batch, row, head, dim, -, -, -). */
inline long st_index(long8 t, long b, long row, long h, long d) {
  return t.s0 + b * t.s1 + row * t.s2 + h * t.s3 + d * t.s4;
}

inline fa_mask mask_of(long shift, long left, long right) {
  fa_mask m;
  m.shift = shift;
  m.left = left;
  m.right = right;
  return m;
}

/* For a work-group of query rows [m0, m0 + FA_BR): the keys this work-item's row sees
   [*lo, *hi) (empty past the last row) and the keys any row of the group sees, up to *group_hi
   from *group_lo: the same for every work-item, so all of them meet the same barriers (both ends
   of a row's range are non-decreasing in the row). */
inline void query_tile_ranges(const fa_mask *mask, long m0, long row, int seqlen_q, int seqlen_k,
                              long *lo, long *hi, long *group_lo, long *group_hi) {
  *lo = 0;
  *hi = 0;
  if (row < seqlen_q) fa_mask_key_range(mask, row, seqlen_k, lo, hi);
  long lo_first, hi_first, lo_last, hi_last;
  const long last = min(m0 + FA_BR, (long)seqlen_q) - 1;
  fa_mask_key_range(mask, m0, seqlen_k, &lo_first, &hi_first);
  fa_mask_key_range(mask, last, seqlen_k, &lo_last, &hi_last);
  *group_lo = lo_first;
  *group_hi = hi_last;
}

/* The keys any row of the work-group's query rows [m0, m0 + FA_BR) sees, [*group_lo, *group_hi),
   as query_tile_ranges gives them. */
inline void group_key_range(const fa_mask *mask, long m0, int seqlen_q, int seqlen_k,
                            long *group_lo, long *group_hi) {
  long lo_unused, hi_unused;
  query_tile_ranges(mask, m0, m0, seqlen_q, seqlen_k, &lo_unused, &hi_unused, group_lo, group_hi);
}

/* Rows [r0, r0 + FA_BC) of two tensors of one head (rows at or past `rows` as zeros) into local
   memory, in float, by the work-group's FA_WG work-items together, element by element (a GPU's
   work-items take consecutive elements, so the reads coalesce). */
inline void stage_rows(__local float (*a)[FA_D], __global const st_t *ga, long8 as,
                       __local float (*c)[FA_D], __global const st_t *gc, long8 cs, long b, long h,
                       long r0, long rows, int il) {
  for (int e = il; e < FA_BC * FA_D; e += FA_WG) {
    const int i = e / FA_D, d = e % FA_D;
    const long row = r0 + i;
    const int in = row < rows;
    a[i][d] = in ? st_load(ga, st_index(as, b, row, h, d)) : 0.0f;
    c[i][d] = in ? st_load(gc, st_index(cs, b, row, h, d)) : 0.0f;
  }
}

/* The same staging for the CPU kernels (FA_CPU): each work-item takes whole rows and moves them 8
   elements at a time when the head dim is contiguous (st_load8), so the copy is vector code. */
inline void stage_rows_vec(__local float (*a)[FA_D], __global const st_t *ga, long8 as,
                           __local float (*c)[FA_D], __global const st_t *gc, long8 cs, long b,
                           long h, long r0, long rows, int il) {
  for (int i = il; i < FA_BC; i += FA_WG) {
    const long row = r0 + i;
    int d = 0;
    if (row >= rows) {
      for (; d < FA_D; ++d) a[i][d] = c[i][d] = 0.0f;
      continue;
    }
    const long ia = st_index(as, b, row, h, 0), ic = st_index(cs, b, row, h, 0);
    if (as.s4 == 1 && cs.s4 == 1)
      for (; d + 8 <= FA_D; d += 8) {
        vstore8(st_load8(ga, ia + d), 0, &a[i][d]);
        vstore8(st_load8(gc, ic + d), 0, &c[i][d]);
      }
    for (; d < FA_D; ++d) {
      a[i][d] = st_load(ga, ia + d * as.s4);
      c[i][d] = st_load(gc, ic + d * cs.s4);
    }
  }
}
