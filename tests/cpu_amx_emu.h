/*
 * cpu_amx_emu.h: a C model of the AMX tile instructions backends/cpu/cpu_amx.c uses, so that its
 * loops and data layout run (and are checked) on a CPU without AMX. Test builds only: cpu_amx.c
 * includes it instead of the intrinsics when CPU_AMX_EMULATE is defined.
 *
 * Written from Intel's documented semantics (SDM vol. 1 ch. 18 and vol. 2 LDTILECFG, TILELOADD,
 * TILESTORED, TILEZERO, TDPBF16PS, TILERELEASE), not from any other implementation:
 *   - palette 1: 8 tiles tmm0-7, each up to 16 rows of up to 64 bytes; LDTILECFG reads a 64-byte
 *     block {palette, start_row, 14 reserved zero bytes, colsb[16] (u16), rows[16] (u8)}, tiles
 *     8-15 must be unused (0) and every tile zeroed; palette 0 releases, like TILERELEASE.
 *   - TILELOADD t, [base + row * stride]: rows[t] rows of colsb[t] bytes; the rest of the tile
 *     becomes 0. TILESTORED writes rows[t] rows of colsb[t] bytes. TILEZERO zeroes.
 *   - TDPBF16PS c, a, b: C (fp32, M x N), A (M rows of K bf16 pairs), B (K rows of N bf16 pairs,
 *     the "VNNI" layout: row k holds, for each column n, the pair of reduction elements 2k and
 *     2k+1 of column n, the even one in the low 16 bits):
 *       C[m][n] += A[m].bf16[2k] * B[k].bf16[2n]; C[m][n] += A[m].bf16[2k+1] * B[k].bf16[2n+1]
 *     for k in order, each product exact in fp32, inputs' denormals read as 0 (DAZ), results'
 *     denormals flushed to 0 (FTZ), round to nearest even whatever MXCSR says. #UD unless
 *     A.colsb == 4 * B.rows, C.colsb == B.colsb, C.rows == A.rows, and the three tiles differ.
 * A fault (what would be #UD or #GP on the hardware: a tile used before LDTILECFG, bad shapes,
 * a bad configuration) prints the reason and aborts: this is a test model of a faulting
 * instruction, never part of the library. The tile state is per thread, as AMX's is.
 */
#ifndef FA_TESTS_CPU_AMX_EMU_H
#define FA_TESTS_CPU_AMX_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct amx_emu_state {
  int configured;
  uint16_t colsb[8];
  uint8_t rows[8];
  uint8_t data[8][16][64];
} amx_emu_state;

static _Thread_local amx_emu_state amx_emu;

static inline void amx_emu_fault(const char *what) {
  fprintf(stderr, "cpu_amx_emu: fault (the hardware would raise #UD/#GP): %s\n", what);
  abort();
}

static inline void amx_emu_check_tile(int t) {
  if (!amx_emu.configured) amx_emu_fault("tile instruction before LDTILECFG");
  if (t < 0 || t > 7) amx_emu_fault("tile number outside tmm0-7");
  if (amx_emu.rows[t] == 0 || amx_emu.colsb[t] == 0) amx_emu_fault("tile not configured");
}

static inline void amx_emu_loadconfig(const void *config) {
  const uint8_t *cfg = (const uint8_t *)config;
  memset(&amx_emu, 0, sizeof amx_emu);
  if (cfg[0] == 0) return; /* palette 0: the init state */
  if (cfg[0] != 1) amx_emu_fault("palette other than 1");
  for (int i = 2; i < 16; ++i)
    if (cfg[i] != 0) amx_emu_fault("reserved configuration bytes not zero");
  for (int t = 0; t < 16; ++t) {
    uint16_t colsb;
    memcpy(&colsb, cfg + 16 + 2 * t, sizeof colsb);
    const uint8_t rows = cfg[48 + t];
    if (t >= 8) {
      if (colsb || rows) amx_emu_fault("tile 8-15 configured in palette 1");
      continue;
    }
    if (colsb > 64 || rows > 16 || (colsb == 0) != (rows == 0))
      amx_emu_fault("tile shape beyond 16 rows x 64 bytes, or half configured");
    amx_emu.colsb[t] = colsb;
    amx_emu.rows[t] = rows;
  }
  amx_emu.configured = 1;
}

