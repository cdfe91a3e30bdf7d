/*
 * validate_overlap.c: that no output shares memory with an input or with another output
 * (core/validate.h). A kernel that reads an input while another of its threads writes the same
 * bytes as an output gives a silently wrong result, which depends on the order of the loops; so
 * any shared byte is refused, naming both tensors. Inputs may alias each other (q = k).
 *
 * Two tensors can share memory only in one address space: the same device, and for a handle kind
 * (OpenCL's cl_mem, whose tensors address bytes from byte_offset within the buffer) the same
 * handle. There, an element of t sits at base(t) + Σ i_d strides[d] esize for 0 <= i_d <
 * shape[d]; two tensors share a byte when some pair of their elements' byte ranges meets. Most
 * pairs are told apart by their address ranges; where the ranges overlap (interleaved layouts,
 * such as q, k and v or dq, dk and dv packed in one [batch, seqlen, 3, heads, dim] buffer), a
 * search over the element indices, one dimension at a time from the largest stride, decides: it
 * visits the few digits that can still reach the target at each level, so a dense or padded
 * layout takes a handful of steps. Layouts too irregular to decide within the search's budget
 * are refused too, saying so.
 */
#include <stdint.h>
#include <string.h>

#include "validate.h"

/* One dimension of the search: coefficient c (bytes, signed: + for the first tensor's indices,
   - for the second's) and n values 0..n-1. */
typedef struct term {
  int64_t c, n;
} term;

enum { MAX_TERMS = 2 * FA_MAX_DIMS, SEARCH_BUDGET = 1 << 16 };

/* OpenCL tensors carry a cl_mem handle in data, not an address. */
static int is_handle_kind(int32_t kind) { return kind == FA_DEVICE_OPENCL; }

