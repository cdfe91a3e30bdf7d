/*
 * fuzz_api.c: libFuzzer target over the public API's argument handling on the CPU backend.
 *
 * One input decodes to one call of fa_forward, fa_backward, fa_forward_kvcache, fa_plan_forward,
 * fa_plan_backward, fa_plan_forward_kvcache, fa_forward_workspace_size or
 * fa_backward_workspace_size: ranks, shapes, strides, byte offsets, dtypes, device kinds and ids
 * of every tensor, every fa_params field (varlen cu_seqlens, seqused_k, paged block tables, ALiBi
 * slopes, dropout, window, softcap, splits, workspace, backend, strict, struct sizes), the
 * fa_run_info and fa_kvcache_args struct sizes. A zero byte always picks the well-formed choice,
 * so short inputs are valid calls and the mutations each break one thing at a time.
 *
 * The harness keeps the library's side of the contract honest: every tensor a call may read or
 * write is backed by a real heap buffer covering byte_offset + (1 + sum (shape - 1) * stride)
 * elements of its declared dtype, exactly what the tensor addresses, so ASan reports any access
 * outside what the caller described. Index tensors (cu_seqlens, seqused_k, block_table,
 * cache_seqlens) are always real host buffers. The one exception is the "huge" mode, used only
 * with the plan and workspace-size calls: there q/k/v/out/... may describe up to 2^63 bytes over a
 * 64-byte dummy, since those calls never read tensor data (core/validate.c reads index tensors
 * only, decide() nothing).
 *
 * Oracles besides the sanitizers: a status is one of fa_status and a failure has a message; a
 * failed call leaves every output bitwise untouched; a run call fails exactly when its plan does,
 * with the same message (except for what only a run can find: the caller's workspace too small,
 * out of memory); a successful call reports the CPU backend and the workspace the size query
 * gives. A broken oracle ends in __builtin_trap(), which libFuzzer records as a crash.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attn.h"

/* ---------------------------------------------------------------------------------------------
 * Input reader: bytes past the end read as 0 (the well-formed choice).
 * ------------------------------------------------------------------------------------------- */

typedef struct reader {
  const uint8_t *p;
  size_t n, at;
} reader;

static uint8_t u8(reader *r) { return r->at < r->n ? r->p[r->at++] : 0; }
static uint64_t u64(reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)u8(r) << (8 * i);
  return v;
}

#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "fuzz_api: " __VA_ARGS__); \
    fprintf(stderr, "\n");                     \
    __builtin_trap();                          \
  } while (0)

/* Largest buffer the real mode backs (shapes are small; only mutated strides get near it). */
#define CAP_BYTES ((uint64_t)1 << 22)

/* ---------------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------------- */

enum {
  S_Q,
  S_K,
  S_V,
  S_OUT,
  S_LSE,
  S_DOUT,
  S_DQ,
  S_DK,
  S_DV,
  S_CU_Q,
  S_CU_K,
  S_USED,
  S_TABLE,
  S_ALIBI,
  S_CACHE_LENS,
  S_KNEW,
  S_VNEW,
  S_COS,
  S_SIN,
  S_COUNT
};

typedef struct slot {
  fa_tensor t;
  int used;   /* passed to the call */
  int index;  /* index tensor: contents decoded, always backed */
  int output; /* the call may write it */
  unsigned char *buf;
  size_t bytes;
  unsigned char *snap;
} slot;

typedef struct call {
  int op;   /* 0 fwd, 1 bwd, 2 kvcache, 3..5 their plans, 6/7 workspace sizes fwd/bwd */
  int huge; /* plan/workspace calls only: big tensors over a dummy */
  slot s[S_COUNT];
  int32_t idx_vals[S_COUNT][64]; /* decoded contents of index tensors (first 64 entries) */
} call;

static _Alignas(64) unsigned char g_dummy[64];

