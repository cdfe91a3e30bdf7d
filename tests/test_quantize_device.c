/*
 * test_quantize_device.c: fa_quantize on a device backend, OpenCL (opencl.quantize) or CUDA
 * (cuda.quantize; argv[1] names it, opencl by default), against the CPU backend's, byte for byte: y
 * and descale, and the memory around them (every buffer starts with the same random poison on both
 * sides, so a stray write shows as a difference). The inputs are fresh each run (the seed is
 * printed; FA_TEST_SEED replays a run).
 *
 * The matrix: x f32/f16/bf16; y e4m3/e5m2 with descales per tensor [1,1,1], per batch and head
 * [B,H,1], per head [1,H,1] and per block [B,H,ceil(S/rows)] with rows not dividing S, and y
 * f32/f16/bf16 (rotation only, or now and then a plain conversion); rotation on and off with fresh
 * seeds; head dims 1, 8, 32, 64, 128, 256 (and 24 unrotated, 1024 the largest); contiguous,
 * strided, and contiguous one element off the alignment of whole rows, x, y and descale; blocks of
 * up to 128 rows over a few hundred tokens at head dims 32-256 (one thread block a descale block
 * on CUDA); outliers (a few entries x100) in every case, and in some a head of zeros, a
 * head of subnormal-sized values or infinities (unrotated). Then: empty tensors (batch 0, seqlen 0,
 * heads 0 with NULL data, and head dim 0: y untouched, every descale 1), and a head dim that is
 * not a power of two with rotation (FA_ERR_UNSUPPORTED from both backends, nothing written). Each
 * call on the device asks for its backend with args.strict set, and its run report must give the
 * CPU's kernel name with the backend's name in place of "cpu".
 *
 * A device without IEEE division or subnormals is refused by the plugin for FP8 output or any
 * arithmetic (its reason says which); those cases are counted as skipped there. Exits 77 where the
 * backend or its device memory is not available.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/dtype.h"
#include "device_mem.h"
#include "harness.h"
#include "tensor_util.h"

typedef enum dlayout { D_TENSOR, D_BATCH_HEAD, D_HEAD, D_BLOCK, D_NONE } dlayout;
static const char *const dlayout_names[] = {"per_tensor", "per_batch_head", "per_head", "block",
                                            "none"};

typedef enum special { S_NONE, S_ZERO_HEAD, S_TINY_HEAD, S_INF } special;
static const char *const special_names[] = {"", ", a head of zeros", ", a head of tiny values",
                                            ", infinities"};

typedef struct qcase {
  fa_dtype xdt, ydt;
  int64_t b, s, h, d;
  int rotate;
  uint64_t seed;
  dlayout dl;
  int64_t block_rows;
  int strided; /* bit 0: x, bit 1: y, bit 2: descale */
  int shifted; /* contiguous one element past the buffer's start: bit 0: x, bit 1: y */
  special sp;
  int own_queue; /* args.stream NULL: the plugin's own queue */
} qcase;

typedef struct env {
  int32_t backend;  /* FA_BACKEND_OPENCL or FA_BACKEND_CUDA */
  const char *name; /* "opencl", "cuda" */
  fa_device dev;
  void *stream;
  tu_rng rng;
  int refused; /* cases the device refused (no IEEE division or subnormals) */
} env;

/* One tensor in host memory (the CPU's copy) and in a device buffer (the device's copy) with the
   same layout and the same bytes. */
typedef struct pair {
  fa_tensor cpu, on_dev;
  unsigned char *host;
  size_t bytes;
  void *dev;
} pair;

/* The layout of a tensor of ndim extents: L_CONTIGUOUS; L_STRIDED: (4-D) dims 1 and 2 swapped in
   memory, a padding element after each dim's extent, a gap after every element of the last dim
   and 3 elements before the first (byte_offset); L_SHIFTED: contiguous from one element past the
   buffer's start (rows not aligned to their size). Returns the buffer's size in bytes. */
enum { L_CONTIGUOUS, L_STRIDED, L_SHIFTED };

