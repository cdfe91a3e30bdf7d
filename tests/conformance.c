/*
 * conformance.c: the one suite every backend runs.
 *
 *   conformance --backend <cpu|cuda|hip|opencl> [--quick|--full] [--filter substr] [--list]
 *
 * --quick (or FA_CONFORMANCE_QUICK=1) runs the cheapest cases that still cover every feature value;
 * the full list takes about a minute of CPU time in a Release build and about eight under
 * ASan+UBSan.
 *
 * Each case draws fresh random inputs, poisons every output (gaps included), runs the forward
 * without and with lse, then the backward on the library's own out and lse, all with
 * params.backend = the backend and strict = 1, and checks:
 *   - every element of out, lse, dq, dk, dv by the pass rule of reference.h (at most twice the
 *     error of a naive computation in the storage dtype, plus a small floor, against float64);
 *     elements the mask alone decides must be exact (0, lse -inf);
 *   - nothing outside the logical elements written, inputs unchanged;
 *   - fa_run_info names this backend and the kernel that was meant to run, and fa_plan_* reports
 *     the same kernel as the call.
 * A backend that is not available here prints "SKIP: <name>: <reason>" and exits 77.
 *
 * Inputs are seeded per run (printed; FA_TEST_SEED replays) and per case name, so
 * "FA_TEST_SEED=<seed> conformance --backend cpu --filter <case>" reproduces one case exactly.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flash_attn.h"
#include "reference.h"
#include "tensor_util.h"

/* ==============================================================================================
 * DEVICE HOOK: how the suite puts tensors where a backend can read them.
 *
 * One entry per device kind. The whole host buffer (gaps included) goes to the device and comes
 * back whole, with the same strides and byte_offset, so the host-side checks (gaps untouched,
 * inputs unchanged) hold for device memory too. Only the CPU is implemented; a GPU backend's
 * issue adds its entry here (cudaMalloc/cudaMemcpy, hipMalloc/..., clCreateBuffer/...). Until then
 * its cases fail with "not implemented in the suite yet", they are never counted as passed.
 * ============================================================================================ */

typedef struct dev_tensor {
  fa_tensor view; /* what the library gets: device pointer (or cl_mem), host strides */
  void *mem;      /* the device allocation (NULL for the CPU, which uses the host buffer) */
  size_t bytes;
} dev_tensor;

typedef struct dev_ops {
  fa_device_kind kind;
  const char *label;
  /* Allocates device memory the size of host's whole buffer; view mirrors host's view. */
  int (*alloc)(dev_tensor *d, const tu_tensor *host, char *err, size_t n);
  /* Copies host's whole buffer to the device. */
  int (*copy_in)(dev_tensor *d, const tu_tensor *host, char *err, size_t n);
  /* Copies the device buffer back over host's whole buffer. */
  int (*copy_out)(tu_tensor *host, const dev_tensor *d, char *err, size_t n);
  void (*release)(dev_tensor *d);
} dev_ops;

/* CPU: the library reads the host buffer directly, so copies are nothing. */
static int cpu_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)err, (void)n;
  d->view = host->t;
  d->mem = NULL;
  d->bytes = host->buf_elems * host->elem_bytes;
  return 0;
}
static int cpu_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)d, (void)host, (void)err, (void)n;
  return 0;
}
static int cpu_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  (void)d, (void)host, (void)err, (void)n;
  return 0;
}
static void cpu_release(dev_tensor *d) { memset(d, 0, sizeof *d); }

/* Every device kind the suite has no copy routines for yet. */
static int todo(char *err, size_t n) {
  snprintf(err, n,
           "device memory for this backend is not implemented in the suite yet (see the "
           "DEVICE HOOK in tests/conformance.c)");
  return -1;
}
static int todo_alloc(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)host;
  memset(d, 0, sizeof *d);
  return todo(err, n);
}
static int todo_copy_in(dev_tensor *d, const tu_tensor *host, char *err, size_t n) {
  (void)d, (void)host;
  return todo(err, n);
}
static int todo_copy_out(tu_tensor *host, const dev_tensor *d, char *err, size_t n) {
  (void)d, (void)host;
  return todo(err, n);
}
static void todo_release(dev_tensor *d) { memset(d, 0, sizeof *d); }

