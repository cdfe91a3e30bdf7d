/*
 * validate.h: what the files of the core's argument validation share (not installed): the checks
 * of one tensor, of index tensors, of the sequence lengths and of fa_forward_kvcache's arguments.
 * Each returns FA_OK or sets the thread's error message naming the argument and the constraint
 * ("k.shape[3] = 72 but must equal q.shape[3] = 64") and returns its status.
 */
#ifndef FA_CORE_VALIDATE_H
#define FA_CORE_VALIDATE_H

#include "internal.h"

#define INVALID FA_ERR_INVALID_ARGUMENT
#define FA_MAX_HEAD_DIM 1024

#define TRY(expr)                 \
  do {                            \
    fa_status st_ = (expr);       \
    if (st_ != FA_OK) return st_; \
  } while (0)

/* validate_tensor.c: one tensor. */

/* Structure: non-NULL, rank, dtype, device, shapes, strides, alignment, and that every byte it
   can address is representable in 64 bits. */
fa_status fa_check_tensor(const char *name, const fa_tensor *t, int32_t ndim);
/* An output must not alias itself. */
fa_status fa_check_no_self_overlap(const char *name, const fa_tensor *t);
fa_status fa_expect_dim(const char *name, const fa_tensor *t, int dim, int64_t want,
                        const char *want_name);
/* t.shape[dim] == ref.shape[ref_dim], the message naming both. */
fa_status fa_expect_dim_of(const char *name, const fa_tensor *t, int dim, const char *ref_name,
                           const fa_tensor *ref, int ref_dim);
fa_status fa_expect_same_shape(const char *name, const fa_tensor *t, const char *ref_name,
                               const fa_tensor *ref);
fa_status fa_expect_dtype(const char *name, const fa_tensor *t, fa_dtype want, const char *why);
fa_status fa_expect_device(const char *name, const fa_tensor *t, fa_device want);
/* Index tensors (cu_seqlens, seqused_k, block_table, cache_seqlens): int32, on q's device. */
fa_status fa_check_index(const char *name, const fa_tensor *t, int32_t ndim, fa_device dev);
/* Element i of a 1-D int32 tensor in host memory. */
int32_t fa_read_i32(const fa_tensor *t, int64_t i);

/* validate_overlap.c: no output (ts[0..n_out)) shares a byte with another tensor of ts (n <=
   FA_APART_MAX, none NULL); else FA_ERR_INVALID_ARGUMENT naming both. */
#define FA_APART_MAX 20
fa_status fa_check_outputs_apart(const char *const *names, const fa_tensor *const *ts, int n,
                                 int n_out);

/* validate.c: a caller's versioned struct (struct_size first) copied into this version's. */
fa_status fa_resolve_versioned(const char *name, const char *type, const char *init,
                               const void *user, size_t known, void *out);

/* validate_lengths.c: the batch and the largest sequence lengths of a call, from q and k or from
   the index tensors that pack or page them (cu_seqlens_q/k, block_table; seqused_k is checked
   too). A paged call's page size is stored in p->page_size. */
fa_status fa_resolve_lengths(fa_params *p, const fa_tensor *q, const fa_tensor *k, fa_device dev,
                             int64_t *batch, int64_t *seqlen_q, int64_t *seqlen_k);
/* validate_kvcache.c: fa_forward_kvcache's own arguments (the new tokens, the cache lengths, the
   rotary tables), resolved into *kv; their values are fa_core_check_indices'. */
fa_status fa_check_kvcache(const fa_call_args *a, fa_kvcache_args *kv, int64_t batch,
                           int64_t heads_kv, int64_t head_dim, int64_t head_dim_v,
                           int64_t *seqlen_new, int64_t *rotary_dim);

/* validate_fp8.c: FP8 inputs. */

static inline int fa_dtype_is_fp8(fa_dtype dt) { return dt == FA_F8E4M3 || dt == FA_F8E5M2; }
/* What an FP8 call may be: fa_forward on dense tensors, out f16 or bf16. */
fa_status fa_check_fp8_call(fa_op op, fa_dtype dt, const fa_params *p, const fa_tensor *out);
/* The descales of a call with inputs of dtype `dt`: present only for FP8, each a float32
   [batch or 1, heads or 1, blocks] on dev with blocks = ceil(seqlen / rows) (1 for rows 0). */
fa_status fa_check_descales(const fa_params *p, fa_dtype dt, fa_device dev, int64_t batch,
                            int64_t heads_q, int64_t heads_kv, int64_t seqlen_q, int64_t seqlen_k);
/* One descale tensor as above; rows_name names the field or argument that gives `rows`. */
fa_status fa_check_descale(const char *name, const fa_tensor *t, fa_device dev, int64_t batch,
                           int64_t heads, const char *heads_name, int64_t seqlen, int64_t rows,
                           const char *rows_name);

#endif /* FA_CORE_VALIDATE_H */
