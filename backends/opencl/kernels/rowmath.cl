/*
 * rowmath.cl: the two row operations every kernel's inner loop is made of, on FA_D floats:
 * a dot product of a private row with a local-memory row, and y += a·x. Written with 8-wide
 * vectors (and a scalar tail) so that compilers that vectorise within a work-item (PoCL on CPUs)
 * emit SIMD code; the order of the additions is fixed, so results are the same on every run.
 */
inline float row_dot(const float *a, __local const float *b) {
  float8 acc = (float8)(0.0f);
  int d = 0;
  for (; d + 8 <= FA_D; d += 8) acc += vload8(0, a + d) * vload8(0, b + d);
  float s = ((acc.s0 + acc.s1) + (acc.s2 + acc.s3)) + ((acc.s4 + acc.s5) + (acc.s6 + acc.s7));
  for (; d < FA_D; ++d) s += a[d] * b[d];
  return s;
}

inline void row_axpy(float *y, float a, __local const float *x) {
  int d = 0;
  for (; d + 8 <= FA_D; d += 8) vstore8(vload8(0, y + d) + a * vload8(0, x + d), 0, y + d);
  for (; d < FA_D; ++d) y[d] += a * x[d];
}
