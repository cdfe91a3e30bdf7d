/*
 * ocl_plugin.c: the OpenCL backend's entry point (its table; fa_quantize is ocl_quantize.c's) and
 * run(). ocl_call.c gives each call its context, device check and queue (params.stream or the
 * plugin's own) and, on PoCL, its turn.
 */
#include <stdio.h>
#include <string.h>

#include "core/math/mask.h"
#include "ocl_internal.h"

enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };

static cl_mem mem_of(const fa_tensor *t) { return (cl_mem)t->data; }

typedef struct shape_args {
  cl_int seqlen_q, seqlen_k, heads_q, heads_kv;
  cl_float scale, softcap;
  cl_long shift, left, right;
} shape_args;

static shape_args shape_of(const fa_request *req) {
  const fa_params *p = req->params;
  fa_mask m = fa_mask_make(p->causal, p->causal_align, p->window_enabled, p->window_left,
                           p->window_right, req->seqlen_q, req->seqlen_k);
  shape_args s = {(cl_int)req->seqlen_q,
                  (cl_int)req->seqlen_k,
                  (cl_int)req->heads_q,
                  (cl_int)req->heads_kv,
                  req->scale,
                  p->softcap > 0.0f ? p->softcap : 0.0f,
                  m.shift,
                  m.left,
                  m.right};
  return s;
}

static void shape_args_add(ocl_args *a, const shape_args *s, int with_kv_heads) {
  ocl_arg(a, sizeof s->seqlen_q, &s->seqlen_q);
  ocl_arg(a, sizeof s->seqlen_k, &s->seqlen_k);
  ocl_arg(a, sizeof s->heads_q, &s->heads_q);
  if (with_kv_heads) ocl_arg(a, sizeof s->heads_kv, &s->heads_kv);
  ocl_arg(a, sizeof s->scale, &s->scale);
  ocl_arg(a, sizeof s->softcap, &s->softcap);
  ocl_arg(a, sizeof s->shift, &s->shift);
  ocl_arg(a, sizeof s->left, &s->left);
  ocl_arg(a, sizeof s->right, &s->right);
}

static void tensor_arg(ocl_args *a, const fa_tensor *t, cl_long8 *desc) {
  cl_mem m = mem_of(t);
  *desc = ocl_desc4(t);
  ocl_arg(a, sizeof m, &m);
  ocl_arg(a, sizeof *desc, desc);
}

/* A work-group of `wg` work-items per `tile` rows, for (rows, heads, batch). */
static fa_status enqueue(cl_command_queue queue, cl_kernel k, size_t rows, size_t tile, size_t wg,
                         size_t heads, size_t batch, const char *what) {
  if (rows == 0 || heads == 0 || batch == 0) return FA_OK;
  size_t global[3] = {(rows + tile - 1) / tile * wg, heads, batch};
  size_t local[3] = {wg, 1, 1};
  cl_int e = clEnqueueNDRangeKernel(queue, k, 3, NULL, global, local, 0, NULL, NULL);
  return e == CL_SUCCESS ? FA_OK : ocl_fail(e, what);
}

typedef struct run_ctx {
  ocl_call call; /* the buffers' context and the queue */
  cl_program program;
  ocl_tiles tiles;
} run_ctx;

static fa_status make_kernel(const run_ctx *rc, const char *name, cl_kernel *k) {
  cl_int e = CL_SUCCESS;
  *k = clCreateKernel(rc->program, name, &e);
  return e == CL_SUCCESS ? FA_OK : ocl_fail(e, name);
}

