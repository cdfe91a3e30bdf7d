/*
 * fuzz_decode.c: one input decoded into one call: the call and its layout bits, the problem's
 * sizes, every tensor's shape and role, the index tensors' contents (mostly consistent, sometimes
 * corrupted), every fa_params field and the workspace. A zero byte always picks the well-formed
 * choice, so short inputs are valid calls and the mutations each break one thing at a time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static const fa_dtype dtypes[] = {FA_F32, FA_F16, FA_BF16, FA_F8E4M3, FA_F8E5M2};
static const int64_t head_dims[] = {8, 1, 4, 16, 3, 32, 64, 5, 576, 512, 577, 1024, 1025, 0, 2};
#define N_HD ((int)(sizeof head_dims / sizeof head_dims[0]))

void decode_problem(reader *r, call *c, problem *pb) {
  memset(pb, 0, sizeof *pb);
  const uint8_t opb = u8(r), kind = u8(r);
  c->op = opb % 8;
  pb->kind = kind;
  pb->run = c->op <= 2;
  c->huge = !pb->run && (kind & 0x80);
  pb->bwd = c->op == 1 || c->op == 4 || c->op == 7;
  pb->kvc = c->op == 2 || c->op == 5;
  pb->varlen = !pb->kvc && (kind & 1);
  pb->paged = (kind & 2) != 0;
  pb->seqused = !pb->kvc && (kind & 4);
  pb->alibi = (kind & 8) != 0;
  pb->lse_packed = pb->varlen && (kind & 16);

  /* Problem sizes: small, or in huge mode anything. */
  int64_t batch = (u8(r) + 2) % 5, sq = (u8(r) + 3) % 10, sk = (u8(r) + 5) % 14;
  int64_t hkv = 1 + u8(r) % 3, hq = hkv * (1 + u8(r) % 4);
  int64_t d = head_dims[u8(r) % N_HD], dv_pick = u8(r),
          dv = dv_pick ? head_dims[dv_pick % N_HD] : d;
  const uint8_t dtb = u8(r);
  const fa_dtype dt = dtypes[dtb % 5];
  /* FP8 inputs give an f16 or bf16 output; now and then another dtype, which is refused */
  static const fa_dtype fp8_outs[] = {FA_BF16, FA_F16, FA_F32, FA_F8E4M3};
  pb->out_dt = dt == FA_F8E4M3 || dt == FA_F8E5M2 ? fp8_outs[(dtb >> 3) % 4] : dt;
  if (c->huge) {
    uint8_t which = u8(r);
    if (which & 1) sq = pick_big(r);
    if (which & 2) sk = pick_big(r);
    if (which & 4) hq = pick_big(r);
    if (which & 8) batch = pick_big(r) & 0xff;
    if (which & 16) d = pick_big(r);
  }
  pb->page = (int64_t)1 << (u8(r) % 4);

  /* Per-sequence lengths (varlen) and totals. */
  int64_t tq = 0, tk = 0, mq = 0, mk = 0;
  int64_t nb = batch < 8 ? batch : 8;
  for (int64_t b = 0; b < nb; ++b) {
    pb->len_q[b] = (int32_t)((u8(r) + (uint8_t)sq) % 10);
    pb->len_k[b] = (int32_t)((u8(r) + (uint8_t)sk) % 14);
    tq += pb->len_q[b], tk += pb->len_k[b];
    if (pb->len_q[b] > mq) mq = pb->len_q[b];
    if (pb->len_k[b] > mk) mk = pb->len_k[b];
  }
  if (pb->varlen && batch > 8) batch = 8; /* index tensors hold at most 8 sequences */
  pb->batch = batch, pb->sq = sq, pb->sk = sk, pb->hkv = hkv, pb->hq = hq, pb->d = d, pb->dv = dv;
  pb->dt = dt;
  pb->tq = tq, pb->tk = tk, pb->mq = mq, pb->mk = mk;
}

