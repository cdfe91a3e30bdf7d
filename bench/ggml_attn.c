/*
 * ggml_attn.c: times ggml's CPU flash attention (ggml_flash_attn_ext) on decode and prefill shapes,
 * the ggml side of bench/cpu_peers.py. It is built by that script against a ggml it builds outside
 * the repository (the library has no dependency on ggml), in one of two forms:
 *
 *   - a shared library (the default) that cpu_peers.py loads with ctypes, so ggml, our library and
 *     PyTorch are timed in one process, in alternation, on the same inputs:
 *       ga_create(hdim, heads, kv_heads, seqlen_q, seqlen_k, batch, causal, head_major, threads,
 *                 q, k, v, err, err_len)
 *       ga_run(problem, calls)   -> milliseconds a call, over `calls` calls back to back
 *       ga_output(problem, out, n), ga_destroy(problem), ga_ggml_version()
 *   - a program (compiled with -DGGML_ATTN_MAIN) that times one shape on its own:
 *       ggml-attn [--hdim 128] [--heads 32] [--kv-heads 8] [--seqlen-q 1] [--seqlen-k 4096]
 *                 [--causal 0] [--head-major 0] [--batch 1] [--threads 2] [--calls 20] [--rounds 5]
 *     printing the median milliseconds a call, the GB/s of K and V read and the GFLOP/s
 *     (4 * batch * heads * seqlen_q * seqlen_k * hdim, halved when causal).
 *
 * The graph is the one llama.cpp builds for a step's attention: q is f32
 * [batch, seqlen_q, heads, hdim] (ggml's CPU flash attention takes q as f32), K and V are f16
 * [batch, seqlen_k, kv_heads, hdim] (the layout of llama.cpp's KV cache and of ours), each viewed
 * by ggml as [hdim, tokens, heads, batch] (llama.cpp's permuted views), the output is f32
 * [batch, seqlen_q, heads, hdim]. With head_major, K and V are [batch, kv_heads, seqlen_k, hdim]
 * in memory instead (each head's keys adjacent: a PyTorch or Hugging Face cache), which ggml takes
 * without a permuted view and reads 4-5x faster in its decode path. The scale is 1 / sqrt(hdim);
 * no ALiBi or softcap.
 *
 * Without causal there is no mask. With causal the graph gets the KQ mask llama.cpp gives
 * ggml_flash_attn_ext: f16, contiguous, [seqlen_k, seqlen_q, 1, 1] in ggml's order (one row of
 * seqlen_k entries per query row, shared by every head and sequence), 0 where query row i may see
 * key j, that is j <= i + seqlen_k - seqlen_q (the bottom-right alignment of ours and of
 * FlashAttention), and -INFINITY elsewhere. This ggml (0.25.3) asks nothing more of the mask: no
 * padding of its rows (GGML_KQ_MASK_PAD is gone from it; llama.cpp of the same source allocates its
 * mask [n_kv, n_tokens, 1, n_stream]). The mask is filled once in ga_create, as llama.cpp fills it
 * once per batch of tokens for all layers.
 *
 * Paths ggml's CPU backend takes (ggml-cpu/ops.cpp): with one query token, batch 1 and at least 512
 * keys, its split-KV decode path (one slice of the keys per thread, then a reduction); with at
 * least 64 query rows, its tiled path (64 query rows x 64 keys a tile, K and V widened to f32, the
 * two products as f32 GEMMs, a tile whose mask is -INFINITY everywhere skipped); else one query row
 * at a time.
 *
 * Everything is set up in ga_create: the tensors point at the caller's memory, the graph is built
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

typedef struct ga_problem {
  struct ggml_context *ctx;
  struct ggml_cgraph *graph;
  struct ggml_tensor *out;
  struct ggml_threadpool *pool;
  struct ggml_cplan plan;
  void *work;
  void *out_data;
  ggml_fp16_t *mask;
} ga_problem;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

const char *ga_ggml_version(void) { return ggml_version(); }

void ga_destroy(ga_problem *p) {
  if (!p) return;
  if (p->pool) ggml_threadpool_free(p->pool);
  if (p->ctx) ggml_free(p->ctx);
  free(p->work);
  free(p->out_data);
  free(p->mask);
  free(p);
}

/* A problem over the caller's q (f32), k and v (f16 bits; head-major with head_major), which must
   outlive it; NULL with the reason in err when ggml cannot run the shape. */