static fa_status run_forward(const fa_request *req, const run_ctx *rc) {
  cl_kernel k;
  fa_status st = make_kernel(rc, "fa_forward", &k);
  if (st != FA_OK) return st;
  ocl_args a = {k, 0, CL_SUCCESS};
  cl_long8 dq, dk, dv, dout;
  tensor_arg(&a, req->q, &dq);
  tensor_arg(&a, req->k, &dk);
  tensor_arg(&a, req->v, &dv);
  tensor_arg(&a, req->out, &dout);
  /* Without an LSE the kernel gets the output buffer in its place and never writes it. */
  cl_mem lse = req->lse ? mem_of(req->lse) : mem_of(req->out);
  cl_long4 ls = ocl_desc3(req->lse);
  cl_int has_lse = req->lse != NULL;
  ocl_arg(&a, sizeof lse, &lse);
  ocl_arg(&a, sizeof ls, &ls);
  ocl_arg(&a, sizeof has_lse, &has_lse);
  shape_args s = shape_of(req);
  shape_args_add(&a, &s, 1);
  if (a.err != CL_SUCCESS) st = ocl_fail(a.err, "setting fa_forward's arguments");
  if (st == FA_OK)
    st = enqueue(rc->call.queue, k, (size_t)req->seqlen_q,
                 (size_t)(rc->tiles.cpu ? rc->tiles.br : OCL_GPU_FWD_ROWS),
                 (size_t)(rc->tiles.cpu ? rc->tiles.wg : OCL_GPU_FWD_WG), (size_t)req->heads_q,
                 (size_t)req->batch, "fa_forward");
  clReleaseKernel(k);
  return st;
}

/* The inputs both gradient kernels take first: q, k, v, dout, the LSE and D. The descriptors
   live in the caller's storage (clSetKernelArg copies at once, but keep them valid anyway). */
static void bwd_inputs_add(ocl_args *a, const fa_request *req, const cl_mem *lse,
                           const cl_long4 *ls, const cl_mem *dsum, cl_long8 *dq, cl_long8 *dk,
                           cl_long8 *dv, cl_long8 *ddo) {
  tensor_arg(a, req->q, dq);
  tensor_arg(a, req->k, dk);
  tensor_arg(a, req->v, dv);
  tensor_arg(a, req->dout, ddo);
  ocl_arg(a, sizeof *lse, lse);
  ocl_arg(a, sizeof *ls, ls);
  ocl_arg(a, sizeof *dsum, dsum);
}

static fa_status run_backward(const fa_request *req, const run_ctx *rc) {
  const size_t rows = (size_t)(req->batch * req->heads_q * req->seqlen_q);
  cl_int e = CL_SUCCESS;
  cl_mem dsum =
      clCreateBuffer(rc->call.ctx, CL_MEM_READ_WRITE, (rows ? rows : 1) * sizeof(float), NULL, &e);
  if (e != CL_SUCCESS) return ocl_fail(e, "creating the backward's D buffer");
  cl_kernel kd = NULL, kkv = NULL, kq = NULL;
  fa_status st = make_kernel(rc, "fa_bwd_dot", &kd);
  if (st == FA_OK) st = make_kernel(rc, "fa_bwd_dkdv", &kkv);
  if (st == FA_OK) st = make_kernel(rc, "fa_bwd_dq", &kq);
  shape_args s = shape_of(req);
  cl_long8 d1, d2, d3, d4, d5, d6;
  cl_mem lse = req->lse ? mem_of(req->lse) : NULL;
  cl_long4 ls = ocl_desc3(req->lse);
  if (st == FA_OK) { /* D = rowsum(dO ∘ O) */
    ocl_args a = {kd, 0, CL_SUCCESS};
    tensor_arg(&a, req->out, &d1);
    tensor_arg(&a, req->dout, &d2);
    ocl_arg(&a, sizeof dsum, &dsum);
    ocl_arg(&a, sizeof s.seqlen_q, &s.seqlen_q);
    ocl_arg(&a, sizeof s.heads_q, &s.heads_q);
    if (a.err != CL_SUCCESS) st = ocl_fail(a.err, "setting fa_bwd_dot's arguments");
    if (st == FA_OK && rows) {
      size_t global[3] = {(size_t)req->seqlen_q, (size_t)req->heads_q, (size_t)req->batch};
      e = clEnqueueNDRangeKernel(rc->call.queue, kd, 3, NULL, global, NULL, 0, NULL, NULL);
      if (e != CL_SUCCESS) st = ocl_fail(e, "fa_bwd_dot");
    }
  }
  if (st == FA_OK) { /* dK, dV */
    ocl_args a = {kkv, 0, CL_SUCCESS};
    bwd_inputs_add(&a, req, &lse, &ls, &dsum, &d1, &d2, &d3, &d4);
    tensor_arg(&a, req->dk, &d5);
    tensor_arg(&a, req->dv, &d6);
    shape_args_add(&a, &s, 1);
    if (a.err != CL_SUCCESS) st = ocl_fail(a.err, "setting fa_bwd_dkdv's arguments");
    if (st == FA_OK)
      st = enqueue(rc->call.queue, kkv, (size_t)req->seqlen_k, (size_t)rc->tiles.br,
                   (size_t)rc->tiles.wg, (size_t)req->heads_kv, (size_t)req->batch, "fa_bwd_dkdv");
  }
  if (st == FA_OK) { /* dQ */
    ocl_args a = {kq, 0, CL_SUCCESS};
    bwd_inputs_add(&a, req, &lse, &ls, &dsum, &d1, &d2, &d3, &d4);
    tensor_arg(&a, req->dq, &d5);
    shape_args_add(&a, &s, 1);
    if (a.err != CL_SUCCESS) st = ocl_fail(a.err, "setting fa_bwd_dq's arguments");
    if (st == FA_OK)
      st = enqueue(rc->call.queue, kq, (size_t)req->seqlen_q, (size_t)rc->tiles.br,
                   (size_t)rc->tiles.wg, (size_t)req->heads_q, (size_t)req->batch, "fa_bwd_dq");
  }
  if (kd) clReleaseKernel(kd);
  if (kkv) clReleaseKernel(kkv);
  if (kq) clReleaseKernel(kq);
  /* Released now, freed by OpenCL once the kernels that use it have finished. */
  clReleaseMemObject(dsum);
  return st;
}

