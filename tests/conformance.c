/*
 * conformance.c: the one suite every backend runs (its parts: tests/conformance/, listed in
 * conformance.h).
 *
 *   conformance --backend <cpu|cuda|hip|opencl> [--quick|--full] [--filter substr] [--list]
 *               [--require feature,feature,...] [--kernel-family F] [--kernel-prefix P]
 *               [--shard K/N]
 *
 * --quick (or FA_CONFORMANCE_QUICK=1) runs the cheapest cases that still cover every feature value;
 * the full list takes about a minute of CPU time in a Release build and about eight under
 * ASan+UBSan. --shard K/N runs part K of N of the selected cases (balanced by estimated cost).
 *
 * The suite sees the library only through api/flash_attn.h and the run report. Each case draws
 * fresh random inputs, poisons every output (gaps included), runs the forward without and with
 * lse, then the backward on the library's own out and lse, all with params.backend = the backend
 * and strict = 1, and checks:
 *   - every element of out, lse, dq, dk, dv by the pass rule of reference.h (at most twice the
 *     error of a naive computation in the storage dtype, plus a small floor, against float64);
 *     elements the mask alone decides must be exact (0, lse -inf);
 *   - nothing outside the logical elements written, inputs unchanged;
 *   - fa_run_info names this backend and a kernel whose name carries what the call's public facts
 *     determine (tests/conformance/kernels.c), and fa_plan_* named the same kernel for the same
 *     arguments.
 * A backend that is not available here prints "SKIP: <name>: <reason>" and exits 77.
 *
 * After the plain cases come the feature cases (tests/conformance/fcases.c): sliding window,
 * softcap, ALiBi, dropout, varlen, seqused_k, paged KV, split-KV, head dims up to 512,
 * deterministic mode and fa_forward_kvcache, each dtype, alone and combined.
 *
 * Skips. Every case (plain or feature) names what it needs in fa_backend_info's feature names: its
 * dtype (f32, f16, bf16), causal / causal_top_left, gqa / mqa, dv_ne_dk, hd256 (a head dim above
 * 128), hd512 (above 256), lse, bwd, and its features (window, softcap, ..., deterministic), plus
 * two layout properties of the data tensors (q, k, v, out, dout, gradients; lse and index tensors
 * may have any layout) that the suite probes itself at start-up, one fa_plan_forward each,
 * printed: strided_last_dim (the last dimension not contiguous) and unaligned (the first element
 * or a stride other than the last not a multiple of 16 bytes). The feature cases give their
 * tensors contiguous layouts where the backend refused a probe (fit_layout): they test features,
 * the plain cases layouts. The backend is asked with fa_plan_*
 * before the float64 reference, so a skip costs nothing. A case it refuses with
 * FA_ERR_UNSUPPORTED while some need is not listed (or probed as refused) is printed as
 * "SKIP <case>: <needs> not supported (<call>: <reason>)" and counted as skipped, never passed; a
 * need named by --require is never skipped (its refusal fails), and a refusal although every need
 * is listed fails. The run ends with "conformance: N passed, M failed, K skipped".
 *
 * Device backends: every tensor the library reads or writes (index and slope tensors included) is
 * put in the backend's memory through the DEVICE HOOK (tests/conformance/device.c), and copied
 * back whole before a check.
 *
 * --kernel-family F sets params.kernel_family = F in every call (a family the backend does not
 * know is refused, and counts as a skip or failure like any refusal; what a known family lacks,
 * need_family lists as "family:" needs, so its refusals of those cases are skips). --kernel-prefix
 * P: the kernel names expected on the cuda backend start with P instead of "cuda.fa3.sm90" or
 * "cuda.fa2.sm80" (the fields after it are the same), so the same binary checks a plugin standing
 * in for the CUDA backend, such as the HIP kernels' test plugin ("cuda.hipgen", or
 * "cuda.hipgen.mfma" with --kernel-family mfma; tests/gpu/h200_hip_generic.sh).
 *
 * Inputs are seeded per run (printed; FA_TEST_SEED replays) and per case name, so
 * "FA_TEST_SEED=<seed> conformance --backend cpu --filter <case>" reproduces one case exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/conformance.h"
#include "device_mem.h"

/* The layout probes (see the top of the file): one fa_plan_forward each on a small plain problem
   in the backend's memory, in the first dtype the backend lists, q, k, v and out in the probed
   layout (lse contiguous: the probes are about the data tensors). */
