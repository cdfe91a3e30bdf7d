/*
 * cuda_bad_tables.c: out-of-range index tensors in device memory (block tables, cu_seqlens,
 * seqused_k, cache lengths) given to the CUDA backend's forward over sequences,
 * fa_forward_kvcache and the backward over sequences, in both modes of params.check_indices
 * (tests/gpu/h200_check.sh runs it under compute-sanitizer memcheck: step memcheck.tables).
 *
 *   cuda_bad_tables
 *
 * Every tensor lives in a device allocation of its own with GUARD bytes of random bf16 values on
 * each side. Per case (bf16, head dim 64, 4 query heads over 2 KV heads):
 *   check mode (check_indices = 1): the call returns FA_ERR_INVALID_ARGUMENT with a message naming
 *     the bad entry (the substring the case expects), and no byte of any output, cache or guard
 *     has changed (compared with a snapshot taken before);
 *   default mode (check_indices = 0): the call returns FA_OK, the device reports no error after a
 *     synchronisation, and the guards around every written tensor (out, lse, the caches) keep
 *     their bytes (out, lse, the caches; dq, dk, dv of a backward); under memcheck no access
 *     falls outside the allocations.
 * Then a valid paged fa_forward_kvcache call gives bitwise the same out, lse and caches in both
 * modes, and the check mode on a stream that is capturing a CUDA graph returns
 * FA_ERR_UNSUPPORTED and writes nothing.
 *
 * Prints one PASS / FAIL line per check and a summary; exits 0 when all pass, 1 on a failure, 77
 * when the CUDA backend is not available here (with the library's reason).
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_tally.h"
#include "cuda_backend.h"
#include "tensor_util.h"

#define GUARD 4096
#define MAX_REGIONS 16
#define D 64
#define HQ 4
#define HKV 2

/* One check of the case `name`: its line reads "name: what". */
static void check_case(int ok, const char *name, const char *what, const char *detail) {
  char line[256];
  snprintf(line, sizeof line, "%s: %s", name, what);
  check(ok, line, detail);
}

/* One device allocation: GUARD bytes, the tensor's bytes, GUARD bytes; `snap` a host copy of the
   whole allocation taken by snapshot(). */
typedef struct region {
  unsigned char *dev;
  size_t bytes; /* the tensor's */
  unsigned char *snap;
  int written; /* an output or a cache: checked after the call */
} region;

typedef struct problem {
  region r[MAX_REGIONS];
  int n;
  tu_rng rng;
  int broken; /* a CUDA call of the setup failed */
} problem;

