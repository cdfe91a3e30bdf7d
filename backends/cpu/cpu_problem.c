/*
 * cpu_problem.c: a request reduced to the numbers the passes use, and the mask applied to a tile.
 */
#include "cpu_internal.h"

void cpu_problem_init(cpu_problem *pb, const fa_request *req, int tile_m, int tile_n) {
  const fa_params *params = req->params;
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
  pb->scale = req->scale;
  /* decide() refuses sliding windows for now; they arrive by passing params->window_enabled,
     window_left and window_right here, as the passes see the mask only through fa_mask. */
  pb->mask =
      fa_mask_make(params->causal, params->causal_align, 0, 0, 0, req->seqlen_q, req->seqlen_k);
}

void cpu_tile_row_bounds(const cpu_problem *pb, int64_t r0, int rows, int64_t c0, int nc, int *jlo,
                         int *jhi) {
  for (int i = 0; i < rows; ++i) {
    int64_t lo, hi;
    fa_mask_key_range(&pb->mask, r0 + i, pb->seqlen_k, &lo, &hi);
    lo -= c0;
    hi -= c0;
    lo = lo < 0 ? 0 : (lo > nc ? nc : lo);
    hi = hi < lo ? lo : (hi > nc ? nc : hi);
    jlo[i] = (int)lo;
    jhi[i] = (int)hi;
  }
}