void decode_tensors(reader *r, call *c, problem *pb, fa_params *p) {
  const int64_t batch = pb->batch, sq = pb->sq, sk = pb->sk, hkv = pb->hkv, hq = pb->hq, d = pb->d,
                dv = pb->dv, page = pb->page;
  const int64_t tq = pb->tq, tk = pb->tk, mq = pb->mq, mk = pb->mk;
  const int32_t *len_q = pb->len_q, *len_k = pb->len_k;
  const fa_dtype dt = pb->dt;
  const uint8_t kind = pb->kind;
  const int bwd = pb->bwd, kvc = pb->kvc, varlen = pb->varlen, paged = pb->paged,
            seqused = pb->seqused, alibi = pb->alibi, lse_packed = pb->lse_packed;

  /* Main tensors. */
  slot *s = c->s;
  const int qdim = varlen ? 3 : 4;
  int64_t qshape[4], kshape[4], vshape[4], oshape[4];
  if (varlen) {
    int64_t a[3] = {tq, hq, d}, o[3] = {tq, hq, dv};
    memcpy(qshape, a, sizeof a), memcpy(oshape, o, sizeof o);
  } else {
    int64_t a[4] = {batch, sq, hq, d}, o[4] = {batch, sq, hq, dv};
    memcpy(qshape, a, sizeof a), memcpy(oshape, o, sizeof o);
  }
  int64_t blocks_per_seq = 0, pages_total = 0;
  int kdim = 4;
  if (paged) {
    int64_t keys = varlen ? mk : sk;
    blocks_per_seq = keys >= 0 && keys < 4096 ? (keys + page - 1) / page : 2;
    blocks_per_seq += u8(r) % 2;
    pages_total = 1 + u8(r) % 12;
    int64_t a[4] = {pages_total, page, hkv, d}, v4[4] = {pages_total, page, hkv, dv};
    memcpy(kshape, a, sizeof a), memcpy(vshape, v4, sizeof v4);
  } else if (varlen) {
    kdim = 3;
    int64_t a[3] = {tk, hkv, d}, v3[3] = {tk, hkv, dv};
    memcpy(kshape, a, sizeof a), memcpy(vshape, v3, sizeof v3);
  } else {
    int64_t a[4] = {batch, sk, hkv, d}, v4[4] = {batch, sk, hkv, dv};
    memcpy(kshape, a, sizeof a), memcpy(vshape, v4, sizeof v4);
  }
  set_shape(&s[S_Q], qdim, qshape, dt);
  set_shape(&s[S_K], kdim, kshape, dt);
  set_shape(&s[S_V], kdim, vshape, dt);
  set_shape(&s[S_OUT], qdim, oshape, pb->out_dt);
  s[S_OUT].output = !bwd;
  if (kvc) s[S_K].output = s[S_V].output = 1;

  /* lse: [batch, hq, sq], packed [hq, tq] or padded [batch, hq, mq]. */
  const uint8_t lse_mode = u8(r);
  if (lse_mode % 4 != 3 || bwd) {
    if (lse_packed) {
      int64_t a[2] = {hq, tq};
      set_shape(&s[S_LSE], 2, a, FA_F32);
    } else {
      int64_t a[3] = {batch, hq, varlen ? mq : sq};
      set_shape(&s[S_LSE], 3, a, FA_F32);
    }
    s[S_LSE].output = !bwd;
  }
  if (bwd) {
    set_shape(&s[S_DOUT], qdim, oshape, dt);
    set_shape(&s[S_DQ], qdim, qshape, dt);
    set_shape(&s[S_DK], kdim, kshape, dt);
    set_shape(&s[S_DV], kdim, vshape, dt);
    s[S_DQ].output = s[S_DK].output = s[S_DV].output = 1;
  }

  /* Index tensors and their contents (mostly consistent, sometimes corrupted). */
  if (varlen) {
    int64_t n = batch + 1;
    set_shape(&s[S_CU_Q], 1, &n, FA_I32);
    s[S_CU_Q].index = 1;
    int32_t acc = 0;
    c->idx_vals[S_CU_Q][0] = 0;
    for (int64_t b = 0; b < batch; ++b) c->idx_vals[S_CU_Q][b + 1] = acc += len_q[b];
    if (!paged) {
      set_shape(&s[S_CU_K], 1, &n, FA_I32);
      s[S_CU_K].index = 1;
      acc = 0;
      c->idx_vals[S_CU_K][0] = 0;
      for (int64_t b = 0; b < batch; ++b) c->idx_vals[S_CU_K][b + 1] = acc += len_k[b];
    }
    p->max_seqlen_q = mq;
    p->max_seqlen_k = paged ? 0 : mk;
  }
  if (seqused) {
    set_shape(&s[S_USED], 1, &batch, FA_I32);
    s[S_USED].index = 1;
    for (int64_t b = 0; b < batch && b < 64; ++b) {
      int64_t avail = varlen && !paged ? len_k[b] : (paged ? blocks_per_seq * page : sk);
      if (avail < 0 || avail > 255) avail = 255;
      c->idx_vals[S_USED][b] = (int32_t)(avail ? u8(r) % (avail + 1) : 0);
    }
  }
  if (paged) {
    int64_t a[2] = {batch, blocks_per_seq};
    set_shape(&s[S_TABLE], 2, a, FA_I32);
    s[S_TABLE].index = 1;
    for (int64_t i = 0; i < batch * blocks_per_seq && i < 64; ++i)
      c->idx_vals[S_TABLE][i] = (int32_t)(u8(r) % pages_total);
  }
  if (dt == FA_F8E4M3 || dt == FA_F8E5M2) {
    /* Descales [batch or 1, heads or 1, blocks] with blocks of rows_q / rows_k rows; a bit set
       breaks one extent (the mutations break the rest). */
    const uint8_t db = u8(r);
    static const int64_t rows[] = {0, 16, 1, 7, 64, -1, 3, 1000};
    p->descale_rows_q = rows[db % 8];
    p->descale_rows_k = rows[(db >> 3) % 8];
    const int64_t lq = varlen ? mq : sq, lk = varlen ? mk : sk;
    const int64_t rq = p->descale_rows_q, rk = p->descale_rows_k;
    const int64_t bq = rq > 0 ? lq / rq + (lq % rq != 0) : 1;
    const int64_t bk = rk > 0 ? lk / rk + (lk % rk != 0) : 1;
    const uint8_t shapes = u8(r);
    int64_t qd[3] = {(shapes & 1) ? 1 : batch, (shapes & 2) ? 1 : hq,
                     sat_add(bq, (shapes >> 6) == 1)};
    int64_t kd[3] = {(shapes & 4) ? 1 : batch, (shapes & 8) ? 1 : hkv,
                     sat_add(bk, (shapes >> 6) == 2)};
    if (!(db & 0x40)) set_shape(&s[S_QDS], 3, qd, FA_F32);
    if (!(shapes & 16)) set_shape(&s[S_KDS], 3, kd, FA_F32);
    if (!(shapes & 32)) set_shape(&s[S_VDS], 3, kd, (db & 0x80) ? FA_F16 : FA_F32);
  }
  if (alibi) {
    if (kind & 32) {
      int64_t a[2] = {batch, hq};
      set_shape(&s[S_ALIBI], 2, a, FA_F32);
    } else {
      set_shape(&s[S_ALIBI], 1, &hq, FA_F32);
    }
  }
  if (kvc) {
    int64_t cap = paged ? blocks_per_seq * page : sk;
    set_shape(&s[S_CACHE_LENS], 1, &batch, FA_I32);
    s[S_CACHE_LENS].index = 1;
    const uint8_t newb = u8(r);
    int64_t snew = newb % 4;
    if (newb & 4) {
      int64_t a[4] = {batch, snew, hkv, d}, v4[4] = {batch, snew, hkv, dv};
      set_shape(&s[S_KNEW], 4, a, dt);
      set_shape(&s[S_VNEW], 4, v4, dt);
    } else {
      snew = 0;
    }
    for (int64_t b = 0; b < batch && b < 64; ++b) {
      int64_t room = sat_add(cap, -snew);
      if (room > 255) room = 255;
      c->idx_vals[S_CACHE_LENS][b] = (int32_t)(room > 0 ? u8(r) % (room + 1) : 0);
    }
    if (newb & 8) {
      int64_t a[2] = {sat_add(sat_add(cap, sq), 2), (d / 2 > 0 ? d / 2 : 1) - (newb & 16 ? 1 : 0)};
      if (a[1] < 1) a[1] = 1;
      const fa_dtype rdt = (newb & 32) ? dt : FA_F32;
      set_shape(&s[S_COS], 2, a, rdt);
      set_shape(&s[S_SIN], 2, a, rdt);
    }
  }
  /* fa_quantize of q after a forward: y of q's shape in an FP8 or float dtype (or a bad one),
     descales of a decoded block size where y is FP8 (or, now and then, where it is not) */
  const uint8_t qb = u8(r);
  if (qb && c->op == 0 && !varlen) {
    static const fa_dtype ydts[] = {FA_F8E4M3, FA_F8E5M2, FA_F32, FA_BF16, FA_F16, FA_I32};
    static const int64_t rows[] = {0, 16, 1, 7, 64, -1, 3, 1000};
    const fa_dtype ydt = ydts[qb % 6];
    const uint8_t qd = u8(r);
    pb->quant_rows = rows[qd % 8];
    pb->quant_rotate = (qd >> 3) & 1;
    pb->quant_seed = (qd & 0x40) ? u64(r) : 0;
    set_shape(&s[S_QY], 4, qshape, ydt);
    s[S_QY].output = 1;
    const int fp8y = ydt == FA_F8E4M3 || ydt == FA_F8E5M2;
    if (fp8y != ((qd >> 4) & 1)) {
      const int64_t rq = pb->quant_rows;
      const int64_t blocks = rq > 0 ? sq / rq + (sq % rq != 0) : 1;
      const int64_t a[3] = {(qd & 0x80) ? 1 : batch, (qd & 0x80) ? 1 : hq,
                            (qb & 0x80) ? sat_add(blocks, 1) : blocks};
      set_shape(&s[S_QYD], 3, a, FA_F32);
      s[S_QYD].output = 1;
    }
  }
}

