/*
 * params.c: test_errors' parameter cases: positive controls first, then every fa_params field made
 * invalid in turn, and the features the CPU backend may or may not serve (strict: it runs them or
 * refuses naming them).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_errors.h"

static void m_none(call *c, fixture *f) { (void)c, (void)f; }
static void m_params_null(call *c, fixture *f) { (void)f, c->pp = NULL; }
static void m_size0(call *c, fixture *f) { (void)f, c->params.struct_size = 0; }

/* A caller built against a later header: its struct is larger. Zero extra bytes are fine (fields
   this version does not know, left at their defaults); a non-zero one must be refused, not
   ignored. */
static void big_params(call *c, int nonzero) {
  size_t extra = 64;
  c->big = (fa_params *)calloc(1, sizeof(fa_params) + extra);
  if (!c->big) return;
  memcpy(c->big, &c->params, sizeof(fa_params));
  c->big->struct_size = sizeof(fa_params) + extra;
  if (nonzero) ((unsigned char *)c->big)[sizeof(fa_params) + 17] = 1;
  c->pp = c->big;
}
static void m_size_big_zero(call *c, fixture *f) { (void)f, big_params(c, 0); }
static void m_size_big_nonzero(call *c, fixture *f) { (void)f, big_params(c, 1); }
static void m_scale_nan(call *c, fixture *f) { (void)f, c->params.softmax_scale = NAN; }
static void m_scale_neg(call *c, fixture *f) { (void)f, c->params.softmax_scale = -0.5f; }
static void m_scale_inf(call *c, fixture *f) { (void)f, c->params.softmax_scale = INFINITY; }
static void m_align7(call *c, fixture *f) {
  (void)f;
  c->params.causal = 1;
  c->params.causal_align = 7;
}
static void m_drop1(call *c, fixture *f) { (void)f, c->params.dropout_p = 1.0f; }
static void m_drop_neg(call *c, fixture *f) { (void)f, c->params.dropout_p = -0.1f; }
static void m_drop_nan(call *c, fixture *f) { (void)f, c->params.dropout_p = NAN; }
static void m_backend99(call *c, fixture *f) { (void)f, c->params.backend = 99; }
static void m_backend_neg(call *c, fixture *f) { (void)f, c->params.backend = -1; }
static void m_splits_neg(call *c, fixture *f) { (void)f, c->params.num_splits = -1; }
static void m_return_lse(call *c, fixture *f) {
  (void)f;
  c->params.return_lse = 1;
  c->arg[T_LSE] = NULL;
}
static void m_info_size0(call *c, fixture *f) { (void)f, c->info.struct_size = 0; }

/* Asking for a backend this build lacks, strictly, on CPU memory: refused whichever way the core
   words it (not built: unavailable; built but not owning host memory: unsupported). */
static void m_strict_cuda(call *c, fixture *f) {
  (void)f;
  c->params.backend = FA_BACKEND_CUDA;
  c->params.strict = 1;
}

/* Features the CPU backend may or may not implement; strict, so either it runs them or it refuses
   naming them. */
static void strict_cpu(call *c) {
  c->params.backend = FA_BACKEND_CPU;
  c->params.strict = 1;
}
static void m_window(call *c, fixture *f) {
  (void)f;
  strict_cpu(c);
  c->params.window_enabled = 1;
  c->params.window_left = 2;
  c->params.window_right = 1;
}
static void m_softcap(call *c, fixture *f) {
  (void)f;
  strict_cpu(c);
  c->params.softcap = 30.0f;
}
static void m_alibi(call *c, fixture *f) {
  (void)f;
  strict_cpu(c);
  c->params.alibi_slopes = &c->alibi;
}
static void m_dropout(call *c, fixture *f) {
  (void)f;
  strict_cpu(c);
  c->params.dropout_p = 0.1f;
  c->params.dropout_seed = 1234;
}
static void m_family(call *c, fixture *f) {
  (void)f;
  strict_cpu(c);
  c->params.kernel_family = "fa3";
}

static void m_lse_null(call *c, fixture *f) { (void)f, c->arg[T_LSE] = NULL; }

void run_params(fixture *f, op_kind op) {
  const unsigned OK = S(FA_OK), INV = ACCEPT_INVALID, UNSUP = S(FA_ERR_UNSUPPORTED);
  const unsigned UNAVAIL = S(FA_ERR_BACKEND_UNAVAILABLE) | UNSUP;
  const spec specs[] = {
      /* Positive controls first: if these fail, the refusals below prove little. */
      {op, "valid call", m_none, OK, 0, 0, ""},
      {op, "params NULL (defaults)", m_params_null, OK, 0, 0, ""},
      {op, "params.struct_size larger, extra bytes zero", m_size_big_zero, OK, 0, 0, ""},
      {op, "params.struct_size 0", m_size0, INV, 0, 0, "~struct_size|params"},
      /* A newer caller's field this version lacks: invalid, or unsupported (a feature of a later
         version); either way refused, never ignored. */
      {op, "params.struct_size larger, an extra byte non-zero", m_size_big_nonzero, INV | UNSUP, 0,
       0, "~struct_size|params"},
      {op, "softmax_scale NaN", m_scale_nan, INV, 0, 0, "~softmax_scale"},
      {op, "softmax_scale negative", m_scale_neg, INV, 0, 0, "~softmax_scale"},
      {op, "softmax_scale inf", m_scale_inf, INV, 0, 0, "~softmax_scale"},
      {op, "causal_align 7", m_align7, INV, 0, 0, "~causal_align"},
      {op, "dropout_p 1.0", m_drop1, INV, 0, 0, "~dropout_p"},
      {op, "dropout_p -0.1", m_drop_neg, INV, 0, 0, "~dropout_p"},
      {op, "dropout_p NaN", m_drop_nan, INV, 0, 0, "~dropout_p"},
      {op, "backend 99", m_backend99, INV, 0, 0, "~backend"},
      {op, "backend -1", m_backend_neg, INV, 0, 0, "~backend"},
      {op, "num_splits -1", m_splits_neg, INV, 0, 0, "~num_splits"},
      {op, "run_info.struct_size 0", m_info_size0, INV, 0, 1, "~struct_size|info|~run_info"},
      {op, "strict backend cuda (not usable here)", m_strict_cuda, UNAVAIL, 0, 0, "~cuda"},
      /* Features the CPU backend may or may not have: strict, so it runs them or names them. */
      {op, "strict cpu + sliding window", m_window, UNSUP, 1, 0, "~window"},
      {op, "strict cpu + softcap", m_softcap, UNSUP, 1, 0, "~softcap"},
      {op, "strict cpu + alibi", m_alibi, UNSUP, 1, 0, "~alibi"},
      {op, "strict cpu + dropout", m_dropout, UNSUP, 1, 0, "~dropout"},
      {op, "strict cpu + kernel_family fa3", m_family, UNSUP | INV, 0, 0, "~kernel_family|~fa3"},
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; ++i) run_case(f, &specs[i]);
  if (op == OP_FWD) {
    const spec fwd_only[] = {
        {op, "lse NULL (optional in the forward)", m_lse_null, OK, 0, 0, ""},
        {op, "return_lse=1 with lse NULL", m_return_lse, INV, 0, 0, "lse"},
    };
    for (size_t i = 0; i < sizeof fwd_only / sizeof fwd_only[0]; ++i) run_case(f, &fwd_only[i]);
  }
}
