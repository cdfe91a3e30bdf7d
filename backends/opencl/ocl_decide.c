/*
 * ocl_decide.c: the OpenCL backend's one decide-function (supported or why, kernel name, tiles,
 * workspace). Pure: reads the probe's facts only.
 */
#include <stdio.h>
#include <string.h>

#include "ocl_internal.h"

static const char *dtype_name(fa_dtype dt) {
  return (dt == FA_F32 || dt == FA_F16 || dt == FA_BF16) ? fa_dtype_name(dt) : NULL;
}

/* Every fa_params field is honoured or refused here, never ignored; stream is a cl_command_queue
   (or NULL: the plugin's own queue, finished before returning). */
static int refuse_params(const fa_request *req, fa_decision *out) {
  const fa_params *p = req->params;
  if (p->kernel_family && strcmp(p->kernel_family, "flash") != 0) {
    fa_core_refuse(out, "kernel_family '%s' is unknown to opencl (families: flash)",
                   p->kernel_family);
    return 1;
  }
  const char *what = NULL;
  if (p->alibi_slopes)
    what = "ALiBi (alibi_slopes)";
  else if (p->dropout_p > 0.0f)
    what = "dropout (dropout_p > 0)";
  else if (p->cu_seqlens_q || p->cu_seqlens_k)
    what = "varlen (cu_seqlens_q/k)";
  else if (p->seqused_k)
    what = "seqused_k";
  else if (p->block_table)
    what = "paged KV (block_table)";
  if (what) {
    fa_core_refuse(out, "%s is not supported by opencl.flash", what);
    return 1;
  }
  if (p->num_splits > 1) {
    fa_core_refuse(out, "num_splits = %d: split-KV is not supported by opencl.flash (0 or 1)",
                   (int)p->num_splits);
    return 1;
  }
  return 0;
}

/* Largest |element offset| within one head of t for rows rows and head dim d. */
static unsigned long long head_span(const fa_tensor *t, int64_t rows, int64_t d) {
  const int64_t s2 = t->strides[1] < 0 ? -t->strides[1] : t->strides[1];
  const int64_t s4 = t->strides[3] < 0 ? -t->strides[3] : t->strides[3];
  return (unsigned long long)((rows > 0 ? rows - 1 : 0) * s2 + (d > 0 ? d - 1 : 0) * s4);
}

/* Whether the 16-byte loads of forward_gpu_pipelined.cl apply to t: head dim contiguous, every
   other stride and the element offset multiples of 8. */
static int vec_ok(const fa_tensor *t) {
  const int64_t off = (int64_t)(t->byte_offset / fa_dtype_size(t->dtype));
  return t->strides[3] == 1 && off % 8 == 0 && t->strides[0] % 8 == 0 && t->strides[1] % 8 == 0 &&
         t->strides[2] % 8 == 0;
}

/* The forward kernel (OCL_FWD_*) of a request on the kernel set t of device dev: the pipelined
   one when it is a forward on the GPU set, the head dim is at most 128, the device has the local
   memory and every element offset within one head of q, k and v fits in 31 bits (with 16-byte
   loads when the head dim is a multiple of 8 and q, k, v are aligned for them); else the tiled
   one. */
static int fwd_kernel(const fa_request *req, const ocl_device_info *dev, ocl_tiles t) {
  if (t.cpu || req->op != FA_OP_FORWARD || req->head_dim > OCL_GPU_FWD_PIPELINED_MAX_HEAD_DIM ||
      dev->local_mem < OCL_GPU_FWD_PIPELINED_LOCAL_BYTES)
    return OCL_FWD_TILED;
  /* The pipelined kernel adds 32-bit row/column offsets to a head's base, for rows up to 63 past
     the last (a tile's rows beyond the end: their offsets are formed, never loaded). */
  const unsigned long long lim = 0x7fffffffULL;
  if (head_span(req->q, req->seqlen_q + 64, req->head_dim) > lim ||
      head_span(req->k, req->seqlen_k + 64, req->head_dim) > lim ||
      head_span(req->v, req->seqlen_k + 64, req->head_dim) > lim)
    return OCL_FWD_TILED;
  const int vec = req->head_dim % 8 == 0 && vec_ok(req->q) && vec_ok(req->k) && vec_ok(req->v);
  return vec ? OCL_FWD_PIPELINED_VEC : OCL_FWD_PIPELINED;
}

