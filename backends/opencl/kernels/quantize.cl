/*
 * quantize.cl: fa_quantize (ocl_quantize.c), in a program of its own: the prelude, the core/
 * headers for storage (dtype.h), the rotation (philox.h, hadamard.h) and FP8
 * (fp8.h), then this. FP_CONTRACT OFF: no product is fused into a sum, as on the host.
 * The host builds it with -cl-fp32-correctly-rounded-divide-sqrt where the device has that, so
 * `/` is IEEE division as on the CPU backend; the FP8 case is refused elsewhere.
 *
 * A work-group takes tiles of whole rows (one head's vector of one token) into local memory:
 * QTILE floats, QTILE / D rows of D elements. It widens them to fp32 and, when rotating, flips the
 * signs and runs the butterfly stages on them (core/math/hadamard.h's order: stage h = 1, 2, 4,
 * ..., each pair (i, i + h) with i & h == 0, all pairs of a stage between two barriers), so every
 * rotated element is the value the CPU backend computes. The rows are rotated in both passes
 * rather than kept, as on the CPU.
 *
 * Three kernels:
 *   fa_quant_descale  (one work-item per descale element) before the amax pass: 0; after it: the
 *                     descale, amax / FP8 max, or 1 where that is 0
 *   fa_quant_amax     (work-groups over the rows each descale element covers) the largest finite
 *                     |value|, reduced in the group and then across groups by atomic_max on the
 *                     bits: non-negative floats order as their bits do, and max is exact, so the
 *                     result does not depend on the order
 *   fa_quant_store    (work-groups over all rows) y = value / descale rounded to FP8, or the
 *                     value in y's float dtype
 */
#pragma OPENCL FP_CONTRACT OFF

#define QTILE 1024  /* local floats per tile: one row of FA_MAX_HEAD_DIM elements */
#define QWG_MAX 256 /* the most work-items per work-group the host asks for */
#define QF32_MAX 3.4028235e38f

/* Storage dtypes: x is Q_F32..Q_BF16, y any of them. */
enum { Q_F32 = 0, Q_F16 = 1, Q_BF16 = 2, Q_E4M3 = 3, Q_E5M2 = 4 };

/* A set of rows (b, t, h), numbered k = 0, 1, ... with h fastest, then t, then b, from
   (b0, t0, h0) over nt tokens and nh heads. */
typedef struct q_rows {
  long b0, t0, h0, nt, nh;
} q_rows;

inline long q_row_offset(q_rows rs, long k, long8 td) {
  const long h = rs.h0 + k % rs.nh;
  const long t = rs.t0 + k / rs.nh % rs.nt;
  const long b = rs.b0 + k / (rs.nh * rs.nt);
  return td.s0 + b * td.s1 + t * td.s2 + h * td.s3;
}

inline float q_load(__global const uchar *x, int xdt, long i) {
  if (xdt == Q_F32) return ((__global const float *)x)[i];
  if (xdt == Q_F16) return vload_half((size_t)i, (__global const half *)x);
  return fa_bf16_to_f32(((__global const ushort *)x)[i]);
}