static uint16_t bf16_of(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A region of `bytes` for the tensor, everything (guards included) random bf16 values, or the
   tensor's bytes from `init` when given. Returns the tensor's device address. */
static void *region_new(problem *pb, size_t bytes, const void *init, int written) {
  if (pb->n == MAX_REGIONS) {
    pb->broken = 1;
    return NULL;
  }
  region *r = &pb->r[pb->n++];
  memset(r, 0, sizeof *r);
  r->bytes = bytes;
  r->written = written;
  const size_t all = bytes + 2 * GUARD;
  unsigned char *host = malloc(all);
  if (!host || cudaMalloc((void **)&r->dev, all) != cudaSuccess) {
    free(host);
    pb->broken = 1;
    return NULL;
  }
  for (size_t i = 0; i + 1 < all; i += 2) {
    uint16_t h = bf16_of(tu_rng_normal(&pb->rng));
    memcpy(host + i, &h, 2);
  }
  if (init) memcpy(host + GUARD, init, bytes);
  if (cudaMemcpy(r->dev, host, all, cudaMemcpyHostToDevice) != cudaSuccess) pb->broken = 1;
  free(host);
  return r->dev + GUARD;
}

static void problem_free(problem *pb) {
  for (int i = 0; i < pb->n; ++i) {
    cudaFree(pb->r[i].dev);
    free(pb->r[i].snap);
  }
  pb->n = 0;
}

static int snapshot(problem *pb) {
  for (int i = 0; i < pb->n; ++i) {
    region *r = &pb->r[i];
    if (!r->snap) r->snap = malloc(r->bytes + 2 * GUARD);
    if (!r->snap ||
        cudaMemcpy(r->snap, r->dev, r->bytes + 2 * GUARD, cudaMemcpyDeviceToHost) != cudaSuccess)
      return 0;
  }
  return 1;
}

/* Whether every written region kept its snapshot's bytes: all of them (whole = 1) or its guards
   only. */
static int kept(problem *pb, int whole, char *why, size_t n) {
  for (int i = 0; i < pb->n; ++i) {
    region *r = &pb->r[i];
    if (!r->written && !whole) continue;
    const size_t all = r->bytes + 2 * GUARD;
    unsigned char *now = malloc(all);
    if (!now || cudaMemcpy(now, r->dev, all, cudaMemcpyDeviceToHost) != cudaSuccess) {
      free(now);
      snprintf(why, n, "reading region %d back failed", i);
      return 0;
    }
    int ok = whole ? memcmp(now, r->snap, all) == 0
                   : memcmp(now, r->snap, GUARD) == 0 &&
                         memcmp(now + GUARD + r->bytes, r->snap + GUARD + r->bytes, GUARD) == 0;
    free(now);
    if (!ok) {
      snprintf(why, n, "region %d (%zu bytes%s) changed", i, r->bytes,
               r->written ? ", written by the call" : "");
      return 0;
    }
  }
  return 1;
}

/* A contiguous CUDA tensor over data. */
static fa_tensor on_gpu(void *data, fa_dtype dtype, int ndim, const int64_t *shape) {
  const fa_device cuda0 = {FA_DEVICE_CUDA, 0};
  return tu_view(data, dtype, cuda0, ndim, shape);
}
static fa_tensor tensor4(void *data, int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t shape[4] = {a, b, c, d};
  return on_gpu(data, FA_BF16, 4, shape);
}
static fa_tensor index1(void *data, int64_t n) { return on_gpu(data, FA_I32, 1, &n); }
static fa_tensor index2(void *data, int64_t rows, int64_t cols) {
  const int64_t shape[2] = {rows, cols};
  return on_gpu(data, FA_I32, 2, shape);
}
static fa_tensor lse_f32(void *data, int64_t b, int64_t h, int64_t s) {
  const int64_t shape[3] = {b, h, s};
  return on_gpu(data, FA_F32, 3, shape);
}

static void *table(problem *pb, const int32_t *v, int64_t n) {
  return region_new(pb, (size_t)n * 4, v, 0);
}

/* One call's arguments: a forward (kv unused), a fa_forward_kvcache or a backward (out and lse
   its inputs). */
typedef struct call {
  const char *name;
  int kvcache, backward;
  fa_params p;
  fa_kvcache_args kv;
  fa_tensor q, k, v, out, lse, kn, vn, cos_t, sin_t, tabs[4];
  fa_tensor dout, dq, dk, dv;
} call;

static fa_status issue(call *c, fa_run_info *info) {
  if (c->backward)
    return fa_backward(&c->p, &c->q, &c->k, &c->v, &c->out, &c->lse, &c->dout, &c->dq, &c->dk,
                       &c->dv, info);
  return c->kvcache ? fa_forward_kvcache(&c->p, &c->q, &c->k, &c->v, &c->kv, &c->out, &c->lse, info)
                    : fa_forward(&c->p, &c->q, &c->k, &c->v, &c->out, &c->lse, info);
}

/* Both modes of one case (see the header). */
static void both_modes(problem *pb, call *c, const char *expect) {
  char what[160], why[200];
  if (pb->broken) {
    check_case(0, c->name, "setup", "a CUDA allocation or copy failed");
    return;
  }
  c->p.backend = FA_BACKEND_CUDA;
  c->p.strict = 1;
  c->p.check_indices = 1;
  if (!snapshot(pb)) {
    check_case(0, c->name, "snapshot", "copy failed");
    return;
  }
  fa_status st = issue(c, NULL);
  const char *msg = fa_last_error();
  snprintf(what, sizeof what, "check mode refuses with \"%s\"", expect);
  check_case(st == FA_ERR_INVALID_ARGUMENT && msg && strstr(msg, expect), c->name, what,
             st == FA_OK ? "FA_OK" : msg);
  cudaError_t e = cudaDeviceSynchronize();
  check_case(e == cudaSuccess && kept(pb, 1, why, sizeof why), c->name, "check mode writes nothing",
             e == cudaSuccess ? why : cudaGetErrorName(e));

  c->p.check_indices = 0;
  st = issue(c, NULL);
  check_case(st == FA_OK, c->name, "default mode runs", st == FA_OK ? NULL : fa_last_error());
  e = cudaDeviceSynchronize();
  check_case(e == cudaSuccess && kept(pb, 0, why, sizeof why), c->name,
             "default mode writes nothing outside its outputs",
             e == cudaSuccess ? why : cudaGetErrorName(e));
}

/* q [b, sq, HQ, D], out and lse written; k/v caches or inputs [kb, ks, HKV, D]. */
static void dense_qo(problem *pb, call *c, int64_t b, int64_t sq) {
  const size_t qb = (size_t)(b * sq * HQ * D) * 2;
  c->q = tensor4(region_new(pb, qb, NULL, 0), b, sq, HQ, D);
  c->out = tensor4(region_new(pb, qb, NULL, 1), b, sq, HQ, D);
  c->lse = lse_f32(region_new(pb, (size_t)(b * HQ * sq) * 4, NULL, 1), b, HQ, sq);
}

static void kv_pair(problem *pb, call *c, int64_t kb, int64_t ks, int written) {
  const size_t bytes = (size_t)(kb * ks * HKV * D) * 2;
  c->k = tensor4(region_new(pb, bytes, NULL, written), kb, ks, HKV, D);
  c->v = tensor4(region_new(pb, bytes, NULL, written), kb, ks, HKV, D);
}

static void new_tokens(problem *pb, call *c, int64_t b, int64_t sn) {
  const size_t bytes = (size_t)(b * sn * HKV * D) * 2;
  c->kn = tensor4(region_new(pb, bytes, NULL, 0), b, sn, HKV, D);
  c->vn = tensor4(region_new(pb, bytes, NULL, 0), b, sn, HKV, D);
  c->kv.k_new = &c->kn;
  c->kv.v_new = &c->vn;
}

static void begin(problem *pb, call *c, const char *name, int kvcache, uint64_t seed) {
  memset(pb, 0, sizeof *pb);
  tu_rng_init(&pb->rng, seed);
  memset(c, 0, sizeof *c);
  c->name = name;
  c->kvcache = kvcache;
  fa_params_init(&c->p);
  fa_kvcache_args_init(&c->kv);
}

static const int32_t bad_pages[6] = {0, -5, 1, 6, 2, 1 << 30}; /* 6 pages in the pool */

static void case_paged_append(void) {
  problem pb;
  call c;
  begin(&pb, &c, "kvcache.paged.block_table", 1, 11);
  dense_qo(&pb, &c, 2, 1);
  kv_pair(&pb, &c, 6, 16, 1);
  new_tokens(&pb, &c, 2, 20);
  static const int32_t lens[2] = {10, 20};
  c.tabs[0] = index2(table(&pb, bad_pages, 6), 2, 3);
  c.tabs[1] = index1(table(&pb, lens, 2), 2);
  c.p.block_table = &c.tabs[0];
  c.kv.cache_seqlens = &c.tabs[1];
  c.p.causal = 1;
  both_modes(&pb, &c, "params.block_table[0][1] = -5");
  problem_free(&pb);
}

static void case_paged_forward(void) {
  problem pb;
  call c;
  begin(&pb, &c, "forward.paged.block_table", 0, 12);
  dense_qo(&pb, &c, 2, 1);
  kv_pair(&pb, &c, 6, 16, 0);
  static const int32_t used[2] = {48, 40};
  c.tabs[0] = index2(table(&pb, bad_pages + 0, 6), 2, 3);
  c.tabs[1] = index1(table(&pb, used, 2), 2);
  c.p.block_table = &c.tabs[0];
  c.p.seqused_k = &c.tabs[1];
  c.p.max_seqlen_k = 48;
  both_modes(&pb, &c, "params.block_table[0][1] = -5");
  problem_free(&pb);
}

static void case_seqused_past_keys(void) {
  problem pb;
  call c;
  begin(&pb, &c, "forward.paged.seqused_k", 0, 13);
  dense_qo(&pb, &c, 2, 1);
  kv_pair(&pb, &c, 6, 16, 0);
  static const int32_t pages[6] = {0, 3, 1, 5, 2, 4}, used[2] = {49, 3};
  c.tabs[0] = index2(table(&pb, pages, 6), 2, 3);
  c.tabs[1] = index1(table(&pb, used, 2), 2);
  c.p.block_table = &c.tabs[0];
  c.p.seqused_k = &c.tabs[1];
  c.p.max_seqlen_k = 48;
  c.p.num_splits = 2;
  both_modes(&pb, &c, "params.seqused_k[0] = 49 is outside [0, 48]");
  problem_free(&pb);
}

/* Packed q [80, HQ, D] and k/v [90, HKV, D], 3 sequences, with the offsets given (and the used
   keys, where not NULL); splits < 0: the backward (out, lse and dout its inputs, dq, dk and dv
   its outputs); family: params.kernel_family (NULL: the backend's choice; "fa3" takes the
   forward's 60-row sequences to fa3 on sm_90, where the backward runs fa3 by default). */
static void case_varlen_family(const char *name, const int32_t cq[4], const int32_t ck[4],
                               const int32_t *used, int splits, const char *family,
                               const char *expect, uint64_t seed) {
  problem pb;
  call c;
  begin(&pb, &c, name, 0, seed);
  const int bwd = splits < 0;
  const size_t qb = (size_t)(80 * HQ * D) * 2, kb = (size_t)(90 * HKV * D) * 2;
  const int64_t qs[3] = {80, HQ, D}, ks[3] = {90, HKV, D}, ls[2] = {HQ, 80};
  c.backward = bwd;
  c.q = on_gpu(region_new(&pb, qb, NULL, 0), FA_BF16, 3, qs);
  c.out = on_gpu(region_new(&pb, qb, NULL, !bwd), FA_BF16, 3, qs);
  c.k = on_gpu(region_new(&pb, kb, NULL, 0), FA_BF16, 3, ks);
  c.v = on_gpu(region_new(&pb, kb, NULL, 0), FA_BF16, 3, ks);
  /* lse unpadded [HQ, total_q] */
  c.lse = on_gpu(region_new(&pb, (size_t)(HQ * 80) * 4, NULL, !bwd), FA_F32, 2, ls);
  if (bwd) {
    c.dout = on_gpu(region_new(&pb, qb, NULL, 0), FA_BF16, 3, qs);
    c.dq = on_gpu(region_new(&pb, qb, NULL, 1), FA_BF16, 3, qs);
    c.dk = on_gpu(region_new(&pb, kb, NULL, 1), FA_BF16, 3, ks);
    c.dv = on_gpu(region_new(&pb, kb, NULL, 1), FA_BF16, 3, ks);
  }
  c.tabs[0] = index1(table(&pb, cq, 4), 4);
  c.tabs[1] = index1(table(&pb, ck, 4), 4);
  c.p.cu_seqlens_q = &c.tabs[0];
  c.p.cu_seqlens_k = &c.tabs[1];
  if (used) {
    c.tabs[2] = index1(table(&pb, used, 3), 3);
    c.p.seqused_k = &c.tabs[2];
  }
  c.p.max_seqlen_q = 60;
  c.p.max_seqlen_k = 90;
  c.p.num_splits = bwd ? 0 : splits;
  c.p.causal = 1;
  c.p.kernel_family = family;
  both_modes(&pb, &c, expect);
  problem_free(&pb);
}

static void case_varlen_used(const char *name, const int32_t cq[4], const int32_t ck[4],
                             const int32_t *used, int splits, const char *expect, uint64_t seed) {
  case_varlen_family(name, cq, ck, used, splits, NULL, expect, seed);
}

/* case_varlen_used without used keys. */
static void case_varlen(const char *name, const int32_t cq[4], const int32_t ck[4], int splits,
                        const char *expect, uint64_t seed) {
  case_varlen_used(name, cq, ck, NULL, splits, expect, seed);
}

/* Dense caches [2, 32, HKV, D], 3 new tokens, q of 3 rows, causal; rotary tables of rot_rows
   positions (0: none). */
static void case_cache_lengths(const char *name, const int32_t lens[2], int64_t rot_rows,
                               const char *expect, uint64_t seed) {
  problem pb;
  call c;
  begin(&pb, &c, name, 1, seed);
  dense_qo(&pb, &c, 2, 3);
  kv_pair(&pb, &c, 2, 32, 1);
  new_tokens(&pb, &c, 2, 3);
  c.tabs[0] = index1(table(&pb, lens, 2), 2);
  c.kv.cache_seqlens = &c.tabs[0];
  if (rot_rows) {
    const size_t bytes = (size_t)(rot_rows * (D / 2)) * 2;
    const int64_t rs[2] = {rot_rows, D / 2};
    c.cos_t = on_gpu(region_new(&pb, bytes, NULL, 0), FA_BF16, 2, rs);
    c.sin_t = on_gpu(region_new(&pb, bytes, NULL, 0), FA_BF16, 2, rs);
    c.kv.rotary_cos = &c.cos_t;
    c.kv.rotary_sin = &c.sin_t;
  }
  c.p.causal = 1;
  both_modes(&pb, &c, expect);
  problem_free(&pb);
}

/* A valid paged append: the check mode changes nothing in the results; on a capturing stream it
   is refused. */
static void case_valid_and_capture(void) {
  problem pb;
  call c;
  begin(&pb, &c, "kvcache.paged.valid", 1, 21);
  dense_qo(&pb, &c, 2, 1);
  kv_pair(&pb, &c, 6, 16, 1);
  new_tokens(&pb, &c, 2, 5);
  static const int32_t pages[6] = {4, 0, 2, 5, 1, 3}, lens[2] = {30, 17};
  c.tabs[0] = index2(table(&pb, pages, 6), 2, 3);
  c.tabs[1] = index1(table(&pb, lens, 2), 2);
  c.p.block_table = &c.tabs[0];
  c.kv.cache_seqlens = &c.tabs[1];
  c.p.causal = 1;
  c.p.backend = FA_BACKEND_CUDA;
  c.p.strict = 1;
  char why[200];
  if (pb.broken || !snapshot(&pb)) {
    check_case(0, c.name, "setup", "a CUDA allocation or copy failed");
    problem_free(&pb);
    return;
  }
  /* The same append twice from the same snapshot: default mode, then check mode. */
  unsigned char *after[MAX_REGIONS] = {0};
  int ok = 1;
  for (int mode = 0; mode < 2 && ok; ++mode) {
    c.p.check_indices = mode;
    fa_run_info info;
    fa_run_info_init(&info);
    fa_status st = issue(&c, &info);
    char what[64];
    snprintf(what, sizeof what, "%s mode runs .kvcache", mode ? "check" : "default");
    check_case(st == FA_OK && strstr(info.kernel, ".kvcache"), c.name, what,
               st == FA_OK ? info.kernel : fa_last_error());
    if (cudaDeviceSynchronize() != cudaSuccess) ok = 0;
    for (int i = 0; i < pb.n && ok; ++i) {
      region *r = &pb.r[i];
      const size_t all = r->bytes + 2 * GUARD;
      if (mode == 0) {
        after[i] = malloc(all);
        ok = after[i] && cudaMemcpy(after[i], r->dev, all, cudaMemcpyDeviceToHost) == cudaSuccess &&
             cudaMemcpy(r->dev, r->snap, all, cudaMemcpyHostToDevice) == cudaSuccess;
      } else {
        unsigned char *now = malloc(all);
        ok = now && cudaMemcpy(now, r->dev, all, cudaMemcpyDeviceToHost) == cudaSuccess &&
             memcmp(now, after[i], all) == 0;
        free(now);
      }
    }
  }
  check_case(ok, c.name, "check mode's out, lse and caches bitwise equal to the default mode's",
             NULL);
  for (int i = 0; i < MAX_REGIONS; ++i) free(after[i]);

  /* On a capturing stream the check cannot read back: refused before anything is written. */
  cudaStream_t s;
  cudaGraph_t graph = NULL;
  if (!snapshot(&pb) || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    check_case(0, c.name, "capture setup", "failed");
    problem_free(&pb);
    return;
  }
  c.p.check_indices = 1;
  c.p.stream = s;
  fa_status st = FA_ERR_INTERNAL;
  const char *msg = "";
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    st = issue(&c, NULL);
    msg = fa_last_error();
    cudaStreamEndCapture(s, &graph);
  }
  check_case(st == FA_ERR_UNSUPPORTED && msg && strstr(msg, "capturing"), c.name,
             "check mode on a capturing stream is FA_ERR_UNSUPPORTED", msg);
  check_case(cudaDeviceSynchronize() == cudaSuccess && kept(&pb, 1, why, sizeof why), c.name,
             "the refused capture writes nothing", why);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  problem_free(&pb);
}

