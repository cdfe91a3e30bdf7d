/*
 * cuda_load.c: the CUDA backend under load through the public API: many host threads, each with
 * several CUDA streams, calling fa_forward and fa_backward, and fa_forward_kvcache, at once on a
 * fixed set of mixed problems, every result compared bitwise with the same call made serially
 * first
 * (tests/gpu/h200_check.sh runs it: steps load and load.oom).
 *
 *   cuda_load [--seconds S] [--threads T] [--streams N] [--exhaust-memory]
 *
 * 1. References: each problem (bf16 and f16; head dims 64, 96, 128, 256; causal and not; GQA and
 *    MHA; sequence lengths that are not tile multiples) gets random inputs from a fixed seed of
 *    its own, in CUDA memory; its forward (out, lse) and backward (dq, dk, dv) run once, serially,
 *    with params.strict, params.backend = cuda, params.deterministic (the backward's dQ summed in
 *    a fixed order, so that its results are bitwise reproducible) and a stream of their own. The
 * results are copied to the host and checked against a float64 reference (the conformance suite's
 * pass rule), so that the bitwise comparisons below compare with correct values. Two decoding
 * problems call fa_forward_kvcache instead: new tokens appended to paged caches through a
 * shuffled block table, with per-sequence cache lengths, both in device memory; their outputs
 * are out, lse and the two caches (each call first copies pristine caches into its own on its
 * stream). Their serial results are checked for consistency only here (the conformance suite
 * holds fa_forward_kvcache on cuda to the CPU backend's results).
 * 2. Warm-up: one forward + backward on every stream of every thread, compared like the load's.
 * 3. Load: T threads (default 8) x N streams each (default 4, cudaStreamNonBlocking) for S seconds
 *    (default 60). Each thread cycles over its streams and over the problems in an order of its
 *    own: per stream, its output buffers (allocated up front, one set per thread x stream) are
 *    poisoned with 0xFF bytes (NaN in every dtype), the forward writes out and lse and the
 *    backward reads them and writes dq, dk, dv, all on that stream with params.workspace NULL (the
 *    backend allocates in stream order); once every stream of the round is issued, each is
 *    synchronized and its outputs copied back and compared bitwise with the references, and the
 *    kernel each call ran with the serial call's. Any status other than FA_OK is an error
 *    (fa_last_error() printed). Threads still running HANG_GRACE_S seconds after the deadline
 *    (a kernel that never ends) fail the test at once.
 * 4. Device memory: cudaMemGetInfo's free bytes after the warm-up and after the load, each taken
 *    after cudaDeviceSynchronize and fa_release() (which trims the stream-ordered pool, so that
 *    workspaces the pool keeps for reuse do not count); more than LOST_SLACK_MIB lost fails. The
 *    slack covers what the driver may keep per context outside the library (its own bookkeeping
 *    of streams and threads). A leaked workspace is caught exactly by the pool's own count: the
 *    bytes in use from the pool cudaMallocAsync draws on (cudaMemPoolAttrUsedMemCurrent) must be
 *    no more after the load than before it.
 * 5. With --exhaust-memory (fault injection, the forward's counterpart of cuda_smoke's): a
 *    problem whose forward needs a workspace (on sm_90 the fa3 forward under a causal mask runs a
 *    dynamic schedule whose tile counter, where params.workspace is NULL, is the stream's kept one
 *    or, with none, a small workspace from cudaMallocAsync; fa_release first frees the kept ones,
 *    and a new one cannot be allocated) runs with the device's memory taken by cudaMalloc until
 *    even 256 bytes fail: the forward must return FA_ERR_OUT_OF_MEMORY naming the workspace, leave
 * out and lse poisoned and the pool's bytes in use as they were; once the memory is back the same
 * call must succeed and match the reference bitwise. Where the run report gives that problem
 * workspace_bytes 0 (no fa3 on this GPU), nothing can fail to allocate and the check is a SKIP with
 * the reason. --seconds 0 runs the references and this check only.
 * 6. The device synchronizes and no CUDA error is pending.
 *
 * Prints one PASS / FAIL / SKIP line per check and a summary line; exits 0 when every check
 * passes, 1 on any failure, 2 on a bad option, 77 when the CUDA backend is not available here (with
 * the library's reason).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_tally.h"
#include "cuda_backend.h"
#include "flash_attn.h"
#include "reference.h"
#include "tensor_util.h"

enum { MAX_THREADS = 64, MAX_STREAMS = 16 };
enum { LOST_SLACK_MIB = 64 };
/* Failure lines printed from the load (the counts are always complete). */
enum { MAX_REPORTS = 20 };
/* A thread stops after this many errors: past a sticky CUDA error every call fails alike. */
enum { MAX_ERRORS_PER_THREAD = 100 };
enum { MAX_HOG = 4096 };
/* Seconds the threads may run past the deadline before the load counts as hung (a kernel that
   never ends, a stream that never drains): the test then fails at once instead of waiting for the
   caller's time limit. A round of one thread takes milliseconds. */
enum { HANG_GRACE_S = 20 };

/* The inputs and outputs of one problem. */
enum { I_Q, I_K, I_V, I_DOUT, I_COUNT };
enum { O_OUT, O_LSE, O_DQ, O_DK, O_DV, O_COUNT };
static const char *const out_names[O_COUNT] = {"out", "lse", "dq", "dk", "dv"};
static const ref_which out_which[O_COUNT] = {REF_OUT, REF_LSE, REF_DQ, REF_DK, REF_DV};

typedef struct problem_def {
  fa_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int causal;
  int kvcache; /* 1: fa_forward_kvcache, seqlen_q new tokens into paged caches of seqlen_k keys */
} problem_def;

enum { KV_PAGE = 64 }; /* the decoding problems' page size */

/* Mixed on purpose: both dtypes, the head dims of each fa3 kernel (96 runs on 128's), both masks,
   GQA (8 query heads over 2 KV heads) and MHA, lengths off the tiles (100, 333, 1000) and one
   problem with fewer queries than keys (the causal mask aligned bottom-right); then two decoding
   problems (one new token, GQA 32:8; four new tokens, GQA 16:2). */
