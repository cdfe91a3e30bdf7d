/*
 * sm90_probe.cu: the Hopper building blocks of the FlashAttention-3 kernels checked on the GPU
 * against a float64 reference (backends/cuda/common/sm90_async.cuh, fa3_sm90/tma_map.c): TMA
 * 2-D loads with 128-byte swizzle completing on an mbarrier, S = Q Kᵀ by wgmma with both operands
 * K-major from shared memory (head dim 128: two 64-column boxes), and O = P V by wgmma with P in
 * registers and V MN-major, for each candidate meaning of the MN-major descriptor's two strides
 * (which one the hardware takes is what this settles; the kernels use it). One warpgroup, one
 * 64 x 64 x 128 tile, bf16 inputs, fp32 accumulation.
 *
 *   sm90_probe            exit 0: S matches, and exactly the expected V descriptor matches
 *                         77: no sm_90 device here
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/common/sm90_async.cuh"
#include "backends/cuda/fa3_sm90/tma_map.h"

enum { ROWS = 64, KEYS = 64, HD = 128, BOX = 64 };
static const int n_cand = 2;
/* MN-major B (V: keys x head dim, head dim contiguous): candidate (LBO, SBO) in bytes. The
   first is the one the kernels use: LBO between 64-column atoms along N (a box: 64 keys x 128
   bytes), SBO between 8-key groups along K. */
static const unsigned cand_lbo[2] = {KEYS * 128, 1024}, cand_sbo[2] = {1024, KEYS * 128};

__global__ void __launch_bounds__(128)
    probe_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                 const __grid_constant__ CUtensorMap tv, const __nv_bfloat16 *p, float *s_out,
                 float *o_out, unsigned v_lbo, unsigned v_sbo) {
  extern __shared__ unsigned char raw[];
  /* Swizzled boxes need 1024-byte aligned destinations. */
  unsigned char *base = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  unsigned char *sq = base, *sk = base + 2 * BOX * 128, *sv = base + 4 * BOX * 128;
  __shared__ uint64_t bar;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  if (tid == 0) {
    mbar_init(&bar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    mbar_arrive_expect_tx(&bar, 6 * BOX * 128);
    for (int h = 0; h < 2; ++h) {
      tma_load_2d(sq + h * BOX * 128, &tq, &bar, h * BOX, 0);
      tma_load_2d(sk + h * BOX * 128, &tk, &bar, h * BOX, 0);
      tma_load_2d(sv + h * BOX * 128, &tv, &bar, h * BOX, 0);
    }
  }
  mbar_wait(&bar, 0);

  /* S = Q Kᵀ: k-step ks is 16 columns, i.e. 32 bytes into the (ks / 4)-th box. */
  float s[32];
  for (int i = 0; i < 32; ++i) s[i] = 0.f;
  wgmma_fence();
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int off = (ks / 4) * BOX * 128 + (ks % 4) * 32;
    wgmma_n<64>::ss<0, false>(s, wgmma_desc_sw128(sq + off, 16, 1024),
                              wgmma_desc_sw128(sk + off, 16, 1024), 1);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(s);
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i)
      s_out[(16 * warp + g + 8 * (i / 2)) * KEYS + 8 * j + 2 * t + i % 2] = s[4 * j + i];

  /* O = P V: P's A fragments from global memory, V's k-step ks is 16 keys = 2048 bytes on. */
  float o[64];
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  uint32_t a[KEYS / 16][4];
  for (int ks = 0; ks < KEYS / 16; ++ks)
    for (int r = 0; r < 4; ++r) {
      const int row = 16 * warp + g + 8 * (r % 2), col = 16 * ks + 2 * t + 8 * (r / 2);
      __nv_bfloat162 v2;
      v2.x = p[row * KEYS + col];
      v2.y = p[row * KEYS + col + 1];
      a[ks][r] = *reinterpret_cast<uint32_t *>(&v2);
    }
  wgmma_fence();
  for (int ks = 0; ks < KEYS / 16; ++ks)
    wgmma_n<128>::rs<1, false>(o, a[ks], wgmma_desc_sw128(sv + ks * 16 * 128, v_lbo, v_sbo), 1);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(o);
  for (int j = 0; j < 16; ++j)
    for (int i = 0; i < 4; ++i)
      o_out[(16 * warp + g + 8 * (i / 2)) * HD + 8 * j + 2 * t + i % 2] = o[4 * j + i];
}

static float bf16_round(float x, __nv_bfloat16 *out) {
  *out = __float2bfloat16_rn(x);
  return __bfloat162float(*out);
}

