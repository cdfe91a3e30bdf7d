/*
 * cpu_decode.c: the few-query-rows path of fa_forward_kvcache (decoding): the attention of one
 * task's rows over a key range, with K and V read in place by the row kernels of cpu_rows.c.
 *
 * A task here holds every query head of its sequence (cpu_problem_init packs them all: rows =
 * heads_q x seqlen_q, head by head), and walks its key range in blocks of ROWS_BLOCK tokens; in
 * each block, KV head by KV head, the query heads sharing it (GQA) use each K/V row once. So a
 * thread reads a block's tokens whole, all KV heads, front to back: with the cache's [batch,
 * seqlen, heads, dim] layout that is contiguous memory. Within a block each head's rows are
 * slices a token row apart, which the hardware prefetchers do not follow across pages: the slice
 * PREFETCH_AHEAD steps ahead in (block, KV head) order is asked for by the row kernels, key by
 * key as they use the current one (cpu_rows_prefetch). A task per head would read one head_dim
 * slice of every token over the whole cache, with nothing to prefetch it. Threads share the work
 * by split-KV (cpu_decide.c chooses the splits), merged in cpu_forward.c.
 *
 * MHA with one query row per head (group 1, seqlen_q 1) shares no K/V row between query rows: on
 * a head-major cache ([heads, keys, dim] in memory) it goes head by head over the whole key range
 * (head_major_rows, a head's rows one stream), and on the token-major one it reads each block
 * token-major (block_token_major): the scores key by key with each key's heads in address order,
 * then the softmax step head by head, then P·V key by key the same way. Each of K's and V's blocks
 * is then one front-to-back run of whole token rows, where head by head reads each head's 64
 * slices a token row apart; the row kernels ask for a later key's row head by head as they go.
 *
 * Per block and KV head it is the tile path's attend() (cpu_forward.c) with the two tile products
 * replaced: the same mask classification, score transform (softcap, ALiBi) and online-softmax
 * step (the kernel build's softmax_tile). What it leaves out is the work that only pays with many
 * rows: the per-tile conversion of K and V to fp32 scratch, K's transposition, and 4-row
 * micro-kernels running one row.
 */
#include "core/math/dtype.h"
#include "core/math/mask.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"

/* Tokens per block: a block's scores (rows x 64) and, per KV head, its K/V rows (64 x 128 x 2 x 2
   bytes = 32 KiB for bf16 at head dim 128) stay in L1/L2 between the two products, and the
   per-block costs (the softmax step's lane reductions, the row addresses) are spread over 64 keys.
   Smaller blocks measure slower, 128 no faster. */
#define ROWS_BLOCK 64

/* How far ahead, in (block, KV head) steps, the row kernels prefetch. Spread over the current
   step's keys, the requests leave while the FMAs run; a whole slice asked for at once (512 lines
   at hd128) stalled the core until it arrived: GQA 32:8 past the last-level cache read 16-21 GB/s
   that way and 29-34 this way (2 threads, hd128 f16/bf16; hd64 batch 4 1.3-1.7x). 2, 3, 4 and 6
   steps measured alike, 1 step less at hd64. */
#define PREFETCH_AHEAD 2

/* How far ahead, in bytes of token rows, the token-major MHA path prefetches: the next key's row
   at 32 heads of hd128 (8 KiB), two keys at hd64. Asked for head by head beside the head computed,
   A/B in alternation (2 threads, hd128, f16 and bf16): 1.2-1.5x at 4k-32k keys, where the
   hardware prefetchers alone left the core waiting on misses and the whole row asked for at once
   was 0.8x; 4 or 8 keys ahead measured like 1; at hd64 within the noise. */
#define TOKEN_PREFETCH_BYTES 8192

/* The 64-byte lines a row of n elements of size bytes spans. */
static int row_lines(int n, int64_t size) { return (int)((n * size + 63) / 64); }

static int elem_kind(fa_dtype dtype) {
  return dtype == FA_F16 ? CPU_ELEM_F16 : (dtype == FA_BF16 ? CPU_ELEM_BF16 : CPU_ELEM_F32);
}

/* The block's token rows of KV head 0 (dense, packed or through the page table), once per block:
   head hk's row is hk * hs elements further (cpu_rows_off is linear in the head). */
typedef struct block_rows {
  const char *k[ROWS_BLOCK], *v[ROWS_BLOCK];
} block_rows;

/* One block's keys [c0, c0 + nc) through the query heads [ha, hb) of KV head hk; their rows start
   at row (ha - h0) * mr of q, s, m, l and o. */

