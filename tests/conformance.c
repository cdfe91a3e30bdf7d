/*
 * conformance.c: the one suite every backend runs.
 *
 *   conformance --backend <cpu|cuda|hip|opencl> [--quick|--full] [--filter substr] [--list]
 *               [--require feature,feature,...] [--kernel-family F] [--kernel-prefix P]
 *               [--shard K/N]
 *
 * --quick (or FA_CONFORMANCE_QUICK=1) runs the cheapest cases that still cover every feature value;
 * the full list takes about a minute of CPU time in a Release build and about eight under
 * ASan+UBSan. --shard K/N runs part K of N of the selected cases (balanced by estimated cost).
 *
 * Each case draws fresh random inputs, poisons every output (gaps included), runs the forward
 * without and with lse, then the backward on the library's own out and lse, all with
 * params.backend = the backend and strict = 1, and checks:
 *   - every element of out, lse, dq, dk, dv by the pass rule of reference.h (at most twice the
 *     error of a naive computation in the storage dtype, plus a small floor, against float64);
 *     elements the mask alone decides must be exact (0, lse -inf);
 *   - nothing outside the logical elements written, inputs unchanged;
 *   - fa_run_info names this backend and the kernel that was meant to run, and fa_plan_* reports
 *     the same kernel as the call.
 * A backend that is not available here prints "SKIP: <name>: <reason>" and exits 77.
 *
 * After the plain cases come the feature cases (see "Feature cases" below): sliding window,
 * softcap, ALiBi, dropout, varlen, seqused_k, paged KV, split-KV, head dims up to 512,
 * deterministic mode and fa_forward_kvcache, each dtype, alone and combined.
 *
 * Skips. Every case (plain or feature) names what it needs in fa_backend_info's feature names: its
 * dtype (f32, f16, bf16), causal / causal_top_left, gqa / mqa, dv_ne_dk, hd256 (a head dim above
 * 128), hd512 (above 256), lse, bwd, and its features (window, softcap, ..., deterministic), plus
 * two layout properties of the data tensors (q, k, v, out, dout, gradients; lse and index tensors
 * may have any layout) that the suite probes itself at start-up, one fa_plan_forward each,
 * printed: strided_last_dim (the last dimension not contiguous) and unaligned (the first element
 * or a stride other than the last not a multiple of 16 bytes). The backend is asked with fa_plan_*
 * before the float64 reference, so a skip costs nothing. A case it refuses with
 * FA_ERR_UNSUPPORTED while some need is not listed (or probed as refused) is printed as
 * "SKIP <case>: <needs> not supported (<call>: <reason>)" and counted as skipped, never passed; a
 * need named by --require is never skipped (its refusal fails), and a refusal although every need
 * is listed fails. The run ends with "conformance: N passed, M failed, K skipped".
 *
 * Device backends: every tensor the library reads or writes (index and slope tensors included) is
 * put in the backend's memory through the DEVICE HOOK below, and copied back whole before a check.
 *
 * --kernel-family F sets params.kernel_family = F in every call (a family the backend does not
 * know is refused, and counts as a skip or failure like any refusal; what a known family lacks,
 * need_family lists as "family:" needs, so its refusals of those cases are skips). --kernel-prefix
 * P: the kernel names expected on the cuda backend start with P instead of "cuda.fa2.sm80" (the
 * fields after it are the same), so the same binary checks a plugin standing in for the CUDA
 * backend, such as the HIP kernels' test plugin ("cuda.hipgen", or "cuda.hipgen.mfma" with
 * --kernel-family mfma; tests/gpu/h200_hip_generic.sh).
 *
 * Inputs are seeded per run (printed; FA_TEST_SEED replays) and per case name, so
 * "FA_TEST_SEED=<seed> conformance --backend cpu --filter <case>" reproduces one case exactly.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif
#include <time.h>

#include "backends/cuda/fa3_sm90/fa3_args.h"
#include "device_mem.h"
#include "flash_attn.h"
#include "reference.h"
#include "tensor_util.h"

/* ==============================================================================================
 * DEVICE HOOK: how the suite puts tensors where a backend can read them.
 *
 * One entry per device kind. The whole host buffer (gaps included) goes to the device and comes
 * back whole, with the same strides and byte_offset, so the host-side checks (gaps untouched,
 * inputs unchanged) hold for device memory too. CPU: the library reads the host buffer itself.
 * CUDA and OpenCL: tools/device_mem on the device the backend uses by default
 * (devmem_default_device: cuda:0; for OpenCL FA_OPENCL_DEVICE, else the first GPU, else device 0),
 * a build without that runtime says so. CUDA: view.data = the device pointer (cudaMalloc /
 * cudaMemcpy). OpenCL: view.data = the cl_mem of a buffer the size of the whole host buffer
 * (clCreateBuffer / blocking clEnqueueWriteBuffer and ReadBuffer), view.byte_offset = the host
 * view's byte offset inside its buffer; nothing is ever added to the cl_mem handle. Index tensors
 * (cu_seqlens, seqused_k, block_table, cache lengths) and ALiBi slopes go the same way. HIP: not
 * yet (hipMalloc/... come with its issue); until then its cases fail with "not implemented in the
 * suite yet", never counted as passed.
 * ============================================================================================ */

typedef struct dev_tensor {
  fa_tensor view; /* what the library gets: device pointer (or cl_mem), host strides */
  void *mem;      /* the device allocation (NULL for the CPU, which uses the host buffer) */
  size_t bytes;
} dev_tensor;

typedef struct dev_ops {
  fa_device_kind kind;
  const char *label;
  /* Allocates device memory the size of host's whole buffer; view mirrors host's view. */
  int (*alloc)(dev_tensor *d, const tu_tensor *host, char *err, size_t n);
  /* Copies host's whole buffer to the device. */
  int (*copy_in)(dev_tensor *d, const tu_tensor *host, char *err, size_t n);
  /* Copies the device buffer back over host's whole buffer. */
  int (*copy_out)(tu_tensor *host, const dev_tensor *d, char *err, size_t n);
  void (*release)(dev_tensor *d);
} dev_ops;

/* CPU: the library reads the host buffer directly, so copies are nothing. */
static int cpu_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)err, (void)n;
  d->view = host->t;
  d->mem = NULL;
  d->bytes = host->buf_elems * host->elem_bytes;
  return 0;
}
static int cpu_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)d, (void)host, (void)err, (void)n;
  return 0;
}
static int cpu_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  (void)d, (void)host, (void)err, (void)n;
  return 0;
}
static void cpu_release(dev_tensor *d) { memset(d, 0, sizeof *d); }

/* Device memory through tools/device_mem (CUDA, OpenCL; any kind device_mem learns later), on the
   device the backend uses by default. The whole buffer is copied at offset 0 and the view keeps
   the host's byte_offset, so the handle is used as device_mem returned it (for OpenCL it is a
   cl_mem, not an address). */
static int dm_alloc(dev_tensor *d, const tu_tensor *host, fa_device_kind kind, char *err,
                    size_t n) {
  memset(d, 0, sizeof *d);
  fa_device dev;
  if (devmem_default_device(kind, &dev, err, n)) return -1;
  const size_t bytes = host->buf_elems * host->elem_bytes;
  if (devmem_alloc(dev, bytes, &d->mem, err, n)) return -1;
  d->bytes = bytes;
  d->view = host->t; /* strides, shape, byte_offset as the host's (data = the buffer's start) */
  d->view.data = d->mem;
  d->view.device = dev;
  return 0;
}
static int dm_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  return devmem_copy_to_device(d->view.device, d->mem, host->buf, d->bytes, err, n);
}
static int dm_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  return devmem_copy_to_host(d->view.device, host->buf, d->mem, d->bytes, err, n);
}
static void dm_release(dev_tensor *d) {
  if (d->mem) (void)devmem_free(d->view.device, d->mem, NULL, 0);
  memset(d, 0, sizeof *d);
}
static int cuda_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  return dm_alloc(d, host, FA_DEVICE_CUDA, err, n);
}
static int opencl_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  return dm_alloc(d, host, FA_DEVICE_OPENCL, err, n);
}

/* Every device kind the suite has no copy routines for yet. */
static int todo(char *err, size_t n) {
  snprintf(err, n,
           "device memory for this backend is not implemented in the suite yet (see the "
           "DEVICE HOOK in tests/conformance.c)");
  return -1;
}
static int todo_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)host;
  memset(d, 0, sizeof *d);
  return todo(err, n);
}
static int todo_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)d, (void)host;
  return todo(err, n);
}
static int todo_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  (void)d, (void)host;
  return todo(err, n);
}
static void todo_release(dev_tensor *d) { memset(d, 0, sizeof *d); }

static const dev_ops g_dev_ops[] = {
    {FA_DEVICE_CPU, "cpu", cpu_alloc, cpu_copy_in, cpu_copy_out, cpu_release},
    {FA_DEVICE_CUDA, "cuda", cuda_alloc, dm_copy_in, dm_copy_out, dm_release},
    {FA_DEVICE_HIP, "hip", todo_alloc, todo_copy_in, todo_copy_out, todo_release},
    {FA_DEVICE_OPENCL, "opencl", opencl_alloc, dm_copy_in, dm_copy_out, dm_release},
};

/* ============================================================================================ */

/* Puts host's whole buffer in the backend's memory: allocation and copy. */
static int dev_put(const dev_ops *ops, dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  if (ops->alloc(d, host, err, n)) return -1;
  return ops->copy_in(d, host, err, n);
}

/* ----------------------------------------------------------------------------------------------
 * What a case needs, and whether a refusal is a skip or a failure
 * -------------------------------------------------------------------------------------------- */

enum { R_FAIL = 0, R_PASS = 1, R_SKIP = 2 };

/* Layout properties that fa_backend_info's features do not cover; the suite probes them once. */
enum { P_STRIDED_LAST_DIM, P_UNALIGNED, P_COUNT };
static const char *const probe_names[P_COUNT] = {"strided_last_dim", "unaligned"};

typedef struct backend_ctx {
  int32_t id;
  const char *name;
  const dev_ops *ops;
  const fa_backend_desc *desc;
  const char *require;       /* --require's comma list, or NULL */
  const char *kernel_family; /* --kernel-family: params.kernel_family of every call, or NULL */
  const char *cuda_prefix;   /* --kernel-prefix: the cuda backend's kernel names start with it */
  int cuda_fa3; /* the cuda backend runs FlashAttention-3 forwards (see cuda_expected) */
  int probe_ok[P_COUNT];
  char probe_why[P_COUNT][256];
} backend_ctx;

/* Position of name in a comma list (spaces after commas allowed), or -1. */
static int list_find(const char *list, const char *name) {
  if (!list) return -1;
  size_t n = strlen(name);
  int pos = 0;
  for (const char *p = list; *p; ++pos) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    while (len && (*p == ' ')) ++p, --len;
    if (len == n && !strncmp(p, name, n)) return pos;
    if (!e) break;
    p = e + 1;
  }
  return -1;
}

static int list_has(const char *list, const char *name) { return list_find(list, name) >= 0; }

/* Sort key of name in list: its position, names outside the list last. */
static int list_pos(const char *list, const char *name) {
  int pos = list_find(list, name);
  return pos < 0 ? 1 << 20 : pos;
}

typedef struct needs {
  const char *f[32];
  int n;
} needs;

static void need(needs *nd, const char *f) {
  for (int i = 0; i < nd->n; ++i)
    if (!strcmp(nd->f[i], f)) return;
  if (nd->n < (int)(sizeof nd->f / sizeof nd->f[0])) nd->f[nd->n++] = f;
}

/* The needs of the problem's shape: dtype, mask alignment, head sharing, head dims, lse, bwd. */
static void need_shape(needs *nd, fa_dtype dt, int causal, int top_left, int64_t hq, int64_t hkv,
                       int64_t d, int64_t dv, int lse, int bwd) {
  need(nd, "fwd");
  need(nd, tu_dtype_name(dt));
  if (causal) need(nd, top_left ? "causal_top_left" : "causal");
  if (hkv == 1 && hq > 1) need(nd, "mqa");
  if (hkv > 1 && hq > hkv) need(nd, "gqa");
  if (d != dv) need(nd, "dv_ne_dk");
  const int64_t big = d > dv ? d : dv;
  if (big > 256)
    need(nd, "hd512");
  else if (big > 128)
    need(nd, "hd256");
  if (lse) need(nd, "lse");
  if (bwd) need(nd, "bwd");
}

/* The layout needs of the data tensors a call gets (q, k, v, out, dout, gradients; NULL entries
   are skipped). lse and the index tensors are not classified: any layout of theirs must work. */
static void need_views(needs *nd, const fa_tensor *const *data, int count) {
  for (int i = 0; i < count; ++i) {
    const fa_tensor *t = data[i];
    if (!t || t->ndim < 1) continue;
    const int last = t->ndim - 1;
    if (t->shape[last] > 1 && t->strides[last] != 1) need(nd, probe_names[P_STRIDED_LAST_DIM]);
    const uint64_t esz = (uint64_t)fa_dtype_size(t->dtype);
    uint64_t addr = t->byte_offset;
    if (t->device.kind != FA_DEVICE_OPENCL) addr += (uint64_t)(uintptr_t)t->data;
    int unaligned = addr % 16 != 0;
    for (int k = 0; k < last; ++k)
      if (t->shape[k] > 1 && ((uint64_t)t->strides[k] * esz) % 16 != 0) unaligned = 1;
    if (unaligned) need(nd, probe_names[P_UNALIGNED]);
  }
}

/* Whether the backend serves a need: fa_backend_info's features, or the suite's probe. A
   "family:" need (need_family) is never served: the named kernel family lacks it. */
static int serves(const backend_ctx *bk, const char *f) {
  for (int p = 0; p < P_COUNT; ++p)
    if (!strcmp(f, probe_names[p])) return bk->probe_ok[p];
  if (!strncmp(f, "family:", 7)) return 0;
  return list_has(bk->desc->features, f);
}

/* What the kernel family named by --kernel-family lacks for a case, as "family:" needs, so that
   its documented refusal ("kernel_family fa3: ...") is a skip while a refusal of a case the family
   should run still fails. Known: the cuda backend's fa3 (cuda_decide.c's fa3_takes and
   fa3_bwd_takes): sm_90 only; at least one key (and, backward, one query row); no softcap; forward
   head dims 64, 96, 128, 192, 256, backward the same (fa3_bwd_padded_head_dim); no negative
   strides (TMA). fwd_only: the case makes no backward call. */
static void need_family(needs *nd, const backend_ctx *bk, int fwd_only, int64_t d, int64_t dv,
                        int64_t sq, int64_t sk, float softcap, const fa_tensor *const *data,
                        int count) {
  if (!bk->kernel_family || strcmp(bk->kernel_family, "fa3") != 0 || strcmp(bk->name, "cuda") != 0)
    return;
  if (!bk->cuda_fa3) need(nd, "family:device");
  if (sk == 0 || (!fwd_only && sq == 0)) need(nd, "family:empty");
  if (softcap > 0.0f) need(nd, "family:softcap");
  const int fwd_dim = d == dv && (d == 64 || d == 96 || d == 128 || d == 192 || d == 256);
  const int bwd_dim = d == dv && fa3_bwd_padded_head_dim(d) != 0;
  if (!fwd_dim || (!fwd_only && !bwd_dim)) need(nd, "family:head_dim");
  for (int i = 0; i < count; ++i)
    for (int k = 0; data[i] && k < data[i]->ndim; ++k)
      if (data[i]->strides[k] < 0) need(nd, "family:negative_stride");
}

/* Expected kernel name. Returns 0 when the suite does not know the backend's naming yet; then
   only the "<backend>." prefix is checked. */
typedef struct conf_case conf_case;
static int expected_kernel(const backend_ctx *bk, const conf_case *c, int bwd, int splits,
                           int32_t tile_m, char *buf, size_t n);

/* ----------------------------------------------------------------------------------------------
 * Cases
 * -------------------------------------------------------------------------------------------- */

enum { CM_NONE = 0, CM_BR = 1, CM_TL = 2 };
static const char *const cm_names[3] = {"nc", "br", "tl"};

/* Layouts: the tu_ kinds for every tensor, or MIXED (each tensor a different one). */
#define L_MIXED TU_LAYOUT_COUNT_
#define L_COUNT (TU_LAYOUT_COUNT_ + 1)

enum { T_Q, T_K, T_V, T_DOUT, T_OUT0, T_OUT, T_LSE, T_DQ, T_DK, T_DV, T_COUNT };
static const char *const t_names[T_COUNT] = {"q",   "k",   "v",  "dout", "out(lse=NULL)",
                                             "out", "lse", "dq", "dk",   "dv"};

static tu_layout_kind tensor_layout(int layout, int t) {
  if (layout != L_MIXED) return (tu_layout_kind)layout;
  /* Neighbouring tensors differ, so a backend that assumes q's strides for k (or out's for dq)
     reads the wrong elements. */
  static const tu_layout_kind mixed[T_COUNT] = {TU_PERMUTED, TU_PADDED,     TU_STRIDED, TU_PERMUTED,
                                                TU_STRIDED,  TU_CONTIGUOUS, TU_PADDED,  TU_STRIDED,
                                                TU_PERMUTED, TU_PADDED};
  return mixed[t];
}

static const char *layout_name(int layout) {
  return layout == L_MIXED ? "mixed" : tu_layout_name((tu_layout_kind)layout);
}

struct conf_case {
  char name[128];
  fa_dtype dtype;
  int64_t b, sq, sk, hq, hkv, d, dv;
  int cm;      /* causal mode */
  int layout;  /* tu_layout_kind or L_MIXED */
  float scale; /* softmax_scale passed (0 = the default 1/sqrt(d)) */
  double cost; /* estimated work, for ordering the quick subset */
  int quick;
};

typedef struct case_list {
  conf_case *v;
  int n, cap;
} case_list;

static double case_cost(const conf_case *c) {
  /* Reference and library work both scale with the score matrix times the head dims; the second
     term is per-element work (fill, convert, check), which dominates tiny cases. */
  double rows = (double)c->b * c->hq * c->sq * c->sk * (double)(c->d + c->dv);
  double elems =
      (double)c->b * ((double)c->sq * c->hq + (double)c->sk * c->hkv) * (double)(c->d + c->dv);
  return rows + 40.0 * elems;
}

static void case_name(conf_case *c) {
  char hd[32];
  if (c->d == c->dv)
    snprintf(hd, sizeof hd, "d%lld", (long long)c->d);
  else
    snprintf(hd, sizeof hd, "d%lldx%lld", (long long)c->d, (long long)c->dv);
  snprintf(c->name, sizeof c->name, "%s.b%lld.h%lldx%lld.s%lldx%lld.%s.%s.%s%s",
           tu_dtype_name(c->dtype), (long long)c->b, (long long)c->hq, (long long)c->hkv,
           (long long)c->sq, (long long)c->sk, hd, cm_names[c->cm], layout_name(c->layout),
           c->scale != 0.0f ? ".scale" : "");
}

