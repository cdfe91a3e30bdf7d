/*
 * flash_attn.h: the one public header of flashattn-c.
 *
 * Exact attention, softmax(Q·Kᵀ·scale)·V, forward and backward, computed the FlashAttention way
 * (tiles in fast memory, online softmax, logsumexp kept, scores recomputed in the backward pass) by
 * backend plugins: CPU (OpenMP), CUDA, HIP, OpenCL. Usable from C99/C11; no C++ needed.
 *
 * Conventions (fixed once, identical on every backend):
 *   - q   [batch, seqlen_q, heads_q,  head_dim]
 *     k   [batch, seqlen_k, heads_kv, head_dim]
 *     v   [batch, seqlen_k, heads_kv, head_dim_v]
 *     out [batch, seqlen_q, heads_q,  head_dim_v]
 *     lse [batch, heads_q, seqlen_q], float32, natural logarithm. With packed (varlen) q, lse is
 *     either unpadded [heads_q, total_q] or padded [batch, heads_q, max_seqlen_q] (rows past a
 *     sequence's end are not written): the shape passed chooses.
 *     heads_q must be a multiple of heads_kv (MHA, GQA, MQA): query head h reads KV head
 *     h / (heads_q / heads_kv).
 *   - Strides are in elements and may be anything non-negative that does not make two output
 *     elements alias; the last dimension need not be contiguous.
 *   - Causal masking is bottom-right aligned by default (query row i sees keys
 *     j <= i + seqlen_k - seqlen_q, as FlashAttention >= 2.1); top-left alignment (j <= i) is
 *     available through fa_params.causal_align.
 *   - A query row that sees no key at all gives output 0, LSE -inf and zero gradients, never NaN.
 *   - Empty problems are defined: batch 0 or seqlen_q 0 succeed and write nothing (dk and dv of a
 *     backward are then zero); seqlen_k 0 makes every row one that sees no key (output 0, LSE
 *     -inf, dq 0). A tensor without elements may have data NULL. heads_q and heads_kv must be >= 1.
 *     The 2^63-byte bound below applies to empty tensors too, each zero extent counted as 1.
 *   - Non-finite inputs propagate, never crash: a NaN in a query row makes that row's output and
 *     LSE NaN and leaves every other row as it would be; a score of +Inf (Inf in q or k) makes its
 *     row NaN, a score of -Inf acts as a masked key; Inf or NaN in v at a key reaches the rows that
 *     see that key and, through 0 * Inf in the tile product, possibly other rows of the query tiles
 *     that load its key tile (as FlashAttention), never rows elsewhere.
 *   - Sizes: every tensor's shape and strides must address less than 2^63 bytes (64-bit byte
 *     counts); larger ones are refused with FA_ERR_INVALID_ARGUMENT before anything is allocated.
 *     Everything else is computed in 64 bits: tensors of 2^31 bytes and more are fine.
 *   - With cu_seqlens, max_seqlen_q/k larger than the packed total only bounds an empty grid (it is
 *     taken as the total; a padded lse still has max_seqlen_q columns). With a block_table,
 *     max_seqlen_k may not exceed the keys a table row addresses (block_table.shape[1] * page).
 *     A window side at least seqlen_q + seqlen_k wide is the unbounded side (-1).
 *   - Index tensors (cu_seqlens_q/k, seqused_k, block_table, kv.cache_seqlens) in host memory are
 *     checked on every call: offsets start at 0, never decrease, stay within the packed total and
 *     max_seqlen; pages within [0, k.shape[0]); used keys within a sequence's keys; cache lengths
 *     plus new tokens within the cache (and the rotary tables). A bad value is
 *     FA_ERR_INVALID_ARGUMENT naming it. Index tensors in device memory are not read by the host
 *     unless params.check_indices is set, which copies them to the host and checks them the same
 *     way before anything is written (a synchronisation of the stream; FA_ERR_UNSUPPORTED while
 *     the stream captures a graph). Unchecked, an out-of-range device value gives unspecified
 *     results for its sequence and never an access outside the tensors (docs/backends.md).
 *
 * Errors: every call returns an fa_status; on failure fa_last_error() gives a message naming the
 * argument and the constraint. No call aborts, prints, or writes outside its outputs on bad input.
 * On failure the outputs are left untouched whenever the failure is found before computing (all
 * argument and support checks are done before anything is written).
 *
 * Thread safety: every function may be called from any thread concurrently. Plugins are loaded
 * lazily, once, on the first call that needs the registry.
 *
 * Memory: a call that cannot allocate returns FA_ERR_OUT_OF_MEMORY, writes no output and keeps
 * nothing allocated. A plugin whose loading fails (dlopen, for lack of memory or any other reason)
 * stays unavailable for the process, with dlopen's reason in fa_backend_info(); calls that needed
 * it return FA_ERR_BACKEND_UNAVAILABLE (or fall back without strict). See docs/RELIABILITY.md.
 */
