/*
 * fuzz_api.c: libFuzzer target over the public API's argument handling on the CPU backend (its
 * parts: fuzz_decode.c, fuzz_tensors.c, fuzz.h).
 *
 * One input decodes to one call of fa_forward, fa_backward, fa_forward_kvcache, fa_plan_forward,
 * fa_plan_backward, fa_plan_forward_kvcache, fa_forward_workspace_size or
 * fa_backward_workspace_size (a forward or backward is then also made through the ring calls on one
 * rank, fuzz_ring.c, and a forward's q is quantized by fa_quantize, fuzz_quantize.c): ranks,
 * shapes, strides, byte offsets, dtypes, device kinds and ids of every tensor, every fa_params
 * field (varlen cu_seqlens, seqused_k, paged block tables, ALiBi slopes, FP8 inputs and their
 * descales, dropout, window, softcap, splits, workspace, backend, strict, struct sizes), the
 * fa_run_info and fa_kvcache_args struct sizes, and outputs aliased into another tensor's buffer
 * (refused exactly when they share a byte). A zero byte always picks the well-formed choice,
 * so short inputs are valid calls and the mutations each break one thing at a time.
 *
 * The harness keeps the library's side of the contract honest: every tensor a call may read or
 * write is backed by a real heap buffer covering byte_offset + (1 + sum (shape - 1) * stride)
 * elements of its declared dtype, exactly what the tensor addresses, so ASan reports any access
 * outside what the caller described. Index tensors (cu_seqlens, seqused_k, block_table,
 * cache_seqlens) are always real host buffers. The one exception is the "huge" mode, used only
 * with the plan and workspace-size calls: there q/k/v/out/... may describe up to 2^63 bytes over a
 * 64-byte dummy, since those calls never read tensor data (core/validate.c reads index tensors
 * only, decide() nothing).
 *
 * Oracles besides the sanitizers: a status is one of fa_status and a failure has a message; a
 * failed call leaves every output bitwise untouched; a run call fails exactly when its plan does,
 * with the same message (except for what only a run can find: the caller's workspace too small,
 * out of memory); a successful call reports the CPU backend and the workspace the size query
 * gives. A broken oracle ends in __builtin_trap(), which libFuzzer records as a crash.
 */
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static int valid_status(fa_status st) { return st >= FA_OK && st <= FA_ERR_INTERNAL; }

static void check_failure(fa_status st, const char *what) {
  if (!valid_status(st)) FAIL("%s returned %d, not an fa_status", what, (int)st);
  if (st == FA_ERR_INTERNAL) FAIL("%s: FA_ERR_INTERNAL: %s", what, fa_last_error());
  if (st != FA_OK && fa_last_error()[0] == '\0') FAIL("%s failed (%d) without a message", what, st);
}

/* Whether the call receives slot j's tensor: the caller's params and kvcache args carry some,
   which the library reads only when the struct is passed and its struct_size covers the field. */
#define FIELD_IN(ptr, type, field) \
  ((ptr) && (ptr)->struct_size >= offsetof(type, field) + sizeof((ptr)->field))
