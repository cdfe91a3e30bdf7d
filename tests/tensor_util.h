/*
 * tensor_util.h: host tensors for the tests and tools (tu_ prefix).
 *
 * A tu_tensor owns one host allocation and exposes a strided fa_tensor view of it, contiguous or
 * deliberately not (padded rows, permuted physical order, a gap between consecutive elements, a
 * leading gap reached through byte_offset). The memory the view does not cover (the gaps) is kept
 * poisoned, so a test can prove a call wrote nothing outside its logical elements.
 *
 * Random values come from one run seed (printed so a failure can be replayed; FA_TEST_SEED
 * overrides it) mixed with a name, so a case draws the same inputs whatever other cases ran.
 */
#ifndef FA_TESTS_TENSOR_UTIL_H
#define FA_TESTS_TENSOR_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "flash_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------------------------------------
 * Random numbers
 * -------------------------------------------------------------------------------------------- */

/* xoshiro256** state: small, fast and good enough for test data; never all zero. */
typedef struct tu_rng {
  uint64_t s[4];
  double spare; /* the second normal value of the last Box-Muller pair */
  int has_spare;
} tu_rng;

/* The run's seed: FA_TEST_SEED (decimal or 0x-hex) when set, else time and pid mixed. Chosen once
   per process; tu_seed_was_fixed() says whether it came from the environment. */
uint64_t tu_run_seed(void);
int tu_seed_was_fixed(void);

/* A seed for one named use of the run seed (a test case), independent of what else ran. */
uint64_t tu_seed_for(uint64_t run_seed, const char *name);

void tu_rng_init(tu_rng *rng, uint64_t seed);
uint64_t tu_rng_u64(tu_rng *rng);
double tu_rng_uniform(tu_rng *rng); /* in [0, 1) */
double tu_rng_normal(tu_rng *rng);  /* standard normal */

/* ----------------------------------------------------------------------------------------------
 * Layouts
 * -------------------------------------------------------------------------------------------- */

typedef enum tu_layout_kind {
  TU_CONTIGUOUS = 0, /* row-major, no gaps, byte_offset 0 */
  TU_PADDED = 1,     /* every dimension padded (row strides larger than needed), leading gap
                        through byte_offset */
  TU_PERMUTED = 2,   /* dims 1 and 2 swapped in memory: a [b, h, s, d] buffer seen as
                        [b, s, h, d] (for 3-D: [b, s, h] seen as [b, h, s]) */
  TU_STRIDED = 3,    /* last dimension not contiguous: a one-element gap after each element */
  TU_LAYOUT_COUNT_ = 4
} tu_layout_kind;

const char *tu_layout_name(tu_layout_kind kind);

/* The general form every kind maps onto. perm lists logical dimensions from the slowest-varying
   in memory to the fastest; pad[d] extra elements follow logical dimension d's extent; step is the
   stride of the fastest dimension; lead elements precede the first element (byte_offset). */
typedef struct tu_layout {
  int perm[FA_MAX_DIMS];
  int64_t pad[FA_MAX_DIMS];
  int64_t step;
  int64_t lead;
} tu_layout;

tu_layout tu_layout_of(tu_layout_kind kind, int ndim);

/* ----------------------------------------------------------------------------------------------
 * Tensors
 * -------------------------------------------------------------------------------------------- */

typedef struct tu_tensor {
  fa_tensor t;        /* the view handed to the library: CPU device, data = buf */
  unsigned char *buf; /* the whole allocation, gaps included */
  size_t buf_elems;   /* elements in buf (each elem_bytes wide) */
  size_t elem_bytes;
  unsigned char *snapshot; /* copy of buf from the last tu_poison / tu_snapshot, or NULL */
} tu_tensor;

size_t tu_dtype_size(fa_dtype dtype); /* 0 for a dtype the tests do not store */
const char *tu_dtype_name(fa_dtype dtype);

/* Allocates a tensor of ndim (1..FA_MAX_DIMS) positive extents. Returns 0 on success, -1 on a bad
   argument or out of memory (x is then zeroed). The contents start poisoned. */
