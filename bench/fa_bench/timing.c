/*
 * timing.c: one shape's problem and its timed calls. A time is the wall time of one API call
 * (CLOCK_MONOTONIC around it): validation, dispatch and any workspace the call allocates, what a
 * caller sees. On a device the queue is drained before the clock starts and again before it is
 * read, so the time covers the call's kernels from launch to completion. Then the same calls back
 * to back: their host time per call (the issuing alone) and their time per call to completion.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_bench.h"
#include "tools/cli_util.h"
#include "tools/device_mem.h"

int make_problem(problem *p, const options *o, int64_t b, int64_t s, int64_t h, int64_t d,
                 int causal) {
  memset(p, 0, sizeof *p);
  int64_t e4[4] = {b, s, h, d}, e3[3] = {b, h, s}, ed[3] = {b, h, 1};
  /* FP8 inputs write a bf16 output and carry their descales */
  const int fp8 = o->dtype == FA_F8E4M3 || o->dtype == FA_F8E5M2;
  int ok = buffer_alloc(&p->q, o->dtype, 4, e4) && buffer_alloc(&p->k, o->dtype, 4, e4) &&
           buffer_alloc(&p->v, o->dtype, 4, e4) &&
           buffer_alloc(&p->out, fp8 ? FA_BF16 : o->dtype, 4, e4) &&
           buffer_alloc(&p->lse, FA_F32, 3, e3);
  for (int i = 0; ok && fp8 && i < 3; ++i)
    ok = buffer_alloc(&p->descale[i], FA_F32, 3, ed) && fill_ones(&p->descale[i]);
  if (ok && o->bwd)
    ok = buffer_alloc(&p->dout, o->dtype, 4, e4) && buffer_alloc(&p->dq, o->dtype, 4, e4) &&
         buffer_alloc(&p->dk, o->dtype, 4, e4) && buffer_alloc(&p->dv, o->dtype, 4, e4);
  ok = ok && fill_random(&p->q) && fill_random(&p->k) && fill_random(&p->v) &&
       (!o->bwd || fill_random(&p->dout));
  if (!ok) {
    free_problem(p);
    return 0;
  }
  fa_params_init(&p->params);
  p->params.causal = causal;
  p->params.backend = o->backend;
  /* A named backend is what is being measured: never let the library time another one instead. */
  p->params.strict = o->backend != FA_BACKEND_AUTO;
  p->params.return_lse = 1;
  p->params.num_splits = o->splits;
  if (fp8) {
    p->params.q_descale = &p->descale[0].t;
    p->params.k_descale = &p->descale[1].t;
    p->params.v_descale = &p->descale[2].t;
  }
  if (o->window >= 0) {
    p->params.causal = 1;
    p->params.window_enabled = 1;
    p->params.window_left = o->window;
    p->params.window_right = 0;
  }
  return 1;
}

void free_problem(problem *p) {
  buffer *all[] = {&p->q,  &p->k,  &p->v,  &p->out,        &p->lse,        &p->dout,      &p->dq,
                   &p->dk, &p->dv, &p->cu, &p->descale[0], &p->descale[1], &p->descale[2]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) buffer_free(all[i]);
}

typedef struct pass_call {
  problem *p;
  int bwd;
} pass_call;

static fa_status call_pass(void *ctx, fa_run_info *info) {
  const pass_call *c = ctx;
  problem *p = c->p;
  if (!c->bwd) return fa_forward(&p->params, &p->q.t, &p->k.t, &p->v.t, &p->out.t, &p->lse.t, info);
  /* --splits is a forward (decode) knob: the backward is left to the backend's choice. */
  fa_params bp = p->params;
  bp.num_splits = 0;
  return fa_backward(&bp, &p->q.t, &p->k.t, &p->v.t, &p->out.t, &p->lse.t, &p->dout.t, &p->dq.t,
                     &p->dk.t, &p->dv.t, info);
}

void measure(problem *p, int bwd, const options *o, double flops, measurement *m) {
  pass_call c = {p, bwd};
  measure_calls(call_pass, &c, o, flops, m);
}

void measure_calls(api_call_fn call, void *ctx, const options *o, double flops, measurement *m) {
  memset(m, 0, sizeof *m);
  fa_run_info_init(&m->info);
  double *ms = malloc(sizeof(double) * (size_t)o->iters);
  if (!ms) {
    snprintf(m->error, sizeof m->error, "out of memory");
    return;
  }
  for (int i = 0; i < o->warmup + o->iters; ++i) {
    /* A device's queue is drained before the clock starts and after the call (no-ops on the
       host), so the time is the call's whole work. */
    int synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
    double t0 = cli_now_ms();
    fa_status st = synced ? call(ctx, &m->info) : FA_ERR_BACKEND_FAILURE;
    if (st == FA_OK) synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
    double t1 = cli_now_ms();
    if (!synced) {
      snprintf(m->error, sizeof m->error, "device synchronize: %s", g_mem_err);
      free(ms);
      return;
    }
    if (st != FA_OK) {
      snprintf(m->error, sizeof m->error, "%s: %s", fa_status_string(st), fa_last_error());
      free(ms);
      return;
    }
    if (i >= o->warmup) ms[i - o->warmup] = t1 - t0;
  }
  qsort(ms, (size_t)o->iters, sizeof ms[0], cli_cmp_double);
  /* Back to back, as an application calls: o->iters calls issued with no synchronisation between
     them. The host time is the issuing alone (a device queue of this length does not fill); the
     back-to-back time per call includes the kernels, their overlap and the host gaps. */
  int synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
  const double t0 = cli_now_ms();
  fa_status st = FA_OK;
  for (int i = 0; i < o->iters && st == FA_OK && synced; ++i) st = call(ctx, NULL);
  const double t1 = cli_now_ms();
  if (synced && st == FA_OK) synced = devmem_sync(g_dev, g_mem_err, sizeof g_mem_err) == 0;
  const double t2 = cli_now_ms();
  if (!synced || st != FA_OK) {
    snprintf(m->error, sizeof m->error, "back to back: %s", synced ? fa_last_error() : g_mem_err);
    free(ms);
    return;
  }
  m->host_us = (t1 - t0) * 1e3 / o->iters;
  m->b2b_ms = (t2 - t0) / o->iters;
  m->ok = 1;
  m->ms_min = ms[0];
  m->ms_median = o->iters % 2 ? ms[o->iters / 2] : 0.5 * (ms[o->iters / 2 - 1] + ms[o->iters / 2]);
  m->tflops = flops / (m->ms_median * 1e-3) / 1e12;
  free(ms);
}
