/*
 * test_ring.c: the ring calls in one process, on the built-in self transport (no MPI): every
 * output and gradient against the float64 reference and fa_forward / fa_backward (tests/ring);
 * float32 results bitwise equal to the one-process calls (a ring of one rank merges one block into
 * nothing, which is exact); every refusal with its status, the argument it names, and the outputs
 * untouched; fa_transport_info; which libraries the transports load, and when.
 */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "ring/ring_case.h"
#include "ring/ring_plan_check.h"

static fa_ring_args self_ring(void) {
  fa_ring_args ring;
  fa_ring_args_init(&ring);
  ring.transport = FA_TRANSPORT_SELF;
  return ring;
}

/* ALiBi (and dropout) over K/V shards longer than the queries', in both alignments. */
static const ring_extra alibi_longer_k = {26, FA_CAUSAL_BOTTOM_RIGHT, 1, 0.1f};
static const ring_extra alibi_longer_k_top_left = {26, FA_CAUSAL_TOP_LEFT, 2, 0.0f};

static void ring_cases(uint64_t seed) {
  const ring_case cases[] = {
      {"self.f32.causal.zigzag.gqa", FA_F32, 1, FA_RING_ZIGZAG, 2, 24, 4, 2, 32, 32, TU_PADDED, 0,
       0, 0, NULL},
      {"self.f32.full.contiguous.mqa", FA_F32, 0, FA_RING_CONTIGUOUS, 1, 17, 4, 1, 16, 24,
       TU_PERMUTED, 0, 0, 0, NULL},
      {"self.bf16.causal.contiguous.gqa", FA_BF16, 1, FA_RING_CONTIGUOUS, 2, 32, 4, 2, 64, 64,
       TU_STRIDED, 0, 0, 0, NULL},
      /* windows: the chunk pairs of one rank's own shard */
      {"self.f32.window.causal.zigzag", FA_F32, 1, FA_RING_ZIGZAG, 2, 24, 4, 2, 32, 32, TU_PADDED,
       1, 5, -1, NULL},
      {"self.f32.window.both.contiguous", FA_F32, 0, FA_RING_CONTIGUOUS, 1, 17, 2, 1, 16, 16,
       TU_CONTIGUOUS, 1, 3, 6, NULL},
      {"self.bf16.window.right.zigzag", FA_BF16, 0, FA_RING_ZIGZAG, 1, 16, 4, 2, 32, 32,
       TU_PERMUTED, 1, -1, 4, NULL},
      {"self.f32.alibi.causal.zigzag.gqa", FA_F32, 1, FA_RING_ZIGZAG, 2, 24, 4, 2, 32, 32,
       TU_PADDED, 0, 0, 0, &ring_alibi_heads},
      {"self.f32.dropout.causal.zigzag", FA_F32, 1, FA_RING_ZIGZAG, 1, 20, 2, 2, 16, 16,
       TU_CONTIGUOUS, 0, 0, 0, &ring_dropout},
      {"self.bf16.alibi.dropout.full.zigzag", FA_BF16, 0, FA_RING_ZIGZAG, 2, 16, 4, 2, 32, 32,
       TU_STRIDED, 0, 0, 0, &ring_alibi_batch_dropout},
      {"self.f32.alibi.dropout.window.zigzag", FA_F32, 1, FA_RING_ZIGZAG, 1, 24, 4, 1, 16, 16,
       TU_PERMUTED, 1, 6, -1, &ring_alibi_batch_dropout},
      {"self.f32.alibi.dropout.longer_k.zigzag", FA_F32, 0, FA_RING_ZIGZAG, 2, 14, 2, 1, 16, 16,
       TU_CONTIGUOUS, 0, 0, 0, &alibi_longer_k},
      {"self.f32.alibi.longer_k.top_left.contiguous", FA_F32, 0, FA_RING_CONTIGUOUS, 2, 15, 2, 2,
       16, 16, TU_PADDED, 0, 0, 0, &alibi_longer_k_top_left},
  };
  fa_ring_args ring = self_ring();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    test_case_begin(cases[i].name);
    ring_result r;
    ring_case_run(&cases[i], seed, &ring, 0, 1, &r);
    test_add_failures(r.failures);
    test_case_end();
  }
}

