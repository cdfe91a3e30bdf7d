/*
 * peak_probe.h: what the CPU peak probes (cpu-fma-peak, cpu-amx-peak) share: their one option,
 * --seconds S, and the timing of a kernel that every OpenMP thread runs for a number of loop
 * trips: the trips grown until one run takes about S / 5 seconds, then 5 timed runs, each printed,
 * the best reported.
 */
#ifndef FA_BENCH_PEAK_PROBE_H
#define FA_BENCH_PEAK_PROBE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds for every thread to run `trips` loop trips; adds the threads' results to *sink. */
typedef double (*peak_run_fn)(long trips, float *sink);

/* --seconds S (default 1) into *seconds: 0, or 2 after printing the usage of `name`. */
static int peak_parse_seconds(int argc, char **argv, const char *name, double *seconds) {
  *seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      *seconds = atof(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--seconds S]\n", name);
      return 2;
    }
  }
  return 0;
}

/* The best GFLOP/s of 5 runs of `threads` threads, each trip `flops_per_trip` FLOPs a thread. */
static double peak_best_gflops(peak_run_fn run, double seconds, int threads, double flops_per_trip,
                               float *sink) {
  long trips = 1000;
  while (run(trips, sink) < seconds / 5 && trips < (1L << 40)) trips *= 2;
  double best = 0.0;
  for (int r = 0; r < 5; ++r) {
    const double t = run(trips, sink);
    const double gflops = (double)threads * (double)trips * flops_per_trip / t / 1e9;
    printf("run %d: %.3f s, %.1f GFLOP/s\n", r, t, gflops);
    if (gflops > best) best = gflops;
  }
  return best;
}

#endif /* FA_BENCH_PEAK_PROBE_H */
