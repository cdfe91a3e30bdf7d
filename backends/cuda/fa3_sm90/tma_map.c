/*
 * tma_map.c: see tma_map.h.
 */
#include "tma_map.h"

#include <cuda.h> /* the driver API's types and enums only: the function comes at run time */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static pthread_once_t encode_once = PTHREAD_ONCE_INIT;
static encode_tiled_fn encode_tiled;
static cudaError_t encode_lookup_error;
static enum cudaDriverEntryPointQueryResult encode_lookup_status;

static void find_encode(void) {
  void *fn = NULL;
  /* The entry point as CUDA 12.0 defined it (its signature has not changed since). */
  encode_lookup_error = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &encode_lookup_status);
  if (encode_lookup_error == cudaSuccess && encode_lookup_status == cudaDriverEntryPointSuccess)
    encode_tiled = (encode_tiled_fn)fn;
}

/* fa_tma_map for elements of `esize` bytes of the given type, with the given swizzle (a box row
   of at most 128 bytes under the 128-byte swizzle, a multiple of 16 bytes without one). */
static int tma_map_of(void *map, CUtensorMapDataType type, uint32_t esize,
                      CUtensorMapSwizzle swizzle, const void *base, int rank, const uint64_t *dims,
                      const uint64_t *strides, const uint32_t *box, char *err, size_t err_len) {
  if (((uintptr_t)map & 63) != 0) {
    snprintf(err, err_len, "tensor map storage not 64-byte aligned");
    return -1;
  }
  if (rank < 2 || rank > 5) {
    snprintf(err, err_len, "TMA tensor rank %d (2..5)", rank);
    return -1;
  }
  if (((uintptr_t)base & 15) != 0) {
    snprintf(err, err_len, "TMA needs a 16-byte aligned base address (got %p)", base);
    return -1;
  }
  for (int i = 0; i + 1 < rank; ++i)
    if (strides[i] % 16 != 0 || strides[i] >= ((uint64_t)1 << 40)) {
      snprintf(err, err_len, "TMA stride %d of %llu bytes: must be a multiple of 16 below 2^40", i,
               (unsigned long long)strides[i]);
      return -1;
    }
  /* A swizzled box row spans at most the swizzle's width. */
  const uint32_t span = swizzle == CU_TENSOR_MAP_SWIZZLE_128B  ? 128
                        : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64
                                                               : 0;
  if (span ? box[0] * esize > span || box[0] == 0 : (box[0] * esize) % 16 != 0) {
    if (span)
      snprintf(err, err_len, "TMA box of %u elements per row: at most %u bytes", box[0], span);
    else
      snprintf(err, err_len, "TMA box of %u elements per row: a multiple of 16 bytes", box[0]);
    return -1;
  }
  for (int i = 0; i < rank; ++i)
    if (box[i] == 0 || box[i] > 256 || dims[i] == 0 || dims[i] > ((uint64_t)1 << 32)) {
      snprintf(err, err_len, "TMA dimension %d: extent %llu, box %u (box 1..256)", i,
               (unsigned long long)dims[i], box[i]);
      return -1;
    }
  pthread_once(&encode_once, find_encode);
  if (!encode_tiled) {
    snprintf(err, err_len, "cuTensorMapEncodeTiled not found in the driver (%s, status %d)",
             cudaGetErrorName(encode_lookup_error), (int)encode_lookup_status);
    return -1;
  }
  cuuint64_t d[5], st[4];
  cuuint32_t bx[5], es[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    bx[i] = box[i];
    es[i] = 1;
    if (i + 1 < rank) st[i] = strides[i];
  }
  CUresult r = encode_tiled((CUtensorMap *)map, type, (cuuint32_t)rank, (void *)base, d, st, bx, es,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    snprintf(err, err_len, "cuTensorMapEncodeTiled failed (CUresult %d), rank %d, box %u x %u",
             (int)r, rank, box[1], box[0]);
    return -1;
  }
  return 0;
}

int fa_tma_map(void *map, int bf16, const void *base, int rank, const uint64_t *dims,
               const uint64_t *strides, const uint32_t *box, char *err, size_t err_len) {
  return tma_map_of(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                    2, CU_TENSOR_MAP_SWIZZLE_128B, base, rank, dims, strides, box, err, err_len);
}

int fa_tma_map_u8(void *map, const void *base, int rank, const uint64_t *dims,
                  const uint64_t *strides, const uint32_t *box, uint32_t swizzle_bytes, char *err,
                  size_t err_len) {
  if (swizzle_bytes != 64 && swizzle_bytes != 128) {
    snprintf(err, err_len, "TMA swizzle of %u bytes (64 or 128)", swizzle_bytes);
    return -1;
  }
  return tma_map_of(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1,
                    swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                    base, rank, dims, strides, box, err, err_len);
}

int fa_tma_map_f32_2d(void *map, const void *base, uint64_t cols, uint64_t rows,
                      uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, char *err,
                      size_t err_len) {
  const uint64_t dims[2] = {cols, rows}, strides[1] = {row_stride_bytes};
  const uint32_t box[2] = {box_cols, box_rows};
  return tma_map_of(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, CU_TENSOR_MAP_SWIZZLE_NONE, base, 2,
                    dims, strides, box, err, err_len);
}

int fa_tma_map_2d(void *map, int bf16, const void *base, uint64_t cols, uint64_t rows,
                  uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, char *err,
                  size_t err_len) {
  const uint64_t dims[2] = {cols, rows}, strides[1] = {row_stride_bytes};
  const uint32_t box[2] = {box_cols, box_rows};
  return fa_tma_map(map, bf16, base, 2, dims, strides, box, err, err_len);
}
