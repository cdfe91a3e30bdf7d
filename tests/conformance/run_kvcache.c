/*
 * run_kvcache.c: one fa_forward_kvcache case. The cache (dense or paged through a shuffled block
 * table) holds random tokens; the new tokens, rotated when the case has rotary tables, are
 * appended at cache_seqlens[b]; q (rotated the same way) attends to the whole sequence. Checked:
 * out and lse against the float64 reference on the expected cache, the appended positions against
 * the new tokens, every other byte of the caches and every input unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

/* Rotates the first rot dims of row x (d values) by the tables' angles at pos, in float64. */
static void rotate_row(double *xr, int64_t rot, int inter, const tu_tensor *cs, const tu_tensor *sn,
                       int64_t pos) {
  for (int64_t r = 0; r < rot / 2; ++r) {
    const int64_t idx[2] = {pos, r};
    const double co = tu_get(cs, idx), si = tu_get(sn, idx);
    const int64_t a = inter ? 2 * r : r, b = inter ? 2 * r + 1 : r + rot / 2;
    const double x1 = xr[a], x2 = xr[b];
    xr[a] = x1 * co - x2 * si;
    xr[b] = x1 * si + x2 * co;
  }
}

enum { K_Q, K_QR, K_KC, K_VC, K_KD, K_VD, K_KN, K_VN, K_COS, K_SIN, K_OUT, K_LSE, K_COUNT };
static const char *const k_names[K_COUNT] = {"q",          "q(rotated)", "k_cache", "v_cache",
                                             "k(dense)",   "v(dense)",   "k_new",   "v_new",
                                             "rotary_cos", "rotary_sin", "out",     "lse"};

/* One ulp-ish bound for a value stored after a rotation computed in another precision. */
static double store_tol(fa_dtype dt, double v) {
  double eps = dt == FA_F32 ? 1.2e-7 : dt == FA_F16 ? 9.8e-4 : 7.9e-3;
  return eps * fabs(v) + (dt == FA_F32 ? 1e-30 : 1e-7);
}

