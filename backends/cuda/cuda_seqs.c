/*
 * cuda_seqs.c: the forward over sequences of their own lengths (fa2_sm80/fa2_fwd_splitkv.cuh):
 * packed rows (cu_seqlens_q/k), used keys (seqused_k), paged K/V (block_table), split-KV
 * (num_splits) and fa_forward_kvcache (the append and rotary embedding of common/seq_aux.cu
 * first); decoding steps on fa2_sm80/fa2_fwd_decode.cuh. Its decision (kernel, tiles, GQA
 * packing, key pieces, workspace) and its run.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_names.h"
#include "fa2_sm80/fa2_launch.h"
#include "fa2_sm80/fa2_tiles.h"

/* The keys a sequence may address: the cache's positions for fa_forward_kvcache (its pages'
   through a block table), else the request's key count. */
static int64_t key_capacity(const fa_request *req) {
  const fa_params *p = req->params;
  if (req->op == FA_OP_KVCACHE)
    return p->block_table ? p->block_table->shape[1] * req->k->shape[1] : req->k->shape[1];
  return req->seqlen_k;
}

/* The query heads a tile packs: the largest power of two that divides the group and whose rows
   of every position fit the 64-row tile. */
static int32_t pack_of(const fa_request *req) {
  const int64_t group = req->heads_q / req->heads_kv;
  int32_t pack = 1;
  while (group % (2 * pack) == 0 && req->seqlen_q * 2 * pack <= FA2_SPLITKV_TILE_M) pack *= 2;
  return pack;
}

/* Key pieces when the caller leaves the choice (num_splits 0), where the blocks would not fill
   the device's block slots (the blocks its SMs hold at once): as many as fill them once without
   starting a second, mostly empty wave, each piece at least 4 key tiles, at most 64 pieces. */
static int32_t auto_splits(int64_t blocks, int64_t key_tiles, int64_t slots) {
  if (blocks <= 0 || blocks >= slots) return 1;
  int64_t s = slots / blocks;
  if (s > key_tiles / 4) s = key_tiles / 4;
  if (s > 64) s = 64;
  return s < 1 ? 1 : (int32_t)s;
}

/* Blocks of smem bytes the device holds at once: an SM has its opt-in limit plus the 1 KiB each
   block reserves, and at most 16 blocks of 4 warps. */
static int64_t block_slots(const cuda_device_info *dev, size_t smem) {
  int64_t per_sm = ((int64_t)dev->smem_optin + 1024) / ((int64_t)smem + 1024);
  if (per_sm > 16) per_sm = 16;
  return (per_sm < 1 ? 1 : per_sm) * dev->sm_count;
}

/* The kernel's tiles: fa2_fwd_decode.cuh's 16 rows where a step's rows (positions x packed
   heads) fit them and its shared memory fits the device, else fa2_fwd_splitkv.cuh's 64. */
typedef struct seq_tiles {
  int32_t hd, tile_m, tile_n, pack, halves, bulk;
  size_t smem;
} seq_tiles;

static void tiles_of(const fa_request *req, const cuda_device_info *dev, seq_tiles *t) {
  t->hd = FA2_PAD_HD((int32_t)req->head_dim);
  t->pack = pack_of(req);
  t->bulk = FA2_DECODE_BULK_WANTED(dev->cc_major, t->hd, req->params->block_table != NULL) &&
            (int64_t)FA2_DECODE_BULK_SMEM(t->hd) <= dev->smem_optin;
  t->halves = !t->bulk && FA2_DECODE_HALVES_HD(t->hd);
  const size_t decode_smem = t->bulk ? FA2_DECODE_BULK_SMEM(t->hd) : FA2_DECODE_SMEM(t->hd);
  if (req->seqlen_q * t->pack <= FA2_DECODE_TILE_M && (int64_t)decode_smem <= dev->smem_optin) {
    t->tile_m = FA2_DECODE_TILE_M;
    t->tile_n = FA2_DECODE_TILE_N;
    t->smem = decode_smem;
  } else {
    t->halves = t->bulk = 0;
    t->tile_m = FA2_SPLITKV_TILE_M;
    t->tile_n = FA2_SPLITKV_TILE_N(t->hd);
    t->smem = FA2_SPLITKV_SMEM(t->hd);
  }
}