static void block_kv_head(const cpu_problem *pb, const cpu_kernels *kern, const cpu_seq *sq,
                          const block_rows *br, int64_t hk, int64_t ha, int64_t hb, int64_t h0,
                          int64_t r0, int mr, int64_t c0, int nc, int nb, const int *lo,
                          const int *hi, const float *q, float *s, float *m, float *l, float *o,
                          const cpu_rows_prefetch *pfk, const cpu_rows_prefetch *pfv) {
  const int d = pb->d, dv = pb->dv, rows = (int)(hb - ha) * mr;
  const ptrdiff_t x0 = (ptrdiff_t)(ha - h0) * mr;
  const int64_t kh = hk * sq->k.hs * (int64_t)fa_dtype_size(sq->k.dtype);
  const int64_t vh = hk * sq->v.hs * (int64_t)fa_dtype_size(sq->v.dtype);
  const void *krow[ROWS_BLOCK], *vrow[ROWS_BLOCK];
  for (int j = 0; j < nc; ++j) {
    krow[j] = br->k[j] + kh;
    vrow[j] = br->v[j] + vh;
  }
  s += x0 * nb;
  kern->dot_rows(rows, nc, d, q + x0 * d, d, elem_kind(sq->k.dtype), krow, s, nb, pfk);
  for (int64_t h = ha; h < hb; ++h) {
    const ptrdiff_t x = (ptrdiff_t)(h - ha) * mr;
    float scale = pb->scale;
    if (pb->transform) {
      cpu_score_tile(pb, sq, h, r0, mr, c0, nc, s + x * nb, nb, lo, hi, NULL);
      scale = 1.0f; /* the transform has scaled them */
    }
    /* Leaves the unnormalised probabilities in s, 0 where masked, and rescales o. */
    kern->softmax_tile(mr, nc, s + x * nb, nb, scale, lo, hi, m + x0 + x, l + x0 + x,
                       o + (x0 + x) * dv, dv, dv);
  }
  kern->pv_rows(rows, nc, dv, s, nb, elem_kind(sq->v.dtype), vrow, o + x0 * dv, dv, pfv);
}

/* One block's keys [c0, c0 + nc) through the heads [h0, h0 + heads), MHA with one query row per
   head (row x of q, s, m, l and o is head h0 + x): the scores of every head key by key, each
   key's heads in address order (one contiguous token row), the softmax step head by head, then
   P·V key by key the same way. In address order because the prefetchers then see one stream per
   block and tensor: hd128 16k-32k keys 31-32 -> 35-37 GB/s. While the kernels use key j's row
   they ask for the row TOKEN_PREFETCH_BYTES ahead (from the next block past the last key; next
   NULL: none left), head by head beside the head they compute. */
static void block_token_major(const cpu_problem *pb, const cpu_kernels *kern, const cpu_seq *sq,
                              block_rows *br, const block_rows *next, int64_t h0, int heads,
                              int64_t r0, int64_t c0, int nc, int nb, const int *lo, const int *hi,
                              const float *q, float *s, float *m, float *l, float *o) {
  const int d = pb->d, dv = pb->dv;
  const int64_t ksz = (int64_t)fa_dtype_size(sq->k.dtype),
                vsz = (int64_t)fa_dtype_size(sq->v.dtype);
  const int64_t kstride = sq->k.hs * ksz, vstride = sq->v.hs * vsz;
  const char *kn[ROWS_BLOCK], *vn[ROWS_BLOCK]; /* key j + ahead's rows, from head h0 */
  for (int j = 0; j < nc; ++j) {
    br->k[j] += h0 * kstride;
    br->v[j] += h0 * vstride;
  }
  /* Keys ahead: TOKEN_PREFETCH_BYTES of token rows, at least one; one where the heads share a
     row (a broadcast input's head stride of 0) or a row is longer. */
  int64_t row_bytes;
  if (__builtin_mul_overflow((int64_t)heads, kstride, &row_bytes)) row_bytes = INT64_MAX;
  const int ahead = row_bytes <= 0 || row_bytes >= TOKEN_PREFETCH_BYTES
                        ? 1
                        : (int)((TOKEN_PREFETCH_BYTES + row_bytes - 1) / row_bytes);
  for (int j = 0; j < nc; ++j) {
    const int t = j + ahead;
    if (t < nc) {
      kn[j] = br->k[t];
      vn[j] = br->v[t];
    } else if (next && t - nc < ROWS_BLOCK) {
      kn[j] = next->k[t - nc] + h0 * kstride;
      vn[j] = next->v[t - nc] + h0 * vstride;
    } else { /* none left: the current rows again, already on their way */
      kn[j] = br->k[j];
      vn[j] = br->v[j];
    }
  }
  const cpu_rows_prefetch pk = {kn, 0, row_lines(d, ksz)}, pv = {vn, 0, row_lines(dv, vsz)};
  kern->dot_heads(heads, nc, d, q, d, elem_kind(sq->k.dtype), (const void *const *)br->k, kstride,
                  s, nb, &pk);
  for (int x = 0; x < heads; ++x) {
    float scale = pb->scale;
    if (pb->transform) {
      cpu_score_tile(pb, sq, h0 + x, r0, 1, c0, nc, s + (ptrdiff_t)x * nb, nb, lo, hi, NULL);
      scale = 1.0f; /* the transform has scaled them */
    }
    kern->softmax_tile(1, nc, s + (ptrdiff_t)x * nb, nb, scale, lo, hi, m + x, l + x,
                       o + (ptrdiff_t)x * dv, dv, dv);
  }
  kern->pv_heads(heads, nc, dv, s, nb, elem_kind(sq->v.dtype), (const void *const *)br->v, vstride,
                 o, dv, &pv);
}

