/*
 * consumer.c: a program built against an installed flashattn (tests/consumer/run_consumer.cmake).
 * It asks the library what it found, checks that the CPU backend was loaded from the installed
 * plugin folder given as argv[1], runs one small causal f32 forward on the CPU and compares it with
 * a naive double-precision computation. Exit 0 on success, 1 with a message otherwise.
 */
#include <flash_attn.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 2, SQ = 5, SK = 7, H = 2, D = 8 };

static float q[B][SQ][H][D], k[B][SK][H][D], v[B][SK][H][D], out[B][SQ][H][D], lse[B][H][SQ];

static float next_value(unsigned *state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static fa_tensor view4(void *data, int64_t s) {
  fa_tensor t = {.data = data,
                 .device = {FA_DEVICE_CPU, 0},
                 .dtype = FA_F32,
                 .ndim = 4,
                 .shape = {B, s, H, D},
                 .strides = {s * H * D, H * D, D, 1}};
  return t;
}

int main(int argc, char **argv) {
  const char *plugin_dir = argc > 1 ? argv[1] : NULL;
  int major = -1, minor = -1, patch = -1;
  const char *version = fa_version(&major, &minor, &patch);
  printf("flashattn %s (header %d.%d.%d)\n", version, FA_VERSION_MAJOR, FA_VERSION_MINOR,
         FA_VERSION_PATCH);
  if (major != FA_VERSION_MAJOR || minor != FA_VERSION_MINOR) {
    printf("FAIL: library version %s does not match the header\n", version);
    return 1;
  }

  fa_backend_desc descs[8];
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&descs[i]);
  int32_t count = 0;
  if (fa_backend_info(descs, 8, &count) != FA_OK || count < 1) {
    printf("FAIL: fa_backend_info: %s\n", fa_last_error());
    return 1;
  }
  int cpu_ok = 0;
  for (int i = 0; i < count && i < 8; ++i) {
    printf("  %s: %s %s\n", descs[i].name, descs[i].available ? "available" : "unavailable:",
           descs[i].available ? descs[i].plugin_path : descs[i].reason);
    if (strcmp(descs[i].name, "cpu") == 0 && descs[i].available) {
      cpu_ok = 1;
      if (plugin_dir && strncmp(descs[i].plugin_path, plugin_dir, strlen(plugin_dir)) != 0) {
        printf("FAIL: cpu plugin loaded from %s, not from the installed folder %s\n",
               descs[i].plugin_path, plugin_dir);
        return 1;
      }
    }
  }
  if (!cpu_ok) {
    printf("FAIL: the cpu backend is not available from the installed tree\n");
    return 1;
  }

  unsigned state = 12345u;
  for (size_t i = 0; i < sizeof q / sizeof(float); ++i) ((float *)q)[i] = next_value(&state);
  for (size_t i = 0; i < sizeof k / sizeof(float); ++i) ((float *)k)[i] = next_value(&state);
  for (size_t i = 0; i < sizeof v / sizeof(float); ++i) ((float *)v)[i] = next_value(&state);
  fa_tensor tq = view4(q, SQ), tk = view4(k, SK), tv = view4(v, SK), to = view4(out, SQ);
  fa_tensor tl = {.data = lse,
                  .device = {FA_DEVICE_CPU, 0},
                  .dtype = FA_F32,
                  .ndim = 3,
                  .shape = {B, H, SQ},
                  .strides = {H * SQ, SQ, 1}};
  fa_params p;
  fa_params_init(&p);
  p.causal = 1;
  p.backend = FA_BACKEND_CPU;
  p.strict = 1;
  fa_run_info info;
  fa_run_info_init(&info);
  if (fa_forward(&p, &tq, &tk, &tv, &to, &tl, &info) != FA_OK) {
    printf("FAIL: fa_forward: %s\n", fa_last_error());
    return 1;
  }
  printf("ran %s on %s\n", info.kernel, info.backend_name);

  /* Naive reference: causal bottom-right aligned (row i sees keys j <= i + SK - SQ). */
  double worst = 0.0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < SQ; ++i) {
        double s[SK], m = -INFINITY, l = 0.0;
        int last = i + SK - SQ;
        for (int j = 0; j <= last; ++j) {
          s[j] = 0.0;
          for (int d = 0; d < D; ++d) s[j] += (double)q[b][i][h][d] * k[b][j][h][d];
          s[j] /= sqrt((double)D);
          if (s[j] > m) m = s[j];
        }
        for (int j = 0; j <= last; ++j) l += exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double o = 0.0;
          for (int j = 0; j <= last; ++j) o += exp(s[j] - m) / l * v[b][j][h][d];
          worst = fmax(worst, fabs(o - out[b][i][h][d]));
        }
        worst = fmax(worst, fabs(m + log(l) - lse[b][h][i]));
      }
  printf("max abs error against the float64 reference: %.3g\n", worst);
  if (!(worst < 1e-5)) {
    printf("FAIL: error %.3g above 1e-5\n", worst);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
