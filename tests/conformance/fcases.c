/*
 * fcases.c: the feature cases: sliding window, softcap, ALiBi, dropout, variable length (packed
 * q/k, both lse layouts, seqused_k), paged KV, split-KV, head dims up to 512, deterministic mode
 * fa_forward_kvcache and FP8 inputs, each dtype, alone and combined; and their --quick subset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

/* Feature names as fa_backend_info reports them, that a case needs. */
int fcase_features(const fcase *c, const char **f, int max) {
  int n = 0;
#define FEAT(x) \
  if (n < max) f[n++] = (x)
  if (c->kvc) FEAT("kvcache");
  if (c->win) FEAT("window");
  if (c->softcap > 0.0f) FEAT("softcap");
  if (c->alibi) FEAT("alibi");
  if (c->dropout > 0.0f) FEAT("dropout");
  if (c->varlen || c->seqused) FEAT("varlen");
  if (c->page > 0) FEAT("paged_kv");
  if (c->splits >= 0 && c->splits != 1) FEAT("split_kv");
  if (c->d > 256 || c->dv > 256) FEAT("hd512");
  if (c->bwd && !c->page) FEAT("bwd");
  if (c->determ) FEAT("deterministic");
  if (c->fp8) FEAT("fp8");
#undef FEAT
  return n;
}

static int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Dense extents of the reference problem. */
int64_t fc_max_q(const fcase *c) {
  if (!c->varlen) return c->sq;
  int64_t m = 1;
  for (int64_t b = 0; b < c->b; ++b) m = imax64(m, c->lq[b]);
  return m;
}
int64_t fc_max_k(const fcase *c) {
  if (c->kvc || c->page > 0) return c->page > 0 ? c->max_blocks * c->page : c->sk;
  if (!c->varlen) return c->sk;
  int64_t m = 1;
  for (int64_t b = 0; b < c->b; ++b) m = imax64(m, c->lk[b]);
  return m;
}

static double fcase_cost(const fcase *c) {
  double sq = (double)fc_max_q(c), sk = (double)fc_max_k(c);
  double rows = (double)c->b * c->hq * sq * sk * (double)(c->d + c->dv) * (c->bwd ? 2.0 : 1.0);
  double elems = (double)c->b * (sq * c->hq + sk * c->hkv) * (double)(c->d + c->dv);
  return rows + 40.0 * elems;
}

static void fcase_add(fcase_list *L, fcase c, const char *tag) {
  char hd[32];
  if (c.d == c.dv)
    snprintf(hd, sizeof hd, "d%lld", (long long)c.d);
  else
    snprintf(hd, sizeof hd, "d%lldx%lld", (long long)c.d, (long long)c.dv);
  snprintf(c.name, sizeof c.name, "%s.%s.b%lld.h%lldx%lld.s%lldx%lld.%s.%s.%s%s", tag,
           tu_dtype_name(c.dtype), (long long)c.b, (long long)c.hq, (long long)c.hkv,
           (long long)fc_max_q(&c), (long long)fc_max_k(&c), hd, cm_names[c.cm],
           layout_name(c.layout), c.bwd ? ".bwd" : "");
  for (int i = 0; i < L->n; ++i)
    if (!strcmp(L->v[i].name, c.name)) {
      /* Two feature cases must never collapse into one silently: the tag must tell them apart. */
      fprintf(stderr, "conformance: duplicate feature case name %s\n", c.name);
      exit(2);
    }
  if (L->n == L->cap) {
    int cap = L->cap ? 2 * L->cap : 128;
    fcase *v = (fcase *)realloc(L->v, sizeof(fcase) * (size_t)cap);
    if (!v) exit(2);
    L->v = v;
    L->cap = cap;
  }
  c.cost = fcase_cost(&c);
  L->v[L->n++] = c;
}

static fcase fbase(fa_dtype dt, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk,
                   int64_t d, int64_t dv, int cm) {
  fcase c;
  memset(&c, 0, sizeof c);
  c.dtype = dt;
  c.b = b, c.hq = hq, c.hkv = hkv, c.sq = sq, c.sk = sk, c.d = d, c.dv = dv, c.cm = cm;
  c.layout = TU_CONTIGUOUS;
  c.splits = -1;
  c.bwd = 1;
  return c;
}

