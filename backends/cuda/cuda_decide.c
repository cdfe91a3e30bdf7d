/*
 * cuda_decide.c: the CUDA backend's one decide-function. Whether a request is supported, which
 * kernel runs, its tiles and its workspace are answered here and nowhere else; fa_plan,
 * fa_backend_info's feature list and the call itself go through it. Pure: no allocation and no
 * device work (the probe's facts are read once per process).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/mask.h"
#include "fa3_sm90/fa3_schedule.h"
#include "cuda_internal.h"
#include "fa2_sm80/fa2_args.h"
#include "fa2_sm80/fa2_tiles.h"
#include "fa3_sm90/fa3_args.h"

/* The kernels read rows with 16-byte copies: the last dimension contiguous, every other stride a
   multiple of 8 elements and the first element 16-byte aligned. */
static int refuse_layout(const char *name, const fa_tensor *t, fa_decision *out) {
  if (!t) return 0;
  if (t->strides[3] != 1) {
    fa_core_refuse(out, "%s.strides[3] = %lld: cuda.fa2 needs the head dim contiguous (stride 1)",
                   name, (long long)t->strides[3]);
    return 1;
  }
  for (int i = 0; i < 3; ++i)
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
  if (p->cu_seqlens_q || p->cu_seqlens_k)
    return fa_core_refuse(out, "varlen (cu_seqlens_q/k) is not supported by cuda.fa2"), 1;
  if (p->seqused_k) return fa_core_refuse(out, "seqused_k is not supported by cuda.fa2"), 1;
  if (p->block_table)
    return fa_core_refuse(out, "paged KV (block_table) is not supported by cuda.fa2"), 1;
  if (p->num_splits > 1) {
    fa_core_refuse(out, "num_splits = %d: split-KV is not supported by cuda.fa2 (0 or 1)",
                   (int)p->num_splits);
    return 1;
  }
  return 0;
}

/* The fa3 configuration FA_CUDA_FA3_CONFIG names for this head dim (a comma-separated list of
   configuration names, for A/B runs; those of other head dims do not apply), else NULL with
   *unknown set when a name is no configuration at all. */
#if FA_CUDA_HAS_FA3
static const fa3_fwd_config *fa3_config_from_env(int64_t head_dim, const char **unknown) {
  const char *env = getenv("FA_CUDA_FA3_CONFIG");
  *unknown = NULL;
  if (!env || !*env) return NULL;
  int count;
  const fa3_fwd_config *all = fa3_fwd_configs(&count);
  const fa3_fwd_config *pick = NULL;
  for (const char *s = env; *s;) {
    size_t len = strcspn(s, ",");
    int known = 0;
    for (int i = 0; i < count; ++i)
      if (strlen(all[i].name) == len && !strncmp(all[i].name, s, len)) {
        known = 1;
        if (!pick && all[i].head_dim_padded == fa3_fwd_padded_head_dim(head_dim)) pick = &all[i];
      }
    if (!known && !*unknown) *unknown = s;
    s += len + (s[len] == ',');
  }
  return pick;
}
#endif

/* A configuration's name and tile (0: rows, 1: keys); cfg is an fa3_fwd_config where fa3 is built.
 */
static const char *fa3_config_name(const void *cfg) {
#if FA_CUDA_HAS_FA3
  return ((const fa3_fwd_config *)cfg)->name;
#else
  (void)cfg;
  return "";
#endif
}
/* The query heads per tile of fa3's GQA packing for the request (fa3_fwd_pack). */
static int fa3_config_pack(const void *cfg, const fa_request *req) {
#if FA_CUDA_HAS_FA3
  return fa3_fwd_pack((const fa3_fwd_config *)cfg, req->heads_q, req->heads_kv, req->seqlen_q);
#else
  (void)cfg, (void)req;
  return 1;
#endif
}
int32_t cuda_fa3_grid(const cuda_device_info *dev) {
  const char *cap = getenv("FA_CUDA_FA3_GRID");
  const int n = cap ? atoi(cap) : 0;
  return n > 0 && n < dev->sm_count ? n : dev->sm_count;
}
/* Device bytes of workspace the configuration's launch needs (fa3_fwd_workspace_bytes). */
static size_t fa3_config_workspace(const void *cfg, const fa_request *req,
                                   const cuda_device_info *dev) {
#if FA_CUDA_HAS_FA3
  const fa2_problem p = cuda_problem_of(req); /* the mask as the launch sees it */
  return fa3_fwd_workspace_bytes((const fa3_fwd_config *)cfg, &p, cuda_fa3_grid(dev));
#else
  (void)cfg, (void)req, (void)dev;
  return 0;
#endif
}
static int32_t fa3_config_tile(const void *cfg, int keys) {
#if FA_CUDA_HAS_FA3
  const fa3_fwd_config *c = cfg;
  return keys ? c->tile_n : c->tile_m;
#else
  (void)cfg;
  (void)keys;
  return 0;
#endif
}

