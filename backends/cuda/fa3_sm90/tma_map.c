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

int fa_tma_map_2d(void *map, int bf16, const void *base, uint64_t cols, uint64_t rows,
                  uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, char *err,
                  size_t err_len) {
  if (((uintptr_t)map & 63) != 0) {
    snprintf(err, err_len, "tensor map storage not 64-byte aligned");
    return -1;
  }
  if (((uintptr_t)base & 15) != 0 || row_stride_bytes % 16 != 0) {
    snprintf(err, err_len, "TMA needs 16-byte aligned rows (base %p, row stride %llu bytes)", base,
             (unsigned long long)row_stride_bytes);
    return -1;
  }
  if (box_cols * 2 > 128 || box_cols == 0 || box_rows == 0 || box_rows > 256) {
    snprintf(err, err_len, "TMA box %u x %u: at most 128 bytes per row, 256 rows", box_rows,
             box_cols);
    return -1;
  }
  pthread_once(&encode_once, find_encode);
  if (!encode_tiled) {
    snprintf(err, err_len, "cuTensorMapEncodeTiled not found in the driver (%s, status %d)",
             cudaGetErrorName(encode_lookup_error), (int)encode_lookup_status);
    return -1;
  }
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  CUresult r = encode_tiled(
      (CUtensorMap *)map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      2, (void *)base, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    snprintf(err, err_len,
             "cuTensorMapEncodeTiled failed (CUresult %d) for %llu x %llu, box %u x %u", (int)r,
             (unsigned long long)rows, (unsigned long long)cols, box_rows, box_cols);
    return -1;
  }
  return 0;
}