/* The signs of the rotation (1: negative), for the work-group. */
inline void q_signs(__local uchar *neg, int d, int log2d, ulong seed) {
  if (log2d >= 0)
    for (int j = get_local_id(0); j < d; j += get_local_size(0))
      neg[j] = (uchar)fa_hadamard_sign_negative(seed, (uint)j);
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* Rows [k0, k0 + n) of rs from x (descriptor xd: offset, batch, token, head, dim strides) into
   tile[r * d + c] in fp32, rotated when log2d >= 0 (the final 1/sqrt(d) is the caller's, on
   reading). Every work-item of the group calls it. */
inline void q_tile_load(__local float *tile, __local const uchar *neg, __global const uchar *x,
                        long8 xd, int xdt, q_rows rs, long k0, int n, int d, int log2d) {
  const int lid = get_local_id(0), wg = get_local_size(0);
  barrier(CLK_LOCAL_MEM_FENCE); /* the previous tile has been read */
  for (int e = lid; e < n * d; e += wg) {
    const int r = e / d, c = e - r * d;
    const float v = q_load(x, xdt, q_row_offset(rs, k0 + r, xd) + c * xd.s4);
    tile[e] = log2d >= 0 && neg[c] ? -v : v;
  }
  if (log2d >= 0) {
    const int pairs = d / 2;
    for (int h = 1; h < d; h <<= 1) {
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int p = lid; p < n * pairs; p += wg) {
        const int r = p / pairs, q = p - r * pairs;
        const int i = r * d + q / h * 2 * h + q % h;
        const float a = tile[i], b = tile[i + h];
        tile[i] = a + b;
        tile[i + h] = a - b;
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

/* Descale element e of a [nb, nh, nblk] tensor (descriptor dd: offset, strides). */
inline long q_descale_index(long4 dd, long4 dshape, long e) {
  const long nh = dshape.s1, nblk = dshape.s2;
  return dd.s0 + e / (nh * nblk) * dd.s1 + e / nblk % nh * dd.s2 + e % nblk * dd.s3;
}

/* dshape: (nb, nh, nblk, tokens per block); finish 0: zero every element; 1: the amax bits there
   become the descale. */
__kernel void fa_quant_descale(__global float *descale, long4 dd, long4 dshape, float fp8_max,
                               int finish) {
  const long e = get_global_id(0);
  if (e >= dshape.s0 * dshape.s1 * dshape.s2) return;
  __global float *p = descale + q_descale_index(dd, dshape, e);
  if (!finish) {
    *p = 0.0f;
    return;
  }
  const float scale = *p / fp8_max;
  /* 1 where the block is all zeros (or its descale underflows): any value quantizes it alike */
  *p = scale > 0.0f ? scale : 1.0f;
}

/* Work-group (g, e): tiles [g * tiles_per_group, (g + 1) * tiles_per_group) of the rows descale
   element e covers. shape: (batch, seqlen, heads, head dim); log2d: log2(head dim) when rotating,
   else -1. */
__kernel void fa_quant_amax(__global const uchar *x, long8 xd, int xdt, long4 shape, int log2d,
                            ulong seed, __global float *descale, long4 dd, long4 dshape,
                            long tiles_per_group) {
  __local float tile[QTILE];
  __local uchar neg[QTILE];
  __local float red[QWG_MAX];
  const long e = get_group_id(1);
  const long nb = dshape.s0, nh = dshape.s1, nblk = dshape.s2, block = dshape.s3;
  const long b = e / (nh * nblk), h = e / nblk % nh, blk = e % nblk;
  q_rows rs;
  rs.b0 = nb > 1 ? b : 0;
  rs.h0 = nh > 1 ? h : 0;
  rs.t0 = blk * block;
  rs.nt = min(block, shape.s1 - rs.t0);
  rs.nh = nh > 1 ? 1 : shape.s2;
  const long rows = (nb > 1 ? 1 : shape.s0) * rs.nt * rs.nh;
  const int d = (int)shape.s3, per_tile = QTILE / d;
  const long tiles = (rows + per_tile - 1) / per_tile;
  const long first = get_group_id(0) * tiles_per_group;
  const long last = min(first + tiles_per_group, tiles);
  if (first >= last) return; /* the whole group: no barrier is left waiting */
  q_signs(neg, d, log2d, seed);
  const int lid = get_local_id(0), wg = get_local_size(0);
  const float norm = log2d >= 0 ? fa_hadamard_norm((uint)log2d) : 1.0f;
  float amax = 0.0f;
  for (long tl = first; tl < last; ++tl) {
    const long k0 = tl * per_tile;
    const int n = (int)min((long)per_tile, rows - k0);
    q_tile_load(tile, neg, x, xd, xdt, rs, k0, n, d, log2d);
    for (int i = lid; i < n * d; i += wg) {
      const float a = fabs(log2d >= 0 ? tile[i] * norm : tile[i]);
      if (a > amax && a <= QF32_MAX) amax = a; /* NaN and infinities left out */
    }
  }
  red[lid] = amax;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid != 0) return;
  for (int i = 1; i < wg; ++i)
    if (red[i] > amax) amax = red[i];
  if (amax > 0.0f)
    atomic_max((volatile __global uint *)(descale + q_descale_index(dd, dshape, e)), as_uint(amax));
}

/* Work-group g: tiles [g * tiles_per_group, (g + 1) * tiles_per_group) of all rows. descale is
   NULL for float y. */
__kernel void fa_quant_store(__global const uchar *x, long8 xd, int xdt, long4 shape, int log2d,
                             ulong seed, __global uchar *y, long8 yd, int ydt,
                             __global const float *descale, long4 dd, long4 dshape,
                             long tiles_per_group) {
  __local float tile[QTILE];
  __local uchar neg[QTILE];
  q_rows rs;
  rs.b0 = rs.t0 = rs.h0 = 0;
  rs.nt = shape.s1;
  rs.nh = shape.s2;
  const long rows = shape.s0 * shape.s1 * shape.s2;
  const int d = (int)shape.s3, per_tile = QTILE / d;
  const long tiles = (rows + per_tile - 1) / per_tile;
  const long first = get_group_id(0) * tiles_per_group;
  const long last = min(first + tiles_per_group, tiles);
  if (first >= last) return;
  q_signs(neg, d, log2d, seed);
  const int lid = get_local_id(0), wg = get_local_size(0);
  const float norm = log2d >= 0 ? fa_hadamard_norm((uint)log2d) : 1.0f;
  const long nb = dshape.s0, nh = dshape.s1, nblk = dshape.s2, block = dshape.s3;
  for (long tl = first; tl < last; ++tl) {
    const long k0 = tl * per_tile;
    const int n = (int)min((long)per_tile, rows - k0);
    q_tile_load(tile, neg, x, xd, xdt, rs, k0, n, d, log2d);
    for (int i = lid; i < n * d; i += wg) {
      const int r = i / d, c = i - r * d;
      const long k = k0 + r;
      const long at = q_row_offset(rs, k, yd) + c * yd.s4;
      const float v = log2d >= 0 ? tile[i] * norm : tile[i];
      if (ydt == Q_F32) {
        ((__global float *)y)[at] = v;
      } else if (ydt == Q_F16) {
        ((__global ushort *)y)[at] = fa_f32_to_f16(v);
      } else if (ydt == Q_BF16) {
        ((__global ushort *)y)[at] = fa_f32_to_bf16(v);
      } else {
        const long h = k % shape.s2, t = k / shape.s2 % shape.s1, b = k / (shape.s2 * shape.s1);
        const long e = ((nb > 1 ? b : 0) * nh + (nh > 1 ? h : 0)) * nblk + t / block;
        const float q = v / descale[q_descale_index(dd, dshape, e)];
        y[at] = ydt == Q_E4M3 ? fa_f32_to_f8e4m3(q) : fa_f32_to_f8e5m2(q);
      }
    }
  }
}
