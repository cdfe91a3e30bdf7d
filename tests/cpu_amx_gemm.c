/*
 * cpu_amx_gemm.c: the AMX tile product (backends/cpu/cpu_amx.c, compiled in with CPU_AMX_EMULATE)
 * on tests/cpu_amx_emu.h's C model of the tile instructions, outside the forward pass.
 *
 * 1. The model itself on a worked example of TDPBF16PS's documented pair layout: A row m holds
 *    pairs (a[2k], a[2k+1]), B row k holds for column n the pair (b[2k][n], b[2k+1][n]); the
 *    expected sums are written out by hand, so a model that paired the wrong halves fails.
 * 2. cpu_gemm_bf16_amx against a float64 product for every shape class of its blocking: rows,
 *    columns and pairs below, at and past one tile (16) and one block (32), C = A·B and C += A·B,
 *    operands with row strides wider than the shapes (the words past them poisoned with NaN: a
 *    product that read them would show it), and C's words outside the shape left as they were.
 * 3. cpu_gemm_bf16_amx_tiled on the same operands laid out as tiles: bitwise the row-major
 *    product's C, for 32-multiples of rows and columns and 16-multiples of pairs, C = and C +=.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/dtype.h"
#include "cpu_amx.h"
#include "cpu_amx_emu.h"
#include "tensor_util.h"

static int fails;

static uint32_t pair(float lo, float hi) {
  return (uint32_t)fa_f32_to_bf16(lo) | (uint32_t)fa_f32_to_bf16(hi) << 16;
}

static float lo_of(uint32_t w) { return fa_bf16_to_f32((uint16_t)(w & 0xffffu)); }
static float hi_of(uint32_t w) { return fa_bf16_to_f32((uint16_t)(w >> 16)); }

/* 1 x 2 output, K = 2 pairs: C[0][n] = sum over k of a[2k]·b[2k][n] + a[2k+1]·b[2k+1][n]. */
static void worked_example(void) {
  struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  cfg.rows[0] = 1, cfg.colsb[0] = 8; /* C: 1 row, 2 fp32 */
  cfg.rows[1] = 1, cfg.colsb[1] = 8; /* A: 1 row, 2 pairs (a0..a3) */
  cfg.rows[2] = 2, cfg.colsb[2] = 8; /* B: 2 pair rows, 2 columns */
  const uint32_t a[2] = {pair(1, 2), pair(3, 4)};
  /* b[r][n] for reduction index r = 0..3: column 0 = (10, 20, 30, 40), column 1 = (1, 0, 0, 1) */
  const uint32_t b[2][2] = {{pair(10, 20), pair(1, 0)}, {pair(30, 40), pair(0, 1)}};
  const float c0[2] = {0.5f, -1.0f};
  float c[2];
  amx_loadconfig(&cfg);
  amx_load(0, c0, 8);
  amx_load(1, a, 8);
  amx_load(2, b, 8);
  amx_dp(0, 1, 2);
  amx_store(0, c, 8);
  amx_release();
  /* column 0: 0.5 + 1·10 + 2·20 + 3·30 + 4·40 = 300.5; column 1: -1 + 1·1 + 4·1 = 4 */
  const int ok = c[0] == 300.5f && c[1] == 4.0f;
  printf("%s the model's TDPBF16PS on a worked example: %g %g (want 300.5 4)\n",
         ok ? "ok  " : "FAIL", c[0], c[1]);
  if (!ok) ++fails;
}

static void product(int m, int n, int k2, int accumulate, tu_rng *rng) {
  const int lda = k2 + 3, ldb = n + 5, ldc = n + 2;
  uint32_t *a = malloc(sizeof *a * (size_t)m * (size_t)lda);
  uint32_t *b = malloc(sizeof *b * (size_t)k2 * (size_t)ldb);
  float *c = malloc(sizeof *c * (size_t)m * (size_t)ldc);
  float *c_in = malloc(sizeof *c_in * (size_t)m * (size_t)ldc);
  if (!a || !b || !c || !c_in) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  const uint32_t nan_pair = 0x7fc17fc1u;
  for (int i = 0; i < m * lda; ++i)
    a[i] = i % lda < k2 ? pair((float)tu_rng_normal(rng), (float)tu_rng_normal(rng)) : nan_pair;
  for (int i = 0; i < k2 * ldb; ++i)
    b[i] = i % ldb < n ? pair((float)tu_rng_normal(rng), (float)tu_rng_normal(rng)) : nan_pair;
  for (int i = 0; i < m * ldc; ++i)
    c_in[i] = i % ldc < n ? (float)tu_rng_normal(rng) : 12345.0f; /* outside: must stay */
  memcpy(c, c_in, sizeof *c * (size_t)m * (size_t)ldc);
  cpu_gemm_bf16_amx(m, n, k2, a, lda, b, ldb, c, ldc, accumulate);
  double worst = 0.0;
  int outside = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = accumulate ? c_in[i * ldc + j] : 0.0, mag = fabs(ref);
      for (int p = 0; p < k2; ++p) {
        const uint32_t x = a[i * lda + p], y = b[p * ldb + j];
        ref += (double)lo_of(x) * lo_of(y) + (double)hi_of(x) * hi_of(y);
        mag += fabs((double)lo_of(x) * lo_of(y)) + fabs((double)hi_of(x) * hi_of(y));
      }
      /* fp32 accumulation of exact products: at most (2·k2 + 1) roundings of the running sum */
      const double err = fabs(c[i * ldc + j] - ref) / ((2.0 * k2 + 2.0) * 0x1p-24 * mag + 1e-30);
      if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err;
    }
    for (int j = n; j < ldc; ++j) outside |= c[i * ldc + j] != 12345.0f;
  }
  const int ok = worst <= 1.0 && !outside;
  if (!ok) ++fails;
  printf("%s m %d n %d k2 %d %s: error %.3f of the bound%s\n", ok ? "ok  " : "FAIL", m, n, k2,
         accumulate ? "C +=" : "C =", worst, outside ? ", wrote outside C" : "");
  free(a), free(b), free(c), free(c_in);
}

