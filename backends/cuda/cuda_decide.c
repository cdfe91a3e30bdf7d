/*
 * cuda_decide.c: the CUDA backend's one decide-function. Whether a request is supported, which
 * kernel family and configuration run, their tiles and the workspace are answered here and
 * nowhere else; fa_plan, fa_backend_info's feature list and the call itself go through it, and
 * run() carries out what the decision's payload (cuda_choice) records. Pure: no allocation and no
 * device work (the probe's facts are read once per process).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_names.h"
#include "fa2_sm80/fa2_args.h"
#include "fa2_sm80/fa2_tiles.h"
#include "fa3_sm90/fa3_args.h"

/* The kernels read rows with 16-byte copies: the last dimension contiguous, every other stride a
   multiple of 8 elements and the first element 16-byte aligned (packed tensors have 3 dims). */
static int refuse_layout(const char *name, const fa_tensor *t, fa_decision *out) {
  if (!t) return 0;
  const int last = t->ndim - 1;
  if (t->strides[last] != 1) {
    fa_core_refuse(out, "%s.strides[%d] = %lld: cuda.fa2 needs the head dim contiguous (stride 1)",
                   name, last, (long long)t->strides[last]);
    return 1;
  }
  for (int i = 0; i < last; ++i)
    if (t->strides[i] % 8 != 0) {
      fa_core_refuse(
          out, "%s.strides[%d] = %lld: cuda.fa2 needs strides that are multiples of 8 elements",
          name, i, (long long)t->strides[i]);
      return 1;
    }
  uintptr_t addr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  if (addr % 16 != 0) {
    fa_core_refuse(out, "%s: first element at an address not 16-byte aligned; cuda.fa2 needs 16",
                   name);
    return 1;
  }
  return 0;
}

/* Every fa_params field is honoured or refused here, never ignored. */
static int refuse_params(const fa_request *req, fa_decision *out) {
  const fa_params *p = req->params;
  if (p->kernel_family && strcmp(p->kernel_family, "fa2") != 0 &&
      strcmp(p->kernel_family, "fa3") != 0) {
    fa_core_refuse(out, "kernel_family '%s' is unknown to cuda (families: fa2, fa3)",
                   p->kernel_family);
    return 1;
  }
  if (p->alibi_slopes)
    return fa_core_refuse(out, "ALiBi (alibi_slopes) is not supported by cuda.fa2"), 1;
  if (p->dropout_p > 0.0f)
    return fa_core_refuse(out, "dropout (dropout_p > 0) is not supported by cuda.fa2"), 1;
  /* The backward runs varlen and seqused_k (fa2's kernel over sequences), not pages (as the CPU
     backend: a page may be shared between sequences, and its gradient is no one's). */
  if (req->op == FA_OP_BACKWARD) {
    if (p->block_table)
      return fa_core_refuse(out, "paged KV (block_table) in the backward is not supported by cuda"),
             1;
    if (cuda_seqs_refuse_index(req, out)) return 1;
    if (p->num_splits > 1)
      return fa_core_refuse(out, "num_splits = %d: the backward has no split-KV (0 or 1)",
                            (int)p->num_splits),
             1;
  }
  return 0;
}

#if FA_CUDA_HAS_FA3
/* TMA takes no negative strides: 1 with the reason when one of the tensors has one. */
static int negative_stride(const fa_tensor *const *ts, int count, char *why, size_t n) {
  for (int i = 0; i < count; ++i)
    for (int d = 0; d < 3; ++d)
      if (ts[i]->strides[d] < 0)
        return snprintf(why, n, "cuda.fa3 moves tensors by TMA, which takes no negative strides"),
               1;
  return 0;
}

/* Rows per batch of a padded tensor: its batch stride a whole number of its rows (or one batch). */
static int whole_rows(const fa_tensor *t, int64_t batch) {
  if (t->ndim == 3 || batch <= 1) return 1;
  return t->strides[1] > 0 && t->strides[0] >= 0 && t->strides[0] % t->strides[1] == 0;
}

