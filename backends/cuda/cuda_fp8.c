/*
 * cuda_fp8.c: the CUDA backend's FP8 forward (docs/fp8.md). Whether it runs a request with FP8 q,
 * k and v (FlashAttention-3's FP8 kernel on sm_90; nothing else takes FP8), its workspace (the
 * dynamic schedule's tile counter, then V transposed by the pre-pass), and the kernel's FP8
 * arguments (descales, Vᵀ), which decide and run compute alike.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_names.h"
#if FA_CUDA_HAS_FA3
#include "fa3_sm90/fa3_args.h"
#endif

/* The tile counter's slot at the aligned workspace's start; Vᵀ after it. */
#define CUDA_FP8_VT_OFFSET 256

#if FA_CUDA_HAS_FA3
/* q, k and v are read by TMA as bytes: the head dim contiguous, the other strides non-negative
   multiples of 16 bytes, the first element 16-byte aligned. out is written in pairs of elements
   as the f16/bf16 kernels write it (refuse_layout's rule). 1 when refused. */
static int refuse_fp8_layout(const char *name, const fa_tensor *t, int64_t multiple,
                             fa_decision *out) {
  const int last = t->ndim - 1;
  if (t->strides[last] != 1)
    return fa_core_refuse(out,
                          "%s.strides[%d] = %lld: cuda.fa3's FP8 forward needs the head dim "
                          "contiguous (stride 1)",
                          name, last, (long long)t->strides[last]),
           1;
  for (int i = 0; i < last; ++i)
    if (t->strides[i] < 0 || t->strides[i] % multiple != 0)
      return fa_core_refuse(out,
                            "%s.strides[%d] = %lld: cuda.fa3's FP8 forward needs non-negative "
                            "strides that are multiples of %lld elements",
                            name, i, (long long)t->strides[i], (long long)multiple),
             1;
  if (((uintptr_t)t->data + (uintptr_t)t->byte_offset) % 16 != 0)
    return fa_core_refuse(out,
                          "%s: first element at an address not 16-byte aligned; cuda.fa3's FP8 "
                          "forward needs 16",
                          name),
           1;
  return 0;
}

/* The descale rules the kernel can honour (1 when refused): q's per block of any rows; k's and v's
   per block of whole key tiles (their blocks are descale_rows_k rows), or one per (batch, head). */
static int refuse_descales(const fa_request *req, int tile_n, fa_decision *out) {
  const fa_params *p = req->params;
  const int blocks =
      (p->k_descale && p->k_descale->shape[2] > 1) || (p->v_descale && p->v_descale->shape[2] > 1);
  if (blocks && p->descale_rows_k % tile_n != 0)
    return fa_core_refuse(out,
                          "params.descale_rows_k = %lld: cuda.fa3's FP8 forward takes k and v "
                          "descales per block of whole key tiles (a multiple of %d rows) or one "
                          "per (batch, head)",
                          (long long)p->descale_rows_k, tile_n),
           1;
  return 0;
}

/* The configuration of an FP8 request on dev, or -1 with the reason in out. FA_CUDA_FA3_CONFIG (a
   test knob, fa3_fwd_takes) applies where it names this head dim's FP8 configuration; a name that
   is no configuration refuses the call. */
static int fp8_config(const fa_request *req, const cuda_device_info *dev, fa_decision *out) {
  const char *named = getenv("FA_CUDA_FA3_CONFIG");
  if (named && *named && fa3_fwd_config_named(named) < 0)
    return fa_core_refuse(out, "FA_CUDA_FA3_CONFIG names '%s', which is no fa3 configuration",
                          named),
           -1;
  const int id = fa3_fwd_fp8_tile_size(req->head_dim, INT64_MAX);
  if (id < 0)
    return fa_core_refuse(out,
                          "head_dim %lld: cuda.fa3's FP8 forward has head dims 64, 128 and 256",
                          (long long)req->head_dim),
           -1;
  const fa3_fwd_config *c = fa3_fwd_config_of(id);
  if ((int64_t)c->smem_bytes > dev->smem_optin)
    return fa_core_refuse(out,
                          "cuda.fa3's FP8 forward at head_dim %lld needs %zu KiB of shared memory; "
                          "%d allowed",
                          (long long)req->head_dim, c->smem_bytes / 1024,
                          (int)(dev->smem_optin / 1024)),
           -1;
  return id;
}
#endif

