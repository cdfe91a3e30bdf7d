/*
 * ocl_quantize.c: fa_quantize on OpenCL buffers (kernels/quantize.cl), bit for bit the CPU
 * backend's result (backends/cpu/cpu_quantize.c): the same widening, the same rotation order in
 * fp32, the same amax over finite values, IEEE division by the descale and core/math/fp8.h's
 * rounding. Division is only IEEE where the device reports CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
 * (the program is then built with -cl-fp32-correctly-rounded-divide-sqrt), so FP8 output is
 * refused elsewhere; a device that flushes subnormals (no CL_FP_DENORM) is refused for any
 * arithmetic (rotation or FP8), as its sums and quotients near zero differ from the host's.
 *
 * For FP8 output four launches on the queue: the descales zeroed, the amax pass (atomic_max of the
 * bits into the descales), the descales finished (amax / FP8 max, or 1), the store pass.
 */
#include <stdio.h>
#include <string.h>

#include "core/math/fp8.h"
#include "ocl_internal.h"

/* kernels/quantize.cl's storage codes, tile and work-group limit */
enum { Q_F32 = 0, Q_F16 = 1, Q_BF16 = 2, Q_E4M3 = 3, Q_E5M2 = 4 };
#define QTILE 1024
#define QWG_MAX 256
#define QWG_GPU 128
/* work-groups per compute unit the passes aim for: enough to fill the device, few enough that
   each computes the rotation's signs for several tiles */
#define QGROUPS_PER_CU 8

static int qdtype(fa_dtype dt) {
  switch (dt) {
    case FA_F32:
      return Q_F32;
    case FA_F16:
      return Q_F16;
    case FA_BF16:
      return Q_BF16;
    case FA_F8E4M3:
      return Q_E4M3;
    default:
      return Q_E5M2;
  }
}

static int64_t numel(const fa_tensor *t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* FA_ERR_UNSUPPORTED with the reason when this backend cannot give the CPU backend's bits. */
static fa_status refuse(const fa_quantize_request *req, const ocl_state *s) {
  if (req->device.kind != FA_DEVICE_OPENCL)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "tensors are in %s memory; opencl.quantize reads OpenCL buffers "
                             "(cl_mem) only",
                             fa_device_kind_name(req->device.kind));
  if (!s->available) return fa_core_set_error(FA_ERR_UNSUPPORTED, "opencl: %s", s->reason);
  if (req->device.id < 0 || req->device.id >= s->count)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "device id %d: this process sees %d OpenCL device(s)",
                             (int)req->device.id, s->count);
  if (req->head_dim > QTILE)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "x.shape[3] = %lld > %d for opencl.quantize",
                             (long long)req->head_dim, QTILE);
  const ocl_device_info *dev = &s->devices[req->device.id];
  if (req->descale && !(dev->single_fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT))
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "opencl.quantize to %s: %s does not report "
                             "CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT, so its division may differ from "
                             "IEEE division (and the FP8 values from the other backends')",
                             fa_dtype_name(req->y->dtype), dev->name);
  if ((req->descale || req->args->rotate) && !(dev->single_fp & CL_FP_DENORM))
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "opencl.quantize: %s does not report CL_FP_DENORM: it may flush "
                             "subnormal results to zero, which the other backends keep",
                             dev->name);
  return FA_OK;
}

typedef struct quant_launch {
  const fa_quantize_request *req;
  cl_command_queue queue;
  size_t wg;          /* work-items per work-group of the amax and store passes */
  int64_t groups_max; /* work-groups a pass aims for */
  /* the arguments the kernels share */
  cl_mem x, y, descale;
  cl_long8 xd, yd;
  cl_long4 shape, dd, dshape;
  cl_int xdt, ydt, log2d;
  cl_ulong seed;
} quant_launch;

static fa_status make_kernel(cl_program prog, const char *name, cl_kernel *k) {
  cl_int e = CL_SUCCESS;
  *k = clCreateKernel(prog, name, &e);
  return e == CL_SUCCESS ? FA_OK : ocl_fail(e, name);
}

/* x, its descriptor and dtype, the shape, the rotation: the first arguments of both passes. */
static void source_args(ocl_args *a, const quant_launch *l) {
  ocl_arg(a, sizeof l->x, &l->x);
  ocl_arg(a, sizeof l->xd, &l->xd);
  ocl_arg(a, sizeof l->xdt, &l->xdt);
  ocl_arg(a, sizeof l->shape, &l->shape);
  ocl_arg(a, sizeof l->log2d, &l->log2d);
  ocl_arg(a, sizeof l->seed, &l->seed);
}