/* 1 with the reason where fa3 over sequences cannot view a request's tensors (q, k, v and `last`,
   out or dout): fa3_seq_tensor_map needs rows and keys in them (a packed tensor's, a padded one's
   longest sequence) and addresses a padded tensor's rows from its batch stride in rows. */
static int fa3_seqs_layout_refused(const fa_request *req, const fa_tensor *last,
                                   const char *last_name, char *why, size_t n) {
  const fa_params *p = req->params;
  if ((p->cu_seqlens_q ? req->q->shape[0] : req->seqlen_q) == 0 ||
      (p->cu_seqlens_k ? req->k->shape[0] : req->seqlen_k) == 0)
    return snprintf(why, n, "cuda.fa3 over sequences needs rows and keys in the tensors"), 1;
  const fa_tensor *ts[] = {req->q, req->k, req->v, last};
  const char *names[] = {"q", "k", "v", last_name};
  for (int i = 0; i < 4; ++i)
    if (!whole_rows(ts[i], req->batch))
      return snprintf(why, n,
                      "cuda.fa3 over sequences needs %s's batch stride to be a whole number of "
                      "its rows (cuda.fa2 runs it)",
                      names[i]),
             1;
  return 0;
}

/* -1 with the reason where no fa3 forward configuration of the head dim fits the device. */
static int fa3_smem_refused(const fa_request *req, const cuda_device_info *dev, char *why,
                            size_t n) {
  snprintf(why, n, "cuda.fa3 at head_dim %lld needs more shared memory than the %d KiB allowed",
           (long long)req->head_dim, (int)(dev->smem_optin / 1024));
  return -1;
}

/* Whether the FlashAttention-3 backward takes a request that fa2 takes (1); if not, why (0). */
static int fa3_bwd_takes(const fa_request *req, const cuda_device_info *dev, char *why, size_t n) {
  const fa_params *p = req->params;
  if (req->seqlen_q == 0 || req->seqlen_k == 0)
    return snprintf(why, n, "cuda.fa3's backward needs a query row and a key (cuda.fa2 runs it)"),
           0;
  if (p->softcap > 0.0f) return snprintf(why, n, "cuda.fa3 has no softcap (cuda.fa2 runs it)"), 0;
  const int padded = fa3_bwd_padded_head_dim(req->head_dim);
  /* Over sequences: a persistent grid, which deterministic mode does not use. At head dims 192
     and 256 the wide kernel is 14-37% faster than fa2's without a mask and mostly slower under a
     causal one (11-27% at 1k keys and at hd192 8k; 14% faster at hd256 8k; H100, fa-bench
     --varlen): under a mask fa2's runs them unless fa3 is named. */
  if (p->cu_seqlens_q || p->cu_seqlens_k || p->seqused_k) {
    const int named_fa3 = p->kernel_family && strcmp(p->kernel_family, "fa3") == 0;
    if (padded == 256 && (p->causal || p->window_enabled) && !named_fa3)
      return snprintf(why, n,
                      "cuda.fa2's backward over sequences runs head_dim %lld under a mask "
                      "(faster there; kernel_family fa3 names cuda.fa3's)",
                      (long long)req->head_dim),
             0;
    if (p->deterministic)
      return snprintf(why, n,
                      "cuda.fa3's backward over sequences is not deterministic (cuda.fa2 runs "
                      "it)"),
             0;
    if (fa3_seqs_layout_refused(req, req->dout, "dout", why, n)) return 0;
  }
  if (!padded)
    return snprintf(why, n,
                    "cuda.fa3's backward has head_dim 64, 96, 128, 192 and 256 (asked %lld)",
                    (long long)req->head_dim),
           0;
  if ((int64_t)FA3_BWD_SMEM(padded) > dev->smem_optin)
    return snprintf(why, n,
                    "cuda.fa3's backward at head_dim %lld needs %zu KiB of shared memory; %d "
                    "allowed",
                    (long long)req->head_dim, FA3_BWD_SMEM(padded) / 1024,
                    (int)(dev->smem_optin / 1024)),
           0;
  const fa_tensor *ts[] = {req->q, req->k, req->v, req->dout};
  return !negative_stride(ts, 4, why, n);
}