int run_kvcase(const fcase *c, frun *R, uint64_t run_seed) {
  const double t0 = now_s();
  const backend_ctx *bk = R->bk;
  report rep;
  memset(&rep, 0, sizeof rep);
  char summary[320] = "";
  int result = R_FAIL;
  R->skip[0] = '\0';
  tu_tensor t[K_COUNT], it[I_COUNT], cl;
  dev_tensor d[K_COUNT], dix[I_COUNT], dcl;
  memset(t, 0, sizeof t);
  memset(it, 0, sizeof it);
  memset(&cl, 0, sizeof cl);
  memset(d, 0, sizeof d);
  memset(dix, 0, sizeof dix);
  memset(&dcl, 0, sizeof dcl);
  char derr[256];
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};
  unsigned char *appended = NULL;
  int64_t lens_q[FMAXB], lens_k[FMAXB], *table = NULL;
  double slopes[FMAXB * 64], *row = NULL;
  ref_problem p;
  ref_ext x;
  fproblem(c, &p, &x, lens_q, lens_k, slopes);
  x.lens_q = NULL;
  const int64_t B = c->b, sq = c->sq, cap = p.seqlen_k, sn = c->snew;
  const int paged = c->page > 0;
  const int64_t nblk = paged ? B * c->max_blocks + 2 : 0;
  const int64_t maxpos = cap + sq + 1;
  const int64_t qs[4] = {B, sq, c->hq, c->d}, os[4] = {B, sq, c->hq, c->dv}, ls[3] = {B, c->hq, sq};
  const int64_t kc[4] = {paged ? nblk : B, paged ? c->page : cap, c->hkv, c->d},
                vc[4] = {paged ? nblk : B, paged ? c->page : cap, c->hkv, c->dv};
  const int64_t kd[4] = {B, cap, c->hkv, c->d}, vd[4] = {B, cap, c->hkv, c->dv};
  const int64_t kn[4] = {B, sn, c->hkv, c->d}, vn[4] = {B, sn, c->hkv, c->dv};
  const int64_t rs[2] = {maxpos, c->rot / 2};
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(run_seed, c->name));
  int bad = 0;
  bad |= tu_alloc(&t[K_Q], c->dtype, 4, qs, fit_layout(bk, TU_PADDED));
  bad |= tu_alloc(&t[K_QR], c->dtype, 4, qs, TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_KC], c->dtype, 4, kc, paged ? TU_CONTIGUOUS : TU_PERMUTED);
  /* K's cache head-major (dims 1 and 2 swapped in memory), V's too for bf16: both layouts of a
     whole cache (the cpu backend reads a head-major one head by head) */
  bad |= tu_alloc(&t[K_VC], c->dtype, 4, vc,
                  !paged && c->dtype == FA_BF16 ? TU_PERMUTED : TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_KD], c->dtype, 4, kd, TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_VD], c->dtype, 4, vd, TU_CONTIGUOUS);
  if (sn) {
    bad |= tu_alloc(&t[K_KN], c->dtype, 4, kn, fit_layout(bk, TU_STRIDED));
    bad |= tu_alloc(&t[K_VN], c->dtype, 4, vn, TU_CONTIGUOUS);
  }
  if (c->rot) {
    bad |= tu_alloc(&t[K_COS], c->rot_f32 ? FA_F32 : c->dtype, 2, rs, TU_CONTIGUOUS);
    bad |= tu_alloc(&t[K_SIN], c->rot_f32 ? FA_F32 : c->dtype, 2, rs, TU_CONTIGUOUS);
  }
  bad |= tu_alloc(&t[K_OUT], c->dtype, 4, os, TU_CONTIGUOUS);
  bad |= tu_alloc(&t[K_LSE], FA_F32, 3, ls, TU_CONTIGUOUS);
  row = malloc(sizeof(double) * (size_t)(c->d > c->dv ? c->d : c->dv));
  if (bad || !row) {
    fail(&rep, "out of memory allocating tensors");
    goto done;
  }
  const int ins[6] = {K_Q, K_KC, K_VC, K_KN, K_VN, -1};
  for (int i = 0; ins[i] >= 0; ++i)
    if (t[ins[i]].buf) tu_fill_random(&t[ins[i]], &rng);
  if (c->rot)
    for (int64_t pos = 0; pos < maxpos; ++pos)
      for (int64_t r = 0; r < c->rot / 2; ++r) {
        const int64_t idx[2] = {pos, r};
        double th = (double)pos * pow(10000.0, -2.0 * (double)r / (double)c->rot);
        tu_set(&t[K_COS], idx, cos(th));
        tu_set(&t[K_SIN], idx, sin(th));
      }
  if (paged) {
    if (!(table = shuffled_table(c, nblk, 1, &rng))) {
      fail(&rep, "out of memory (block table)");
      goto done;
    }
  }
  for (int i = 0; i < K_COUNT; ++i)
    if (t[i].buf) (void)tu_snapshot(&t[i]);
  {
    const int64_t sb[1] = {B}, st[2] = {B, c->max_blocks};
    bad |= make_i32(&cl, 1, sb, c->cache_len);
    if (paged) bad |= make_i32(&it[I_TABLE], 2, st, table);
    /* the slopes fproblem gave the reference */
    if (c->alibi) bad |= make_alibi(&it[I_ALIBI], c, slopes) != 0;
    if (bad) {
      fail(&rep, "out of memory (index tensors)");
      goto done;
    }
  }
  /* Cache element (as logical index into k_cache / v_cache) of sequence b's position pos. */
