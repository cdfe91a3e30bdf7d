/*
 * validate_indices.c: the values of the index tensors a backend follows (cu_seqlens_q/k,
 * seqused_k, block_table, kv.cache_seqlens), checked wherever the host can read them: on every
 * call for host tensors, and through fa_core_check_indices for a device backend's host copies
 * (params.check_indices).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "validate.h"

/* Offsets of packed sequences start at 0, never decrease, give no sequence more than max_len
   tokens and end within the packed total. */
static fa_status check_cu_seqlens(const char *name, const fa_tensor *cu, int64_t total,
                                  int64_t max_len, const char *max_name) {
  if (!cu || cu->device.kind != FA_DEVICE_CPU) return FA_OK;
  const int64_t n = cu->shape[0];
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

/* Every block_table entry names a page of the pool. */
static fa_status check_block_table(const fa_tensor *bt, int64_t pages) {
  if (!bt || bt->device.kind != FA_DEVICE_CPU) return FA_OK;
  for (int64_t b = 0; b < bt->shape[0]; ++b)
    for (int64_t j = 0; j < bt->shape[1]; ++j) {
      int32_t v;
      const size_t at = (size_t)(b * bt->strides[0] + j * bt->strides[1]) * 4;
      memcpy(&v, (const char *)fa_tensor_base(bt) + at, 4);
      if (v < 0 || v >= pages)
        return fa_core_set_error(INVALID,
                                 "params.block_table[%lld][%lld] = %d is outside the %lld pages "
                                 "of k.shape[0]",
                                 (long long)b, (long long)j, (int)v, (long long)pages);
    }
  return FA_OK;
}

/* seqused_k within the keys each sequence has. */
static fa_status check_seqused(const fa_params *p, int64_t batch, int64_t seqlen_k) {
  const fa_tensor *used_t = p->seqused_k, *cu = p->cu_seqlens_k;
  if (!used_t || used_t->device.kind != FA_DEVICE_CPU) return FA_OK;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t used = fa_read_i32(used_t, b);
    int64_t avail = seqlen_k;
    if (cu && cu->device.kind == FA_DEVICE_CPU) avail = fa_read_i32(cu, b + 1) - fa_read_i32(cu, b);
    if (used < 0 || used > avail)
      return fa_core_set_error(INVALID,
                               "params.seqused_k[%lld] = %d is outside [0, %lld] (the keys "
                               "sequence %lld has)",
                               (long long)b, (int)used, (long long)avail, (long long)b);
  }
  return FA_OK;
}

/* fa_forward_kvcache: the append fits the cache, the positions the rotary tables. */
static fa_status check_cache_seqlens(const fa_request *req) {
  const fa_kvcache_args *kv = req->kv;
  if (!kv || kv->cache_seqlens->device.kind != FA_DEVICE_CPU) return FA_OK;
  const fa_params *p = req->params;
  const int64_t capacity = req->seqlen_k, fresh = req->seqlen_new;
  const int64_t rows_q = (p->causal || p->window_enabled) ? req->seqlen_q : 1;
  for (int64_t b = 0; b < req->batch; ++b) {
    const int32_t len = fa_read_i32(kv->cache_seqlens, b);
    if (len < 0 || len + fresh > capacity)
      return fa_core_set_error(INVALID,
                               "kv.cache_seqlens[%lld] = %d: with %lld new tokens it must stay "
                               "within the cache's %lld positions",
                               (long long)b, (int)len, (long long)fresh, (long long)capacity);
    const int64_t last = len + (fresh > rows_q ? fresh : rows_q);
    if (kv->rotary_cos && last > kv->rotary_cos->shape[0])
      return fa_core_set_error(INVALID,
                               "kv.rotary_cos.shape[0] = %lld but sequence %lld needs positions "
                               "up to %lld",
                               (long long)kv->rotary_cos->shape[0], (long long)b,
                               (long long)(last - 1));
  }
  return FA_OK;
}

fa_status fa_core_check_indices(const fa_request *req) {
  const fa_params *p = req->params;
  TRY(check_cu_seqlens("params.cu_seqlens_q", p->cu_seqlens_q, req->q->shape[0], p->max_seqlen_q,
                       "params.max_seqlen_q"));
  if (!p->block_table)
    TRY(check_cu_seqlens("params.cu_seqlens_k", p->cu_seqlens_k, req->k->shape[0], p->max_seqlen_k,
                         "params.max_seqlen_k"));
  TRY(check_block_table(p->block_table, req->k->shape[0]));
  TRY(check_seqused(p, req->batch, req->seqlen_k));
  return check_cache_seqlens(req);
}
