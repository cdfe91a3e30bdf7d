/*
 * sm90_fp8_probe.cu: the FP8 forward's building blocks checked on an sm_90 GPU against a float64
 * reference, each the kernel's own code: Q and K loaded by TMA as bytes (fa_tma_map_u8: the
 * 64-byte swizzle at head dim 64, else 128-byte boxes), S = Q Kᵀ by wgmma k32 from their
 * descriptors (fa3_fp8_issue_s); the pre-pass (fa3_fp8_vt_launch) transposing V with its keys
 * permuted and zeros past seqlen_k, loaded by TMA; P (given in [0, 1], zero past seqlen_k) packed
 * to e4m3 in place (fa3_fp8_pack_p) and O = P V by wgmma k32 with P from registers
 * (fa3_fp8_issue_pv). One warpgroup, 64 query rows, one key tile of 128 keys of which 100 are
 * real, head dims 64, 128 and 256, e4m3 inputs. A layout error shows as an O(1) error; the
 * references use the inputs' e4m3 values and P rounded to e4m3, so the products are exact and only
 * the accumulation differs, which is narrower than fp32 in the FP8 tensor cores (tests/fp8_acc.h).
 *
 *   sm90_fp8_probe        exit 0: S and O match at every head dim
 *                         77: no sm_90 device here
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/fa3_sm90/fa3_args.h"
#include "backends/cuda/fa3_sm90/fa3_fp8_mma.cuh"
#include "backends/cuda/fa3_sm90/tma_map.h"
#include "core/math/fp8.h"
#include "tests/fp8_acc.h"

enum { ROWS = 64, BN = 128, KEYS = 100 };

/* *m = the larger of *m and |e| (NaN: infinity). */
static void worst(double *m, double e) {
  e = fabs(e);
  if (!(e <= *m)) *m = isnan(e) ? INFINITY : e;
}

