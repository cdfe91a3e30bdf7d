/*
 * cuda_ring.c: the ring calls on CUDA tensors, one rank on one GPU (tests/gpu/h200_check.sh runs
 * it: step ring).
 *
 *   cuda_ring
 *
 * Each case is tests/ring's (ring_case_run_on): the local shards, the one-process calls and every
 * output live in device memory; out, lse, dq, dk and dv are checked against the float64 reference
 * by the suite's pass rule and against fa_forward / fa_backward on the whole sequence on the same
 * GPU, and a second run must give the same bits.
 * 1. On the built-in self transport: causal and not, bf16 and f16, head dims 64, 128 and 256, GQA,
 *    both layouts. Where a step is one block (no window) the ring's result is the one-process
 *    call's bit for bit: the block's output merged into nothing and its gradients added to zero
 *    are exact in float32, and the block runs the same kernel on the same values (deterministic).
 *    With a sliding window the zig-zag shard's chunk pairs are several blocks a step, so the
 *    device's merge and sums do real work; those cases are held to the tolerance.
 * 2. On the NCCL transport, where it is built and available: a communicator of one rank on GPU 0
 *    (ncclCommInitAll), the same cases; then again with params.stream a non-blocking stream of the
 *    caller's (the blocks, the buffer steps and the exchanges' events ordered on it, not on the
 *    legacy default stream).
 * 3. Refusals: a workspace (FA_ERR_UNSUPPORTED: the ring allocates its own), the NCCL transport
 *    with no communicator (FA_ERR_INVALID_ARGUMENT), and on a machine with two GPUs a
 *    communicator of GPU 0 given tensors of GPU 1 (FA_ERR_INVALID_ARGUMENT); the outputs
 *    untouched.
 * 4. With two GPUs or more: a ring of two ranks, one process and one GPU each (this program
 *    started again with --rank), the communicator made by ncclCommInitRank from an id passed
 *    through a pipe: the cases on both ranks, each checking its own rows against the float64
 *    reference and the one-process calls on its GPU; the K/V shards, and the backward's dk/dv,
 *    really travel between the GPUs. Each rank's process must exit 0 within its time limit.
 *
 *   cuda_ring [--require-nccl]
 *
 * --require-nccl: the NCCL parts must run (a missing NCCL or its header at build time is then a
 * failure, not a skip; tests/gpu/h200_check.sh passes it). Part 4 is skipped on one GPU.
 * Prints one PASS / FAIL line per check and a summary; exits 0 when all pass, 1 on a failure, 77
 * when the CUDA backend is not available here (with the library's reason).
 */
#define _POSIX_C_SOURCE 200809L /* setenv, kill */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_tally.h"
#include "cuda_backend.h"
#include "device_mem.h"
#include "ring/ring_case.h"
#if FA_TEST_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

/* Seconds a rank's process of the two-rank ring may take. */
#define RANK_SECONDS 150

static const char *const output_names[5] = {"out", "lse", "dq", "dk", "dv"};

/* Runs the cases on one transport, as rank `rank` of `world`. bitwise[i]: in a ring of one, case i
   must equal the one-process call exactly. */
static void run_cases(const char *transport, const fa_ring_args *ring, const fa_device *dev,
                      uint64_t seed, int rank, int world) {
  static const ring_case cases[] = {
      {"bf16.causal.contiguous.gqa.hd128", FA_BF16, 1, FA_RING_CONTIGUOUS, 2, 256, 4, 2, 128, 128,
       TU_CONTIGUOUS, 0, 0, 0, NULL},
      {"f16.full.zigzag.hd64", FA_F16, 0, FA_RING_ZIGZAG, 1, 200, 4, 4, 64, 64, TU_CONTIGUOUS, 0, 0,
       0, NULL},
      {"bf16.causal.zigzag.mqa.hd256", FA_BF16, 1, FA_RING_ZIGZAG, 1, 128, 4, 1, 256, 256,
       TU_CONTIGUOUS, 0, 0, 0, NULL},
      {"bf16.full.contiguous.permuted.hd128", FA_BF16, 0, FA_RING_CONTIGUOUS, 2, 160, 4, 2, 128,
       128, TU_PERMUTED, 0, 0, 0, NULL},
      {"bf16.window.causal.zigzag.gqa.hd128", FA_BF16, 1, FA_RING_ZIGZAG, 2, 256, 4, 2, 128, 128,
       TU_CONTIGUOUS, 1, 40, -1, NULL},
      {"f16.window.both.zigzag.hd64", FA_F16, 0, FA_RING_ZIGZAG, 1, 192, 4, 2, 64, 64, TU_PERMUTED,
       1, 30, 20, NULL},
  };
  static const int bitwise[] = {1, 1, 1, 0, 0, 0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    ring_result r;
    ring_case_run_on(&cases[i], seed, ring, rank, world, dev, &r);
    char what[160], detail[400];
    snprintf(what, sizeof what, "%s %s", transport, cases[i].name);
    int n = snprintf(detail, sizeof detail, "error / tolerance / vs one call:");
    int exact = 1;
    for (int o = 0; o < 5 && n > 0 && (size_t)n < sizeof detail; ++o) {
      n += snprintf(detail + n, sizeof detail - (size_t)n, " %s %.2g/%.2g/%.2g", output_names[o],
                    r.err[o], r.tol[o], r.vs_one[o]);
      if (r.vs_one[o] != 0.0) exact = 0;
    }
    check(r.failures == 0, what, detail);
    if (bitwise[i] && world == 1) {
      snprintf(what, sizeof what, "%s %s equals the one-process call bitwise", transport,
               cases[i].name);
      check(r.failures == 0 && exact, what, "");
    }
  }
}

