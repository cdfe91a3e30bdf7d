/*
 * cpu_read_bw.c: `cpu-read-bw` measures how fast this CPU streams a buffer from memory with a
 * given number of threads, the ceiling a decode kernel (which reads its K and V cache once per
 * call) is quoted against, so a result and its ceiling come from the same run on the same
 * (possibly shared, throttled) machine.
 *
 *   cpu-read-bw [--mib N] [--rounds R] [--threads T]
 *
 * The buffer of N MiB (default: 8 times the last-level cache, at least 64 MiB, so it streams from
 * DRAM and not from a cache) is written once by the threads that read it (first touch places its
 * pages near them), then read R times (default 10) after one untimed read. Each of T OpenMP
 * threads (default 2) reads one contiguous slice with the widest loads the CPU has (512-bit with
 * AVX-512, 256-bit with AVX2, else 64-bit), folding them into eight independent accumulators so
 * the loads, not a dependency chain, set the pace. A read's time is the wall time of the whole
 * parallel region, so the slowest thread counts, as it does for a decode call.
 * Output: one line per read, then
 * `read_bw_gbs_best=<G> read_bw_gbs_median=<G> threads=<T> mib=<N> isa=<isa>` (GB = 1e9 bytes).
 * Exit status 0; 1 when the buffer cannot be allocated; 2 on a usage error.
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_READ_BW_X86 1
#endif

/* Sum of the 64-bit words of [p, p + n) mixed by xor and add; the result keeps the loads alive. */
static uint64_t read_u64(const unsigned char *p, size_t n) {
  const uint64_t *w = (const uint64_t *)p;
  uint64_t a[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n / 8; i += 8)
    for (int j = 0; j < 8; ++j) a[j] ^= w[i + j];
  for (; i < n / 8; ++i) a[0] ^= w[i];
  uint64_t s = 0;
  for (int j = 0; j < 8; ++j) s += a[j];
  return s;
}

#ifdef CPU_READ_BW_X86
/* As read_u64, eight 512-bit loads an iteration; p is 64-byte aligned, n a multiple of 64. */
__attribute__((target("avx512f"))) static uint64_t read_512(const unsigned char *p, size_t n) {
  const __m512i *v = (const __m512i *)p;
  const size_t nv = n / 64;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0;
  size_t i = 0;
  for (; i + 8 <= nv; i += 8) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(v + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(v + i + 1));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(v + i + 2));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(v + i + 3));
    a4 = _mm512_xor_si512(a4, _mm512_load_si512(v + i + 4));
    a5 = _mm512_xor_si512(a5, _mm512_load_si512(v + i + 5));
    a6 = _mm512_xor_si512(a6, _mm512_load_si512(v + i + 6));
    a7 = _mm512_xor_si512(a7, _mm512_load_si512(v + i + 7));
  }
  for (; i < nv; ++i) a0 = _mm512_xor_si512(a0, _mm512_load_si512(v + i));
  a0 = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)),
                        _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)));
  return (uint64_t)_mm512_reduce_add_epi64(a0);
}

/* As read_512 with 256-bit loads; n a multiple of 64. */
__attribute__((target("avx2"))) static uint64_t read_256(const unsigned char *p, size_t n) {
  const __m256i *v = (const __m256i *)p;
  const size_t nv = n / 32;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0;
  size_t i = 0;
  for (; i + 8 <= nv; i += 8) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 1));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 2));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 3));
    a4 = _mm256_xor_si256(a4, _mm256_load_si256(v + i + 4));
    a5 = _mm256_xor_si256(a5, _mm256_load_si256(v + i + 5));
    a6 = _mm256_xor_si256(a6, _mm256_load_si256(v + i + 6));
    a7 = _mm256_xor_si256(a7, _mm256_load_si256(v + i + 7));
  }
  for (; i < nv; ++i) a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
  a0 = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
                        _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
  uint64_t lanes[4];
  _mm256_storeu_si256((__m256i *)lanes, a0);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

typedef uint64_t (*reader)(const unsigned char *, size_t);

/* The widest reader this CPU runs, and its name. */
static reader pick_reader(const char **isa) {
#ifdef CPU_READ_BW_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    *isa = "avx512";
    return read_512;
  }
  if (__builtin_cpu_supports("avx2")) {
    *isa = "avx2";
    return read_256;
  }
#endif
  *isa = "scalar";
  return read_u64;
}

