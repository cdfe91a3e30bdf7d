/*
 * validate.c: every argument of every call is checked once, before any backend sees it: the
 * params here, then the tensors (validate_tensor.c), the sequence lengths (validate_lengths.c) and
 * fa_forward_kvcache's arguments (validate_kvcache.c). Messages name the argument and the
 * constraint ("k.shape[3] = 72 but must equal q.shape[3] = 64"). Nothing reads tensor data except
 * index tensors that live in host memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "validate.h"

/* Copies a caller's versioned struct (struct_size first) into this version's. A smaller one is
 * uninitialised or from no version of this library: refused. A larger one comes from a newer
 * header: the fields this version does not know must all be zero, never silently ignored. */
fa_status fa_resolve_versioned(const char *name, const char *type, const char *init,
                               const void *user, size_t known, void *out) {
  size_t size;
  memcpy(&size, user, sizeof size);
  if (size < known)
    return fa_core_set_error(INVALID,
                             "%s.struct_size = %zu but this library's %s has %zu bytes: initialise "
                             "it with %s",
                             name, size, type, known, init);
  const unsigned char *extra = (const unsigned char *)user + known;
  for (size_t i = 0; i < size - known; ++i)
    if (extra[i])
      return fa_core_set_error(FA_ERR_UNSUPPORTED,
                               "%s: byte %zu is set, beyond the %zu bytes of %s this library knows "
                               "(a field of a newer version is not supported)",
                               name, known + i, known, type);
  memcpy(out, user, known);
  memcpy(out, &known, sizeof known); /* struct_size: this version's */
  return FA_OK;
}

static fa_status resolve_params(const fa_params *user, fa_params *out) {
  memset(out, 0, sizeof *out);
  if (!user) {
    out->struct_size = sizeof *out;
    return FA_OK;
  }
  return fa_resolve_versioned("params", "fa_params", "fa_params_init() or FA_PARAMS_INIT", user,
                              sizeof *out, out);
}

static fa_status check_params(const fa_params *p) {
  if (!isfinite(p->softmax_scale) || p->softmax_scale < 0.0f)
    return fa_core_set_error(INVALID,
                             "params.softmax_scale = %g must be finite and >= 0 (0 means "
                             "1/sqrt(head_dim))",
                             (double)p->softmax_scale);
  if (p->causal_align != FA_CAUSAL_BOTTOM_RIGHT && p->causal_align != FA_CAUSAL_TOP_LEFT)
    return fa_core_set_error(INVALID, "params.causal_align = %d is not an fa_causal_align",
                             (int)p->causal_align);
  if (p->window_enabled && (p->window_left < -1 || p->window_right < -1))
    return fa_core_set_error(INVALID,
                             "params.window_left/window_right = %lld/%lld must be >= -1 "
                             "(-1 = unbounded)",
                             (long long)p->window_left, (long long)p->window_right);
  if (!isfinite(p->softcap) || p->softcap < 0.0f)
    return fa_core_set_error(INVALID, "params.softcap = %g must be finite and >= 0 (0 = off)",
                             (double)p->softcap);
  if (!(p->dropout_p >= 0.0f && p->dropout_p < 1.0f))
    return fa_core_set_error(INVALID, "params.dropout_p = %g must be in [0, 1)",
                             (double)p->dropout_p);
  if (p->max_seqlen_q < 0 || p->max_seqlen_k < 0)
    return fa_core_set_error(INVALID, "params.max_seqlen_q/max_seqlen_k = %lld/%lld must be >= 0",
                             (long long)p->max_seqlen_q, (long long)p->max_seqlen_k);
  if (p->page_size < 0)
    return fa_core_set_error(INVALID, "params.page_size = %lld is negative",
                             (long long)p->page_size);
  if (p->num_splits < 0)
    return fa_core_set_error(INVALID, "params.num_splits = %d is negative (0 = choose)",
                             (int)p->num_splits);
  if (p->backend < FA_BACKEND_AUTO || p->backend >= FA_BACKEND_COUNT_)
    return fa_core_set_error(INVALID, "params.backend = %d is not an fa_backend_id",
                             (int)p->backend);
  if (p->workspace_size > 0 && !p->workspace)
    return fa_core_set_error(INVALID, "params.workspace is NULL but params.workspace_size = %zu",
                             p->workspace_size);
  return FA_OK;
}

