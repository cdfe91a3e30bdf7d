/*
 * fa3_fp8_layout.h: where the FP8 forward keeps P and Vᵀ (FA_HOST_DEVICE: the kernels and the host
 * test tests/cuda/test_cuda_fp8_layout.c compute the same indices).
 *
 * The accumulator of S = Q Kᵀ (wgmma m64nN, f32) gives a thread, in each slice of 32 keys, keys
 * {2t, 2t + 1, 8 + 2t, 9 + 2t} and the same + 16 (t = lane % 4) of its two rows, while the A
 * operand of an FP8 P V (m64nNk32, e4m3 from registers) wants slots {4t, .., 4t + 3} and
 * {16 + 4t, .., 16 + 4t + 3} of them. Rather than moving P between threads, the pre-pass that
 * transposes V also permutes the keys of each group of 32: slot s of a k-step holds key
 * fa3_fp8_key_of_slot(s) in both operands, P's A fragment is the accumulator converted in place,
 * and P V sums over the same keys.
 */
#ifndef FA_CUDA_FA3_FP8_LAYOUT_H
#define FA_CUDA_FA3_FP8_LAYOUT_H

#include "core/math/host_device.h"

/* Keys per group of the permutation (one k-step of an FP8 wgmma). */
#define FA3_FP8_KEY_GROUP 32
/* Keys per block of the pre-pass: two groups. */
#define FA3_FP8_VT_TILE 64

/* The key (within its group of 32) at slot s: slot 16 h + 4 t + i holds key 16 h + 2 t + i % 2 +
   8 (i / 2). */
FA_HOST_DEVICE int fa3_fp8_key_of_slot(int s) {
  const int t = (s >> 2) & 3, i = s & 3;
  return (s & 16) + 2 * t + (i & 1) + 8 * (i >> 1);
}

/* The accumulator element (index into a thread's S registers, s[4 j + e]: key 8 j + 2 t + e % 2 of
   row e / 2) that goes into byte b of A register r of k-step kk (keys 32 kk ..): register r holds
   row r % 2 (+8) at slots 16 (r / 2) + 4 t + b, whose key is 16 (r / 2) + 8 (b / 2) + 2 t + b % 2,
   accumulator group j = 4 kk + 2 (r / 2) + b / 2. */
FA_HOST_DEVICE int fa3_fp8_p_index(int kk, int r, int b) {
  return 4 * (4 * kk + 2 * (r >> 1) + (b >> 1)) + 2 * (r & 1) + (b & 1);
}

/* The pre-pass's work: a block writes FA3_FP8_VT_TILE keys of every head-dim row of one (batch,
   K/V head), in 4-byte words; word w (0 .. head_dim * FA3_FP8_VT_TILE / 4) is row w / 16, slots
   4 (w % 16) .. + 3 of the block's keys, and slot s of the block holds the block's key
   fa3_fp8_vt_src(s). */
FA_HOST_DEVICE int fa3_fp8_vt_word_row(int w) { return w / (FA3_FP8_VT_TILE / 4); }
FA_HOST_DEVICE int fa3_fp8_vt_word_slot(int w) { return 4 * (w % (FA3_FP8_VT_TILE / 4)); }
FA_HOST_DEVICE int fa3_fp8_vt_src(int s) {
  return (s & ~(FA3_FP8_KEY_GROUP - 1)) + fa3_fp8_key_of_slot(s & (FA3_FP8_KEY_GROUP - 1));
}

#endif /* FA_CUDA_FA3_FP8_LAYOUT_H */
