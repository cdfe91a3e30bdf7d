/*
 * cpu_probe.c: what the CPU backend reports about the machine, and the one measurement decide()
 * needs from it (the cache budget the tile plan is made for).
 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "cpu_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#define CPU_ARCH "x86_64"
#elif defined(__i386__) || defined(_M_IX86)
#define CPU_ARCH "x86"
#elif defined(__aarch64__) || defined(_M_ARM64)
#define CPU_ARCH "aarch64"
#elif defined(__arm__)
#define CPU_ARCH "arm"
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
#define CPU_ARCH "ppc64le"
#elif defined(__powerpc64__)
#define CPU_ARCH "ppc64"
#elif defined(__riscv) && defined(__riscv_xlen) && __riscv_xlen == 64
#define CPU_ARCH "riscv64"
#elif defined(__s390x__)
#define CPU_ARCH "s390x"
#elif defined(__loongarch64)
#define CPU_ARCH "loongarch64"
#else
#define CPU_ARCH "unknown"
#endif

/* Without a reported L2 size, assume 1 MiB: common per core today, and a wrong guess only costs
   speed (tiles a little too large or small), never correctness. */
#define CPU_DEFAULT_L2_BYTES ((size_t)1 << 20)

static size_t fast_memory;
static pthread_once_t fast_memory_once = PTHREAD_ONCE_INIT;

static void measure_fast_memory(void) {
  long l2 = -1;
#if defined(_SC_LEVEL2_CACHE_SIZE)
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  size_t bytes = l2 > 0 ? (size_t)l2 : CPU_DEFAULT_L2_BYTES;
  /* Half of L2 for the tiles: the other half holds the rows being streamed in and the scratch
     that is not part of the plan's four tiles (scores, accumulators). */
  fast_memory = bytes / 2;
}

size_t cpu_fast_memory_bytes(void) {
  /* Once per process, so every decide() of the process plans the same tiles (determinism), and
     also when decide() happens to run before probe(). */
  pthread_once(&fast_memory_once, measure_fast_memory);
  return fast_memory;
}

void cpu_probe(fa_plugin_probe *out) {
  size_t budget = cpu_fast_memory_bytes();
  fa_probe_begin(out, 1, "", 1);
  fa_probe_add_device(out, "cpu0: %d OpenMP threads, %s kernels, %zu KiB tile budget; amx: %s",
                      omp_get_max_threads(), cpu_kernels_get()->isa, budget / 1024,
                      cpu_kernels_amx_note());
  snprintf(out->arch, sizeof out->arch, "%s", CPU_ARCH);
  snprintf(out->kernel_families, sizeof out->kernel_families, "flash");
  snprintf(out->dtypes, sizeof out->dtypes, "f32,f16,bf16,f8e4m3,f8e5m2");
}