/* One rank's ring is the one-process call, bit for bit, in float32. */
static void bitwise_case(uint64_t seed) {
  test_case_begin("self.f32 equals fa_forward / fa_backward bitwise");
  const int64_t s[4] = {2, 20, 4, 32}, skv[4] = {2, 20, 2, 32}, sl[3] = {2, 4, 20};
  tu_tensor q, k, v, dout, o1, l1, o2, l2, dq1, dk1, dv1, dq2, dk2, dv2;
  tu_alloc(&q, FA_F32, 4, s, TU_CONTIGUOUS);
  tu_alloc(&dout, FA_F32, 4, s, TU_CONTIGUOUS);
  tu_alloc(&k, FA_F32, 4, skv, TU_CONTIGUOUS);
  tu_alloc(&v, FA_F32, 4, skv, TU_CONTIGUOUS);
  tu_tensor *outs[] = {&o1, &o2, &dq1, &dq2}, *kvs[] = {&dk1, &dk2, &dv1, &dv2};
  for (int i = 0; i < 4; ++i) {
    tu_alloc(outs[i], FA_F32, 4, s, TU_CONTIGUOUS);
    tu_alloc(kvs[i], FA_F32, 4, skv, TU_CONTIGUOUS);
  }
  tu_alloc(&l1, FA_F32, 3, sl, TU_CONTIGUOUS);
  tu_alloc(&l2, FA_F32, 3, sl, TU_CONTIGUOUS);
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(seed, "bitwise"));
  tu_fill_random(&q, &rng);
  tu_fill_random(&k, &rng);
  tu_fill_random(&v, &rng);
  tu_fill_random(&dout, &rng);
  fa_ring_args ring = self_ring();
  for (int causal = 0; causal <= 1; ++causal) {
    fa_params p;
    fa_params_init(&p);
    p.causal = causal;
    if (fa_forward(&p, &q.t, &k.t, &v.t, &o1.t, &l1.t, NULL) != FA_OK ||
        fa_backward(&p, &q.t, &k.t, &v.t, &o1.t, &l1.t, &dout.t, &dq1.t, &dk1.t, &dv1.t, NULL) !=
            FA_OK ||
        fa_ring_forward(&p, &ring, &q.t, &k.t, &v.t, &o2.t, &l2.t, NULL) != FA_OK ||
        fa_ring_backward(&p, &ring, &q.t, &k.t, &v.t, &o1.t, &l1.t, &dout.t, &dq2.t, &dk2.t, &dv2.t,
                         NULL) != FA_OK) {
      test_fail("causal %d: a call failed: %s", causal, fa_last_error());
      continue;
    }
    const tu_tensor *pairs[][2] = {
        {&o1, &o2}, {&l1, &l2}, {&dq1, &dq2}, {&dk1, &dk2}, {&dv1, &dv2}};
    const char *names[] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; ++i) {
      const int64_t n = tu_numel(pairs[i][0]);
      if (memcmp(pairs[i][0]->buf, pairs[i][1]->buf, (size_t)n * 4) != 0)
        test_fail("causal %d: %s differs from the one-process call", causal, names[i]);
    }
  }
  tu_tensor *all[] = {&q, &k, &v, &dout, &o1, &l1, &o2, &l2, &dq1, &dk1, &dv1, &dq2, &dk2, &dv2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tu_free(all[i]);
  test_case_end();
}

typedef struct call {
  fa_params p;
  fa_ring_args ring;
  tu_tensor q, k, v, out, lse;
} call;