static size_t lay_out(fa_tensor *t, fa_dtype dt, int ndim, const int64_t *shape, int layout) {
  const int strided = layout == L_STRIDED;
  memset(t, 0, sizeof *t);
  t->dtype = dt;
  t->ndim = ndim;
  int perm[4] = {0, 1, 2, 3};
  if (strided && ndim == 4) perm[1] = 2, perm[2] = 1;
  const int64_t pad = strided ? 1 : 0, lead = strided ? 3 : layout == L_SHIFTED;
  int64_t stride = strided ? 2 : 1;
  for (int p = ndim - 1; p >= 0; --p) {
    const int d = perm[p];
    t->shape[d] = shape[d];
    t->strides[d] = stride;
    stride *= (shape[d] > 0 ? shape[d] : 1) + pad;
  }
  t->byte_offset = (uint64_t)lead * fa_dtype_size(dt);
  return (size_t)(lead + stride) * fa_dtype_size(dt);
}

static int64_t numel_of(const fa_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* Allocates both copies, filled with the same random bytes; data NULL where the tensor is empty. */
static int pair_make(pair *p, env *e, fa_dtype dt, int ndim, const int64_t *shape, int layout) {
  char err[256];
  memset(p, 0, sizeof *p);
  p->bytes = lay_out(&p->cpu, dt, ndim, shape, layout);
  p->cpu.device.kind = FA_DEVICE_CPU;
  p->on_dev = p->cpu;
  p->on_dev.device = e->dev;
  if (numel_of(&p->cpu) == 0) return 0;
  p->host = (unsigned char *)malloc(p->bytes);
  if (!p->host) return test_fail("out of host memory"), -1;
  for (size_t i = 0; i < p->bytes; ++i) p->host[i] = (unsigned char)tu_rng_u64(&e->rng);
  if (devmem_alloc(e->dev, p->bytes, &p->dev, err, sizeof err) != 0 ||
      devmem_copy_to_device(e->dev, p->dev, p->host, p->bytes, err, sizeof err) != 0)
    return test_fail("%s", err), -1;
  p->cpu.data = p->host;
  p->on_dev.data = p->dev;
  return 0;
}

/* After the CPU call wrote p->host: the uploaded x is refreshed from it (inputs set on the host).
 */
static int pair_upload(pair *p, env *e) {
  char err[256];
  if (!p->dev) return 0;
  if (devmem_copy_to_device(e->dev, p->dev, p->host, p->bytes, err, sizeof err) != 0)
    return test_fail("%s", err), -1;
  return 0;
}

static void pair_free(pair *p, env *e) {
  if (p->dev) devmem_free(e->dev, p->dev, NULL, 0);
  free(p->host);
  memset(p, 0, sizeof *p);
}

/* Element (i0, i1, i2, i3) of a host tensor. */
static unsigned char *host_at(const pair *p, const int64_t *idx) {
  const size_t es = fa_dtype_size(p->cpu.dtype);
  int64_t off = (int64_t)(p->cpu.byte_offset / es);
  for (int i = 0; i < p->cpu.ndim; ++i) off += idx[i] * p->cpu.strides[i];
  return p->host + (size_t)off * es;
}

static void store(const pair *p, const int64_t *idx, float v) {
  unsigned char *at = host_at(p, idx);
  if (p->cpu.dtype == FA_F32) {
    memcpy(at, &v, 4);
  } else {
    const uint16_t h = p->cpu.dtype == FA_F16 ? fa_f32_to_f16(v) : fa_f32_to_bf16(v);
    memcpy(at, &h, 2);
  }
}

/* x: standard normal values, a few outliers x100, and the case's special values. */
static void fill_x(const pair *x, const qcase *c, env *e) {
  int64_t idx[4];
  for (idx[0] = 0; idx[0] < c->b; ++idx[0])
    for (idx[1] = 0; idx[1] < c->s; ++idx[1])
      for (idx[2] = 0; idx[2] < c->h; ++idx[2])
        for (idx[3] = 0; idx[3] < c->d; ++idx[3]) {
          float v = (float)tu_rng_normal(&e->rng);
          if (tu_rng_uniform(&e->rng) < 0.002) v *= 100.0f;
          if (c->sp == S_ZERO_HEAD && idx[2] == 0) v = 0.0f;
          /* 2^-130: subnormal in f32 and bf16, and so are the descales of such a block */
          if (c->sp == S_TINY_HEAD && idx[2] == 0) v *= 7.3468396e-40f;
          store(x, idx, v);
        }
  for (int i = 0; i < 3; ++i) { /* outliers, at least a few wherever the tensor is large */
    idx[0] = (int64_t)(tu_rng_u64(&e->rng) % (uint64_t)c->b);
    idx[1] = (int64_t)(tu_rng_u64(&e->rng) % (uint64_t)c->s);
    idx[2] = (int64_t)(tu_rng_u64(&e->rng) % (uint64_t)c->h);
    idx[3] = (int64_t)(tu_rng_u64(&e->rng) % (uint64_t)c->d);
    store(x, idx, (float)tu_rng_normal(&e->rng) * 100.0f);
    if (c->sp == S_INF) store(x, idx, i == 0 ? INFINITY : -INFINITY);
  }
}

/* The device copy of p against the host copy, byte for byte (the whole buffer). */
static void compare(const pair *p, env *e, const char *what) {
  char err[256];
  if (!p->dev) return;
  unsigned char *got = (unsigned char *)malloc(p->bytes);
  if (!got) return test_fail("out of host memory");
  if (devmem_copy_to_host(e->dev, got, p->dev, p->bytes, err, sizeof err) != 0) {
    free(got);
    return test_fail("%s: %s", what, err);
  }
  const size_t es = fa_dtype_size(p->cpu.dtype);
  long bad = 0;
  for (size_t i = 0; i < p->bytes; i += es) {
    if (memcmp(got + i, p->host + i, es) == 0) continue;
    if (++bad > 3) continue;
    uint32_t a = 0, b = 0;
    memcpy(&a, p->host + i, es);
    memcpy(&b, got + i, es);
    test_fail("%s: element %zu of the buffer: cpu 0x%0*x, %s 0x%0*x", what, i / es, (int)(2 * es),
              (unsigned)a, e->name, (int)(2 * es), (unsigned)b);
  }
  if (bad > 3) test_add_failures(bad - 3);
  free(got);
}

static int refused_by_device(fa_status st) {
  const char *m = fa_last_error();
  return st == FA_ERR_UNSUPPORTED &&
         (strstr(m, "CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT") || strstr(m, "CL_FP_DENORM"));
}

/* The layout of case c's tensor i (0 x, 1 y, 2 descale). */
static int layout_of(const qcase *c, int i) {
  return (c->strided >> i) & 1 ? L_STRIDED : (c->shifted >> i) & 1 ? L_SHIFTED : L_CONTIGUOUS;
}

/* Both backends on the same inputs; the device's y and descale must equal the CPU's byte for byte.
   expect: the status both must return. */
static void run_case(env *e, const qcase *c, fa_status expect) {
  const int fp8 = c->ydt == FA_F8E4M3 || c->ydt == FA_F8E5M2;
  const int64_t shape[4] = {c->b, c->s, c->h, c->d};
  int64_t dshape[3] = {1, 1, 1};
  if (c->dl == D_BATCH_HEAD || c->dl == D_BLOCK) dshape[0] = c->b;
  if (c->dl != D_TENSOR) dshape[1] = c->h;
  if (c->block_rows > 0) dshape[2] = (c->s + c->block_rows - 1) / c->block_rows;
  pair x, y, ds;
  memset(&ds, 0, sizeof ds);
  if (pair_make(&x, e, c->xdt, 4, shape, layout_of(c, 0)) != 0 ||
      pair_make(&y, e, c->ydt, 4, shape, layout_of(c, 1)) != 0 ||
      (fp8 && pair_make(&ds, e, FA_F32, 3, dshape, layout_of(c, 2)) != 0))
    goto done;
  if (x.host) {
    fill_x(&x, c, e);
    if (pair_upload(&x, e) != 0) goto done;
  }
  fa_quantize_args args;
  fa_quantize_args_init(&args);
  args.block_rows = c->block_rows;
  args.rotate = c->rotate;
  args.rotate_seed = c->seed;
  args.strict = 1;
  args.backend = FA_BACKEND_CPU;
  fa_run_info cpu_info, dev_info;
  fa_run_info_init(&cpu_info);
  fa_run_info_init(&dev_info);
  fa_status st = fa_quantize(&args, &x.cpu, &y.cpu, fp8 ? &ds.cpu : NULL, &cpu_info);
  if (st != expect) {
    test_fail("cpu: %s (%s), expected %s", fa_status_string(st), fa_last_error(),
              fa_status_string(expect));
    goto done;
  }
  args.backend = e->backend;
  args.stream = c->own_queue ? NULL : e->stream;
  st = fa_quantize(&args, &x.on_dev, &y.on_dev, fp8 ? &ds.on_dev : NULL, &dev_info);
  if (refused_by_device(st) && expect == FA_OK) {
    if (e->refused++ == 0) printf("  (the device refuses this case: %s)\n", fa_last_error());
    goto done;
  }
  if (st != expect) {
    test_fail("%s: %s (%s), expected %s", e->name, fa_status_string(st), fa_last_error(),
              fa_status_string(expect));
    goto done;
  }
  if (st == FA_OK) {
    if (dev_info.backend != e->backend)
      test_fail("ran on %s, not %s", dev_info.backend_name, e->name);
    char want[FA_KERNEL_LEN];
    snprintf(want, sizeof want, "%s%s", e->name,
             strncmp(cpu_info.kernel, "cpu.", 4) == 0 ? cpu_info.kernel + 3 : "?");
    if (strcmp(dev_info.kernel, want) != 0)
      test_fail("run report names kernel '%s', expected '%s' (cpu: '%s')", dev_info.kernel, want,
                cpu_info.kernel);
  }
  compare(&y, e, "y");
  if (fp8) compare(&ds, e, "descale");
done:
  pair_free(&x, e);
  pair_free(&y, e);
  pair_free(&ds, e);
}

static void describe(const qcase *c, char *name, size_t n) {
  char rows[48] = "", rot[40] = "rotate off";
  if (c->block_rows > 0) snprintf(rows, sizeof rows, " of %" PRId64 " rows", c->block_rows);
  if (c->rotate) snprintf(rot, sizeof rot, "rotate seed %#" PRIx64, c->seed);
  snprintf(name, n, "x %s [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] -> %s, %s%s, %s%s%s%s",
           fa_dtype_name(c->xdt), c->b, c->s, c->h, c->d, fa_dtype_name(c->ydt),
           dlayout_names[c->dl], rows, rot,
           c->strided   ? ", strided"
           : c->shifted ? ", shifted"
                        : "",
           special_names[c->sp], c->own_queue ? ", own queue" : "");
}

/* A shape for head dim d: a few batches, heads and tokens (fewer rows for the larger dims). */
static void draw_shape(env *e, qcase *c, int64_t d) {
  c->d = d;
  c->b = 1 + (int64_t)(tu_rng_u64(&e->rng) % 3);
  c->h = 1 + (int64_t)(tu_rng_u64(&e->rng) % 4);
  c->s = (d >= 256 ? 3 : 5) + (int64_t)(tu_rng_u64(&e->rng) % (d >= 256 ? 8 : 36));
}

/* Rows per block for seqlen s: 2..s-1, never dividing s (s grows by one where no such row count
   exists). */
static int64_t draw_block_rows(env *e, qcase *c) {
  if (c->s < 5) c->s = 5;
  for (;;) {
    const int64_t r = 2 + (int64_t)(tu_rng_u64(&e->rng) % (uint64_t)(c->s - 2));
    if (c->s % r != 0) return r;
  }
}

/* One drawn case of the matrix as a test case: every third on its own queue (*n counts them). */
static void run_drawn(env *e, qcase *c, int *n) {
  char name[320];
  c->own_queue = *n % 3 == 0;
  ++*n;
  describe(c, name, sizeof name);
  test_case_begin(name);
  run_case(e, c, FA_OK);
  test_case_end();
}

static void matrix(env *e) {
  static const fa_dtype xdts[] = {FA_F32, FA_F16, FA_BF16};
  static const int64_t dims[] = {1, 8, 32, 64, 128, 256, 24, 1024};
  static const fa_dtype fp8s[] = {FA_F8E4M3, FA_F8E5M2};
  static const fa_dtype floats[] = {FA_F32, FA_F16, FA_BF16};
  int n = 0;
  for (size_t xi = 0; xi < sizeof xdts / sizeof xdts[0]; ++xi)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; ++di) {
      const int64_t d = dims[di];
      const int pow2 = (d & (d - 1)) == 0;
      const int strides = d == 1024 ? 1 : 2; /* the largest dim contiguous only */
      for (int strided = 0; strided < strides; ++strided) {
        for (int rotate = 0; rotate <= pow2; ++rotate)
          for (size_t yi = 0; yi < 2; ++yi)
            for (int dl = D_TENSOR; dl <= D_BLOCK; ++dl) {
              qcase c;
              memset(&c, 0, sizeof c);
              c.xdt = xdts[xi];
              c.ydt = fp8s[yi];
              draw_shape(e, &c, d);
              c.rotate = rotate;
              c.seed = tu_rng_u64(&e->rng);
              c.dl = (dlayout)dl;
              if (dl == D_BLOCK) c.block_rows = draw_block_rows(e, &c);
              c.strided = strided ? (int)(1 + tu_rng_u64(&e->rng) % 7) : 0;
              if (!strided && n % 5 == 2) c.shifted = (int)(1 + tu_rng_u64(&e->rng) % 3);
              c.sp = (special)(n % 4);
              if (c.sp == S_INF && rotate) c.sp = S_NONE; /* a rotated inf is NaN: not compared */
              if (c.sp == S_TINY_HEAD && c.xdt == FA_F16) c.sp = S_NONE;
              run_drawn(e, &c, &n);
            }
        if (!pow2) continue;
        for (size_t yi = 0; yi < sizeof floats / sizeof floats[0]; ++yi) {
          qcase c;
          memset(&c, 0, sizeof c);
          c.xdt = xdts[xi];
          c.ydt = floats[yi];
          draw_shape(e, &c, d);
          c.rotate = n % 4 != 1; /* now and then a conversion alone */
          c.seed = tu_rng_u64(&e->rng);
          c.dl = D_NONE;
          c.strided = strided ? (int)(1 + tu_rng_u64(&e->rng) % 3) : 0;
          c.sp = n % 2 ? S_NONE : (c.xdt == FA_F16 ? S_ZERO_HEAD : S_TINY_HEAD);
          run_drawn(e, &c, &n);
        }
      }
    }
}

