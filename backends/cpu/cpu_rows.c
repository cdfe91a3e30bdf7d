/*
 * cpu_rows.c: the two products of the few-query-rows (decode) path, compiled once per instruction
 * set like cpu_gemm.c (see cpu_kernels.h for what they compute).
 *
 * Decoding attends 1 query row (or, with GQA packed, the few rows of one KV head's query heads)
 * to thousands of keys: each K/V element is used by only those rows, so the tile path's work per
 * key tile (convert the tile to fp32, transpose K into scratch, 4-row micro-kernels mostly
 * idle) costs more than the arithmetic. Here the K and V rows are read where they are, converted
 * in registers (vcvtph2ps for f16, a 16-bit shift for bf16), and used by every query row while
 * they are in registers.
 *
 * dot_rows: per group of keys, NACC accumulators (keys x rows) run over the head dim lane-wise,
 * then one transposing reduction turns the NACC vectors into NACC scores. pv_rows: per block of
 * output columns, the rows' accumulators stay in registers over all keys of the block.
 * dot_heads, pv_heads (MHA, one row per head): the same, key by key with the NACC accumulators
 * over heads instead of keys, and each head's output row updated in L1 key by key; the prefetch
 * of a later key's row goes head by head beside the head it computes.
 *
 * Summation order: each score is a lane-wise FMA chain over head-dim chunks (two chains, added at
 * the end, in a group of one row) and a fixed tree over lanes, whatever the key's position in its
 * group; each output column sums the keys in key order. bf16 rows at head dims that are multiples
 * of 32 (AVX-512) are read 32 elements at a time as their even and odd halves, each score's chain
 * then running over those halves. Head dims are multiples of 16 (decide() sends others to the
 * tile path), so no chunk is partial for any vector width here (16, 8, 4 or 1 lanes).
 */
#include <stdint.h>

#include "core/math/dtype.h"
#include "cpu_kernels.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(CPU_ISA_neon)
#include <arm_neon.h>
#endif

#define INLINE static inline __attribute__((always_inline))

/* ---- The vector operations, one set per instruction set ---------------------------------- */
#if defined(__AVX512F__)
#define VL 16 /* fp32 lanes per vector */
/* NACC: accumulators of one dot_rows group (one reduction turns 16 vectors into 16 sums). */
#define NACC 16
#define KEYS_PER_PASS 4
typedef __m512 vf;
INLINE vf v_zero(void) { return _mm512_setzero_ps(); }
INLINE vf v_f32(const float *p) { return _mm512_loadu_ps(p); }
INLINE vf v_f16(const uint16_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
INLINE vf v_bf16(const uint16_t *p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
INLINE vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
INLINE vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
INLINE vf v_set1(float x) { return _mm512_set1_ps(x); }
INLINE void v_store(float *p, vf x) { _mm512_storeu_ps(p, x); }
/* out[i] = the sum of a[i]'s lanes: 256-bit halves, then 128-bit quarters, then pairs of pairs,
   then pairs, each step adding two vectors' worth of partial sums into one. */
INLINE void v_sums(vf a[NACC], float out[NACC]) {
  vf b[8], c[4];
  for (int i = 0; i < 8; ++i)
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], 0x44),
                         _mm512_shuffle_f32x4(a[i], a[i + 8], 0xee));
  for (int i = 0; i < 4; ++i)
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[i], b[i + 4], 0x88),
                         _mm512_shuffle_f32x4(b[i], b[i + 4], 0xdd));
  /* c[k]'s 128-bit lane L holds 4 partial sums of a[k + {0, 8, 4, 12}[L]]. */
  vf e0 = _mm512_add_ps(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
  vf e1 = _mm512_add_ps(_mm512_unpacklo_ps(c[2], c[3]), _mm512_unpackhi_ps(c[2], c[3]));
  __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(e0), _mm512_castps_pd(e1));
  __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(e0), _mm512_castps_pd(e1));
  vf f = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  /* f's lane 4L + k is the sum of a[k + {0, 8, 4, 12}[L]]: swap the middle 128-bit lanes. */
  _mm512_storeu_ps(out, _mm512_shuffle_f32x4(f, f, 0xd8));
}

/* bf16 rows 32 elements at a time: a 64-byte load's 32-bit lane i holds elements 2i (low half)
   and 2i + 1 (high half), and a bf16 is the high half of its fp32, so one shift and one mask
   widen all 32 (two instructions where element order costs four). The fp32 side meets them in
   the same split: even columns in one vector, odd in the other. */