void ocl_decide(const fa_request *req, fa_decision *out) {
  memset(out, 0, sizeof *out);
  if (req->device.kind != FA_DEVICE_OPENCL) {
    fa_core_refuse(out, "tensors are in %s memory; opencl.flash reads OpenCL buffers (cl_mem) only",
                   fa_device_kind_name(req->device.kind));
    return;
  }
  const ocl_state *s = ocl_state_get();
  if (!s->available) {
    fa_core_refuse(out, "%s", s->reason);
    return;
  }
  if (req->device.id < 0 || req->device.id >= s->count) {
    fa_core_refuse(out, "device id %d: this process sees %d OpenCL device(s)", (int)req->device.id,
                   s->count);
    return;
  }
  const char *dt = dtype_name(req->dtype);
  if (!dt) {
    fa_core_refuse(out, "dtype %s is not supported by opencl.flash (f32, f16, bf16)",
                   fa_dtype_name(req->dtype));
    return;
  }
  if (req->op != FA_OP_FORWARD && req->op != FA_OP_BACKWARD) {
    fa_core_refuse(out, "fa_forward_kvcache is not supported by opencl.flash");
    return;
  }
  if (req->head_dim_v != req->head_dim) {
    fa_core_refuse(out, "head_dim_v %lld != head_dim %lld: opencl.flash needs them equal",
                   (long long)req->head_dim_v, (long long)req->head_dim);
    return;
  }
  if (req->head_dim > OCL_MAX_HEAD_DIM) {
    fa_core_refuse(out, "head_dim %lld > %d for opencl.flash", (long long)req->head_dim,
                   OCL_MAX_HEAD_DIM);
    return;
  }
  if (refuse_params(req, out)) return;
  if (req->seqlen_q > 0x7fffffff || req->seqlen_k > 0x7fffffff || req->heads_q > 0x7fffffff) {
    fa_core_refuse(out, "seqlen or heads >= 2^31 is not supported by opencl.flash");
    return;
  }
  const ocl_device_info *dev = &s->devices[req->device.id];
  ocl_choice choice = {req->device.id, ocl_plan(dev, (int)req->head_dim)};
  choice.tiles.fwd = fwd_kernel(req, dev, choice.tiles);
  const ocl_tiles t = choice.tiles;
  const fa_params *p = req->params;
  /* The name is the one tests/conformance/kernels.c expects; the forward kernel shows in the
     program options (-DFA_FWD) that FA_OPENCL_DUMP_DIR records. */
  snprintf(out->kernel, sizeof out->kernel, "opencl.flash.%s.%s.hd%lld%s%s%s",
           req->op == FA_OP_FORWARD ? "fwd" : "bwd", dt, (long long)req->head_dim,
           p->causal ? ".causal" : "", p->window_enabled ? ".window" : "",
           p->softcap > 0.0f ? ".softcap" : "");
  out->supported = 1;
  int tm, tn;
  ocl_tiles_reported(t, req->op == FA_OP_FORWARD, &tm, &tn);
  out->tile_m = tm;
  out->tile_n = tn;
  out->num_splits = 1;
  out->deterministic = 1; /* no atomics: every output element is one work-item's */
  /* The backward's D vector is a buffer the plugin creates per call in the tensors' context
     (an OpenCL workspace would have to be a cl_mem, which params.workspace cannot carry). */
  out->workspace_bytes = 0;
  fa_decision_put(out, &choice, sizeof choice);
}
