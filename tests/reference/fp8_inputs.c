/*
 * fp8_inputs.c: FP8 inputs for the tests (reference.h's ref_fp8_inputs): a float tensor quantized
 * by the CPU backend's fa_quantize, and its exact dequantized values for the float64 reference.
 */
#include <string.h>

#include "reference.h"

int ref_fp8_inputs(const tu_tensor *src, fa_dtype dt, int64_t rows, int per_tensor, int rotate,
                   uint64_t seed, tu_layout_kind layout, ref_fp8 *out) {
  memset(out, 0, sizeof *out);
  const int64_t *shape = src->t.shape;
  const int64_t blocks = rows > 0 ? (shape[1] + rows - 1) / rows : 1;
  const int64_t dshape[3] = {per_tensor ? 1 : shape[0], per_tensor ? 1 : shape[2], blocks};
  if (tu_alloc(&out->x, dt, 4, shape, layout) || tu_alloc(&out->deq, FA_F32, 4, shape, layout) ||
      tu_alloc(&out->descale, FA_F32, 3, dshape, TU_CONTIGUOUS)) {
    ref_fp8_free(out);
    return -1;
  }
  fa_quantize_args args;
  fa_quantize_args_init(&args);
  args.block_rows = rows > 0 ? rows : 0;
  args.rotate = rotate;
  args.rotate_seed = seed;
  args.backend = FA_BACKEND_CPU;
  args.strict = 1;
  if (fa_quantize(&args, &src->t, &out->x.t, &out->descale.t, NULL) != FA_OK) {
    ref_fp8_free(out);
    return -1;
  }
  const int64_t n = tu_numel(&out->x);
  for (int64_t i = 0; i < n; ++i) {
    int64_t idx[4];
    tu_unflatten(&out->x, i, idx);
    const int64_t di[3] = {per_tensor ? 0 : idx[0], per_tensor ? 0 : idx[2],
                           rows > 0 ? idx[1] / rows : 0};
    /* the product in double, rounded once to float32: what the oracle's fp32 copies hold */
    tu_set(&out->deq, idx, tu_get(&out->x, idx) * tu_get(&out->descale, di));
  }
  if (tu_snapshot(&out->x) || tu_snapshot(&out->descale)) {
    ref_fp8_free(out);
    return -1;
  }
  return 0;
}

void ref_fp8_free(ref_fp8 *f) {
  tu_free(&f->x);
  tu_free(&f->deq);
  tu_free(&f->descale);
}