static void add_case(case_list *L, conf_case c) {
  case_name(&c);
  for (int i = 0; i < L->n; ++i)
    if (!strcmp(L->v[i].name, c.name)) return; /* the same configuration from two blocks */
  if (L->n == L->cap) {
    int cap = L->cap ? 2 * L->cap : 256;
    conf_case *v = (conf_case *)realloc(L->v, sizeof(conf_case) * (size_t)cap);
    if (!v) {
      fprintf(stderr, "conformance: out of memory building the case list\n");
      exit(2);
    }
    L->v = v;
    L->cap = cap;
  }
  c.cost = case_cost(&c);
  L->v[L->n++] = c;
}

static const fa_dtype k_dtypes[3] = {FA_F32, FA_F16, FA_BF16};

/* Reduces the heads of an expensive case, keeping its GQA ratio while it can, so the float64
   reference stays affordable at long sequences. */
static void fit_heads(conf_case *c, double cap) {
  if (case_cost(c) <= cap) return;
  int64_t ratio = c->hq / c->hkv;
  const int64_t tries[3][3] = {{1, ratio, 1}, {1, 2, 1}, {1, 1, 1}};
  for (int t = 0; t < 3; ++t) {
    c->b = tries[t][0];
    c->hq = tries[t][1];
    c->hkv = tries[t][2];
    if (case_cost(c) <= cap) return;
  }
}

static void build_cases(case_list *L) {
  /* Sequence lengths of the issue, equal and unequal both ways (1 vs 1000 too). */
  static const int64_t seqs[][2] = {{1, 1},     {17, 17},   {113, 113}, {257, 257}, {1000, 1000},
                                    {113, 257}, {257, 113}, {1, 1000},  {1000, 1},  {257, 1000}};
  /* Head dims 8..256, and head_dim_v != head_dim both ways (64/32 as the issue's example,
     192/128 as multi-head latent attention, 32/64 the other way round). */
  static const int64_t hds[][2] = {{8, 8},   {16, 16},   {32, 32},   {64, 64},   {72, 72},
                                   {96, 96}, {128, 128}, {200, 200}, {256, 256}, {192, 192},
                                   {64, 32}, {192, 128}, {32, 64}};
  /* (batch, heads_q, heads_kv): GQA ratios 1, 2, 5, 8; heads_q 1..16; batch 1..3. */
  static const int64_t heads[][3] = {{1, 1, 1},  {2, 4, 2}, {1, 5, 1}, {3, 8, 1},   {1, 16, 2},
                                     {2, 10, 2}, {1, 2, 1}, {3, 3, 3}, {1, 16, 16}, {2, 6, 3}};
  const int n_seqs = (int)(sizeof seqs / sizeof seqs[0]);
  const int n_hds = (int)(sizeof hds / sizeof hds[0]);
  const int n_heads = (int)(sizeof heads / sizeof heads[0]);

  /* Block A, shapes: every (sequence pair x head dim), twice with different dtype, mask, heads
     and layout each time. The rotations use different strides through the indices so that, over
     the block, every sequence pair and every head dim meets every dtype and every causal mode. */
  for (int is = 0; is < n_seqs; ++is) {
    for (int ih = 0; ih < n_hds; ++ih) {
      for (int var = 0; var < 2; ++var) {
        /* The longest pairs once per head dim: their float64 reference is what costs. */
        if (var == 1 && seqs[is][0] * seqs[is][1] >= 257 * 1000) continue;
        conf_case c;
        memset(&c, 0, sizeof c);
        c.dtype = k_dtypes[(is + ih + var) % 3];
        c.cm = (2 * is + ih + 2 * var) % 3;
        c.layout = (is + 2 * ih + 3 * var) % L_COUNT;
        const int64_t *hc = heads[(3 * is + ih + 5 * var) % n_heads];
        c.b = hc[0], c.hq = hc[1], c.hkv = hc[2];
        c.sq = seqs[is][0], c.sk = seqs[is][1];
        c.d = hds[ih][0], c.dv = hds[ih][1];
        c.scale = (is + ih + var) % 4 == 3 ? 0.3f : 0.0f;
        fit_heads(&c, 4e8);
        add_case(L, c);
      }
    }
  }

  /* Block B, features: dtype x causal mode x layout x GQA ratio in full, on short sequences,
     with the shape rotating through a few that stress tile edges (17, 113 are not multiples of
     any tile) and both directions of sq != sk. */
  static const int64_t gqa[][3] = {{3, 2, 2}, {2, 6, 3}, {1, 10, 2}, {2, 16, 2}};
  static const int64_t shapes_b[][4] = {{17, 113, 64, 64},  {113, 17, 16, 16},  {113, 113, 72, 72},
                                        {17, 17, 128, 128}, {113, 257, 64, 32}, {257, 113, 32, 32},
                                        {1, 257, 96, 96}};
  const int n_shapes_b = (int)(sizeof shapes_b / sizeof shapes_b[0]);
  for (int idt = 0; idt < 3; ++idt)
    for (int cm = 0; cm < 3; ++cm)
      for (int l = 0; l < L_COUNT; ++l)
        for (int g = 0; g < 4; ++g) {
          conf_case c;
          memset(&c, 0, sizeof c);
          c.dtype = k_dtypes[idt];
          c.cm = cm;
          c.layout = l;
          c.b = gqa[g][0], c.hq = gqa[g][1], c.hkv = gqa[g][2];
          const int64_t *s = shapes_b[(idt + 2 * cm + 3 * l + g) % n_shapes_b];
          c.sq = s[0], c.sk = s[1], c.d = s[2], c.dv = s[3];
          c.scale = (idt + cm + l + g) % 3 == 0 ? 0.5f : 0.0f;
          add_case(L, c);
        }

  /* Block C, masks at their edges, every dtype: bottom-right with sq > sk leaves the first
     sq - sk rows without keys (out 0, lse -inf, dq 0 exactly); top-left with sk > sq leaves the
     last keys unseen (dk, dv 0 exactly); top-left with sq > sk gives rows past sk all keys. */
  static const struct {
    int64_t sq, sk, d, dv, b, hq, hkv;
    int cm, layout;
  } edges[] = {
      {1000, 1, 64, 64, 1, 4, 2, CM_BR, TU_CONTIGUOUS},
      {257, 113, 128, 128, 2, 4, 1, CM_BR, TU_PADDED},
      {1000, 257, 64, 64, 1, 2, 1, CM_BR, TU_STRIDED},
      {113, 257, 64, 64, 1, 2, 2, CM_TL, TU_PERMUTED},
      {257, 113, 96, 96, 1, 3, 1, CM_TL, TU_STRIDED},
      {1, 1000, 256, 256, 1, 8, 1, CM_TL, L_MIXED},
      {1000, 1000, 128, 128, 1, 2, 1, CM_BR, TU_CONTIGUOUS},
      {17, 1000, 64, 32, 3, 5, 1, CM_TL, L_MIXED},
  };
  for (int idt = 0; idt < 3; ++idt)
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; ++e) {
      conf_case c;
      memset(&c, 0, sizeof c);
      c.dtype = k_dtypes[idt];
      c.sq = edges[e].sq, c.sk = edges[e].sk, c.d = edges[e].d, c.dv = edges[e].dv;
      c.b = edges[e].b, c.hq = edges[e].hq, c.hkv = edges[e].hkv;
      c.cm = edges[e].cm;
      c.layout = edges[e].layout;
      add_case(L, c);
    }

  /* Block D, GPU tile edges: f16/bf16 in the layouts tensor-core kernels read (contiguous,
     permuted), head dims that are odd multiples of 8 next to the usual ones, sequences that are
     no multiple of 64 or 128 (and one past 128), both directions of sq != sk, each causal mode,
     MHA/GQA/MQA. 184 pads to 192, which no other case's head dim does. */
  static const int64_t hds_d[7] = {40, 64, 72, 128, 136, 184, 256};
  static const int64_t seqs_d[3][2] = {{129, 129}, {77, 200}, {200, 77}};
  static const int64_t heads_d[4][3] = {{2, 8, 2}, {1, 6, 1}, {2, 4, 4}, {1, 6, 2}};
  for (int ih = 0; ih < (int)(sizeof hds_d / sizeof hds_d[0]); ++ih)
    for (int v = 0; v < 3; ++v) {
      conf_case c;
      memset(&c, 0, sizeof c);
      c.dtype = (ih + v) % 2 ? FA_F16 : FA_BF16;
      c.cm = (ih + v) % 3;
      c.layout = (ih + 2 * v) % 3 == 2 ? TU_PERMUTED : TU_CONTIGUOUS;
      const int64_t *hc = heads_d[(ih + 3 * v) % 4];
      c.b = hc[0], c.hq = hc[1], c.hkv = hc[2];
      c.sq = seqs_d[v][0], c.sk = seqs_d[v][1];
      c.d = c.dv = hds_d[ih];
      fit_heads(&c, 1e8);
      add_case(L, c);
    }

  /* Block E, a persistent grid's last round: no mask, several key tiles, and a number of query
     tiles (3 x ceil(300 / rows)) that leaves a remainder on small grids, so that a kernel which
     cuts the last round's tiles by keys and merges the pieces (cuda fa3's TAILSPLIT, with
     FA_CUDA_FA3_GRID at 2, 4 or 5 in tests/gpu/h200_check.sh) has tiles to cut. */
  static const int64_t tails_e[2][5] = {{FA_BF16, 64, 3, 3, 700}, {FA_F16, 128, 3, 1, 1000}};
  for (int i = 0; i < 2; ++i) {
    conf_case c;
    memset(&c, 0, sizeof c);
    c.dtype = (fa_dtype)tails_e[i][0];
    c.d = c.dv = tails_e[i][1];
    c.b = 1, c.hq = tails_e[i][2], c.hkv = tails_e[i][3];
    c.sq = 300, c.sk = tails_e[i][4];
    c.cm = CM_NONE;
    c.layout = TU_CONTIGUOUS;
    add_case(L, c);
  }
}

/* --quick: the cheapest cases that together still cover every feature value (dtype, causal mode
   and their pairs, layout and its pair with dtype, each sequence length and pair, head dim, dv,
   GQA ratio, batch, heads_q, explicit scale, rows without keys, unseen keys), chosen greedily from
   the cheapest up. Derived from the list, so it follows when the list changes. */
typedef struct tag_set {
  char (*v)[48];
  int n, cap;
} tag_set;

static int tag_has(const tag_set *s, const char *t) {
  for (int i = 0; i < s->n; ++i)
    if (!strcmp(s->v[i], t)) return 1;
  return 0;
}

static void tag_add(tag_set *s, const char *t) {
  if (tag_has(s, t)) return;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 128;
    char(*v)[48] = realloc(s->v, sizeof *v * (size_t)cap);
    if (!v) exit(2);
    s->v = v;
    s->cap = cap;
  }
  size_t len = strlen(t);
  if (len > 47) len = 47;
  memcpy(s->v[s->n], t, len);
  s->v[s->n++][len] = '\0';
}

static int case_tags(const conf_case *c, char tags[][48], int max) {
  int n = 0;
  const char *dt = tu_dtype_name(c->dtype), *cm = cm_names[c->cm], *ly = layout_name(c->layout);
#define TAG(...) \
  if (n < max) snprintf(tags[n++], 48, __VA_ARGS__)
  TAG("dt:%s", dt);
  TAG("cm:%s", cm);
  TAG("dtcm:%s.%s", dt, cm);
  TAG("ly:%s", ly);
  TAG("lydt:%s.%s", ly, dt);
  TAG("sq:%lld", (long long)c->sq);
  TAG("sk:%lld", (long long)c->sk);
  TAG("pair:%lldx%lld", (long long)c->sq, (long long)c->sk);
  TAG("d:%lld", (long long)c->d);
  TAG("dv:%lldx%lld", (long long)c->d, (long long)c->dv);
  TAG("ratio:%lld", (long long)(c->hq / c->hkv));
  TAG("b:%lld", (long long)c->b);
  TAG("hq:%lld", (long long)c->hq);
  TAG("scale:%d", c->scale != 0.0f);
  if (c->cm == CM_BR && c->sq > c->sk) TAG("empty-rows:%s", dt);
  if (c->cm == CM_TL && c->sk > c->sq) TAG("unseen-keys:%s", dt);
#undef TAG
  return n;
}

static int cmp_cost(const void *a, const void *b) {
  const conf_case *x = *(const conf_case *const *)a, *y = *(const conf_case *const *)b;
  return x->cost < y->cost ? -1 : x->cost > y->cost ? 1 : strcmp(x->name, y->name);
}

static void mark_quick(case_list *L) {
  conf_case **order = (conf_case **)malloc(sizeof(conf_case *) * (size_t)(L->n ? L->n : 1));
  if (!order) exit(2);
  for (int i = 0; i < L->n; ++i) order[i] = &L->v[i];
  qsort(order, (size_t)L->n, sizeof *order, cmp_cost);
  tag_set seen = {0};
  for (int i = 0; i < L->n; ++i) {
    char tags[24][48];
    int nt = case_tags(order[i], tags, 24), fresh = 0;
    for (int t = 0; t < nt; ++t) fresh |= !tag_has(&seen, tags[t]);
    if (!fresh) continue;
    order[i]->quick = 1;
    for (int t = 0; t < nt; ++t) tag_add(&seen, tags[t]);
  }
  free(seen.v);
  free(order);
}

/* ----------------------------------------------------------------------------------------------
 * Running one case
 * -------------------------------------------------------------------------------------------- */

/* The CPU kernel build meant to run: the widest this CPU has (asked here independently of the
   plugin, so a wrong choice in the plugin is caught), or a narrower one forced by FA_CPU_ISA. */
static const char *cpu_expected_isa(void) {
  static const char *const widest_first[] = {"avx512", "avx2", "neon", "generic"};
  int best = 3;
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    best = 0;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c"))
    best = 1;
#elif defined(__aarch64__)
  best = 2; /* the NEON build: every AArch64 CPU runs it */
#endif
  const char *forced = getenv("FA_CPU_ISA");
  for (int r = best; forced && *forced && r < 4; ++r)
    if (strcmp(forced, widest_first[r]) == 0) return widest_first[r];
  return widest_first[best];
}

/* The build named for one call: FA_CPU_ISA=avx512bf16 (asked for by name only) runs the bf16
   products in fa_forward on bf16 with even head dims, on a CPU with AVX512-BF16 (CPUID leaf 7
   subleaf 1, EAX bit 5); everything else runs and is named as the AVX-512 build.
   FA_CPU_ISA=amx (by name only; the suite skips when the backend's device line does not say AMX
   is in use, since the backend then refuses every call) runs the same products on AMX-BF16 tiles
   in fa_forward and in fa_backward, on bf16 with even head dims, named amx; everything else
   (f32, f16, odd head dims, fa_forward_kvcache) runs and is named as the AVX-512 build. The
   backend's rule: cpu_problem.c (bf16dp) and cpu_decide.c (kernel_name). */
static const char *cpu_expected_isa_for(const char *op, fa_dtype dt, int64_t d, int64_t dv) {
  const char *isa = cpu_expected_isa();
  const char *forced = getenv("FA_CPU_ISA");
#if defined(__GNUC__) && defined(__x86_64__)
  unsigned a = 0, b, c, dd;
  const int bf16_pairs = dt == FA_BF16 && d % 2 == 0 && dv % 2 == 0;
  if (!strcmp(isa, "avx512") && forced && !strcmp(forced, "avx512bf16") &&
      __get_cpuid_count(7, 1, &a, &b, &c, &dd) && (a & (1u << 5)) && !strcmp(op, "fwd") &&
      bf16_pairs)
    return "avx512bf16";
  if (!strcmp(isa, "avx512") && forced && !strcmp(forced, "amx") && bf16_pairs &&
      (!strcmp(op, "fwd") || !strcmp(op, "bwd")))
    return "amx";
#else
  (void)op, (void)dt, (void)d, (void)dv, (void)forced;
#endif
  return isa;
}

/* Whether a run's kernel is the expected one; with FA_CUDA_FA3_CONFIG set (the CUDA backend's A/B
   knob), a fa3 kernel may carry "@<name>" of one of the configurations it names. */
static int kernel_matches(const char *got, const char *want) {
  const size_t n = strlen(want);
  if (strncmp(got, want, n) != 0) return 0;
  if (got[n] == 0) return 1;
  const char *env = getenv("FA_CUDA_FA3_CONFIG");
  if (got[n] != '@' || !env || strncmp(want, "cuda.fa3.", 9) != 0) return 0;
  const char *name = got + n + 1;
  const size_t len = strlen(name);
  for (const char *s = env; *s;) {
    const size_t l = strcspn(s, ",");
    if (l == len && !strncmp(s, name, l)) return 1;
    s += l + (s[l] == ',');
  }
  return 0;
}

/* The least shared memory of the fa3 forward's configurations at a head dim (fa3_args.h's list;
   the backend runs fa3 where any of them fits), 0 where fa3 has none. */
static int64_t fa3_least_smem(int64_t d) {
  const int64_t padded = d == 64 ? 64 : d == 96 || d == 128 ? 128 : d == 192 || d == 256 ? 256 : 0;
  int64_t least = 0;
#define FA3_LEAST(name, hd, wgs, bn, flags)                                              \
  if (hd == padded && (least == 0 || (int64_t)FA3_FWD_SMEM(hd, wgs, bn, flags) < least)) \
    least = (int64_t)FA3_FWD_SMEM(hd, wgs, bn, flags);
  FA3_FWD_CONFIGS(FA3_LEAST)
#undef FA3_LEAST
  return least;
}

/* The CUDA backend's kernels: "<prefix>.<fwd|bwd>.<dtype>.hd<D>" then ".causal", ".window",
   ".softcap" in that order (head_dim_v is always head_dim there). Prefix: "cuda.fa3.sm90" for the
   forward and the backward at head dims 64, 96, 128, 192 and 256 (the backward: at least one
   query row), without softcap, where the backend runs
   FlashAttention-3 (fa3 != 0: its kernel families list fa3, the device is sm_90 and not run as
   sm_80, --kernel-family is not fa2, and there is at least one key: the backend's rule,
   cuda_decide.c's fa3_takes), else
   "cuda.fa2.sm80" (backends/cuda/fa2_sm80, also on sm_89 and sm_90), or --kernel-prefix's for
   every name. Other ops (kvcache) are not named yet: 0. */