static const problem_def defs[] = {
    {FA_BF16, 2, 1000, 1000, 8, 2, 64, 1, 0}, {FA_F16, 2, 333, 333, 4, 4, 128, 0, 0},
    {FA_BF16, 1, 333, 333, 8, 2, 128, 1, 0},  {FA_F16, 1, 100, 100, 4, 4, 256, 1, 0},
    {FA_BF16, 1, 1000, 1000, 8, 2, 96, 0, 0}, {FA_F16, 3, 100, 100, 4, 4, 64, 0, 0},
    {FA_BF16, 1, 333, 333, 8, 2, 256, 0, 0},  {FA_F16, 1, 100, 1000, 8, 2, 128, 1, 0},
    {FA_BF16, 4, 1, 512, 32, 8, 128, 1, 1},   {FA_F16, 3, 4, 768, 16, 2, 64, 1, 1},
};
enum { NPROB = (int)(sizeof defs / sizeof defs[0]) };
/* The --exhaust-memory problem: causal at head dim 128, the fa3 forward's dynamic schedule. */
enum { OOM_PROBLEM = 2 };

typedef struct problem {
  problem_def d;
  char label[96];
  int ok; /* the serial calls succeeded: the load uses this problem */
  tu_tensor in[I_COUNT];
  void *in_dev[I_COUNT];
  fa_tensor in_t[I_COUNT];
  tu_tensor ref[O_COUNT]; /* the serial results, on the host */
  size_t bytes[O_COUNT];
  char fwd_kernel[FA_KERNEL_LEN], bwd_kernel[FA_KERNEL_LEN];
  size_t fwd_workspace;
  /* Decoding problems: pristine caches, the block table and the cache lengths (device). */
  void *cache_dev[2], *table_dev, *lens_dev;
  fa_tensor table_t, lens_t;
} problem;

/* One stream of one thread, with its own outputs. */
typedef struct slot {
  cudaStream_t stream;
  void *dev[O_COUNT];
  unsigned char *host[O_COUNT]; /* pinned, so that the copies back are asynchronous */
  int problem;                  /* in flight on this stream, or -1 */
  int failed;                   /* a call of the task in flight failed: nothing to compare */
  fa_run_info fwd, bwd;         /* the run reports of the task in flight */
} slot;

typedef struct worker {
  int index;
  pthread_t thread;
  slot *slots;
  int order[NPROB];
  int norder;
  long calls, tasks, mismatches, errors;
} worker;

static problem g_prob[NPROB];
static int g_streams = 4;
static double g_deadline; /* monotonic seconds */
static atomic_int g_reports;
static atomic_int g_stop;
static size_t g_max_bytes[O_COUNT];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_done; /* threads finished, under g_lock */

static void skip(const char *what, const char *why) {
  printf("SKIP %s: %s\n", what, why);
  fflush(stdout);
}

/* A failure seen during the load, printed while fewer than MAX_REPORTS have been. */
static void report(const char *fmt, const char *a, const char *b, const char *c, int thread,
                   int stream) {
  if (atomic_fetch_add(&g_reports, 1) >= MAX_REPORTS) return;
  char line[FA_REASON_LEN + 256];
  snprintf(line, sizeof line, fmt, a, b, c);
  printf("  thread %d stream %d: %s\n", thread, stream, line);
  fflush(stdout);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!end || end == s || *end || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static int cuda_ok(cudaError_t e, const char *what, char *err, size_t n) {
  if (e == cudaSuccess) return 1;
  snprintf(err, n, "%s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return 0;
}

/* Bytes in use from the pool cudaMallocAsync takes the library's workspaces from (device 0's
   current pool; the test itself allocates nothing there), and its high-water mark. */
static int pool_used(uint64_t *used, uint64_t *high, char *err, size_t n) {
  cudaMemPool_t pool;
  return cuda_ok(cudaDeviceGetMemPool(&pool, 0), "cudaDeviceGetMemPool", err, n) &&
         cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, used),
                 "cudaMemPoolGetAttribute(used)", err, n) &&
         (!high || cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, high),
                           "cudaMemPoolGetAttribute(high)", err, n));
}

static int pool_reset_high(char *err, size_t n) {
  cudaMemPool_t pool;
  uint64_t zero = 0;
  return cuda_ok(cudaDeviceGetMemPool(&pool, 0), "cudaDeviceGetMemPool", err, n) &&
         cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero),
                 "cudaMemPoolSetAttribute(high)", err, n);
}

/* A contiguous CUDA tensor over data. */
static fa_tensor view(void *data, fa_dtype dtype, int ndim, const int64_t *shape) {
  const fa_device cuda0 = {FA_DEVICE_CUDA, 0};
  return tu_view(data, dtype, cuda0, ndim, shape);
}

/* q, k (a decoding problem's new tokens) and lse; the caches of a decoding problem (pages of
   KV_PAGE keys, seqlen_k / KV_PAGE per sequence). */
static void shapes_of(const problem_def *d, int64_t q[4], int64_t k[4], int64_t lse[3]) {
  q[0] = d->batch, q[1] = d->seqlen_q, q[2] = d->heads_q, q[3] = d->head_dim;
  k[0] = d->batch, k[1] = d->kvcache ? d->seqlen_q : d->seqlen_k, k[2] = d->heads_kv;
  k[3] = d->head_dim;
  lse[0] = d->batch, lse[1] = d->heads_q, lse[2] = d->seqlen_q;
}
static void cache_shape_of(const problem_def *d, int64_t c[4]) {
  c[0] = d->batch * (d->seqlen_k / KV_PAGE), c[1] = KV_PAGE, c[2] = d->heads_kv;
  c[3] = d->head_dim;
}

/* The output views of problem p over the buffers dev (a decoding problem: out, lse, the K and V
   caches in the places of dq and dk; nothing in dv's). */
