/*
 * call.c: the dense fixture of test_errors (one valid small f32 call) and the run of one case:
 * mutate, call, compare with the plan and workspace-size twins, check that nothing was written.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_errors.h"

const char *const tensor_names[T_COUNT] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};

int g_pass = 0, g_fail = 0;

/* Allocates a tensor larger than the problem in every dimension and shows only the problem's
   shape, so a case that grows a shape (to make it wrong) still describes memory that exists: a
   library that wrongly accepted it would fail the untouched check, not corrupt the heap. */
int alloc_view(tu_tensor *x, fa_dtype dt, int ndim, const int64_t *shape) {
  int64_t big[FA_MAX_DIMS] = {0};
  for (int d = 0; d < ndim; ++d) big[d] = shape[d] + 3;
  if (tu_alloc(x, dt, ndim, big, TU_CONTIGUOUS)) return -1;
  for (int d = 0; d < ndim; ++d) x->t.shape[d] = shape[d];
  return 0;
}

int fixture_init(fixture *f) {
  memset(f, 0, sizeof *f);
  const int64_t qs[4] = {B, SQ, HQ, D}, ks[4] = {B, SK, HKV, D}, vs[4] = {B, SK, HKV, DV},
                os[4] = {B, SQ, HQ, DV}, ls[3] = {B, HQ, SQ}, as[1] = {HQ};
  const int64_t *shapes[T_COUNT] = {qs, ks, vs, os, ls, os, qs, ks, vs};
  for (int i = 0; i < T_COUNT; ++i)
    if (alloc_view(&f->t[i], FA_F32, i == T_LSE ? 3 : 4, shapes[i])) return -1;
  if (tu_alloc(&f->alibi, FA_F32, 1, as, TU_CONTIGUOUS)) return -1;
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), "test_errors"));
  const int inputs[] = {T_Q, T_K, T_V, T_DOUT};
  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; ++i)
    tu_fill_random(&f->t[inputs[i]], &rng);
  for (int h = 0; h < HQ; ++h) {
    int64_t idx[1] = {h};
    tu_set(&f->alibi, idx, 0.25 * (h + 1));
  }
  /* The backward needs a genuine out and lse; the values only matter for the positive control,
     so a failing forward here is reported by that control rather than stopping the suite. */
  fa_params p;
  fa_params_init(&p);
  fa_status st = fa_forward(&p, &f->t[T_Q].t, &f->t[T_K].t, &f->t[T_V].t, &f->t[T_OUT].t,
                            &f->t[T_LSE].t, NULL);
  if (st != FA_OK)
    printf("note: the fixture's forward failed (%s: %s); backward inputs stay poisoned\n",
           fa_status_string(st), fa_last_error());
  return 0;
}

void fixture_free(fixture *f) {
  for (int i = 0; i < T_COUNT; ++i) tu_free(&f->t[i]);
  tu_free(&f->alibi);
}

static int is_output(op_kind op, int i) {
  return op == OP_FWD ? (i == T_OUT || i == T_LSE) : (i == T_DQ || i == T_DK || i == T_DV);
}

/* Poisons the outputs and snapshots everything, so "untouched" and "unchanged" are bitwise. */
static void fixture_arm(fixture *f, op_kind op) {
  for (int i = 0; i < T_COUNT; ++i) {
    if (is_output(op, i))
      tu_poison(&f->t[i]);
    else
      (void)tu_snapshot(&f->t[i]);
  }
}

static void call_init(call *c, fixture *f) {
  memset(c, 0, sizeof *c);
  fa_params_init(&c->params);
  c->pp = &c->params;
  for (int i = 0; i < T_COUNT; ++i) {
    c->view[i] = f->t[i].t;
    c->arg[i] = &c->view[i];
  }
  c->alibi = f->alibi.t;
  fa_run_info_init(&c->info);
  c->pinfo = &c->info;
}

static fa_status do_call(call *c, op_kind op, int which) {
  fa_tensor **a = c->arg;
  size_t bytes = 0;
  if (op == OP_FWD) {
    switch (which) {
      case 0:
        return fa_forward(c->pp, a[T_Q], a[T_K], a[T_V], a[T_OUT], a[T_LSE], c->pinfo);
      case 1:
        return fa_plan_forward(c->pp, a[T_Q], a[T_K], a[T_V], a[T_OUT], a[T_LSE], c->pinfo);
      default:
        return fa_forward_workspace_size(c->pp, a[T_Q], a[T_K], a[T_V], a[T_OUT], a[T_LSE], &bytes);
    }
  }
  switch (which) {
    case 0:
      return fa_backward(c->pp, a[T_Q], a[T_K], a[T_V], a[T_OUT], a[T_LSE], a[T_DOUT], a[T_DQ],
                         a[T_DK], a[T_DV], c->pinfo);
    case 1:
      return fa_plan_backward(c->pp, a[T_Q], a[T_K], a[T_V], a[T_OUT], a[T_LSE], a[T_DOUT], a[T_DQ],
                              a[T_DK], a[T_DV], c->pinfo);
    default:
      return fa_backward_workspace_size(c->pp, a[T_Q], a[T_K], a[T_V], a[T_OUT], a[T_LSE],
                                        a[T_DOUT], a[T_DQ], a[T_DK], a[T_DV], &bytes);
  }
}

