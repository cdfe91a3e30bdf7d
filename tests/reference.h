/*
 * reference.h: naive attention for the tests (ref_ prefix), materialising the score matrix.
 *
 * Two precisions:
 *   REF_F64      float64 throughout: the "truth" every backend is compared with.
 *   REF_STORAGE  the naive computation in the storage dtype, as FlashAttention's tests do with
 *                upcast=False: fp32 accumulation, every intermediate tensor (q·scale, S, P, O, dP,
 *                dS, dQ, dK, dV) rounded to the storage dtype. Its distance from REF_F64 measures
 *                how much error the dtype itself forces, and so sets the tolerance.
 *
 * Conventions are the library's: q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv],
 * out [b, sq, hq, dv], lse [b, hq, sq] natural log; query head h reads kv head h / (hq / hkv);
 * the causal mask comes from core/math/mask.h. Results are float64 arrays in contiguous row-major
 * order of those shapes, whatever the inputs' layouts.
 */
#ifndef FA_TESTS_REFERENCE_H
#define FA_TESTS_REFERENCE_H

#include <stdint.h>

#include "tensor_util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ref_problem {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v;
  double scale;     /* the softmax scale as the library resolves it (never 0 here) */
  int causal;       /* non-zero: causal mask */
  int causal_align; /* fa_causal_align */
} ref_problem;

/* The rest of the attention semantics (kept apart from ref_problem, whose users initialise it
   positionally); all zero (or NULL) means off, and ref_attention is ref_attention_ext with that. */
typedef struct ref_ext {
  int window; /* non-zero: sliding window window_left/right (-1 unbounded) */
  int64_t window_left, window_right;
  double softcap;      /* > 0: z = softcap * tanh(z / softcap) */
  const double *alibi; /* slopes [heads_q], or [batch, heads_q] with alibi_per_batch */
  int alibi_per_batch;
  double dropout_p; /* > 0: Philox dropout (core/math/philox.h's convention) */
  uint64_t dropout_seed, dropout_offset;
  /* Per-sequence lengths (varlen, seqused_k, caches): sequence b has lens_q[b] <= seqlen_q query
     rows and lens_k[b] <= seqlen_k keys; the tensors stay padded [batch, seqlen_q or seqlen_k,
     ...], rows past lens_q[b] give out 0 / lse -inf / dq 0, keys past lens_k[b] are never seen
     (dk, dv 0). NULL: every sequence has seqlen_q (seqlen_k). */
  const int64_t *lens_q, *lens_k;
  /* REF_STORAGE forward: P as FlashAttention-3's FP8 kernels form it, exp(s - max) rounded to e4m3
     for P V and the output divided by the sum of the unrounded exps (the naive computation of a
     kernel that rounds P to FP8; the FP8 cases' tolerance takes the larger of its error and the
     storage dtype's) */
  int p_fp8;
  /* REF_STORAGE: the sums of S = Q Kᵀ and of P V kept to acc_bits significant bits (truncated)
     after every FP8_ACC_TERMS terms, as Hopper's FP8 tensor cores accumulate (tests/fp8_acc.h);
     0: float32 throughout. */
  int acc_bits;
} ref_ext;

typedef enum ref_precision { REF_F64 = 0, REF_STORAGE = 1 } ref_precision;

typedef enum ref_which { REF_OUT = 0, REF_LSE = 1, REF_DQ = 2, REF_DK = 3, REF_DV = 4 } ref_which;
#define REF_NUM_OUTPUTS 5

const char *ref_which_name(ref_which w); /* "out", "lse", "dq", "dk", "dv" */

typedef struct ref_result {
  double *t[REF_NUM_OUTPUTS]; /* contiguous arrays; the gradients are NULL after a forward only */
  int64_t n[REF_NUM_OUTPUTS]; /* element counts */
  /* REF_F64 only (NULL otherwise): per element, the absolute sum of the terms that form it, every
     cancellation counted as a sum; fp32 arithmetic errs by about 2^-24 times this. */
  double *mag[REF_NUM_OUTPUTS];
} ref_result;

/* The scale the library uses for softmax_scale = s: s itself, or 1/sqrt(head_dim) when s is 0,
   both as float (the library resolves it in float). */
double ref_resolve_scale(float softmax_scale, int64_t head_dim);

/*
 * Computes out and lse, and with dout non-NULL also dq, dk, dv. Inputs are read as stored (any
 * layout); REF_STORAGE rounds to q's dtype. threads <= 0 picks ref_default_threads(). Returns 0, or
 * -1 when out of memory or the shapes disagree with p (r is then empty).
 */