#ifndef FLASH_ATTN_H
#define FLASH_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FA_API __declspec(dllimport)
#elif defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 3
#define FA_VERSION_PATCH 0

/** Status of every call. FA_OK is 0; every other value is an error. */
typedef enum fa_status {
  FA_OK = 0,
  FA_ERR_INVALID_ARGUMENT = 1,    /**< an argument breaks a documented constraint */
  FA_ERR_UNSUPPORTED = 2,         /**< valid, but no (allowed) backend can serve the request */
  FA_ERR_OUT_OF_MEMORY = 3,       /**< an allocation failed; nothing was written */
  FA_ERR_BACKEND_UNAVAILABLE = 4, /**< the requested backend is not built or cannot run here */
  FA_ERR_BACKEND_FAILURE = 5,     /**< the backend's runtime reported an error while running */
  FA_ERR_INTERNAL = 6             /**< a bug in this library: please report it */
} fa_status;

/**
 * Element types. Storage types of q/k/v/out/grads are F32, F16 and BF16; accumulation is fp32.
 * The FP8 types are inputs of fa_forward only (q, k, v, with descales; out f16 or bf16) and
 * fa_quantize's output; docs/fp8.md. Their encodings are the OCP 8-bit floating point formats.
 */
typedef enum fa_dtype {
  FA_DTYPE_INVALID = 0,
  FA_F32 = 1,
  FA_F16 = 2,
  FA_BF16 = 3,
  FA_I32 = 4,    /**< index tensors: cu_seqlens, seqused_k, block_table */
  FA_F8E4M3 = 5, /**< FP8 E4M3 ("e4m3fn"): no infinities, largest finite 448, NaN 0x7f/0xff */
  FA_F8E5M2 = 6  /**< FP8 E5M2: IEEE-like, largest finite 57344 */
} fa_dtype;

/** Where a tensor's memory lives; the kind decides which backends may touch it. */
typedef enum fa_device_kind {
  FA_DEVICE_INVALID = 0,
  FA_DEVICE_CPU = 1,   /**< host pointer */
  FA_DEVICE_CUDA = 2,  /**< CUDA device pointer */
  FA_DEVICE_HIP = 3,   /**< HIP device pointer */
  FA_DEVICE_OPENCL = 4 /**< cl_mem handle in data, element offset through byte_offset */
} fa_device_kind;

typedef struct fa_device {
  fa_device_kind kind;
  int32_t id; /**< device ordinal for CUDA/HIP/OpenCL; 0 for CPU */
} fa_device;

#define FA_MAX_DIMS 4

/** A strided view of memory. shape and strides hold ndim entries; strides are in elements. */
typedef struct fa_tensor {
  void *data;           /**< base pointer (or cl_mem for OpenCL) */
  uint64_t byte_offset; /**< added to data before indexing (DLPack's byte_offset) */
  fa_device device;
  fa_dtype dtype;
  int32_t ndim;
  int64_t shape[FA_MAX_DIMS];
  int64_t strides[FA_MAX_DIMS];
} fa_tensor;

/** Backends a caller may ask for. AUTO picks per call the best one that owns the memory. */
typedef enum fa_backend_id {
  FA_BACKEND_AUTO = 0,
  FA_BACKEND_CPU = 1,
  FA_BACKEND_CUDA = 2,
  FA_BACKEND_HIP = 3,
  FA_BACKEND_OPENCL = 4,
  FA_BACKEND_COUNT_ = 5 /**< number of ids; not a backend */
} fa_backend_id;

