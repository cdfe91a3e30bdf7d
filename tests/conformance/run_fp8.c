/*
 * run_fp8.c: one FP8 case (docs/fp8.md). Fresh float inputs are quantized by the CPU backend's
 * fa_quantize (ref_fp8_inputs: descales per tensor, per batch and head or per block of rows; q and
 * k rotated with one seed where the case says), put in the backend's memory with their descales,
 * and fa_forward runs on them, planned first. out is checked by the pass rule against float64
 * attention on the dequantized inputs, the naive computation in out's dtype setting the
 * tolerance; on a GPU backend, whose FP8 kernel rounds P to e4m3 for P V as FlashAttention-3's
 * does, the larger error of that and of the same computation with P so rounded (with f16 out such
 * a kernel errs over ten times more than the first allows; the CPU oracle does not round P and
 * keeps the tighter rule); lse against the same truth with float32's. On a GPU backend both naive
 * computations accumulate the products as its FP8 tensor cores do (FP8_ACC_BITS). The run report
 * names the FP8 kernel; the inputs and descales are unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "fp8_acc.h"

enum { E_Q, E_K, E_V, E_OUT, E_LSE, E_DQ, E_DK, E_DV, E_COUNT };

static const char *const e_names[E_COUNT] = {"q",   "k",         "v",         "out",
                                             "lse", "q_descale", "k_descale", "v_descale"};

/* A float32 copy of src's values rounded to dt (the naive computation's inputs). */
static int rounded_copy(const tu_tensor *src, fa_dtype dt, tu_tensor *dst) {
  if (tu_alloc(dst, dt, src->t.ndim, src->t.shape, TU_CONTIGUOUS)) return -1;
  return tu_copy_values(dst, src);
}

