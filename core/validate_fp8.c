/*
 * validate_fp8.c: the rules of FP8 inputs (docs/fp8.md). An FP8 call is fa_forward on dense
 * tensors with an f16 or bf16 output; its descales are float32 [batch or 1, heads or 1, blocks],
 * one value per block of rows of a (batch, head), a size-1 dimension shared by all. fa_quantize
 * checks its descale with the same rule.
 */
#include <stdio.h>

#include "validate.h"

fa_status fa_check_fp8_call(fa_op op, fa_dtype dt, const fa_params *p, const fa_tensor *out) {
  if (op != FA_OP_FORWARD)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "q.dtype = %s: FP8 inputs are taken by fa_forward only (no FP8 "
                             "backward or KV cache; docs/fp8.md)",
                             fa_dtype_name(dt));
  if (p->cu_seqlens_q || p->block_table)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "params.%s is set: FP8 inputs are dense [batch, seqlen, heads, dim] "
                             "tensors (no varlen or paged KV with FP8)",
                             p->cu_seqlens_q ? "cu_seqlens_q" : "block_table");
  if (out->dtype != FA_F16 && out->dtype != FA_BF16)
    return fa_core_set_error(INVALID,
                             "out.dtype = %s but must be f16 or bf16 (the output of FP8 inputs)",
                             fa_dtype_name(out->dtype));
  return FA_OK;
}

fa_status fa_check_descale(const char *name, const fa_tensor *t, fa_device dev, int64_t batch,
                           int64_t heads, const char *heads_name, int64_t seqlen, int64_t rows,
                           const char *rows_name) {
  if (rows < 0)
    return fa_core_set_error(INVALID, "%s = %lld is negative (0: one block per sequence)",
                             rows_name, (long long)rows);
  if (!t) return FA_OK;
  TRY(fa_check_tensor(name, t, 3));
  TRY(fa_expect_dtype(name, t, FA_F32, "descales are float32"));
  TRY(fa_expect_device(name, t, dev));
  if (t->shape[0] != 1 && t->shape[0] != batch)
    return fa_core_set_error(INVALID, "%s.shape[0] = %lld but must be 1 or the batch, %lld", name,
                             (long long)t->shape[0], (long long)batch);
  if (t->shape[1] != 1 && t->shape[1] != heads)
    return fa_core_set_error(INVALID, "%s.shape[1] = %lld but must be 1 or %s, %lld", name,
                             (long long)t->shape[1], heads_name, (long long)heads);
  const int64_t blocks = rows > 0 ? seqlen / rows + (seqlen % rows != 0) : 1;
  if (t->shape[2] != blocks)
    return fa_core_set_error(INVALID,
                             "%s.shape[2] = %lld but must be %lld: ceil(seqlen %lld / %s %lld)%s",
                             name, (long long)t->shape[2], (long long)blocks, (long long)seqlen,
                             rows_name, (long long)rows, rows > 0 ? "" : " (0: one block)");
  return FA_OK;
}

fa_status fa_check_descales(const fa_params *p, fa_dtype dt, fa_device dev, int64_t batch,
                            int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_k) {
  if (!fa_dtype_is_fp8(dt)) {
    if (p->q_descale || p->k_descale || p->v_descale || p->descale_rows_q || p->descale_rows_k)
      return fa_core_set_error(INVALID,
                               "params.%s is set but q.dtype = %s: descales belong to FP8 inputs",
                               p->q_descale        ? "q_descale"
                               : p->k_descale      ? "k_descale"
                               : p->v_descale      ? "v_descale"
                               : p->descale_rows_q ? "descale_rows_q"
                                                   : "descale_rows_k",
                               fa_dtype_name(dt));
    return FA_OK;
  }
  TRY(fa_check_descale("params.q_descale", p->q_descale, dev, batch, heads_q, "heads_q", seqlen_q,
                       p->descale_rows_q, "params.descale_rows_q"));
  TRY(fa_check_descale("params.k_descale", p->k_descale, dev, batch, heads_kv, "heads_kv", seqlen_k,
                       p->descale_rows_k, "params.descale_rows_k"));
  TRY(fa_check_descale("params.v_descale", p->v_descale, dev, batch, heads_kv, "heads_kv", seqlen_k,
                       p->descale_rows_k, "params.descale_rows_k"));
  return FA_OK;
}