/* Whether the FlashAttention-3 forward takes a request that fa2 takes: its configuration
   (fa3_fwd_tile_size), else -1 with the reason (-2: the request is refused altogether). */
static int fa3_fwd_takes(const fa_request *req, const cuda_device_info *dev, char *why, size_t n) {
  /* No keys: nothing for TMA to describe (a zero extent); fa2 writes the empty rows' result. */
  if (req->seqlen_k == 0) return snprintf(why, n, "cuda.fa3 needs at least one key"), -1;
  /* Softcap's tanh in the softmax loop makes the fa3 kernels spill: fa2 runs it. */
  if (req->params->softcap > 0.0f)
    return snprintf(why, n, "cuda.fa3 has no softcap (cuda.fa2 runs it)"), -1;
  if (!fa3_fwd_padded_head_dim(req->head_dim))
    return snprintf(why, n, "cuda.fa3 has head_dim 64, 96, 128, 192 and 256 (asked %lld)",
                    (long long)req->head_dim),
           -1;
  const fa_params *p = req->params;
  int id = fa3_fwd_tile_size(req->head_dim, p->causal || p->window_enabled, req->seqlen_k,
                             dev->smem_optin);
  /* FA_CUDA_FA3_CONFIG=<name> (a test knob): the named configuration runs at its head dim in
     place of the pick, so that a GPU check reaches every configuration with small cases. A name
     that is no configuration refuses the call rather than letting the check pass on another. */
  const char *named = getenv("FA_CUDA_FA3_CONFIG");
  if (named && *named) {
    const int forced = fa3_fwd_config_named(named);
    if (forced < 0)
      return snprintf(why, n, "FA_CUDA_FA3_CONFIG names '%s', which is no fa3 configuration",
                      named),
             -2;
    const fa3_fwd_config *c = fa3_fwd_config_of(forced);
    /* A SEQS configuration runs a dense request as sequences of its lengths (the tests reach it
       with every dense case so). */
    if (c->head_dim_padded == fa3_fwd_padded_head_dim(req->head_dim) && !(c->flags & FA3_FP8) &&
        (!(c->flags & FA3_SEQS) || !fa3_seqs_layout_refused(req, req->out, "out", why, n))) {
      if ((int64_t)c->smem_bytes > dev->smem_optin)
        return snprintf(why, n,
                        "FA_CUDA_FA3_CONFIG's %s needs %zu KiB of shared memory; %d allowed",
                        c->name, c->smem_bytes / 1024, (int)(dev->smem_optin / 1024)),
               -1;
      id = forced;
    }
  }
  if (id < 0) return fa3_smem_refused(req, dev, why, n);
  /* O too where the configuration stores it by TMA. */
  const fa_tensor *ts[] = {req->q, req->k, req->v, req->out};
  const int tma_out = (fa3_fwd_config_of(id)->flags & FA3_TMA_EPILOGUE) != 0;
  return negative_stride(ts, tma_out ? 4 : 3, why, n) ? -1 : id;
}
#endif

/* Whether FlashAttention-3 (Hopper) takes a request that fa2 takes: 1 with *config (the forward's
   configuration; -1 for the backward, which has one kernel per head dim), else 0 and why (-1:
   the request is refused altogether). */
static int fa3_takes(const fa_request *req, const cuda_device_info *dev, int *config, char *why,
                     size_t n) {
  *config = -1;
#if FA_CUDA_HAS_FA3
  if (dev->cc_major != 9 || dev->as_sm80)
    return snprintf(why, n, "cuda.fa3 needs sm_90 (%s is sm_%d%d%s)", dev->name, (int)dev->cc_major,
                    (int)dev->cc_minor, dev->as_sm80 ? ", run as sm_80" : ""),
           0;
  if (req->op != FA_OP_FORWARD) return fa3_bwd_takes(req, dev, why, n);
  *config = fa3_fwd_takes(req, dev, why, n);
  return *config >= 0 ? 1 : *config == -2 ? -1 : 0;
#else
  (void)req, (void)dev;
  snprintf(why, n, "cuda.fa3 is not built (FA_CUDA_ARCHS without 90)");
  return 0;
#endif
}