static void descale_args(ocl_args *a, const quant_launch *l) {
  ocl_arg(a, sizeof l->descale, &l->descale);
  ocl_arg(a, sizeof l->dd, &l->dd);
  ocl_arg(a, sizeof l->dshape, &l->dshape);
}

/* Tiles per work-group when `tiles` tiles are spread over at most `groups` work-groups. */
static int64_t tiles_per_group(int64_t tiles, int64_t groups) {
  return div_up(tiles, groups < 1 ? 1 : (groups < tiles ? groups : tiles));
}

/* fa_quant_descale over every descale element: finish 0 zeroes, 1 finishes. */
static fa_status descale_pass(const quant_launch *l, cl_kernel k, int finish) {
  ocl_args a = {k, 0, CL_SUCCESS};
  const cl_float fp8_max = l->req->y->dtype == FA_F8E4M3 ? FA_F8E4M3_MAX : FA_F8E5M2_MAX;
  const cl_int fin = finish;
  descale_args(&a, l);
  ocl_arg(&a, sizeof fp8_max, &fp8_max);
  ocl_arg(&a, sizeof fin, &fin);
  if (a.err != CL_SUCCESS) return ocl_fail(a.err, "setting fa_quant_descale's arguments");
  const size_t global = (size_t)numel(l->req->descale);
  cl_int e = clEnqueueNDRangeKernel(l->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL);
  return e == CL_SUCCESS ? FA_OK : ocl_fail(e, "fa_quant_descale");
}

/* fa_quant_amax: per descale element, work-groups over the tiles of the rows it covers. */
static fa_status amax_pass(const quant_launch *l, cl_kernel k) {
  const fa_quantize_request *r = l->req;
  const int64_t nb = l->dshape.s[0], nh = l->dshape.s[1], block = l->dshape.s[3];
  const int64_t elems = numel(r->descale);
  const int64_t rows = (nb > 1 ? 1 : r->batch) * (block < r->seqlen ? block : r->seqlen) *
                       (nh > 1 ? 1 : r->heads); /* the most any element covers */
  const int64_t tiles = div_up(rows, QTILE / r->head_dim);
  const cl_long per_group = tiles_per_group(tiles, div_up(l->groups_max, elems));
  ocl_args a = {k, 0, CL_SUCCESS};
  source_args(&a, l);
  descale_args(&a, l);
  ocl_arg(&a, sizeof per_group, &per_group);
  if (a.err != CL_SUCCESS) return ocl_fail(a.err, "setting fa_quant_amax's arguments");
  const size_t global[2] = {(size_t)div_up(tiles, per_group) * l->wg, (size_t)elems};
  const size_t local[2] = {l->wg, 1};
  cl_int e = clEnqueueNDRangeKernel(l->queue, k, 2, NULL, global, local, 0, NULL, NULL);
  return e == CL_SUCCESS ? FA_OK : ocl_fail(e, "fa_quant_amax");
}

