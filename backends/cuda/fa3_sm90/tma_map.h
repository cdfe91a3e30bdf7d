/*
 * tma_map.h: TMA tensor maps (CUtensorMap) for the Hopper kernels, made with the driver's
 * cuTensorMapEncodeTiled obtained through the runtime's cudaGetDriverEntryPointByVersion, so the
 * library needs no -lcuda.
 */
#ifndef FA_CUDA_TMA_MAP_H
#define FA_CUDA_TMA_MAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The map (64 bytes, 64-byte aligned: a CUtensorMap) of a 2-D tensor of 16-bit elements (bf16
   when bf16 != 0, else f16): rows x cols, rows row_stride_bytes apart (a multiple of 16), read
   in boxes of box_rows x box_cols (box_cols * 2 <= 128 bytes: 128-byte swizzle), elements out of
   bounds read as zero. Returns 0, or -1 with a message naming the failing argument or call in
   err. */
int fa_tma_map_2d(void *map, int bf16, const void *base, uint64_t cols, uint64_t rows,
                  uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, char *err,
                  size_t err_len);

/* The same for a tensor of rank 2..5: dims[0] the contiguous dimension (elements), strides[i]
   the byte distance between consecutive indices of dims[i + 1] (multiples of 16), box[i] the box
   extent along dims[i] (box[0] * 2 <= 128). */
int fa_tma_map(void *map, int bf16, const void *base, int rank, const uint64_t *dims,
               const uint64_t *strides, const uint32_t *box, char *err, size_t err_len);

/* The same as fa_tma_map for a tensor of bytes (FP8 elements; box[0] bytes a row), with a 64- or
   128-byte swizzle (swizzle_bytes; box[0] at most that). */
int fa_tma_map_u8(void *map, const void *base, int rank, const uint64_t *dims,
                  const uint64_t *strides, const uint32_t *box, uint32_t swizzle_bytes, char *err,
                  size_t err_len);

/* The same as fa_tma_map_2d for fp32 elements, without swizzle (box_cols * 4 a multiple of 16,
   at most 256 elements). */
int fa_tma_map_f32_2d(void *map, const void *base, uint64_t cols, uint64_t rows,
                      uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, char *err,
                      size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* FA_CUDA_TMA_MAP_H */