#define HAVE_BF16_PAIRS 1
INLINE void v_bf16_pairs(const uint16_t *p, vf *even, vf *odd) {
  const __m512i w = _mm512_loadu_si512((const void *)p);
  *even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  *odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}
/* fp32 elements p[0..32) as their even and odd halves, and back. */
INLINE void v_split_pairs(const float *p, vf *even, vf *odd) {
  const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const vf lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
  *even = _mm512_permutex2var_ps(lo, ie, hi);
  *odd = _mm512_permutex2var_ps(lo, io, hi);
}
INLINE void v_join_pairs(float *p, vf even, vf odd) {
  const __m512i il = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i ih = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  _mm512_storeu_ps(p, _mm512_permutex2var_ps(even, il, odd));
  _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(even, ih, odd));
}

#elif defined(__AVX2__) && defined(__FMA__)
#define VL 8
#define NACC 8 /* 16 ymm registers: 8 accumulators leave room for the loads */
#define KEYS_PER_PASS 8
typedef __m256 vf;
INLINE vf v_zero(void) { return _mm256_setzero_ps(); }
INLINE vf v_f32(const float *p) { return _mm256_loadu_ps(p); }
INLINE vf v_f16(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
INLINE vf v_bf16(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
INLINE vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
INLINE vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
INLINE vf v_set1(float x) { return _mm256_set1_ps(x); }
INLINE void v_store(float *p, vf x) { _mm256_storeu_ps(p, x); }
INLINE void v_sums(vf a[NACC], float out[NACC]) {
  vf b[4];
  for (int i = 0; i < 4; ++i)
    b[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[i], a[i + 4], 0x20),
                         _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
  /* b[k]'s 128-bit lane L holds 4 partial sums of a[k + 4L]. */
  vf e0 = _mm256_add_ps(_mm256_unpacklo_ps(b[0], b[1]), _mm256_unpackhi_ps(b[0], b[1]));
  vf e1 = _mm256_add_ps(_mm256_unpacklo_ps(b[2], b[3]), _mm256_unpackhi_ps(b[2], b[3]));
  __m256d lo = _mm256_unpacklo_pd(_mm256_castps_pd(e0), _mm256_castps_pd(e1));
  __m256d hi = _mm256_unpackhi_pd(_mm256_castps_pd(e0), _mm256_castps_pd(e1));
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi)));
}

#elif defined(CPU_ISA_neon) /* the aarch64 build (CMakeLists.txt) */
#define VL 4
#define NACC 8 /* two reductions of 4; 32 q registers leave plenty for the loads */
#define KEYS_PER_PASS 8
typedef float32x4_t vf;
INLINE vf v_zero(void) { return vdupq_n_f32(0.0f); }
INLINE vf v_f32(const float *p) { return vld1q_f32(p); }
INLINE vf v_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
INLINE vf v_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
INLINE vf v_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
INLINE vf v_add(vf a, vf b) { return vaddq_f32(a, b); }
INLINE vf v_set1(float x) { return vdupq_n_f32(x); }
INLINE void v_store(float *p, vf x) { vst1q_f32(p, x); }
INLINE void v_sums(vf a[NACC], float out[NACC]) {
  for (int h = 0; h < NACC; h += 4) /* pairwise adds: lanes (0+1)+(2+3) of each vector */
    vst1q_f32(out + h, vpaddq_f32(vpaddq_f32(a[h], a[h + 1]), vpaddq_f32(a[h + 2], a[h + 3])));
}

#else
/* Plain C with GNU vector extensions (gcc and clang, any architecture): 4 lanes, which the
   compiler lowers to the target's SIMD (SSE2 on x86-64) or to scalar code. With one lane per
   vector the generic build's GQA decode would be slower than its tile path. */
