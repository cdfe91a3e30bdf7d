/*
 * quant_lane.cuh: one row of fa_quantize held by a warp, lane l owning the E adjacent columns
 * E l .. E l + E - 1 (quantize.cu's lane kernels): the lane's part of a row read as whole words
 * where the row is contiguous and aligned (one 2- to 16-byte load in place of E), widened,
 * rotated in core/math/hadamard.h's order, and rounded to FP8 two values an instruction on sm_89
 * and later (cvt ... satfinite, the rounding core/math/fp8.h defines), then stored as whole words.
 */
#ifndef FA_CUDA_QUANT_LANE_CUH
#define FA_CUDA_QUANT_LANE_CUH

#include <stdint.h>

#include "flash_attn.h"
#include "core/math/dtype.h"
#include "core/math/fp8.h"
#include "core/math/hadamard.h"
#include "quant_args.h"

/* The 32-bit words that hold a lane's E elements of type X (FA_F32, FA_F16 or FA_BF16). */
template <int E, int X>
struct lane_words {
  static constexpr int bytes = E * (X == FA_F32 ? 4 : 2);
  static constexpr int n = (bytes + 3) / 4;
};

/* N bytes at p (aligned to N up to 16) into w, little-endian. */
template <int N>
__device__ __forceinline__ void load_bytes(const unsigned char *p, uint32_t *w) {
  if constexpr (N >= 16) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i) {
      const uint4 q = reinterpret_cast<const uint4 *>(p)[i];
      w[4 * i] = q.x, w[4 * i + 1] = q.y, w[4 * i + 2] = q.z, w[4 * i + 3] = q.w;
    }
  } else if constexpr (N == 8) {
    const uint2 q = *reinterpret_cast<const uint2 *>(p);
    w[0] = q.x, w[1] = q.y;
  } else if constexpr (N == 4) {
    w[0] = *reinterpret_cast<const uint32_t *>(p);
  } else {
    w[0] = *reinterpret_cast<const uint16_t *>(p);
  }
}

/* N bytes of w to p (aligned to N up to 16). */
template <int N>
__device__ __forceinline__ void store_bytes(unsigned char *p, const uint32_t *w) {
  if constexpr (N >= 16) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i)
      reinterpret_cast<uint4 *>(p)[i] =
          make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
  } else if constexpr (N == 8) {
    *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
  } else if constexpr (N == 4) {
    *reinterpret_cast<uint32_t *>(p) = w[0];
  } else if constexpr (N == 2) {
    *reinterpret_cast<uint16_t *>(p) = (uint16_t)w[0];
  } else {
    *p = (unsigned char)w[0];
  }
}

/* The lane's elements of the row at element offset `row` of x: whole words when vec (the
   launcher has checked the strides and the alignment), element by element otherwise. */
template <int E, int X>
__device__ __forceinline__ void load_lane(const cuda_quant_args &a, int64_t row, int lane, bool vec,
                                          uint32_t (&w)[lane_words<E, X>::n]) {
  constexpr int size = X == FA_F32 ? 4 : 2;
  if (vec) {
    const unsigned char *p =
        static_cast<const unsigned char *>(a.x) + (row + (int64_t)lane * E) * size;
    load_bytes<lane_words<E, X>::bytes>(p, w);
    return;
  }
#pragma unroll
  for (int i = 0; i < lane_words<E, X>::n; ++i) w[i] = 0;
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const int64_t at = row + (int64_t)(lane * E + k) * a.xs[3];
    if (X == FA_F32)
      w[k] = static_cast<const uint32_t *>(a.x)[at];
    else
      w[k / 2] |= (uint32_t) static_cast<const uint16_t *>(a.x)[at] << (16 * (k & 1));
  }
}

/* The loaded words as fp32 values (every conversion exact). */
template <int E, int X>
__device__ __forceinline__ void widen(const uint32_t (&w)[lane_words<E, X>::n], float (&v)[E]) {
#pragma unroll
  for (int k = 0; k < E; ++k) {
    if (X == FA_F32) {
      v[k] = __uint_as_float(w[k]);
    } else {
      const uint32_t h = (w[k / 2] >> (16 * (k & 1))) & 0xffffu;
      if (X == FA_BF16) {
        v[k] = __uint_as_float(h << 16);
      } else {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((uint16_t)h));
        v[k] = f;
      }
    }
  }
}

