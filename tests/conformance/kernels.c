/*
 * kernels.c: the kernel a call must report, derived from public facts only: the call's arguments,
 * fa_backend_info's description of the backend (kernel families, devices), the documented naming
 * rules, and the CPU's own features asked here independently of the plugin. The run report must
 * also name what fa_plan_* named for the same arguments.
 *
 *   cpu     "cpu.flash.<isa>.<op>.<dtype>.hd<D>[x<DV>][.rows<N>][.causal][.window][.softcap]
 *           [.alibi][.dropout][.varlen][.paged][.split<S>]"
 *   cuda    "cuda.<family>.<op>.<dtype>.hd<D>[.causal][.window][.softcap][.gqa<P>]": family
 *           "fa3.sm90" where fa3 applies (docs/backends.md: listed in kernel_families, an sm_90
 *           device not run as sm_80, head dims 64, 96, 128, 192 and 256, no softcap, at least one
 *           key, the backward at least one query row, kernel_family not fa2), else "fa2.sm80";
 *           ".gqa<P>" (fa3 forwards only) packs P query heads of a group in a tile, P a power of
 *           two dividing heads_q / heads_kv. --kernel-prefix replaces "cuda.<family>". The
 *           forward over sequences (varlen, seqused_k, paged K/V, num_splits > 1) is
 *           "cuda.fa3.sm90.fwd.<dtype>.hd<D>[.causal][.window][.varlen][.gqa<P>]" where fa3
 *           applies and takes it (no paged K/V, no num_splits > 1; the longest sequence 128
 *           query rows or more, or kernel_family fa3), else
 *           "cuda.fa2.sm80.fwd.<dtype>.hd<D>[.rows16][.causal][.window][.softcap][.varlen]
 *           [.paged][.split<S>][.gqa<P>]", ".rows16" (the decoding kernel) allowed where a
 *           step's rows (query positions x packed heads) fit 16, dense forwards included, as
 *           ".rows16.bulk" on sm_90 above head dim 192 and over paged caches above 128,
 *           ".rows16.halves" elsewhere above head dim 192.
 *           The backward over sequences (varlen, seqused_k) is fa3's
 *           "cuda.fa3.sm90.bwd.<dtype>.hd<D>[.causal][.window][.varlen]" where fa3 applies at
 *           head dims 64, 96 and 128 without deterministic mode, else fa2's.
 *   opencl  "opencl.flash.<op>.<dtype>.hd<D>[.causal][.window][.softcap]"
 *
 * Ops whose naming the suite does not know (kvcache on cuda and opencl, any op of another
 * backend) are held to the "<backend>." prefix only. Where a testing knob makes the cuda device
 * behave like a smaller GPU (FA_CUDA_SMEM_LIMIT), either family may run; the rest of the name is
 * still checked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif

#include "conformance.h"
#include "test_cpu_amx.h"

/* The CPU kernel build meant to run: the widest this CPU has (asked here independently of the
   plugin, so a wrong choice in the plugin is caught), or a narrower one forced by FA_CPU_ISA. */
static const char *cpu_expected_isa(void) {
  static const char *const widest_first[] = {"avx512", "avx2", "neon", "generic"};
  int best = 3;
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    best = 0;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c"))
    best = 1;
#elif defined(__aarch64__)
  best = 2; /* the NEON build: every AArch64 CPU runs it */
#endif
  const char *forced = getenv("FA_CPU_ISA");
  for (int r = best; forced && *forced && r < 4; ++r)
    if (strcmp(forced, widest_first[r]) == 0) return widest_first[r];
  return widest_first[best];
}

#if defined(__GNUC__) && defined(__x86_64__)
/* Whether the CPU backend's device line says its AMX table is in use: FA_CPU_ISA=amx, or by
   default on a CPU and OS that run AMX (asked once). */
static int cpu_amx_running(void) {
  static int known = -1;
  if (known < 0) {
    char line[sizeof(((fa_backend_desc *)0)->devices)];
    cpu_device_line(line, sizeof line);
    known = cpu_line_says_amx(line);
  }
  return known;
}
#endif

