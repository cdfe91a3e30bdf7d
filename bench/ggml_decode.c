/*
 * ggml_decode.c: times ggml's CPU flash attention (ggml_flash_attn_ext) on decode shapes, the ggml
 * side of bench/cpu_peers.py. It is built by that script against a ggml it builds outside the
 * repository (the library has no dependency on ggml), in one of two forms:
 *
 *   - a shared library (the default) that cpu_peers.py loads with ctypes, so ggml, our library and
 *     PyTorch are timed in one process, in alternation, on the same inputs:
 *       gd_create(hdim, heads, kv_heads, cache, batch, threads, q, k, v, err, err_len)
 *       gd_run(problem, calls)   -> milliseconds a call, over `calls` calls back to back
 *       gd_output(problem, out, n), gd_destroy(problem), gd_ggml_version()
 *   - a program (compiled with -DGGML_DECODE_MAIN) that times one shape on its own:
 *       ggml-decode [--hdim 128] [--heads 32] [--kv-heads 8] [--cache 4096] [--batch 1]
 *                   [--threads 2] [--calls 20] [--rounds 5]
 *     printing the median milliseconds a call and the GB/s of K and V read.
 *
 * The graph is the one llama.cpp builds for a decode step's attention, without the mask: q is f32
 * [batch, 1, heads, hdim] (ggml's CPU flash attention reads q as f32 and converts it to K's type
 * itself), K and V are f16 caches laid out [batch, cache, kv_heads, hdim] (the layout of
 * llama.cpp's KV cache and of ours) and viewed by ggml as [hdim, cache, kv_heads, batch], the
 * output is f32 [batch, 1, heads, hdim]. The scale is 1 / sqrt(hdim); no mask, ALiBi or softcap.
 * With one query token, batch 1 and a cache of at least 512 keys ggml takes its split-KV decode
 * path (one slice of the cache per thread, then a reduction).
 *
 * Everything is set up in gd_create: the tensors point at the caller's memory, the graph is built
 * and planned once, the work buffer is allocated and the threadpool created (with ggml's OpenMP
 * build it runs its graph on OpenMP threads). A timed call is ggml_graph_compute alone: no
 * allocation, graph building or copy inside it.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

typedef struct gd_problem {
  struct ggml_context *ctx;
  struct ggml_cgraph *graph;
  struct ggml_tensor *out;
  struct ggml_threadpool *pool;
  struct ggml_cplan plan;
  void *work;
  void *out_data;
} gd_problem;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

const char *gd_ggml_version(void) { return ggml_version(); }

void gd_destroy(gd_problem *p) {
  if (!p) return;
  if (p->pool) ggml_threadpool_free(p->pool);
  if (p->ctx) ggml_free(p->ctx);
  free(p->work);
  free(p->out_data);
  free(p);
}

/* A problem over the caller's q (f32), k and v (f16 bits), which must outlive it; NULL with the
   reason in err when ggml cannot run the shape. */
gd_problem *gd_create(int hdim, int heads, int kv_heads, int cache, int batch, int threads,
                      const float *q, const uint16_t *k, const uint16_t *v, char *err,
                      size_t err_len) {
  if (hdim < 1 || heads < 1 || kv_heads < 1 || cache < 1 || batch < 1 || threads < 1 ||
      heads % kv_heads != 0) {
    snprintf(err, err_len, "bad shape: hdim %d heads %d kv_heads %d cache %d batch %d threads %d",
             hdim, heads, kv_heads, cache, batch, threads);
    return NULL;
  }
  gd_problem *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  /* Tensor and graph headers only: the data lives with the caller (no_alloc). */
  struct ggml_init_params ip = {16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true};
  p->ctx = ggml_init(ip);
  if (!p->ctx) {
    snprintf(err, err_len, "ggml_init failed");
    gd_destroy(p);
    return NULL;
  }
  struct ggml_tensor *tq = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F32, hdim, heads, 1, batch);
  struct ggml_tensor *tk = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, hdim, kv_heads, cache, batch);
  struct ggml_tensor *tv = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, hdim, kv_heads, cache, batch);
  tq->data = (void *)q;
  tk->data = (void *)k;
  tv->data = (void *)v;
  /* [hdim, tokens, heads, batch] views, as llama.cpp permutes its q and cache views. */
  struct ggml_tensor *vq = ggml_permute(p->ctx, tq, 0, 2, 1, 3);
  struct ggml_tensor *vk = ggml_permute(p->ctx, tk, 0, 2, 1, 3);
  struct ggml_tensor *vv = ggml_permute(p->ctx, tv, 0, 2, 1, 3);
  p->out = ggml_flash_attn_ext(p->ctx, vq, vk, vv, NULL, 1.0f / sqrtf((float)hdim), 0.0f, 0.0f);
  p->out_data = aligned_alloc(64, (ggml_nbytes(p->out) + 63) / 64 * 64);
  if (!p->out_data) {
    snprintf(err, err_len, "out of memory");
    gd_destroy(p);
    return NULL;
  }
  p->out->data = p->out_data;
  p->graph = ggml_new_graph(p->ctx);
  ggml_build_forward_expand(p->graph, p->out);
  struct ggml_threadpool_params tp = ggml_threadpool_params_default(threads);
  p->pool = ggml_threadpool_new(&tp);
  if (!p->pool) {
    snprintf(err, err_len, "ggml_threadpool_new(%d threads) failed", threads);
    gd_destroy(p);
    return NULL;
  }
  p->plan = ggml_graph_plan(p->graph, threads, p->pool);
  if (p->plan.work_size) {
    p->work = malloc(p->plan.work_size);
    if (!p->work) {
      snprintf(err, err_len, "out of memory (work buffer of %zu bytes)", p->plan.work_size);
      gd_destroy(p);
      return NULL;
    }
    p->plan.work_data = p->work;
  }
  return p;
}