ga_problem *ga_create(int hdim, int heads, int kv_heads, int seqlen_q, int seqlen_k, int batch,
                      int causal, int head_major, int threads, const float *q, const uint16_t *k,
                      const uint16_t *v, char *err, size_t err_len) {
  if (hdim < 1 || heads < 1 || kv_heads < 1 || seqlen_q < 1 || seqlen_k < 1 || batch < 1 ||
      threads < 1 || heads % kv_heads != 0) {
    snprintf(err, err_len,
             "bad shape: hdim %d heads %d kv_heads %d seqlen_q %d seqlen_k %d batch %d threads %d",
             hdim, heads, kv_heads, seqlen_q, seqlen_k, batch, threads);
    return NULL;
  }
  ga_problem *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  /* Tensor and graph headers only: the data lives with the caller or in p (no_alloc). */
  struct ggml_init_params ip = {16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true};
  p->ctx = ggml_init(ip);
  if (!p->ctx) {
    snprintf(err, err_len, "ggml_init failed");
    ga_destroy(p);
    return NULL;
  }
  struct ggml_tensor *tq = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F32, hdim, heads, seqlen_q, batch);
  /* ggml lists dimensions innermost first: token-major [hdim, kv_heads, tokens, batch],
     head-major [hdim, tokens, kv_heads, batch]. */
  const int kd1 = head_major ? seqlen_k : kv_heads, kd2 = head_major ? kv_heads : seqlen_k;
  struct ggml_tensor *tk = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, hdim, kd1, kd2, batch);
  struct ggml_tensor *tv = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, hdim, kd1, kd2, batch);
  tq->data = (void *)q;
  tk->data = (void *)k;
  tv->data = (void *)v;
  struct ggml_tensor *tm = NULL;
  if (causal) {
    tm = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, seqlen_k, seqlen_q, 1, 1);
    p->mask = malloc(ggml_nbytes(tm));
    if (!p->mask) {
      snprintf(err, err_len, "out of memory (mask)");
      ga_destroy(p);
      return NULL;
    }
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), ninf = ggml_fp32_to_fp16(-INFINITY);
    for (int64_t i = 0; i < seqlen_q; ++i)
      for (int64_t j = 0; j < seqlen_k; ++j)
        p->mask[i * seqlen_k + j] = j <= i + seqlen_k - seqlen_q ? zero : ninf;
    tm->data = p->mask;
  }
  /* [hdim, tokens, heads, batch] views, as llama.cpp permutes its q and cache views (a head-major
     cache is in that order already). */
  struct ggml_tensor *vq = ggml_permute(p->ctx, tq, 0, 2, 1, 3);
  struct ggml_tensor *vk = head_major ? tk : ggml_permute(p->ctx, tk, 0, 2, 1, 3);
  struct ggml_tensor *vv = head_major ? tv : ggml_permute(p->ctx, tv, 0, 2, 1, 3);
  p->out = ggml_flash_attn_ext(p->ctx, vq, vk, vv, tm, 1.0f / sqrtf((float)hdim), 0.0f, 0.0f);
  p->out_data = aligned_alloc(64, (ggml_nbytes(p->out) + 63) / 64 * 64);
  if (!p->out_data) {
    snprintf(err, err_len, "out of memory");
    ga_destroy(p);
    return NULL;
  }
  p->out->data = p->out_data;
  p->graph = ggml_new_graph(p->ctx);
  ggml_build_forward_expand(p->graph, p->out);
  struct ggml_threadpool_params tp = ggml_threadpool_params_default(threads);
  p->pool = ggml_threadpool_new(&tp);
  if (!p->pool) {
    snprintf(err, err_len, "ggml_threadpool_new(%d threads) failed", threads);
    ga_destroy(p);
    return NULL;
  }
  p->plan = ggml_graph_plan(p->graph, threads, p->pool);
  if (p->plan.work_size) {
    p->work = malloc(p->plan.work_size);
    if (!p->work) {
      snprintf(err, err_len, "out of memory (work buffer of %zu bytes)", p->plan.work_size);
      ga_destroy(p);
      return NULL;
    }
    p->plan.work_data = p->work;
  }
  return p;
}

/* Milliseconds a call over `calls` calls of the planned graph back to back; negative when ggml
   reported a failure. */