#if FA_CUDA_HAS_FA3
/* TMA takes no negative strides: 1 with the reason when one of the tensors has one. */
static int fa3_negative_stride(const fa_tensor *const *ts, int count, char *why, size_t n) {
  for (int i = 0; i < count; ++i)
    for (int d = 0; d < 3; ++d)
      if (ts[i]->strides[d] < 0)
        return snprintf(why, n, "cuda.fa3 moves tensors by TMA, which takes no negative strides"),
               1;
  return 0;
}

/* Whether the FlashAttention-3 backward takes a request that fa2 takes (1); if not, why (0). */
static int fa3_bwd_takes(const fa_request *req, const cuda_device_info *dev, char *why, size_t n) {
  const fa_params *p = req->params;
  if (req->seqlen_q == 0 || req->seqlen_k == 0)
    return snprintf(why, n, "cuda.fa3's backward needs a query row and a key (cuda.fa2 runs it)"),
           0;
  if (p->softcap > 0.0f) return snprintf(why, n, "cuda.fa3 has no softcap (cuda.fa2 runs it)"), 0;
  const int padded = fa3_bwd_padded_head_dim(req->head_dim);
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
  return !fa3_negative_stride(ts, 4, why, n);
}
#endif

/* Whether FlashAttention-3 (Hopper) takes a request that fa2 takes (1), with which forward
   configuration (*cfg; NULL for the backward, which has one kernel per head dim); if not, why
   (0, or -1 when the request must be refused altogether). */
static int fa3_takes(const fa_request *req, const cuda_device_info *dev, const void **cfg,
                     int *from_env, char *why, size_t n) {
#if FA_CUDA_HAS_FA3
  if (dev->cc_major != 9 || dev->as_sm80)
    return snprintf(why, n, "cuda.fa3 needs sm_90 (%s is sm_%d%d%s)", dev->name, (int)dev->cc_major,
                    (int)dev->cc_minor, dev->as_sm80 ? ", run as sm_80" : ""),
           0;
  if (req->op != FA_OP_FORWARD) {
    *cfg = NULL;
    *from_env = 0;
    return fa3_bwd_takes(req, dev, why, n);
  }
  /* No keys: nothing for TMA to describe (a zero extent); fa2 writes the empty rows' result. */
  if (req->seqlen_k == 0) return snprintf(why, n, "cuda.fa3 needs at least one key"), 0;
  /* Softcap's tanh in the softmax loop made the fa3 kernels spill (every tanh form tried): fa2
     keeps it until a kernel holds it without local memory. */
  if (req->params->softcap > 0.0f)
    return snprintf(why, n, "cuda.fa3 has no softcap (cuda.fa2 runs it)"), 0;
  if (!fa3_fwd_padded_head_dim(req->head_dim))
    return snprintf(why, n, "cuda.fa3 has head_dim 64, 96, 128, 192 and 256 (asked %lld)",
                    (long long)req->head_dim),
           0;
  const char *unknown;
  const fa3_fwd_config *c = fa3_config_from_env(req->head_dim, &unknown);
  if (unknown) /* a mistyped A/B knob refuses the call rather than falling back to fa2 */
    return snprintf(why, n, "FA_CUDA_FA3_CONFIG names '%.*s', which is no fa3 configuration",
                    (int)strcspn(unknown, ","), unknown),
           -1;
  const int named = c != NULL;
  const fa_params *p = req->params;
  if (!c)
    c = fa3_fwd_pick(req->head_dim, p->causal || p->window_enabled, req->seqlen_k, dev->smem_optin);
  if (!c) {
    const fa3_fwd_config *any = fa3_fwd_config_for(req->head_dim, NULL);
    return snprintf(why, n,
                    "cuda.fa3 at head_dim %lld needs more shared memory (%zu KiB or more) than the "
                    "%d KiB allowed",
                    (long long)req->head_dim, any ? any->smem_bytes / 1024 : (size_t)0,
                    (int)(dev->smem_optin / 1024)),
           0;
  }
  if ((int64_t)c->smem_bytes > dev->smem_optin)
    return snprintf(why, n, "FA_CUDA_FA3_CONFIG's %s needs %zu KiB of shared memory; %d allowed",
                    c->name, c->smem_bytes / 1024, (int)(dev->smem_optin / 1024)),
           0;
  /* O too where the configuration stores it by TMA. */
  const fa_tensor *ts[] = {req->q, req->k, req->v, req->out};
  if (fa3_negative_stride(ts, (c->flags & FA3_OSTORE) ? 4 : 3, why, n)) return 0;
  *cfg = c;
  *from_env = named;
  return 1;
#else
  (void)req;
  (void)dev;
  (void)cfg;
  (void)from_env;
  snprintf(why, n, "cuda.fa3 is not built (FA_CUDA_ARCHS without 90)");
  return 0;
#endif
}

