/*
 * forward_backward.c: causal attention forward and backward on host memory, float32, with the run
 * report, checked against a direct computation of softmax(Q Kᵀ · scale) V.
 *
 *   cc forward_backward.c $(pkg-config --cflags --libs flashattn) -lm && ./a.out
 *
 * Layout: q, k, v, out are [batch, seqlen, heads, head_dim] (strides in elements, innermost
 * contiguous); the LSE is [batch, heads, seqlen] float32. Exit status 0 when the forward matches.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flash_attn.h"

enum { B = 1, S = 64, H = 2, D = 32 };

static fa_tensor tensor4(float *data) {
  const int64_t shape[4] = {B, S, H, D};
  const int64_t strides[4] = {(int64_t)S * H * D, (int64_t)H * D, D, 1};
  fa_tensor t = {0};
  t.data = data;
  t.dtype = FA_F32;
  t.ndim = 4;
  for (int i = 0; i < 4; ++i) t.shape[i] = shape[i], t.strides[i] = strides[i];
  t.device.kind = FA_DEVICE_CPU;
  return t;
}

static float at(const float *x, int s, int h, int d) { return x[((size_t)s * H + h) * D + d]; }

int main(void) {
  const size_t n = (size_t)B * S * H * D;
  float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
  float *out = malloc(n * sizeof *out), *dout = malloc(n * sizeof *dout);
  float *dq = malloc(n * sizeof *dq), *dk = malloc(n * sizeof *dk), *dv = malloc(n * sizeof *dv);
  float *lse = malloc((size_t)B * H * S * sizeof *lse);
  if (!q || !k || !v || !out || !dout || !dq || !dk || !dv || !lse) return 1;
  srand(1);
  for (size_t i = 0; i < n; ++i) {
    q[i] = (float)rand() / RAND_MAX - 0.5f;
    k[i] = (float)rand() / RAND_MAX - 0.5f;
    v[i] = (float)rand() / RAND_MAX - 0.5f;
    dout[i] = (float)rand() / RAND_MAX - 0.5f;
  }
  fa_tensor tq = tensor4(q), tk = tensor4(k), tv = tensor4(v), tout = tensor4(out);
  fa_tensor tdout = tensor4(dout), tdq = tensor4(dq), tdk = tensor4(dk), tdv = tensor4(dv);
  fa_tensor tlse = {0};
  tlse.data = lse;
  tlse.dtype = FA_F32;
  tlse.ndim = 3;
  tlse.shape[0] = B, tlse.shape[1] = H, tlse.shape[2] = S;
  tlse.strides[0] = (int64_t)H * S, tlse.strides[1] = S, tlse.strides[2] = 1;
  tlse.device.kind = FA_DEVICE_CPU;

  fa_params p;
  fa_params_init(&p); /* scale 0: 1/sqrt(head_dim); backend AUTO */
  p.causal = 1;
  p.return_lse = 1;
  fa_run_info info;
  fa_run_info_init(&info);
  if (fa_forward(&p, &tq, &tk, &tv, &tout, &tlse, &info) != FA_OK) {
    fprintf(stderr, "fa_forward: %s\n", fa_last_error());
    return 1;
  }
  printf("forward ran on %s: %s\n", fa_backend_name(info.backend), info.kernel);
  fa_run_info_init(&info);
  if (fa_backward(&p, &tq, &tk, &tv, &tout, &tlse, &tdout, &tdq, &tdk, &tdv, &info) != FA_OK) {
    fprintf(stderr, "fa_backward: %s\n", fa_last_error());
    return 1;
  }
  printf("backward ran on %s: %s\n", fa_backend_name(info.backend), info.kernel);

  /* The forward, directly: row i of head h sees keys 0..i (causal, seqlen_q == seqlen_k). */
  const float scale = 1.0f / sqrtf((float)D);
  double worst = 0.0;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < S; ++i) {
      double m = -INFINITY, l = 0.0, o[D] = {0};
      for (int j = 0; j <= i; ++j) {
        double s = 0.0;
        for (int d = 0; d < D; ++d) s += (double)at(q, i, h, d) * at(k, j, h, d);
        m = fmax(m, s * scale);
      }
      for (int j = 0; j <= i; ++j) {
        double s = 0.0;
        for (int d = 0; d < D; ++d) s += (double)at(q, i, h, d) * at(k, j, h, d);
        const double pr = exp(s * scale - m);
        l += pr;
        for (int d = 0; d < D; ++d) o[d] += pr * at(v, j, h, d);
      }
      for (int d = 0; d < D; ++d) worst = fmax(worst, fabs(o[d] / l - at(out, i, h, d)));
    }
  printf("largest difference from the direct computation: %.2e\n", worst);
  free(q), free(k), free(v), free(out), free(dout), free(dq), free(dk), free(dv), free(lse);
  fa_release();
  return worst < 1e-4 ? 0 : 1;
}
