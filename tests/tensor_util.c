/*
 * tensor_util.c: host tensors, layouts, random fill and poison checks for the tests and tools.
 */
/* getpid() is POSIX; the build is strict C11, so ask for it explicitly. */
#define _POSIX_C_SOURCE 200809L

#include "tensor_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/math/dtype.h"
#include "core/math/fp8.h"

/* ----------------------------------------------------------------------------------------------
 * Random numbers
 * -------------------------------------------------------------------------------------------- */

/* splitmix64: turns any 64-bit value (counter, weak seed) into a well-mixed one; used to expand a
   seed into the xoshiro state and to combine seeds with names. */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int g_seed_ready = 0;
static int g_seed_fixed = 0;
static uint64_t g_seed = 0;

uint64_t tu_run_seed(void) {
  if (g_seed_ready) return g_seed;
  const char *env = getenv("FA_TEST_SEED");
  if (env && *env) {
    char *end = NULL;
    unsigned long long v = strtoull(env, &end, 0);
    if (end && *end == '\0') {
      g_seed = (uint64_t)v;
      g_seed_fixed = 1;
    } else {
      fprintf(stderr, "tensor_util: ignoring FA_TEST_SEED='%s' (not a number)\n", env);
    }
  }
  if (!g_seed_fixed) {
    /* Every run draws new data, so repeated runs explore new inputs; time alone would repeat within
       a second across parallel CTest jobs, hence the pid and a stack address (ASLR). */
    int local = 0;
    uint64_t mix = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock() ^
                   (uint64_t)(uintptr_t)&local;
    g_seed = splitmix64(&mix);
  }
  g_seed_ready = 1;
  return g_seed;
}

int tu_seed_was_fixed(void) {
  (void)tu_run_seed();
  return g_seed_fixed;
}

uint64_t tu_seed_for(uint64_t run_seed, const char *name) {
  /* FNV-1a over the name, then mixed with the run seed: a case keeps its inputs when the case list
     or the --filter changes, which is what makes "FA_TEST_SEED=... --filter name" a replay. */
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)name; p && *p; ++p) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  uint64_t st = run_seed ^ h;
  return splitmix64(&st);
}

