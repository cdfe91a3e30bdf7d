/*
 * nccl_transport.c: the NCCL transport plugin (transports/nccl, libfa_nccl.so) through its table
 * (core/transport.h), one rank on one GPU (tests/gpu/h200_check.sh runs it: step nccl).
 *
 *   nccl_transport [path/to/libfa_nccl.so]
 *
 * The table and its ABI check, the probe, the refusals of a NULL communicator; then on an NCCL
 * communicator of one rank (ncclCommInitAll), for a non-blocking, the legacy default and a
 * blocking caller stream: the agreement's max-reduction (and its buffer growing past 64 values),
 * a zero-byte exchange, six rounds of two exchanges in flight at once (as the backward keeps
 * them) behind work queued on the caller's stream, every byte received checked, an exchange left
 * unwaited and then closed (the caller's stream must still be ordered after it); a message above
 * 2^31 bytes; 200 opens and closes (a leak of streams or events would show). The ranks' message
 * order between several GPUs is not tested here (one rank sends to itself).
 *
 * Prints its findings and "ALL PASSED" or "FAILED"; exits 0, 1 on a failure, 77 when the plugin
 * reports no usable GPU (with its reason).
 */
#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/transport.h"

static int fails = 0;
#define EXPECT(c, ...)                    \
  do {                                    \
    if (!(c)) {                           \
      ++fails;                            \
      printf("FAIL line %d: ", __LINE__); \
      printf(__VA_ARGS__);                \
      printf("\n");                       \
    }                                     \
  } while (0)