/* A refused ring call: its status, and the output left as it was. With capture, the call is made
   on a stream capturing a CUDA graph (relaxed mode, so the test's own copies may run meanwhile). */
static void refusal(const char *what, const fa_ring_args *ring, const fa_device *dev,
                    int with_workspace, int capture, fa_status want) {
  const int64_t shape[4] = {1, 64, 2, 64}, lshape[3] = {1, 2, 64};
  const size_t bytes = 64 * 2 * 64 * 2;
  void *buf[5] = {NULL};
  char err[256];
  int ok = 1;
  for (int i = 0; i < 5 && ok; ++i)
    ok = devmem_alloc(*dev, i == 4 ? 64 * 2 * 4 : bytes, &buf[i], err, sizeof err) == 0 &&
         devmem_memset(*dev, buf[i], 0x5a, i == 4 ? 64 * 2 * 4 : bytes, err, sizeof err) == 0;
  if (!ok) {
    check(0, what, err);
    return;
  }
  fa_tensor t[4], lse;
  for (int i = 0; i < 4; ++i) t[i] = tu_view(buf[i], FA_BF16, *dev, 4, shape);
  lse = tu_view(buf[4], FA_F32, *dev, 3, lshape);
  fa_params p;
  fa_params_init(&p);
  if (with_workspace) {
    p.workspace = buf[0];
    p.workspace_size = bytes;
  }
#if FA_TEST_NCCL
  cudaStream_t stream = NULL;
  if (capture) {
    const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
    p.stream = stream;
  }
#else
  if (capture) {
    check(0, what, "built without the CUDA runtime's header");
    return;
  }
#endif
  const fa_status st = fa_ring_forward(&p, ring, &t[0], &t[1], &t[2], &t[3], &lse, NULL);
#if FA_TEST_NCCL
  if (stream) {
    cudaGraph_t graph = NULL;
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
#endif
  unsigned char host[64 * 2 * 64 * 2];
  int untouched = devmem_copy_to_host(*dev, host, buf[3], bytes, err, sizeof err) == 0;
  for (size_t i = 0; untouched && i < bytes; ++i) untouched = host[i] == 0x5a;
  char detail[400];
  snprintf(detail, sizeof detail, "%s: %s%s", fa_status_string(st), fa_last_error(),
           untouched ? "" : " (and the output was written)");
  check(st == want && untouched, what, detail);
  for (int i = 0; i < 5; ++i) devmem_free(*dev, buf[i], err, sizeof err);
}

#if FA_TEST_NCCL
/* run_cases with params.stream a non-blocking stream of the caller's, made for them. */
static void run_cases_on_new_stream(const char *label, const fa_ring_args *ring,
                                    const fa_device *dev, uint64_t seed, int rank, int world) {
  cudaStream_t stream;
  const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    check(0, label, cudaGetErrorString(e));
    return;
  }
  ring_case_set_stream(stream);
  run_cases(label, ring, dev, seed, rank, world);
  ring_case_set_stream(NULL);
  cudaStreamDestroy(stream);
}

/* Rank `rank` of a two-process ring (this program started with --rank): rank 0 makes the NCCL id
   and writes a copy for every other rank to the pipe id_fd, the others read theirs. */
