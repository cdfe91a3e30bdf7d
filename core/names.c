/* names.c: the names and sizes of the public enums, one definition for the library, its plugins,
 * tools and tests. */
#include "flash_attn.h"

const char *fa_dtype_name(int32_t dtype) {
  switch (dtype) {
    case FA_F32:
      return "f32";
    case FA_F16:
      return "f16";
    case FA_BF16:
      return "bf16";
    case FA_I32:
      return "i32";
    case FA_F8E4M3:
      return "f8e4m3";
    case FA_F8E5M2:
      return "f8e5m2";
    default:
      return "invalid";
  }
}

size_t fa_dtype_size(int32_t dtype) {
  switch (dtype) {
    case FA_F32:
      return 4;
    case FA_F16:
      return 2;
    case FA_BF16:
      return 2;
    case FA_I32:
      return 4;
    case FA_F8E4M3:
    case FA_F8E5M2:
      return 1;
    default:
      return 0;
  }
}

const char *fa_device_kind_name(int32_t kind) {
  switch (kind) {
    case FA_DEVICE_CPU:
      return "cpu";
    case FA_DEVICE_CUDA:
      return "cuda";
    case FA_DEVICE_HIP:
      return "hip";
    case FA_DEVICE_OPENCL:
      return "opencl";
    default:
      return "invalid";
  }
}