int cuda_seqs_wanted(const fa_request *req, const cuda_device_info *dev) {
  const fa_params *p = req->params;
  if (req->op == FA_OP_KVCACHE) return 1;
  if (req->op != FA_OP_FORWARD) return 0;
  if (p->cu_seqlens_q || p->cu_seqlens_k || p->seqused_k || p->block_table || p->num_splits > 1)
    return 1;
  /* A dense forward with the choice left to the backend: the decoding kernel where a step's rows
     fit it, split-KV where the rows fit one tile per group of heads and too few blocks would run
     without it. */
  if (p->num_splits != 0 || p->kernel_family) return 0;
  seq_tiles t;
  tiles_of(req, dev, &t);
  if (t.tile_m == FA2_DECODE_TILE_M) return 1;
  if (req->seqlen_q > FA2_SPLITKV_TILE_M / t.pack) return 0;
  return auto_splits(req->heads_q / t.pack * req->batch, (req->seqlen_k + t.tile_n - 1) / t.tile_n,
                     block_slots(dev, t.smem)) > 1;
}

/* Index tensors the kernels read element by element: contiguous (stride 1) but the block
   table, whose two strides they take. */
static int refuse_index(const char *name, const fa_tensor *t, fa_decision *out) {
  if (t && t->shape[0] > 1 && t->strides[0] != 1) {
    fa_core_refuse(out, "%s.strides[0] = %lld: cuda reads index tensors contiguous (stride 1)",
                   name, (long long)t->strides[0]);
    return 1;
  }
  return 0;
}

int cuda_seqs_refuse_index(const fa_request *req, fa_decision *out) {
  const fa_params *p = req->params;
  if (refuse_index("cu_seqlens_q", p->cu_seqlens_q, out) ||
      refuse_index("cu_seqlens_k", p->cu_seqlens_k, out) ||
      refuse_index("seqused_k", p->seqused_k, out))
    return 1;
  /* Packed rows are int32 in the kernels. */
  const int64_t total_q = p->cu_seqlens_q ? req->q->shape[0] : 0;
  const int64_t total_k = p->cu_seqlens_k && !p->block_table ? req->k->shape[0] : 0;
  if (total_q > INT32_MAX - 256 || total_k > INT32_MAX - 256) {
    fa_core_refuse(out, "packed q or k of 2^31 - 256 rows and more is not supported by cuda");
    return 1;
  }
  return 0;
}

/* Bytes of the partial results (splits > 1) and of the rotated q (rotary tables), each rounded
   up to the workspace alignment; 0 for one not needed. */
static void seq_workspace(const fa_request *req, int32_t splits, size_t *part, size_t *qrot) {
  const size_t rows = (size_t)req->batch * (size_t)req->heads_q * (size_t)req->seqlen_q;
  const size_t a = CUDA_WORKSPACE_ALIGN;
  *part =
      splits > 1 ? ((size_t)splits * rows * ((size_t)req->head_dim + 1) * 4 + a - 1) / a * a : 0;
  *qrot = req->op == FA_OP_KVCACHE && req->rotary_dim > 0
              ? (rows * (size_t)req->head_dim * 2 + a - 1) / a * a
              : 0;
}

