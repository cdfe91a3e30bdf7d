/*
 * cuda_graph.c: the CUDA backend's calls captured in a CUDA graph and replayed
 * (tests/gpu/h200_check.sh runs it: step graph).
 *
 *   cuda_graph
 *
 * 1. Training step: fa_forward then fa_backward (bf16, head dim 128, 8 query heads over 2 K/V
 *    heads, 300 rows, causal, deterministic) captured on a stream in global capture mode, once
 *    with params.workspace given and once with the backend's own stream-ordered workspace; then,
 *    three times, new inputs are copied into the captured buffers, the graph is replayed, and
 *    out, lse, dq, dk and dv must be bitwise those of the same calls made eagerly.
 * 2. Decoding: one fa_forward_kvcache step (one new token appended to paged caches, GQA 32:8, head
 *    dim 128, causal) captured once; four steps replay it, each after new q / k_new / v_new values
 *    and the cache lengths (kv.cache_seqlens, in device memory) are advanced by copies outside
 *    the graph. Each step's out and lse and the caches must be bitwise those of eager calls on a
 *    twin set of caches.
 * 3. Streams: fa3's causal forward takes its tiles from a dynamic schedule's counter, which the
 *    backend keeps per stream (no allocation or memset per call; the kernel's last block zeroes
 *    it). With the grid capped at 7 blocks (FA_CUDA_FA3_GRID) every block takes several tiles
 *    from it. Calls on two created streams, the legacy stream and the per-thread stream, in turn
 *    for six rounds, each after its outputs are poisoned, must be bitwise the call made with a
 *    workspace before any counter was kept (the workspace's counter, cleared by a memset), and
 *    must take nothing from the device's memory pool; so must calls on each given a workspace
 *    (they take the kept counter too, the counters being kept by then) and a call on each after
 *    fa_release (which frees the counters); a capture of the call (which takes its counter from
 *    the pool) replays bitwise too, on its stream and another, between eager calls.
 * The library prepares a device's kernels on its first call there, so each part makes one eager
 * call before capturing (as applications warm up before capture).
 *
 * Prints one PASS / FAIL line per check and a summary; exits 0 when all pass, 1 on a failure, 77
 * when the CUDA backend is not available here (with the library's reason).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_tally.h"
#include "cuda_backend.h"
#include "tensor_util.h"

/* A device buffer and its size. */
typedef struct dbuf {
  void *p;
  size_t bytes;
} dbuf;

static int dalloc(dbuf *b, size_t bytes) {
  b->bytes = bytes;
  return cudaMalloc(&b->p, bytes) == cudaSuccess;
}

