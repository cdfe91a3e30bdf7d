/*
 * fa3_bwd_host.c: the FlashAttention-3 backward's host side: its sizing, the TMA maps of Q, K, V
 * and dO, and the launch sequence it shares with fa2's backward (the workspace carved alike, the
 * preprocessing and dQ conversion kernels).
 */
#include <stdio.h>
#include <string.h>

#include "../fa2_sm80/fa2_launch.h"
#include "fa3_args.h"
#include "tma_map.h"

void fa3_bwd_sizing(cuda_bwd_args *a, int32_t deterministic, int32_t dq_splits) {
  a->head_dim_padded = fa3_bwd_padded_head_dim(a->p.head_dim);
  a->tile_m = FA3_BWD_TILE_M;
  a->tile_n = FA3_BWD_TILE_N(a->head_dim_padded);
  a->dq_layout = fa3_bwd_dq_layout(a->head_dim_padded);
  a->deterministic = deterministic ? 1 : 0;
  a->dq_splits = deterministic && dq_splits > 1 ? dq_splits : 1;
  a->tail_tiles = a->tail_first = a->tail_piece_steps = a->tail_pieces = 0;
  a->sched_counters = 1; /* the persistent grid's dynamic schedule (fa3_bwd_args.tile_counter) */
}

/* Over sequences: the views of Q, dO, K and V (fa3_seq_tensor_map), whose rows end at each
   sequence's end. 0, or -1 with the reason. */
static int seq_maps(fa3_bwd_args *x, char *err, size_t err_len) {
  const cuda_bwd_args *a = &x->a;
  const cuda_problem *p = &a->p;
  fa3_seq_view vw[4]; /* q, dout, k, v */
  if (fa3_seq_views(&a->ix, p, &a->q_str, &a->do_str, &a->k_str, &a->v_str, vw, err, err_len))
    return -1;
  x->q_ext = vw[0].ext;
  x->k_ext = vw[2].ext;
  x->q_batch_rows = vw[0].batch_rows;
  x->do_batch_rows = vw[1].batch_rows;
  x->k_batch_rows = vw[2].batch_rows;
  x->v_batch_rows = vw[3].batch_rows;
  const uint32_t tile_n = FA3_BWD_TILE_N(fa3_bwd_padded_head_dim(p->head_dim));
  return fa3_seq_tensor_map(x->tq, p->bf16, a->q, &a->q_str, &vw[0], p->heads_q, p->head_dim,
                            FA3_BWD_TILE_M, 1, err, err_len) ||
                 fa3_seq_tensor_map(x->tdo, p->bf16, a->dout, &a->do_str, &vw[1], p->heads_q,
                                    p->head_dim, FA3_BWD_TILE_M, 1, err, err_len) ||
                 fa3_seq_tensor_map(x->tk, p->bf16, a->k, &a->k_str, &vw[2], p->heads_kv,
                                    p->head_dim, tile_n, 1, err, err_len) ||
                 fa3_seq_tensor_map(x->tv, p->bf16, a->v, &a->v_str, &vw[3], p->heads_kv,
                                    p->head_dim, tile_n, 1, err, err_len)
             ? -1
             : 0;
}

int fa3_bwd_launch(fa3_bwd_args *x, void *workspace, char *err, size_t err_len) {
  cuda_bwd_args *a = &x->a;
  const cuda_problem *p = &a->p;
  const int padded = fa3_bwd_padded_head_dim(p->head_dim);
  int (*main_fn)(const fa3_bwd_args *) = padded == 64    ? fa3_bwd_main_launch_hd64
                                         : padded == 128 ? fa3_bwd_main_launch_hd128
                                         : padded == 256 ? fa3_bwd_main_launch_hd256
                                                         : NULL;
  const int tile_n = FA3_BWD_TILE_N(padded);
  if (!main_fn || a->head_dim_padded != padded || a->tile_m != FA3_BWD_TILE_M ||
      a->tile_n != tile_n || a->dq_layout != fa3_bwd_dq_layout(padded) || a->dq_splits < 1 ||
      (a->dq_splits > 1 && !a->deterministic) || a->tail_tiles != 0) {
    snprintf(err, err_len, "fa3 backward: head_dim %d or its sizing is not fa3's",
             (int)p->head_dim);
    return -1;
  }
  if (p->batch == 0 || p->heads_q == 0) return 0;
  if (p->seqlen_q == 0 || p->seqlen_k == 0) {
    snprintf(err, err_len, "fa3 backward: no query rows or no keys (decide gives those to fa2)");
    return -1;
  }
  if (a->seqs) {
    if (a->deterministic) {
      snprintf(err, err_len, "fa3 backward over sequences: deterministic mode (fa2 runs it)");
      return -1;
    }
    if (seq_maps(x, err, err_len)) return -1;
  } else if (fa3_tensor_map(x->tq, p->bf16, a->q, &a->q_str, p->batch, p->seqlen_q, p->heads_q,
                            p->head_dim, FA3_BWD_TILE_M, 1, err, err_len) ||
             fa3_tensor_map(x->tdo, p->bf16, a->dout, &a->do_str, p->batch, p->seqlen_q, p->heads_q,
                            p->head_dim, FA3_BWD_TILE_M, 1, err, err_len) ||
             fa3_tensor_map(x->tk, p->bf16, a->k, &a->k_str, p->batch, p->seqlen_k, p->heads_kv,
                            p->head_dim, (uint32_t)tile_n, 1, err, err_len) ||
             fa3_tensor_map(x->tv, p->bf16, a->v, &a->v_str, p->batch, p->seqlen_k, p->heads_kv,
                            p->head_dim, (uint32_t)tile_n, 1, err, err_len))
    return -1;
  /* Over sequences every block takes items until the sequences' are done: the requested grid. */
  x->grid_blocks = a->seqs ? x->grid_blocks : fa3_bwd_grid_blocks(a, padded, x->grid_blocks);
  if (a->seqs && x->grid_blocks <= 0) {
    snprintf(err, err_len, "fa3 backward over sequences: no persistent grid (%d blocks)",
             (int)x->grid_blocks);
    return -1;
  }
  if (x->grid_blocks > 0)
    fa3_bwd_sched(a, padded, &x->sched_chunk, &x->sched_reverse);
  else
    x->sched_chunk = x->sched_reverse = 0;
  cuda_bwd_carve(a, workspace);
  x->tile_counter = NULL;
  if (x->grid_blocks > 0) {
    if (a->sched_counters < 1) {
      snprintf(err, err_len, "fa3 backward: the dynamic schedule's counter is not in the sizing");
      return -1;
    }
    x->tile_counter = a->sched_count; /* cleared by cuda_bwd_prologue */
  }
  /* The workspace's rows of LSE and D: a head's (and batch's) ws_head rows (cuda_bwd_carve),
     boxes of one query tile */
  const uint64_t rows_q = (uint64_t)a->ws_head;
  const uint64_t rows = (uint64_t)cuda_bwd_split_rows(a) / rows_q;
  if (fa_tma_map_f32_2d(x->tlse, a->lse_log2, rows_q, rows, rows_q * 4, FA3_BWD_TILE_M, 1, err,
                        err_len) ||
      fa_tma_map_f32_2d(x->tdsum, a->dsum, rows_q, rows, rows_q * 4, FA3_BWD_TILE_M, 1, err,
                        err_len))
    return -1;
  int e = cuda_bwd_prologue(a);
  if (e == 0) e = main_fn(x);
  if (e == 0) e = cuda_bwd_convert_dq_launch(a);
  return e;
}
