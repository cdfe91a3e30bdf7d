/*
 * buffer_args.h: what the CUDA backend's buffer steps of a ring (cuda_buffer_ops.c) hand their
 * kernels (common/buffer_ops.cu): plain C, each tensor as up to 4 dims padded at the front to
 * exactly 4 (shape 1, stride 0), int64 shapes and element strides, its fa_dtype and first element.
 */
#ifndef FA_CUDA_BUFFER_ARGS_H
#define FA_CUDA_BUFFER_ARGS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_buffer_view {
  void *data;         /* element (0, 0, 0, 0): data + byte_offset */
  int32_t dtype;      /* fa_dtype: FA_F32, FA_F16 or FA_BF16 */
  int64_t shape[4];   /* padded at the front with 1 */
  int64_t strides[4]; /* in elements; padded at the front with 0 */
} cuda_buffer_view;

typedef struct cuda_buffer_args {
  cuda_buffer_view dst, src;         /* FILL: dst; COPY, ADD: src into dst; MERGE: [b, n, h, d] */
  cuda_buffer_view dst_lse, src_lse; /* MERGE: [1, b, h, n] (padded), float32 */
  float value;                       /* FILL */
  void *stream;                      /* cudaStream_t */
} cuda_buffer_args;

/* The launches of the buffer steps, each on a->stream, nothing launched where there is nothing
   to do; a cudaError_t. fill: dst (f32) = value. copy: dst = src rounded to dst's dtype (same
   shapes). add: dst (f32) += src (same shapes). merge: per row (z, i, h) of dst [b, n, h, d],
   the LSEs merged by fa_softmax_merge_lse into dst_lse, dst = w1 * dst + w2 * src. */
int cuda_buffer_fill_launch(const cuda_buffer_args *a);
int cuda_buffer_copy_launch(const cuda_buffer_args *a);
int cuda_buffer_add_launch(const cuda_buffer_args *a);
int cuda_buffer_merge_launch(const cuda_buffer_args *a);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_BUFFER_ARGS_H */
