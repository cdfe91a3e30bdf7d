/*
 * cuda_sizing.c: what decide() and the run paths compute alike from a request and a decision: the
 * kernels' view of the problem and of the forward's tensors, the backward's workspace sizing (fa2
 * and fa3), the persistent grid, an accepted fa3 forward decision. Pure: no device work.
 */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/math/mask.h"
#include "cuda_internal.h"
#if FA_CUDA_HAS_FA3
#include "fa3_sm90/fa3_args.h"
#endif

int32_t cuda_fa3_grid(const cuda_device_info *dev) {
  long long n;
  return fa_env_int("FA_CUDA_FA3_GRID", 1, (long long)dev->sm_count - 1, &n) == FA_ENV_SET
             ? (int32_t)n
             : dev->sm_count;
}

void cuda_fa3_fwd_accept(fa_decision *out, const cuda_device_info *dev, int config, int tile_m,
                         int tile_n, size_t workspace_bytes) {
  cuda_choice ch;
  memset(&ch, 0, sizeof ch);
  ch.family = CUDA_FA3;
  ch.fa3_config = config;
  ch.grid = cuda_fa3_grid(dev);
  fa_decision_put(out, &ch, sizeof ch);
  out->supported = 1;
  out->num_splits = 1;
  out->tile_m = tile_m;
  out->tile_n = tile_n;
  out->deterministic = 1;
  out->workspace_bytes = workspace_bytes;
}

/* Deterministic fa2 backward: split s of n owns a dQ accumulator and visits its key tiles in
   order. Enough splits to give every SM two blocks, never more than there are key tiles: each
   split costs one more fp32 copy of dQ in the workspace. */
int32_t cuda_bwd_dq_splits(const fa_request *req, int32_t tile_n, int32_t sm_count) {
  int64_t n_blocks = (req->seqlen_k + tile_n - 1) / tile_n;
  int64_t parallel = req->batch * req->heads_kv;
  int64_t want = parallel > 0 ? (2 * (int64_t)sm_count + parallel - 1) / parallel : 1;
  if (want > n_blocks) want = n_blocks;
  return want < 1 ? 1 : (int32_t)want;
}

cuda_problem cuda_problem_of(const fa_request *req) {
  const fa_params *p = req->params;
  cuda_problem pb;
  memset(&pb, 0, sizeof pb);
  pb.batch = (int32_t)req->batch;
  pb.seqlen_q = (int32_t)req->seqlen_q;
  pb.seqlen_k = (int32_t)req->seqlen_k;
  pb.heads_q = (int32_t)req->heads_q;
  pb.heads_kv = (int32_t)req->heads_kv;
  pb.head_dim = (int32_t)req->head_dim;
  pb.scale = req->scale;
  pb.softcap = p->softcap > 0.0f ? p->softcap : 0.0f;
  fa_mask m = fa_mask_make(p->causal, p->causal_align, p->window_enabled, p->window_left,
                           p->window_right, req->seqlen_q, req->seqlen_k);
  pb.mask.shift = m.shift;
  pb.mask.left = m.left;
  pb.mask.right = m.right;
  pb.bf16 = req->dtype == FA_BF16;
  pb.stream = p->stream;
  return pb;
}

void cuda_strides_of(const fa_tensor *t, cuda_strides *s) {
  const int packed = t->ndim == 3;
  s->batch = packed ? 0 : t->strides[0];
  s->row = t->strides[packed ? 0 : 1];
  s->head = t->strides[packed ? 1 : 2];
}

void cuda_lse_strides_of(const fa_request *req, cuda_lse_strides *s) {
  const fa_tensor *l = req->lse;
  memset(s, 0, sizeof *s);
  if (req->lse_packed) { /* [heads_q, total_q] */
    s->head = l->strides[0];
    s->row = l->strides[1];
  } else {
    s->batch = l->strides[0];
    s->head = l->strides[1];
    s->row = l->strides[2];
  }
}

void cuda_fwd_args_of(const fa_request *req, cuda_fwd_args *a) {
  memset(a, 0, sizeof *a);
  a->q = fa_tensor_base(req->q);
  a->k = fa_tensor_base(req->k);
  a->v = fa_tensor_base(req->v);
  a->out = fa_tensor_base(req->out);
  cuda_strides_of(req->q, &a->q_str);
  cuda_strides_of(req->k, &a->k_str);
  cuda_strides_of(req->v, &a->v_str);
  cuda_strides_of(req->out, &a->o_str);
  if (req->lse && req->lse->data) {
    a->lse = (float *)fa_tensor_base(req->lse);
    cuda_lse_strides_of(req, &a->lse_str);
  }
  a->p = cuda_problem_of(req);
}

const int32_t *cuda_index_ptr(const fa_tensor *t) {
  return t ? (const int32_t *)fa_tensor_base(t) : NULL;
}

void cuda_seq_index_of(const fa_request *req, cuda_seq_index *ix) {
  const fa_params *p = req->params;
  memset(ix, 0, sizeof *ix);
  ix->cu_q = cuda_index_ptr(p->cu_seqlens_q);
  ix->cu_k = cuda_index_ptr(p->cu_seqlens_k);
  ix->total_q = p->cu_seqlens_q ? (int32_t)req->q->shape[0] : 0;
  ix->total_k = p->cu_seqlens_k && !p->block_table ? (int32_t)req->k->shape[0] : 0;
  ix->seqused_k = cuda_index_ptr(p->seqused_k);
  ix->causal = p->causal;
  ix->causal_align = p->causal_align;
  ix->window_enabled = p->window_enabled;
  ix->window_left = p->window_left;
  ix->window_right = p->window_right;
  ix->lse_packed = req->lse_packed;
}

void cuda_bwd_sizing(const fa_request *req, const fa2_tile_config *cfg, int32_t deterministic,
                     int32_t sm_count, cuda_bwd_args *a) {
  a->p = cuda_problem_of(req);
  const fa_params *p = req->params;
  a->seqs = p->cu_seqlens_q || p->cu_seqlens_k || p->seqused_k;
  if (a->seqs) cuda_seq_index_of(req, &a->ix);
  a->head_dim_padded = cfg->head_dim_padded;
  a->tile_m = cfg->tile_m;
  a->deterministic = deterministic;
  a->dq_splits = deterministic ? cuda_bwd_dq_splits(req, cfg->tile_n, sm_count) : 1;
  fa2_bwd_plan_tail(a, cfg->tile_n, sm_count);
}

void cuda_fa3_bwd_sizing(const fa_request *req, int32_t deterministic, int32_t grid,
                         cuda_bwd_args *a) {
#if FA_CUDA_HAS_FA3
  a->p = cuda_problem_of(req);
  const fa_params *p = req->params;
  a->seqs = p->cu_seqlens_q || p->cu_seqlens_k || p->seqused_k;
  if (a->seqs) cuda_seq_index_of(req, &a->ix);
  const int tile_n = FA3_BWD_TILE_N(fa3_bwd_padded_head_dim(req->head_dim));
  const int n_tiles = (int)((req->seqlen_k + tile_n - 1) / tile_n);
  fa3_bwd_sizing(
      a, deterministic,
      deterministic ? fa3_sched_det_splits(req->batch * req->heads_kv, n_tiles, grid) : 1);
#else
  (void)req, (void)deterministic, (void)grid, (void)a;
#endif
}