/* Bytes of the highest-level CPU cache that sysfs lists for cpu0, or 0 when it lists none. */
static long long last_level_cache_bytes(void) {
  long long best_size = 0;
  int best_level = 0;
  for (int i = 0; i < 16; ++i) {
    char path[128], buf[64];
    int level = 0;
    long long size = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(buf, sizeof buf, f)) level = atoi(buf);
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    f = fopen(path, "r");
    if (!f) continue;
    if (fgets(buf, sizeof buf, f)) {
      char *end;
      size = strtoll(buf, &end, 10);
      if (*end == 'K') size *= 1024;
      if (*end == 'M') size *= 1024 * 1024;
    }
    fclose(f);
    if (level > best_level || (level == best_level && size > best_size)) {
      best_level = level;
      best_size = size;
    }
  }
  return best_size;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Seconds for `threads` threads to read their slices of buf once; *sink collects the sums. */
static double read_once(reader rd, const unsigned char *buf, size_t bytes, int threads,
                        uint64_t *sink) {
  uint64_t total = 0;
  const double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    /* Slices in whole cache lines, the same split the first touch used. */
    const size_t lines = bytes / 64, t = (size_t)omp_get_thread_num();
    const size_t nt = (size_t)omp_get_num_threads();
    const size_t lo = lines * t / nt, hi = lines * (t + 1) / nt;
    total += rd(buf + lo * 64, (hi - lo) * 64);
  }
  const double s = omp_get_wtime() - t0;
  *sink += total;
  return s;
}

int main(int argc, char **argv) {
  long long mib = 0;
  int rounds = 10, threads = 2;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = atoll(argv[++i]);
    } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: cpu-read-bw [--mib N] [--rounds R] [--threads T]\n");
      return 2;
    }
  }
  if (rounds < 1 || threads < 1 || mib < 0) {
    fprintf(stderr, "cpu-read-bw: --rounds and --threads must be at least 1, --mib not negative\n");
    return 2;
  }
  const long long llc = last_level_cache_bytes();
  if (mib == 0) {
    /* Eight times the last-level cache leaves at most an eighth of a read to hits. */
    mib = 8 * llc / (1024 * 1024);
    if (mib < 64) mib = 64;
  }
  const size_t bytes = (size_t)mib * 1024 * 1024;
  /* 2 MiB alignment lets the kernel back the buffer with huge pages where it does so anyway. */
  const size_t huge = 2 * 1024 * 1024;
  unsigned char *buf = aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
  if (!buf) {
    fprintf(stderr, "cpu-read-bw: cannot allocate %lld MiB\n", mib);
    return 1;
  }
#pragma omp parallel num_threads(threads)
  {
    const size_t lines = bytes / 64, t = (size_t)omp_get_thread_num();
    const size_t nt = (size_t)omp_get_num_threads();
    const size_t lo = lines * t / nt, hi = lines * (t + 1) / nt;
    /* Non-constant contents, so no page can be shared with another (the zero page). */
    for (size_t i = lo * 64; i < hi * 64; i += 8) {
      const uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
      memcpy(buf + i, &x, sizeof x);
    }
  }
  const char *isa;
  const reader rd = pick_reader(&isa);
  uint64_t sink = 0;
  read_once(rd, buf, bytes, threads, &sink);
  double *gbs = malloc(sizeof(double) * (size_t)rounds);
  if (!gbs) {
    free(buf);
    fprintf(stderr, "cpu-read-bw: out of memory\n");
    return 1;
  }
  for (int r = 0; r < rounds; ++r) {
    const double s = read_once(rd, buf, bytes, threads, &sink);
    gbs[r] = (double)bytes / s / 1e9;
    printf("read %d: %.3f ms, %.2f GB/s\n", r, s * 1e3, gbs[r]);
  }
  qsort(gbs, (size_t)rounds, sizeof gbs[0], cmp_double);
  const double median =
      rounds % 2 ? gbs[rounds / 2] : 0.5 * (gbs[rounds / 2 - 1] + gbs[rounds / 2]);
  printf(
      "read_bw_gbs_best=%.2f read_bw_gbs_median=%.2f threads=%d mib=%lld isa=%s llc_mib=%.1f "
      "(checksum %llu)\n",
      gbs[rounds - 1], median, threads, mib, isa, (double)llc / (1024.0 * 1024.0),
      (unsigned long long)sink);
  free(gbs);
  free(buf);
  return 0;
}
