/*
 * storage.cl: loads and stores of the program's storage dtype, in float. A tensor is a buffer, an
 * element offset and strides (long8: offset, batch, row, head, dim) as the API describes it, so
 * any stride the API allows works here.
 */
#if FA_DTYPE == 0
typedef float st_t;
inline float st_load(__global const st_t *p, long i) { return p[i]; }
inline void st_store(__global st_t *p, long i, float v) { p[i] = v; }
#elif FA_DTYPE == 1
typedef half st_t;
inline float st_load(__global const st_t *p, long i) { return vload_half((size_t)i, p); }
inline void st_store(__global st_t *p, long i, float v) { vstore_half_rte(v, (size_t)i, p); }
#else
typedef ushort st_t;
inline float st_load(__global const st_t *p, long i) { return fa_bf16_to_f32(p[i]); }
inline void st_store(__global st_t *p, long i, float v) { p[i] = fa_f32_to_bf16(v); }
#endif

/* Element (b, row, h, d) of a tensor described by t = (offset, batch, row, head, dim, -, -, -). */
inline long st_index(long8 t, long b, long row, long h, long d) {
  return t.s0 + b * t.s1 + row * t.s2 + h * t.s3 + d * t.s4;
}
