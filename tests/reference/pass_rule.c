/*
 * pass_rule.c: the rule every output of every backend is held to: within twice the error of the
 * naive computation in the storage dtype, plus a floor, against float64; no NaN; infinities and
 * the elements the mask alone decides exact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

/*
 * The floor has two parts.
 *
 * A constant per storage dtype, for where the naive computation happens to be (almost) exact,
 * e.g. a single visible key where out = v: the library may still land one rounding step away, as
 * it stores its fp32 result after a different order of operations. Inputs are standard normal, so
 * outputs and gradients are of magnitude about 1, and one step there is: f16 (10-bit fraction)
 * 2^-10 ~ 9.8e-4 -> 1e-3; bf16 (7-bit fraction) 2^-7 ~ 7.8e-3 -> 1e-2; f32 1e-5, which also
 * absorbs short fp32 sums (a few hundred terms of magnitude 1, sqrt(n) * 2^-24 ~ 1e-6).
 *
 * A term for fp32 arithmetic: REF_MAG_FACTOR * 2^-24 * max(magnitude), the magnitude being
 * unit_f64's estimate of an element's fp32 error in units of u. It matters for f32 storage, whose
 * naive error is no reliable yardstick: the library sums in another order (tiles, threads, GQA
 * heads), which over thousands of terms lands a few times away from the naive order's error, and
 * where a result vanishes by cancellation the naive path can be exact by construction (one key:
 * its O is v, its D = rowsum(dO∘O) equals dP bit for bit, so dS = 0) while the library's tiled
 * sums round differently, leaving fp32 noise in dq and dk. The estimate treats roundings as
 * independent, uniform in [-u, u]: its standard deviation is about magnitude * u / sqrt(3), and 4 *
 * u * magnitude (about 7 of those) leaves room for the largest of a million elements and for the
 * estimate's crudeness. For f16/bf16 storage the fp32 part is negligible next to the dtype's
 * rounding; the magnitudes of dq and dk there also carry one term in the dtype's unit: the error
 * that D = rowsum(dO∘O) takes from the stored O, as a standard deviation (so 4 of them), since the
 * naive computation's D errs independently of the library's (unit_f64.c).
 */
#define REF_MAG_FACTOR 4.0
#define REF_U32 5.9604644775390625e-08 /* 2^-24, fp32 unit roundoff */

double ref_floor(fa_dtype dtype) {
  switch (dtype) {
    case FA_F16:
      return 1e-3;
    case FA_BF16:
      return 1e-2;
    default:
      return 1e-5;
  }
}

void ref_check_values(const double *vals, int64_t n, const double *ref64, const double *naive,
                      const double *mag, const unsigned char *masked, fa_dtype dtype,
                      ref_check *out) {
  memset(out, 0, sizeof *out);
  out->worst = -1;
  int64_t worst_ok = -1;
  double mag_max = 0.0;
  for (int64_t f = 0; f < n; ++f) {
    const double got = vals[f], want = ref64[f];
    const char *bad = NULL;
    if (isnan(got))
      bad = "NaN (unwritten or computed)";
    else if (masked && masked[f]) {
      /* Decided by the mask alone (0, or -inf for lse): anything else is a masking bug, however
         small. -0.0 == 0.0, which is fine. */
      if (got != want) bad = "masked element not exactly its value";
    } else if (isinf(want)) {
      if (got != want) bad = "expected an infinity";
    } else if (!isfinite(got)) {
      bad = "infinite where the reference is finite";
    } else {
      double err = fabs(got - want);
      if (err > out->max_err || worst_ok < 0) {
        if (err > out->max_err) out->max_err = err;
        worst_ok = f;
        out->worst_got = got;
        out->worst_want = want;
      }
      if (naive && isfinite(naive[f])) {
        double ne = fabs(naive[f] - want);
        if (ne > out->naive_err) out->naive_err = ne;
      }
      if (mag && mag[f] > mag_max) mag_max = mag[f];
    }
    if (bad) {
      if (out->broken == 0) {
        out->worst = f;
        snprintf(out->why, sizeof out->why, "%s", bad);
      }
      ++out->broken;
    }
  }
  out->floor = ref_floor(dtype) + REF_MAG_FACTOR * REF_U32 * mag_max;
  out->tol = 2.0 * out->naive_err + out->floor;
  if (out->broken) {
    out->worst_got = vals[out->worst];
    out->worst_want = ref64[out->worst];
    out->pass = 0;
    return;
  }
  out->worst = worst_ok;
  out->pass = out->max_err <= out->tol;
  if (!out->pass) snprintf(out->why, sizeof out->why, "max error above tolerance");
}

static void check_impl(const tu_tensor *x, const double *ref64, const double *naive,
                       const double *mag, const unsigned char *masked, fa_dtype dtype,
                       ref_check *out) {
  int64_t n = tu_numel(x);
  double *vals = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!vals) {
    memset(out, 0, sizeof *out);
    out->worst = -1;
    out->broken = 1;
    snprintf(out->why, sizeof out->why, "out of memory in the check");
    return;
  }
  tu_read_all(x, vals);
  ref_check_values(vals, n, ref64, naive, mag, masked, dtype, out);
  free(vals);
}

void ref_check_tensor(const tu_tensor *x, const double *ref64, const double *naive,
                      const unsigned char *masked, fa_dtype dtype, ref_check *out) {
  check_impl(x, ref64, naive, NULL, masked, dtype, out);
}

void ref_check_output(const tu_tensor *x, const ref_result *r64, const ref_result *naive,
                      ref_which which, const unsigned char *masked, fa_dtype dtype,
                      ref_check *out) {
  check_impl(x, r64->t[which], naive ? naive->t[which] : NULL, r64->mag[which], masked, dtype, out);
}