#include <string.h>
#define VL 4
#define NACC 8
#define KEYS_PER_PASS 8
typedef float vf __attribute__((vector_size(16)));
typedef uint32_t vu __attribute__((vector_size(16)));
INLINE vf v_zero(void) { return (vf){0.0f, 0.0f, 0.0f, 0.0f}; }
INLINE vf v_f32(const float *p) {
  vf x;
  memcpy(&x, p, sizeof x);
  return x;
}
INLINE vf v_f16(const uint16_t *p) {
  return (vf){fa_f16_to_f32(p[0]), fa_f16_to_f32(p[1]), fa_f16_to_f32(p[2]), fa_f16_to_f32(p[3])};
}
INLINE vf v_bf16(const uint16_t *p) {
  vu w = {p[0], p[1], p[2], p[3]};
  w <<= 16;
  vf x;
  memcpy(&x, &w, sizeof x);
  return x;
}
INLINE vf v_fma(vf a, vf b, vf c) { return c + a * b; }
INLINE vf v_add(vf a, vf b) { return a + b; }
INLINE vf v_set1(float x) { return (vf){x, x, x, x}; }
INLINE void v_store(float *p, vf x) { memcpy(p, &x, sizeof x); }
/* The lanes in pairs, (0 + 1) + (2 + 3), as the NEON build's pairwise adds. */
INLINE void v_sums(vf a[NACC], float out[NACC]) {
  for (int i = 0; i < NACC; ++i) out[i] = (a[i][0] + a[i][1]) + (a[i][2] + a[i][3]);
}
#endif

/* Elements c .. c + VL - 1 of a K/V row of the storage dtype DT (CPU_ELEM_*), to fp32. */
INLINE vf v_elems(const int DT, const void *row, int c) {
  if (DT == CPU_ELEM_F32) return v_f32((const float *)row + c);
  if (DT == CPU_ELEM_F16) return v_f16((const uint16_t *)row + c);
  return v_bf16((const uint16_t *)row + c);
}

/* Key j's lines of pf (none when pf is NULL). */
INLINE void prefetch_key(const cpu_rows_prefetch *pf, int j) {
  if (!pf) return;
  const char *r = pf->row[j] + pf->offset;
  for (int x = 0; x < pf->lines; ++x) __builtin_prefetch(r + 64 * x, 0, 2);
}

/* ---- dot_rows ------------------------------------------------------------------------------ */

/* RC rows against KG = NACC / RC keys: out[kk * RC + r] = q_r · k_kk. The keys go through the
   head dim KEYS_PER_PASS at a time, so their row addresses stay in general registers (with all 16
   at once gcc kept them in vector registers and moved one out for every load, on the FMA port).
   With one row, each key's sum runs as two chains (even and odd chunks, added at the end) to keep
   enough FMAs in flight. */
INLINE void dot_group(const int RC, const int DT, int d, const float *q, ptrdiff_t ldq,
                      const void *const *k, float out[NACC]) {
  const int KG = NACC / RC, P = KG < KEYS_PER_PASS ? KG : KEYS_PER_PASS;
  const int SPLIT = RC == 1 && NACC >= 16 ? 2 : 1;
  vf acc[NACC];
  for (int kp = 0; kp < KG; kp += P) {
    const void *kr[KEYS_PER_PASS];
    for (int kk = 0; kk < P; ++kk) kr[kk] = k[kp + kk];
    vf a[2 * NACC];
    for (int x = 0; x < SPLIT * P * RC; ++x) a[x] = v_zero();
    int c = 0;
    for (; c + SPLIT * VL <= d; c += SPLIT * VL)
      for (int h = 0; h < SPLIT; ++h)
        for (int kk = 0; kk < P; ++kk) {
          const vf kv = v_elems(DT, kr[kk], c + h * VL);
          for (int r = 0; r < RC; ++r) {
            vf *t = &a[(h * P + kk) * RC + r];
            *t = v_fma(v_f32(q + r * ldq + c + h * VL), kv, *t);
          }
        }
    for (; c < d; c += VL) /* SPLIT = 2 and an odd number of chunks: the last one */
      for (int kk = 0; kk < P; ++kk) {
        const vf kv = v_elems(DT, kr[kk], c);
        for (int r = 0; r < RC; ++r)
          a[kk * RC + r] = v_fma(v_f32(q + r * ldq + c), kv, a[kk * RC + r]);
      }
    for (int x = 0; x < P * RC; ++x)
      acc[kp * RC + x] = SPLIT == 2 ? v_add(a[x], a[P * RC + x]) : a[x];
  }
  v_sums(acc, out);
}

#ifdef HAVE_BF16_PAIRS
/* dot_group for bf16 keys and a head dim that is a multiple of 32, q already split into pairs
   (qp: per 32 columns, the 16 even ones then the 16 odd ones): each key's 32 elements widened by
   v_bf16_pairs meet q's halves as they are. With one row the even and odd products run as two
   chains (added at the end), else as one. */