static int cuda_expected(const char *prefix, int fa3, const char *op, fa_dtype dt, int64_t d,
                         int causal, int window, int softcap, int pack, char *buf, size_t n) {
  const int fwd = !strcmp(op, "fwd");
  if (!fwd && strcmp(op, "bwd") != 0) return 0;
  if (!prefix) {
    /* FA_CUDA_SMEM_LIMIT below every fa3 configuration's shared memory gives fa2. The backward:
       head dims 64, 96, 128, 192 and 256 (fa3_bwd_padded_head_dim, cuda_decide.c). */
    const char *lim = getenv("FA_CUDA_SMEM_LIMIT");
    const int bwd_hd = fa3_bwd_padded_head_dim(d);
    const int64_t need = fwd ? fa3_least_smem(d) : bwd_hd ? (int64_t)FA3_BWD_SMEM(bwd_hd) : 0;
    const int fits = need > 0 && (!lim || !*lim || atoll(lim) >= need);
    prefix = fa3 && fits && !softcap ? "cuda.fa3.sm90" : "cuda.fa2.sm80";
  }
  char gqa[16] = "";
  if (fwd && pack > 1 && !strcmp(prefix, "cuda.fa3.sm90"))
    snprintf(gqa, sizeof gqa, ".gqa%d", pack);
  snprintf(buf, n, "%s.%s.%s.hd%lld%s%s%s%s", prefix, op, tu_dtype_name(dt), (long long)d,
           causal ? ".causal" : "", window ? ".window" : "", softcap ? ".softcap" : "", gqa);
  return 1;
}

/* fa3's GQA packing (fa3_host.c's fa3_fwd_pack, from the tile the run reports): the query heads
   a tile holds, a power of two dividing the group, each keeping at least seqlen_q rows and 8. */
static int fa3_expected_pack(int32_t tile_m, int64_t hq, int64_t hkv, int64_t sq) {
  const int64_t group = hkv > 0 ? hq / hkv : 1;
  int pack = 1;
  while (group % (2 * pack) == 0 && (tile_m / (2 * pack)) % 8 == 0 && tile_m / (2 * pack) >= sq)
    pack *= 2;
  return pack;
}

/* The OpenCL backend's kernels (backends/opencl, OpenCL C built at run time):
   "opencl.flash.<fwd|bwd>.<dtype>.hd<D>" then ".causal", ".window", ".softcap" in that order
   (head_dim_v is always head_dim there). Other ops (kvcache) are not named yet: 0. */
static int opencl_expected(const char *op, fa_dtype dt, int64_t d, int causal, int window,
                           int softcap, char *buf, size_t n) {
  if (strcmp(op, "fwd") != 0 && strcmp(op, "bwd") != 0) return 0;
  snprintf(buf, n, "opencl.flash.%s.%s.hd%lld%s%s%s", op, tu_dtype_name(dt), (long long)d,
           causal ? ".causal" : "", window ? ".window" : "", softcap ? ".softcap" : "");
  return 1;
}

static int expected_kernel(const backend_ctx *bk, const conf_case *c, int bwd, int splits,
                           int32_t tile_m, char *buf, size_t n) {
  if (!strcmp(bk->name, "cuda"))
    return cuda_expected(bk->cuda_prefix, bk->cuda_fa3 && c->sk > 0 && (!bwd || c->sq > 0),
                         bwd ? "bwd" : "fwd", c->dtype, c->d, c->cm != CM_NONE, 0, 0,
                         fa3_expected_pack(tile_m, c->hq, c->hkv, c->sq), buf, n);
  if (!strcmp(bk->name, "opencl"))
    return opencl_expected(bwd ? "bwd" : "fwd", c->dtype, c->d, c->cm != CM_NONE, 0, 0, buf, n);
  if (strcmp(bk->name, "cpu") != 0) return 0;
  char hd[32];
  if (c->d == c->dv)
    snprintf(hd, sizeof hd, "%lld", (long long)c->d);
  else
    snprintf(hd, sizeof hd, "%lldx%lld", (long long)c->d, (long long)c->dv);
  char split[24] = "";
  if (splits > 1) snprintf(split, sizeof split, ".split%d", splits);
  snprintf(buf, n, "cpu.flash.%s.%s.%s.hd%s%s%s",
           cpu_expected_isa_for(bwd ? "bwd" : "fwd", c->dtype, c->d, c->dv), bwd ? "bwd" : "fwd",
           tu_dtype_name(c->dtype), hd, c->cm != CM_NONE ? ".causal" : "", split);
  return 1;
}

/* Failure details of a case, printed under its line. */
typedef struct report {
  char text[4096];
  size_t used;
  int failed;
} report;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
fail(report *r, const char *fmt, ...) {
  r->failed = 1;
  if (r->used + 8 >= sizeof r->text) return;
  int w = snprintf(r->text + r->used, sizeof r->text - r->used, "      ");
  if (w > 0) r->used += (size_t)w;
  va_list ap;
  va_start(ap, fmt);
  w = vsnprintf(r->text + r->used, sizeof r->text - r->used, fmt, ap);
  va_end(ap);
  if (w > 0) r->used += (size_t)w;
  if (r->used + 1 < sizeof r->text) {
    r->text[r->used++] = '\n';
    r->text[r->used] = '\0';
  }
  if (r->used >= sizeof r->text) r->used = sizeof r->text - 1;
}

/* Copies a device tensor back over its host buffer; a failure is the case's (label names it). */
static int dev_get(report *rep, const backend_ctx *bk, tu_tensor *host, const dev_tensor *d,
                   const char *label) {
  char err[256];
  if (!bk->ops->copy_out(host, d, err, sizeof err)) return 0;
  fail(rep, "%s: %s", label, err);
  return -1;
}

/* A call the backend refused: a skip when some need is not served (and none of those is required
   by --require), the reason in skip; a failure otherwise (also for any status other than
   FA_ERR_UNSUPPORTED). */
static int refusal(report *rep, const backend_ctx *bk, const needs *nd, const char *call,
                   fa_status st, char *skip, size_t sn) {
  /* Missing needs in one fixed order (fa_backend_info's, then the probes), so equal reasons read
     the same in every line. */
  static const char order[] =
      "fwd,bwd,f32,f16,bf16,lse,causal,causal_top_left,gqa,mqa,hd256,hd512,dv_ne_dk,"
      "deterministic,window,softcap,alibi,dropout,varlen,paged_kv,split_kv,kvcache,"
      "strided_last_dim,unaligned";
  int idx[32], n = 0;
  for (int i = 0; i < nd->n && n < 32; ++i) {
    if (serves(bk, nd->f[i])) continue;
    int j = n++;
    for (; j > 0 && list_pos(order, nd->f[idx[j - 1]]) > list_pos(order, nd->f[i]); --j)
      idx[j] = idx[j - 1];
    idx[j] = i;
  }
  char missing[256] = "";
  int required = 0;
  for (int k = 0; k < n; ++k) {
    size_t u = strlen(missing);
    snprintf(missing + u, sizeof missing - u, "%s%s", u ? "," : "", nd->f[idx[k]]);
    required |= list_has(bk->require, nd->f[idx[k]]);
  }
  if (st != FA_ERR_UNSUPPORTED || !missing[0]) {
    fail(rep, "%s: %s: %s%s", call, fa_status_string(st), fa_last_error(),
         missing[0] ? "" : " (the backend lists every feature this case needs)");
    return R_FAIL;
  }
  if (required) {
    fail(rep, "%s: required feature(s) %s not supported: %s", call, missing, fa_last_error());
    return R_FAIL;
  }
  snprintf(skip, sn, "%s not supported (%s: %s)", missing, call, fa_last_error());
  return R_SKIP;
}

static void check_info(report *rep, const backend_ctx *bk, const conf_case *c, int bwd,
                       const char *call, const fa_run_info *info, const fa_run_info *plan) {
  char want[FA_KERNEL_LEN];
  if (info->backend != bk->id || strcmp(info->backend_name, bk->name) != 0)
    fail(rep, "%s: run info says backend %d \"%s\", expected %d \"%s\"", call, info->backend,
         info->backend_name, bk->id, bk->name);
  if (expected_kernel(bk, c, bwd, info->num_splits, info->tile_m, want, sizeof want)) {
    if (!kernel_matches(info->kernel, want))
      fail(rep, "%s: kernel \"%s\", expected \"%s\"", call, info->kernel, want);
  } else {
    size_t n = strlen(bk->name);
    if (strncmp(info->kernel, bk->name, n) != 0 || info->kernel[n] != '.')
      fail(rep, "%s: kernel \"%s\" does not start with \"%s.\"", call, info->kernel, bk->name);
  }
  if (plan && (strcmp(plan->kernel, info->kernel) != 0 || plan->backend != info->backend))
    fail(rep, "%s: fa_plan reports %s \"%s\" but the call ran %s \"%s\"", call, plan->backend_name,
         plan->kernel, info->backend_name, info->kernel);
}

/* Checks one output with the pass rule; appends "name err/tol" to the summary. */
static void check_output(report *rep, char *summary, size_t sn, const char *label,
                         const tu_tensor *x, const ref_result *r64, const ref_result *rn,
                         ref_which w, const unsigned char *masked, fa_dtype dtype) {
  ref_check ck;
  ref_check_output(x, r64, rn, w, masked, dtype, &ck);
  size_t used = strlen(summary);
  snprintf(summary + used, sn - used, " %s %.1e/%.1e", label, ck.max_err, ck.tol);
  char where[64] = "-";
  if (ck.worst >= 0) tu_format_index(x, ck.worst, where, sizeof where);
  if (!ck.pass) {
    if (ck.broken)
      fail(rep, "%s: %s at %s: got %.9g, expected %.9g (%lld such elements)", label, ck.why, where,
           ck.worst_got, ck.worst_want, (long long)ck.broken);
    else
      fail(rep,
           "%s: max error %.3e > tolerance %.3e (2 x naive %s error %.3e + floor %.2e) at "
           "%s: got %.9g, expected %.9g",
           label, ck.max_err, ck.tol, tu_dtype_name(dtype), ck.naive_err, ck.floor, where,
           ck.worst_got, ck.worst_want);
  }
  char msg[160];
  if (tu_gaps_intact(x, msg, sizeof msg) != 1)
    fail(rep, "%s: wrote outside its elements: %s", label, msg);
}

