/*
 * needs.c: what a case needs, in fa_backend_info's feature names and the suite's layout probes,
 * and the rule that turns a refusal into a skip or a failure.
 *
 * A case the backend refuses with FA_ERR_UNSUPPORTED while some need is not listed (or probed as
 * refused) is a skip, never a pass; a need named by --require is never skipped (its refusal
 * fails), and a refusal although every need is listed fails.
 */
#include <stdio.h>
#include <string.h>

#include "conformance.h"

const char *const probe_names[P_COUNT] = {"strided_last_dim", "unaligned"};

int list_find(const char *list, const char *name) {
  if (!list) return -1;
  size_t n = strlen(name);
  int pos = 0;
  for (const char *p = list; *p; ++pos) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    while (len && (*p == ' ')) ++p, --len;
    if (len == n && !strncmp(p, name, n)) return pos;
    if (!e) break;
    p = e + 1;
  }
  return -1;
}

int list_has(const char *list, const char *name) { return list_find(list, name) >= 0; }

/* Sort key of name in list: its position, names outside the list last. */
static int list_pos(const char *list, const char *name) {
  int pos = list_find(list, name);
  return pos < 0 ? 1 << 20 : pos;
}

void need(needs *nd, const char *f) {
  for (int i = 0; i < nd->n; ++i)
    if (!strcmp(nd->f[i], f)) return;
  if (nd->n < (int)(sizeof nd->f / sizeof nd->f[0])) nd->f[nd->n++] = f;
}

void need_shape(needs *nd, fa_dtype dt, int causal, int top_left, int64_t hq, int64_t hkv,
                int64_t d, int64_t dv, int lse, int bwd) {
  need(nd, "fwd");
  need(nd, tu_dtype_name(dt));
  if (causal) need(nd, top_left ? "causal_top_left" : "causal");
  if (hkv == 1 && hq > 1) need(nd, "mqa");
  if (hkv > 1 && hq > hkv) need(nd, "gqa");
  if (d != dv) need(nd, "dv_ne_dk");
  const int64_t big = d > dv ? d : dv;
  if (big > 256)
    need(nd, "hd512");
  else if (big > 128)
    need(nd, "hd256");
  if (lse) need(nd, "lse");
  if (bwd) need(nd, "bwd");
}

/* The data tensors are q, k, v, out, dout and the gradients; lse and the index tensors are not
   classified: any layout of theirs must work. */
void need_views(needs *nd, const fa_tensor *const *data, int count) {
  for (int i = 0; i < count; ++i) {
    const fa_tensor *t = data[i];
    if (!t || t->ndim < 1) continue;
    const int last = t->ndim - 1;
    if (t->shape[last] > 1 && t->strides[last] != 1) need(nd, probe_names[P_STRIDED_LAST_DIM]);
    const uint64_t esz = (uint64_t)fa_dtype_size(t->dtype);
    uint64_t addr = t->byte_offset;
    if (t->device.kind != FA_DEVICE_OPENCL) addr += (uint64_t)(uintptr_t)t->data;
    int unaligned = addr % 16 != 0;
    for (int k = 0; k < last; ++k)
      if (t->shape[k] > 1 && ((uint64_t)t->strides[k] * esz) % 16 != 0) unaligned = 1;
    if (unaligned) need(nd, probe_names[P_UNALIGNED]);
  }
}

/* Whether the backend serves a need: fa_backend_info's features, or the suite's probe. A
   "family:" need (need_family) is never served: the named kernel family lacks it. */
static int serves(const backend_ctx *bk, const char *f) {
  for (int p = 0; p < P_COUNT; ++p)
    if (!strcmp(f, probe_names[p])) return bk->probe_ok[p];
  if (!strncmp(f, "family:", 7)) return 0;
  return list_has(bk->desc->features, f);
}

