/*
 * test_ring_mpi.c: fa_ring_forward / fa_ring_backward over MPI, run under mpirun with 1, 2 and 4
 * processes (tests/CMakeLists.txt). Every rank checks its own rows of every output and gradient
 * against the float64 reference and the one-process result (tests/ring/ring_case.c); f32 and bf16,
 * causal or not, sliding windows, both layouts, GQA, padded and permuted shards. Then the
 * agreement: a rank whose arguments are refused, and ranks that disagree, make every rank return
 * the error with nothing written and nobody left waiting (a bad ring argument or run report on
 * one rank too). Rank 0 prints each case's largest errors
 * over all ranks.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "ring/ring_case.h"

static long failures;

static void report(const ring_case *c, ring_result *r, int rank) {
  ring_result all;
  MPI_Allreduce(r->err, all.err, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(r->tol, all.tol, 5, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(r->vs_one, all.vs_one, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&r->failures, &all.failures, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  failures += all.failures;
  if (rank != 0) return;
  printf("%s %s\n", all.failures ? "FAIL" : "ok  ", c->name);
  static const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; ++i)
    printf("       %-3s max error %.3g (tolerance %.3g), vs one process %.3g\n", names[i],
           all.err[i], all.tol[i], all.vs_one[i]);
  fflush(stdout);
}

/* One refusal seen by every rank: check(rank) says whether this rank's status and outputs are
   right. */
static void expect_all(const char *name, int ok, int rank) {
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ok) ++failures;
  if (rank == 0) printf("%s %s\n", all_ok ? "ok  " : "FAIL", name);
  fflush(stdout);
}

static void agreement_cases(MPI_Comm comm, int rank, int world, uint64_t seed) {
  const int64_t shape[4] = {1, 8, 2, 16}, lshape[3] = {1, 2, 8};
  tu_tensor q, k, v, out, lse;
  tu_alloc(&q, FA_F32, 4, shape, TU_CONTIGUOUS);
  tu_alloc(&k, FA_F32, 4, shape, TU_CONTIGUOUS);
  tu_alloc(&v, FA_F32, 4, shape, TU_CONTIGUOUS);
  tu_alloc(&out, FA_F32, 4, shape, TU_CONTIGUOUS);
  tu_alloc(&lse, FA_F32, 3, lshape, TU_CONTIGUOUS);
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(seed, "agreement") + (uint64_t)rank);
  tu_fill_random(&q, &rng);
  tu_fill_random(&k, &rng);
  tu_fill_random(&v, &rng);
  fa_ring_args ring;
  fa_ring_args_init(&ring);
  ring.transport = FA_TRANSPORT_MPI;
  ring.comm = &comm;
  const int last = world - 1;

  /* The last rank passes a workspace: it is refused there, and every other rank hears of it. */
  fa_params p;
  fa_params_init(&p);
  char scratch[64];
  if (rank == last) {
    p.workspace = scratch;
    p.workspace_size = sizeof scratch;
  }
  tu_poison(&out);
  fa_status st = fa_ring_forward(&p, &ring, &q.t, &k.t, &v.t, &out.t, &lse.t, NULL);
  int ok = st == FA_ERR_UNSUPPORTED && tu_unchanged(&out, NULL, 0) == 1 &&
           strstr(fa_last_error(), rank == last ? "params.workspace" : "another rank") != NULL;
  if (!ok) printf("  [rank %d] status %s: %s\n", rank, fa_status_string(st), fa_last_error());
  expect_all("agreement: one rank's refusal (workspace) returned on every rank", ok, rank);

  /* The last rank's own ring arguments or run report are bad (an unknown layout, a rank outside
     the world it names, an uninitialised fa_run_info): refused there, and every other rank hears
     of it instead of waiting for that rank in the agreement. */
  fa_params_init(&p);
  for (int what = 0; what < 3; ++what) {
    static const char *const field[3] = {"ring.layout", "ring.rank", "info.struct_size"};
    fa_ring_args bad = ring;
    fa_run_info info;
    fa_run_info_init(&info);
    if (rank == last && what == 0) bad.layout = 7;
    if (rank == last && what == 1) bad.world = world, bad.rank = world;
    if (rank == last && what == 2) info.struct_size = 0;
    tu_poison(&out);
    st = fa_ring_forward(&p, &bad, &q.t, &k.t, &v.t, &out.t, &lse.t, &info);
    ok = st == FA_ERR_INVALID_ARGUMENT && tu_unchanged(&out, NULL, 0) == 1 &&
         strstr(fa_last_error(), rank == last ? field[what] : "another rank") != NULL;
    if (!ok) printf("  [rank %d] status %s: %s\n", rank, fa_status_string(st), fa_last_error());
    char name[96];
    snprintf(name, sizeof name, "agreement: one rank's bad %s returned on every rank", field[what]);
    expect_all(name, ok, rank);
  }

  /* The last rank (of several) differs in the mask, the dropout's seed or the ALiBi slopes: every
     rank refuses, naming it. */
  float slopes[2] = {0.5f, 0.25f};
  fa_tensor alibi = tu_view_bshd(slopes, FA_F32, 1, 1, 1, 2);
  alibi.ndim = 1;
  alibi.shape[0] = 2;
  alibi.strides[0] = 1;
  for (int what = 0; what < 3 && world > 1; ++what) {
    static const char *const field[3] = {"params.causal", "params.dropout_seed",
                                         "params.alibi_slopes"};
    fa_params_init(&p);
    if (what == 0) p.causal = rank == last;
    if (what == 1) {
      p.dropout_p = 0.1f;
      p.dropout_seed = rank == last ? 2 : 1;
    }
    if (what == 2) {
      p.alibi_slopes = &alibi;
      slopes[1] = rank == last ? 0.125f : 0.25f;
    }
    tu_poison(&out);
    st = fa_ring_forward(&p, &ring, &q.t, &k.t, &v.t, &out.t, &lse.t, NULL);
    ok = st == FA_ERR_INVALID_ARGUMENT && tu_unchanged(&out, NULL, 0) == 1 &&
         strstr(fa_last_error(), field[what]) != NULL;
    if (!ok) printf("  [rank %d] status %s: %s\n", rank, fa_status_string(st), fa_last_error());
    char name[96];
    snprintf(name, sizeof name, "agreement: ranks disagreeing on %s all refuse", field[what]);
    expect_all(name, ok, rank);
  }

  /* A rank and world that the communicator contradicts. */
  fa_params_init(&p);
  ring.world = world + 1;
  ring.rank = rank;
  st = fa_ring_forward(&p, &ring, &q.t, &k.t, &v.t, &out.t, &lse.t, NULL);
  ok = st == FA_ERR_INVALID_ARGUMENT && strstr(fa_last_error(), "ring.world") != NULL;
  expect_all("agreement: ring.world contradicting the communicator", ok, rank);
  ring.world = 0;

  /* MPI_COMM_NULL is refused before any communication. */
  MPI_Comm null_comm = MPI_COMM_NULL;
  ring.comm = &null_comm;
  st = fa_ring_forward(&p, &ring, &q.t, &k.t, &v.t, &out.t, &lse.t, NULL);
  ok = st == FA_ERR_INVALID_ARGUMENT && strstr(fa_last_error(), "MPI_COMM_NULL") != NULL;
  expect_all("ring.comm pointing at MPI_COMM_NULL is refused", ok, rank);

  tu_free(&q);
  tu_free(&k);
  tu_free(&v);
  tu_free(&out);
  tu_free(&lse);
}