/* Blocks of up to 128 rows over a few hundred tokens, contiguous, at the head dims of CUDA's
   one-pass kernel (a thread block a descale block, 16 rows a warp at most). */
static void long_blocks(env *e) {
  static const fa_dtype xdts[] = {FA_F32, FA_F16, FA_BF16};
  int n = 0;
  for (size_t xi = 0; xi < sizeof xdts / sizeof xdts[0]; ++xi)
    for (int64_t d = 32; d <= 256; d *= 2)
      for (int i = 0; i < 2; ++i) {
        qcase c;
        memset(&c, 0, sizeof c);
        c.xdt = xdts[xi];
        c.ydt = i ? FA_F8E5M2 : FA_F8E4M3;
        c.d = d;
        c.b = 1 + (int64_t)(tu_rng_u64(&e->rng) % 2);
        c.h = 1 + (int64_t)(tu_rng_u64(&e->rng) % 3);
        c.s = 130 + (int64_t)(tu_rng_u64(&e->rng) % 300);
        c.rotate = (n / 2 + i) % 2;
        c.seed = tu_rng_u64(&e->rng);
        c.dl = D_BLOCK;
        c.block_rows = i ? 64 + (int64_t)(tu_rng_u64(&e->rng) % 64) : 128;
        c.sp = n % 3 == 2 ? S_ZERO_HEAD : S_NONE;
        run_drawn(e, &c, &n);
      }
}

