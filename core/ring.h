/*
 * ring.h: what the files of the ring (context parallelism) share: the transports' table
 * (transports.c), the block each ring step computes (ring_plan.c), the buffers and element-wise
 * steps on host or device memory (ring_mem.c, ring_tensor.c), and the two passes (ring_forward.c,
 * ring_backward.c) behind core/ring.c's entry points.
 */
#ifndef FA_CORE_RING_H
#define FA_CORE_RING_H

#include "internal.h"
#include "transport.h"

/* transports.c: one slot per fa_transport_kind, loaded once; read-only afterwards. */
typedef struct fa_transport_slot {
  int32_t kind;
  const char *name;
  fa_device_kind memory;   /* the memory its exchanges carry */
  const fa_transport *ops; /* NULL when unavailable */
  fa_transport_probe probe;
  char reason[FA_REASON_LEN];
  char path[512];
} fa_transport_slot;

/* The slot of a transport kind (loading the plugins on first use), or NULL for a value that is not
   a transport. */
const fa_transport_slot *fa_transport_slot_of(int32_t kind);

/* ring_plan.c: the attention blocks a ring step computes. At step t rank `rank` holds the K/V
   shard of rank (rank - t) mod world; a block is rows [q_row0, q_row0 + q_rows) of the local
   queries against rows [k_row0, k_row0 + k_rows) of that shard, causal (the diagonal) or not, or
   (window) under a band: top-left aligned, row i sees the block's keys i - left .. i + right (-1:
   unbounded). q_rows == 0: nothing of that shard is seen (it lies in the future). q_pos, k_pos:
   the global positions of the block's first row and key (set where fa_ring_positioned). */
typedef struct fa_ring_block {
  int64_t q_row0, q_rows, k_row0, k_rows;
  int32_t causal;
  int32_t window;
  int64_t left, right;
  int64_t q_pos, k_pos;
} fa_ring_block;

/* Whether the blocks need their tokens' global positions: dropout draws and ALiBi's distances
   depend on them. */
int fa_ring_positioned(const fa_params *p);
/* Whether a step's blocks are chunk pairs (below): under a window, or where fa_ring_positioned. */
int fa_ring_chunk_pairs(const fa_params *p);

/* A step's blocks: one without a window, dropout or ALiBi; with any of them, a block per pair of a
   local query chunk and a chunk of the shard (the zig-zag layout's two chunks each: four at most)
   that sees any key, each chunk a run of consecutive global positions. */
#define FA_RING_MAX_BLOCKS 4
typedef struct fa_ring_step {
  int32_t n;
  fa_ring_block b[FA_RING_MAX_BLOCKS];
} fa_ring_step;

fa_ring_block fa_ring_plan_block(int32_t layout, int32_t causal, int32_t rank, int32_t src,
                                 int64_t seqlen_q, int64_t seqlen_k);
/* The blocks of step src under params p's mask (a window or not), local shards of n tokens. */
void fa_ring_plan_step(const fa_params *p, int32_t layout, int32_t rank, int32_t src, int32_t world,
                       int64_t seqlen_q, int64_t seqlen_k, fa_ring_step *step);
/* p restricted to block blk: its causal flag, or its band as a top-left window. */
fa_params fa_ring_block_params(const fa_params *p, const fa_ring_block *blk);

/* ring_mem.c: where a call's buffers live and who runs its element-wise steps: the host (plugin
   NULL; blocks in float32) or the device backend that owns the shards' memory (its buffer_op;
   blocks in the inputs' dtype), every step on stream (params.stream). */
typedef struct fa_ring_mem {
  fa_device device;
  void *stream;
  const fa_plugin *plugin;
  fa_dtype block_dtype; /* what the block calls compute in and write */
} fa_ring_mem;

/* Finds who runs the steps for the shards of r; FA_ERR_UNSUPPORTED naming the memory when no
   backend offers them. */
fa_status fa_ring_mem_open(fa_ring_mem *m, const fa_request *r);
/* n elements of size bytes (at least one byte: an empty tensor still gets a pointer). */
fa_status fa_ring_mem_alloc(const fa_ring_mem *m, int64_t n, size_t size, void **out);
/* A pass's buffers: each wanted one allocated as fa_ring_mem_alloc does, in order, until one
   fails (those allocated stay for the pass's free). */
typedef struct fa_ring_need {
  void **p;
  int64_t n;
  size_t size;
  int want;
} fa_ring_need;
fa_status fa_ring_mem_alloc_all(const fa_ring_mem *m, const fa_ring_need *need, size_t count);
void fa_ring_mem_free(const fa_ring_mem *m, void *p);
/* dst (float32) = value; dst = src rounded to dst's dtype; dst (float32) += src; and the merge of
   a block's output src [b, n, h, d] and LSE src_lse [b, h, n] into the running dst and dst_lse
   (float32) by core/math/softmax.h's rule. Any strides; src and dst of one shape. */
fa_status fa_ring_fill(const fa_ring_mem *m, const fa_tensor *dst, float value);
fa_status fa_ring_copy(const fa_ring_mem *m, const fa_tensor *src, const fa_tensor *dst);
fa_status fa_ring_add(const fa_ring_mem *m, const fa_tensor *src, const fa_tensor *dst);
fa_status fa_ring_merge(const fa_ring_mem *m, const fa_tensor *src, const fa_tensor *src_lse,
                        const fa_tensor *dst, const fa_tensor *dst_lse);

