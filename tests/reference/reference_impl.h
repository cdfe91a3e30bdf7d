/*
 * reference_impl.h: what the parts of the float64 reference share (tests/reference.c: the mask,
 * Philox, the driver; reference/unit_f64.c and unit_storage.c: one (batch, kv head) unit in each
 * precision; reference/pass_rule.c: the pass rule).
 */
#ifndef FA_TESTS_REFERENCE_IMPL_H
#define FA_TESTS_REFERENCE_IMPL_H

#include <stdatomic.h>
#include <stdlib.h>

#include "reference.h"

/* The mask of one sequence: which (row, key) pairs are kept, decided by core/math/mask.h so the
   convention is the core's. */
typedef struct ref_mask {
  unsigned char *allow; /* [sq * sk] */
  int64_t *lo, *hi;     /* per row: smallest and one past the largest kept key (lo >= hi: none) */
} ref_mask;

/* The mask of sequence b (its own lengths), over the padded [seqlen_q, seqlen_k] grid; 0, or -1
   when out of memory. */
int ref_mask_build(const ref_problem *p, const ref_ext *x, int64_t b, ref_mask *m);
void ref_mask_free(ref_mask *m);

/* The diagonal offset of sequence b (as core/math/mask.h), for ALiBi's distance. */
int64_t ref_seq_shift(const ref_problem *p, const ref_ext *x, int64_t b);
double ref_alibi_slope(const ref_problem *p, const ref_ext *x, int64_t b, int64_t h);

/* One reference computation, shared by the threads that take its units. */
typedef struct ref_job {
  const ref_problem *p;
  const ref_ext *x;
  ref_precision prec;
  fa_dtype dtype; /* storage dtype (REF_STORAGE) */
  const tu_tensor *q, *k, *v, *dout;
  ref_result *r;
  atomic_llong next;
  atomic_int failed;
} ref_job;

/* One (batch b, kv head g) unit: it owns its kv head's dk/dv and the out/lse/dq of the query
   heads reading it. 0, or -1 when out of memory. */
int ref_unit_f64(ref_job *J, int64_t b, int64_t g);
int ref_unit_storage(ref_job *J, int64_t b, int64_t g);

/* Offset of row s of head h in a contiguous [batch, rows, heads, dim] result array. */
static inline int64_t ref_at_row(int64_t b, int64_t s, int64_t heads, int64_t h, int64_t rows,
                                 int64_t dim) {
  return ((b * rows + s) * heads + h) * dim;
}

/* A unit's working arrays come from one zeroed block: ARRAYS(X) lists them as X(name, count);
   ARRAYS(REF_DECL_F64 or _F32) declares them, ARRAYS(REF_COUNT) adds up their counts, and
   ARRAYS(REF_CARVE) points each at its part of the block (carve_at_ walks it). */
#define REF_DECL_F64(name, n) double *name = NULL;
#define REF_DECL_F32(name, n) float *name = NULL;
#define REF_COUNT(name, n) +(size_t)(n)
#define REF_CARVE(name, n) name = carve_at_, carve_at_ += (n);

#endif /* FA_TESTS_REFERENCE_IMPL_H */