void tu_rng_init(tu_rng *rng, uint64_t seed) {
  uint64_t st = seed;
  for (int i = 0; i < 4; ++i) rng->s[i] = splitmix64(&st);
  /* splitmix64 is a bijection of a counter, so four outputs are never all zero; kept explicit. */
  if (!(rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3])) rng->s[0] = 1;
  rng->spare = 0.0;
  rng->has_spare = 0;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tu_rng_u64(tu_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double tu_rng_uniform(tu_rng *rng) {
  /* 53 random bits: every double in [0, 1) on a 2^-53 grid. */
  return (double)(tu_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double tu_rng_normal(tu_rng *rng) {
  /* Box-Muller, both values of a pair used (the transcendentals are most of the cost of filling
     large tensors); 1 - u keeps the log's argument in (0, 1]. */
  if (rng->has_spare) {
    rng->has_spare = 0;
    return rng->spare;
  }
  double u1 = 1.0 - tu_rng_uniform(rng);
  double u2 = tu_rng_uniform(rng);
  double rad = sqrt(-2.0 * log(u1)), ang = 6.283185307179586 * u2;
  rng->spare = rad * sin(ang);
  rng->has_spare = 1;
  return rad * cos(ang);
}

/* ----------------------------------------------------------------------------------------------
 * Layouts
 * -------------------------------------------------------------------------------------------- */

const char *tu_layout_name(tu_layout_kind kind) {
  switch (kind) {
    case TU_CONTIGUOUS:
      return "contig";
    case TU_PADDED:
      return "padded";
    case TU_PERMUTED:
      return "permuted";
    case TU_STRIDED:
      return "strided";
    default:
      return "?";
  }
}

tu_layout tu_layout_of(tu_layout_kind kind, int ndim) {
  tu_layout l;
  memset(&l, 0, sizeof l);
  for (int d = 0; d < FA_MAX_DIMS; ++d) l.perm[d] = d;
  l.step = 1;
  switch (kind) {
    case TU_PADDED:
      /* Odd paddings so a backend that assumes "row stride = extent" or aligned rows reads the
         wrong elements, and a leading gap so byte_offset is exercised. */
      for (int d = 0; d < ndim; ++d) l.pad[d] = (d == ndim - 1) ? 3 : 1;
      l.lead = 5;
      break;
    case TU_PERMUTED:
      if (ndim >= 3) {
        l.perm[1] = 2;
        l.perm[2] = 1;
      } else if (ndim == 2) {
        l.perm[0] = 1;
        l.perm[1] = 0;
      }
      break;
    case TU_STRIDED:
      l.step = 2;
      l.lead = 1;
      break;
    default:
      break;
  }
  return l;
}

/* ----------------------------------------------------------------------------------------------
 * Tensors
 * -------------------------------------------------------------------------------------------- */

/* The library's own names and sizes, so the tests print what its messages say. */
size_t tu_dtype_size(fa_dtype dtype) { return fa_dtype_size(dtype); }

const char *tu_dtype_name(fa_dtype dtype) { return fa_dtype_name(dtype); }

int tu_alloc(tu_tensor *x, fa_dtype dtype, int ndim, const int64_t *shape, tu_layout_kind kind) {
  tu_layout l = tu_layout_of(kind, ndim);
  return tu_alloc_layout(x, dtype, ndim, shape, &l);
}

int tu_alloc_layout(tu_tensor *x, fa_dtype dtype, int ndim, const int64_t *shape,
                    const tu_layout *layout) {
  memset(x, 0, sizeof *x);
  size_t esz = tu_dtype_size(dtype);
  if (esz == 0 || ndim < 1 || ndim > FA_MAX_DIMS || layout->step < 1 || layout->lead < 0) return -1;
  int seen[FA_MAX_DIMS] = {0};
  for (int p = 0; p < ndim; ++p) {
    int d = layout->perm[p];
    if (d < 0 || d >= ndim || seen[d]) return -1;
    seen[d] = 1;
    if (shape[d] < 1 || layout->pad[d] < 0) return -1;
  }
  /* Strides from the fastest physical dimension outwards; the limit keeps every product (and the
     byte count) far from overflow. */
  const int64_t limit = (int64_t)1 << 40;
  int64_t strides[FA_MAX_DIMS] = {0};
  int64_t stride = layout->step;
  for (int p = ndim - 1; p >= 0; --p) {
    int d = layout->perm[p];
    strides[d] = stride;
    int64_t ext = shape[d] + layout->pad[d];
    if (ext > limit / stride) return -1;
    stride *= ext;
  }
  int64_t total = layout->lead + stride;
  if (total > limit) return -1;
  x->buf = (unsigned char *)malloc((size_t)total * esz);
  if (!x->buf) return -1;
  x->buf_elems = (size_t)total;
  x->elem_bytes = esz;
  x->t.data = x->buf;
  x->t.byte_offset = (uint64_t)layout->lead * esz;
  x->t.device.kind = FA_DEVICE_CPU;
  x->t.device.id = 0;
  x->t.dtype = dtype;
  x->t.ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    x->t.shape[d] = shape[d];
    x->t.strides[d] = strides[d];
  }
  tu_poison(x);
  return 0;
}

fa_tensor tu_view(void *data, fa_dtype dtype, fa_device dev, int ndim, const int64_t *shape) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device = dev;
  t.dtype = dtype;
  t.ndim = ndim;
  uint64_t stride = 1; /* unsigned, as in tu_view_bshd */
  for (int d = ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = (int64_t)stride;
    stride *= (uint64_t)shape[d];
  }
  return t;
}

fa_tensor tu_view_bshd(void *data, fa_dtype dtype, int64_t b, int64_t s, int64_t h, int64_t d) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.kind = FA_DEVICE_CPU;
  t.dtype = dtype;
  t.ndim = 4;
  t.shape[0] = b, t.shape[1] = s, t.shape[2] = h, t.shape[3] = d;
  /* Unsigned products: test_alloc_fail builds views of extents near 2^63, whose strides wrap
     (the library must refuse those sizes without reading anything), and signed overflow is
     undefined. */
  const uint64_t hd = (uint64_t)h * (uint64_t)d;
  t.strides[0] = (int64_t)((uint64_t)s * hd), t.strides[1] = (int64_t)hd, t.strides[2] = d;
  t.strides[3] = 1;
  return t;
}