static void call_init(call *c, int64_t n) {
  const int64_t s[4] = {1, n, 2, 16}, sl[3] = {1, 2, n};
  fa_params_init(&c->p);
  c->ring = self_ring();
  tu_alloc(&c->q, FA_F32, 4, s, TU_CONTIGUOUS);
  tu_alloc(&c->k, FA_F32, 4, s, TU_CONTIGUOUS);
  tu_alloc(&c->v, FA_F32, 4, s, TU_CONTIGUOUS);
  tu_alloc(&c->out, FA_F32, 4, s, TU_CONTIGUOUS);
  tu_alloc(&c->lse, FA_F32, 3, sl, TU_CONTIGUOUS);
  tu_rng rng;
  tu_rng_init(&rng, 7);
  tu_fill_random(&c->q, &rng);
  tu_fill_random(&c->k, &rng);
  tu_fill_random(&c->v, &rng);
  tu_poison(&c->out);
  tu_poison(&c->lse);
}

static void call_free(call *c) {
  tu_free(&c->q);
  tu_free(&c->k);
  tu_free(&c->v);
  tu_free(&c->out);
  tu_free(&c->lse);
}

/* Runs the forward with c's arguments (ring NULL when null_ring) and checks the status, that the
   message names `names`, and that no output was written. */
static void expect(const char *what, call *c, int null_ring, fa_status want, const char *names) {
  fa_status st = fa_ring_forward(&c->p, null_ring ? NULL : &c->ring, &c->q.t, &c->k.t, &c->v.t,
                                 &c->out.t, &c->lse.t, NULL);
  if (st != want || !strstr(fa_last_error(), names))
    test_fail("%s: got %s \"%s\", want %s naming '%s'", what, fa_status_string(st), fa_last_error(),
              fa_status_string(want), names);
  if (tu_unchanged(&c->out, NULL, 0) != 1 || tu_unchanged(&c->lse, NULL, 0) != 1)
    test_fail("%s: an output was written", what);
}

