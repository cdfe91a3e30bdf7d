/*
 * test_errors.c: every argument of fa_forward / fa_backward made invalid in turn.
 *
 * Each case starts from one valid call (small shapes, f32, CPU) and breaks one thing. It expects
 * the documented status, a message from fa_last_error() that names the argument, every output
 * buffer bitwise untouched (the failure must be found before anything is written) and every input
 * unchanged. fa_plan_* and fa_*_workspace_size get the same arguments and must fail the same way
 * ("fails exactly when fa_forward would fail before computing, with the same message").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flash_attn.h"
#include "tensor_util.h"

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_COUNT };
static const char *const tensor_names[T_COUNT] = {"q",    "k",  "v",  "out", "lse",
                                                  "dout", "dq", "dk", "dv"};

/* The valid problem: GQA (6 query heads over 3), every size distinct, so a check that compares
   the wrong pair of dimensions cannot pass by coincidence. */
enum { B = 2, SQ = 5, SK = 7, HQ = 6, HKV = 3, D = 8, DV = 4 };

typedef struct fixture {
  tu_tensor t[T_COUNT];
  tu_tensor alibi; /* float32 [HQ], for the feature probe */
} fixture;

typedef enum op_kind { OP_FWD, OP_BWD } op_kind;

/* One call's arguments: copies of the fixture's views that a case may break. */
typedef struct call {
  fa_params params;
  const fa_params *pp;
  fa_params *big; /* an oversized params block (struct_size tests), or NULL */
  fa_tensor view[T_COUNT];
  fa_tensor *arg[T_COUNT]; /* what is passed: &view[i], or NULL */
  fa_tensor alibi;
  fa_run_info info;
  fa_run_info *pinfo;
} call;

static int g_pass = 0, g_fail = 0;

/* Allocates a tensor larger than the problem in every dimension and shows only the problem's
   shape, so a case that grows a shape (to make it wrong) still describes memory that exists: a
   library that wrongly accepted it would fail the untouched check, not corrupt the heap. */
static int alloc_view(tu_tensor *x, fa_dtype dt, int ndim, const int64_t *shape) {
  int64_t big[FA_MAX_DIMS];
  for (int d = 0; d < ndim; ++d) big[d] = shape[d] + 3;
  if (tu_alloc(x, dt, ndim, big, TU_CONTIGUOUS)) return -1;
  for (int d = 0; d < ndim; ++d) x->t.shape[d] = shape[d];
  return 0;
}

