/*
 * cuda_smoke.c: one small forward + backward on the CUDA backend through the public API, for
 * compute-sanitizer (memcheck, racecheck) on a GPU machine (tests/gpu/h200_check.sh runs it).
 *
 *   cuda_smoke [--dtype bf16|f16] [--hdim D] [--seqlen S] [--causal 0|1] [--deterministic]
 *              [--workspace-offset N] [--exhaust-memory]
 * With --workspace-offset the backward runs in a caller workspace that starts N bytes into a
 * device allocation (N = 4: misaligned on purpose; the backend must cope).
 * With --exhaust-memory (fault injection: the device allocation of the backward's workspace
 * failing), the device's memory is first taken by cudaMalloc until even 256 bytes fail; the
 * backward must then return FA_ERR_OUT_OF_MEMORY with a message naming the allocation and leave
 * dq/dk/dv as poisoned; the memory is given back and the same backward must succeed and pass the
 * checks below.
 *
 * Default: bf16, batch 2, 4 query heads over 2 KV heads (GQA), seqlen 100 (not a tile multiple),
 * head_dim 64, causal. Tensors live in CUDA memory (tools/device_mem), inputs random, outputs
 * poisoned. Checks: every call FA_OK with params.strict, the run reports name the kernel meant to
 * run (fa2, or fa3 on sm_90 where it applies),
 * out/lse/dq/dk/dv within the conformance suite's tolerance of a float64 reference, and the
 * device synchronizes without an error. Prints one line per check; exits 0 when all pass, 1 on
 * any failure, 77 when the CUDA backend is not available here (with the library's reason).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_mem.h"
#include "check_tally.h"
#include "cuda_backend.h"
#include "flash_attn.h"
#include "reference.h"
#include "tensor_util.h"

enum { T_Q, T_K, T_V, T_OUT, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_COUNT };
static const char *const names[T_COUNT] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!end || end == s || *end || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

int main(int argc, char **argv) {
  fa_dtype dtype = FA_BF16;
  long hd = 64, seqlen = 100, causal = 1;
  int deterministic = 0;
  long ws_offset = -1;
  void *ws_mem = NULL;
  int exhaust = 0;
  enum { MAX_HOG = 4096 };
  static void *hog[MAX_HOG];
  int n_hog = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1;
    if (!strcmp(a, "--deterministic")) {
      deterministic = 1;
      continue;
    }
    if (!strcmp(a, "--exhaust-memory")) {
      exhaust = 1;
      continue;
    }
    if (!v) {
      ok = 0;
    } else if (!strcmp(a, "--dtype")) {
      dtype = !strcmp(v, "f16") ? FA_F16 : FA_BF16;
      ok = !strcmp(v, "f16") || !strcmp(v, "bf16");
    } else if (!strcmp(a, "--hdim")) {
      ok = parse_int(v, 1, 1024, &hd);
    } else if (!strcmp(a, "--seqlen")) {
      ok = parse_int(v, 1, 1 << 20, &seqlen);
    } else if (!strcmp(a, "--causal")) {
      ok = parse_int(v, 0, 1, &causal);
    } else if (!strcmp(a, "--workspace-offset")) {
      ok = parse_int(v, 0, 255, &ws_offset);

    } else {
      ok = 0;
    }
    if (!ok) {
      fprintf(stderr,
              "usage: cuda_smoke [--dtype bf16|f16] [--hdim D] [--seqlen S] [--causal 0|1] "
              "[--deterministic] [--workspace-offset N] [--exhaust-memory]\n");
      return 2;
    }
    ++i;
  }

  /* Skip (77) where the CUDA backend cannot run, with the library's reason. */
  fa_backend_desc cuda_desc;
  const int unavailable = cuda_backend_or_skip(&cuda_desc);
  if (unavailable) return unavailable;
  const fa_backend_desc *cuda = &cuda_desc;
  printf("cuda_smoke: %s (%s); %s, b2 h4x2 s%ld d%ld %s%s\n", cuda->devices, cuda->arch,
         fa_dtype_name(dtype), seqlen, hd, causal ? "causal" : "non-causal",
         deterministic ? " deterministic" : "");

  const int64_t B = 2, HQ = 4, HKV = 2, S = seqlen, D = hd;
  const int64_t qs[4] = {B, S, HQ, D}, ks[4] = {B, S, HKV, D}, ls[3] = {B, HQ, S};
  const int64_t *shapes[T_COUNT] = {qs, ks, ks, qs, ls, qs, qs, ks, ks};
  tu_tensor t[T_COUNT];
  fa_tensor dv[T_COUNT];
  void *mem[T_COUNT] = {0};
  memset(t, 0, sizeof t);
  memset(dv, 0, sizeof dv);
  const fa_device dev = {FA_DEVICE_CUDA, 0};
  char err[256];
  ref_result r64, rn;
  memset(&r64, 0, sizeof r64);
  memset(&rn, 0, sizeof rn);
  unsigned char *masked[REF_NUM_OUTPUTS] = {0};

  tu_rng rng;
  tu_rng_init(&rng, 0x5eedu);
  for (int i = 0; i < T_COUNT; ++i) {
    if (tu_alloc(&t[i], i == T_LSE ? FA_F32 : dtype, i == T_LSE ? 3 : 4, shapes[i],
                 TU_CONTIGUOUS)) {
      check(0, "host allocation", names[i]);
      goto done;
    }
    if (i == T_Q || i == T_K || i == T_V || i == T_DOUT) tu_fill_random(&t[i], &rng);
    const size_t bytes = t[i].buf_elems * t[i].elem_bytes;
    if (devmem_alloc(dev, bytes, &mem[i], err, sizeof err) ||
        devmem_copy_to_device(dev, mem[i], t[i].buf, bytes, err, sizeof err)) {
      check(0, "device allocation and copy", err);
      goto done;
    }
    dv[i] = t[i].t;
    dv[i].data = mem[i];
    dv[i].device = dev;
  }

  fa_params params;
  fa_params_init(&params);
  params.backend = FA_BACKEND_CUDA;
  params.strict = 1;
  params.causal = (int32_t)causal;
  params.deterministic = deterministic;
  fa_run_info info;
  char detail[FA_REASON_LEN + 128];

  fa_run_info_init(&info);
  fa_status st = fa_forward(&params, &dv[T_Q], &dv[T_K], &dv[T_V], &dv[T_OUT], &dv[T_LSE], &info);
  snprintf(detail, sizeof detail, "%s %s", fa_status_string(st),
           st == FA_OK ? info.kernel : fa_last_error());
  check(st == FA_OK, "fa_forward", detail);
  if (st != FA_OK) goto done;
  /* FlashAttention-3 on sm_90 at its head dims, FlashAttention-2 otherwise (the exact
     rule is the conformance suite's to check). */
  check(strncmp(info.kernel, "cuda.fa2.", 9) == 0 || strncmp(info.kernel, "cuda.fa3.", 9) == 0,
        "forward kernel name starts with cuda.fa2 or cuda.fa3", info.kernel);
  const int fwd_fa3 = strncmp(info.kernel, "cuda.fa3.", 9) == 0;
  check(devmem_sync(dev, err, sizeof err) == 0, "synchronize after the forward", err);

  if (ws_offset >= 0) {
    size_t need = 0;
    st = fa_backward_workspace_size(&params, &dv[T_Q], &dv[T_K], &dv[T_V], &dv[T_OUT], &dv[T_LSE],
                                    &dv[T_DOUT], &dv[T_DQ], &dv[T_DK], &dv[T_DV], &need);
    check(st == FA_OK, "fa_backward_workspace_size", fa_last_error());
    if (st != FA_OK) goto done;
    if (devmem_alloc(dev, need + (size_t)ws_offset, &ws_mem, err, sizeof err)) {
      check(0, "workspace allocation", err);
      goto done;
    }
    params.workspace = (char *)ws_mem + ws_offset;
    params.workspace_size = need;
  }
  if (exhaust && ws_offset < 0) {
    /* Take the device's memory, largest pieces first, until even 256 bytes fail. */
    for (size_t chunk = (size_t)1 << 30; chunk >= 256 && n_hog < MAX_HOG;) {
      void *p = NULL;
      if (devmem_alloc(dev, chunk, &p, err, sizeof err) == 0)
        hog[n_hog++] = p;
      else
        chunk /= 2;
    }
    printf("cuda_smoke: device memory taken in %d allocations\n", n_hog);
    fa_run_info_init(&info);
    st = fa_backward(&params, &dv[T_Q], &dv[T_K], &dv[T_V], &dv[T_OUT], &dv[T_LSE], &dv[T_DOUT],
                     &dv[T_DQ], &dv[T_DK], &dv[T_DV], &info);
    snprintf(detail, sizeof detail, "%s: %s", fa_status_string(st), fa_last_error());
    check(st == FA_ERR_OUT_OF_MEMORY, "fa_backward without device memory: FA_ERR_OUT_OF_MEMORY",
          detail);
    check(strstr(fa_last_error(), "workspace") != NULL,
          "its message names the workspace allocation", fa_last_error());
    const int grads[3] = {T_DQ, T_DK, T_DV};
    for (int k = 0; k < 3; ++k) {
      const size_t bytes = t[grads[k]].buf_elems * t[grads[k]].elem_bytes;
      unsigned char *back = malloc(bytes);
      int same = back &&
                 devmem_copy_to_host(dev, back, mem[grads[k]], bytes, err, sizeof err) == 0 &&
                 memcmp(back, t[grads[k]].buf, bytes) == 0;
      free(back);
      char what[64];
      snprintf(what, sizeof what, "%s untouched by the failed backward", names[grads[k]]);
      check(same, what, same ? "still the poison pattern" : "changed or unreadable");
    }
    for (int i = 0; i < n_hog; ++i) devmem_free(dev, hog[i], err, sizeof err);
    n_hog = 0;
  }
  fa_run_info_init(&info);
  st = fa_backward(&params, &dv[T_Q], &dv[T_K], &dv[T_V], &dv[T_OUT], &dv[T_LSE], &dv[T_DOUT],
                   &dv[T_DQ], &dv[T_DK], &dv[T_DV], &info);
  snprintf(detail, sizeof detail, "%s %s", fa_status_string(st),
           st == FA_OK ? info.kernel : fa_last_error());
  check(st == FA_OK, "fa_backward", detail);
  if (st != FA_OK) goto done;
  /* The backward runs fa3's on sm_90 where fa3 ran the forward, at head dims 64, 96, 128, 192
     and 256 (deterministic too), with the device's whole shared memory (under FA_CUDA_SMEM_LIMIT
     either), else fa2's. */
  const int limited = getenv("FA_CUDA_SMEM_LIMIT") != NULL;
  const int want_fa3 = fwd_fa3 && (hd == 64 || hd == 96 || hd == 128 || hd == 192 || hd == 256);
  const int bwd_fa3 = strncmp(info.kernel, "cuda.fa3.sm90.bwd.", 18) == 0;
  check(want_fa3 ? bwd_fa3 || limited : strncmp(info.kernel, "cuda.fa2.", 9) == 0,
        want_fa3 ? "the backward runs cuda.fa3" : "the backward runs cuda.fa2", info.kernel);
  check(devmem_sync(dev, err, sizeof err) == 0, "synchronize after the backward", err);

  /* Kernel families by name: fa2's forward and backward run anywhere they are built; fa3 asked
     for the backward runs fa3's where it applies (above), else is refused with the reason,
     before anything is written. The reference checks below then check the gradients of the last
     backward, fa3's where it ran. */
  {
    fa_params named = params;
    named.kernel_family = "fa2";
    fa_run_info_init(&info);
    st = fa_forward(&named, &dv[T_Q], &dv[T_K], &dv[T_V], &dv[T_OUT], &dv[T_LSE], &info);
    snprintf(detail, sizeof detail, "%s %s", fa_status_string(st),
             st == FA_OK ? info.kernel : fa_last_error());
    check(st == FA_OK && strncmp(info.kernel, "cuda.fa2.", 9) == 0,
          "kernel_family fa2: the forward runs cuda.fa2", detail);
    fa_run_info_init(&info);
    st = fa_backward(&named, &dv[T_Q], &dv[T_K], &dv[T_V], &dv[T_OUT], &dv[T_LSE], &dv[T_DOUT],
                     &dv[T_DQ], &dv[T_DK], &dv[T_DV], &info);
    snprintf(detail, sizeof detail, "%s %s", fa_status_string(st),
             st == FA_OK ? info.kernel : fa_last_error());
    check(st == FA_OK && strncmp(info.kernel, "cuda.fa2.", 9) == 0,
          "kernel_family fa2: the backward runs cuda.fa2", detail);
    named.kernel_family = "fa3";
    st = fa_backward(&named, &dv[T_Q], &dv[T_K], &dv[T_V], &dv[T_OUT], &dv[T_LSE], &dv[T_DOUT],
                     &dv[T_DQ], &dv[T_DK], &dv[T_DV], &info);
    snprintf(detail, sizeof detail, "%s %s", fa_status_string(st),
             st == FA_OK ? info.kernel : fa_last_error());
    if (want_fa3 || limited)
      check((st == FA_OK && strncmp(info.kernel, "cuda.fa3.sm90.bwd.", 18) == 0) ||
                (limited && st == FA_ERR_UNSUPPORTED && strstr(fa_last_error(), "fa3") != NULL),
            "kernel_family fa3: the backward runs cuda.fa3", detail);
    else
      check(st == FA_ERR_UNSUPPORTED && strstr(fa_last_error(), "fa3") != NULL,
            "kernel_family fa3: the backward refused, naming fa3", detail);
    check(devmem_sync(dev, err, sizeof err) == 0, "synchronize after the named calls", err);
  }

  for (int i = 0; i < T_COUNT; ++i)
    if (devmem_copy_to_host(dev, t[i].buf, mem[i], t[i].buf_elems * t[i].elem_bytes, err,
                            sizeof err)) {
      check(0, "copy back", err);
      goto done;
    }

  ref_problem p;
  p.batch = B, p.seqlen_q = S, p.seqlen_k = S, p.heads_q = HQ, p.heads_kv = HKV;
  p.head_dim = D, p.head_dim_v = D;
  p.scale = ref_resolve_scale(0.0f, D);
  p.causal = (int)causal;
  p.causal_align = FA_CAUSAL_BOTTOM_RIGHT;
  if (ref_attention(&p, REF_F64, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &r64, 0) ||
      ref_attention(&p, REF_STORAGE, &t[T_Q], &t[T_K], &t[T_V], &t[T_DOUT], &rn, 0)) {
    check(0, "reference", "out of memory");
    goto done;
  }
  const int outs[5] = {T_OUT, T_LSE, T_DQ, T_DK, T_DV};
  const ref_which which[5] = {REF_OUT, REF_LSE, REF_DQ, REF_DK, REF_DV};
  for (int k = 0; k < 5; ++k) {
    masked[which[k]] = ref_masked_map(&p, which[k]);
    ref_check ck;
    ref_check_output(&t[outs[k]], &r64, &rn, which[k], masked[which[k]], dtype, &ck);
    snprintf(detail, sizeof detail, "max error %.3e, tolerance %.3e%s%s", ck.max_err, ck.tol,
             ck.broken ? "; " : "", ck.broken ? ck.why : "");
    char what[64];
    snprintf(what, sizeof what, "%s against the float64 reference", names[outs[k]]);
    check(ck.pass, what, detail);
  }

done:
  for (int i = 0; i < n_hog; ++i) devmem_free(dev, hog[i], err, sizeof err);
  if (ws_mem && devmem_free(dev, ws_mem, err, sizeof err)) check(0, "cudaFree", err);
  for (int i = 0; i < T_COUNT; ++i) {
    if (mem[i] && devmem_free(dev, mem[i], err, sizeof err)) check(0, "cudaFree", err);
    tu_free(&t[i]);
  }
  for (int w = 0; w < REF_NUM_OUTPUTS; ++w) free(masked[w]);
  ref_result_free(&r64);
  ref_result_free(&rn);
  fa_release();
  return check_summary("cuda_smoke");
}