/* The build named for one call: FA_CPU_ISA=avx512bf16 (asked for by name only) runs the bf16
   products in fa_forward on bf16 with even head dims, on a CPU with AVX512-BF16 (CPUID leaf 7
   subleaf 1, EAX bit 5); everything else runs and is named as the AVX-512 build.
   FA_CPU_ISA=amx (by name only; the suite skips when the backend's device line does not say AMX
   is in use, since the backend then refuses every call) runs the same products on AMX-BF16 tiles
   in fa_forward and in fa_backward, on bf16 with even head dims, named amx; everything else
   (f32, f16, odd head dims, fa_forward_kvcache) runs and is named as the AVX-512 build. With
   FA_CPU_ISA unset the backend takes the AMX table wherever AMX runs: the same names. */
const char *cpu_expected_isa_for(const char *op, fa_dtype dt, int64_t d, int64_t dv) {
  const char *isa = cpu_expected_isa();
  const char *forced = getenv("FA_CPU_ISA");
#if defined(__GNUC__) && defined(__x86_64__)
  unsigned a = 0, b, c, dd;
  const int bf16_pairs = dt == FA_BF16 && d % 2 == 0 && dv % 2 == 0;
  if (!strcmp(isa, "avx512") && forced && !strcmp(forced, "avx512bf16") &&
      __get_cpuid_count(7, 1, &a, &b, &c, &dd) && (a & (1u << 5)) && !strcmp(op, "fwd") &&
      bf16_pairs)
    return "avx512bf16";
  const int amx = forced && *forced ? !strcmp(forced, "amx") : cpu_amx_running();
  if (!strcmp(isa, "avx512") && amx && bf16_pairs && (!strcmp(op, "fwd") || !strcmp(op, "bwd")))
    return "amx";
#else
  (void)op, (void)dt, (void)d, (void)dv, (void)forced;
#endif
  return isa;
}

int cuda_sm90_device(const fa_backend_desc *desc) {
  return !strcmp(desc->name, "cuda") && strstr(desc->devices, "(sm_90") &&
         !strstr(desc->devices, "run as sm_80");
}

int cuda_fa3_device(const fa_backend_desc *desc, const char *family) {
  return cuda_sm90_device(desc) && list_has(desc->kernel_families, "fa3") &&
         !(family && !strcmp(family, "fa2"));
}

int cuda_fa3_bwd_seqs_takes(int64_t d, int masked, int named_fa3) {
  return d == 64 || d == 96 || d == 128 || ((d == 192 || d == 256) && (!masked || named_fa3));
}

int cuda_fa3_gaps(int bwd, int64_t d, int64_t dv, int64_t sq, int64_t sk, float softcap) {
  int gaps = 0;
  if (sk == 0 || (bwd && sq == 0)) gaps |= FA3_GAP_EMPTY;
  if (softcap > 0.0f) gaps |= FA3_GAP_SOFTCAP;
  if (d != dv || !(d == 64 || d == 96 || d == 128 || d == 192 || d == 256))
    gaps |= FA3_GAP_HEAD_DIM;
  return gaps;
}

/* What a call may report: one of n names, each possibly followed by ".gqa<P>" where allowed. */
typedef struct kernel_expect {
  int n; /* 0: the naming is not known: only "<backend>." is checked */
  char name[4][FA_KERNEL_LEN];
  int gqa[4];    /* name[i] may end in ".gqa<P>" */
  int64_t group; /* heads_q / heads_kv */
} kernel_expect;

kernel_facts facts_of_case(const conf_case *c, int bwd) {
  kernel_facts k;
  memset(&k, 0, sizeof k);
  k.op = bwd ? "bwd" : "fwd";
  k.dtype = c->dtype;
  k.hq = c->hq, k.hkv = c->hkv, k.sq = c->sq, k.sk = c->sk, k.d = c->d, k.dv = c->dv;
  k.causal = c->cm != CM_NONE;
  return k;
}