#define CACHE_AT(idx, b, pos, h)                                                         \
  do {                                                                                   \
    if (paged) {                                                                         \
      (idx)[0] = table[(b)*c->max_blocks + (pos) / c->page], (idx)[1] = (pos) % c->page; \
    } else {                                                                             \
      (idx)[0] = (b), (idx)[1] = (pos);                                                  \
    }                                                                                    \
    (idx)[2] = (h), (idx)[3] = 0;                                                        \
  } while (0)
  /* The expected logical cache: what was there, with the new tokens rotated, rounded, appended. */
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < cap; ++j)
      for (int64_t h = 0; h < c->hkv; ++h) {
        int64_t ci[4], di[4] = {b, j, h, 0};
        CACHE_AT(ci, b, j, h);
        const int64_t tnew = j - c->cache_len[b];
        if (tnew >= 0 && tnew < sn) {
          int64_t ni[4] = {b, tnew, h, 0};
          for (int64_t e = 0; e < c->d; ++e) ni[3] = e, row[e] = tu_get(&t[K_KN], ni);
          if (c->rot) rotate_row(row, c->rot, c->inter, &t[K_COS], &t[K_SIN], j);
          for (int64_t e = 0; e < c->d; ++e) di[3] = e, tu_set(&t[K_KD], di, row[e]);
          di[3] = 0;
          copy_row(&t[K_VD], di, &t[K_VN], ni, c->dv);
        } else {
          copy_row(&t[K_KD], di, &t[K_KC], ci, c->d);
          copy_row(&t[K_VD], di, &t[K_VC], ci, c->dv);
        }
      }
  /* q rotated (rounded once) at cache_seqlens[b] + t when causal or windowed, else at
     cache_seqlens[b]. */
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t h = 0; h < c->hq; ++h) {
        int64_t qi[4] = {b, i, h, 0};
        for (int64_t e = 0; e < c->d; ++e) qi[3] = e, row[e] = tu_get(&t[K_Q], qi);
        const int64_t pos = c->cache_len[b] + ((c->cm != CM_NONE || c->win) ? i : 0);
        if (c->rot) rotate_row(row, c->rot, c->inter, &t[K_COS], &t[K_SIN], pos);
        for (int64_t e = 0; e < c->d; ++e) qi[3] = e, tu_set(&t[K_QR], qi, row[e]);
      }

  /* The tensors the library gets, in the backend's memory (q rotated and the dense caches are
     the reference's only). */
  for (int i = 0; i < K_COUNT; ++i) {
    const int ref_only = i == K_QR || i == K_KD || i == K_VD;
    if (t[i].buf && !ref_only && dev_put(bk->ops, &d[i], &t[i], derr, sizeof derr)) {
      fail(&rep, "%s: %s", k_names[i], derr);
      goto done;
    }
  }
  for (int i = 0; i < I_COUNT; ++i)
    if (it[i].buf && dev_put(bk->ops, &dix[i], &it[i], derr, sizeof derr)) {
      fail(&rep, "%s: %s", i_names[i], derr);
      goto done;
    }
  if (dev_put(bk->ops, &dcl, &cl, derr, sizeof derr)) {
    fail(&rep, "kv.cache_seqlens: %s", derr);
    goto done;
  }

  fa_params params;
  fparams(c, bk, &x, &params, dix);
  fa_kvcache_args kv;
  fa_kvcache_args_init(&kv);
  kv.cache_seqlens = &dcl.view;
  if (sn) kv.k_new = &d[K_KN].view, kv.v_new = &d[K_VN].view;
  if (c->rot) kv.rotary_cos = &d[K_COS].view, kv.rotary_sin = &d[K_SIN].view;
  kv.rotary_interleaved = c->inter;
  fa_run_info info, plan;
  fa_run_info_init(&plan);
  fa_status st = fa_plan_forward_kvcache(&params, &d[K_Q].view, &d[K_KC].view, &d[K_VC].view, &kv,
                                         &d[K_OUT].view, &d[K_LSE].view, &plan);
  if (st != FA_OK) {
    const fa_tensor *data[5] = {&d[K_Q].view, &d[K_KC].view, &d[K_VC].view, &d[K_OUT].view,
                                sn ? &d[K_KN].view : NULL};
    result = frefused(&rep, R, c, data, 5, "fa_plan_forward_kvcache", st);
    goto done;
  }
  if (ref_attention_ext(&p, &x, REF_F64, &t[K_QR], &t[K_KD], &t[K_VD], NULL, &r64, 0) ||
      ref_attention_ext(&p, &x, REF_STORAGE, &t[K_QR], &t[K_KD], &t[K_VD], NULL, &rn, 0)) {
    fail(&rep, "reference failed");
    goto done;
  }
  for (int w = 0; w < 2; ++w)
    if (!(masked[w] = ref_masked_map_ext(&p, &x, (ref_which)w))) {
      fail(&rep, "out of memory (mask map)");
      goto done;
    }
  fa_run_info_init(&info);
  st = fa_forward_kvcache(&params, &d[K_Q].view, &d[K_KC].view, &d[K_VC].view, &kv, &d[K_OUT].view,
                          &d[K_LSE].view, &info);
  if (st != FA_OK) {
    fail(&rep, "fa_forward_kvcache: %s: %s", fa_status_string(st), fa_last_error());
    goto done;
  }
  {
    const int outs[4] = {K_OUT, K_LSE, K_KC, K_VC};
    for (int i = 0; i < 4; ++i)
      if (dev_get(&rep, bk, &t[outs[i]], &d[outs[i]], k_names[outs[i]])) goto done;
  }
  const kernel_facts kvf = facts_of_fcase(c, "kvcache");
  check_info(&rep, bk, &kvf, "kvcache", &info, &plan);
  /* A backend may run fewer chunks than key tiles allow (the CPU: min(asked, key tiles), whose
     width follows the host's cache size). */
  if (c->splits > 0 && !splits_honoured(c->splits, &info, cap))
    fail(&rep, "kvcache: num_splits %d asked, run info says %d ran (tiles of %d keys)", c->splits,
         info.num_splits, info.tile_n);
  fmap id = {MAP_ID, B, sq, c->hq, 1, NULL, NULL, 0};
  fcheck_output(&rep, summary, sizeof summary, "out", &t[K_OUT], &id, &r64, &rn, REF_OUT,
                masked[REF_OUT], c->dtype);
  fcheck_output(&rep, summary, sizeof summary, "lse", &t[K_LSE], &id, &r64, &rn, REF_LSE,
                masked[REF_LSE], c->dtype);
  /* The caches: appended positions hold the (rotated, rounded) new tokens, everything else in
     the buffers (other positions, other pages, gaps) is bitwise what it was. */
  for (int which = 0; which < 2; ++which) {
    tu_tensor *cache = &t[which ? K_VC : K_KC];
    const tu_tensor *dense = &t[which ? K_VD : K_KD];
    const int64_t dim = which ? c->dv : c->d;
    appended = calloc(cache->buf_elems, 1);
    if (!appended) {
      fail(&rep, "out of memory (cache check)");
      goto done;
    }
    int64_t wrong = 0, changed = 0;
    double worst = 0.0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t tn = 0; tn < sn; ++tn)
        for (int64_t h = 0; h < c->hkv; ++h) {
          const int64_t pos = c->cache_len[b] + tn;
          int64_t ci[4], di[4] = {b, pos, h, 0};
          CACHE_AT(ci, b, pos, h);
          for (int64_t e = 0; e < dim; ++e) {
            ci[3] = di[3] = e;
            appended[tu_elem_offset(cache, ci)] = 1;
            const double got = tu_get(cache, ci), want = tu_get(dense, di);
            const double err = fabs(got - want);
            if (!(err <= (which ? 0.0 : store_tol(c->dtype, want)))) ++wrong;
            if (err > worst || isnan(err)) worst = err;
          }
        }
    for (size_t off = 0; off < cache->buf_elems; ++off)
      if (!appended[off] && memcmp(cache->buf + off * cache->elem_bytes,
                                   cache->snapshot + off * cache->elem_bytes, cache->elem_bytes))
        ++changed;
    if (wrong)
      fail(&rep, "%s: %lld appended elements differ from the new tokens%s (worst %.3e)",
           k_names[which ? K_VC : K_KC], (long long)wrong, which ? "" : " rotated and rounded",
           worst);
    if (changed)
      fail(&rep, "%s: %lld elements outside the appended positions changed",
           k_names[which ? K_VC : K_KC], (long long)changed);
    size_t u = strlen(summary);
    if (sn) snprintf(summary + u, sizeof summary - u, " %s %.1e", which ? "vnew" : "knew", worst);
    free(appended);
    appended = NULL;
  }
