/*
 * run_plain.c: one plain case. Fresh random inputs, every output poisoned (gaps included); the
 * forward without and with lse, then the backward on the library's own out and lse, each planned
 * first with fa_plan_*; every output checked by the pass rule, the run report against the
 * expected kernel and the plan, the inputs unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

static const char *const t_names[T_COUNT] = {"q",   "k",   "v",  "dout", "out(lse=NULL)",
                                             "out", "lse", "dq", "dk",   "dv"};

int run_case(const conf_case *c, const backend_ctx *bk, uint64_t run_seed) {
  const double t0 = now_s();
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[256] = "", skip[512] = "";
  int result = R_FAIL;
  tu_tensor t[T_COUNT];
  dev_tensor dv[T_COUNT];
  memset(t, 0, sizeof t);
  memset(dv, 0, sizeof dv);
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};
  char err[256];

  const int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d},
                vs[4] = {c->b, c->sk, c->hkv, c->dv}, os[4] = {c->b, c->sq, c->hq, c->dv},
                ls[3] = {c->b, c->hq, c->sq};
  const int64_t *shapes[T_COUNT] = {qs, ks, vs, os, os, os, ls, qs, ks, vs};
  for (int i = 0; i < T_COUNT; ++i) {
    fa_dtype dt = i == T_LSE ? FA_F32 : c->dtype;
    if (tu_alloc(&t[i], dt, i == T_LSE ? 3 : 4, shapes[i], tensor_layout(c->layout, i))) {
      fail(&rep, "out of memory allocating %s", t_names[i]);
      goto done;
    }
  }
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(run_seed, c->name));
  const int inputs[4] = {T_Q, T_K, T_V, T_DOUT};
  for (int i = 0; i < 4; ++i) {
    tu_fill_random(&t[inputs[i]], &rng);
    (void)tu_snapshot(&t[inputs[i]]);
  }

  for (int i = 0; i < T_COUNT; ++i) {
    if (dev_put(bk->ops, &dv[i], &t[i], err, sizeof err)) {
      fail(&rep, "%s: %s", t_names[i], err);
      goto done;
    }
  }

  fa_params params;
  fa_params_init(&params);
  params.backend = bk->id;
  params.strict = 1;
  params.kernel_family = bk->kernel_family;
  params.softmax_scale = c->scale;
  params.causal = c->cm != CM_NONE;
  params.causal_align = c->cm == CM_TL ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  fa_run_info info, plan;
  fa_status st;
  const kernel_facts fwd = facts_of_case(c, 0), bwd = facts_of_case(c, 1);

  /* Whether the backend takes the case at all, asked before the reference (skips stay cheap). */
  {
    needs nd = {{0}, 0};
    need_shape(&nd, c->dtype, c->cm != CM_NONE, c->cm == CM_TL, c->hq, c->hkv, c->d, c->dv, 1, 1);
    const fa_tensor *data[9];
    for (int i = 0; i < 9; ++i) data[i] = &dv[i < T_LSE ? i : i + 1].view;
    need_views(&nd, data, 9);
    need_family(&nd, bk, 0, 0, c->d, c->dv, c->sq, c->sk, 0.0f, data, 9);
    fa_run_info_init(&plan);
    st = fa_plan_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                         &dv[T_LSE].view, &plan);
    const char *call = "fa_plan_forward";
    if (st == FA_OK) {
      fa_run_info_init(&plan);
      st = fa_plan_backward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                            &dv[T_LSE].view, &dv[T_DOUT].view, &dv[T_DQ].view, &dv[T_DK].view,
                            &dv[T_DV].view, &plan);
      call = "fa_plan_backward";
    }
    if (st != FA_OK) {
      result = refusal(&rep, bk, &nd, call, st, skip, sizeof skip);
      goto done;
    }
  }

  ref_problem p;
  p.batch = c->b, p.seqlen_q = c->sq, p.seqlen_k = c->sk, p.heads_q = c->hq, p.heads_kv = c->hkv;
  p.head_dim = c->d, p.head_dim_v = c->dv;
  p.scale = ref_resolve_scale(c->scale, c->d);
  p.causal = c->cm != CM_NONE;
  p.causal_align = c->cm == CM_TL ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  if (ref_attention(&p, REF_F64, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &r64, 0) ||
      ref_attention(&p, REF_STORAGE, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &rn, 0)) {
    fail(&rep, "reference failed (out of memory)");
    goto done;
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w)
    if (!(masked[w] = ref_masked_map(&p, (ref_which)w))) {
      fail(&rep, "out of memory (mask map)");
      goto done;
    }

  /* Forward without lse: the inference path. */
  fa_run_info_init(&plan);
  st = fa_plan_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT0].view, NULL,
                       &plan);
  if (st != FA_OK)
    fail(&rep, "fa_plan_forward (lse NULL): %s: %s", fa_status_string(st), fa_last_error());
  fa_run_info_init(&info);
  st = fa_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT0].view, NULL,
                  &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward (lse NULL): %s: %s", fa_status_string(st), fa_last_error());
  } else {
    check_info(&rep, bk, &fwd, "forward(lse NULL)", &info, &plan);
    if (bk->ops->copy_out(&t[T_OUT0], &dv[T_OUT0], err, sizeof err))
      fail(&rep, "out: %s", err);
    else
      check_output(&rep, summary, sizeof summary, "out0", &t[T_OUT0], &r64, &rn, REF_OUT,
                   masked[REF_OUT], c->dtype);
  }

  /* Forward with lse, whose out and lse the backward then uses. */
  fa_run_info_init(&plan);
  st = fa_plan_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                       &dv[T_LSE].view, &plan);
  if (st != FA_OK) fail(&rep, "fa_plan_forward: %s: %s", fa_status_string(st), fa_last_error());
  fa_run_info_init(&info);
  st = fa_forward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                  &dv[T_LSE].view, &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  check_info(&rep, bk, &fwd, "forward", &info, &plan);
  if (bk->ops->copy_out(&t[T_OUT], &dv[T_OUT], err, sizeof err) ||
      bk->ops->copy_out(&t[T_LSE], &dv[T_LSE], err, sizeof err)) {
    fail(&rep, "out/lse: %s", err);
    goto done;
  }
  check_output(&rep, summary, sizeof summary, "out", &t[T_OUT], &r64, &rn, REF_OUT, masked[REF_OUT],
               c->dtype);
  check_output(&rep, summary, sizeof summary, "lse", &t[T_LSE], &r64, &rn, REF_LSE, masked[REF_LSE],
               c->dtype);
  (void)tu_snapshot(&t[T_OUT]);
  (void)tu_snapshot(&t[T_LSE]);

  /* Backward. */
  fa_run_info_init(&plan);
  st = fa_plan_backward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                        &dv[T_LSE].view, &dv[T_DOUT].view, &dv[T_DQ].view, &dv[T_DK].view,
                        &dv[T_DV].view, &plan);
  if (st != FA_OK) fail(&rep, "fa_plan_backward: %s: %s", fa_status_string(st), fa_last_error());
  fa_run_info_init(&info);
  st = fa_backward(&params, &dv[T_Q].view, &dv[T_K].view, &dv[T_V].view, &dv[T_OUT].view,
                   &dv[T_LSE].view, &dv[T_DOUT].view, &dv[T_DQ].view, &dv[T_DK].view,
                   &dv[T_DV].view, &info);
  if (st != FA_OK) {
    fail(&rep, "fa_backward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  check_info(&rep, bk, &bwd, "backward", &info, &plan);
  static const int grads[3] = {T_DQ, T_DK, T_DV};
  static const ref_which gw[3] = {REF_DQ, REF_DK, REF_DV};
  for (int g = 0; g < 3; ++g) {
    if (bk->ops->copy_out(&t[grads[g]], &dv[grads[g]], err, sizeof err)) {
      fail(&rep, "%s: %s", t_names[grads[g]], err);
      continue;
    }
    check_output(&rep, summary, sizeof summary, t_names[grads[g]], &t[grads[g]], &r64, &rn, gw[g],
                 masked[gw[g]], c->dtype);
  }

  /* Nothing the calls only read may change (device copies come back whole first). */
  static const int read_only[6] = {T_Q, T_K, T_V, T_DOUT, T_OUT, T_LSE};
  for (int i = 0; i < 6; ++i) {
    int ti = read_only[i];
    char msg[160];
    if (bk->ops->copy_out(&t[ti], &dv[ti], err, sizeof err)) {
      fail(&rep, "%s: %s", t_names[ti], err);
      continue;
    }
    if (tu_unchanged(&t[ti], msg, sizeof msg) != 1)
      fail(&rep, "input %s was modified: %s", t_names[ti], msg);
  }

  result = rep.failed ? R_FAIL : R_PASS;

done:
  if (rep.failed) result = R_FAIL;
  dev_release_all(bk->ops, dv, t, T_COUNT);
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  ref_result_free(&r64);
  ref_result_free(&rn);
  case_print(result, c->name, summary, skip, &rep, bk, run_seed, t0);
  return result;
}
