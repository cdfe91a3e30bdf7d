/*
 * quant_args.h: what the CUDA backend's fa_quantize (cuda_quantize.c) hands its kernels
 * (common/quantize.cu): plain C, element strides, sizes, the rotation and the descale layout.
 */
#ifndef FA_CUDA_QUANT_ARGS_H
#define FA_CUDA_QUANT_ARGS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_quant_args {
  const void *x;
  void *y;
  float *descale;   /* NULL: y is a float type (rotation only) */
  int32_t xdt, ydt; /* fa_dtype of x and y */
  int64_t batch, seqlen, heads, dim;
  int64_t xs[4], ys[4]; /* element strides of x and y, [batch, token, head, column] */
  int64_t dshape[3];    /* descale [batch or 1, heads or 1, blocks] */
  int64_t ds[3];        /* its element strides */
  int64_t block_rows;   /* tokens per descale block (seqlen when one block) */
  int32_t rotate, log2_dim;
  uint64_t seed;
  float fp8_max; /* largest finite value of y's FP8 format */
  void *stream;  /* cudaStream_t */
} cuda_quant_args;

/* The launches of fa_quantize: with descales, zeroed, the amax pass, then finished; then the
   rows stored (when there are any). A cudaError_t. */
int cuda_quant_launch(const cuda_quant_args *a);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_QUANT_ARGS_H */