void cuda_seqs_decide(const fa_request *req, const cuda_device_info *dev, fa_decision *out) {
  const fa_params *p = req->params;
  if (cuda_seqs_refuse_index(req, out) || cuda_fa3_seqs_decide(req, dev, out)) return;
  /* The append reads the new tokens' rows element by element along a contiguous head dim. */
  if (req->op == FA_OP_KVCACHE && req->kv->k_new &&
      (req->kv->k_new->strides[3] != 1 || req->kv->v_new->strides[3] != 1)) {
    fa_core_refuse(out, "kv.k_new/v_new: cuda needs the head dim contiguous (stride 1)");
    return;
  }
  seq_tiles tl;
  tiles_of(req, dev, &tl);
  if ((int64_t)tl.smem > dev->smem_optin) {
    fa_core_refuse(out,
                   "cuda.fa2's forward over sequences at head_dim %lld needs %zu KiB of shared "
                   "memory; %s allows %d KiB",
                   (long long)req->head_dim, tl.smem / 1024, dev->name,
                   (int)(dev->smem_optin / 1024));
    return;
  }
  const int64_t cap = key_capacity(req);
  if (cap > INT32_MAX - 256 || req->seqlen_q > INT32_MAX - 256) {
    fa_core_refuse(out, "sequences of 2^31 - 256 keys or rows and more are not supported by cuda");
    return;
  }
  const int32_t pack = tl.pack, tile_n = tl.tile_n;
  const int64_t rows_per_head = tl.tile_m / pack;
  const int64_t blocks =
      (req->seqlen_q + rows_per_head - 1) / rows_per_head * (req->heads_q / pack) * req->batch;
  int32_t splits = p->num_splits >= 1 ? p->num_splits
                                      : auto_splits(blocks, (cap + tile_n - 1) / tile_n,
                                                    block_slots(dev, tl.smem));
  if ((int64_t)splits * req->batch > 65535) {
    fa_core_refuse(out, "num_splits %d x batch %lld > 65535 (cuda grid limit)", (int)splits,
                   (long long)req->batch);
    return;
  }
  size_t part, qrot;
  seq_workspace(req, splits, &part, &qrot);

  cuda_choice ch;
  memset(&ch, 0, sizeof ch);
  ch.family = CUDA_FA2;
  ch.fa3_config = -1;
  ch.seqs = 1;
  ch.splits = splits;
  ch.pack = pack;
  ch.bulk = tl.bulk;
  ch.fa2.head_dim_padded = tl.hd;
  ch.fa2.tile_m = tl.tile_m;
  ch.fa2.tile_n = tile_n;
  ch.fa2.warps = 4;
  ch.fa2.smem_bytes = tl.smem;
  fa_decision_put(out, &ch, sizeof ch);
  out->supported = 1;
  out->tile_m = tl.tile_m;
  out->tile_n = tile_n;
  out->num_splits = splits;
  out->deterministic = 1; /* fixed tiles and pieces, merged in piece order */
  out->workspace_bytes = part + qrot ? part + qrot + CUDA_WORKSPACE_ALIGN : 0;
  const cuda_name_parts name = {.family = "fa2.sm80",
                                .op = "fwd",
                                .dtype = cuda_dtype_name(req->dtype),
                                .head_dim = req->head_dim,
                                .rows16 = tl.tile_m == FA2_DECODE_TILE_M,
                                .halves = tl.halves,
                                .bulk = tl.bulk,
                                .causal = p->causal,
                                .window = p->window_enabled,
                                .softcap = p->softcap > 0.0f,
                                .varlen = p->cu_seqlens_q || p->cu_seqlens_k,
                                .paged = p->block_table != NULL,
                                .kvcache = req->op == FA_OP_KVCACHE,
                                .splits = (int)splits,
                                .pack = (int)pack};
  cuda_kernel_name(&name, out->kernel, sizeof out->kernel);
}

/* The append and rotation of fa_forward_kvcache; q_rot: the rotated q's scratch, or NULL. */
static int append_kvcache(const fa_request *req, void *q_rot) {
  const fa_params *p = req->params;
  const fa_kvcache_args *kv = req->kv;
  cuda_kvcache_args a;
  memset(&a, 0, sizeof a);
  if (kv->k_new && req->seqlen_new > 0) {
    a.k_new = fa_tensor_base(kv->k_new);
    a.v_new = fa_tensor_base(kv->v_new);
    cuda_strides_of(kv->k_new, &a.kn_str);
    cuda_strides_of(kv->v_new, &a.vn_str);
  }
  a.k_cache = fa_tensor_base(req->k);
  a.v_cache = fa_tensor_base(req->v);
  cuda_strides_of(req->k, &a.kc_str);
  cuda_strides_of(req->v, &a.vc_str);
  a.q = fa_tensor_base(req->q);
  cuda_strides_of(req->q, &a.q_str);
  a.q_rot = q_rot;
  if (req->rotary_dim > 0) {
    const fa_tensor *c = kv->rotary_cos, *s = kv->rotary_sin;
    a.rot_cos = fa_tensor_base(c);
    a.rot_sin = fa_tensor_base(s);
    a.cos_row = c->strides[0];
    a.cos_col = c->strides[1];
    a.sin_row = s->strides[0];
    a.sin_col = s->strides[1];
    a.rot_rows = (int32_t)c->shape[0];
    a.rotary_dim = (int32_t)req->rotary_dim;
    a.rot_interleaved = kv->rotary_interleaved != 0;
    a.rot_f32 = c->dtype == FA_F32;
  }
  a.per_row_q = p->causal || p->window_enabled;
  a.cache_seqlens = cuda_index_ptr(kv->cache_seqlens);
  a.cache_seqlens_stride = (int32_t)kv->cache_seqlens->strides[0];
  a.capacity = (int32_t)key_capacity(req);
  if (p->block_table) {
    a.block_table = cuda_index_ptr(p->block_table);
    a.bt_batch = p->block_table->strides[0];
    a.bt_page = p->block_table->strides[1];
    a.page_size = (int32_t)req->k->shape[1];
    a.num_blocks = (int32_t)req->k->shape[0];
  }
  a.batch = (int32_t)req->batch;
  a.seqlen_new = (int32_t)req->seqlen_new;
  a.seqlen_q = (int32_t)req->seqlen_q;
  a.heads_q = (int32_t)req->heads_q;
  a.heads_kv = (int32_t)req->heads_kv;
  a.head_dim = (int32_t)req->head_dim;
  a.bf16 = req->dtype == FA_BF16;
  a.stream = p->stream;
  return cuda_kvcache_append_launch(&a);
}

