/*
 * backward.h: the backward pass's algebra (FA_HOST_DEVICE). With P = softmax(S) recomputed from the
 * saved LSE, and D_i = rowsum(dO_i ∘ O_i): dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − D),  dQ =
 * scale·dS·K,  dK = scale·dSᵀ·Q. With dropout, P in dV and dP's use carry the keep mask and
 * 1/(1-p): dV = (P∘Z)ᵀ·dO and dS = P ∘ (dP∘Z − D), Z the scaled keep mask, which is what fa_bwd_ds
 * takes.
 */
#ifndef FA_CORE_BACKWARD_H
#define FA_CORE_BACKWARD_H

/* OpenCL C has no standard headers: its prelude defines the fixed-width types. */
#ifndef FA_OPENCL_C
#include <stdint.h>
#endif

#include "host_device.h"

/* D_i for one row of length n, accumulated in float from any storage via the caller's values. */
FA_HOST_DEVICE float fa_bwd_rowdot(const float *dout_row, const float *out_row, int64_t n) {
  float acc = 0.0f;
  for (int64_t t = 0; t < n; ++t) acc += dout_row[t] * out_row[t];
  return acc;
}

/* dS for one element: p the recomputed probability, dp = (dO·Vᵀ)_ij (already times the dropout
   factor when dropout is on), d the row's D. */
FA_HOST_DEVICE float fa_bwd_ds(float p, float dp, float d) { return p * (dp - d); }

#endif /* FA_CORE_BACKWARD_H */
