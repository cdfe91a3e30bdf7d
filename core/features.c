/*
 * features.c: the feature list fa_backend_info() reports, obtained by asking the backend's own
 * decide() about one small representative request per feature. What is reported is therefore
 * exactly what the dispatcher would accept: the two cannot disagree.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

enum { B = 2, S = 128, H = 4, D = 64 };

typedef struct probe_call {
  fa_params params;
  fa_tensor q, k, v, out, lse, dout, dq, dk, dv, alibi, cu_q, cu_k, table, cache_seqlens;
  fa_kvcache_args kv;
  int32_t cu_data[B + 1];
  int32_t table_data[B];
  fa_op op;
} probe_call;

static void shape4(fa_tensor *t, fa_device dev, fa_dtype dt, int64_t a, int64_t b, int64_t c,
                   int64_t d) {
  static _Alignas(
      16) char dummy[16]; /* decide() never reads tensor data; validate needs a non-NULL pointer */
  memset(t, 0, sizeof *t);
  t->data = dummy;
  t->device = dev;
  t->dtype = dt;
  t->ndim = 4;
  t->shape[0] = a, t->shape[1] = b, t->shape[2] = c, t->shape[3] = d;
  t->strides[3] = 1;
  t->strides[2] = d;
  t->strides[1] = c * d;
  t->strides[0] = b * c * d;
}

static void shape_n(fa_tensor *t, fa_device dev, fa_dtype dt, void *data, int ndim,
                    const int64_t *shape) {
  memset(t, 0, sizeof *t);
  t->data = data;
  t->device = dev;
  t->dtype = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; ++i) t->shape[i] = shape[i];
  fa_tensor_set_contiguous(t);
}

/* A valid plain request: [B, S, H, D] everywhere, on the backend's memory. */
static void base_call(probe_call *c, fa_device dev, fa_dtype dt, fa_op op) {
  memset(c, 0, sizeof *c);
  fa_params_init(&c->params);
  c->op = op;
  shape4(&c->q, dev, dt, B, S, H, D);
  shape4(&c->k, dev, dt, B, S, H, D);
  shape4(&c->v, dev, dt, B, S, H, D);
  shape4(&c->out, dev, dt, B, S, H, D);
  c->dout = c->out;
  c->dq = c->q;
  c->dk = c->k;
  c->dv = c->v;
  int64_t lse_shape[3] = {B, H, S};
  static _Alignas(16) char dummy[16];
  shape_n(&c->lse, dev, FA_F32, dummy, 3, lse_shape);
}

/* Asks decide() about the call; returns 1 when supported, else 0 with the reason in why. */
static int ask(const fa_backend_slot *slot, probe_call *c, int with_lse, char *why, size_t n) {
  fa_call_args args = {
      &c->q, &c->k, &c->v, &c->out, with_lse || c->op == FA_OP_BACKWARD ? &c->lse : NULL,
      NULL,  NULL,  NULL,  NULL,    c->op == FA_OP_KVCACHE ? &c->kv : NULL};
  if (c->op == FA_OP_BACKWARD) {
    args.dout = &c->dout;
    args.dq = &c->dq;
    args.dk = &c->dk;
    args.dv = &c->dv;
  }
  /* Each tensor at an address range of its own, as a real call's would be (no output may share
     memory with another tensor): decide() reads no tensor data and validation reads only the
     index tensors, which are real arrays here, so these addresses are never dereferenced. */
  fa_tensor *roles[] = {&c->q, &c->k, &c->v, &c->out, &c->lse, &c->dout, &c->dq, &c->dk, &c->dv};
  const uintptr_t step = (uintptr_t)1 << (sizeof(uintptr_t) >= 8 ? 36 : 24);
  for (size_t i = 0; i < sizeof roles / sizeof roles[0]; ++i)
    roles[i]->data = (void *)(step * (uintptr_t)(i + 1));
  fa_params resolved;
  fa_kvcache_args kv;
  fa_request req;
  if (fa_validate(c->op, &c->params, &args, &resolved, &kv, &req) != FA_OK) {
    snprintf(why, n, "probe request invalid: %s", fa_last_error());
    return 0;
  }
  fa_decision dec;
  memset(&dec, 0, sizeof dec);
  slot->plugin->decide(&req, &dec);
  if (!dec.supported) snprintf(why, n, "%s", dec.reason);
  return dec.supported != 0;
}