static void probe_layouts(backend_ctx *bk) {
  fa_dtype dt = FA_F32;
  if (list_has(bk->desc->features, "bf16"))
    dt = FA_BF16;
  else if (list_has(bk->desc->features, "f16"))
    dt = FA_F16;
  const int64_t qs[4] = {1, 128, 2, 64}, ls[3] = {1, 2, 128};
  for (int pr = 0; pr < P_COUNT; ++pr) {
    tu_tensor t[5];
    dev_tensor d[5];
    memset(t, 0, sizeof t);
    memset(d, 0, sizeof d);
    char err[256] = "";
    int bad = 0;
    for (int i = 0; i < 5 && !bad; ++i) {
      const int is_lse = i == 4;
      tu_layout l = tu_layout_of(TU_CONTIGUOUS, is_lse ? 3 : 4);
      if (pr == P_STRIDED_LAST_DIM && !is_lse) l.step = 2; /* rows stay 16-byte aligned */
      if (pr == P_UNALIGNED && !is_lse) l = tu_layout_of(TU_PADDED, 4);
      if (tu_alloc_layout(&t[i], is_lse ? FA_F32 : dt, is_lse ? 3 : 4, is_lse ? ls : qs, &l)) {
        snprintf(err, sizeof err, "out of memory");
        bad = 1;
      } else {
        if (!is_lse) {
          tu_rng rng;
          tu_rng_init(&rng, 1234u + (uint64_t)i);
          tu_fill_random(&t[i], &rng);
        }
        bad = dev_put(bk->ops, &d[i], &t[i], err, sizeof err) != 0;
      }
    }
    if (bad) {
      bk->probe_ok[pr] = 0;
      snprintf(bk->probe_why[pr], sizeof bk->probe_why[pr], "probe not run: %s", err);
    } else {
      fa_params params;
      fa_params_init(&params);
      params.backend = bk->id;
      params.strict = 1;
      params.kernel_family = bk->kernel_family;
      fa_run_info plan;
      fa_run_info_init(&plan);
      fa_status st = fa_plan_forward(&params, &d[0].view, &d[1].view, &d[2].view, &d[3].view,
                                     &d[4].view, &plan);
      bk->probe_ok[pr] = st == FA_OK;
      if (st == FA_OK)
        snprintf(bk->probe_why[pr], sizeof bk->probe_why[pr], "accepted (%s)", plan.kernel);
      else
        snprintf(bk->probe_why[pr], sizeof bk->probe_why[pr], "refused: %s: %s",
                 fa_status_string(st), fa_last_error());
    }
    for (int i = 0; i < 5; ++i) {
      bk->ops->release(&d[i]);
      tu_free(&t[i]);
    }
  }
}

/* ----------------------------------------------------------------------------------------------
 * --shard K/N: one of N parts of the selected cases, balanced by estimated cost (each case, most
 * costly first, goes to the part with the least cost so far), so that a slow run (the sanitizer
 * build's) can be spread over parallel CTest jobs. The parts are disjoint and together are the
 * whole selection; the split depends only on the case list, never on timing.
 * -------------------------------------------------------------------------------------------- */

/* Whether a case is in the run's selection (--quick, --filter), before any --shard. */
static int case_selected(const char *name, int case_quick, int quick, const char *filter) {
  return (!quick || case_quick) && (!filter || strstr(name, filter));
}

typedef struct shard_item {
  double cost;
  int list; /* 0: plain case, 1: feature case */
  int index;
} shard_item;

static int shard_item_cmp(const void *a, const void *b) {
  const shard_item *x = (const shard_item *)a, *y = (const shard_item *)b;
  if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
  if (x->list != y->list) return x->list - y->list;
  return x->index - y->index;
}

/* Marks in keep_l / keep_f (zeroed by the caller) the selected cases that fall in part k of n;
   returns 0, or -1 when out of memory. */
