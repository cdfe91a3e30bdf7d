/*
 * quantize.c: fa-bench --quantize. Times fa_quantize, the FP8 block quantization with optional
 * Hadamard rotation (docs/fp8.md), as the memory-bound pass it is: for each --hdims D and --seqlens
 * S, x [batch, S, heads, D] in --dtype (f32, f16 or bf16) becomes y of the same shape in f8e4m3
 * with descales float32 as --scales says: [batch, heads, ceil(S / 128)] (block_rows 128, the
 * default), [batch, heads, 1] or [1, 1, 1] (block_rows 0), once without the rotation
 * and once with it (rotate_seed 1234; D not a power of two is refused by the library, and the row
 * says so without failing the run). Reported per row: the median time of a synchronised call, GB/s
 * of the bytes a call must move (x read once, y and the descales written), that rate over the
 * shape's copy rate, then the time a call of --iters calls issued back to back (b2b ms) and the
 * host time of issuing one (host us), and the kernel the run report names. The reference row
 * before them times a device-to-device copy of x's bytes the same way (devmem_copy_on_device:
 * memcpy, cudaMemcpy, clEnqueueCopyBuffer), its GB/s counting the bytes read and written (2 x x's
 * bytes): the copy bandwidth a quantization pass is compared with.
 */
#include <stdio.h>
#include <string.h>

#include "fa_bench.h"
#include "tools/device_mem.h"

enum { BLOCK_ROWS = 128 };
static const uint64_t ROTATE_SEED = 1234;

typedef struct quant_shape {
  int64_t d, s, b, h;
} quant_shape;

/* The descales' shape for --scales and a shape x, and their block_rows. */
static int64_t descale_shape(const options *o, const quant_shape *x, int64_t ds[3]) {
  const int tensor = o->quant_scales == QUANT_TENSOR, block = o->quant_scales == QUANT_BLOCK;
  ds[0] = tensor ? 1 : x->b;
  ds[1] = tensor ? 1 : x->h;
  ds[2] = block ? (x->s + BLOCK_ROWS - 1) / BLOCK_ROWS : 1;
  return block ? BLOCK_ROWS : 0;
}

typedef struct quant_call {
  const fa_quantize_args *args;
  buffer *x, *y, *descale;
  fa_status status;          /* the last call's */
  char error[FA_REASON_LEN]; /* fa_last_error() after the last failed call */
} quant_call;

static fa_status call_quantize(void *ctx, fa_run_info *info) {
  quant_call *c = ctx;
  c->status = fa_quantize(c->args, &c->x->t, &c->y->t, &c->descale->t, info);
  if (c->status != FA_OK) snprintf(c->error, sizeof c->error, "%s", fa_last_error());
  return c->status;
}

typedef struct copy_call {
  buffer *src, *dst;
  size_t bytes;
  char error[256]; /* devmem's message after a failed copy */
} copy_call;

/* Not an API call: a failed copy keeps devmem's message, which the row prints instead of the
   library's last error. */
static fa_status call_copy(void *ctx, fa_run_info *info) {
  copy_call *c = ctx;
  (void)info;
  if (devmem_copy_on_device(g_dev, c->dst->mem, c->src->mem, c->bytes, c->error, sizeof c->error))
    return FA_ERR_BACKEND_FAILURE;
  return FA_OK;
}

static void print_times(const measurement *m, double gbs) {
  printf("%10.4f %9.2f", m->ms_median, gbs);
}

/* The copy row; its GB/s (0 when it failed) in *copy_gbs. 1 when it failed. */
static int time_copy(const options *o, buffer *x, buffer *dst, size_t bytes, double *copy_gbs) {
  copy_call c;
  memset(&c, 0, sizeof c);
  c.src = x;
  c.dst = dst;
  c.bytes = bytes;
  measurement m;
  measure_calls(call_copy, &c, o, 0.0, &m);
  *copy_gbs = 0.0;
  printf("%6s | ", "copy");
  if (!m.ok) {
    printf("failed: %s\n", c.error[0] ? c.error : m.error);
    return 1;
  }
  *copy_gbs = 2.0 * (double)bytes / (m.ms_median * 1e-3) / 1e9;
  print_times(&m, *copy_gbs);
  printf(" %6s %9.4f %8.1f | %s\n", "1.000", m.b2b_ms, m.host_us, "copy of x's bytes");
  return 0;
}

/* One quantize row (rotate 0 or 1); returns 1 when it failed, 0 otherwise, and sets *refused when
   the library refused the rotation of a head dim that is not a power of two. */