kernel_facts facts_of_fcase(const fcase *c, const char *op) {
  kernel_facts k;
  memset(&k, 0, sizeof k);
  k.op = op;
  k.dtype = c->fp8 ? c->fp8 : c->dtype; /* the inputs' dtype names the kernel */
  k.hq = c->hq, k.hkv = c->hkv, k.sq = fc_max_q(c), k.sk = fc_max_k(c), k.d = c->d, k.dv = c->dv;
  k.causal = c->cm != CM_NONE;
  k.window = c->win;
  k.softcap = c->softcap > 0.0f;
  k.alibi = c->alibi != 0;
  k.dropout = c->dropout > 0.0f;
  k.varlen = c->varlen;
  k.paged = c->page > 0;
  k.seqused = c->seqused != 0;
  k.determ = c->determ != 0;
  /* fa_forward_kvcache's few-query-rows path on the CPU: at most 16 query rows, every head's rows
     in one task of at most 128, head dims multiples of 16 (the suite's caches have contiguous
     rows). */
  k.rows_path = c->kvc && c->sq <= 16 && c->hq * c->sq <= 128 && c->d % 16 == 0 && c->dv % 16 == 0;
  return k;
}

static void cpu_expect(const kernel_facts *k, int splits, kernel_expect *e) {
  char hd[32], split[24] = "", rows[24] = "";
  if (k->d == k->dv)
    snprintf(hd, sizeof hd, "%lld", (long long)k->d);
  else
    snprintf(hd, sizeof hd, "%lldx%lld", (long long)k->d, (long long)k->dv);
  if (splits > 1) snprintf(split, sizeof split, ".split%d", splits);
  if (k->rows_path) snprintf(rows, sizeof rows, ".rows%lld", (long long)(k->hq * k->sq));
  snprintf(e->name[0], sizeof e->name[0], "cpu.flash.%s.%s.%s.hd%s%s%s%s%s%s%s%s%s%s",
           cpu_expected_isa_for(k->op, k->dtype, k->d, k->dv), k->op, tu_dtype_name(k->dtype), hd,
           rows, k->causal ? ".causal" : "", k->window ? ".window" : "",
           k->softcap ? ".softcap" : "", k->alibi ? ".alibi" : "", k->dropout ? ".dropout" : "",
           k->varlen ? ".varlen" : "", k->paged ? ".paged" : "", split);
  e->n = 1;
}

/* "<op>.<dtype>.hd<D>[.causal][.window][.softcap]": what the GPU backends' names end in. */
static void gpu_suffix(const kernel_facts *k, char *buf, size_t n) {
  snprintf(buf, n, "%s.%s.hd%lld%s%s%s", k->op, tu_dtype_name(k->dtype), (long long)k->d,
           k->causal ? ".causal" : "", k->window ? ".window" : "", k->softcap ? ".softcap" : "");
}

/* Whether the CUDA forward over sequences may run its decoding kernel (docs/backends.md): the
   rows of a step, the query positions times the packed heads (the largest power of two dividing
   the group whose rows fit 64), within 16. Its shared memory must fit the device too, which the
   suite does not model: the name is allowed, not required. */
static int cuda_decode_rows(const kernel_facts *k) {
  const int64_t group = k->hkv > 0 ? k->hq / k->hkv : 1;
  int64_t pack = 1;
  while (group % (2 * pack) == 0 && k->sq * 2 * pack <= 64) pack *= 2;
  return k->sq * pack <= 16;
}

/* The head dim the cuda kernels over sequences are built for: d padded to 32. */
static int64_t cuda_padded_hd(int64_t d) { return (d + 31) / 32 * 32; }

/* Whether the decoding kernel stages K and V as halves (docs/backends.md): at head dims that pad
   (to 32) above 192. */
static int cuda_decode_halves(int64_t d) { return cuda_padded_hd(d) > 192; }

/* The forward over sequences' name: ".rows16" (".rows16.halves"; ".rows16.bulk" for the bulk-copy
   form) after the head dim for the decoding kernel, then the mask, ".varlen", ".paged" and
   ".split<S>" (".gqa<P>" allowed after it). */
static void cuda_seqs_name(const kernel_facts *k, const char *suffix, int splits, int rows16,
                           int bulk, char *out, size_t n) {
  char split[24] = "", hd[24];
  if (splits > 1) snprintf(split, sizeof split, ".split%d", splits);
  snprintf(hd, sizeof hd, ".hd%lld", (long long)k->d);
  /* suffix is "<op>.<dtype>.hd<D><mask>": the mask part follows the head dim. */
  const char *after_hd = strstr(suffix, hd) + strlen(hd);
  snprintf(out, n, "cuda.fa2.sm80.%.*s%s%s%s%s%s", (int)(after_hd - suffix), suffix,
           !rows16                    ? ""
           : bulk                     ? ".rows16.bulk"
           : cuda_decode_halves(k->d) ? ".rows16.halves"
                                      : ".rows16",
           after_hd, k->varlen ? ".varlen" : "", k->paged ? ".paged" : "", split);
}

