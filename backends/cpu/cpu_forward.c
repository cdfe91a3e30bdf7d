/*
 * cpu_forward.c: the FlashAttention forward pass on the CPU (fa_forward, and the attention of
 * fa_forward_kvcache).
 *
 * One task per (batch, query head, query tile), spread over the OpenMP team. A task keeps its
 * query tile and its running (m, l, O) in fp32 scratch and streams the key/value tiles its rows
 * can see: S = Q·Kᵀ, the score transform (softcap, ALiBi) when asked, the online-softmax step per
 * row, dropout on P, O = alpha·O + P·V; then O / l and the LSE.
 *
 * GQA decoding (pb->pack > 1): when all query rows of the heads sharing a KV head fit one tile,
 * they form one task, so each K/V tile is loaded and converted once for the whole group.
 *
 * fa_forward_kvcache with few query rows (pb->rows_path) keeps this task grid, its splits and
 * merge, and runs each task's key range through cpu_attend_rows (cpu_decode.c) instead of the
 * tile products: K and V read in place, no fp32 tiles.
 *
 * Split-KV (pb->splits > 1): each task's visible key tiles are cut into `splits` contiguous
 * chunks, each chunk a task of its own (so one long row range can occupy every core, as in
 * decoding); the chunks' (m, l, O) go to the workspace and a second loop merges them with
 * fa_softmax_merge in chunk order. Every task writes only its own rows or partials, so the result
 * does not depend on the number of threads or the order the tasks run in.
 */
#include <math.h>
#include <omp.h>

#include "core/math/mask.h"
#include "core/math/softmax.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"
#include "cpu_kv_share.h"
#include "cpu_tensor.h"

typedef struct fwd_scratch {
  float *q;  /* [tm][d]  the query tile */
  float *kt; /* [d][tn]  the key tile, transposed */
  float *v;  /* [tn][dv] the value tile */
  float *s;  /* [tm][tn] scores, then probabilities */
  float *o;  /* [tm][dv] running unnormalised output */
  float *m;  /* [tm]     running row max */
  float *l;  /* [tm]     running row sum */
  /* The bf16 products only (pb->bf16dp; kt and v then hold K and V as bf16 pairs): */
  uint32_t *qp; /* [tm][d/2]  the query tile as bf16 pairs */
  uint32_t *pp; /* [tm][pairs_ld] the probabilities as bf16 pairs (or their tiles) */
} fwd_scratch;

/* Words of one row of the probabilities' pairs (an odd tile width gets a padded last pair),
   rounded up to 64 bytes: AMX loads P by 64-byte rows, and rows across two cache lines made
   the P·V product 1.15-1.2x slower (16-core AMX host, 256 x 256 tiles, head dim 128). */
static int pairs_ld(const cpu_problem *pb) { return (pb->tn / 2 + 1 + 15) / 16 * 16; }

/* The one layout of a thread's scratch; with base NULL it only counts the bytes. */
static size_t fwd_carve(const cpu_problem *pb, char *base, fwd_scratch *sc) {
  size_t tm = (size_t)pb->tm, tn = (size_t)pb->tn, d = (size_t)pb->d, dv = (size_t)pb->dv;
  size_t at = 0;
  sc->q = cpu_scratch_take(base, &at, tm * d);
  sc->kt = cpu_scratch_take(base, &at, d * tn);
  sc->v = cpu_scratch_take(base, &at, tn * dv);
  sc->s = cpu_scratch_take(base, &at, tm * tn);
  sc->o = cpu_scratch_take(base, &at, tm * dv);
  sc->m = cpu_scratch_take(base, &at, tm);
  sc->l = cpu_scratch_take(base, &at, tm);
  sc->qp = sc->pp = NULL;
  if (pb->bf16dp) { /* 32-bit words, carved as floats */
    sc->qp = (uint32_t *)cpu_scratch_take(base, &at, tm * (d / 2));
    sc->pp = (uint32_t *)cpu_scratch_take(base, &at, tm * (size_t)pairs_ld(pb));
  }
  return at;
}

size_t cpu_forward_thread_bytes(const cpu_problem *pb) {
  fwd_scratch unused;
  return fwd_carve(pb, NULL, &unused);
}

size_t cpu_split_partial_floats(const cpu_problem *pb) {
  return (size_t)pb->tm * ((size_t)pb->dv + 2);
}

/* A running (m, l, O) of the tile's rows. */
typedef struct fwd_acc {
  float *o, *m, *l;
} fwd_acc;

