/*
 * ring_plan_check.c: the blocks a ring step computes (core/ring_plan.c, compiled into test_ring)
 * against the mask of the whole sequence, exhaustively: both layouts, worlds 1-4, every rank and
 * every shard it holds, causal or not, sliding windows of many widths (unbounded sides included),
 * with and without dropout (whose blocks are chunk pairs at known global positions), K/V shards
 * longer than the queries' where the mask allows it. Every (local query, shard key) pair must be
 * seen by exactly one block when the global mask shows it and by none when it hides it (a key seen
 * twice would be summed twice); with dropout, every block's rows and keys must sit at the global
 * positions its call is given.
 */
#include <stdio.h>

#include "core/ring.h"
#include "harness.h"
#include "ring_plan_check.h"

/* The global position of local row i of rank r's shard of n tokens. */
static int64_t global_pos(int32_t layout, int32_t r, int32_t world, int64_t n, int64_t i) {
  if (layout == FA_RING_CONTIGUOUS) return r * n + i;
  const int64_t c = n / 2;
  return i < c ? r * c + i : (2 * (int64_t)world - 1 - r) * c + (i - c);
}

/* Whether block b shows key j of row i (both local), under the block's own mask. */
static int block_shows(const fa_params *p, const fa_ring_block *b, int64_t i, int64_t j) {
  if (i < b->q_row0 || i >= b->q_row0 + b->q_rows || j < b->k_row0 || j >= b->k_row0 + b->k_rows)
    return 0;
  const fa_params bp = fa_ring_block_params(p, b);
  const int64_t bi = i - b->q_row0, bj = j - b->k_row0;
  const int64_t shift = bp.causal_align == FA_CAUSAL_TOP_LEFT ? 0 : b->k_rows - b->q_rows;
  int64_t left = -1, right = -1;
  if (bp.window_enabled) left = bp.window_left, right = bp.window_right;
  if (bp.causal && right != 0) right = 0;
  if (left >= 0 && bj < bi + shift - left) return 0;
  if (right >= 0 && bj > bi + shift + right) return 0;
  return 1;
}

/* With positions, whether block b's rows and keys sit at global positions gq and gk. */
static int block_at(const fa_ring_block *b, int64_t i, int64_t j, int64_t gq, int64_t gk) {
  if (i < b->q_row0 || i >= b->q_row0 + b->q_rows || j < b->k_row0 || j >= b->k_row0 + b->k_rows)
    return 1;
  return b->q_pos + (i - b->q_row0) == gq && b->k_pos + (j - b->k_row0) == gk;
}

void ring_plan_cases(void) {
  test_case_begin(
      "ring plan: every key seen by exactly one block (layouts, worlds, windows, dropout)");
  static const int64_t windows[][2] = {{-1, -1}, {0, 0},  {3, -1}, {-1, 4}, {5, 0},
                                       {9, 2},   {16, 7}, {37, 0}, {2, 30}, {100, 100}};
  long pairs = 0, fails = 0;
  for (int32_t layout = 0; layout <= 1; ++layout)
    for (int32_t world = 1; world <= 4; ++world)
      for (int64_t n = 6; n <= 10; n += 4)
        for (int causal = 0; causal <= 1; ++causal)
          for (int w = -1; w < (int)(sizeof windows / sizeof windows[0]); ++w)
            for (int positioned = 0; positioned <= 1; ++positioned)
              for (int64_t nk = n; nk <= n + 4; nk += 2) {
                /* unequal lengths only where the ring takes them: no causal mask, no window */
                if (nk != n && (causal || w >= 0)) continue;
                fa_params p;
                fa_params_init(&p);
                p.causal = causal;
                p.dropout_p = positioned ? 0.1f : 0.0f;
                if (w >= 0) {
                  p.window_enabled = 1;
                  p.window_left = windows[w][0];
                  p.window_right = windows[w][1];
                }
                int64_t wl = w >= 0 ? windows[w][0] : -1, wr = w >= 0 ? windows[w][1] : -1;
                if (causal && wr != 0) wr = 0;
                for (int32_t rank = 0; rank < world; ++rank)
                  for (int32_t src = 0; src < world; ++src) {
                    fa_ring_step step;
                    fa_ring_plan_step(&p, layout, rank, src, world, n, nk, &step);
                    if (step.n < 0 || step.n > FA_RING_MAX_BLOCKS) {
                      test_fail("%d blocks", (int)step.n);
                      continue;
                    }
                    for (int64_t i = 0; i < n; ++i)
                      for (int64_t j = 0; j < nk; ++j) {
                        const int64_t gq = global_pos(layout, rank, world, n, i);
                        const int64_t gk = global_pos(layout, src, world, nk, j);
                        const int want = (wl < 0 || gk >= gq - wl) && (wr < 0 || gk <= gq + wr);
                        int seen = 0, placed = 1;
                        for (int32_t b = 0; b < step.n; ++b) {
                          seen += block_shows(&p, &step.b[b], i, j);
                          if (positioned) placed &= block_at(&step.b[b], i, j, gq, gk);
                        }
                        ++pairs;
                        if ((seen != want || !placed) && fails++ < 5)
                          test_fail(
                              "layout %d world %d n %lld/%lld causal %d window %lld/%lld dropout "
                              "%d "
                              "rank %d shard %d: row %lld key %lld seen by %d blocks, want %d%s",
                              (int)layout, (int)world, (long long)n, (long long)nk, causal,
                              (long long)(w >= 0 ? windows[w][0] : -2),
                              (long long)(w >= 0 ? windows[w][1] : -2), positioned, (int)rank,
                              (int)src, (long long)i, (long long)j, seen, want,
                              placed ? "" : "; a block's positions are wrong");
                      }
                  }
              }
  printf("  %ld (query, key) pairs checked\n", pairs);
  test_case_end();
}
