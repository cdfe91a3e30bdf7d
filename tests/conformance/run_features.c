/*
 * run_features.c: one feature case. The library's tensors are whatever the features need
 * (packed, paged); the float64 reference runs on padded dense copies of the same values, and each
 * output element is mapped back to its reference element (or to "must stay untouched": rows past
 * a sequence's end in a padded lse, packed tokens past the last sequence). Split-KV cases compare
 * the split forward with num_splits 1; deterministic cases run again and compare bitwise; a paged
 * case's backward must be refused with nothing written.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

enum {
  F_QD,
  F_KD,
  F_VD,
  F_DOD,
  F_Q,
  F_K,
  F_V,
  F_DOUT,
  F_OUT0,
  F_OUT,
  F_LSE,
  F_DQ,
  F_DK,
  F_DV,
  F_OUTS,
  F_COUNT
};
static const char *const f_names[F_COUNT] = {
    "q(dense)", "k(dense)", "v(dense)",      "dout(dense)", "q",   "k",
    "v",        "dout",     "out(lse=NULL)", "out",         "lse", "dq",
    "dk",       "dv",       "out(splits=1)"};

static double max_abs_diff(const tu_tensor *a, const tu_tensor *b) {
  int64_t n = tu_numel(a);
  double m = 0.0;
  for (int64_t f = 0; f < n; ++f) {
    double x = tu_get_flat(a, f), y = tu_get_flat(b, f);
    if (isnan(x) != isnan(y)) return INFINITY;
    if (isfinite(x) && isfinite(y) && fabs(x - y) > m) m = fabs(x - y);
    if (isinf(x) != isinf(y)) return INFINITY;
  }
  return m;
}

/* Deterministic mode: the forward and backward run again on re-poisoned outputs and must give
   the first run's bits exactly (out, lse, dq, dk, dv, gaps included); the host buffers hold the
   first run's results. Run after every other check: it overwrites the outputs. */
