/*
 * ring.c: the ring calls' entry points (fa_ring_forward, fa_ring_backward). A call checks its
 * communicator arguments, opens the transport, checks the local shards as fa_forward would
 * (core/validate.c) and what the ring cannot do, allocates its buffers, and only then do the ranks
 * agree: one reduction carries each rank's status and the facts every rank must share (shapes,
 * dtype, mask, scale). A rank that refused still takes part, so every rank returns together and
 * none waits forever for a peer that gave up; nothing is written before the agreement.
 */
#include <stdio.h>
#include <string.h>

#include "ring.h"
#include "validate.h"

void fa_ring_args_init(fa_ring_args *ring) {
  if (!ring) return;
  memset(ring, 0, sizeof *ring);
  ring->struct_size = sizeof *ring;
}

static const char *transport_name(int32_t kind) {
  const fa_transport_slot *s = fa_transport_slot_of(kind);
  return s ? s->name : "invalid";
}

/* What opening the communicator needs: the struct, a transport that is available. */
static fa_status resolve_ring(const fa_ring_args *user, fa_ring_args *out) {
  if (!user) return fa_core_set_error(INVALID, "ring: NULL pointer");
  memset(out, 0, sizeof *out);
  TRY(fa_resolve_versioned("ring", "fa_ring_args", "fa_ring_args_init()", user, sizeof *out, out));
  if (out->transport <= FA_TRANSPORT_INVALID || out->transport >= FA_TRANSPORT_COUNT_)
    return fa_core_set_error(INVALID, "ring.transport = %d is not an fa_transport_kind",
                             (int)out->transport);
  const fa_transport_slot *s = fa_transport_slot_of(out->transport);
  if (!s->ops)
    return fa_core_set_error(FA_ERR_UNSUPPORTED, "ring.transport = %s is unavailable: %s", s->name,
                             s->reason);
  return FA_OK;
}

/* The rest of the ring's arguments, checked once the communicator is open, where a refusal is
   heard by every rank. */
static fa_status check_ring_args(const fa_ring_args *ring, const fa_ring_ctx *ctx) {
  if (ring->layout != FA_RING_CONTIGUOUS && ring->layout != FA_RING_ZIGZAG)
    return fa_core_set_error(INVALID, "ring.layout = %d is not an fa_ring_layout",
                             (int)ring->layout);
  if (ring->world < 0)
    return fa_core_set_error(INVALID, "ring.world = %d must be >= 0 (0: ask the communicator)",
                             (int)ring->world);
  if (ring->world > 0 && (ring->rank < 0 || ring->rank >= ring->world))
    return fa_core_set_error(INVALID, "ring.rank = %d must be in [0, ring.world = %d)",
                             (int)ring->rank, (int)ring->world);
  if (ring->world > 0 && (ring->world != ctx->world || ring->rank != ctx->rank))
    return fa_core_set_error(INVALID,
                             "ring.world = %d, ring.rank = %d but the %s communicator has world "
                             "%d and this process is its rank %d",
                             (int)ring->world, (int)ring->rank, transport_name(ring->transport),
                             (int)ctx->world, (int)ctx->rank);
  return FA_OK;
}

/* What the ring cannot do with arguments fa_forward would take. */
static fa_status check_ring_support(const fa_request *req, const fa_ring_args *ring) {
  const fa_params *p = req->params;
  if (p->cu_seqlens_q || p->cu_seqlens_k || p->seqused_k)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "params.%s: the ring does not support varlen or seqused_k (shards "
                             "are [batch, seqlen, heads, dim])",
                             p->cu_seqlens_q   ? "cu_seqlens_q"
                             : p->cu_seqlens_k ? "cu_seqlens_k"
                                               : "seqused_k");
  if (p->block_table)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "params.block_table: the ring does not support paged KV");
  if (fa_dtype_is_fp8(req->dtype))
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "q.dtype = %s: the ring does not support FP8 inputs (f32, f16, bf16)",
                             fa_dtype_name(req->dtype));
  if (p->workspace)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "params.workspace: the ring allocates its own buffers; pass NULL");
  /* A ring of one rank moves nothing, so the self transport takes any memory. */
  const fa_transport_slot *s = fa_transport_slot_of(ring->transport);
  if (ring->transport != FA_TRANSPORT_SELF && req->device.kind != s->memory)
    return fa_core_set_error(
        FA_ERR_UNSUPPORTED, "q.device = %s but the %s transport carries %s tensors (%s)",
        fa_device_kind_name(req->device.kind), s->name, fa_device_kind_name(s->memory),
        req->device.kind == FA_DEVICE_CPU    ? "host tensors need MPI"
        : req->device.kind == FA_DEVICE_CUDA ? "CUDA tensors need NCCL"
                                             : "no transport carries this memory");
  if ((p->causal || p->window_enabled) && req->seqlen_q != req->seqlen_k)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "q.shape[1] = %lld but k.shape[1] = %lld: a %s ring needs shards of "
                             "equal length (self-attention)",
                             (long long)req->seqlen_q, (long long)req->seqlen_k,
                             p->causal ? "causal" : "windowed");
  if (ring->layout == FA_RING_ZIGZAG && (req->seqlen_q % 2 || req->seqlen_k % 2))
    return fa_core_set_error(INVALID,
                             "%s.shape[1] = %lld but the zig-zag layout needs an even local length "
                             "(two chunks)",
                             req->seqlen_q % 2 ? "q" : "k",
                             (long long)(req->seqlen_q % 2 ? req->seqlen_q : req->seqlen_k));
  return FA_OK;
}