/* Known: the cuda backend's fa3, whose documented scope (docs/backends.md) is sm_90, head dims
   64, 96, 128, 192 and 256, no softcap, at least one key (the backward: and one query row), both
   passes over packed and used-key sequences (the backward at head dims 64, 96 and 128, not
   deterministic) but not paged KV, split-KV or the KV cache (seqs: the case needs one of those;
   cuda.fa2 runs them); TMA takes no negative strides. What it lacks makes its refusal
   ("kernel_family fa3: ...") a skip, while a refusal of a case the family should run still fails.
 */
void need_family(needs *nd, const backend_ctx *bk, int fwd_only, int seqs, int64_t d, int64_t dv,
                 int64_t sq, int64_t sk, float softcap, const fa_tensor *const *data, int count) {
  if (!bk->kernel_family || strcmp(bk->kernel_family, "fa3") != 0 || strcmp(bk->name, "cuda") != 0)
    return;
  int gaps = cuda_fa3_gaps(0, d, dv, sq, sk, softcap);
  if (!fwd_only) gaps |= cuda_fa3_gaps(1, d, dv, sq, sk, softcap);
  if (!bk->cuda_fa3) need(nd, "family:device");
  if (gaps & FA3_GAP_EMPTY) need(nd, "family:empty");
  if (gaps & FA3_GAP_SOFTCAP) need(nd, "family:softcap");
  if (gaps & FA3_GAP_HEAD_DIM) need(nd, "family:head_dim");
  if (seqs) need(nd, "family:seqs");
  for (int i = 0; i < count; ++i)
    for (int k = 0; data[i] && k < data[i]->ndim; ++k)
      if (data[i]->strides[k] < 0) need(nd, "family:negative_stride");
}

int refusal(report *rep, const backend_ctx *bk, const needs *nd, const char *call, fa_status st,
            char *skip, size_t sn) {
  /* Missing needs in one fixed order (fa_backend_info's, then the probes), so equal reasons read
     the same in every line. */
  static const char order[] =
      "fwd,bwd,f32,f16,bf16,lse,causal,causal_top_left,gqa,mqa,hd256,hd512,dv_ne_dk,"
      "deterministic,window,softcap,alibi,dropout,varlen,paged_kv,split_kv,kvcache,"
      "strided_last_dim,unaligned";
  int idx[32], n = 0;
  for (int i = 0; i < nd->n && n < 32; ++i) {
    if (serves(bk, nd->f[i])) continue;
    int j = n++;
    for (; j > 0 && list_pos(order, nd->f[idx[j - 1]]) > list_pos(order, nd->f[i]); --j)
      idx[j] = idx[j - 1];
    idx[j] = i;
  }
  char missing[256] = "";
  int required = 0;
  for (int k = 0; k < n; ++k) {
    size_t u = strlen(missing);
    snprintf(missing + u, sizeof missing - u, "%s%s", u ? "," : "", nd->f[idx[k]]);
    required |= list_has(bk->require, nd->f[idx[k]]);
  }
  if (st != FA_ERR_UNSUPPORTED || !missing[0]) {
    fail(rep, "%s: %s: %s%s", call, fa_status_string(st), fa_last_error(),
         missing[0] ? "" : " (the backend lists every feature this case needs)");
    return R_FAIL;
  }
  if (required) {
    fail(rep, "%s: required feature(s) %s not supported: %s", call, missing, fa_last_error());
    return R_FAIL;
  }
  snprintf(skip, sn, "%s not supported (%s: %s)", missing, call, fa_last_error());
  return R_SKIP;
}

tu_layout_kind fit_layout(const backend_ctx *bk, tu_layout_kind kind) {
  if (kind == TU_STRIDED && !bk->probe_ok[P_STRIDED_LAST_DIM]) return TU_CONTIGUOUS;
  if (kind == TU_PADDED && !bk->probe_ok[P_UNALIGNED]) return TU_CONTIGUOUS;
  return kind;
}