static uint16_t bf16_of(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Fresh standard-normal bf16 values into b (all of it). */
static int fill(dbuf *b, tu_rng *rng) {
  uint16_t *h = malloc(b->bytes);
  if (!h) return 0;
  for (size_t i = 0; i < b->bytes / 2; ++i) h[i] = bf16_of(tu_rng_normal(rng));
  const int ok = cudaMemcpy(b->p, h, b->bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  free(h);
  return ok;
}

/* Whether two device buffers of the same size hold the same bytes. */
static int same(const dbuf *a, const dbuf *b) {
  unsigned char *x = malloc(a->bytes), *y = malloc(b->bytes);
  int ok = x && y && a->bytes == b->bytes &&
           cudaMemcpy(x, a->p, a->bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
           cudaMemcpy(y, b->p, b->bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
           memcmp(x, y, a->bytes) == 0;
  free(x);
  free(y);
  return ok;
}

/* A contiguous CUDA tensor over b: bf16 [n0, n1, n2, n3]; lse f32 [n0, n1, n2]; int32 [n0] or
   [n0, n1]. */
static fa_tensor on_gpu(const dbuf *b, fa_dtype dt, int ndim, const int64_t *shape) {
  const fa_device cuda0 = {FA_DEVICE_CUDA, 0};
  return tu_view(b->p, dt, cuda0, ndim, shape);
}
static fa_tensor t4(const dbuf *b, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
  const int64_t shape[4] = {n0, n1, n2, n3};
  return on_gpu(b, FA_BF16, 4, shape);
}
static fa_tensor lse3(const dbuf *b, int64_t n0, int64_t n1, int64_t n2) {
  const int64_t shape[3] = {n0, n1, n2};
  return on_gpu(b, FA_F32, 3, shape);
}
static fa_tensor i32(const dbuf *b, int ndim, int64_t n0, int64_t n1) {
  const int64_t shape[2] = {n0, n1};
  return on_gpu(b, FA_I32, ndim, shape);
}

/* --- 1. forward + backward ------------------------------------------------------------------ */

enum { B_ = 2, S_ = 300, HQ_ = 8, HKV_ = 2, D_ = 128 };
enum { Q, K, V, DO, OUT, LSE, DQ, DK, DV, NBUF };

typedef struct train {
  dbuf b[NBUF];
  fa_tensor t[NBUF];
} train;

static int train_alloc(train *x) {
  const size_t qb = (size_t)B_ * S_ * HQ_ * D_ * 2, kb = (size_t)B_ * S_ * HKV_ * D_ * 2;
  const size_t sizes[NBUF] = {qb, kb, kb, qb, qb, (size_t)B_ * HQ_ * S_ * 4, qb, kb, kb};
  for (int i = 0; i < NBUF; ++i)
    if (!dalloc(&x->b[i], sizes[i])) return 0;
  for (int i = 0; i < NBUF; ++i) {
    const int kv = i == K || i == V || i == DK || i == DV;
    x->t[i] = i == LSE ? lse3(&x->b[i], B_, HQ_, S_) : t4(&x->b[i], B_, S_, kv ? HKV_ : HQ_, D_);
  }
  return 1;
}

static void train_free(train *x) {
  for (int i = 0; i < NBUF; ++i) cudaFree(x->b[i].p);
}

static fa_status train_step(train *x, const fa_params *p) {
  fa_status st = fa_forward(p, &x->t[Q], &x->t[K], &x->t[V], &x->t[OUT], &x->t[LSE], NULL);
  if (st != FA_OK) return st;
  return fa_backward(p, &x->t[Q], &x->t[K], &x->t[V], &x->t[OUT], &x->t[LSE], &x->t[DO], &x->t[DQ],
                     &x->t[DK], &x->t[DV], NULL);
}

static void part_train(int with_workspace) {
  const char *name = with_workspace ? "train.workspace" : "train.pool";
  char what[128];
  train g, e;
  memset(&g, 0, sizeof g);
  memset(&e, 0, sizeof e);
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  dbuf ws = {NULL, 0};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), name));
  if (!train_alloc(&g) || !train_alloc(&e) ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    check(0, name, "setup failed");
    goto done;
  }
  fa_params p;
  fa_params_init(&p);
  p.backend = FA_BACKEND_CUDA;
  p.strict = 1;
  p.causal = 1;
  p.deterministic = 1;
  p.stream = s;
  if (with_workspace) {
    size_t fw = 0, bw = 0;
    if (fa_forward_workspace_size(&p, &g.t[Q], &g.t[K], &g.t[V], &g.t[OUT], &g.t[LSE], &fw) !=
            FA_OK ||
        fa_backward_workspace_size(&p, &g.t[Q], &g.t[K], &g.t[V], &g.t[OUT], &g.t[LSE], &g.t[DO],
                                   &g.t[DQ], &g.t[DK], &g.t[DV], &bw) != FA_OK ||
        !dalloc(&ws, fw > bw ? fw : bw)) {
      check(0, name, fa_last_error());
      goto done;
    }
    p.workspace = ws.p;
    p.workspace_size = ws.bytes;
  }
  /* Warm-up (the device's first call prepares its kernels), then the capture. */
  for (int i = Q; i <= DO; ++i) fill(&g.b[i], &rng);
  fa_status st = train_step(&g, &p);
  if (st == FA_OK && cudaStreamSynchronize(s) == cudaSuccess &&
      cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess) {
    st = train_step(&g, &p);
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (st == FA_OK && end != cudaSuccess) st = FA_ERR_BACKEND_FAILURE;
  }
  snprintf(what, sizeof what, "%s: fa_forward + fa_backward captured", name);
  check(st == FA_OK && graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, what,
        st == FA_OK ? "" : fa_last_error());
  if (!exec) goto done;
  for (int round = 0; round < 3; ++round) {
    for (int i = Q; i <= DO; ++i) {
      fill(&g.b[i], &rng);
      cudaMemcpy(e.b[i].p, g.b[i].p, g.b[i].bytes, cudaMemcpyDeviceToDevice);
    }
    for (int i = OUT; i < NBUF; ++i) { /* poison: the replay must write everything */
      cudaMemset(g.b[i].p, 0xff, g.b[i].bytes);
      cudaMemset(e.b[i].p, 0xff, e.b[i].bytes);
    }
    const int replayed =
        cudaGraphLaunch(exec, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    st = train_step(&e, &p);
    const int eager = st == FA_OK && cudaStreamSynchronize(s) == cudaSuccess;
    int ok = replayed && eager;
    for (int i = OUT; i < NBUF && ok; ++i) ok = same(&g.b[i], &e.b[i]);
    snprintf(what, sizeof what, "%s: replay %d bitwise equal to eager calls (out, lse, dq, dk, dv)",
             name, round);
    check(ok, what, eager ? "" : fa_last_error());
  }
done:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamSynchronize(s);
  cudaFree(ws.p);
  train_free(&g);
  train_free(&e);
  if (s) cudaStreamDestroy(s);
}

/* --- 2. decoding steps ---------------------------------------------------------------------- */

enum { DB_ = 4, DHQ = 32, DHKV = 8, PAGES = 40, PAGE = 64, PER_SEQ = 10 };

typedef struct decoder {
  dbuf kc, vc, out, lse;
  fa_tensor tkc, tvc, tout, tlse;
} decoder;

static int decoder_alloc(decoder *x) {
  const size_t cache = (size_t)PAGES * PAGE * DHKV * D_ * 2, ob = (size_t)DB_ * DHQ * D_ * 2;
  if (!dalloc(&x->kc, cache) || !dalloc(&x->vc, cache) || !dalloc(&x->out, ob) ||
      !dalloc(&x->lse, (size_t)DB_ * DHQ * 4))
    return 0;
  x->tkc = t4(&x->kc, PAGES, PAGE, DHKV, D_);
  x->tvc = t4(&x->vc, PAGES, PAGE, DHKV, D_);
  x->tout = t4(&x->out, DB_, 1, DHQ, D_);
  x->tlse = lse3(&x->lse, DB_, DHQ, 1);
  return 1;
}

static void decoder_free(decoder *x) {
  cudaFree(x->kc.p);
  cudaFree(x->vc.p);
  cudaFree(x->out.p);
  cudaFree(x->lse.p);
}

static void part_decode(void) {
  const char *name = "decode.paged";
  char what[160];
  decoder g, e;
  memset(&g, 0, sizeof g);
  memset(&e, 0, sizeof e);
  dbuf q = {0}, kn = {0}, vn = {0}, table = {0}, lens = {0};
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), name));
  /* Each sequence owns PER_SEQ pages, shuffled over the pool. */
  int32_t pages[DB_ * PER_SEQ], len[DB_] = {100, 257, 511, 64};
  for (int i = 0; i < DB_ * PER_SEQ; ++i) pages[i] = i;
  for (int i = DB_ * PER_SEQ - 1; i > 0; --i) {
    const int j = (int)(tu_rng_u64(&rng) % (uint64_t)(i + 1));
    const int32_t tmp = pages[i];
    pages[i] = pages[j];
    pages[j] = tmp;
  }
  if (!decoder_alloc(&g) || !decoder_alloc(&e) || !dalloc(&q, (size_t)DB_ * DHQ * D_ * 2) ||
      !dalloc(&kn, (size_t)DB_ * DHKV * D_ * 2) || !dalloc(&vn, (size_t)DB_ * DHKV * D_ * 2) ||
      !dalloc(&table, sizeof pages) || !dalloc(&lens, sizeof len) ||
      cudaMemcpy(table.p, pages, sizeof pages, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(lens.p, len, sizeof len, cudaMemcpyHostToDevice) != cudaSuccess ||
      !fill(&g.kc, &rng) || !fill(&g.vc, &rng) ||
      cudaMemcpy(e.kc.p, g.kc.p, g.kc.bytes, cudaMemcpyDeviceToDevice) != cudaSuccess ||
      cudaMemcpy(e.vc.p, g.vc.p, g.vc.bytes, cudaMemcpyDeviceToDevice) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    check(0, name, "setup failed");
    goto done;
  }
  fa_tensor tq = t4(&q, DB_, 1, DHQ, D_), tkn = t4(&kn, DB_, 1, DHKV, D_),
            tvn = t4(&vn, DB_, 1, DHKV, D_), tt = i32(&table, 2, DB_, PER_SEQ),
            tl = i32(&lens, 1, DB_, 0);
  fa_params p;
  fa_params_init(&p);
  p.backend = FA_BACKEND_CUDA;
  p.strict = 1;
  p.causal = 1;
  p.block_table = &tt;
  p.stream = s;
  fa_kvcache_args kv;
  fa_kvcache_args_init(&kv);
  kv.k_new = &tkn;
  kv.v_new = &tvn;
  kv.cache_seqlens = &tl;
  /* Warm-up on the eager twin (its caches are restored below), then the capture of one step. */
  fa_run_info info;
  fa_run_info_init(&info);
  fa_status st = fa_forward_kvcache(&p, &tq, &e.tkc, &e.tvc, &kv, &e.tout, &e.tlse, &info);
  if (st == FA_OK && cudaStreamSynchronize(s) == cudaSuccess &&
      cudaMemcpy(e.kc.p, g.kc.p, g.kc.bytes, cudaMemcpyDeviceToDevice) == cudaSuccess &&
      cudaMemcpy(e.vc.p, g.vc.p, g.vc.bytes, cudaMemcpyDeviceToDevice) == cudaSuccess &&
      cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess) {
    st = fa_forward_kvcache(&p, &tq, &g.tkc, &g.tvc, &kv, &g.tout, &g.tlse, NULL);
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (st == FA_OK && end != cudaSuccess) st = FA_ERR_BACKEND_FAILURE;
  }
  snprintf(what, sizeof what, "%s: fa_forward_kvcache captured (%s)", name, info.kernel);
  check(st == FA_OK && graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, what,
        st == FA_OK ? "" : fa_last_error());
  if (!exec) goto done;
  for (int step = 0; step < 4; ++step) {
    fill(&q, &rng);
    fill(&kn, &rng);
    fill(&vn, &rng);
    cudaMemset(g.out.p, 0xff, g.out.bytes);
    cudaMemset(e.out.p, 0xff, e.out.bytes);
    cudaMemset(g.lse.p, 0xff, g.lse.bytes);
    cudaMemset(e.lse.p, 0xff, e.lse.bytes);
    const int replayed =
        cudaGraphLaunch(exec, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    st = fa_forward_kvcache(&p, &tq, &e.tkc, &e.tvc, &kv, &e.tout, &e.tlse, NULL);
    const int eager = st == FA_OK && cudaStreamSynchronize(s) == cudaSuccess;
    const int ok = replayed && eager && same(&g.out, &e.out) && same(&g.lse, &e.lse) &&
                   same(&g.kc, &e.kc) && same(&g.vc, &e.vc);
    snprintf(what, sizeof what,
             "%s: step %d (cache lengths %d %d %d %d) bitwise equal to the eager call", name, step,
             len[0], len[1], len[2], len[3]);
    check(ok, what, eager ? "" : fa_last_error());
    for (int b = 0; b < DB_; ++b) ++len[b]; /* the next step's lengths, read by the graph */
    cudaMemcpy(lens.p, len, sizeof len, cudaMemcpyHostToDevice);
  }
done:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamSynchronize(s);
  decoder_free(&g);
  decoder_free(&e);
  cudaFree(q.p);
  cudaFree(kn.p);
  cudaFree(vn.p);
  cudaFree(table.p);
  cudaFree(lens.p);
  if (s) cudaStreamDestroy(s);
}

/* --- 3. kept counters across streams ------------------------------------------------------- */

/* Poisons out and lse on stream s, runs the forward there and compares both with ref's. */
static int forward_matches(train *x, const train *ref, fa_params *p, cudaStream_t s) {
  cudaMemsetAsync(x->b[OUT].p, 0xff, x->b[OUT].bytes, s);
  cudaMemsetAsync(x->b[LSE].p, 0xff, x->b[LSE].bytes, s);
  p->stream = s;
  if (fa_forward(p, &x->t[Q], &x->t[K], &x->t[V], &x->t[OUT], &x->t[LSE], NULL) != FA_OK ||
      cudaStreamSynchronize(s) != cudaSuccess)
    return 0;
  return same(&x->b[OUT], &ref->b[OUT]) && same(&x->b[LSE], &ref->b[LSE]);
}

/* The device pool's high-water mark of memory in use, reset to the current use by reset = 1. */
static size_t pool_high(int reset) {
  cudaMemPool_t pool;
  uint64_t v = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess) return (size_t)-1;
  if (reset) cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v);
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v);
  return (size_t)v;
}