static int shard_select(const case_list *L, const fcase_list *F, int quick, const char *filter,
                        int k, int n, unsigned char *keep_l, unsigned char *keep_f) {
  shard_item *items = (shard_item *)malloc(sizeof(shard_item) * (size_t)(L->n + F->n + 1));
  double *load = (double *)calloc((size_t)n, sizeof(double));
  if (!items || !load) {
    free(items);
    free(load);
    return -1;
  }
  int m = 0;
  for (int i = 0; i < L->n; ++i)
    if (case_selected(L->v[i].name, L->v[i].quick, quick, filter))
      items[m++] = (shard_item){L->v[i].cost, 0, i};
  for (int i = 0; i < F->n; ++i)
    if (case_selected(F->v[i].name, F->v[i].quick, quick, filter))
      items[m++] = (shard_item){F->v[i].cost, 1, i};
  qsort(items, (size_t)m, sizeof *items, shard_item_cmp);
  for (int i = 0; i < m; ++i) {
    int best = 0;
    for (int p = 1; p < n; ++p)
      if (load[p] < load[best]) best = p;
    load[best] += items[i].cost;
    if (best == k) (items[i].list ? keep_f : keep_l)[items[i].index] = 1;
  }
  free(items);
  free(load);
  return 0;
}

/* ----------------------------------------------------------------------------------------------
 * main
 * -------------------------------------------------------------------------------------------- */

/* The description of backend id when it can run the suite here; else NULL, with *rc = 77 (the
   reason printed: not available, or a forced FA_CPU_ISA this machine cannot run) or 1. */
static const fa_backend_desc *backend_here(int32_t id, const char *backend, fa_backend_desc *descs,
                                           int32_t cap, int *rc) {
  int32_t count = 0;
  for (int32_t i = 0; i < cap; ++i) fa_backend_desc_init(&descs[i]);
  fa_status st = fa_backend_info(descs, cap, &count);
  if (st != FA_OK) {
    printf("conformance: fa_backend_info failed: %s: %s\n", fa_status_string(st), fa_last_error());
    printf("conformance: 0 passed, 1 failed, 0 skipped\n");
    *rc = 1;
    return NULL;
  }
  const fa_backend_desc *desc = NULL;
  for (int32_t i = 0; i < count && i < cap; ++i)
    if (descs[i].id == id) desc = &descs[i];
  *rc = 77;
  if (!desc || !desc->available) {
    printf("SKIP: %s: %s\n", backend, desc ? desc->reason : "not known to this library");
    return NULL;
  }
  /* FA_CPU_ISA=avx512bf16 on a CPU without AVX512-BF16 would run the AVX-512 build again: not
     what the caller asked to test, so skipped with the reason. */
  const char *forced_isa = getenv("FA_CPU_ISA");
  if (id == FA_BACKEND_CPU && forced_isa && strcmp(forced_isa, "avx512bf16") == 0 &&
      strcmp(cpu_expected_isa_for("fwd", FA_BF16, 64, 64), "avx512bf16") != 0) {
    printf(
        "SKIP: cpu: FA_CPU_ISA=avx512bf16 but this CPU has no AVX512-BF16 (CPUID 7.1 EAX "
        "bit 5) or no AVX-512 build runs here\n");
    return NULL;
  }
  /* FA_CPU_ISA=amx where AMX cannot run: the backend refuses every call with the reason, which
     its device line gives (real AMX, or the test plugin's C model of it, says "amx: in use"). */
  if (id == FA_BACKEND_CPU && forced_isa && strcmp(forced_isa, "amx") == 0 &&
      !strstr(desc->devices, "amx: in use")) {
    printf("SKIP: cpu: FA_CPU_ISA=amx but AMX does not run here (%s)\n", desc->devices);
    return NULL;
  }
  *rc = 0;
  return desc;
}