static void append(char *buf, size_t cap, const char *text) {
  size_t used = strlen(buf);
  if (used + 1 < cap) snprintf(buf + used, cap - used, "%s%s", used ? "," : "", text);
}

static void append_reason(char *buf, size_t cap, const char *name, const char *why) {
  size_t used = strlen(buf);
  if (used + 1 < cap) snprintf(buf + used, cap - used, "%s%s (%s)", used ? "; " : "", name, why);
}

typedef enum feature {
  F_FWD,
  F_BWD,
  F_F32,
  F_F16,
  F_BF16,
  F_LSE,
  F_CAUSAL,
  F_CAUSAL_TOP_LEFT,
  F_GQA,
  F_MQA,
  F_HD256,
  F_HD512,
  F_DV_NE_DK,
  F_DETERMINISTIC,
  F_WINDOW,
  F_SOFTCAP,
  F_ALIBI,
  F_DROPOUT,
  F_VARLEN,
  F_PAGED,
  F_SPLIT_KV,
  F_KVCACHE,
  F_FP8,
  F_COUNT
} feature;

static const char *const feature_names[F_COUNT] = {
    "fwd",      "bwd",           "f32",    "f16",
    "bf16",     "lse",           "causal", "causal_top_left",
    "gqa",      "mqa",           "hd256",  "hd512",
    "dv_ne_dk", "deterministic", "window", "softcap",
    "alibi",    "dropout",       "varlen", "paged_kv",
    "split_kv", "kvcache",       "fp8"};

/* Turns the base call into the probe for one feature. */
static void shape_feature(probe_call *c, feature f, fa_device dev, fa_dtype dt) {
  switch (f) {
    case F_BWD:
      base_call(c, dev, dt, FA_OP_BACKWARD);
      break;
    case F_F32:
      base_call(c, dev, FA_F32, FA_OP_FORWARD);
      break;
    case F_F16:
      base_call(c, dev, FA_F16, FA_OP_FORWARD);
      break;
    case F_BF16:
      base_call(c, dev, FA_BF16, FA_OP_FORWARD);
      break;
    case F_CAUSAL:
      c->params.causal = 1;
      break;
    case F_CAUSAL_TOP_LEFT:
      c->params.causal = 1;
      c->params.causal_align = FA_CAUSAL_TOP_LEFT;
      break;
    case F_GQA:
    case F_MQA: {
      int64_t hkv = f == F_GQA ? 2 : 1;
      shape4(&c->k, dev, dt, B, S, hkv, D);
      shape4(&c->v, dev, dt, B, S, hkv, D);
      break;
    }
    case F_HD256:
    case F_HD512: {
      int64_t d = f == F_HD256 ? 256 : 512;
      shape4(&c->q, dev, dt, B, S, H, d);
      shape4(&c->k, dev, dt, B, S, H, d);
      shape4(&c->v, dev, dt, B, S, H, d);
      shape4(&c->out, dev, dt, B, S, H, d);
      break;
    }
    case F_DV_NE_DK:
      shape4(&c->v, dev, dt, B, S, H, D / 2);
      shape4(&c->out, dev, dt, B, S, H, D / 2);
      break;
    case F_DETERMINISTIC:
      c->params.deterministic = 1;
      break;
    case F_WINDOW:
      c->params.window_enabled = 1;
      c->params.window_left = 32;
      c->params.window_right = 0;
      break;
    case F_SOFTCAP:
      c->params.softcap = 30.0f;
      break;
    case F_ALIBI: {
      static float slopes[H];
      int64_t shape[1] = {H};
      shape_n(&c->alibi, dev, FA_F32, slopes, 1, shape);
      c->params.alibi_slopes = &c->alibi;
      break;
    }
    case F_DROPOUT:
      c->params.dropout_p = 0.1f;
      break;
    case F_VARLEN: {
      static _Alignas(16) char dummy[16];
      int64_t packed[3] = {B * S, H, D};
      int64_t cu_shape[1] = {B + 1};
      for (int i = 0; i <= B; ++i) c->cu_data[i] = i * S;
      shape_n(&c->q, dev, dt, dummy, 3, packed);
      shape_n(&c->k, dev, dt, dummy, 3, packed);
      shape_n(&c->v, dev, dt, dummy, 3, packed);
      shape_n(&c->out, dev, dt, dummy, 3, packed);
      /* host-readable offsets only exist for CPU memory; elsewhere validate does not read them */
      shape_n(&c->cu_q, dev, FA_I32, c->cu_data, 1, cu_shape);
      shape_n(&c->cu_k, dev, FA_I32, c->cu_data, 1, cu_shape);
      int64_t lse_shape[2] = {H, B * S};
      shape_n(&c->lse, dev, FA_F32, dummy, 2, lse_shape);
      c->params.cu_seqlens_q = &c->cu_q;
      c->params.cu_seqlens_k = &c->cu_k;
      c->params.max_seqlen_q = S;
      c->params.max_seqlen_k = S;
      break;
    }
    case F_PAGED: {
      int64_t tshape[2] = {B, 1};
      for (int i = 0; i < B; ++i) c->table_data[i] = i;
      shape_n(&c->table, dev, FA_I32, c->table_data, 2, tshape);
      shape4(&c->k, dev, dt, B, S, H, D); /* B pages of S keys */
      shape4(&c->v, dev, dt, B, S, H, D);
      c->params.block_table = &c->table;
      break;
    }
    case F_SPLIT_KV:
      c->params.num_splits = 4;
      break;
    case F_KVCACHE: {
      /* one new token per sequence appended to a cache of S positions holding S/2 */
      static _Alignas(16) char dummy[16];
      int64_t len_shape[1] = {B};
      for (int i = 0; i < B; ++i) c->cu_data[i] = S / 2;
      shape_n(&c->cache_seqlens, dev, FA_I32, c->cu_data, 1, len_shape);
      shape4(&c->q, dev, dt, B, 1, H, D);
      shape4(&c->out, dev, dt, B, 1, H, D);
      int64_t lse_shape[3] = {B, H, 1};
      shape_n(&c->lse, dev, FA_F32, dummy, 3, lse_shape);
      fa_kvcache_args_init(&c->kv);
      c->kv.cache_seqlens = &c->cache_seqlens;
      c->op = FA_OP_KVCACHE;
      break;
    }
    case F_FP8: /* e4m3 inputs with a bf16 output (docs/fp8.md) */
      base_call(c, dev, FA_F8E4M3, FA_OP_FORWARD);
      shape4(&c->out, dev, FA_BF16, B, S, H, D);
      break;
    default:
      break;
  }
}