double ga_run(ga_problem *p, int calls) {
  const double t0 = now_ms();
  for (int i = 0; i < calls; ++i)
    if (ggml_graph_compute(p->graph, &p->plan) != GGML_STATUS_SUCCESS) return -1.0;
  return (now_ms() - t0) / (calls > 0 ? calls : 1);
}

/* Copies the last call's output (f32 [batch, seqlen_q, heads, hdim]) into out; the element count,
   or 0 when n is too small. */
size_t ga_output(const ga_problem *p, float *out, size_t n) {
  const size_t count = (size_t)ggml_nelements(p->out);
  if (n < count) return 0;
  memcpy(out, p->out_data, count * sizeof(float));
  return count;
}

#ifdef GGML_ATTN_MAIN
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
  int hdim = 128, heads = 32, kv_heads = 8, seqlen_q = 1, seqlen_k = 4096, causal = 0;
  int head_major = 0;
  int batch = 1, threads = 2, calls = 20, rounds = 5;
  struct {
    const char *name;
    int *value;
  } opts[] = {{"--hdim", &hdim},         {"--heads", &heads},          {"--kv-heads", &kv_heads},
              {"--seqlen-q", &seqlen_q}, {"--seqlen-k", &seqlen_k},    {"--causal", &causal},
              {"--batch", &batch},       {"--threads", &threads},      {"--calls", &calls},
              {"--rounds", &rounds},     {"--head-major", &head_major}};
  for (int i = 1; i < argc; ++i) {
    size_t o = 0;
    while (o < sizeof opts / sizeof opts[0] && strcmp(argv[i], opts[o].name) != 0) ++o;
    if (o == sizeof opts / sizeof opts[0] || i + 1 >= argc) {
      fprintf(stderr,
              "usage: ggml-attn [--hdim D] [--heads H] [--kv-heads HKV] [--seqlen-q SQ] "
              "[--seqlen-k SK] [--causal 0|1] [--head-major 0|1] [--batch B] [--threads T] "
              "[--calls N] [--rounds R]\n");
      return 2;
    }
    *opts[o].value = atoi(argv[++i]);
  }
  if (calls < 1 || rounds < 1) {
    fprintf(stderr, "ggml-attn: --calls and --rounds must be at least 1\n");
    return 2;
  }
  const size_t nq = (size_t)batch * seqlen_q * heads * hdim;
  const size_t nkv = (size_t)batch * seqlen_k * kv_heads * hdim;
  float *q = malloc(nq * sizeof *q), *row = malloc((size_t)hdim * sizeof *row);
  uint16_t *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
  if (!q || !row || !k || !v) {
    fprintf(stderr, "ggml-attn: out of memory\n");
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
  ga_problem *p = ga_create(hdim, heads, kv_heads, seqlen_q, seqlen_k, batch, causal, head_major,
                            threads, q, k, v, err, sizeof err);
  if (!p) {
    fprintf(stderr, "ggml-attn: %s\n", err);
    return 1;
  }
  double *ms = malloc((size_t)rounds * sizeof *ms);
  int failed = !ms || ga_run(p, 1) < 0;
  for (int r = 0; !failed && r < rounds; ++r) failed = (ms[r] = ga_run(p, calls)) < 0;
  if (failed) {
    fprintf(stderr, "ggml-attn: ggml_graph_compute failed\n");
  } else {
    qsort(ms, (size_t)rounds, sizeof ms[0], cmp_double);
    const double med = rounds % 2 ? ms[rounds / 2] : 0.5 * (ms[rounds / 2 - 1] + ms[rounds / 2]);
    const double bytes = 2.0 * (double)nkv * 2.0;
    const double flop = 4.0 * batch * heads * (double)seqlen_q * seqlen_k * hdim / (causal ? 2 : 1);
    printf(
        "ggml %s: hdim %d seqlen_q %d seqlen_k %d causal %d %s batch %d heads %d/%d threads %d: "
        "%.4f ms, %.2f GB/s K+V, %.1f GFLOP/s\n",
        ggml_version(), hdim, seqlen_q, seqlen_k, causal, head_major ? "head-major" : "token-major",
        batch, heads, kv_heads, threads, med, bytes / (med * 1e-3) / 1e9,
        flop / (med * 1e-3) / 1e9);
  }
  ga_destroy(p);
  free(ms);
  free(q);
  free(row);
  free(k);
  free(v);
  return failed;
}
#endif
