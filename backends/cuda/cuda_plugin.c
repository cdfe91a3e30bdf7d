/*
 * cuda_plugin.c: the CUDA backend's entry point and its run(). decide() (cuda_decide.c) says what
 * runs; run() makes the tensors' device current, prepares the kernels there once, fills the
 * kernel arguments from the request and launches on params.stream. Calls are asynchronous with
 * respect to the host, as CUDA calls are: errors a launch reports are returned, faults inside a
 * kernel surface at the caller's next synchronisation.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/mask.h"
#include "cuda_internal.h"
#include "fa2_sm80/fa2_args.h"
#include "fa2_sm80/fa2_launch.h"
#include "fa3_sm90/fa3_args.h"

static pthread_mutex_t prepared_lock = PTHREAD_MUTEX_INITIALIZER;
static int prepared[CUDA_MAX_DEVICES]; /* 1: kernel attributes set on that device */

fa_status cuda_failure(int cuda_error, const char *what) {
  const cudaError_t e = (cudaError_t)cuda_error;
  cudaGetLastError(); /* a launch error is not sticky: clear it for the caller's next call */
  fa_status st = e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND_FAILURE;
  return fa_core_set_error(st, "cuda: %s failed: %s (%s)", what, cudaGetErrorName(e),
                           cudaGetErrorString(e));
}

fa_status cuda_device_enter(int id, int *previous) {
  *previous = -1;
  cudaError_t e = cudaGetDevice(previous);
  if (e != cudaSuccess) return cuda_failure(e, "cudaGetDevice");
  if (*previous != id && (e = cudaSetDevice(id)) != cudaSuccess)
    return cuda_failure(e, "cudaSetDevice");
  return FA_OK;
}

void cuda_device_leave(int id, int previous) {
  if (previous != id) cudaSetDevice(previous);
}

/* Raises the kernels' shared-memory limit on the current device, once per device. */
static fa_status prepare_device(int id) {
  pthread_mutex_lock(&prepared_lock);
  int e = 0;
  if (!prepared[id]) {
    const cuda_device_info *dev = &cuda_state_get()->devices[id];
    e = fa2_prepare_device(dev->smem_optin, dev->cc_major);
#if FA_CUDA_HAS_FA3
    if (dev->cc_major == 9 && !dev->as_sm80) {
      for (int i = 0; i < FA3_FWD_CONFIG_COUNT && e == 0; ++i) {
        const fa3_fwd_config *c = fa3_fwd_config_of(i);
        if ((int64_t)c->smem_bytes <= dev->smem_optin) e = c->prepare();
      }
      if (e == 0 && (int64_t)FA3_BWD_SMEM(64) <= dev->smem_optin) e = fa3_bwd_prepare_hd64();
      if (e == 0 && (int64_t)FA3_BWD_SMEM(128) <= dev->smem_optin) e = fa3_bwd_prepare_hd128();
      if (e == 0 && (int64_t)FA3_BWD_SMEM(256) <= dev->smem_optin) e = fa3_bwd_prepare_hd256();
    }
#endif
    if (e == 0) prepared[id] = 1;
  }
  pthread_mutex_unlock(&prepared_lock);
  return e == 0 ? FA_OK : cuda_failure(e, "preparing the fa2/fa3 kernels");
}

static void *tensor_ptr(const fa_tensor *t) { return fa_tensor_base(t); }

/* Without the caller's workspace, device memory from the stream-ordered pool: freed in stream
   order after the kernels, reused by the pool for the next call, returned by fa_release. */
fa_status cuda_workspace_take(void *given, size_t bytes, void *stream, void **ws) {
  *ws = given;
  if (given || bytes == 0) return FA_OK;
  cudaError_t e = cudaMallocAsync(ws, bytes, (cudaStream_t)stream);
  return e == cudaSuccess ? FA_OK : cuda_failure(e, "allocating the workspace");
}
int cuda_workspace_give_back(void *given, void *ws, void *stream, int e) {
  if (!ws || ws == given) return e;
  cudaError_t f = cudaFreeAsync(ws, (cudaStream_t)stream);
  return e == 0 && f != cudaSuccess ? (int)f : e;
}
void *cuda_workspace_aligned(void *ws) {
  return ws ? (void *)(((uintptr_t)ws + CUDA_WORKSPACE_ALIGN - 1) &
                       ~(uintptr_t)(CUDA_WORKSPACE_ALIGN - 1))
            : NULL;
}