void tu_free(tu_tensor *x) {
  if (!x) return;
  free(x->buf);
  free(x->snapshot);
  memset(x, 0, sizeof *x);
}

int64_t tu_numel(const tu_tensor *x) {
  int64_t n = 1;
  for (int d = 0; d < x->t.ndim; ++d) n *= x->t.shape[d];
  return n;
}

/* Element offset (in elements, from buf) of a logical index. Uses the tensor's own strides and
   byte_offset, not the layout it was made with, so a test may edit the view (e.g. to build a bad
   argument) and still read what the library would read. */
static int64_t elem_offset(const tu_tensor *x, const int64_t *idx) {
  int64_t off = (int64_t)(x->t.byte_offset / x->elem_bytes);
  for (int d = 0; d < x->t.ndim; ++d) off += idx[d] * x->t.strides[d];
  return off;
}

int64_t tu_elem_offset(const tu_tensor *x, const int64_t *idx) { return elem_offset(x, idx); }

int tu_elem_unchanged(const tu_tensor *x, int64_t flat) {
  int64_t idx[FA_MAX_DIMS];
  tu_unflatten(x, flat, idx);
  int64_t off = elem_offset(x, idx);
  if (!x->snapshot || off < 0 || (size_t)off >= x->buf_elems) return 0;
  return !memcmp(x->buf + (size_t)off * x->elem_bytes, x->snapshot + (size_t)off * x->elem_bytes,
                 x->elem_bytes);
}

static double load(const tu_tensor *x, int64_t off) {
  const unsigned char *p = x->buf + (size_t)off * x->elem_bytes;
  switch (x->t.dtype) {
    case FA_F32: {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    case FA_F16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return fa_f16_to_f32(h);
    }
    case FA_BF16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return fa_bf16_to_f32(h);
    }
    case FA_I32: {
      int32_t i;
      memcpy(&i, p, 4);
      return i;
    }
    case FA_F8E4M3:
      return fa_f8e4m3_to_f32(*p);
    case FA_F8E5M2:
      return fa_f8e5m2_to_f32(*p);
    default:
      return NAN;
  }
}

static void store(tu_tensor *x, int64_t off, double value) {
  unsigned char *p = x->buf + (size_t)off * x->elem_bytes;
  switch (x->t.dtype) {
    case FA_F32: {
      float f = (float)value;
      memcpy(p, &f, 4);
      break;
    }
    case FA_F16: {
      /* Through float: the double-to-float step can in rare ties round differently from a direct
         double-to-half rounding; irrelevant for test data, which is read back as stored. */
      uint16_t h = fa_f32_to_f16((float)value);
      memcpy(p, &h, 2);
      break;
    }
    case FA_BF16: {
      uint16_t h = fa_f32_to_bf16((float)value);
      memcpy(p, &h, 2);
      break;
    }
    case FA_I32: {
      int32_t i = (int32_t)value;
      memcpy(p, &i, 4);
      break;
    }
    case FA_F8E4M3:
      *p = fa_f32_to_f8e4m3((float)value);
      break;
    case FA_F8E5M2:
      *p = fa_f32_to_f8e5m2((float)value);
      break;
    default:
      break;
  }
}

double tu_get(const tu_tensor *x, const int64_t *idx) { return load(x, elem_offset(x, idx)); }

void tu_set(tu_tensor *x, const int64_t *idx, double value) {
  store(x, elem_offset(x, idx), value);
}