size_t cuda_fp8_workspace_bytes(const fa_request *req, int config) {
#if FA_CUDA_HAS_FA3
  const fa3_fwd_config *c = fa3_fwd_config_of(config);
  if (!c) return 0;
  return CUDA_WORKSPACE_ALIGN + CUDA_FP8_VT_OFFSET +
         fa3_fp8_vt_bytes(req->batch, req->heads_kv, req->head_dim, req->seqlen_k, c->tile_n);
#else
  (void)req, (void)config;
  return 0;
#endif
}

void cuda_fp8_decide(const fa_request *req, const cuda_device_info *dev, fa_decision *out) {
  const fa_params *p = req->params;
  const char *dt = fa_dtype_name(req->dtype);
  if (req->op != FA_OP_FORWARD) {
    fa_core_refuse(out, "dtype %s: FP8 inputs run in fa_forward only (no FP8 backward or KV cache)",
                   dt);
    return;
  }
  if (p->kernel_family && strcmp(p->kernel_family, "fa3") != 0) {
    if (!strcmp(p->kernel_family, "fa2"))
      fa_core_refuse(
          out, "kernel_family fa2: cuda.fa2 has no FP8 kernel (dtype %s needs sm_90's fa3)", dt);
    else
      fa_core_refuse(out, "kernel_family '%s' is unknown to cuda (families: fa2, fa3)",
                     p->kernel_family);
    return;
  }
#if !FA_CUDA_HAS_FA3
  (void)dev;
  fa_core_refuse(
      out, "dtype %s: FP8 needs sm_90 (fa3), which this build lacks (FA_CUDA_ARCHS without 90)",
      dt);
#else
  if (dev->cc_major != 9 || dev->as_sm80) {
    fa_core_refuse(out, "dtype %s: FP8 needs sm_90 (fa3); %s is sm_%d%d%s", dt, dev->name,
                   (int)dev->cc_major, (int)dev->cc_minor, dev->as_sm80 ? ", run as sm_80" : "");
    return;
  }
  if (req->head_dim_v != req->head_dim) {
    fa_core_refuse(out, "head_dim_v %lld != head_dim %lld: cuda.fa3's FP8 forward needs them equal",
                   (long long)req->head_dim_v, (long long)req->head_dim);
    return;
  }
  /* Every field the kernel cannot honour, by name. */
  const char *field = p->alibi_slopes     ? "ALiBi (alibi_slopes)"
                      : p->dropout_p > 0  ? "dropout (dropout_p > 0)"
                      : p->softcap > 0.0f ? "softcap"
                      : p->seqused_k      ? "seqused_k"
                      : p->cu_seqlens_q   ? "varlen (cu_seqlens_q)"
                      : p->cu_seqlens_k   ? "varlen (cu_seqlens_k)"
                      : p->block_table    ? "paged KV (block_table)"
                                          : NULL;
  if (field) {
    fa_core_refuse(out, "%s is not supported by cuda.fa3's FP8 forward", field);
    return;
  }
  if (p->num_splits > 1) {
    fa_core_refuse(out, "num_splits = %d: cuda.fa3's FP8 forward has no split-KV (0 or 1)",
                   (int)p->num_splits);
    return;
  }
  /* Grid limits: the pre-pass's grid is (key blocks, heads_kv, batch); rows are int32. */
  if (req->batch > 65535 || req->heads_kv > 65535 || req->heads_q > 65535) {
    fa_core_refuse(out, "batch %lld or heads %lld > 65535 (cuda grid limit)", (long long)req->batch,
                   (long long)req->heads_q);
    return;
  }
  if (req->seqlen_q > INT32_MAX - 256 || req->seqlen_k > INT32_MAX - 256) {
    fa_core_refuse(out, "seqlen > 2^31 - 256 is not supported by cuda");
    return;
  }
  const fa_tensor *in[] = {req->q, req->k, req->v};
  const char *names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i)
    if (refuse_fp8_layout(names[i], in[i], 16, out)) return;
  if (refuse_fp8_layout("out", req->out, 8, out)) return;
  const int id = fp8_config(req, dev, out);
  if (id < 0) return;
  const fa3_fwd_config *c = fa3_fwd_config_of(id);
  if (refuse_descales(req, c->tile_n, out)) return;
  const int pack = fa3_fwd_pack(c, req->heads_q, req->heads_kv, req->seqlen_q);
  const int64_t rows = c->tile_m / pack;
  if ((req->seqlen_q + rows - 1) / rows * (req->heads_q / pack) * req->batch > INT32_MAX) {
    fa_core_refuse(out, "cuda.fa3's FP8 forward: more than 2^31 query tiles");
    return;
  }
  cuda_fa3_fwd_accept(out, dev, id, c->tile_m, c->tile_n, cuda_fp8_workspace_bytes(req, id));
  const cuda_name_parts name = {.family = "fa3.sm90",
                                .op = "fwd",
                                .dtype = dt,
                                .head_dim = req->head_dim,
                                .causal = p->causal,
                                .window = p->window_enabled,
                                .pack = pack};
  cuda_kernel_name(&name, out->kernel, sizeof out->kernel);