INLINE void dot_group_bf16_pairs(const int RC, int d, const float *qp, ptrdiff_t ldq,
                                 const void *const *k, float out[NACC]) {
  const int KG = NACC / RC, P = KG < KEYS_PER_PASS ? KG : KEYS_PER_PASS;
  const int SPLIT = RC == 1 ? 2 : 1;
  vf acc[NACC];
  for (int kp = 0; kp < KG; kp += P) {
    const uint16_t *kr[KEYS_PER_PASS];
    for (int kk = 0; kk < P; ++kk) kr[kk] = (const uint16_t *)k[kp + kk];
    vf a[2 * NACC];
    for (int x = 0; x < SPLIT * P * RC; ++x) a[x] = v_zero();
    for (int c = 0; c < d; c += 2 * VL)
      for (int kk = 0; kk < P; ++kk) {
        vf even, odd;
        v_bf16_pairs(kr[kk] + c, &even, &odd);
        for (int r = 0; r < RC; ++r) {
          vf *te = &a[kk * RC + r], *to = &a[(SPLIT - 1) * P * RC + kk * RC + r];
          *te = v_fma(v_f32(qp + r * ldq + c), even, *te);
          *to = v_fma(v_f32(qp + r * ldq + c + VL), odd, *to);
        }
      }
    for (int x = 0; x < P * RC; ++x)
      acc[kp * RC + x] = SPLIT == 2 ? v_add(a[x], a[P * RC + x]) : a[x];
  }
  v_sums(acc, out);
}

#endif

/* An element kind of this file only: bf16 keys read as their even and odd halves against q split
   into pairs (dot_bf16_pairs). */
#define ELEM_BF16_PAIRS (-1)

/* One group of dot_rc: the pair form for ELEM_BF16_PAIRS. */
INLINE void dot_group_any(const int RC, const int DT, int d, const float *q, ptrdiff_t ldq,
                          const void *const *k, float out[NACC]) {
#ifdef HAVE_BF16_PAIRS
  if (DT == ELEM_BF16_PAIRS) {
    dot_group_bf16_pairs(RC, d, q, ldq, k, out);
    return;
  }
#endif
  dot_group(RC, DT, d, q, ldq, k, out);
}

INLINE void dot_rc(const int RC, const int DT, int nc, int d, const float *q, ptrdiff_t ldq,
                   const void *const *krow, float *s, ptrdiff_t lds, const cpu_rows_prefetch *pf) {
  const int KG = NACC / RC;
  for (int j0 = 0; j0 < nc; j0 += KG) {
    for (int kk = 0; kk < KG && j0 + kk < nc; ++kk) prefetch_key(pf, j0 + kk);
    const void *k[NACC];
    /* A last, short group repeats the last key; its extra sums are not stored. */
    for (int kk = 0; kk < KG; ++kk) k[kk] = krow[j0 + kk < nc ? j0 + kk : nc - 1];
    float out[NACC];
    dot_group_any(RC, DT, d, q, ldq, k, out);
    const int n = nc - j0 < KG ? nc - j0 : KG;
    for (int kk = 0; kk < n; ++kk)
      for (int r = 0; r < RC; ++r) s[r * lds + j0 + kk] = out[kk * RC + r];
  }
}

INLINE void dot_dt(const int DT, int rows, int nc, int d, const float *q, ptrdiff_t ldq,
                   const void *const *krow, float *s, ptrdiff_t lds, const cpu_rows_prefetch *pf) {
  /* Rows in groups of 8, 4, 2, 1 (each group re-reads the block's keys, from L1); the first group
     asks for pf. */
  int r0 = 0;
  for (; rows - r0 >= 8; r0 += 8, pf = NULL)
    dot_rc(8, DT, nc, d, q + r0 * ldq, ldq, krow, s + r0 * lds, lds, pf);
  if (rows - r0 >= 4) {
    dot_rc(4, DT, nc, d, q + r0 * ldq, ldq, krow, s + r0 * lds, lds, pf);
    r0 += 4;
    pf = NULL;
  }
  if (rows - r0 >= 2) {
    dot_rc(2, DT, nc, d, q + r0 * ldq, ldq, krow, s + r0 * lds, lds, pf);
    r0 += 2;
    pf = NULL;
  }
  if (rows - r0 >= 1) dot_rc(1, DT, nc, d, q + r0 * ldq, ldq, krow, s + r0 * lds, lds, pf);
}

#ifdef HAVE_BF16_PAIRS
/* dot_dt over bf16 keys in their pair form: q split into pairs 8 rows at a time (a head dim of at
   most CPU_ROWS_PAIRS_D), each 8 rows then grouped by dot_dt as any rows are. */
