/*
 * test_hip_info.c: the HIP plugin on a machine without an AMD GPU.
 *
 *   1. fa_backend_info's hip entry says why it cannot run, and the reason is the one this machine
 *      calls for, found out here independently: "no AMD device: /dev/kfd is absent" without
 *      AMD's kernel driver (the plugin then does not load the runtime), "no HIP runtime" when no
 *      libamdhip64 loads, "no AMD device" when the runtime sees none (on a machine with an AMD
 *      GPU: available, or "architecture not built" for a processor the build has no code object
 *      for).
 *   2. The architecture rules (backends/hip/hip_arch.c, compiled into this test): gcnArchName's
 *      feature suffixes dropped, exact processor match only, the refusal's words.
 *   3. The generic family's decide-rules (backends/hip/generic/hg_host.c, compiled in), shared by
 *      the HIP plugin and the hip-generic-on-cuda test plugin: what is served, what is refused
 *      with which constraint named, the kernel names, tiles and workspace.
 * Usage: test_hip_info <path of the libfa_hip.so the library should load>
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/hip/cdna/hg_mfma_layout.h"
#include "backends/hip/generic/hg_host.h"
#include "backends/hip/hip_arch.h"
#include "tests/hip/hip_test.h"
#include "flash_attn.h"

/* What this machine should make the plugin say: the same library names, asked directly. */
static const char *expected_reason_prefix(char *detail, size_t n) {
  /* Without AMD's KFD device file the plugin does not load the runtime (hip_probe.c). */
  if (access("/dev/kfd", F_OK) != 0) {
    snprintf(detail, n, "/dev/kfd is absent");
    return "no AMD device: /dev/kfd is absent";
  }
  static const char *const names[] = {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
  void *lib = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; ++i)
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(detail, n, "/dev/kfd exists; no libamdhip64 loads here");
    return "no HIP runtime: ";
  }
  int (*count_fn)(int *) = NULL;
  void *sym = dlsym(lib, "hipGetDeviceCount");
  memcpy(&count_fn, &sym, sizeof count_fn);
  int count = 0;
  int e = count_fn ? count_fn(&count) : -1;
  snprintf(detail, n, "/dev/kfd exists; libamdhip64 loads; hipGetDeviceCount: error %d, count %d",
           e, count);
  /* Kept loaded, as the plugin keeps it (the runtime's threads outlive a dlclose). */
  return e == 0 && count > 0 ? NULL : "no AMD device";
}

static void check_backend_info(const char *plugin) {
  fa_backend_desc descs[8];
  int32_t count = 0;
  for (int i = 0; i < 8; ++i) fa_backend_desc_init(&descs[i]);
  CHECK(fa_backend_info(descs, 8, &count) == FA_OK, "fa_backend_info: %s", fa_last_error());
  const fa_backend_desc *hip = NULL;
  for (int i = 0; i < count && i < 8; ++i)
    if (descs[i].id == FA_BACKEND_HIP) hip = &descs[i];
  CHECK(hip != NULL, "no hip entry in fa_backend_info");
  if (!hip) return;
  printf("hip: %s; plugin %s; arch %s\n", hip->available ? "available" : hip->reason,
         hip->plugin_path, hip->arch);
  CHECK(!strcmp(hip->plugin_path, plugin), "plugin path %s, expected %s", hip->plugin_path, plugin);
  CHECK(strstr(hip->arch, "gfx") != NULL, "arch '%s' does not list the built architectures",
        hip->arch);
  char detail[160];
  const char *want = expected_reason_prefix(detail, sizeof detail);
  printf("expected here (%s): %s\n", detail, want ? want : "available or architecture not built");
  if (want) {
    CHECK(!hip->available, "hip available, expected '%s...'", want);
    CHECK(!strncmp(hip->reason, want, strlen(want)), "reason '%s', expected '%s...'", hip->reason,
          want);
  } else {
    CHECK(hip->available || strstr(hip->reason, "architecture not built"),
          "an AMD device is present but hip says '%s'", hip->reason);
  }
  /* A call for the backend names the same reason and the unavailable status. */
  if (!hip->available) {
    fa_params p;
    fa_params_init(&p);
    p.backend = FA_BACKEND_HIP;
    p.strict = 1;
    uint16_t buf[64] = {0};
    float lse[2];
    fa_tensor t = {buf, 0, {FA_DEVICE_CPU, 0}, FA_F16, 4, {1, 2, 1, 16}, {32, 16, 16, 1}};
    fa_tensor l = {lse, 0, {FA_DEVICE_CPU, 0}, FA_F32, 3, {1, 1, 2}, {2, 2, 1}};
    fa_tensor o = t;
    o.data = buf + 32;
    fa_status st = fa_forward(&p, &t, &t, &t, &o, &l, NULL);
    CHECK(st == FA_ERR_BACKEND_UNAVAILABLE || st == FA_ERR_UNSUPPORTED,
          "fa_forward on hip: %s, expected unavailable", fa_status_string(st));
    CHECK(strstr(fa_last_error(), want ? want : "hip") != NULL, "message '%s' lacks '%s'",
          fa_last_error(), want ? want : "hip");
  }
}

