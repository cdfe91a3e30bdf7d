/*
 * cpu_bf16dp.c: the forward's two tile products from bf16 operands with AVX512-BF16's vdpbf16ps
 * (see cpu_kernels.h: bf16_pairs, bf16_interleave, gemm_bf16). Compiled only into the
 * avx512bf16 kernel table, with -mavx512bf16 on top of the AVX-512 flags.
 *
 * vdpbf16ps multiplies pairs of bf16 values and adds both products to an fp32 lane: 64 FLOPs per
 * instruction against the 32 of an fp32 FMA, and no bf16 -> fp32 conversion of the operands. So
 * the operands are kept as pairs along the reduction dimension: a 32-bit word holds elements
 * (2p, 2p+1), the even one in the low half. For S = Q·Kᵀ the pairs run along the head dimension
 * (q rows and K rows are already laid out that way in memory); for O += P·V they run along the
 * keys, so two V rows are interleaved and P is rounded to bf16 (round to nearest even), as the
 * GPU kernels do for their P·V product.
 *
 * Numerics: a bf16 x bf16 product is exact in fp32 (8-bit significands), so each vdpbf16ps step
 * differs from two fp32 FMAs only in the order of its two additions (the odd element's product
 * first). The instruction treats denormal inputs as 0 and flushes denormal results (not
 * controlled by MXCSR). The P rounding is the one real difference from the fp32 kernels: each
 * weight keeps 8 significant bits, which the conformance suite's tolerance rule (twice the naive
 * bf16 computation's error) covers.
 */
#include <immintrin.h>
#include <math.h>

#include "core/math/softmax.h"
#include "cpu_kernels.h"

/* The lanes of the 16 columns from j that lie in [lo, hi). */
static inline __mmask16 cols_in(int j, int lo, int hi) {
  const int a = lo - j > 0 ? lo - j : 0, b = hi - j < 16 ? hi - j : 16;
  if (b <= a) return 0;
  return (__mmask16)(((1u << (b - a)) - 1u) << a);
}

/* x[0 .. 32) as 16 bf16 pairs (the second argument of vcvtne2ps2bf16 fills the low 16 values),
   the values from x[left] on read as 0 and not loaded. */
static inline __m512bh pairs_of(const float *x, int left) {
  return _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(cols_in(16, 0, left), x + 16),
                             _mm512_maskz_loadu_ps(cols_in(0, 0, left), x));
}

/* Rows of x (fp32) as bf16 pairs: dst[i * ldd + p] = bf16(x[2p]) | bf16(x[2p+1]) << 16, 32
   values per vcvtne2ps2bf16; an odd n gets a 0 high half in its last word. */
void cpu_bf16_pairs_avx512bf16(int rows, int n, const float *x, ptrdiff_t ldx, uint32_t *dst,
                               ptrdiff_t ldd) {
  for (int i = 0; i < rows; ++i) {
    const float *xr = x + (ptrdiff_t)i * ldx;
    uint32_t *dr = dst + (ptrdiff_t)i * ldd;
    int j = 0;
    for (; j + 32 <= n; j += 32) {
      /* The second argument fills the low 16 bf16 values: elements j .. j + 15 first. */
      __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + j + 16), _mm512_loadu_ps(xr + j));
      _mm512_storeu_si512((void *)(dr + j / 2), (__m512i)b);
    }
    if (j < n) {
      const int left = n - j; /* 1 .. 31 */
      const __m512bh b = pairs_of(xr + j, left);
      const int words = (left + 1) / 2;
      _mm512_mask_storeu_epi32(dr + j / 2, (__mmask16)((1u << words) - 1u), (__m512i)b);
    }
  }
}

/* 2^x for x <= 0 (x >= -160 by the caller's clamp, where the result rounds to 0): x = n + f,
   |f| <= 1/2, 2^f by a degree-5 polynomial fitted on Chebyshev nodes (relative error 2.3e-7
   evaluated in fp32), scaled by 2^n with vscalefps. P is rounded to bf16 next, so the error that
   counts is the row sum's, far below the bf16 rounding's. */
static inline __m512 exp2_avx512(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.3266970636323094e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675459936261177e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550742521882057e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022121727466583f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931469440460205f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
  return _mm512_scalef_ps(p, n);
}