static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int run_case(const conf_case *c, const backend_ctx *bk, uint64_t run_seed) {
  const double t0 = now_s();
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[256] = "", skip[512] = "";
  int result = R_FAIL;
  tu_tensor t[T_COUNT];
  dev_tensor dv[T_COUNT];
  memset(t, 0, sizeof t);
  memset(dv, 0, sizeof dv);
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};
  char err[256];

  const int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d},
                vs[4] = {c->b, c->sk, c->hkv, c->dv}, os[4] = {c->b, c->sq, c->hq, c->dv},
                ls[3] = {c->b, c->hq, c->sq};
  const int64_t *shapes[T_COUNT] = {qs, ks, vs, os, os, os, ls, qs, ks, vs};
  for (int i = 0; i < T_COUNT; ++i) {
    fa_dtype dt = i == T_LSE ? FA_F32 : c->dtype;
    if (tu_alloc(&t[i], dt, i == T_LSE ? 3 : 4, shapes[i], tensor_layout(c->layout, i))) {
      fail(&rep, "out of memory allocating %s", t_names[i]);
      goto done;
    }
  }
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(run_seed, c->name));
  const int inputs[4] = {T_Q, T_K, T_V, T_DOUT};
  for (int i = 0; i < 4; ++i) {
    tu_fill_random(&t[inputs[i]], &rng);
    (void)tu_snapshot(&t[inputs[i]]);
  }

  for (int i = 0; i < T_COUNT; ++i) {
    if (dev_put(bk->ops, &dv[i], &t[i], err, sizeof err)) {
      fail(&rep, "%s: %s", t_names[i], err);
      goto done;
    }
  }

  fa_params params;
  fa_params_init(&params);
  params.backend = bk->id;
  params.strict = 1;
  params.kernel_family = bk->kernel_family;
  params.softmax_scale = c->scale;
  params.causal = c->cm != CM_NONE;
  params.causal_align = c->cm == CM_TL ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  fa_run_info info, plan;
  fa_status st;

  /* Whether the backend takes the case at all, asked before the reference (skips stay cheap). */
  {
    needs nd = {{0}, 0};
    need_shape(&nd, c->dtype, c->cm != CM_NONE, c->cm == CM_TL, c->hq, c->hkv, c->d, c->dv, 1, 1);
    const fa_tensor *data[9];
    for (int i = 0; i < 9; ++i) data[i] = &dv[i < T_LSE ? i : i + 1].view;
    need_views(&nd, data, 9);
    need_family(&nd, bk, 0, c->d, c->dv, c->sq, c->sk, 0.0f, data, 9);
    fa_run_info_init(&plan);
    st = fa_plan_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                         &dv[T_LSE].view, &plan);
    const char *call = "fa_plan_forward";
    if (st == FA_OK) {
      fa_run_info_init(&plan);
      st = fa_plan_backward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                            &dv[T_LSE].view, &dv[T_DOUT].view, &dv[T_DQ].view, &dv[T_DK].view,
                            &dv[T_DV].view, &plan);
      call = "fa_plan_backward";
    }
    if (st != FA_OK) {
      result = refusal(&rep, bk, &nd, call, st, skip, sizeof skip);
      goto done;
    }
  }

  ref_problem p;
  p.batch = c->b, p.seqlen_q = c->sq, p.seqlen_k = c->sk, p.heads_q = c->hq, p.heads_kv = c->hkv;
  p.head_dim = c->d, p.head_dim_v = c->dv;
  p.scale = ref_resolve_scale(c->scale, c->d);
  p.causal = c->cm != CM_NONE;
  p.causal_align = c->cm == CM_TL ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  if (ref_attention(&p, REF_F64, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &r64, 0) ||
      ref_attention(&p, REF_STORAGE, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &rn, 0)) {
    fail(&rep, "reference failed (out of memory)");
    goto done;
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w)
    if (!(masked[w] = ref_masked_map(&p, (ref_which)w))) {
      fail(&rep, "out of memory (mask map)");
      goto done;
    }

  /* Forward without lse: the inference path. */
  fa_run_info_init(&plan);
  st = fa_plan_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT0].view, NULL,
                       &plan);
  if (st != FA_OK)
    fail(&rep, "fa_plan_forward (lse NULL): %s: %s", fa_status_string(st), fa_last_error());
  fa_run_info_init(&info);
  st = fa_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT0].view, NULL,
                  &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward (lse NULL): %s: %s", fa_status_string(st), fa_last_error());
  } else {
    check_info(&rep, bk, c, 0, "forward(lse NULL)", &info, &plan);
    if (bk->ops->copy_out(&t[T_OUT0], &dv[T_OUT0], err, sizeof err))
      fail(&rep, "out: %s", err);
    else
      check_output(&rep, summary, sizeof summary, "out0", &t[T_OUT0], &r64, &rn, REF_OUT,
                   masked[REF_OUT], c->dtype);
  }

  /* Forward with lse, whose out and lse the backward then uses. */
  fa_run_info_init(&plan);
  st = fa_plan_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                       &dv[T_LSE].view, &plan);
  if (st != FA_OK) fail(&rep, "fa_plan_forward: %s: %s", fa_status_string(st), fa_last_error());
  fa_run_info_init(&info);
  st = fa_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                  &dv[T_LSE].view, &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  check_info(&rep, bk, c, 0, "forward", &info, &plan);
  if (bk->ops->copy_out(&t[T_OUT], &dv[T_OUT], err, sizeof err) ||
      bk->ops->copy_out(&t[T_LSE], &dv[T_LSE], err, sizeof err)) {
    fail(&rep, "out/lse: %s", err);
    goto done;
  }
  check_output(&rep, summary, sizeof summary, "out", &t[T_OUT], &r64, &rn, REF_OUT, masked[REF_OUT],
               c->dtype);
  check_output(&rep, summary, sizeof summary, "lse", &t[T_LSE], &r64, &rn, REF_LSE, masked[REF_LSE],
               c->dtype);
  (void)tu_snapshot(&t[T_OUT]);
  (void)tu_snapshot(&t[T_LSE]);

  /* Backward. */
  fa_run_info_init(&plan);
  st = fa_plan_backward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                        &dv[T_LSE].view, &dv[T_DOUT].view, &dv[T_DQ].view, &dv[T_DK].view,
                        &dv[T_DV].view, &plan);
  if (st != FA_OK) fail(&rep, "fa_plan_backward: %s: %s", fa_status_string(st), fa_last_error());
  fa_run_info_init(&info);
  st = fa_backward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                   &dv[T_LSE].view, &dv[T_DOUT].view, &dv[T_DQ].view, &dv[T_DK].view,
                   &dv[T_DV].view, &info);
  if (st != FA_OK) {
    fail(&rep, "fa_backward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  check_info(&rep, bk, c, 1, "backward", &info, &plan);
  static const int grads[3] = {T_DQ, T_DK, T_DV};
  static const ref_which gw[3] = {REF_DQ, REF_DK, REF_DV};
  for (int g = 0; g < 3; ++g) {
    if (bk->ops->copy_out(&t[grads[g]], &dv[grads[g]], err, sizeof err)) {
      fail(&rep, "%s: %s", t_names[grads[g]], err);
      continue;
    }
    check_output(&rep, summary, sizeof summary, t_names[grads[g]], &t[grads[g]], &r64, &rn, gw[g],
                 masked[gw[g]], c->dtype);
  }

  /* Nothing the calls only read may change (device copies come back whole first). */
  static const int read_only[6] = {T_Q, T_K, T_V, T_DOUT, T_OUT, T_LSE};
  for (int i = 0; i < 6; ++i) {
    int ti = read_only[i];
    char msg[160];
    if (bk->ops->copy_out(&t[ti], &dv[ti], err, sizeof err)) {
      fail(&rep, "%s: %s", t_names[ti], err);
      continue;
    }
    if (tu_unchanged(&t[ti], msg, sizeof msg) != 1)
      fail(&rep, "input %s was modified: %s", t_names[ti], msg);
  }

  result = rep.failed ? R_FAIL : R_PASS;

done:
  if (rep.failed) result = R_FAIL;
  for (int i = 0; i < T_COUNT; ++i) {
    if (bk->ops) bk->ops->release(&dv[i]);
    tu_free(&t[i]);
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  ref_result_free(&r64);
  ref_result_free(&rn);
  if (result == R_SKIP)
    printf("SKIP %s: %s\n", c->name, skip);
  else
    printf("%s %-50s%s  %.2fs\n", result == R_PASS ? "PASS" : "FAIL", c->name, summary,
           now_s() - t0);
  if (result == R_FAIL) {
    fputs(rep.text, stdout);
    printf("      replay: FA_TEST_SEED=%llu conformance --backend %s --filter '%s'\n",
           (unsigned long long)run_seed, bk->name, c->name);
  }
  fflush(stdout);
  return result;
}

/* ==============================================================================================
 * Feature cases: sliding window, softcap, ALiBi, dropout, variable length (packed q/k, both lse
 * layouts, seqused_k), paged KV, split-KV, head dims up to 512, fa_forward_kvcache.
 *
 * The library's tensors are whatever the feature needs (packed, paged); the float64 reference
 * runs on padded dense copies of the same values, and each output element is mapped back to its
 * reference element (or to "must stay untouched": rows past a sequence's end in a padded lse,
 * packed tokens past the last sequence). A case whose feature the backend refuses with
 * FA_ERR_UNSUPPORTED and does not list in fa_backend_info's features is skipped, never passed;
 * one it refuses although it lists every feature the case needs fails.
 * ============================================================================================ */

#define FMAXB 6

typedef struct fcase {
  char name[160];
  fa_dtype dtype;
  int64_t b, hq, hkv, d, dv;
  int64_t sq, sk; /* dense extents (varlen: derived from the lengths) */
  int cm, layout;
  float scale;
  int win;
  int64_t wl, wr;
  float softcap;
  int alibi; /* 0 none, 1 [heads_q], 2 [batch, heads_q] */
  float dropout;
  int varlen;     /* packed q (and packed k unless paged) */
  int lse_packed; /* varlen: lse [heads_q, total_q] instead of padded [batch, heads_q, max_q] */
  int64_t lq[FMAXB], lk[FMAXB];
  int64_t extra_q; /* packed q tokens past the last sequence (must stay untouched) */
  int seqused;
  int64_t used[FMAXB];
  int64_t page; /* > 0: paged k/v through a shuffled block table */
  int64_t max_blocks;
  int splits; /* -1: not a split case; else num_splits run and compared with num_splits 1 */
  int bwd;
  int determ; /* params.deterministic, and a second run that must match the first bitwise */
  /* fa_forward_kvcache */
  int kvc;
  int64_t cache_len[FMAXB];
  int64_t snew; /* tokens appended (0: no k_new) */
  int64_t rot;  /* rotary dim (0: none) */
  int inter;    /* rotary interleaved */
  int rot_f32;  /* rotary tables f32 (else q's dtype) */
  double cost;
  int quick;
} fcase;

typedef struct fcase_list {
  fcase *v;
  int n, cap;
} fcase_list;

/* Feature names as fa_backend_info reports them, that a case needs. */
static int fcase_features(const fcase *c, const char **f, int max) {
  int n = 0;
#define FEAT(x) \
  if (n < max) f[n++] = (x)
  if (c->kvc) FEAT("kvcache");
  if (c->win) FEAT("window");
  if (c->softcap > 0.0f) FEAT("softcap");
  if (c->alibi) FEAT("alibi");
  if (c->dropout > 0.0f) FEAT("dropout");
  if (c->varlen || c->seqused) FEAT("varlen");
  if (c->page > 0) FEAT("paged_kv");
  if (c->splits >= 0 && c->splits != 1) FEAT("split_kv");
  if (c->d > 256 || c->dv > 256) FEAT("hd512");
  if (c->bwd && !c->page) FEAT("bwd");
  if (c->determ) FEAT("deterministic");
#undef FEAT
  return n;
}

static int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Dense extents of the reference problem. */
static int64_t fc_max_q(const fcase *c) {
  if (!c->varlen) return c->sq;
  int64_t m = 1;
  for (int64_t b = 0; b < c->b; ++b) m = imax64(m, c->lq[b]);
  return m;
}
static int64_t fc_max_k(const fcase *c) {
  if (c->kvc || c->page > 0) return c->page > 0 ? c->max_blocks * c->page : c->sk;
  if (!c->varlen) return c->sk;
  int64_t m = 1;
  for (int64_t b = 0; b < c->b; ++b) m = imax64(m, c->lk[b]);
  return m;
}

static double fcase_cost(const fcase *c) {
  double sq = (double)fc_max_q(c), sk = (double)fc_max_k(c);
  double rows = (double)c->b * c->hq * sq * sk * (double)(c->d + c->dv) * (c->bwd ? 2.0 : 1.0);
  double elems = (double)c->b * (sq * c->hq + sk * c->hkv) * (double)(c->d + c->dv);
  return rows + 40.0 * elems;
}

static void fcase_add(fcase_list *L, fcase c, const char *tag) {
  char hd[32];
  if (c.d == c.dv)
    snprintf(hd, sizeof hd, "d%lld", (long long)c.d);
  else
    snprintf(hd, sizeof hd, "d%lldx%lld", (long long)c.d, (long long)c.dv);
  snprintf(c.name, sizeof c.name, "%s.%s.b%lld.h%lldx%lld.s%lldx%lld.%s.%s.%s%s", tag,
           tu_dtype_name(c.dtype), (long long)c.b, (long long)c.hq, (long long)c.hkv,
           (long long)fc_max_q(&c), (long long)fc_max_k(&c), hd, cm_names[c.cm],
           layout_name(c.layout), c.bwd ? ".bwd" : "");
  for (int i = 0; i < L->n; ++i)
    if (!strcmp(L->v[i].name, c.name)) {
      /* Two feature cases must never collapse into one silently: the tag must tell them apart. */
      fprintf(stderr, "conformance: duplicate feature case name %s\n", c.name);
      exit(2);
    }
  if (L->n == L->cap) {
    int cap = L->cap ? 2 * L->cap : 128;
    fcase *v = (fcase *)realloc(L->v, sizeof(fcase) * (size_t)cap);
    if (!v) exit(2);
    L->v = v;
    L->cap = cap;
  }
  c.cost = fcase_cost(&c);
  L->v[L->n++] = c;
}

static fcase fbase(fa_dtype dt, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk,
                   int64_t d, int64_t dv, int cm) {
  fcase c;
  memset(&c, 0, sizeof c);
  c.dtype = dt;
  c.b = b, c.hq = hq, c.hkv = hkv, c.sq = sq, c.sk = sk, c.d = d, c.dv = dv, c.cm = cm;
  c.layout = TU_CONTIGUOUS;
  c.splits = -1;
  c.bwd = 1;
  return c;
}

static void build_fcases(fcase_list *L) {
  char tag[64];
  for (int idt = 0; idt < 3; ++idt) {
    const fa_dtype dt = k_dtypes[idt];
    fcase c;
    /* --- sliding window: with causal in both alignments, left only, right only, both --- */
    c = fbase(dt, 2, 4, 2, 113, 113, 64, 64, CM_BR);
    c.win = 1, c.wl = 16, c.wr = 0, c.layout = idt == 0 ? L_MIXED : TU_CONTIGUOUS;
    fcase_add(L, c, "window.l16");
    c = fbase(dt, 1, 3, 1, 257, 113, 32, 32, CM_BR);
    c.win = 1, c.wl = 40, c.wr = -1;
    fcase_add(L, c, "window.l40");
    c = fbase(dt, 1, 2, 2, 113, 257, 64, 64, CM_TL);
    c.win = 1, c.wl = 7, c.wr = 5; /* causal forces right = 0 */
    fcase_add(L, c, "window.l7r5");
    c = fbase(dt, 2, 2, 1, 113, 257, 64, 32, CM_NONE);
    c.win = 1, c.wl = 10, c.wr = -1;
    fcase_add(L, c, "window.left10");
    c = fbase(dt, 1, 4, 2, 257, 113, 64, 64, CM_NONE);
    c.win = 1, c.wl = -1, c.wr = 7;
    c.layout = idt == 1 ? TU_PADDED : TU_CONTIGUOUS;
    fcase_add(L, c, "window.right7");
    c = fbase(dt, 1, 2, 1, 113, 113, 96, 96, CM_NONE);
    c.win = 1, c.wl = 3, c.wr = 30;
    fcase_add(L, c, "window.l3r30");
    /* head dims 256 and 192: the fa3 backward's wide kernel (64-key tiles, each consumer 32 of
       a step's queries) */
    c = fbase(dt, 1, 4, 2, 200, 300, 256, 256, CM_NONE);
    c.win = 1, c.wl = 70, c.wr = 20;
    fcase_add(L, c, "window.l70r20");
    c = fbase(dt, 1, 3, 1, 257, 200, 192, 192, CM_BR);
    c.win = 1, c.wl = 100, c.wr = 0;
    fcase_add(L, c, "window.l100");
    /* --- softcap --- */
    c = fbase(dt, 2, 4, 2, 113, 113, 64, 64, idt == 0 ? CM_NONE : CM_BR);
    c.softcap = 1.5f, c.scale = 0.5f;
    fcase_add(L, c, "softcap1.5");
    c = fbase(dt, 1, 2, 1, 17, 257, 128, 128, CM_TL);
    c.softcap = 30.0f;
    c.layout = idt == 2 ? TU_STRIDED : TU_CONTIGUOUS;
    fcase_add(L, c, "softcap30");
    /* --- ALiBi, per head and per (batch, head) --- */
    c = fbase(dt, 2, 4, 2, 113, 257, 64, 64, CM_NONE);
    c.alibi = 1;
    fcase_add(L, c, "alibi.h");
    c = fbase(dt, 3, 2, 1, 257, 113, 64, 64, idt == 2 ? CM_TL : CM_BR);
    c.alibi = 2;
    fcase_add(L, c, "alibi.bh");
    /* --- dropout, with and without causal --- */
    static const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int ip = 0; ip < 3; ++ip) {
      c = fbase(dt, 2, 4, 2, 113, 113, 64, 64, (idt + ip) % 3);
      c.dropout = ps[ip];
      snprintf(tag, sizeof tag, "dropout%.1f", (double)ps[ip]);
      fcase_add(L, c, tag);
    }
    c = fbase(dt, 1, 2, 1, 17, 257, 32, 64, CM_BR);
    c.dropout = 0.3f;
    fcase_add(L, c, "dropout0.3");
    /* --- variable length: empty sequences, length 1, sq > sk and sk > sq; both lse layouts --- */
    static const int64_t vq[][5] = {{0, 1, 17, 113, 5}, {33, 0, 1, 64, 2}};
    static const int64_t vk[][5] = {{40, 1, 113, 17, 0}, {1, 9, 1, 200, 2}};
    for (int pat = 0; pat < 2; ++pat)
      for (int lp = 0; lp < 2; ++lp) {
        c = fbase(dt, 5, 4, 2, 0, 0, 64, 64, (idt + pat + lp) % 3);
        c.varlen = 1, c.lse_packed = lp, c.extra_q = lp ? 3 : 0;
        memcpy(c.lq, vq[pat], sizeof vq[pat]);
        memcpy(c.lk, vk[pat], sizeof vk[pat]);
        snprintf(tag, sizeof tag, "varlen.p%d.%s", pat, lp ? "lse2d" : "lse3d");
        fcase_add(L, c, tag);
      }
    /* seqused_k with and without varlen */
    c = fbase(dt, 4, 2, 1, 0, 0, 32, 32, CM_BR);
    c.varlen = 1, c.seqused = 1;
    {
      const int64_t q[4] = {7, 1, 30, 0}, k[4] = {50, 3, 30, 8}, u[4] = {20, 0, 30, 8};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k), memcpy(c.used, u, sizeof u);
    }
    fcase_add(L, c, "varlen.seqused");
    c = fbase(dt, 3, 4, 4, 33, 129, 64, 64, idt == 1 ? CM_TL : CM_NONE);
    c.seqused = 1;
    {
      const int64_t u[3] = {129, 1, 64};
      memcpy(c.used, u, sizeof u);
    }
    fcase_add(L, c, "seqused");
    /* --- head dims up to 512, dv != dk --- */
    static const int64_t hd[][2] = {{192, 128}, {576, 512}, {512, 512}, {300, 72}, {40, 512}};
    for (int h = 0; h < 5; ++h) {
      if (h >= 3 && idt != h - 3 && idt != 2) continue;
      c = fbase(dt, 1, 4, 2, 65, 97, hd[h][0], hd[h][1], (idt + h) % 3);
      fcase_add(L, c, "hd");
    }
    /* --- split-KV against num_splits 1 --- */
    static const int sp[4] = {2, 3, 4, 0};
    for (int i = 0; i < 4; ++i) {
      c = fbase(dt, 2, 8, 2, i == 3 ? 1 : 17, 1000, 64, 64, (idt + i) % 3);
      c.splits = sp[i], c.bwd = 0;
      snprintf(tag, sizeof tag, "split%d", sp[i]);
      fcase_add(L, c, tag);
    }
    /* --- combinations --- */
    c = fbase(dt, 4, 6, 2, 0, 0, 64, 64, idt == 2 ? CM_TL : CM_BR);
    c.varlen = 1, c.win = 1, c.wl = 12, c.wr = 0, c.softcap = 2.0f, c.alibi = 2;
    {
      const int64_t q[4] = {20, 1, 0, 45}, k[4] = {30, 60, 3, 45};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k);
    }
    fcase_add(L, c, "combo.varlen.window.softcap.alibi");
    c = fbase(dt, 2, 4, 1, 113, 200, 64, 64, CM_BR);
    c.dropout = 0.2f, c.win = 1, c.wl = 50, c.wr = 0, c.alibi = 1;
    fcase_add(L, c, "combo.dropout.window.alibi");
    c = fbase(dt, 3, 4, 2, 0, 0, 32, 32, CM_NONE);
    c.varlen = 1, c.dropout = 0.25f;
    {
      const int64_t q[3] = {9, 0, 40}, k[3] = {70, 5, 1};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k);
    }
    fcase_add(L, c, "combo.varlen.dropout");
    c = fbase(dt, 2, 8, 2, 5, 700, 64, 64, CM_BR);
    c.splits = 3, c.bwd = 0, c.softcap = 5.0f, c.win = 1, c.wl = 300, c.wr = 0;
    fcase_add(L, c, "combo.split.window.softcap");
    /* window and softcap together, and an odd head dim with a two-sided window, on plain dense
       tensors (what the GPU backends' main kernels serve) */
    c = fbase(dt, 1, 4, 2, 200, 300, 128, 128, CM_BR);
    c.win = 1, c.wl = 64, c.wr = 0, c.softcap = 20.0f;
    fcase_add(L, c, "combo.window.softcap");
    c = fbase(dt, 1, 4, 1, 129, 129, 72, 72, idt == 1 ? CM_TL : CM_NONE);
    c.win = 1, c.wl = 33, c.wr = 17;
    fcase_add(L, c, "window.l33r17");
    /* --- deterministic: a second run must match the first bitwise (GQA: dk, dv summed over the
       heads of a group; several key blocks feed every dq row) --- */
    c = fbase(dt, 2, 4, 2, 257, 300, 64, 64, idt == 2 ? CM_TL : CM_BR);
    c.determ = 1;
    fcase_add(L, c, "deterministic");
    /* head dim 256: the fa3 backward's wide kernel adds dQ from registers, not by bulk
       reductions (fa3_bwd_wide.cuh) */
    c = fbase(dt, 2, 4, 2, 257, 300, 256, 256, idt == 2 ? CM_BR : CM_NONE);
    c.determ = 1;
    fcase_add(L, c, "deterministic");
  }
  /* --- paged KV: every power-of-two page size 1..1024, shuffled tables, seqused_k --- */
  for (int lg = 0; lg <= 10; ++lg) {
    const int64_t page = (int64_t)1 << lg;
    const int64_t blocks = page >= 512 ? (page == 1024 ? 1 : 2) : (page >= 64 ? 3 : 160 / page);
    fcase c = fbase(k_dtypes[lg % 3], 2, 4, 2, lg % 2 ? 1 : 13, 0, 64, 64, lg % 3);
    c.page = page, c.max_blocks = blocks;
    c.seqused = lg % 4 != 3;
    c.used[0] = blocks * page - (lg % 3), c.used[1] = (blocks * page) / 2 + 1;
    if (lg == 5) { /* packed q over paged keys */
      c.varlen = 1;
      c.lq[0] = 6, c.lq[1] = 13;
    }
    if (lg == 7) c.dropout = 0.1f, c.alibi = 1;
    if (lg == 8) c.splits = 2, c.bwd = 0;
    snprintf(tag, sizeof tag, "paged.pg%lld", (long long)page);
    fcase_add(L, c, tag);
  }
  /* --- fa_forward_kvcache --- */
  for (int idt = 0; idt < 3; ++idt) {
    const fa_dtype dt = k_dtypes[idt];
    fcase c;
    /* decode without new tokens, dense cache */
    c = fbase(dt, 3, 4, 2, 1, 300, 64, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0;
    c.cache_len[0] = 300, c.cache_len[1] = 1, c.cache_len[2] = 157;
    fcase_add(L, c, "kvcache.dense");
    /* appending, rotary interleaved over the whole head, causal (q rotated per row) */
    c = fbase(dt, 2, 4, 2, 3, 200, 64, 64, idt == 1 ? CM_TL : CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 3, c.rot = 64, c.inter = 1, c.rot_f32 = 1;
    c.cache_len[0] = 0, c.cache_len[1] = 120;
    fcase_add(L, c, "kvcache.append.rot64i");
    /* rotary_dim < head_dim, not interleaved, non-causal (q at cache_seqlens[b]) */
    c = fbase(dt, 2, 2, 1, 2, 100, 128, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.snew = 2, c.rot = 32, c.inter = 0, c.rot_f32 = idt == 0;
    c.cache_len[0] = 50, c.cache_len[1] = 98;
    fcase_add(L, c, "kvcache.append.rot32");
    /* GQA decode: 1 query, 32 q heads over 8 kv heads */
    c = fbase(dt, 2, 32, 8, 1, 512, 128, 128, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 1;
    c.cache_len[0] = 511, c.cache_len[1] = 77;
    fcase_add(L, c, "kvcache.gqa32x8");
    /* paged cache, appended tokens crossing pages, rotary, window */
    c = fbase(dt, 2, 4, 2, 4, 0, 64, 64, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 4, c.rot = 16, c.inter = idt == 2, c.rot_f32 = 1;
    c.page = 16, c.max_blocks = 12;
    c.win = idt == 1, c.wl = 30, c.wr = 0;
    c.cache_len[0] = 30, c.cache_len[1] = 150;
    fcase_add(L, c, "kvcache.paged16");
    /* split decode over a long cache */
    c = fbase(dt, 1, 8, 1, 1, 1000, 64, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.splits = 4;
    c.cache_len[0] = 999;
    fcase_add(L, c, "kvcache.split4");
    /* The few-query-rows path (cpu: .rows<N>) and its row and column blockings: one row per
       task over a long cache (MHA), blocks of keys split unevenly */
    c = fbase(dt, 1, 2, 2, 1, 1500, 128, 128, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.splits = 3;
    c.cache_len[0] = 1499;
    fcase_add(L, c, "kvcache.rows.mha");
    /* GQA groups of 3 and 5 (row blocks 2 + 1, 8 + 2 with two query rows), head dims 80/48
       (column blocks 4 + 1, 2 + 1) and 16; softcap and ALiBi per head; causal in both
       alignments with appended, rotated tokens */
    c = fbase(dt, 2, 6, 2, 1, 300, 80, 48, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.softcap = 8.0f, c.alibi = idt == 1 ? 2 : 1;
    c.cache_len[0] = 299, c.cache_len[1] = 41;
    fcase_add(L, c, "kvcache.rows.g3");
    c = fbase(dt, 2, 10, 2, 2, 160, 16, 16, idt == 0 ? CM_TL : CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 2, c.rot = 16, c.inter = 1, c.rot_f32 = 1;
    c.cache_len[0] = 100, c.cache_len[1] = 7;
    fcase_add(L, c, "kvcache.rows.g5");
    /* 16 query rows (the path's limit), a window, head dim 256 */
    c = fbase(dt, 1, 4, 4, 16, 400, 256, 256, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 16, c.win = 1, c.wl = 37, c.wr = 0;
    c.cache_len[0] = 300;
    fcase_add(L, c, "kvcache.rows.q16");
    /* What the path does not take, named without .rows: 17 query rows, a head dim that is not a
       multiple of 16, more than 128 rows per task */
    c = fbase(dt, 1, 2, 1, 17, 100, 64, 64, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 17;
    c.cache_len[0] = 50;
    fcase_add(L, c, "kvcache.tile.q17");
    c = fbase(dt, 2, 4, 2, 1, 200, 72, 72, CM_NONE);
    c.kvc = 1, c.bwd = 0;
    c.cache_len[0] = 150, c.cache_len[1] = 199;
    fcase_add(L, c, "kvcache.tile.d72");
    c = fbase(dt, 1, 48, 8, 3, 64, 32, 32, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 3;
    c.cache_len[0] = 40;
    fcase_add(L, c, "kvcache.tile.rows144");
  }
  {
    fcase c = fbase(FA_BF16, 2, 4, 2, 1, 0, 64, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.page = 1024, c.max_blocks = 1;
    c.cache_len[0] = 1000, c.cache_len[1] = 3;
    fcase_add(L, c, "kvcache.paged1024");
  }
}

static int fcmp_cost(const void *a, const void *b) {
  const fcase *x = *(const fcase *const *)a, *y = *(const fcase *const *)b;
  return x->cost < y->cost ? -1 : x->cost > y->cost ? 1 : strcmp(x->name, y->name);
}

/* --quick for feature cases: the cheapest case of every feature, and of every feature in every
   dtype, plus every page size. */
static void mark_fquick(fcase_list *L) {
  fcase **order = (fcase **)malloc(sizeof(fcase *) * (size_t)(L->n ? L->n : 1));
  if (!order) exit(2);
  for (int i = 0; i < L->n; ++i) order[i] = &L->v[i];
  qsort(order, (size_t)L->n, sizeof *order, fcmp_cost);
  tag_set seen = {0};
  for (int i = 0; i < L->n; ++i) {
    const fcase *c = order[i];
    char tags[24][48];
    int nt = 0;
    const char *f[12];
    int nf = fcase_features(c, f, 12);
    for (int k = 0; k < nf && nt < 22; ++k) {
      snprintf(tags[nt++], 48, "f:%s", f[k]);
      snprintf(tags[nt++], 48, "fd:%s.%s", f[k], tu_dtype_name(c->dtype));
    }
    if (c->lse_packed && nt < 24) snprintf(tags[nt++], 48, "lse_packed");
    if (c->seqused && nt < 24) snprintf(tags[nt++], 48, "seqused:%d", c->varlen);
    if (c->alibi && nt < 24) snprintf(tags[nt++], 48, "alibi:%d", c->alibi);
    if (c->win && nt < 24) snprintf(tags[nt++], 48, "win:%d.%d", c->wl < 0, c->wr < 0);
    if (c->rot && nt < 24) snprintf(tags[nt++], 48, "rot:%d", c->inter);
    if (c->page && nt < 24) snprintf(tags[nt++], 48, "page:%lld", (long long)c->page);
    if (c->splits >= 0 && nt < 24) snprintf(tags[nt++], 48, "splits:%d", c->splits);
    int fresh = 0;
    for (int t = 0; t < nt; ++t) fresh |= !tag_has(&seen, tags[t]);
    if (!fresh) continue;
    order[i]->quick = 1;
    for (int t = 0; t < nt; ++t) tag_add(&seen, tags[t]);
  }
  free(seen.v);
  free(order);
}

/* Expected kernel of a feature case on the CPU, CUDA and OpenCL backends (0: naming unknown). */
static int fexpected_kernel(const backend_ctx *bk, const fcase *c, const char *op, int splits,
                            int32_t tile_m, char *buf, size_t n) {
  if (!strcmp(bk->name, "cuda"))
    return cuda_expected(bk->cuda_prefix,
                         bk->cuda_fa3 && c->sk > 0 && (!strcmp(op, "fwd") || c->sq > 0), op,
                         c->dtype, c->d, c->cm != CM_NONE, c->win, c->softcap > 0.0f,
                         fa3_expected_pack(tile_m, c->hq, c->hkv, c->sq), buf, n);
  if (!strcmp(bk->name, "opencl"))
    return opencl_expected(op, c->dtype, c->d, c->cm != CM_NONE, c->win, c->softcap > 0.0f, buf, n);
  if (strcmp(bk->name, "cpu") != 0) return 0;
  char hd[32], split[24] = "", rows[24] = "";
  if (c->d == c->dv)
    snprintf(hd, sizeof hd, "%lld", (long long)c->d);
  else
    snprintf(hd, sizeof hd, "%lldx%lld", (long long)c->d, (long long)c->dv);
  if (splits > 1) snprintf(split, sizeof split, ".split%d", splits);
  /* fa_forward_kvcache's few-query-rows path (backends/cpu/cpu_decode.c): at most 16 query rows,
     every head's rows in one task of at most 128, head dims multiples of 16 (the suite's caches
     have contiguous rows). */
  if (c->kvc && c->sq <= 16 && c->hq * c->sq <= 128 && c->d % 16 == 0 && c->dv % 16 == 0)
    snprintf(rows, sizeof rows, ".rows%lld", (long long)(c->hq * c->sq));
  snprintf(buf, n, "cpu.flash.%s.%s.%s.hd%s%s%s%s%s%s%s%s%s%s",
           cpu_expected_isa_for(op, c->dtype, c->d, c->dv), op, tu_dtype_name(c->dtype), hd, rows,
           c->cm != CM_NONE ? ".causal" : "", c->win ? ".window" : "",
           c->softcap > 0.0f ? ".softcap" : "", c->alibi ? ".alibi" : "",
           c->dropout > 0.0f ? ".dropout" : "", c->varlen ? ".varlen" : "",
           c->page > 0 ? ".paged" : "", split);
  return 1;
}

static void fcheck_info(report *rep, const backend_ctx *bk, const fcase *c, const char *op,
                        const char *call, const fa_run_info *info, const fa_run_info *plan) {
  char want[FA_KERNEL_LEN];
  if (info->backend != bk->id || strcmp(info->backend_name, bk->name) != 0)
    fail(rep, "%s: run info says backend %d \"%s\", expected %d \"%s\"", call, info->backend,
         info->backend_name, bk->id, bk->name);
  if (fexpected_kernel(bk, c, op, info->num_splits, info->tile_m, want, sizeof want)) {
    if (!kernel_matches(info->kernel, want))
      fail(rep, "%s: kernel \"%s\", expected \"%s\"", call, info->kernel, want);
  } else {
    size_t n = strlen(bk->name);
    if (strncmp(info->kernel, bk->name, n) != 0 || info->kernel[n] != '.')
      fail(rep, "%s: kernel \"%s\" does not start with \"%s.\"", call, info->kernel, bk->name);
  }
  if (info->num_splits < 1) fail(rep, "%s: run info num_splits = %d", call, info->num_splits);
  if (plan && (strcmp(plan->kernel, info->kernel) != 0 || plan->backend != info->backend ||
               plan->num_splits != info->num_splits))
    fail(rep, "%s: fa_plan reports %s \"%s\" (%d splits) but the call ran %s \"%s\" (%d splits)",
         call, plan->backend_name, plan->kernel, plan->num_splits, info->backend_name, info->kernel,
         info->num_splits);
}

/* Per-case run state shared with the skip decision. */
typedef struct frun {
  const backend_ctx *bk;
  char skip[512];
} frun;

/* A refused call (see refusal): the case's needs are its features, its shape's and its tensors'. */
static int frefused(report *rep, frun *R, const fcase *c, const fa_tensor *const *data, int n,
                    const char *call, fa_status st) {
  needs nd = {{0}, 0};
  const char *f[12];
  const int nf = fcase_features(c, f, 12);
  need_shape(&nd, c->dtype, c->cm != CM_NONE, c->cm == CM_TL, c->hq, c->hkv, c->d, c->dv, 1,
             c->bwd && !c->page && !c->kvc);
  for (int i = 0; i < nf; ++i) need(&nd, f[i]);
  need_views(&nd, data, n);
  need_family(&nd, R->bk, !c->bwd, c->d, c->dv, c->sq, c->sk, c->softcap, data, n);
  return refusal(rep, R->bk, &nd, call, st, R->skip, sizeof R->skip);
}

/* Where a library tensor's elements live in the reference's padded dense arrays. */
typedef enum { MAP_ID = 0, MAP_PACKED_Q, MAP_PACKED_K, MAP_LSE_PACKED, MAP_LSE_PADDED } map_kind;

typedef struct fmap {
  map_kind kind;
  int64_t batch, max_rows, heads, inner; /* inner: heads * dim of one token (lse: heads_q) */
  const int64_t *cu;                     /* [batch + 1] offsets (packed) */
  const int64_t *lens;                   /* rows per sequence (padded lse) */
  int64_t total;
} fmap;

/* Sequence of packed token t, or -1. */
static int64_t seq_of(const fmap *m, int64_t t, int64_t *row) {
  for (int64_t b = 0; b < m->batch; ++b)
    if (t >= m->cu[b] && t < m->cu[b + 1]) {
      *row = t - m->cu[b];
      return b;
    }
  return -1;
}

static int64_t fmap_index(const fmap *m, int64_t f) {
  int64_t row, b;
  switch (m->kind) {
    case MAP_PACKED_Q:
    case MAP_PACKED_K: {
      int64_t t = f / m->inner, rem = f % m->inner;
      if ((b = seq_of(m, t, &row)) < 0) return -1;
      return (b * m->max_rows + row) * m->inner + rem;
    }
    case MAP_LSE_PACKED: {
      int64_t h = f / m->total, t = f % m->total;
      if ((b = seq_of(m, t, &row)) < 0) return -1;
      return (b * m->heads + h) * m->max_rows + row;
    }
    case MAP_LSE_PADDED:
      b = f / (m->heads * m->max_rows);
      return f % m->max_rows < m->lens[b] ? f : -1;
    default:
      return f;
  }
}

static void fcheck_output(report *rep, char *summary, size_t sn, const char *label,
                          const tu_tensor *x, const fmap *m, const ref_result *r64,
                          const ref_result *rn, ref_which w, const unsigned char *masked,
                          fa_dtype dtype) {
  const int64_t n = tu_numel(x);
  double *all = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *got = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *naive = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *mag = malloc(sizeof(double) * (size_t)(n ? n : 1));
  unsigned char *msk = malloc((size_t)(n ? n : 1));
  int64_t *where = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!all || !got || !want || !naive || !mag || !msk || !where) {
    fail(rep, "%s: out of memory in the check", label);
    goto out;
  }
  tu_read_all(x, all);
  int64_t k = 0, touched = 0, first_touched = -1;
  for (int64_t f = 0; f < n; ++f) {
    int64_t at = fmap_index(m, f);
    if (at < 0) {
      if (!tu_elem_unchanged(x, f)) {
        if (first_touched < 0) first_touched = f;
        ++touched;
      }
      continue;
    }
    got[k] = all[f];
    want[k] = r64->t[w][at];
    naive[k] = rn->t[w][at];
    mag[k] = r64->mag[w] ? r64->mag[w][at] : 0.0;
    msk[k] = masked[at];
    where[k] = f;
    ++k;
  }
  if (touched) {
    char idx[64];
    tu_format_index(x, first_touched, idx, sizeof idx);
    fail(rep, "%s: %lld elements outside every sequence were written (first at %s)", label,
         (long long)touched, idx);
  }
  ref_check ck;
  ref_check_values(got, k, want, naive, mag, msk, dtype, &ck);
  size_t used = strlen(summary);
  snprintf(summary + used, sn - used, " %s %.1e/%.1e", label, ck.max_err, ck.tol);
  char at[64] = "-";
  if (ck.worst >= 0) tu_format_index(x, where[ck.worst], at, sizeof at);
  if (!ck.pass) {
    if (ck.broken)
      fail(rep, "%s: %s at %s: got %.9g, expected %.9g (%lld such elements)", label, ck.why, at,
           ck.worst_got, ck.worst_want, (long long)ck.broken);
    else
      fail(rep,
           "%s: max error %.3e > tolerance %.3e (2 x naive %s error %.3e + floor %.2e) at "
           "%s: got %.9g, expected %.9g",
           label, ck.max_err, ck.tol, tu_dtype_name(dtype), ck.naive_err, ck.floor, at,
           ck.worst_got, ck.worst_want);
  }
  char msg[160];
  if (tu_gaps_intact(x, msg, sizeof msg) != 1)
    fail(rep, "%s: wrote outside its elements: %s", label, msg);
out:
  free(all);
  free(got);
  free(want);
  free(naive);
  free(mag);
  free(msk);
  free(where);
}

/* A 1-D or 2-D int32 host tensor with the given values. */
static int make_i32(tu_tensor *t, int ndim, const int64_t *shape, const int64_t *vals) {
  if (tu_alloc(t, FA_I32, ndim, shape, TU_CONTIGUOUS)) return -1;
  int64_t n = tu_numel(t);
  for (int64_t f = 0; f < n; ++f) tu_set_flat(t, f, (double)vals[f]);
  return tu_snapshot(t);
}

/* dst[di with its last axis = c] = src[si with its last axis = c] for c < cols. */
static void copy_row(tu_tensor *dst, const int64_t *di, const tu_tensor *src, const int64_t *si,
                     int64_t cols) {
  int64_t a[FA_MAX_DIMS] = {0}, b[FA_MAX_DIMS] = {0};
  const int na = dst->t.ndim, nb = src->t.ndim;
  for (int i = 0; i < na; ++i) a[i] = di[i];
  for (int i = 0; i < nb; ++i) b[i] = si[i];
  for (int64_t c = 0; c < cols; ++c) {
    a[na - 1] = c;
    b[nb - 1] = c;
    tu_set(dst, a, tu_get(src, b));
  }
}

static double max_abs_diff(const tu_tensor *a, const tu_tensor *b) {
  int64_t n = tu_numel(a);
  double m = 0.0;
  for (int64_t f = 0; f < n; ++f) {
    double x = tu_get_flat(a, f), y = tu_get_flat(b, f);
    if (isnan(x) != isnan(y)) return INFINITY;
    if (isfinite(x) && isfinite(y) && fabs(x - y) > m) m = fabs(x - y);
    if (isinf(x) != isinf(y)) return INFINITY;
  }
  return m;
}

enum {
  F_QD,
  F_KD,
  F_VD,
  F_DOD,
  F_Q,
  F_K,
  F_V,
  F_DOUT,
  F_OUT0,
  F_OUT,
  F_LSE,
  F_DQ,
  F_DK,
  F_DV,
  F_OUTS,
  F_COUNT
};
static const char *const f_names[F_COUNT] = {
    "q(dense)", "k(dense)", "v(dense)",      "dout(dense)", "q",   "k",
    "v",        "dout",     "out(lse=NULL)", "out",         "lse", "dq",
    "dk",       "dv",       "out(splits=1)"};
enum { I_CUQ, I_CUK, I_USED, I_TABLE, I_ALIBI, I_COUNT };
static const char *const i_names[I_COUNT] = {"cu_seqlens_q", "cu_seqlens_k", "seqused_k",
                                             "block_table", "alibi_slopes"};

/* Fills the reference problem and ext (lens arrays owned by the caller). */
static void fproblem(const fcase *c, ref_problem *p, ref_ext *x, int64_t *lens_q, int64_t *lens_k,
                     double *slopes) {
  memset(p, 0, sizeof *p);
  memset(x, 0, sizeof *x);
  p->batch = c->b, p->heads_q = c->hq, p->heads_kv = c->hkv, p->head_dim = c->d;
  p->head_dim_v = c->dv;
  p->seqlen_q = fc_max_q(c), p->seqlen_k = fc_max_k(c);
  p->scale = ref_resolve_scale(c->scale, c->d);
  p->causal = c->cm != CM_NONE;
  p->causal_align = c->cm == CM_TL ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  x->window = c->win, x->window_left = c->wl, x->window_right = c->wr;
  x->softcap = c->softcap;
  x->dropout_p = c->dropout;
  x->dropout_seed = 0x5eed0000u + (uint64_t)c->b * 7u;
  x->dropout_offset = 12345;
  for (int64_t b = 0; b < c->b; ++b) {
    lens_q[b] = c->varlen ? c->lq[b] : p->seqlen_q;
    lens_k[b] = c->seqused ? c->used[b] : (c->varlen && !c->page) ? c->lk[b] : p->seqlen_k;
    if (c->kvc) lens_k[b] = c->cache_len[b] + c->snew;
  }
  x->lens_q = lens_q, x->lens_k = lens_k;
  if (c->alibi) {
    for (int64_t i = 0; i < c->hq * (c->alibi == 2 ? c->b : 1); ++i)
      slopes[i] = (double)(float)(exp2(-8.0 * (double)((i % c->hq) + 1) / (double)c->hq) *
                                  (1.0 + 0.25 * (double)(i / c->hq)));
    x->alibi = slopes, x->alibi_per_batch = c->alibi == 2;
  }
}

static void fparams(const fcase *c, const backend_ctx *bk, const ref_ext *x, fa_params *params,
                    const dev_tensor *it) {
  fa_params_init(params);
  params->backend = bk->id;
  params->strict = 1;
  params->kernel_family = bk->kernel_family;
  params->softmax_scale = c->scale;
  params->causal = c->cm != CM_NONE;
  params->causal_align = c->cm == CM_TL ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  params->window_enabled = c->win, params->window_left = c->wl, params->window_right = c->wr;
  params->softcap = c->softcap;
  params->dropout_p = c->dropout;
  params->dropout_seed = x->dropout_seed, params->dropout_offset = x->dropout_offset;
  if (c->alibi) params->alibi_slopes = &it[I_ALIBI].view;
  if (c->varlen) {
    params->cu_seqlens_q = &it[I_CUQ].view;
    if (!c->page) params->cu_seqlens_k = &it[I_CUK].view;
    params->max_seqlen_q = fc_max_q(c);
    if (!c->page) params->max_seqlen_k = fc_max_k(c);
  }
  if (c->seqused) params->seqused_k = &it[I_USED].view;
  if (c->page) params->block_table = &it[I_TABLE].view;
  params->num_splits = c->splits > 0 ? c->splits : 0;
  params->deterministic = c->determ;
}

/* Deterministic mode: the forward and backward run again on re-poisoned outputs and must give
   the first run's bits exactly (out, lse, dq, dk, dv, gaps included); the host buffers hold the
   first run's results. Run after every other check: it overwrites the outputs. */
static void determinism_rerun(report *rep, const backend_ctx *bk, const fa_params *params,
                              tu_tensor *t, dev_tensor *d, int iq, int ik, int iv, int ido,
                              int want_bwd) {
  const int outs[5] = {F_OUT, F_LSE, F_DQ, F_DK, F_DV};
  const int n = want_bwd ? 5 : 2;
  unsigned char *first[5] = {0};
  char err[256];
  for (int k = 0; k < n; ++k) {
    tu_tensor *x = &t[outs[k]];
    const size_t bytes = x->buf_elems * x->elem_bytes;
    if (!(first[k] = malloc(bytes ? bytes : 1))) {
      fail(rep, "deterministic rerun: out of memory");
      goto out;
    }
    memcpy(first[k], x->buf, bytes);
    tu_poison(x);
    if (bk->ops->copy_in(&d[outs[k]], x, err, sizeof err)) {
      fail(rep, "deterministic rerun: %s: %s", f_names[outs[k]], err);
      goto out;
    }
  }
  fa_status st = fa_forward(params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                            &d[F_LSE].view, NULL);
  if (st != FA_OK) {
    fail(rep, "deterministic rerun: fa_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto out;
  }
  if (want_bwd) {
    st = fa_backward(params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                     &d[ido].view, &d[F_DQ].view, &d[F_DK].view, &d[F_DV].view, NULL);
    if (st != FA_OK) {
      fail(rep, "deterministic rerun: fa_backward: %s: %s", fa_status_string(st), fa_last_error());
      goto out;
    }
  }
  for (int k = 0; k < n; ++k) {
    tu_tensor *x = &t[outs[k]];
    if (dev_get(rep, bk, x, &d[outs[k]], f_names[outs[k]])) continue;
    int64_t differ = 0, at = -1;
    for (size_t e = 0; e < x->buf_elems; ++e)
      if (memcmp(x->buf + e * x->elem_bytes, first[k] + e * x->elem_bytes, x->elem_bytes)) {
        if (at < 0) at = (int64_t)e;
        ++differ;
      }
    if (differ)
      fail(rep,
           "deterministic: %s of a second run differs bitwise from the first in %lld elements "
           "(first at buffer element %lld)",
           f_names[outs[k]], (long long)differ, (long long)at);
  }
out:
  for (int k = 0; k < 5; ++k) free(first[k]);
}

static int run_fcase(const fcase *c, frun *R, uint64_t run_seed) {
  const double t0 = now_s();
  const backend_ctx *bk = R->bk;
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[320] = "";
  int result = R_FAIL;
  R->skip[0] = '\0';
  tu_tensor t[F_COUNT], it[I_COUNT];
  dev_tensor d[F_COUNT], dix[I_COUNT];
  memset(t, 0, sizeof t);
  memset(it, 0, sizeof it);
  memset(d, 0, sizeof d);
  memset(dix, 0, sizeof dix);
  char err[256];
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};
  int64_t lens_q[FMAXB], lens_k[FMAXB], cu_q[FMAXB + 1], cu_k[FMAXB + 1];
  double slopes[FMAXB * 64];
  int64_t *table = NULL;
  ref_problem p;
  ref_ext x;
  fproblem(c, &p, &x, lens_q, lens_k, slopes);
  const int64_t B = c->b, mq = p.seqlen_q, mk = p.seqlen_k;
  cu_q[0] = cu_k[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    cu_q[b + 1] = cu_q[b] + (c->varlen ? c->lq[b] : 0);
    cu_k[b + 1] = cu_k[b] + (c->varlen && !c->page ? c->lk[b] : 0);
  }
  const int64_t total_q = cu_q[B] + c->extra_q, total_k = cu_k[B];
  const int64_t nblk = c->page ? B * c->max_blocks + 3 : 0;
  const int dense_q = !c->varlen, dense_k = !c->varlen && !c->page;

  /* Shapes. Dense copies are the library's tensors themselves when nothing is packed or paged. */
  const int64_t qd[4] = {B, mq, c->hq, c->d}, kd[4] = {B, mk, c->hkv, c->d},
                vd[4] = {B, mk, c->hkv, c->dv}, od[4] = {B, mq, c->hq, c->dv};
  const int64_t qp[3] = {total_q, c->hq, c->d}, op[3] = {total_q, c->hq, c->dv},
                kp[3] = {total_k, c->hkv, c->d}, vp[3] = {total_k, c->hkv, c->dv};
  const int64_t kg[4] = {nblk, c->page, c->hkv, c->d}, vg[4] = {nblk, c->page, c->hkv, c->dv};
  const int64_t l3[3] = {B, c->hq, mq}, l2[2] = {c->hq, total_q};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(run_seed, c->name));
#define ALLOC(i, nd, shape, kind)                                           \
  if (tu_alloc(&t[i], (i) == F_LSE ? FA_F32 : c->dtype, nd, shape, kind)) { \
    fail(&rep, "out of memory allocating %s", f_names[i]);                  \
    goto done;                                                              \
  }
  ALLOC(F_QD, 4, qd, dense_q ? tensor_layout(c->layout, T_Q) : TU_CONTIGUOUS);
  ALLOC(F_KD, 4, kd, dense_k ? tensor_layout(c->layout, T_K) : TU_CONTIGUOUS);
  ALLOC(F_VD, 4, vd, dense_k ? tensor_layout(c->layout, T_V) : TU_CONTIGUOUS);
  ALLOC(F_DOD, 4, od, dense_q ? tensor_layout(c->layout, T_DOUT) : TU_CONTIGUOUS);
  if (dense_q) {
    ALLOC(F_OUT0, 4, od, tensor_layout(c->layout, T_OUT0));
    ALLOC(F_OUT, 4, od, tensor_layout(c->layout, T_OUT));
    ALLOC(F_OUTS, 4, od, TU_CONTIGUOUS);
    ALLOC(F_DQ, 4, qd, tensor_layout(c->layout, T_DQ));
  } else {
    ALLOC(F_Q, 3, qp, TU_CONTIGUOUS);
    ALLOC(F_DOUT, 3, op, TU_STRIDED);
    ALLOC(F_OUT0, 3, op, TU_PADDED);
    ALLOC(F_OUT, 3, op, TU_CONTIGUOUS);
    ALLOC(F_OUTS, 3, op, TU_CONTIGUOUS);
    ALLOC(F_DQ, 3, qp, TU_PADDED);
  }
  if (c->varlen && c->lse_packed) {
    ALLOC(F_LSE, 2, l2, TU_CONTIGUOUS);
  } else {
    ALLOC(F_LSE, 3, l3, dense_q ? tensor_layout(c->layout, T_LSE) : TU_PADDED);
  }
  if (c->page) {
    ALLOC(F_K, 4, kg, TU_CONTIGUOUS);
    ALLOC(F_V, 4, vg, TU_PADDED);
    ALLOC(F_DK, 4, kg, TU_CONTIGUOUS);
    ALLOC(F_DV, 4, vg, TU_CONTIGUOUS);
  } else if (c->varlen) {
    ALLOC(F_K, 3, kp, TU_PADDED);
    ALLOC(F_V, 3, vp, TU_CONTIGUOUS);
    ALLOC(F_DK, 3, kp, TU_CONTIGUOUS);
    ALLOC(F_DV, 3, vp, TU_STRIDED);
  } else {
    ALLOC(F_DK, 4, kd, tensor_layout(c->layout, T_DK));
    ALLOC(F_DV, 4, vd, tensor_layout(c->layout, T_DV));
  }
#undef ALLOC
  /* Values: dense copies random; packed tensors random, then the sequences' tokens copied in;
     pages random, the dense keys gathered from them through the shuffled table. */
  for (int i = F_QD; i <= F_DOD; ++i) tu_fill_random(&t[i], &rng);
  if (c->varlen) {
    tu_fill_random(&t[F_Q], &rng);
    tu_fill_random(&t[F_DOUT], &rng);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < c->lq[b]; ++i)
        for (int64_t h = 0; h < c->hq; ++h) {
          int64_t di[4] = {b, i, h, 0}, pi[3] = {cu_q[b] + i, h, 0};
          copy_row(&t[F_Q], pi, &t[F_QD], di, c->d);
          copy_row(&t[F_DOUT], pi, &t[F_DOD], di, c->dv);
        }
  }
  if (c->varlen && !c->page) {
    tu_fill_random(&t[F_K], &rng);
    tu_fill_random(&t[F_V], &rng);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < c->lk[b]; ++j)
        for (int64_t h = 0; h < c->hkv; ++h) {
          int64_t di[4] = {b, j, h, 0}, pi[3] = {cu_k[b] + j, h, 0};
          copy_row(&t[F_K], pi, &t[F_KD], di, c->d);
          copy_row(&t[F_V], pi, &t[F_VD], di, c->dv);
        }
  }
  if (c->page) {
    tu_fill_random(&t[F_K], &rng);
    tu_fill_random(&t[F_V], &rng);
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)nblk);
    table = malloc(sizeof(int64_t) * (size_t)(B * c->max_blocks));
    if (!perm || !table) {
      free(perm);
      fail(&rep, "out of memory (block table)");
      goto done;
    }
    for (int64_t i = 0; i < nblk; ++i) perm[i] = i;
    for (int64_t i = nblk - 1; i > 0; --i) { /* Fisher-Yates */
      int64_t j = (int64_t)(tu_rng_u64(&rng) % (uint64_t)(i + 1)), tmp = perm[i];
      perm[i] = perm[j], perm[j] = tmp;
    }
    for (int64_t i = 0; i < B * c->max_blocks; ++i) table[i] = perm[i];
    free(perm);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < mk; ++j)
        for (int64_t h = 0; h < c->hkv; ++h) {
          int64_t di[4] = {b, j, h, 0};
          int64_t gi[4] = {table[b * c->max_blocks + j / c->page], j % c->page, h, 0};
          copy_row(&t[F_KD], di, &t[F_K], gi, c->d);
          copy_row(&t[F_VD], di, &t[F_V], gi, c->dv);
        }
  }
  /* The library reads the dense copies directly where nothing is packed or paged. */
  const int iq = dense_q ? F_QD : F_Q, ik = dense_k ? F_KD : F_K, iv = dense_k ? F_VD : F_V,
            ido = dense_q ? F_DOD : F_DOUT;
  for (int i = 0; i < F_COUNT; ++i)
    if (t[i].buf) (void)tu_snapshot(&t[i]);
  {
    const int64_t s1[1] = {B + 1}, sb[1] = {B}, st[2] = {B, c->max_blocks};
    const int64_t sa1[1] = {c->hq}, sa2[2] = {B, c->hq};
    int bad = 0;
    if (c->varlen) bad |= make_i32(&it[I_CUQ], 1, s1, cu_q) | make_i32(&it[I_CUK], 1, s1, cu_k);
    if (c->seqused) bad |= make_i32(&it[I_USED], 1, sb, c->used);
    if (c->page) bad |= make_i32(&it[I_TABLE], 2, st, table);
    if (c->alibi) {
      if (tu_alloc(&it[I_ALIBI], FA_F32, c->alibi, c->alibi == 2 ? sa2 : sa1, TU_CONTIGUOUS))
        bad = 1;
      else {
        for (int64_t f = 0; f < tu_numel(&it[I_ALIBI]); ++f)
          tu_set_flat(&it[I_ALIBI], f, slopes[f]);
        bad |= tu_snapshot(&it[I_ALIBI]);
      }
    }
    if (bad) {
      fail(&rep, "out of memory (index tensors)");
      goto done;
    }
  }

  /* The tensors the library gets, in the backend's memory (the dense copies only where they are
     the library's own tensors). */
  for (int i = 0; i < F_COUNT; ++i) {
    const int ref_only = (i == F_QD && !dense_q) || (i == F_DOD && !dense_q) ||
                         ((i == F_KD || i == F_VD) && !dense_k);
    if (t[i].buf && !ref_only && dev_put(bk->ops, &d[i], &t[i], err, sizeof err)) {
      fail(&rep, "%s: %s", f_names[i], err);
      goto done;
    }
  }
  for (int i = 0; i < I_COUNT; ++i)
    if (it[i].buf && dev_put(bk->ops, &dix[i], &it[i], err, sizeof err)) {
      fail(&rep, "%s: %s", i_names[i], err);
      goto done;
    }

  fa_params params;
  fparams(c, bk, &x, &params, dix);
  fa_run_info info, plan;
  fa_status st;
  const int want_bwd = c->bwd && !c->page;
  {
    const fa_tensor *data[8] = {&d[iq].view,
                                &d[ik].view,
                                &d[iv].view,
                                &d[F_OUT].view,
                                want_bwd ? &d[ido].view : NULL,
                                want_bwd ? &d[F_DQ].view : NULL,
                                want_bwd ? &d[F_DK].view : NULL,
                                want_bwd ? &d[F_DV].view : NULL};
    fa_run_info_init(&plan);
    st = fa_plan_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                         &d[F_LSE].view, &plan);
    if (st != FA_OK) {
      result = frefused(&rep, R, c, data, 8, "fa_plan_forward", st);
      goto done;
    }
    if (want_bwd) {
      fa_run_info_init(&plan);
      st = fa_plan_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                            &d[F_LSE].view, &d[ido].view, &d[F_DQ].view, &d[F_DK].view,
                            &d[F_DV].view, &plan);
      if (st != FA_OK) {
        result = frefused(&rep, R, c, data, 8, "fa_plan_backward", st);
        goto done;
      }
    }
  }

  /* The reference only once the backend takes the case (skips stay cheap). */
  if (ref_attention_ext(&p, &x, REF_F64, &t[F_QD], &t[F_KD], &t[F_VD], want_bwd ? &t[F_DOD] : NULL,
                        &r64, 0) ||
      ref_attention_ext(&p, &x, REF_STORAGE, &t[F_QD], &t[F_KD], &t[F_VD],
                        want_bwd ? &t[F_DOD] : NULL, &rn, 0)) {
    fail(&rep, "reference failed (out of memory or bad shapes)");
    goto done;
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w)
    if (!(masked[w] = ref_masked_map_ext(&p, &x, (ref_which)w))) {
      fail(&rep, "out of memory (mask map)");
      goto done;
    }
  fmap mq_map = {
      dense_q ? MAP_ID : MAP_PACKED_Q, B, mq, c->hq, c->hq * c->dv, cu_q, lens_q, total_q};
  fmap mdq_map = mq_map;
  mdq_map.inner = c->hq * c->d;
  fmap mk_map = {
      dense_k ? MAP_ID : MAP_PACKED_K, B, mk, c->hkv, c->hkv * c->d, cu_k, lens_k, total_k};
  fmap mv_map = mk_map;
  mv_map.inner = c->hkv * c->dv;
  fmap ml_map = {!c->varlen      ? MAP_ID
                 : c->lse_packed ? MAP_LSE_PACKED
                                 : MAP_LSE_PADDED,
                 B,
                 mq,
                 c->hq,
                 1,
                 cu_q,
                 lens_q,
                 total_q};

  /* Forward without lse (not for split cases: they compare two forwards below). */
  if (c->splits < 0) {
    fa_run_info_init(&info);
    st = fa_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT0].view, NULL, &info);
    if (st != FA_OK)
      fail(&rep, "fa_forward (lse NULL): %s: %s", fa_status_string(st), fa_last_error());
    else {
      fcheck_info(&rep, bk, c, "fwd", "forward(lse NULL)", &info, NULL);
      if (!dev_get(&rep, bk, &t[F_OUT0], &d[F_OUT0], "out0"))
        fcheck_output(&rep, summary, sizeof summary, "out0", &t[F_OUT0], &mq_map, &r64, &rn,
                      REF_OUT, masked[REF_OUT], c->dtype);
    }
  } else {
    fa_params one = params;
    one.num_splits = 1;
    fa_run_info_init(&info);
    st = fa_forward(&one, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUTS].view, NULL, &info);
    if (st != FA_OK)
      fail(&rep, "fa_forward (num_splits 1): %s: %s", fa_status_string(st), fa_last_error());
    else if (info.num_splits != 1)
      fail(&rep, "forward(num_splits 1): run info num_splits = %d", info.num_splits);
    else
      (void)dev_get(&rep, bk, &t[F_OUTS], &d[F_OUTS], "out(splits=1)");
  }

  fa_run_info_init(&plan);
  (void)fa_plan_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                        &d[F_LSE].view, &plan);
  fa_run_info_init(&info);
  st = fa_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                  &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  fcheck_info(&rep, bk, c, "fwd", "forward", &info, &plan);
  if (c->splits > 0 && info.num_splits != c->splits)
    fail(&rep, "forward: num_splits %d asked, run info says %d ran", c->splits, info.num_splits);
  if (c->determ && !info.deterministic)
    fail(&rep, "forward: params.deterministic set but run info says the kernel is not");
  if (dev_get(&rep, bk, &t[F_OUT], &d[F_OUT], "out") ||
      dev_get(&rep, bk, &t[F_LSE], &d[F_LSE], "lse"))
    goto done;
  fcheck_output(&rep, summary, sizeof summary, "out", &t[F_OUT], &mq_map, &r64, &rn, REF_OUT,
                masked[REF_OUT], c->dtype);
  fcheck_output(&rep, summary, sizeof summary, "lse", &t[F_LSE], &ml_map, &r64, &rn, REF_LSE,
                masked[REF_LSE], c->dtype);
  if (c->splits >= 0) {
    double diff = max_abs_diff(&t[F_OUT], &t[F_OUTS]);
    size_t u = strlen(summary);
    snprintf(summary + u, sizeof summary - u, " |split%d-split1| %.1e", info.num_splits, diff);
    /* "To rounding": within the suite's tolerance of each other. */
    double tol = ref_floor(c->dtype) * 2.0;
    if (!(diff <= tol))
      fail(&rep, "num_splits %d (ran %d) differs from num_splits 1 by %.3e > %.2e", c->splits,
           info.num_splits, diff, tol);
  }
  (void)tu_snapshot(&t[F_OUT]);
  (void)tu_snapshot(&t[F_LSE]);

  if (c->page && c->bwd) {
    /* No backward through a block table: refused, nothing written. */
    for (int i = F_DQ; i <= F_DV; ++i) (void)tu_snapshot(&t[i]);
    st = fa_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                     &d[ido].view, &d[F_DQ].view, &d[F_DK].view, &d[F_DV].view, NULL);
    if (st != FA_ERR_UNSUPPORTED)
      fail(&rep, "fa_backward with a block_table: %s, expected FA_ERR_UNSUPPORTED",
           fa_status_string(st));
    for (int i = F_DQ; i <= F_DV; ++i)
      if (!dev_get(&rep, bk, &t[i], &d[i], f_names[i]) && tu_unchanged(&t[i], NULL, 0) != 1)
        fail(&rep, "refused fa_backward wrote %s", f_names[i]);
  } else if (want_bwd) {
    fa_run_info_init(&plan);
    (void)fa_plan_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                           &d[F_LSE].view, &d[ido].view, &d[F_DQ].view, &d[F_DK].view,
                           &d[F_DV].view, &plan);
    fa_run_info_init(&info);
    st = fa_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                     &d[ido].view, &d[F_DQ].view, &d[F_DK].view, &d[F_DV].view, &info);
    if (st != FA_OK) {
      fail(&rep, "fa_backward: %s: %s", fa_status_string(st), fa_last_error());
      goto done;
    }
    fcheck_info(&rep, bk, c, "bwd", "backward", &info, &plan);
    if (c->determ && !info.deterministic)
      fail(&rep, "backward: params.deterministic set but run info says the kernel is not");
    if (dev_get(&rep, bk, &t[F_DQ], &d[F_DQ], "dq") ||
        dev_get(&rep, bk, &t[F_DK], &d[F_DK], "dk") || dev_get(&rep, bk, &t[F_DV], &d[F_DV], "dv"))
      goto done;
    fcheck_output(&rep, summary, sizeof summary, "dq", &t[F_DQ], &mdq_map, &r64, &rn, REF_DQ,
                  masked[REF_DQ], c->dtype);
    fcheck_output(&rep, summary, sizeof summary, "dk", &t[F_DK], &mk_map, &r64, &rn, REF_DK,
                  masked[REF_DK], c->dtype);
    fcheck_output(&rep, summary, sizeof summary, "dv", &t[F_DV], &mv_map, &r64, &rn, REF_DV,
                  masked[REF_DV], c->dtype);
  }
  {
    const int ro[6] = {iq, ik, iv, ido, F_OUT, F_LSE};
    for (int i = 0; i < 6; ++i) {
      char msg[160];
      if (dev_get(&rep, bk, &t[ro[i]], &d[ro[i]], f_names[ro[i]])) continue;
      if (tu_unchanged(&t[ro[i]], msg, sizeof msg) != 1)
        fail(&rep, "input %s was modified: %s", f_names[ro[i]], msg);
    }
    for (int i = 0; i < I_COUNT; ++i)
      if (it[i].buf && !dev_get(&rep, bk, &it[i], &dix[i], i_names[i]) &&
          tu_unchanged(&it[i], NULL, 0) != 1)
        fail(&rep, "%s was modified", i_names[i]);
  }
  /* Last, as it overwrites the outputs (their checks are done). */
  if (c->determ) determinism_rerun(&rep, bk, &params, t, d, iq, ik, iv, ido, want_bwd);
  result = rep.failed ? R_FAIL : R_PASS;

