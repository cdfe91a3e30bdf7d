/*
 * test_concurrency.c: 16 threads x 200 calls at once, then the same calls one by one.
 *
 * Each call is drawn from the run seed (printed; FA_TEST_SEED replays it): forward, backward or a
 * plan, on the CPU backend or (when it is available) the OpenCL one, with its own shapes (batch,
 * sequence lengths, heads with GQA, head dim, dtype, causal) and fresh random inputs; about one
 * call in five is a deliberate error (a head dim that disagrees, a NULL output, a NaN scale, a
 * strict request the backend refuses, a negative stride). The threads wait on a barrier before
 * their first call, which is made before anything else touches the library, so the first calls
 * race the lazy plugin load.
 *
 * Then every call is made again serially, in one thread, with the same inputs, and compared: the
 * status and the fa_last_error() message exactly, and a successful call's outputs bitwise (the
 * CPU backend is deterministic whatever the thread count; the OpenCL one has no atomics). A
 * message from another thread, a result that depends on what ran beside it, a crash or (under the
 * tsan preset) a data race fails the test.
 *
 * On PoCL the OpenCL plugin must report that its runs go one at a time (docs/backends.md: PoCL's
 * kernel cache aborted the process under concurrent commands, about 1 run of this test in 12 with
 * a cold PoCL cache).
 *
 * FA_CONC_BACKENDS=cpu keeps to the CPU backend (the OpenCL calls are then counted as skipped).
 */
#define _XOPEN_SOURCE 700 /* pthread barriers */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_mem.h"
#include "flash_attn.h"
#include "tensor_util.h"

enum { THREADS = 16, CALLS = 200 };
enum { OP_FWD, OP_BWD, OP_PLAN, OP_COUNT };
enum { E_NONE, E_HEAD_DIM, E_NULL_OUT, E_SCALE_NAN, E_STRICT, E_STRIDE, E_COUNT };

typedef struct result {
  fa_status status;
  char message[160];
  uint64_t hash; /* FNV-1a of every output byte (0 for a failed call) */
  char kernel[FA_KERNEL_LEN];
  int skipped;
} result;

static result g_par[THREADS][CALLS], g_ser[THREADS][CALLS];
static uint64_t g_seed;
static pthread_barrier_t g_barrier;

/* OpenCL: whether calls on it are made (decided once, by the first call that needs it). */
static pthread_once_t g_cl_once = PTHREAD_ONCE_INIT;
static int g_cl_ok;
static fa_device g_cl_dev;
static char g_cl_why[256];
static char g_cl_unmarked[256]; /* a PoCL device whose description omits its serialized runs */

static void cl_decide(void) {
  const char *only = getenv("FA_CONC_BACKENDS");
  if (only && !strstr(only, "opencl")) {
    snprintf(g_cl_why, sizeof g_cl_why, "FA_CONC_BACKENDS=%s", only);
    return;
  }
  fa_backend_desc d[FA_BACKEND_COUNT_];
  for (int i = 0; i < FA_BACKEND_COUNT_; ++i) fa_backend_desc_init(&d[i]);
  int32_t count = 0;
  if (fa_backend_info(d, FA_BACKEND_COUNT_, &count) != FA_OK) {
    snprintf(g_cl_why, sizeof g_cl_why, "fa_backend_info: %s", fa_last_error());
    return;
  }
  for (int i = 0; i < count && i < FA_BACKEND_COUNT_; ++i) {
    if (d[i].id == FA_BACKEND_OPENCL && !d[i].available) {
      snprintf(g_cl_why, sizeof g_cl_why, "opencl unavailable: %.200s", d[i].reason);
      return;
    }
    /* On PoCL the plugin runs one call at a time (PoCL's kernel cache aborted under concurrent
       commands) and must say so. */
    if (d[i].id == FA_BACKEND_OPENCL && strstr(d[i].devices, "Portable Computing Language") &&
        !strstr(d[i].devices, "one run at a time (PoCL)"))
      snprintf(g_cl_unmarked, sizeof g_cl_unmarked, "%.200s", d[i].devices);
  }
  char err[256];
  if (!devmem_supported(FA_DEVICE_OPENCL) ||
      devmem_default_device(FA_DEVICE_OPENCL, &g_cl_dev, err, sizeof err) != 0) {
    snprintf(g_cl_why, sizeof g_cl_why, "no OpenCL memory here: %.200s", err);
    return;
  }
  g_cl_ok = 1;
}

/* ---------------------------------------------------------------------------------------------
 * One call, from its seed
 * ------------------------------------------------------------------------------------------- */