int ref_attention(const ref_problem *p, ref_precision prec, const tu_tensor *q, const tu_tensor *k,
                  const tu_tensor *v, const tu_tensor *dout, ref_result *r, int threads);
int ref_attention_ext(const ref_problem *p, const ref_ext *x, ref_precision prec,
                      const tu_tensor *q, const tu_tensor *k, const tu_tensor *v,
                      const tu_tensor *dout, ref_result *r, int threads);
void ref_result_free(ref_result *r);

/* FP8 inputs (fp8_inputs.c): src (a float tensor [b, s, h, d]) quantized to dt by the CPU
   backend's fa_quantize with `rows` rows per descale block (0: one block), descales [b, h, blocks]
   or, per_tensor, [1, 1, 1], rotated with `seed` when asked; x in `layout`, descale contiguous,
   both snapshotted; deq holds x's values times their descales in float32, the values the FP8 call
   stands for. Returns 0, or -1 (out of memory, or fa_last_error() says why). */
typedef struct ref_fp8 {
  tu_tensor x, descale, deq;
} ref_fp8;
int ref_fp8_inputs(const tu_tensor *src, fa_dtype dt, int64_t rows, int per_tensor, int rotate,
                   uint64_t seed, tu_layout_kind layout, ref_fp8 *out);
void ref_fp8_free(ref_fp8 *f);

/* FA_TEST_THREADS when set, else the online CPU count (at least 1). */
int ref_default_threads(void);

/*
 * Elements whose value the mask alone decides: outputs and dq of query rows that see no key (0),
 * lse of those rows (-inf), dk and dv of keys no query row sees (0). Returns a malloc'd map of
 * r->n[which] bytes (1 = decided by the mask), or NULL when out of memory.
 */
unsigned char *ref_masked_map(const ref_problem *p, ref_which which);
unsigned char *ref_masked_map_ext(const ref_problem *p, const ref_ext *x, ref_which which);

/*
 * Philox4x32-10 and the dropout draw, implemented here a second time (independently of
 * core/math/philox.h, from Salmon et al. SC'11 and the convention documented there), so a test can
 * hold the library's mask against it. ref_philox writes the 4 output words of (ctr, key).
 */
void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* 1 when (bh, row, col) is kept with drop probability p (threshold floor(p * 2^32), clamped). */
int ref_dropout_keep(uint64_t seed, uint64_t offset, uint64_t bh, uint64_t row, uint64_t col,
                     double p);

/* The constant part of the pass rule's floor for a storage dtype (see reference.c for why). */
double ref_floor(fa_dtype dtype);

/* Result of checking one output tensor against the references. */
typedef struct ref_check {
  int pass;
  double max_err;   /* max |x - ref64| over elements both finite */
  double naive_err; /* max |naive - ref64| over the same elements */
  double floor;     /* ref_floor(dtype), plus the magnitudes' term when they are known */
  double tol;       /* 2 * naive_err + floor */
  int64_t worst;    /* flat index of the worst element (the first broken one if any), or -1 */
  double worst_got, worst_want;
  int64_t broken; /* elements that fail regardless of tolerance: NaN, wrong infinity, a
                     mask-decided element that is not exactly its value */
  char why[160];  /* what broke, for the report */
} ref_check;

/*
 * The pass rule for output `which` of x: every element non-NaN; where ref64 is -inf (lse of an
 * empty row) x is exactly -inf, elsewhere finite; elements in masked (may be NULL) equal ref64
 * exactly; and max|x - ref64| <= 2 * max|naive - ref64| + floor, where floor = ref_floor(dtype) +
 * 4 * 2^-24 * max(r64->mag) (fp32 accumulation and, for f16/bf16 gradients, the rounding of the
 * stored O that D = rowsum(dO∘O) carries; see reference/unit_f64.c). x is read as stored; naive
 * may be NULL (then only the floor counts).
 */
void ref_check_output(const tu_tensor *x, const ref_result *r64, const ref_result *naive,
                      ref_which which, const unsigned char *masked, fa_dtype dtype, ref_check *out);

/* The same rule from bare arrays, without the fp32 accumulation term (floor = ref_floor(dtype)):
   enough for short sequences; ref_check_output is the suite's rule. */
void ref_check_tensor(const tu_tensor *x, const double *ref64, const double *naive,
                      const unsigned char *masked, fa_dtype dtype, ref_check *out);

/* The rule on bare arrays: got[i] against ref64[i] (naive, mag, masked may be NULL); worst is an
   index into these arrays. */
void ref_check_values(const double *got, int64_t n, const double *ref64, const double *naive,
                      const double *mag, const unsigned char *masked, fa_dtype dtype,
                      ref_check *out);

#ifdef __cplusplus
}
#endif

#endif /* FA_TESTS_REFERENCE_H */