/* No output shares memory with an input or another output (validate_overlap.c). fa_forward_kvcache
   appends into its caches in place: they are outputs there, each apart from everything else. */
static fa_status check_outputs_apart(fa_op op, const fa_call_args *a, const fa_params *p,
                                     const fa_kvcache_args *kv) {
  const char *names[FA_APART_MAX];
  const fa_tensor *ts[FA_APART_MAX];
  int n = 0;
#define ADD(name, t)     \
  do {                   \
    if (t) {             \
      names[n] = (name); \
      ts[n++] = (t);     \
    }                    \
  } while (0)
  /* the outputs first */
  if (op == FA_OP_BACKWARD) {
    ADD("dq", a->dq);
    ADD("dk", a->dk);
    ADD("dv", a->dv);
  } else {
    if (op == FA_OP_KVCACHE) {
      ADD("k_cache", a->k);
      ADD("v_cache", a->v);
    }
    ADD("out", a->out);
    ADD("lse", a->lse);
  }
  const int n_out = n;
  ADD("q", a->q);
  if (op == FA_OP_KVCACHE) {
    ADD("kv.k_new", kv->k_new);
    ADD("kv.v_new", kv->v_new);
    ADD("kv.cache_seqlens", kv->cache_seqlens);
    ADD("kv.rotary_cos", kv->rotary_cos);
    ADD("kv.rotary_sin", kv->rotary_sin);
  } else {
    ADD("k", a->k);
    ADD("v", a->v);
  }
  if (op == FA_OP_BACKWARD) {
    ADD("out", a->out);
    ADD("lse", a->lse);
    ADD("dout", a->dout);
  }
  ADD("params.alibi_slopes", p->alibi_slopes);
  ADD("params.cu_seqlens_q", p->cu_seqlens_q);
  ADD("params.cu_seqlens_k", p->cu_seqlens_k);
  ADD("params.seqused_k", p->seqused_k);
  ADD("params.block_table", p->block_table);
  ADD("params.q_descale", p->q_descale);
  ADD("params.k_descale", p->k_descale);
  ADD("params.v_descale", p->v_descale);
#undef ADD
  return fa_check_outputs_apart(names, ts, n, n_out);
}

