/*
 * cpu_kernels.h: the tile operations the CPU forward and backward passes are made of, and the
 * table that picks, once per process, the build of them that suits the machine.
 *
 * The tiles are contiguous fp32 buffers in the plugin's scratch. cpu_gemm.c, cpu_rowops.c and
 * cpu_rows.c are compiled once per instruction set (plain C / any CPU; on x86-64 AVX2+FMA+F16C
 * and AVX-512; on aarch64 NEON): the plugin
 * stays loadable on every CPU of its architecture while running wide vectors where they exist.
 *
 * Reproducibility: each output element is computed by one fixed sequence of operations that
 * depends only on the tile shapes, never on the thread or the blocking, so a run is bitwise
 * repeatable on a given machine; and scores are computed by the same gemm in the forward and the
 * backward pass, so the backward pass recomputes exactly the forward's scores.
 */
#ifndef FA_CPU_KERNELS_H
#define FA_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/*
 * gemm: C[m x n] = A·B (accumulate = 0) or C += A·B. A(i, p) = a[i * rs_a + p * cs_a], so one
 * routine serves Q·Kᵀ (A row-major) and Pᵀ·dO (A read transposed). B and C are row-major.
 *
 * softmax_tile (forward): s holds the unscaled scores of an mr x nc tile. Row i sees columns
 * [jlo[i], jhi[i]) (every column when jlo is NULL). Scales the scores, runs the online-softmax
 * step of each row on (m[i], l[i]), rescales row i of the running output o (dv wide) by the
 * step's alpha, and leaves in s the unnormalised probabilities (0 where masked), ready for o +=
 * P·V.
 *
 * probs_tile (backward): s holds unscaled scores; replaces them with P recomputed from the rows'
 * LSE (0 where masked or where the row saw no key).
 *
 * ds_tile (backward): dp holds dP = dO·Vᵀ; replaces it with dS = P ∘ (dP − D) (D per row).
 *
 * transpose (tile loads): dst[c * ldd + r] = src[r * lds + c] for the n <= 16 rows r and the cols
 * columns c of src; the key-side operands of Q·Kᵀ and dO·Vᵀ are stored this way.
 *
 * f16_row (tile loads): n contiguous fp16 values to fp32, exactly (core/math/dtype.h's conversion;
 * a signalling NaN may come out quiet).
 *
 * bf16_row (tile loads): n contiguous bf16 values to fp32, bit for bit (the 16 bits shifted up).
 *
 * bf16_transpose (tile loads): transpose of n <= 16 contiguous bf16 rows src[r] (cols values
 * each), converted as bf16_row does: dst[c * ldd + r] = src[r][c] in fp32.
 *
 * dot_rows, pv_rows (the few-query-rows path of fa_forward_kvcache, cpu_rows.c): K and V rows are
 * read in place, each a pointer to d (dv) contiguous elements of dtype (CPU_ELEM_*), d and dv
 * multiples of 16. dot_rows: s[r * lds + j] = q_r · K_j (unscaled) for r < rows, j < nc, q_r
 * fp32 at q + r * ldq. pv_rows: o[r * ldo + c] += sum_j p[r * ldp + j] · V_j[c], keys in order.
 * Both ask for pf's lines of key j (cpu_rows_prefetch; NULL: none) as they use key j.
 *
 * dot_heads, pv_heads (the same path for MHA with one query row per head): head h's K (V) row of
 * key j is krow[j] + h * kstride bytes (vrow[j] + h * vstride), d (dv) elements of dtype.
 * dot_heads: s[h * lds + j] = q_h · K_{j,h} (unscaled), q_h at q + h * ldq. pv_heads: o[h * ldo +
 * c] += sum_j p[h * ldp + j] · V_{j,h}[c], keys in order. Each output element is the sum pv_rows
 * gives with one row, each score the one dot_rows gives (bf16: widened 16 elements at a time, not
 * in dot_rows' even/odd pairs); what differs is the order memory is read in: key by key, every
 * head of a key in address order (one contiguous token row of the cache). Both ask for head h's
 * lines of pf's key j, pf->row[j] + pf->offset + h * kstride (vstride), as they use head h of key
 * j (NULL: none).
 *
 * The bf16 products (the avx512bf16 and amx tables only, NULL in every other; cpu_bf16dp.c, and
 * cpu_amx.c for the amx table's gemm_bf16): operands are
 * bf16 pairs along the reduction dimension, one 32-bit word per pair, the even element in the low
 * half. bf16_pairs: dst[i * ldd + p] = the pair (x[i][2p], x[i][2p+1]) of fp32 rows rounded to
 * bf16 (nearest even; an odd n pads with 0). bf16_interleave: the pair (r0[c], r1[c]) of two
 * bf16 rows (r1 NULL: 0) at dst[(c / 16) * step + c % 16] (step 16: dst[c]). gemm_bf16: C[m x n] =
 * A·B (accumulate = 0) or C += A·B, A(i, p) = a[i * lda + p] and B(p, j) = b[p * ldb + j] pairs, p
 * < k2, in fp32 lanes by vdpbf16ps (or AMX-BF16's tdpbf16ps). The forward uses them for S = Q·Kᵀ
 * and O += P·V; with bf16_backward set, the backward too, for S, dP = dO·Vᵀ, dV += Pᵀ·dO, dK +=
 * dSᵀ·Q and dQ += dS·K. softmax_pairs: softmax_tile's online step without dropout, leaving s as it
 * was and writing the probabilities as bf16_pairs would (row i at p + i * ldp, every word of the
 * row: 0 outside [jlo, jhi)), in one pass over the scores with a base-2 exponential (cpu_bf16dp.c):
 * the separate conversion re-read the whole tile. With kt > 0 it writes them in tiles instead (the
 * A layout of cpu_amx.h with kt pair blocks a row block; ldp unused), 0 past nc up to 32 kt.
 */
/* The storage dtypes of K/V rows the row kernels read (a plain int keeps this header free of the
   API's). */
enum { CPU_ELEM_F32 = 0, CPU_ELEM_F16 = 1, CPU_ELEM_BF16 = 2 };

/* Rows (query rows x packed heads) the row kernels take per call; multiple of head dims they need.
 */
#define CPU_ROWS_MAX 16
#define CPU_ROWS_DIM_MULTIPLE 16

/* Rows to prefetch while a row kernel runs (the next KV head's slice of the same keys): key j's
   lines [row[j] + offset, + lines * 64 bytes), asked for as key j is used, so the requests spread
   over the computation instead of leaving in one burst. */
typedef struct cpu_rows_prefetch {
  const char *const *row;
  int64_t offset;
  int lines;
} cpu_rows_prefetch;

typedef struct cpu_kernels {
  const char *isa; /* "amx", "avx512bf16", "avx512", "avx2", "neon" or "generic" */
  void (*gemm)(int m, int n, int k, const float *a, ptrdiff_t rs_a, ptrdiff_t cs_a, const float *b,
               ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);
  void (*softmax_tile)(int mr, int nc, float *s, ptrdiff_t lds, float scale, const int *jlo,
                       const int *jhi, float *m, float *l, float *o, ptrdiff_t ldo, int dv);
  void (*probs_tile)(int mr, int nc, float *s, ptrdiff_t lds, float scale, const float *lse,
                     const int *jlo, const int *jhi);
  void (*ds_tile)(int mr, int nc, const float *p, float *dp, ptrdiff_t ld, const float *d);
  void (*transpose)(int n, int cols, const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd);
  void (*f16_row)(const uint16_t *src, int64_t n, float *dst);
  void (*bf16_row)(const uint16_t *src, int64_t n, float *dst);
  void (*bf16_transpose)(int n, int cols, const uint16_t *const *src, float *dst, ptrdiff_t ldd);
  void (*dot_rows)(int rows, int nc, int d, const float *q, ptrdiff_t ldq, int dtype,
                   const void *const *krow, float *s, ptrdiff_t lds, const cpu_rows_prefetch *pf);
  void (*pv_rows)(int rows, int nc, int dv, const float *p, ptrdiff_t ldp, int dtype,
                  const void *const *vrow, float *o, ptrdiff_t ldo, const cpu_rows_prefetch *pf);
  void (*dot_heads)(int heads, int nc, int d, const float *q, ptrdiff_t ldq, int dtype,
                    const void *const *krow, ptrdiff_t kstride, float *s, ptrdiff_t lds,
                    const cpu_rows_prefetch *pf);
  void (*pv_heads)(int heads, int nc, int dv, const float *p, ptrdiff_t ldp, int dtype,
                   const void *const *vrow, ptrdiff_t vstride, float *o, ptrdiff_t ldo,
                   const cpu_rows_prefetch *pf);
  /* fa_quantize's rows (cpu_quant_rows.c): the rotation in place (neg[j]: 0 or the sign bit),
     a row's largest finite magnitude, and x / s rounded to e4m3 (e5m2 when e5m2) into y. */
  void (*quant_rotate)(float *x, int log2_d, const uint32_t *neg, float norm);
  float (*quant_amax)(const float *x, int64_t n);
  void (*quant_fp8)(const float *x, int64_t n, float s, int e5m2, uint8_t *y);
  /* The bf16 products: set in the avx512bf16 and amx tables only. */
  void (*bf16_pairs)(int rows, int n, const float *x, ptrdiff_t ldx, uint32_t *dst, ptrdiff_t ldd);
  void (*bf16_interleave)(const uint16_t *r0, const uint16_t *r1, int n, uint32_t *dst,
                          ptrdiff_t step);
  void (*gemm_bf16)(int m, int n, int k2, const uint32_t *a, ptrdiff_t lda, const uint32_t *b,
                    ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);
  void (*softmax_pairs)(int mr, int nc, const float *s, ptrdiff_t lds, float scale, const int *jlo,
                        const int *jhi, float *m, float *l, float *o, ptrdiff_t ldo, int dv,
                        uint32_t *p, ptrdiff_t ldp, int kt);
  /* The tiled forward (the amx table only, NULL in every other): cpu_amx.h's tiled product, and
     fp32 rows as bf16 pairs in its A layout. */
  void (*gemm_bf16_tiled)(int m, int n, int k2, const uint32_t *a, const uint32_t *b, float *c,
                          ptrdiff_t ldc, int accumulate);
  void (*bf16_pairs_tiled)(int rows, int rows_pad, int n, const float *x, ptrdiff_t ldx,
                           uint32_t *dst, int kt);
  /* The build the fp32 kernels of this table come from ("avx512" for the avx512bf16 and amx
     tables, which share them): the name of every kernel that does not use the bf16 products. */
  const char *fp32_isa;
  /* The bf16 backward's five products on gemm_bf16 too (cpu_backward.c): the amx table only.
     The avx512bf16 table's backward stays on the fp32 kernels (named avx512). */
  int bf16_backward;
} cpu_kernels;

/* The best build for this CPU; chosen once, thread-safe. */
const cpu_kernels *cpu_kernels_get(void);

/* Why this process's FA_CPU_ISA request cannot be met (FA_CPU_ISA=amx where AMX cannot run), or
   NULL: the backend then refuses every request with this reason. */
const char *cpu_kernels_refusal(void);

/* AMX's state for the device line: "in use: ...", why it cannot run, or that it is present but
   not asked for. */
const char *cpu_kernels_amx_note(void);

/* Each per-ISA build names its functions <name>_<isa>. */
#define CPU_KERNEL_DECLS(isa)                                                                      \
  void cpu_gemm_##isa(int m, int n, int k, const float *a, ptrdiff_t rs_a, ptrdiff_t cs_a,         \
                      const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);     \
  void cpu_softmax_tile_##isa(int mr, int nc, float *s, ptrdiff_t lds, float scale,                \
                              const int *jlo, const int *jhi, float *m, float *l, float *o,        \
                              ptrdiff_t ldo, int dv);                                              \
  void cpu_probs_tile_##isa(int mr, int nc, float *s, ptrdiff_t lds, float scale,                  \
                            const float *lse, const int *jlo, const int *jhi);                     \
  void cpu_ds_tile_##isa(int mr, int nc, const float *p, float *dp, ptrdiff_t ld, const float *d); \
  void cpu_transpose_##isa(int n, int cols, const float *src, ptrdiff_t lds, float *dst,           \
                           ptrdiff_t ldd);                                                         \
  void cpu_f16_row_##isa(const uint16_t *src, int64_t n, float *dst);                              \
  void cpu_bf16_row_##isa(const uint16_t *src, int64_t n, float *dst);                             \
  void cpu_bf16_transpose_##isa(int n, int cols, const uint16_t *const *src, float *dst,           \
                                ptrdiff_t ldd);                                                    \
  void cpu_dot_rows_##isa(int rows, int nc, int d, const float *q, ptrdiff_t ldq, int dtype,       \
                          const void *const *krow, float *s, ptrdiff_t lds,                        \
                          const cpu_rows_prefetch *pf);                                            \
  void cpu_pv_rows_##isa(int rows, int nc, int dv, const float *p, ptrdiff_t ldp, int dtype,       \
                         const void *const *vrow, float *o, ptrdiff_t ldo,                         \
                         const cpu_rows_prefetch *pf);                                             \
  void cpu_dot_heads_##isa(int heads, int nc, int d, const float *q, ptrdiff_t ldq, int dtype,     \
                           const void *const *krow, ptrdiff_t kstride, float *s, ptrdiff_t lds,    \
                           const cpu_rows_prefetch *pf);                                           \
  void cpu_pv_heads_##isa(int heads, int nc, int dv, const float *p, ptrdiff_t ldp, int dtype,     \
                          const void *const *vrow, ptrdiff_t vstride, float *o, ptrdiff_t ldo,     \
                          const cpu_rows_prefetch *pf);                                            \
  void cpu_quant_rotate_##isa(float *x, int log2_d, const uint32_t *neg, float norm);              \
  float cpu_quant_amax_##isa(const float *x, int64_t n);                                           \
  void cpu_quant_fp8_##isa(const float *x, int64_t n, float s, int e5m2, uint8_t *y);