static int time_quantize(const options *o, const quant_shape *x, buffer *xb, buffer *y,
                         buffer *descale, int rotate, double copy_gbs, int *refused) {
  fa_quantize_args args;
  fa_quantize_args_init(&args);
  int64_t ds[3];
  args.block_rows = descale_shape(o, x, ds);
  args.rotate = rotate;
  args.rotate_seed = ROTATE_SEED;
  args.backend = o->backend;
  args.strict = o->backend != FA_BACKEND_AUTO;
  quant_call c;
  memset(&c, 0, sizeof c);
  c.args = &args;
  c.x = xb;
  c.y = y;
  c.descale = descale;
  const double elems = (double)x->b * (double)x->s * (double)x->h * (double)x->d;
  const double blocks = (double)(ds[0] * ds[1] * ds[2]);
  const double bytes = elems * (double)fa_dtype_size(o->dtype) +
                       elems * (double)fa_dtype_size(FA_F8E4M3) + blocks * 4.0;
  measurement m;
  measure_calls(call_quantize, &c, o, 0.0, &m);
  printf("%6d | ", rotate);
  *refused = 0;
  if (!m.ok) {
    const int pow2 = x->d > 0 && (x->d & (x->d - 1)) == 0;
    if (rotate && !pow2 && c.status == FA_ERR_UNSUPPORTED) {
      printf("refused: %s\n", c.error);
      *refused = 1;
      return 0;
    }
    printf("failed: %s\n", m.error);
    return 1;
  }
  const double gbs = bytes / (m.ms_median * 1e-3) / 1e9;
  print_times(&m, gbs);
  if (copy_gbs > 0.0)
    printf(" %6.3f", gbs / copy_gbs);
  else
    printf(" %6s", "-");
  printf(" %9.4f %8.1f | %s\n", m.b2b_ms, m.host_us, m.info.kernel);
  return 0;
}

static void print_shape(const quant_shape *x) {
  printf("%5lld %7lld %5lld %5lld ", (long long)x->d, (long long)x->s, (long long)x->b,
         (long long)x->h);
}

/* Allocates and fills one shape's tensors, prints its copy row and its two quantize rows, frees
   them. Adds to *rows, *failures and *refusals. */
static void run_shape(const options *o, const quant_shape *x, int *rows, int *failures,
                      int *refusals) {
  buffer xb, y, descale, dst;
  const int64_t xs[4] = {x->b, x->s, x->h, x->d};
  int64_t ds[3];
  descale_shape(o, x, ds);
  int ok = buffer_alloc(&xb, o->dtype, 4, xs) & buffer_alloc(&y, FA_F8E4M3, 4, xs) &
           buffer_alloc(&descale, FA_F32, 3, ds) & buffer_alloc(&dst, o->dtype, 4, xs);
  ok = ok && fill_random(&xb);
  print_shape(x);
  fflush(stdout);
  if (!ok) {
    printf("%6s | %s for this shape\n", "-", g_mem_err);
    ++*rows;
    ++*failures;
  } else {
    const size_t bytes = (size_t)(x->b * x->s * x->h * x->d) * fa_dtype_size(o->dtype);
    double copy_gbs = 0.0;
    ++*rows;
    *failures += time_copy(o, &xb, &dst, bytes, &copy_gbs);
    for (int rotate = 0; rotate < 2; ++rotate) {
      int refused = 0;
      print_shape(x);
      fflush(stdout);
      ++*rows;
      *failures += time_quantize(o, x, &xb, &y, &descale, rotate, copy_gbs, &refused);
      *refusals += refused;
    }
  }
  buffer_free(&xb);
  buffer_free(&y);
  buffer_free(&descale);
  buffer_free(&dst);
}

int run_quantize(const options *o) {
  int rows = 0, failures = 0, refusals = 0;
  printf("\n%5s %7s %5s %5s %6s | %10s %9s %6s %9s %8s | %s\n", "hdim", "seqlen", "batch", "heads",
         "rotate", "ms", "GB/s", "/copy", "b2b ms", "host us", "kernel");
  for (int hi = 0; hi < o->n_hdims; ++hi)
    for (int si = 0; si < o->n_seqlens; ++si) {
      quant_shape x;
      x.d = o->hdims[hi];
      x.s = o->seqlens[si];
      x.b = shape_batch(o, x.s);
      x.h = shape_heads(o, x.d);
      run_shape(o, &x, &rows, &failures, &refusals);
    }
  printf("\n%d rows, %d failed, %d refused\n", rows, failures, refusals);
  return failures ? 1 : 0;
}