/* The facts every rank must share, each sent as v and -v: the maximum of both is v everywhere
   exactly when all ranks agree. 64-bit values that may be negative extremes (seeds, offsets) are
   sent as two 32-bit halves. */
enum { FACTS = 22 };
static const char *const fact_names[FACTS] = {"the call (forward or backward)",
                                              "ring.layout",
                                              "q.dtype",
                                              "batch (q.shape[0])",
                                              "q.shape[1]",
                                              "k.shape[1]",
                                              "heads_q",
                                              "heads_kv",
                                              "head_dim",
                                              "head_dim_v",
                                              "params.causal",
                                              "the softmax scale and softcap",
                                              "params.causal_align",
                                              "params.window_enabled",
                                              "params.window_left",
                                              "params.window_right",
                                              "params.dropout_p",
                                              "params.dropout_seed",
                                              "params.dropout_seed",
                                              "params.dropout_offset",
                                              "params.dropout_offset",
                                              "params.alibi_slopes (given or not, and values)"};

/* The ALiBi slopes' bits hashed (FNV-1a, 62 bits: v and -v both fit), or 0 without ALiBi. */
static int64_t slopes_fact(const fa_tensor *al) {
  if (!al) return 0;
  const float *base = (const float *)fa_tensor_base(al);
  const int64_t rows = al->ndim == 2 ? al->shape[0] : 1, cols = al->shape[al->ndim - 1];
  const int64_t rs = al->ndim == 2 ? al->strides[0] : 0, cs = al->strides[al->ndim - 1];
  uint64_t h = 1469598103934665603ull;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      uint32_t bits;
      memcpy(&bits, &base[r * rs + c * cs], sizeof bits);
      for (int i = 0; i < 4; ++i) h = (h ^ ((bits >> (8 * i)) & 0xffu)) * 1099511628211ull;
    }
  return (int64_t)(h >> 2) | 1; /* never 0: given slopes differ from none */
}

static void facts_of(fa_op op, const fa_ring_args *ring, const fa_request *r, const fa_params *p,
                     int64_t *f) {
  uint32_t scale, cap, drop;
  memcpy(&scale, &r->scale, sizeof scale);
  memcpy(&cap, &p->softcap, sizeof cap);
  memcpy(&drop, &p->dropout_p, sizeof drop);
  /* The seed and offset matter only with dropout. */
  const uint64_t seed = drop ? p->dropout_seed : 0, offset = drop ? p->dropout_offset : 0;
  const int64_t v[FACTS] = {op,
                            ring->layout,
                            r->dtype,
                            r->batch,
                            r->seqlen_q,
                            r->seqlen_k,
                            r->heads_q,
                            r->heads_kv,
                            r->head_dim,
                            r->head_dim_v,
                            p->causal != 0,
                            (int64_t)scale << 32 | cap,
                            p->causal_align,
                            p->window_enabled != 0,
                            p->window_enabled ? p->window_left : 0,
                            p->window_enabled ? p->window_right : 0,
                            drop,
                            (int64_t)(seed >> 32),
                            (int64_t)(seed & 0xffffffffu),
                            (int64_t)(offset >> 32),
                            (int64_t)(offset & 0xffffffffu),
                            slopes_fact(p->alibi_slopes)};
  for (int i = 0; i < FACTS; ++i) {
    f[2 * i] = v[i];
    f[2 * i + 1] = -v[i];
  }
}

typedef struct prepared {
  fa_op op;
  fa_ring_forward_bufs *fwd;
  fa_ring_backward_bufs *bwd;
} prepared;