/* Whether fa3's forward over sequences (the SEQS configurations) takes a request that the forward
   over sequences runs: its configuration, else -1 and why. Forward calls of packed or used-key
   sequences only: paged K/V, split-KV and fa_forward_kvcache stay fa2's. */
static int fa3_seqs_takes(const fa_request *req, const cuda_device_info *dev, char *why, size_t n) {
#if FA_CUDA_HAS_FA3
  const fa_params *p = req->params;
  if (dev->cc_major != 9 || dev->as_sm80)
    return snprintf(why, n, "cuda.fa3 needs sm_90 (%s is sm_%d%d%s)", dev->name, (int)dev->cc_major,
                    (int)dev->cc_minor, dev->as_sm80 ? ", run as sm_80" : ""),
           -1;
  if (req->op != FA_OP_FORWARD || p->block_table || p->num_splits > 1)
    return snprintf(why, n,
                    "cuda.fa3 has no paged KV, split-KV or KV-cache path (cuda.fa2 runs them)"),
           -1;
  if (p->softcap > 0.0f) return snprintf(why, n, "cuda.fa3 has no softcap (cuda.fa2 runs it)"), -1;
  if (!fa3_fwd_padded_head_dim(req->head_dim))
    return snprintf(why, n, "cuda.fa3 has head_dim 64, 96, 128, 192 and 256 (asked %lld)",
                    (long long)req->head_dim),
           -1;
  const fa_tensor *ts[] = {req->q, req->k, req->v, req->out};
  if (negative_stride(ts, 4, why, n) || fa3_seqs_layout_refused(req, req->out, "out", why, n))
    return -1;
  const int id = fa3_fwd_seqs_tile_size(req->head_dim, dev->smem_optin);
  return id < 0 ? fa3_smem_refused(req, dev, why, n) : id;
#else
  (void)req, (void)dev;
  return snprintf(why, n, "cuda.fa3 is not built (FA_CUDA_ARCHS without 90)"), -1;
#endif
}

int cuda_fa3_seqs_decide(const fa_request *req, const cuda_device_info *dev, fa_decision *out) {
  const fa_params *p = req->params;
  const int named = p->kernel_family != NULL;
  const int want_fa3 = named && strcmp(p->kernel_family, "fa3") == 0;
  /* fa3's tiles hold 128 query rows (192 at head dim 64) and it runs no key pieces: shorter
     queries (decoding steps, speculative tokens) run fa2's 16- and 64-row kernels, which split
     the keys to fill the device. */
  if (named ? !want_fa3 : req->seqlen_q < 128) return 0;
  char why[200];
  const int id = fa3_seqs_takes(req, dev, why, sizeof why);
  if (id < 0) {
    if (!want_fa3) return 0;
    fa_core_refuse(out, "kernel_family fa3: %s", why);
    return 1;
  }
#if FA_CUDA_HAS_FA3
  const fa3_fwd_config *c = fa3_fwd_config_of(id);
  const size_t ws = fa3_fwd_workspace_bytes(c);
  cuda_fa3_fwd_accept(out, dev, id, c->tile_m, c->tile_n, ws ? ws + CUDA_WORKSPACE_ALIGN : 0);
  const cuda_name_parts name = {
      .family = "fa3.sm90",
      .op = "fwd",
      .dtype = cuda_dtype_name(req->dtype),
      .head_dim = req->head_dim,
      .causal = p->causal,
      .window = p->window_enabled,
      .varlen = p->cu_seqlens_q || p->cu_seqlens_k,
      .pack = fa3_fwd_pack(c, req->heads_q, req->heads_kv, req->seqlen_q)};
  cuda_kernel_name(&name, out->kernel, sizeof out->kernel);
#endif
  return 1;
}

const char *cuda_dtype_name(fa_dtype dt) {
  return dt == FA_F16 ? "f16" : (dt == FA_BF16 ? "bf16" : NULL);
}

