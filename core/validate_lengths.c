/*
 * validate_lengths.c: the batch and the sequence lengths of a call (core/validate.h): padded q and
 * k, packed ones (cu_seqlens_q/k), paged keys (block_table), seqused_k: their shapes; the values
 * they hold are validate_indices.c's.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "validate.h"

/* A packed side (q or k with its cu_seqlens): its longest sequence, max_seqlen
   (required when there are tokens), at most the packed total: a larger bound only sizes an empty
   grid. */
static fa_status packed_length(const char *cu_name, const fa_tensor *t, const char *max_name,
                               int64_t max_seqlen, int64_t *len) {
  if (max_seqlen == 0 && t->shape[0] > 0)
    return fa_core_set_error(INVALID, "params.%s = 0 but must be set with %s", max_name, cu_name);
  *len = max_seqlen > t->shape[0] ? t->shape[0] : max_seqlen;
  return FA_OK;
}

fa_status fa_resolve_lengths(fa_params *p, const fa_tensor *q, const fa_tensor *k, fa_device dev,
                             int64_t *batch, int64_t *seqlen_q, int64_t *seqlen_k) {
  if (p->cu_seqlens_q) {
    TRY(fa_check_index("params.cu_seqlens_q", p->cu_seqlens_q, 1, dev));
    if (p->cu_seqlens_q->shape[0] < 1)
      return fa_core_set_error(INVALID,
                               "params.cu_seqlens_q.shape[0] = 0 but must be batch + 1 >= 1");
    *batch = p->cu_seqlens_q->shape[0] - 1;
    TRY(packed_length("cu_seqlens_q", q, "max_seqlen_q", p->max_seqlen_q, seqlen_q));
  } else {
    *batch = q->shape[0];
    *seqlen_q = q->shape[1];
  }

  if (p->block_table) {
    TRY(fa_check_index("params.block_table", p->block_table, 2, dev));
    TRY(fa_expect_dim("params.block_table", p->block_table, 0, *batch, "batch"));
    const int64_t page = k->shape[1];
    if (page < 1 || page > 1024 || (page & (page - 1)) != 0)
      return fa_core_set_error(INVALID,
                               "k.shape[1] = %lld (the page size) must be a power of two "
                               "in [1, 1024]",
                               (long long)page);
    if (p->page_size != 0 && p->page_size != page)
      return fa_core_set_error(INVALID, "params.page_size = %lld but k.shape[1] = %lld",
                               (long long)p->page_size, (long long)page);
    p->page_size = page;
    /* The keys a block_table row can address; a longer max_seqlen_k would index past the row. */
    int64_t table_keys;
    if (__builtin_mul_overflow(p->block_table->shape[1], page, &table_keys) ||
        table_keys > (INT64_C(1) << 62))
      return fa_core_set_error(INVALID,
                               "params.block_table.shape[1] = %lld pages of %lld keys address "
                               "more than 2^62 keys",
                               (long long)p->block_table->shape[1], (long long)page);
    if (p->max_seqlen_k > table_keys)
      return fa_core_set_error(INVALID,
                               "params.max_seqlen_k = %lld exceeds the %lld keys a block_table "
                               "row addresses (%lld pages of %lld)",
                               (long long)p->max_seqlen_k, (long long)table_keys,
                               (long long)p->block_table->shape[1], (long long)page);
    *seqlen_k = p->max_seqlen_k ? p->max_seqlen_k : table_keys;
  } else if (p->cu_seqlens_k) {
    TRY(fa_check_index("params.cu_seqlens_k", p->cu_seqlens_k, 1, dev));
    TRY(fa_expect_dim("params.cu_seqlens_k", p->cu_seqlens_k, 0, *batch + 1,
                      "cu_seqlens_q.shape[0]"));
    TRY(packed_length("cu_seqlens_k", k, "max_seqlen_k", p->max_seqlen_k, seqlen_k));
  } else {
    TRY(fa_expect_dim("k", k, 0, *batch, "q.shape[0]"));
    *seqlen_k = k->shape[1];
    if (p->page_size != 0)
      return fa_core_set_error(INVALID, "params.page_size = %lld but params.block_table is NULL",
                               (long long)p->page_size);
  }
  if (p->seqused_k) {
    TRY(fa_check_index("params.seqused_k", p->seqused_k, 1, dev));
    TRY(fa_expect_dim("params.seqused_k", p->seqused_k, 0, *batch, "batch"));
  }

  return FA_OK;
}