int main(void) {
  int dev_count = 0, major = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    printf("SKIP no CUDA device\n");
    return 77;
  }
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major != 9) {
    printf("SKIP device 0 is not sm_90 (major %d)\n", major);
    return 77;
  }
  static __nv_bfloat16 q[ROWS * HD], k[KEYS * HD], v[KEYS * HD], p[ROWS * KEYS];
  static float qf[ROWS * HD], kf[KEYS * HD], vf[KEYS * HD], pf[ROWS * KEYS];
  srand(12345u);
  for (int i = 0; i < ROWS * HD; ++i) qf[i] = bf16_round(2.f * rand() / RAND_MAX - 1.f, &q[i]);
  for (int i = 0; i < KEYS * HD; ++i) kf[i] = bf16_round(2.f * rand() / RAND_MAX - 1.f, &k[i]);
  for (int i = 0; i < KEYS * HD; ++i) vf[i] = bf16_round(2.f * rand() / RAND_MAX - 1.f, &v[i]);
  for (int i = 0; i < ROWS * KEYS; ++i) pf[i] = bf16_round((float)rand() / RAND_MAX, &p[i]);

  __nv_bfloat16 *dq, *dk, *dv, *dp;
  float *ds, *dout;
  cudaMalloc(&dq, sizeof q);
  cudaMalloc(&dk, sizeof k);
  cudaMalloc(&dv, sizeof v);
  cudaMalloc(&dp, sizeof p);
  cudaMalloc(&ds, ROWS * KEYS * sizeof(float));
  cudaMalloc(&dout, ROWS * HD * sizeof(float));
  cudaMemcpy(dq, q, sizeof q, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k, sizeof k, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v, sizeof v, cudaMemcpyHostToDevice);
  cudaMemcpy(dp, p, sizeof p, cudaMemcpyHostToDevice);

  alignas(64) CUtensorMap tq, tk, tv;
  char err[256];
  if (fa_tma_map_2d(&tq, 1, dq, HD, ROWS, HD * 2, BOX, BOX, err, sizeof err) ||
      fa_tma_map_2d(&tk, 1, dk, HD, KEYS, HD * 2, BOX, BOX, err, sizeof err) ||
      fa_tma_map_2d(&tv, 1, dv, HD, KEYS, HD * 2, BOX, BOX, err, sizeof err)) {
    printf("FAIL tensor map: %s\n", err);
    return 1;
  }
  const int smem = 6 * BOX * 128 + 1024;
  cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);

  int failed = 0, s_ok = 1, matches[2] = {0, 0};
  static float s_got[ROWS * KEYS], o_got[ROWS * HD];
  for (int c = 0; c < n_cand; ++c) {
    cudaMemset(ds, 0xFF, ROWS * KEYS * sizeof(float)); /* NaN poison */
    cudaMemset(dout, 0xFF, ROWS * HD * sizeof(float));
    probe_kernel<<<1, 128, smem>>>(tq, tk, tv, dp, ds, dout, cand_lbo[c], cand_sbo[c]);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      printf("FAIL kernel (candidate %d): %s\n", c, cudaGetErrorString(e));
      return 1;
    }
    cudaMemcpy(s_got, ds, sizeof s_got, cudaMemcpyDeviceToHost);
    cudaMemcpy(o_got, dout, sizeof o_got, cudaMemcpyDeviceToHost);
    double s_err = 0, o_err = 0;
    for (int r = 0; r < ROWS; ++r)
      for (int n = 0; n < KEYS; ++n) {
        double ref = 0;
        for (int d = 0; d < HD; ++d) ref += (double)qf[r * HD + d] * kf[n * HD + d];
        const double err_rn = fabs(s_got[r * KEYS + n] - ref);
        if (!(err_rn <= s_err)) s_err = isnan(err_rn) ? INFINITY : err_rn;
      }
    for (int r = 0; r < ROWS; ++r)
      for (int d = 0; d < HD; ++d) {
        double ref = 0;
        for (int n = 0; n < KEYS; ++n) ref += (double)pf[r * KEYS + n] * vf[n * HD + d];
        const double err_rn = fabs(o_got[r * HD + d] - ref);
        if (!(err_rn <= o_err)) o_err = isnan(err_rn) ? INFINITY : err_rn;
      }
    /* fp32 accumulation of 128 (64) products of magnitude <= 1: 1e-3 is generous, a layout
       error is O(1). */
    const int s_match = s_err < 1e-3, o_match = o_err < 1e-3;
    s_ok &= s_match;
    matches[c] = o_match;
    printf("candidate %d (V LBO %u, SBO %u): S max |err| %.3g %s, O max |err| %.3g %s\n", c,
           cand_lbo[c], cand_sbo[c], s_err, s_match ? "ok" : "WRONG", o_err, o_match ? "ok" : "no");
  }
  if (!s_ok) {
    printf("FAIL S = Q K^T by wgmma (K-major descriptors, TMA boxes)\n");
    failed = 1;
  }
  if (!matches[0] || matches[1]) {
    printf("FAIL the MN-major descriptor: expected candidate 0 alone to match (got %d, %d)\n",
           matches[0], matches[1]);
    failed = 1;
  }
  printf("%s\n", failed ? "FAILED" : "all passed");
  return failed;
}
