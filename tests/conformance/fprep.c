/*
 * fprep.c: what the feature cases (run_features.c) and the kvcache cases (run_kvcache.c) share:
 * the reference problem and the params of a case, its index tensors, and the refusal rule with a
 * feature case's needs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

const char *const i_names[I_COUNT] = {"cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table",
                                      "alibi_slopes"};

/* A refused call (see refusal): the case's needs are its features, its shape's and its tensors'. */
int frefused(report *rep, frun *R, const fcase *c, const fa_tensor *const *data, int n,
             const char *call, fa_status st) {
  needs nd = {{0}, 0};
  const char *f[12];
  const int nf = fcase_features(c, f, 12);
  need_shape(&nd, c->dtype, c->cm != CM_NONE, c->cm == CM_TL, c->hq, c->hkv, c->d, c->dv, 1,
             c->bwd && !c->page && !c->kvc);
  for (int i = 0; i < nf; ++i) need(&nd, f[i]);
  need_views(&nd, data, n);
  /* fa3 runs both passes over packed and used-key sequences (the backward where
     cuda_fa3_bwd_seqs_takes, fa3 named as need_family assumes; not deterministic), not pages,
     key pieces or fa_forward_kvcache */
  const int bwd_seqs = cuda_fa3_bwd_seqs_takes(c->d, c->cm != CM_NONE || c->win, 1);
  const int seqs = (c->bwd && (c->varlen || c->seqused) && (!bwd_seqs || c->determ)) ||
                   c->page > 0 || c->splits > 1 || c->kvc;
  need_family(&nd, R->bk, !c->bwd, seqs, c->d, c->dv, fc_max_q(c), fc_max_k(c), c->softcap, data,
              n);
  /* CUDA's FP8 forward (fa3) scales k and v per whole 128-key tile: finer blocks are its
     documented gap (docs/fp8.md). */
  if (c->fp8 && c->dsl == 3 && c->rows_k % 128 != 0 && strcmp(R->bk->name, "cuda") == 0)
    need(&nd, "family:fp8_descale_blocks");
  /* FA_CUDA_SMEM_LIMIT gives the device an A100's or an sm_86's shared memory, parts without FP8:
     the FP8 kernel's Hopper tiles that no longer fit are refused with their size. */
  if (c->fp8 && strcmp(R->bk->name, "cuda") == 0 &&
      strstr(R->bk->desc->devices, "limited by FA_CUDA_SMEM_LIMIT"))
    need(&nd, "family:fp8_smem");
  return refusal(rep, R->bk, &nd, call, st, R->skip, sizeof R->skip);
}

int splits_honoured(int asked, const fa_run_info *info, int64_t keys) {
  if (info->num_splits == asked) return 1;
  const int64_t tiles = info->tile_n > 0 ? (keys + info->tile_n - 1) / info->tile_n : 0;
  return tiles > 0 && tiles < asked && info->num_splits == tiles;
}

void fproblem(const fcase *c, ref_problem *p, ref_ext *x, int64_t *lens_q, int64_t *lens_k,
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

void fparams(const fcase *c, const backend_ctx *bk, const ref_ext *x, fa_params *params,
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

/* A 1-D or 2-D int32 host tensor with the given values. */
int make_i32(tu_tensor *t, int ndim, const int64_t *shape, const int64_t *vals) {
  if (tu_alloc(t, FA_I32, ndim, shape, TU_CONTIGUOUS)) return -1;
  int64_t n = tu_numel(t);
  for (int64_t f = 0; f < n; ++f) tu_set_flat(t, f, (double)vals[f]);
  return tu_snapshot(t);
}

/* dst[di with its last axis = c] = src[si with its last axis = c] for c < cols. */
void copy_row(tu_tensor *dst, const int64_t *di, const tu_tensor *src, const int64_t *si,
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

int make_alibi(tu_tensor *t, const fcase *c, const double *slopes) {
  const int64_t sa1[1] = {c->hq}, sa2[2] = {c->b, c->hq};
  if (tu_alloc(t, FA_F32, c->alibi, c->alibi == 2 ? sa2 : sa1, TU_CONTIGUOUS)) return -1;
  for (int64_t f = 0; f < tu_numel(t); ++f) tu_set_flat(t, f, slopes[f]);
  return tu_snapshot(t);
}

int64_t *shuffled_table(const fcase *c, int64_t nblk, int reversed, tu_rng *rng) {
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)nblk);
  int64_t *table = malloc(sizeof(int64_t) * (size_t)(c->b * c->max_blocks));
  if (!perm || !table) {
    free(perm);
    free(table);
    return NULL;
  }
  for (int64_t i = 0; i < nblk; ++i) perm[i] = reversed ? nblk - 1 - i : i;
  for (int64_t i = nblk - 1; i > 0; --i) { /* Fisher-Yates */
    int64_t j = (int64_t)(tu_rng_u64(rng) % (uint64_t)(i + 1)), tmp = perm[i];
    perm[i] = perm[j], perm[j] = tmp;
  }
  for (int64_t i = 0; i < c->b * c->max_blocks; ++i) table[i] = perm[i];
  free(perm);
  return table;
}