fa_status fa_validate(fa_op op, const fa_params *user_params, const fa_call_args *a, fa_params *p,
                      fa_kvcache_args *kv, fa_request *req) {
  TRY(resolve_params(user_params, p));
  TRY(check_params(p));

  const int varlen_q = p->cu_seqlens_q != NULL;
  const int varlen_k = p->cu_seqlens_k != NULL;
  const int paged = p->block_table != NULL;
  if (varlen_k && !varlen_q)
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_k is set but params.cu_seqlens_q is not "
                             "(variable length needs both)");
  if (paged && varlen_k)
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_k is set with params.block_table: paged "
                             "keys take their lengths from params.seqused_k");
  if (op == FA_OP_KVCACHE && (varlen_q || varlen_k || p->seqused_k))
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_q/cu_seqlens_k/seqused_k must be NULL "
                             "for fa_forward_kvcache (kv->cache_seqlens gives the lengths)");
  if (varlen_q && !varlen_k && !paged)
    return fa_core_set_error(INVALID,
                             "params.cu_seqlens_q is set but params.cu_seqlens_k is not "
                             "(variable length needs both, or a block_table)");

  const int32_t qdim = varlen_q ? 3 : 4;
  const int32_t kdim = paged ? 4 : (varlen_k ? 3 : 4);
  TRY(fa_check_tensor("q", a->q, qdim));
  TRY(fa_check_tensor("k", a->k, kdim));
  TRY(fa_check_tensor("v", a->v, kdim));
  TRY(fa_check_tensor("out", a->out, qdim));

  const fa_tensor *q = a->q, *k = a->k, *v = a->v, *out = a->out;
  const fa_device dev = q->device;
  const int fp8 = fa_dtype_is_fp8(q->dtype);
  if (!fp8 && q->dtype != FA_F32 && q->dtype != FA_F16 && q->dtype != FA_BF16)
    return fa_core_set_error(INVALID, "q.dtype = %s but must be f32, f16, bf16, f8e4m3 or f8e5m2",
                             fa_dtype_name(q->dtype));
  TRY(fa_expect_dtype("k", k, q->dtype, "as q"));
  TRY(fa_expect_dtype("v", v, q->dtype, "as q"));
  if (fp8)
    TRY(fa_check_fp8_call(op, q->dtype, p, out));
  else
    TRY(fa_expect_dtype("out", out, q->dtype, "as q"));
  TRY(fa_expect_device("k", k, dev));
  TRY(fa_expect_device("v", v, dev));
  TRY(fa_expect_device("out", out, dev));

  /* Dimensions by role; packed tensors drop the batch dimension. */
  const int qh = qdim - 2, kh = kdim - 2; /* index of the heads dim */
  int64_t batch, seqlen_q, seqlen_k;
  const int64_t heads_q = q->shape[qh], head_dim = q->shape[qh + 1];
  const int64_t heads_kv = k->shape[kh], head_dim_v = v->shape[kh + 1];

  TRY(fa_resolve_lengths(p, q, k, dev, &batch, &seqlen_q, &seqlen_k));

  /* k and v share every dim but the last. */
  for (int i = 0; i < kdim - 1; ++i) {
    if (v->shape[i] != k->shape[i])
      return fa_core_set_error(INVALID, "v.shape[%d] = %lld but must equal k.shape[%d] = %lld", i,
                               (long long)v->shape[i], i, (long long)k->shape[i]);
  }
  if (head_dim < 1 || head_dim > FA_MAX_HEAD_DIM)
    return fa_core_set_error(INVALID, "q.shape[%d] = %lld (head_dim) must be in [1, %d]", qh + 1,
                             (long long)head_dim, FA_MAX_HEAD_DIM);
  if (head_dim_v < 1 || head_dim_v > FA_MAX_HEAD_DIM)
    return fa_core_set_error(INVALID, "v.shape[%d] = %lld (head_dim_v) must be in [1, %d]", kh + 1,
                             (long long)head_dim_v, FA_MAX_HEAD_DIM);
  TRY(fa_expect_dim_of("k", k, kh + 1, "q", q, qh + 1));
  if (heads_kv < 1)
    return fa_core_set_error(INVALID, "k.shape[%d] = %lld (heads_kv) must be >= 1", kh,
                             (long long)heads_kv);
  if (heads_q < 1)
    return fa_core_set_error(INVALID, "q.shape[%d] = %lld (heads_q) must be >= 1", qh,
                             (long long)heads_q);
  if (heads_q % heads_kv != 0)
    return fa_core_set_error(INVALID,
                             "q.shape[%d] = %lld (heads_q) must be a multiple of "
                             "k.shape[%d] = %lld (heads_kv)",
                             qh, (long long)heads_q, kh, (long long)heads_kv);

  /* out mirrors q with v's head dim. */
  for (int i = 0; i < qdim - 1; ++i) TRY(fa_expect_dim_of("out", out, i, "q", q, i));
  TRY(fa_expect_dim_of("out", out, qdim - 1, "v", v, kh + 1));

  /* lse: float32 [batch, heads_q, seqlen_q], or [heads_q, total_q] when q is packed. */
  const fa_tensor *lse = a->lse;
  if (op == FA_OP_BACKWARD && !lse)
    return fa_core_set_error(INVALID,
                             "lse: NULL tensor (the backward pass needs the forward's lse)");
  if (p->return_lse && !lse)
    return fa_core_set_error(INVALID, "lse: NULL tensor but params.return_lse is set");
  int32_t lse_packed = 0;
  if (lse) {
    /* Packed q: unpadded [heads_q, total_q] or padded [batch, heads_q, max_seqlen_q]. */
    lse_packed = varlen_q && lse->ndim == 2;
    TRY(fa_check_tensor("lse", lse, lse_packed ? 2 : 3));
    TRY(fa_expect_dtype("lse", lse, FA_F32, "the logsumexp is float32"));
    TRY(fa_expect_device("lse", lse, dev));
    if (lse_packed) {
      TRY(fa_expect_dim("lse", lse, 0, heads_q, "heads_q"));
      TRY(fa_expect_dim("lse", lse, 1, q->shape[0], "q.shape[0] (total_q)"));
    } else {
      TRY(fa_expect_dim("lse", lse, 0, batch, varlen_q ? "batch" : "q.shape[0]"));
      TRY(fa_expect_dim("lse", lse, 1, heads_q, varlen_q ? "heads_q" : "q.shape[2]"));
      TRY(fa_expect_dim("lse", lse, 2, varlen_q ? p->max_seqlen_q : seqlen_q,
                        varlen_q ? "params.max_seqlen_q" : "q.shape[1]"));
    }
  }

  if (p->alibi_slopes) {
    const fa_tensor *al = p->alibi_slopes;
    if (al->ndim != 1 && al->ndim != 2)
      return fa_core_set_error(INVALID,
                               "params.alibi_slopes.ndim = %d but must be 1 ([heads_q]) "
                               "or 2 ([batch, heads_q])",
                               (int)al->ndim);
    TRY(fa_check_tensor("params.alibi_slopes", al, al->ndim));
    TRY(fa_expect_dtype("params.alibi_slopes", al, FA_F32, "slopes are float32"));
    TRY(fa_expect_device("params.alibi_slopes", al, dev));
    if (al->ndim == 2) TRY(fa_expect_dim("params.alibi_slopes", al, 0, batch, "batch"));
    TRY(fa_expect_dim("params.alibi_slopes", al, al->ndim - 1, heads_q, "heads_q"));
  }

  if (op == FA_OP_BACKWARD) {
    static const char *names[4] = {"dout", "dq", "dk", "dv"};
    const fa_tensor *grads[4] = {a->dout, a->dq, a->dk, a->dv};
    const fa_tensor *like[4] = {out, q, k, v};
    static const char *like_names[4] = {"out", "q", "k", "v"};
    for (int i = 0; i < 4; ++i) {
      TRY(fa_check_tensor(names[i], grads[i], like[i]->ndim));
      TRY(fa_expect_dtype(names[i], grads[i], q->dtype, "as q"));
      TRY(fa_expect_device(names[i], grads[i], dev));
      TRY(fa_expect_same_shape(names[i], grads[i], like_names[i], like[i]));
    }
    for (int i = 1; i < 4; ++i) TRY(fa_check_no_self_overlap(names[i], grads[i]));
  } else {
    TRY(fa_check_no_self_overlap("out", out));
  }
  if (lse && op == FA_OP_FORWARD) TRY(fa_check_no_self_overlap("lse", lse));
  TRY(fa_check_descales(p, q->dtype, dev, batch, heads_q, heads_kv, seqlen_q, seqlen_k));

  /* A window side at least seqlen_q + seqlen_k wide cuts nothing: it is the unbounded side
     (-1), exactly, for every row and alignment, and the mask arithmetic stays far from 2^63. */
  if (p->window_enabled) {
    int64_t span;
    if (__builtin_add_overflow(seqlen_q, seqlen_k, &span)) span = INT64_MAX;
    if (p->window_left >= span) p->window_left = -1;
    if (p->window_right >= span) p->window_right = -1;
  }

  int64_t seqlen_new = 0, rotary_dim = 0;
  if (op == FA_OP_KVCACHE) {
    TRY(fa_check_kvcache(a, kv, batch, heads_kv, head_dim, head_dim_v, &seqlen_new, &rotary_dim));
    /* The caches are written (the new tokens appended in place): no two of their elements may
       share memory, and neither may lse's. */
    TRY(fa_check_no_self_overlap("k_cache", k));
    TRY(fa_check_no_self_overlap("v_cache", v));
    if (lse) TRY(fa_check_no_self_overlap("lse", lse));
  }
  TRY(check_outputs_apart(op, a, p, kv));

  memset(req, 0, sizeof *req);
  req->op = op;
  req->lse_packed = lse_packed;
  if (op == FA_OP_KVCACHE) {
    req->kv = kv;
    req->seqlen_new = seqlen_new;
    req->rotary_dim = rotary_dim;
  }
  req->params = p;
  req->q = q;
  req->k = k;
  req->v = v;
  req->out = out;
  req->lse = lse;
  if (op == FA_OP_BACKWARD) {
    req->dout = a->dout;
    req->dq = a->dq;
    req->dk = a->dk;
    req->dv = a->dv;
  }
  req->dtype = q->dtype;
  req->device = dev;
  req->batch = batch;
  req->seqlen_q = seqlen_q;
  req->seqlen_k = seqlen_k;
  req->heads_q = heads_q;
  req->heads_kv = heads_kv;
  req->head_dim = head_dim;
  req->head_dim_v = head_dim_v;
  req->scale = p->softmax_scale > 0.0f ? p->softmax_scale : (float)(1.0 / sqrt((double)head_dim));
  return fa_core_check_indices(req);
}