done:
  if (rep.failed) result = R_FAIL;
  for (int i = 0; i < F_COUNT; ++i) {
    bk->ops->release(&d[i]);
    tu_free(&t[i]);
  }
  for (int i = 0; i < I_COUNT; ++i) {
    bk->ops->release(&dix[i]);
    tu_free(&it[i]);
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  free(table);
  ref_result_free(&r64);
  ref_result_free(&rn);
  if (result == R_SKIP)
    printf("SKIP %s: %s\n", c->name, R->skip);
  else
    printf("%s %-50s%s  %.2fs\n", result == R_PASS ? "PASS" : "FAIL", c->name, summary,
           now_s() - t0);
  if (result == R_FAIL) {
    fputs(rep.text, stdout);
    printf("      replay: FA_TEST_SEED=%llu conformance --backend %s --filter '%s'\n",
           (unsigned long long)run_seed, bk->name, c->name);
  }
  fflush(stdout);
  return result;
}

/* Rotates the first rot dims of row x (d values) by the tables' angles at pos, in float64. */
static void rotate_row(double *xr, int64_t rot, int inter, const tu_tensor *cs, const tu_tensor *sn,
                       int64_t pos) {
  for (int64_t r = 0; r < rot / 2; ++r) {
    const int64_t idx[2] = {pos, r};
    const double co = tu_get(cs, idx), si = tu_get(sn, idx);
    const int64_t a = inter ? 2 * r : r, b = inter ? 2 * r + 1 : r + rot / 2;
    const double x1 = xr[a], x2 = xr[b];
    xr[a] = x1 * co - x2 * si;
    xr[b] = x1 * si + x2 * co;
  }
}

