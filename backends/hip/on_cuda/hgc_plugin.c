/*
 * hgc_plugin.c: hip-generic-on-cuda, a TEST plugin: the HIP backend's generic kernels
 * (backends/hip/generic, written against portable/fa_gpu_portable.h) compiled by nvcc and run on
 * an NVIDIA GPU through the CUDA runtime, so that the conformance suite can check the port's
 * indexing, masking, softmax and backward on an NVIDIA GPU where no AMD GPU exists. It is built as
 * libfa_cuda.so in a directory of its own (lib/hip_generic_on_cuda) and selected with
 * FA_PLUGIN_PATH; its kernels are named "cuda.hipgen.*" and its kernel family "hipgen" in
 * fa_backend_info, so no report can mistake it for the CUDA backend. Never installed.
 * kernel_family "mfma" runs the MFMA kernels with the instruction emulated (cdna/hg_mfma_emu.h):
 * everything of them but the instruction itself. FA_HIPGEN_LDS=<bytes> makes it stand for a
 * device with less LDS (hgc_lds).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hip/cdna/hg_mfma_layout.h"
#include "backends/hip/generic/hg_host.h"
#include "backends/hip/on_cuda/hgc_kernels.h"
#include "core/env.h"

#define HGC_PREFIX "cuda.hipgen"
/* The test plugin stands for a CDNA GPU's 64 KiB of LDS, less the static shared memory of the
   MFMA emulation; a launch above the 48 KiB a CUDA block gets by default opts in. */
#define HGC_SMEM_LIMIT (64 * 1024 - HG_MFMA_EMU_SMEM)
#define HGC_SMEM_DEFAULT (48 * 1024)

static fa_status cuda_failure(cudaError_t e, const char *what) {
  cudaGetLastError();
  fa_status st = e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND_FAILURE;
  return fa_core_set_error(st, "%s: %s failed: %s (%s)", HGC_PREFIX, what, cudaGetErrorName(e),
                           cudaGetErrorString(e));
}

static void hgc_probe(fa_plugin_probe *out) {
  memset(out, 0, sizeof *out);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    snprintf(out->reason, sizeof out->reason, "%s test plugin: no CUDA device (%s)", HGC_PREFIX,
             e == cudaSuccess ? "count 0" : cudaGetErrorName(e));
    cudaGetLastError();
    return;
  }
  out->available = 1;
  out->device_count = count;
  for (int i = 0; i < count; ++i) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    fa_probe_add_device(out, "cuda%d: %s (sm_%d%d)", i, prop.name, prop.major, prop.minor);
  }
  snprintf(out->arch, sizeof out->arch, "hip-generic-on-cuda (test plugin, CUDA %d.%d)",
           CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  /* "mfma": the MFMA kernels with the instruction emulated (cdna/hg_mfma_emu.h) */
  snprintf(out->kernel_families, sizeof out->kernel_families, "hipgen (generic, mfma emulated)");
  snprintf(out->dtypes, sizeof out->dtypes, "f16,bf16");
}

/* The LDS the plugin stands for: HGC_SMEM_LIMIT, or less where FA_HIPGEN_LDS (bytes) says so,
   so that the tiles core/plan gives only a smaller LDS run on an NVIDIA GPU too: the backward's
   32x32 at head dim 64, chosen where the 64x32 (33,024 bytes) does not fit
   (tests/gpu/h200_hip_generic.sh). */
static int64_t hgc_lds(void) {
  long long v;
  return fa_env_int("FA_HIPGEN_LDS", 1, HGC_SMEM_LIMIT - 1, &v) == FA_ENV_SET ? (int64_t)v
                                                                              : HGC_SMEM_LIMIT;
}

static void hgc_decide(const fa_request *req, fa_decision *out) {
  const int64_t lds = hgc_lds();
  hg_target t = {HGC_PREFIX,
                 FA_DEVICE_CUDA,
                 lds == HGC_SMEM_LIMIT ? "the test plugin (64 KiB of LDS less the emulation's)"
                                       : "the test plugin (FA_HIPGEN_LDS)",
                 lds,
                 HG_MATRIX_MFMA,
                 1};
  hg_decide(req, &t, out);
}

static fa_status hgc_launch(void *ctx, const char *name, unsigned gx, unsigned gy, unsigned gz,
                            size_t smem, void *stream, const hg_params *p) {
  (void)ctx;
  const void *fn = hgc_kernel(name);
  if (!fn) return fa_core_set_error(FA_ERR_INTERNAL, "%s: no kernel %s", HGC_PREFIX, name);
  dim3 grid = {gx, gy, gz}, block = {HG_THREADS, 1, 1};
  void *args[] = {(void *)p};
  cudaError_t e = cudaSuccess;
  /* The MFMA kernels' emulation adds HG_MFMA_EMU_SMEM of static shared memory: the opt-in is
     needed once dynamic + static pass 48 KiB (the hd128 MFMA backward's 45,312 + 4,096 bytes);
     harmless for kernels without it. */
  if (smem + HG_MFMA_EMU_SMEM > HGC_SMEM_DEFAULT &&
      (e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
          cudaSuccess)
    return cuda_failure(e, "cudaFuncSetAttribute (dynamic shared memory)");
  e = cudaLaunchKernel(fn, grid, block, args, smem, (cudaStream_t)stream);
  return e == cudaSuccess ? FA_OK : cuda_failure(e, name);
}

static fa_status hgc_zero(void *ctx, void *ptr, size_t bytes, void *stream) {
  (void)ctx;
  cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, (cudaStream_t)stream);
  return e == cudaSuccess ? FA_OK : cuda_failure(e, "cudaMemsetAsync");
}

static fa_status hgc_alloc(void *ctx, void **ptr, size_t bytes, void *stream) {
  (void)ctx;
  cudaError_t e = cudaMallocAsync(ptr, bytes, (cudaStream_t)stream);
  return e == cudaSuccess ? FA_OK : cuda_failure(e, "cudaMallocAsync");
}

static fa_status hgc_release(void *ctx, void *ptr, void *stream) {
  (void)ctx;
  cudaError_t e = cudaFreeAsync(ptr, (cudaStream_t)stream);
  return e == cudaSuccess ? FA_OK : cuda_failure(e, "cudaFreeAsync");
}

static fa_status hgc_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  const hg_runtime rt = {NULL, hgc_launch, hgc_zero, hgc_alloc, hgc_release};
  int previous = -1;
  cudaError_t e = cudaGetDevice(&previous);
  if (e != cudaSuccess) return cuda_failure(e, "cudaGetDevice");
  if (previous != req->device.id && (e = cudaSetDevice(req->device.id)) != cudaSuccess)
    return cuda_failure(e, "cudaSetDevice");
  fa_status st = hg_run(&rt, req, decision, workspace);
  if (previous != req->device.id) cudaSetDevice(previous);
  return st;
}

FA_PLUGIN_DEFINE(FA_BACKEND_CUDA, "cuda", hgc_probe, hgc_decide, hgc_run, NULL, NULL, NULL)
