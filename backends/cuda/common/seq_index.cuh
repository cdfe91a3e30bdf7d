/*
 * seq_index.cuh: a sequence of its own length as every kernel over sequences reads it (the
 * forward over sequences, its split-KV combine, the backward over sequences and its steps around
 * the main kernel): its rows and keys from the device tables of cuda_seq_index, every value
 * bounded before use; its mask; where its LSE rows are.
 */
#ifndef FA_CUDA_SEQ_INDEX_CUH
#define FA_CUDA_SEQ_INDEX_CUH

#include "attn_args.h"
#include "core/math/mask.h"

__device__ __forceinline__ int seq_clamp(int x, int lo, int hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

/* Sequence b's query rows [q_start, q_start + sq) of packed q (q_start 0 where q is padded) and
   its keys: k_rows that the tensor holds for it from k_start, of which the first sk are used
   (seq_q_rows_of: the rows alone). */
struct seq_rows {
  int q_start, sq;
  int k_start, k_rows, sk;
};

/* max_q: the grid's rows (the longest sequence); cap_k: the keys a padded sequence holds;
   k_packed: k is packed along cu_k (not where the keys are paged). Rows stay within the packed
   totals and max_q, keys within what the sequence holds. */
__device__ __forceinline__ void seq_q_rows_of(const cuda_seq_index &ix, int b, int max_q,
                                              int &q_start, int &sq) {
  q_start = 0;
  sq = max_q;
  if (ix.cu_q) {
    q_start = seq_clamp(ix.cu_q[b], 0, ix.total_q);
    sq = min(seq_clamp(ix.cu_q[b + 1], q_start, ix.total_q) - q_start, max_q);
  }
}
__device__ __forceinline__ seq_rows seq_rows_of(const cuda_seq_index &ix, int b, int max_q,
                                                int cap_k, bool k_packed) {
  seq_rows r;
  seq_q_rows_of(ix, b, max_q, r.q_start, r.sq);
  r.k_start = 0;
  r.k_rows = cap_k;
  if (k_packed) {
    r.k_start = seq_clamp(ix.cu_k[b], 0, ix.total_k);
    r.k_rows = seq_clamp(ix.cu_k[b + 1], r.k_start, ix.total_k) - r.k_start;
  }
  r.sk = ix.seqused_k ? seq_clamp(ix.seqused_k[b], 0, r.k_rows) : r.k_rows;
  return r;
}

__device__ __forceinline__ fa_mask seq_mask_of(const cuda_seq_index &ix, int sq, int sk) {
  return fa_mask_make(ix.causal, ix.causal_align, ix.window_enabled, ix.window_left,
                      ix.window_right, sq, sk);
}

/* Element offset of row i of query head h in the lse tensor: packed [heads_q, total_q] at the
   sequence's packed row, else [batch, heads_q, rows]. */
__device__ __forceinline__ int64_t seq_lse_at(const cuda_seq_index &ix, const cuda_lse_strides &st,
                                              int b, int h, int q_start, int i) {
  return ix.lse_packed ? (int64_t)h * st.head + (int64_t)(q_start + i) * st.row
                       : (int64_t)b * st.batch + (int64_t)h * st.head + (int64_t)i * st.row;
}

/* The backward's workspace row (D, the log2 LSE, the dQ accumulator's row) of row 0 of query
   head h of sequence b, whose packed rows start at q_start (attn_args.h: cuda_bwd_args.ws_head):
   a multiple of the query tile, so that the accumulator's layouts (CUDA_DQ_*) hold within it. */
__device__ __forceinline__ int64_t seq_bwd_ws_row(const cuda_bwd_args &a, int b, int h,
                                                  int q_start) {
  if (a.seqs && a.ix.cu_q) {
    const int64_t m = a.tile_m;
    return (int64_t)h * a.ws_head + ((int64_t)q_start + (int64_t)b * m + m - 1) / m * m;
  }
  return ((int64_t)b * a.p.heads_q + h) * a.ws_head;
}

#endif /* FA_CUDA_SEQ_INDEX_CUH */