enum { K_Q, K_QR, K_KC, K_VC, K_KD, K_VD, K_KN, K_VN, K_COS, K_SIN, K_OUT, K_LSE, K_COUNT };
static const char *const k_names[K_COUNT] = {"q",          "q(rotated)", "k_cache", "v_cache",
                                             "k(dense)",   "v(dense)",   "k_new",   "v_new",
                                             "rotary_cos", "rotary_sin", "out",     "lse"};

/* One ulp-ish bound for a value stored after a rotation computed in another precision. */
static double store_tol(fa_dtype dt, double v) {
  double eps = dt == FA_F32 ? 1.2e-7 : dt == FA_F16 ? 9.8e-4 : 7.9e-3;
  return eps * fabs(v) + (dt == FA_F32 ? 1e-30 : 1e-7);
}

static int run_kvcase(const fcase *c, frun *R, uint64_t run_seed) {
  const double t0 = now_s();
  const backend_ctx *bk = R->bk;
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[320] = "";
  int result = R_FAIL;
  R->skip[0] = '\0';
  tu_tensor t[K_COUNT], it[I_COUNT], cl;
  dev_tensor d[K_COUNT], dix[I_COUNT], dcl;
  memset(t, 0, sizeof t);
  memset(it, 0, sizeof it);
  memset(&cl, 0, sizeof cl);
  memset(d, 0, sizeof d);
  memset(dix, 0, sizeof dix);
  memset(&dcl, 0, sizeof dcl);
  char derr[256];
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};
  unsigned char *appended = NULL;
  int64_t lens_q[FMAXB], lens_k[FMAXB], *table = NULL;
  double slopes[FMAXB * 64], *row = NULL;
  ref_problem p;
  ref_ext x;
  fproblem(c, &p, &x, lens_q, lens_k, slopes);
  x.lens_q = NULL;
  const int64_t B = c->b, sq = c->sq, cap = p.seqlen_k, sn = c->snew;
  const int paged = c->page > 0;
  const int64_t nblk = paged ? B * c->max_blocks + 2 : 0;
  const int64_t maxpos = cap + sq + 1;
  const int64_t qs[4] = {B, sq, c->hq, c->d}, os[4] = {B, sq, c->hq, c->dv}, ls[3] = {B, c->hq, sq};
  const int64_t kc[4] = {paged ? nblk : B, paged ? c->page : cap, c->hkv, c->d},
                vc[4] = {paged ? nblk : B, paged ? c->page : cap, c->hkv, c->dv};
  const int64_t kd[4] = {B, cap, c->hkv, c->d}, vd[4] = {B, cap, c->hkv, c->dv};
  const int64_t kn[4] = {B, sn, c->hkv, c->d}, vn[4] = {B, sn, c->hkv, c->dv};
  const int64_t rs[2] = {maxpos, c->rot / 2};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(run_seed, c->name));
  int bad = 0;
  bad |= tu_alloc(&t[K_Q], c->dtype, 4, qs, TU_PADDED);
  bad |= tu_alloc(&t[K_QR], c->dtype, 4, qs, TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_KC], c->dtype, 4, kc, paged ? TU_CONTIGUOUS : TU_PERMUTED);
  bad |= tu_alloc(&t[K_VC], c->dtype, 4, vc, TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_KD], c->dtype, 4, kd, TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_VD], c->dtype, 4, vd, TU_CONTIGUOUS);
  if (sn) {
    bad |= tu_alloc(&t[K_KN], c->dtype, 4, kn, TU_STRIDED);
    bad |= tu_alloc(&t[K_VN], c->dtype, 4, vn, TU_CONTIGUOUS);
  }
  if (c->rot) {
    bad |= tu_alloc(&t[K_COS], c->rot_f32 ? FA_F32 : c->dtype, 2, rs, TU_CONTIGUOUS);
    bad |= tu_alloc(&t[K_SIN], c->rot_f32 ? FA_F32 : c->dtype, 2, rs, TU_CONTIGUOUS);
  }
  bad |= tu_alloc(&t[K_OUT], c->dtype, 4, os, TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_LSE], FA_F32, 3, ls, TU_CONTIGUOUS);
  row = malloc(sizeof(double) * (size_t)(c->d > c->dv ? c->d : c->dv));
  if (bad || !row) {
    fail(&rep, "out of memory allocating tensors");
    goto done;
  }
  const int ins[6] = {K_Q, K_KC, K_VC, K_KN, K_VN, -1};
  for (int i = 0; ins[i] >= 0; ++i)
    if (t[ins[i]].buf) tu_fill_random(&t[ins[i]], &rng);
  if (c->rot)
    for (int64_t pos = 0; pos < maxpos; ++pos)
      for (int64_t r = 0; r < c->rot / 2; ++r) {
        const int64_t idx[2] = {pos, r};
        double th = (double)pos * pow(10000.0, -2.0 * (double)r / (double)c->rot);
        tu_set(&t[K_COS], idx, cos(th));
        tu_set(&t[K_SIN], idx, sin(th));
      }
  if (paged) {
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)nblk);
    table = malloc(sizeof(int64_t) * (size_t)(B * c->max_blocks));
    if (!perm || !table) {
      free(perm);
      fail(&rep, "out of memory (block table)");
      goto done;
    }
    for (int64_t i = 0; i < nblk; ++i) perm[i] = nblk - 1 - i;
    for (int64_t i = nblk - 1; i > 0; --i) {
      int64_t j = (int64_t)(tu_rng_u64(&rng) % (uint64_t)(i + 1)), tmp = perm[i];
      perm[i] = perm[j], perm[j] = tmp;
    }
    for (int64_t i = 0; i < B * c->max_blocks; ++i) table[i] = perm[i];
    free(perm);
  }
  for (int i = 0; i < K_COUNT; ++i)
    if (t[i].buf) (void)tu_snapshot(&t[i]);
  {
    const int64_t sb[1] = {B}, st[2] = {B, c->max_blocks};
    const int64_t sa1[1] = {c->hq}, sa2[2] = {B, c->hq};
    bad |= make_i32(&cl, 1, sb, c->cache_len);
    if (paged) bad |= make_i32(&it[I_TABLE], 2, st, table);
    if (c->alibi) { /* the slopes fproblem gave the reference */
      if (tu_alloc(&it[I_ALIBI], FA_F32, c->alibi, c->alibi == 2 ? sa2 : sa1, TU_CONTIGUOUS))
        bad = 1;
      else {
        for (int64_t f = 0; f < tu_numel(&it[I_ALIBI]); ++f)
          tu_set_flat(&it[I_ALIBI], f, slopes[f]);
        bad |= tu_snapshot(&it[I_ALIBI]);
      }
    }
    if (bad) {
      fail(&rep, "out of memory (index tensors)");
      goto done;
    }
  }
  /* Cache element (as logical index into k_cache / v_cache) of sequence b's position pos. */