static void determinism_rerun(report *rep, const backend_ctx *bk, const fa_params *params,
                              tu_tensor *t, dev_tensor *d, int iq, int ik, int iv, int ido,
                              int want_bwd) {
  const int outs[5] = {F_OUT, F_LSE, F_DQ, F_DK, F_DV};
  const int n = want_bwd ? 5 : 2;
  unsigned char *first[5] = {0};
  char err[256];
  for (int k = 0; k < n; ++k) {
    tu_tensor *x = &t[outs[k]];
    const size_t bytes = x->buf_elems * x->elem_bytes;
    if (!(first[k] = malloc(bytes ? bytes : 1))) {
      fail(rep, "deterministic rerun: out of memory");
      goto out;
    }
    memcpy(first[k], x->buf, bytes);
    tu_poison(x);
    if (bk->ops->copy_in(&d[outs[k]], x, err, sizeof err)) {
      fail(rep, "deterministic rerun: %s: %s", f_names[outs[k]], err);
      goto out;
    }
  }
  fa_status st = fa_forward(params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                            &d[F_LSE].view, NULL);
  if (st != FA_OK) {
    fail(rep, "deterministic rerun: fa_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto out;
  }
  if (want_bwd) {
    st = fa_backward(params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                     &d[ido].view, &d[F_DQ].view, &d[F_DK].view, &d[F_DV].view, NULL);
    if (st != FA_OK) {
      fail(rep, "deterministic rerun: fa_backward: %s: %s", fa_status_string(st), fa_last_error());
      goto out;
    }
  }
  for (int k = 0; k < n; ++k) {
    tu_tensor *x = &t[outs[k]];
    if (dev_get(rep, bk, x, &d[outs[k]], f_names[outs[k]])) continue;
    int64_t differ = 0, at = -1;
    for (size_t e = 0; e < x->buf_elems; ++e)
      if (memcmp(x->buf + e * x->elem_bytes, first[k] + e * x->elem_bytes, x->elem_bytes)) {
        if (at < 0) at = (int64_t)e;
        ++differ;
      }
    if (differ)
      fail(rep,
           "deterministic: %s of a second run differs bitwise from the first in %lld elements "
           "(first at buffer element %lld)",
           f_names[outs[k]], (long long)differ, (long long)at);
  }
out:
  for (int k = 0; k < 5; ++k) free(first[k]);
}

int run_fcase(const fcase *c, frun *R, uint64_t run_seed) {
  const double t0 = now_s();
  const backend_ctx *bk = R->bk;
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[320] = "";
  int result = R_FAIL;
  R->skip[0] = '\0';
  tu_tensor t[F_COUNT], it[I_COUNT];
  dev_tensor d[F_COUNT], dix[I_COUNT];
  memset(t, 0, sizeof t);
  memset(it, 0, sizeof it);
  memset(d, 0, sizeof d);
  memset(dix, 0, sizeof dix);
  char err[256];
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};
  int64_t lens_q[FMAXB], lens_k[FMAXB], cu_q[FMAXB + 1], cu_k[FMAXB + 1];
  double slopes[FMAXB * 64];
  int64_t *table = NULL;
  ref_problem p;
  ref_ext x;
  fproblem(c, &p, &x, lens_q, lens_k, slopes);
  const int64_t B = c->b, mq = p.seqlen_q, mk = p.seqlen_k;
  cu_q[0] = cu_k[0] = 0;
  for (int64_t b = 0; b < B; ++b) {
    cu_q[b + 1] = cu_q[b] + (c->varlen ? c->lq[b] : 0);
    cu_k[b + 1] = cu_k[b] + (c->varlen && !c->page ? c->lk[b] : 0);
  }
  const int64_t total_q = cu_q[B] + c->extra_q, total_k = cu_k[B];
  const int64_t nblk = c->page ? B * c->max_blocks + 3 : 0;
  const int dense_q = !c->varlen, dense_k = !c->varlen && !c->page;

  /* Shapes. Dense copies are the library's tensors themselves when nothing is packed or paged. */
  const int64_t qd[4] = {B, mq, c->hq, c->d}, kd[4] = {B, mk, c->hkv, c->d},
                vd[4] = {B, mk, c->hkv, c->dv}, od[4] = {B, mq, c->hq, c->dv};
  const int64_t qp[3] = {total_q, c->hq, c->d}, op[3] = {total_q, c->hq, c->dv},
                kp[3] = {total_k, c->hkv, c->d}, vp[3] = {total_k, c->hkv, c->dv};
  const int64_t kg[4] = {nblk, c->page, c->hkv, c->d}, vg[4] = {nblk, c->page, c->hkv, c->dv};
  const int64_t l3[3] = {B, c->hq, mq}, l2[2] = {c->hq, total_q};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(run_seed, c->name));
#define ALLOC(i, nd, shape, kind)                                                           \
  if (tu_alloc(&t[i], (i) == F_LSE ? FA_F32 : c->dtype, nd, shape, fit_layout(bk, kind))) { \
    fail(&rep, "out of memory allocating %s", f_names[i]);                                  \
    goto done;                                                                              \
  }
  ALLOC(F_QD, 4, qd, dense_q ? tensor_layout(c->layout, T_Q) : TU_CONTIGUOUS);
  ALLOC(F_KD, 4, kd, dense_k ? tensor_layout(c->layout, T_K) : TU_CONTIGUOUS);
  ALLOC(F_VD, 4, vd, dense_k ? tensor_layout(c->layout, T_V) : TU_CONTIGUOUS);
  ALLOC(F_DOD, 4, od, dense_q ? tensor_layout(c->layout, T_DOUT) : TU_CONTIGUOUS);
  if (dense_q) {
    ALLOC(F_OUT0, 4, od, tensor_layout(c->layout, T_OUT0));
    ALLOC(F_OUT, 4, od, tensor_layout(c->layout, T_OUT));
    ALLOC(F_OUTS, 4, od, TU_CONTIGUOUS);
    ALLOC(F_DQ, 4, qd, tensor_layout(c->layout, T_DQ));
  } else {
    ALLOC(F_Q, 3, qp, TU_CONTIGUOUS);
    ALLOC(F_DOUT, 3, op, TU_STRIDED);
    ALLOC(F_OUT0, 3, op, TU_PADDED);
    ALLOC(F_OUT, 3, op, TU_CONTIGUOUS);
    ALLOC(F_OUTS, 3, op, TU_CONTIGUOUS);
    ALLOC(F_DQ, 3, qp, TU_PADDED);
  }
  if (c->varlen && c->lse_packed) {
    ALLOC(F_LSE, 2, l2, TU_CONTIGUOUS);
  } else {
    ALLOC(F_LSE, 3, l3, dense_q ? tensor_layout(c->layout, T_LSE) : TU_PADDED);
  }
  if (c->page) {
    ALLOC(F_K, 4, kg, TU_CONTIGUOUS);
    ALLOC(F_V, 4, vg, TU_PADDED);
    ALLOC(F_DK, 4, kg, TU_CONTIGUOUS);
    ALLOC(F_DV, 4, vg, TU_CONTIGUOUS);
  } else if (c->varlen) {
    ALLOC(F_K, 3, kp, TU_PADDED);
    ALLOC(F_V, 3, vp, TU_CONTIGUOUS);
    ALLOC(F_DK, 3, kp, TU_CONTIGUOUS);
    ALLOC(F_DV, 3, vp, TU_STRIDED);
  } else {
    ALLOC(F_DK, 4, kd, tensor_layout(c->layout, T_DK));
    ALLOC(F_DV, 4, vd, tensor_layout(c->layout, T_DV));
  }