static void check_arch(void) {
  char base[32];
  hip_arch_base("gfx90a:sramecc+:xnack-", base, sizeof base);
  CHECK(!strcmp(base, "gfx90a"), "base of gfx90a:sramecc+:xnack- is '%s'", base);
  hip_arch_base("gfx940", base, sizeof base);
  CHECK(!strcmp(base, "gfx940"), "base of gfx940 is '%s'", base);
  CHECK(hip_arch_built("gfx90a", "gfx90a,gfx940"), "gfx90a not found in gfx90a,gfx940");
  CHECK(hip_arch_built("gfx940", "gfx90a;gfx940"), "gfx940 not found in gfx90a;gfx940");
  /* No prefix matches: a gfx90a code object does not run on gfx908 or gfx9. */
  CHECK(!hip_arch_built("gfx9", "gfx90a,gfx940"), "gfx9 matched a prefix");
  CHECK(!hip_arch_built("gfx942", "gfx90a,gfx940"), "gfx942 matched gfx940's code objects");
  CHECK(!hip_arch_built("", "gfx90a"), "an empty arch matched");
  char why[256];
  CHECK(hip_arch_refusal("Radeon RX 7900 XTX", "gfx1100", "gfx90a,gfx940", why, sizeof why) == 1,
        "gfx1100 not refused");
  CHECK(strstr(why, "gfx1100: architecture not built") && strstr(why, "{gfx90a,gfx940}"),
        "refusal text '%s'", why);
  CHECK(hip_arch_refusal("MI250X", "gfx90a", "gfx90a,gfx940", why, sizeof why) == 0 && !why[0],
        "gfx90a refused: '%s'", why);
}