/* The query rows of one task: rows [r0, r0 + mr) of the heads h0 .. h0 + heads - 1 (heads > 1
   only for packed GQA), stacked head by head: tile row s·mr + i is row r0 + i of head h0 + s.
   The heads share one KV head, so they share every K/V tile and, having the same rows, the mask;
   only the ALiBi slope and the dropout stream differ per head. */
typedef struct fwd_rows {
  int64_t h0, r0;
  int heads, mr;
} fwd_rows;

static int rows_total(const fwd_rows *rw) { return rw->heads * rw->mr; }

static void acc_reset(const fwd_acc *acc, int rows, int dv) {
  for (int i = 0; i < rows; ++i) {
    acc->m[i] = -INFINITY;
    acc->l[i] = 0.0f;
  }
  for (int64_t x = 0; x < (int64_t)rows * dv; ++x) acc->o[x] = 0.0f;
}

/* The task's query rows into sc->q, rotated for fa_forward_kvcache. */
static void load_queries(const fa_request *req, const cpu_problem *pb, const cpu_seq *sq,
                         const fwd_scratch *sc, const fwd_rows *rw) {
  const int d = pb->d;
  /* FlashAttention's convention: row t sits at cache_seqlens + t when the mask depends on the
     position (causal or windowed), else every row at cache_seqlens. */
  const int per_row = req->params->causal || req->params->window_enabled;
  for (int s = 0; s < rw->heads; ++s) {
    float *q = sc->q + (ptrdiff_t)s * rw->mr * d;
    cpu_load_tile(pb->kern, &sq->q, rw->r0, rw->mr, rw->h0 + s, d, q, d);
    if (pb->rotary_dim > 0)
      for (int i = 0; i < rw->mr; ++i)
        cpu_rotary_row(req, pb, q + (ptrdiff_t)i * d, sq->pos0 + (per_row ? rw->r0 + i : 0));
  }
}

/* The key tiles [*first, *last) any of the rows sees: both ends of a row's key range grow with
   the row (mask.h). */
static void visible_tiles(const cpu_problem *pb, const cpu_seq *sq, const fwd_rows *rw,
                          int64_t *first, int64_t *last) {
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(&sq->mask, rw->r0, sq->sk, &lo_first, &hi_first);
  fa_mask_key_range(&sq->mask, rw->r0 + rw->mr - 1, sq->sk, &lo_last, &hi_last);
  *first = lo_first / pb->tn;
  *last = hi_last > lo_first ? (hi_last + pb->tn - 1) / pb->tn : *first;
}

/* The keys [c0, c0 + nc) of KV head hk in the tiled pair layouts into k and v. */
static void pack_tiled_kv(const cpu_problem *pb, const cpu_kernels *kern, const cpu_seq *sq,
                          int64_t c0, int nc, int64_t hk, uint32_t *k, uint32_t *v) {
  cpu_load_tile_pairs_tiled(kern, &sq->k, c0, nc, hk, pb->d, k);
  cpu_load_tile_pairs_v_tiled(kern, &sq->v, c0, nc, hk, pb->dv, v);
}

/* The shared pass: key tile t of unit u packed into its slot (nothing past its sequence). */
static void pack_shared_tile(const fa_request *req, const cpu_problem *pb, const cpu_kernels *kern,
                             const cpu_kv_share *share, int64_t u, int64_t t) {
  cpu_seq sq;
  cpu_seq_init(req, pb, u / pb->heads_kv, &sq);
  const int64_t c0 = t * pb->tn;
  if (c0 >= sq.sk) return;
  uint32_t *k = cpu_kv_share_tile(share, u, t);
  pack_tiled_kv(pb, kern, &sq, c0, (int)(sq.sk - c0 < pb->tn ? sq.sk - c0 : pb->tn),
                u % pb->heads_kv, k, k + share->k_words);
}

