/*
 * test_errors.c: every argument of fa_forward / fa_backward made invalid in turn.
 *
 * Each case starts from one valid call (small shapes, f32, CPU) and breaks one thing. It expects
 * the documented status, a message from fa_last_error() that names the argument, every output
 * buffer bitwise untouched (the failure must be found before anything is written) and every input
 * unchanged. fa_plan_* and fa_*_workspace_size get the same arguments and must fail the same way
 * ("fails exactly when fa_forward would fail before computing, with the same message").
 * The same holds for fa_forward_kvcache (the caches untouched too), packed (varlen) and paged
 * calls, ALiBi slopes and seqused_k.
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
  int64_t big[FA_MAX_DIMS] = {0};
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

/* ----------------------------------------------------------------------------------------------
 * fa_forward_kvcache, variable length, paged KV, ALiBi and seqused_k: each base call is valid
 * (a backend may still refuse it as unsupported), each case breaks one thing and expects
 * FA_ERR_INVALID_ARGUMENT naming the argument, every output and the caches bitwise untouched, and
 * the plan twin failing the same way.
 * -------------------------------------------------------------------------------------------- */

enum {
  X_Q,
  X_K,
  X_V,
  X_OUT,
  X_LSE, /* dense, as the fixture above */
  X_KC,
  X_VC,
  X_KN,
  X_VN,
  X_COS,
  X_SIN,
  X_CS, /* kvcache: caches [2, 16, 3, .], 2 new tokens */
  X_QP,
  X_KP,
  X_VP,
  X_OUTP,
  X_LSE2,
  X_LSE3,
  X_CUQ,
  X_CUK, /* packed: q 12 tokens, k 14 */
  X_KG,
  X_VG,
  X_TABLE, /* pages [5, 4, 3, .], table [2, 2] */
  X_ALIBI,
  X_USED,
  X_COUNT_
};
enum { XCAP = 16, XNEW = 2, XROT = 4, XPOS = 20, XTQ = 12, XTK = 14, XPAGE = 4, XBLK = 5 };

typedef struct xfix {
  tu_tensor t[X_COUNT_];
} xfix;

typedef enum xbase { XB_KVCACHE, XB_VARLEN, XB_PAGED, XB_DENSE } xbase;

typedef struct xcall {
  xbase base;
  fa_params params;
  fa_kvcache_args kv;
  const fa_kvcache_args *pkv;
  fa_tensor v[X_COUNT_];
  fa_tensor *lse;
} xcall;

static int xfix_init(xfix *x) {
  memset(x, 0, sizeof *x);
  const int64_t s[X_COUNT_][4] = {[X_Q] = {B, SQ, HQ, D},
                                  [X_K] = {B, SK, HKV, D},
                                  [X_V] = {B, SK, HKV, DV},
                                  [X_OUT] = {B, SQ, HQ, DV},
                                  [X_LSE] = {B, HQ, SQ},
                                  [X_KC] = {B, XCAP, HKV, D},
                                  [X_VC] = {B, XCAP, HKV, DV},
                                  [X_KN] = {B, XNEW, HKV, D},
                                  [X_VN] = {B, XNEW, HKV, DV},
                                  [X_COS] = {XPOS, XROT / 2},
                                  [X_SIN] = {XPOS, XROT / 2},
                                  [X_CS] = {B},
                                  [X_QP] = {XTQ, HQ, D},
                                  [X_KP] = {XTK, HKV, D},
                                  [X_VP] = {XTK, HKV, DV},
                                  [X_OUTP] = {XTQ, HQ, DV},
                                  [X_LSE2] = {HQ, XTQ},
                                  [X_LSE3] = {B, HQ, 7},
                                  [X_CUQ] = {B + 1},
                                  [X_CUK] = {B + 1},
                                  [X_KG] = {XBLK, XPAGE, HKV, D},
                                  [X_VG] = {XBLK, XPAGE, HKV, DV},
                                  [X_TABLE] = {B, 2},
                                  [X_ALIBI] = {HQ},
                                  [X_USED] = {B}};
  static const int nd[X_COUNT_] = {4, 4, 4, 4, 3, 4, 4, 4, 4, 2, 2, 1, 3,
                                   3, 3, 3, 2, 3, 1, 1, 4, 4, 2, 1, 1};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), "test_errors.features"));
  for (int i = 0; i < X_COUNT_; ++i) {
    fa_dtype dt = FA_F32;
    if (i == X_CS || i == X_CUQ || i == X_CUK || i == X_TABLE || i == X_USED) dt = FA_I32;
    if (alloc_view(&x->t[i], dt, nd[i], s[i])) return -1;
    if (dt == FA_F32) tu_fill_random(&x->t[i], &rng);
  }
  return 0;
}