/* Adds the decoding kernel's names: its bulk-copy form on sm_90 above head dim 192 and over paged
   caches above 128 (docs/backends.md; head dims padded to 32), either form where the shared
   memory is limited below what the bulk form takes. */
static void cuda_decode_names(const backend_ctx *bk, const kernel_facts *k, const char *suffix,
                              int splits, int smaller_gpu, kernel_expect *e) {
  const int64_t hd = cuda_padded_hd(k->d);
  const int want = bk->cuda_sm90 && (hd > 192 || (k->paged && hd > 128));
  for (int bulk = want; bulk >= (smaller_gpu ? 0 : want); --bulk) {
    cuda_seqs_name(k, suffix, splits, 1, bulk, e->name[e->n], sizeof e->name[0]);
    e->gqa[e->n++] = 1;
  }
}

static void cuda_expect(const backend_ctx *bk, const kernel_facts *k, int splits,
                        kernel_expect *e) {
  const int fwd = !strcmp(k->op, "fwd");
  if (!fwd && strcmp(k->op, "bwd") != 0) return;
  char suffix[FA_KERNEL_LEN];
  gpu_suffix(k, suffix, sizeof suffix);
  const int decode = fwd && cuda_decode_rows(k);
  const char *limit = getenv("FA_CUDA_SMEM_LIMIT");
  const int smaller_gpu =
      (limit && *limit) || strstr(bk->desc->devices, "shared memory limited") != NULL;
  /* The forward over sequences: fa3's where it takes it, else fa2's. */
  if (fwd && (k->varlen || k->paged || k->seqused || splits > 1)) {
    const int named_fa3 = bk->kernel_family && !strcmp(bk->kernel_family, "fa3");
    const int fa3 = bk->cuda_fa3 && !k->paged && splits <= 1 &&
                    !cuda_fa3_gaps(0, k->d, k->dv, k->sq, k->sk, k->softcap ? 1.0f : 0.0f) &&
                    (k->sq >= 128 || named_fa3);
    e->n = 0;
    if (fa3) {
      snprintf(e->name[0], sizeof e->name[0], "cuda.fa3.sm90.%s%s", suffix,
               k->varlen ? ".varlen" : "");
      e->gqa[e->n++] = 1;
      if (!smaller_gpu) return;
    }
    cuda_seqs_name(k, suffix, splits, 0, 0, e->name[e->n], sizeof e->name[0]);
    e->gqa[e->n++] = 1;
    if (decode) cuda_decode_names(bk, k, suffix, splits, smaller_gpu, e);
    return;
  }
  /* The backward over sequences (varlen, seqused_k): fa3's kernels (head dims 64, 96, 128, and
     192 and 256 without a mask or with fa3 named; not deterministic) where fa3 applies, else
     fa2's kernel over sequences. */
  if (!fwd && (k->varlen || k->seqused)) {
    const int named_fa3 = bk->kernel_family && !strcmp(bk->kernel_family, "fa3");
    const int fa3 =
        bk->cuda_fa3 && cuda_fa3_bwd_seqs_takes(k->d, k->causal || k->window, named_fa3) &&
        !k->determ && !cuda_fa3_gaps(1, k->d, k->dv, k->sq, k->sk, k->softcap ? 1.0f : 0.0f);
    e->n = 0;
    if (fa3)
      snprintf(e->name[e->n++], sizeof e->name[0], "cuda.fa3.sm90.%s%s", suffix,
               k->varlen ? ".varlen" : "");
    if (!fa3 || smaller_gpu)
      snprintf(e->name[e->n++], sizeof e->name[0], "cuda.fa2.sm80.%s%s", suffix,
               k->varlen ? ".varlen" : "");
    return;
  }
  if (bk->cuda_prefix) {
    snprintf(e->name[0], sizeof e->name[0], "%s.%s", bk->cuda_prefix, suffix);
    e->gqa[0] = fwd && !strcmp(bk->cuda_prefix, "cuda.fa3.sm90");
    e->n = 1;
    return;
  }
  const int fa3 =
      bk->cuda_fa3 && !cuda_fa3_gaps(!fwd, k->d, k->dv, k->sq, k->sk, k->softcap ? 1.0f : 0.0f);
  e->n = 0;
  if (fa3) {
    snprintf(e->name[e->n], sizeof e->name[0], "cuda.fa3.sm90.%s", suffix);
    e->gqa[e->n++] = fwd;
  }
  if (!fa3 || smaller_gpu) snprintf(e->name[e->n++], sizeof e->name[0], "cuda.fa2.sm80.%s", suffix);
  /* A dense decoding step runs the decoding kernel where its shared memory fits. */
  if (decode) cuda_decode_names(bk, k, suffix, splits, smaller_gpu, e);
}