void build_fcases(fcase_list *L) {
  char tag[64];
  for (int idt = 0; idt < 3; ++idt) {
    const fa_dtype dt = k_dtypes[idt];
    fcase c;
    /* --- sliding window: with causal in both alignments, left only, right only, both --- */
    c = fbase(dt, 2, 4, 2, 113, 113, 64, 64, CM_BR);
    c.win = 1, c.wl = 16, c.wr = 0, c.layout = idt == 0 ? L_MIXED : TU_CONTIGUOUS;
    fcase_add(L, c, "window.l16");
    c = fbase(dt, 1, 3, 1, 257, 113, 32, 32, CM_BR);
    c.win = 1, c.wl = 40, c.wr = -1;
    fcase_add(L, c, "window.l40");
    c = fbase(dt, 1, 2, 2, 113, 257, 64, 64, CM_TL);
    c.win = 1, c.wl = 7, c.wr = 5; /* causal forces right = 0 */
    fcase_add(L, c, "window.l7r5");
    c = fbase(dt, 2, 2, 1, 113, 257, 64, 32, CM_NONE);
    c.win = 1, c.wl = 10, c.wr = -1;
    fcase_add(L, c, "window.left10");
    c = fbase(dt, 1, 4, 2, 257, 113, 64, 64, CM_NONE);
    c.win = 1, c.wl = -1, c.wr = 7;
    c.layout = idt == 1 ? TU_PADDED : TU_CONTIGUOUS;
    fcase_add(L, c, "window.right7");
    c = fbase(dt, 1, 2, 1, 113, 113, 96, 96, CM_NONE);
    c.win = 1, c.wl = 3, c.wr = 30;
    fcase_add(L, c, "window.l3r30");
    /* head dims 256 and 192 (the cuda backward's wide kernel there: 64-key tiles) */
    c = fbase(dt, 1, 4, 2, 200, 300, 256, 256, CM_NONE);
    c.win = 1, c.wl = 70, c.wr = 20;
    fcase_add(L, c, "window.l70r20");
    c = fbase(dt, 1, 3, 1, 257, 200, 192, 192, CM_BR);
    c.win = 1, c.wl = 100, c.wr = 0;
    fcase_add(L, c, "window.l100");
    /* --- softcap --- */
    c = fbase(dt, 2, 4, 2, 113, 113, 64, 64, idt == 0 ? CM_NONE : CM_BR);
    c.softcap = 1.5f, c.scale = 0.5f;
    fcase_add(L, c, "softcap1.5");
    c = fbase(dt, 1, 2, 1, 17, 257, 128, 128, CM_TL);
    c.softcap = 30.0f;
    c.layout = idt == 2 ? TU_STRIDED : TU_CONTIGUOUS;
    fcase_add(L, c, "softcap30");
    /* --- ALiBi, per head and per (batch, head) --- */
    c = fbase(dt, 2, 4, 2, 113, 257, 64, 64, CM_NONE);
    c.alibi = 1;
    fcase_add(L, c, "alibi.h");
    c = fbase(dt, 3, 2, 1, 257, 113, 64, 64, idt == 2 ? CM_TL : CM_BR);
    c.alibi = 2;
    fcase_add(L, c, "alibi.bh");
    /* --- dropout, with and without causal --- */
    static const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int ip = 0; ip < 3; ++ip) {
      c = fbase(dt, 2, 4, 2, 113, 113, 64, 64, (idt + ip) % 3);
      c.dropout = ps[ip];
      snprintf(tag, sizeof tag, "dropout%.1f", (double)ps[ip]);
      fcase_add(L, c, tag);
    }
    c = fbase(dt, 1, 2, 1, 17, 257, 32, 64, CM_BR);
    c.dropout = 0.3f;
    fcase_add(L, c, "dropout0.3");
    /* --- variable length: empty sequences, length 1, sq > sk and sk > sq; both lse layouts --- */
    static const int64_t vq[][5] = {{0, 1, 17, 113, 5}, {33, 0, 1, 64, 2}};
    static const int64_t vk[][5] = {{40, 1, 113, 17, 0}, {1, 9, 1, 200, 2}};
    for (int pat = 0; pat < 2; ++pat)
      for (int lp = 0; lp < 2; ++lp) {
        c = fbase(dt, 5, 4, 2, 0, 0, 64, 64, (idt + pat + lp) % 3);
        c.varlen = 1, c.lse_packed = lp, c.extra_q = lp ? 3 : 0;
        memcpy(c.lq, vq[pat], sizeof vq[pat]);
        memcpy(c.lk, vk[pat], sizeof vk[pat]);
        snprintf(tag, sizeof tag, "varlen.p%d.%s", pat, lp ? "lse2d" : "lse3d");
        fcase_add(L, c, tag);
      }
    /* seqused_k with and without varlen */
    c = fbase(dt, 4, 2, 1, 0, 0, 32, 32, CM_BR);
    c.varlen = 1, c.seqused = 1;
    {
      const int64_t q[4] = {7, 1, 30, 0}, k[4] = {50, 3, 30, 8}, u[4] = {20, 0, 30, 8};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k), memcpy(c.used, u, sizeof u);
    }
    fcase_add(L, c, "varlen.seqused");
    c = fbase(dt, 3, 4, 4, 33, 129, 64, 64, idt == 1 ? CM_TL : CM_NONE);
    c.seqused = 1;
    {
      const int64_t u[3] = {129, 1, 64};
      memcpy(c.used, u, sizeof u);
    }
    fcase_add(L, c, "seqused");
    /* the backward over sequences across several query and key tiles of the GPU kernels (64 and
       128 rows): GQA, both causal alignments, both lse layouts, an empty sequence, a window; and
       deterministic with used keys (each dq row summed in a fixed order across key tiles) */
    c = fbase(dt, 4, 8, 2, 0, 0, 128, 128, idt == 1 ? CM_TL : CM_BR);
    c.varlen = 1, c.lse_packed = idt != 2, c.extra_q = 5;
    {
      const int64_t q[4] = {300, 0, 129, 517}, k[4] = {260, 7, 400, 517};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k);
    }
    fcase_add(L, c, "varlen.tiles");
    c = fbase(dt, 3, 4, 2, 0, 0, 64, 64, CM_BR);
    c.varlen = 1, c.win = 1, c.wl = 50, c.wr = 10;
    {
      const int64_t q[3] = {150, 90, 3}, k[3] = {150, 200, 70};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k);
    }
    fcase_add(L, c, "varlen.window");
    c = fbase(dt, 3, 4, 4, 0, 0, 64, 64, idt == 0 ? CM_BR : CM_NONE);
    c.varlen = 1, c.seqused = 1, c.determ = 1;
    {
      const int64_t q[3] = {200, 65, 1}, k[3] = {333, 64, 90}, u[3] = {300, 0, 90};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k), memcpy(c.used, u, sizeof u);
    }
    fcase_add(L, c, "varlen.seqused.deterministic");
    /* the backward over sequences at the wide head dims (256, and 192 padded to it), whose GPU
       kernels take 64-key tiles: GQA, an empty sequence, used keys ending inside a tile, both
       causal alignments and no mask, both lse layouts */
    for (int w = 0; w < 2; ++w) {
      const int64_t d = (idt + w) % 2 ? 192 : 256;
      c = fbase(dt, 3, 8, 2, 0, 0, d, d, w ? CM_NONE : idt == 0 ? CM_TL : CM_BR);
      c.varlen = 1, c.seqused = !w, c.lse_packed = (idt + w) % 2;
      {
        const int64_t q[3] = {150, 0, 97}, k[3] = {200, 40, 97}, u[3] = {130, 0, 97};
        memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k);
        if (!w) memcpy(c.used, u, sizeof u);
      }
      fcase_add(L, c, w ? "varlen.wide" : "varlen.wide.seqused");
    }
    /* --- head dims up to 512, dv != dk --- */
    static const int64_t hd[][2] = {{192, 128}, {576, 512}, {512, 512}, {300, 72}, {40, 512}};
    for (int h = 0; h < 5; ++h) {
      if (h >= 3 && idt != h - 3 && idt != 2) continue;
      c = fbase(dt, 1, 4, 2, 65, 97, hd[h][0], hd[h][1], (idt + h) % 3);
      fcase_add(L, c, "hd");
    }
    /* --- split-KV against num_splits 1; 64 pieces are more than the keys' tiles of 64 (16) or
       128 (8): pieces without keys, or as many as there are tiles, as the backend reports --- */
    static const int sp[5] = {2, 3, 4, 0, 64};
    for (int i = 0; i < 5; ++i) {
      c = fbase(dt, 2, 8, 2, i == 3 ? 1 : i == 4 ? 3 : 17, 1000, 64, 64, (idt + i) % 3);
      c.splits = sp[i], c.bwd = 0;
      snprintf(tag, sizeof tag, "split%d", sp[i]);
      fcase_add(L, c, tag);
    }
    /* --- combinations --- */
    c = fbase(dt, 4, 6, 2, 0, 0, 64, 64, idt == 2 ? CM_TL : CM_BR);
    c.varlen = 1, c.win = 1, c.wl = 12, c.wr = 0, c.softcap = 2.0f, c.alibi = 2;
    {
      const int64_t q[4] = {20, 1, 0, 45}, k[4] = {30, 60, 3, 45};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k);
    }
    fcase_add(L, c, "combo.varlen.window.softcap.alibi");
    c = fbase(dt, 2, 4, 1, 113, 200, 64, 64, CM_BR);
    c.dropout = 0.2f, c.win = 1, c.wl = 50, c.wr = 0, c.alibi = 1;
    fcase_add(L, c, "combo.dropout.window.alibi");
    c = fbase(dt, 3, 4, 2, 0, 0, 32, 32, CM_NONE);
    c.varlen = 1, c.dropout = 0.25f;
    {
      const int64_t q[3] = {9, 0, 40}, k[3] = {70, 5, 1};
      memcpy(c.lq, q, sizeof q), memcpy(c.lk, k, sizeof k);
    }
    fcase_add(L, c, "combo.varlen.dropout");
    c = fbase(dt, 2, 8, 2, 5, 700, 64, 64, CM_BR);
    c.splits = 3, c.bwd = 0, c.softcap = 5.0f, c.win = 1, c.wl = 300, c.wr = 0;
    fcase_add(L, c, "combo.split.window.softcap");
    /* window and softcap together, and an odd head dim with a two-sided window, on plain dense
       tensors (what the GPU backends' main kernels serve) */
    c = fbase(dt, 1, 4, 2, 200, 300, 128, 128, CM_BR);
    c.win = 1, c.wl = 64, c.wr = 0, c.softcap = 20.0f;
    fcase_add(L, c, "combo.window.softcap");
    c = fbase(dt, 1, 4, 1, 129, 129, 72, 72, idt == 1 ? CM_TL : CM_NONE);
    c.win = 1, c.wl = 33, c.wr = 17;
    fcase_add(L, c, "window.l33r17");
    /* --- deterministic: a second run must match the first bitwise (GQA: dk, dv summed over the
       heads of a group; several key blocks feed every dq row) --- */
    c = fbase(dt, 2, 4, 2, 257, 300, 64, 64, idt == 2 ? CM_TL : CM_BR);
    c.determ = 1;
    fcase_add(L, c, "deterministic");
    /* head dim 256 (the cuda backward's wide kernel there adds dQ from registers) */
    c = fbase(dt, 2, 4, 2, 257, 300, 256, 256, idt == 2 ? CM_BR : CM_NONE);
    c.determ = 1;
    fcase_add(L, c, "deterministic");
  }
  /* --- paged KV: every power-of-two page size 1..1024, shuffled tables, seqused_k --- */
  for (int lg = 0; lg <= 10; ++lg) {
    const int64_t page = (int64_t)1 << lg;
    const int64_t blocks = page >= 512 ? (page == 1024 ? 1 : 2) : (page >= 64 ? 3 : 160 / page);
    fcase c = fbase(k_dtypes[lg % 3], 2, 4, 2, lg % 2 ? 1 : 13, 0, 64, 64, lg % 3);
    c.page = page, c.max_blocks = blocks;
    c.seqused = lg % 4 != 3;
    c.used[0] = blocks * page - (lg % 3), c.used[1] = (blocks * page) / 2 + 1;
    if (lg == 5) { /* packed q over paged keys */
      c.varlen = 1;
      c.lq[0] = 6, c.lq[1] = 13;
    }
    if (lg == 7) c.dropout = 0.1f, c.alibi = 1;
    if (lg == 8) c.splits = 2, c.bwd = 0;
    snprintf(tag, sizeof tag, "paged.pg%lld", (long long)page);
    fcase_add(L, c, tag);
  }
  /* --- fa_forward_kvcache --- */
  for (int idt = 0; idt < 3; ++idt) {
    const fa_dtype dt = k_dtypes[idt];
    fcase c;
    /* decode without new tokens, dense cache */
    c = fbase(dt, 3, 4, 2, 1, 300, 64, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0;
    c.cache_len[0] = 300, c.cache_len[1] = 1, c.cache_len[2] = 157;
    fcase_add(L, c, "kvcache.dense");
    /* appending, rotary interleaved over the whole head, causal (q rotated per row) */
    c = fbase(dt, 2, 4, 2, 3, 200, 64, 64, idt == 1 ? CM_TL : CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 3, c.rot = 64, c.inter = 1, c.rot_f32 = 1;
    c.cache_len[0] = 0, c.cache_len[1] = 120;
    fcase_add(L, c, "kvcache.append.rot64i");
    /* rotary_dim < head_dim, not interleaved, non-causal (q at cache_seqlens[b]) */
    c = fbase(dt, 2, 2, 1, 2, 100, 128, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.snew = 2, c.rot = 32, c.inter = 0, c.rot_f32 = idt == 0;
    c.cache_len[0] = 50, c.cache_len[1] = 98;
    fcase_add(L, c, "kvcache.append.rot32");
    /* GQA decode: 1 query, 32 q heads over 8 kv heads */
    c = fbase(dt, 2, 32, 8, 1, 512, 128, 128, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 1;
    c.cache_len[0] = 511, c.cache_len[1] = 77;
    fcase_add(L, c, "kvcache.gqa32x8");
    /* paged cache, appended tokens crossing pages, rotary, window */
    c = fbase(dt, 2, 4, 2, 4, 0, 64, 64, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 4, c.rot = 16, c.inter = idt == 2, c.rot_f32 = 1;
    c.page = 16, c.max_blocks = 12;
    c.win = idt == 1, c.wl = 30, c.wr = 0;
    c.cache_len[0] = 30, c.cache_len[1] = 150;
    fcase_add(L, c, "kvcache.paged16");
    /* paged decoding steps at head dims 128 and 256 (cuda: the decoding kernel's cp.async stages
       and, on sm_90, its bulk-copy form), pages of 16 and 64, sequences ending inside a page */
    c = fbase(dt, 2, 8, 2, 1, 0, 128, 128, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.snew = 1;
    c.page = 16, c.max_blocks = 40;
    c.cache_len[0] = 600, c.cache_len[1] = 37;
    fcase_add(L, c, "kvcache.paged16.hd128");
    c = fbase(dt, 2, 4, 4, 1, 0, 256, 256, idt == 1 ? CM_BR : CM_NONE);
    c.kvc = 1, c.bwd = 0, c.snew = 1;
    c.page = 64, c.max_blocks = 12;
    c.cache_len[0] = 700, c.cache_len[1] = 100;
    fcase_add(L, c, "kvcache.paged64.hd256");
    /* split decode over a long cache */
    c = fbase(dt, 1, 8, 1, 1, 1000, 64, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.splits = 4;
    c.cache_len[0] = 999;
    fcase_add(L, c, "kvcache.split4");
    /* Head dim 256 (cuda: the decoding kernel's deep stages where shared memory holds them):
       GQA, pieces of 2-3 key tiles (fewer than its stages) and, in the short sequence, empty
       ones */
    c = fbase(dt, 2, 8, 2, 1, 1000, 256, 256, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.splits = 7;
    c.cache_len[0] = 999, c.cache_len[1] = 130;
    fcase_add(L, c, "kvcache.split7.hd256");
    /* The few-query-rows path (cpu: .rows<N>) and its row and column blockings: one row per
       task over a long cache (MHA), blocks of keys split unevenly */
    c = fbase(dt, 1, 2, 2, 1, 1500, 128, 128, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.splits = 3;
    c.cache_len[0] = 1499;
    fcase_add(L, c, "kvcache.rows.mha");
    /* GQA groups of 3 and 5 (row blocks 2 + 1, 8 + 2 with two query rows), head dims 80/48
       (column blocks 4 + 1, 2 + 1) and 16; softcap and ALiBi per head; causal in both
       alignments with appended, rotated tokens */
    c = fbase(dt, 2, 6, 2, 1, 300, 80, 48, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.softcap = 8.0f, c.alibi = idt == 1 ? 2 : 1;
    c.cache_len[0] = 299, c.cache_len[1] = 41;
    fcase_add(L, c, "kvcache.rows.g3");
    c = fbase(dt, 2, 10, 2, 2, 160, 16, 16, idt == 0 ? CM_TL : CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 2, c.rot = 16, c.inter = 1, c.rot_f32 = 1;
    c.cache_len[0] = 100, c.cache_len[1] = 7;
    fcase_add(L, c, "kvcache.rows.g5");
    /* 16 query rows (the path's limit), a window, head dim 256 */
    c = fbase(dt, 1, 4, 4, 16, 400, 256, 256, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 16, c.win = 1, c.wl = 37, c.wr = 0;
    c.cache_len[0] = 300;
    fcase_add(L, c, "kvcache.rows.q16");
    /* What the path does not take, named without .rows: 17 query rows, a head dim that is not a
       multiple of 16, more than 128 rows per task */
    c = fbase(dt, 1, 2, 1, 17, 100, 64, 64, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 17;
    c.cache_len[0] = 50;
    fcase_add(L, c, "kvcache.tile.q17");
    c = fbase(dt, 2, 4, 2, 1, 200, 72, 72, CM_NONE);
    c.kvc = 1, c.bwd = 0;
    c.cache_len[0] = 150, c.cache_len[1] = 199;
    fcase_add(L, c, "kvcache.tile.d72");
    c = fbase(dt, 1, 48, 8, 3, 64, 32, 32, CM_BR);
    c.kvc = 1, c.bwd = 0, c.snew = 3;
    c.cache_len[0] = 40;
    fcase_add(L, c, "kvcache.tile.rows144");
  }
  {
    fcase c = fbase(FA_BF16, 2, 4, 2, 1, 0, 64, 64, CM_NONE);
    c.kvc = 1, c.bwd = 0, c.page = 1024, c.max_blocks = 1;
    c.cache_len[0] = 1000, c.cache_len[1] = 3;
    fcase_add(L, c, "kvcache.paged1024");
  }
  /* FP8 inputs (the case's dtype is out's): the descale layouts, rotated q and k, both formats,
     masks and GQA, the head dims the GPU kernels have */
  {
    fcase c = fbase(FA_BF16, 2, 4, 2, 37, 53, 64, 64, CM_NONE);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 1;
    fcase_add(L, c, "fp8.e4m3.per_tensor");
    c = fbase(FA_F16, 2, 4, 4, 64, 64, 128, 128, CM_BR);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 2, c.layout = L_MIXED;
    fcase_add(L, c, "fp8.e4m3.per_head");
    c = fbase(FA_BF16, 1, 8, 2, 70, 129, 64, 64, CM_BR);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 3, c.rows_q = 16, c.rows_k = 32;
    fcase_add(L, c, "fp8.e4m3.block16x32");
    c = fbase(FA_BF16, 2, 2, 1, 40, 90, 128, 128, CM_NONE);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 3, c.rows_q = 8, c.rows_k = 24, c.rotate = 1;
    c.win = 1, c.wl = 7, c.wr = 3;
    fcase_add(L, c, "fp8.e4m3.rotated.window");
    c = fbase(FA_BF16, 1, 4, 2, 130, 260, 256, 256, CM_BR);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 3, c.rows_q = 128, c.rows_k = 128, c.rotate = 1;
    fcase_add(L, c, "fp8.e4m3.rotated.hd256");
    c = fbase(FA_F16, 1, 3, 3, 33, 47, 64, 64, CM_TL);
    c.bwd = 0, c.fp8 = FA_F8E5M2, c.dsl = 2;
    fcase_add(L, c, "fp8.e5m2.per_head");
    c = fbase(FA_BF16, 1, 2, 2, 20, 30, 64, 64, CM_NONE);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 0;
    fcase_add(L, c, "fp8.e4m3.no_descale");
    /* Many key tiles: the GPU kernel's softmax keeps a row's reference max until the row's max
       rises past it by 2^8 (then P and O are rescaled); with scale 1 the scores spread wide
       enough (sd ~11) that the max moves by more than that after the first tiles. */
    c = fbase(FA_BF16, 1, 2, 2, 70, 1500, 128, 128, CM_BR);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 2, c.scale = 1.0f;
    fcase_add(L, c, "fp8.e4m3.long.sharp");
    c = fbase(FA_BF16, 1, 2, 1, 90, 1100, 256, 256, CM_NONE);
    c.bwd = 0, c.fp8 = FA_F8E4M3, c.dsl = 3, c.rows_q = 64, c.rows_k = 128;
    fcase_add(L, c, "fp8.e4m3.long.blocks.hd256");
  }
}

static int fcmp_cost(const void *a, const void *b) {
  const fcase *x = *(const fcase *const *)a, *y = *(const fcase *const *)b;
  return x->cost < y->cost ? -1 : x->cost > y->cost ? 1 : strcmp(x->name, y->name);
}

/* --quick for feature cases: the cheapest case of every feature, and of every feature in every
   dtype, plus every page size. */
void mark_fquick(fcase_list *L) {
  fcase **order = (fcase **)malloc(sizeof(fcase *) * (size_t)(L->n ? L->n : 1));
  if (!order) exit(2);
  for (int i = 0; i < L->n; ++i) order[i] = &L->v[i];
  qsort(order, (size_t)L->n, sizeof *order, fcmp_cost);
  tag_set seen = {0};
  for (int i = 0; i < L->n; ++i) {
    const fcase *c = order[i];
    char tags[24][48];
    int nt = 0;
    const char *f[12];
    int nf = fcase_features(c, f, 12);
    for (int k = 0; k < nf && nt < 22; ++k) {
      snprintf(tags[nt++], 48, "f:%s", f[k]);
      snprintf(tags[nt++], 48, "fd:%s.%s", f[k], tu_dtype_name(c->dtype));
    }
    if (c->lse_packed && nt < 24) snprintf(tags[nt++], 48, "lse_packed");
    if (c->seqused && nt < 24) snprintf(tags[nt++], 48, "seqused:%d", c->varlen);
    if (c->alibi && nt < 24) snprintf(tags[nt++], 48, "alibi:%d", c->alibi);
    if (c->win && nt < 24) snprintf(tags[nt++], 48, "win:%d.%d", c->wl < 0, c->wr < 0);
    if (c->rot && nt < 24) snprintf(tags[nt++], 48, "rot:%d", c->inter);
    if (c->page && nt < 24) snprintf(tags[nt++], 48, "page:%lld", (long long)c->page);
    if (c->splits >= 0 && nt < 24) snprintf(tags[nt++], 48, "splits:%d", c->splits);
    if (c->fp8 && nt < 24) snprintf(tags[nt++], 48, "fp8:%d.%d", (int)c->fp8, c->dsl);
    int fresh = 0;
    for (int t = 0; t < nt; ++t) fresh |= !tag_has(&seen, tags[t]);
    if (!fresh) continue;
    order[i]->quick = 1;
    for (int t = 0; t < nt; ++t) tag_add(&seen, tags[t]);
  }
  free(seen.v);
  free(order);
}