int run_fp8case(const fcase *c, frun *R, uint64_t run_seed) {
  const backend_ctx *bk = R->bk;
  const double t0 = now_s();
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[256] = "", err[256];
  R->skip[0] = '\0';
  int result = R_FAIL;
  ref_fp8 in[3];
  tu_tensor src[3], naive_in[3], t[E_COUNT];
  dev_tensor d[E_COUNT];
  memset(in, 0, sizeof in), memset(src, 0, sizeof src), memset(naive_in, 0, sizeof naive_in);
  memset(t, 0, sizeof t), memset(d, 0, sizeof d);
  ref_result r64, rn, rn8, rn32;
  memset(&r64, 0, sizeof r64), memset(&rn, 0, sizeof rn), memset(&rn8, 0, sizeof rn8);
  memset(&rn32, 0, sizeof rn32);
  unsigned char *masked_out = NULL, *masked_lse = NULL;

  /* The inputs: float32 draws, quantized with the case's descale layout. */
  const int64_t qs[4] = {c->b, c->sq, c->hq, c->d}, ks[4] = {c->b, c->sk, c->hkv, c->d},
                vs[4] = {c->b, c->sk, c->hkv, c->dv}, os[4] = {c->b, c->sq, c->hq, c->dv},
                ls[3] = {c->b, c->hq, c->sq};
  const int64_t *shapes[3] = {qs, ks, vs};
  const int roles[3] = {T_Q, T_K, T_V};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(run_seed, c->name));
  const uint64_t rot_seed = tu_rng_u64(&rng);
  for (int i = 0; i < 3; ++i) {
    const int64_t rows = c->dsl == 3 ? (i == 0 ? c->rows_q : c->rows_k) : 0;
    if (tu_alloc(&src[i], FA_F32, 4, shapes[i], TU_CONTIGUOUS)) {
      fail(&rep, "out of memory");
      goto done;
    }
    tu_fill_random(&src[i], &rng);
    if (ref_fp8_inputs(&src[i], c->fp8, rows, c->dsl == 1, c->rotate && i < 2, rot_seed,
                       fit_layout(bk, tensor_layout(c->layout, roles[i])), &in[i])) {
      fail(&rep, "quantizing %s on the cpu backend: %s", e_names[i], fa_last_error());
      goto done;
    }
    /* No descales: the draws rounded to FP8 directly are the values (descale 1). */
    if (c->dsl == 0 && (tu_copy_values(&in[i].x, &src[i]) || tu_copy_values(&in[i].deq, &in[i].x) ||
                        tu_snapshot(&in[i].x))) {
      fail(&rep, "out of memory");
      goto done;
    }
  }
  if (tu_alloc(&t[E_OUT], c->dtype, 4, os, fit_layout(bk, tensor_layout(c->layout, T_OUT))) ||
      tu_alloc(&t[E_LSE], FA_F32, 3, ls, tensor_layout(c->layout, T_LSE))) {
    fail(&rep, "out of memory");
    goto done;
  }
  const tu_tensor *host[E_COUNT] = {&in[0].x,  &in[1].x,       &in[2].x,       &t[E_OUT],
                                    &t[E_LSE], &in[0].descale, &in[1].descale, &in[2].descale};
  for (int i = 0; i < E_COUNT; ++i)
    if (dev_put(bk->ops, &d[i], host[i], err, sizeof err)) {
      fail(&rep, "%s: %s", e_names[i], err);
      goto done;
    }

  ref_problem p;
  ref_ext x;
  int64_t lens_q[FMAXB], lens_k[FMAXB];
  double slopes[FMAXB * 64];
  fproblem(c, &p, &x, lens_q, lens_k, slopes);
  fa_params params;
  dev_tensor no_index[I_COUNT]; /* dense: no index tensors */
  memset(no_index, 0, sizeof no_index);
  fparams(c, bk, &x, &params, no_index);
  if (c->dsl) {
    params.q_descale = &d[E_DQ].view;
    params.k_descale = &d[E_DK].view;
    params.v_descale = &d[E_DV].view;
    params.descale_rows_q = c->dsl == 3 ? c->rows_q : 0;
    params.descale_rows_k = c->dsl == 3 ? c->rows_k : 0;
  }
  const fa_tensor *data[4] = {&d[E_Q].view, &d[E_K].view, &d[E_V].view, &d[E_OUT].view};
  fa_run_info plan, info;
  fa_run_info_init(&plan);
  fa_status st = fa_plan_forward(&params, &d[E_Q].view, &d[E_K].view, &d[E_V].view, &d[E_OUT].view,
                                 &d[E_LSE].view, &plan);
  if (st != FA_OK) {
    result = frefused(&rep, R, c, data, 4, "fa_plan_forward", st);
    goto done;
  }

  /* The truth on the dequantized inputs; the naive computations in out's dtype (out) and in
     float32 (lse, kept in float32 by every backend). */
  for (int i = 0; i < 3; ++i)
    if (rounded_copy(&in[i].deq, c->dtype, &naive_in[i])) {
      fail(&rep, "out of memory");
      goto done;
    }
  /* A GPU backend's FP8 products accumulate as Hopper's FP8 tensor cores do (ref_ext.acc_bits):
     its naive computations (P rounded, and lse's) do too. */
  const int p_rounded = strcmp(bk->desc->name, "cpu") != 0;
  ref_ext x8 = x, x32 = x;
  x8.p_fp8 = 1;
  x8.acc_bits = x32.acc_bits = p_rounded ? FP8_ACC_BITS : 0;
  if (ref_attention_ext(&p, &x, REF_F64, &in[0].deq, &in[1].deq, &in[2].deq, NULL, &r64, 0) ||
      ref_attention_ext(&p, &x, REF_STORAGE, &naive_in[0], &naive_in[1], &naive_in[2], NULL, &rn,
                        0) ||
      ref_attention_ext(&p, &x8, REF_STORAGE, &naive_in[0], &naive_in[1], &naive_in[2], NULL, &rn8,
                        0) ||
      ref_attention_ext(&p, &x32, REF_STORAGE, &in[0].deq, &in[1].deq, &in[2].deq, NULL, &rn32,
                        0) ||
      !(masked_out = ref_masked_map_ext(&p, &x, REF_OUT)) ||
      !(masked_lse = ref_masked_map_ext(&p, &x, REF_LSE))) {
    fail(&rep, "reference failed (out of memory)");
    goto done;
  }

  /* A GPU backend: the naive output farther from the truth, element by element (the pass rule
     takes the largest of these distances). */
  for (int64_t i = 0; p_rounded && i < rn.n[REF_OUT]; ++i)
    if (fabs(rn8.t[REF_OUT][i] - r64.t[REF_OUT][i]) > fabs(rn.t[REF_OUT][i] - r64.t[REF_OUT][i]))
      rn.t[REF_OUT][i] = rn8.t[REF_OUT][i];

  fa_run_info_init(&info);
  st = fa_forward(&params, &d[E_Q].view, &d[E_K].view, &d[E_V].view, &d[E_OUT].view, &d[E_LSE].view,
                  &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  const kernel_facts facts = facts_of_fcase(c, "fwd");
  check_info(&rep, bk, &facts, "forward", &info, &plan);
  if (dev_get(&rep, bk, &t[E_OUT], &d[E_OUT], "out") ||
      dev_get(&rep, bk, &t[E_LSE], &d[E_LSE], "lse"))
    goto done;
  check_output(&rep, summary, sizeof summary, "out", &t[E_OUT], &r64, &rn, REF_OUT, masked_out,
               c->dtype);
  check_output(&rep, summary, sizeof summary, "lse", &t[E_LSE], &r64, &rn32, REF_LSE, masked_lse,
               FA_F32);

  /* The inputs and descales are only read. */
  for (int i = 0; i < E_COUNT; ++i) {
    if (i == E_OUT || i == E_LSE) continue;
    tu_tensor *h = (tu_tensor *)host[i];
    char msg[160];
    if (dev_get(&rep, bk, h, &d[i], e_names[i])) continue;
    if (tu_unchanged(h, msg, sizeof msg) != 1)
      fail(&rep, "input %s was modified: %s", e_names[i], msg);
  }
  result = rep.failed ? R_FAIL : R_PASS;

done:
  if (rep.failed) result = R_FAIL;
  for (int i = 0; i < E_COUNT; ++i) bk->ops->release(&d[i]);
  for (int i = 0; i < 3; ++i) {
    ref_fp8_free(&in[i]);
    tu_free(&src[i]);
    tu_free(&naive_in[i]);
  }
  tu_free(&t[E_OUT]);
  tu_free(&t[E_LSE]);
  free(masked_out);
  free(masked_lse);
  ref_result_free(&r64);
  ref_result_free(&rn);
  ref_result_free(&rn8);
  ref_result_free(&rn32);
  case_print(result, c->name, summary, R->skip, &rep, bk, run_seed, t0);
  return result;
}