unsigned char *decode_params(reader *r, const problem *pb, fa_params *p) {
  const int64_t page = pb->page;
  /* Params: a byte per field group; 0 = the default. */
  uint8_t f = u8(r);
  if (f) {
    static const float scales[] = {0.0f, 0.125f, 1.0f, NAN, INFINITY, -1.0f, 1e30f, 1e-30f};
    p->softmax_scale = scales[f % 8];
  }
  f = u8(r);
  p->causal = f & 1;
  p->causal_align = (f & 2) ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  if (f & 4) p->causal_align = (int32_t)(int8_t)u8(r);
  if (f & 8) {
    static const int64_t w[] = {-1, 0, 1, 2, 5, -2, INT64_C(1) << 40, INT64_MAX};
    p->window_enabled = 1;
    p->window_left = w[u8(r) % 8];
    p->window_right = w[u8(r) % 8];
  }
  if (f & 16) {
    static const float caps[] = {0.0f, 1.0f, 30.0f, NAN, -1.0f, INFINITY, 1e-38f, 1e38f};
    p->softcap = caps[u8(r) % 8];
  }
  if (f & 32) {
    static const float ps[] = {0.0f, 0.1f, 0.5f, 0.999f, 1.0f, -0.1f, NAN, 1e-9f};
    p->dropout_p = ps[u8(r) % 8];
    p->dropout_seed = u64(r);
    p->dropout_offset = u64(r);
  }
  if (f & 64) {
    static const int64_t ml[] = {0, 1, -1, 3, 1000, INT64_C(1) << 40, INT64_MAX, 7};
    uint8_t g = u8(r);
    if (g & 1) p->max_seqlen_q = ml[(g >> 1) % 8];
    if (g & 16) p->max_seqlen_k = ml[(g >> 5) % 8];
  }
  f = u8(r);
  if (f & 1) p->page_size = (f & 2) ? page : (int64_t)(int8_t)u8(r);
  if (f & 4) {
    static const int32_t ns[] = {0, 1, 2, 3, 7, -1, 1 << 30, INT32_MAX};
    p->num_splits = ns[u8(r) % 8];
  }
  p->deterministic = (f >> 3) & 1;
  p->return_lse = (f >> 4) & 1;
  if (f & 32) p->stream = g_dummy; /* no meaning for host memory */
  p->check_indices = (f >> 7) & 1;
  if (f & 64) {
    static const char *const fam[] = {"flash", "fa2", "", "flash.x"};
    p->kernel_family = fam[u8(r) % 4];
  }
  f = u8(r);
  if (f) {
    static const int32_t be[] = {FA_BACKEND_AUTO,
                                 FA_BACKEND_CPU,
                                 FA_BACKEND_CUDA,
                                 FA_BACKEND_HIP,
                                 FA_BACKEND_OPENCL,
                                 5,
                                 -1,
                                 99};
    p->backend = be[f % 8];
    p->strict = (f >> 3) & 1;
  }
  /* Workspace: none, a real one of a decoded size, or a size without a pointer. */
  unsigned char *ws = NULL;
  f = u8(r);
  if (f % 4 == 1) {
    size_t n = (size_t)u8(r) * 4096 + u8(r);
    ws = malloc(n ? n : 1);
    p->workspace = ws;
    p->workspace_size = n;
  } else if (f % 4 == 2) {
    p->workspace_size = 1 + u8(r);
  } else if (f % 4 == 3) {
    ws = malloc(1);
    p->workspace = ws; /* size 0: too small whenever the kernel needs scratch */
  }
  return ws;
}
