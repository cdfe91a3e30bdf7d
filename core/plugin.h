/*
 * plugin.h: the contract between the core library and a backend plugin.
 *
 * A plugin is a shared object (libfa_<name>.so) exporting one symbol, FA_PLUGIN_ENTRY_SYMBOL, of
 * type fa_plugin_entry_fn. The registry calls it with the core's FA_PLUGIN_ABI_VERSION; a plugin
 * built for another ABI returns NULL (or a table whose abi_version differs) and is refused with the
 * reason kept for fa_backend_info().
 *
 * The request a plugin sees has been validated by core/validate: shapes, strides, dtypes and
 * devices agree, every index fits in int64. The plugin's decide() is the ONE function that says
 * whether it supports a request, which kernel runs and how much workspace it needs; fa_plan,
 * fa_backend_info's feature list and the call itself all go through it.
 */
#ifndef FA_CORE_PLUGIN_H
#define FA_CORE_PLUGIN_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "flash_attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FA_PLUGIN_ABI_VERSION 6u
#define FA_PLUGIN_ENTRY_SYMBOL "fa_plugin_entry"

#define FA_DECISION_PAYLOAD_BYTES 64

typedef enum fa_op { FA_OP_FORWARD = 0, FA_OP_BACKWARD = 1, FA_OP_KVCACHE = 2 } fa_op;

/**
 * Where a call's query rows and keys sit in a longer sequence, for the blocks of the ring
 * (core/ring_*.c), which is the only caller that sets it; every public call has set = 0. With set,
 * dropout draws at row q0 + i and key k0 + j, and ALiBi's distance is |(q0 + i) + shift - (k0 + j)|
 * with the longer sequence's diagonal shift (core/math/mask.h) in place of the call's own; the
 * masks (causal, window) stay the call's own. It changes nothing else, so a backend that refuses
 * dropout and ALiBi honours it as it is; one that takes either applies it or refuses the request.
 */
typedef struct fa_positions {
  int32_t set;
  int64_t q0, k0, shift;
} fa_positions;

/** A validated call, with the dimensions derived once by core/validate. */
typedef struct fa_request {
  fa_op op;
  const fa_params *params; /* never NULL: defaults are filled in by the core */
  const fa_tensor *q, *k, *v, *out, *lse;
  const fa_tensor *dout, *dq, *dk, *dv; /* backward only; NULL for forward */
  fa_dtype dtype;
  fa_device device;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v;
  float scale;        /* softmax_scale resolved (0 -> 1/sqrt(head_dim)) */
  int32_t lse_packed; /* varlen only: 1 when lse is unpadded [heads_q, total_q], 0 when padded */
  /* FA_OP_KVCACHE only (else NULL/0): k and v above are the caches (written by the append). */
  const fa_kvcache_args *kv; /* resolved copy; kv->k_new etc. may be NULL */
  int64_t seqlen_new;        /* tokens appended per sequence (0 without k_new) */
  int64_t rotary_dim;        /* 0 without rotary tables */
  fa_positions pos;          /* the ring's blocks only (above); zero for every public call */
} fa_request;

/** A validated fa_quantize call (core/quantize.c). */
typedef struct fa_quantize_request {
  const fa_quantize_args *args;     /* resolved; never NULL */
  const fa_tensor *x, *y, *descale; /* descale is NULL when y is not FP8 */
  fa_device device;
  int64_t batch, seqlen, heads, head_dim;
  int32_t log2_dim; /* with args->rotate: head_dim = 2^log2_dim */
} fa_quantize_request;

/** What decide() answers. */
typedef struct fa_decision {
  int32_t supported; /* 0: reason says why */
  char reason[256];  /* "head_dim 320 > 256 for fa2_sm80" */
  char kernel[FA_KERNEL_LEN];
  int32_t tile_m, tile_n;
  int32_t num_splits;
  int32_t deterministic;
  size_t workspace_bytes;
  /* The deciding backend's own record of its choice (kernel id, configuration, tiles) for its
   * run(): written by decide() with fa_decision_put, read back by the same plugin's run() with
   * fa_decision_get. The core copies it with the decision and never reads it; `kernel` is the
   * name for people and the run report, never parsed. */
  union {
    uint64_t align_;
    unsigned char bytes[FA_DECISION_PAYLOAD_BYTES];
  } payload;
} fa_decision;

/* Stores / loads a backend's payload struct (at most FA_DECISION_PAYLOAD_BYTES bytes: check with
   FA_DECISION_PAYLOAD_FITS where the struct is defined). */