static fa_status prepare_local(fa_ring_ctx *ctx, const fa_ring_args *ring, const fa_params *params,
                               const fa_params *caller, const fa_call_args *args,
                               fa_params *resolved, fa_request *req, prepared *pr) {
  fa_kvcache_args kv;
  TRY(fa_validate(pr->op, params, args, resolved, &kv, req));
  TRY(check_ring_support(req, ring));
  if (ctx->device >= 0 && req->device.id != ctx->device)
    return fa_core_set_error(INVALID,
                             "q.device = %s:%d but the %s communicator (ring.comm) is on device "
                             "%d: its exchanges and the blocks would run on two GPUs; create the "
                             "communicator on the tensors' device",
                             fa_device_kind_name(req->device.kind), (int)req->device.id,
                             transport_name(ring->transport), (int)ctx->device);
  ctx->params = *resolved;
  /* fa_validate reads a window side at least the local seqlen_q + seqlen_k wide as unbounded; a
     ring's window spans the global sequence, so the caller's sides stand, unbounded only from the
     global span on. */
  if (resolved->window_enabled) {
    const int64_t span = 2 * (int64_t)ctx->world * req->seqlen_q;
    ctx->params.window_left = caller->window_left >= span ? -1 : caller->window_left;
    ctx->params.window_right = caller->window_right >= span ? -1 : caller->window_right;
  }
  ctx->req = req;
  TRY(fa_ring_mem_open(&ctx->mem, req));
  if (pr->op == FA_OP_FORWARD) return fa_ring_forward_prepare(ctx, &pr->fwd);
  return fa_ring_backward_prepare(ctx, &pr->bwd);
}

static fa_status ring_call(fa_op op, const fa_params *params, const fa_ring_args *user_ring,
                           const fa_call_args *args, fa_run_info *info) {
  fa_core_clear_error();
  fa_ring_args ring;
  TRY(resolve_ring(user_ring, &ring));
  fa_ring_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.ops = fa_transport_slot_of(ring.transport)->ops;
  ctx.layout = ring.layout;
  /* The caller's params as given (the stream, NCCL's; the window's sides, which fa_validate
     judges by the local shard), read here; a bad params struct is reported after the
     communicator is open, where every rank hears of it (fa_validate, before these are used). */
  fa_params early;
  fa_params_init(&early);
  if (params && fa_resolve_versioned("params", "fa_params", "fa_params_init()", params,
                                     sizeof early, &early) != FA_OK)
    fa_params_init(&early);
  void *stream = early.stream;
  fa_core_clear_error();
  TRY(ctx.ops->open(ring.comm, stream, &ctx.comm, &ctx.rank, &ctx.world, &ctx.device));

  prepared pr = {op, NULL, NULL};
  fa_params resolved;
  fa_request req;
  fa_status local = fa_check_run_info(info);
  if (local == FA_OK) local = check_ring_args(&ring, &ctx);
  if (local == FA_OK)
    local = prepare_local(&ctx, &ring, params, &early, args, &resolved, &req, &pr);

  int64_t agree[1 + 2 * FACTS] = {local};
  if (local == FA_OK) facts_of(op, &ring, &req, &ctx.params, agree + 1);
  fa_status st = ctx.ops->allreduce_max(ctx.comm, agree, 1 + 2 * FACTS);
  if (st == FA_OK && local != FA_OK) st = local;
  if (st == FA_OK && agree[0] != FA_OK)
    st = fa_core_set_error((fa_status)agree[0],
                           "another rank of the ring refused its arguments with %s (its "
                           "fa_last_error says why); nothing was written",
                           fa_status_string((fa_status)agree[0]));
  for (int i = 0; st == FA_OK && i < FACTS; ++i)
    if (agree[1 + 2 * i] != -agree[2 + 2 * i])
      st = fa_core_set_error(INVALID,
                             "the ranks of the ring disagree on %s (this rank's is not the same "
                             "as every other's); nothing was written",
                             fact_names[i]);
  if (st == FA_OK)
    st = op == FA_OP_FORWARD ? fa_ring_forward_run(&ctx, pr.fwd, info)
                             : fa_ring_backward_run(&ctx, pr.bwd, info);
  /* Closed first: a device transport's close orders the stream after every exchange it enqueued
     (one an error left unwaited too), so the buffers are freed after the last transfer into them.
   */
  ctx.ops->close(ctx.comm);
  fa_ring_forward_free(pr.fwd);
  fa_ring_backward_free(pr.bwd);
  return st;
}

fa_status fa_ring_forward(const fa_params *params, const fa_ring_args *ring, const fa_tensor *q,
                          const fa_tensor *k, const fa_tensor *v, fa_tensor *out, fa_tensor *lse,
                          fa_run_info *info) {
  fa_call_args a = {q, k, v, out, lse, NULL, NULL, NULL, NULL, NULL};
  return ring_call(FA_OP_FORWARD, params, ring, &a, info);
}

fa_status fa_ring_backward(const fa_params *params, const fa_ring_args *ring, const fa_tensor *q,
                           const fa_tensor *k, const fa_tensor *v, const fa_tensor *out,
                           const fa_tensor *lse, const fa_tensor *dout, fa_tensor *dq,
                           fa_tensor *dk, fa_tensor *dv, fa_run_info *info) {
  fa_call_args a = {q, k, v, out, lse, dout, dq, dk, dv, NULL};
  return ring_call(FA_OP_BACKWARD, params, ring, &a, info);
}
