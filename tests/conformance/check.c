/*
 * check.c: a case's failure report and line, and the output checks: every element by the pass
 * rule of reference.h against float64, elements the mask alone decides exact, nothing written
 * outside the logical elements (or, through a map, outside every sequence).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conformance.h"

void fail(report *r, const char *fmt, ...) {
  r->failed = 1;
  if (r->used + 8 >= sizeof r->text) return;
  int w = snprintf(r->text + r->used, sizeof r->text - r->used, "      ");
  if (w > 0) r->used += (size_t)w;
  va_list ap;
  va_start(ap, fmt);
  w = vsnprintf(r->text + r->used, sizeof r->text - r->used, fmt, ap);
  va_end(ap);
  if (w > 0) r->used += (size_t)w;
  if (r->used + 1 < sizeof r->text) {
    r->text[r->used++] = '\n';
    r->text[r->used] = '\0';
  }
  if (r->used >= sizeof r->text) r->used = sizeof r->text - 1;
}

double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dev_get(report *rep, const backend_ctx *bk, tu_tensor *host, const dev_tensor *d,
            const char *label) {
  char err[256];
  if (!bk->ops->copy_out(host, d, err, sizeof err)) return 0;
  fail(rep, "%s: %s", label, err);
  return -1;
}

void case_print(int result, const char *name, const char *summary, const char *skip,
                const report *rep, const backend_ctx *bk, uint64_t run_seed, double t0) {
  if (result == R_SKIP)
    printf("SKIP %s: %s\n", name, skip);
  else
    printf("%s %-50s%s  %.2fs\n", result == R_PASS ? "PASS" : "FAIL", name, summary, now_s() - t0);
  if (result == R_FAIL) {
    fputs(rep->text, stdout);
    printf("      replay: FA_TEST_SEED=%llu conformance --backend %s --filter '%s'\n",
           (unsigned long long)run_seed, bk->name, name);
  }
  fflush(stdout);
}

/* Appends "label err/tol" to the summary and reports a failed check; worst_at is the flat index
   of the check's worst element in x (or -1). */
static void report_check(report *rep, char *summary, size_t sn, const char *label,
                         const tu_tensor *x, const ref_check *ck, int64_t worst_at,
                         fa_dtype dtype) {
  size_t used = strlen(summary);
  snprintf(summary + used, sn - used, " %s %.1e/%.1e", label, ck->max_err, ck->tol);
  char where[64] = "-";
  if (worst_at >= 0) tu_format_index(x, worst_at, where, sizeof where);
  if (!ck->pass) {
    if (ck->broken)
      fail(rep, "%s: %s at %s: got %.9g, expected %.9g (%lld such elements)", label, ck->why, where,
           ck->worst_got, ck->worst_want, (long long)ck->broken);
    else
      fail(rep,
           "%s: max error %.3e > tolerance %.3e (2 x naive %s error %.3e + floor %.2e) at "
           "%s: got %.9g, expected %.9g",
           label, ck->max_err, ck->tol, tu_dtype_name(dtype), ck->naive_err, ck->floor, where,
           ck->worst_got, ck->worst_want);
  }
  char msg[160];
  if (tu_gaps_intact(x, msg, sizeof msg) != 1)
    fail(rep, "%s: wrote outside its elements: %s", label, msg);
}

void check_output(report *rep, char *summary, size_t sn, const char *label, const tu_tensor *x,
                  const ref_result *r64, const ref_result *rn, ref_which w,
                  const unsigned char *masked, fa_dtype dtype) {
  ref_check ck;
  ref_check_output(x, r64, rn, w, masked, dtype, &ck);
  report_check(rep, summary, sn, label, x, &ck, ck.worst, dtype);
}

/* Sequence of packed token t, or -1. */
static int64_t seq_of(const fmap *m, int64_t t, int64_t *row) {
  for (int64_t b = 0; b < m->batch; ++b)
    if (t >= m->cu[b] && t < m->cu[b + 1]) {
      *row = t - m->cu[b];
      return b;
    }
  return -1;
}

static int64_t fmap_index(const fmap *m, int64_t f) {
  int64_t row, b;
  switch (m->kind) {
    case MAP_PACKED_Q:
    case MAP_PACKED_K: {
      int64_t t = f / m->inner, rem = f % m->inner;
      if ((b = seq_of(m, t, &row)) < 0) return -1;
      return (b * m->max_rows + row) * m->inner + rem;
    }
    case MAP_LSE_PACKED: {
      int64_t h = f / m->total, t = f % m->total;
      if ((b = seq_of(m, t, &row)) < 0) return -1;
      return (b * m->heads + h) * m->max_rows + row;
    }
    case MAP_LSE_PADDED:
      b = f / (m->heads * m->max_rows);
      return f % m->max_rows < m->lens[b] ? f : -1;
    default:
      return f;
  }
}

void fcheck_output(report *rep, char *summary, size_t sn, const char *label, const tu_tensor *x,
                   const fmap *m, const ref_result *r64, const ref_result *rn, ref_which w,
                   const unsigned char *masked, fa_dtype dtype) {
  const int64_t n = tu_numel(x);
  double *all = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *got = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *naive = malloc(sizeof(double) * (size_t)(n ? n : 1));
  double *mag = malloc(sizeof(double) * (size_t)(n ? n : 1));
  unsigned char *msk = malloc((size_t)(n ? n : 1));
  int64_t *where = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!all || !got || !want || !naive || !mag || !msk || !where) {
    fail(rep, "%s: out of memory in the check", label);
    goto out;
  }
  tu_read_all(x, all);
  int64_t k = 0, touched = 0, first_touched = -1;
  for (int64_t f = 0; f < n; ++f) {
    int64_t at = fmap_index(m, f);
    if (at < 0) {
      if (!tu_elem_unchanged(x, f)) {
        if (first_touched < 0) first_touched = f;
        ++touched;
      }
      continue;
    }
    got[k] = all[f];
    want[k] = r64->t[w][at];
    naive[k] = rn->t[w][at];
    mag[k] = r64->mag[w] ? r64->mag[w][at] : 0.0;
    msk[k] = masked[at];
    where[k] = f;
    ++k;
  }
  if (touched) {
    char idx[64];
    tu_format_index(x, first_touched, idx, sizeof idx);
    fail(rep, "%s: %lld elements outside every sequence were written (first at %s)", label,
         (long long)touched, idx);
  }
  ref_check ck;
  ref_check_values(got, k, want, naive, mag, msk, dtype, &ck);
  report_check(rep, summary, sn, label, x, &ck, ck.worst >= 0 ? where[ck.worst] : -1, dtype);
out:
  free(all);
  free(got);
  free(want);
  free(naive);
  free(mag);
  free(msk);
  free(where);
}