/* The rows of block [c0, c0 + nc) into br; a short block repeats its last row up to ROWS_BLOCK, so
   that a prefetch of any key j < ROWS_BLOCK has an address in the cache. */
static void block_rows_of(const cpu_seq *sq, int64_t c0, int nc, int64_t ksz, int64_t vsz,
                          block_rows *br) {
  for (int j = 0; j < ROWS_BLOCK; ++j) {
    const int64_t c = c0 + (j < nc ? j : nc - 1);
    br->k[j] = (const char *)sq->k.data + cpu_rows_off(&sq->k, c, 0) * ksz;
    br->v[j] = (const char *)sq->v.data + cpu_rows_off(&sq->v, c, 0) * vsz;
  }
}

/* The mask's class of keys [c0, c0 + nc) for the rows [r0, r0 + mr); where it is partial, the
   rows' bounds (the same for every head) in jlo/jhi, *lo and *hi pointing at them (else NULL). */
static fa_tile_class block_class(const cpu_seq *sq, int64_t r0, int mr, int64_t c0, int nc,
                                 int *jlo, int *jhi, const int **lo, const int **hi) {
  const fa_tile_class cls = fa_mask_tile_class(&sq->mask, r0, r0 + mr, c0, c0 + nc, sq->sk);
  *lo = *hi = NULL;
  if (cls == FA_TILE_PARTIAL) {
    cpu_tile_row_bounds(sq, r0, mr, c0, nc, jlo, jhi);
    *lo = jlo;
    *hi = jhi;
  }
  return cls;
}

/* cpu_attend_rows for MHA with one query row per head on a head-major cache (each head's rows
   adjacent: [heads, keys, dim] in memory): head by head over the whole key range, so that each
   head's K and V are two front-to-back streams, rather than block by block, where a block's heads
   are as many streams (64 at 32 heads, K and V) as the prefetchers would have to follow: hd128
   f16, 2 threads, 4k / 32k keys 1.27-1.37x / 1.14-1.16x, 16k unchanged. The row kernels ask for
   the next block's rows (this head's, or the next head's first) key by key as they go: f16
   1.3-1.8x at 4k keys, 1.1-1.4x at 16k-32k (bf16 1.25-1.6x, 1.0-1.15x); two or four blocks ahead
   measured alike. GQA keeps the block order and its prefetch (head by head without it measured
   2x slower past the last-level cache). */
static void head_major_rows(const cpu_problem *pb, const cpu_kernels *kern, const cpu_seq *sq,
                            int64_t h0, int heads, int64_t r0, const float *q, float *s, int64_t k0,
                            int64_t k1, float *m, float *l, float *o) {
  const int nb = pb->tn < ROWS_BLOCK ? pb->tn : ROWS_BLOCK;
  const int64_t ksz = (int64_t)fa_dtype_size(sq->k.dtype),
                vsz = (int64_t)fa_dtype_size(sq->v.dtype);
  const int klines = row_lines(pb->d, ksz), vlines = row_lines(pb->dv, vsz);
  int jlo[1], jhi[1];
  block_rows rows[2];
  int cur = 0;
  if (k0 >= k1) return;
  block_rows_of(sq, k0, (int)(k1 - k0 < nb ? k1 - k0 : nb), ksz, vsz, &rows[0]);
  for (int64_t h = h0; h < h0 + heads; ++h)
    for (int64_t c0 = k0; c0 < k1; c0 += nb, cur ^= 1) {
      const int nc = (int)(k1 - c0 < nb ? k1 - c0 : nb);
      /* The next block of this head, or the next head's first */
      const int64_t c1 = c0 + nb < k1 ? c0 + nb : k0, th = c0 + nb < k1 ? h : h + 1;
      block_rows_of(sq, c1, (int)(k1 - c1 < nb ? k1 - c1 : nb), ksz, vsz, &rows[cur ^ 1]);
      const cpu_rows_prefetch pk = {(const char *const *)rows[cur ^ 1].k, th * sq->k.hs * ksz,
                                    klines};
      const cpu_rows_prefetch pv = {(const char *const *)rows[cur ^ 1].v, th * sq->v.hs * vsz,
                                    vlines};
      const int ahead = th < h0 + heads;
      const int *lo, *hi;
      if (block_class(sq, r0, 1, c0, nc, jlo, jhi, &lo, &hi) == FA_TILE_EMPTY) continue;
      block_kv_head(pb, kern, sq, &rows[cur], h, h, h + 1, h0, r0, 1, c0, nc, nb, lo, hi, q, s, m,
                    l, o, ahead ? &pk : NULL, ahead ? &pv : NULL);
    }
}