#define CPU_ROWS_PAIRS_D 256
INLINE void dot_bf16_pairs(int rows, int nc, int d, const float *q, ptrdiff_t ldq,
                           const void *const *krow, float *s, ptrdiff_t lds,
                           const cpu_rows_prefetch *pf) {
  float qp[8 * CPU_ROWS_PAIRS_D] __attribute__((aligned(64)));
  for (int r0 = 0; r0 < rows; r0 += 8) {
    const int rc = rows - r0 < 8 ? rows - r0 : 8;
    for (int r = 0; r < rc; ++r)
      for (int c = 0; c < d; c += 2 * VL) {
        vf even, odd;
        v_split_pairs(q + (r0 + r) * ldq + c, &even, &odd);
        v_store(qp + r * d + c, even);
        v_store(qp + r * d + c + VL, odd);
      }
    dot_dt(ELEM_BF16_PAIRS, rc, nc, d, qp, d, krow, s + r0 * lds, lds, pf);
    pf = NULL;
  }
}
#endif

/* The head dim as a constant for the common 64 and 128: the head-dim loop of a group is then
   unrolled whole (it runs only 2-8 chunks, so its loop overhead and the chains' drain would be a
   large part of the group's time). Same operations in the same order as the general loop. */
INLINE void dot_d(const int DT, int rows, int nc, int d, const float *q, ptrdiff_t ldq,
                  const void *const *krow, float *s, ptrdiff_t lds, const cpu_rows_prefetch *pf) {
  if (d == 128)
    dot_dt(DT, rows, nc, 128, q, ldq, krow, s, lds, pf);
  else if (d == 64)
    dot_dt(DT, rows, nc, 64, q, ldq, krow, s, lds, pf);
  else
    dot_dt(DT, rows, nc, d, q, ldq, krow, s, lds, pf);
}

void CPU_KFN(dot_rows)(int rows, int nc, int d, const float *q, ptrdiff_t ldq, int dtype,
                       const void *const *krow, float *s, ptrdiff_t lds,
                       const cpu_rows_prefetch *pf) {
  if (nc <= 0) return;
#ifdef HAVE_BF16_PAIRS
  if (dtype == CPU_ELEM_BF16 && d % (2 * VL) == 0 && d <= CPU_ROWS_PAIRS_D) {
    dot_bf16_pairs(rows, nc, d, q, ldq, krow, s, lds, pf);
    return;
  }
#endif
  if (dtype == CPU_ELEM_F16)
    dot_d(CPU_ELEM_F16, rows, nc, d, q, ldq, krow, s, lds, pf);
  else if (dtype == CPU_ELEM_BF16)
    dot_d(CPU_ELEM_BF16, rows, nc, d, q, ldq, krow, s, lds, pf);
  else
    dot_d(CPU_ELEM_F32, rows, nc, d, q, ldq, krow, s, lds, pf);
}

/* ---- pv_rows ------------------------------------------------------------------------------- */

/* RC rows x W vectors of output columns from c0: o += P·V over the nc keys. */
INLINE void pv_block(const int RC, const int W, const int DT, int nc, const float *p, ptrdiff_t ldp,
                     const void *const *vrow, int c0, float *o, ptrdiff_t ldo,
                     const cpu_rows_prefetch *pf) {
  vf acc[NACC];
  for (int r = 0; r < RC; ++r)
    for (int w = 0; w < W; ++w) acc[r * W + w] = v_f32(o + r * ldo + c0 + w * VL);
  const size_t esz = DT == CPU_ELEM_F32 ? sizeof(float) : sizeof(uint16_t);
  for (int j = 0; j < nc; ++j) {
    /* The row's columns from c0 as one pointer, so the W loads are constant offsets from it (with
       c0 + w * VL as indices gcc keeps W index registers and spills them). */
    prefetch_key(pf, j);
    const void *row = (const char *)vrow[j] + (size_t)c0 * esz;
    for (int w = 0; w < W; ++w) {
      const vf vv = v_elems(DT, row, w * VL);
      for (int r = 0; r < RC; ++r)
        acc[r * W + w] = v_fma(v_set1(p[r * ldp + j]), vv, acc[r * W + w]);
    }
  }
  for (int r = 0; r < RC; ++r)
    for (int w = 0; w < W; ++w) v_store(o + r * ldo + c0 + w * VL, acc[r * W + w]);
}

