/*
 * hg_host.c: see hg_host.h. Every fa_params field is honoured or refused here, never ignored.
 */
#include "hg_host.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/math/mask.h"
#include "core/plan.h"

#define HG_WS_ALIGN 256

static const char *dtype_name(fa_dtype dt) {
  return dt == FA_F16 ? "f16" : (dt == FA_BF16 ? "bf16" : NULL);
}

static size_t round_up(size_t n) { return (n + HG_WS_ALIGN - 1) & ~(size_t)(HG_WS_ALIGN - 1); }

static size_t dsum_bytes(const fa_request *req) {
  return round_up((size_t)req->batch * (size_t)req->heads_q * (size_t)req->seqlen_q * 4);
}

static size_t dq_accum_bytes(const fa_request *req) {
  return (size_t)req->batch * (size_t)req->heads_q * (size_t)req->seqlen_q * (size_t)req->head_dim *
         4;
}

size_t hg_smem(int forward, int mfma, int d, int bn, int bm) {
  if (forward) return mfma ? HG_FWD_MFMA_SMEM(d, bn) : HG_FWD_SMEM(d, bn);
  return mfma ? HG_BWD_MFMA_SMEM(bn, bm, d) : HG_BWD_SMEM(bn, bm, d);
}

int hg_fwd_tile_n(int64_t smem_limit, int d, int mfma) {
  /* core/plan's Bc = M / (4d) words of the 16-bit tiles, within the compiled tiles (granule and
     maximum); then halved while the kernel's own layout (Q, K, V and, for MFMA, the score and
     probability tiles) would not fit, since the plan's four d-wide tiles are a model of it. */
  fa_tile_limits lim = {smem_limit > 0 ? (size_t)smem_limit : 0,
                        2,
                        HG_FWD_TILE_M,
                        HG_FWD_TILE_N,
                        HG_FWD_TILE_M,
                        HG_FWD_TILE_N_MAX};
  int bn = (int)fa_plan_tiles(&lim, d).tile_n;
  while (bn > HG_FWD_TILE_N && (int64_t)hg_smem(1, mfma, d, bn, 0) > smem_limit) bn /= 2;
  return bn;
}

/* HG_BWD_TILES as rows {class, BN, BM, in the HIP plugin's bundle}, each class's smaller tile
   first. */
#define HG_BWD_ROW(hc, bn, bm, amd) {hc, bn, bm, amd},
static const int bwd_tiles[][4] = {HG_BWD_TILES(HG_BWD_ROW)};
#undef HG_BWD_ROW
_Static_assert(sizeof bwd_tiles / sizeof bwd_tiles[0] == HG_BWD_TILE_COUNT,
               "HG_BWD_TILE_COUNT counts HG_BWD_TILES");
#define HG_BWD_AMD(hc, bn, bm, amd) +(amd)
_Static_assert(0 HG_BWD_TILES(HG_BWD_AMD) == HG_BWD_TILE_COUNT_AMD,
               "HG_BWD_TILE_COUNT_AMD counts the bundle's tiles");
#undef HG_BWD_AMD

hg_tile hg_bwd_tiles(int64_t smem_limit, int d, int mfma, int all_tiles) {
  const int hc = HG_HD_CLASS(d);
  int first = -1, last = -1, max_m = 0;
  for (int i = 0; i < HG_BWD_TILE_COUNT; ++i)
    if (bwd_tiles[i][0] == hc && (all_tiles || bwd_tiles[i][3])) {
      if (first < 0) first = i;
      last = i;
      if (bwd_tiles[i][2] > max_m) max_m = bwd_tiles[i][2];
    }
  /* Granules: the class's smallest compiled key tile and 16 query rows (the matrix
     instructions' 16x16 tiles); maxima: its largest tiles. */
  fa_tile_limits lim = {smem_limit > 0 ? (size_t)smem_limit : 0,
                        2,
                        16,
                        bwd_tiles[first][1],
                        max_m,
                        bwd_tiles[last][1]};
  const fa_tile_plan plan = fa_plan_tiles_bwd(&lim, d, HG_BWD_SCORE_BYTES(mfma));
  int pick = first;
  for (int i = last; i > first && pick == first; --i)
    if ((all_tiles || bwd_tiles[i][3]) && bwd_tiles[i][1] <= plan.tile_n &&
        bwd_tiles[i][2] <= plan.tile_m &&
        (int64_t)hg_smem(0, mfma, d, bwd_tiles[i][1], bwd_tiles[i][2]) <= smem_limit)
      pick = i;
  hg_tile t = {bwd_tiles[pick][1], bwd_tiles[pick][2]};
  return t;
}