/* This lane's signs: bit k set where column E lane + k is negated. */
template <int E>
__device__ __forceinline__ uint32_t lane_signs(const cuda_quant_args &a, int lane) {
  uint32_t signs = 0;
  if (a.rotate)
#pragma unroll
    for (int k = 0; k < E; ++k)
      signs |= (uint32_t)fa_hadamard_sign_negative(a.seed, (uint32_t)(lane * E + k)) << k;
  return signs;
}

/* The rotation of the row (hadamard.h's order: the signs, the stages h = 1, 2, 4, ..., the norm).
   Stages below E pair two elements of a lane; from E on they pair lane l with lane l ^ (h / E):
   the lower lane's a + b and the upper's a - b are both fma(+-1, own, partner's), one rounding
   each as the additions have. */
template <int E>
__device__ __forceinline__ void rotate_lane(float (&v)[E], uint32_t signs, int lane, float norm) {
#pragma unroll
  for (int k = 0; k < E; ++k)
    v[k] = __uint_as_float(__float_as_uint(v[k]) ^ (((signs >> k) & 1u) << 31));
#pragma unroll
  for (int hk = 1; hk < E; hk <<= 1)
#pragma unroll
    for (int k = 0; k < E; ++k)
      if (!(k & hk)) {
        const float x0 = v[k], x1 = v[k + hk];
        v[k] = __fadd_rn(x0, x1);
        v[k + hk] = __fsub_rn(x0, x1);
      }
#pragma unroll
  for (int hl = 1; hl < 32; hl <<= 1) {
    const float own = (lane & hl) ? -1.0f : 1.0f;
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = __fmaf_rn(own, v[k], __shfl_xor_sync(0xffffffffu, v[k], hl));
  }
#pragma unroll
  for (int k = 0; k < E; ++k) v[k] = __fmul_rn(v[k], norm);
}

/* m raised to |v| where that is finite (NaN and infinities left out). */
__device__ __forceinline__ float finite_max(float m, float v) {
  const float x = fabsf(v);
  return x > m && x <= 3.4028235e38f ? x : m;
}

/* lo and hi as Y codes (FA_F8E4M3 or FA_F8E5M2), lo in the low byte. */
template <int Y>
__device__ __forceinline__ uint32_t fp8x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 890
  uint16_t r;
  if (Y == FA_F8E4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  if (Y == FA_F8E4M3) return fa_f32_to_f8e4m3(lo) | (uint32_t)fa_f32_to_f8e4m3(hi) << 8;
  return fa_f32_to_f8e5m2(lo) | (uint32_t)fa_f32_to_f8e5m2(hi) << 8;
#endif
}

/* The lane's values divided by the descale s (IEEE division) and rounded to Y, packed into
   words: column E lane + k in byte k. */
template <int E, int Y>
__device__ __forceinline__ void pack_fp8(const float (&v)[E], float s, uint32_t (&w)[(E + 3) / 4]) {
#pragma unroll
  for (int i = 0; i < (E + 3) / 4; ++i) w[i] = 0;
#pragma unroll
  for (int k = 0; k < E; k += 2) {
    const float hi = k + 1 < E ? __fdiv_rn(v[k + 1], s) : 0.0f;
    const uint32_t c = fp8x2<Y>(__fdiv_rn(v[k], s), hi);
    w[k / 4] |= (k + 1 < E ? c : c & 0xffu) << (8 * (k & 3));
  }
}

/* The lane's FP8 values to the row at element offset `row` of y: whole words when vec. */
template <int E>
__device__ __forceinline__ void store_lane_fp8(const cuda_quant_args &a, int64_t row, int lane,
                                               bool vec, const uint32_t (&w)[(E + 3) / 4]) {
  unsigned char *y = static_cast<unsigned char *>(a.y);
  if (vec) {
    store_bytes<E>(y + row + (int64_t)lane * E, w);
    return;
  }
#pragma unroll
  for (int k = 0; k < E; ++k)
    y[row + (int64_t)(lane * E + k) * a.ys[3]] = (unsigned char)(w[k / 4] >> (8 * (k & 3)));
}

/* The lane's values rounded to Y (FA_F8E4M3 or FA_F8E5M2) after division by s, stored. */
template <int E, int Y>
__device__ __forceinline__ void store_fp8_lane(const cuda_quant_args &a, int64_t row, int lane,
                                               bool vec, const float (&v)[E], float s) {
  uint32_t w[(E + 3) / 4];
  pack_fp8<E, Y>(v, s, w);
  store_lane_fp8<E>(a, row, lane, vec, w);
}

#endif /* FA_CUDA_QUANT_LANE_CUH */