typedef struct spec {
  int opencl, op, err;
  fa_dtype dtype;
  int64_t b, sq, sk, hq, hkv, d;
  int causal;
  uint64_t data_seed;
} spec;

static spec make_spec(int thread, int index) {
  char name[64];
  snprintf(name, sizeof name, "conc.%d.%d", thread, index);
  tu_rng r;
  tu_rng_init(&r, tu_seed_for(g_seed, name));
  spec s;
  memset(&s, 0, sizeof s);
  /* Each thread's first call is on the CPU, so it enters the library before any OpenCL setup. */
  s.opencl = index > 0 && tu_rng_u64(&r) % 10 == 0; /* PoCL calls are slow: 1 in 10 */
  s.op = (int)(tu_rng_u64(&r) % OP_COUNT);
  s.err = tu_rng_u64(&r) % 5 == 0 ? 1 + (int)(tu_rng_u64(&r) % (E_COUNT - 1)) : E_NONE;
  static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
  /* OpenCL builds one program per dtype and head dim: keep to few of them. */
  s.dtype = s.opencl ? (tu_rng_u64(&r) % 2 ? FA_F32 : FA_F16) : dts[tu_rng_u64(&r) % 3];
  static const int64_t dims[4] = {8, 16, 32, 40};
  s.d = s.opencl ? 16 : dims[tu_rng_u64(&r) % 4];
  s.b = 1 + (int64_t)(tu_rng_u64(&r) % 2);
  s.sq = 1 + (int64_t)(tu_rng_u64(&r) % 40);
  s.sk = 1 + (int64_t)(tu_rng_u64(&r) % 40);
  s.hkv = 1 + (int64_t)(tu_rng_u64(&r) % 2);
  s.hq = s.hkv * (1 + (int64_t)(tu_rng_u64(&r) % 2));
  s.causal = (int)(tu_rng_u64(&r) % 2);
  s.data_seed = tu_rng_u64(&r);
  return s;
}

typedef struct buf {
  fa_tensor t;
  void *host;
  size_t bytes;
} buf;

static void fnv(uint64_t *h, const void *p, size_t n) {
  const unsigned char *c = (const unsigned char *)p;
  for (size_t i = 0; i < n; ++i) *h = (*h ^ c[i]) * 1099511628211u;
}

/* A contiguous tensor with random values (inputs) or a NaN poison (outputs), host or OpenCL. */
static int make(buf *x, const spec *s, fa_dtype dt, int ndim, const int64_t *shape, tu_rng *r,
                int output, char *err, size_t n) {
  memset(x, 0, sizeof *x);
  x->t.device = s->opencl ? g_cl_dev : (fa_device){FA_DEVICE_CPU, 0};
  x->t.dtype = dt;
  x->t.ndim = ndim;
  int64_t st = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    x->t.shape[i] = shape[i];
    x->t.strides[i] = st;
    st *= shape[i];
  }
  size_t es = fa_dtype_size(dt);
  x->bytes = (size_t)st * es;
  x->host = malloc(x->bytes ? x->bytes : 1);
  if (!x->host) return snprintf(err, n, "out of memory"), -1;
  for (int64_t i = 0; i < st; ++i) {
    float v = output ? NAN : (float)tu_rng_normal(r);
    if (dt == FA_F32) {
      memcpy((char *)x->host + i * 4, &v, 4);
    } else {
      uint16_t h;
      uint32_t bits;
      memcpy(&bits, &v, 4);
      /* bf16: the high half; f16 inputs: a small exact value pattern (finite, not zero). */
      if (dt == FA_BF16)
        h = (uint16_t)(bits >> 16);
      else
        h = output ? 0x7e00 : (uint16_t)(0x3800 + (tu_rng_u64(r) % 0x800));
      memcpy((char *)x->host + i * 2, &h, 2);
    }
  }
  if (!s->opencl) {
    x->t.data = x->host;
    return 0;
  }
  if (devmem_alloc(g_cl_dev, x->bytes, &x->t.data, err, n) != 0) return -1;
  return devmem_copy_to_device(g_cl_dev, x->t.data, x->host, x->bytes, err, n);
}

static void drop(buf *x, int opencl) {
  if (opencl && x->t.data) devmem_free(g_cl_dev, x->t.data, NULL, 0);
  free(x->host);
  memset(x, 0, sizeof *x);
}

static int hash_out(const buf *x, int opencl, uint64_t *h, char *err, size_t n) {
  if (opencl && devmem_copy_to_host(g_cl_dev, x->host, x->t.data, x->bytes, err, n) != 0) return -1;
  fnv(h, x->host, x->bytes);
  return 0;
}

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_N };

