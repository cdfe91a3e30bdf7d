/*
 * ring_bench.c: the ring calls' scaling (docs/ring.md), run under mpiexec with one process per
 * rank (per GPU with --transport nccl):
 *
 *   mpiexec -n W fa-ring-bench [--transport mpi|nccl] [--seqlen N] [--batch B] [--heads H]
 *       [--kv-heads K] [--hdim D] [--dtype bf16|f16|f32] [--causal 0|1] [--layout
 * zigzag|contiguous]
 *       [--iters I] [--warmup U]
 *
 * N is the global sequence; each rank holds N / W tokens. Every rank times fa_ring_forward and
 * fa_ring_backward on its shards (the calls back to back, the devices drained before the clock is
 * read; the slowest rank's time counts), and rank 0 then times fa_forward / fa_backward alone on
 * one shard (N / W tokens: "one device at 1/W of the length"). With the work quadratic in the
 * length, W ranks at N do W times the work of one at N / W each, so the scaling efficiency is
 * W * t(one, N / W) / t(ring, N): 100% when the ring's transfers and merges cost nothing beside
 * its blocks. Host tensors with --transport mpi (the threads per rank from OMP_NUM_THREADS), CUDA
 * tensors with nccl (rank r on GPU r % devices; the communicator bootstrapped over MPI).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flash_attn.h"
#include "tools/device_mem.h"
#if FA_BENCH_NCCL
#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

typedef struct opts {
  const char *transport, *dtype, *layout;
  int64_t seqlen, batch, heads, kv_heads, hdim;
  int causal, iters, warmup;
} opts;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){"mpi", "bf16", "zigzag", 16384, 1, 16, 16, 128, 1, 5, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--transport"))
      o->transport = v;
    else if (!strcmp(k, "--dtype"))
      o->dtype = v;
    else if (!strcmp(k, "--layout"))
      o->layout = v;
    else if (!strcmp(k, "--seqlen"))
      o->seqlen = atoll(v);
    else if (!strcmp(k, "--batch"))
      o->batch = atoll(v);
    else if (!strcmp(k, "--heads"))
      o->heads = atoll(v);
    else if (!strcmp(k, "--kv-heads"))
      o->kv_heads = atoll(v);
    else if (!strcmp(k, "--hdim"))
      o->hdim = atoll(v);
    else if (!strcmp(k, "--causal"))
      o->causal = atoi(v);
    else if (!strcmp(k, "--iters"))
      o->iters = atoi(v);
    else if (!strcmp(k, "--warmup"))
      o->warmup = atoi(v);
    else
      return 0;
  }
  return (argc % 2) == 1;
}

static fa_dtype dtype_of(const char *s) {
  return !strcmp(s, "f16") ? FA_F16 : !strcmp(s, "f32") ? FA_F32 : FA_BF16;
}

/* The tensors of one rank's problem, in dev's memory, filled with small random values. */
typedef struct problem {
  fa_tensor t[9]; /* q k v out lse dout dq dk dv */
  void *p[9];
} problem;

static int make(problem *pr, const opts *o, int64_t n, fa_device dev, unsigned seed) {
  memset(pr, 0, sizeof *pr);
  const fa_dtype dt = dtype_of(o->dtype);
  const int64_t q[4] = {o->batch, n, o->heads, o->hdim},
                kv[4] = {o->batch, n, o->kv_heads, o->hdim};
  const int64_t l[3] = {o->batch, o->heads, n};
  const int64_t *shape[9] = {q, kv, kv, q, l, q, q, kv, kv};
  char err[256];
  srand(seed);
  for (int i = 0; i < 9; ++i) {
    const fa_dtype d = i == 4 ? FA_F32 : dt;
    const int nd = i == 4 ? 3 : 4;
    int64_t count = 1;
    for (int j = 0; j < nd; ++j) count *= shape[i][j];
    const size_t bytes = (size_t)count * fa_dtype_size(d);
    unsigned char *host = malloc(bytes);
    if (!host) return 0;
    /* small values of the 16-bit dtypes' upper half (and float32 ones) */
    for (size_t b = 0; b < bytes; ++b) host[b] = (unsigned char)(b % 2 ? 0x3c : rand());
    const int ok = devmem_alloc(dev, bytes, &pr->p[i], err, sizeof err) == 0 &&
                   devmem_copy_to_device(dev, pr->p[i], host, bytes, err, sizeof err) == 0;
    free(host);
    if (!ok) {
      fprintf(stderr, "memory: %s\n", err);
      return 0;
    }
    memset(&pr->t[i], 0, sizeof pr->t[i]);
    pr->t[i].data = pr->p[i];
    pr->t[i].device = dev;
    pr->t[i].dtype = d;
    pr->t[i].ndim = nd;
    int64_t stride = 1;
    for (int j = nd - 1; j >= 0; --j) {
      pr->t[i].shape[j] = shape[i][j];
      pr->t[i].strides[j] = stride;
      stride *= shape[i][j];
    }
  }
  return 1;
}

static void release(problem *pr, fa_device dev) {
  char err[256];
  for (int i = 0; i < 9; ++i) devmem_free(dev, pr->p[i], err, sizeof err);
}

/* Seconds per call of fn (warmup calls first), the device drained before the clock is read. */
typedef fa_status (*call_fn)(void *ctx);
static double time_calls(call_fn fn, void *ctx, const opts *o, fa_device dev, MPI_Comm comm) {
  char err[256];
  for (int i = 0; i < o->warmup; ++i)
    if (fn(ctx) != FA_OK) return -1.0;
  devmem_sync(dev, err, sizeof err);
  if (comm != MPI_COMM_NULL) MPI_Barrier(comm);
  const double t0 = now();
  for (int i = 0; i < o->iters; ++i)
    if (fn(ctx) != FA_OK) return -1.0;
  devmem_sync(dev, err, sizeof err);
  double t = (now() - t0) / o->iters;
  if (comm != MPI_COMM_NULL) MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  return t;
}