static void xfix_free(xfix *x) {
  for (int i = 0; i < X_COUNT_; ++i) tu_free(&x->t[i]);
}

static int xis_output(int i) {
  return i == X_OUT || i == X_LSE || i == X_OUTP || i == X_LSE2 || i == X_LSE3;
}

static void set_i32(tu_tensor *t, const int64_t *vals) {
  for (int64_t f = 0; f < tu_numel(t); ++f) tu_set_flat(t, f, (double)vals[f]);
}

/* Index values of the valid calls; outputs poisoned; everything snapshotted. */
static void xfix_arm(xfix *x) {
  const int64_t cs[B] = {3, 9}, cuq[B + 1] = {0, 5, 12}, cuk[B + 1] = {0, 7, 14},
                table[4] = {3, 1, 0, 4}, used[B] = {6, 2};
  set_i32(&x->t[X_CS], cs);
  set_i32(&x->t[X_CUQ], cuq);
  set_i32(&x->t[X_CUK], cuk);
  set_i32(&x->t[X_TABLE], table);
  set_i32(&x->t[X_USED], used);
  for (int i = 0; i < X_COUNT_; ++i) {
    if (xis_output(i))
      tu_poison(&x->t[i]);
    else
      (void)tu_snapshot(&x->t[i]);
  }
}

static void xcall_init(xcall *c, xfix *x, xbase base) {
  memset(c, 0, sizeof *c);
  c->base = base;
  fa_params_init(&c->params);
  for (int i = 0; i < X_COUNT_; ++i) c->v[i] = x->t[i].t;
  fa_kvcache_args_init(&c->kv);
  c->pkv = &c->kv;
  switch (base) {
    case XB_KVCACHE:
      c->kv.cache_seqlens = &c->v[X_CS];
      c->kv.k_new = &c->v[X_KN];
      c->kv.v_new = &c->v[X_VN];
      c->kv.rotary_cos = &c->v[X_COS];
      c->kv.rotary_sin = &c->v[X_SIN];
      c->params.causal = 1;
      c->lse = &c->v[X_LSE];
      break;
    case XB_VARLEN:
      c->params.cu_seqlens_q = &c->v[X_CUQ];
      c->params.cu_seqlens_k = &c->v[X_CUK];
      c->params.max_seqlen_q = 7;
      c->params.max_seqlen_k = 7;
      c->lse = &c->v[X_LSE2];
      break;
    case XB_PAGED:
      c->params.block_table = &c->v[X_TABLE];
      c->params.seqused_k = &c->v[X_USED];
      c->lse = &c->v[X_LSE];
      break;
    case XB_DENSE:
      c->lse = &c->v[X_LSE];
      break;
  }
}

static fa_status xdo(xcall *c, int plan) {
  fa_tensor *v = c->v;
  fa_run_info info;
  fa_run_info_init(&info);
  switch (c->base) {
    case XB_KVCACHE:
      return plan ? fa_plan_forward_kvcache(&c->params, &v[X_Q], &v[X_KC], &v[X_VC], c->pkv,
                                            &v[X_OUT], c->lse, &info)
                  : fa_forward_kvcache(&c->params, &v[X_Q], &v[X_KC], &v[X_VC], c->pkv, &v[X_OUT],
                                       c->lse, &info);
    case XB_VARLEN:
      return plan ? fa_plan_forward(&c->params, &v[X_QP], &v[X_KP], &v[X_VP], &v[X_OUTP], c->lse,
                                    &info)
                  : fa_forward(&c->params, &v[X_QP], &v[X_KP], &v[X_VP], &v[X_OUTP], c->lse, &info);
    case XB_PAGED:
      return plan ? fa_plan_forward(&c->params, &v[X_Q], &v[X_KG], &v[X_VG], &v[X_OUT], c->lse,
                                    &info)
                  : fa_forward(&c->params, &v[X_Q], &v[X_KG], &v[X_VG], &v[X_OUT], c->lse, &info);
    default:
      return plan ? fa_plan_forward(&c->params, &v[X_Q], &v[X_K], &v[X_V], &v[X_OUT], c->lse, &info)
                  : fa_forward(&c->params, &v[X_Q], &v[X_K], &v[X_V], &v[X_OUT], c->lse, &info);
  }
}