/* Empty tensors (data NULL) and the refused rotation. */
static void edges(env *e) {
  static const struct {
    const char *name;
    int64_t b, s, h, d, block_rows;
    dlayout dl;
    fa_dtype ydt;
    int rotate;
    fa_status expect;
  } cases[] = {
      {"batch 0, descale per tensor (1)", 0, 7, 2, 64, 0, D_TENSOR, FA_F8E4M3, 1, FA_OK},
      {"seqlen 0, one block per sequence (descales 1)", 2, 0, 3, 64, 0, D_BATCH_HEAD, FA_F8E5M2, 0,
       FA_OK},
      {"seqlen 0 in blocks of 4 (no descale elements)", 2, 0, 3, 8, 4, D_BLOCK, FA_F8E4M3, 1,
       FA_OK},
      {"heads 0", 2, 5, 0, 16, 0, D_TENSOR, FA_F8E4M3, 0, FA_OK},
      {"batch 0, rotation to f16", 0, 5, 2, 32, 0, D_NONE, FA_F16, 1, FA_OK},
      {"head dim 0: every descale 1", 2, 9, 3, 0, 4, D_BLOCK, FA_F8E4M3, 0, FA_OK},
      {"head dim 0, per tensor", 2, 9, 3, 0, 0, D_TENSOR, FA_F8E5M2, 0, FA_OK},
      {"head dim 24 with rotation: unsupported", 2, 5, 2, 24, 0, D_BATCH_HEAD, FA_F8E4M3, 1,
       FA_ERR_UNSUPPORTED},
      {"head dim 96 with rotation to f32: unsupported", 1, 5, 2, 96, 0, D_NONE, FA_F32, 1,
       FA_ERR_UNSUPPORTED},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    qcase c;
    memset(&c, 0, sizeof c);
    c.xdt = i % 2 ? FA_BF16 : FA_F32;
    c.ydt = cases[i].ydt;
    c.b = cases[i].b;
    c.s = cases[i].s;
    c.h = cases[i].h;
    c.d = cases[i].d;
    c.block_rows = cases[i].block_rows;
    c.dl = cases[i].dl;
    c.rotate = cases[i].rotate;
    c.seed = tu_rng_u64(&e->rng);
    c.strided = i % 3 == 0 ? 7 : 0;
    c.own_queue = i % 2;
    test_case_begin(cases[i].name);
    run_case(e, &c, cases[i].expect);
    test_case_end();
  }
}