static int refuse_params(const fa_request *req, const char *fam, fa_decision *out) {
  const fa_params *p = req->params;
  if (p->kernel_family && strcmp(p->kernel_family, "generic") != 0 &&
      strcmp(p->kernel_family, "mfma") != 0 && strcmp(p->kernel_family, "wmma") != 0) {
    fa_core_refuse(out, "kernel_family '%s' is unknown to %s (families: generic, mfma, wmma)",
                   p->kernel_family, fam);
    return 1;
  }
  if (p->alibi_slopes)
    return fa_core_refuse(out, "ALiBi (alibi_slopes) is not supported by %s", fam), 1;
  if (p->dropout_p > 0.0f)
    return fa_core_refuse(out, "dropout (dropout_p > 0) is not supported by %s", fam), 1;
  if (p->cu_seqlens_q || p->cu_seqlens_k)
    return fa_core_refuse(out, "varlen (cu_seqlens_q/k) is not supported by %s", fam), 1;
  if (p->seqused_k) return fa_core_refuse(out, "seqused_k is not supported by %s", fam), 1;
  if (p->block_table)
    return fa_core_refuse(out, "paged KV (block_table) is not supported by %s", fam), 1;
  if (p->num_splits > 1) {
    fa_core_refuse(out, "num_splits = %d: split-KV is not supported by %s (0 or 1)",
                   (int)p->num_splits, fam);
    return 1;
  }
  return 0;
}

void hg_decide(const fa_request *req, const hg_target *t, fa_decision *out) {
  memset(out, 0, sizeof *out);
  const char *fam = t->prefix;
  if (req->device.kind != t->kind) {
    fa_core_refuse(out, "tensors are in %s memory; %s reads %s device memory only",
                   fa_device_kind_name(req->device.kind), fam, fa_device_kind_name(t->kind));
    return;
  }
  const char *dt = dtype_name(req->dtype);
  if (!dt) {
    fa_core_refuse(out, "dtype %s is not supported by %s (f16, bf16)", fa_dtype_name(req->dtype),
                   fam);
    return;
  }
  if (req->op != FA_OP_FORWARD && req->op != FA_OP_BACKWARD) {
    fa_core_refuse(out, "fa_forward_kvcache is not supported by %s", fam);
    return;
  }
  if (req->head_dim_v != req->head_dim) {
    fa_core_refuse(out, "head_dim_v %lld != head_dim %lld: %s needs them equal",
                   (long long)req->head_dim_v, (long long)req->head_dim, fam);
    return;
  }
  if (req->head_dim % 8 != 0 || req->head_dim < 8 || req->head_dim > HG_MAX_HEAD_DIM) {
    fa_core_refuse(out, "head_dim %lld: %s supports multiples of 8 up to %d",
                   (long long)req->head_dim, fam, HG_MAX_HEAD_DIM);
    return;
  }
  if (refuse_params(req, fam, out)) return;
  /* Grid limits: heads and batch are grid dimensions y and z; rows are int32 in the kernels. */
  if (req->batch > 65535 || req->heads_q > 65535) {
    fa_core_refuse(out, "batch %lld or heads_q %lld > 65535 (%s grid limit)", (long long)req->batch,
                   (long long)req->heads_q, fam);
    return;
  }
  if (req->seqlen_q > INT32_MAX / HG_MAX_HEAD_DIM || req->seqlen_k > INT32_MAX - 256) {
    fa_core_refuse(out, "seqlen_q > 2^23 or seqlen_k > 2^31 - 256 is not supported by %s", fam);
    return;
  }
  /* Elements are read one by one: any strides, but 16-bit elements at even addresses. */
  const fa_tensor *all[] = {req->q, req->k, req->v, req->out, req->dout, req->dq, req->dk, req->dv};
  const char *names[] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};
  for (int i = 0; i < 8; ++i)
    if (all[i] && all[i]->data && ((uintptr_t)all[i]->data + all[i]->byte_offset) % 2 != 0) {
      fa_core_refuse(out, "%s: first element at an odd address; %s needs 2-byte alignment",
                     names[i], fam);
      return;
    }
  const char *family = req->params->kernel_family;
  const int want = !family                   ? HG_MATRIX_NONE
                   : !strcmp(family, "mfma") ? HG_MATRIX_MFMA
                   : !strcmp(family, "wmma") ? HG_MATRIX_WMMA
                                             : HG_MATRIX_NONE;
  if (want != HG_MATRIX_NONE && want != t->mfma) {
    fa_core_refuse(out, "kernel_family '%s': %s has no %s kernels for %s (%s)", family, fam,
                   want == HG_MATRIX_MFMA ? "MFMA" : "WMMA", t->device_name,
                   want == HG_MATRIX_MFMA ? "CDNA gfx90a/gfx940" : "RDNA3 gfx1100");
    return;
  }
  const int mfma = want != HG_MATRIX_NONE;
  const int d = (int)req->head_dim, fwd = req->op == FA_OP_FORWARD;
  const hg_tile tile = fwd ? (hg_tile){hg_fwd_tile_n(t->smem_limit, d, mfma), HG_FWD_TILE_M}
                           : hg_bwd_tiles(t->smem_limit, d, mfma, t->all_tiles);
  const size_t smem = hg_smem(fwd, mfma, d, tile.bn, tile.bm);
  if ((int64_t)smem > t->smem_limit) {
    fa_core_refuse(out,
                   "%s %s at head_dim %lld needs %zu bytes of shared memory with its smallest "
                   "tile (%d queries x %d keys); %s allows %lld",
                   fam, fwd ? "forward" : "backward", (long long)req->head_dim, smem, tile.bm,
                   tile.bn, t->device_name, (long long)t->smem_limit);
    return;
  }
  const fa_params *p = req->params;
  snprintf(out->kernel, sizeof out->kernel, "%s%s.%s.%s.hd%lld%s%s%s", fam,
           !mfma ? "" : (want == HG_MATRIX_MFMA ? ".mfma" : ".wmma"),
           req->op == FA_OP_FORWARD ? "fwd" : "bwd", dt, (long long)req->head_dim,
           p->causal ? ".causal" : "", p->window_enabled ? ".window" : "",
           p->softcap > 0.0f ? ".softcap" : "");
  out->supported = 1;
  out->num_splits = 1;
  /* The tile the run launches (its kernel's name carries it): the report's tile_m x tile_n. */
  out->tile_m = tile.bm;
  out->tile_n = tile.bn;
  hg_choice choice = {want, HG_HD_CLASS(d), tile.bn, tile.bm, 0};
  if (fwd) {
    out->deterministic = 1; /* no atomics */
  } else {
    /* Deterministic: one block per KV head walks its key tiles in order (hg_bwd.h). */
    choice.per_head = p->deterministic ? 1 : 0;
    out->deterministic = choice.per_head;
    out->workspace_bytes = dsum_bytes(req) + dq_accum_bytes(req) + HG_WS_ALIGN;
  }
  fa_decision_put(out, &choice, sizeof choice);
}