#undef CACHE_AT
  {
    const int ro[5] = {K_Q, K_KN, K_VN, K_COS, K_SIN};
    for (int i = 0; i < 5; ++i) {
      char msg[160];
      if (t[ro[i]].buf && !dev_get(&rep, bk, &t[ro[i]], &d[ro[i]], k_names[ro[i]]) &&
          tu_unchanged(&t[ro[i]], msg, sizeof msg) != 1)
        fail(&rep, "input %s was modified: %s", k_names[ro[i]], msg);
    }
    if (!dev_get(&rep, bk, &cl, &dcl, "kv.cache_seqlens") && tu_unchanged(&cl, NULL, 0) != 1)
      fail(&rep, "kv.cache_seqlens was modified");
    if (paged && !dev_get(&rep, bk, &it[I_TABLE], &dix[I_TABLE], "block_table") &&
        tu_unchanged(&it[I_TABLE], NULL, 0) != 1)
      fail(&rep, "block_table was modified");
  }
  result = rep.failed ? R_FAIL : R_PASS;

done:
  if (rep.failed) result = R_FAIL;
  dev_release_all(bk->ops, d, t, K_COUNT);
  dev_release_all(bk->ops, dix, it, I_COUNT);
  bk->ops->release(&dcl);
  tu_free(&cl);
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  free(appended);
  free(table);
  free(row);
  ref_result_free(&r64);
  ref_result_free(&rn);
  case_print(result, c->name, summary, R->skip, &rep, bk, run_seed, t0);
  return result;
}