/** Causal alignment when seqlen_q != seqlen_k. */
typedef enum fa_causal_align {
  FA_CAUSAL_BOTTOM_RIGHT = 0, /**< row i sees keys j <= i + seqlen_k - seqlen_q (default) */
  FA_CAUSAL_TOP_LEFT = 1      /**< row i sees keys j <= i */
} fa_causal_align;

/**
 * Options of an attention call. Zero-initialised (after fa_params_init) means plain attention with
 * scale 1/sqrt(head_dim) on the AUTO backend. A field a backend cannot honour is refused with
 * FA_ERR_UNSUPPORTED naming it, never ignored. struct_size lets later versions add fields without
 * breaking callers built against this header: set it with fa_params_init or FA_PARAMS_INIT.
 */
typedef struct fa_params {
  size_t struct_size;

  /* --- the attention function --- */
  float softmax_scale;    /**< 0 means 1/sqrt(head_dim_qk); must be finite and >= 0 */
  int32_t causal;         /**< non-zero: causal mask */
  int32_t causal_align;   /**< fa_causal_align */
  int32_t window_enabled; /**< non-zero: sliding window of window_left/right keys */
  int64_t window_left;  /**< keys to the left of the (aligned) diagonal, inclusive; -1 unbounded */
  int64_t window_right; /**< keys to the right, inclusive; -1 unbounded */
  float softcap;        /**< > 0: scores become tanh(s/softcap)·softcap before softmax */
  const fa_tensor *alibi_slopes; /**< float32 [heads_q] or [batch, heads_q]; NULL: none */

  /* --- dropout (Philox counter-based RNG, identical masks on every backend) --- */
  float dropout_p; /**< probability of dropping, in [0, 1) */
  uint64_t dropout_seed;
  uint64_t dropout_offset;

  /* --- variable length and paged KV --- */
  const fa_tensor *cu_seqlens_q; /**< int32 [batch+1]: packed q/out are [total_q, heads, dim] */
  const fa_tensor *cu_seqlens_k; /**< int32 [batch+1]: packed k/v are [total_k, heads, dim] */
  const fa_tensor *seqused_k;    /**< int32 [batch]: keys actually used per sequence */
  int64_t max_seqlen_q;
  int64_t max_seqlen_k;
  const fa_tensor
      *block_table;  /**< int32 [batch, max_blocks]: k/v are [blocks, page, heads, dim] */
  int64_t page_size; /**< keys per page when block_table is set */

  /* --- execution --- */
  int32_t num_splits;    /**< split-KV chunks; 0 lets the backend choose, 1 disables */
  int32_t deterministic; /**< non-zero: bitwise identical results across runs, or refused */
  int32_t return_lse;    /**< non-zero: the lse argument is required (an error if NULL) */
  void *stream;          /**< cudaStream_t / hipStream_t / cl_command_queue; NULL = default. The CPU
                             backend runs on the calling thread and refuses a stream. */
  int32_t backend;       /**< fa_backend_id; AUTO = best available */
  int32_t strict;        /**< non-zero: never fall back; refuse with the reason instead */
  const char
      *kernel_family;    /**< NULL = backend's choice; else e.g. "fa2", "fa3" (backend-specific) */
  void *workspace;       /**< caller-owned scratch in the tensors' memory (the device's for a
                             device backend; a bare address the library cannot check), or NULL to
                             let the library allocate: for host tensors a block kept per calling
                             thread and reused by its next calls (up to 256 MiB; freed at the
                             thread's exit or by fa_release), for device tensors the backend's
                             per-stream cache */
  size_t workspace_size; /**< bytes at workspace; see fa_forward_workspace_size */

  /* --- since 0.2 --- */
  int32_t check_indices; /**< non-zero: index tensors in device memory are read back and checked
                             (see "Index tensors" above); costs a copy and a synchronisation */

  /* --- since 0.3: FP8 inputs (q, k, v of dtype FA_F8E4M3 / FA_F8E5M2; docs/fp8.md) --- */
  const fa_tensor *q_descale; /**< float32 [batch or 1, heads_q or 1, blocks]: an element of q
                                   stands for its stored value times the descale of its (batch,
                                   head, row / descale_rows_q); NULL: 1. FP8 q only */
  const fa_tensor *k_descale; /**< float32 [batch or 1, heads_kv or 1, blocks], rows of
                                   descale_rows_k keys; NULL: 1. FP8 k only */
  const fa_tensor *v_descale; /**< as k_descale, for v */
  int64_t descale_rows_q;     /**< query rows per descale block; 0: one block per sequence */
  int64_t descale_rows_k;     /**< key rows per descale block of k and v; 0: one block */
} fa_params;