static const dev_ops g_dev_ops[] = {
    {FA_DEVICE_CPU, "cpu", cpu_alloc, cpu_copy_in, cpu_copy_out, cpu_release},
    {FA_DEVICE_CUDA, "cuda", todo_alloc, todo_copy_in, todo_copy_out, todo_release},
    {FA_DEVICE_HIP, "hip", todo_alloc, todo_copy_in, todo_copy_out, todo_release},
    {FA_DEVICE_OPENCL, "opencl", todo_alloc, todo_copy_in, todo_copy_out, todo_release},
};

/* ============================================================================================ */

typedef struct backend_ctx {
  int32_t id;
  const char *name;
  const dev_ops *ops;
} backend_ctx;

/* Expected kernel name. Returns 0 when the suite does not know the backend's naming yet; then
   only the "<backend>." prefix is checked. */
typedef struct conf_case conf_case;
static int expected_kernel(const backend_ctx *bk, const conf_case *c, int bwd, char *buf, size_t n);

/* ----------------------------------------------------------------------------------------------
 * Cases
 * -------------------------------------------------------------------------------------------- */

enum { CM_NONE = 0, CM_BR = 1, CM_TL = 2 };
static const char *const cm_names[3] = {"nc", "br", "tl"};

/* Layouts: the tu_ kinds for every tensor, or MIXED (each tensor a different one). */
#define L_MIXED TU_LAYOUT_COUNT_
#define L_COUNT (TU_LAYOUT_COUNT_ + 1)

enum { T_Q, T_K, T_V, T_DOUT, T_OUT0, T_OUT, T_LSE, T_DQ, T_DK, T_DV, T_COUNT };
static const char *const t_names[T_COUNT] = {"q",   "k",   "v",  "dout", "out(lse=NULL)",
                                             "out", "lse", "dq", "dk",   "dv"};

static tu_layout_kind tensor_layout(int layout, int t) {
  if (layout != L_MIXED) return (tu_layout_kind)layout;
  /* Neighbouring tensors differ, so a backend that assumes q's strides for k (or out's for dq)
     reads the wrong elements. */
  static const tu_layout_kind mixed[T_COUNT] = {TU_PERMUTED, TU_PADDED,     TU_STRIDED, TU_PERMUTED,
                                                TU_STRIDED,  TU_CONTIGUOUS, TU_PADDED,  TU_STRIDED,
                                                TU_PERMUTED, TU_PADDED};
  return mixed[t];
}

static const char *layout_name(int layout) {
  return layout == L_MIXED ? "mixed" : tu_layout_name((tu_layout_kind)layout);
}

struct conf_case {
  char name[128];
  fa_dtype dtype;
  int64_t b, sq, sk, hq, hkv, d, dv;
  int cm;      /* causal mode */
  int layout;  /* tu_layout_kind or L_MIXED */
  float scale; /* softmax_scale passed (0 = the default 1/sqrt(d)) */
  double cost; /* estimated work, for ordering the quick subset */
  int quick;
};

typedef struct case_list {
  conf_case *v;
  int n, cap;
} case_list;

static double case_cost(const conf_case *c) {
  /* Reference and library work both scale with the score matrix times the head dims; the second
     term is per-element work (fill, convert, check), which dominates tiny cases. */
  double rows = (double)c->b * c->hq * c->sq * c->sk * (double)(c->d + c->dv);
  double elems =
      (double)c->b * ((double)c->sq * c->hq + (double)c->sk * c->hkv) * (double)(c->d + c->dv);
  return rows + 40.0 * elems;
}