static int dtype_code(fa_dtype dt) {
  return dt == FA_F32 ? DT_F32 : (dt == FA_F16 ? DT_F16 : DT_BF16);
}

/* The buffers' context comes from the first tensor of the call that has elements: an empty
   tensor may carry no buffer (its data NULL, as the API allows), and a kernel argument of a NULL
   buffer is a NULL pointer, which no work-item of an empty tensor reads. NULL when no tensor has
   an element. */
static const fa_tensor *first_with_elements(const fa_request *req, const char **name) {
  const fa_tensor *ts[] = {req->q,    req->k,  req->v,  req->out, req->lse,
                           req->dout, req->dq, req->dk, req->dv};
  static const char *const names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) {
    if (!ts[i]) continue;
    int64_t n = 1;
    for (int32_t d = 0; d < ts[i]->ndim; ++d) n *= ts[i]->shape[d];
    if (n > 0) {
      *name = names[i];
      return ts[i];
    }
  }
  return NULL;
}

fa_status ocl_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  (void)workspace;
  if (!decision->supported)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "opencl: %s", decision->reason);
  const ocl_state *s = ocl_state_get();
  ocl_choice choice;
  fa_decision_get(decision, &choice, sizeof choice);
  const ocl_tiles *t = &choice.tiles;
  if (choice.device != req->device.id || choice.device < 0 || choice.device >= s->count ||
      t->br < 1 || t->bc < 1 || t->wg < 1 || t->fwd < OCL_FWD_TILED || t->fwd > OCL_FWD_PIPELINED)
    return fa_core_set_error(FA_ERR_INTERNAL,
                             "opencl: decision (device %d, tiles %dx%d, %d work-items, forward "
                             "kernel %d) is not one this plugin made for device %d",
                             (int)choice.device, t->br, t->bc, t->wg, t->fwd, (int)req->device.id);
  const ocl_device_info *dev = &s->devices[choice.device];
  const char *name;
  const fa_tensor *first = first_with_elements(req, &name);
  if (!first) return FA_OK; /* no tensor has an element: nothing to read or write */
  run_ctx rc;
  memset(&rc, 0, sizeof rc);
  fa_status st = ocl_call_context(&rc.call, dev, "q", req->device.id, first, name);
  if (st != FA_OK) return st;
  rc.tiles = choice.tiles;
  st = ocl_program_get(rc.call.ctx, dev, (int)req->head_dim, dtype_code(req->dtype), rc.tiles,
                       &rc.program);
  if (st != FA_OK) return st;
  st = ocl_call_start(&rc.call, req->params->stream);
  if (st != FA_OK) return st;
  st = req->op == FA_OP_FORWARD ? run_forward(req, &rc) : run_backward(req, &rc);
  st = ocl_call_end(&rc.call, st);
  return st;
}

static void ocl_release(void) { ocl_program_release_all(); }

FA_PLUGIN_DEFINE(FA_BACKEND_OPENCL, "opencl", ocl_probe, ocl_decide, ocl_run, ocl_release,
                 ocl_quantize, NULL)