typedef void (*xmutator)(xcall *c, xfix *x);

typedef struct xspec {
  xbase base;
  const char *name;
  xmutator mut; /* NULL: the valid base call (OK, or UNSUPPORTED where a backend lacks it) */
  const char *names;
} xspec;

static const char *const xbase_names[4] = {"kvcache", "varlen", "paged", "dense"};

static void xrun(xfix *x, const xspec *sp) {
  char why[768] = "", msg[2][512];
  size_t used = 0;
  fa_status st[2];
  for (int plan = 0; plan < 2; ++plan) {
    xcall c;
    xfix_arm(x);
    xcall_init(&c, x, sp->base);
    if (sp->mut) sp->mut(&c, x);
    st[plan] = xdo(&c, plan);
    snprintf(msg[plan], sizeof msg[plan], "%s", fa_last_error());
    if (!sp->mut) {
      if (st[plan] != FA_OK && st[plan] != FA_ERR_UNSUPPORTED && used < sizeof why)
        used += (size_t)snprintf(why + used, sizeof why - used, " valid call gave %s \"%s\";",
                                 fa_status_string(st[plan]), msg[plan]);
      continue;
    }
    if (st[plan] != FA_ERR_INVALID_ARGUMENT && used < sizeof why)
      used += (size_t)snprintf(why + used, sizeof why - used,
                               " %s: status %s, expected FA_ERR_INVALID_ARGUMENT;",
                               plan ? "plan" : "call", fa_status_string(st[plan]));
    if (st[plan] != FA_OK && !names_any(msg[plan], sp->names) && used < sizeof why)
      used += (size_t)snprintf(why + used, sizeof why - used, " the message does not name '%s';",
                               sp->names);
    if (plan && (st[1] != st[0] || strcmp(msg[0], msg[1]) != 0) && used < sizeof why)
      used += (size_t)snprintf(why + used, sizeof why - used, " plan gave %s \"%s\";",
                               fa_status_string(st[1]), msg[1]);
    for (int i = 0; i < X_COUNT_; ++i) {
      char where[160];
      if (tu_unchanged(&x->t[i], where, sizeof where) != 1 && used < sizeof why)
        used +=
            (size_t)snprintf(why + used, sizeof why - used, " tensor %d modified (%s);", i, where);
    }
  }
  int ok = used == 0;
  if (ok)
    ++g_pass;
  else
    ++g_fail;
  printf("%s %s %s: %s", ok ? "PASS" : "FAIL", xbase_names[sp->base], sp->name,
         fa_status_string(st[0]));
  if (st[0] != FA_OK) printf(" \"%s\"", msg[0]);
  printf("\n");
  if (!ok) printf("  ->%s\n", why);
}

static void i32_at(xfix *x, int t, int64_t flat, int32_t value) {
  tu_set_flat(&x->t[t], flat, (double)value);
  (void)tu_snapshot(&x->t[t]);
}