static void case_name(conf_case *c) {
  char hd[32];
  if (c->d == c->dv)
    snprintf(hd, sizeof hd, "d%lld", (long long)c->d);
  else
    snprintf(hd, sizeof hd, "d%lldx%lld", (long long)c->d, (long long)c->dv);
  snprintf(c->name, sizeof c->name, "%s.b%lld.h%lldx%lld.s%lldx%lld.%s.%s.%s%s",
           tu_dtype_name(c->dtype), (long long)c->b, (long long)c->hq, (long long)c->hkv,
           (long long)c->sq, (long long)c->sk, hd, cm_names[c->cm], layout_name(c->layout),
           c->scale != 0.0f ? ".scale" : "");
}

static void add_case(case_list *L, conf_case c) {
  case_name(&c);
  for (int i = 0; i < L->n; ++i)
    if (!strcmp(L->v[i].name, c.name)) return; /* the same configuration from two blocks */
  if (L->n == L->cap) {
    int cap = L->cap ? 2 * L->cap : 256;
    conf_case *v = (conf_case *)realloc(L->v, sizeof(conf_case) * (size_t)cap);
    if (!v) {
      fprintf(stderr, "conformance: out of memory building the case list\n");
      exit(2);
    }
    L->v = v;
    L->cap = cap;
  }
  c.cost = case_cost(&c);
  L->v[L->n++] = c;
}

static const fa_dtype k_dtypes[3] = {FA_F32, FA_F16, FA_BF16};

/* Reduces the heads of an expensive case, keeping its GQA ratio while it can, so the float64
   reference stays affordable at long sequences. */
static void fit_heads(conf_case *c, double cap) {
  if (case_cost(c) <= cap) return;
  int64_t ratio = c->hq / c->hkv;
  const int64_t tries[3][3] = {{1, ratio, 1}, {1, 2, 1}, {1, 1, 1}};
  for (int t = 0; t < 3; ++t) {
    c->b = tries[t][0];
    c->hq = tries[t][1];
    c->hkv = tries[t][2];
    if (case_cost(c) <= cap) return;
  }
}

