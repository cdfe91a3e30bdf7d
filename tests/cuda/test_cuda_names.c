/*
 * test_cuda_names.c: the CUDA backend's kernel names (backends/cuda/cuda_names.c), on the host,
 * against the printf formats that defined them before (kept here as the reference): every
 * combination of the suffixes, both families and passes, head dims 64 to 256, and the split and
 * GQA counts below, at and above 1; and a buffer too small truncates as snprintf would.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_names.h"
#include "host_test.h"

#define FA_KERNEL_NAME_TEST_LEN 96

/* The dense forward and backward: cuda.<family>.<op>.<dtype>.hd<D>[.causal][.window][.softcap]
   [.gqa<P>]. */
static void dense_reference(const cuda_name_parts *n, char *out, size_t size) {
  char pack[16] = "";
  if (n->pack > 1) snprintf(pack, sizeof pack, ".gqa%d", n->pack);
  snprintf(out, size, "cuda.%s.%s.%s.hd%lld%s%s%s%s", n->family, n->op, n->dtype,
           (long long)n->head_dim, n->causal ? ".causal" : "", n->window ? ".window" : "",
           n->softcap ? ".softcap" : "", pack);
}

/* The forward over sequences. */
static void seqs_reference(const cuda_name_parts *n, char *out, size_t size) {
  char split[16] = "", gqa[16] = "";
  if (n->splits > 1) snprintf(split, sizeof split, ".split%d", n->splits);
  if (n->pack > 1) snprintf(gqa, sizeof gqa, ".gqa%d", n->pack);
  snprintf(out, size, "cuda.fa2.sm80.fwd.%s.hd%lld%s%s%s%s%s%s%s%s%s%s%s", n->dtype,
           (long long)n->head_dim, n->rows16 ? ".rows16" : "", n->halves ? ".halves" : "",
           n->bulk ? ".bulk" : "", n->causal ? ".causal" : "", n->window ? ".window" : "",
           n->softcap ? ".softcap" : "", n->varlen ? ".varlen" : "", n->paged ? ".paged" : "",
           split, n->kvcache ? ".kvcache" : "", gqa);
}

static int compare(const cuda_name_parts *n, int seqs) {
  char got[128], want[128];
  cuda_kernel_name(n, got, sizeof got);
  (seqs ? seqs_reference : dense_reference)(n, want, sizeof want);
  EXPECT(strcmp(got, want) == 0, "\"%s\", the format gives \"%s\"", got, want);
  return 1;
}

int main(void) {
  static const int64_t dims[] = {64, 96, 128, 256};
  static const int counts[] = {0, 1, 2, 33, 64};
  /* The FP8 forward names its inputs' dtype (cuda_fp8.c), as the CPU oracle does. */
  static const char *const dtypes[] = {"f16", "bf16", "f8e4m3", "f8e5m2"};
  long cases = 0;
  for (int di = 0; di < 4; ++di)
    for (int ti = 0; ti < 4; ++ti)
      for (int ci = 0; ci < 5; ++ci) {
        /* dense: both families and passes, every mask suffix */
        for (int f = 0; f < 4; ++f)
          for (int m = 0; m < 8; ++m) {
            cuda_name_parts n = {.family = f & 1 ? "fa3.sm90" : "fa2.sm80",
                                 .op = f & 2 ? "bwd" : "fwd",
                                 .dtype = dtypes[ti],
                                 .head_dim = dims[di],
                                 .causal = m & 1,
                                 .window = (m >> 1) & 1,
                                 .softcap = (m >> 2) & 1,
                                 .pack = counts[ci]};
            cases += compare(&n, 0);
          }
        /* over sequences: every combination of the nine flags, splits and packs */
        for (int m = 0; m < 512; ++m)
          for (int si = 0; si < 5; ++si) {
            cuda_name_parts n = {.family = "fa2.sm80",
                                 .op = "fwd",
                                 .dtype = dtypes[ti],
                                 .head_dim = dims[di],
                                 .rows16 = m & 1,
                                 .causal = (m >> 1) & 1,
                                 .window = (m >> 2) & 1,
                                 .softcap = (m >> 3) & 1,
                                 .varlen = (m >> 4) & 1,
                                 .paged = (m >> 5) & 1,
                                 .kvcache = (m >> 6) & 1,
                                 .halves = (m >> 7) & 1,
                                 .bulk = (m >> 8) & 1,
                                 .splits = counts[si],
                                 .pack = counts[ci]};
            cases += compare(&n, 1);
          }
      }
  /* Too small a buffer: truncated as snprintf truncates. */
  const cuda_name_parts n = {
      .family = "fa3.sm90", .op = "fwd", .dtype = "bf16", .head_dim = 128, .causal = 1, .pack = 4};
  char small[20];
  cuda_kernel_name(&n, small, sizeof small);
  EXPECT(strcmp(small, "cuda.fa3.sm90.fwd.b") == 0, "truncated to \"%s\"", small);
  /* The FP8 forward's name, written out. */
  const cuda_name_parts f8 = {.family = "fa3.sm90",
                              .op = "fwd",
                              .dtype = "f8e4m3",
                              .head_dim = 128,
                              .causal = 1,
                              .window = 1,
                              .pack = 2};
  char f8name[FA_KERNEL_NAME_TEST_LEN];
  cuda_kernel_name(&f8, f8name, sizeof f8name);
  EXPECT(strcmp(f8name, "cuda.fa3.sm90.fwd.f8e4m3.hd128.causal.window.gqa2") == 0, "FP8: \"%s\"",
         f8name);
  printf("test_cuda_names: %ld names compared, %s\n", cases, g_failed ? "FAILED" : "all equal");
  return g_failed;
}