static void xm_kv_null(xcall *c, xfix *x) { (void)x, c->pkv = NULL; }
static void xm_kv_size0(xcall *c, xfix *x) { (void)x, c->kv.struct_size = 0; }
static void xm_cs_null(xcall *c, xfix *x) { (void)x, c->kv.cache_seqlens = NULL; }
static void xm_cs_f32(xcall *c, xfix *x) { (void)x, c->v[X_CS].dtype = FA_F32; }
static void xm_cs_len(xcall *c, xfix *x) { (void)x, c->v[X_CS].shape[0] = B + 1; }
static void xm_knew_only(xcall *c, xfix *x) { (void)x, c->kv.v_new = NULL; }
static void xm_knew_dim(xcall *c, xfix *x) { (void)x, c->v[X_KN].shape[3] = D + 1; }
static void xm_cos_only(xcall *c, xfix *x) { (void)x, c->kv.rotary_sin = NULL; }
static void xm_rot_big(xcall *c, xfix *x) {
  (void)x;
  c->v[X_COS].shape[1] = c->v[X_SIN].shape[1] = D / 2 + 1; /* rotary dim D + 2 > head_dim */
}
static void xm_cs_beyond(xcall *c, xfix *x) { (void)c, i32_at(x, X_CS, 1, XCAP - XNEW + 1); }
static void xm_rot_short(xcall *c, xfix *x) {
  (void)x; /* sequence 1 needs positions up to 9 + max(2 new, 5 rows) - 1 = 13 */
  c->v[X_COS].shape[0] = c->v[X_SIN].shape[0] = 13;
}
static void xm_cuq_start(xcall *c, xfix *x) { (void)c, i32_at(x, X_CUQ, 0, 1); }
static void xm_cuk_decr(xcall *c, xfix *x) {
  (void)c;
  i32_at(x, X_CUK, 1, 7);
  i32_at(x, X_CUK, 2, 6);
}
static void xm_max_q(xcall *c, xfix *x) { (void)x, c->params.max_seqlen_q = 6; }
static void xm_cuk_only(xcall *c, xfix *x) {
  (void)x; /* dense q and k, only cu_seqlens_k */
  c->base = XB_DENSE;
  c->params.cu_seqlens_q = NULL;
  c->params.max_seqlen_q = 0;
  c->lse = &c->v[X_LSE];
  c->params.cu_seqlens_k = &c->v[X_CUK];
  c->params.max_seqlen_k = 7;
}
static void xm_lse_packed(xcall *c, xfix *x) { (void)x, c->v[X_LSE2].shape[1] = XTQ - 1; }
static void xm_lse_padded(xcall *c, xfix *x) {
  (void)x;
  c->lse = &c->v[X_LSE3];
  c->v[X_LSE3].shape[2] = 6; /* max_seqlen_q is 7 */
}
static void xm_page3(xcall *c, xfix *x) {
  (void)x;
  c->v[X_KG].shape[1] = c->v[X_VG].shape[1] = 3;
}
static void xm_table_range(xcall *c, xfix *x) { (void)c, i32_at(x, X_TABLE, 2, XBLK); }
static void xm_table_cuk(xcall *c, xfix *x) {
  (void)x;
  c->params.cu_seqlens_k = &c->v[X_CUK];
  c->params.cu_seqlens_q = &c->v[X_CUQ];
  c->params.max_seqlen_q = 7;
}
static void xm_alibi_len(xcall *c, xfix *x) {
  (void)x;
  c->v[X_ALIBI].shape[0] = HQ - 1;
  c->params.alibi_slopes = &c->v[X_ALIBI];
}
static void xm_alibi_f16(xcall *c, xfix *x) {
  (void)x;
  c->v[X_ALIBI].dtype = FA_F16;
  c->params.alibi_slopes = &c->v[X_ALIBI];
}
static void xm_alibi_batch(xcall *c, xfix *x) {
  (void)x; /* [batch + 1, heads_q] */
  c->v[X_ALIBI].ndim = 2;
  c->v[X_ALIBI].shape[0] = B + 1;
  c->v[X_ALIBI].shape[1] = HQ;
  c->v[X_ALIBI].strides[0] = 0;
  c->v[X_ALIBI].strides[1] = 1;
  c->params.alibi_slopes = &c->v[X_ALIBI];
}
static void xm_used_big(xcall *c, xfix *x) {
  c->params.seqused_k = &c->v[X_USED];
  i32_at(x, X_USED, 0, SK + 1);
}
static void xm_used_neg(xcall *c, xfix *x) {
  c->params.seqused_k = &c->v[X_USED];
  i32_at(x, X_USED, 1, -1);
}
static void xm_used_len(xcall *c, xfix *x) {
  (void)x;
  c->params.seqused_k = &c->v[X_USED];
  c->v[X_USED].shape[0] = B + 1;
}
static void xm_used_varlen(xcall *c, xfix *x) {
  c->params.seqused_k = &c->v[X_USED];
  i32_at(x, X_USED, 1, 8); /* sequence 1 has 7 keys */
}
static void xm_used_paged(xcall *c, xfix *x) { (void)c, i32_at(x, X_USED, 0, 2 * XPAGE + 1); }

