/*
 * mask.h: the one definition of which keys a query row sees (FA_HOST_DEVICE: host and device code).
 *
 * Row i of a sequence with seqlen_q rows over seqlen_k keys is aligned to key column
 * i + shift, where shift = seqlen_k - seqlen_q for bottom-right alignment (the default, as
 * FlashAttention >= 2.1) and 0 for top-left. Causal keeps keys j <= i + shift. A sliding window
 * keeps i + shift - left <= j <= i + shift + right (bounds inclusive; -1 = unbounded side).
 * Causal with a window is the window with right = 0. Every mask here keeps one contiguous key
 * range per row, so a backend needs only fa_mask_key_range and fa_mask_tile_class.
 */
#ifndef FA_CORE_MASK_H
#define FA_CORE_MASK_H

/* OpenCL C has no standard headers: its prelude defines the fixed-width types. */
#ifndef FA_OPENCL_C
#include <stdint.h>
#endif

#include "host_device.h"

typedef struct fa_mask {
  int64_t shift; /* diagonal offset: row i sits at key column i + shift */
  int64_t left;  /* keys left of the diagonal a row sees; -1: unbounded */
  int64_t right; /* keys right of the diagonal a row sees; -1: unbounded */
} fa_mask;

/* causal_align: 0 bottom-right, 1 top-left (fa_causal_align). */
FA_HOST_DEVICE fa_mask fa_mask_make(int32_t causal, int32_t causal_align, int32_t window_enabled,
                                    int64_t window_left, int64_t window_right, int64_t seqlen_q,
                                    int64_t seqlen_k) {
  fa_mask m;
  m.shift = causal_align == 1 ? 0 : seqlen_k - seqlen_q;
  m.left = -1;
  m.right = -1;
  if (window_enabled) {
    m.left = window_left < 0 ? -1 : window_left;
    m.right = window_right < 0 ? -1 : window_right;
  }
  if (causal && (m.right < 0 || m.right > 0)) m.right = 0;
  return m;
}

/* Keys row i sees: [*lo, *hi) within [0, seqlen_k); empty when *lo >= *hi. */
FA_HOST_DEVICE void fa_mask_key_range(const fa_mask *m, int64_t i, int64_t seqlen_k, int64_t *lo,
                                      int64_t *hi) {
  int64_t diag = i + m->shift;
  int64_t a = 0, b = seqlen_k;
  if (m->left >= 0 && diag - m->left > a) a = diag - m->left;
  if (m->right >= 0 && diag + m->right + 1 < b) b = diag + m->right + 1;
  *lo = a;
  *hi = b < a ? a : b;
}

FA_HOST_DEVICE int fa_mask_allows(const fa_mask *m, int64_t i, int64_t j, int64_t seqlen_k) {
  int64_t lo, hi;
  fa_mask_key_range(m, i, seqlen_k, &lo, &hi);
  return j >= lo && j < hi;
}

/*
 * Rows of [0, seqlen_q) that see at least one key of [c0, c1) (0 <= c0 < c1 <= seqlen_k): [*r0,
 * *r1), empty when *r0 >= *r1. A backward pass that owns a key tile visits exactly these query
 * rows. Row i sees [max(0, i+shift-left), min(seqlen_k, i+shift+right+1)); with both bounds
 * non-decreasing in i, the rows form one range.
 */
FA_HOST_DEVICE void fa_mask_row_range(const fa_mask *m, int64_t c0, int64_t c1, int64_t seqlen_q,
                                      int64_t *r0, int64_t *r1) {
  int64_t a = 0, b = seqlen_q;
  if (m->right >= 0 && c0 - m->shift - m->right > a) a = c0 - m->shift - m->right;
  if (m->left >= 0 && c1 - m->shift + m->left < b) b = c1 - m->shift + m->left;
  *r0 = a;
  *r1 = b < a ? a : b;
}

/*
 * Rows of [0, seqlen_q) that see every key of [c0, c1) (0 <= c0 < c1): [*r0, *r1), empty when
 * *r0 >= *r1 (always when c1 > seqlen_k). Row i sees all of them when its range starts at or
 * before c0 (i + shift - left <= c0) and ends at or after c1 (i + shift + right + 1 >= c1); both
 * bounds are monotone in i, so the rows form one range. A kernel that walks many query tiles
 * against one key tile computes it once: a tile of rows [m0, m1) needs no mask when
 * *r0 <= m0 and m1 <= *r1, two comparisons instead of fa_mask_tile_class's 64-bit work per tile.
 */
FA_HOST_DEVICE void fa_mask_full_rows(const fa_mask *m, int64_t c0, int64_t c1, int64_t seqlen_q,
                                      int64_t seqlen_k, int64_t *r0, int64_t *r1) {
  int64_t a = 0, b = c1 > seqlen_k ? 0 : seqlen_q;
  if (m->right >= 0 && c1 - 1 - m->shift - m->right > a) a = c1 - 1 - m->shift - m->right;
  if (m->left >= 0 && c0 - m->shift + m->left + 1 < b) b = c0 - m->shift + m->left + 1;
  *r0 = a;
  *r1 = b < a ? a : b;
}

typedef enum fa_tile_class {
  FA_TILE_EMPTY = 0,   /* no (row, key) pair of the tile is kept: skip it */
  FA_TILE_PARTIAL = 1, /* some pairs kept: apply the mask per element */
  FA_TILE_FULL = 2     /* every pair kept: no masking needed */
} fa_tile_class;

/* The classification from the key ranges of the tile's first row [lo_first, hi_first) and last
   row [lo_last, hi_last), for kernels that compute those once and test many key tiles. */
FA_HOST_DEVICE fa_tile_class fa_mask_tile_class_from_ranges(int64_t lo_first, int64_t hi_first,
                                                            int64_t lo_last, int64_t hi_last,
                                                            int64_t c0, int64_t c1) {
  if (hi_last <= c0 || lo_first >= c1) return FA_TILE_EMPTY;
  if (lo_last <= c0 && hi_first >= c1) return FA_TILE_FULL;
  return FA_TILE_PARTIAL;
}

/* Classifies the tile rows [r0, r1) x keys [c0, c1) (both non-empty, keys within seqlen_k). */
FA_HOST_DEVICE fa_tile_class fa_mask_tile_class(const fa_mask *m, int64_t r0, int64_t r1,
                                                int64_t c0, int64_t c1, int64_t seqlen_k) {
  /* Both ends of a row's key range are non-decreasing in the row, so the first and the last row
     bound every row of the tile: lo/hi of row r0 are the smallest, those of row r1-1 the largest.
   */
  int64_t lo_first, hi_first, lo_last, hi_last;
  fa_mask_key_range(m, r0, seqlen_k, &lo_first, &hi_first);
  fa_mask_key_range(m, r1 - 1, seqlen_k, &lo_last, &hi_last);
  return fa_mask_tile_class_from_ranges(lo_first, hi_first, lo_last, hi_last, c0, c1);
}

#endif /* FA_CORE_MASK_H */