static void tensor_of(const fa_tensor *t, hg_tensor *h) {
  memset(h, 0, sizeof *h);
  if (!t) return;
  h->data = fa_tensor_base(t);
  h->batch = t->strides[0];
  h->row = t->strides[1];
  h->head = t->strides[2];
  h->col = t->strides[3];
}

static void params_of(const fa_request *req, hg_params *a) {
  const fa_params *p = req->params;
  memset(a, 0, sizeof *a);
  tensor_of(req->q, &a->q);
  tensor_of(req->k, &a->k);
  tensor_of(req->v, &a->v);
  tensor_of(req->out, &a->out);
  tensor_of(req->dout, &a->dout);
  tensor_of(req->dq, &a->dq);
  tensor_of(req->dk, &a->dk);
  tensor_of(req->dv, &a->dv);
  if (req->lse) {
    a->lse = (float *)fa_tensor_base(req->lse);
    a->lse_batch = req->lse->strides[0];
    a->lse_head = req->lse->strides[1];
    a->lse_row = req->lse->strides[2];
  }
  a->batch = (int32_t)req->batch;
  a->seqlen_q = (int32_t)req->seqlen_q;
  a->seqlen_k = (int32_t)req->seqlen_k;
  a->heads_q = (int32_t)req->heads_q;
  a->heads_kv = (int32_t)req->heads_kv;
  a->head_dim = (int32_t)req->head_dim;
  a->scale = req->scale;
  a->softcap = p->softcap > 0.0f ? p->softcap : 0.0f;
  fa_mask m = fa_mask_make(p->causal, p->causal_align, p->window_enabled, p->window_left,
                           p->window_right, req->seqlen_q, req->seqlen_k);
  a->mask_shift = m.shift;
  a->mask_left = m.left;
  a->mask_right = m.right;
}

static unsigned blocks(int64_t n, int64_t per) { return (unsigned)((n + per - 1) / per); }