static int fixture_init(fixture *f) {
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

static void fixture_free(fixture *f) {
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
static int names_any(const char *msg, const char *alts) {
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

/* Accepted statuses: a bit per fa_status. */
#define S(st) (1u << (st))
#define ACCEPT_INVALID S(FA_ERR_INVALID_ARGUMENT)

typedef void (*mutator)(call *c, fixture *f);

/* One case: how to break the call and what must come back. */
typedef struct spec {
  op_kind op;
  const char *name;
  mutator mut;
  unsigned accept; /* statuses accepted (S(...) bits) */
  int allow_ok;    /* a valid request a backend may refuse: FA_OK is accepted too */
  int no_ws;       /* the broken argument is not one fa_*_workspace_size takes (run_info) */
  const char *names;
} spec;

/*
 * Runs one case: mutate, call the op, then its plan and workspace-size twins on the same arguments.
 * A served allow_ok request writes its outputs; then only the status and the inputs are checked.
 */
static void run_case(fixture *f, const spec *sp) {
  char why[768] = "";
  size_t used = 0;
#define WHY(...)                                                     \
  do {                                                               \
    if (used < sizeof why) {                                         \
      int w_ = snprintf(why + used, sizeof why - used, __VA_ARGS__); \
      if (w_ > 0) used += (size_t)w_;                                \
    }                                                                \
  } while (0)
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
        WHY(" status %s, expected %s%s;", fa_status_string(st[0]),
            sp->accept == S(FA_OK)                      ? "FA_OK"
            : (sp->accept & S(FA_ERR_INVALID_ARGUMENT)) ? "FA_ERR_INVALID_ARGUMENT"
                                                        : "a refusal",
            sp->allow_ok ? " or FA_OK" : "");
      if (st[0] != FA_OK) {
        if (!msg[0][0])
          WHY(" fa_last_error() is empty;");
        else if (!names_any(msg[0], sp->names))
          WHY(" the message does not name '%s';", sp->names);
      }
    } else if (st[which] != st[0] || (st[0] != FA_OK && strcmp(msg[which], msg[0]) != 0)) {
      WHY(" %s gave %s \"%s\" where %s gave %s;", twin[which], fa_status_string(st[which]),
          st[which] == FA_OK ? "" : msg[which], twin[0], fa_status_string(st[0]));
    }
    /* Inputs are never written; outputs only by a call that succeeded (never by a query). */
    for (int i = 0; i < T_COUNT; ++i) {
      char where[160];
      if (which == 0 && is_output(sp->op, i) && st[0] == FA_OK) continue;
      if (tu_unchanged(&f->t[i], where, sizeof where) != 1)
        WHY(" %s modified %s (%s);", twin[which], tensor_names[i], where);
    }
  }
  int ok = used == 0;
  if (ok)
    ++g_pass;
  else
    ++g_fail;
  printf("%s %s %s: %s", ok ? "PASS" : "FAIL", sp->op == OP_FWD ? "fwd" : "bwd", sp->name,
         fa_status_string(st[0]));
  if (st[0] != FA_OK) printf(" \"%s\"", msg[0]);
  printf("\n");
  if (!ok) printf("  ->%s\n", why);
#undef WHY
}

/* ----------------------------------------------------------------------------------------------
 * Tensor mutations, described by data: which tensor, which field, which value.
 * -------------------------------------------------------------------------------------------- */

typedef enum what {
  W_NULL,      /* the tensor pointer is NULL */
  W_NDIM,      /* ndim = value */
  W_SHAPE,     /* shape[dim] = value */
  W_STRIDE,    /* strides[dim] = value */
  W_NEGSTRIDE, /* strides[dim] negated */
  W_DTYPE,     /* dtype = value */
  W_DEVICE,    /* device.kind = value */
  W_DATA_NULL, /* data = NULL (the tensor still has elements) */
  W_OFFSET     /* byte_offset += value */
} what;

typedef struct tmut {
  op_kind op;
  int tensor;
  what what;
  int dim;
  int64_t value;
  int tensor2; /* a second tensor given the same change, or -1 */
  const char *names;
  const char *label;
} tmut;

static const tmut *g_tm; /* the mutation run_case is applying */

static void apply_one(call *c, int i, const tmut *m) {
  fa_tensor *t = &c->view[i];
  switch (m->what) {
    case W_NULL:
      c->arg[i] = NULL;
      break;
    case W_NDIM:
      t->ndim = (int32_t)m->value;
      break;
    case W_SHAPE:
      t->shape[m->dim] = m->value;
      break;
    case W_STRIDE:
      t->strides[m->dim] = m->value;
      break;
    case W_NEGSTRIDE:
      t->strides[m->dim] = -t->strides[m->dim];
      break;
    case W_DTYPE:
      t->dtype = (fa_dtype)m->value;
      break;
    case W_DEVICE:
      t->device.kind = (fa_device_kind)m->value;
      break;
    case W_DATA_NULL:
      t->data = NULL;
      t->byte_offset = 0;
      break;
    case W_OFFSET:
      t->byte_offset += (uint64_t)m->value;
      break;
  }
}

static void mut_table(call *c, fixture *f) {
  (void)f;
  apply_one(c, g_tm->tensor, g_tm);
  if (g_tm->tensor2 >= 0) apply_one(c, g_tm->tensor2, g_tm);
}

static void run_table(fixture *f, const tmut *tab, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    g_tm = &tab[i];
    spec sp = {tab[i].op, tab[i].label, mut_table, ACCEPT_INVALID, 0, 0, tab[i].names};
    run_case(f, &sp);
  }
}

/* ----------------------------------------------------------------------------------------------
 * Parameter mutations
 * -------------------------------------------------------------------------------------------- */

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