static void run_features(void) {
  xfix x;
  if (xfix_init(&x)) {
    printf("FAIL test_errors: out of memory (feature fixture)\n");
    ++g_fail;
    return;
  }
  static const xspec specs[] = {
      {XB_KVCACHE, "valid call", NULL, ""},
      {XB_KVCACHE, "kv NULL", xm_kv_null, "kv"},
      {XB_KVCACHE, "kv.struct_size 0", xm_kv_size0, "~struct_size"},
      {XB_KVCACHE, "cache_seqlens NULL", xm_cs_null, "~cache_seqlens"},
      {XB_KVCACHE, "cache_seqlens f32", xm_cs_f32, "~cache_seqlens"},
      {XB_KVCACHE, "cache_seqlens length batch+1", xm_cs_len, "~cache_seqlens"},
      {XB_KVCACHE, "k_new without v_new", xm_knew_only, "~k_new|~v_new"},
      {XB_KVCACHE, "k_new head dim wrong", xm_knew_dim, "~k_new"},
      {XB_KVCACHE, "rotary_cos without rotary_sin", xm_cos_only, "~rotary_cos|~rotary_sin"},
      {XB_KVCACHE, "rotary dim > head_dim", xm_rot_big, "~rotary"},
      {XB_KVCACHE, "cache_seqlens + seqlen_new beyond the cache", xm_cs_beyond, "~cache_seqlens"},
      {XB_KVCACHE, "rotary table too short", xm_rot_short, "~rotary_cos"},
      {XB_VARLEN, "valid call", NULL, ""},
      {XB_VARLEN, "cu_seqlens_q[0] = 1", xm_cuq_start, "~cu_seqlens_q"},
      {XB_VARLEN, "cu_seqlens_k decreasing", xm_cuk_decr, "~cu_seqlens_k"},
      {XB_VARLEN, "sequence longer than max_seqlen_q", xm_max_q, "~max_seqlen_q|~cu_seqlens_q"},
      {XB_VARLEN, "cu_seqlens_k without cu_seqlens_q", xm_cuk_only, "~cu_seqlens_q"},
      {XB_VARLEN, "packed lse [heads, total - 1]", xm_lse_packed, "lse"},
      {XB_VARLEN, "padded lse [batch, heads, max_seqlen_q - 1]", xm_lse_padded, "lse"},
      {XB_VARLEN, "seqused_k beyond a sequence's keys", xm_used_varlen, "~seqused_k"},
      {XB_PAGED, "valid call", NULL, ""},
      {XB_PAGED, "page size 3", xm_page3, "k.shape[1]|~page"},
      {XB_PAGED, "block_table entry out of range", xm_table_range, "~block_table"},
      {XB_PAGED, "cu_seqlens_k with block_table", xm_table_cuk, "~cu_seqlens_k"},
      {XB_PAGED, "seqused_k beyond the table's keys", xm_used_paged, "~seqused_k"},
      {XB_DENSE, "alibi_slopes [heads_q - 1]", xm_alibi_len, "~alibi_slopes"},
      {XB_DENSE, "alibi_slopes f16", xm_alibi_f16, "~alibi_slopes"},
      {XB_DENSE, "alibi_slopes [batch + 1, heads_q]", xm_alibi_batch, "~alibi_slopes"},
      {XB_DENSE, "seqused_k > seqlen_k", xm_used_big, "~seqused_k"},
      {XB_DENSE, "seqused_k negative", xm_used_neg, "~seqused_k"},
      {XB_DENSE, "seqused_k length batch+1", xm_used_len, "~seqused_k"},
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; ++i) xrun(&x, &specs[i]);
  xfix_free(&x);
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
  run_features();

  fixture_free(&f);
  fa_release();
  if (g_fail)
    printf("replay with FA_TEST_SEED=%llu (the inputs only; the checks do not depend on them)\n",
           (unsigned long long)seed);
  printf("test_errors: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