/** Sets every field to its default: zero, except struct_size. */
FA_API void fa_params_init(fa_params *params);
#define FA_PARAMS_INIT \
  { sizeof(fa_params) }

#define FA_NAME_LEN 32
#define FA_KERNEL_LEN 96
#define FA_REASON_LEN 1024

/**
 * What ran (or, from fa_plan, what would run). Set struct_size with fa_run_info_init.
 * `rejected` lists every backend tried before the chosen one and why it was passed over, as
 * "cuda: not built (no CUDA toolkit at configure time); opencl: ...". fell_back is non-zero when
 * the backend that ran is not the first one AUTO would have preferred.
 */
typedef struct fa_run_info {
  size_t struct_size;
  int32_t backend;                /**< fa_backend_id that ran */
  char backend_name[FA_NAME_LEN]; /**< "cpu", "cuda", ... */
  fa_device device;
  char kernel[FA_KERNEL_LEN]; /**< e.g. "cpu.flash.fwd.bf16.hd128.causal" */
  int32_t tile_m;             /**< query rows per tile */
  int32_t tile_n;             /**< key rows per tile */
  int32_t num_splits;         /**< split-KV chunks used (1 = none) */
  int32_t deterministic;      /**< non-zero when the kernel that ran is deterministic */
  size_t workspace_bytes;     /**< scratch the call needs */
  int32_t fell_back;
  char rejected[FA_REASON_LEN];
} fa_run_info;

FA_API void fa_run_info_init(fa_run_info *info);

/* ---------------------------------------------------------------------------------------------
 * Attention calls
 * ------------------------------------------------------------------------------------------- */

/**
 * Forward pass: out = softmax(q·kᵀ·scale + mask)·v, and lse = log(sum(exp(scores))) per query row.
 * @param params  options; NULL means defaults (as fa_params_init)
 * @param q,k,v   inputs as in the conventions above; same dtype and device. FP8 (FA_F8E4M3 or
 *                FA_F8E5M2, all three the same) stands for stored value x params' descale; then
 *                the tensors are dense (no cu_seqlens or block_table) and the call is forward only
 * @param out     output, same dtype and device as q; for FP8 inputs f16 or bf16
 * @param lse     optional float32 [batch, heads_q, seqlen_q] output (required by fa_backward)
 * @param info    optional; filled with what ran (backend, kernel, tiles, rejected candidates)
 */
FA_API fa_status fa_forward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                            const fa_tensor *v, fa_tensor *out, fa_tensor *lse, fa_run_info *info);

/**
 * Backward pass: given dout, the forward's out and lse, computes dq, dk, dv (same shapes, dtype
 * and device as q, k, v). Scores are recomputed from q, k and lse; params must match the forward
 * call's (same mask, scale, dropout seed and offset).
 */
FA_API fa_status fa_backward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                             const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse,
                             const fa_tensor *dout, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv,
                             fa_run_info *info);

/**
 * Arguments of fa_forward_kvcache beyond those of fa_forward. Set struct_size with
 * fa_kvcache_args_init. All tensors live on q's device.
 */
typedef struct fa_kvcache_args {
  size_t struct_size;
  const fa_tensor *k_new; /**< optional [batch, seqlen_new, heads_kv, head_dim]: appended */
  const fa_tensor *v_new; /**< optional [batch, seqlen_new, heads_kv, head_dim_v]; with k_new */
  const fa_tensor *cache_seqlens; /**< int32 [batch]: tokens already in the cache (required) */
  const fa_tensor *rotary_cos;    /**< optional [max_position, rotary_dim / 2], f32 or q's dtype */
  const fa_tensor *rotary_sin;    /**< as rotary_cos; both or neither */
  int32_t
      rotary_interleaved; /**< non-zero: rotate pairs (0,1),(2,3)...; else (i, i + rotary_dim/2) */
} fa_kvcache_args;

