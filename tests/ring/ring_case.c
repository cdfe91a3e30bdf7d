/*
 * ring_case.c: see ring_case.h.
 */
#include "ring_case.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_mem.h"
#include "reference.h"

const ring_extra ring_alibi_heads = {0, FA_CAUSAL_BOTTOM_RIGHT, 1, 0.0f};
const ring_extra ring_dropout = {0, FA_CAUSAL_BOTTOM_RIGHT, 0, 0.2f};
const ring_extra ring_alibi_batch_dropout = {0, FA_CAUSAL_BOTTOM_RIGHT, 2, 0.15f};

static void *g_stream;
static const ring_case *g_case;
static int g_rank;
static ring_result *g_res;

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void
fail(const char *fmt, ...) {
  ++g_res->failures;
  va_list ap;
  va_start(ap, fmt);
  printf("  [rank %d] %s: ", g_rank, g_case->name);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

/* The global position of local row i of a shard of n rows. */
void ring_case_set_stream(void *stream) { g_stream = stream; }

static int64_t global_row(int32_t layout, int rank, int world, int64_t n, int64_t i) {
  if (layout == FA_RING_CONTIGUOUS) return rank * n + i;
  const int64_t c = n / 2;
  return i < c ? rank * c + i : (2 * (int64_t)world - 1 - rank) * c + (i - c);
}

/* For each element of a local tensor of shape (seq dim `seq` of n rows), its flat index in the
   global tensor of the same shape with world * n rows. */
static int64_t *global_index(const int64_t *shape, int ndim, int seq, const ring_case *c, int rank,
                             int world, int64_t *count) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  int64_t *map = malloc((size_t)n * sizeof *map);
  if (!map) return NULL;
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t f = 0; f < n; ++f) {
    int64_t g = 0;
    for (int d = 0; d < ndim; ++d) {
      const int64_t extent = d == seq ? shape[d] * world : shape[d];
      const int64_t at = d == seq ? global_row(c->layout, rank, world, shape[d], idx[d]) : idx[d];
      g = g * extent + at;
    }
    map[f] = g;
    for (int d = ndim - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  *count = n;
  return map;
}

static void copy_shard(tu_tensor *local, const tu_tensor *global, const int64_t *map, int64_t n) {
  for (int64_t f = 0; f < n; ++f) tu_set_flat(local, f, tu_get_flat(global, map[f]));
}

/* Checks one output of this rank against the reference (pass rule) and the one-process result. */
static void check(int which, const tu_tensor *got_t, const ref_result *r64, const ref_result *rst,
                  const ref_problem *rp, const tu_tensor *one, const int64_t *map, int64_t n) {
  double *got = malloc((size_t)n * sizeof *got), *ref = malloc((size_t)n * sizeof *ref);
  double *naive = malloc((size_t)n * sizeof *naive), *mag = malloc((size_t)n * sizeof *mag);
  unsigned char *masked = malloc((size_t)n);
  unsigned char *gmask = ref_masked_map(rp, (ref_which)which);
  if (!got || !ref || !naive || !mag || !masked || !gmask) {
    fail("%s: out of memory", ref_which_name((ref_which)which));
  } else {
    tu_read_all(got_t, got);
    for (int64_t f = 0; f < n; ++f) {
      ref[f] = r64->t[which][map[f]];
      naive[f] = rst->t[which][map[f]];
      mag[f] = r64->mag[which] ? r64->mag[which][map[f]] : 0.0;
      masked[f] = gmask[map[f]];
    }
    ref_check chk;
    ref_check_values(got, n, ref, naive, r64->mag[which] ? mag : NULL, masked, g_case->dtype, &chk);
    g_res->err[which] = chk.max_err;
    g_res->tol[which] = chk.tol;
    if (!chk.pass)
      fail("%s: max error %.3g > tolerance %.3g at local element %lld (got %.6g, want %.6g) %s",
           ref_which_name((ref_which)which), chk.max_err, chk.tol, (long long)chk.worst,
           chk.worst_got, chk.worst_want, chk.why);
    double worst = 0.0;
    for (int64_t f = 0; f < n; ++f) {
      const double o = tu_get_flat(one, map[f]);
      if (got[f] == o) continue; /* equal infinities too */
      const double d = fabs(got[f] - o);
      if (!(d <= worst)) worst = d; /* NaN sticks */
    }
    g_res->vs_one[which] = worst;
    if (!(worst <= chk.tol))
      fail("%s: differs from the one-process result by %.3g > tolerance %.3g",
           ref_which_name((ref_which)which), worst, chk.tol);
  }
  free(got);
  free(ref);
  free(naive);
  free(mag);
  free(masked);
  free(gmask);
}

enum { Q, K, V, DO, O, LSE, DQ, DK, DV, N_T };

/* A host tensor's twin in a device's memory: the whole allocation (gaps too) and the same view. */
typedef struct mirror {
  void *p;
  fa_tensor t;
} mirror;

/* Makes m the twin of x on dev (NULL: m's view is x's own); 0 on failure (reported). */
static int mirror_to(mirror *m, const tu_tensor *x, const fa_device *dev) {
  m->p = NULL;
  m->t = x->t;
  if (!dev) return 1;
  char err[256];
  const size_t bytes = x->buf_elems * x->elem_bytes;
  if (devmem_alloc(*dev, bytes, &m->p, err, sizeof err) != 0 ||
      devmem_copy_to_device(*dev, m->p, x->buf, bytes, err, sizeof err) != 0) {
    fail("device memory: %s", err);
    return 0;
  }
  m->t.data = (unsigned char *)m->p + ((unsigned char *)x->t.data - x->buf);
  m->t.device = *dev;
  return 1;
}

/* Copies m's twin back into x (after the calls that wrote it); 0 on failure (reported). */
static int mirror_back(const mirror *m, tu_tensor *x, const fa_device *dev) {
  if (!dev) return 1;
  char err[256];
  if (devmem_sync(*dev, err, sizeof err) != 0 ||
      devmem_copy_to_host(*dev, x->buf, m->p, x->buf_elems * x->elem_bytes, err, sizeof err) != 0) {
    fail("device memory: %s", err);
    return 0;
  }
  return 1;
}

static void mirror_free(mirror *m, const fa_device *dev) {
  char err[256];
  if (dev && m->p) devmem_free(*dev, m->p, err, sizeof err);
  m->p = NULL;
}

void ring_case_run(const ring_case *c, uint64_t seed, const fa_ring_args *comm, int rank, int world,
                   ring_result *res) {
  ring_case_run_on(c, seed, comm, rank, world, NULL, res);
}

void ring_case_run_on(const ring_case *c, uint64_t seed, const fa_ring_args *comm, int rank,
                      int world, const fa_device *dev, ring_result *res) {
  memset(res, 0, sizeof *res);
  fa_ring_args shard_ring = *comm;
  shard_ring.layout = c->layout;
  const fa_ring_args *ring = &shard_ring;
  g_case = c;
  g_rank = rank;
  g_res = res;
  const ring_extra none = {0, 0, 0, 0.0f};
  const ring_extra *x = c->extra ? c->extra : &none;
  const int64_t b = c->batch, n = c->seqlen, nk = x->seqlen_k ? x->seqlen_k : n;
  const int64_t S = n * world, Sk = nk * world;
  const int64_t hq = c->heads_q, hkv = c->heads_kv, d = c->head_dim, dv = c->head_dim_v;
  const int64_t shapes[N_T][4] = {{b, n, hq, d},  {b, nk, hkv, d}, {b, nk, hkv, dv},
                                  {b, n, hq, dv}, {b, n, hq, dv},  {b, hq, n, 0},
                                  {b, n, hq, d},  {b, nk, hkv, d}, {b, nk, hkv, dv}};
  /* ALiBi slopes, the same on every rank: drawn from the case's seed alone. */
  float slopes[64];
  double slopes64[64];
  const int64_t nslopes = x->alibi == 2 ? b * hq : hq;
  tu_tensor alibi;
  memset(&alibi, 0, sizeof alibi);
  tu_tensor g[N_T], l[N_T], again;
  memset(g, 0, sizeof g);
  memset(l, 0, sizeof l);
  memset(&again, 0, sizeof again);
  int64_t *map[N_T] = {NULL};
  int64_t count[N_T] = {0};
  ref_result r64, rst;
  memset(&r64, 0, sizeof r64);
  memset(&rst, 0, sizeof rst);
  mirror gd[N_T], ld[N_T], again_d;
  memset(gd, 0, sizeof gd);
  memset(ld, 0, sizeof ld);
  memset(&again_d, 0, sizeof again_d);
  int ok = 1;
  for (int i = 0; i < N_T && ok; ++i) {
    const int nd = i == LSE ? 3 : 4, seq = i == LSE ? 2 : 1;
    int64_t gs[4];
    memcpy(gs, shapes[i], sizeof gs);
    gs[seq] *= world;
    const fa_dtype dt = i == LSE ? FA_F32 : c->dtype;
    ok = tu_alloc(&g[i], dt, nd, gs, TU_CONTIGUOUS) == 0 &&
         tu_alloc(&l[i], dt, nd, shapes[i], c->shards) == 0 &&
         (map[i] = global_index(shapes[i], nd, seq, c, rank, world, &count[i])) != NULL;
  }
  ok = ok && tu_alloc(&again, c->dtype, 4, shapes[O], c->shards) == 0;
  if (x->alibi) {
    const int64_t ashape[2] = {x->alibi == 2 ? b : hq, hq};
    ok = ok && nslopes <= 64 &&
         tu_alloc(&alibi, FA_F32, x->alibi == 2 ? 2 : 1, x->alibi == 2 ? ashape : ashape + 1,
                  TU_CONTIGUOUS) == 0;
  }
  if (!ok) {
    fail("out of memory");
    goto done;
  }
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(seed, c->name));
  for (int64_t i = 0; x->alibi && i < nslopes; ++i) {
    /* slopes of 2^-1 .. 2^-6 as ALiBi's geometric ones, jittered */
    slopes[i] = ldexpf(1.0f + 0.5f * (float)tu_rng_uniform(&rng), -1 - (int)(i % 6));
    slopes64[i] = slopes[i];
    tu_set_flat(&alibi, i, slopes[i]);
  }
  for (int i = Q; i <= DO; ++i) {
    tu_fill_random(&g[i], &rng);
    copy_shard(&l[i], &g[i], map[i], count[i]);
  }
  for (int i = O; i < N_T; ++i) tu_poison(&l[i]);

  fa_params p;
  fa_params_init(&p);
  p.causal = c->causal;
  p.deterministic = 1;
  p.window_enabled = c->window;
  p.window_left = c->window_left;
  p.window_right = c->window_right;
  p.causal_align = x->causal_align;
  p.alibi_slopes = x->alibi ? &alibi.t : NULL;
  p.dropout_p = x->dropout_p;
  p.dropout_seed = tu_seed_for(seed, "dropout");
  p.dropout_offset = 3;
  for (int i = 0; i < N_T; ++i)
    if (!mirror_to(&gd[i], &g[i], dev) || !mirror_to(&ld[i], &l[i], dev)) goto done;
  if (!mirror_to(&again_d, &again, dev)) goto done;
  if (fa_forward(&p, &gd[Q].t, &gd[K].t, &gd[V].t, &gd[O].t, &gd[LSE].t, NULL) != FA_OK ||
      fa_backward(&p, &gd[Q].t, &gd[K].t, &gd[V].t, &gd[O].t, &gd[LSE].t, &gd[DO].t, &gd[DQ].t,
                  &gd[DK].t, &gd[DV].t, NULL) != FA_OK) {
    fail("one-process call failed: %s", fa_last_error());
    goto done;
  }
  for (int i = O; i < N_T; ++i)
    if (!mirror_back(&gd[i], &g[i], dev)) goto done;
  ref_problem rp = {
      b, S, Sk, hq, hkv, d, dv, ref_resolve_scale(0.0f, d), c->causal, x->causal_align};
  ref_ext rx;
  memset(&rx, 0, sizeof rx);
  rx.window = c->window;
  rx.window_left = c->window_left;
  rx.window_right = c->window_right;
  rx.alibi = x->alibi ? slopes64 : NULL;
  rx.alibi_per_batch = x->alibi == 2;
  rx.dropout_p = x->dropout_p;
  rx.dropout_seed = p.dropout_seed;
  rx.dropout_offset = p.dropout_offset;
  if (ref_attention_ext(&rp, &rx, REF_F64, &g[Q], &g[K], &g[V], &g[DO], &r64, 1) != 0 ||
      ref_attention_ext(&rp, &rx, REF_STORAGE, &g[Q], &g[K], &g[V], &g[DO], &rst, 1) != 0) {
    fail("reference: out of memory");
    goto done;
  }

  /* The copies to the device are done before a ring call on another stream reads them. */
  char err[256];
  if (dev && devmem_sync(*dev, err, sizeof err) != 0) {
    fail("devmem_sync: %s", err);
    goto done;
  }
  p.stream = g_stream;
  fa_status st =
      fa_ring_forward(&p, ring, &ld[Q].t, &ld[K].t, &ld[V].t, &ld[O].t, &ld[LSE].t, NULL);
  if (st != FA_OK) {
    fail("fa_ring_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  st = fa_ring_backward(&p, ring, &ld[Q].t, &ld[K].t, &ld[V].t, &ld[O].t, &ld[LSE].t, &ld[DO].t,
                        &ld[DQ].t, &ld[DK].t, &ld[DV].t, NULL);
  if (st != FA_OK) {
    fail("fa_ring_backward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  for (int i = O; i < N_T; ++i)
    if (!mirror_back(&ld[i], &l[i], dev)) goto done;
  for (int i = O; i < N_T; ++i) {
    char msg[160];
    if (tu_gaps_intact(&l[i], msg, sizeof msg) != 1)
      fail("a gap of an output was written: %s", msg);
  }
  const int which_of[N_T] = {-1, -1, -1, -1, REF_OUT, REF_LSE, REF_DQ, REF_DK, REF_DV};
  for (int i = O; i < N_T; ++i) check(which_of[i], &l[i], &r64, &rst, &rp, &g[i], map[i], count[i]);

  /* The ring's order of summation is fixed: a second run gives the same bits. */
  st = fa_ring_forward(&p, ring, &ld[Q].t, &ld[K].t, &ld[V].t, &again_d.t, NULL, NULL);
  if (st != FA_OK)
    fail("second fa_ring_forward: %s: %s", fa_status_string(st), fa_last_error());
  else if (mirror_back(&again_d, &again, dev))
    for (int64_t f = 0; f < count[O]; ++f)
      if (tu_get_flat(&again, f) != tu_get_flat(&l[O], f) &&
          !(isnan(tu_get_flat(&again, f)) && isnan(tu_get_flat(&l[O], f)))) {
        fail("out differs between two runs at local element %lld", (long long)f);
        break;
      }
done:
  for (int i = 0; i < N_T; ++i) {
    mirror_free(&gd[i], dev);
    mirror_free(&ld[i], dev);
  }
  mirror_free(&again_d, dev);
  for (int i = 0; i < N_T; ++i) {
    tu_free(&g[i]);
    tu_free(&l[i]);
    free(map[i]);
  }
  tu_free(&again);
  tu_free(&alibi);
  ref_result_free(&r64);
  ref_result_free(&rst);
}