static int call_receives(int j, const fa_params *pp, const fa_kvcache_args *kvp, int kvcache) {
  switch (j) {
    case S_ALIBI:
      return FIELD_IN(pp, fa_params, alibi_slopes);
    case S_KNEW:
      return kvcache && FIELD_IN(kvp, fa_kvcache_args, k_new);
    case S_VNEW:
      return kvcache && FIELD_IN(kvp, fa_kvcache_args, v_new);
    case S_COS:
      return kvcache && FIELD_IN(kvp, fa_kvcache_args, rotary_cos);
    case S_SIN:
      return kvcache && FIELD_IN(kvp, fa_kvcache_args, rotary_sin);
    case S_QDS:
      return FIELD_IN(pp, fa_params, q_descale);
    case S_KDS:
      return FIELD_IN(pp, fa_params, k_descale);
    case S_VDS:
      return FIELD_IN(pp, fa_params, v_descale);
    case S_QY: /* fa_quantize's, after the call (fuzz_quantize.c) */
    case S_QYD:
      return 0;
    default:
      return 1;
  }
}
#undef FIELD_IN

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader rd = {data, size, 0}, *r = &rd;
  static call cbuf;
  call *c = &cbuf;
  memset(c, 0, sizeof *c);
  problem pb;
  decode_problem(r, c, &pb);
  const int run = pb.run, bwd = pb.bwd;
  fa_params p;
  fa_params_init(&p);
  decode_tensors(r, c, &pb, &p);
  slot *s = c->s;

  /* Mutations: a byte per slot, in order. Index contents get their own. */
  for (int i = 0; i < S_COUNT; ++i)
    if (s[i].used) mutate(r, &s[i]);
  const uint8_t corrupt = u8(r);
  if (corrupt) {
    int which = S_CU_Q + corrupt % 6;
    if (which == S_ALIBI) which = S_CACHE_LENS;
    c->idx_vals[which][u8(r) % 64] = (int32_t)(int8_t)u8(r) * ((corrupt & 0x80) ? 1 << 24 : 1);
  }

  /* Back every tensor (the library may touch exactly what each describes). */
  uint64_t seed = u64(r);
  for (int i = 0; i < S_COUNT; ++i) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    if (!back(c, &s[i], seed)) {
      free_call(c);
      return 0;
    }
    if (s[i].index) store_index(&s[i], c->idx_vals[i], 64);
  }
  /* Aliasing now and then: an output made a view into another tensor's buffer, where it fits.
     The library must refuse the call when the two share a byte (FA_ERR_INVALID_ARGUMENT, naming
     them), and may run it when they do not (interleaved layouts). */
  int alias_o = -1, alias_j = -1, alias_shares = 0;
  const uint8_t ab = u8(r);
  if (ab && run) {
    static const int outs[] = {S_OUT, S_LSE, S_DQ, S_DK, S_DV, S_K, S_V};
    const int o = outs[ab % 7], j = (int)((ab >> 3) % S_COUNT);
    if (s[o].used && s[o].output && s[j].used && s[j].buf && !s[j].index &&
        alias_into(&s[o], &s[j], u64(r))) {
      alias_o = o, alias_j = j;
      alias_shares = shares_byte(&s[o], &s[j]);
      if (alias_shares < 0) {
        free_call(c);
        return 0;
      }
    }
  }
  /* NaN / Inf in an input now and then: propagated, never a crash. */
  const uint8_t nanb = u8(r);
  if (nanb && s[S_Q].buf && s[S_Q].t.dtype == FA_F32 && s[S_Q].bytes >= 4) {
    float v = (nanb & 1) ? NAN : ((nanb & 2) ? INFINITY : -INFINITY);
    memcpy(s[S_Q].buf + (nanb * 4u) % (s[S_Q].bytes & ~(size_t)3), &v, 4);
  }
  unsigned char *ws = decode_params(r, &pb, &p);
  p.cu_seqlens_q = s[S_CU_Q].used ? &s[S_CU_Q].t : NULL;
  p.cu_seqlens_k = s[S_CU_K].used ? &s[S_CU_K].t : NULL;
  p.seqused_k = s[S_USED].used ? &s[S_USED].t : NULL;
  p.block_table = s[S_TABLE].used ? &s[S_TABLE].t : NULL;
  p.alibi_slopes = s[S_ALIBI].used ? &s[S_ALIBI].t : NULL;
  p.q_descale = s[S_QDS].used ? &s[S_QDS].t : NULL;
  p.k_descale = s[S_KDS].used ? &s[S_KDS].t : NULL;
  p.v_descale = s[S_VDS].used ? &s[S_VDS].t : NULL;

  /* Versioned structs: the size the caller says is the size of the memory behind it. */
  _Alignas(16) unsigned char pbuf[sizeof(fa_params) + 64];
  memset(pbuf, 0, sizeof pbuf);
  memcpy(pbuf, &p, sizeof p);
  uint8_t f = u8(r);
  const fa_params *pp = (const fa_params *)(void *)pbuf;
  if (f % 8 == 1) {
    size_t sz = sizeof(fa_params) + 1 + u8(r) % 63;
    memcpy(pbuf, &sz, sizeof sz);
    if (f & 8) pbuf[sizeof(fa_params) + u8(r) % (sz - sizeof(fa_params))] = 1;
  } else if (f % 8 == 2) {
    size_t sz = u8(r) % sizeof(fa_params);
    memcpy(pbuf, &sz, sizeof sz);
  } else if (f % 8 == 3) {
    pp = NULL;
  }
  _Alignas(16) unsigned char ibuf[sizeof(fa_run_info) + 64];
  fa_run_info *info = (fa_run_info *)(void *)ibuf;
  fa_run_info_init(info);
  f = u8(r);
  if (f % 8 == 1) info->struct_size = sizeof(fa_run_info) + u8(r) % 64;
  if (f % 8 == 2) info->struct_size = u8(r) % sizeof(fa_run_info);
  if (f % 8 == 3 && !(c->op >= 3 && c->op <= 5)) info = NULL;
  _Alignas(16) unsigned char kvbuf[sizeof(fa_kvcache_args) + 32];
  memset(kvbuf, 0, sizeof kvbuf);
  fa_kvcache_args *kv = (fa_kvcache_args *)(void *)kvbuf;
  fa_kvcache_args_init(kv);
  kv->cache_seqlens = s[S_CACHE_LENS].used ? &s[S_CACHE_LENS].t : NULL;
  kv->k_new = s[S_KNEW].used ? &s[S_KNEW].t : NULL;
  kv->v_new = s[S_VNEW].used ? &s[S_VNEW].t : NULL;
  kv->rotary_cos = s[S_COS].used ? &s[S_COS].t : NULL;
  kv->rotary_sin = s[S_SIN].used ? &s[S_SIN].t : NULL;
  f = u8(r);
  kv->rotary_interleaved = f & 1;
  if (f & 2) kv->struct_size = (f & 4) ? sizeof(fa_kvcache_args) + 8 : u8(r) % 16;
  const fa_kvcache_args *kvp = (f & 8) && (f & 16) ? NULL : kv;
  /* A tensor the call never receives cannot overlap its outputs: the aliased one may sit in a
     struct the library reads only up to struct_size (the fields past it take their defaults),
     or in a struct not passed at all. */
  if (alias_o >= 0 && !call_receives(alias_j, pp, kvp, c->op % 3 == 2)) alias_shares = 0;

  const fa_tensor *t[S_COUNT];
  for (int i = 0; i < S_COUNT; ++i) t[i] = s[i].used ? &s[i].t : NULL;
  fa_tensor *w[S_COUNT];
  for (int i = 0; i < S_COUNT; ++i) w[i] = s[i].used ? &s[i].t : NULL;

  /* Snapshots of everything the call may write. */
  for (int i = 0; i < S_COUNT; ++i)
    if (s[i].buf && (s[i].output || run)) {
      s[i].snap = malloc(s[i].bytes);
      if (s[i].snap) memcpy(s[i].snap, s[i].buf, s[i].bytes);
    }

  /* The plan first: a run must fail exactly when it does (same status and message). */
  fa_run_info plan_info;
  fa_run_info_init(&plan_info);
  fa_status plan_st;
  size_t ws_bytes = 0;
  switch (c->op % 3 == 2 ? 2 : (bwd ? 1 : 0)) {
    case 0:
      plan_st = fa_plan_forward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], &plan_info);
      break;
    case 1:
      plan_st = fa_plan_backward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT], t[S_DQ],
                                 t[S_DK], t[S_DV], &plan_info);
      break;
    default:
      plan_st =
          fa_plan_forward_kvcache(pp, t[S_Q], t[S_K], t[S_V], kvp, t[S_OUT], t[S_LSE], &plan_info);
      break;
  }
  check_failure(plan_st, "plan");
  char plan_msg[FA_REASON_LEN];
  snprintf(plan_msg, sizeof plan_msg, "%s", fa_last_error());
  if (alias_o >= 0 && alias_shares && plan_st == FA_OK) {
    describe_slot("output", &s[alias_o]);
    describe_slot("other", &s[alias_j]);
    FAIL("slots %d and %d share memory but the plan accepts the call", alias_o, alias_j);
  }
  if (alias_o >= 0 && !alias_shares && plan_st != FA_OK && strstr(plan_msg, "share memory"))
    FAIL("slots %d and %d share no byte but the plan says: %s", alias_o, alias_j, plan_msg);
  if (plan_st == FA_OK && strcmp(plan_info.backend_name, "cpu") != 0)
    FAIL("plan chose '%s' for host memory", plan_info.backend_name);
  /* A run allocates the host scratch its plan reports (core/api.c) where no workspace is passed;
     tensors with zero strides can describe problems whose scratch no machine holds. Past the
     harness's budget the run is not made (ASan aborts an allocation above 1 TiB, libFuzzer one
     above its malloc limit, where the library itself would return FA_ERR_OUT_OF_MEMORY): the
     plan, checked above, stands for it. */
  if (run && plan_st == FA_OK && plan_info.workspace_bytes > FUZZ_RUN_SCRATCH_MAX) {
    free(ws);
    free_call(c);
    return 0;
  }

  fa_status st = FA_OK;
  const char *what = "call";
  switch (c->op) {
    case 0:
      what = "fa_forward";
      st = fa_forward(pp, t[S_Q], t[S_K], t[S_V], w[S_OUT], w[S_LSE], info);
      break;
    case 1:
      what = "fa_backward";
      st = fa_backward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT], w[S_DQ], w[S_DK],
                       w[S_DV], info);
      break;
    case 2:
      what = "fa_forward_kvcache";
      st = fa_forward_kvcache(pp, t[S_Q], w[S_K], w[S_V], kvp, w[S_OUT], w[S_LSE], info);
      break;
    case 3:
      what = "fa_plan_forward";
      st = fa_plan_forward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], info);
      break;
    case 4:
      what = "fa_plan_backward";
      st = fa_plan_backward(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT], t[S_DQ],
                            t[S_DK], t[S_DV], info);
      break;
    case 5:
      what = "fa_plan_forward_kvcache";
      st = fa_plan_forward_kvcache(pp, t[S_Q], t[S_K], t[S_V], kvp, t[S_OUT], t[S_LSE], info);
      break;
    case 6:
      what = "fa_forward_workspace_size";
      st = fa_forward_workspace_size(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], &ws_bytes);
      break;
    default:
      what = "fa_backward_workspace_size";
      st = fa_backward_workspace_size(pp, t[S_Q], t[S_K], t[S_V], t[S_OUT], t[S_LSE], t[S_DOUT],
                                      t[S_DQ], t[S_DK], t[S_DV], &ws_bytes);
      break;
  }
  check_failure(st, what);

  /* A run fails exactly when its plan does, with the same message, unless what failed is only
     knowable when running: the caller's workspace too small, or memory. The info struct is
     checked by the run call alone (the plan had its own). */
  const int info_bad = info && info->struct_size < sizeof(fa_run_info);
  if (run && !info_bad) {
    const int run_only = st == FA_ERR_OUT_OF_MEMORY || (st == FA_ERR_INVALID_ARGUMENT &&
                                                        strstr(fa_last_error(), "workspace_size"));
    if (!run_only && (st != plan_st || strcmp(plan_msg, fa_last_error()) != 0))
      FAIL("%s: status %d '%s' but its plan gave %d '%s'", what, st, fa_last_error(), plan_st,
           plan_msg);
  }
  if (!run && !info_bad && (c->op == 6 || c->op == 7) && st != plan_st)
    FAIL("%s: status %d but the plan's %d", what, st, plan_st);
  if (st == FA_OK && (c->op == 6 || c->op == 7) && ws_bytes != plan_info.workspace_bytes)
    FAIL("%s = %zu but the plan reports %zu", what, ws_bytes, plan_info.workspace_bytes);
  if (st == FA_OK && c->op <= 5 && info && !info_bad && strcmp(info->backend_name, "cpu") != 0)
    FAIL("%s succeeded on '%s'", what, info->backend_name);

  /* A failed call wrote nothing: every buffer it could reach is bitwise as before. */
  if (st != FA_OK)
    for (int i = 0; i < S_COUNT; ++i)
      if (s[i].snap && memcmp(s[i].snap, s[i].buf, s[i].bytes) != 0)
        FAIL("%s failed (%s: %s) but changed tensor slot %d", what, fa_status_string(st),
             fa_last_error(), i);
  /* Inputs are never written, whatever the outcome (kvcache writes its caches, an output); an
     output aliased into an input's buffer writes only its own bytes there. */
  if (run && st == FA_OK)
    for (int i = 0; i < S_COUNT; ++i) {
      if (!s[i].snap || s[i].output) continue;
      unsigned char *mask = i == alias_j ? footprint_of(&s[alias_o], s[i].bytes) : NULL;
      for (size_t b = 0; b < s[i].bytes; ++b)
        if (s[i].snap[b] != s[i].buf[b] && !(mask && mask[b]))
          FAIL("%s changed input slot %d", what, i);
      free(mask);
    }

  if (run && (c->op == 0 || c->op == 1)) fuzz_ring_check(c, pp, info, st);
  if (run && c->op == 0) fuzz_quantize_check(c, &pb);

  free(ws);
  free_call(c);
  return 0;
}