static void opencl_expect(const kernel_facts *k, kernel_expect *e) {
  if (strcmp(k->op, "fwd") != 0 && strcmp(k->op, "bwd") != 0) return;
  char suffix[FA_KERNEL_LEN];
  gpu_suffix(k, suffix, sizeof suffix);
  snprintf(e->name[0], sizeof e->name[0], "opencl.flash.%s", suffix);
  e->n = 1;
}

/* Whether rest is ".gqa<P>" with P a power of two >= 2 dividing group. */
static int gqa_suffix(const char *rest, int64_t group) {
  if (strncmp(rest, ".gqa", 4) != 0 || rest[4] < '1' || rest[4] > '9') return 0;
  int64_t p = 0;
  for (const char *s = rest + 4; *s; ++s) {
    if (*s < '0' || *s > '9' || p > group) return 0;
    p = 10 * p + (*s - '0');
  }
  return p >= 2 && (p & (p - 1)) == 0 && group % p == 0;
}

static int expect_matches(const kernel_expect *e, const char *got) {
  for (int i = 0; i < e->n; ++i) {
    const size_t n = strlen(e->name[i]);
    if (strncmp(got, e->name[i], n) != 0) continue;
    if (got[n] == '\0' || (e->gqa[i] && gqa_suffix(got + n, e->group))) return 1;
  }
  return 0;
}

void check_info(report *rep, const backend_ctx *bk, const kernel_facts *k, const char *call,
                const fa_run_info *info, const fa_run_info *plan) {
  if (info->backend != bk->id || strcmp(info->backend_name, bk->name) != 0)
    fail(rep, "%s: run info says backend %d \"%s\", expected %d \"%s\"", call, info->backend,
         info->backend_name, bk->id, bk->name);
  kernel_expect e;
  memset(&e, 0, sizeof e);
  e.group = k->hkv > 0 ? k->hq / k->hkv : 1;
  if (!strcmp(bk->name, "cpu"))
    cpu_expect(k, info->num_splits, &e);
  else if (!strcmp(bk->name, "cuda"))
    cuda_expect(bk, k, info->num_splits, &e);
  else if (!strcmp(bk->name, "opencl"))
    opencl_expect(k, &e);
  if (e.n) {
    if (!expect_matches(&e, info->kernel))
      fail(rep, "%s: kernel \"%s\", expected \"%s\"%s%s%s%s%s%s%s", call, info->kernel, e.name[0],
           e.gqa[0] ? " (.gqa<P> allowed)" : "", e.n > 1 ? " or \"" : "", e.n > 1 ? e.name[1] : "",
           e.n > 1 ? "\"" : "", e.n > 2 ? " or \"" : "", e.n > 2 ? e.name[2] : "",
           e.n > 2 ? "\"" : "");
  } else {
    size_t n = strlen(bk->name);
    if (strncmp(info->kernel, bk->name, n) != 0 || info->kernel[n] != '.')
      fail(rep, "%s: kernel \"%s\" does not start with \"%s.\"", call, info->kernel, bk->name);
  }
  if (info->num_splits < 1) fail(rep, "%s: run info num_splits = %d", call, info->num_splits);
  if (plan && (strcmp(plan->kernel, info->kernel) != 0 || plan->backend != info->backend ||
               plan->num_splits != info->num_splits))
    fail(rep, "%s: fa_plan reports %s \"%s\" (%d splits) but the call ran %s \"%s\" (%d splits)",
         call, plan->backend_name, plan->kernel, plan->num_splits, info->backend_name, info->kernel,
         info->num_splits);
}