FA_API void fa_kvcache_args_init(fa_kvcache_args *args);

/**
 * Decoding / incremental attention over a KV cache (FlashAttention's flash_attn_with_kvcache).
 * k_cache, v_cache: [batch, seqlen_cache, heads_kv, dim], or pages [num_blocks, page_size,
 * heads_kv, dim] with params->block_table. If kv->k_new is given, its tokens are first written into
 * the cache at positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 (rotated by the
 * rotary tables when given); then q attends to keys [0, cache_seqlens[b] + seqlen_new) of sequence
 * b, causal masks aligned bottom-right to that length. With rotary tables, q is rotated too: at
 * positions cache_seqlens[b] + t when causal or windowed, else all at cache_seqlens[b] (as
 * FlashAttention). The cache is the only input written; q is not modified (rotation happens in
 * scratch). No backward exists for this call.
 */
FA_API fa_status fa_forward_kvcache(const fa_params *params, const fa_tensor *q, fa_tensor *k_cache,
                                    fa_tensor *v_cache, const fa_kvcache_args *kv, fa_tensor *out,
                                    fa_tensor *lse, fa_run_info *info);

/**
 * What fa_forward would run for these arguments (and why others were passed over), without
 * running it. Fails exactly when fa_forward would fail before computing, with the same message.
 */
FA_API fa_status fa_plan_forward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                                 const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse,
                                 fa_run_info *plan);

/** As fa_plan_forward, for fa_forward_kvcache. */
FA_API fa_status fa_plan_forward_kvcache(const fa_params *params, const fa_tensor *q,
                                         const fa_tensor *k_cache, const fa_tensor *v_cache,
                                         const fa_kvcache_args *kv, const fa_tensor *out,
                                         const fa_tensor *lse, fa_run_info *plan);

/** As fa_plan_forward, for fa_backward. */
FA_API fa_status fa_plan_backward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                                  const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse,
                                  const fa_tensor *dout, const fa_tensor *dq, const fa_tensor *dk,
                                  const fa_tensor *dv, fa_run_info *plan);

/**
 * Bytes of scratch fa_forward needs for these arguments on the backend it would pick. A caller
 * that passes params->workspace of at least this size makes the call allocate nothing.
 */
FA_API fa_status fa_forward_workspace_size(const fa_params *params, const fa_tensor *q,
                                           const fa_tensor *k, const fa_tensor *v,
                                           const fa_tensor *out, const fa_tensor *lse,
                                           size_t *bytes);

/** As fa_forward_workspace_size, for fa_backward. */
FA_API fa_status fa_backward_workspace_size(const fa_params *params, const fa_tensor *q,
                                            const fa_tensor *k, const fa_tensor *v,
                                            const fa_tensor *out, const fa_tensor *lse,
                                            const fa_tensor *dout, const fa_tensor *dq,
                                            const fa_tensor *dk, const fa_tensor *dv,
                                            size_t *bytes);

/* ---------------------------------------------------------------------------------------------
 * FP8 quantization with incoherent processing (docs/fp8.md)
 * ------------------------------------------------------------------------------------------- */

/** Options of fa_quantize. Set struct_size with fa_quantize_args_init. */
typedef struct fa_quantize_args {
  size_t struct_size;
  int64_t block_rows;   /**< rows (tokens) per descale block: descale.shape[2] must be
                             ceil(seqlen / block_rows); 0: one block per sequence */
  int32_t rotate;       /**< non-zero: each row (a head's vector) is multiplied first by the
                             random-signed Hadamard matrix of rotate_seed (head_dim a power of 2) */
  uint64_t rotate_seed; /**< the signs of the rotation; the same seed gives the same matrix on
                             every backend, so rotate q and k with one seed */
  int32_t backend;      /**< fa_backend_id; AUTO: the backends that own x's memory, in order */
  int32_t strict;       /**< non-zero: only the first candidate backend */
  void *stream;         /**< as fa_params.stream */
} fa_quantize_args;

/** Sets every field of args to its default (zero: no rotation, one block, AUTO backend), except
    struct_size. */
