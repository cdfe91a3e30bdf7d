/*
 * cpu_decide.c: the CPU backend's one decide-function. Whether a request is supported, which
 * kernel runs, its tiles and its workspace are all answered here and nowhere else; fa_plan,
 * fa_backend_info's feature list and the call itself go through it. Pure: no allocation, no I/O.
 */
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/plan.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"

#if defined(__GNUC__)
#define CPU_PRINTF_LIKE __attribute__((format(printf, 2, 3)))
#else
#define CPU_PRINTF_LIKE
#endif

static void refuse(fa_decision *out, const char *fmt, ...) CPU_PRINTF_LIKE;

static void refuse(fa_decision *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->reason, sizeof out->reason, fmt, ap);
  va_end(ap);
  out->supported = 0;
}

/* The storage dtypes the kernels compute on, by name; NULL for any other. */
static const char *storage_dtype_name(fa_dtype dtype) {
  switch (dtype) {
    case FA_F32:
      return "f32";
    case FA_F16:
      return "f16";
    case FA_BF16:
      return "bf16";
    default:
      return NULL;
  }
}

static const char *device_kind_name(fa_device_kind kind) {
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
      return "unknown";
  }
}

/* The first feature of the request this backend does not have yet, with its reason; 0 if none.
   Each is named as the caller set it, so the message says which field to change. */
static int refuse_missing_feature(const fa_params *p, fa_decision *out) {
  const char *missing = NULL;
  if (p->window_enabled)
    missing = "sliding window (window_enabled)";
  else if (p->softcap != 0.0f)
    missing = "softcap (softcap > 0)";
  else if (p->alibi_slopes)
    missing = "ALiBi (alibi_slopes)";
  else if (p->dropout_p != 0.0f)
    missing = "dropout (dropout_p > 0)";
  else if (p->cu_seqlens_q)
    missing = "varlen (cu_seqlens_q)";
  else if (p->cu_seqlens_k)
    missing = "varlen (cu_seqlens_k)";
  else if (p->seqused_k)
    missing = "seqused_k";
  else if (p->block_table)
    missing = "paged KV (block_table)";
  if (missing) {
    refuse(out, "%s is not supported by cpu.flash yet", missing);
    return 1;
  }
  if (p->num_splits > 1) {
    refuse(out, "split-KV (num_splits = %d) is not supported by cpu.flash yet", (int)p->num_splits);
    return 1;
  }
  if (p->kernel_family && strcmp(p->kernel_family, "flash") != 0) {
    refuse(out, "kernel_family '%s' is unknown to cpu (families: flash)", p->kernel_family);
    return 1;
  }
  return 0;
}

static int refuse_head_dim(const char *name, int64_t dim, fa_decision *out) {
  if (dim >= 1 && dim <= CPU_MAX_HEAD_DIM) return 0;
  if (dim < 1)
    refuse(out, "%s %lld < 1 for cpu.flash", name, (long long)dim);
  else
    refuse(out, "%s %lld > %d for cpu.flash", name, (long long)dim, CPU_MAX_HEAD_DIM);
  return 1;
}

void cpu_decide(const fa_request *req, fa_decision *out) {
  memset(out, 0, sizeof *out);
  const fa_params *p = req->params;
  const char *dtype = storage_dtype_name(req->dtype);
  if (req->device.kind != FA_DEVICE_CPU) {
    refuse(out, "tensors are in %s memory; cpu.flash reads host memory only",
           device_kind_name(req->device.kind));
    return;
  }
  if (!dtype) {
    refuse(out, "dtype %s is not supported by cpu.flash (f32, f16, bf16)",
           req->dtype == FA_I32 ? "i32" : "invalid");
    return;
  }
  if (req->op != FA_OP_FORWARD && req->op != FA_OP_BACKWARD) {
    refuse(out, "operation %d is unknown to cpu.flash", (int)req->op);
    return;
  }
  if (refuse_head_dim("head_dim", req->head_dim, out) ||
      refuse_head_dim("head_dim_v", req->head_dim_v, out) || refuse_missing_feature(p, out))
    return;

  /* Tiles sized for the larger of the two head dims: the K and V tiles share the budget. */
  int64_t dmax = req->head_dim > req->head_dim_v ? req->head_dim : req->head_dim_v;
  fa_tile_limits limits = {cpu_fast_memory_bytes(), 4, 4, 4, CPU_MAX_TILE_M, CPU_MAX_TILE_N};
  fa_tile_plan tiles = fa_plan_tiles(&limits, dmax);

  cpu_problem pb;
  cpu_problem_init(&pb, req, tiles.tile_m, tiles.tile_n);
  int64_t threads = omp_get_max_threads();
  int64_t tasks = cpu_parallel_tasks(&pb, req->op);
  if (threads > tasks) threads = tasks;

  char dims[32];
  if (req->head_dim_v == req->head_dim)
    snprintf(dims, sizeof dims, "%lld", (long long)req->head_dim);
  else
    snprintf(dims, sizeof dims, "%lldx%lld", (long long)req->head_dim, (long long)req->head_dim_v);
  /* The kernel build (generic, avx2, avx512) is part of the name: a CPU without AVX-512 runs
     slower code, and the report says so. */
  snprintf(out->kernel, sizeof out->kernel, "cpu.flash.%s.%s.%s.hd%s%s", cpu_kernels_get()->isa,
           req->op == FA_OP_FORWARD ? "fwd" : "bwd", dtype, dims, p->causal ? ".causal" : "");
  out->supported = 1;
  out->tile_m = tiles.tile_m;
  out->tile_n = tiles.tile_n;
  out->num_splits = 1;
  /* No atomics, and each output element is summed in an order fixed by the tiles alone. */
  out->deterministic = 1;
  out->workspace_bytes = cpu_workspace_bytes(&pb, req->op, (int)threads);
}