#ifdef HAVE_BF16_PAIRS
/* pv_block for bf16 rows and an even W: each 32 columns widened as their even and odd halves
   (v_bf16_pairs), o's columns split the same way for the block and joined back after it. Every
   column sums the same products in the same order as pv_block. */
INLINE void pv_block_bf16_pairs(const int RC, const int W, int nc, const float *p, ptrdiff_t ldp,
                                const void *const *vrow, int c0, float *o, ptrdiff_t ldo,
                                const cpu_rows_prefetch *pf) {
  vf acc[NACC];
  for (int r = 0; r < RC; ++r)
    for (int w = 0; w < W; w += 2)
      v_split_pairs(o + r * ldo + c0 + w * VL, &acc[r * W + w], &acc[r * W + w + 1]);
  for (int j = 0; j < nc; ++j) {
    prefetch_key(pf, j);
    const uint16_t *row = (const uint16_t *)vrow[j] + c0;
    for (int w = 0; w < W; w += 2) {
      vf even, odd;
      v_bf16_pairs(row + w * VL, &even, &odd);
      for (int r = 0; r < RC; ++r) {
        const vf pj = v_set1(p[r * ldp + j]);
        acc[r * W + w] = v_fma(pj, even, acc[r * W + w]);
        acc[r * W + w + 1] = v_fma(pj, odd, acc[r * W + w + 1]);
      }
    }
  }
  for (int r = 0; r < RC; ++r)
    for (int w = 0; w < W; w += 2)
      v_join_pairs(o + r * ldo + c0 + w * VL, acc[r * W + w], acc[r * W + w + 1]);
}
#endif

/* One block of pv_rc: the bf16 pair form where it applies. */
INLINE void pv_any(const int RC, const int W, const int DT, int nc, const float *p, ptrdiff_t ldp,
                   const void *const *vrow, int c0, float *o, ptrdiff_t ldo,
                   const cpu_rows_prefetch *pf) {
#ifdef HAVE_BF16_PAIRS
  if (DT == CPU_ELEM_BF16 && W % 2 == 0) {
    pv_block_bf16_pairs(RC, W, nc, p, ldp, vrow, c0, o, ldo, pf);
    return;
  }
#endif
  pv_block(RC, W, DT, nc, p, ldp, vrow, c0, o, ldo, pf);
}

/* The dv / VL column vectors in blocks of WMAX (RC x WMAX accumulators, at most NACC), then the
   rest (fewer than WMAX) in blocks of 4, 2, 1; the first block asks for pf. */
INLINE void pv_rc(const int RC, const int DT, int nc, int dv, const float *p, ptrdiff_t ldp,
                  const void *const *vrow, float *o, ptrdiff_t ldo, const cpu_rows_prefetch *pf) {
  const int WMAX = NACC / RC > 8 ? 8 : NACC / RC;
  const int nv = dv / VL;
  int v0 = 0;
  for (; nv - v0 >= WMAX; v0 += WMAX, pf = NULL)
    pv_any(RC, WMAX, DT, nc, p, ldp, vrow, v0 * VL, o, ldo, pf);
  if (WMAX > 4 && nv - v0 >= 4) {
    pv_any(RC, 4, DT, nc, p, ldp, vrow, v0 * VL, o, ldo, pf);
    v0 += 4;
    pf = NULL;
  }
  if (WMAX > 2 && nv - v0 >= 2) {
    pv_any(RC, 2, DT, nc, p, ldp, vrow, v0 * VL, o, ldo, pf);
    v0 += 2;
    pf = NULL;
  }
  if (WMAX > 1 && nv - v0 >= 1) pv_any(RC, 1, DT, nc, p, ldp, vrow, v0 * VL, o, ldo, pf);
}

INLINE void pv_dt(const int DT, int rows, int nc, int dv, const float *p, ptrdiff_t ldp,
                  const void *const *vrow, float *o, ptrdiff_t ldo, const cpu_rows_prefetch *pf) {
  int r0 = 0;
  for (; rows - r0 >= 8; r0 += 8, pf = NULL)
    pv_rc(8, DT, nc, dv, p + r0 * ldp, ldp, vrow, o + r0 * ldo, ldo, pf);
  if (rows - r0 >= 4) {
    pv_rc(4, DT, nc, dv, p + r0 * ldp, ldp, vrow, o + r0 * ldo, ldo, pf);
    r0 += 4;
    pf = NULL;
  }
  if (rows - r0 >= 2) {
    pv_rc(2, DT, nc, dv, p + r0 * ldp, ldp, vrow, o + r0 * ldo, ldo, pf);
    r0 += 2;
    pf = NULL;
  }
  if (rows - r0 >= 1) pv_rc(1, DT, nc, dv, p + r0 * ldp, ldp, vrow, o + r0 * ldo, ldo, pf);
}

