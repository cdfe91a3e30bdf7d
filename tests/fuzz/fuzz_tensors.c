/*
 * fuzz_tensors.c: the fuzz target's tensors: a slot's shape, its mutations (layouts, ranks,
 * dtypes, devices, offsets, huge extents, NULL), and the heap buffer behind it, covering exactly
 * the bytes the tensor addresses so that ASan reports any access outside what the caller
 * described.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

_Alignas(64) unsigned char g_dummy[64];

/* Shape of a slot before mutation. */
void set_shape(slot *s, int ndim, const int64_t *shape, fa_dtype dtype) {
  memset(&s->t, 0, sizeof s->t);
  s->t.device.kind = FA_DEVICE_CPU;
  s->t.dtype = dtype;
  s->t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) s->t.shape[i] = shape[i];
  /* Contiguous row-major strides, saturating (huge shapes are refused before any use). */
  int64_t st = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    s->t.strides[i] = st;
    int64_t e = shape[i] > 1 ? shape[i] : 1;
    if (__builtin_mul_overflow(st, e, &st)) st = INT64_MAX / 2;
  }
  s->used = 1;
}

static const int64_t big_values[] = {
    INT64_C(1) << 31,
    (INT64_C(1) << 31) - 1,
    (INT64_C(1) << 32) + 1,
    INT64_C(1) << 40,
    INT64_C(1) << 61,
    INT64_C(1) << 62,
    INT64_MAX,
    INT64_MAX / 3,
    (INT64_C(1) << 30) + 7,
    INT64_C(1) << 20,
    -1,
    INT64_MIN,
};
#define N_BIG ((int)(sizeof big_values / sizeof big_values[0]))

int64_t sat_add(int64_t a, int64_t b) {
  int64_t x;
  return __builtin_add_overflow(a, b, &x) ? (b < 0 ? INT64_MIN : INT64_MAX) : x;
}
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t x;
  return __builtin_mul_overflow(a, b, &x) ? INT64_MAX : x;
}

int64_t pick_big(reader *r) {
  uint8_t b = u8(r);
  if (b < 200) return big_values[b % N_BIG];
  return (int64_t)(u64(r) >> (b % 8));
}

/* One optional mutation of a tensor's description, decoded from the input. */
static void mutate_once(reader *r, slot *s, uint8_t m) {
  fa_tensor *t = &s->t;
  int nd = t->ndim > 0 && t->ndim <= FA_MAX_DIMS ? t->ndim : 1;
  uint8_t a = u8(r), b = u8(r);
  switch (m % 16) {
    case 1: /* layout: padded rows */
      for (int i = nd - 2; i >= 0; --i) t->strides[i] = sat_add(t->strides[i], (a % 5) * (i + 1));
      break;
    case 2: /* permute two dims in memory */
      if (nd >= 2) {
        int i = a % nd, j = b % nd;
        int64_t tmp = t->strides[i];
        t->strides[i] = t->strides[j];
        t->strides[j] = tmp;
      }
      break;
    case 3: /* zero stride: broadcast (legal for inputs, an overlap for outputs) */
      t->strides[a % nd] = 0;
      break;
    case 4: /* gap between elements of the last dim */
      t->strides[nd - 1] = 1 + a % 3;
      for (int i = nd - 2; i >= 0; --i)
        t->strides[i] = sat_mul(t->strides[i + 1], t->shape[i + 1] > 0 ? t->shape[i + 1] : 1);
      break;
    case 5: /* arbitrary small stride */
      t->strides[a % nd] = (int64_t)(int8_t)b;
      break;
    case 6: /* one dim off by one, or zero, or negative */
      t->shape[a % nd] = sat_add(t->shape[a % nd], (int64_t)(int8_t)b % 3);
      break;
    case 7:
      t->shape[a % nd] = (b & 1) ? 0 : -(int64_t)(b % 5) - 1;
      break;
    case 8: /* rank */
      t->ndim = (int32_t)(int8_t)a % 7;
      if (t->ndim > FA_MAX_DIMS || t->ndim < 0) break;
      break;
    case 9: /* dtype */
      t->dtype = (fa_dtype)(int32_t)(int8_t)a % 7;
      break;
    case 10: /* device kind and id */
      t->device.kind = (fa_device_kind)((int8_t)a % 7);
      t->device.id = (b & 0x80) ? -(int32_t)(b & 3) : (int32_t)(b % 3);
      break;
    case 11: /* byte offset: aligned or not */
      t->byte_offset = (uint64_t)(a % 9) * (uint64_t)(b % 3 + 1);
      break;
    case 12: /* NULL data (refused when the tensor has elements) */
      s->used = 2;
      break;
    case 13: /* huge shape or stride (huge mode: still a plan call; real mode: must be refused) */
      if (b & 1)
        t->shape[a % nd] = pick_big(r);
      else
        t->strides[a % nd] = pick_big(r);
      break;
    case 14: /* huge byte offset */
      t->byte_offset = (uint64_t)pick_big(r);
      break;
    case 15: /* not passed at all */
      s->used = 0;
      break;
    default:
      break;
  }
}