static void usage(void) {
  fprintf(stderr,
          "usage: conformance --backend <cpu|cuda|hip|opencl> [--quick|--full] [--filter substr] "
          "[--list] [--require f1,f2,...] [--kernel-family F] [--kernel-prefix P] [--shard K/N]\n"
          "  --quick   a subset that still covers every feature (also FA_CONFORMANCE_QUICK=1)\n"
          "  --full    every case (the default)\n"
          "  --shard K/N  part K (0-based) of N of the selected cases, balanced by estimated cost\n"
          "  --require needs whose cases must not be skipped: fa_backend_info's feature names\n"
          "            (window,softcap,alibi,dropout,varlen,paged_kv,split_kv,kvcache,hd512,\n"
          "            deterministic,f32,dv_ne_dk,...) or the suite's layout probes\n"
          "            (strided_last_dim,unaligned)\n"
          "  --kernel-family  params.kernel_family of every call\n"
          "  --kernel-prefix  the prefix of the cuda backend's kernel names (default "
          "cuda.fa3.sm90 where fa3\n"
          "            applies: sm_90, head dims 64, 96, 128, 192, 256, no softcap; else "
          "cuda.fa2.sm80)\n"
          "  FA_TEST_SEED=<n> replays a run's inputs; FA_TEST_THREADS sets reference threads\n");
}