static void out_views(const problem *p, void *const dev[O_COUNT], fa_tensor t[O_COUNT]) {
  int64_t qs[4], ks[4], ls[3], cs[4];
  shapes_of(&p->d, qs, ks, ls);
  cache_shape_of(&p->d, cs);
  t[O_OUT] = view(dev[O_OUT], p->d.dtype, 4, qs);
  t[O_LSE] = view(dev[O_LSE], FA_F32, 3, ls);
  t[O_DQ] = view(dev[O_DQ], p->d.dtype, 4, p->d.kvcache ? cs : qs);
  t[O_DK] = view(dev[O_DK], p->d.dtype, 4, p->d.kvcache ? cs : ks);
  t[O_DV] = view(dev[O_DV], p->d.dtype, 4, ks);
}

static fa_params params_for(const problem *p, cudaStream_t stream) {
  fa_params params;
  fa_params_init(&params);
  params.backend = FA_BACKEND_CUDA;
  params.strict = 1;
  params.deterministic = 1;
  params.causal = p->d.causal;
  params.stream = (void *)stream;
  if (p->d.kvcache) params.block_table = &p->table_t;
  return params;
}

/* A decoding problem's call: pristine caches copied into the slot's (dev[O_DQ], dev[O_DK]) on
   stream, then fa_forward_kvcache appends into them. */