FA_API void fa_quantize_args_init(fa_quantize_args *args);

/**
 * Quantizes x to FP8 with a scale per block of rows (FlashAttention-3's block quantization),
 * optionally after the incoherent processing rotation: y = x·M with M = diag(s)·H/sqrt(d), H the
 * d x d Sylvester Hadamard matrix and s the seeded random signs (docs/fp8.md gives the exact rule).
 * Since M is orthogonal, rotating q and k with the same seed leaves q·kᵀ unchanged while outliers
 * spread over all channels. Each descale element is amax / (largest finite FP8 value) over the
 * rotated elements it covers (its batch, head and block of rows; a dimension of size 1 in descale
 * covers every batch or head), or 1 where that is 0; y = round-to-nearest-even(x·M / descale),
 * saturated to the finite range (NaN stays NaN). fa_forward takes y with descale as q_descale (or
 * k_descale, v_descale) and block_rows as descale_rows_q (descale_rows_k).
 * With y of dtype f32, f16 or bf16, the call only rotates (descale must be NULL, block_rows 0).
 * @param args     options; NULL: defaults (no rotation, one block, AUTO backend)
 * @param x        [batch, seqlen, heads, head_dim], f32, f16 or bf16
 * @param y        same shape and device as x; FA_F8E4M3 or FA_F8E5M2 (or a float type, see above)
 * @param descale  float32 [batch or 1, heads or 1, blocks] on x's device; required for FP8 y
 * @param info     optional; filled with what ran
 */
FA_API fa_status fa_quantize(const fa_quantize_args *args, const fa_tensor *x, fa_tensor *y,
                             fa_tensor *descale, fa_run_info *info);

/* ---------------------------------------------------------------------------------------------
 * Backends
 * ------------------------------------------------------------------------------------------- */

/** One backend the library knows, loaded or not. Set struct_size before the call. */
typedef struct fa_backend_desc {
  size_t struct_size;
  int32_t id;             /**< fa_backend_id */
  char name[FA_NAME_LEN]; /**< "cpu", "cuda", "hip", "opencl" */
  int32_t available;      /**< non-zero when it can run calls now */
  char
      reason[FA_REASON_LEN]; /**< when unavailable: exactly why (not built, runtime missing, ...) */
  char plugin_path[512];     /**< the shared object loaded or looked for */
  int32_t device_count;
  char devices[256];         /**< e.g. "cpu0: 2 threads, avx512f" */
  char arch[64];             /**< e.g. "x86_64", "sm_90" */
  char kernel_families[128]; /**< e.g. "flash" or "fa2,fa3" */
  char dtypes[64];           /**< e.g. "f32,f16,bf16" */
  char features[512];        /**< what decide() accepts, probed: "fwd,bwd,causal,lse,gqa,...";
                                  fp8: e4m3 q/k/v in fa_forward (docs/fp8.md);
                                  hd256 / hd512 (head dims above 128 / 256) and varlen
                                  (cu_seqlens, seqused_k) are listed only when every pass
                                  listed (fwd, and bwd if listed) runs them */
  char unsupported[2048];    /**< features probed and refused, each with decide()'s reason */
} fa_backend_desc;

/**
 * Describes every backend the library knows (loading plugins on first use).
 * @param out      array of capacity descriptors, each with struct_size set (fa_backend_desc_init)
 * @param capacity number of descriptors out has room for
 * @param count    set to the number of backends known (may exceed capacity; then only capacity
 *                 entries are written)
 */
FA_API fa_status fa_backend_info(fa_backend_desc *out, int32_t capacity, int32_t *count);

FA_API void fa_backend_desc_init(fa_backend_desc *desc);

/** Name of a backend id ("auto", "cpu", ...) or NULL for an unknown id. */
FA_API const char *fa_backend_name(int32_t id);

/** Parses "auto", "cpu", "cuda", "hip", "opencl"; returns FA_ERR_INVALID_ARGUMENT otherwise. */
FA_API fa_status fa_backend_from_name(const char *name, int32_t *id);

/**
 * Frees every workspace and cached resource the backends hold, and every host workspace the
 * library keeps for calls made without params.workspace (except one a call on another thread is
 * using at that moment). Plugins stay loaded.
 */
