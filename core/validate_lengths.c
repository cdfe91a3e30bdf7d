/*
 * validate_lengths.c: the batch and the sequence lengths of a call (core/validate.h): padded q and
 * k, packed ones (cu_seqlens_q/k), paged keys (block_table), seqused_k; and, where the host can
 * read them, the index values a backend will follow.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "validate.h"

/* Offsets of packed sequences must start at 0, never decrease and end at the packed total. Only
 * checked where the host can read them. */
static fa_status check_cu_seqlens(const char *name, const fa_tensor *cu, int64_t total,
                                  int64_t max_len, const char *max_name) {
  if (cu->device.kind != FA_DEVICE_CPU) return FA_OK;
  int64_t n = cu->shape[0];
  if (fa_read_i32(cu, 0) != 0)
    return fa_core_set_error(INVALID, "%s[0] = %d but must be 0", name, (int)fa_read_i32(cu, 0));
  for (int64_t i = 1; i < n; ++i)
    if (fa_read_i32(cu, i) < fa_read_i32(cu, i - 1))
      return fa_core_set_error(INVALID, "%s[%lld] = %d is less than %s[%lld] = %d", name,
                               (long long)i, (int)fa_read_i32(cu, i), name, (long long)(i - 1),
                               (int)fa_read_i32(cu, i - 1));
  for (int64_t i = 1; i < n; ++i)
    if (fa_read_i32(cu, i) - fa_read_i32(cu, i - 1) > max_len)
      return fa_core_set_error(
          INVALID, "%s: sequence %lld has %d tokens, more than %s = %lld", name, (long long)(i - 1),
          (int)(fa_read_i32(cu, i) - fa_read_i32(cu, i - 1)), max_name, (long long)max_len);
  if (fa_read_i32(cu, n - 1) > total)
    return fa_core_set_error(INVALID, "%s[%lld] = %d exceeds the %lld packed tokens", name,
                             (long long)(n - 1), (int)fa_read_i32(cu, n - 1), (long long)total);
  return FA_OK;
}

/* A packed side (q or k with its cu_seqlens): the offsets, and its longest sequence, max_seqlen
   (required when there are tokens), at most the packed total: a larger bound only sizes an empty
   grid. */
static fa_status packed_length(const char *cu_name, const fa_tensor *cu, const fa_tensor *t,
                               const char *max_name, int64_t max_seqlen, int64_t *len) {
  char cu_param[32], max_param[32];
  snprintf(cu_param, sizeof cu_param, "params.%s", cu_name);
  snprintf(max_param, sizeof max_param, "params.%s", max_name);
  TRY(check_cu_seqlens(cu_param, cu, t->shape[0], max_seqlen, max_param));
  if (max_seqlen == 0 && t->shape[0] > 0)
    return fa_core_set_error(INVALID, "%s = 0 but must be set with %s", max_param, cu_name);
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
    TRY(packed_length("cu_seqlens_q", p->cu_seqlens_q, q, "max_seqlen_q", p->max_seqlen_q,
                      seqlen_q));
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
    TRY(packed_length("cu_seqlens_k", p->cu_seqlens_k, k, "max_seqlen_k", p->max_seqlen_k,
                      seqlen_k));
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

/* Index values a host backend will dereference: block_table entries inside the pool, seqused_k
 * within the keys there are. Checked where the host can read them. */
fa_status fa_check_host_indices(const fa_params *p, int64_t batch, const fa_tensor *k,
                                int64_t seqlen_k) {
  if (p->block_table && p->block_table->device.kind == FA_DEVICE_CPU) {
    const fa_tensor *bt = p->block_table;
    for (int64_t b = 0; b < bt->shape[0]; ++b)
      for (int64_t j = 0; j < bt->shape[1]; ++j) {
        int32_t v;
        size_t at = (size_t)(b * bt->strides[0] + j * bt->strides[1]) * 4;
        memcpy(&v, (const char *)fa_tensor_base(bt) + at, 4);
        if (v < 0 || v >= k->shape[0])
          return fa_core_set_error(INVALID,
                                   "params.block_table[%lld][%lld] = %d is outside the %lld pages "
                                   "of k.shape[0]",
                                   (long long)b, (long long)j, (int)v, (long long)k->shape[0]);
      }
  }
  if (p->seqused_k && p->seqused_k->device.kind == FA_DEVICE_CPU) {
    for (int64_t b = 0; b < batch; ++b) {
      int32_t used = fa_read_i32(p->seqused_k, b);
      int64_t avail = seqlen_k;
      if (p->cu_seqlens_k && p->cu_seqlens_k->device.kind == FA_DEVICE_CPU)
        avail = fa_read_i32(p->cu_seqlens_k, b + 1) - fa_read_i32(p->cu_seqlens_k, b);
      if (used < 0 || used > avail)
        return fa_core_set_error(INVALID,
                                 "params.seqused_k[%lld] = %d is outside [0, %lld] (the keys "
                                 "sequence %lld has)",
                                 (long long)b, (int)used, (long long)avail, (long long)b);
    }
  }
  return FA_OK;
}