int main(int argc, char **argv) {
  const int cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
  if (argc > 1 && !cuda && strcmp(argv[1], "opencl") != 0) {
    printf("usage: test_quantize_device [opencl|cuda]\n");
    return 2;
  }
  const int32_t backend = cuda ? FA_BACKEND_CUDA : FA_BACKEND_OPENCL;
  const fa_device_kind kind = cuda ? FA_DEVICE_CUDA : FA_DEVICE_OPENCL;
  const char *bname = cuda ? "cuda" : "opencl";
  fa_backend_desc devb, cpu;
  const fa_status dst = tu_backend_desc(backend, &devb),
                  cst = tu_backend_desc(FA_BACKEND_CPU, &cpu);
  if ((dst != FA_OK && dst != FA_ERR_BACKEND_UNAVAILABLE) ||
      (cst != FA_OK && cst != FA_ERR_BACKEND_UNAVAILABLE)) {
    printf("fa_backend_info: %s\n", fa_last_error());
    return 1;
  }
  if (dst != FA_OK || !devb.available || !devmem_supported(kind)) {
    printf("skip: %s: %s\n", bname,
           dst == FA_OK && !devb.available ? devb.reason
                                           : "no device memory of its kind in this build");
    return 77;
  }
  if (cst != FA_OK || !cpu.available) {
    printf("the CPU backend (the reference) is not available: %s\n",
           cst == FA_OK ? cpu.reason : "");
    return 1;
  }
  env e;
  memset(&e, 0, sizeof e);
  e.backend = backend;
  e.name = bname;
  char err[256], name[160];
  if (devmem_default_device(kind, &e.dev, err, sizeof err) != 0) {
    printf("skip: %s\n", err);
    return 77;
  }
  if (devmem_stream(e.dev, &e.stream, err, sizeof err) != 0) {
    printf("devmem_stream: %s\n", err);
    return 1;
  }
  if (devmem_device_name(e.dev, name, sizeof name, err, sizeof err) != 0) snprintf(name, 8, "?");
  const uint64_t seed = tu_run_seed();
  printf("seed %#" PRIx64 " (FA_TEST_SEED=%#" PRIx64 " replays this run); device %s:%d %s\n", seed,
         seed, bname, (int)e.dev.id, name);
  tu_rng_init(&e.rng, tu_seed_for(seed, "test_quantize_device"));
  matrix(&e);
  long_blocks(&e);
  edges(&e);
  if (e.refused) printf("%d case(s) refused by the device (see above)\n", e.refused);
  fa_release();
  devmem_shutdown();
  return test_summary(cuda ? "test_quantize_device cuda" : "test_quantize_device opencl");
}