static void run_call(int thread, int index, result *res) {
  memset(res, 0, sizeof *res);
  const spec s = make_spec(thread, index);
  if (s.opencl) {
    pthread_once(&g_cl_once, cl_decide);
    if (!g_cl_ok) {
      res->skipped = 1;
      return;
    }
  }
  tu_rng r;
  tu_rng_init(&r, s.data_seed);
  const int64_t qs[4] = {s.b, s.sq, s.hq, s.d}, ks[4] = {s.b, s.sk, s.hkv, s.d};
  const int64_t ls[3] = {s.b, s.hq, s.sq};
  buf t[T_N];
  memset(t, 0, sizeof t);
  char err[256] = "";
  int bad = 0;
  bad |= make(&t[T_Q], &s, s.dtype, 4, qs, &r, 0, err, sizeof err);
  bad |= make(&t[T_K], &s, s.dtype, 4, ks, &r, 0, err, sizeof err);
  bad |= make(&t[T_V], &s, s.dtype, 4, ks, &r, 0, err, sizeof err);
  bad |= make(&t[T_OUT], &s, s.dtype, 4, qs, &r, s.op != OP_BWD ? 1 : 0, err, sizeof err);
  bad |= make(&t[T_LSE], &s, FA_F32, 3, ls, &r, s.op != OP_BWD ? 1 : 0, err, sizeof err);
  if (s.op == OP_BWD) {
    bad |= make(&t[T_DOUT], &s, s.dtype, 4, qs, &r, 0, err, sizeof err);
    bad |= make(&t[T_DQ], &s, s.dtype, 4, qs, &r, 1, err, sizeof err);
    bad |= make(&t[T_DK], &s, s.dtype, 4, ks, &r, 1, err, sizeof err);
    bad |= make(&t[T_DV], &s, s.dtype, 4, ks, &r, 1, err, sizeof err);
  }
  if (bad) {
    res->status = (fa_status)-1;
    snprintf(res->message, sizeof res->message, "setup: %s", err);
    goto done;
  }
  fa_params p;
  fa_params_init(&p);
  p.causal = s.causal;
  p.backend = s.opencl ? FA_BACKEND_OPENCL : FA_BACKEND_CPU;
  p.strict = 1;
  p.deterministic = 1;
  /* Explicit splits: num_splits = 0 lets the CPU pick from its thread count. */
  p.num_splits = 1;
  fa_tensor *out = &t[T_OUT].t;
  fa_tensor k = t[T_K].t;
  fa_tensor alibi_t;
  float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.5f, 0.25f, 0.125f, 0.0625f};
  switch (s.err) {
    case E_HEAD_DIM:
      k.shape[3] = s.d + 1;
      break;
    case E_NULL_OUT:
      out = NULL;
      break;
    case E_SCALE_NAN:
      p.softmax_scale = NAN;
      break;
    case E_STRICT:
      /* ALiBi on OpenCL (refused there); on the CPU a kernel family it does not have. */
      if (s.opencl) {
        memset(&alibi_t, 0, sizeof alibi_t);
        alibi_t.data = slopes; /* refused before any use: OpenCL reads device memory only */
        alibi_t.device = g_cl_dev;
        alibi_t.dtype = FA_F32;
        alibi_t.ndim = 1;
        alibi_t.shape[0] = s.hq;
        alibi_t.strides[0] = 1;
        p.alibi_slopes = &alibi_t;
      } else {
        p.kernel_family = "fa3";
      }
      break;
    case E_STRIDE:
      k.strides[1] = -1;
      break;
    default:
      break;
  }
  fa_run_info info;
  fa_run_info_init(&info);
  fa_status st;
  if (s.op == OP_FWD)
    st = fa_forward(&p, &t[T_Q].t, &k, &t[T_V].t, out, &t[T_LSE].t, &info);
  else if (s.op == OP_BWD)
    st = fa_backward(&p, &t[T_Q].t, &k, &t[T_V].t, out, &t[T_LSE].t, &t[T_DOUT].t, &t[T_DQ].t,
                     &t[T_DK].t, &t[T_DV].t, &info);
  else
    st = fa_plan_forward(&p, &t[T_Q].t, &k, &t[T_V].t, out, &t[T_LSE].t, &info);
  res->status = st;
  snprintf(res->message, sizeof res->message, "%s", fa_last_error());
  if (st != FA_OK) goto done;
  snprintf(res->kernel, sizeof res->kernel, "%s", info.kernel);
  uint64_t h = 1469598103934665603u;
  if (s.op == OP_FWD) {
    bad |= hash_out(&t[T_OUT], s.opencl, &h, err, sizeof err);
    bad |= hash_out(&t[T_LSE], s.opencl, &h, err, sizeof err);
  } else if (s.op == OP_BWD) {
    for (int i = T_DQ; i <= T_DV; ++i) bad |= hash_out(&t[i], s.opencl, &h, err, sizeof err);
  } else {
    fnv(&h, &info, sizeof info);
  }
  if (bad) {
    res->status = (fa_status)-1;
    snprintf(res->message, sizeof res->message, "read back: %s", err);
  }
  res->hash = h;