/* ALiBi (and dropout) over K/V shards longer than the queries', in both alignments. */
static const ring_extra alibi_longer_k = {22, FA_CAUSAL_BOTTOM_RIGHT, 1, 0.1f};
static const ring_extra alibi_longer_k_top_left = {13, FA_CAUSAL_TOP_LEFT, 2, 0.0f};

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  unsigned long long seed = tu_run_seed();
  MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("test_ring_mpi: %d ranks, seed 0x%llx (FA_TEST_SEED replays it)\n", world, seed);
    fa_transport_desc d[4];
    int32_t count = 0;
    for (int i = 0; i < 4; ++i) fa_transport_desc_init(&d[i]);
    if (fa_transport_info(d, 4, &count) == FA_OK)
      for (int i = 0; i < count && i < 4; ++i)
        printf("  transport %s: %s%s\n", d[i].name,
               d[i].available ? "available, " : "unavailable: ",
               d[i].available ? d[i].runtime : d[i].reason);
  }
  fa_transport_desc mpi;
  fa_transport_desc_init(&mpi);
  fa_transport_desc all[4];
  for (int i = 0; i < 4; ++i) fa_transport_desc_init(&all[i]);
  int32_t count = 0;
  fa_transport_info(all, 4, &count);
  for (int i = 0; i < count && i < 4; ++i)
    if (all[i].kind == FA_TRANSPORT_MPI) mpi = all[i];
  if (!mpi.available) {
    if (rank == 0)
      printf("test_ring_mpi: FAIL: the mpi transport is unavailable: %s\n", mpi.reason);
    MPI_Finalize();
    return 1;
  }

  MPI_Comm comm = MPI_COMM_WORLD;
  fa_ring_args ring;
  fa_ring_args_init(&ring);
  ring.transport = FA_TRANSPORT_MPI;
  ring.comm = &comm;
  /* name, dtype, causal, layout, batch, local seqlen, heads_q, heads_kv, head_dim, head_dim_v,
     shard layout */
  const ring_case cases[] = {
      {"f32.causal.zigzag.gqa", FA_F32, 1, FA_RING_ZIGZAG, 2, 16, 4, 2, 32, 32, TU_CONTIGUOUS, 0, 0,
       0, NULL},
      {"f32.causal.contiguous.gqa", FA_F32, 1, FA_RING_CONTIGUOUS, 2, 16, 4, 2, 32, 32, TU_PADDED,
       0, 0, 0, NULL},
      {"f32.full.zigzag.mha", FA_F32, 0, FA_RING_ZIGZAG, 1, 16, 2, 2, 32, 32, TU_PERMUTED, 0, 0, 0,
       NULL},
      {"f32.full.contiguous.mqa.dv16", FA_F32, 0, FA_RING_CONTIGUOUS, 2, 12, 4, 1, 32, 16,
       TU_CONTIGUOUS, 0, 0, 0, NULL},
      {"bf16.causal.zigzag.gqa", FA_BF16, 1, FA_RING_ZIGZAG, 2, 16, 4, 2, 64, 64, TU_CONTIGUOUS, 0,
       0, 0, NULL},
      {"bf16.causal.contiguous.gqa", FA_BF16, 1, FA_RING_CONTIGUOUS, 2, 16, 4, 2, 64, 64,
       TU_STRIDED, 0, 0, 0, NULL},
      {"bf16.full.zigzag.gqa", FA_BF16, 0, FA_RING_ZIGZAG, 1, 16, 4, 2, 64, 64, TU_PADDED, 0, 0, 0,
       NULL},
      {"bf16.full.contiguous.mha", FA_BF16, 0, FA_RING_CONTIGUOUS, 2, 10, 2, 2, 64, 64,
       TU_CONTIGUOUS, 0, 0, 0, NULL},
      {"f16.causal.zigzag.gqa", FA_F16, 1, FA_RING_ZIGZAG, 1, 16, 4, 2, 32, 32, TU_CONTIGUOUS, 0, 0,
       0, NULL},
      /* sliding windows (then the last fields: window, left, right): narrower than a chunk,
         across several shards, right-only and two-sided without a causal mask */
      {"f32.window5.causal.zigzag.gqa", FA_F32, 1, FA_RING_ZIGZAG, 2, 16, 4, 2, 32, 32,
       TU_CONTIGUOUS, 1, 5, -1, NULL},
      {"f32.window37.causal.contiguous", FA_F32, 1, FA_RING_CONTIGUOUS, 1, 16, 2, 2, 32, 32,
       TU_PADDED, 1, 37, 0, NULL},
      {"f32.window.right11.zigzag", FA_F32, 0, FA_RING_ZIGZAG, 1, 12, 4, 1, 16, 16, TU_PERMUTED, 1,
       -1, 11, NULL},
      {"bf16.window.both.contiguous.gqa", FA_BF16, 0, FA_RING_CONTIGUOUS, 2, 10, 4, 2, 64, 64,
       TU_STRIDED, 1, 7, 13, NULL},
      {"bf16.window20.causal.zigzag", FA_BF16, 1, FA_RING_ZIGZAG, 1, 16, 4, 2, 64, 64,
       TU_CONTIGUOUS, 1, 20, 0, NULL},
      /* dropout and ALiBi, which read the tokens' global positions (then the extra's fields:
         seqlen_k, causal_align, alibi, dropout_p) */
      {"f32.alibi.causal.zigzag.gqa", FA_F32, 1, FA_RING_ZIGZAG, 2, 16, 4, 2, 32, 32, TU_PADDED, 0,
       0, 0, &ring_alibi_heads},
      {"f32.dropout.causal.contiguous.gqa", FA_F32, 1, FA_RING_CONTIGUOUS, 2, 12, 4, 2, 32, 32,
       TU_CONTIGUOUS, 0, 0, 0, &ring_dropout},
      {"bf16.alibi.dropout.full.zigzag", FA_BF16, 0, FA_RING_ZIGZAG, 1, 16, 4, 2, 64, 64,
       TU_STRIDED, 0, 0, 0, &ring_alibi_batch_dropout},
      {"f32.alibi.dropout.causal.zigzag", FA_F32, 1, FA_RING_ZIGZAG, 2, 16, 2, 1, 32, 32,
       TU_PERMUTED, 0, 0, 0, &ring_alibi_batch_dropout},
      {"f32.alibi.dropout.window9.causal.zigzag", FA_F32, 1, FA_RING_ZIGZAG, 1, 16, 4, 2, 16, 16,
       TU_CONTIGUOUS, 1, 9, 0, &ring_alibi_batch_dropout},
      {"f32.alibi.dropout.longer_k.zigzag", FA_F32, 0, FA_RING_ZIGZAG, 2, 10, 2, 1, 16, 16,
       TU_CONTIGUOUS, 0, 0, 0, &alibi_longer_k},
      {"f32.alibi.longer_k.top_left.contiguous", FA_F32, 0, FA_RING_CONTIGUOUS, 1, 9, 2, 2, 16, 16,
       TU_PADDED, 0, 0, 0, &alibi_longer_k_top_left},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    ring_result r;
    ring_case_run(&cases[i], seed, &ring, rank, world, &r);
    report(&cases[i], &r, rank);
  }
  agreement_cases(comm, rank, world, seed);
  if (rank == 0) printf("test_ring_mpi: %s (%d ranks)\n", failures ? "FAILED" : "passed", world);
  MPI_Finalize();
  return failures ? 1 : 0;
}