static int64_t numel_of(const fa_tensor *t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* The byte the tensor's first element starts at, and the span [0, *span) its elements cover
   from there (strides are non-negative: fa_check_tensor). */
static uint64_t base_of(const fa_tensor *t) {
  return (is_handle_kind(t->device.kind) ? 0 : (uint64_t)(uintptr_t)t->data) + t->byte_offset;
}
static int64_t span_of(const fa_tensor *t) {
  const int64_t esize = (int64_t)fa_dtype_size(t->dtype);
  int64_t reach = 0;
  for (int32_t i = 0; i < t->ndim; ++i) reach += (t->shape[i] - 1) * t->strides[i];
  return (reach + 1) * esize;
}

/* Whether digits x_k in [0, n_k) exist with Σ c_k x_k in [lo, hi], terms k.. of n (sorted by
   |c| descending; rest_lo[k], rest_hi[k] the least and largest sum terms k.. reach). -1: the
   budget ran out. */
static int reachable(const term *t, int k, int n, const int64_t *rest_lo, const int64_t *rest_hi,
                     int64_t lo, int64_t hi, long *budget) {
  if (--*budget < 0) return -1;
  if (k == n) return lo <= 0 && 0 <= hi;
  /* c x must lie in [lo - rest_hi[k + 1], hi - rest_lo[k + 1]] */
  const int64_t a = lo - rest_hi[k + 1], b = hi - rest_lo[k + 1], c = t[k].c;
  int64_t x0, x1;
  if (c > 0) {
    x0 = a > 0 ? (a + c - 1) / c : -((-a) / c); /* ceil(a / c) */
    x1 = b >= 0 ? b / c : -((-b + c - 1) / c);  /* floor(b / c) */
  } else {
    const int64_t d = -c; /* c x in [a, b]  <=>  x in [-b / d, -a / d] */
    x0 = -b > 0 ? (-b + d - 1) / d : -((b) / d);
    x1 = -a >= 0 ? (-a) / d : -((a + d - 1) / d);
  }
  if (x0 < 0) x0 = 0;
  if (x1 > t[k].n - 1) x1 = t[k].n - 1;
  for (int64_t x = x0; x <= x1; ++x) {
    const int r = reachable(t, k + 1, n, rest_lo, rest_hi, lo - c * x, hi - c * x, budget);
    if (r != 0) return r;
  }
  return 0;
}

/* 1 when a and b share a byte, 0 when they do not, -1 when the search cannot tell. */
static int tensors_overlap(const fa_tensor *a, const fa_tensor *b) {
  if (a->device.kind != b->device.kind || a->device.id != b->device.id) return 0;
  if (is_handle_kind(a->device.kind) && a->data != b->data) return 0;
  if (numel_of(a) == 0 || numel_of(b) == 0) return 0;
  const uint64_t a0 = base_of(a), b0 = base_of(b);
  const int64_t sa = span_of(a), sb = span_of(b);
  if (sa > INT64_MAX / 4 || sb > INT64_MAX / 4) return -1; /* the search's sums could overflow */
  if (a0 + (uint64_t)sa <= b0 || b0 + (uint64_t)sb <= a0) return 0; /* the ranges are apart */
  /* Element i of a and j of b share a byte when pos_a(i) - pos_b(j) is in (-esize_a, esize_b),
     with pos(i) measured from each base: Σ i_d sa_d - Σ j_d sb_d in [delta - ea + 1, delta + eb
     - 1], delta = b0 - a0 (within a span, so no overflow). */
  const int64_t ea = (int64_t)fa_dtype_size(a->dtype), eb = (int64_t)fa_dtype_size(b->dtype);
  const int64_t delta = (int64_t)(b0 - a0);
  term t[MAX_TERMS];
  int n = 0;
  for (int32_t i = 0; i < a->ndim; ++i)
    if (a->shape[i] > 1 && a->strides[i] != 0) t[n++] = (term){a->strides[i] * ea, a->shape[i]};
  for (int32_t i = 0; i < b->ndim; ++i)
    if (b->shape[i] > 1 && b->strides[i] != 0) t[n++] = (term){-b->strides[i] * eb, b->shape[i]};
  for (int i = 1; i < n; ++i) /* insertion sort, largest |c| first */
    for (int j = i; j > 0; --j) {
      const int64_t cj = t[j].c < 0 ? -t[j].c : t[j].c,
                    cp = t[j - 1].c < 0 ? -t[j - 1].c : t[j - 1].c;
      if (cj <= cp) break;
      const term tmp = t[j];
      t[j] = t[j - 1];
      t[j - 1] = tmp;
    }
  int64_t rest_lo[MAX_TERMS + 1], rest_hi[MAX_TERMS + 1];
  rest_lo[n] = rest_hi[n] = 0;
  for (int k = n - 1; k >= 0; --k) {
    const int64_t r = t[k].c * (t[k].n - 1);
    rest_lo[k] = rest_lo[k + 1] + (r < 0 ? r : 0);
    rest_hi[k] = rest_hi[k + 1] + (r > 0 ? r : 0);
  }
  long budget = SEARCH_BUDGET;
  return reachable(t, 0, n, rest_lo, rest_hi, delta - ea + 1, delta + eb - 1, &budget);
}

/* Where a tensor's bytes lie: its space and [lo, hi); empty tensors have none. */
typedef struct extent {
  int32_t kind, id;
  const void *handle; /* handle kinds only */
  uint64_t lo, hi;
  int empty;
} extent;

static extent extent_of(const fa_tensor *t) {
  extent e = {t->device.kind,  t->device.id, is_handle_kind(t->device.kind) ? t->data : NULL, 0, 0,
              numel_of(t) == 0};
  if (!e.empty) {
    e.lo = base_of(t);
    e.hi = e.lo + (uint64_t)span_of(t);
  }
  return e;
}

static fa_status refuse(const char *name, const char *other_name, int other_written, int r) {
  const char *what = other_written ? "another output" : "an input";
  if (r < 0)
    return fa_core_set_error(INVALID,
                             "%s and %s may share memory: their layouts are too irregular to tell "
                             "apart (an output must not overlap %s)",
                             name, other_name, what);
  return fa_core_set_error(INVALID, "%s and %s share memory (an output must not overlap %s)", name,
                           other_name, what);
}

fa_status fa_check_outputs_apart(const char *const *names, const fa_tensor *const *ts, int n,
                                 int n_out) {
  extent e[FA_APART_MAX];
  if (n > FA_APART_MAX) n = FA_APART_MAX;
  for (int i = 0; i < n; ++i) e[i] = extent_of(ts[i]);
  for (int i = 0; i < n_out && i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      const extent *a = &e[i], *b = &e[j];
      if (a->empty || b->empty || a->kind != b->kind || a->id != b->id || a->handle != b->handle ||
          a->hi <= b->lo || b->hi <= a->lo)
        continue;
      const int r = tensors_overlap(ts[i], ts[j]);
      if (r != 0) return refuse(names[i], names[j], j < n_out, r);
    }
  return FA_OK;
}