void tu_unflatten(const tu_tensor *x, int64_t flat, int64_t *idx) {
  for (int d = x->t.ndim - 1; d >= 0; --d) {
    idx[d] = flat % x->t.shape[d];
    flat /= x->t.shape[d];
  }
}

double tu_get_flat(const tu_tensor *x, int64_t flat) {
  int64_t idx[FA_MAX_DIMS];
  tu_unflatten(x, flat, idx);
  return tu_get(x, idx);
}

void tu_set_flat(tu_tensor *x, int64_t flat, double value) {
  int64_t idx[FA_MAX_DIMS];
  tu_unflatten(x, flat, idx);
  tu_set(x, idx, value);
}

void tu_read_all(const tu_tensor *x, double *dst) {
  const int nd = x->t.ndim;
  int64_t n = tu_numel(x), idx[FA_MAX_DIMS] = {0};
  int64_t off = (int64_t)(x->t.byte_offset / x->elem_bytes);
  for (int64_t f = 0; f < n; ++f) {
    dst[f] = load(x, off);
    /* Advance the odometer, keeping the element offset in step with it. */
    for (int d = nd - 1; d >= 0; --d) {
      off += x->t.strides[d];
      if (++idx[d] < x->t.shape[d]) break;
      off -= idx[d] * x->t.strides[d];
      idx[d] = 0;
    }
  }
}

void tu_read_rows_f64(const tu_tensor *x, int64_t i0, int64_t i2, int64_t rows, int64_t cols,
                      double *dst) {
  const int64_t base =
      (int64_t)(x->t.byte_offset / x->elem_bytes) + i0 * x->t.strides[0] + i2 * x->t.strides[2];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = load(x, base + r * x->t.strides[1] + c * x->t.strides[3]);
}

void tu_read_rows_f32(const tu_tensor *x, int64_t i0, int64_t i2, int64_t rows, int64_t cols,
                      float *dst) {
  const int64_t base =
      (int64_t)(x->t.byte_offset / x->elem_bytes) + i0 * x->t.strides[0] + i2 * x->t.strides[2];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = (float)load(x, base + r * x->t.strides[1] + c * x->t.strides[3]);
}