/* Up to three mutations of one tensor (a set high bit asks for another); a zero byte, the common
   case, leaves it well-formed. */
void mutate(reader *r, slot *s) {
  for (int k = 0; k < 3; ++k) {
    uint8_t m = u8(r);
    if (m == 0) return;
    mutate_once(r, s, m);
    if (!(m & 0x80)) return;
  }
}

/* Bytes the tensor addresses (byte_offset included), or UINT64_MAX when not representable or
   something validation must refuse (negative extents). 0 when it has no elements. */
static uint64_t addressed_bytes(const fa_tensor *t) {
  if (t->ndim < 1 || t->ndim > FA_MAX_DIMS) return 0;
  size_t es = fa_dtype_size(t->dtype);
  if (es == 0) es = 4;
  uint64_t extent = 0;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0 || t->strides[i] < 0) return UINT64_MAX;
    if (t->shape[i] == 0) return 0;
  }
  for (int i = 0; i < t->ndim; ++i) {
    uint64_t reach;
    if (__builtin_mul_overflow((uint64_t)(t->shape[i] - 1), (uint64_t)t->strides[i], &reach) ||
        __builtin_add_overflow(extent, reach, &extent))
      return UINT64_MAX;
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(extent + 1, (uint64_t)es, &bytes) ||
      __builtin_add_overflow(bytes, t->byte_offset, &bytes))
    return UINT64_MAX;
  return bytes;
}

/* Logical elements, saturating; index tensors and real-mode tensors are kept to few of them
   (a broadcast stride 0 lets a tiny buffer describe 2^40 elements, which the library would
   rightly spend hours on). */
static uint64_t logical_elems(const fa_tensor *t) {
  if (t->ndim < 1 || t->ndim > FA_MAX_DIMS) return 0;
  uint64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] <= 0) return 0;
    if (__builtin_mul_overflow(n, (uint64_t)t->shape[i], &n)) return UINT64_MAX;
  }
  return n;
}
#define MAX_ELEMS ((uint64_t)1 << 20)

/* Backs a slot with memory. Returns 0 when the input cannot be run honestly (too large to back in
   a mode where the library may touch it). */
int back(call *c, slot *s, uint64_t seed) {
  if (!s->used) return 1;
  if ((s->index || !c->huge) && logical_elems(&s->t) > (s->index ? 4096 : MAX_ELEMS)) return 0;
  uint64_t bytes = addressed_bytes(&s->t);
  if (s->used == 2) { /* deliberately NULL */
    s->t.data = NULL;
    return 1;
  }
  if (bytes == 0) { /* no elements: NULL or a pointer that must never be dereferenced */
    s->t.data = (seed & 1) ? NULL : g_dummy;
    return 1;
  }
  if (bytes == UINT64_MAX || bytes > CAP_BYTES) {
    /* The library must refuse these (or, in huge mode, only plan them): they address more than
       any buffer here. In real mode that cannot be checked without backing them, so skip. */
    if (c->huge && !s->index) {
      s->t.data = g_dummy;
      return 1;
    }
    if (bytes == UINT64_MAX) {
      s->t.data = g_dummy; /* validation refuses negative extents and overflow before any read */
      return 1;
    }
    return 0;
  }
  if (c->huge && !s->index) {
    s->t.data = g_dummy; /* never read by plan calls */
    return 1;
  }
  s->buf = malloc((size_t)bytes);
  if (!s->buf) return 0;
  s->bytes = (size_t)bytes;
  /* Fill: small finite values, now and then NaN/Inf, for float tensors; index values below. */
  uint64_t x = seed | 1;
  for (size_t i = 0; i < s->bytes; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    s->buf[i] = (unsigned char)(x >> 24);
  }
  if (s->t.dtype == FA_F32 && !s->index) {
    float *f = (float *)(void *)s->buf;
    for (size_t i = 0; i < s->bytes / 4; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f[i] = (float)((int64_t)(x % 2001) - 1000) / 500.0f;
    }
  }
  s->t.data = s->buf;
  return 1;
}

