/*
 * flash_attn_dlpack.h: inline helpers that view a DLPack DLTensor (PyTorch, JAX, CuPy, NumPy
 * interop) as an fa_tensor, without making DLPack a dependency of the library: include your
 * dlpack.h (any version with kDLCUDA, >= 0.6) before this header.
 *
 * The view shares the DLTensor's memory; nothing is copied. A DLTensor without strides is compact
 * row-major, as DLPack specifies.
 */
#ifndef FLASH_ATTN_DLPACK_H
#define FLASH_ATTN_DLPACK_H

#ifndef DLPACK_VERSION
#error "include dlpack/dlpack.h before flash_attn_dlpack.h"
#endif

#include <string.h>

#include "flash_attn.h"

/*
 * Fills *out as a view of *t. Returns FA_OK, or FA_ERR_INVALID_ARGUMENT / FA_ERR_UNSUPPORTED with
 * *why (if why is not NULL) set to a constant string naming the problem.
 */
static inline fa_status fa_tensor_from_dlpack(const DLTensor *t, fa_tensor *out, const char **why) {
  const char *unused;
  if (!why) why = &unused;
  *why = "";
  if (!t || !out) {
    *why = "fa_tensor_from_dlpack: NULL argument";
    return FA_ERR_INVALID_ARGUMENT;
  }
  memset(out, 0, sizeof *out);
  if (t->ndim < 1 || t->ndim > FA_MAX_DIMS) {
    *why = "DLTensor.ndim must be in [1, 4]";
    return FA_ERR_UNSUPPORTED;
  }
  switch ((int)t->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      out->device.kind = FA_DEVICE_CPU;
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      out->device.kind = FA_DEVICE_CUDA;
      break;
    case kDLROCM:
      out->device.kind = FA_DEVICE_HIP;
      break;
    case kDLOpenCL:
      out->device.kind = FA_DEVICE_OPENCL;
      break;
    default:
      *why = "DLTensor.device.device_type has no flashattn backend";
      return FA_ERR_UNSUPPORTED;
  }
  out->device.id = t->device.device_id;
  if (t->dtype.lanes != 1) {
    *why = "DLTensor.dtype.lanes must be 1";
    return FA_ERR_UNSUPPORTED;
  }
  if (t->dtype.code == kDLFloat && t->dtype.bits == 32)
    out->dtype = FA_F32;
  else if (t->dtype.code == kDLFloat && t->dtype.bits == 16)
    out->dtype = FA_F16;
  else if (t->dtype.code == kDLBfloat && t->dtype.bits == 16)
    out->dtype = FA_BF16;
  else if (t->dtype.code == kDLInt && t->dtype.bits == 32)
    out->dtype = FA_I32;
  else {
    *why = "DLTensor.dtype must be float32, float16, bfloat16 or int32";
    return FA_ERR_UNSUPPORTED;
  }
  out->data = t->data;
  out->byte_offset = t->byte_offset;
  out->ndim = t->ndim;
  int64_t compact = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    out->shape[i] = t->shape[i];
    out->strides[i] = t->strides ? t->strides[i] : compact;
    compact *= t->shape[i];
  }
  return FA_OK;
}

#endif /* FLASH_ATTN_DLPACK_H */
