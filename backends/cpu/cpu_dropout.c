/*
 * cpu_dropout.c: the dropout mask of core/math/philox.h on a tile. The mask is never stored: the
 * forward and the backward pass each regenerate it from (seed, offset, batch·heads_q + head, row,
 * key), so both passes and every backend agree on it.
 */
#include "core/math/philox.h"
#include "cpu_internal.h"

/* keep[j] for keys c0 .. c0 + nc - 1 of one row: one Philox call per four keys (a call yields
   the draws of the four keys sharing col / 4, as fa_dropout_keep reads them). */
static void row_keep(const cpu_problem *pb, uint64_t bh, int64_t row, int64_t c0, int nc,
                     unsigned char *keep) {
  fa_philox4 draws = {{0, 0, 0, 0}};
  uint64_t group = UINT64_MAX;
  for (int j = 0; j < nc; ++j) {
    uint64_t col = (uint64_t)(c0 + j);
    if (col >> 2 != group) {
      draws = fa_dropout_draws(pb->drop_seed, pb->drop_offset, bh, (uint64_t)row, col);
      group = col >> 2;
    }
    keep[j] = draws.v[col & 3u] >= pb->drop_thr;
  }
}

/* Each row's keep mask over the tile: as_factors 0 zeroes the dropped elements of x, 1 writes the
   factors Z = keep / (1 - p) into x. */
static void dropout_rows(const cpu_problem *pb, const cpu_seq *sq, int64_t h, int64_t r0, int mr,
                         int64_t c0, int nc, float *x, ptrdiff_t ld, int as_factors) {
  unsigned char keep[CPU_MAX_TILE_N];
  const uint64_t bh = (uint64_t)(sq->b * pb->heads_q + h);
  /* A ring block draws at its rows' and keys' positions in the whole sequence. */
  const int64_t row0 = pb->pos_q0 + r0, col0 = pb->pos_k0 + c0;
  for (int i = 0; i < mr; ++i) {
    row_keep(pb, bh, row0 + i, col0, nc, keep);
    float *row = x + i * ld;
    for (int j = 0; j < nc; ++j)
      if (as_factors)
        row[j] = keep[j] ? pb->drop_scale : 0.0f;
      else if (!keep[j])
        row[j] = 0.0f;
  }
}

void cpu_dropout_tile(const cpu_problem *pb, const cpu_seq *sq, int64_t h, int64_t r0, int mr,
                      int64_t c0, int nc, float *s, ptrdiff_t lds) {
  dropout_rows(pb, sq, h, r0, mr, c0, nc, s, lds, 0);
}

void cpu_dropout_factors(const cpu_problem *pb, const cpu_seq *sq, int64_t h, int64_t r0, int mr,
                         int64_t c0, int nc, float *z, ptrdiff_t ldz) {
  dropout_rows(pb, sq, h, r0, mr, c0, nc, z, ldz, 1);
}
