/*
 * abi_sizes.c: prints the binary layout facts of the public header and of the plugin contract, one
 * per line ("size fa_params 232", "const FA_F32 1"; plugin_* for core/plugin.h), for
 * tests/abi/check_abi.cmake to compare with tests/abi/expected_layout.txt. The first lines are the
 * versions the headers declare.
 */
#include <stdio.h>

#include "flash_attn.h"
#include "core/plugin.h"

#define SIZE(T) printf("size %s %zu\n", #T, sizeof(T))
#define CONST(C) printf("const %s %lld\n", #C, (long long)(C))
#define PLUGIN_SIZE(T) printf("plugin_size %s %zu\n", #T, sizeof(T))
#define PLUGIN_CONST(C) printf("plugin_const %s %lld\n", #C, (long long)(C))

int main(void) {
  printf("version %d.%d.%d\n", FA_VERSION_MAJOR, FA_VERSION_MINOR, FA_VERSION_PATCH);
  printf("plugin_abi %u\n", (unsigned)FA_PLUGIN_ABI_VERSION);
  /* Public API (api/flash_attn.h). */
  SIZE(fa_device);
  SIZE(fa_tensor);
  SIZE(fa_params);
  SIZE(fa_run_info);
  SIZE(fa_kvcache_args);
  SIZE(fa_quantize_args);
  SIZE(fa_backend_desc);
  SIZE(fa_ring_args);
  SIZE(fa_transport_desc);
  SIZE(fa_status);
  SIZE(fa_dtype);
  SIZE(fa_device_kind);
  CONST(FA_MAX_DIMS);
  CONST(FA_NAME_LEN);
  CONST(FA_KERNEL_LEN);
  CONST(FA_REASON_LEN);
  CONST(FA_ERR_INTERNAL);
  CONST(FA_I32);
  CONST(FA_F8E4M3);
  CONST(FA_F8E5M2);
  CONST(FA_DEVICE_OPENCL);
  CONST(FA_BACKEND_COUNT_);
  CONST(FA_CAUSAL_TOP_LEFT);
  CONST(FA_TRANSPORT_SELF);
  CONST(FA_TRANSPORT_MPI);
  CONST(FA_TRANSPORT_NCCL);
  CONST(FA_TRANSPORT_COUNT_);
  CONST(FA_RING_ZIGZAG);
  /* Plugin contract (core/plugin.h): governed by FA_PLUGIN_ABI_VERSION. */
  PLUGIN_SIZE(fa_request);
  PLUGIN_SIZE(fa_decision);
  PLUGIN_SIZE(fa_plugin_probe);
  PLUGIN_SIZE(fa_plugin);
  PLUGIN_SIZE(fa_quantize_request);
  PLUGIN_CONST(FA_OP_KVCACHE);
  return 0;
}