done:
  for (int i = 0; i < T_N; ++i) drop(&t[i], s.opencl);
}

static void *worker(void *arg) {
  int thread = (int)(intptr_t)arg;
  pthread_barrier_wait(&g_barrier);
  for (int i = 0; i < CALLS; ++i) run_call(thread, i, &g_par[thread][i]);
  return NULL;
}

int main(void) {
  g_seed = tu_run_seed();
  printf("test_concurrency: seed 0x%llx (FA_TEST_SEED replays it), %d threads x %d calls\n",
         (unsigned long long)g_seed, THREADS, CALLS);
  fflush(stdout);
  pthread_t th[THREADS];
  if (pthread_barrier_init(&g_barrier, NULL, THREADS) != 0) return 1;
  for (int i = 0; i < THREADS; ++i)
    if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1; /* the barrier would never open */
    }
  for (int i = 0; i < THREADS; ++i) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g_barrier);

  for (int t = 0; t < THREADS; ++t)
    for (int i = 0; i < CALLS; ++i) run_call(t, i, &g_ser[t][i]);

  int fail = 0, ok = 0, errors = 0, skipped = 0, cl = 0, first_ok = 0;
  for (int t = 0; t < THREADS; ++t)
    for (int i = 0; i < CALLS; ++i) {
      const result *a = &g_par[t][i], *b = &g_ser[t][i];
      const spec s = make_spec(t, i);
      if (a->skipped || b->skipped) {
        if (a->skipped != b->skipped) {
          fprintf(stderr, "FAIL call %d.%d: skipped in one run only\n", t, i);
          ++fail;
        }
        ++skipped;
        continue;
      }
      cl += s.opencl;
      if (i == 0 && a->status == FA_OK) ++first_ok;
      if ((int)a->status < 0 || (int)b->status < 0) {
        fprintf(stderr, "FAIL call %d.%d: %s | %s\n", t, i, a->message, b->message);
        ++fail;
        continue;
      }
      /* The deliberate errors must fail, the others succeed. */
      if ((s.err != E_NONE) != (b->status != FA_OK)) {
        fprintf(stderr, "FAIL call %d.%d (error kind %d, %s): %s '%s'\n", t, i, s.err,
                s.opencl ? "opencl" : "cpu", fa_status_string(b->status), b->message);
        ++fail;
      }
      if (a->status != b->status || strcmp(a->message, b->message) != 0 || a->hash != b->hash ||
          strcmp(a->kernel, b->kernel) != 0) {
        fprintf(stderr,
                "FAIL call %d.%d (%s, op %d): concurrent %s '%s' %016llx %s vs serial %s '%s' "
                "%016llx %s\n",
                t, i, s.opencl ? "opencl" : "cpu", s.op, fa_status_string(a->status), a->message,
                (unsigned long long)a->hash, a->kernel, fa_status_string(b->status), b->message,
                (unsigned long long)b->hash, b->kernel);
        ++fail;
      }
      if (b->status == FA_OK)
        ++ok;
      else
        ++errors;
    }
  printf("calls: %d succeeded, %d deliberate errors, %d on opencl, %d skipped%s%s\n", ok, errors,
         cl, skipped, skipped ? ": " : "", skipped ? g_cl_why : "");
  printf("first calls (racing the plugin load) that succeeded: %d of %d\n", first_ok, THREADS);
  if (first_ok == 0) {
    fprintf(stderr, "FAIL: no first call succeeded\n");
    ++fail;
  }
  if (g_cl_unmarked[0]) {
    fprintf(stderr, "FAIL: the OpenCL plugin does not report its serialized runs on PoCL: %s\n",
            g_cl_unmarked);
    ++fail;
  }
  printf("%d passed, %d failed\n", THREADS * CALLS - skipped - fail, fail);
  return fail ? 1 : 0;
}