static const char *dtype_name(fa_dtype dt) {
  return dt == FA_F16 ? "f16" : (dt == FA_BF16 ? "bf16" : NULL);
}

/*
 * Deterministic backward: split s of n owns a dQ accumulator and visits its key tiles in order.
 * Enough splits to give every SM two blocks, never more than there are key tiles: each split
 * costs one more fp32 copy of dQ in the workspace.
 */
int32_t cuda_bwd_dq_splits(const fa_request *req, int32_t tile_n, int32_t sm_count) {
  int64_t n_blocks = (req->seqlen_k + tile_n - 1) / tile_n;
  int64_t parallel = req->batch * req->heads_kv;
  int64_t want = parallel > 0 ? (2 * (int64_t)sm_count + parallel - 1) / parallel : 1;
  if (want > n_blocks) want = n_blocks;
  return want < 1 ? 1 : (int32_t)want;
}

fa2_problem cuda_problem_of(const fa_request *req) {
  const fa_params *p = req->params;
  fa2_problem pb;
  memset(&pb, 0, sizeof pb);
  pb.batch = (int32_t)req->batch;
  pb.seqlen_q = (int32_t)req->seqlen_q;
  pb.seqlen_k = (int32_t)req->seqlen_k;
  pb.heads_q = (int32_t)req->heads_q;
  pb.heads_kv = (int32_t)req->heads_kv;
  pb.head_dim = (int32_t)req->head_dim;
  pb.scale = req->scale;
  pb.softcap = p->softcap > 0.0f ? p->softcap : 0.0f;
  fa_mask m = fa_mask_make(p->causal, p->causal_align, p->window_enabled, p->window_left,
                           p->window_right, req->seqlen_q, req->seqlen_k);
  pb.mask.shift = m.shift;
  pb.mask.left = m.left;
  pb.mask.right = m.right;
  pb.bf16 = req->dtype == FA_BF16;
  pb.stream = p->stream;
  return pb;
}

void cuda_bwd_sizing(const fa_request *req, const fa2_tile_config *cfg, int32_t deterministic,
                     int32_t sm_count, fa2_bwd_args *a) {
  a->p = cuda_problem_of(req);
  a->head_dim_padded = cfg->head_dim_padded;
  a->tile_m = cfg->tile_m;
  a->deterministic = deterministic;
  a->dq_splits = deterministic ? cuda_bwd_dq_splits(req, cfg->tile_n, sm_count) : 1;
  fa2_bwd_plan_tail(a, cfg->tile_n, sm_count);
}