/* The device the request's tensors are on, if the backend can use it (else refused, NULL). */
static const cuda_device_info *device_of(const fa_request *req, fa_decision *out) {
  if (req->device.kind != FA_DEVICE_CUDA) {
    fa_core_refuse(out, "tensors are in %s memory; cuda.fa2 reads CUDA device memory only",
                   fa_device_kind_name(req->device.kind));
    return NULL;
  }
  const cuda_state *s = cuda_state_get();
  if (!s->available) return fa_core_refuse(out, "%s", s->reason), NULL;
  const int id = req->device.id;
  if (id < 0 || id >= s->device_count) {
    fa_core_refuse(out, "device id %d: this process sees %d CUDA device(s)", id,
                   (int)s->device_count);
    return NULL;
  }
  if (!s->devices[id].usable) return fa_core_refuse(out, "%s", s->devices[id].reason), NULL;
  return &s->devices[id];
}

/* What every CUDA kernel needs of a request; 1 when it is refused. */
static int refuse_request(const fa_request *req, fa_decision *out) {
  if (!cuda_dtype_name(req->dtype)) {
    fa_core_refuse(out, "dtype %s is not supported by cuda.fa2 (f16, bf16)",
                   fa_dtype_name(req->dtype));
    return 1;
  }
  if (req->head_dim_v != req->head_dim) {
    fa_core_refuse(out, "head_dim_v %lld != head_dim %lld: cuda.fa2 needs them equal",
                   (long long)req->head_dim_v, (long long)req->head_dim);
    return 1;
  }
  if (req->head_dim % 8 != 0 || req->head_dim > FA2_MAX_HEAD_DIM) {
    fa_core_refuse(out, "head_dim %lld: cuda.fa2 supports multiples of 8 up to %d",
                   (long long)req->head_dim, FA2_MAX_HEAD_DIM);
    return 1;
  }
  if (refuse_params(req, out)) return 1;
  /* Grid limits: heads and batch are grid dimensions y and z; rows are int32 inside kernels. */
  if (req->batch > 65535 || req->heads_q > 65535) {
    fa_core_refuse(out, "batch %lld or heads_q %lld > 65535 (cuda.fa2 grid limit)",
                   (long long)req->batch, (long long)req->heads_q);
    return 1;
  }
  if (req->seqlen_q > INT32_MAX - 256 || req->seqlen_k > INT32_MAX - 256) {
    fa_core_refuse(out, "seqlen > 2^31 - 256 is not supported by cuda.fa2");
    return 1;
  }
  const fa_tensor *layout[] = {req->q,    req->k,  req->v,  req->out,
                               req->dout, req->dq, req->dk, req->dv};
  const char *names[] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};
  for (int i = 0; i < 8; ++i)
    if (refuse_layout(names[i], layout[i], out)) return 1;
  return 0;
}

