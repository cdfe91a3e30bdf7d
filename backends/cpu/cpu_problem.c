/*
 * cpu_problem.c: a request reduced to the numbers the passes use, each sequence's lengths, mask
 * and row addressing (padded, packed or paged), and the mask applied to a tile.
 */
#include "core/math/philox.h"
#include "cpu_internal.h"
#include "cpu_kernels.h"

void cpu_problem_init(cpu_problem *pb, const fa_request *req, const cpu_choice *choice) {
  const fa_params *params = req->params;
  const int tile_m = choice->tile_m, tile_n = choice->tile_n;
  pb->op = req->op;
  pb->kern = choice->kern;
  pb->batch = req->batch;
  pb->seqlen_q = req->seqlen_q;
  pb->seqlen_k = req->seqlen_k;
  pb->heads_q = req->heads_q;
  pb->heads_kv = req->heads_kv;
  pb->group = req->heads_kv > 0 ? req->heads_q / req->heads_kv : 1;
  if (pb->group < 1) pb->group = 1;
  pb->d = (int)req->head_dim;
  pb->dv = (int)req->head_dim_v;
  pb->tm = tile_m;
  pb->tn = tile_n;
  pb->q_tiles = (req->seqlen_q + tile_m - 1) / tile_m;
  pb->k_tiles = (req->seqlen_k + tile_n - 1) / tile_n;
  pb->splits = choice->splits < 1 ? 1 : choice->splits;
  pb->rows_path = choice->rows_path;
  pb->pack = req->op != FA_OP_BACKWARD && pb->group > 1 && req->seqlen_q * pb->group <= tile_m
                 ? pb->group
                 : 1;
  /* The few-query-rows path packs every query head of a sequence into one task (cpu_decode.c). */
  if (pb->rows_path) pb->pack = pb->heads_q;
  pb->scale = req->scale;
  pb->softcap = params->softcap > 0.0f ? params->softcap : 0.0f;
  pb->alibi = params->alibi_slopes;
  pb->transform = pb->softcap > 0.0f || pb->alibi != NULL;
  pb->dropout = params->dropout_p > 0.0f;
  pb->drop_thr = fa_dropout_threshold(params->dropout_p);
  pb->drop_seed = params->dropout_seed;
  pb->drop_offset = params->dropout_offset;
  pb->drop_scale = pb->dropout ? 1.0f / (1.0f - params->dropout_p) : 1.0f;
  pb->positioned = req->pos.set != 0;
  pb->pos_q0 = pb->positioned ? req->pos.q0 : 0;
  pb->pos_k0 = pb->positioned ? req->pos.k0 : 0;
  pb->pos_shift = pb->positioned ? req->pos.shift : 0;
  pb->rotary_dim = req->op == FA_OP_KVCACHE ? req->rotary_dim : 0;
  pb->bf16dp = choice->bf16dp;
  pb->pairs_tiled = pb->bf16dp && pb->kern->gemm_bf16_tiled && !pb->dropout &&
                    req->op == FA_OP_FORWARD && tile_m % 32 == 0 && tile_n % 32 == 0 &&
                    pb->d % 32 == 0 && pb->dv % 32 == 0;
}

int cpu_bf16dp_applies(const fa_request *req, const cpu_kernels *kern) {
  /* fa_forward (fa_forward_kvcache's rotated queries would be rounded to bf16 as well), and
     fa_backward where the table says so (amx). The backward's condition is the forward's, so a
     backward on bf16 products recomputes the scores of a forward on them: the same product,
     bit for bit. */
  const int bf16_op =
      req->op == FA_OP_FORWARD || (req->op == FA_OP_BACKWARD && kern->bf16_backward);
  return kern->gemm_bf16 != NULL && bf16_op && req->dtype == FA_BF16 && req->head_dim % 2 == 0 &&
         req->head_dim_v % 2 == 0;
}

int cpu_rows_path(const fa_request *req) {
  /* Only fa_forward_kvcache: fa_forward's scores must be the tile gemm's, which its backward
     pass recomputes (cpu_forward.c, attend()). */
  if (req->op != FA_OP_KVCACHE || req->seqlen_q < 1 || req->seqlen_q > CPU_ROWS_MAX) return 0;
  if (req->heads_q * req->seqlen_q > CPU_ROWS_PATH_MAX) return 0; /* all heads' rows in one tile */
  if (req->head_dim % CPU_ROWS_DIM_MULTIPLE || req->head_dim_v % CPU_ROWS_DIM_MULTIPLE) return 0;
  return req->k->strides[3] == 1 && req->v->strides[3] == 1;
}

int32_t cpu_index_at(const fa_tensor *t, int64_t i) {
  return ((const int32_t *)fa_tensor_base(t))[i * t->strides[0]];
}

/* [batch, seq, heads, dim]: sequence b's rows. */
static void rows_padded(const fa_tensor *t, int64_t b, cpu_rows *r) {
  r->data = t ? fa_tensor_base(t) : NULL;
  r->dtype = t ? t->dtype : FA_F32;
  r->pages = NULL;
  r->page_stride = r->block_stride = r->page_size = 0;
  if (!t) {
    r->base = r->rs = r->hs = r->cs = 0;
    return;
  }
  r->base = b * t->strides[0];
  r->rs = t->strides[1];
  r->hs = t->strides[2];
  r->cs = t->strides[3];
}