void cuda_fa3_bwd_sizing(const fa_request *req, int32_t deterministic, const cuda_device_info *dev,
                         fa2_bwd_args *a) {
#if FA_CUDA_HAS_FA3
  a->p = cuda_problem_of(req);
  const int tile_n = FA3_BWD_TILE_N(fa3_bwd_padded_head_dim(req->head_dim));
  const int n_tiles = (int)((req->seqlen_k + tile_n - 1) / tile_n);
  fa3_bwd_sizing(a, deterministic,
                 deterministic
                     ? fa_sched_det_splits(req->batch * req->heads_kv, n_tiles, cuda_fa3_grid(dev))
                     : 1);
#else
  (void)req, (void)deterministic, (void)dev, (void)a;
#endif
}

void cuda_decide(const fa_request *req, fa_decision *out) {
  memset(out, 0, sizeof *out);
  if (req->device.kind != FA_DEVICE_CUDA) {
    fa_core_refuse(out, "tensors are in %s memory; cuda.fa2 reads CUDA device memory only",
                   fa_device_kind_name(req->device.kind));
    return;
  }
  const cuda_state *s = cuda_state_get();
  if (!s->available) {
    fa_core_refuse(out, "%s", s->reason);
    return;
  }
  const int id = req->device.id;
  if (id < 0 || id >= s->device_count) {
    fa_core_refuse(out, "device id %d: this process sees %d CUDA device(s)", id,
                   (int)s->device_count);
    return;
  }
  const cuda_device_info *dev = &s->devices[id];
  if (!dev->usable) {
    fa_core_refuse(out, "%s", dev->reason);
    return;
  }
  const char *dt = dtype_name(req->dtype);
  if (!dt) {
    fa_core_refuse(out, "dtype %s is not supported by cuda.fa2 (f16, bf16)",
                   fa_dtype_name(req->dtype));
    return;
  }
  if (req->op != FA_OP_FORWARD && req->op != FA_OP_BACKWARD) {
    fa_core_refuse(out, "fa_forward_kvcache is not supported by cuda.fa2");
    return;
  }
  if (req->head_dim_v != req->head_dim) {
    fa_core_refuse(out, "head_dim_v %lld != head_dim %lld: cuda.fa2 needs them equal",
                   (long long)req->head_dim_v, (long long)req->head_dim);
    return;
  }
  if (req->head_dim % 8 != 0 || req->head_dim > FA2_MAX_HEAD_DIM) {
    fa_core_refuse(out, "head_dim %lld: cuda.fa2 supports multiples of 8 up to %d",
                   (long long)req->head_dim, FA2_MAX_HEAD_DIM);
    return;
  }
  if (refuse_params(req, out)) return;
  /* Grid limits: heads and batch are grid dimensions y and z; rows are int32 inside kernels. */
  if (req->batch > 65535 || req->heads_q > 65535) {
    fa_core_refuse(out, "batch %lld or heads_q %lld > 65535 (cuda.fa2 grid limit)",
                   (long long)req->batch, (long long)req->heads_q);
    return;
  }
  if (req->seqlen_q > INT32_MAX - 256 || req->seqlen_k > INT32_MAX - 256) {
    fa_core_refuse(out, "seqlen > 2^31 - 256 is not supported by cuda.fa2");
    return;
  }
  const fa_tensor *layout[] = {req->q,    req->k,  req->v,  req->out,
                               req->dout, req->dq, req->dk, req->dv};
  const char *names[] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};
  for (int i = 0; i < 8; ++i)
    if (refuse_layout(names[i], layout[i], out)) return;

  fa2_tile_config cfg;
  int ok = req->op == FA_OP_FORWARD
               ? fa2_fwd_config((int32_t)req->head_dim, dev->cc_major, dev->smem_optin, &cfg)
               : fa2_bwd_config((int32_t)req->head_dim, dev->cc_major, dev->smem_optin, &cfg);
  if (!ok) {
    fa_core_refuse(out, "head_dim %lld has no cuda.fa2 kernel", (long long)req->head_dim);
    return;
  }
  /* The compact tiles did not fit either (fa2_prepare_device skips exactly these kernels). */
  if ((int64_t)cfg.smem_bytes > dev->smem_optin) {
    fa_core_refuse(
        out,
        "cuda.fa2 %s at head_dim %lld needs %zu KiB of shared memory per block even in its "
        "compact tiles; %s allows %d KiB",
        req->op == FA_OP_FORWARD ? "forward" : "backward", (long long)req->head_dim,
        cfg.smem_bytes / 1024, dev->name, (int)(dev->smem_optin / 1024));
    return;
  }

  const fa_params *p = req->params;
  /* FlashAttention-3 where it applies (sm_90; the forward's head dims 64, 96, 128, 192, 256, the
     backward's too), unless fa2 is asked for by name: its backward is 1.2-1.7x fa2's on
     the H200 (bench/NOTES.md session 26). Asked for by name where it does not apply, refused
     with the reason. */
  char fa3_why[160] = "";
  const int want_fa2 = p->kernel_family && strcmp(p->kernel_family, "fa2") == 0;
  const int want_fa3 = p->kernel_family && strcmp(p->kernel_family, "fa3") == 0;
  const void *fa3_cfg = NULL;
  int fa3_env = 0;
  const int fa3 = !want_fa2 && fa3_takes(req, dev, &fa3_cfg, &fa3_env, fa3_why, sizeof fa3_why);
  if (fa3 < 0) {
    fa_core_refuse(out, "%s", fa3_why);
    return;
  }
  if (want_fa3 && !fa3) {
    fa_core_refuse(out, "kernel_family fa3: %s", fa3_why);
    return;
  }
  /* fa3's GQA packing is named (".gqa<heads per tile>"), and a configuration picked by
     FA_CUDA_FA3_CONFIG after '@' (the run launches it). */
  char pack[16] = "";
  const int fwd = req->op == FA_OP_FORWARD;
  const int heads_per_tile = fa3 && fwd ? fa3_config_pack(fa3_cfg, req) : 1;
  if (heads_per_tile > 1) snprintf(pack, sizeof pack, ".gqa%d", heads_per_tile);
  snprintf(out->kernel, sizeof out->kernel, "cuda.%s.%s.%s.hd%lld%s%s%s%s%s%s",
           fa3 ? "fa3.sm90" : "fa2.sm80", fwd ? "fwd" : "bwd", dt, (long long)req->head_dim,
           p->causal ? ".causal" : "", p->window_enabled ? ".window" : "",
           p->softcap > 0.0f ? ".softcap" : "", pack, fa3_env ? "@" : "",
           fa3_env ? fa3_config_name(fa3_cfg) : "");
  out->supported = 1;
  out->tile_m = fa3 ? (fwd ? fa3_config_tile(fa3_cfg, 0) : FA3_BWD_TILE_M) : cfg.tile_m;
  out->tile_n = fa3 ? (fwd ? fa3_config_tile(fa3_cfg, 1)
                           : FA3_BWD_TILE_N(fa3_bwd_padded_head_dim(req->head_dim)))
                    : cfg.tile_n;
  out->num_splits = 1;
  if (req->op == FA_OP_FORWARD) {
    /* Every output is one block's, its key tiles in a fixed order (a dynamic schedule's counter
       decides only which block), or (TAILSPLIT) merged from fixed pieces in a fixed order. */
    out->deterministic = 1;
    const size_t ws = fa3 ? fa3_config_workspace(fa3_cfg, req, dev) : 0;
    out->workspace_bytes = ws ? ws + CUDA_WORKSPACE_ALIGN : 0; /* room to align a caller's */
    return;
  }
  /* Backward: dQ by fp32 atomics unless determinism is asked for. */
  fa2_bwd_args sizing;
  memset(&sizing, 0, sizeof sizing);
  if (fa3)
    cuda_fa3_bwd_sizing(req, p->deterministic ? 1 : 0, dev, &sizing);
  else
    cuda_bwd_sizing(req, &cfg, p->deterministic ? 1 : 0, dev->sm_count, &sizing);
  out->deterministic = sizing.deterministic;
  /* Plus room to align a caller's workspace to 256 bytes (the kernels' vector accesses). */
  out->workspace_bytes = fa2_bwd_workspace_bytes(&sizing) + CUDA_WORKSPACE_ALIGN;
}