/* cpu_gemm_bf16_amx_tiled on the same operands laid out as tiles (m, n multiples of 32, k2 of
   16): the same TDPBF16PS sequence per output tile as the row-major product, so the same bits. */
static void tiled_product(int m, int n, int k2, int accumulate, tu_rng *rng) {
  const int kt = k2 / 16;
  uint32_t *a = malloc(sizeof *a * (size_t)m * (size_t)k2);
  uint32_t *b = malloc(sizeof *b * (size_t)k2 * (size_t)n);
  uint32_t *at = malloc(sizeof *at * (size_t)m * (size_t)k2);
  uint32_t *bt = malloc(sizeof *bt * (size_t)k2 * (size_t)n);
  float *c = malloc(sizeof *c * (size_t)m * (size_t)n);
  float *ct = malloc(sizeof *ct * (size_t)m * (size_t)n);
  if (!a || !b || !at || !bt || !c || !ct) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (int i = 0; i < m * k2; ++i)
    a[i] = pair((float)tu_rng_normal(rng), (float)tu_rng_normal(rng));
  for (int i = 0; i < k2 * n; ++i)
    b[i] = pair((float)tu_rng_normal(rng), (float)tu_rng_normal(rng));
  for (int i = 0; i < m * n; ++i) c[i] = ct[i] = (float)tu_rng_normal(rng);
  for (int i = 0; i < m; ++i) /* A's tile (i / 16, p / 16), row i % 16 */
    for (int p = 0; p < k2; ++p)
      at[((i / 16) * kt + p / 16) * 256 + (i % 16) * 16 + p % 16] = a[i * k2 + p];
  for (int p = 0; p < k2; ++p) /* B's tile (p / 16, j / 16) at (j / 16) * kt + p / 16 */
    for (int j = 0; j < n; ++j)
      bt[((j / 16) * kt + p / 16) * 256 + (p % 16) * 16 + j % 16] = b[p * n + j];
  cpu_gemm_bf16_amx(m, n, k2, a, k2, b, n, c, n, accumulate);
  cpu_gemm_bf16_amx_tiled(m, n, k2, at, bt, ct, n, accumulate);
  const int ok = memcmp(c, ct, sizeof *c * (size_t)m * (size_t)n) == 0;
  if (!ok) ++fails;
  printf("%s tiled m %d n %d k2 %d %s: %s the row-major product\n", ok ? "ok  " : "FAIL", m, n, k2,
         accumulate ? "C +=" : "C =", ok ? "bitwise equal to" : "differs from");
  free(a), free(b), free(at), free(bt), free(c), free(ct);
}

int main(void) {
  worked_example();
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), "cpu_amx_gemm"));
  static const int sizes[] = {1, 15, 16, 17, 31, 32, 33, 48, 70};
  static const int pairs[] = {1, 7, 16, 17, 32, 40};
  for (int x = 0; x < 9; ++x)
    for (int y = 0; y < 9; y += 2)
      for (int z = 0; z < 6; ++z) product(sizes[x], sizes[y], pairs[z], (x + y + z) % 2, &rng);
  static const int blocks[] = {32, 64, 96};
  for (int x = 0; x < 3; ++x)
    for (int y = 0; y < 3; ++y)
      for (int z = 1; z <= 4; z *= 2)
        tiled_product(blocks[x], blocks[y], 16 * z, (x + y + z) % 2, &rng);
  printf("cpu_amx_gemm: %d failed (seed %llu)\n", fails, (unsigned long long)tu_run_seed());
  return fails ? 1 : 0;
}
