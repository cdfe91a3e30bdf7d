/*
 * cpu_gemm.c: the blocked fp32 tile product (see cpu_kernels.h), compiled once per instruction set.
 *
 * Every element of C is one chain of fused multiply-adds over p = 0 .. k-1, started from C or 0,
 * whatever the blocking or the instruction set: so the forward and backward passes, which share
 * this product, compute the same scores, and a build's results do not depend on the tile shapes'
 * split into blocks.
 *
 * The AVX-512, AVX2 and NEON builds use intrinsics: a block of 4 rows x up to 64 (AVX-512) or 16
 * (AVX2, NEON) columns of C in vector registers, each B row loaded once and fed to all four rows,
 * the last vector of a row masked (NEON: the columns past the last whole vector in scalar fused
 * multiply-adds, the same chain). The generic build is plain C the vectoriser understands
 * (intrinsics there would not help: gcc keeps that accumulator block in memory).
 */
#include "cpu_kernels.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(CPU_ISA_neon)
#include <arm_neon.h>
#include <math.h>
#endif

#if defined(__AVX512F__)
/* R rows (1..4) x V vectors of 16 columns (1..4), the last vector holding `tail` columns
   (1..16). R, V are constants at every call site, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void block_avx512(
    const int R, const int V, const int tail, int k, const float *restrict a, ptrdiff_t rs_a,
    ptrdiff_t cs_a, const float *restrict b, ptrdiff_t ldb, float *restrict c, ptrdiff_t ldc,
    int accumulate) {
  const __mmask16 last = (__mmask16)(tail >= 16 ? 0xffffu : (1u << tail) - 1u);
  __m512 acc[4][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const __mmask16 mk = v == V - 1 ? last : (__mmask16)0xffffu;
      acc[r][v] =
          accumulate ? _mm512_maskz_loadu_ps(mk, c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  for (int p = 0; p < k; ++p) {
    const float *restrict bp = b + p * ldb;
    __m512 bv[4];
    for (int v = 0; v < V; ++v)
      bv[v] = v == V - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * v) : _mm512_loadu_ps(bp + 16 * v);
    const float *ap = a + p * cs_a;
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(ap[r * rs_a]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const __mmask16 mk = v == V - 1 ? last : (__mmask16)0xffffu;
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk, acc[r][v]);
    }
}

/* The columns of R rows: 64 at a time, then one block of the 1-4 vectors left. */
static inline __attribute__((always_inline)) void rows_vec(const int R, int n, int k,
                                                           const float *a, ptrdiff_t rs_a,
                                                           ptrdiff_t cs_a, const float *b,
                                                           ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                                                           int accumulate) {
  int j0 = 0;
  for (; j0 + 64 <= n; j0 += 64)
    block_avx512(R, 4, 16, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
  const int left = n - j0;
  if (left <= 0) return;
  const int tail = left - ((left - 1) / 16) * 16;
  switch ((left + 15) / 16) {
    case 1:
      block_avx512(R, 1, tail, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
      break;
    case 2:
      block_avx512(R, 2, tail, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
      break;
    case 3:
      block_avx512(R, 3, tail, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
      break;
    default:
      block_avx512(R, 4, tail, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
      break;
  }
}

#elif defined(__AVX2__) && defined(__FMA__)
/* R rows (1..4) x V vectors of 8 columns (1..2), the last vector holding `tail` columns (1..8);
   4 x 2 accumulators leave registers for the B row and the broadcast. */
static inline __attribute__((always_inline)) void block_avx2(
    const int R, const int V, const int tail, int k, const float *restrict a, ptrdiff_t rs_a,
    ptrdiff_t cs_a, const float *restrict b, ptrdiff_t ldb, float *restrict c, ptrdiff_t ldc,
    int accumulate) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i last = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), lanes);
  const __m256i all = _mm256_set1_epi32(-1);
  __m256 acc[4][2];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      acc[r][v] = accumulate ? _mm256_maskload_ps(c + r * ldc + 8 * v, v == V - 1 ? last : all)
                             : _mm256_setzero_ps();
  for (int p = 0; p < k; ++p) {
    const float *restrict bp = b + p * ldb;
    __m256 bv[2];
    for (int v = 0; v < V; ++v)
      bv[v] = v == V - 1 ? _mm256_maskload_ps(bp + 8 * v, last) : _mm256_loadu_ps(bp + 8 * v);
    const float *ap = a + p * cs_a;
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(ap + r * rs_a);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      _mm256_maskstore_ps(c + r * ldc + 8 * v, v == V - 1 ? last : all, acc[r][v]);
}

static inline __attribute__((always_inline)) void rows_vec(const int R, int n, int k,
                                                           const float *a, ptrdiff_t rs_a,
                                                           ptrdiff_t cs_a, const float *b,
                                                           ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                                                           int accumulate) {
  int j0 = 0;
  for (; j0 + 16 <= n; j0 += 16)
    block_avx2(R, 2, 8, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
  const int left = n - j0;
  if (left <= 0) return;
  if (left > 8)
    block_avx2(R, 2, left - 8, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
  else
    block_avx2(R, 1, left, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
}

#elif defined(CPU_ISA_neon)
/* R rows (1..4) x V vectors of 4 columns (1..4); 16 accumulators of the 32 q registers. */
static inline __attribute__((always_inline)) void block_neon(
    const int R, const int V, int k, const float *restrict a, ptrdiff_t rs_a, ptrdiff_t cs_a,
    const float *restrict b, ptrdiff_t ldb, float *restrict c, ptrdiff_t ldc, int accumulate) {
  float32x4_t acc[4][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      acc[r][v] = accumulate ? vld1q_f32(c + r * ldc + 4 * v) : vdupq_n_f32(0.0f);
  for (int p = 0; p < k; ++p) {
    const float *restrict bp = b + p * ldb;
    float32x4_t bv[4];
    for (int v = 0; v < V; ++v) bv[v] = vld1q_f32(bp + 4 * v);
    const float *ap = a + p * cs_a;
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = vfmaq_n_f32(acc[r][v], bv[v], ap[r * rs_a]);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) vst1q_f32(c + r * ldc + 4 * v, acc[r][v]);
}

/* Columns past the last whole vector (NEON has no masked loads): the same single fused chain
   per element as the vector lanes. */
static void cols_scalar(const int R, int n0, int n, int k, const float *a, ptrdiff_t rs_a,
                        ptrdiff_t cs_a, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                        int accumulate) {
  for (int r = 0; r < R; ++r)
    for (int j = n0; j < n; ++j) {
      float acc = accumulate ? c[r * ldc + j] : 0.0f;
      for (int p = 0; p < k; ++p) acc = fmaf(a[r * rs_a + p * cs_a], b[p * ldb + j], acc);
      c[r * ldc + j] = acc;
    }
}

static inline __attribute__((always_inline)) void rows_vec(const int R, int n, int k,
                                                           const float *a, ptrdiff_t rs_a,
                                                           ptrdiff_t cs_a, const float *b,
                                                           ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                                                           int accumulate) {
  int j0 = 0;
  for (; j0 + 16 <= n; j0 += 16)
    block_neon(R, 4, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
  for (; j0 + 4 <= n; j0 += 4)
    block_neon(R, 1, k, a, rs_a, cs_a, b + j0, ldb, c + j0, ldc, accumulate);
  if (j0 < n) cols_scalar(R, j0, n, k, a, rs_a, cs_a, b, ldb, c, ldc, accumulate);
}

#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)) || defined(CPU_ISA_neon)
/* Blocks of 4 rows, then the 1-3 rows left, each by rows_vec of the build's vector width. */
void CPU_KFN(gemm)(int m, int n, int k, const float *a, ptrdiff_t rs_a, ptrdiff_t cs_a,
                   const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  int i0 = 0;
  for (; i0 + 4 <= m; i0 += 4)
    rows_vec(4, n, k, a + i0 * rs_a, rs_a, cs_a, b, ldb, c + i0 * ldc, ldc, accumulate);
  switch (m - i0) {
    case 3:
      rows_vec(3, n, k, a + i0 * rs_a, rs_a, cs_a, b, ldb, c + i0 * ldc, ldc, accumulate);
      break;
    case 2:
      rows_vec(2, n, k, a + i0 * rs_a, rs_a, cs_a, b, ldb, c + i0 * ldc, ldc, accumulate);
      break;
    case 1:
      rows_vec(1, n, k, a + i0 * rs_a, rs_a, cs_a, b, ldb, c + i0 * ldc, ldc, accumulate);
      break;
    default:
      break;
  }
}

#else
#define ROWS 4
#define WIDE 64
#define NARROW 16

static inline void block_4rows(const int nr, int k, const float *restrict a, ptrdiff_t rs_a,
                               ptrdiff_t cs_a, const float *restrict b, ptrdiff_t ldb,
                               float *restrict c, ptrdiff_t ldc, int accumulate) {
  float c0[WIDE], c1[WIDE], c2[WIDE], c3[WIDE];
  for (int j = 0; j < nr; ++j) {
    c0[j] = accumulate ? c[j] : 0.0f;
    c1[j] = accumulate ? c[ldc + j] : 0.0f;
    c2[j] = accumulate ? c[2 * ldc + j] : 0.0f;
    c3[j] = accumulate ? c[3 * ldc + j] : 0.0f;
  }
  for (int p = 0; p < k; ++p) {
    const float *restrict bp = b + p * ldb;
    const float *ap = a + p * cs_a;
    float a0 = ap[0], a1 = ap[rs_a], a2 = ap[2 * rs_a], a3 = ap[3 * rs_a];
    for (int j = 0; j < nr; ++j) {
      float bj = bp[j];
      c0[j] += a0 * bj;
      c1[j] += a1 * bj;
      c2[j] += a2 * bj;
      c3[j] += a3 * bj;
    }
  }
  for (int j = 0; j < nr; ++j) {
    c[j] = c0[j];
    c[ldc + j] = c1[j];
    c[2 * ldc + j] = c2[j];
    c[3 * ldc + j] = c3[j];
  }
}

/* The last m % 4 rows: same per-element summation order as block_4rows. */
static void block_1row(int nr, int k, const float *restrict a, ptrdiff_t cs_a,
                       const float *restrict b, ptrdiff_t ldb, float *restrict c, int accumulate) {
  float acc[WIDE];
  for (int j = 0; j < nr; ++j) acc[j] = accumulate ? c[j] : 0.0f;
  for (int p = 0; p < k; ++p) {
    float ap = a[p * cs_a];
    const float *restrict bp = b + p * ldb;
    for (int j = 0; j < nr; ++j) acc[j] += ap * bp[j];
  }
  for (int j = 0; j < nr; ++j) c[j] = acc[j];
}

void CPU_KFN(gemm)(int m, int n, int k, const float *a, ptrdiff_t rs_a, ptrdiff_t cs_a,
                   const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
  int i0 = 0;
  for (; i0 + ROWS <= m; i0 += ROWS) {
    const float *ai = a + i0 * rs_a;
    float *ci = c + i0 * ldc;
    int j0 = 0;
    for (; j0 + WIDE <= n; j0 += WIDE)
      block_4rows(WIDE, k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
    for (; j0 + NARROW <= n; j0 += NARROW)
      block_4rows(NARROW, k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
    if (j0 < n) block_4rows(n - j0, k, ai, rs_a, cs_a, b + j0, ldb, ci + j0, ldc, accumulate);
  }
  for (; i0 < m; ++i0)
    for (int j0 = 0; j0 < n; j0 += WIDE)
      block_1row(n - j0 < WIDE ? n - j0 : WIDE, k, a + i0 * rs_a, cs_a, b + j0, ldb,
                 c + i0 * ldc + j0, accumulate);
}
#endif