static void build_cases(case_list *L) {
  /* Sequence lengths of the issue, equal and unequal both ways (1 vs 1000 too). */
  static const int64_t seqs[][2] = {{1, 1},     {17, 17},   {113, 113}, {257, 257}, {1000, 1000},
                                    {113, 257}, {257, 113}, {1, 1000},  {1000, 1},  {257, 1000}};
  /* Head dims 8..256, and head_dim_v != head_dim both ways (64/32 as the example,
     192/128 as multi-head latent attention, 32/64 the other way round). */
  static const int64_t hds[][2] = {{8, 8},     {16, 16}, {32, 32},   {64, 64},
                                   {72, 72},   {96, 96}, {128, 128}, {200, 200},
                                   {256, 256}, {64, 32}, {192, 128}, {32, 64}};
  /* (batch, heads_q, heads_kv): GQA ratios 1, 2, 5, 8; heads_q 1..16; batch 1..3. */
  static const int64_t heads[][3] = {{1, 1, 1},  {2, 4, 2}, {1, 5, 1}, {3, 8, 1},   {1, 16, 2},
                                     {2, 10, 2}, {1, 2, 1}, {3, 3, 3}, {1, 16, 16}, {2, 6, 3}};
  const int n_seqs = (int)(sizeof seqs / sizeof seqs[0]);
  const int n_hds = (int)(sizeof hds / sizeof hds[0]);
  const int n_heads = (int)(sizeof heads / sizeof heads[0]);

  /* Block A, shapes: every (sequence pair x head dim), twice with different dtype, mask, heads
     and layout each time. The rotations use different strides through the indices so that, over
     the block, every sequence pair and every head dim meets every dtype and every causal mode. */
  for (int is = 0; is < n_seqs; ++is) {
    for (int ih = 0; ih < n_hds; ++ih) {
      for (int var = 0; var < 2; ++var) {
        /* The longest pairs once per head dim: their float64 reference is what costs. */
        if (var == 1 && seqs[is][0] * seqs[is][1] >= 257 * 1000) continue;
        conf_case c;
        memset(&c, 0, sizeof c);
        c.dtype = k_dtypes[(is + ih + var) % 3];
        c.cm = (2 * is + ih + 2 * var) % 3;
        c.layout = (is + 2 * ih + 3 * var) % L_COUNT;
        const int64_t *hc = heads[(3 * is + ih + 5 * var) % n_heads];
        c.b = hc[0], c.hq = hc[1], c.hkv = hc[2];
        c.sq = seqs[is][0], c.sk = seqs[is][1];
        c.d = hds[ih][0], c.dv = hds[ih][1];
        c.scale = (is + ih + var) % 4 == 3 ? 0.3f : 0.0f;
        fit_heads(&c, 4e8);
        add_case(L, c);
      }
    }
  }

  /* Block B, features: dtype x causal mode x layout x GQA ratio in full, on short sequences,
     with the shape rotating through a few that stress tile edges (17, 113 are not multiples of
     any tile) and both directions of sq != sk. */
  static const int64_t gqa[][3] = {{3, 2, 2}, {2, 6, 3}, {1, 10, 2}, {2, 16, 2}};
  static const int64_t shapes_b[][4] = {{17, 113, 64, 64},  {113, 17, 16, 16},  {113, 113, 72, 72},
                                        {17, 17, 128, 128}, {113, 257, 64, 32}, {257, 113, 32, 32},
                                        {1, 257, 96, 96}};
  const int n_shapes_b = (int)(sizeof shapes_b / sizeof shapes_b[0]);
  for (int idt = 0; idt < 3; ++idt)
    for (int cm = 0; cm < 3; ++cm)
      for (int l = 0; l < L_COUNT; ++l)
        for (int g = 0; g < 4; ++g) {
          conf_case c;
          memset(&c, 0, sizeof c);
          c.dtype = k_dtypes[idt];
          c.cm = cm;
          c.layout = l;
          c.b = gqa[g][0], c.hq = gqa[g][1], c.hkv = gqa[g][2];
          const int64_t *s = shapes_b[(idt + 2 * cm + 3 * l + g) % n_shapes_b];
          c.sq = s[0], c.sk = s[1], c.d = s[2], c.dv = s[3];
          c.scale = (idt + cm + l + g) % 3 == 0 ? 0.5f : 0.0f;
          add_case(L, c);
        }

  /* Block C, masks at their edges, every dtype: bottom-right with sq > sk leaves the first
     sq - sk rows without keys (out 0, lse -inf, dq 0 exactly); top-left with sk > sq leaves the
     last keys unseen (dk, dv 0 exactly); top-left with sq > sk gives rows past sk all keys. */
  static const struct {
    int64_t sq, sk, d, dv, b, hq, hkv;
    int cm, layout;
  } edges[] = {
      {1000, 1, 64, 64, 1, 4, 2, CM_BR, TU_CONTIGUOUS},
      {257, 113, 128, 128, 2, 4, 1, CM_BR, TU_PADDED},
      {1000, 257, 64, 64, 1, 2, 1, CM_BR, TU_STRIDED},
      {113, 257, 64, 64, 1, 2, 2, CM_TL, TU_PERMUTED},
      {257, 113, 96, 96, 1, 3, 1, CM_TL, TU_STRIDED},
      {1, 1000, 256, 256, 1, 8, 1, CM_TL, L_MIXED},
      {1000, 1000, 128, 128, 1, 2, 1, CM_BR, TU_CONTIGUOUS},
      {17, 1000, 64, 32, 3, 5, 1, CM_TL, L_MIXED},
  };
  for (int idt = 0; idt < 3; ++idt)
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; ++e) {
      conf_case c;
      memset(&c, 0, sizeof c);
      c.dtype = k_dtypes[idt];
      c.sq = edges[e].sq, c.sk = edges[e].sk, c.d = edges[e].d, c.dv = edges[e].dv;
      c.b = edges[e].b, c.hq = edges[e].hq, c.hkv = edges[e].hkv;
      c.cm = edges[e].cm;
      c.layout = edges[e].layout;
      add_case(L, c);
    }
}