static int rank_main(int rank, int world, int id_fd) {
  const fa_device dev = {FA_DEVICE_CUDA, rank};
  char what[96];
  snprintf(what, sizeof what, "rank %d: cudaSetDevice(%d)", rank, rank);
  const cudaError_t ce = cudaSetDevice(rank);
  if (ce != cudaSuccess) {
    check(0, what, cudaGetErrorString(ce));
    return check_summary("cuda_ring rank");
  }
  ncclUniqueId id;
  int ok = 1;
  if (rank == 0) {
    ncclResult_t nr = ncclGetUniqueId(&id);
    if (nr != ncclSuccess) {
      check(0, "rank 0: ncclGetUniqueId", ncclGetErrorString(nr));
      ok = 0;
      memset(&id, 0, sizeof id); /* the others still get an id, and fail to join */
    }
    for (int r = 1; r < world; ++r)
      if (write(id_fd, &id, sizeof id) != (ssize_t)sizeof id) ok = 0;
  } else if (read(id_fd, &id, sizeof id) != (ssize_t)sizeof id) {
    ok = 0;
  }
  if (!ok) {
    check(0, "the NCCL id through the pipe", "");
    return check_summary("cuda_ring rank");
  }
  ncclComm_t comm;
  const ncclResult_t nr = ncclCommInitRank(&comm, world, id, rank);
  snprintf(what, sizeof what, "rank %d: ncclCommInitRank (world %d)", rank, world);
  if (nr != ncclSuccess) {
    check(0, what, ncclGetErrorString(nr));
    return check_summary("cuda_ring rank");
  }
  const uint64_t seed = tu_run_seed();
  fa_ring_args ring;
  fa_ring_args_init(&ring);
  ring.transport = FA_TRANSPORT_NCCL;
  ring.comm = &comm;
  snprintf(what, sizeof what, "nccl rank %d/%d", rank, world);
  run_cases(what, &ring, &dev, seed, rank, world);
  snprintf(what, sizeof what, "nccl rank %d/%d, a non-blocking stream", rank, world);
  run_cases_on_new_stream(what, &ring, &dev, seed, rank, world);
  ncclCommDestroy(comm);
  snprintf(what, sizeof what, "cuda_ring rank %d", rank);
  return check_summary(what);
}

/* The two-rank ring: this program started once per rank (a fresh process each: CUDA does not
   survive fork), the NCCL id passed on a pipe, each process given RANK_SECONDS. */
static void two_ranks(const char *self_path) {
  enum { WORLD = 2 };
  int fds[2];
  if (pipe(fds) != 0) {
    check(0, "two ranks: pipe", "");
    return;
  }
  pid_t pid[WORLD];
  for (int r = 0; r < WORLD; ++r) {
    pid[r] = fork();
    if (pid[r] == 0) {
      /* Each rank keeps only its end: a reader then sees the end of the pipe if rank 0 dies. */
      close(r == 0 ? fds[0] : fds[1]);
      char rank[16], world[16], fd[16];
      snprintf(rank, sizeof rank, "%d", r);
      snprintf(world, sizeof world, "%d", WORLD);
      snprintf(fd, sizeof fd, "%d", r == 0 ? fds[1] : fds[0]);
      execl(self_path, self_path, "--rank", rank, "--world", world, "--id-fd", fd, (char *)NULL);
      _exit(127);
    }
  }
  close(fds[0]);
  close(fds[1]);
  int status[WORLD] = {-1, -1}, done = 0;
  const time_t deadline = time(NULL) + RANK_SECONDS;
  while (done < WORLD && time(NULL) < deadline) {
    for (int r = 0; r < WORLD; ++r) {
      int st = 0;
      if (pid[r] > 0 && status[r] == -1 && waitpid(pid[r], &st, WNOHANG) == pid[r]) {
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        ++done;
      }
    }
    if (done < WORLD) {
      const struct timespec tenth = {0, 100000000};
      nanosleep(&tenth, NULL);
    }
  }
  for (int r = 0; r < WORLD; ++r)
    if (pid[r] > 0 && status[r] == -1) {
      kill(pid[r], SIGKILL);
      waitpid(pid[r], NULL, 0);
    }
  char detail[160];
  snprintf(detail, sizeof detail, "rank 0 exit %d, rank 1 exit %d (-1: killed after %d s)",
           status[0], status[1], RANK_SECONDS);
  check(pid[0] > 0 && pid[1] > 0 && status[0] == 0 && status[1] == 0,
        "a ring of two ranks over NCCL, one process and one GPU each", detail);
}
#endif

/* The option's value as an int, or exits with a usage error. */
static int int_arg(int argc, char **argv, int i) {
  if (i + 1 >= argc) {
    printf("FAIL usage: %s needs a value\n", argv[i]);
    exit(2);
  }
  return atoi(argv[i + 1]);
}