/* Streams the key tiles [t0, t1) through the rows in sc->q into acc. */
static void attend(const cpu_problem *pb, const cpu_kernels *kern, const fwd_scratch *sc,
                   const cpu_seq *sq, const fwd_rows *rw, const cpu_kv_share *share, int64_t t0,
                   int64_t t1, const fwd_acc *acc) {
  if (pb->rows_path) { /* decoding: K and V read in place (cpu_decode.c) */
    cpu_attend_rows(pb, kern, sq, rw->h0, rw->heads, rw->r0, rw->mr, sc->q, sc->s, t0 * pb->tn,
                    t1 * pb->tn, acc->m, acc->l, acc->o);
    return;
  }
  const int tn = pb->tn, d = pb->d, dv = pb->dv, mr = rw->mr, rows = rows_total(rw);
  const int64_t hk = rw->h0 / pb->group, sk = sq->sk, r0 = rw->r0;
  int jlo[CPU_MAX_TILE_M], jhi[CPU_MAX_TILE_M];
  /* The tiled products cover rows and keys up to multiples of 32 (cpu_amx.h); the rows past
     `rows` are zeros in Q, so their scores are 0, and what lands in O's rows past `rows` is never
     read. */
  const int tiled = pb->pairs_tiled, rows32 = (int)cpu_round32(rows);
  if (tiled) /* exact: q is bf16 */
    kern->bf16_pairs_tiled(rows, rows32, d, sc->q, d, sc->qp, d / 32);
  else if (pb->bf16dp)
    kern->bf16_pairs(rows, d, sc->q, d, sc->qp, d / 2);
  for (int64_t c0 = t0 * tn; c0 < t1 * tn && c0 < sk; c0 += tn) {
    const int nc = (int)(sk - c0 < tn ? sk - c0 : tn);
    fa_tile_class cls = fa_mask_tile_class(&sq->mask, r0, r0 + mr, c0, c0 + nc, sk);
    if (cls == FA_TILE_EMPTY) continue;
    const uint32_t *vt = NULL; /* tiled: V's pairs */
    if (pb->bf16dp) {
      /* The scores differ from the backward pass's fp32 recomputation only in the order of
         additions (bf16 products are exact in fp32): within rounding, not bit for bit. */
      uint32_t *kp = (uint32_t *)sc->kt;
      if (tiled) {
        const uint32_t *kt;
        if (share->slots && c0 / tn < share->k_tiles) { /* packed by the shared pass */
          kt = cpu_kv_share_tile(share, sq->b * pb->heads_kv + hk, c0 / tn);
          vt = kt + share->k_words;
        } else {
          kt = kp;
          vt = (const uint32_t *)sc->v;
          pack_tiled_kv(pb, kern, sq, c0, nc, hk, kp, (uint32_t *)sc->v);
        }
        kern->gemm_bf16_tiled(rows32, (int)cpu_round32(nc), d / 2, sc->qp, kt, sc->s, tn, 0);
      } else {
        cpu_load_tile_pairs_t(kern, &sq->k, c0, nc, hk, d, kp, tn);
        kern->gemm_bf16(rows, nc, d / 2, sc->qp, d / 2, kp, tn, sc->s, tn, 0);
      }
    } else {
      /* The same product as the backward pass's recomputation, so both see identical scores (a
         dot-product form for few rows would sum in another order and break that). */
      cpu_load_tile_t(kern, &sq->k, c0, nc, hk, d, sc->kt, tn);
      kern->gemm(rows, nc, d, sc->q, d, 1, sc->kt, tn, sc->s, tn, 0);
      cpu_load_tile(pb->kern, &sq->v, c0, nc, hk, dv, sc->v, dv);
    }
    const int *lo = NULL, *hi = NULL;
    if (cls == FA_TILE_PARTIAL) {
      /* One head's bounds, repeated for every stacked head (same rows, same mask). */
      cpu_tile_row_bounds(sq, r0, mr, c0, nc, jlo, jhi);
      for (int x = mr; x < rows; ++x) {
        jlo[x] = jlo[x % mr];
        jhi[x] = jhi[x % mr];
      }
      lo = jlo;
      hi = jhi;
    }
    float scale = pb->scale;
    if (pb->transform) {
      for (int s = 0; s < rw->heads; ++s)
        cpu_score_tile(pb, sq, rw->h0 + s, r0, mr, c0, nc, sc->s + (ptrdiff_t)s * mr * tn, tn, lo,
                       hi, NULL);
      scale = 1.0f; /* the transform has scaled them */
    }
    if (pb->bf16dp && !pb->dropout) {
      /* P straight to bf16 pairs from the scores. */
      kern->softmax_pairs(rows, nc, sc->s, tn, scale, lo, hi, acc->m, acc->l, acc->o, dv, dv,
                          sc->pp, pairs_ld(pb), tiled ? (int)cpu_round32(nc) / 32 : 0);
    } else {
      kern->softmax_tile(rows, nc, sc->s, tn, scale, lo, hi, acc->m, acc->l, acc->o, dv, dv);
      /* l has summed the undropped probabilities (the LSE is dropout's undropped one); only the
         values' weights lose the dropped keys. */
      if (pb->dropout)
        for (int s = 0; s < rw->heads; ++s)
          cpu_dropout_tile(pb, sq, rw->h0 + s, r0, mr, c0, nc, sc->s + (ptrdiff_t)s * mr * tn, tn);
      if (pb->bf16dp) kern->bf16_pairs(rows, nc, sc->s, tn, sc->pp, pairs_ld(pb));
    }
    if (tiled) {
      kern->gemm_bf16_tiled(rows32, dv, (int)cpu_round32(nc) / 2, sc->pp, vt, acc->o, dv, 1);
    } else if (pb->bf16dp) { /* V interleaved by pairs of keys */
      uint32_t *vp = (uint32_t *)sc->v;
      cpu_load_tile_pairs_v(kern, &sq->v, c0, nc, hk, dv, vp);
      kern->gemm_bf16(rows, dv, (nc + 1) / 2, sc->pp, pairs_ld(pb), vp, dv, acc->o, dv, 1);
    } else {
      kern->gemm(rows, dv, nc, sc->s, tn, 1, sc->v, dv, acc->o, dv, 1);
    }
  }
}

