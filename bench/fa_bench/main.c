/*
 * main.c: `fa-bench` times fa_forward and fa_backward over the FlashAttention benchmark sweep (or
 * fa_forward_kvcache in --decode mode, packed sequences in --varlen mode, fa_quantize in
 * --quantize mode) and prints TFLOP/s (GB/s for --quantize) and milliseconds per shape with the
 * kernel the run report names.
 *
 * With --backend cuda the tensors live in CUDA device memory and every timed call is bracketed by
 * a device synchronize (the calls run on params.stream = NULL, the default stream); with --backend
 * opencl in cl_mem buffers on the default OpenCL device; every other backend gets host memory
 * (hip is reported with the library's reason).
 */
#include <stdio.h>

#include "fa_bench.h"
#include "tools/device_mem.h"

/* What the chosen backend runs on, for the header (devices and arch from fa_backend_info). */
static void print_backend(int32_t id) {
  fa_backend_desc d[8];
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&d[i]);
  int32_t n = 0;
  if (fa_backend_info(d, 8, &n) != FA_OK) return;
  for (int32_t i = 0; i < n && i < 8; ++i)
    if (d[i].id == id || (id == FA_BACKEND_AUTO && d[i].available))
      printf("# %s: %s%s, %s, arch %s\n", d[i].name,
             d[i].available ? "" : "unavailable: ", d[i].available ? "available" : d[i].reason,
             d[i].devices, d[i].arch);
}

/* Whether fa_backend_info reports the backend available; why not into why. */
static int backend_available(int32_t id, char *why, size_t n) {
  fa_backend_desc d[8];
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&d[i]);
  int32_t count = 0;
  if (fa_backend_info(d, 8, &count) != FA_OK) {
    snprintf(why, n, "fa_backend_info failed: %s", fa_last_error());
    return 0;
  }
  for (int32_t i = 0; i < count && i < 8; ++i)
    if (d[i].id == id) {
      snprintf(why, n, "%s", d[i].available ? "" : d[i].reason);
      return d[i].available != 0;
    }
  snprintf(why, n, "not known to this library");
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (!parse_args(argc, argv, &o)) return 2;

  printf("# fa-bench: flashattn-c %s, backend %s, dtype %s, median of %d (after %d warmup)\n",
         fa_version(NULL, NULL, NULL), fa_backend_name(o.backend), fa_dtype_name(o.dtype), o.iters,
         o.warmup);
  /* The CUDA backend computes on CUDA memory, the OpenCL backend on OpenCL buffers: the tensors go
     there, and the clock waits for the device. Everything else keeps host memory, where the sweep
     takes CPU-sized defaults (FlashAttention's sweep there takes hours on a few cores). */
  fa_device_kind kind = o.backend == FA_BACKEND_CUDA     ? FA_DEVICE_CUDA
                        : o.backend == FA_BACKEND_OPENCL ? FA_DEVICE_OPENCL
                                                         : FA_DEVICE_CPU;
  if (kind == FA_DEVICE_CPU && apply_host_defaults(&o))
    printf(
        "# host memory: the CPU-sized sweep (the defaults of --hdims, --seqlens, --tokens and "
        "--hidden for host memory); --full runs FlashAttention's 16k-token sweep\n");
  if (o.list) return run_sweep(&o);
  if (kind == FA_DEVICE_CUDA) g_dev.kind = FA_DEVICE_CUDA;
  if (o.backend == FA_BACKEND_OPENCL) {
    char why[256];
    if (devmem_default_device(FA_DEVICE_OPENCL, &g_dev, why, sizeof why) != 0) {
      fprintf(stderr, "fa-bench: no OpenCL device: %s\n", why);
      return 1;
    }
  }
  const char *sync =
      g_dev.kind == FA_DEVICE_CPU ? "" : ", device synchronized around every timed call";
  if (o.quantize)
    printf(
        "# GB/s: quantize (x read + y and descales written) / time, copy 2 * x's bytes / time; %s "
        "memory%s\n",
        fa_device_kind_name(g_dev.kind), sync);
  else
    printf(
        "# FLOPs: fwd 4*B*H*S*S*D (x0.5 causal; visible pairs with --window), bwd 2.5x fwd; %s "
        "memory%s\n",
        fa_device_kind_name(g_dev.kind), sync);
  print_backend(o.backend);
  if (g_dev.kind != FA_DEVICE_CPU) {
    /* Without the backend (or CUDA in this build) every allocation would fail: say why once. */
    char why[FA_REASON_LEN];
    if (!backend_available(o.backend, why, sizeof why)) {
      fprintf(stderr, "fa-bench: backend %s is not available: %s\n", fa_backend_name(o.backend),
              why);
      return 1;
    }
    if (!devmem_supported(g_dev.kind)) {
      void *probe = NULL;
      (void)devmem_alloc(g_dev, 1, &probe, why, sizeof why);
      fprintf(stderr, "fa-bench: %s\n", why);
      return 1;
    }
  }
  return o.decode     ? run_decode(&o)
         : o.varlen   ? run_varlen(&o)
         : o.quantize ? run_quantize(&o)
                      : run_sweep(&o);
}