#define CK(x)                                               \
  do {                                                      \
    cudaError_t e_ = (x);                                   \
    if (e_) {                                               \
      printf("FATAL %s: %s\n", #x, cudaGetErrorString(e_)); \
      exit(1);                                              \
    }                                                       \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int all_equal(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return 0;
  return 1;
}

static void run(const fa_transport *t, ncclComm_t comm, cudaStream_t s, const char *label) {
  printf("== %s\n", label);
  void *c = NULL;
  int32_t rank = -1, world = -1, device = -2;
  fa_status st = t->open(&comm, s, &c, &rank, &world, &device);
  EXPECT(st == FA_OK && rank == 0 && world == 1 && device == 0,
         "open: %d %s rank %d world %d device %d", st, fa_last_error(), rank, world, device);
  int64_t v[9] = {3, -5, 7, 0, 1, 2, 3, 4, 5};
  st = t->allreduce_max(c, v, 9);
  EXPECT(st == FA_OK && v[0] == 3 && v[1] == -5 && v[8] == 5, "allreduce: %d %s", st,
         fa_last_error());
  int64_t big[200];
  for (int i = 0; i < 200; ++i) big[i] = i * 1000003LL - 7;
  st = t->allreduce_max(c, big, 200);
  EXPECT(st == FA_OK && big[199] == 199 * 1000003LL - 7, "allreduce(200): %d %s", st,
         fa_last_error());
  void *p0 = NULL;
  st = t->exchange_start(c, FA_RING_CHANNEL_KV, NULL, 0, NULL, 0, 0, &p0);
  EXPECT(st == FA_OK && p0 == NULL, "zero bytes");
  EXPECT(t->exchange_wait(c, NULL) == FA_OK, "wait NULL");

  const size_t n = (size_t)96 << 20, m = (size_t)200 << 20 | 13;
  unsigned char *a, *b, *a2, *b2, *h = malloc(m);
  CK(cudaMalloc((void **)&a, n));
  CK(cudaMalloc((void **)&b, n));
  CK(cudaMalloc((void **)&a2, m));
  CK(cudaMalloc((void **)&b2, m));
  double host_in_calls = 0;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0, s));
  for (int it = 0; it < 6; ++it) {
    /* Producers on the caller's stream, then the two exchanges in flight at once, as in the
       backward; the next iteration's memsets overwrite send buffers after the waits. */
    for (int k = 0; k < 20; ++k) CK(cudaMemsetAsync(a, it + 1 + k, n, s)); /* queue some work */
    CK(cudaMemsetAsync(a, it + 1, n, s));
    CK(cudaMemsetAsync(b, 0xEE, n, s));
    double t0 = now();
    void *pk = NULL, *pd = NULL;
    st = t->exchange_start(c, FA_RING_CHANNEL_KV, a, 0, b, 0, n, &pk);
    EXPECT(st == FA_OK && pk, "kv start %d %s", st, fa_last_error());
    CK(cudaMemsetAsync(a2, it + 50, m, s));
    st = t->exchange_start(c, FA_RING_CHANNEL_DKV, a2, 0, b2, 0, m, &pd);
    EXPECT(st == FA_OK && pd, "dkv start %d %s", st, fa_last_error());
    EXPECT(t->exchange_wait(c, pk) == FA_OK, "kv wait %s", fa_last_error());
    EXPECT(t->exchange_wait(c, pd) == FA_OK, "dkv wait %s", fa_last_error());
    host_in_calls += now() - t0;
    CK(cudaMemcpyAsync(h, b, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    EXPECT(all_equal(h, n, (unsigned char)(it + 1)), "kv data it %d: %u", it, h[0]);
    CK(cudaMemcpyAsync(h, b2, m, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    EXPECT(all_equal(h, m, (unsigned char)(it + 50)), "dkv data it %d: %u %u", it, h[0], h[m - 1]);
  }
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  printf("6 iterations: %.3f ms on the caller's stream, %.3f ms of host time in start/wait\n", ms,
         host_in_calls * 1e3);
  /* A pending left unwaited, then close: the caller's stream must still be ordered after it. */
  CK(cudaMemsetAsync(a, 0x42, n, s));
  void *left = NULL;
  st = t->exchange_start(c, FA_RING_CHANNEL_KV, a, 0, b, 0, n, &left);
  EXPECT(st == FA_OK, "left start");
  double t0 = now();
  t->close(c);
  printf("close took %.3f ms of host time\n", (now() - t0) * 1e3);
  CK(cudaMemcpyAsync(h, b, n, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  EXPECT(all_equal(h, n, 0x42), "unwaited exchange ordered by close: %u", h[0]);
  cudaFree(a);
  cudaFree(b);
  cudaFree(a2);
  cudaFree(b2);
  free(h);
}

static void huge(const fa_transport *t, ncclComm_t comm) {
  printf("== a message above 2^31 bytes\n");
  const size_t n = ((size_t)5 << 29) + 3; /* 2.5 GiB + 3 */
  unsigned char *a, *b;
  if (cudaMalloc((void **)&a, n) || cudaMalloc((void **)&b, n)) {
    printf("SKIP: no memory\n");
    return;
  }
  void *c = NULL;
  int32_t r, w, cdev;
  EXPECT(t->open(&comm, NULL, &c, &r, &w, &cdev) == FA_OK, "open %s", fa_last_error());
  CK(cudaMemset(a, 0x5A, n));
  CK(cudaMemset(a + n - 1, 0x77, 1));
  CK(cudaMemset(b, 0, n));
  void *p = NULL;
  EXPECT(t->exchange_start(c, FA_RING_CHANNEL_KV, a, 0, b, 0, n, &p) == FA_OK, "start %s",
         fa_last_error());
  EXPECT(t->exchange_wait(c, p) == FA_OK, "wait");
  unsigned char x[4];
  CK(cudaMemcpy(x, b, 1, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(x + 1, b + ((size_t)1 << 31) + 5, 1, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(x + 2, b + n - 2, 2, cudaMemcpyDeviceToHost));
  EXPECT(x[0] == 0x5A && x[1] == 0x5A && x[2] == 0x5A && x[3] == 0x77, "huge: %x %x %x %x", x[0],
         x[1], x[2], x[3]);
  t->close(c);
  cudaFree(a);
  cudaFree(b);
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : FA_NCCL_PLUGIN;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("FATAL dlopen: %s\n", dlerror());
    return 1;
  }
  fa_transport_entry_fn entry;
  void *sym = dlsym(h, FA_TRANSPORT_ENTRY_SYMBOL);
  memcpy(&entry, &sym, sizeof entry);
  const fa_transport *t = entry(FA_TRANSPORT_ABI_VERSION);
  EXPECT(t && t->kind == FA_TRANSPORT_NCCL, "table");
  EXPECT(entry(FA_TRANSPORT_ABI_VERSION + 1) == NULL, "other ABI refused");
  fa_transport_probe pr;
  memset(&pr, 0, sizeof pr);
  t->probe(&pr);
  printf("probe: available %d runtime '%s' reason '%s'\n", pr.available, pr.runtime, pr.reason);
  if (!pr.available) {
    printf("SKIP: nccl: %s\n", pr.reason);
    return 77;
  }
  void *c = NULL;
  int32_t r, w, cdev;
  fa_status st = t->open(NULL, NULL, &c, &r, &w, &cdev);
  printf("open(NULL): %d %s\n", st, fa_last_error());
  EXPECT(st == FA_ERR_INVALID_ARGUMENT && strstr(fa_last_error(), "ring.comm"), "NULL handle");
  ncclComm_t none = NULL;
  st = t->open(&none, NULL, &c, &r, &w, &cdev);
  printf("open(&NULL): %d %s\n", st, fa_last_error());
  EXPECT(st == FA_ERR_INVALID_ARGUMENT && strstr(fa_last_error(), "ring.comm"), "NULL comm");

  ncclComm_t comm;
  int dev = 0;
  ncclResult_t nr = ncclCommInitAll(&comm, 1, &dev);
  if (nr != ncclSuccess) {
    printf("FATAL ncclCommInitAll: %s\n", ncclGetErrorString(nr));
    return 1;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  run(t, comm, s, "a non-blocking caller stream");
  run(t, comm, NULL, "the legacy default stream (NULL)");
  cudaStream_t s2;
  CK(cudaStreamCreate(&s2));
  run(t, comm, s2, "a blocking caller stream");
  huge(t, comm);
  /* 200 ring calls' open/close: a leak of streams or events would show. */
  double t0 = now();
  for (int i = 0; i < 200; ++i) {
    void *cc = NULL;
    int64_t v = i;
    if (t->open(&comm, s, &cc, &r, &w, &cdev) != FA_OK || t->allreduce_max(cc, &v, 1) != FA_OK) {
      EXPECT(0, "open loop %d: %s", i, fa_last_error());
      break;
    }
    t->close(cc);
  }
  printf("200 x (open, allreduce_max, close): %.3f ms each\n", (now() - t0) * 1e3 / 200);
  CK(cudaDeviceSynchronize());
  ncclCommDestroy(comm);
  printf("%s (%d failures)\n", fails ? "FAILED" : "ALL PASSED", fails);
  return fails ? 1 : 0;
}
