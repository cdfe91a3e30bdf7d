/*
 * memory.c: fa-bench's tensors, in the memory of the backend being timed (tools/device_mem: CUDA
 * device memory for --backend cuda, cl_mem buffers for --backend opencl, host memory otherwise),
 * filled on the host with random values and copied in once per shape.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/dtype.h"
#include "core/math/fp8.h"
#include "fa_bench.h"
#include "tools/device_mem.h"

fa_device g_dev = {FA_DEVICE_CPU, 0};
char g_mem_err[256];

static int64_t numel(const fa_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static size_t buffer_bytes(const buffer *b) {
  return (size_t)numel(&b->t) * fa_dtype_size(b->t.dtype);
}

int buffer_alloc(buffer *b, fa_dtype dtype, int ndim, const int64_t *shape) {
  memset(b, 0, sizeof *b);
  int64_t n = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    b->t.shape[i] = shape[i];
    b->t.strides[i] = n;
    n *= shape[i];
  }
  b->t.dtype = dtype;
  b->t.ndim = ndim;
  if (devmem_alloc(g_dev, (size_t)n * fa_dtype_size(dtype), &b->mem, g_mem_err, sizeof g_mem_err))
    return 0;
  b->t.data = b->mem;
  b->t.device = g_dev;
  return 1;
}

void buffer_free(buffer *b) {
  if (b->mem) (void)devmem_free(g_dev, b->mem, NULL, 0);
  memset(b, 0, sizeof *b);
}

void *buffer_host(buffer *b) {
  if (g_dev.kind == FA_DEVICE_CPU) return b->mem;
  void *h = malloc(buffer_bytes(b) ? buffer_bytes(b) : 1);
  if (!h)
    snprintf(g_mem_err, sizeof g_mem_err, "out of host memory staging %zu bytes", buffer_bytes(b));
  return h;
}

int buffer_upload(buffer *b, void *host) {
  if (host == b->mem) return 1;
  int ok =
      devmem_copy_to_device(g_dev, b->mem, host, buffer_bytes(b), g_mem_err, sizeof g_mem_err) == 0;
  free(host);
  return ok;
}

/* xorshift64* and Box-Muller: the bench needs plausible activations, not test-grade randomness. */
static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static double rng_unit(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
}

static float rng_normal(void) {
  double u1 = rng_unit(), u2 = rng_unit();
  if (u1 < 1e-300) u1 = 1e-300;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int fill_ones(buffer *b) {
  float *mem = buffer_host(b);
  if (!mem || b->t.dtype != FA_F32) return 0;
  for (int64_t i = 0; i < numel(&b->t); ++i) mem[i] = 1.0f;
  return buffer_upload(b, mem);
}

/* One normal draw in dtype's encoding into dst; zeros are redrawn: a kernel that skipped work on
   zeros would otherwise look fast. */
static void draw_nonzero(fa_dtype dtype, unsigned char *dst) {
  for (;;) {
    float x = rng_normal();
    if (dtype == FA_F32) {
      if (x == 0.0f) continue;
      memcpy(dst, &x, 4);
    } else if (dtype == FA_F8E4M3 || dtype == FA_F8E5M2) {
      uint8_t c = dtype == FA_F8E4M3 ? fa_f32_to_f8e4m3(x) : fa_f32_to_f8e5m2(x);
      if ((c & 0x7fu) == 0) continue;
      *dst = c;
    } else {
      uint16_t h = dtype == FA_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
      if ((h & 0x7fffu) == 0) continue;
      memcpy(dst, &h, 2);
    }
    return;
  }
}

/* At most FILL_POOL elements are drawn (a draw costs ~25 ns: a 128k-key decoding cache took a
   minute); a larger buffer repeats them block by block, each block the pool rotated by a fresh
   random offset, so that rows do not repeat at a fixed period. */
enum { FILL_POOL = 1 << 20 };

int fill_random(buffer *b) {
  unsigned char *mem = buffer_host(b);
  if (!mem) return 0;
  const int64_t n = numel(&b->t);
  const size_t esz = fa_dtype_size(b->t.dtype);
  const int64_t pool = n < FILL_POOL ? n : FILL_POOL;
  for (int64_t i = 0; i < pool; ++i) draw_nonzero(b->t.dtype, mem + (size_t)i * esz);
  for (int64_t at = pool; at < n;) {
    const int64_t rot = (int64_t)(rng_unit() * (double)pool), len = n - at < pool ? n - at : pool;
    const int64_t first =
        len < pool - rot ? len : pool - rot; /* pool[rot, pool), then pool[0, ..) */
    memcpy(mem + (size_t)at * esz, mem + (size_t)rot * esz, (size_t)first * esz);
    memcpy(mem + (size_t)(at + first) * esz, mem, (size_t)(len - first) * esz);
    at += len;
  }
  return buffer_upload(b, mem);
}