void fa_features_probe(fa_backend_slot *slot) {
  slot->features[0] = slot->unsupported[0] = '\0';
  fa_device dev = {slot->owns, 0};
  /* The probes use the first storage type the backend accepts, so one missing dtype does not
     hide every other feature. */
  static const fa_dtype order[3] = {FA_BF16, FA_F16, FA_F32};
  fa_dtype dt = FA_BF16;
  char why[256];
  probe_call c;
  for (int i = 0; i < 3; ++i) {
    base_call(&c, dev, order[i], FA_OP_FORWARD);
    if (ask(slot, &c, 0, why, sizeof why)) {
      dt = order[i];
      break;
    }
  }
  int bwd_served = 0;
  for (int f = 0; f < F_COUNT; ++f) {
    base_call(&c, dev, dt, FA_OP_FORWARD);
    shape_feature(&c, (feature)f, dev, dt);
    int ok = ask(slot, &c, f == F_LSE, why, sizeof why);
    if (f == F_BWD) bwd_served = ok;
    /* A head-dim feature and varlen hold for every pass the backend serves: where the backward
       is served, it is asked with them too (a GPU may fit the forward's tiles and not the
       backward's, and a caller reading "bwd,hd256" or "bwd,varlen" expects both). */
    if (ok && bwd_served && (f == F_HD256 || f == F_HD512 || f == F_VARLEN)) {
      base_call(&c, dev, dt, FA_OP_BACKWARD);
      shape_feature(&c, (feature)f, dev, dt);
      c.dout = c.out;
      c.dq = c.q;
      c.dk = c.k;
      c.dv = c.v;
      ok = ask(slot, &c, 0, why, sizeof why);
    }
    if (ok)
      append(slot->features, sizeof slot->features, feature_names[f]);
    else
      append_reason(slot->unsupported, sizeof slot->unsupported, feature_names[f], why);
  }
  /* The probes run inside the first call that loads the plugin: what they refused is theirs,
     not that call's message. */
  fa_core_clear_error();
}