/* fa_quant_store: work-groups over the tiles of all rows. */
static fa_status store_pass(const quant_launch *l, cl_kernel k) {
  const fa_quantize_request *r = l->req;
  const int64_t tiles = div_up(r->batch * r->seqlen * r->heads, QTILE / r->head_dim);
  const cl_long per_group = tiles_per_group(tiles, l->groups_max);
  ocl_args a = {k, 0, CL_SUCCESS};
  source_args(&a, l);
  ocl_arg(&a, sizeof l->y, &l->y);
  ocl_arg(&a, sizeof l->yd, &l->yd);
  ocl_arg(&a, sizeof l->ydt, &l->ydt);
  descale_args(&a, l);
  ocl_arg(&a, sizeof per_group, &per_group);
  if (a.err != CL_SUCCESS) return ocl_fail(a.err, "setting fa_quant_store's arguments");
  const size_t global = (size_t)div_up(tiles, per_group) * l->wg, local = l->wg;
  cl_int e = clEnqueueNDRangeKernel(l->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
  return e == CL_SUCCESS ? FA_OK : ocl_fail(e, "fa_quant_store");
}

/* Work-items per group: one on the CPU kernel set (a CPU runtime runs a group's work-items as a
   loop around each barrier; with one, the butterfly stages stay plain loops, as in ocl_probe.c's
   CPU kernels), QWG_GPU elsewhere; never more than the device allows for either kernel. */
static fa_status group_size(const ocl_device_info *dev, cl_kernel amax, cl_kernel store,
                            size_t *wg) {
  size_t n = ocl_plan(dev, 64).cpu ? 1 : QWG_GPU;
  const cl_kernel ks[2] = {amax, store};
  for (int i = 0; i < 2; ++i) {
    size_t most = 0;
    cl_int e = clGetKernelWorkGroupInfo(ks[i], dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof most,
                                        &most, NULL);
    if (e != CL_SUCCESS) return ocl_fail(e, "clGetKernelWorkGroupInfo");
    if (most < n) n = most;
  }
  if (n > QWG_MAX) n = QWG_MAX;
  *wg = n > 0 ? n : 1;
  return FA_OK;
}

static fa_status launch(quant_launch *l, cl_program prog, const ocl_device_info *dev) {
  const fa_quantize_request *r = l->req;
  cl_kernel kd = NULL, ka = NULL, ks = NULL;
  fa_status st = make_kernel(prog, "fa_quant_amax", &ka);
  if (st == FA_OK) st = make_kernel(prog, "fa_quant_store", &ks);
  if (st == FA_OK && r->descale) st = make_kernel(prog, "fa_quant_descale", &kd);
  if (st == FA_OK) st = group_size(dev, ka, ks, &l->wg);
  /* Without rows, or with a head dim of 0, there are no elements: every descale is 1 and y has
     nothing to write. */
  const int elements = r->head_dim > 0 && r->batch * r->seqlen * r->heads > 0;
  if (st == FA_OK && r->descale) st = descale_pass(l, kd, 0);
  if (st == FA_OK && r->descale && elements) st = amax_pass(l, ka);
  if (st == FA_OK && r->descale) st = descale_pass(l, kd, 1);
  if (st == FA_OK && elements) st = store_pass(l, ks);
  if (kd) clReleaseKernel(kd);
  if (ka) clReleaseKernel(ka);
  if (ks) clReleaseKernel(ks);
  return st;
}

fa_status ocl_quantize(const fa_quantize_request *req, char *kernel) {
  const ocl_state *s = ocl_state_get();
  fa_status st = refuse(req, s);
  if (st != FA_OK) return st;
  fa_quantize_kernel_name(req, "opencl", kernel);
  /* No rows: nothing to read; the descales, if they have elements, become 1 (their blocks' amax
     is 0, as on the CPU). x and y may then carry no buffer at all. */
  if (req->batch * req->seqlen * req->heads == 0 && (!req->descale || numel(req->descale) == 0))
    return FA_OK;
  const ocl_device_info *dev = &s->devices[req->device.id];
  /* x and y have elements unless empty; then descale has them (one per block) */
  const fa_tensor *first = numel(req->x) > 0 ? req->x : req->descale;
  const char *first_name = numel(req->x) > 0 ? "x" : "descale";
  if (!first) return FA_OK; /* head dim 0 and float y: nothing to write */
  ocl_call call;
  st = ocl_call_context(&call, dev, "x", req->device.id, first, first_name);
  cl_program prog = NULL;
  if (st == FA_OK) st = ocl_quantize_program_get(call.ctx, dev, &prog);
  if (st != FA_OK) return st;

  quant_launch l;
  memset(&l, 0, sizeof l);
  l.req = req;
  l.groups_max = (int64_t)(dev->compute_units > 0 ? dev->compute_units : 1) * QGROUPS_PER_CU;
  /* Buffers of empty tensors may be NULL: a NULL buffer argument, which no work-item reads. */
  l.x = (cl_mem)req->x->data;
  l.y = (cl_mem)req->y->data;
  l.descale = req->descale ? (cl_mem)req->descale->data : NULL;
  l.xd = ocl_desc4(req->x);
  l.yd = ocl_desc4(req->y);
  l.dd = ocl_desc3(req->descale);
  const fa_tensor *d = req->descale;
  const int64_t block = req->args->block_rows > 0 ? req->args->block_rows : req->seqlen;
  l.dshape.s[0] = d ? d->shape[0] : 1;
  l.dshape.s[1] = d ? d->shape[1] : 1;
  l.dshape.s[2] = d ? d->shape[2] : 1;
  l.dshape.s[3] = block;
  l.shape.s[0] = req->batch;
  l.shape.s[1] = req->seqlen;
  l.shape.s[2] = req->heads;
  l.shape.s[3] = req->head_dim;
  l.xdt = qdtype(req->x->dtype);
  l.ydt = qdtype(req->y->dtype);
  l.log2d = req->args->rotate ? req->log2_dim : -1;
  l.seed = req->args->rotate_seed;

  st = ocl_call_start(&call, req->args->stream);
  if (st != FA_OK) return st;
  l.queue = call.queue;
  st = launch(&l, prog, dev);
  return ocl_call_end(&call, st);
}