char *tu_format_index(const tu_tensor *x, int64_t flat, char *buf, size_t n) {
  int64_t idx[FA_MAX_DIMS];
  tu_unflatten(x, flat, idx);
  size_t used = 0;
  if (n == 0) return buf;
  buf[0] = '\0';
  for (int d = 0; d < x->t.ndim && used < n; ++d) {
    int w = snprintf(buf + used, n - used, "%s%lld", d == 0 ? "[" : ",", (long long)idx[d]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

void tu_fill_random(tu_tensor *x, tu_rng *rng) {
  const int nd = x->t.ndim;
  int64_t n = tu_numel(x), idx[FA_MAX_DIMS] = {0};
  int64_t off = (int64_t)(x->t.byte_offset / x->elem_bytes);
  for (int64_t f = 0; f < n; ++f) {
    /* Zeros would hide a kernel that skips work or never loads an element; redraw them. */
    do {
      store(x, off, tu_rng_normal(rng));
    } while (load(x, off) == 0.0);
    for (int d = nd - 1; d >= 0; --d) {
      off += x->t.strides[d];
      if (++idx[d] < x->t.shape[d]) break;
      off -= idx[d] * x->t.strides[d];
      idx[d] = 0;
    }
  }
}

void tu_poison(tu_tensor *x) {
  if (!x->buf) return;
  /* Quiet NaNs with a recognisable payload: an unwritten output element fails every numeric check,
     and a dump shows the pattern. */
  unsigned char pat[4];
  switch (x->t.dtype) {
    case FA_F16: {
      uint16_t h = 0x7e5a;
      memcpy(pat, &h, 2);
      break;
    }
    case FA_BF16: {
      uint16_t h = 0x7fa5;
      memcpy(pat, &h, 2);
      break;
    }
    case FA_F8E4M3:
      pat[0] = 0x7f;
      break;
    case FA_F8E5M2:
      pat[0] = 0x7e;
      break;
    default: {
      uint32_t u = 0x7fe5a5a5u;
      memcpy(pat, &u, 4);
      break;
    }
  }
  for (size_t i = 0; i < x->buf_elems; ++i) memcpy(x->buf + i * x->elem_bytes, pat, x->elem_bytes);
  (void)tu_snapshot(x);
}

int tu_snapshot(tu_tensor *x) {
  size_t bytes = x->buf_elems * x->elem_bytes;
  if (!x->snapshot) {
    x->snapshot = (unsigned char *)malloc(bytes ? bytes : 1);
    if (!x->snapshot) return -1;
  }
  memcpy(x->snapshot, x->buf, bytes);
  return 0;
}

/* Marks, per element of buf, whether a logical element lives there. Uses the tensor's view as it is
   now; an element outside buf (a view edited into nonsense) is ignored. */
static unsigned char *logical_map(const tu_tensor *x) {
  unsigned char *map = (unsigned char *)calloc(x->buf_elems ? x->buf_elems : 1, 1);
  if (!map) return NULL;
  int64_t n = tu_numel(x);
  int64_t idx[FA_MAX_DIMS] = {0};
  for (int64_t f = 0; f < n; ++f) {
    int64_t off = elem_offset(x, idx);
    if (off >= 0 && (size_t)off < x->buf_elems) map[off] = 1;
    for (int d = x->t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < x->t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return map;
}

static int compare_snapshot(const tu_tensor *x, const unsigned char *skip, char *msg, size_t n) {
  if (!x->snapshot) {
    if (msg && n) snprintf(msg, n, "no snapshot taken");
    return -1;
  }
  /* Whole-buffer equality first: the common answer, in one memcmp. */
  if (!memcmp(x->buf, x->snapshot, x->buf_elems * x->elem_bytes)) return 1;
  for (size_t i = 0; i < x->buf_elems; ++i) {
    if (skip && skip[i]) continue;
    if (memcmp(x->buf + i * x->elem_bytes, x->snapshot + i * x->elem_bytes, x->elem_bytes)) {
      if (msg && n)
        snprintf(msg, n, "element %zu of %zu in the buffer (%s) changed", i, x->buf_elems,
                 skip ? "a gap outside the logical elements" : "logical or gap");
      return 0;
    }
  }
  return 1;
}

int tu_gaps_intact(const tu_tensor *x, char *msg, size_t n) {
  unsigned char *map = logical_map(x);
  if (!map) {
    if (msg && n) snprintf(msg, n, "out of memory");
    return -1;
  }
  int r = compare_snapshot(x, map, msg, n);
  free(map);
  return r;
}

int tu_unchanged(const tu_tensor *x, char *msg, size_t n) {
  return compare_snapshot(x, NULL, msg, n);
}

int tu_copy_values(tu_tensor *dst, const tu_tensor *src) {
  if (dst->t.ndim != src->t.ndim) return -1;
  for (int d = 0; d < src->t.ndim; ++d)
    if (dst->t.shape[d] != src->t.shape[d]) return -1;
  int64_t n = tu_numel(src);
  for (int64_t f = 0; f < n; ++f) tu_set_flat(dst, f, tu_get_flat(src, f));
  return 0;
}

fa_status tu_backend_desc(int32_t id, fa_backend_desc *out) {
  enum { CAP = 16 };
  fa_backend_desc descs[CAP];
  for (int i = 0; i < CAP; ++i) fa_backend_desc_init(&descs[i]);
  int32_t count = 0;
  fa_status st = fa_backend_info(descs, CAP, &count);
  if (st != FA_OK) return st;
  for (int32_t i = 0; i < count && i < CAP; ++i)
    if (descs[i].id == id) {
      *out = descs[i];
      return FA_OK;
    }
  return FA_ERR_BACKEND_UNAVAILABLE;
}