/* --quick: the cheapest cases that together still cover every feature value (dtype, causal mode
   and their pairs, layout and its pair with dtype, each sequence length and pair, head dim, dv,
   GQA ratio, batch, heads_q, explicit scale, rows without keys, unseen keys), chosen greedily from
   the cheapest up. Derived from the list, so it follows when the list changes. */
typedef struct tag_set {
  char (*v)[48];
  int n, cap;
} tag_set;

static int tag_has(const tag_set *s, const char *t) {
  for (int i = 0; i < s->n; ++i)
    if (!strcmp(s->v[i], t)) return 1;
  return 0;
}

static void tag_add(tag_set *s, const char *t) {
  if (tag_has(s, t)) return;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 128;
    char(*v)[48] = realloc(s->v, sizeof *v * (size_t)cap);
    if (!v) exit(2);
    s->v = v;
    s->cap = cap;
  }
  size_t len = strlen(t);
  if (len > 47) len = 47;
  memcpy(s->v[s->n], t, len);
  s->v[s->n++][len] = '\0';
}

static int case_tags(const conf_case *c, char tags[][48], int max) {
  int n = 0;
  const char *dt = tu_dtype_name(c->dtype), *cm = cm_names[c->cm], *ly = layout_name(c->layout);
#define TAG(...) \
  if (n < max) snprintf(tags[n++], 48, __VA_ARGS__)
  TAG("dt:%s", dt);
  TAG("cm:%s", cm);
  TAG("dtcm:%s.%s", dt, cm);
  TAG("ly:%s", ly);
  TAG("lydt:%s.%s", ly, dt);
  TAG("sq:%lld", (long long)c->sq);
  TAG("sk:%lld", (long long)c->sk);
  TAG("pair:%lldx%lld", (long long)c->sq, (long long)c->sk);
  TAG("d:%lld", (long long)c->d);
  TAG("dv:%lldx%lld", (long long)c->d, (long long)c->dv);
  TAG("ratio:%lld", (long long)(c->hq / c->hkv));
  TAG("b:%lld", (long long)c->b);
  TAG("hq:%lld", (long long)c->hq);
  TAG("scale:%d", c->scale != 0.0f);
  if (c->cm == CM_BR && c->sq > c->sk) TAG("empty-rows:%s", dt);
  if (c->cm == CM_TL && c->sk > c->sq) TAG("unseen-keys:%s", dt);
#undef TAG
  return n;
}

static int cmp_cost(const void *a, const void *b) {
  const conf_case *x = *(const conf_case *const *)a, *y = *(const conf_case *const *)b;
  return x->cost < y->cost ? -1 : x->cost > y->cost ? 1 : strcmp(x->name, y->name);
}

static void mark_quick(case_list *L) {
  conf_case **order = (conf_case **)malloc(sizeof(conf_case *) * (size_t)(L->n ? L->n : 1));
  if (!order) exit(2);
  for (int i = 0; i < L->n; ++i) order[i] = &L->v[i];
  qsort(order, (size_t)L->n, sizeof *order, cmp_cost);
  tag_set seen = {0};
  for (int i = 0; i < L->n; ++i) {
    char tags[24][48];
    int nt = case_tags(order[i], tags, 24), fresh = 0;
    for (int t = 0; t < nt; ++t) fresh |= !tag_has(&seen, tags[t]);
    if (!fresh) continue;
    order[i]->quick = 1;
    for (int t = 0; t < nt; ++t) tag_add(&seen, tags[t]);
  }
  free(seen.v);
  free(order);
}