static int is_ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

/* Whether msg names one of the '|'-separated alternatives. A plain identifier ("k", "out") must
   appear as a whole word, so "k" is not found inside "dk" or "mask" and "out" not inside "dout";
   anything else ("k.shape[3]") and alternatives written "~word" match as plain substrings. */
int names_any(const char *msg, const char *alts) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", alts);
  for (char *tok = buf; tok && *tok;) {
    char *bar = strchr(tok, '|');
    if (bar) *bar = '\0';
    int plain = *tok == '~';
    const char *name = plain ? tok + 1 : tok;
    int ident = !plain;
    for (const char *p = name; *p && ident; ++p) ident = is_ident_char(*p);
    size_t n = strlen(name);
    for (const char *hit = strstr(msg, name); n && hit; hit = strstr(hit + 1, name)) {
      if (!ident) return 1;
      int left_ok = hit == msg || !is_ident_char(hit[-1]);
      int right_ok = !is_ident_char(hit[n]);
      if (left_ok && right_ok) return 1;
    }
    tok = bar ? bar + 1 : NULL;
  }
  return 0;
}

void why_add(char *why, size_t n, size_t *used, const char *fmt, ...) {
  if (*used >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(why + *used, n - *used, fmt, ap);
  va_end(ap);
  if (w > 0) *used += (size_t)w;
}

void report_case(const char *why, const char *kind, const char *name, fa_status st,
                 const char *msg) {
  const int ok = why[0] == '\0';
  if (ok)
    ++g_pass;
  else
    ++g_fail;
  printf("%s %s %s: %s", ok ? "PASS" : "FAIL", kind, name, fa_status_string(st));
  if (st != FA_OK) printf(" \"%s\"", msg);
  printf("\n");
  if (!ok) printf("  ->%s\n", why);
}

/*
 * Runs one case: mutate, call the op, then its plan and workspace-size twins on the same arguments.
 * A served allow_ok request writes its outputs; then only the status and the inputs are checked.
 */
void run_case(fixture *f, const spec *sp) {
  char why[768] = "";
  size_t used = 0;
  static const char *const twin_fwd[3] = {"fa_forward", "fa_plan_forward",
                                          "fa_forward_workspace_size"};
  static const char *const twin_bwd[3] = {"fa_backward", "fa_plan_backward",
                                          "fa_backward_workspace_size"};
  const char *const *twin = sp->op == OP_FWD ? twin_fwd : twin_bwd;
  char msg[3][512];
  fa_status st[3] = {FA_OK, FA_OK, FA_OK};
  for (int which = 0; which < (sp->no_ws ? 2 : 3); ++which) {
    call c;
    call_init(&c, f);
    fixture_arm(f, sp->op);
    sp->mut(&c, f);
    st[which] = do_call(&c, sp->op, which);
    snprintf(msg[which], sizeof msg[which], "%s", fa_last_error());
    free(c.big);
    if (which == 0) {
      int served = sp->allow_ok && st[0] == FA_OK;
      if (!served && !(sp->accept & S(st[0])))
        why_add(why, sizeof why, &used, " status %s, expected %s%s;", fa_status_string(st[0]),
                sp->accept == S(FA_OK)                      ? "FA_OK"
                : (sp->accept & S(FA_ERR_INVALID_ARGUMENT)) ? "FA_ERR_INVALID_ARGUMENT"
                                                            : "a refusal",
                sp->allow_ok ? " or FA_OK" : "");
      if (st[0] != FA_OK) {
        if (!msg[0][0])
          why_add(why, sizeof why, &used, " fa_last_error() is empty;");
        else if (!names_any(msg[0], sp->names))
          why_add(why, sizeof why, &used, " the message does not name '%s';", sp->names);
      }
    } else if (st[which] != st[0] || (st[0] != FA_OK && strcmp(msg[which], msg[0]) != 0)) {
      why_add(why, sizeof why, &used, " %s gave %s \"%s\" where %s gave %s;", twin[which],
              fa_status_string(st[which]), st[which] == FA_OK ? "" : msg[which], twin[0],
              fa_status_string(st[0]));
    }
    /* Inputs are never written; outputs only by a call that succeeded (never by a query). */
    for (int i = 0; i < T_COUNT; ++i) {
      char where[160];
      if (which == 0 && is_output(sp->op, i) && st[0] == FA_OK) continue;
      if (tu_unchanged(&f->t[i], where, sizeof where) != 1)
        why_add(why, sizeof why, &used, " %s modified %s (%s);", twin[which], tensor_names[i],
                where);
    }
  }
  report_case(why, sp->op == OP_FWD ? "fwd" : "bwd", sp->name, st[0], msg[0]);
}