#endif
}

#if FA_CUDA_HAS_FA3
/* A descale's element pointer and strides (0 along a dimension of size 1). */
static const float *descale_of(const fa_tensor *t, int64_t *batch, int64_t *head, int64_t *block) {
  *batch = *head = *block = 0;
  if (!t) return NULL;
  *batch = t->shape[0] == 1 ? 0 : t->strides[0];
  *head = t->shape[1] == 1 ? 0 : t->strides[1];
  *block = t->shape[2] == 1 ? 0 : t->strides[2];
  return (const float *)fa_tensor_base(t);
}

void cuda_fp8_args_of(const fa_request *req, int config, void *workspace, fa3_fwd_args *x) {
  const fa_params *p = req->params;
  const fa3_fwd_config *c = fa3_fwd_config_of(config);
  fa3_fp8_args *f = &x->fp8;
  memset(f, 0, sizeof *f);
  f->q_descale = descale_of(p->q_descale, &f->qd_batch, &f->qd_head, &f->qd_block);
  f->k_descale = descale_of(p->k_descale, &f->kd_batch, &f->kd_head, &f->kd_block);
  f->v_descale = descale_of(p->v_descale, &f->vd_batch, &f->vd_head, &f->vd_block);
  f->q_rows = p->q_descale && p->q_descale->shape[2] > 1 ? (int32_t)p->descale_rows_q : 0;
  /* k's and v's blocks: descale_rows_k rows, whole key tiles (decide); a tensor of one block
     reads it at block stride 0 */
  f->k_tiles = p->descale_rows_k > 0 ? (int32_t)(p->descale_rows_k / c->tile_n) : 0;
  f->e5m2 = req->dtype == FA_F8E5M2;
  f->vt_keys = (int32_t)fa3_fp8_vt_keys(req->seqlen_k, c->tile_n);
  unsigned char *ws = (unsigned char *)cuda_workspace_aligned(workspace);
  f->vt = ws ? ws + CUDA_FP8_VT_OFFSET : NULL;
  x->tile_counter = (int32_t *)ws;
  x->a.p.bf16 = req->out->dtype == FA_BF16; /* out's dtype chooses the kernel's output */
}
#endif