/* ----------------------------------------------------------------------------------------------
 * Running one case
 * -------------------------------------------------------------------------------------------- */

/* The CPU kernel build meant to run: the widest this CPU has (asked here independently of the
   plugin, so a wrong choice in the plugin is caught), or a narrower one forced by FA_CPU_ISA. */
static const char *cpu_expected_isa(void) {
  static const char *const widest_first[] = {"avx512", "avx2", "generic"};
  int best = 2;
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma"))
    best = 0;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    best = 1;
#endif
  const char *forced = getenv("FA_CPU_ISA");
  for (int r = best; forced && *forced && r < 3; ++r)
    if (strcmp(forced, widest_first[r]) == 0) return widest_first[r];
  return widest_first[best];
}

static int expected_kernel(const backend_ctx *bk, const conf_case *c, int bwd, char *buf,
                           size_t n) {
  if (strcmp(bk->name, "cpu") != 0) return 0;
  char hd[32];
  if (c->d == c->dv)
    snprintf(hd, sizeof hd, "%lld", (long long)c->d);
  else
    snprintf(hd, sizeof hd, "%lldx%lld", (long long)c->d, (long long)c->dv);
  snprintf(buf, n, "cpu.flash.%s.%s.%s.hd%s%s", cpu_expected_isa(), bwd ? "bwd" : "fwd",
           tu_dtype_name(c->dtype), hd, c->cm != CM_NONE ? ".causal" : "");
  return 1;
}

/* Failure details of a case, printed under its line. */
typedef struct report {
  char text[4096];
  size_t used;
  int failed;
} report;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
fail(report *r, const char *fmt, ...) {
  r->failed = 1;
  if (r->used + 8 >= sizeof r->text) return;
  int w = snprintf(r->text + r->used, sizeof r->text - r->used, "      ");
  if (w > 0) r->used += (size_t)w;
  va_list ap;
  va_start(ap, fmt);
  w = vsnprintf(r->text + r->used, sizeof r->text - r->used, fmt, ap);
  va_end(ap);
  if (w > 0) r->used += (size_t)w;
  if (r->used + 1 < sizeof r->text) {
    r->text[r->used++] = '\n';
    r->text[r->used] = '\0';
  }
  if (r->used >= sizeof r->text) r->used = sizeof r->text - 1;
}

static void check_info(report *rep, const backend_ctx *bk, const conf_case *c, int bwd,
                       const char *call, const fa_run_info *info, const fa_run_info *plan) {
  char want[FA_KERNEL_LEN];
  if (info->backend != bk->id || strcmp(info->backend_name, bk->name) != 0)
    fail(rep, "%s: run info says backend %d \"%s\", expected %d \"%s\"", call, info->backend,
         info->backend_name, bk->id, bk->name);
  if (expected_kernel(bk, c, bwd, want, sizeof want)) {
    if (strcmp(info->kernel, want) != 0)
      fail(rep, "%s: kernel \"%s\", expected \"%s\"", call, info->kernel, want);
  } else {
    size_t n = strlen(bk->name);
    if (strncmp(info->kernel, bk->name, n) != 0 || info->kernel[n] != '.')
      fail(rep, "%s: kernel \"%s\" does not start with \"%s.\"", call, info->kernel, bk->name);
  }
  if (plan && (strcmp(plan->kernel, info->kernel) != 0 || plan->backend != info->backend))
    fail(rep, "%s: fa_plan reports %s \"%s\" but the call ran %s \"%s\"", call, plan->backend_name,
         plan->kernel, info->backend_name, info->kernel);
}