int main(void) {
  fa_backend_desc cuda;
  const int unavailable = cuda_backend_or_skip(&cuda);
  if (unavailable) return unavailable;
  printf("cuda_bad_tables: %s (%s)\n", cuda.devices, cuda.arch);

  case_paged_append();
  case_paged_forward();
  case_seqused_past_keys();
  static const int32_t cq_down[4] = {0, 50, 20, 80}, ck_bad[4] = {0, 90, -7, 1 << 30},
                       cq_ok[4] = {0, 30, 50, 80}, cq_first[4] = {5, 30, 50, 80},
                       ck_past[4] = {0, 40, 60, 100}, ck_ok[4] = {0, 40, 60, 90};
  case_varlen("varlen.cu_seqlens_q.decreasing", cq_down, ck_bad, 1,
              "params.cu_seqlens_q[2] = 20 is less than", 31);
  case_varlen("varlen.cu_seqlens_q.decreasing.split3", cq_down, ck_bad, 3,
              "params.cu_seqlens_q[2] = 20 is less than", 32);
  case_varlen("varlen.cu_seqlens_k.decreasing", cq_ok, ck_bad, 1,
              "params.cu_seqlens_k[2] = -7 is less than", 33);
  case_varlen("varlen.cu_seqlens_q.first", cq_first, ck_ok, 1,
              "params.cu_seqlens_q[0] = 5 but must be 0", 34);
  case_varlen("varlen.cu_seqlens_k.past_total", cq_ok, ck_past, 2,
              "params.cu_seqlens_k[3] = 100 exceeds the 90 packed tokens", 35);
  /* the backward over sequences: its workspace rows come from cu_seqlens_q too */
  case_varlen("varlen.bwd.cu_seqlens_q.decreasing", cq_down, ck_bad, -1,
              "params.cu_seqlens_q[2] = 20 is less than", 36);
  case_varlen("varlen.bwd.cu_seqlens_k.past_total", cq_ok, ck_past, -1,
              "params.cu_seqlens_k[3] = 100 exceeds the 90 packed tokens", 37);
  static const int32_t used_bad[3] = {50, -3, 1 << 30};
  case_varlen_used("varlen.bwd.seqused_k", cq_ok, ck_ok, used_bad, -1,
                   "params.seqused_k[0] = 50 is outside [0, 40]", 38);
  /* fa3's forward over sequences, named (sm_90 only) */
  if (strstr(cuda.kernel_families, "fa3") && strstr(cuda.devices, "(sm_90") &&
      !strstr(cuda.devices, "run as sm_80")) {
    case_varlen_family("varlen.fa3.cu_seqlens_q.decreasing", cq_down, ck_bad, NULL, 1, "fa3",
                       "params.cu_seqlens_q[2] = 20 is less than", 39);
    case_varlen_family("varlen.fa3.seqused_k", cq_ok, ck_ok, used_bad, 1, "fa3",
                       "params.seqused_k[0] = 50 is outside [0, 40]", 40);
  }
  static const int32_t past[2] = {31, -100}, negative[2] = {0, -100}, rot[2] = {0, 29};
  case_cache_lengths("kvcache.cache_seqlens.past_end", past, 0, "kv.cache_seqlens[0] = 31", 41);
  case_cache_lengths("kvcache.cache_seqlens.negative", negative, 0, "kv.cache_seqlens[1] = -100",
                     42);
  case_cache_lengths("kvcache.rotary.past_table", rot, 30, "kv.rotary_cos.shape[0] = 30", 43);
  case_valid_and_capture();

  const cudaError_t e = cudaDeviceSynchronize();
  check_case(e == cudaSuccess, "device", "no CUDA error pending", cudaGetErrorName(e));
  fa_release(); /* the backend's cached memory (kept tile counters too): memcheck's leak check */
  return check_summary("cuda_bad_tables");
}