/* Normalises and writes the task's rows, and their LSE. */
static void store_rows(const cpu_problem *pb, const cpu_seq *sq, const fwd_rows *rw,
                       const fwd_acc *acc) {
  const int dv = pb->dv;
  for (int x = 0; x < rows_total(rw); ++x) {
    const int64_t h = rw->h0 + x / rw->mr, row = rw->r0 + x % rw->mr;
    cpu_store_row(sq->out.dtype, sq->out.data, cpu_rows_off(&sq->out, row, h), sq->out.cs, dv,
                  acc->o + (ptrdiff_t)x * dv, fa_softmax_out_scale(acc->l[x]) * pb->drop_scale);
    if (sq->lse) *cpu_lse_ptr(sq, h, row) = fa_softmax_lse(acc->m[x], acc->l[x]);
  }
}

/* Task (b, head group hg, query tile): its sequence and rows; 0 when the sequence has no such
   rows (a shorter packed sequence has fewer query tiles). */
static int task_rows(const fa_request *req, const cpu_problem *pb, int64_t b, int64_t hg,
                     int64_t tile, cpu_seq *sq, fwd_rows *rw) {
  cpu_seq_init(req, pb, b, sq);
  rw->r0 = tile * pb->tm;
  if (rw->r0 >= sq->sq) return 0;
  rw->heads = (int)pb->pack;
  rw->h0 = hg * pb->pack;
  rw->mr = (int)(pb->pack > 1 ? sq->sq : (sq->sq - rw->r0 < pb->tm ? sq->sq - rw->r0 : pb->tm));
  return 1;
}

static void forward_task(const fa_request *req, const cpu_problem *pb, const cpu_kernels *kern,
                         const fwd_scratch *sc, const cpu_kv_share *share, int64_t b, int64_t hg,
                         int64_t tile) {
  cpu_seq sq;
  fwd_rows rw;
  if (!task_rows(req, pb, b, hg, tile, &sq, &rw)) return;
  fwd_acc acc = {sc->o, sc->m, sc->l};
  load_queries(req, pb, &sq, sc, &rw);
  acc_reset(&acc, rows_total(&rw), pb->dv);
  int64_t first, last;
  visible_tiles(pb, &sq, &rw, &first, &last);
  attend(pb, kern, sc, &sq, &rw, share, first, last, &acc);
  store_rows(pb, &sq, &rw, &acc);
}

/* Split-KV: the partial (m, l, O) of chunk c of the task (b, hg, tile), at its fixed place. */
static fwd_acc partial_at(const cpu_problem *pb, float *partials, int64_t b, int64_t hg,
                          int64_t tile, int c) {
  int64_t index = ((b * (pb->heads_q / pb->pack) + hg) * pb->q_tiles + tile) * pb->splits + c;
  float *base = partials + (size_t)index * cpu_split_partial_floats(pb);
  fwd_acc acc = {base, base + (size_t)pb->tm * (size_t)pb->dv,
                 base + (size_t)pb->tm * ((size_t)pb->dv + 1)};
  return acc;
}

static void chunk_task(const fa_request *req, const cpu_problem *pb, const cpu_kernels *kern,
                       const fwd_scratch *sc, const cpu_kv_share *share, float *partials, int64_t b,
                       int64_t hg, int64_t tile, int c) {
  cpu_seq sq;
  fwd_rows rw;
  if (!task_rows(req, pb, b, hg, tile, &sq, &rw)) return;
  fwd_acc acc = partial_at(pb, partials, b, hg, tile, c);
  acc_reset(&acc, rows_total(&rw), pb->dv);
  int64_t first, last, t0, t1;
  visible_tiles(pb, &sq, &rw, &first, &last);
  cpu_split_chunk(first, last, c, pb->splits, &t0, &t1);
  if (t0 >= t1) return; /* more chunks than tiles: this one stays empty (m = -inf, l = 0) */
  load_queries(req, pb, &sq, sc, &rw);
  attend(pb, kern, sc, &sq, &rw, share, t0, t1, &acc);
}

