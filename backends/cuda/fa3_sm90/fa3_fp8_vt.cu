/*
 * fa3_fp8_vt.cu: the FP8 forward's pre-pass. Both operands of an FP8 wgmma are K-major, so P V
 * needs V with the keys along its rows: V [batch, seqlen_k, heads_kv, head_dim] (FP8 bytes) is
 * written transposed into the call's workspace as Vᵀ [batch][heads_kv][head_dim][vt_keys], the keys
 * of each group of 32 permuted as fa3_fp8_layout.h says (so that P converts to the A operand in
 * place) and zeros past seqlen_k (P is 0 there, but 0 x NaN would not be). The public layout of V
 * stays as it is; the copy costs a read and a write of V per call.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "fa3_args.h"
#include "fa3_fp8_layout.h"

/* Block (key block, K/V head, batch), 256 threads: the block's FA3_FP8_VT_TILE rows of V (16-byte
   loads; rows past seqlen_k read as zeros) into shared memory, then its Vᵀ words out, each row's
   slots in order. The rows are padded by 16 bytes so that reading a column spreads over banks. */
template <int HD>
__global__ void __launch_bounds__(256) fa3_fp8_vt_kernel(const fa3_fwd_args A) {
  constexpr int PITCH = HD + 16;
  __shared__ __align__(16) unsigned char tile[FA3_FP8_VT_TILE * PITCH];
  const cuda_fwd_args &a = A.a;
  const int key0 = (int)blockIdx.x * FA3_FP8_VT_TILE, hk = (int)blockIdx.y, b = (int)blockIdx.z;
  const unsigned char *v = static_cast<const unsigned char *>(a.v) + (int64_t)b * a.v_str.batch +
                           (int64_t)hk * a.v_str.head;
  for (int i = (int)threadIdx.x; i < FA3_FP8_VT_TILE * HD / 16; i += 256) {
    const int r = i / (HD / 16), c = i % (HD / 16), key = key0 + r;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (key < a.p.seqlen_k)
      x = *reinterpret_cast<const uint4 *>(v + (int64_t)key * a.v_str.row + 16 * c);
    *reinterpret_cast<uint4 *>(tile + r * PITCH + 16 * c) = x;
  }
  __syncthreads();
  unsigned char *vt =
      A.fp8.vt + ((int64_t)b * a.p.heads_kv + hk) * HD * (int64_t)A.fp8.vt_keys + key0;
  for (int w = (int)threadIdx.x; w < HD * FA3_FP8_VT_TILE / 4; w += 256) {
    const int d = fa3_fp8_vt_word_row(w), s = fa3_fp8_vt_word_slot(w);
    uint32_t word = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      word |= (uint32_t)tile[fa3_fp8_vt_src(s + e) * PITCH + d] << (8 * e);
    *reinterpret_cast<uint32_t *>(vt + (int64_t)d * A.fp8.vt_keys + s) = word;
  }
}

extern "C" int fa3_fp8_vt_launch(const fa3_fwd_args *a) {
  const cuda_problem &p = a->a.p;
  if (p.seqlen_k == 0 || p.batch == 0 || p.heads_kv == 0) return 0;
  const dim3 grid((unsigned)(a->fp8.vt_keys / FA3_FP8_VT_TILE), (unsigned)p.heads_kv,
                  (unsigned)p.batch);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  switch (p.head_dim) {
    case 64:
      fa3_fp8_vt_kernel<64><<<grid, 256, 0, stream>>>(*a);
      break;
    case 128:
      fa3_fp8_vt_kernel<128><<<grid, 256, 0, stream>>>(*a);
      break;
    case 256:
      fa3_fp8_vt_kernel<256><<<grid, 256, 0, stream>>>(*a);
      break;
    default:
      return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}
