/*
 * cpu_kvcache.c: what fa_forward_kvcache adds to the forward pass: rotary embedding of the new keys
 * and of q, and the append of k_new/v_new into the (dense or paged) cache. The attention itself
 * is cpu_forward's, over keys [0, cache_seqlens[b] + seqlen_new) of each sequence.
 */
#include <omp.h>

#include "core/math/dtype.h"
#include "cpu_internal.h"
#include "cpu_tensor.h"

/* One value rounded to the storage dtype and back: rotated values are stored (k) or used (q) as
   the storage dtype would hold them, rounded once. */
static float round_to(fa_dtype dtype, double x) {
  float f = (float)x;
  if (dtype == FA_F16) return fa_f16_to_f32(fa_f32_to_f16(f));
  if (dtype == FA_BF16) return fa_bf16_to_f32(fa_f32_to_bf16(f));
  return f;
}

void cpu_rotary_row(const fa_request *req, const cpu_problem *pb, float *x, int64_t pos) {
  const fa_kvcache_args *kv = req->kv;
  const int64_t half = req->rotary_dim / 2;
  float c[CPU_MAX_HEAD_DIM / 2], s[CPU_MAX_HEAD_DIM / 2];
  const fa_tensor *tc = kv->rotary_cos, *ts = kv->rotary_sin;
  cpu_load_row(pb->kern, tc->dtype, fa_tensor_base(tc), pos * tc->strides[0], tc->strides[1], half,
               c);
  cpu_load_row(pb->kern, ts->dtype, fa_tensor_base(ts), pos * ts->strides[0], ts->strides[1], half,
               s);
  /* Interleaved pairs are (2r, 2r + 1), else (r, r + rotary_dim / 2); dims past rotary_dim stay. */
  const int interleaved = kv->rotary_interleaved != 0;
  for (int64_t r = 0; r < half; ++r) {
    int64_t a = interleaved ? 2 * r : r, b = interleaved ? 2 * r + 1 : r + half;
    double x1 = x[a], x2 = x[b];
    x[a] = round_to(req->dtype, x1 * c[r] - x2 * s[r]);
    x[b] = round_to(req->dtype, x1 * s[r] + x2 * c[r]);
  }
}

void cpu_kvcache_append(const fa_request *req, const cpu_problem *pb) {
  const fa_kvcache_args *kv = req->kv;
  if (!kv->k_new || req->seqlen_new == 0) return;
  const int64_t n = req->seqlen_new, heads = pb->heads_kv;
  const int64_t tasks = pb->batch * n * heads;
  const fa_tensor *kn = kv->k_new, *vn = kv->v_new;
#pragma omp parallel for schedule(static)
  for (int64_t w = 0; w < tasks; ++w) {
    const int64_t b = w / (n * heads), t = w / heads % n, hk = w % heads;
    float row[CPU_MAX_HEAD_DIM];
    cpu_seq sq;
    cpu_seq_init(req, pb, b, &sq);
    const int64_t pos = sq.pos0 + t;
    /* Token t of sequence b goes to cache position cache_seqlens[b] + t, keys rotated first. */
    cpu_load_row(pb->kern, kn->dtype, fa_tensor_base(kn),
                 b * kn->strides[0] + t * kn->strides[1] + hk * kn->strides[2], kn->strides[3],
                 pb->d, row);
    if (req->rotary_dim > 0) cpu_rotary_row(req, pb, row, pos);
    cpu_store_row(sq.k.dtype, sq.k.data, cpu_rows_off(&sq.k, pos, hk), sq.k.cs, pb->d, row, 1.0f);
    cpu_load_row(pb->kern, vn->dtype, fa_tensor_base(vn),
                 b * vn->strides[0] + t * vn->strides[1] + hk * vn->strides[2], vn->strides[3],
                 pb->dv, row);
    cpu_store_row(sq.v.dtype, sq.v.data, cpu_rows_off(&sq.v, pos, hk), sq.v.cs, pb->dv, row, 1.0f);
  }
}