int tu_alloc(tu_tensor *x, fa_dtype dtype, int ndim, const int64_t *shape, tu_layout_kind kind);
int tu_alloc_layout(tu_tensor *x, fa_dtype dtype, int ndim, const int64_t *shape,
                    const tu_layout *layout);
void tu_free(tu_tensor *x); /* safe on a zeroed or already freed tensor */

int64_t tu_numel(const tu_tensor *x); /* logical elements */

/* A host (FA_DEVICE_CPU) fa_tensor over caller memory laid out contiguously as
   (batch, seqlen, heads, head_dim), the API's default layout. */
fa_tensor tu_view_bshd(void *data, fa_dtype dtype, int64_t b, int64_t s, int64_t h, int64_t d);
/* A contiguous (row-major) fa_tensor of ndim dims over caller memory on dev. */
fa_tensor tu_view(void *data, fa_dtype dtype, fa_device dev, int ndim, const int64_t *shape);

/* Element access by logical index (ndim entries) or by flat row-major logical index. Values are
   converted exactly from storage to double; stores round to the storage dtype (nearest even). */
double tu_get(const tu_tensor *x, const int64_t *idx);
void tu_set(tu_tensor *x, const int64_t *idx, double value);
double tu_get_flat(const tu_tensor *x, int64_t flat);
void tu_set_flat(tu_tensor *x, int64_t flat, double value);
void tu_unflatten(const tu_tensor *x, int64_t flat, int64_t *idx);

/* Element offset (in elements, from buf) of a logical index, through the view's strides and
   byte_offset; and whether that element still equals the snapshot bitwise (1), or not (0). */
int64_t tu_elem_offset(const tu_tensor *x, const int64_t *idx);
int tu_elem_unchanged(const tu_tensor *x, int64_t flat);

/* Reads every logical element, in row-major logical order, into dst (tu_numel(x) doubles). The
   bulk form of tu_get_flat: one pass with an index odometer instead of a division per dimension. */
void tu_read_all(const tu_tensor *x, double *dst);

/* Reads x[i0, 0:rows, i2, 0:cols] of a 4-D tensor into dst[rows][cols] as double or float (every
   stored f32/f16/bf16 value is exact in both). */
void tu_read_rows_f64(const tu_tensor *x, int64_t i0, int64_t i2, int64_t rows, int64_t cols,
                      double *dst);
void tu_read_rows_f32(const tu_tensor *x, int64_t i0, int64_t i2, int64_t rows, int64_t cols,
                      float *dst);

/* Formats a logical index as "[1,2,3,4]" into buf; returns buf. */
char *tu_format_index(const tu_tensor *x, int64_t flat, char *buf, size_t n);

/* Fills the logical elements with standard-normal values (rounded to the dtype), re-drawing any
   value that rounds to zero so no element is ever 0. Gaps are left as they are. */
void tu_fill_random(tu_tensor *x, tu_rng *rng);

/* Writes the NaN poison pattern over the whole buffer (gaps included) and snapshots it. */
void tu_poison(tu_tensor *x);

/* Snapshots the whole buffer as it is now (for "not modified" checks). Returns 0, or -1 when out of
   memory. */
int tu_snapshot(tu_tensor *x);

/* Whether the gaps (memory outside the logical elements) still equal the snapshot bitwise. On a
   mismatch, describes the first changed element offset into msg (may be NULL). Returns 1 when
   intact, 0 when written, -1 without a snapshot. */
int tu_gaps_intact(const tu_tensor *x, char *msg, size_t n);

/* Whether the whole buffer equals the snapshot bitwise; same return convention. */
int tu_unchanged(const tu_tensor *x, char *msg, size_t n);

/* Copies the logical values of src into dst (any layouts, same shape; converts dtypes). */
int tu_copy_values(tu_tensor *dst, const tu_tensor *src);

/* fa_backend_info's description of backend `id` into *out: FA_OK; FA_ERR_BACKEND_UNAVAILABLE when
   the library does not list it; or fa_backend_info's own failure (fa_last_error says why). */
fa_status tu_backend_desc(int32_t id, fa_backend_desc *out);

#ifdef __cplusplus
}
#endif

#endif /* FA_TESTS_TENSOR_UTIL_H */