void cpu_attend_rows(const cpu_problem *pb, const cpu_kernels *kern, const cpu_seq *sq, int64_t h0,
                     int heads, int64_t r0, int mr, const float *q, float *s, int64_t k0,
                     int64_t k1, float *m, float *l, float *o) {
  const int nb = pb->tn < ROWS_BLOCK ? pb->tn : ROWS_BLOCK; /* s holds tm x tn floats */
  const int64_t group = pb->group, hk0 = h0 / group, hk1 = (h0 + heads - 1) / group + 1;
  const int64_t nh = hk1 - hk0;
  int jlo[CPU_ROWS_MAX], jhi[CPU_ROWS_MAX]; /* mr <= CPU_ROWS_MAX */
  const int64_t ksz = (int64_t)fa_dtype_size(sq->k.dtype),
                vsz = (int64_t)fa_dtype_size(sq->v.dtype);
  const int klines = row_lines(pb->d, ksz), vlines = row_lines(pb->dv, vsz);
  block_rows rows[2]; /* this block's and the next one's */
  int cur = 0;
  /* MHA with one query row per head: the block read token by token (block_token_major). */
  const int token_major = group == 1 && mr == 1;
  if (k1 > sq->sk) k1 = sq->sk;
  if (token_major && nh > 1 && !sq->k.pages && !sq->v.pages && sq->k.hs > sq->k.rs &&
      sq->v.hs > sq->v.rs) {
    head_major_rows(pb, kern, sq, h0, heads, r0, q, s, k0, k1, m, l, o);
    return;
  }
  if (k0 < k1) block_rows_of(sq, k0, (int)(k1 - k0 < nb ? k1 - k0 : nb), ksz, vsz, &rows[0]);
  for (int64_t c0 = k0; c0 < k1; c0 += nb, cur ^= 1) {
    const int nc = (int)(k1 - c0 < nb ? k1 - c0 : nb);
    const int64_t c1 = c0 + nb;
    if (c1 < k1)
      block_rows_of(sq, c1, (int)(k1 - c1 < nb ? k1 - c1 : nb), ksz, vsz, &rows[cur ^ 1]);
    const int *lo, *hi;
    if (block_class(sq, r0, mr, c0, nc, jlo, jhi, &lo, &hi) == FA_TILE_EMPTY) continue;
    if (token_major) {
      block_token_major(pb, kern, sq, &rows[cur], c1 < k1 ? &rows[cur ^ 1] : NULL, h0, heads, r0,
                        c0, nc, nb, lo, hi, q, s, m, l, o);
      continue;
    }
    for (int64_t hk = hk0; hk < hk1; ++hk) {
      const int64_t ha = hk * group > h0 ? hk * group : h0;
      const int64_t hb = (hk + 1) * group < h0 + heads ? (hk + 1) * group : h0 + heads;
      /* The slice PREFETCH_AHEAD steps ahead in (block, KV head) order, in this block or the
         next; none past the task's keys. */
      const int64_t t = hk - hk0 + PREFETCH_AHEAD;
      const block_rows *tb = t < nh ? &rows[cur] : (c1 < k1 && t < 2 * nh ? &rows[cur ^ 1] : NULL);
      const int64_t th = hk0 + (t < nh ? t : t - nh);
      cpu_rows_prefetch pk, pv;
      if (tb) {
        pk = (cpu_rows_prefetch){(const char *const *)tb->k, th * sq->k.hs * ksz, klines};
        pv = (cpu_rows_prefetch){(const char *const *)tb->v, th * sq->v.hs * vsz, vlines};
      }
      block_kv_head(pb, kern, sq, &rows[cur], hk, ha, hb, h0, r0, mr, c0, nc, nb, lo, hi, q, s, m,
                    l, o, tb ? &pk : NULL, tb ? &pv : NULL);
    }
  }
}