#define CACHE_AT(idx, b, pos, h)                                                         \
  do {                                                                                   \
    if (paged) {                                                                         \
      (idx)[0] = table[(b)*c->max_blocks + (pos) / c->page], (idx)[1] = (pos) % c->page; \
    } else {                                                                             \
      (idx)[0] = (b), (idx)[1] = (pos);                                                  \
    }                                                                                    \
    (idx)[2] = (h), (idx)[3] = 0;                                                        \
  } while (0)
  /* The expected logical cache: what was there, with the new tokens rotated, rounded, appended. */
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < cap; ++j)
      for (int64_t h = 0; h < c->hkv; ++h) {
        int64_t ci[4], di[4] = {b, j, h, 0};
        CACHE_AT(ci, b, j, h);
        const int64_t tnew = j - c->cache_len[b];
        if (tnew >= 0 && tnew < sn) {
          int64_t ni[4] = {b, tnew, h, 0};
          for (int64_t e = 0; e < c->d; ++e) ni[3] = e, row[e] = tu_get(&t[K_KN], ni);
          if (c->rot) rotate_row(row, c->rot, c->inter, &t[K_COS], &t[K_SIN], j);
          for (int64_t e = 0; e < c->d; ++e) di[3] = e, tu_set(&t[K_KD], di, row[e]);
          di[3] = 0;
          copy_row(&t[K_VD], di, &t[K_VN], ni, c->dv);
        } else {
          copy_row(&t[K_KD], di, &t[K_KC], ci, c->d);
          copy_row(&t[K_VD], di, &t[K_VC], ci, c->dv);
        }
      }
  /* q rotated (rounded once) at cache_seqlens[b] + t when causal or windowed, else at
     cache_seqlens[b]. */
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < c->hq; ++h) {
        int64_t qi[4] = {b, i, h, 0};
        for (int64_t e = 0; e < c->d; ++e) qi[3] = e, row[e] = tu_get(&t[K_Q], qi);
        const int64_t pos = c->cache_len[b] + ((c->cm != CM_NONE || c->win) ? i : 0);
        if (c->rot) rotate_row(row, c->rot, c->inter, &t[K_COS], &t[K_SIN], pos);
        for (int64_t e = 0; e < c->d; ++e) qi[3] = e, tu_set(&t[K_QR], qi, row[e]);
      }

  /* The tensors the library gets, in the backend's memory (q rotated and the dense caches are
     the reference's only). */
  for (int i = 0; i < K_COUNT; ++i) {
    const int ref_only = i == K_QR || i == K_KD || i == K_VD;
    if (t[i].buf && !ref_only && dev_put(bk->ops, &d[i], &t[i], derr, sizeof derr)) {
      fail(&rep, "%s: %s", k_names[i], derr);
      goto done;
    }
  }
  for (int i = 0; i < I_COUNT; ++i)
    if (it[i].buf && dev_put(bk->ops, &dix[i], &it[i], derr, sizeof derr)) {
      fail(&rep, "%s: %s", i_names[i], derr);
      goto done;
    }
  if (dev_put(bk->ops, &dcl, &cl, derr, sizeof derr)) {
    fail(&rep, "kv.cache_seqlens: %s", derr);
    goto done;
  }

  fa_params params;
  fparams(c, bk, &x, &params, dix);
  fa_kvcache_args kv;
  fa_kvcache_args_init(&kv);
  kv.cache_seqlens = &dcl.view;
  if (sn) kv.k_new = &d[K_KN].view, kv.v_new = &d[K_VN].view;
  if (c->rot) kv.rotary_cos = &d[K_COS].view, kv.rotary_sin = &d[K_SIN].view;
  kv.rotary_interleaved = c->inter;
  fa_run_info info, plan;
  fa_run_info_init(&plan);
  fa_status st = fa_plan_forward_kvcache(&params, &d[K_Q].view, &d[K_KC].view, &d[K_VC].view, &kv,
                                         &d[K_OUT].view, &d[K_LSE].view, &plan);
  if (st != FA_OK) {
    const fa_tensor *data[5] = {&d[K_Q].view, &d[K_KC].view, &d[K_VC].view, &d[K_OUT].view,
                                sn ? &d[K_KN].view : NULL};
    result = frefused(&rep, R, c, data, 5, "fa_plan_forward_kvcache", st);
    goto done;
  }
  if (ref_attention_ext(&p, &x, REF_F64, &t[K_QR], &t[K_KD], &t[K_VD], NULL, &r64, 0) ||
      ref_attention_ext(&p, &x, REF_STORAGE, &t[K_QR], &t[K_KD], &t[K_VD], NULL, &rn, 0)) {
    fail(&rep, "reference failed");
    goto done;
  }
  for (int w = 0; w < 2; ++w)
    if (!(masked[w] = ref_masked_map_ext(&p, &x, (ref_which)w))) {
      fail(&rep, "out of memory (mask map)");
      goto done;
    }
  fa_run_info_init(&info);
  st = fa_forward_kvcache(&params, &d[K_Q].view, &d[K_KC].view, &d[K_VC].view, &kv, &d[K_OUT].view,
                          &d[K_LSE].view, &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward_kvcache: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  {
    const int outs[4] = {K_OUT, K_LSE, K_KC, K_VC};
    for (int i = 0; i < 4; ++i)
      if (dev_get(&rep, bk, &t[outs[i]], &d[outs[i]], k_names[outs[i]])) goto done;
  }
  fcheck_info(&rep, bk, c, "kvcache", "kvcache", &info, &plan);
  if (c->splits > 0 && info.num_splits != c->splits)
    fail(&rep, "kvcache: num_splits %d asked, run info says %d ran", c->splits, info.num_splits);
  fmap id = {MAP_ID, B, sq, c->hq, 1, NULL, NULL, 0};
  fcheck_output(&rep, summary, sizeof summary, "out", &t[K_OUT], &id, &r64, &rn, REF_OUT,
                masked[REF_OUT], c->dtype);
  fcheck_output(&rep, summary, sizeof summary, "lse", &t[K_LSE], &id, &r64, &rn, REF_LSE,
                masked[REF_LSE], c->dtype);
  /* The caches: appended positions hold the (rotated, rounded) new tokens, everything else in
     the buffers (other positions, other pages, gaps) is bitwise what it was. */
  for (int which = 0; which < 2; ++which) {
    tu_tensor *cache = &t[which ? K_VC : K_KC];
    const tu_tensor *dense = &t[which ? K_VD : K_KD];
    const int64_t dim = which ? c->dv : c->d;
    appended = calloc(cache->buf_elems, 1);
    if (!appended) {
      fail(&rep, "out of memory (cache check)");
      goto done;
    }
    int64_t wrong = 0, changed = 0;
    double worst = 0.0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t tn = 0; tn < sn; ++tn)
        for (int64_t h = 0; h < c->hkv; ++h) {
          const int64_t pos = c->cache_len[b] + tn;
          int64_t ci[4], di[4] = {b, pos, h, 0};
          CACHE_AT(ci, b, pos, h);
          for (int64_t e = 0; e < dim; ++e) {
            ci[3] = di[3] = e;
            appended[tu_elem_offset(cache, ci)] = 1;
            const double got = tu_get(cache, ci), want = tu_get(dense, di);
            const double err = fabs(got - want);
            if (!(err <= (which ? 0.0 : store_tol(c->dtype, want)))) ++wrong;
            if (err > worst || isnan(err)) worst = err;
          }
        }
    for (size_t off = 0; off < cache->buf_elems; ++off)
      if (!appended[off] && memcmp(cache->buf + off * cache->elem_bytes,
                                   cache->snapshot + off * cache->elem_bytes, cache->elem_bytes))
        ++changed;
    if (wrong)
      fail(&rep, "%s: %lld appended elements differ from the new tokens%s (worst %.3e)",
           k_names[which ? K_VC : K_KC], (long long)wrong, which ? "" : " rotated and rounded",
           worst);
    if (changed)
      fail(&rep, "%s: %lld elements outside the appended positions changed",
           k_names[which ? K_VC : K_KC], (long long)changed);
    size_t u = strlen(summary);
    if (sn) snprintf(summary + u, sizeof summary - u, " %s %.1e", which ? "vnew" : "knew", worst);
    free(appended);
    appended = NULL;
  }