template <int HD>
__global__ void __launch_bounds__(128)
    fp8_probe_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                     const __grid_constant__ CUtensorMap tv, const float *p, float *s_out,
                     float *o_out) {
  constexpr int ROW = HD < 128 ? HD : 128, CB = HD / ROW;
  constexpr int BOXQ = ROWS * ROW, BOXK = BN * ROW;
  extern __shared__ unsigned char raw[];
  unsigned char *sq = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
  unsigned char *sk = sq + CB * BOXQ, *sv = sk + CB * BOXK;
  __shared__ uint64_t bar;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  if (tid == 0) {
    mbar_init(&bar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    mbar_arrive_expect_tx(&bar, CB * (BOXQ + BOXK) + HD * BN);
    for (int cb = 0; cb < CB; ++cb) {
      tma_load_2d(sq + cb * BOXQ, &tq, &bar, cb * ROW, 0);
      tma_load_2d(sk + cb * BOXK, &tk, &bar, cb * ROW, 0);
    }
    tma_load_2d(sv, &tv, &bar, 0, 0);
  }
  mbar_wait(&bar, 0);

  float s[BN / 2], o[HD / 2];
  for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.f;
  wgmma_fence();
  fa3_fp8_issue_s<HD, BN, BOXQ, BOXK, false>(s, sq, sk);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(s);
  /* accumulator element 4 j + e: row 16 warp + g + 8 (e / 2), column 8 j + 2 t + e % 2 */
  for (int j = 0; j < BN / 8; ++j)
    for (int e = 0; e < 4; ++e)
      s_out[(16 * warp + g + 8 * (e / 2)) * BN + 8 * j + 2 * t + e % 2] = s[4 * j + e];
  for (int j = 0; j < BN / 8; ++j)
    for (int e = 0; e < 4; ++e)
      s[4 * j + e] = p[(16 * warp + g + 8 * (e / 2)) * BN + 8 * j + 2 * t + e % 2];
  uint32_t pa[BN / 32][4];
  fa3_fp8_pack_p<BN>(s, pa);
  wgmma_fence();
  fa3_fp8_issue_pv<HD, BN, false>(o, pa, sv, 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(o);
  wgmma_fence_frags(pa);
  for (int j = 0; j < HD / 8; ++j)
    for (int e = 0; e < 4; ++e)
      o_out[(16 * warp + g + 8 * (e / 2)) * HD + 8 * j + 2 * t + e % 2] = o[4 * j + e];
}

static unsigned char draw_e4m3(void) {
  const float x = 4.f * rand() / RAND_MAX - 2.f;
  return fa_f32_to_f8e4m3(x);
}

/* One head dim: 0 when S and O match. */
template <int HD>
static int probe(void) {
  constexpr int ROW = HD < 128 ? HD : 128, CB = HD / ROW;
  static unsigned char q[ROWS * HD], k[BN * HD], v[KEYS * HD];
  static float p[ROWS * BN], s_got[ROWS * BN], o_got[ROWS * HD];
  for (int i = 0; i < ROWS * HD; ++i) q[i] = draw_e4m3();
  for (int i = 0; i < BN * HD; ++i) k[i] = draw_e4m3();
  for (int i = 0; i < KEYS * HD; ++i) v[i] = draw_e4m3();
  for (int r = 0; r < ROWS; ++r)
    for (int n = 0; n < BN; ++n) p[r * BN + n] = n < KEYS ? (float)rand() / RAND_MAX : 0.f;
  unsigned char *dq, *dk, *dv, *dvt;
  float *dp, *ds, *dout;
  cudaMalloc(&dq, sizeof q);
  cudaMalloc(&dk, sizeof k);
  cudaMalloc(&dv, sizeof v);
  cudaMalloc(&dvt, (size_t)HD * BN);
  cudaMalloc(&dp, sizeof p);
  cudaMalloc(&ds, sizeof s_got);
  cudaMalloc(&dout, sizeof o_got);
  cudaMemcpy(dq, q, sizeof q, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k, sizeof k, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v, sizeof v, cudaMemcpyHostToDevice);
  cudaMemcpy(dp, p, sizeof p, cudaMemcpyHostToDevice);
  cudaMemset(dvt, 0x7f, (size_t)HD * BN); /* NaN poison: the pre-pass must write every byte */
  cudaMemset(ds, 0xFF, sizeof s_got);
  cudaMemset(dout, 0xFF, sizeof o_got);

  /* The pre-pass on V as [1, KEYS, 1, HD]. */
  fa3_fwd_args x;
  memset(&x, 0, sizeof x);
  x.a.v = dv;
  x.a.v_str.row = HD, x.a.v_str.head = HD, x.a.v_str.batch = (int64_t)KEYS * HD;
  x.a.p.batch = 1, x.a.p.heads_kv = 1, x.a.p.seqlen_k = KEYS, x.a.p.head_dim = HD;
  x.fp8.vt = dvt;
  x.fp8.vt_keys = BN;
  int e = fa3_fp8_vt_launch(&x);
  if (e != 0) {
    printf("FAIL hd%d: the pre-pass launch: %s\n", HD, cudaGetErrorString((cudaError_t)e));
    return 1;
  }

  alignas(64) CUtensorMap tq, tk, tv;
  char err[256];
  const uint64_t qd[2] = {HD, ROWS}, qs[1] = {HD}, kd[2] = {HD, BN}, ks[1] = {HD};
  const uint64_t vd[2] = {BN, HD}, vs[1] = {BN};
  const uint32_t qb[2] = {ROW, ROWS}, kb[2] = {ROW, BN}, vb[2] = {BN, HD};
  if (fa_tma_map_u8(&tq, dq, 2, qd, qs, qb, ROW, err, sizeof err) ||
      fa_tma_map_u8(&tk, dk, 2, kd, ks, kb, ROW, err, sizeof err) ||
      fa_tma_map_u8(&tv, dvt, 2, vd, vs, vb, 128, err, sizeof err)) {
    printf("FAIL hd%d tensor map: %s\n", HD, err);
    return 1;
  }
  const int smem = CB * (ROWS + BN) * ROW + HD * BN + 1024;
  cudaFuncSetAttribute(fp8_probe_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  fp8_probe_kernel<HD><<<1, 128, smem>>>(tq, tk, tv, dp, ds, dout);
  cudaError_t ce = cudaDeviceSynchronize();
  if (ce != cudaSuccess) {
    printf("FAIL hd%d kernel: %s\n", HD, cudaGetErrorString(ce));
    return 1;
  }
  cudaMemcpy(s_got, ds, sizeof s_got, cudaMemcpyDeviceToHost);
  cudaMemcpy(o_got, dout, sizeof o_got, cudaMemcpyDeviceToHost);
  /* Against float64, the kernel's sums and the same sums as Hopper's FP8 tensor cores form them
     (fp32 within each 32-term step, the running sum kept to FP8_ACC_BITS significant bits after
     it): a layout error is O(1) and far outside twice the latter. */
  double s_err = 0, o_err = 0, s_naive = 0, o_naive = 0;
  for (int r = 0; r < ROWS; ++r)
    for (int n = 0; n < BN; ++n) {
      double ref = 0;
      float acc = 0;
      for (int d = 0; d < HD; ++d) {
        const float t = fa_f8e4m3_to_f32(q[r * HD + d]) * fa_f8e4m3_to_f32(k[n * HD + d]);
        ref += t;
        acc += t;
        if (d % FP8_ACC_TERMS == FP8_ACC_TERMS - 1) acc = fp8_acc_keep(acc, FP8_ACC_BITS);
      }
      worst(&s_err, s_got[r * BN + n] - ref);
      worst(&s_naive, acc - ref);
    }
  for (int r = 0; r < ROWS; ++r)
    for (int d = 0; d < HD; ++d) {
      double ref = 0;
      float acc = 0;
      for (int n = 0; n < BN; ++n) {
        const float t = n < KEYS ? fa_f8e4m3_to_f32(fa_f32_to_f8e4m3(p[r * BN + n])) *
                                       fa_f8e4m3_to_f32(v[n * HD + d])
                                 : 0.f;
        ref += t;
        acc += t;
        if (n % FP8_ACC_TERMS == FP8_ACC_TERMS - 1) acc = fp8_acc_keep(acc, FP8_ACC_BITS);
      }
      worst(&o_err, o_got[r * HD + d] - ref);
      worst(&o_naive, acc - ref);
    }
  const int ok = s_err <= 2 * s_naive + 1e-6 && o_err <= 2 * o_naive + 1e-6;
  printf("hd%d: max |err| S %.3g (model %.3g), O %.3g (model %.3g): %s\n", HD, s_err, s_naive,
         o_err, o_naive, ok ? "ok" : "WRONG");
  cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dvt), cudaFree(dp), cudaFree(ds);
  cudaFree(dout);
  return !ok;
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
  srand(12345u);
  const int failed = probe<64>() | probe<128>() | probe<256>();
  printf("%s\n", failed ? "FAILED" : "all passed");
  return failed;
}