static fa_status run_forward(const fa_request *req, const fa_decision *decision,
                             const cuda_choice *ch, void *workspace) {
  cuda_fwd_args a;
  cuda_fwd_args_of(req, &a);
#if FA_CUDA_HAS_FA3
  if (ch->family == CUDA_FA3) {
    /* The tensor maps need 64-byte alignment: static storage per call would not be reentrant. */
    fa3_fwd_args x;
    memset(&x, 0, sizeof x);
    x.a = a;
    x.sm_count = ch->grid;
    const fa3_fwd_config *cfg = fa3_fwd_config_of(ch->fa3_config);
    const size_t ws_bytes = fa3_fwd_workspace_bytes(cfg);
    const int fp8 = cfg && (cfg->flags & FA3_FP8);
    if (!cfg || cfg->tile_m != decision->tile_m || cfg->tile_n != decision->tile_n ||
        fp8 != (req->dtype == FA_F8E4M3 || req->dtype == FA_F8E5M2) ||
        (fp8        ? cuda_fp8_workspace_bytes(req, ch->fa3_config)
         : ws_bytes ? ws_bytes + CUDA_WORKSPACE_ALIGN
                    : 0) != decision->workspace_bytes)
      return fa_core_set_error(FA_ERR_INTERNAL, "cuda: no fa3 forward kernel as decided (%s)",
                               decision->kernel);
    /* SEQS: sequences of their own lengths, or a dense call as such (the views: the launch's) */
    if (cfg->flags & FA3_SEQS) cuda_seq_index_of(req, &x.ix);
    /* The dynamic schedule's tile counter: the stream's kept one (no allocation or memset per
       call), else the workspace's, cleared by the launch. With the caller's workspace the kept
       one once the device's counters exist. */
    cudaStream_t stream = (cudaStream_t)a.p.stream;
    int32_t *kept = ws_bytes && !fp8
                        ? cuda_stream_counter_hold(req->device.id, stream, workspace != NULL)
                        : NULL;
    void *ws = NULL;
    fa_status st =
        kept ? FA_OK : cuda_workspace_take(workspace, decision->workspace_bytes, stream, &ws);
    if (st != FA_OK) return st;
    x.tile_counter = kept ? kept : ws_bytes ? (int32_t *)cuda_workspace_aligned(ws) : NULL;
    x.counter_zeroed = kept != NULL;
    if (fp8) cuda_fp8_args_of(req, ch->fa3_config, ws, &x); /* descales, Vᵀ, the counter */
    char err[200];
    int e = fa3_fwd_launch(&x, cfg, err, sizeof err);
    if (kept) cuda_stream_counter_drop();
    e = cuda_workspace_give_back(workspace, ws, stream, e);
    if (e < 0) return fa_core_set_error(FA_ERR_INTERNAL, "cuda: the fa3 forward: %s", err);
    return e == 0 ? FA_OK : cuda_failure(e, "the fa3 forward launch");
  }
#endif
  fa2_fwd_fn fn = fa2_fwd_for(ch->fa2.head_dim_padded);
  if (ch->family != CUDA_FA2 || !fn || ch->fa2.tile_m != decision->tile_m ||
      ch->fa2.tile_n != decision->tile_n)
    return fa_core_set_error(FA_ERR_INTERNAL, "cuda: no forward kernel as decided (%s)",
                             decision->kernel);
  a.size_class = ch->fa2.size_class;
  int e = fn(&a);
  return e == 0 ? FA_OK : cuda_failure(e, "the fa2 forward launch");
}