#undef CACHE_AT
  {
    const int ro[5] = {K_Q, K_KN, K_VN, K_COS, K_SIN};
    for (int i = 0; i < 5; ++i) {
      char msg[160];
      if (t[ro[i]].buf && !dev_get(&rep, bk, &t[ro[i]], &d[ro[i]], k_names[ro[i]]) &&
          tu_unchanged(&t[ro[i]], msg, sizeof msg) != 1)
        fail(&rep, "input %s was modified: %s", k_names[ro[i]], msg);
    }
    if (!dev_get(&rep, bk, &cl, &dcl, "kv.cache_seqlens") && tu_unchanged(&cl, NULL, 0) != 1)
      fail(&rep, "kv.cache_seqlens was modified");
    if (paged && !dev_get(&rep, bk, &it[I_TABLE], &dix[I_TABLE], "block_table") &&
        tu_unchanged(&it[I_TABLE], NULL, 0) != 1)
      fail(&rep, "block_table was modified");
  }
  result = rep.failed ? R_FAIL : R_PASS;

done:
  if (rep.failed) result = R_FAIL;
  for (int i = 0; i < K_COUNT; ++i) {
    bk->ops->release(&d[i]);
    tu_free(&t[i]);
  }
  for (int i = 0; i < I_COUNT; ++i) {
    bk->ops->release(&dix[i]);
    tu_free(&it[i]);
  }
  bk->ops->release(&dcl);
  tu_free(&cl);
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  free(appended);
  free(table);
  free(row);
  ref_result_free(&r64);
  ref_result_free(&rn);
  if (result == R_SKIP)
    printf("SKIP %s: %s\n", c->name, R->skip);
  else
    printf("%s %-50s%s  %.2fs\n", result == R_PASS ? "PASS" : "FAIL", c->name, summary,
           now_s() - t0);
  if (result == R_FAIL) {
    fputs(rep.text, stdout);
    printf("      replay: FA_TEST_SEED=%llu conformance --backend %s --filter '%s'\n",
           (unsigned long long)run_seed, bk->name, c->name);
  }
  fflush(stdout);
  return result;
}

/* The layout probes (see the top of the file): one fa_plan_forward each on a small plain problem
   in the backend's memory, in the first dtype the backend lists, q, k, v and out in the probed
   layout (lse contiguous: the probes are about the data tensors). */
static void probe_layouts(backend_ctx *bk) {
  fa_dtype dt = FA_F32;
  if (list_has(bk->desc->features, "bf16"))
    dt = FA_BF16;
  else if (list_has(bk->desc->features, "f16"))
    dt = FA_F16;
  const int64_t qs[4] = {1, 128, 2, 64}, ls[3] = {1, 2, 128};
  for (int pr = 0; pr < P_COUNT; ++pr) {
    tu_tensor t[5];
    dev_tensor d[5];
    memset(t, 0, sizeof t);
    memset(d, 0, sizeof d);
    char err[256] = "";
    int bad = 0;
    for (int i = 0; i < 5 && !bad; ++i) {
      const int is_lse = i == 4;
      tu_layout l = tu_layout_of(TU_CONTIGUOUS, is_lse ? 3 : 4);
      if (pr == P_STRIDED_LAST_DIM && !is_lse) l.step = 2; /* rows stay 16-byte aligned */
      if (pr == P_UNALIGNED && !is_lse) l = tu_layout_of(TU_PADDED, 4);
      if (tu_alloc_layout(&t[i], is_lse ? FA_F32 : dt, is_lse ? 3 : 4, is_lse ? ls : qs, &l)) {
        snprintf(err, sizeof err, "out of memory");
        bad = 1;
      } else {
        if (!is_lse) {
          tu_rng rng;
          tu_rng_init(&rng, 1234u + (uint64_t)i);
          tu_fill_random(&t[i], &rng);
        }
        bad = dev_put(bk->ops, &d[i], &t[i], err, sizeof err) != 0;
      }
    }
    if (bad) {
      bk->probe_ok[pr] = 0;
      snprintf(bk->probe_why[pr], sizeof bk->probe_why[pr], "probe not run: %s", err);
    } else {
      fa_params params;
      fa_params_init(&params);
      params.backend = bk->id;
      params.strict = 1;
      params.kernel_family = bk->kernel_family;
      fa_run_info plan;
      fa_run_info_init(&plan);
      fa_status st = fa_plan_forward(&params, &d[0].view, &d[1].view, &d[2].view, &d[3].view,
                                     &d[4].view, &plan);
      bk->probe_ok[pr] = st == FA_OK;
      if (st == FA_OK)
        snprintf(bk->probe_why[pr], sizeof bk->probe_why[pr], "accepted (%s)", plan.kernel);
      else
        snprintf(bk->probe_why[pr], sizeof bk->probe_why[pr], "refused: %s: %s",
                 fa_status_string(st), fa_last_error());
    }
    for (int i = 0; i < 5; ++i) {
      bk->ops->release(&d[i]);
      tu_free(&t[i]);
    }
  }
}

/* ----------------------------------------------------------------------------------------------
 * --shard K/N: one of N parts of the selected cases, balanced by estimated cost (each case, most
 * costly first, goes to the part with the least cost so far), so that a slow run (the sanitizer
 * build's) can be spread over parallel CTest jobs. The parts are disjoint and together are the
 * whole selection; the split depends only on the case list, never on timing.
 * -------------------------------------------------------------------------------------------- */

/* Whether a case is in the run's selection (--quick, --filter), before any --shard. */
static int case_selected(const char *name, int case_quick, int quick, const char *filter) {
  return (!quick || case_quick) && (!filter || strstr(name, filter));
}

typedef struct shard_item {
  double cost;
  int list; /* 0: plain case, 1: feature case */
  int index;
} shard_item;

static int shard_item_cmp(const void *a, const void *b) {
  const shard_item *x = (const shard_item *)a, *y = (const shard_item *)b;
  if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
  if (x->list != y->list) return x->list - y->list;
  return x->index - y->index;
}

/* Marks in keep_l / keep_f (zeroed by the caller) the selected cases that fall in part k of n;
   returns 0, or -1 when out of memory. */
static int shard_select(const case_list *L, const fcase_list *F, int quick, const char *filter,
                        int k, int n, unsigned char *keep_l, unsigned char *keep_f) {
  shard_item *items = (shard_item *)malloc(sizeof(shard_item) * (size_t)(L->n + F->n + 1));
  double *load = (double *)calloc((size_t)n, sizeof(double));
  if (!items || !load) {
    free(items);
    free(load);
    return -1;
  }
  int m = 0;
  for (int i = 0; i < L->n; ++i)
    if (case_selected(L->v[i].name, L->v[i].quick, quick, filter))
      items[m++] = (shard_item){L->v[i].cost, 0, i};
  for (int i = 0; i < F->n; ++i)
    if (case_selected(F->v[i].name, F->v[i].quick, quick, filter))
      items[m++] = (shard_item){F->v[i].cost, 1, i};
  qsort(items, (size_t)m, sizeof *items, shard_item_cmp);
  for (int i = 0; i < m; ++i) {
    int best = 0;
    for (int p = 1; p < n; ++p)
      if (load[p] < load[best]) best = p;
    load[best] += items[i].cost;
    if (best == k) (items[i].list ? keep_f : keep_l)[items[i].index] = 1;
  }
  free(items);
  free(load);
  return 0;
}

/* ----------------------------------------------------------------------------------------------
 * main
 * -------------------------------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: conformance --backend <cpu|cuda|hip|opencl> [--quick|--full] [--filter substr] "
          "[--list] [--require f1,f2,...] [--kernel-family F] [--kernel-prefix P] [--shard K/N]\n"
          "  --quick   a subset that still covers every feature (also FA_CONFORMANCE_QUICK=1)\n"
          "  --full    every case (the default)\n"
          "  --shard K/N  part K (0-based) of N of the selected cases, balanced by estimated cost\n"
          "  --require needs whose cases must not be skipped: fa_backend_info's feature names\n"
          "            (window,softcap,alibi,dropout,varlen,paged_kv,split_kv,kvcache,hd512,\n"
          "            deterministic,f32,dv_ne_dk,...) or the suite's layout probes\n"
          "            (strided_last_dim,unaligned)\n"
          "  --kernel-family  params.kernel_family of every call\n"
          "  --kernel-prefix  the prefix of the cuda backend's kernel names (default "
          "cuda.fa3.sm90 for the\n"
          "            forward at head dims 64, 96, 128, 192, 256 on sm_90, else cuda.fa2.sm80)\n"
          "  FA_TEST_SEED=<n> replays a run's inputs; FA_TEST_THREADS sets reference threads\n");
}

int main(int argc, char **argv) {
  const char *backend = NULL, *filter = NULL, *require = NULL, *family = NULL;
  const char *cuda_prefix = NULL; /* cuda_expected's default */
  /* FA_CONFORMANCE_QUICK=1 picks the subset where a command line cannot be changed (CTest). */
  const char *env_quick = getenv("FA_CONFORMANCE_QUICK");
  int quick = env_quick && *env_quick && strcmp(env_quick, "0") != 0, list = 0;
  int shard_k = 0, shard_n = 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      backend = argv[++i];
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
      filter = argv[++i];
    else if (!strcmp(argv[i], "--require") && i + 1 < argc)
      require = argv[++i];
    else if (!strcmp(argv[i], "--kernel-family") && i + 1 < argc)
      family = argv[++i];
    else if (!strcmp(argv[i], "--kernel-prefix") && i + 1 < argc)
      cuda_prefix = argv[++i];
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--full"))
      quick = 0;
    else if (!strcmp(argv[i], "--list"))
      list = 1;
    else if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
      char end = 0;
      if (sscanf(argv[++i], "%d/%d%c", &shard_k, &shard_n, &end) != 2 || shard_n < 1 ||
          shard_n > 64 || shard_k < 0 || shard_k >= shard_n) {
        fprintf(stderr, "conformance: --shard '%s': expected K/N with 0 <= K < N <= 64\n", argv[i]);
        return 2;
      }
    } else {
      usage();
      return 2;
    }
  }
  if (!backend) {
    usage();
    return 2;
  }
  int32_t id = 0;
  if (fa_backend_from_name(backend, &id) != FA_OK || id == FA_BACKEND_AUTO) {
    fprintf(stderr, "conformance: unknown backend '%s'\n", backend);
    return 2;
  }

  case_list L = {0};
  build_cases(&L);
  mark_quick(&L);
  fcase_list F = {0};
  build_fcases(&F);
  mark_fquick(&F);
  /* --shard: the selection's part; NULL keeps every selected case. */
  unsigned char *keep_l = NULL, *keep_f = NULL;
  if (shard_n > 1) {
    keep_l = (unsigned char *)calloc((size_t)L.n + 1, 1);
    keep_f = (unsigned char *)calloc((size_t)F.n + 1, 1);
    if (!keep_l || !keep_f ||
        shard_select(&L, &F, quick, filter, shard_k, shard_n, keep_l, keep_f) != 0) {
      fprintf(stderr, "conformance: out of memory\n");
      free(keep_l);
      free(keep_f);
      free(L.v);
      free(F.v);
      return 1;
    }
  }
  if (list) {
    for (int i = 0; i < L.n; ++i)
      if (case_selected(L.v[i].name, L.v[i].quick, quick, filter) && (!keep_l || keep_l[i]))
        printf("%-56s cost %.2e%s\n", L.v[i].name, L.v[i].cost, L.v[i].quick ? "  quick" : "");
    for (int i = 0; i < F.n; ++i)
      if (case_selected(F.v[i].name, F.v[i].quick, quick, filter) && (!keep_f || keep_f[i]))
        printf("%-56s cost %.2e%s\n", F.v[i].name, F.v[i].cost, F.v[i].quick ? "  quick" : "");
    free(L.v);
    free(F.v);
    free(keep_l);
    free(keep_f);
    return 0;
  }

  /* Skip (77) when the backend cannot run here, with the library's own reason. */
  fa_backend_desc descs[FA_BACKEND_COUNT_ + 4];
  int32_t count = 0;
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; ++i) fa_backend_desc_init(&descs[i]);
  fa_status st = fa_backend_info(descs, (int32_t)(sizeof descs / sizeof descs[0]), &count);
  if (st != FA_OK) {
    printf("conformance: fa_backend_info failed: %s: %s\n", fa_status_string(st), fa_last_error());
    printf("conformance: 0 passed, 1 failed, 0 skipped\n");
    free(L.v);
    free(F.v);
    free(keep_l);
    free(keep_f);
    return 1;
  }
  const fa_backend_desc *desc = NULL;
  for (int32_t i = 0; i < count && i < (int32_t)(sizeof descs / sizeof descs[0]); ++i)
    if (descs[i].id == id) desc = &descs[i];
  if (!desc || !desc->available) {
    printf("SKIP: %s: %s\n", backend, desc ? desc->reason : "not known to this library");
    free(L.v);
    free(F.v);
    free(keep_l);
    free(keep_f);
    return 77;
  }
  /* FA_CPU_ISA=avx512bf16 on a CPU without AVX512-BF16 would run the AVX-512 build again: not
     what the caller asked to test, so skipped with the reason. */
  const char *forced_isa = getenv("FA_CPU_ISA");
  if (id == FA_BACKEND_CPU && forced_isa && strcmp(forced_isa, "avx512bf16") == 0 &&
      strcmp(cpu_expected_isa_for("fwd", FA_BF16, 64, 64), "avx512bf16") != 0) {
    printf(
        "SKIP: cpu: FA_CPU_ISA=avx512bf16 but this CPU has no AVX512-BF16 (CPUID 7.1 EAX "
        "bit 5) or no AVX-512 build runs here\n");
    free(L.v);
    free(F.v);
    free(keep_l);
    free(keep_f);
    return 77;
  }
  /* FA_CPU_ISA=amx where AMX cannot run: the backend refuses every call with the reason, which
     its device line gives (real AMX, or the test plugin's C model of it, says "amx: in use"). */
  if (id == FA_BACKEND_CPU && forced_isa && strcmp(forced_isa, "amx") == 0 &&
      !strstr(desc->devices, "amx: in use")) {
    printf("SKIP: cpu: FA_CPU_ISA=amx but AMX does not run here (%s)\n", desc->devices);
    free(L.v);
    free(F.v);
    free(keep_l);
    free(keep_f);
    return 77;
  }

  backend_ctx bk;
  memset(&bk, 0, sizeof bk);
  bk.id = id;
  bk.name = desc->name;
  bk.ops = NULL;
  bk.desc = desc;
  bk.require = require;
  bk.kernel_family = family;
  bk.cuda_prefix = cuda_prefix;
  /* The cuda backend's FlashAttention-3 forward: listed, on an sm_90 device not run as sm_80,
     and not fa2 by name. */
  bk.cuda_fa3 = !strcmp(bk.name, "cuda") && strstr(bk.desc->kernel_families, "fa3") &&
                strstr(bk.desc->devices, "(sm_90") && !strstr(bk.desc->devices, "run as sm_80") &&
                !(family && !strcmp(family, "fa2"));
  fa_device_kind kind = id == FA_BACKEND_CPU    ? FA_DEVICE_CPU
                        : id == FA_BACKEND_CUDA ? FA_DEVICE_CUDA
                        : id == FA_BACKEND_HIP  ? FA_DEVICE_HIP
                                                : FA_DEVICE_OPENCL;
  for (size_t i = 0; i < sizeof g_dev_ops / sizeof g_dev_ops[0]; ++i)
    if (g_dev_ops[i].kind == kind) bk.ops = &g_dev_ops[i];

  const uint64_t seed = tu_run_seed();
  printf("conformance: backend %s (%s; %s), %s, seed %llu%s\n", bk.name, desc->devices, desc->arch,
         quick ? "quick subset" : "all cases", (unsigned long long)seed,
         tu_seed_was_fixed() ? " (FA_TEST_SEED)" : "");
  if (shard_n > 1) printf("conformance: shard %d of %d (0-based)\n", shard_k, shard_n);
  printf("conformance: features: %s\n", desc->features);
  if (kind != FA_DEVICE_CPU) {
    /* The device every tensor goes to (the backend's default device, see the DEVICE HOOK). */
    fa_device dev;
    char err[256], name[256] = "";
    if (devmem_default_device(kind, &dev, err, sizeof err))
      printf("conformance: tensors: no device: %s\n", err);
    else if (devmem_device_name(dev, name, sizeof name, err, sizeof err))
      printf("conformance: tensors on %s:%d (%s)\n", fa_device_kind_name((int32_t)kind),
             (int)dev.id, err);
    else
      printf("conformance: tensors on %s:%d, %s\n", fa_device_kind_name((int32_t)kind), (int)dev.id,
             name);
  }
  probe_layouts(&bk);
  for (int pr = 0; pr < P_COUNT; ++pr)
    printf("conformance: layout probe %s: %s\n", probe_names[pr], bk.probe_why[pr]);
  if (require) printf("conformance: required features: %s\n", require);
  printf("case%*s  max error/tolerance per output%*s  time\n", 47, "", 20, "");
  fflush(stdout);

  const double t0 = now_s();
  int passed = 0, failed = 0, skipped = 0;
  for (int i = 0; i < L.n; ++i) {
    const conf_case *c = &L.v[i];
    if (!case_selected(c->name, c->quick, quick, filter) || (keep_l && !keep_l[i])) continue;
    int r = run_case(c, &bk, seed);
    if (r == R_PASS)
      ++passed;
    else if (r == R_SKIP)
      ++skipped;
    else
      ++failed;
  }
  frun R;
  memset(&R, 0, sizeof R);
  R.bk = &bk;
  for (int i = 0; i < F.n; ++i) {
    const fcase *c = &F.v[i];
    if (!case_selected(c->name, c->quick, quick, filter) || (keep_f && !keep_f[i])) continue;
    int r = c->kvc ? run_kvcase(c, &R, seed) : run_fcase(c, &R, seed);
    if (r == R_PASS)
      ++passed;
    else if (r == R_SKIP)
      ++skipped;
    else
      ++failed;
  }
  free(L.v);
  free(F.v);
  free(keep_l);
  free(keep_f);
  fa_release();
  printf("conformance: %.1f s, seed %llu\n", now_s() - t0, (unsigned long long)seed);
  if (passed + failed + skipped == 0) {
    /* A mistyped --filter must not look like a clean run. */
    printf("conformance: no case matches%s%s\n", filter ? " the filter " : "",
           filter ? filter : "");
    printf("conformance: 0 passed, 1 failed, 0 skipped\n");
    return 1;
  }
  printf("conformance: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