/* Shape of a slot before mutation. */
static void set_shape(slot *s, int ndim, const int64_t *shape, fa_dtype dtype) {
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

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t x;
  return __builtin_add_overflow(a, b, &x) ? (b < 0 ? INT64_MIN : INT64_MAX) : x;
}
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t x;
  return __builtin_mul_overflow(a, b, &x) ? INT64_MAX : x;
}

static int64_t pick_big(reader *r) {
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
static void mutate(reader *r, slot *s) {
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

/* Backs a slot with memory. Returns 0 when the input cannot be run honestly (too large to back in
   a mode where the library may touch it). */
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

static int back(call *c, slot *s, uint64_t seed) {
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

/* Writes the decoded index values into an index tensor's logical elements (1-D or 2-D). */
static void store_index(slot *s, const int32_t *vals, int64_t count) {
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

/* ---------------------------------------------------------------------------------------------
 * One input -> one call
 * ------------------------------------------------------------------------------------------- */

static const fa_dtype dtypes[] = {FA_F32, FA_F16, FA_BF16};
static const int64_t head_dims[] = {8, 1, 4, 16, 3, 32, 64, 5, 576, 512, 577, 1024, 1025, 0, 2};
#define N_HD ((int)(sizeof head_dims / sizeof head_dims[0]))

static void free_call(call *c) {
  for (int i = 0; i < S_COUNT; ++i) {
    free(c->s[i].buf);
    free(c->s[i].snap);
  }
}

static int valid_status(fa_status st) { return st >= FA_OK && st <= FA_ERR_INTERNAL; }

static void check_failure(fa_status st, const char *what) {
  if (!valid_status(st)) FAIL("%s returned %d, not an fa_status", what, (int)st);
  if (st == FA_ERR_INTERNAL) FAIL("%s: FA_ERR_INTERNAL: %s", what, fa_last_error());
  if (st != FA_OK && fa_last_error()[0] == '\0') FAIL("%s failed (%d) without a message", what, st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader rd = {data, size, 0}, *r = &rd;
  static call cbuf;
  call *c = &cbuf;
  memset(c, 0, sizeof *c);

  const uint8_t opb = u8(r), kind = u8(r);
  c->op = opb % 8;
  const int run = c->op <= 2;
  c->huge = !run && (kind & 0x80);
  const int bwd = c->op == 1 || c->op == 4 || c->op == 7;
  const int kvc = c->op == 2 || c->op == 5;
  const int varlen = !kvc && (kind & 1);
  const int paged = (kind & 2) != 0;
  const int seqused = !kvc && (kind & 4);
  const int alibi = (kind & 8) != 0;
  const int lse_packed = varlen && (kind & 16);

  /* Problem sizes: small, or in huge mode anything. */
  int64_t batch = (u8(r) + 2) % 5, sq = (u8(r) + 3) % 10, sk = (u8(r) + 5) % 14;
  int64_t hkv = 1 + u8(r) % 3, hq = hkv * (1 + u8(r) % 4);
  int64_t d = head_dims[u8(r) % N_HD], dv_pick = u8(r),
          dv = dv_pick ? head_dims[dv_pick % N_HD] : d;
  const fa_dtype dt = dtypes[u8(r) % 3];
  if (c->huge) {
    uint8_t which = u8(r);
    if (which & 1) sq = pick_big(r);
    if (which & 2) sk = pick_big(r);
    if (which & 4) hq = pick_big(r);
    if (which & 8) batch = pick_big(r) & 0xff;
    if (which & 16) d = pick_big(r);
  }
  const int64_t page = (int64_t)1 << (u8(r) % 4);

  /* Per-sequence lengths (varlen) and totals. */
  int32_t len_q[8], len_k[8];
  int64_t tq = 0, tk = 0, mq = 0, mk = 0;
  int64_t nb = batch < 8 ? batch : 8;
  for (int64_t b = 0; b < nb; ++b) {
    len_q[b] = (int32_t)((u8(r) + (uint8_t)sq) % 10);
    len_k[b] = (int32_t)((u8(r) + (uint8_t)sk) % 14);
    tq += len_q[b], tk += len_k[b];
    if (len_q[b] > mq) mq = len_q[b];
    if (len_k[b] > mk) mk = len_k[b];
  }
  if (varlen && batch > 8) batch = 8; /* index tensors hold at most 8 sequences */

  fa_params p;
  fa_params_init(&p);

  /* Main tensors. */
  slot *s = c->s;
  const int qdim = varlen ? 3 : 4;
  int64_t qshape[4], kshape[4], vshape[4], oshape[4];
  if (varlen) {
    int64_t a[3] = {tq, hq, d}, o[3] = {tq, hq, dv};
    memcpy(qshape, a, sizeof a), memcpy(oshape, o, sizeof o);
  } else {
    int64_t a[4] = {batch, sq, hq, d}, o[4] = {batch, sq, hq, dv};
    memcpy(qshape, a, sizeof a), memcpy(oshape, o, sizeof o);
  }
  int64_t blocks_per_seq = 0, pages_total = 0;
  int kdim = 4;
  if (paged) {
    int64_t keys = varlen ? mk : sk;
    blocks_per_seq = keys >= 0 && keys < 4096 ? (keys + page - 1) / page : 2;
    blocks_per_seq += u8(r) % 2;
    pages_total = 1 + u8(r) % 12;
    int64_t a[4] = {pages_total, page, hkv, d}, v4[4] = {pages_total, page, hkv, dv};
    memcpy(kshape, a, sizeof a), memcpy(vshape, v4, sizeof v4);
  } else if (varlen) {
    kdim = 3;
    int64_t a[3] = {tk, hkv, d}, v3[3] = {tk, hkv, dv};
    memcpy(kshape, a, sizeof a), memcpy(vshape, v3, sizeof v3);
  } else {
    int64_t a[4] = {batch, sk, hkv, d}, v4[4] = {batch, sk, hkv, dv};
    memcpy(kshape, a, sizeof a), memcpy(vshape, v4, sizeof v4);
  }
  set_shape(&s[S_Q], qdim, qshape, dt);
  set_shape(&s[S_K], kdim, kshape, dt);
  set_shape(&s[S_V], kdim, vshape, dt);
  set_shape(&s[S_OUT], qdim, oshape, dt);
  s[S_OUT].output = !bwd;
  if (kvc) s[S_K].output = s[S_V].output = 1;

  /* lse: [batch, hq, sq], packed [hq, tq] or padded [batch, hq, mq]. */
  const uint8_t lse_mode = u8(r);
  if (lse_mode % 4 != 3 || bwd) {
    if (lse_packed) {
      int64_t a[2] = {hq, tq};
      set_shape(&s[S_LSE], 2, a, FA_F32);
    } else {
      int64_t a[3] = {batch, hq, varlen ? mq : sq};
      set_shape(&s[S_LSE], 3, a, FA_F32);
    }
    s[S_LSE].output = !bwd;
  }
  if (bwd) {
    set_shape(&s[S_DOUT], qdim, oshape, dt);
    set_shape(&s[S_DQ], qdim, qshape, dt);
    set_shape(&s[S_DK], kdim, kshape, dt);
    set_shape(&s[S_DV], kdim, vshape, dt);
    s[S_DQ].output = s[S_DK].output = s[S_DV].output = 1;
  }

  /* Index tensors and their contents (mostly consistent, sometimes corrupted). */
  if (varlen) {
    int64_t n = batch + 1;
    set_shape(&s[S_CU_Q], 1, &n, FA_I32);
    s[S_CU_Q].index = 1;
    int32_t acc = 0;
    c->idx_vals[S_CU_Q][0] = 0;
    for (int64_t b = 0; b < batch; ++b) c->idx_vals[S_CU_Q][b + 1] = acc += len_q[b];
    if (!paged) {
      set_shape(&s[S_CU_K], 1, &n, FA_I32);
      s[S_CU_K].index = 1;
      acc = 0;
      c->idx_vals[S_CU_K][0] = 0;
      for (int64_t b = 0; b < batch; ++b) c->idx_vals[S_CU_K][b + 1] = acc += len_k[b];
    }
    p.max_seqlen_q = mq;
    p.max_seqlen_k = paged ? 0 : mk;
  }
  if (seqused) {
    set_shape(&s[S_USED], 1, &batch, FA_I32);
    s[S_USED].index = 1;
    for (int64_t b = 0; b < batch && b < 64; ++b) {
      int64_t avail = varlen && !paged ? len_k[b] : (paged ? blocks_per_seq * page : sk);
      if (avail < 0 || avail > 255) avail = 255;
      c->idx_vals[S_USED][b] = (int32_t)(avail ? u8(r) % (avail + 1) : 0);
    }
  }
  if (paged) {
    int64_t a[2] = {batch, blocks_per_seq};
    set_shape(&s[S_TABLE], 2, a, FA_I32);
    s[S_TABLE].index = 1;
    for (int64_t i = 0; i < batch * blocks_per_seq && i < 64; ++i)
      c->idx_vals[S_TABLE][i] = (int32_t)(u8(r) % pages_total);
  }
  if (alibi) {
    if (kind & 32) {
      int64_t a[2] = {batch, hq};
      set_shape(&s[S_ALIBI], 2, a, FA_F32);
    } else {
      set_shape(&s[S_ALIBI], 1, &hq, FA_F32);
    }
  }
  if (kvc) {
    int64_t cap = paged ? blocks_per_seq * page : sk;
    set_shape(&s[S_CACHE_LENS], 1, &batch, FA_I32);
    s[S_CACHE_LENS].index = 1;
    const uint8_t newb = u8(r);
    int64_t snew = newb % 4;
    if (newb & 4) {
      int64_t a[4] = {batch, snew, hkv, d}, v4[4] = {batch, snew, hkv, dv};
      set_shape(&s[S_KNEW], 4, a, dt);
      set_shape(&s[S_VNEW], 4, v4, dt);
    } else {
      snew = 0;
    }
    for (int64_t b = 0; b < batch && b < 64; ++b) {
      int64_t room = sat_add(cap, -snew);
      if (room > 255) room = 255;
      c->idx_vals[S_CACHE_LENS][b] = (int32_t)(room > 0 ? u8(r) % (room + 1) : 0);
    }
    if (newb & 8) {
      int64_t a[2] = {sat_add(sat_add(cap, sq), 2), (d / 2 > 0 ? d / 2 : 1) - (newb & 16 ? 1 : 0)};
      if (a[1] < 1) a[1] = 1;
      const fa_dtype rdt = (newb & 32) ? dt : FA_F32;
      set_shape(&s[S_COS], 2, a, rdt);
      set_shape(&s[S_SIN], 2, a, rdt);
    }
  }

  /* Mutations: a byte per slot, in order. Index contents get their own. */
  for (int i = 0; i < S_COUNT; ++i)
    if (s[i].used) mutate(r, &s[i]);
  const uint8_t corrupt = u8(r);
  if (corrupt) {
    int which = S_CU_Q + corrupt % 6;
    if (which == S_ALIBI) which = S_CACHE_LENS;
    c->idx_vals[which][u8(r) % 64] = (int32_t)(int8_t)u8(r) * ((corrupt & 0x80) ? 1 << 24 : 1);
  }

  /* Back every tensor (the library may touch exactly what each describes). */
  uint64_t seed = u64(r);
  for (int i = 0; i < S_COUNT; ++i) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    if (!back(c, &s[i], seed)) {
      free_call(c);
      return 0;
    }
    if (s[i].index) store_index(&s[i], c->idx_vals[i], 64);
  }
  /* NaN / Inf in an input now and then: propagated, never a crash. */
  const uint8_t nanb = u8(r);
  if (nanb && s[S_Q].buf && s[S_Q].t.dtype == FA_F32 && s[S_Q].bytes >= 4) {
    float v = (nanb & 1) ? NAN : ((nanb & 2) ? INFINITY : -INFINITY);
    memcpy(s[S_Q].buf + (nanb * 4u) % (s[S_Q].bytes & ~(size_t)3), &v, 4);
  }

  /* Params: a byte per field group; 0 = the default. */
  uint8_t f = u8(r);
  if (f) {
    static const float scales[] = {0.0f, 0.125f, 1.0f, NAN, INFINITY, -1.0f, 1e30f, 1e-30f};
    p.softmax_scale = scales[f % 8];
  }
  f = u8(r);
  p.causal = f & 1;
  p.causal_align = (f & 2) ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  if (f & 4) p.causal_align = (int32_t)(int8_t)u8(r);
  if (f & 8) {
    static const int64_t w[] = {-1, 0, 1, 2, 5, -2, INT64_C(1) << 40, INT64_MAX};
    p.window_enabled = 1;
    p.window_left = w[u8(r) % 8];
    p.window_right = w[u8(r) % 8];
  }
  if (f & 16) {
    static const float caps[] = {0.0f, 1.0f, 30.0f, NAN, -1.0f, INFINITY, 1e-38f, 1e38f};
    p.softcap = caps[u8(r) % 8];
  }
  if (f & 32) {
    static const float ps[] = {0.0f, 0.1f, 0.5f, 0.999f, 1.0f, -0.1f, NAN, 1e-9f};
    p.dropout_p = ps[u8(r) % 8];
    p.dropout_seed = u64(r);
    p.dropout_offset = u64(r);
  }
  if (f & 64) {
    static const int64_t ml[] = {0, 1, -1, 3, 1000, INT64_C(1) << 40, INT64_MAX, 7};
    uint8_t g = u8(r);
    if (g & 1) p.max_seqlen_q = ml[(g >> 1) % 8];
    if (g & 16) p.max_seqlen_k = ml[(g >> 5) % 8];
  }
  f = u8(r);
  if (f & 1) p.page_size = (f & 2) ? page : (int64_t)(int8_t)u8(r);
  if (f & 4) {
    static const int32_t ns[] = {0, 1, 2, 3, 7, -1, 1 << 30, INT32_MAX};
    p.num_splits = ns[u8(r) % 8];
  }
  p.deterministic = (f >> 3) & 1;
  p.return_lse = (f >> 4) & 1;
  if (f & 32) p.stream = g_dummy; /* no meaning for host memory */
  if (f & 64) {
    static const char *const fam[] = {"flash", "fa2", "", "flash.x"};
    p.kernel_family = fam[u8(r) % 4];
  }
  f = u8(r);
  if (f) {
    static const int32_t be[] = {FA_BACKEND_AUTO,
                                 FA_BACKEND_CPU,
                                 FA_BACKEND_CUDA,
                                 FA_BACKEND_HIP,
                                 FA_BACKEND_OPENCL,
                                 5,
                                 -1,
                                 99};
    p.backend = be[f % 8];
    p.strict = (f >> 3) & 1;
  }
  /* Workspace: none, a real one of a decoded size, or a size without a pointer. */
  unsigned char *ws = NULL;
  f = u8(r);
  if (f % 4 == 1) {
    size_t n = (size_t)u8(r) * 4096 + u8(r);
    ws = malloc(n ? n : 1);
    p.workspace = ws;
    p.workspace_size = n;
  } else if (f % 4 == 2) {
    p.workspace_size = 1 + u8(r);
  } else if (f % 4 == 3) {
    ws = malloc(1);
    p.workspace = ws; /* size 0: too small whenever the kernel needs scratch */
  }
  p.cu_seqlens_q = s[S_CU_Q].used ? &s[S_CU_Q].t : NULL;
  p.cu_seqlens_k = s[S_CU_K].used ? &s[S_CU_K].t : NULL;
  p.seqused_k = s[S_USED].used ? &s[S_USED].t : NULL;
  p.block_table = s[S_TABLE].used ? &s[S_TABLE].t : NULL;
  p.alibi_slopes = s[S_ALIBI].used ? &s[S_ALIBI].t : NULL;

  /* Versioned structs: the size the caller says is the size of the memory behind it. */
  _Alignas(16) unsigned char pbuf[sizeof(fa_params) + 64];
  memset(pbuf, 0, sizeof pbuf);
  memcpy(pbuf, &p, sizeof p);
  f = u8(r);
  const fa_params *pp = (const fa_params *)(void *)pbuf;
  if (f % 8 == 1) {
    size_t sz = sizeof(fa_params) + 1 + u8(r) % 63;
    memcpy(pbuf, &sz, sizeof sz);
    if (f & 8) pbuf[sizeof(fa_params) + u8(r) % (sz - sizeof(fa_params))] = 1;
  } else if (f % 8 == 2) {
    size_t sz = u8(r) % sizeof(fa_params);
    memcpy(pbuf, &sz, sizeof sz);
  } else if (f % 8 == 3) {
    pp = NULL;
  }
  _Alignas(16) unsigned char ibuf[sizeof(fa_run_info) + 64];
  fa_run_info *info = (fa_run_info *)(void *)ibuf;
  fa_run_info_init(info);
  f = u8(r);
  if (f % 8 == 1) info->struct_size = sizeof(fa_run_info) + u8(r) % 64;
  if (f % 8 == 2) info->struct_size = u8(r) % sizeof(fa_run_info);
  if (f % 8 == 3 && !(c->op >= 3 && c->op <= 5)) info = NULL;
  _Alignas(16) unsigned char kvbuf[sizeof(fa_kvcache_args) + 32];
  memset(kvbuf, 0, sizeof kvbuf);
  fa_kvcache_args *kv = (fa_kvcache_args *)(void *)kvbuf;
  fa_kvcache_args_init(kv);
  kv->cache_seqlens = s[S_CACHE_LENS].used ? &s[S_CACHE_LENS].t : NULL;
  kv->k_new = s[S_KNEW].used ? &s[S_KNEW].t : NULL;
  kv->v_new = s[S_VNEW].used ? &s[S_VNEW].t : NULL;
  kv->rotary_cos = s[S_COS].used ? &s[S_COS].t : NULL;
  kv->rotary_sin = s[S_SIN].used ? &s[S_SIN].t : NULL;
  f = u8(r);
  kv->rotary_interleaved = f & 1;
  if (f & 2) kv->struct_size = (f & 4) ? sizeof(fa_kvcache_args) + 8 : u8(r) % 16;
  const fa_kvcache_args *kvp = (f & 8) && (f & 16) ? NULL : kv;

  const fa_tensor *t[S_COUNT];
  for (int i = 0; i < S_COUNT; ++i) t[i] = s[i].used ? &s[i].t : NULL;
  fa_tensor *w[S_COUNT];
  for (int i = 0; i < S_COUNT; ++i) w[i] = s[i].used ? &s[i].t : NULL;

  /* Snapshots of everything the call may write. */
  for (int i = 0; i < S_COUNT; ++i)
    if (s[i].buf && (s[i].output || run)) {
      s[i].snap = malloc(s[i].bytes);
      if (s[i].snap) memcpy(s[i].snap, s[i].buf, s[i].bytes);
    }

  /* The plan first: a run must fail exactly when it does (same status and message). */
  fa_run_info plan_info;
  fa_run_info_init(&plan_info);
  fa_status plan_st;
  size_t ws_bytes = 0;
  switch (c->op % 3 == 2 ? 2 : (bwd ? 1 : 0)) {
    case 0:
      plan_st = fa_plan_forward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], &plan_info);
      break;
    case 1:
      plan_st = fa_plan_backward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT], t[S_DQ],
                                 t[S_DK], t[S_DV], &plan_info);
      break;
    default:
      plan_st =
          fa_plan_forward_kvcache(pp, t[S_Q], t[S_K], t[S_V], kvp, t[S_OUT], t[S_LSE], &plan_info);
      break;
  }
  check_failure(plan_st, "plan");
  char plan_msg[FA_REASON_LEN];
  snprintf(plan_msg, sizeof plan_msg, "%s", fa_last_error());
  if (plan_st == FA_OK && strcmp(plan_info.backend_name, "cpu") != 0)
    FAIL("plan chose '%s' for host memory", plan_info.backend_name);

  fa_status st = FA_OK;
  const char *what = "call";
  switch (c->op) {
    case 0:
      what = "fa_forward";
      st = fa_forward(pp, t[S_Q], t[S_K], t[S_V], w[S_OUT], w[S_LSE], info);
      break;
    case 1:
      what = "fa_backward";
      st = fa_backward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT], w[S_DQ], w[S_DK],
                       w[S_DV], info);
      break;
    case 2:
      what = "fa_forward_kvcache";
      st = fa_forward_kvcache(pp, t[S_Q], w[S_K], w[S_V], kvp, w[S_OUT], w[S_LSE], info);
      break;
    case 3:
      what = "fa_plan_forward";
      st = fa_plan_forward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], info);
      break;
    case 4:
      what = "fa_plan_backward";
      st = fa_plan_backward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT], t[S_DQ],
                            t[S_DK], t[S_DV], info);
      break;
    case 5:
      what = "fa_plan_forward_kvcache";
      st = fa_plan_forward_kvcache(pp, t[S_Q], t[S_K], t[S_V], kvp, t[S_OUT], t[S_LSE], info);
      break;
    case 6:
      what = "fa_forward_workspace_size";
      st = fa_forward_workspace_size(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], &ws_bytes);
      break;
    default:
      what = "fa_backward_workspace_size";
      st = fa_backward_workspace_size(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT],
                                      t[S_DQ], t[S_DK], t[S_DV], &ws_bytes);
      break;
  }
  check_failure(st, what);

  /* A run fails exactly when its plan does, with the same message, unless what failed is only
     knowable when running: the caller's workspace too small, or memory. The info struct is
     checked by the run call alone (the plan had its own). */
  const int info_bad = info && info->struct_size < sizeof(fa_run_info);
  if (run && !info_bad) {
    const int run_only = st == FA_ERR_OUT_OF_MEMORY || (st == FA_ERR_INVALID_ARGUMENT &&
                                                        strstr(fa_last_error(), "workspace_size"));
    if (!run_only && (st != plan_st || strcmp(plan_msg, fa_last_error()) != 0))
      FAIL("%s: status %d '%s' but its plan gave %d '%s'", what, st, fa_last_error(), plan_st,
           plan_msg);
  }
  if (!run && !info_bad && (c->op == 6 || c->op == 7) && st != plan_st)
    FAIL("%s: status %d but the plan's %d", what, st, plan_st);
  if (st == FA_OK && (c->op == 6 || c->op == 7) && ws_bytes != plan_info.workspace_bytes)
    FAIL("%s = %zu but the plan reports %zu", what, ws_bytes, plan_info.workspace_bytes);
  if (st == FA_OK && c->op <= 5 && info && !info_bad && strcmp(info->backend_name, "cpu") != 0)
    FAIL("%s succeeded on '%s'", what, info->backend_name);

  /* A failed call wrote nothing: every buffer it could reach is bitwise as before. */
  if (st != FA_OK)
    for (int i = 0; i < S_COUNT; ++i)
      if (s[i].snap && memcmp(s[i].snap, s[i].buf, s[i].bytes) != 0)
        FAIL("%s failed (%s: %s) but changed tensor slot %d", what, fa_status_string(st),
             fa_last_error(), i);
  /* Inputs are never written, whatever the outcome (kvcache writes its caches, an output). */
  if (run && st == FA_OK)
    for (int i = 0; i < S_COUNT; ++i)
      if (s[i].snap && !s[i].output && memcmp(s[i].snap, s[i].buf, s[i].bytes) != 0)
        FAIL("%s changed input slot %d", what, i);

  free(ws);
  free_call(c);
  return 0;
}