static fa_status run_backward(const fa_request *req, const fa_decision *decision,
                              const cuda_choice *ch, void *workspace) {
  cuda_bwd_args a;
  memset(&a, 0, sizeof a);
  a.q = tensor_ptr(req->q);
  a.k = tensor_ptr(req->k);
  a.v = tensor_ptr(req->v);
  a.out = tensor_ptr(req->out);
  a.dout = tensor_ptr(req->dout);
  a.lse = (const float *)tensor_ptr(req->lse);
  a.dq = tensor_ptr(req->dq);
  a.dk = tensor_ptr(req->dk);
  a.dv = tensor_ptr(req->dv);
  cuda_strides_of(req->q, &a.q_str);
  cuda_strides_of(req->k, &a.k_str);
  cuda_strides_of(req->v, &a.v_str);
  cuda_strides_of(req->out, &a.o_str);
  cuda_strides_of(req->dout, &a.do_str);
  cuda_strides_of(req->dq, &a.dq_str);
  cuda_strides_of(req->dk, &a.dk_str);
  cuda_strides_of(req->dv, &a.dv_str);
  cuda_lse_strides_of(req, &a.lse_str);
  const cuda_device_info *dev = &cuda_state_get()->devices[req->device.id];
  const int fa3 = ch->family == CUDA_FA3;
  if (fa3) {
    cuda_fa3_bwd_sizing(req, decision->deterministic, ch->grid, &a);
  } else {
    a.size_class = ch->fa2.size_class;
    a.dq_layout = ch->fa2.dq_layout;
    cuda_bwd_sizing(req, &ch->fa2, decision->deterministic, dev->sm_count, &a);
  }
  if ((fa3 && !FA_CUDA_HAS_FA3) || decision->tile_m != a.tile_m ||
      cuda_bwd_workspace_bytes(&a) + CUDA_WORKSPACE_ALIGN != decision->workspace_bytes)
    return fa_core_set_error(FA_ERR_INTERNAL, "cuda: no backward kernel as decided (%s)",
                             decision->kernel);
  cudaStream_t stream = (cudaStream_t)a.p.stream;
  void *ws;
  fa_status st = cuda_workspace_take(workspace, decision->workspace_bytes, stream, &ws);
  if (st != FA_OK) return st;
  int e;
  char err[200] = "";
#if FA_CUDA_HAS_FA3
  if (fa3) {
    /* The tensor maps need 64-byte alignment: on the stack, not static (reentrancy). */
    fa3_bwd_args x;
    memset(&x, 0, sizeof x);
    x.a = a;
    x.grid_blocks = ch->grid; /* the persistent grid, where fa3_bwd_grid_blocks says it pays */
    e = fa3_bwd_launch(&x, cuda_workspace_aligned(ws), err, sizeof err);
  } else
#endif
    e = fa2_bwd_launch(&a, ch->fa2.tile_n, cuda_workspace_aligned(ws));
  e = cuda_workspace_give_back(workspace, ws, stream, e);
  if (e < 0) return fa_core_set_error(FA_ERR_INTERNAL, "cuda: the fa3 backward: %s", err);
  return e == 0 ? FA_OK : cuda_failure(e, fa3 ? "the fa3 backward" : "the fa2 backward");
}

fa_status cuda_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  if (!decision->supported)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "cuda: %s", decision->reason);
  const int id = req->device.id;
  int previous;
  fa_status st = cuda_device_enter(id, &previous);
  if (st != FA_OK) return st;
  cuda_choice ch;
  fa_decision_get(decision, &ch, sizeof ch);
  st = prepare_device(id);
  if (st == FA_OK && req->params->check_indices) st = cuda_check_indices(req);
  if (st == FA_OK)
    st = ch.seqs                    ? cuda_seqs_run(req, decision, &ch, workspace)
         : req->op == FA_OP_FORWARD ? run_forward(req, decision, &ch, workspace)
                                    : run_backward(req, decision, &ch, workspace);
  cuda_device_leave(id, previous);
  return st;
}

void cuda_release(void) {
  const cuda_state *s = cuda_state_get();
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  for (int i = 0; i < s->device_count; ++i) {
    if (!prepared[i]) continue; /* never used here: no pool to trim, no context to create */
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, i) == cudaSuccess) cudaMemPoolTrimTo(pool, 0);
  }
  cuda_stream_counters_free();
  cudaGetLastError();
}

FA_PLUGIN_DEFINE(FA_BACKEND_CUDA, "cuda", cuda_probe, cuda_decide, cuda_run, cuda_release,
                 cuda_quantize, cuda_buffer_op)