fa_status hg_run(const hg_runtime *rt, const fa_request *req, const fa_decision *decision,
                 void *workspace) {
  if (!decision->supported) return fa_core_set_error(FA_ERR_UNSUPPORTED, "%s", decision->reason);
  hg_choice c;
  fa_decision_get(decision, &c, sizeof c);
  const int fwd = req->op == FA_OP_FORWARD;
  if ((c.hd_class != 64 && c.hd_class != 128 && c.hd_class != 256) ||
      c.hd_class != HG_HD_CLASS(req->head_dim) || c.bn < 1 || (!fwd && c.bm < 1) ||
      c.matrix < HG_MATRIX_NONE || c.matrix > HG_MATRIX_WMMA)
    return fa_core_set_error(FA_ERR_INTERNAL,
                             "hip generic kernels: decision (head dim class %d, tile %dx%d, "
                             "matrix kernels %d) is not one hg_decide made for head dim %lld",
                             (int)c.hd_class, (int)c.bm, (int)c.bn, (int)c.matrix,
                             (long long)req->head_dim);
  hg_params a;
  params_of(req, &a);
  void *stream = req->params->stream;
  const char *dt = req->dtype == FA_BF16 ? "bf16" : "f16";
  const int hc = c.hd_class;
  char name[HG_KERNEL_NAME_LEN];
  /* The matrix kernels carry the MFMA names on every target (WMMA in gfx1100's code object). */
  const int mfma = c.matrix != HG_MATRIX_NONE;
  if (a.batch == 0 || a.heads_q == 0) return FA_OK;
  if (fwd) {
    if (a.seqlen_q == 0) return FA_OK;
    const int bn = c.bn;
    snprintf(name, sizeof name, "hg_fwd_%s%s_hd%d_n%d", mfma ? "mfma_" : "", dt, hc, bn);
    return rt->launch(rt->ctx, name, blocks(a.seqlen_q, HG_FWD_TILE_M), (unsigned)a.heads_q,
                      (unsigned)a.batch, hg_smem(1, mfma, a.head_dim, bn, 0), stream, &a);
  }
  /* Backward. Without the caller's workspace, the runtime's (freed after the kernels). */
  void *ws = workspace;
  fa_status st = FA_OK;
  if (!ws && (st = rt->alloc(rt->ctx, &ws, decision->workspace_bytes, stream)) != FA_OK) return st;
  uintptr_t base = ((uintptr_t)ws + HG_WS_ALIGN - 1) & ~(uintptr_t)(HG_WS_ALIGN - 1);
  a.dsum = (float *)base;
  a.dq_accum = (float *)(base + dsum_bytes(req));
  if (a.seqlen_q > 0) st = rt->zero(rt->ctx, a.dq_accum, dq_accum_bytes(req), stream);
  if (st == FA_OK && a.seqlen_q > 0) {
    snprintf(name, sizeof name, "hg_bwd_dot_%s", dt);
    st = rt->launch(rt->ctx, name, blocks(a.seqlen_q, HG_THREADS), (unsigned)a.heads_q,
                    (unsigned)a.batch, 0, stream, &a);
  }
  if (st == FA_OK && a.seqlen_k > 0) {
    const int bn = c.bn, bm = c.bm;
    snprintf(name, sizeof name, "hg_bwd_main_%s%s_hd%d_n%d_m%d", mfma ? "mfma_" : "", dt, hc, bn,
             bm);
    unsigned gx = c.per_head ? 1u : blocks(a.seqlen_k, bn);
    st = rt->launch(rt->ctx, name, gx, (unsigned)a.heads_kv, (unsigned)a.batch,
                    hg_smem(0, mfma, a.head_dim, bn, bm), stream, &a);
  }
  if (st == FA_OK && a.seqlen_q > 0) {
    snprintf(name, sizeof name, "hg_bwd_convert_%s", dt);
    st = rt->launch(rt->ctx, name, blocks((int64_t)a.seqlen_q * a.head_dim, HG_THREADS),
                    (unsigned)a.heads_q, (unsigned)a.batch, 0, stream, &a);
  }
  if (ws != workspace) {
    fa_status f = rt->release(rt->ctx, ws, stream);
    if (st == FA_OK) st = f;
  }
  return st;
}

int hg_kernel_names(char names[][HG_KERNEL_NAME_LEN], int capacity, int with_mfma) {
  static const char *const dts[] = {"f16", "bf16"};
  static const int hcs[] = {64, 128, 256};
  int n = 0;
#define HG_NAME(...)                                                       \
  do {                                                                     \
    if (n < capacity) snprintf(names[n], HG_KERNEL_NAME_LEN, __VA_ARGS__); \
    ++n;                                                                   \
  } while (0)
  for (int i = 0; i < 2; ++i) {
    HG_NAME("hg_bwd_dot_%s", dts[i]);
    HG_NAME("hg_bwd_convert_%s", dts[i]);
    for (int mfma = 0; mfma <= with_mfma; ++mfma) {
      const char *tag = mfma ? "mfma_" : "";
      for (int j = 0; j < 3; ++j)
        for (int bn = HG_FWD_TILE_N; bn <= HG_FWD_TILE_N_MAX; bn *= 2)
          HG_NAME("hg_fwd_%s%s_hd%d_n%d", tag, dts[i], hcs[j], bn);
      for (int t = 0; t < HG_BWD_TILE_COUNT; ++t)
        if (bwd_tiles[t][3])
          HG_NAME("hg_bwd_main_%s%s_hd%d_n%d_m%d", tag, dts[i], bwd_tiles[t][0], bwd_tiles[t][1],
                  bwd_tiles[t][2]);
    }
  }
#undef HG_NAME
  return n;
}