#undef ALLOC
  /* Values: dense copies random; packed tensors random, then the sequences' tokens copied in;
     pages random, the dense keys gathered from them through the shuffled table. */
  for (int i = F_QD; i <= F_DOD; ++i) tu_fill_random(&t[i], &rng);
  if (c->varlen) {
    tu_fill_random(&t[F_Q], &rng);
    tu_fill_random(&t[F_DOUT], &rng);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < c->lq[b]; ++i)
        for (int64_t h = 0; h < c->hq; ++h) {
          int64_t di[4] = {b, i, h, 0}, pi[3] = {cu_q[b] + i, h, 0};
          copy_row(&t[F_Q], pi, &t[F_QD], di, c->d);
          copy_row(&t[F_DOUT], pi, &t[F_DOD], di, c->dv);
        }
  }
  if (c->varlen && !c->page) {
    tu_fill_random(&t[F_K], &rng);
    tu_fill_random(&t[F_V], &rng);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < c->lk[b]; ++j)
        for (int64_t h = 0; h < c->hkv; ++h) {
          int64_t di[4] = {b, j, h, 0}, pi[3] = {cu_k[b] + j, h, 0};
          copy_row(&t[F_K], pi, &t[F_KD], di, c->d);
          copy_row(&t[F_V], pi, &t[F_VD], di, c->dv);
        }
  }
  if (c->page) {
    tu_fill_random(&t[F_K], &rng);
    tu_fill_random(&t[F_V], &rng);
    if (!(table = shuffled_table(c, nblk, 0, &rng))) {
      fail(&rep, "out of memory (block table)");
      goto done;
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < mk; ++j)
        for (int64_t h = 0; h < c->hkv; ++h) {
          int64_t di[4] = {b, j, h, 0};
          int64_t gi[4] = {table[b * c->max_blocks + j / c->page], j % c->page, h, 0};
          copy_row(&t[F_KD], di, &t[F_K], gi, c->d);
          copy_row(&t[F_VD], di, &t[F_V], gi, c->dv);
        }
  }
  /* The library reads the dense copies directly where nothing is packed or paged. */
  const int iq = dense_q ? F_QD : F_Q, ik = dense_k ? F_KD : F_K, iv = dense_k ? F_VD : F_V,
            ido = dense_q ? F_DOD : F_DOUT;
  for (int i = 0; i < F_COUNT; ++i)
    if (t[i].buf) (void)tu_snapshot(&t[i]);
  {
    const int64_t s1[1] = {B + 1}, sb[1] = {B}, st[2] = {B, c->max_blocks};
    int bad = 0;
    if (c->varlen) bad |= make_i32(&it[I_CUQ], 1, s1, cu_q) | make_i32(&it[I_CUK], 1, s1, cu_k);
    if (c->seqused) bad |= make_i32(&it[I_USED], 1, sb, c->used);
    if (c->page) bad |= make_i32(&it[I_TABLE], 2, st, table);
    if (c->alibi) bad |= make_alibi(&it[I_ALIBI], c, slopes) != 0;
    if (bad) {
      fail(&rep, "out of memory (index tensors)");
      goto done;
    }
  }

  /* The tensors the library gets, in the backend's memory (the dense copies only where they are
     the library's own tensors). */
  for (int i = 0; i < F_COUNT; ++i) {
    const int ref_only = (i == F_QD && !dense_q) || (i == F_DOD && !dense_q) ||
                         ((i == F_KD || i == F_VD) && !dense_k);
    if (t[i].buf && !ref_only && dev_put(bk->ops, &d[i], &t[i], err, sizeof err)) {
      fail(&rep, "%s: %s", f_names[i], err);
      goto done;
    }
  }
  for (int i = 0; i < I_COUNT; ++i)
    if (it[i].buf && dev_put(bk->ops, &dix[i], &it[i], err, sizeof err)) {
      fail(&rep, "%s: %s", i_names[i], err);
      goto done;
    }

  fa_params params;
  fparams(c, bk, &x, &params, dix);
  fa_run_info info, plan;
  fa_status st;
  const kernel_facts fwd = facts_of_fcase(c, "fwd"), bwd = facts_of_fcase(c, "bwd");
  int want_bwd = c->bwd && !c->page;
  char bwd_refused[200] = "";
  {
    const fa_tensor *data[8] = {&d[iq].view,
                                &d[ik].view,
                                &d[iv].view,
                                &d[F_OUT].view,
                                want_bwd ? &d[ido].view : NULL,
                                want_bwd ? &d[F_DQ].view : NULL,
                                want_bwd ? &d[F_DK].view : NULL,
                                want_bwd ? &d[F_DV].view : NULL};
    fa_run_info_init(&plan);
    st = fa_plan_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                         &d[F_LSE].view, &plan);
    if (st != FA_OK) {
      result = frefused(&rep, R, c, data, 8, "fa_plan_forward", st);
      goto done;
    }
    if (want_bwd) {
      fa_run_info_init(&plan);
      st = fa_plan_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                            &d[F_LSE].view, &d[ido].view, &d[F_DQ].view, &d[F_DK].view,
                            &d[F_DV].view, &plan);
      /* A backend that runs the case's forward but not its backward: the forward is checked,
         and the summary says the backward was refused and why; but a backend that lists
         "varlen" runs it in both passes (fa_backend_desc.features), so there a case over
         sequences is judged by the refusal rule (needs.c: a skip only for a need not listed). */
      if (st == FA_ERR_UNSUPPORTED && (c->varlen || c->seqused) &&
          list_has(bk->desc->features, "varlen") && list_has(bk->desc->features, "bwd")) {
        result = frefused(&rep, R, c, data, 8, "fa_plan_backward", st);
        goto done;
      } else if (st == FA_ERR_UNSUPPORTED) {
        snprintf(bwd_refused, sizeof bwd_refused, "; backward refused: %s", fa_last_error());
        want_bwd = 0;
      } else if (st != FA_OK) {
        result = frefused(&rep, R, c, data, 8, "fa_plan_backward", st);
        goto done;
      }
    }
  }

  /* The reference only once the backend takes the case (skips stay cheap). */
  if (ref_attention_ext(&p, &x, REF_F64, &t[F_QD], &t[F_KD], &t[F_VD], want_bwd ? &t[F_DOD] : NULL,
                        &r64, 0) ||
      ref_attention_ext(&p, &x, REF_STORAGE, &t[F_QD], &t[F_KD], &t[F_VD],
                        want_bwd ? &t[F_DOD] : NULL, &rn, 0)) {
    fail(&rep, "reference failed (out of memory or bad shapes)");
    goto done;
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w)
    if (!(masked[w] = ref_masked_map_ext(&p, &x, (ref_which)w))) {
      fail(&rep, "out of memory (mask map)");
      goto done;
    }
  fmap mq_map = {
      dense_q ? MAP_ID : MAP_PACKED_Q, B, mq, c->hq, c->hq * c->dv, cu_q, lens_q, total_q};
  fmap mdq_map = mq_map;
  mdq_map.inner = c->hq * c->d;
  fmap mk_map = {
      dense_k ? MAP_ID : MAP_PACKED_K, B, mk, c->hkv, c->hkv * c->d, cu_k, lens_k, total_k};
  fmap mv_map = mk_map;
  mv_map.inner = c->hkv * c->dv;
  fmap ml_map = {!c->varlen      ? MAP_ID
                 : c->lse_packed ? MAP_LSE_PACKED
                                 : MAP_LSE_PADDED,
                 B,
                 mq,
                 c->hq,
                 1,
                 cu_q,
                 lens_q,
                 total_q};

  /* Forward without lse (not for split cases: they compare two forwards below). */
  if (c->splits < 0) {
    fa_run_info_init(&plan);
    st = fa_plan_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT0].view, NULL,
                         &plan);
    if (st != FA_OK)
      fail(&rep, "fa_plan_forward (lse NULL): %s: %s", fa_status_string(st), fa_last_error());
    fa_run_info_init(&info);
    st = fa_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT0].view, NULL, &info);
    if (st != FA_OK)
      fail(&rep, "fa_forward (lse NULL): %s: %s", fa_status_string(st), fa_last_error());
    else {
      check_info(&rep, bk, &fwd, "forward(lse NULL)", &info, &plan);
      if (!dev_get(&rep, bk, &t[F_OUT0], &d[F_OUT0], "out0"))
        fcheck_output(&rep, summary, sizeof summary, "out0", &t[F_OUT0], &mq_map, &r64, &rn,
                      REF_OUT, masked[REF_OUT], c->dtype);
    }
  } else {
    fa_params one = params;
    one.num_splits = 1;
    fa_run_info_init(&info);
    st = fa_forward(&one, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUTS].view, NULL, &info);
    if (st != FA_OK)
      fail(&rep, "fa_forward (num_splits 1): %s: %s", fa_status_string(st), fa_last_error());
    else if (info.num_splits != 1)
      fail(&rep, "forward(num_splits 1): run info num_splits = %d", info.num_splits);
    else
      (void)dev_get(&rep, bk, &t[F_OUTS], &d[F_OUTS], "out(splits=1)");
  }

  fa_run_info_init(&plan);
  (void)fa_plan_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                        &d[F_LSE].view, &plan);
  fa_run_info_init(&info);
  st = fa_forward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                  &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  check_info(&rep, bk, &fwd, "forward", &info, &plan);
  if (c->splits > 0 && !splits_honoured(c->splits, &info, fc_max_k(c)))
    fail(&rep, "forward: num_splits %d asked, run info says %d ran (tiles of %d keys)", c->splits,
         info.num_splits, info.tile_n);
  if (c->determ && !info.deterministic)
    fail(&rep, "forward: params.deterministic set but run info says the kernel is not");
  if (dev_get(&rep, bk, &t[F_OUT], &d[F_OUT], "out") ||
      dev_get(&rep, bk, &t[F_LSE], &d[F_LSE], "lse"))
    goto done;
  fcheck_output(&rep, summary, sizeof summary, "out", &t[F_OUT], &mq_map, &r64, &rn, REF_OUT,
                masked[REF_OUT], c->dtype);
  fcheck_output(&rep, summary, sizeof summary, "lse", &t[F_LSE], &ml_map, &r64, &rn, REF_LSE,
                masked[REF_LSE], c->dtype);
  if (c->splits >= 0) {
    double diff = max_abs_diff(&t[F_OUT], &t[F_OUTS]);
    size_t u = strlen(summary);
    snprintf(summary + u, sizeof summary - u, " |split%d-split1| %.1e", info.num_splits, diff);
    /* "To rounding": within the suite's tolerance of each other. */
    double tol = ref_floor(c->dtype) * 2.0;
    if (!(diff <= tol))
      fail(&rep, "num_splits %d (ran %d) differs from num_splits 1 by %.3e > %.2e", c->splits,
           info.num_splits, diff, tol);
  }
  (void)tu_snapshot(&t[F_OUT]);
  (void)tu_snapshot(&t[F_LSE]);

  if (c->page && c->bwd) {
    /* No backward through a block table: refused, nothing written. */
    for (int i = F_DQ; i <= F_DV; ++i) (void)tu_snapshot(&t[i]);
    st = fa_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                     &d[ido].view, &d[F_DQ].view, &d[F_DK].view, &d[F_DV].view, NULL);
    if (st != FA_ERR_UNSUPPORTED)
      fail(&rep, "fa_backward with a block_table: %s, expected FA_ERR_UNSUPPORTED",
           fa_status_string(st));
    for (int i = F_DQ; i <= F_DV; ++i)
      if (!dev_get(&rep, bk, &t[i], &d[i], f_names[i]) && tu_unchanged(&t[i], NULL, 0) != 1)
        fail(&rep, "refused fa_backward wrote %s", f_names[i]);
  } else if (want_bwd) {
    fa_run_info_init(&plan);
    (void)fa_plan_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view,
                           &d[F_LSE].view, &d[ido].view, &d[F_DQ].view, &d[F_DK].view,
                           &d[F_DV].view, &plan);
    fa_run_info_init(&info);
    st = fa_backward(&params, &d[iq].view, &d[ik].view, &d[iv].view, &d[F_OUT].view, &d[F_LSE].view,
                     &d[ido].view, &d[F_DQ].view, &d[F_DK].view, &d[F_DV].view, &info);
    if (st != FA_OK) {
      fail(&rep, "fa_backward: %s: %s", fa_status_string(st), fa_last_error());
      goto done;
    }
    check_info(&rep, bk, &bwd, "backward", &info, &plan);
    if (c->determ && !info.deterministic)
      fail(&rep, "backward: params.deterministic set but run info says the kernel is not");
    if (dev_get(&rep, bk, &t[F_DQ], &d[F_DQ], "dq") ||
        dev_get(&rep, bk, &t[F_DK], &d[F_DK], "dk") || dev_get(&rep, bk, &t[F_DV], &d[F_DV], "dv"))
      goto done;
    fcheck_output(&rep, summary, sizeof summary, "dq", &t[F_DQ], &mdq_map, &r64, &rn, REF_DQ,
                  masked[REF_DQ], c->dtype);
    fcheck_output(&rep, summary, sizeof summary, "dk", &t[F_DK], &mk_map, &r64, &rn, REF_DK,
                  masked[REF_DK], c->dtype);
    fcheck_output(&rep, summary, sizeof summary, "dv", &t[F_DV], &mv_map, &r64, &rn, REF_DV,
                  masked[REF_DV], c->dtype);
  }
  {
    const int ro[6] = {iq, ik, iv, ido, F_OUT, F_LSE};
    for (int i = 0; i < 6; ++i) {
      char msg[160];
      if (dev_get(&rep, bk, &t[ro[i]], &d[ro[i]], f_names[ro[i]])) continue;
      if (tu_unchanged(&t[ro[i]], msg, sizeof msg) != 1)
        fail(&rep, "input %s was modified: %s", f_names[ro[i]], msg);
    }
    for (int i = 0; i < I_COUNT; ++i)
      if (it[i].buf && !dev_get(&rep, bk, &it[i], &dix[i], i_names[i]) &&
          tu_unchanged(&it[i], NULL, 0) != 1)
        fail(&rep, "%s was modified", i_names[i]);
  }
  /* Last, as it overwrites the outputs (their checks are done). */
  if (c->determ) determinism_rerun(&rep, bk, &params, t, d, iq, ik, iv, ido, want_bwd);
  result = rep.failed ? R_FAIL : R_PASS;

done:
  if (rep.failed) result = R_FAIL;
  dev_release_all(bk->ops, d, t, F_COUNT);
  dev_release_all(bk->ops, dix, it, I_COUNT);
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  free(table);
  ref_result_free(&r64);
  ref_result_free(&rn);
  if (bwd_refused[0]) {
    const size_t u = strlen(summary);
    snprintf(summary + u, sizeof summary - u, "%s", bwd_refused);
  }
  case_print(result, c->name, summary, R->skip, &rep, bk, run_seed, t0);
  return result;
}
