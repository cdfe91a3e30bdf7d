/*
 * cpu_fma_peak.c: `cpu-fma-peak` measures this CPU's fp32 FMA rate with 512-bit vectors on every
 * OpenMP thread, the ceiling the CPU backend's speed is quoted against, so a result
 * and its ceiling come from the same run on the same (possibly shared, throttled) machine.
 *
 *   cpu-fma-peak [--seconds S]
 *
 * Each thread runs 16 independent chains x = fma(x, a, b) on zmm registers (no chain waits on
 * another, so both FMA ports stay busy), for a number of loop trips grown until one run takes
 * about S / 5 seconds (default S = 1), then timed 5 times; the best is reported, counting 2 FLOPs
 * per lane and fma. OMP_NUM_THREADS sets the threads, as for the CPU backend.
 * Output: one line per run, then `fma_peak_gflops=<G> threads=<T> isa=avx512`.
 * Exit status 0; 1 when the CPU has no AVX-512 (the reason on stderr).
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peak_probe.h"

/* One thread's work: 16 chains of `trips` x 4 fmas; the sum keeps the compiler from dropping
   it. */
__attribute__((target("avx512f"))) static float chains(long trips, float seed) {
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  __m512 x[16];
  for (int i = 0; i < 16; ++i) x[i] = _mm512_set1_ps(seed + 0.01f * (float)i);
  /* Fully unrolled, so the 16 chains live in registers, not in the array's memory. */
  for (long t = 0; t < trips; ++t)
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) x[i] = _mm512_fmadd_ps(x[i], a, b);
  __m512 s = x[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, x[i]);
  return _mm512_reduce_add_ps(s);
}

/* Seconds for every thread to run `trips`; *sink collects the results. */
static double run(long trips, float *sink) {
  float total = 0.0f;
  const double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : total)
  total += chains(trips, (float)omp_get_thread_num());
  const double t = omp_get_wtime() - t0;
  *sink += total;
  return t;
}

int main(int argc, char **argv) {
  double seconds;
  if (peak_parse_seconds(argc, argv, "cpu-fma-peak", &seconds)) return 2;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    fprintf(stderr,
            "cpu-fma-peak: this CPU has no AVX-512 (the 512-bit FMA rate is the ceiling "
            "the avx512 kernels are quoted against)\n");
    return 1;
  }
  const int threads = omp_get_max_threads();
  float sink = 0.0f;
  /* a trip: 4 x 16 fmas of 16 lanes, 2 FLOPs each */
  const double best = peak_best_gflops(run, seconds, threads, 4 * 16 * 16 * 2, &sink);
  printf("fma_peak_gflops=%.1f threads=%d isa=avx512 (checksum %g)\n", best, threads, (double)sink);
  return 0;
}