void cuda_decide(const fa_request *req, fa_decision *out) {
  memset(out, 0, sizeof *out);
  const cuda_device_info *dev = device_of(req, out);
  if (!dev) return;
  if (req->dtype == FA_F8E4M3 || req->dtype == FA_F8E5M2) {
    cuda_fp8_decide(req, dev, out);
    return;
  }
  if (refuse_request(req, out)) return;
  if (cuda_seqs_wanted(req, dev)) {
    cuda_seqs_decide(req, dev, out);
    return;
  }
  const int fwd = req->op == FA_OP_FORWARD;
  cuda_choice ch;
  memset(&ch, 0, sizeof ch);
  const int ok =
      fwd ? fa2_fwd_config((int32_t)req->head_dim, dev->cc_major, dev->smem_optin, &ch.fa2)
          : fa2_bwd_config((int32_t)req->head_dim, dev->cc_major, dev->smem_optin, &ch.fa2);
  if (!ok) {
    fa_core_refuse(out, "head_dim %lld has no cuda.fa2 kernel", (long long)req->head_dim);
    return;
  }
  /* The compact tiles did not fit either (fa2_prepare_device skips exactly these kernels). */
  if ((int64_t)ch.fa2.smem_bytes > dev->smem_optin) {
    fa_core_refuse(
        out,
        "cuda.fa2 %s at head_dim %lld needs %zu KiB of shared memory per block even in its "
        "compact tiles; %s allows %d KiB",
        fwd ? "forward" : "backward", (long long)req->head_dim, ch.fa2.smem_bytes / 1024, dev->name,
        (int)(dev->smem_optin / 1024));
    return;
  }

  /* FlashAttention-3 where it applies (sm_90; head dims 64, 96, 128, 192, 256 in both passes),
     unless fa2 is asked for by name; asked for by name where it does not apply, refused with
     the reason. */
  const fa_params *p = req->params;
  char fa3_why[160] = "";
  const int want_fa2 = p->kernel_family && strcmp(p->kernel_family, "fa2") == 0;
  const int want_fa3 = p->kernel_family && strcmp(p->kernel_family, "fa3") == 0;
  const int fa3 = !want_fa2 && fa3_takes(req, dev, &ch.fa3_config, fa3_why, sizeof fa3_why);
  if (fa3 < 0) {
    fa_core_refuse(out, "%s", fa3_why);
    return;
  }
  if (want_fa3 && !fa3) {
    fa_core_refuse(out, "kernel_family fa3: %s", fa3_why);
    return;
  }
  ch.family = fa3 ? CUDA_FA3 : CUDA_FA2;
  ch.grid = cuda_fa3_grid(dev);
  if (!fa3) ch.fa3_config = -1;
  out->supported = 1;
  out->num_splits = 1;
  out->tile_m = ch.fa2.tile_m;
  out->tile_n = ch.fa2.tile_n;
  int heads_per_tile = 1;
  size_t ws = 0;
#if FA_CUDA_HAS_FA3
  if (fa3 && fwd) { /* GQA packing is named ".gqa<heads per tile>" */
    const fa3_fwd_config *c = fa3_fwd_config_of(ch.fa3_config);
    out->tile_m = c->tile_m;
    out->tile_n = c->tile_n;
    heads_per_tile = fa3_fwd_pack(c, req->heads_q, req->heads_kv, req->seqlen_q);
    ws = fa3_fwd_workspace_bytes(c);
  } else if (fa3) {
    out->tile_m = FA3_BWD_TILE_M;
    out->tile_n = FA3_BWD_TILE_N(fa3_bwd_padded_head_dim(req->head_dim));
  }
#endif
  const cuda_name_parts name = {.family = fa3 ? "fa3.sm90" : "fa2.sm80",
                                .op = fwd ? "fwd" : "bwd",
                                .dtype = cuda_dtype_name(req->dtype),
                                .head_dim = req->head_dim,
                                .causal = p->causal,
                                .window = p->window_enabled,
                                .softcap = p->softcap > 0.0f,
                                .varlen = p->cu_seqlens_q || p->cu_seqlens_k,
                                .pack = heads_per_tile};
  cuda_kernel_name(&name, out->kernel, sizeof out->kernel);
  fa_decision_put(out, &ch, sizeof ch);
  if (fwd) {
    /* Every output is one block's, its key tiles in a fixed order (a dynamic schedule's counter
       decides only which block). */
    out->deterministic = 1;
    out->workspace_bytes = ws ? ws + CUDA_WORKSPACE_ALIGN : 0; /* room to align a caller's */
    return;
  }
  /* Backward: dQ by fp32 atomics unless determinism is asked for. */
  cuda_bwd_args sizing;
  memset(&sizing, 0, sizeof sizing);
  if (fa3)
    cuda_fa3_bwd_sizing(req, p->deterministic ? 1 : 0, ch.grid, &sizing);
  else
    cuda_bwd_sizing(req, &ch.fa2, p->deterministic ? 1 : 0, dev->sm_count, &sizing);
  out->deterministic = sizing.deterministic;
  /* Plus room to align a caller's workspace to 256 bytes (the kernels' vector accesses). */
  out->workspace_bytes = cuda_bwd_workspace_bytes(&sizing) + CUDA_WORKSPACE_ALIGN;
}