void CPU_KFN(pv_rows)(int rows, int nc, int dv, const float *p, ptrdiff_t ldp, int dtype,
                      const void *const *vrow, float *o, ptrdiff_t ldo,
                      const cpu_rows_prefetch *pf) {
  if (nc <= 0) return;
  if (dtype == CPU_ELEM_F16)
    pv_dt(CPU_ELEM_F16, rows, nc, dv, p, ldp, vrow, o, ldo, pf);
  else if (dtype == CPU_ELEM_BF16)
    pv_dt(CPU_ELEM_BF16, rows, nc, dv, p, ldp, vrow, o, ldo, pf);
  else
    pv_dt(CPU_ELEM_F32, rows, nc, dv, p, ldp, vrow, o, ldo, pf);
}

/* ---- dot_heads, pv_heads ------------------------------------------------------------------- */

/* The lines of head h of key j's prefetch row (none when pf is NULL). */
INLINE void prefetch_head(const cpu_rows_prefetch *pf, int j, int h, ptrdiff_t stride) {
  if (!pf) return;
  const char *r = pf->row[j] + pf->offset + h * stride;
  for (int x = 0; x < pf->lines; ++x) __builtin_prefetch(r + 64 * x, 0, 2);
}

/* NACC heads of one key: out[x] = q_x · k_x, q_x at qh[x], k_x at k[x]. The chains of dot_group
   with one row (two per score on AVX-512, added at the end; the same lane tree), the heads in
   place of the keys. bf16 is widened 16 elements at a time: the pair form (q split per call)
   measured slower here. Each pass asks for its heads' lines of pf's key j (heads h0 + x). */
INLINE void dot_heads_group(const int DT, int d, const float *const *qh, const void *const *k,
                            float out[NACC], const cpu_rows_prefetch *pf, int j, int h0, int heads,
                            ptrdiff_t kstride) {
  const int P = NACC < KEYS_PER_PASS ? NACC : KEYS_PER_PASS;
  const int SPLIT = NACC >= 16 ? 2 : 1;
  vf acc[NACC];
  for (int kp = 0; kp < NACC; kp += P) {
    const void *kr[KEYS_PER_PASS];
    const float *qr[KEYS_PER_PASS];
    for (int kk = 0; kk < P; ++kk) {
      kr[kk] = k[kp + kk];
      qr[kk] = qh[kp + kk];
      if (h0 + kp + kk < heads) prefetch_head(pf, j, h0 + kp + kk, kstride);
    }
    vf a[2 * NACC];
    for (int x = 0; x < SPLIT * P; ++x) a[x] = v_zero();
    int c = 0;
    for (; c + SPLIT * VL <= d; c += SPLIT * VL)
      for (int h = 0; h < SPLIT; ++h)
        for (int kk = 0; kk < P; ++kk) {
          vf *t = &a[h * P + kk];
          *t = v_fma(v_f32(qr[kk] + c + h * VL), v_elems(DT, kr[kk], c + h * VL), *t);
        }
    for (; c < d; c += VL) /* SPLIT = 2 and an odd number of chunks: the last one */
      for (int kk = 0; kk < P; ++kk)
        a[kk] = v_fma(v_f32(qr[kk] + c), v_elems(DT, kr[kk], c), a[kk]);
    for (int x = 0; x < P; ++x) acc[kp + x] = SPLIT == 2 ? v_add(a[x], a[P + x]) : a[x];
  }
  v_sums(acc, out);
}

/* Key by key, its heads NACC at a time in address order. */
INLINE void dot_heads_dt(const int DT, int heads, int nc, int d, const float *q, ptrdiff_t ldq,
                         const void *const *krow, ptrdiff_t kstride, float *s, ptrdiff_t lds,
                         const cpu_rows_prefetch *pf) {
  for (int j = 0; j < nc; ++j)
    for (int h0 = 0; h0 < heads; h0 += NACC) {
      const void *k[NACC];
      const float *qh[NACC];
      /* A last, short group repeats the last head; its extra sums are not stored. */
      for (int x = 0; x < NACC; ++x) {
        const int h = h0 + x < heads ? h0 + x : heads - 1;
        k[x] = (const char *)krow[j] + h * kstride;
        qh[x] = q + h * ldq;
      }
      float out[NACC];
      dot_heads_group(DT, d, qh, k, out, pf, j, h0, heads, kstride);
      const int n = heads - h0 < NACC ? heads - h0 : NACC;
      for (int x = 0; x < n; ++x) s[(h0 + x) * lds + j] = out[x];
    }
}