int alias_into(slot *o, const slot *j, uint64_t pick) {
  if (!o->buf || !j->buf || o == j || o->t.dtype == FA_I32) return 0;
  const uint64_t es = fa_dtype_size(o->t.dtype);
  const uint64_t own = addressed_bytes(&o->t) - o->t.byte_offset; /* from its first element */
  if (es == 0 || own > j->bytes || logical_elems(&o->t) > 4096) return 0;
  const uint64_t room = (j->bytes - own) / es;
  o->t.data = j->buf;
  o->t.byte_offset = (pick % (room + 1)) * es;
  return 1;
}

/* Calls f(byte, arg) for every byte of every element of t, relative to its data pointer. */
static void each_byte(const fa_tensor *t, void (*f)(uint64_t, void *), void *arg) {
  const uint64_t es = fa_dtype_size(t->dtype);
  int64_t idx[FA_MAX_DIMS] = {0};
  if (logical_elems(t) == 0) return;
  for (;;) {
    uint64_t e = t->byte_offset;
    for (int d = 0; d < t->ndim; ++d) e += (uint64_t)(idx[d] * t->strides[d]) * es;
    for (uint64_t b = 0; b < es; ++b) f(e + b, arg);
    int d = t->ndim - 1;
    while (d >= 0 && ++idx[d] == t->shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}
typedef struct footprint {
  unsigned char *mask;
  uint64_t n;
  int hit;
} footprint;
static void mark_byte(uint64_t b, void *arg) {
  footprint *f = arg;
  if (b < f->n) f->mask[b] = 1;
}
static void test_byte(uint64_t b, void *arg) {
  footprint *f = arg;
  if (b < f->n && f->mask[b]) f->hit = 1;
}

unsigned char *footprint_of(const slot *o, size_t n) {
  unsigned char *mask = calloc(n ? n : 1, 1);
  if (!mask) return NULL;
  footprint f = {mask, n, 0};
  each_byte(&o->t, mark_byte, &f);
  return mask;
}

int shares_byte(const slot *o, const slot *j) {
  unsigned char *mask = footprint_of(o, j->bytes);
  if (!mask) return -1;
  footprint f = {mask, j->bytes, 0};
  each_byte(&j->t, test_byte, &f);
  free(mask);
  return f.hit;
}

/* Writes the decoded index values into an index tensor's logical elements (1-D or 2-D). */
void store_index(slot *s, const int32_t *vals, int64_t count) {
  if (!s->buf || s->t.dtype != FA_I32) return;
  unsigned char *base = s->buf + s->t.byte_offset;
  if (s->t.ndim == 1 && s->t.shape[0] >= 0) {
    for (int64_t i = 0; i < s->t.shape[0]; ++i) {
      int32_t v = i < count ? vals[i] : 0;
      memcpy(base + (size_t)(i * s->t.strides[0]) * 4, &v, 4);
    }
  } else if (s->t.ndim == 2 && s->t.shape[0] >= 0 && s->t.shape[1] >= 0) {
    for (int64_t i = 0; i < s->t.shape[0]; ++i)
      for (int64_t j = 0; j < s->t.shape[1]; ++j) {
        int64_t k = i * s->t.shape[1] + j;
        int32_t v = k < count ? vals[k] : 0;
        memcpy(base + (size_t)(i * s->t.strides[0] + j * s->t.strides[1]) * 4, &v, 4);
      }
  }
}

void free_call(call *c) {
  for (int i = 0; i < S_COUNT; ++i) {
    free(c->s[i].buf);
    free(c->s[i].snap);
  }
}

void describe_slot(const char *what, const slot *s) {
  const fa_tensor *t = &s->t;
  fprintf(stderr, "fuzz_api: %s: dtype %d, ndim %d, byte_offset %llu, buffer %zu bytes at %p;",
          what, (int)t->dtype, (int)t->ndim, (unsigned long long)t->byte_offset, s->bytes,
          (void *)s->buf);
  for (int i = 0; i < t->ndim && i < FA_MAX_DIMS; ++i)
    fprintf(stderr, " [%lld:%lld]", (long long)t->shape[i], (long long)t->strides[i]);
  fprintf(stderr, " data %p\n", t->data);
}
