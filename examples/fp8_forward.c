/*
 * fp8_forward.c: FP8 attention (docs/fp8.md). float32 q, k, v are quantized to e4m3 with one
 * scale per block of 32 rows, q and k first rotated by the same seeded Hadamard matrix (which
 * leaves q·kᵀ unchanged and spreads outliers over the channels); fa_forward takes the FP8 tensors
 * with their descales and writes a bf16 output, compared here with the float32 forward of the
 * unquantized inputs.
 *
 *   cc fp8_forward.c $(pkg-config --cflags --libs flashattn) -lm && ./a.out
 *
 * Exit status 0 when the FP8 result is within 5% RMS of the float32 one.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attn.h"

enum { B = 1, S = 256, H = 4, D = 64, ROWS = 32, BLOCKS = S / ROWS };

/* A contiguous [B, S, H, D] tensor of dtype dt over data on the host. */
static fa_tensor tensor4(void *data, fa_dtype dt) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  const int64_t shape[4] = {B, S, H, D};
  const int64_t strides[4] = {(int64_t)S * H * D, (int64_t)H * D, D, 1};
  t.data = data;
  t.dtype = dt;
  t.ndim = 4;
  for (int i = 0; i < 4; ++i) t.shape[i] = shape[i], t.strides[i] = strides[i];
  t.device.kind = FA_DEVICE_CPU;
  return t;
}

/* The descales of one tensor: float32 [B, H, BLOCKS]. */
static fa_tensor descale3(float *data) {
  fa_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = FA_F32;
  t.ndim = 3;
  t.shape[0] = B, t.shape[1] = H, t.shape[2] = BLOCKS;
  t.strides[0] = (int64_t)H * BLOCKS, t.strides[1] = BLOCKS, t.strides[2] = 1;
  t.device.kind = FA_DEVICE_CPU;
  return t;
}

static float bf16_value(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

int main(void) {
  const size_t n = (size_t)B * S * H * D;
  float *x[3], *ref = malloc(n * sizeof(float)), ds[3][B * H * BLOCKS];
  uint8_t *x8[3];
  uint16_t *out = malloc(n * sizeof(uint16_t));
  for (int i = 0; i < 3; ++i) {
    x[i] = malloc(n * sizeof(float));
    x8[i] = malloc(n);
    if (!x[i] || !x8[i]) return 1;
  }
  if (!ref || !out) return 1;
  srand(1);
  for (int i = 0; i < 3; ++i)
    for (size_t e = 0; e < n; ++e) x[i][e] = (float)rand() / RAND_MAX - 0.5f;

  /* Quantize: q and k rotated with one seed, v as it is; 32 rows per descale. */
  fa_quantize_args qa;
  fa_quantize_args_init(&qa);
  qa.block_rows = ROWS;
  qa.rotate_seed = 2024;
  fa_run_info info;
  for (int i = 0; i < 3; ++i) {
    fa_tensor src = tensor4(x[i], FA_F32), dst = tensor4(x8[i], FA_F8E4M3), d = descale3(ds[i]);
    qa.rotate = i < 2;
    fa_run_info_init(&info);
    if (fa_quantize(&qa, &src, &dst, &d, &info) != FA_OK) {
      fprintf(stderr, "fa_quantize: %s\n", fa_last_error());
      return 1;
    }
  }
  printf("quantized by %s\n", info.kernel);

  /* The FP8 forward with its descales, and the float32 forward of the original inputs. */
  fa_tensor q8 = tensor4(x8[0], FA_F8E4M3), k8 = tensor4(x8[1], FA_F8E4M3);
  fa_tensor v8 = tensor4(x8[2], FA_F8E4M3), o = tensor4(out, FA_BF16);
  fa_tensor qd = descale3(ds[0]), kd = descale3(ds[1]), vd = descale3(ds[2]);
  fa_params p;
  fa_params_init(&p);
  p.causal = 1;
  p.q_descale = &qd, p.k_descale = &kd, p.v_descale = &vd;
  p.descale_rows_q = p.descale_rows_k = ROWS;
  fa_run_info_init(&info);
  if (fa_forward(&p, &q8, &k8, &v8, &o, NULL, &info) != FA_OK) {
    fprintf(stderr, "fa_forward (FP8): %s\n", fa_last_error());
    return 1;
  }
  printf("FP8 forward ran on %s: %s\n", fa_backend_name(info.backend), info.kernel);
  fa_tensor q = tensor4(x[0], FA_F32), k = tensor4(x[1], FA_F32), v = tensor4(x[2], FA_F32);
  fa_tensor r = tensor4(ref, FA_F32);
  fa_params pf;
  fa_params_init(&pf);
  pf.causal = 1;
  if (fa_forward(&pf, &q, &k, &v, &r, NULL, NULL) != FA_OK) {
    fprintf(stderr, "fa_forward (float32): %s\n", fa_last_error());
    return 1;
  }
  double err = 0.0, mag = 0.0;
  for (size_t e = 0; e < n; ++e) {
    const double d = (double)bf16_value(out[e]) - ref[e];
    err += d * d;
    mag += (double)ref[e] * ref[e];
  }
  const double rel = sqrt(err / mag);
  printf("FP8 against float32: relative RMS difference %.2e\n", rel);
  for (int i = 0; i < 3; ++i) free(x[i]), free(x8[i]);
  free(ref), free(out);
  fa_release();
  return rel < 0.05 ? 0 : 1;
}