static inline void fa_decision_put(fa_decision *d, const void *payload, size_t bytes) {
  memcpy(d->payload.bytes, payload, bytes);
}
static inline void fa_decision_get(const fa_decision *d, void *payload, size_t bytes) {
  memcpy(payload, d->payload.bytes, bytes);
}
#define FA_DECISION_PAYLOAD_FITS(type) \
  _Static_assert(sizeof(type) <= FA_DECISION_PAYLOAD_BYTES, #type " fits a decision's payload")

/** What probe() reports about the machine. */
typedef struct fa_plugin_probe {
  int32_t available;
  char reason[FA_REASON_LEN];
  int32_t device_count;
  char devices[256];
  char arch[64];
  char kernel_families[128];
  char dtypes[64];
} fa_plugin_probe;

/**
 * The element-wise steps of a ring call over device tensors (core/ring_mem.c), on the memory of
 * the backend that owns the tensors. Tensors have 1 to 4 dimensions on `device`, any strides;
 * every step is enqueued on `stream` (params.stream) after the work already there, without
 * synchronising the host. A backend that offers them offers all six.
 */
typedef enum fa_buffer_op_kind {
  FA_BUFFER_ALLOC = 1, /* *alloc_out = `bytes` of device memory, usable in the stream's order */
  FA_BUFFER_FREE = 2,  /* frees ptr once the stream's work so far is done (ptr may be NULL) */
  FA_BUFFER_FILL = 3,  /* dst (float32) = value */
  FA_BUFFER_COPY = 4,  /* dst = src, rounded to dst's dtype (f32, f16, bf16; same shapes) */
  FA_BUFFER_ADD = 5,   /* dst (float32) += src (same shapes) */
  FA_BUFFER_MERGE = 6  /* a block's output merged into a running one by the LSEs (below) */
} fa_buffer_op_kind;

/**
 * One step. MERGE: src is a block's output [b, n, h, d] (f32, f16 or bf16) and src_lse its LSE
 * [b, h, n] (float32); dst [b, n, h, d] and dst_lse [b, h, n] are the running output and LSE
 * (float32). Per row (z, i, h): lse = fa_softmax_merge_lse(dst_lse, src_lse, &w1, &w2)
 * (core/math/softmax.h), dst_lse = lse, dst[.., 0..d) = w1 * dst + w2 * src, element by element.
 */
typedef struct fa_buffer_op {
  int32_t kind; /* fa_buffer_op_kind */
  fa_device device;
  void *stream;
  size_t bytes;                       /* ALLOC */
  void **alloc_out;                   /* ALLOC: receives the pointer */
  void *ptr;                          /* FREE */
  float value;                        /* FILL */
  const fa_tensor *src, *dst;         /* COPY, ADD: src into dst; FILL: dst; MERGE: above */
  const fa_tensor *src_lse, *dst_lse; /* MERGE */
} fa_buffer_op;

typedef struct fa_plugin {
  uint32_t abi_version; /* FA_PLUGIN_ABI_VERSION the plugin was built for */
  uint32_t struct_size; /* sizeof(fa_plugin) it was built with */
  int32_t backend_id;   /* fa_backend_id */
  const char *name;
  /* Probes the runtime and devices once; must not fail hard (report through the struct). */
  void (*probe)(fa_plugin_probe *out);
  /* The one decide-function (see above). Pure: no allocation, no device work. */
  void (*decide)(const fa_request *req, fa_decision *out);
  /* Runs the request with the decision decide() gave. workspace has decision->workspace_bytes
   * bytes: the caller's (params->workspace) or, for host memory, one the core allocated for this
   * call. It is NULL when that is 0, and for device memory when the caller gave none: a device
   * backend then uses its own per-device, per-stream cache (freed by release). Errors set the
   * thread-local message through fa_core_set_error and return its status. */
  fa_status (*run)(const fa_request *req, const fa_decision *decision, void *workspace);
  /* Frees cached resources (fa_release). May be NULL. */
  void (*release)(void);
  /* fa_quantize: writes y (and descale) and names the kernel that ran in kernel[FA_KERNEL_LEN];
     or, before writing anything, returns FA_ERR_UNSUPPORTED with the reason (fa_core_set_error).
     NULL: the backend does not offer fa_quantize. */
  fa_status (*quantize)(const fa_quantize_request *req, char *kernel);
  /* One element-wise step of a ring over device tensors (fa_buffer_op above); FA_OK, or the
     error set (fa_core_set_error). NULL: the backend offers no ring over its memory. */
  fa_status (*buffer_op)(const fa_buffer_op *op);
} fa_plugin;

typedef const fa_plugin *(*fa_plugin_entry_fn)(uint32_t core_abi_version);

/* Defines a plugin's table and its exported entry point, which hands the table only to a core of
   the same plugin ABI. */
#define FA_PLUGIN_DEFINE(backend_id, name, probe, decide, run, release, quantize, buffer_op) \
  FA_API const fa_plugin *fa_plugin_entry(uint32_t core_abi_version) {                       \
    static const fa_plugin table = {FA_PLUGIN_ABI_VERSION,                                   \
                                    (uint32_t)sizeof(fa_plugin),                             \
                                    (backend_id),                                            \
                                    (name),                                                  \
                                    (probe),                                                 \
                                    (decide),                                                \
                                    (run),                                                   \
                                    (release),                                               \
                                    (quantize),                                              \
                                    (buffer_op)};                                            \
    return core_abi_version == FA_PLUGIN_ABI_VERSION ? &table : NULL;                        \
  }

/* --- services the core library exports to plugins (declared here, not in the public header) --- */

/* Records status and a printf-style message as this thread's last error; returns status. */
FA_API fa_status fa_core_set_error(fa_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Marks a decision unsupported with a printf-style reason (truncated to fit); for decide(). */
FA_API void fa_core_refuse(fa_decision *out, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Checks the values of a request's index tensors (cu_seqlens_q/k, seqused_k, block_table,
   kv.cache_seqlens) as the core checks host ones on every call: each that is in host memory
   (device.kind FA_DEVICE_CPU) is read. A device backend honouring params.check_indices passes a
   copy of the request whose index tensors are host copies of its device ones. FA_OK, or
   FA_ERR_INVALID_ARGUMENT naming the first bad value. */
FA_API fa_status fa_core_check_indices(const fa_request *req);

/* Starts a probe's answer: whether the backend can run, why not, how many devices; the device
   list empty for fa_probe_add_device. */
static inline void fa_probe_begin(fa_plugin_probe *out, int available, const char *reason,
                                  int32_t device_count) {
  out->available = available;
  snprintf(out->reason, sizeof out->reason, "%s", reason ? reason : "");
  out->device_count = device_count;
  out->devices[0] = '\0';
}

/* Appends one device's description to out->devices ("; " between devices), printf-style;
   what does not fit is cut. For probe(). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline void
fa_probe_add_device(fa_plugin_probe *out, const char *fmt, ...) {
  size_t used = strlen(out->devices);
  if (used + 1 >= sizeof out->devices) return;
  if (used > 0) used += (size_t)snprintf(out->devices + used, sizeof out->devices - used, "; ");
  if (used + 1 >= sizeof out->devices) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->devices + used, sizeof out->devices - used, fmt, ap);
  va_end(ap);
}

/* The run report's name of an fa_quantize kernel, the same form on every backend:
   "<backend>.quantize.<x dtype>.<y dtype>.hd<D>[.rotate][.per_tensor|.block<rows>|.per_head]". */
static inline void fa_quantize_kernel_name(const fa_quantize_request *req, const char *backend,
                                           char *kernel) {
  const fa_tensor *d = req->descale;
  char blocks[48] = "";
  if (d && d->shape[0] == 1 && d->shape[1] == 1 && d->shape[2] == 1)
    snprintf(blocks, sizeof blocks, ".per_tensor");
  else if (d && req->args->block_rows > 0)
    snprintf(blocks, sizeof blocks, ".block%lld", (long long)req->args->block_rows);
  else if (d)
    snprintf(blocks, sizeof blocks, ".per_head");
  snprintf(kernel, FA_KERNEL_LEN, "%s.quantize.%s.%s.hd%lld%s%s", backend,
           fa_dtype_name(req->x->dtype), fa_dtype_name(req->y->dtype), (long long)req->head_dim,
           req->args->rotate ? ".rotate" : "", blocks);
}

/* Gives t (its shape set) the contiguous row-major strides; returns the elements they span, each
   zero extent counted as 1. */
static inline int64_t fa_tensor_set_contiguous(fa_tensor *t) {
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    t->strides[i] = stride;
    stride *= t->shape[i] > 0 ? t->shape[i] : 1;
  }
  return stride;
}

/* Element pointer arithmetic shared by host backends. */
static inline void *fa_tensor_base(const fa_tensor *t) {
  /* A tensor without elements may have data NULL; arithmetic on a null pointer is undefined even
     with a zero offset, so NULL stays NULL (nothing is read through it). */
  return t->data ? (void *)((char *)t->data + t->byte_offset) : NULL;
}

#ifdef __cplusplus
}
#endif

#endif /* FA_CORE_PLUGIN_H */