static void part_streams(void) {
  const char *name = "streams";
  char what[160], detail[200] = "";
  train x, ref;
  memset(&x, 0, sizeof x);
  memset(&ref, 0, sizeof ref);
  cudaStream_t s[2] = {NULL, NULL};
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  dbuf ws = {NULL, 0};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), name));
  setenv("FA_CUDA_FA3_GRID", "7", 1);
  if (!train_alloc(&x) || !train_alloc(&ref) ||
      cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking) != cudaSuccess) {
    check(0, name, "setup failed");
    goto done;
  }
  for (int i = Q; i <= V; ++i) fill(&x.b[i], &rng);
  fa_params p;
  fa_params_init(&p);
  p.backend = FA_BACKEND_CUDA;
  p.strict = 1;
  p.causal = 1;
  p.stream = s[0];
  size_t fw = 0;
  fa_run_info info;
  fa_run_info_init(&info);
  /* The reference: the counter in the caller's workspace, cleared by the launch (with no kept
     counters on the device, fa_release having freed them, a call given a workspace allocates
     none). */
  fa_release();
  if (fa_forward_workspace_size(&p, &x.t[Q], &x.t[K], &x.t[V], &x.t[OUT], &x.t[LSE], &fw) !=
          FA_OK ||
      !dalloc(&ws, fw ? fw : 1)) {
    check(0, name, fa_last_error());
    goto done;
  }
  p.workspace = ws.p;
  p.workspace_size = ws.bytes;
  const fa_status st = fa_forward(&p, &x.t[Q], &x.t[K], &x.t[V], &ref.t[OUT], &ref.t[LSE], &info);
  snprintf(detail, sizeof detail, "%s, workspace %zu bytes",
           st == FA_OK ? info.kernel : fa_last_error(), fw);
  check(st == FA_OK && cudaStreamSynchronize(s[0]) == cudaSuccess &&
            strncmp(info.kernel, "cuda.fa3.", 9) == 0 && fw > 0,
        "streams: the causal forward runs fa3 with a dynamic schedule (a counter in its workspace)",
        detail);
  p.workspace = NULL;
  p.workspace_size = 0;
  const cudaStream_t order[4] = {s[0], s[1], 0, cudaStreamPerThread};
  const char *const names[4] = {"stream A", "stream B", "the legacy stream",
                                "the per-thread stream"};
  pool_high(1);
  for (int round = 0; round < 6; ++round)
    for (int i = 0; i < 4; ++i) {
      snprintf(what, sizeof what, "streams: round %d on %s bitwise the workspace call", round,
               names[i]);
      check(forward_matches(&x, &ref, &p, order[i]), what, fa_last_error());
    }
  const size_t high = pool_high(0);
  snprintf(detail, sizeof detail, "pool high-water mark %zu bytes", high);
  check(high == 0, "streams: without a workspace the calls take nothing from the pool", detail);
  /* Calls given a workspace (the counters kept, they take their stream's kept counter too). */
  p.workspace = ws.p;
  p.workspace_size = ws.bytes;
  for (int i = 0; i < 4; ++i) {
    snprintf(what, sizeof what, "streams: given a workspace, on %s bitwise the first call",
             names[i]);
    check(forward_matches(&x, &ref, &p, order[i]), what, fa_last_error());
  }
  p.workspace = NULL;
  p.workspace_size = 0;
  fa_release(); /* frees the kept counters: the next call on each stream makes a new one */
  for (int i = 0; i < 4; ++i) {
    snprintf(what, sizeof what, "streams: after fa_release, on %s bitwise the workspace call",
             names[i]);
    check(forward_matches(&x, &ref, &p, order[i]), what, fa_last_error());
  }
  /* A capture on stream B: its counter comes from the pool (a graph may replay on any stream). */
  if (cudaStreamBeginCapture(s[1], cudaStreamCaptureModeGlobal) == cudaSuccess) {
    p.stream = s[1];
    const fa_status cs = fa_forward(&p, &x.t[Q], &x.t[K], &x.t[V], &x.t[OUT], &x.t[LSE], NULL);
    const cudaError_t end = cudaStreamEndCapture(s[1], &graph);
    check(cs == FA_OK && end == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess,
          "streams: the forward captured on stream B", cs == FA_OK ? "" : fa_last_error());
  }
  if (!exec) goto done;
  for (int round = 0; round < 4; ++round) {
    const cudaStream_t on = s[round & 1];
    cudaMemsetAsync(x.b[OUT].p, 0xff, x.b[OUT].bytes, on);
    cudaMemsetAsync(x.b[LSE].p, 0xff, x.b[LSE].bytes, on);
    const int replayed =
        cudaGraphLaunch(exec, on) == cudaSuccess && cudaStreamSynchronize(on) == cudaSuccess;
    snprintf(what, sizeof what,
             "streams: replay %d on %s bitwise the workspace call, then an eager call there", round,
             names[round & 1]);
    check(replayed && same(&x.b[OUT], &ref.b[OUT]) && same(&x.b[LSE], &ref.b[LSE]) &&
              forward_matches(&x, &ref, &p, on),
          what, replayed ? fa_last_error() : "the replay failed");
  }
done:
  unsetenv("FA_CUDA_FA3_GRID");
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaDeviceSynchronize();
  cudaFree(ws.p);
  train_free(&x);
  train_free(&ref);
  for (int i = 0; i < 2; ++i)
    if (s[i]) cudaStreamDestroy(s[i]);
}

int main(void) {
  fa_backend_desc cuda;
  const int unavailable = cuda_backend_or_skip(&cuda);
  if (unavailable) return unavailable;
  printf("cuda_graph: %s (%s)\n", cuda.devices, cuda.arch);
  part_train(1);
  part_train(0);
  part_decode();
  part_streams();
  const cudaError_t e = cudaDeviceSynchronize();
  check(e == cudaSuccess, "device: no CUDA error pending", cudaGetErrorName(e));
  return check_summary("cuda_graph");
}
