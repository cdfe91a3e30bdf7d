/*
 * cpu_dispatch.c: picks the build of the tile kernels this CPU can run, once per process.
 *
 * The choice is made from what the CPU reports (cpuid through the compiler's builtin), never from
 * what the plugin was compiled on, so one libfa_cpu.so runs on every x86-64 and uses AVX2 or
 * AVX-512 where present. It is fixed for the process: every call on a machine runs the same code,
 * which deterministic mode needs.
 *
 * On aarch64 the NEON build is always there and always runnable: it is the default.
 *
 * The environment variable FA_CPU_ISA, read once, narrows the choice:
 *   generic|avx2|avx512|neon  at most this build (to rule a wider one out; the tests run each
 *                             narrower build with it); a build the CPU cannot run is never chosen
 *   avx512bf16                the AVX-512 build plus the AVX512-BF16 products of the bf16 forward
 *                             pass (cpu_bf16dp.c), given when CPUID reports AVX512-BF16 (else
 *                             avx512)
 *   amx                       the same with the products on AMX-BF16 tiles (cpu_amx.c), the bf16
 *                             backward's products on them as well (cpu_backward.c): when AMX
 *                             cannot run the backend refuses every request with the reason
 *                             (cpu_kernels_refusal) rather than run something else
 * Unset, the widest build the CPU runs is chosen, and with it the AMX products wherever the CPU
 * and the OS have them and Linux grants the tile data (cpu_amx_detect.c asks): on a 16-core
 * Sapphire Rapids they ran the bf16 forward at 1.3-2.6x and the backward at 1.5-2.4x the avx512
 * build's speed (bench/RESULTS.md). The emulated test build (FA_CPU_AMX_EMULATED) takes them only
 * when FA_CPU_ISA=amx names them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_amx.h"
#include "cpu_kernels.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && \
    (defined(FA_CPU_HAVE_AVX512) || defined(FA_CPU_HAVE_AVX2))
#include <cpuid.h>

/* F16C (CPUID leaf 1, ECX bit 29), asked through cpuid: clang's __builtin_cpu_supports does not
   know the name "f16c" (gcc's does), and the fuzzing build uses clang. */
static int has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

/* AVX512-BF16 (CPUID leaf 7 subleaf 1, EAX bit 5), asked through cpuid: neither gcc 12's nor
   clang 14's __builtin_cpu_supports is sure to know it. */
#if defined(FA_CPU_HAVE_AVX512BF16)
static int has_avx512bf16(void) {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
}
#endif

/* clang-format off */
#define CPU_KERNEL_FNS(name)                                                      \
  cpu_gemm_##name, cpu_softmax_tile_##name, cpu_probs_tile_##name,               \
    cpu_ds_tile_##name, cpu_transpose_##name, cpu_f16_row_##name,               \
    cpu_bf16_row_##name, cpu_bf16_transpose_##name, cpu_dot_rows_##name,        \
    cpu_pv_rows_##name, cpu_dot_heads_##name, cpu_pv_heads_##name,             \
    cpu_quant_rotate_##name, cpu_quant_amax_##name, cpu_quant_fp8_##name
#define CPU_KERNEL_TABLE(name) { #name, CPU_KERNEL_FNS(name), NULL, NULL, NULL, NULL, NULL, NULL, #name, 0 }
/* clang-format on */

static const cpu_kernels kernels_generic = CPU_KERNEL_TABLE(generic);
#if defined(FA_CPU_HAVE_AVX2)
static const cpu_kernels kernels_avx2 = CPU_KERNEL_TABLE(avx2);
#endif
#if defined(FA_CPU_HAVE_AVX512)
static const cpu_kernels kernels_avx512 = CPU_KERNEL_TABLE(avx512);
#endif
#if defined(FA_CPU_HAVE_NEON)
static const cpu_kernels kernels_neon = CPU_KERNEL_TABLE(neon);
#endif
#if defined(FA_CPU_HAVE_AVX512BF16)
/* The AVX-512 build's kernels plus the bf16 products (cpu_bf16dp.c), which the bf16 forward pass
   uses (cpu_forward.c); everything else runs, and is named, as avx512. */
static const cpu_kernels kernels_avx512bf16 = {"avx512bf16",
                                               CPU_KERNEL_FNS(avx512),
                                               cpu_bf16_pairs_avx512bf16,
                                               cpu_bf16_interleave_avx512bf16,
                                               cpu_gemm_bf16_avx512bf16,
                                               cpu_softmax_pairs_avx512bf16,
                                               NULL,
                                               NULL,
                                               "avx512",
                                               0};
#endif

#if defined(FA_CPU_HAVE_AMX)
/* The same with the products on AMX tiles, the bf16 backward's included; the pairs conversion
   is AVX512-BF16's. */
static const cpu_kernels kernels_amx = {"amx",
                                        CPU_KERNEL_FNS(avx512),
                                        cpu_bf16_pairs_avx512bf16,
                                        cpu_bf16_interleave_avx512bf16,
                                        cpu_gemm_bf16_amx,
                                        cpu_softmax_pairs_avx512bf16,
                                        cpu_gemm_bf16_amx_tiled,
                                        cpu_bf16_pairs_tiled_avx512bf16,
                                        "avx512",
                                        1};
#endif

static const cpu_kernels *chosen = &kernels_generic;
/* AMX as this process sees it (the device line), and FA_CPU_ISA=amx's refusal when it cannot run.
 */
static char amx_note[160] = "not built (no x86-64 AMX build in this plugin)";
static char refusal[224];
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

