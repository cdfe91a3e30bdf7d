/*
 * validate_kvcache.c: fa_forward_kvcache's own arguments (core/validate.h): the new tokens, the
 * cache lengths and the rotary tables.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "validate.h"

static fa_status resolve_kvcache_args(const fa_kvcache_args *user, fa_kvcache_args *out) {
  memset(out, 0, sizeof *out);
  if (!user) return fa_core_set_error(INVALID, "kv: NULL (kv.cache_seqlens is required)");
  return fa_resolve_versioned("kv", "fa_kvcache_args", "fa_kvcache_args_init()", user, sizeof *out,
                              out);
}

/* fa_forward_kvcache's own arguments: the new tokens, the cache lengths and the rotary tables. */
fa_status fa_check_kvcache(const fa_call_args *a, fa_kvcache_args *kv, int64_t batch,
                           int64_t heads_kv, int64_t head_dim, int64_t head_dim_v,
                           int64_t *seqlen_new, int64_t *rotary_dim) {
  TRY(resolve_kvcache_args(a->kv, kv));
  const fa_device dev = a->q->device;
  TRY(fa_check_index("kv.cache_seqlens", kv->cache_seqlens, 1, dev));
  TRY(fa_expect_dim("kv.cache_seqlens", kv->cache_seqlens, 0, batch, "batch"));
  if (!kv->k_new != !kv->v_new)
    return fa_core_set_error(INVALID, "kv.k_new and kv.v_new must be given together");
  *seqlen_new = 0;
  if (kv->k_new) {
    static const char *const names[2] = {"kv.k_new", "kv.v_new"};
    const fa_tensor *t[2] = {kv->k_new, kv->v_new};
    for (int i = 0; i < 2; ++i) {
      TRY(fa_check_tensor(names[i], t[i], 4));
      TRY(fa_expect_dtype(names[i], t[i], a->q->dtype, "as q"));
      TRY(fa_expect_device(names[i], t[i], dev));
      TRY(fa_expect_dim(names[i], t[i], 0, batch, "q.shape[0]"));
      TRY(fa_expect_dim(names[i], t[i], 2, heads_kv, "heads_kv"));
    }
    TRY(fa_expect_dim("kv.v_new", kv->v_new, 1, kv->k_new->shape[1], "kv.k_new.shape[1]"));
    TRY(fa_expect_dim("kv.k_new", kv->k_new, 3, head_dim, "head_dim"));
    TRY(fa_expect_dim("kv.v_new", kv->v_new, 3, head_dim_v, "head_dim_v"));
    *seqlen_new = kv->k_new->shape[1];
  }
  *rotary_dim = 0;
  if (!kv->rotary_cos != !kv->rotary_sin)
    return fa_core_set_error(INVALID, "kv.rotary_cos and kv.rotary_sin must be given together");
  if (kv->rotary_cos) {
    TRY(fa_check_tensor("kv.rotary_cos", kv->rotary_cos, 2));
    TRY(fa_check_tensor("kv.rotary_sin", kv->rotary_sin, 2));
    if (kv->rotary_cos->dtype != FA_F32 && kv->rotary_cos->dtype != a->q->dtype)
      return fa_core_set_error(INVALID, "kv.rotary_cos.dtype = %s but must be f32 or q's %s",
                               fa_dtype_name(kv->rotary_cos->dtype), fa_dtype_name(a->q->dtype));
    TRY(fa_expect_dtype("kv.rotary_sin", kv->rotary_sin, kv->rotary_cos->dtype, "as rotary_cos"));
    TRY(fa_expect_device("kv.rotary_cos", kv->rotary_cos, dev));
    TRY(fa_expect_device("kv.rotary_sin", kv->rotary_sin, dev));
    TRY(fa_expect_same_shape("kv.rotary_sin", kv->rotary_sin, "kv.rotary_cos", kv->rotary_cos));
    *rotary_dim = 2 * kv->rotary_cos->shape[1];
    if (*rotary_dim < 2 || *rotary_dim > head_dim)
      return fa_core_set_error(INVALID,
                               "kv.rotary_cos.shape[1] = %lld: the rotary dim (twice it) must be "
                               "in [2, head_dim = %lld]",
                               (long long)kv->rotary_cos->shape[1], (long long)head_dim);
  }
  return FA_OK;
}