int main(int argc, char **argv) {
  const char *backend = NULL, *filter = NULL, *require = NULL, *family = NULL;
  const char *cuda_prefix = NULL; /* NULL: the names kernels.c derives */
  /* FA_CONFORMANCE_QUICK=1 picks the subset where a command line cannot be changed (CTest). */
  const char *env_quick = getenv("FA_CONFORMANCE_QUICK");
  int quick = env_quick && *env_quick && strcmp(env_quick, "0") != 0, list = 0;
  int shard_k = 0, shard_n = 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      backend = argv[++i];
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
      filter = argv[++i];
    else if (!strcmp(argv[i], "--require") && i + 1 < argc)
      require = argv[++i];
    else if (!strcmp(argv[i], "--kernel-family") && i + 1 < argc)
      family = argv[++i];
    else if (!strcmp(argv[i], "--kernel-prefix") && i + 1 < argc)
      cuda_prefix = argv[++i];
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--full"))
      quick = 0;
    else if (!strcmp(argv[i], "--list"))
      list = 1;
    else if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
      char end = 0;
      if (sscanf(argv[++i], "%d/%d%c", &shard_k, &shard_n, &end) != 2 || shard_n < 1 ||
          shard_n > 64 || shard_k < 0 || shard_k >= shard_n) {
        fprintf(stderr, "conformance: --shard '%s': expected K/N with 0 <= K < N <= 64\n", argv[i]);
        return 2;
      }
    } else {
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

  int rc = 0;
  case_list L = {0};
  build_cases(&L);
  mark_quick(&L);
  fcase_list F = {0};
  build_fcases(&F);
  mark_fquick(&F);
  /* --shard: the selection's part; NULL keeps every selected case. */
  unsigned char *keep_l = NULL, *keep_f = NULL;
  if (shard_n > 1) {
    keep_l = (unsigned char *)calloc((size_t)L.n + 1, 1);
    keep_f = (unsigned char *)calloc((size_t)F.n + 1, 1);
    if (!keep_l || !keep_f ||
        shard_select(&L, &F, quick, filter, shard_k, shard_n, keep_l, keep_f) != 0) {
      fprintf(stderr, "conformance: out of memory\n");
      rc = 1;
      goto out;
    }
  }
  if (list) {
    for (int i = 0; i < L.n; ++i)
      if (case_selected(L.v[i].name, L.v[i].quick, quick, filter) && (!keep_l || keep_l[i]))
        printf("%-56s cost %.2e%s\n", L.v[i].name, L.v[i].cost, L.v[i].quick ? "  quick" : "");
    for (int i = 0; i < F.n; ++i)
      if (case_selected(F.v[i].name, F.v[i].quick, quick, filter) && (!keep_f || keep_f[i]))
        printf("%-56s cost %.2e%s\n", F.v[i].name, F.v[i].cost, F.v[i].quick ? "  quick" : "");
    goto out;
  }

  /* Skip (77) when the backend cannot run here, with the library's own reason. */
  fa_backend_desc descs[FA_BACKEND_COUNT_ + 4];
  const fa_backend_desc *desc =
      backend_here(id, backend, descs, (int32_t)(sizeof descs / sizeof descs[0]), &rc);
  if (!desc) goto out;

  backend_ctx bk;
  memset(&bk, 0, sizeof bk);
  bk.id = id;
  bk.name = desc->name;
  bk.desc = desc;
  bk.require = require;
  bk.kernel_family = family;
  bk.cuda_prefix = cuda_prefix;
  bk.cuda_fa3 = cuda_fa3_device(desc, family);
  bk.cuda_sm90 = cuda_sm90_device(desc);
  fa_device_kind kind = id == FA_BACKEND_CPU    ? FA_DEVICE_CPU
                        : id == FA_BACKEND_CUDA ? FA_DEVICE_CUDA
                        : id == FA_BACKEND_HIP  ? FA_DEVICE_HIP
                                                : FA_DEVICE_OPENCL;
  bk.ops = dev_ops_for(kind);

  const uint64_t seed = tu_run_seed();
  printf("conformance: backend %s (%s; %s), %s, seed %llu%s\n", bk.name, desc->devices, desc->arch,
         quick ? "quick subset" : "all cases", (unsigned long long)seed,
         tu_seed_was_fixed() ? " (FA_TEST_SEED)" : "");
  if (shard_n > 1) printf("conformance: shard %d of %d (0-based)\n", shard_k, shard_n);
  printf("conformance: features: %s\n", desc->features);
  if (kind != FA_DEVICE_CPU) {
    /* The device every tensor goes to (the backend's default device, see the DEVICE HOOK). */
    fa_device dev;
    char err[256], name[256] = "";
    if (devmem_default_device(kind, &dev, err, sizeof err))
      printf("conformance: tensors: no device: %s\n", err);
    else if (devmem_device_name(dev, name, sizeof name, err, sizeof err))
      printf("conformance: tensors on %s:%d (%s)\n", fa_device_kind_name((int32_t)kind),
             (int)dev.id, err);
    else
      printf("conformance: tensors on %s:%d, %s\n", fa_device_kind_name((int32_t)kind), (int)dev.id,
             name);
  }
  probe_layouts(&bk);
  for (int pr = 0; pr < P_COUNT; ++pr)
    printf("conformance: layout probe %s: %s\n", probe_names[pr], bk.probe_why[pr]);
  if (require) printf("conformance: required features: %s\n", require);
  printf("case%*s  max error/tolerance per output%*s  time\n", 47, "", 20, "");
  fflush(stdout);

  const double t0 = now_s();
  int counts[3] = {0, 0, 0}; /* by result: R_FAIL, R_PASS, R_SKIP */
  for (int i = 0; i < L.n; ++i) {
    const conf_case *c = &L.v[i];
    if (!case_selected(c->name, c->quick, quick, filter) || (keep_l && !keep_l[i])) continue;
    ++counts[run_case(c, &bk, seed)];
  }
  frun R;
  memset(&R, 0, sizeof R);
  R.bk = &bk;
  for (int i = 0; i < F.n; ++i) {
    const fcase *c = &F.v[i];
    if (!case_selected(c->name, c->quick, quick, filter) || (keep_f && !keep_f[i])) continue;
    ++counts[c->kvc   ? run_kvcase(c, &R, seed)
             : c->fp8 ? run_fp8case(c, &R, seed)
                      : run_fcase(c, &R, seed)];
  }
  fa_release();
  printf("conformance: %.1f s, seed %llu\n", now_s() - t0, (unsigned long long)seed);
  if (counts[R_PASS] + counts[R_FAIL] + counts[R_SKIP] == 0) {
    /* A mistyped --filter must not look like a clean run. */
    printf("conformance: no case matches%s%s\n", filter ? " the filter " : "",
           filter ? filter : "");
    printf("conformance: 0 passed, 1 failed, 0 skipped\n");
    rc = 1;
  } else {
    printf("conformance: %d passed, %d failed, %d skipped\n", counts[R_PASS], counts[R_FAIL],
           counts[R_SKIP]);
    rc = counts[R_FAIL] ? 1 : 0;
  }
out:
  free(L.v);
  free(F.v);
  free(keep_l);
  free(keep_f);
  return rc;
}
