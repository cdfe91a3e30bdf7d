/*
 * philox.h: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
 * the counter-based generator behind dropout, so that every backend draws the same mask.
 *
 * Dropout convention (fixed here, used by every backend and by the tests' reference):
 *   key     = {lo32(seed), hi32(seed)}
 *   counter = {col / 4, row, lo32(bh + offset), hi32(bh + offset)}, bh = batch_index * heads_q +
 * head the draw for (row, col) is word col % 4 of philox(counter, key); the element is kept when
 *   draw >= fa_dropout_threshold(p) and then scaled by 1 / (1 - p).
 * row and col are the query row and key column within their sequence. Calls that must not share
 * masks should use offsets at least batch * heads_q apart.
 */
#ifndef FA_CORE_PHILOX_H
#define FA_CORE_PHILOX_H

/* OpenCL C has no standard headers: its prelude defines the fixed-width types. */
#ifndef FA_OPENCL_C
#include <stdint.h>
#endif

#include "host_device.h"

typedef struct fa_philox4 {
  uint32_t v[4];
} fa_philox4;

FA_HOST_DEVICE uint32_t fa_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

FA_HOST_DEVICE fa_philox4 fa_philox4x32_10(fa_philox4 ctr, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = fa_mulhilo32(0xD2511F53u, ctr.v[0], &hi0);
    uint32_t lo1 = fa_mulhilo32(0xCD9E8D57u, ctr.v[2], &hi1);
    fa_philox4 next;
    next.v[0] = hi1 ^ ctr.v[1] ^ key0;
    next.v[1] = lo1;
    next.v[2] = hi0 ^ ctr.v[3] ^ key1;
    next.v[3] = lo0;
    ctr = next;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return ctr;
}

/* Draws at or above this value are kept; p = 0 keeps everything. In double: OpenCL C has it only
   with cl_khr_fp64, and a program of a device without it (which no OpenCL dropout needs) goes
   without this function. */
#if !defined(FA_OPENCL_C) || defined(cl_khr_fp64)
FA_HOST_DEVICE uint32_t fa_dropout_threshold(float p) {
  double t = (double)p * 4294967296.0;
  if (t <= 0.0) return 0u;
  if (t >= 4294967295.0) return 4294967295u;
  return (uint32_t)t;
}
#endif

/* The four draws for columns [col & ~3, (col & ~3) + 4) of one row. */
FA_HOST_DEVICE fa_philox4 fa_dropout_draws(uint64_t seed, uint64_t offset, uint64_t bh,
                                           uint64_t row, uint64_t col) {
  uint64_t stream = bh + offset;
  fa_philox4 ctr;
  ctr.v[0] = (uint32_t)(col >> 2);
  ctr.v[1] = (uint32_t)row;
  ctr.v[2] = (uint32_t)stream;
  ctr.v[3] = (uint32_t)(stream >> 32);
  return fa_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* 1 when element (bh, row, col) is kept by dropout with threshold thr. */
FA_HOST_DEVICE int fa_dropout_keep(uint64_t seed, uint64_t offset, uint64_t bh, uint64_t row,
                                   uint64_t col, uint32_t thr) {
  fa_philox4 d = fa_dropout_draws(seed, offset, bh, row, col);
  return d.v[col & 3u] >= thr;
}

#endif /* FA_CORE_PHILOX_H */
