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
 * FA_CPU_ISA=generic|avx2|avx512|neon in the environment asks for a lower build than the best one
 * (to compare them, or to rule one out); a build the CPU cannot run is never chosen.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

/* clang-format off */
#define CPU_KERNEL_TABLE(name)                                                    \
  { #name, cpu_gemm_##name, cpu_softmax_tile_##name, cpu_probs_tile_##name,      \
    cpu_ds_tile_##name, cpu_transpose_##name, cpu_f16_row_##name,               \
    cpu_bf16_row_##name, cpu_dot_rows_##name, cpu_pv_rows_##name }
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

static const cpu_kernels *chosen = &kernels_generic;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

#if defined(FA_CPU_HAVE_AVX2) || defined(FA_CPU_HAVE_AVX512) || defined(FA_CPU_HAVE_NEON)
static int allowed(const char *isa) {
  const char *want = getenv("FA_CPU_ISA");
  if (!want || !*want) return 1;
  /* Builds from the widest down: a request allows itself and everything below it. */
  static const char *const order[] = {"avx512", "avx2", "neon", "generic"};
  int want_rank = -1, isa_rank = -1;
  for (int r = 0; r < 4; ++r) {
    if (strcmp(want, order[r]) == 0) want_rank = r;
    if (strcmp(isa, order[r]) == 0) isa_rank = r;
  }
  return want_rank < 0 || isa_rank >= want_rank;
}
#endif

static void choose(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
#if defined(FA_CPU_HAVE_AVX512)
  /* The flags the AVX-512 build is compiled with (CMakeLists.txt), all of them. */
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
      allowed("avx512")) {
    chosen = &kernels_avx512;
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

const cpu_kernels *cpu_kernels_get(void) {
  pthread_once(&chosen_once, choose);
  return chosen;
}