static void run_params(fixture *f, op_kind op) {
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

int main(void) {
  uint64_t seed = tu_run_seed();
  fixture f;
  if (fixture_init(&f)) {
    printf("test_errors: out of memory\ntest_errors: 0 passed, 1 failed\n");
    return 1;
  }

  /* The sizes are distinct, so a value changed to another dimension's size is still wrong. */
  static const tmut fwd[] = {
      {OP_FWD, T_Q, W_NULL, 0, 0, -1, "q", "q NULL"},
      {OP_FWD, T_K, W_NULL, 0, 0, -1, "k", "k NULL"},
      {OP_FWD, T_V, W_NULL, 0, 0, -1, "v", "v NULL"},
      {OP_FWD, T_OUT, W_NULL, 0, 0, -1, "out", "out NULL"},
      {OP_FWD, T_Q, W_NDIM, 0, 3, -1, "q", "q.ndim 3 (no cu_seqlens)"},
      {OP_FWD, T_Q, W_NDIM, 0, 5, -1, "q", "q.ndim 5"},
      {OP_FWD, T_K, W_NDIM, 0, 0, -1, "k", "k.ndim 0"},
      {OP_FWD, T_OUT, W_NDIM, 0, 2, -1, "out", "out.ndim 2"},
      {OP_FWD, T_K, W_SHAPE, 3, D + 1, -1, "k.shape[3]|q.shape[3]", "k head_dim != q head_dim"},
      {OP_FWD, T_K, W_SHAPE, 2, 4, T_V, "k.shape[2]|q.shape[2]",
       "heads_q 6 not a multiple of heads_kv 4"},
      {OP_FWD, T_K, W_SHAPE, 0, B + 1, -1, "k.shape[0]|v.shape[0]|q.shape[0]", "k batch mismatch"},
      {OP_FWD, T_Q, W_SHAPE, 0, 1, -1, "q.shape[0]|k.shape[0]|out.shape[0]", "q batch mismatch"},
      {OP_FWD, T_V, W_SHAPE, 1, SK - 1, -1, "v.shape[1]|k.shape[1]", "v seqlen != k seqlen"},
      {OP_FWD, T_V, W_SHAPE, 2, 1, -1, "v.shape[2]|k.shape[2]", "v heads != k heads"},
      {OP_FWD, T_V, W_SHAPE, 3, DV + 2, -1, "v.shape[3]|out.shape[3]", "v head_dim != out's"},
      {OP_FWD, T_OUT, W_SHAPE, 1, SQ - 1, -1, "out", "out seqlen wrong"},
      {OP_FWD, T_OUT, W_SHAPE, 2, HKV, -1, "out", "out heads wrong"},
      {OP_FWD, T_OUT, W_SHAPE, 3, DV + 1, -1, "out", "out head_dim wrong"},
      {OP_FWD, T_LSE, W_SHAPE, 1, HKV, -1, "lse", "lse heads wrong"},
      {OP_FWD, T_LSE, W_SHAPE, 2, SQ + 1, -1, "lse", "lse seqlen wrong"},
      {OP_FWD, T_LSE, W_NDIM, 0, 4, -1, "lse", "lse.ndim 4"},
      {OP_FWD, T_LSE, W_DTYPE, 0, FA_F16, -1, "lse", "lse dtype f16"},
      {OP_FWD, T_K, W_DTYPE, 0, FA_F16, -1, "k", "k f16 with q f32"},
      {OP_FWD, T_OUT, W_DTYPE, 0, FA_BF16, -1, "out", "out bf16 with q f32"},
      {OP_FWD, T_Q, W_DTYPE, 0, FA_I32, T_K, "q", "q,k int32"},
      {OP_FWD, T_Q, W_DTYPE, 0, 0, -1, "q", "q dtype invalid (0)"},
      {OP_FWD, T_Q, W_DTYPE, 0, 77, -1, "q", "q dtype 77"},
      {OP_FWD, T_K, W_DEVICE, 0, FA_DEVICE_CUDA, -1, "k", "k on a CUDA device, q on CPU"},
      {OP_FWD, T_OUT, W_DEVICE, 0, FA_DEVICE_OPENCL, -1, "out", "out on OpenCL, q on CPU"},
      {OP_FWD, T_Q, W_DEVICE, 0, 0, -1, "q", "q device kind invalid (0)"},
      {OP_FWD, T_K, W_NEGSTRIDE, 1, 0, -1, "k", "k negative stride[1]"},
      {OP_FWD, T_Q, W_STRIDE, 3, -1, -1, "q", "q stride[3] -1"},
      {OP_FWD, T_Q, W_SHAPE, 1, -1, -1, "q", "q negative shape[1]"},
      {OP_FWD, T_V, W_SHAPE, 3, -8, -1, "v", "v negative shape[3]"},
      {OP_FWD, T_Q, W_DATA_NULL, 0, 0, -1, "q", "q data NULL"},
      {OP_FWD, T_V, W_DATA_NULL, 0, 0, -1, "v", "v data NULL"},
      {OP_FWD, T_OUT, W_DATA_NULL, 0, 0, -1, "out", "out data NULL"},
      {OP_FWD, T_LSE, W_DATA_NULL, 0, 0, -1, "lse", "lse data NULL"},
      /* Outputs whose strides make two elements share memory (documented as invalid). */
      {OP_FWD, T_OUT, W_STRIDE, 3, 0, -1, "out", "out stride[3] 0 (aliasing)"},
      {OP_FWD, T_LSE, W_STRIDE, 2, 0, -1, "lse", "lse stride[2] 0 (aliasing)"},
      /* Elements not aligned to their size. */
      {OP_FWD, T_Q, W_OFFSET, 0, 2, -1, "q", "q byte_offset 2 (misaligned f32)"},
      {OP_FWD, T_LSE, W_OFFSET, 0, 1, -1, "lse", "lse byte_offset 1 (misaligned)"},
      /* Sizes whose byte counts overflow 64 bits are refused before anything is touched. */
      {OP_FWD, T_K, W_SHAPE, 1, INT64_C(1) << 61, T_V, "k", "k seqlen 2^61 (bytes overflow)"},
      {OP_FWD, T_Q, W_STRIDE, 0, INT64_C(1) << 62, -1, "q", "q stride[0] 2^62 (bytes overflow)"},
  };
  static const tmut bwd[] = {
      {OP_BWD, T_Q, W_NULL, 0, 0, -1, "q", "q NULL"},
      {OP_BWD, T_K, W_NULL, 0, 0, -1, "k", "k NULL"},
      {OP_BWD, T_V, W_NULL, 0, 0, -1, "v", "v NULL"},
      {OP_BWD, T_OUT, W_NULL, 0, 0, -1, "out", "out NULL"},
      {OP_BWD, T_LSE, W_NULL, 0, 0, -1, "lse", "lse NULL"},
      {OP_BWD, T_DOUT, W_NULL, 0, 0, -1, "dout", "dout NULL"},
      {OP_BWD, T_DQ, W_NULL, 0, 0, -1, "dq", "dq NULL"},
      {OP_BWD, T_DK, W_NULL, 0, 0, -1, "dk", "dk NULL"},
      {OP_BWD, T_DV, W_NULL, 0, 0, -1, "dv", "dv NULL"},
      {OP_BWD, T_K, W_SHAPE, 3, D + 1, T_DK, "k.shape[3]|q.shape[3]", "k head_dim != q head_dim"},
      {OP_BWD, T_DQ, W_SHAPE, 3, D + 1, -1, "dq", "dq head_dim != q's"},
      {OP_BWD, T_DQ, W_SHAPE, 1, SQ + 1, -1, "dq", "dq seqlen != q's"},
      {OP_BWD, T_DK, W_SHAPE, 1, SK - 1, -1, "dk", "dk seqlen != k's"},
      {OP_BWD, T_DK, W_SHAPE, 2, HQ, -1, "dk", "dk heads != k's"},
      {OP_BWD, T_DV, W_SHAPE, 3, DV + 1, -1, "dv", "dv head_dim != v's"},
      {OP_BWD, T_DOUT, W_SHAPE, 2, HKV, -1, "dout", "dout heads wrong"},
      {OP_BWD, T_DOUT, W_SHAPE, 3, DV + 1, -1, "dout", "dout head_dim wrong"},
      {OP_BWD, T_OUT, W_SHAPE, 1, SQ + 1, -1, "out", "out seqlen wrong"},
      {OP_BWD, T_LSE, W_SHAPE, 2, SQ - 1, -1, "lse", "lse seqlen wrong"},
      {OP_BWD, T_LSE, W_NDIM, 0, 4, -1, "lse", "lse.ndim 4"},
      {OP_BWD, T_LSE, W_DTYPE, 0, FA_F16, -1, "lse", "lse dtype f16"},
      {OP_BWD, T_DQ, W_DTYPE, 0, FA_F16, -1, "dq", "dq f16 with q f32"},
      {OP_BWD, T_DOUT, W_DTYPE, 0, FA_BF16, -1, "dout", "dout bf16 with q f32"},
      {OP_BWD, T_DK, W_DEVICE, 0, FA_DEVICE_CUDA, -1, "dk", "dk on a CUDA device"},
      {OP_BWD, T_DOUT, W_NEGSTRIDE, 1, 0, -1, "dout", "dout negative stride[1]"},
      {OP_BWD, T_DV, W_SHAPE, 0, -2, -1, "dv", "dv negative shape[0]"},
      {OP_BWD, T_DQ, W_DATA_NULL, 0, 0, -1, "dq", "dq data NULL"},
      {OP_BWD, T_LSE, W_DATA_NULL, 0, 0, -1, "lse", "lse data NULL"},
      {OP_BWD, T_DV, W_STRIDE, 3, 0, -1, "dv", "dv stride[3] 0 (aliasing)"},
      {OP_BWD, T_DK, W_STRIDE, 1, 0, -1, "dk", "dk stride[1] 0 (aliasing)"},
  };

  run_params(&f, OP_FWD);
  run_table(&f, fwd, sizeof fwd / sizeof fwd[0]);
  run_params(&f, OP_BWD);
  run_table(&f, bwd, sizeof bwd / sizeof bwd[0]);

  fixture_free(&f);
  fa_release();
  if (g_fail)
    printf("replay with FA_TEST_SEED=%llu (the inputs only; the checks do not depend on them)\n",
           (unsigned long long)seed);
  printf("test_errors: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