FA_API void fa_release(void);

/* ---------------------------------------------------------------------------------------------
 * Context parallelism: ring attention over several processes (docs/ring.md)
 * ------------------------------------------------------------------------------------------- */

/** How ranks exchange K/V blocks. MPI and NCCL are plugins loaded at run time (libfa_<name>.so). */
typedef enum fa_transport_kind {
  FA_TRANSPORT_INVALID = 0,
  FA_TRANSPORT_SELF = 1,  /**< one rank, no communication library: the ring run on one process
                               (host or device tensors) */
  FA_TRANSPORT_MPI = 2,   /**< host tensors between processes; comm is the address of an MPI_Comm */
  FA_TRANSPORT_NCCL = 3,  /**< CUDA tensors between GPUs; comm is the address of an ncclComm_t,
                               the ring's work is enqueued on params.stream */
  FA_TRANSPORT_COUNT_ = 4 /**< number of kinds; not a transport */
} fa_transport_kind;

/** Which part of the global sequence a rank holds. The global sequence is world * n tokens for
    local shards of n tokens. */
typedef enum fa_ring_layout {
  FA_RING_CONTIGUOUS = 0, /**< rank r holds tokens [r*n, (r+1)*n) */
  FA_RING_ZIGZAG = 1      /**< n even, chunks of c = n/2 tokens: rank r holds chunk r then chunk
                               2*world-1-r, so with a causal mask every rank does the same work */
} fa_ring_layout;

/**
 * The communicator of a ring call. Set struct_size with fa_ring_args_init. Every rank of the
 * communicator calls the same ring function with the same params, layout and shapes.
 */
typedef struct fa_ring_args {
  size_t struct_size;
  int32_t transport; /**< fa_transport_kind */
  void *comm;        /**< FA_TRANSPORT_MPI: the address of the caller's MPI_Comm (MPI_Comm *);
                          FA_TRANSPORT_NCCL: the address of the caller's ncclComm_t;
                          FA_TRANSPORT_SELF: NULL */
  int32_t layout;    /**< fa_ring_layout */
  int32_t world;     /**< 0: rank and world come from the communicator; else both are checked
                          against it (FA_ERR_INVALID_ARGUMENT when they differ) */
  int32_t rank;      /**< with world > 0: this process's rank */
} fa_ring_args;

FA_API void fa_ring_args_init(fa_ring_args *ring);

/**
 * Forward pass over a sequence sharded across the ranks of ring->comm (ring attention). Each rank
 * passes its local shards, shaped as fa_forward's tensors with seqlen_q and seqlen_k the local
 * lengths (every rank the same): the K/V shards travel around the ring, each step's block is
 * computed by fa_forward and merged into the running output by its LSE (core/math/softmax.h), and
 * the next block's transfer overlaps the current block's compute. out and lse are the rows of the
 * whole-sequence attention that this rank's queries own, as fa_forward on the whole sequence would
 * give them (up to the rounding of the merge).
 *
 * The call is collective: every rank checks its arguments, then the ranks agree (one small
 * reduction) before any output is written, so a refusal on one rank is returned on every rank
 * (the others' message says so). Host tensors: blocks run in float32 (bf16/f16 inputs are widened
 * exactly; outputs rounded once). CUDA tensors (the NCCL or self transport): blocks run in the
 * inputs' dtype on the GPU and their outputs and gradients sum in float32 there; every step,
 * transfers included, is enqueued on params.stream and the call returns without waiting for it,
 * as fa_forward does. With a causal mask, seqlen_q must equal seqlen_k (self-attention
 * shards; the two causal alignments coincide). A sliding window (equal local lengths too) counts
 * its keys in global positions, and so do dropout (the mask of fa_forward on the whole sequence,
 * drawn at the tokens' global positions) and ALiBi (distances between global positions). Refused
 * with FA_ERR_UNSUPPORTED, naming the field: varlen, seqused_k, paged KV, params.workspace, and
 * tensors in memory the transport does not carry (MPI: host; NCCL: CUDA) or whose backend offers
 * no ring (HIP, OpenCL), and an NCCL ring on a stream capturing a CUDA graph (its agreement waits
 * on the host).
 * Deterministic: the summation order is fixed by the ring (block i merged at step i), so with
 * params.deterministic the results are bitwise reproducible for a given world size.
 * @param params  as fa_forward's
 * @param ring    the communicator and layout
 * @param q,k,v   this rank's shards: [batch, seqlen, heads, dim] with the local seqlen
 * @param out     this rank's rows of the output, shaped as q (head_dim_v)
 * @param lse     optional float32 [batch, heads_q, seqlen_q]: this rank's rows of the global LSE
 *                (required by fa_ring_backward)
 * @param info    optional; the run report of the diagonal block's fa_forward call
 */
