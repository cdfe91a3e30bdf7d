/*
 * cpu_amx_peak.c: `cpu-amx-peak` measures this CPU's AMX-BF16 rate (TDPBF16PS) on every OpenMP
 * thread, the ceiling the CPU backend's AMX path (FA_CPU_ISA=amx) is quoted against, so a result
 * and its ceiling come from the same run on the same machine.
 *
 *   cpu-amx-peak [--seconds S]
 *
 * Each thread configures eight 16-row x 64-byte tiles and runs TDPBF16PS into four independent
 * accumulators (tmm0-3) from two A tiles (tmm4-5) and two B tiles (tmm6-7), the blocking of
 * backends/cpu/cpu_amx.c, for a number of loop trips grown until one run takes about S / 5
 * seconds (default S = 1), then timed 5 times; the best is reported, counting 16 x 16 x 32 x 2
 * FLOPs per instruction. OMP_NUM_THREADS sets the threads, as for the CPU backend.
 * Output: one line per run, then `amx_peak_gflops=<G> threads=<T> isa=amx-bf16`.
 * Exit status 0; 1 when AMX-BF16 cannot run here (the reason on stderr, from the CPU backend's
 * own detection, backends/cpu/cpu_amx_detect.c, which also asks Linux for the tile state).
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_amx.h"
#include "peak_probe.h"

#if defined(__x86_64__)
typedef struct tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* One thread's work: `trips` x 4 x 4 products; the accumulators are stored so that the products
   cannot be dropped. The instructions as inline assembly, as cpu_amx.c has them (AT&T order:
   sources first). */
__attribute__((target("amx-tile,amx-bf16"))) static float products(long trips) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  static _Thread_local uint32_t src[16 * 16] __attribute__((aligned(64)));
  static _Thread_local float acc[16 * 16] __attribute__((aligned(64)));
  for (int i = 0; i < 16 * 16; ++i) src[i] = 0x3c003c00u; /* bf16 pairs of 2^-7 */
  const long ld = 64;
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
  __asm__ volatile(
      "tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
      "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(src),
      "r"(ld)
      : "memory");
  for (long t = 0; t < trips; ++t)
    __asm__ volatile(
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(acc), "r"(ld) : "memory");
  __asm__ volatile("tilerelease" ::: "memory");
  return acc[0];
}

/* Seconds for every thread to run `trips`; *sink collects the results. */
static double run(long trips, float *sink) {
  float total = 0.0f;
  const double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : total)
  total += products(trips);
  const double t = omp_get_wtime() - t0;
  *sink += total;
  return t;
}
#endif

int main(int argc, char **argv) {
  double seconds;
  if (peak_parse_seconds(argc, argv, "cpu-amx-peak", &seconds)) return 2;
  cpu_amx_facts facts;
  cpu_amx_read_facts(&facts);
  char why[256] = "";
  if (cpu_amx_decide(&facts, cpu_amx_request_linux, why, sizeof why) != CPU_AMX_READY) {
    fprintf(stderr, "cpu-amx-peak: AMX-BF16 cannot run here: %s\n", why);
    return 1;
  }
#if defined(__x86_64__)
  const int threads = omp_get_max_threads();
  float sink = 0.0f;
  /* a trip: 16 TDPBF16PS, each 16 x 16 outputs of 32 products */
  const double best = peak_best_gflops(run, seconds, threads, 16.0 * 16 * 16 * 32 * 2, &sink);
  printf("amx_peak_gflops=%.1f threads=%d isa=amx-bf16 (checksum %g)\n", best, threads,
         (double)sink);
  return 0;
#else
  return 1;
#endif
}