static void refusals(void) {
  test_case_begin("refusals name the argument and write nothing");
  call c;
  int32_t cu[2] = {0, 8};
  fa_tensor cu_t = tu_view_bshd(cu, FA_I32, 1, 1, 1, 2);
  cu_t.ndim = 1; /* seqused_k [batch] */
  cu_t.shape[0] = 1;
  cu_t.strides[0] = 1;

  call_init(&c, 8);
  expect("NULL ring", &c, 1, FA_ERR_INVALID_ARGUMENT, "ring");
  c.ring.struct_size = 4;
  expect("ring.struct_size", &c, 0, FA_ERR_INVALID_ARGUMENT, "ring.struct_size");
  c.ring = self_ring();
  c.ring.transport = 9;
  expect("ring.transport", &c, 0, FA_ERR_INVALID_ARGUMENT, "ring.transport");
  c.ring.transport = FA_TRANSPORT_NCCL;
  expect("nccl", &c, 0, FA_ERR_UNSUPPORTED, "nccl");
  c.ring = self_ring();
  c.ring.layout = 5;
  expect("ring.layout", &c, 0, FA_ERR_INVALID_ARGUMENT, "ring.layout");
  c.ring = self_ring();
  c.ring.comm = &c;
  expect("a communicator for self", &c, 0, FA_ERR_INVALID_ARGUMENT, "ring.comm");
  c.ring = self_ring();
  c.ring.world = 2;
  c.ring.rank = 1;
  expect("ring.world", &c, 0, FA_ERR_INVALID_ARGUMENT, "ring.world");
  c.ring = self_ring();
  c.p.seqused_k = &cu_t;
  expect("seqused_k", &c, 0, FA_ERR_UNSUPPORTED, "params.seqused_k");
  fa_params_init(&c.p);
  char scratch[64];
  c.p.workspace = scratch;
  c.p.workspace_size = sizeof scratch;
  expect("workspace", &c, 0, FA_ERR_UNSUPPORTED, "params.workspace");
  fa_params_init(&c.p);
  /* The MPI transport in a process that has not initialised MPI (this one). */
  fa_transport_desc mpi[4];
  int32_t count = 0;
  for (int i = 0; i < 4; ++i) fa_transport_desc_init(&mpi[i]);
  fa_transport_info(mpi, 4, &count);
  for (int i = 0; i < count && i < 4; ++i) {
    if (mpi[i].kind != FA_TRANSPORT_MPI) continue;
    long not_a_comm = 0;
    c.ring.transport = FA_TRANSPORT_MPI;
    c.ring.comm = &not_a_comm;
    if (mpi[i].available)
      expect("MPI not initialised", &c, 0, FA_ERR_INVALID_ARGUMENT, "MPI is not initialised");
    else
      expect("MPI unavailable", &c, 0, FA_ERR_UNSUPPORTED, "ring.transport = mpi");
    c.ring.comm = NULL;
    if (mpi[i].available) expect("MPI with comm NULL", &c, 0, FA_ERR_INVALID_ARGUMENT, "ring.comm");
    c.ring = self_ring();
  }
  c.k.t.shape[3] = 8;
  expect("k's head_dim", &c, 0, FA_ERR_INVALID_ARGUMENT, "k.shape[3]");
  call_free(&c);

  call_init(&c, 7);
  c.ring.layout = FA_RING_ZIGZAG;
  expect("zig-zag with an odd length", &c, 0, FA_ERR_INVALID_ARGUMENT, "zig-zag");
  call_free(&c);

  call_init(&c, 8);
  c.k.t.shape[1] = 6;
  c.v.t.shape[1] = 6;
  c.p.causal = 1;
  expect("causal with unequal shards", &c, 0, FA_ERR_UNSUPPORTED, "k.shape[1]");
  c.p.causal = 0;
  c.p.window_enabled = 1;
  c.p.window_left = 2;
  c.p.window_right = 3;
  expect("a window with unequal shards", &c, 0, FA_ERR_UNSUPPORTED, "windowed");
  call_free(&c);
  test_case_end();
}

/* Empty shards are defined as for fa_forward: seqlen 0 succeeds and writes nothing. */
static void empty_shards(void) {
  test_case_begin("empty shards (seqlen 0, both layouts)");
  const int64_t s[4] = {1, 1, 2, 8}, sl[3] = {1, 2, 1};
  enum { Q, K, V, O, DO, DQ, DK, DV, N };
  tu_tensor t[N], lse;
  for (int i = 0; i < N; ++i) {
    tu_alloc(&t[i], FA_F32, 4, s, TU_CONTIGUOUS);
    t[i].t.shape[1] = 0;
  }
  tu_alloc(&lse, FA_F32, 3, sl, TU_CONTIGUOUS);
  lse.t.shape[2] = 0;
  for (int32_t layout = FA_RING_CONTIGUOUS; layout <= FA_RING_ZIGZAG; ++layout) {
    fa_ring_args ring = self_ring();
    ring.layout = layout;
    fa_params p;
    fa_params_init(&p);
    p.causal = layout;
    fa_status st = fa_ring_forward(&p, &ring, &t[Q].t, &t[K].t, &t[V].t, &t[O].t, &lse.t, NULL);
    if (st == FA_OK)
      st = fa_ring_backward(&p, &ring, &t[Q].t, &t[K].t, &t[V].t, &t[O].t, &lse.t, &t[DO].t,
                            &t[DQ].t, &t[DK].t, &t[DV].t, NULL);
    if (st != FA_OK)
      test_fail("layout %d: %s: %s", (int)layout, fa_status_string(st), fa_last_error());
  }
  for (int i = 0; i < N; ++i) tu_free(&t[i]);
  tu_free(&lse);
  test_case_end();
}

