/*
 * features.c: test_errors' cases of fa_forward_kvcache, variable length, paged KV, ALiBi and
 * seqused_k: each base call is valid (a backend may still refuse it as unsupported), each case
 * breaks one thing and expects FA_ERR_INVALID_ARGUMENT naming the argument, every output and the
 * caches bitwise untouched, and the plan twin failing the same way.
 */
#include <stdio.h>
#include <string.h>

#include "test_errors.h"

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
      if (st[plan] != FA_OK && st[plan] != FA_ERR_UNSUPPORTED)
        why_add(why, sizeof why, &used, " valid call gave %s \"%s\";", fa_status_string(st[plan]),
                msg[plan]);
      continue;
    }
    if (st[plan] != FA_ERR_INVALID_ARGUMENT)
      why_add(why, sizeof why, &used, " %s: status %s, expected FA_ERR_INVALID_ARGUMENT;",
              plan ? "plan" : "call", fa_status_string(st[plan]));
    if (st[plan] != FA_OK && !names_any(msg[plan], sp->names))
      why_add(why, sizeof why, &used, " the message does not name '%s';", sp->names);
    if (plan && (st[1] != st[0] || strcmp(msg[0], msg[1]) != 0))
      why_add(why, sizeof why, &used, " plan gave %s \"%s\";", fa_status_string(st[1]), msg[1]);
    for (int i = 0; i < X_COUNT_; ++i) {
      char where[160];
      if (tu_unchanged(&x->t[i], where, sizeof where) != 1)
        why_add(why, sizeof why, &used, " tensor %d modified (%s);", i, where);
    }
  }
  report_case(why, xbase_names[sp->base], sp->name, st[0], msg[0]);
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
/* The caches are written in place: a zero stride there, or a cache sharing memory with another
   tensor of the call, is refused. */
static void xm_cache_stride0(xcall *c, xfix *x) { (void)x, c->v[X_KC].strides[1] = 0; }
static void xm_cache_is_out(xcall *c, xfix *x) {
  (void)x;
  c->v[X_OUT].data = c->v[X_KC].data;
  c->v[X_OUT].byte_offset = c->v[X_KC].byte_offset;
}
static void xm_caches_alias(xcall *c, xfix *x) {
  (void)x;
  c->v[X_VC].data = c->v[X_KC].data;
  c->v[X_VC].byte_offset = c->v[X_KC].byte_offset;
}
static void xm_cache_is_knew(xcall *c, xfix *x) {
  (void)x;
  c->v[X_KN].data = c->v[X_KC].data;
  c->v[X_KN].byte_offset = c->v[X_KC].byte_offset;
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

void run_features(void) {
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
      {XB_KVCACHE, "k_cache seqlen stride 0", xm_cache_stride0, "k_cache"},
      {XB_KVCACHE, "out in k_cache's memory", xm_cache_is_out, "k_cache|out"},
      {XB_KVCACHE, "v_cache in k_cache's memory", xm_caches_alias, "k_cache|v_cache"},
      {XB_KVCACHE, "k_new in k_cache's memory", xm_cache_is_knew, "k_cache|~k_new"},
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