static fa_status issue_kvcache(const problem *p, cudaStream_t stream, void *const dev[O_COUNT],
                               fa_run_info *fi, char *err, size_t n) {
  fa_tensor t[O_COUNT];
  out_views(p, dev, t);
  for (int c = 0; c < 2; ++c)
    if (!cuda_ok(cudaMemcpyAsync(dev[O_DQ + c], p->cache_dev[c], p->bytes[O_DQ + c],
                                 cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync(caches)", err, n))
      return FA_ERR_BACKEND_FAILURE;
  const fa_params params = params_for(p, stream);
  fa_kvcache_args kv;
  fa_kvcache_args_init(&kv);
  kv.k_new = &p->in_t[I_K];
  kv.v_new = &p->in_t[I_V];
  kv.cache_seqlens = &p->lens_t;
  const fa_status st =
      fa_forward_kvcache(&params, &p->in_t[I_Q], &t[O_DQ], &t[O_DK], &kv, &t[O_OUT], &t[O_LSE], fi);
  if (st != FA_OK)
    snprintf(err, n, "fa_forward_kvcache: %s: %s", fa_status_string(st), fa_last_error());
  return st;
}

/* Poisons the outputs at dev, then queues p's forward and backward on stream (the backward
   reading this forward's out and lse), their run reports in fi and bi. Returns the number of fa_*
   calls made; *st is the first failure's status (FA_OK when none), with its message in err. */
static int issue(const problem *p, cudaStream_t stream, void *const dev[O_COUNT], fa_run_info *fi,
                 fa_run_info *bi, fa_status *st, char *err, size_t n) {
  *st = FA_OK;
  err[0] = 0;
  fa_run_info_init(fi);
  fa_run_info_init(bi);
  for (int o = 0; o < O_COUNT; ++o)
    if (!cuda_ok(cudaMemsetAsync(dev[o], 0xff, p->bytes[o], stream), "cudaMemsetAsync", err, n)) {
      *st = FA_ERR_BACKEND_FAILURE;
      return 0;
    }
  if (p->d.kvcache) {
    *st = issue_kvcache(p, stream, dev, fi, err, n);
    return 1;
  }
  fa_tensor t[O_COUNT];
  out_views(p, dev, t);
  const fa_params params = params_for(p, stream);
  *st = fa_forward(&params, &p->in_t[I_Q], &p->in_t[I_K], &p->in_t[I_V], &t[O_OUT], &t[O_LSE], fi);
  if (*st != FA_OK) {
    snprintf(err, n, "fa_forward: %s: %s", fa_status_string(*st), fa_last_error());
    return 1;
  }
  *st = fa_backward(&params, &p->in_t[I_Q], &p->in_t[I_K], &p->in_t[I_V], &t[O_OUT], &t[O_LSE],
                    &p->in_t[I_DOUT], &t[O_DQ], &t[O_DK], &t[O_DV], bi);
  if (*st != FA_OK) snprintf(err, n, "fa_backward: %s: %s", fa_status_string(*st), fa_last_error());
  return 2;
}

/* Queues the copies of the outputs at dev into host on stream. */
static int copy_back(const problem *p, cudaStream_t stream, void *const dev[O_COUNT],
                     unsigned char *const host[O_COUNT], char *err, size_t n) {
  for (int o = 0; o < O_COUNT; ++o)
    if (!cuda_ok(cudaMemcpyAsync(host[o], dev[o], p->bytes[o], cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync(device to host)", err, n))
      return 0;
  return 1;
}

/* How many of the outputs in host differ from p's references (bitwise), plus 1 when a call ran
   another kernel than the serial one; each difference described through report(). */
static int compare(const problem *p, unsigned char *const host[O_COUNT], const char *fwd_kernel,
                   const char *bwd_kernel, int thread, int stream) {
  int bad = 0;
  for (int o = 0; o < O_COUNT; ++o) {
    const unsigned char *want = p->ref[o].buf, *got = host[o];
    if (memcmp(got, want, p->bytes[o]) == 0) continue;
    ++bad;
    size_t at = 0;
    while (at < p->bytes[o] && got[at] == want[at]) ++at;
    const size_t eb = p->ref[o].elem_bytes, elem = at / eb;
    uint32_t g = 0, w = 0;
    memcpy(&g, got + elem * eb, eb);
    memcpy(&w, want + elem * eb, eb);
    char what[160];
    snprintf(what, sizeof what, "%s element %zu is 0x%0*x, the serial call's 0x%0*x", out_names[o],
             elem, (int)eb * 2, (unsigned)g, (int)eb * 2, (unsigned)w);
    report("%s: %s%s", p->label, what, "", thread, stream);
  }
  if (strcmp(fwd_kernel, p->fwd_kernel) != 0 || strcmp(bwd_kernel, p->bwd_kernel) != 0) {
    ++bad;
    report("%s: ran %s + %s", p->label, fwd_kernel, bwd_kernel, thread, stream);
  }
  return bad;
}

static void run_worker(worker *w) {
  char err[FA_REASON_LEN + 128];
  if (cudaSetDevice(0) != cudaSuccess) {
    ++w->errors;
    report("%s%s%s", "cudaSetDevice(0) failed", "", "", w->index, -1);
    return;
  }
  for (long round = 0; !atomic_load(&g_stop) && now_s() < g_deadline; ++round) {
    /* Issue on every stream, then collect: the streams of a thread run at once. Stream s takes
       the thread's problems in its order from position s, one further each round, so that every
       stream runs every problem and a round's streams run different ones. */
    for (int s = 0; s < g_streams; ++s) {
      slot *sl = &w->slots[s];
      const problem *p = &g_prob[w->order[(round + s) % w->norder]];
      sl->problem = (int)(p - g_prob);
      fa_status st;
      w->calls += issue(p, sl->stream, sl->dev, &sl->fwd, &sl->bwd, &st, err, sizeof err);
      sl->failed = st != FA_OK || !copy_back(p, sl->stream, sl->dev, sl->host, err, sizeof err);
      if (sl->failed) {
        ++w->errors;
        report("%s: %s%s", p->label, err, "", w->index, s);
      }
    }
    for (int s = 0; s < g_streams; ++s) {
      slot *sl = &w->slots[s];
      const problem *p = &g_prob[sl->problem];
      if (!cuda_ok(cudaStreamSynchronize(sl->stream), "cudaStreamSynchronize", err, sizeof err)) {
        ++w->errors;
        report("%s: %s%s", p->label, err, "", w->index, s);
        continue;
      }
      if (sl->failed) continue;
      ++w->tasks;
      w->mismatches += compare(p, sl->host, sl->fwd.kernel, sl->bwd.kernel, w->index, s);
    }
    if (w->errors >= MAX_ERRORS_PER_THREAD) atomic_store(&g_stop, 1);
  }
}

static void *work(void *arg) {
  run_worker(arg);
  pthread_mutex_lock(&g_lock);
  ++g_done;
  pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

/* A decoding problem's pristine caches (random), its block table (every sequence's pages
   shuffled over the pool) and cache lengths (room left for the new tokens), in device memory.
   Returns 0 on success. */
static int make_decoding_tables(problem *p, tu_rng *rng, const int64_t cs[4]) {
  char err[256];
  const problem_def *d = &p->d;
  const int64_t per_seq = d->seqlen_k / KV_PAGE, pages = d->batch * per_seq;
  int32_t *table = malloc(sizeof(int32_t) * (size_t)pages), lens[64];
  tu_tensor cache;
  memset(&cache, 0, sizeof cache);
  int ok = table && d->batch <= 64 && tu_alloc(&cache, d->dtype, 4, cs, TU_CONTIGUOUS) == 0;
  for (int64_t i = 0; ok && i < pages; ++i) table[i] = (int32_t)i;
  for (int64_t i = pages - 1; ok && i > 0; --i) {
    const int64_t j = (int64_t)(tu_rng_u64(rng) % (uint64_t)(i + 1));
    const int32_t x = table[i];
    table[i] = table[j], table[j] = x;
  }
  for (int64_t b = 0; ok && b < d->batch; ++b)
    lens[b] = (int32_t)((d->seqlen_k - d->seqlen_q) - (b * 97) % (d->seqlen_k / 2));
  const size_t cache_bytes = cache.buf_elems * cache.elem_bytes;
  for (int c = 0; c < 2 && ok; ++c) {
    tu_fill_random(&cache, rng);
    ok = cuda_ok(cudaMalloc(&p->cache_dev[c], cache_bytes), "cudaMalloc", err, sizeof err) &&
         cuda_ok(cudaMemcpy(p->cache_dev[c], cache.buf, cache_bytes, cudaMemcpyHostToDevice),
                 "cudaMemcpy", err, sizeof err);
  }
  ok = ok &&
       cuda_ok(cudaMalloc(&p->table_dev, sizeof(int32_t) * (size_t)pages), "cudaMalloc", err,
               sizeof err) &&
       cuda_ok(
           cudaMemcpy(p->table_dev, table, sizeof(int32_t) * (size_t)pages, cudaMemcpyHostToDevice),
           "cudaMemcpy", err, sizeof err) &&
       cuda_ok(cudaMalloc(&p->lens_dev, sizeof(int32_t) * (size_t)d->batch), "cudaMalloc", err,
               sizeof err) &&
       cuda_ok(cudaMemcpy(p->lens_dev, lens, sizeof(int32_t) * (size_t)d->batch,
                          cudaMemcpyHostToDevice),
               "cudaMemcpy", err, sizeof err);
  free(table);
  tu_free(&cache);
  if (!ok) {
    check(0, p->label, "the decoding problem's caches and tables");
    return -1;
  }
  const int64_t ts[2] = {d->batch, per_seq}, ls[1] = {d->batch};
  p->table_t = view(p->table_dev, FA_I32, 2, ts);
  p->lens_t = view(p->lens_dev, FA_I32, 1, ls);
  return 0;
}

/* Inputs in CUDA memory, the serial forward and backward (or the decoding call), their results on
   the host and (training problems) against the float64 reference. Returns 0 when the problem can
   be used. */
static int make_reference(problem *p, int index, cudaStream_t stream) {
  char err[FA_REASON_LEN + 128], what[160], detail[FA_REASON_LEN + 256];
  const problem_def *d = &p->d;
  snprintf(p->label, sizeof p->label, "p%d %s%s hd%lld b%lld h%lld/%lld s%lld/%lld %s", index,
           d->kvcache ? "kvcache " : "", fa_dtype_name(d->dtype), (long long)d->head_dim,
           (long long)d->batch, (long long)d->heads_q, (long long)d->heads_kv,
           (long long)d->seqlen_q, (long long)d->seqlen_k, d->causal ? "causal" : "non-causal");
  int64_t qs[4], ks[4], ls[3], cs[4];
  static const int64_t one[4] = {1, 1, 1, 1};
  shapes_of(d, qs, ks, ls);
  cache_shape_of(d, cs);
  const int64_t *in_shapes[I_COUNT] = {qs, ks, ks, qs};
  const int64_t *out_shapes[O_COUNT] = {qs, ls, d->kvcache ? cs : qs, d->kvcache ? cs : ks,
                                        d->kvcache ? one : ks};
  tu_rng rng;
  tu_rng_init(&rng, 0x10adull * 1000 + (uint64_t)index);
  for (int i = 0; i < I_COUNT; ++i) {
    if (tu_alloc(&p->in[i], d->dtype, 4, in_shapes[i], TU_CONTIGUOUS)) {
      check(0, p->label, "host allocation");
      return -1;
    }
    tu_fill_random(&p->in[i], &rng);
    const size_t bytes = p->in[i].buf_elems * p->in[i].elem_bytes;
    if (!cuda_ok(cudaMalloc(&p->in_dev[i], bytes), "cudaMalloc", err, sizeof err) ||
        !cuda_ok(cudaMemcpy(p->in_dev[i], p->in[i].buf, bytes, cudaMemcpyHostToDevice),
                 "cudaMemcpy(host to device)", err, sizeof err)) {
      check(0, p->label, err);
      return -1;
    }
    p->in_t[i] = view(p->in_dev[i], d->dtype, 4, in_shapes[i]);
  }
  if (d->kvcache && make_decoding_tables(p, &rng, cs) != 0) return -1;
  for (int o = 0; o < O_COUNT; ++o) {
    if (tu_alloc(&p->ref[o], o == O_LSE ? FA_F32 : d->dtype, o == O_LSE ? 3 : 4, out_shapes[o],
                 TU_CONTIGUOUS)) {
      check(0, p->label, "host allocation");
      return -1;
    }
    p->bytes[o] = d->kvcache && o == O_DV ? 0 : p->ref[o].buf_elems * p->ref[o].elem_bytes;
    if (p->bytes[o] > g_max_bytes[o]) g_max_bytes[o] = p->bytes[o];
  }
  /* The serial calls write into buffers of their own, freed once their results are copied. */
  void *dev[O_COUNT] = {0};
  fa_run_info fi, bi;
  int ok = 1;
  for (int o = 0; o < O_COUNT && ok; ++o)
    ok = cuda_ok(cudaMalloc(&dev[o], p->bytes[o]), "cudaMalloc", err, sizeof err);
  /* The pageable copies above are not ordered with a non-blocking stream. */
  ok = ok && cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err, sizeof err);
  if (!ok) {
    check(0, p->label, err);
  } else {
    fa_status st;
    unsigned char *host[O_COUNT];
    for (int o = 0; o < O_COUNT; ++o) host[o] = p->ref[o].buf;
    issue(p, stream, dev, &fi, &bi, &st, err, sizeof err);
    if (st == FA_OK) {
      ok = copy_back(p, stream, dev, host, err, sizeof err) &&
           cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize", err, sizeof err);
      if (!ok) check(0, p->label, err);
    } else {
      ok = 0;
      snprintf(what, sizeof what, "%s: the serial forward and backward", p->label);
      check(0, what, err);
    }
  }
  for (int o = 0; o < O_COUNT; ++o)
    if (dev[o]) cudaFree(dev[o]);
  if (!ok) return -1;

  /* The run reports: deterministic (else the bitwise comparisons would prove nothing) and the
     forward's workspace (the --exhaust-memory check needs one). */
  snprintf(p->fwd_kernel, sizeof p->fwd_kernel, "%s", fi.kernel);
  snprintf(p->bwd_kernel, sizeof p->bwd_kernel, "%s", bi.kernel);
  p->fwd_workspace = fi.workspace_bytes;
  if (d->kvcache) {
    snprintf(what, sizeof what, "%s: %s, deterministic", p->label, fi.kernel);
    snprintf(detail, sizeof detail, "run report: deterministic %d, workspace %zu bytes",
             (int)fi.deterministic, fi.workspace_bytes);
    check(fi.deterministic && strstr(fi.kernel, ".kvcache") != NULL, what, detail);
    return fi.deterministic ? 0 : -1;
  }
  snprintf(what, sizeof what, "%s: %s + %s, deterministic", p->label, fi.kernel, bi.kernel);
  snprintf(detail, sizeof detail,
           "run reports: forward deterministic %d, workspace %zu bytes; backward deterministic "
           "%d, workspace %zu bytes",
           (int)fi.deterministic, fi.workspace_bytes, (int)bi.deterministic, bi.workspace_bytes);
  check(fi.deterministic && bi.deterministic, what, detail);
  if (!fi.deterministic || !bi.deterministic) return -1;

  /* Against float64: the pass rule of the conformance suite. */
  ref_problem rp;
  rp.batch = d->batch, rp.seqlen_q = d->seqlen_q, rp.seqlen_k = d->seqlen_k;
  rp.heads_q = d->heads_q, rp.heads_kv = d->heads_kv;
  rp.head_dim = d->head_dim, rp.head_dim_v = d->head_dim;
  rp.scale = ref_resolve_scale(0.0f, d->head_dim);
  rp.causal = d->causal;
  rp.causal_align = FA_CAUSAL_BOTTOM_RIGHT;
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  snprintf(what, sizeof what, "%s: the serial results against the float64 reference", p->label);
  if (ref_attention(&rp, REF_F64, &p->in[I_Q], &p->in[I_K], &p->in[I_V], &p->in[I_DOUT], &r64, 0) ||
      ref_attention(&rp, REF_STORAGE, &p->in[I_Q], &p->in[I_K], &p->in[I_V], &p->in[I_DOUT], &rn,
                    0)) {
    check(0, what, "the reference ran out of memory");
    ok = 0;
  } else {
    int pass = 1;
    size_t len = 0;
    detail[0] = 0;
    for (int o = 0; o < O_COUNT; ++o) {
      unsigned char *masked = ref_masked_map(&rp, out_which[o]);
      ref_check ck;
      ref_check_output(&p->ref[o], &r64, &rn, out_which[o], masked, d->dtype, &ck);
      free(masked);
      pass = pass && ck.pass;
      if (len < sizeof detail)
        len += (size_t)snprintf(detail + len, sizeof detail - len, "%s%s %.2e (tol %.2e)%s%s",
                                o ? ", " : "", out_names[o], ck.max_err, ck.tol,
                                ck.broken ? " " : "", ck.broken ? ck.why : "");
    }
    check(pass, what, detail);
    ok = pass;
  }
  ref_result_free(&r64);
  ref_result_free(&rn);
  return ok ? 0 : -1;
}

/* One forward + backward on every stream, compared as the load compares. */
static void warm_up(worker *w, int nthreads, const int *usable, int nusable) {
  char err[FA_REASON_LEN + 128], detail[256];
  long mismatches = 0, errors = 0, tasks = 0;
  for (int t = 0; t < nthreads; ++t)
    for (int s = 0; s < g_streams; ++s) {
      slot *sl = &w[t].slots[s];
      const problem *p = &g_prob[usable[(t * g_streams + s) % nusable]];
      fa_status st;
      issue(p, sl->stream, sl->dev, &sl->fwd, &sl->bwd, &st, err, sizeof err);
      if (st != FA_OK || !copy_back(p, sl->stream, sl->dev, sl->host, err, sizeof err) ||
          !cuda_ok(cudaStreamSynchronize(sl->stream), "cudaStreamSynchronize", err, sizeof err)) {
        ++errors;
        report("%s: %s%s", p->label, err, "", t, s);
        continue;
      }
      ++tasks;
      mismatches += compare(p, sl->host, sl->fwd.kernel, sl->bwd.kernel, t, s);
    }
  snprintf(detail, sizeof detail, "%ld tasks, %ld mismatches, %ld errors", tasks, mismatches,
           errors);
  check(mismatches == 0 && errors == 0,
        "warm-up: one forward + backward on every stream, bitwise equal to the serial results",
        detail);
}

/* The --exhaust-memory check on problem p, with the outputs and stream of sl. */
static void exhaust_check(const problem *p, slot *sl) {
  char err[FA_REASON_LEN + 128], detail[FA_REASON_LEN + 128], why[FA_REASON_LEN];
  const char *what = "forward without device memory: FA_ERR_OUT_OF_MEMORY";
  if (!p->ok) {
    check(0, what, "its problem has no serial result");
    return;
  }
  if (p->fwd_workspace == 0) {
    snprintf(why, sizeof why,
             "%s runs %s with workspace_bytes 0 on this GPU (the fa3 forward's dynamic schedule "
             "is sm_90's), so no allocation of the forward can fail",
             p->label, p->fwd_kernel);
    skip(what, why);
    return;
  }
  printf("cuda_load: --exhaust-memory on %s (%s, workspace %zu bytes)\n", p->label, p->fwd_kernel,
         p->fwd_workspace);
  void *dev[O_COUNT];
  unsigned char *host[O_COUNT];
  for (int o = 0; o < O_COUNT; ++o) dev[o] = sl->dev[o], host[o] = sl->host[o];
  fa_tensor t[O_COUNT];
  out_views(p, dev, t);
  const fa_params params = params_for(p, sl->stream);
  static void *hog[MAX_HOG];
  int n_hog = 0;

  /* Poisoned outputs; the pool trimmed so that the workspace must come from the device. */
  int ok = cuda_ok(cudaMemsetAsync(dev[O_OUT], 0xff, p->bytes[O_OUT], sl->stream),
                   "cudaMemsetAsync", err, sizeof err) &&
           cuda_ok(cudaMemsetAsync(dev[O_LSE], 0xff, p->bytes[O_LSE], sl->stream),
                   "cudaMemsetAsync", err, sizeof err) &&
           cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err, sizeof err);
  if (!ok) {
    check(0, what, err);
    return;
  }
  fa_release();
  /* Take the device's memory, largest pieces first, until even 256 bytes fail. */
  for (size_t chunk = (size_t)1 << 30; chunk >= 256 && n_hog < MAX_HOG;) {
    void *q = NULL;
    if (cudaMalloc(&q, chunk) == cudaSuccess)
      hog[n_hog++] = q;
    else
      chunk /= 2;
  }
  cudaGetLastError(); /* the failed cudaMallocs above are the point, not an error to keep */
  printf("cuda_load: device memory taken in %d allocations\n", n_hog);
  uint64_t pool_before = 0, pool_after = 0;
  const int pool_ok = pool_used(&pool_before, NULL, err, sizeof err);
  fa_run_info info;
  fa_run_info_init(&info);
  fa_status st =
      fa_forward(&params, &p->in_t[I_Q], &p->in_t[I_K], &p->in_t[I_V], &t[O_OUT], &t[O_LSE], &info);
  snprintf(detail, sizeof detail, "%s: %s", fa_status_string(st), fa_last_error());
  check(st == FA_ERR_OUT_OF_MEMORY, what, detail);
  check(strstr(fa_last_error(), "workspace") != NULL, "its message names the workspace allocation",
        fa_last_error());
  const int pool_read = pool_ok && pool_used(&pool_after, NULL, err, sizeof err);
  if (pool_read)
    snprintf(detail, sizeof detail, "%llu bytes in use from the pool before, %llu after",
             (unsigned long long)pool_before, (unsigned long long)pool_after);
  check(pool_read && pool_after == pool_before, "the failed forward keeps nothing allocated",
        pool_read ? detail : err);
  ok = copy_back(p, sl->stream, dev, host, err, sizeof err) &&
       cuda_ok(cudaStreamSynchronize(sl->stream), "cudaStreamSynchronize", err, sizeof err);
  for (int o = O_OUT; o <= O_LSE; ++o) {
    int same = ok;
    for (size_t i = 0; same && i < p->bytes[o]; ++i) same = host[o][i] == 0xff;
    snprintf(detail, sizeof detail, "%s untouched by the failed forward", out_names[o]);
    check(same, detail, !ok ? err : same ? "still the poison pattern" : "changed");
  }
  for (int i = 0; i < n_hog; ++i) cudaFree(hog[i]);

  /* The same call with the memory back. */
  fa_run_info_init(&info);
  st =
      fa_forward(&params, &p->in_t[I_Q], &p->in_t[I_K], &p->in_t[I_V], &t[O_OUT], &t[O_LSE], &info);
  snprintf(detail, sizeof detail, "%s %s", fa_status_string(st),
           st == FA_OK ? info.kernel : fa_last_error());
  check(st == FA_OK, "the same forward once the memory is back", detail);
  if (st != FA_OK) return;
  ok = copy_back(p, sl->stream, dev, host, err, sizeof err) &&
       cuda_ok(cudaStreamSynchronize(sl->stream), "cudaStreamSynchronize", err, sizeof err);
  const int same = ok && memcmp(host[O_OUT], p->ref[O_OUT].buf, p->bytes[O_OUT]) == 0 &&
                   memcmp(host[O_LSE], p->ref[O_LSE].buf, p->bytes[O_LSE]) == 0;
  if (ok) snprintf(err, sizeof err, "%s", same ? "" : "they differ");
  check(same, "its out and lse bitwise equal to the serial results", err);
}

int main(int argc, char **argv) {
  long seconds = 60, nthreads = 8, nstreams = 4;
  int exhaust = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1;
    if (!strcmp(a, "--exhaust-memory")) {
      exhaust = 1;
      continue;
    }
    if (!v)
      ok = 0;
    else if (!strcmp(a, "--seconds"))
      ok = parse_int(v, 0, 24 * 3600, &seconds);
    else if (!strcmp(a, "--threads"))
      ok = parse_int(v, 1, MAX_THREADS, &nthreads);
    else if (!strcmp(a, "--streams"))
      ok = parse_int(v, 1, MAX_STREAMS, &nstreams);
    else
      ok = 0;
    if (!ok) {
      fprintf(stderr,
              "usage: cuda_load [--seconds S (60; 0: no load)] [--threads T (8, at most %d)] "
              "[--streams N (4, at most %d)] [--exhaust-memory]\n",
              MAX_THREADS, MAX_STREAMS);
      return 2;
    }
    ++i;
  }
  g_streams = (int)nstreams;

  /* Skip (77) where the CUDA backend cannot run, with the library's reason. */
  fa_backend_desc cuda_desc;
  const int unavailable = cuda_backend_or_skip(&cuda_desc);
  if (unavailable) return unavailable;
  const fa_backend_desc *cuda = &cuda_desc;
  printf("cuda_load: %s (%s); %d problems; %ld s on %ld threads x %ld streams%s\n", cuda->devices,
         cuda->arch, NPROB, seconds, nthreads, nstreams, exhaust ? "; --exhaust-memory" : "");
  fflush(stdout);

  char err[FA_REASON_LEN + 128], detail[FA_REASON_LEN + 256];
  worker *w = calloc((size_t)nthreads, sizeof *w);
  cudaStream_t main_stream = NULL;
  long calls = 0, tasks = 0, mismatches = 0, errors = 0;
  double elapsed = 0.0;
  size_t free_before = 0, free_after = 0, total = 0;
  uint64_t pool_before = 0;
  int load_ran = 0;
  if (!w) {
    check(0, "host allocation", "workers");
    return 1;
  }
  if (!cuda_ok(cudaSetDevice(0), "cudaSetDevice(0)", err, sizeof err) ||
      !cuda_ok(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags", err, sizeof err)) {
    check(0, "CUDA set-up", err);
    goto done;
  }

  /* 1. The serial references. */
  int usable[NPROB], nusable = 0;
  for (int i = 0; i < NPROB; ++i) {
    g_prob[i].d = defs[i];
    g_prob[i].ok = make_reference(&g_prob[i], i, main_stream) == 0;
    if (g_prob[i].ok) usable[nusable++] = i;
  }
  snprintf(detail, sizeof detail, "%d of %d", nusable, NPROB);
  check(nusable == NPROB,
        "every problem's serial calls succeed, deterministic; the training problems within the "
        "float64 tolerance",
        detail);
  if (nusable == 0) goto done;

  /* Every thread x stream: a stream, outputs on the device and pinned copies on the host. */
  for (int t = 0; t < nthreads; ++t) {
    w[t].index = t;
    w[t].slots = calloc((size_t)nstreams, sizeof(slot));
    if (!w[t].slots) {
      check(0, "host allocation", "slots");
      goto done;
    }
    for (int s = 0; s < nstreams; ++s) {
      slot *sl = &w[t].slots[s];
      sl->problem = -1;
      int ok = cuda_ok(cudaStreamCreateWithFlags(&sl->stream, cudaStreamNonBlocking),
                       "cudaStreamCreateWithFlags", err, sizeof err);
      for (int o = 0; o < O_COUNT && ok; ++o) {
        void *h = NULL;
        ok = cuda_ok(cudaMalloc(&sl->dev[o], g_max_bytes[o]), "cudaMalloc", err, sizeof err) &&
             cuda_ok(cudaMallocHost(&h, g_max_bytes[o]), "cudaMallocHost", err, sizeof err);
        sl->host[o] = h;
      }
      if (!ok) {
        check(0, "per-stream buffers", err);
        goto done;
      }
    }
    /* Each thread its own order of the problems (Fisher-Yates from a seed of its own). */
    tu_rng rng;
    tu_rng_init(&rng, 0x0bde5ull + (uint64_t)t);
    w[t].norder = nusable;
    memcpy(w[t].order, usable, sizeof(int) * (size_t)nusable);
    for (int i = nusable - 1; i > 0; --i) {
      const int j = (int)(tu_rng_u64(&rng) % (uint64_t)(i + 1)), x = w[t].order[i];
      w[t].order[i] = w[t].order[j], w[t].order[j] = x;
    }
  }

  /* 2-4. Warm-up, load, device memory. */
  if (seconds > 0) {
    warm_up(w, (int)nthreads, usable, nusable);
    if (!cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err, sizeof err)) {
      check(0, "synchronize after the warm-up", err);
      goto done;
    }
    fa_release();
    if (!cuda_ok(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo", err, sizeof err) ||
        !pool_used(&pool_before, NULL, err, sizeof err) || !pool_reset_high(err, sizeof err)) {
      check(0, "device memory before the load", err);
      goto done;
    }
    atomic_store(&g_reports, 0);
    const double start = now_s();
    g_deadline = start + (double)seconds;
    int started = 0;
    for (int t = 0; t < nthreads; ++t, ++started)
      if (pthread_create(&w[t].thread, NULL, work, &w[t]) != 0) {
        atomic_store(&g_stop, 1);
        check(0, "pthread_create", "");
        break;
      }
    /* Wait for the threads, but not forever: a hung kernel would keep pthread_join waiting. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)seconds + HANG_GRACE_S;
    pthread_mutex_lock(&g_lock);
    int wait_rc = 0;
    while (g_done < started && wait_rc == 0)
      wait_rc = pthread_cond_timedwait(&g_cond, &g_lock, &until);
    const int done = g_done;
    pthread_mutex_unlock(&g_lock);
    if (done < started) {
      snprintf(detail, sizeof detail,
               "%d of %d threads still running %d s after the deadline (a kernel or stream that "
               "never finishes?)",
               started - done, started, (int)HANG_GRACE_S);
      check(0, "load: the threads finish", detail);
      printf("cuda_load: FAILED\n");
      fflush(stdout);
      _exit(1); /* exit() would run the CUDA runtime's teardown under the hung threads */
    }
    for (int t = 0; t < started; ++t) pthread_join(w[t].thread, NULL);
    elapsed = now_s() - start;
    load_ran = 1;
    for (int t = 0; t < nthreads; ++t) {
      calls += w[t].calls, tasks += w[t].tasks;
      mismatches += w[t].mismatches, errors += w[t].errors;
    }
    const int reports = atomic_load(&g_reports);
    if (reports > MAX_REPORTS) printf("  (%d more failures not printed)\n", reports - MAX_REPORTS);
    snprintf(detail, sizeof detail, "%ld calls, %ld tasks compared in %.1f s, %ld mismatches%s",
             calls, tasks, elapsed, mismatches, mismatches ? " (the first ones above)" : "");
    check(mismatches == 0 && tasks > 0,
          "load: every result bitwise equal to the serial one, every kernel the serial one's",
          detail);
    snprintf(detail, sizeof detail, "%ld errors%s", errors,
             atomic_load(&g_stop) ? " (stopped early)" : "");
    check(errors == 0, "load: every call FA_OK, every stream synchronized without an error",
          detail);

    const int synced = cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err, sizeof err);
    fa_release();
    uint64_t pool_after = 0, pool_high = 0;
    if (!synced ||
        !cuda_ok(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo", err, sizeof err) ||
        !pool_used(&pool_after, &pool_high, err, sizeof err)) {
      check(0, "device memory after the load", err);
    } else {
      /* Every workspace given back: exact, whatever the pool keeps reserved. */
      snprintf(detail, sizeof detail,
               "%llu bytes in use before, %llu after (at most %.1f MiB in use during the load)",
               (unsigned long long)pool_before, (unsigned long long)pool_after,
               (double)pool_high / 1048576.0);
      check(pool_after <= pool_before,
            "stream-ordered pool: every workspace the load allocated is freed", detail);
      const double lost = ((double)free_before - (double)free_after) / (1024.0 * 1024.0);
      snprintf(detail, sizeof detail,
               "free %.1f MiB before, %.1f MiB after (of %.1f MiB): %.1f MiB lost, at most %d "
               "allowed",
               (double)free_before / 1048576.0, (double)free_after / 1048576.0,
               (double)total / 1048576.0, lost, (int)LOST_SLACK_MIB);
      check(lost <= LOST_SLACK_MIB, "device memory after the load and fa_release", detail);
    }
  } else {
    skip("load", "--seconds 0");
  }

  /* 5. The forward without device memory. */
  if (exhaust) exhaust_check(&g_prob[OOM_PROBLEM], &w[0].slots[0]);

  /* 6. Nothing left behind on the device. */
  {
    const cudaError_t es = cudaDeviceSynchronize(), el = cudaGetLastError();
    snprintf(detail, sizeof detail, "cudaDeviceSynchronize: %s, cudaGetLastError: %s",
             cudaGetErrorName(es), cudaGetErrorName(el));
    check(es == cudaSuccess && el == cudaSuccess, "the device synchronizes, no CUDA error pending",
          detail);
  }

done:
  for (int t = 0; t < nthreads; ++t) {
    if (!w[t].slots) continue;
    for (int s = 0; s < nstreams; ++s) {
      slot *sl = &w[t].slots[s];
      for (int o = 0; o < O_COUNT; ++o) {
        if (sl->dev[o]) cudaFree(sl->dev[o]);
        if (sl->host[o]) cudaFreeHost(sl->host[o]);
      }
      if (sl->stream) cudaStreamDestroy(sl->stream);
    }
    free(w[t].slots);
  }
  free(w);
  for (int i = 0; i < NPROB; ++i) {
    for (int k = 0; k < I_COUNT; ++k) {
      if (g_prob[i].in_dev[k]) cudaFree(g_prob[i].in_dev[k]);
      tu_free(&g_prob[i].in[k]);
    }
    for (int o = 0; o < O_COUNT; ++o) tu_free(&g_prob[i].ref[o]);
    for (int c = 0; c < 2; ++c)
      if (g_prob[i].cache_dev[c]) cudaFree(g_prob[i].cache_dev[c]);
    if (g_prob[i].table_dev) cudaFree(g_prob[i].table_dev);
    if (g_prob[i].lens_dev) cudaFree(g_prob[i].lens_dev);
  }
  if (main_stream) cudaStreamDestroy(main_stream);
  fa_release();
  if (load_ran)
    printf(
        "load: %ld calls in %.1f s on %ld threads x %ld streams, %ld mismatches, %ld errors, "
        "device memory free before %.0f MiB after %.0f MiB\n",
        calls, elapsed, nthreads, nstreams, mismatches, errors, (double)free_before / 1048576.0,
        (double)free_after / 1048576.0);
  return check_summary("cuda_load");
}