static void check_decide(void) {
  const hg_target hip = {"hip.generic", FA_DEVICE_HIP, "MI250X", 64 * 1024, HG_MATRIX_MFMA, 0};
  req_store s;
  fa_decision dec;

  hg_decide(make_req(&s, FA_OP_FORWARD, 72, 8, 2, FA_DEVICE_HIP), &hip, &dec);
  CHECK(dec.supported, "fwd hd72 GQA refused: %s", dec.reason);
  CHECK(!strcmp(dec.kernel, "hip.generic.fwd.bf16.hd72"), "kernel '%s'", dec.kernel);
  /* core/plan on 64 KiB: Bc = 32768 words / (4 * 72) = 113 key rows: the 64-key kernel */
  CHECK(dec.tile_m == HG_FWD_TILE_M && dec.tile_n == HG_FWD_TILE_N_MAX && dec.deterministic &&
            dec.workspace_bytes == 0,
        "fwd tiles %dx%d det %d ws %zu", dec.tile_m, dec.tile_n, dec.deterministic,
        dec.workspace_bytes);

  make_req(&s, FA_OP_BACKWARD, 256, 4, 1, FA_DEVICE_HIP);
  s.p.causal = 1;
  s.p.causal_align = 1;
  s.p.softcap = 30.0f;
  hg_decide(&s.r, &hip, &dec);
  CHECK(dec.supported, "bwd hd256 MQA causal softcap refused: %s", dec.reason);
  CHECK(!strcmp(dec.kernel, "hip.generic.bwd.bf16.hd256.causal.softcap"), "kernel '%s'",
        dec.kernel);
  /* D (rounded to 256 bytes) and the fp32 dQ accumulator, plus the alignment slack. */
  size_t rows = 2 * 4 * 100;
  size_t want = ((rows * 4 + 255) / 256) * 256 + rows * 256 * 4 + 256;
  CHECK(dec.workspace_bytes == want, "bwd workspace %zu, expected %zu", dec.workspace_bytes, want);
  CHECK(!dec.deterministic, "bwd deterministic without asking");
  s.p.deterministic = 1;
  hg_decide(&s.r, &hip, &dec);
  CHECK(dec.supported && dec.deterministic, "deterministic bwd: %d %s", dec.supported, dec.reason);

  /* Refusals name their constraint. */
  struct {
    const char *what, *needle;
  } cases[] = {{"hd260", "multiples of 8 up to 256"},
               {"hd12", "multiples of 8 up to 256"},
               {"dv", "head_dim_v"},
               {"alibi", "ALiBi"},
               {"dropout", "dropout"},
               {"splits", "split-KV"},
               {"f32", "dtype f32"},
               {"cpu memory", "cpu memory"},
               {"family", "kernel_family 'fa2'"},
               {"lds", "shared memory"},
               {"odd", "2-byte alignment"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const char *w = cases[i].what;
    hg_target t = hip;
    fa_request *r = make_req(&s, FA_OP_BACKWARD, 64, 2, 2, FA_DEVICE_HIP);
    if (!strcmp(w, "hd260")) r->head_dim = r->head_dim_v = 260;
    if (!strcmp(w, "hd12")) r->head_dim = r->head_dim_v = 12;
    if (!strcmp(w, "dv")) r->head_dim_v = 32;
    if (!strcmp(w, "alibi")) s.p.alibi_slopes = &s.lse;
    if (!strcmp(w, "dropout")) s.p.dropout_p = 0.1f;
    if (!strcmp(w, "splits")) s.p.num_splits = 2;
    if (!strcmp(w, "f32")) r->dtype = FA_F32;
    if (!strcmp(w, "cpu memory")) r->device.kind = FA_DEVICE_CPU;
    if (!strcmp(w, "family")) s.p.kernel_family = "fa2";
    if (!strcmp(w, "lds")) t.smem_limit = 16 * 1024;
    if (!strcmp(w, "odd")) s.dk.byte_offset = 1;
    hg_decide(r, &t, &dec);
    CHECK(!dec.supported && strstr(dec.reason, cases[i].needle), "%s: supported %d, reason '%s'", w,
          dec.supported, dec.reason);
  }
  /* The test plugin's naming, from the same rules. */
  const hg_target cu = {"cuda.hipgen", FA_DEVICE_CUDA, "a CUDA block",
                        48 * 1024,     HG_MATRIX_NONE, 1};
  make_req(&s, FA_OP_FORWARD, 128, 2, 2, FA_DEVICE_CUDA);
  s.p.window_enabled = 1;
  s.p.window_left = 5;
  s.p.window_right = -1;
  hg_decide(&s.r, &cu, &dec);
  CHECK(dec.supported && !strcmp(dec.kernel, "cuda.hipgen.fwd.bf16.hd128.window"),
        "cuda.hipgen window: %d '%s' '%s'", dec.supported, dec.kernel, dec.reason);
  /* Every head-dim class fits the 48 KiB a CUDA block has without opting in, with its smaller
     tiles (the backward's 32x32 keys x queries, 16x16 at class 256). */
  for (int d = 8; d <= 256; d += 8) {
    const int bt = d <= 128 ? 32 : 16;
    CHECK(HG_FWD_SMEM(d, 32) <= 48 * 1024 && HG_BWD_SMEM(bt, bt, d) <= 48 * 1024,
          "hd%d needs %zu / %zu bytes", d, HG_FWD_SMEM(d, 32), HG_BWD_SMEM(bt, bt, d));
  }
  /* The forward's key tile from core/plan: 64 keys where Bc = LDS / (2 bytes * 4d) reaches 64 and
     the kernel's layout fits, else 32; the reported tile is the launched kernel's. */
  static const int64_t ldses[] = {16 * 1024, 48 * 1024, 64 * 1024 - HG_MFMA_EMU_SMEM, 64 * 1024};
  for (size_t l = 0; l < sizeof ldses / sizeof ldses[0]; ++l)
    for (int mfma = 0; mfma < 2; ++mfma)
      for (int d = 8; d <= 256; d += 8) {
        const int bn = hg_fwd_tile_n(ldses[l], d, mfma);
        const int64_t bc = ldses[l] / 2 / (4 * d);
        const int fits64 = (int64_t)hg_smem(1, mfma, d, 64, 0) <= ldses[l];
        CHECK(bn == (bc >= 64 && fits64 ? 64 : 32), "lds %lld mfma %d hd%d: %d keys",
              (long long)ldses[l], mfma, d, bn);
      }
  {
    hg_target small = hip;
    small.smem_limit = 48 * 1024;
    hg_decide(make_req(&s, FA_OP_FORWARD, 128, 2, 2, FA_DEVICE_HIP), &small, &dec);
    CHECK(dec.supported && dec.tile_n == 32, "48 KiB hd128: %d keys", dec.tile_n);
    hg_decide(make_req(&s, FA_OP_FORWARD, 128, 2, 2, FA_DEVICE_HIP), &hip, &dec);
    CHECK(dec.supported && dec.tile_n == 64, "64 KiB hd128: %d keys", dec.tile_n);
  }
  /* The MFMA kernels fit the 64 KiB LDS of every CDNA GPU, and the test plugin's 64 KiB less the
     MFMA emulation's static shared memory. */
  for (int d = 8; d <= 256; d += 8) {
    const int bt = d <= 128 ? 32 : 16;
    CHECK(HG_FWD_MFMA_SMEM(d, 32) + HG_MFMA_EMU_SMEM <= 64 * 1024 &&
              HG_BWD_MFMA_SMEM(bt, bt, d) + HG_MFMA_EMU_SMEM <= 64 * 1024,
          "mfma hd%d needs %zu / %zu bytes", d, HG_FWD_MFMA_SMEM(d, 32),
          HG_BWD_MFMA_SMEM(bt, bt, d));
  }
  /* The MFMA kernels: asked for by kernel_family, where the device has them (or, in the test
     plugin, their emulation). */
  make_req(&s, FA_OP_FORWARD, 256, 2, 2, FA_DEVICE_HIP);
  s.p.kernel_family = "mfma";
  hg_decide(&s.r, &hip, &dec);
  CHECK(dec.supported && !strcmp(dec.kernel, "hip.generic.mfma.fwd.bf16.hd256"),
        "mfma: %d '%s' '%s'", dec.supported, dec.kernel, dec.reason);
  s.r.device.kind = FA_DEVICE_CUDA;
  hg_decide(&s.r, &cu, &dec);
  CHECK(!dec.supported && strstr(dec.reason, "no MFMA kernels"), "mfma on cuda: '%s'", dec.reason);
  make_req(&s, FA_OP_BACKWARD, 64, 2, 2, FA_DEVICE_HIP);
  s.p.kernel_family = "mfma";
  s.p.causal = 1;
  hg_decide(&s.r, &hip, &dec);
  CHECK(dec.supported && !strcmp(dec.kernel, "hip.generic.mfma.bwd.bf16.hd64.causal"),
        "mfma bwd: %d '%s' '%s'", dec.supported, dec.kernel, dec.reason);
  s.r.device.kind = FA_DEVICE_CUDA;
  const hg_target cu_emu = {"cuda.hipgen",     FA_DEVICE_CUDA,
                            "the test plugin", 64 * 1024 - HG_MFMA_EMU_SMEM,
                            HG_MATRIX_MFMA,    1};
  hg_decide(&s.r, &cu_emu, &dec);
  CHECK(dec.supported && !strcmp(dec.kernel, "cuda.hipgen.mfma.bwd.bf16.hd64.causal"),
        "mfma bwd emulated: %d '%s' '%s'", dec.supported, dec.kernel, dec.reason);
  /* The MFMA backward at head dim 128 needs more than the generic one: an LDS of the generic's
     size refuses it, naming the bytes. */
  make_req(&s, FA_OP_BACKWARD, 128, 2, 2, FA_DEVICE_HIP);
  s.p.kernel_family = "mfma";
  hg_target small = hip;
  small.smem_limit = (int64_t)HG_BWD_SMEM(32, 32, 128);
  hg_decide(&s.r, &small, &dec);
  CHECK(!dec.supported && strstr(dec.reason, "shared memory"), "mfma bwd small LDS: '%s'",
        dec.reason);
  CHECK(hip_arch_has_mfma("gfx90a") && hip_arch_has_mfma("gfx940") && !hip_arch_has_mfma("gfx1100"),
        "hip_arch_has_mfma");
  CHECK(
      hip_arch_has_wmma("gfx1100") && !hip_arch_has_wmma("gfx90a") && !hip_arch_has_wmma("gfx1030"),
      "hip_arch_has_wmma");
  /* RDNA3: the same matrix kernels with WMMA, asked for as "wmma"; each family only where the
     device has its instruction. */
  const hg_target rdna = {"hip.generic", FA_DEVICE_HIP,  "RX 7900 XTX",
                          64 * 1024,     HG_MATRIX_WMMA, 0};
  make_req(&s, FA_OP_BACKWARD, 64, 2, 2, FA_DEVICE_HIP);
  s.p.kernel_family = "wmma";
  hg_decide(&s.r, &rdna, &dec);
  CHECK(dec.supported && !strcmp(dec.kernel, "hip.generic.wmma.bwd.bf16.hd64"),
        "wmma bwd: %d '%s' '%s'", dec.supported, dec.kernel, dec.reason);
  hg_decide(&s.r, &hip, &dec);
  CHECK(!dec.supported && strstr(dec.reason, "no WMMA kernels"), "wmma on CDNA: '%s'", dec.reason);
  s.p.kernel_family = "mfma";
  hg_decide(&s.r, &rdna, &dec);
  CHECK(!dec.supported && strstr(dec.reason, "no MFMA kernels"), "mfma on RDNA3: '%s'", dec.reason);
  /* The names the HIP plugin loads from its module, and the test plugin's subset. */
  char names[64][HG_KERNEL_NAME_LEN];
  CHECK(hg_kernel_names(names, 64, 0) == HG_KERNEL_COUNT, "generic kernel name count");
  CHECK(hg_kernel_names(names, 64, 1) == HG_KERNEL_COUNT_MFMA, "kernel name count with mfma");
  int mf = 0, mb = 0;
  for (int i = 0; i < HG_KERNEL_COUNT_MFMA; ++i) {
    mf += !strncmp(names[i], "hg_fwd_mfma_", 12);
    mb += !strncmp(names[i], "hg_bwd_main_mfma_", 17);
  }
  /* 3 classes x 2 key tiles x 2 dtypes forwards; the bundle's 3 backward tiles x 2 dtypes. */
  CHECK(HG_KERNEL_COUNT == 22 && HG_KERNEL_COUNT_MFMA == 40, "kernel counts %d, %d",
        HG_KERNEL_COUNT, HG_KERNEL_COUNT_MFMA);
  CHECK(mf == 12 && mb == 6, "%d MFMA forward, %d MFMA backward kernel names", mf, mb);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_hip_info <libfa_hip.so path>\n");
    return 2;
  }
  check_arch();
  check_decide();
  check_backend_info(argv[1]);
  printf("test_hip_info: %s (%d failure%s)\n", hip_test_failures ? "FAILED" : "passed",
         hip_test_failures, hip_test_failures == 1 ? "" : "s");
  return hip_test_failures ? 1 : 0;
}