/* [total, heads, dim]: the rows from `start` on. */
static void rows_packed(const fa_tensor *t, int64_t start, cpu_rows *r) {
  rows_padded(NULL, 0, r);
  if (!t) return;
  r->data = fa_tensor_base(t);
  r->dtype = t->dtype;
  r->base = start * t->strides[0];
  r->rs = t->strides[0];
  r->hs = t->strides[1];
  r->cs = t->strides[2];
}

/* [num_blocks, page_size, heads, dim] through block_table row b. */
static void rows_paged(const fa_tensor *t, const fa_tensor *bt, int64_t b, cpu_rows *r) {
  rows_padded(t, 0, r);
  r->base = 0;
  /* A table without entries (no pages per sequence) addresses no keys: validate makes the key
     count 0 then, so no row is ever looked up through the NULL row. */
  const int32_t *table = (const int32_t *)fa_tensor_base(bt);
  r->pages = table ? table + b * bt->strides[0] : NULL;
  r->page_stride = bt->strides[1];
  r->block_stride = t->strides[0];
  r->page_size = t->shape[1];
}

void cpu_seq_init(const fa_request *req, const cpu_problem *pb, int64_t b, cpu_seq *sq) {
  const fa_params *p = req->params;
  sq->b = b;
  sq->pos0 = 0;

  /* Query side: packed by cu_seqlens_q or padded. */
  if (p->cu_seqlens_q) {
    int64_t start = cpu_index_at(p->cu_seqlens_q, b);
    sq->sq = cpu_index_at(p->cu_seqlens_q, b + 1) - start;
    rows_packed(req->q, start, &sq->q);
    rows_packed(req->out, start, &sq->out);
    rows_packed(req->dout, start, &sq->dout);
    rows_packed(req->dq, start, &sq->dq);
  } else {
    sq->sq = pb->seqlen_q;
    rows_padded(req->q, b, &sq->q);
    rows_padded(req->out, b, &sq->out);
    rows_padded(req->dout, b, &sq->dout);
    rows_padded(req->dq, b, &sq->dq);
  }

  /* Key side: paged, packed by cu_seqlens_k, or padded. */
  if (p->block_table) {
    sq->k_rows = pb->seqlen_k;
    rows_paged(req->k, p->block_table, b, &sq->k);
    rows_paged(req->v, p->block_table, b, &sq->v);
    rows_padded(NULL, 0, &sq->dk);
    rows_padded(NULL, 0, &sq->dv);
  } else if (p->cu_seqlens_k) {
    int64_t start = cpu_index_at(p->cu_seqlens_k, b);
    sq->k_rows = cpu_index_at(p->cu_seqlens_k, b + 1) - start;
    rows_packed(req->k, start, &sq->k);
    rows_packed(req->v, start, &sq->v);
    rows_packed(req->dk, start, &sq->dk);
    rows_packed(req->dv, start, &sq->dv);
  } else {
    sq->k_rows = pb->seqlen_k;
    rows_padded(req->k, b, &sq->k);
    rows_padded(req->v, b, &sq->v);
    rows_padded(req->dk, b, &sq->dk);
    rows_padded(req->dv, b, &sq->dv);
  }
  if (req->op == FA_OP_KVCACHE) {
    sq->pos0 = cpu_index_at(req->kv->cache_seqlens, b);
    sq->sk = sq->pos0 + req->seqlen_new;
    sq->k_rows = sq->sk;
  } else {
    sq->sk = p->seqused_k ? cpu_index_at(p->seqused_k, b) : sq->k_rows;
  }
  sq->mask = fa_mask_make(p->causal, p->causal_align, p->window_enabled, p->window_left,
                          p->window_right, sq->sq, sq->sk);

  /* lse: unpadded [heads_q, total_q] (row i at column cu_q[b] + i) or [batch, heads_q, seq]. */
  sq->lse = NULL;
  sq->lse_hs = sq->lse_rs = 0;
  /* An lse without elements (no query rows) has no base to offset: nothing is written to it. */
  if (req->lse && req->lse->data) {
    const fa_tensor *l = req->lse;
    float *base = (float *)fa_tensor_base(l);
    if (req->lse_packed) {
      sq->lse = base + cpu_index_at(p->cu_seqlens_q, b) * l->strides[1];
      sq->lse_hs = l->strides[0];
      sq->lse_rs = l->strides[1];
    } else {
      sq->lse = base + b * l->strides[0];
      sq->lse_hs = l->strides[1];
      sq->lse_rs = l->strides[2];
    }
  }
}

void cpu_tile_row_bounds(const cpu_seq *sq, int64_t r0, int rows, int64_t c0, int nc, int *jlo,
                         int *jhi) {
  for (int i = 0; i < rows; ++i) {
    int64_t lo, hi;
    fa_mask_key_range(&sq->mask, r0 + i, sq->sk, &lo, &hi);
    lo -= c0;
    hi -= c0;
    lo = lo < 0 ? 0 : (lo > nc ? nc : lo);
    hi = hi < lo ? lo : (hi > nc ? nc : hi);
    jlo[i] = (int)lo;
    jhi[i] = (int)hi;
  }
}

void cpu_split_chunk(int64_t first, int64_t last, int c, int n, int64_t *t0, int64_t *t1) {
  int64_t count = last > first ? last - first : 0;
  *t0 = first + count * c / n;
  *t1 = first + count * (c + 1) / n;
}