int main(int argc, char **argv) {
  int require_nccl = 0, rank = -1, world = 0, id_fd = -1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--require-nccl") == 0) {
      require_nccl = 1;
    } else if (strcmp(argv[i], "--rank") == 0) {
      rank = int_arg(argc, argv, i++);
    } else if (strcmp(argv[i], "--world") == 0) {
      world = int_arg(argc, argv, i++);
    } else if (strcmp(argv[i], "--id-fd") == 0) {
      id_fd = int_arg(argc, argv, i++);
    } else {
      printf("FAIL usage: cuda_ring [--require-nccl] (unknown option %s)\n", argv[i]);
      return 2;
    }
  }
#if FA_TEST_NCCL
  if (rank >= 0) return rank_main(rank, world, id_fd);
#else
  (void)world, (void)id_fd;
  if (rank >= 0) {
    printf("FAIL --rank: this test was built without NCCL's header\n");
    return 1;
  }
#endif
  fa_backend_desc cuda;
  const int skip = cuda_backend_or_skip(&cuda);
  if (skip) return skip;
  fa_device dev;
  char err[256];
  if (devmem_default_device(FA_DEVICE_CUDA, &dev, err, sizeof err) != 0) {
    printf("FAIL device: %s\n", err);
    return 1;
  }
  const uint64_t seed = tu_run_seed();
  printf("seed 0x%016llx\n", (unsigned long long)seed);
  /* The processes of the two-rank ring draw the same inputs. */
  char seed_text[32];
  snprintf(seed_text, sizeof seed_text, "0x%016llx", (unsigned long long)seed);
  setenv("FA_TEST_SEED", seed_text, 1);

  fa_ring_args self;
  fa_ring_args_init(&self);
  self.transport = FA_TRANSPORT_SELF;
  run_cases("self", &self, &dev, seed, 0, 1);

  refusal("a ring over CUDA tensors given a workspace is refused", &self, &dev, 1, 0,
          FA_ERR_UNSUPPORTED);

  fa_transport_desc descs[FA_TRANSPORT_COUNT_];
  int32_t count = 0;
  for (int i = 0; i < FA_TRANSPORT_COUNT_; ++i) fa_transport_desc_init(&descs[i]);
  fa_transport_info(descs, FA_TRANSPORT_COUNT_, &count);
  const fa_transport_desc *nccl_desc = NULL;
  for (int32_t i = 0; i < count && i < FA_TRANSPORT_COUNT_; ++i)
    if (descs[i].kind == FA_TRANSPORT_NCCL) nccl_desc = &descs[i];
  fa_ring_args nccl;
  fa_ring_args_init(&nccl);
  nccl.transport = FA_TRANSPORT_NCCL;
  if (!nccl_desc || !nccl_desc->available) {
    const char *why = nccl_desc ? nccl_desc->reason : "not known to this library";
    if (require_nccl)
      check(0, "the NCCL transport (--require-nccl)", why);
    else
      printf("SKIP nccl: %s\n", why);
  } else {
    printf("nccl: %s (%s)\n", nccl_desc->runtime, nccl_desc->plugin_path);
    refusal("the NCCL transport without a communicator is refused", &nccl, &dev, 0, 0,
            FA_ERR_INVALID_ARGUMENT);
#if FA_TEST_NCCL
    ncclComm_t comm;
    int devs[1] = {dev.id};
    const ncclResult_t nr = ncclCommInitAll(&comm, 1, devs);
    if (nr != ncclSuccess) {
      check(0, "ncclCommInitAll (one rank)", ncclGetErrorString(nr));
    } else {
      nccl.comm = &comm;
      run_cases("nccl", &nccl, &dev, seed, 0, 1);
      run_cases_on_new_stream("nccl, a non-blocking stream", &nccl, &dev, seed, 0, 1);
      refusal("an NCCL ring on a stream capturing a graph is refused", &nccl, &dev, 0, 1,
              FA_ERR_UNSUPPORTED);
      int gpus = 0;
      if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
      if (gpus >= 2 && dev.id == 0) {
        const fa_device other = {FA_DEVICE_CUDA, 1};
        refusal("a communicator of GPU 0 with tensors of GPU 1 is refused", &nccl, &other, 0, 0,
                FA_ERR_INVALID_ARGUMENT);
      }
      ncclCommDestroy(comm);
      if (gpus >= 2)
        two_ranks(argv[0]);
      else
        printf("SKIP two ranks: this machine has %d GPU\n", gpus);
    }
#else
    if (require_nccl)
      check(0, "the NCCL cases (--require-nccl)", "built without NCCL's header");
    else
      printf("SKIP nccl cases: this test was built without NCCL's header\n");
#endif
  }
  fa_release(); /* the backend's caches (the fa3 forward's stream counters): a clean leak check */
  return check_summary("cuda_ring");
}