CPU_KERNEL_DECLS(generic)
#if defined(FA_CPU_HAVE_AVX2)
CPU_KERNEL_DECLS(avx2)
#endif
#if defined(FA_CPU_HAVE_AVX512)
CPU_KERNEL_DECLS(avx512)
#endif
#if defined(FA_CPU_HAVE_NEON)
CPU_KERNEL_DECLS(neon)
#endif
#if defined(FA_CPU_HAVE_AVX512BF16)
void cpu_bf16_pairs_avx512bf16(int rows, int n, const float *x, ptrdiff_t ldx, uint32_t *dst,
                               ptrdiff_t ldd);
void cpu_bf16_interleave_avx512bf16(const uint16_t *r0, const uint16_t *r1, int n, uint32_t *dst,
                                    ptrdiff_t step);
void cpu_gemm_bf16_avx512bf16(int m, int n, int k2, const uint32_t *a, ptrdiff_t lda,
                              const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                              int accumulate);
void cpu_softmax_pairs_avx512bf16(int mr, int nc, const float *s, ptrdiff_t lds, float scale,
                                  const int *jlo, const int *jhi, float *m, float *l, float *o,
                                  ptrdiff_t ldo, int dv, uint32_t *p, ptrdiff_t ldp, int kt);
void cpu_bf16_pairs_tiled_avx512bf16(int rows, int rows_pad, int n, const float *x, ptrdiff_t ldx,
                                     uint32_t *dst, int kt);
#endif

/* Inside a per-ISA build (CPU_ISA set by the build), CPU_KFN(gemm) is cpu_gemm_<isa>. */
#ifndef CPU_ISA
#define CPU_ISA generic
#endif
#define CPU_KFN_PASTE(name, isa) cpu_##name##_##isa
#define CPU_KFN_EXPAND(name, isa) CPU_KFN_PASTE(name, isa)
#define CPU_KFN(name) CPU_KFN_EXPAND(name, CPU_ISA)

#endif /* FA_CPU_KERNELS_H */