static inline void amx_emu_release(void) { memset(&amx_emu, 0, sizeof amx_emu); }

static inline void amx_emu_zero(int t) {
  amx_emu_check_tile(t);
  memset(amx_emu.data[t], 0, sizeof amx_emu.data[t]);
}

static inline void amx_emu_loadd(int t, const void *base, size_t stride) {
  amx_emu_check_tile(t);
  memset(amx_emu.data[t], 0, sizeof amx_emu.data[t]);
  for (int r = 0; r < amx_emu.rows[t]; ++r)
    memcpy(amx_emu.data[t][r], (const uint8_t *)base + (size_t)r * stride, amx_emu.colsb[t]);
}

static inline void amx_emu_stored(int t, void *base, size_t stride) {
  amx_emu_check_tile(t);
  for (int r = 0; r < amx_emu.rows[t]; ++r)
    memcpy((uint8_t *)base + (size_t)r * stride, amx_emu.data[t][r], amx_emu.colsb[t]);
}

/* bf16 (DAZ) to fp32, and an fp32 result with FTZ. */
static inline float amx_emu_bf16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, sizeof h);
  if ((h & 0x7f80u) == 0) h &= 0x8000u;
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline float amx_emu_ftz(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
  memcpy(&x, &bits, sizeof x);
  return x;
}

static inline void amx_emu_dpbf16ps(int c, int a, int b) {
  amx_emu_check_tile(c);
  amx_emu_check_tile(a);
  amx_emu_check_tile(b);
  if (c == a || c == b || a == b) amx_emu_fault("TDPBF16PS with a tile used twice");
  if (amx_emu.colsb[a] != 4 * amx_emu.rows[b] || amx_emu.colsb[c] != amx_emu.colsb[b] ||
      amx_emu.rows[c] != amx_emu.rows[a] || amx_emu.colsb[c] % 4 || amx_emu.colsb[a] % 4)
    amx_emu_fault("TDPBF16PS shapes do not match");
  const int M = amx_emu.rows[c], N = amx_emu.colsb[c] / 4, K = amx_emu.colsb[a] / 4;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float acc;
      memcpy(&acc, &amx_emu.data[c][m][4 * n], sizeof acc);
      for (int k = 0; k < K; ++k) {
        /* Separate statements with volatile: no contraction, one rounding per addition. */
        volatile float p0 =
            amx_emu_bf16(&amx_emu.data[a][m][4 * k]) * amx_emu_bf16(&amx_emu.data[b][k][4 * n]);
        acc = amx_emu_ftz(acc + p0);
        volatile float p1 = amx_emu_bf16(&amx_emu.data[a][m][4 * k + 2]) *
                            amx_emu_bf16(&amx_emu.data[b][k][4 * n + 2]);
        acc = amx_emu_ftz(acc + p1);
      }
      memcpy(&amx_emu.data[c][m][4 * n], &acc, sizeof acc);
    }
}

/* The names cpu_amx.c uses; the tile numbers are constants there, as the intrinsics need. */
#define amx_loadconfig(cfg) amx_emu_loadconfig(cfg)
#define amx_release() amx_emu_release()
#define amx_zero(t) amx_emu_zero(t)
#define amx_load(t, base, stride) amx_emu_loadd(t, base, (size_t)(stride))
#define amx_store(t, base, stride) amx_emu_stored(t, base, (size_t)(stride))
#define amx_dp(c, a, b) amx_emu_dpbf16ps(c, a, b)

#endif /* FA_TESTS_CPU_AMX_EMU_H */