/* Checks one output with the pass rule; appends "name err/tol" to the summary. */
static void check_output(report *rep, char *summary, size_t sn, const char *label,
                         const tu_tensor *x, const ref_result *r64, const ref_result *rn,
                         ref_which w, const unsigned char *masked, fa_dtype dtype) {
  ref_check ck;
  ref_check_output(x, r64, rn, w, masked, dtype, &ck);
  size_t used = strlen(summary);
  snprintf(summary + used, sn - used, " %s %.1e/%.1e", label, ck.max_err, ck.tol);
  char where[64] = "-";
  if (ck.worst >= 0) tu_format_index(x, ck.worst, where, sizeof where);
  if (!ck.pass) {
    if (ck.broken)
      fail(rep, "%s: %s at %s: got %.9g, expected %.9g (%lld such elements)", label, ck.why, where,
           ck.worst_got, ck.worst_want, (long long)ck.broken);
    else
      fail(rep,
           "%s: max error %.3e > tolerance %.3e (2 x naive %s error %.3e + floor %.2e) at "
           "%s: got %.9g, expected %.9g",
           label, ck.max_err, ck.tol, tu_dtype_name(dtype), ck.naive_err, ck.floor, where,
           ck.worst_got, ck.worst_want);
  }
  char msg[160];
  if (tu_gaps_intact(x, msg, sizeof msg) != 1)
    fail(rep, "%s: wrote outside its elements: %s", label, msg);
}