/* Milliseconds a call over `calls` calls of the planned graph back to back; negative when ggml
   reported a failure. */
double gd_run(gd_problem *p, int calls) {
  const double t0 = now_ms();
  for (int i = 0; i < calls; ++i)
    if (ggml_graph_compute(p->graph, &p->plan) != GGML_STATUS_SUCCESS) return -1.0;
  return (now_ms() - t0) / (calls > 0 ? calls : 1);
}

/* Copies the last call's output (f32 [batch, 1, heads, hdim]) into out; the element count, or 0
   when n is too small. */
size_t gd_output(const gd_problem *p, float *out, size_t n) {
  const size_t count = (size_t)ggml_nelements(p->out);
  if (n < count) return 0;
  memcpy(out, p->out_data, count * sizeof(float));
  return count;
}

#ifdef GGML_DECODE_MAIN
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Standard-normal values from a fixed xorshift stream (Box-Muller), never exactly zero. */
static float normal(uint64_t *s) {
  double u[2];
  for (int i = 0; i < 2; ++i) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    u[i] = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
  }
  const float x = (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
  return x != 0.0f ? x : 0.5f;
}

int main(int argc, char **argv) {
  int hdim = 128, heads = 32, kv_heads = 8, cache = 4096, batch = 1, threads = 2, calls = 20;
  int rounds = 5;
  struct {
    const char *name;
    int *value;
  } opts[] = {{"--hdim", &hdim},   {"--heads", &heads},  {"--kv-heads", &kv_heads},
              {"--cache", &cache}, {"--batch", &batch},  {"--threads", &threads},
              {"--calls", &calls}, {"--rounds", &rounds}};
  for (int i = 1; i < argc; ++i) {
    size_t o = 0;
    while (o < sizeof opts / sizeof opts[0] && strcmp(argv[i], opts[o].name) != 0) ++o;
    if (o == sizeof opts / sizeof opts[0] || i + 1 >= argc) {
      fprintf(stderr,
              "usage: ggml-decode [--hdim D] [--heads H] [--kv-heads HKV] [--cache S] "
              "[--batch B] [--threads T] [--calls N] [--rounds R]\n");
      return 2;
    }
    *opts[o].value = atoi(argv[++i]);
  }
  if (calls < 1 || rounds < 1) {
    fprintf(stderr, "ggml-decode: --calls and --rounds must be at least 1\n");
    return 2;
  }
  const size_t nq = (size_t)batch * heads * hdim, nkv = (size_t)batch * cache * kv_heads * hdim;
  float *q = malloc(nq * sizeof *q), *row = malloc((size_t)hdim * sizeof *row);
  uint16_t *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
  if (!q || !row || !k || !v) {
    fprintf(stderr, "ggml-decode: out of memory\n");
    return 1;
  }
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < nq; ++i) q[i] = normal(&seed);
  for (size_t r = 0; r < nkv / (size_t)hdim; ++r) {
    for (int j = 0; j < hdim; ++j) row[j] = normal(&seed);
    ggml_fp32_to_fp16_row(row, (ggml_fp16_t *)k + r * (size_t)hdim, hdim);
    for (int j = 0; j < hdim; ++j) row[j] = normal(&seed);
    ggml_fp32_to_fp16_row(row, (ggml_fp16_t *)v + r * (size_t)hdim, hdim);
  }
  char err[256];
  gd_problem *p = gd_create(hdim, heads, kv_heads, cache, batch, threads, q, k, v, err, sizeof err);
  if (!p) {
    fprintf(stderr, "ggml-decode: %s\n", err);
    return 1;
  }
  double *ms = malloc((size_t)rounds * sizeof *ms);
  int failed = !ms || gd_run(p, 1) < 0;
  for (int r = 0; !failed && r < rounds; ++r) failed = (ms[r] = gd_run(p, calls)) < 0;
  if (failed) {
    fprintf(stderr, "ggml-decode: ggml_graph_compute failed\n");
  } else {
    qsort(ms, (size_t)rounds, sizeof ms[0], cmp_double);
    const double med = rounds % 2 ? ms[rounds / 2] : 0.5 * (ms[rounds / 2 - 1] + ms[rounds / 2]);
    const double bytes = 2.0 * (double)nkv * 2.0;
    printf("ggml %s: hdim %d cache %d batch %d heads %d/%d threads %d: %.4f ms, %.2f GB/s K+V\n",
           ggml_version(), hdim, cache, batch, heads, kv_heads, threads, med,
           bytes / (med * 1e-3) / 1e9);
  }
  gd_destroy(p);
  free(ms);
  free(q);
  free(row);
  free(k);
  free(v);
  return failed;
}
#endif