void cpu_softmax_pairs_avx512bf16(int mr, int nc, const float *s, ptrdiff_t lds, float scale,
                                  const int *jlo, const int *jhi, float *m, float *l, float *o,
                                  ptrdiff_t ldo, int dv, uint32_t *p, ptrdiff_t ldp, int kt) {
  const float log2e = 1.44269504088896341f;
  const __m512 c = _mm512_set1_ps(scale * log2e), floor2 = _mm512_set1_ps(-160.0f);
  for (int i = 0; i < mr; ++i) {
    const float *restrict row = s + i * lds;
    /* A row's 32-column chunks (16 words each): consecutive, or a tile (1 KB) apart. */
    uint32_t *restrict prow = kt ? p + (ptrdiff_t)(i / 16) * kt * 256 + (i % 16) * 16 : p + i * ldp;
    const ptrdiff_t step = kt ? 256 : 16;
    const int end = kt ? 32 * kt : nc;
    int lo = jlo ? jlo[i] : 0, hi = jhi ? jhi[i] : nc;
    if (hi < lo) hi = lo;
    /* The raw scores' max times scale (> 0): the max of the scaled scores, bit for bit. */
    __m512 mx0 = _mm512_set1_ps(-INFINITY), mx1 = mx0;
    int j = lo;
    for (; j + 32 <= hi; j += 32) {
      mx0 = _mm512_max_ps(_mm512_loadu_ps(row + j), mx0);
      mx1 = _mm512_max_ps(_mm512_loadu_ps(row + j + 16), mx1);
    }
    for (; j < hi; j += 16) {
      const __mmask16 k = cols_in(j, lo, hi);
      mx0 = _mm512_mask_max_ps(mx0, k, _mm512_maskz_loadu_ps(k, row + j), mx0);
    }
    const float tile_max =
        hi > lo ? _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1)) * scale : -INFINITY;
    /* As softmax_tile: a tile that does not raise the max leaves (m, l) and O as they are. */
    const float alpha = tile_max <= m[i] && m[i] != -INFINITY
                            ? 1.0f
                            : fa_softmax_online_step(&m[i], &l[i], tile_max);
    const __m512 shift = _mm512_set1_ps(-fa_softmax_safe_max(m[i]) * log2e);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
    /* Every word of the row's pairs, the masked columns' as 0: whole visible chunks from column
       0 without masks (the masked form cost 1.25x in the softmax), then the rest. */
    j = 0;
    if (lo == 0)
      for (; j + 32 <= hi; j += 32) {
        const __m512 x0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + j), c, shift);
        const __m512 x1 = _mm512_fmadd_ps(_mm512_loadu_ps(row + j + 16), c, shift);
        const __m512 e0 = exp2_avx512(_mm512_max_ps(x0, floor2));
        const __m512 e1 = exp2_avx512(_mm512_max_ps(x1, floor2));
        sum0 = _mm512_add_ps(sum0, e0);
        sum1 = _mm512_add_ps(sum1, e1);
        _mm512_storeu_si512((void *)(prow + j / 32 * step), (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
      }
    for (; j < end; j += 32) {
      const __mmask16 k0 = cols_in(j, lo, hi), k1 = cols_in(j + 16, lo, hi);
      __m512 e0 = _mm512_setzero_ps(), e1 = e0;
      if (k0) {
        const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k0, row + j), c, shift);
        e0 = _mm512_maskz_mov_ps(k0, exp2_avx512(_mm512_max_ps(x, floor2)));
        sum0 = _mm512_add_ps(sum0, e0);
      }
      if (k1) {
        const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k1, row + j + 16), c, shift);
        e1 = _mm512_maskz_mov_ps(k1, exp2_avx512(_mm512_max_ps(x, floor2)));
        sum1 = _mm512_add_ps(sum1, e1);
      }
      const __m512i b = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
      const int words = kt || nc - j >= 32 ? 16 : (nc - j + 1) / 2;
      _mm512_mask_storeu_epi32(prow + j / 32 * step, (__mmask16)((1u << words) - 1u), b);
    }
    l[i] += _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
    if (alpha != 1.0f) {
      float *restrict orow = o + i * ldo;
      for (int x = 0; x < dv; ++x) orow[x] *= alpha;
    }
  }
}

/* Rows of x as bf16 pairs in tiles (cpu_amx.h's A layout): row i's pairs 16c .. 16c + 15 at
   dst + ((i / 16) * kt + c) * 256 + (i % 16) * 16, for c < kt; the pairs past n and the rows in
   [rows, rows_pad) are 0. */
void cpu_bf16_pairs_tiled_avx512bf16(int rows, int rows_pad, int n, const float *x, ptrdiff_t ldx,
                                     uint32_t *dst, int kt) {
  for (int i = 0; i < rows_pad; ++i) {
    const float *xr = x + (ptrdiff_t)(i < rows ? i : 0) * ldx; /* read only below rows */
    uint32_t *dr = dst + (ptrdiff_t)(i / 16) * kt * 256 + (i % 16) * 16;
    for (int c = 0; c < kt; ++c) {
      const int j = 32 * c;
      const __m512bh b = pairs_of(xr + j, i < rows ? n - j : 0);
      _mm512_storeu_si512((void *)(dr + c * 256), (__m512i)b);
    }
  }
}