/* ring_tensor.c: the ring's tensors, and the steps above on host memory. */

/* A contiguous fa_tensor over data in m's memory. */
fa_tensor fa_ring_view(const fa_ring_mem *m, void *data, fa_dtype dtype, int ndim,
                       const int64_t *shape);

/* A shard's shapes: q, k, v, out [batch, rows, heads, dim], lse [batch, heads_q, rows]; and their
   element counts. */
typedef struct fa_ring_shapes {
  int64_t q[4], k[4], v[4], o[4], lse[3];
  int64_t nq, nk, nv, no, nlse;
} fa_ring_shapes;
void fa_ring_shapes_of(const fa_request *r, fa_ring_shapes *s);
/* t restricted to rows [row0, row0 + rows) of dimension dim (same strides, byte_offset moved). */
fa_tensor fa_ring_rows(const fa_tensor *t, int dim, int64_t row0, int64_t rows);

/* ring_mem.c: the K and V views (dtype) of a packed shard kv, K's nk elements then V's; a
   shard's K and V packed into kv in their dtype (what travels); and, host only, a packed shard
   widened into float32 k and v. */
void fa_ring_kv_views(const fa_ring_mem *m, const fa_ring_shapes *sh, void *kv, fa_dtype dtype,
                      fa_tensor *k, fa_tensor *v);
fa_status fa_ring_pack_kv(const fa_ring_mem *m, const fa_ring_shapes *sh, const fa_request *r,
                          void *kv);
fa_status fa_ring_widen_kv(const fa_ring_mem *m, const fa_ring_shapes *sh, const fa_request *r,
                           void *kv, void *k, void *v);

void fa_ring_host_fill(const fa_tensor *dst, float value);
void fa_ring_host_copy(const fa_tensor *src, const fa_tensor *dst);
void fa_ring_host_add(const fa_tensor *src, const fa_tensor *dst);
void fa_ring_host_merge(const fa_tensor *src, const fa_tensor *src_lse, const fa_tensor *dst,
                        const fa_tensor *dst_lse);

/* ring_forward.c / ring_backward.c: the passes, after core/ring.c has validated the arguments,
   opened the communicator and the ranks have agreed. The context holds what both need. */
typedef struct fa_ring_ctx {
  const fa_transport *ops;
  void *comm;
  int32_t rank, world, layout;
  int32_t device;   /* the communicator's device (its memory's), -1: host memory or any */
  fa_params params; /* resolved, as the block calls use them */
  const fa_request *req;
  fa_ring_mem mem; /* where the buffers live and who runs the steps */
} fa_ring_ctx;

/* ring_plan.c: the positions block blk's call runs at (set where fa_ring_positioned): its first
   row and key globally, and the whole sequence's diagonal shift (seqlen_k - seqlen_q globally, or
   0 with top-left alignment). */
fa_positions fa_ring_block_positions(const fa_ring_ctx *ctx, const fa_ring_block *blk);
/* ring_plan.c: a step's start, the same in both passes: the K/V exchange for step t + 1 posted
   (kv_cur sent to the next rank, kv_next received from the previous; not on the last step,
   where *pending is NULL) and the block step t computes. */
fa_status fa_ring_step_begin(const fa_ring_ctx *ctx, int32_t t, void *kv_cur, void *kv_next,
                             size_t kv_bytes, void **pending, fa_ring_step *step);

/* ring_plan.c: fn(ctx, blk, arg) for each block this rank's ring computes, every step's as
   fa_ring_step_begin gives them (a block of the same rows, keys and mask as one before it only
   once); the first error stops it and is returned. */
typedef fa_status (*fa_ring_block_fn)(const fa_ring_ctx *ctx, const fa_ring_block *blk, void *arg);
fa_status fa_ring_each_block(const fa_ring_ctx *ctx, fa_ring_block_fn fn, void *arg);
/* ring_mem.c: *most raised to the workspace a block call (op, params p without its workspace, at
   pos, on args) needs. */
fa_status fa_ring_block_workspace(fa_op op, fa_params p, const fa_positions *pos,
                                  const fa_call_args *args, size_t *most);

/* Buffers of a pass, allocated before the ranks agree so that running out of memory is a refusal
   every rank sees, not a failure in the middle of the ring: the blocks' workspace among them (the
   most any block needs, given to every block call), so that no block allocates. */
typedef struct fa_ring_forward_bufs fa_ring_forward_bufs;
typedef struct fa_ring_backward_bufs fa_ring_backward_bufs;

/* Allocates the forward's buffers and checks (fa_plan_forward) that a backend runs its blocks;
   NULL with the error set otherwise. */
fa_status fa_ring_forward_prepare(const fa_ring_ctx *ctx, fa_ring_forward_bufs **bufs);
fa_status fa_ring_forward_run(const fa_ring_ctx *ctx, fa_ring_forward_bufs *bufs,
                              fa_run_info *info);
void fa_ring_forward_free(fa_ring_forward_bufs *bufs);

fa_status fa_ring_backward_prepare(const fa_ring_ctx *ctx, fa_ring_backward_bufs **bufs);
fa_status fa_ring_backward_run(const fa_ring_ctx *ctx, fa_ring_backward_bufs *bufs,
                               fa_run_info *info);
void fa_ring_backward_free(fa_ring_backward_bufs *bufs);

#endif /* FA_CORE_RING_H */