typedef struct call_ctx {
  fa_params p;
  fa_ring_args ring;
  problem *pr;
} call_ctx;

static fa_status ring_fwd(void *c) {
  call_ctx *x = c;
  fa_tensor *t = x->pr->t;
  return fa_ring_forward(&x->p, &x->ring, &t[0], &t[1], &t[2], &t[3], &t[4], NULL);
}
static fa_status ring_bwd(void *c) {
  call_ctx *x = c;
  fa_tensor *t = x->pr->t;
  return fa_ring_backward(&x->p, &x->ring, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7],
                          &t[8], NULL);
}
static fa_status one_fwd(void *c) {
  call_ctx *x = c;
  fa_tensor *t = x->pr->t;
  return fa_forward(&x->p, &t[0], &t[1], &t[2], &t[3], &t[4], NULL);
}
static fa_status one_bwd(void *c) {
  call_ctx *x = c;
  fa_tensor *t = x->pr->t;
  return fa_backward(&x->p, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], &t[8], NULL);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  opts o;
  int rc = 0;
  if (!parse(argc, argv, &o) || o.seqlen % world || o.iters <= 0) {
    if (rank == 0)
      fprintf(stderr,
              "usage: see bench/ring_bench.c (the global --seqlen a multiple of the "
              "world)\n");
    MPI_Finalize();
    return 2;
  }
  const int nccl = !strcmp(o.transport, "nccl");
  const int64_t n = o.seqlen / world;
  fa_device dev = {FA_DEVICE_CPU, 0};
  call_ctx c;
  fa_params_init(&c.p);
  c.p.causal = o.causal;
  fa_ring_args_init(&c.ring);
  c.ring.layout = !strcmp(o.layout, "contiguous") ? FA_RING_CONTIGUOUS : FA_RING_ZIGZAG;
  MPI_Comm mpi_comm = MPI_COMM_WORLD;
#if FA_BENCH_NCCL
  ncclComm_t nc = NULL;
#endif
  if (nccl) {
#if FA_BENCH_NCCL
    int devices = 0;
    cudaGetDeviceCount(&devices);
    dev.kind = FA_DEVICE_CUDA;
    dev.id = devices > 0 ? rank % devices : 0;
    cudaSetDevice(dev.id);
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (ncclCommInitRank(&nc, world, id, rank) != ncclSuccess) {
      fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    c.ring.transport = FA_TRANSPORT_NCCL;
    c.ring.comm = &nc;
#else
    if (rank == 0) fprintf(stderr, "this build has no NCCL (FA_BENCH_NCCL)\n");
    MPI_Finalize();
    return 2;
#endif
  } else {
    c.ring.transport = FA_TRANSPORT_MPI;
    c.ring.comm = &mpi_comm;
  }
  problem pr;
  if (!make(&pr, &o, n, dev, 1234u + (unsigned)rank)) MPI_Abort(MPI_COMM_WORLD, 1);
  c.pr = &pr;
  const double tf = time_calls(ring_fwd, &c, &o, dev, MPI_COMM_WORLD);
  const double tb = time_calls(ring_bwd, &c, &o, dev, MPI_COMM_WORLD);
  if (tf < 0 || tb < 0) {
    fprintf(stderr, "rank %d: ring call failed: %s\n", rank, fa_last_error());
    rc = 1;
  }
  /* The baseline on rank 0: one shard's attention alone, as one device would run it. */
  double of = -1, ob = -1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0 && rc == 0) {
    of = time_calls(one_fwd, &c, &o, dev, MPI_COMM_NULL);
    ob = time_calls(one_bwd, &c, &o, dev, MPI_COMM_NULL);
    const double flops = 4.0 * (double)o.batch * (double)o.heads * (double)o.seqlen *
                         (double)o.seqlen * (double)o.hdim * (o.causal ? 0.5 : 1.0);
    printf(
        "ring %s, %d ranks, %s, batch %lld, heads %lld/%lld, hd %lld, %s, global %lld tokens "
        "(%lld a rank), %s layout\n",
        o.transport, world, o.dtype, (long long)o.batch, (long long)o.heads, (long long)o.kv_heads,
        (long long)o.hdim, o.causal ? "causal" : "full", (long long)o.seqlen, (long long)n,
        o.layout);
    printf("%-9s %12s %12s %14s %11s\n", "pass", "ring ms", "one ms", "ring TFLOP/s", "efficiency");
    printf("%-9s %12.3f %12.3f %14.3f %10.1f%%\n", "forward", 1e3 * tf, 1e3 * of,
           flops / tf * 1e-12, 100.0 * world * of / tf);
    printf("%-9s %12.3f %12.3f %14.3f %10.1f%%\n", "backward", 1e3 * tb, 1e3 * ob,
           2.5 * flops / tb * 1e-12, 100.0 * world * ob / tb);
    if (of < 0 || ob < 0) {
      fprintf(stderr, "fa_forward / fa_backward on one shard failed: %s\n", fa_last_error());
      rc = 1;
    }
  }
  release(&pr, dev);
#if FA_BENCH_NCCL
  if (nc) ncclCommDestroy(nc);
#endif
  MPI_Finalize();
  return rc;
}