/* Two bf16 rows interleaved: the pair (r0[c], r1[c]) (r1 NULL: a 0 high half) at
   dst[(c / 16) * step + c % 16]; step 16 is one row of n words, 256 puts each 16 in its own
   tile row (cpu_amx.h's layout; n a multiple of 16 there). */
void cpu_bf16_interleave_avx512bf16(const uint16_t *r0, const uint16_t *r1, int n, uint32_t *dst,
                                    ptrdiff_t step) {
  int c = 0;
  for (; c + 16 <= n; c += 16) {
    __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r0 + c)));
    __m512i b = r1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r1 + c)))
                   : _mm512_setzero_si512();
    _mm512_storeu_si512((void *)(dst + c / 16 * step),
                        _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
  for (; c < n; ++c)
    dst[c / 16 * step + c % 16] = (uint32_t)r0[c] | (r1 ? (uint32_t)r1[c] << 16 : 0u);
}

/* R rows (1..4) x V vectors of 16 columns (1..4), the last vector holding `tail` columns; as the
   fp32 gemm's block (cpu_gemm.c), with a pair of bf16 per broadcast word and per B word. */
static inline __attribute__((always_inline)) void block(const int R, const int V, const int tail,
                                                        int k2, const uint32_t *restrict a,
                                                        ptrdiff_t lda, const uint32_t *restrict b,
                                                        ptrdiff_t ldb, float *restrict c,
                                                        ptrdiff_t ldc, int accumulate) {
  const __mmask16 last = (__mmask16)(tail >= 16 ? 0xffffu : (1u << tail) - 1u);
  __m512 acc[4][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const __mmask16 mk = v == V - 1 ? last : (__mmask16)0xffffu;
      acc[r][v] =
          accumulate ? _mm512_maskz_loadu_ps(mk, c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  for (int p = 0; p < k2; ++p) {
    const uint32_t *restrict bp = b + p * ldb;
    __m512i bv[4];
    for (int v = 0; v < V; ++v)
      bv[v] = v == V - 1 ? _mm512_maskz_loadu_epi32(last, bp + 16 * v)
                         : _mm512_loadu_si512((const void *)(bp + 16 * v));
    for (int r = 0; r < R; ++r) {
      const __m512i ar = _mm512_set1_epi32((int)a[r * lda + p]);
      for (int v = 0; v < V; ++v)
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)ar, (__m512bh)bv[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const __mmask16 mk = v == V - 1 ? last : (__mmask16)0xffffu;
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk, acc[r][v]);
    }
}

static inline __attribute__((always_inline)) void rows_vec(const int R, int n, int k2,
                                                           const uint32_t *a, ptrdiff_t lda,
                                                           const uint32_t *b, ptrdiff_t ldb,
                                                           float *c, ptrdiff_t ldc,
                                                           int accumulate) {
  int j0 = 0;
  for (; j0 + 64 <= n; j0 += 64) block(R, 4, 16, k2, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
  const int left = n - j0;
  if (left <= 0) return;
  const int tail = left - ((left - 1) / 16) * 16;
  switch ((left + 15) / 16) {
    case 1:
      block(R, 1, tail, k2, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
      break;
    case 2:
      block(R, 2, tail, k2, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
      break;
    case 3:
      block(R, 3, tail, k2, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
      break;
    default:
      block(R, 4, tail, k2, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
      break;
  }
}

void cpu_gemm_bf16_avx512bf16(int m, int n, int k2, const uint32_t *a, ptrdiff_t lda,
                              const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                              int accumulate) {
  int i0 = 0;
  for (; i0 + 4 <= m; i0 += 4)
    rows_vec(4, n, k2, a + i0 * lda, lda, b, ldb, c + i0 * ldc, ldc, accumulate);
  switch (m - i0) {
    case 3:
      rows_vec(3, n, k2, a + i0 * lda, lda, b, ldb, c + i0 * ldc, ldc, accumulate);
      break;
    case 2:
      rows_vec(2, n, k2, a + i0 * lda, lda, b, ldb, c + i0 * ldc, ldc, accumulate);
      break;
    case 1:
      rows_vec(1, n, k2, a + i0 * lda, lda, b, ldb, c + i0 * ldc, ldc, accumulate);
      break;
    default:
      break;
  }
}