static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int run_case(const conf_case *c, const backend_ctx *bk, uint64_t run_seed) {
  const double t0 = now_s();
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[256] = "";
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

  for (int i = 0; i < T_COUNT; ++i) {
    if (bk->ops->alloc(&dv[i], &t[i], err, sizeof err) ||
        bk->ops->copy_in(&dv[i], &t[i], err, sizeof err)) {
      fail(&rep, "%s: %s", t_names[i], err);
      goto done;
    }
  }

  fa_params params;
  fa_params_init(&params);
  params.backend = bk->id;
  params.strict = 1;
  params.softmax_scale = c->scale;
  params.causal = c->cm != CM_NONE;
  params.causal_align = c->cm == CM_TL ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_BOTTOM_RIGHT;
  fa_run_info info, plan;
  fa_status st;

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
    check_info(&rep, bk, c, 0, "forward(lse NULL)", &info, &plan);
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
  check_info(&rep, bk, c, 0, "forward", &info, &plan);
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
  check_info(&rep, bk, c, 1, "backward", &info, &plan);
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

done:
  for (int i = 0; i < T_COUNT; ++i) {
    if (bk->ops) bk->ops->release(&dv[i]);
    tu_free(&t[i]);
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  ref_result_free(&r64);
  ref_result_free(&rn);
  printf("%s %-50s%s  %.2fs\n", rep.failed ? "FAIL" : "PASS", c->name, summary, now_s() - t0);
  if (rep.failed) {
    fputs(rep.text, stdout);
    printf("      replay: FA_TEST_SEED=%llu conformance --backend %s --filter '%s'\n",
           (unsigned long long)run_seed, bk->name, c->name);
  }
  fflush(stdout);
  return !rep.failed;
}

/* ----------------------------------------------------------------------------------------------
 * main
 * -------------------------------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: conformance --backend <cpu|cuda|hip|opencl> [--quick|--full] [--filter substr] "
          "[--list]\n"
          "  --quick   a subset that still covers every feature (also FA_CONFORMANCE_QUICK=1)\n"
          "  --full    every case (the default)\n"
          "  FA_TEST_SEED=<n> replays a run's inputs; FA_TEST_THREADS sets reference threads\n");
}

int main(int argc, char **argv) {
  const char *backend = NULL, *filter = NULL;
  /* FA_CONFORMANCE_QUICK=1 picks the subset where a command line cannot be changed (CTest). */
  const char *env_quick = getenv("FA_CONFORMANCE_QUICK");
  int quick = env_quick && *env_quick && strcmp(env_quick, "0") != 0, list = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      backend = argv[++i];
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
      filter = argv[++i];
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--full"))
      quick = 0;
    else if (!strcmp(argv[i], "--list"))
      list = 1;
    else {
      usage();
      return 2;
    }
  }
  if (!backend) {
    usage();
    return 2;
  }
  int32_t id = 0;
  if (fa_backend_from_name(backend, &id) != FA_OK || id == FA_BACKEND_AUTO) {
    fprintf(stderr, "conformance: unknown backend '%s'\n", backend);
    return 2;
  }

  case_list L = {0};
  build_cases(&L);
  mark_quick(&L);
  if (list) {
    for (int i = 0; i < L.n; ++i)
      if ((!quick || L.v[i].quick) && (!filter || strstr(L.v[i].name, filter)))
        printf("%-56s cost %.2e%s\n", L.v[i].name, L.v[i].cost, L.v[i].quick ? "  quick" : "");
    free(L.v);
    return 0;
  }

  /* Skip (77) when the backend cannot run here, with the library's own reason. */
  fa_backend_desc descs[FA_BACKEND_COUNT_ + 4];
  int32_t count = 0;
  for (size_t i = 0; i < sizeof descs / sizeof descs[0]; ++i) fa_backend_desc_init(&descs[i]);
  fa_status st = fa_backend_info(descs, (int32_t)(sizeof descs / sizeof descs[0]), &count);
  if (st != FA_OK) {
    printf("conformance: fa_backend_info failed: %s: %s\n", fa_status_string(st), fa_last_error());
    printf("conformance: 0 passed, 1 failed\n");
    free(L.v);
    return 1;
  }
  const fa_backend_desc *desc = NULL;
  for (int32_t i = 0; i < count && i < (int32_t)(sizeof descs / sizeof descs[0]); ++i)
    if (descs[i].id == id) desc = &descs[i];
  if (!desc || !desc->available) {
    printf("SKIP: %s: %s\n", backend, desc ? desc->reason : "not known to this library");
    free(L.v);
    return 77;
  }

  backend_ctx bk;
  bk.id = id;
  bk.name = desc->name;
  bk.ops = NULL;
  fa_device_kind kind = id == FA_BACKEND_CPU    ? FA_DEVICE_CPU
                        : id == FA_BACKEND_CUDA ? FA_DEVICE_CUDA
                        : id == FA_BACKEND_HIP  ? FA_DEVICE_HIP
                                                : FA_DEVICE_OPENCL;
  for (size_t i = 0; i < sizeof g_dev_ops / sizeof g_dev_ops[0]; ++i)
    if (g_dev_ops[i].kind == kind) bk.ops = &g_dev_ops[i];

  const uint64_t seed = tu_run_seed();
  printf("conformance: backend %s (%s; %s), %s, seed %llu%s\n", bk.name, desc->devices, desc->arch,
         quick ? "quick subset" : "all cases", (unsigned long long)seed,
         tu_seed_was_fixed() ? " (FA_TEST_SEED)" : "");
  printf("case%*s  max error/tolerance per output%*s  time\n", 47, "", 20, "");
  fflush(stdout);

  const double t0 = now_s();
  int passed = 0, failed = 0;
  for (int i = 0; i < L.n; ++i) {
    const conf_case *c = &L.v[i];
    if (quick && !c->quick) continue;
    if (filter && !strstr(c->name, filter)) continue;
    if (run_case(c, &bk, seed))
      ++passed;
    else
      ++failed;
  }
  free(L.v);
  fa_release();
  printf("conformance: %.1f s, seed %llu\n", now_s() - t0, (unsigned long long)seed);
  if (passed + failed == 0) {
    /* A mistyped --filter must not look like a clean run. */
    printf("conformance: no case matches%s%s\n", filter ? " the filter " : "",
           filter ? filter : "");
    printf("conformance: 0 passed, 1 failed\n");
    return 1;
  }
  printf("conformance: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