#if defined(FA_CPU_HAVE_AVX2) || defined(FA_CPU_HAVE_AVX512) || defined(FA_CPU_HAVE_NEON)
static int allowed(const char *isa) {
  const char *want = getenv("FA_CPU_ISA");
  if (!want || !*want) return 1;
  /* Builds from the widest down: a request allows itself and everything below it. */
  static const char *const order[] = {"avx512", "avx2", "neon", "generic"};
  int want_rank = -1, isa_rank = -1;
  /* and below: asked for by name only */
  if (strcmp(want, "avx512bf16") == 0 || strcmp(want, "amx") == 0) want = "avx512";
  for (int r = 0; r < 4; ++r) {
    if (strcmp(want, order[r]) == 0) want_rank = r;
    if (strcmp(isa, order[r]) == 0) isa_rank = r;
  }
  return want_rank < 0 || isa_rank >= want_rank;
}
#endif

static void choose_isa(void);

#if defined(FA_CPU_HAVE_AMX)
/* AMX's state; asks for the permission only when `ask`, and leaves the state in amx_note (and in
   refusal when FA_CPU_ISA=amx named it, `named`, and it is not given). */
static cpu_amx_state amx_state(int ask, int named) {
  char why[160];
  cpu_amx_state st;
#if defined(FA_CPU_AMX_EMULATED)
  /* The test build: the tile instructions run on tests/cpu_amx_emu.h's C model; the pairs
     conversion around them is AVX512-BF16's, which the CPU must have. */
  if (!has_avx512bf16()) {
    st = CPU_AMX_NO;
    snprintf(why, sizeof why,
             "no AVX512-BF16 (CPUID 7.1 EAX bit 5) for the emulated tiles' pairs conversion");
  } else {
    st = ask ? CPU_AMX_READY : CPU_AMX_PRESENT;
    snprintf(why, sizeof why, "C emulation of the tile instructions (test build)%s",
             ask ? "" : "; used with FA_CPU_ISA=amx only");
  }
#else
  cpu_amx_facts facts;
  cpu_amx_read_facts(&facts);
  st = cpu_amx_decide(&facts, ask ? cpu_amx_request_linux : NULL, why, sizeof why);
#endif
  snprintf(amx_note, sizeof amx_note, "%s", st == CPU_AMX_READY ? "in use: " : "");
  snprintf(amx_note + strlen(amx_note), sizeof amx_note - strlen(amx_note), "%s", why);
  if (ask && named && st != CPU_AMX_READY)
    snprintf(refusal, sizeof refusal, "FA_CPU_ISA=amx asks for the AMX-BF16 products: %s", why);
  return st;
}
#endif

static void choose(void) {
  const char *want_isa = getenv("FA_CPU_ISA");
  const int want_amx = want_isa && strcmp(want_isa, "amx") == 0;
  const char *prefix = "FA_CPU_ISA=amx asks for the AMX-BF16 products";
  /* Set here, cleared when the AMX table is chosen: every other way out of choose() has not
     given what FA_CPU_ISA=amx asked for. The facts alone (no permission asked) for the note. */
#if defined(FA_CPU_HAVE_AMX)
  const int amx_no = amx_state(0, want_amx) == CPU_AMX_NO;
  if (want_amx)
    snprintf(refusal, sizeof refusal, "%s: %s", prefix,
             amx_no ? amx_note : "this CPU runs no AVX-512 build (the AMX table extends it)");
#else
  if (want_amx)
    snprintf(refusal, sizeof refusal, "%s: %s", prefix,
             "this plugin has no AMX build (not x86-64, or the compiler lacks -mamx-bf16)");
#endif
  choose_isa();
  if (strcmp(chosen->isa, "amx") == 0) refusal[0] = '\0';
}

static void choose_isa(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
#if defined(FA_CPU_HAVE_AVX512)
  /* The flags the AVX-512 build is compiled with (CMakeLists.txt), all of them. */
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
      allowed("avx512")) {
    chosen = &kernels_avx512;
    const char *want = getenv("FA_CPU_ISA");
    (void)want;
#if defined(FA_CPU_HAVE_AVX512BF16)
    /* Only when asked for by name: the bf16 products round P to bf16, so its results differ from
       the avx512 build's; on a CPU without AVX512-BF16 the request gets avx512. */
    if (want && strcmp(want, "avx512bf16") == 0 && has_avx512bf16()) chosen = &kernels_avx512bf16;
#endif
#if defined(FA_CPU_HAVE_AMX)
#if defined(FA_CPU_AMX_EMULATED)
    const int amx_wanted = want && strcmp(want, "amx") == 0;
#else
    const int amx_wanted = cpu_amx_wanted(want);
#endif
    if (amx_wanted && amx_state(1, want && strcmp(want, "amx") == 0) == CPU_AMX_READY)
      chosen = &kernels_amx;
#endif
    return;
  }
#endif
#if defined(FA_CPU_HAVE_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
      allowed("avx2")) {
    chosen = &kernels_avx2;
    return;
  }
#endif
#elif defined(__aarch64__) && defined(FA_CPU_HAVE_NEON)
  /* Advanced SIMD is part of every AArch64 CPU: nothing to ask the CPU, only FA_CPU_ISA. */
  if (allowed("neon")) chosen = &kernels_neon;
#endif
}

const char *cpu_kernels_refusal(void) {
  pthread_once(&chosen_once, choose);
  return refusal[0] ? refusal : NULL;
}

const char *cpu_kernels_amx_note(void) {
  pthread_once(&chosen_once, choose);
  return amx_note;
}

const cpu_kernels *cpu_kernels_get(void) {
  pthread_once(&chosen_once, choose);
  return chosen;
}