FA_API fa_status fa_ring_forward(const fa_params *params, const fa_ring_args *ring,
                                 const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                 fa_tensor *out, fa_tensor *lse, fa_run_info *info);

/**
 * Backward pass of fa_ring_forward over the same shards: out and lse are this rank's rows of
 * fa_ring_forward's results (the global LSE makes every block's backward exact). dq accumulates
 * on its rank; dk and dv accumulate (in float32) as they travel around the ring with their K/V
 * blocks and return to the rank that owns them. Same rules and refusals as fa_ring_forward.
 * @param params         as fa_ring_forward's (the same mask and scale)
 * @param ring           the communicator and layout, as fa_ring_forward's
 * @param q,k,v          this rank's shards, as given to fa_ring_forward
 * @param out,lse        fa_ring_forward's results on this rank (lse required)
 * @param dout           the gradient of out on this rank
 * @param dq,dk,dv       the gradients of this rank's shards of q, k and v
 * @param info           optional; the run report of the diagonal block's fa_backward call
 */
FA_API fa_status fa_ring_backward(const fa_params *params, const fa_ring_args *ring,
                                  const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                                  const fa_tensor *out, const fa_tensor *lse, const fa_tensor *dout,
                                  fa_tensor *dq, fa_tensor *dk, fa_tensor *dv, fa_run_info *info);

/** One transport the library knows, loaded or not. Set struct_size with fa_transport_desc_init. */
typedef struct fa_transport_desc {
  size_t struct_size;
  int32_t kind;               /**< fa_transport_kind */
  char name[FA_NAME_LEN];     /**< "self", "mpi", "nccl" */
  int32_t available;          /**< non-zero when ring calls can use it now */
  char reason[FA_REASON_LEN]; /**< when unavailable: exactly why (not built, plugin missing, ...) */
  char plugin_path[512];      /**< the shared object loaded or looked for ("" for self) */
  int32_t memory;             /**< fa_device_kind of the tensors it carries */
  char runtime[256];          /**< the communication library, e.g. "Open MPI v4.1.4" */
} fa_transport_desc;

FA_API void fa_transport_desc_init(fa_transport_desc *desc);

/**
 * Describes every transport the library knows (loading their plugins on first use), as
 * fa_backend_info does for backends.
 * @param out      array of capacity descriptors, each with struct_size set
 * @param capacity number of descriptors out has room for
 * @param count    set to the number of transports known
 */
FA_API fa_status fa_transport_info(fa_transport_desc *out, int32_t capacity, int32_t *count);

/* ---------------------------------------------------------------------------------------------
 * Errors and version
 * ------------------------------------------------------------------------------------------- */

/** The message of this thread's last failed call ("" if none). Valid until the next call. */
FA_API const char *fa_last_error(void);

/** "f32", "f16", "bf16", "i32", "f8e4m3", "f8e5m2", or "invalid" for a value that is not an
    fa_dtype. */
FA_API const char *fa_dtype_name(int32_t dtype);

/** Bytes of one element of dtype; 0 for a value that is not an fa_dtype. */
FA_API size_t fa_dtype_size(int32_t dtype);

/** "cpu", "cuda", "hip", "opencl", or "invalid" for a value that is not an fa_device_kind. */
FA_API const char *fa_device_kind_name(int32_t kind);

/** A short constant name for a status ("FA_ERR_UNSUPPORTED"). */
FA_API const char *fa_status_string(fa_status status);

/** The library's version as "major.minor.patch"; optionally each part. */
FA_API const char *fa_version(int *major, int *minor, int *patch);

#ifdef __cplusplus
}
#endif

#endif /* FLASH_ATTN_H */