/* The head dim as a constant for 64 and 128, as dot_d. */
INLINE void dot_heads_d(const int DT, int heads, int nc, int d, const float *q, ptrdiff_t ldq,
                        const void *const *krow, ptrdiff_t kstride, float *s, ptrdiff_t lds,
                        const cpu_rows_prefetch *pf) {
  if (d == 128)
    dot_heads_dt(DT, heads, nc, 128, q, ldq, krow, kstride, s, lds, pf);
  else if (d == 64)
    dot_heads_dt(DT, heads, nc, 64, q, ldq, krow, kstride, s, lds, pf);
  else
    dot_heads_dt(DT, heads, nc, d, q, ldq, krow, kstride, s, lds, pf);
}

void CPU_KFN(dot_heads)(int heads, int nc, int d, const float *q, ptrdiff_t ldq, int dtype,
                        const void *const *krow, ptrdiff_t kstride, float *s, ptrdiff_t lds,
                        const cpu_rows_prefetch *pf) {
  if (nc <= 0 || heads <= 0) return;
  if (dtype == CPU_ELEM_F16)
    dot_heads_d(CPU_ELEM_F16, heads, nc, d, q, ldq, krow, kstride, s, lds, pf);
  else if (dtype == CPU_ELEM_BF16)
    dot_heads_d(CPU_ELEM_BF16, heads, nc, d, q, ldq, krow, kstride, s, lds, pf);
  else
    dot_heads_d(CPU_ELEM_F32, heads, nc, d, q, ldq, krow, kstride, s, lds, pf);
}

/* One key's (key j's) V rows, every head in address order: o_h += p_h · V_{j,h}, o's rows read
   and written through L1 (all heads' outputs do not fit the registers). Keeping a head's output
   in registers over 4 or 16 keys instead (so 4 or 16 token rows read at once) measured slower. */
INLINE void pv_heads_key(const int DT, int heads, int dv, const float *p, ptrdiff_t ldp,
                         const void *row, ptrdiff_t vstride, float *o, ptrdiff_t ldo,
                         const cpu_rows_prefetch *pf, int j) {
  for (int h = 0; h < heads; ++h) {
    prefetch_head(pf, j, h, vstride);
    const void *vr = (const char *)row + h * vstride;
    const vf ph = v_set1(p[h * ldp]);
    float *oh = o + h * ldo;
    for (int c = 0; c < dv; c += VL) v_store(oh + c, v_fma(ph, v_elems(DT, vr, c), v_f32(oh + c)));
  }
}

INLINE void pv_heads_dt(const int DT, int heads, int nc, int dv, const float *p, ptrdiff_t ldp,
                        const void *const *vrow, ptrdiff_t vstride, float *o, ptrdiff_t ldo,
                        const cpu_rows_prefetch *pf) {
  for (int j = 0; j < nc; ++j) {
    if (dv == 128)
      pv_heads_key(DT, heads, 128, p + j, ldp, vrow[j], vstride, o, ldo, pf, j);
    else if (dv == 64)
      pv_heads_key(DT, heads, 64, p + j, ldp, vrow[j], vstride, o, ldo, pf, j);
    else
      pv_heads_key(DT, heads, dv, p + j, ldp, vrow[j], vstride, o, ldo, pf, j);
  }
}

void CPU_KFN(pv_heads)(int heads, int nc, int dv, const float *p, ptrdiff_t ldp, int dtype,
                       const void *const *vrow, ptrdiff_t vstride, float *o, ptrdiff_t ldo,
                       const cpu_rows_prefetch *pf) {
  if (nc <= 0 || heads <= 0) return;
  if (dtype == CPU_ELEM_F16)
    pv_heads_dt(CPU_ELEM_F16, heads, nc, dv, p, ldp, vrow, vstride, o, ldo, pf);
  else if (dtype == CPU_ELEM_BF16)
    pv_heads_dt(CPU_ELEM_BF16, heads, nc, dv, p, ldp, vrow, vstride, o, ldo, pf);
  else
    pv_heads_dt(CPU_ELEM_F32, heads, nc, dv, p, ldp, vrow, vstride, o, ldo, pf);
}