static int has_suffix(const char *s, const char *suffix) {
  const size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

typedef struct loaded_query {
  const char *name; /* a file name: "libfa_nccl.so", "libnccl.so" */
  int found;
} loaded_query;

static int match_loaded(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  loaded_query *q = data;
  const char *path = info->dlpi_name ? info->dlpi_name : "";
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strncmp(base, q->name, strlen(q->name)) == 0) q->found = 1;
  return 0;
}

/* Whether a library whose file name starts with name is loaded in this process. */
static int is_loaded(const char *name) {
  loaded_query q = {name, 0};
  dl_iterate_phdr(match_loaded, &q);
  return q.found;
}

/* A transport's plugin is loaded by the first call that names it: the self rings above load
   neither MPI's nor NCCL's. */
static void lazy_plugins(void) {
  test_case_begin("transports loaded when named");
  if (is_loaded("libfa_mpi.so") || is_loaded("libfa_nccl.so"))
    test_fail("self rings loaded a transport plugin (mpi %d, nccl %d)", is_loaded("libfa_mpi.so"),
              is_loaded("libfa_nccl.so"));
  test_case_end();
}

/* Without a CUDA device the NCCL plugin leaves libnccl unloaded (a PyTorch imported later then
   brings its own). */
static void nccl_without_device(const fa_transport_desc *d) {
  if (d->kind != FA_TRANSPORT_NCCL || d->available || !has_suffix(d->plugin_path, ".so")) return;
  if (strncmp(d->reason, "no CUDA device", 14) != 0) return;
  if (is_loaded("libnccl.so"))
    test_fail("nccl: unavailable (%s), yet libnccl is loaded", d->reason);
}

static void transport_info(void) {
  test_case_begin("fa_transport_info");
  fa_transport_desc d[4];
  for (int i = 0; i < 4; ++i) fa_transport_desc_init(&d[i]);
  int32_t count = 0;
  if (fa_transport_info(d, 4, &count) != FA_OK || count != 3) {
    test_fail("count %d: %s", (int)count, fa_last_error());
  } else {
    for (int i = 0; i < count; ++i) {
      if (d[i].available == (d[i].reason[0] != '\0'))
        test_fail("%s: available %d with reason '%s'", d[i].name, (int)d[i].available, d[i].reason);
      if (d[i].kind == FA_TRANSPORT_SELF && (!d[i].available || strcmp(d[i].name, "self")))
        test_fail("self is not available");
      if (d[i].kind == FA_TRANSPORT_NCCL && d[i].memory != FA_DEVICE_CUDA)
        test_fail("nccl carries %d memory", (int)d[i].memory);
      if (d[i].kind == FA_TRANSPORT_MPI || d[i].kind == FA_TRANSPORT_NCCL)
        printf("  %s: %s\n", d[i].name, d[i].available ? d[i].runtime : d[i].reason);
      nccl_without_device(&d[i]);
    }
  }
  d[0].struct_size = 8;
  if (fa_transport_info(d, 1, &count) != FA_ERR_INVALID_ARGUMENT ||
      !strstr(fa_last_error(), "struct_size"))
    test_fail("a short struct_size was not refused: %s", fa_last_error());
  if (fa_transport_info(NULL, 0, &count) != FA_OK || count != 3)
    test_fail("capacity 0 does not give the count");
  if (fa_transport_info(NULL, 1, &count) != FA_ERR_INVALID_ARGUMENT)
    test_fail("out NULL with capacity 1 was not refused");
  test_case_end();
}

int main(void) {
  uint64_t seed = tu_run_seed();
  printf("test_ring: seed 0x%llx (FA_TEST_SEED replays it)\n", (unsigned long long)seed);
  ring_cases(seed);
  bitwise_case(seed);
  lazy_plugins();
  refusals();
  empty_shards();
  transport_info();
  ring_plan_cases();
  return test_summary("test_ring");
}