fa_status cuda_seqs_run(const fa_request *req, const fa_decision *decision, const cuda_choice *ch,
                        void *workspace) {
  const fa_params *p = req->params;
  const fa2_splitkv_fn fn = fa2_splitkv_for(ch->fa2.head_dim_padded);
  size_t part, qrot;
  seq_workspace(req, ch->splits, &part, &qrot);
  if (!fn || decision->workspace_bytes != (part + qrot ? part + qrot + CUDA_WORKSPACE_ALIGN : 0))
    return fa_core_set_error(FA_ERR_INTERNAL, "cuda: no forward over sequences as decided (%s)",
                             decision->kernel);
  cuda_seq_args A;
  memset(&A, 0, sizeof A);
  cuda_fwd_args *f = &A.f;
  cuda_fwd_args_of(req, f);
  f->p.seqlen_k = (int32_t)key_capacity(req);
  cuda_seq_index_of(req, &A.ix);
  if (req->op == FA_OP_KVCACHE) {
    A.cache_seqlens = cuda_index_ptr(req->kv->cache_seqlens);
    A.cache_seqlens_stride = (int32_t)req->kv->cache_seqlens->strides[0];
    A.seqlen_new = (int32_t)req->seqlen_new;
    A.ix.seqused_k = NULL;
  }
  if (p->block_table) {
    A.block_table = cuda_index_ptr(p->block_table);
    A.bt_batch = p->block_table->strides[0];
    A.bt_page = p->block_table->strides[1];
    A.bt_pages = (int32_t)p->block_table->shape[1];
    A.page_shift = 0; /* core/ checked: the page size is a power of two */
    while (((int64_t)1 << A.page_shift) < req->k->shape[1]) ++A.page_shift;
    A.num_blocks = (int32_t)req->k->shape[0];
  }
  A.tile_m = ch->fa2.tile_m;
  A.bulk = ch->bulk;
  A.pack = ch->pack;
  A.splits = ch->splits;

  void *ws;
  fa_status st = cuda_workspace_take(workspace, decision->workspace_bytes, p->stream, &ws);
  if (st != FA_OK) return st;
  char *w = (char *)cuda_workspace_aligned(ws);
  if (part) {
    A.o_part = (float *)w;
    A.lse_part =
        A.o_part + (size_t)ch->splits * req->batch * req->heads_q * req->seqlen_q * req->head_dim;
  }
  int e = 0;
  if (req->op == FA_OP_KVCACHE) {
    void *q_rot = qrot ? w + part : NULL;
    e = append_kvcache(req, q_rot);
    if (q_rot) { /* the rotated q, contiguous [batch, seqlen_q, heads_q, head_dim] */
      f->q = q_rot;
      f->q_str.head = req->head_dim;
      f->q_str.row = req->heads_q * req->head_dim;
      f->q_str.batch = req->seqlen_q * f->q_str.row;
    }
  }
  if (e == 0 && req->seqlen_q > 0 && req->batch > 0) e = fn(&A);
  if (e == 0 && part) e = cuda_splitkv_combine_launch(&A);
  e = cuda_workspace_give_back(workspace, ws, p->stream, e);
  return e == 0 ? FA_OK : cuda_failure(e, "the forward over sequences");
}
