/*
 * cases.c: the plain cases (dtype, shape, mask and layout over every backend's main kernels) and
 * the --quick subset, the cheapest cases that together still cover every feature value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

const char *const cm_names[3] = {"nc", "br", "tl"};

tu_layout_kind tensor_layout(int layout, int t) {
  if (layout != L_MIXED) return (tu_layout_kind)layout;
  /* Neighbouring tensors differ, so a backend that assumes q's strides for k (or out's for dq)
     reads the wrong elements. */
  static const tu_layout_kind mixed[T_COUNT] = {TU_PERMUTED, TU_PADDED,     TU_STRIDED, TU_PERMUTED,
                                                TU_STRIDED,  TU_CONTIGUOUS, TU_PADDED,  TU_STRIDED,
                                                TU_PERMUTED, TU_PADDED};
  return mixed[t];
}

const char *layout_name(int layout) {
  return layout == L_MIXED ? "mixed" : tu_layout_name((tu_layout_kind)layout);
}

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

const fa_dtype k_dtypes[3] = {FA_F32, FA_F16, FA_BF16};

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

void build_cases(case_list *L) {
  /* Sequence lengths equal and unequal both ways (1 vs 1000 too). */
  static const int64_t seqs[][2] = {{1, 1},     {17, 17},   {113, 113}, {257, 257}, {1000, 1000},
                                    {113, 257}, {257, 113}, {1, 1000},  {1000, 1},  {257, 1000}};
  /* Head dims 8..256, and head_dim_v != head_dim both ways (64/32, 192/128 as multi-head latent
     attention, 32/64 the other way round). */
  static const int64_t hds[][2] = {{8, 8},   {16, 16},   {32, 32},   {64, 64},   {72, 72},
                                   {96, 96}, {128, 128}, {200, 200}, {256, 256}, {192, 192},
                                   {64, 32}, {192, 128}, {32, 64}};
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

  /* Block D, GPU tile edges: f16/bf16 in the layouts tensor-core kernels read (contiguous,
     permuted), head dims that are odd multiples of 8 next to the usual ones, sequences that are
     no multiple of 64 or 128 (and one past 128), both directions of sq != sk, each causal mode,
     MHA/GQA/MQA. 184 pads to 192, which no other case's head dim does. */
  static const int64_t hds_d[7] = {40, 64, 72, 128, 136, 184, 256};
  static const int64_t seqs_d[3][2] = {{129, 129}, {77, 200}, {200, 77}};
  static const int64_t heads_d[4][3] = {{2, 8, 2}, {1, 6, 1}, {2, 4, 4}, {1, 6, 2}};
  for (int ih = 0; ih < (int)(sizeof hds_d / sizeof hds_d[0]); ++ih)
    for (int v = 0; v < 3; ++v) {
      conf_case c;
      memset(&c, 0, sizeof c);
      c.dtype = (ih + v) % 2 ? FA_F16 : FA_BF16;
      c.cm = (ih + v) % 3;
      c.layout = (ih + 2 * v) % 3 == 2 ? TU_PERMUTED : TU_CONTIGUOUS;
      const int64_t *hc = heads_d[(ih + 3 * v) % 4];
      c.b = hc[0], c.hq = hc[1], c.hkv = hc[2];
      c.sq = seqs_d[v][0], c.sk = seqs_d[v][1];
      c.d = c.dv = hds_d[ih];
      fit_heads(&c, 1e8);
      add_case(L, c);
    }

  /* Block E, a persistent grid's last round: no mask, several key tiles, and a number of query
     tiles (3 x ceil(300 / rows)) that leaves a remainder on small grids (2, 4 or 5 blocks), so
     that a kernel which cuts the last round's tiles by keys and merges the pieces has tiles to
     cut. */
  static const int64_t tails_e[2][5] = {{FA_BF16, 64, 3, 3, 700}, {FA_F16, 128, 3, 1, 1000}};
  for (int i = 0; i < 2; ++i) {
    conf_case c;
    memset(&c, 0, sizeof c);
    c.dtype = (fa_dtype)tails_e[i][0];
    c.d = c.dv = tails_e[i][1];
    c.b = 1, c.hq = tails_e[i][2], c.hkv = tails_e[i][3];
    c.sq = 300, c.sk = tails_e[i][4];
    c.cm = CM_NONE;
    c.layout = TU_CONTIGUOUS;
    add_case(L, c);
  }
}

/* --quick: the cheapest cases that together still cover every feature value (dtype, causal mode
   and their pairs, layout and its pair with dtype, each sequence length and pair, head dim, dv,
   GQA ratio, batch, heads_q, explicit scale, rows without keys, unseen keys), chosen greedily from
   the cheapest up. Derived from the list, so it follows when the list changes. */
int tag_has(const tag_set *s, const char *t) {
  for (int i = 0; i < s->n; ++i)
    if (!strcmp(s->v[i], t)) return 1;
  return 0;
}

void tag_add(tag_set *s, const char *t) {
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

void mark_quick(case_list *L) {
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