/* Merges the chunks of the task (b, hg, tile) in chunk order (a fixed order: deterministic). */
static void merge_task(const fa_request *req, const cpu_problem *pb, const fwd_scratch *sc,
                       float *partials, int64_t b, int64_t hg, int64_t tile) {
  cpu_seq sq;
  fwd_rows rw;
  if (!task_rows(req, pb, b, hg, tile, &sq, &rw)) return;
  const int rows = rows_total(&rw), dv = pb->dv;
  fwd_acc acc = {sc->o, sc->m, sc->l};
  acc_reset(&acc, rows, dv);
  for (int c = 0; c < pb->splits; ++c) {
    fwd_acc part = partial_at(pb, partials, b, hg, tile, c);
    for (int i = 0; i < rows; ++i) {
      float a1, a2;
      fa_softmax_merge(acc.m[i], acc.l[i], part.m[i], part.l[i], &acc.m[i], &acc.l[i], &a1, &a2);
      float *o = acc.o + (ptrdiff_t)i * dv;
      const float *po = part.o + (ptrdiff_t)i * dv;
      for (int x = 0; x < dv; ++x) o[x] = a1 * o[x] + a2 * po[x];
    }
  }
  store_rows(pb, &sq, &rw, &acc);
}

fa_status cpu_forward(const fa_request *req, const cpu_problem *pb, const cpu_workspace *ws) {
  const int64_t tiles = pb->q_tiles, heads = pb->heads_q / pb->pack;
  const int64_t units = pb->batch * heads; /* (batch, head group) pairs */
  const int64_t tasks = units * tiles;
  if (tasks == 0) return FA_OK;
  const int splits = pb->splits;
  const int64_t work = tasks * splits;
  const int team = cpu_team_size(ws, work);
  if (team < 1)
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: the workspace holds no per-thread scratch");
  if (splits > 1 && !ws->shared)
    return fa_core_set_error(FA_ERR_INTERNAL, "cpu: the workspace has no room for the splits");
  const cpu_kernels *kern = pb->kern;
  cpu_kv_share share;
  cpu_kv_share_init(&share, pb, cpu_kv_share_budget(), ws->kv_share);
  /* The (batch, head group) pairs run in chunks: with shared K/V tiles, those of `slots` KV
     heads at a time (sharing implies pack = 1: a KV head's pairs are its group of query heads,
     adjacent), each chunk's tiles packed first; else all of them in one. */
  const int64_t chunk = share.slots ? share.slots * pb->group : units;

#pragma omp parallel num_threads(team)
  {
    fwd_scratch sc;
    fwd_carve(pb, ws->threads_base + (size_t)omp_get_thread_num() * ws->thread_bytes, &sc);
    for (int64_t bh0 = 0; bh0 < units; bh0 += chunk) {
      const int64_t n = units - bh0 < chunk ? units - bh0 : chunk; /* pairs in this chunk */
      if (share.slots) { /* the chunk's K/V tiles, before any task reads them (the barrier) */
        const int64_t u0 = bh0 / pb->group, packs = n / pb->group * share.k_tiles;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < packs; ++i)
          pack_shared_tile(req, pb, kern, &share, u0 + i / share.k_tiles, i % share.k_tiles);
      }
      if (splits == 1) {
        /* Dynamic, one (batch, head group) after the other, and within it the last query tiles
           first: under a causal mask they see the most keys, so the long tasks start early and
           the short ones fill the gaps at the end. Head-major so that the threads stream the
           same head's K/V while it is still in their caches: in tile-major order (every head per
           query tile) several heads' K/V, megabytes at 4k keys, would pass through L2 between
           two tiles of one head, and the tiles' conversion would wait on K/V rows. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n * tiles; ++t) {
          const int64_t tile = tiles - 1 - t % tiles, bh = bh0 + t / tiles;
          forward_task(req, pb, kern, &sc, &share, bh / heads, bh % heads, tile);
        }
      } else {
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < n * tiles * splits; ++w) {
          const int64_t t = w / splits, tile = tiles - 1 - t / n, bh = bh0 + t % n;
          chunk_task(req, pb, kern, &sc, &share, ws->shared, bh / heads, bh % heads, tile,
                     (int)(w % splits));
        }
      }
    }
    /* The implicit barrier of the loops above: every chunk is done before any merge. */
    if (splits > 1) {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tasks; ++t)
        merge_task(req, pb, &sc, ws->shared, t / tiles / heads, t / tiles % heads, t % tiles);
    }
  }
  return FA_OK;
}
