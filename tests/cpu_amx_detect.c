/*
 * cpu_amx_detect.c: the CPU backend's AMX detection (backends/cpu/cpu_amx_detect.c, compiled in)
 * and FA_CPU_ISA=amx through the public API.
 *
 * 1. cpu_amx_decide on made-up facts: each missing piece (AMX-TILE, AMX-BF16, AVX512-BF16,
 *    OSXSAVE, the XCR0 tile bits) gives CPU_AMX_NO with its own reason and never asks for the
 *    permission; with everything present, no request function gives CPU_AMX_PRESENT, a refusing
 *    one (each errno the kernel documents) CPU_AMX_NO naming the errno, a granting one
 *    CPU_AMX_READY.
 * 1b. cpu_amx_wanted: FA_CPU_ISA unset or empty (the default) and "amx" want the AMX products;
 *    every other value (the narrower builds, avx512bf16, an unknown name) does not.
 * 2. This machine's facts against CPUID read here, and Linux's real permission request where the
 *    CPU has no AMX: the kernel must refuse it (the refused branch with a real syscall).
 * 3. FA_CPU_ISA=amx (set before the plugin chooses): where AMX cannot run, fa_forward returns
 *    FA_ERR_UNSUPPORTED naming FA_CPU_ISA=amx and this CPU's reason, leaves the (poisoned) output
 *    untouched, and the device line says why; where it can, the forward is named cpu.flash.amx.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/math/dtype.h"
#include "cpu_amx.h"
#include "flash_attn.h"
#include "tensor_util.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif

static int fails;

static void check(int ok, const char *what, const char *detail) {
  printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail ? ": " : "", detail ? detail : "");
  if (!ok) ++fails;
}

static int requests, request_result;
static int fake_request(void) {
  ++requests;
  return request_result;
}

static cpu_amx_facts all_present(void) {
  cpu_amx_facts f = {1, 1, 1, 1, (1ull << 17) | (1ull << 18) | 0xe7};
  return f;
}

/* One decision; checks its state, that the reason names `needle`, and how often it asked. */
static void expect(const char *what, const cpu_amx_facts *f, cpu_amx_request_fn req, int result,
                   cpu_amx_state want, const char *needle, int want_requests) {
  char why[160] = "unset";
  requests = 0;
  request_result = result;
  cpu_amx_state st = cpu_amx_decide(f, req, why, sizeof why);
  check(st == want && strstr(why, needle) != NULL && requests == want_requests, what, why);
}

static void decisions(void) {
  cpu_amx_facts f = all_present();
  f.amx_tile = 0;
  expect("no AMX-TILE", &f, fake_request, 0, CPU_AMX_NO, "AMX-TILE bit 24 = 0", 0);
  f = all_present();
  f.amx_bf16 = 0;
  expect("no AMX-BF16", &f, fake_request, 0, CPU_AMX_NO, "AMX-BF16 bit 22 = 0", 0);
  f = all_present();
  f.avx512bf16 = 0;
  expect("no AVX512-BF16", &f, fake_request, 0, CPU_AMX_NO, "no AVX512-BF16", 0);
  f = all_present();
  f.osxsave = 0;
  f.xcr0 = 0;
  expect("no OSXSAVE", &f, fake_request, 0, CPU_AMX_NO, "no OSXSAVE", 0);
  f = all_present();
  f.xcr0 &= ~(1ull << 18);
  expect("XCR0 without XTILEDATA", &f, fake_request, 0, CPU_AMX_NO, "XCR0 bits 17-18 = 10", 0);
  f = all_present();
  expect("present, not asked", &f, NULL, 0, CPU_AMX_PRESENT, "permission was not asked", 0);
  expect("permission refused (EINVAL)", &f, fake_request, EINVAL, CPU_AMX_NO,
         "refused the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM: errno 22, EINVAL", 1);
  expect("permission refused (ENOSPC)", &f, fake_request, ENOSPC, CPU_AMX_NO, "ENOSPC", 1);
  expect("permission refused (EPERM)", &f, fake_request, EPERM, CPU_AMX_NO, "EPERM", 1);
  expect("permission granted", &f, fake_request, 0, CPU_AMX_READY, "tile data permitted", 1);
}

/* AMX-TILE and AMX-BF16 as CPUID says, read here independently of the plugin's code. */
static int cpu_has_amx(void) {
#if defined(__GNUC__) && defined(__x86_64__)
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 22 & 1);
#else
  return 0;
#endif
}

static void this_machine(void) {
  cpu_amx_facts f;
  cpu_amx_read_facts(&f);
  char detail[96];
  snprintf(detail, sizeof detail, "tile %d bf16 %d avx512bf16 %d osxsave %d xcr0 0x%llx",
           f.amx_tile, f.amx_bf16, f.avx512bf16, f.osxsave, (unsigned long long)f.xcr0);
  check((f.amx_tile && f.amx_bf16) == cpu_has_amx(), "facts agree with CPUID", detail);
#if defined(__linux__) && defined(__x86_64__)
  if (!cpu_has_amx()) {
    int err = cpu_amx_request_linux();
    snprintf(detail, sizeof detail, "errno %d", err);
    check(err != 0, "Linux refuses the tile data permission on a CPU without AMX", detail);
  }
#endif
}

static const char *cpu_device_line(void) {
  static fa_backend_desc cpu;
  return tu_backend_desc(FA_BACKEND_CPU, &cpu) == FA_OK ? cpu.devices : "";
}

static void through_the_api(void) {
  enum { S = 40, H = 2, D = 64 };
  static uint16_t q[S * H * D], k[S * H * D], v[S * H * D], o[S * H * D];
  tu_rng rng;
  tu_rng_init(&rng, tu_seed_for(tu_run_seed(), "cpu_amx_detect"));
  for (int x = 0; x < S * H * D; ++x) {
    q[x] = fa_f32_to_bf16((float)tu_rng_normal(&rng));
    k[x] = fa_f32_to_bf16((float)tu_rng_normal(&rng));
    v[x] = fa_f32_to_bf16((float)tu_rng_normal(&rng));
    o[x] = 0x7fc1; /* poison: a NaN */
  }
  fa_tensor tq = tu_view_bshd(q, FA_BF16, 1, S, H, D), tk = tu_view_bshd(k, FA_BF16, 1, S, H, D);
  fa_tensor tv = tu_view_bshd(v, FA_BF16, 1, S, H, D), to = tu_view_bshd(o, FA_BF16, 1, S, H, D);
  fa_params p;
  fa_params_init(&p);
  p.backend = FA_BACKEND_CPU;
  fa_run_info info;
  fa_run_info_init(&info);
  fa_status st = fa_forward(&p, &tq, &tk, &tv, &to, NULL, &info);
  char msg[512]; /* fa_backend_info below resets the thread's last error */
  snprintf(msg, sizeof msg, "%s", fa_last_error());
  const char *line = cpu_device_line();
  if (!cpu_has_amx()) {
    check(st == FA_ERR_UNSUPPORTED, "FA_CPU_ISA=amx without AMX: FA_ERR_UNSUPPORTED", NULL);
#if defined(__x86_64__)
    const char *reason = "this CPU has no AMX-BF16", *note = "amx: this CPU has no AMX-BF16";
#else
    const char *reason = "this plugin has no AMX build", *note = "amx: not built";
#endif
    check(strstr(msg, "FA_CPU_ISA=amx") && strstr(msg, reason),
          "the message names the request and this CPU's reason", msg);
    int untouched = 1;
    for (int x = 0; x < S * H * D; ++x) untouched &= o[x] == 0x7fc1;
    check(untouched, "the refused call left the output as it was", NULL);
    check(strstr(line, note) != NULL, "the device line says why", line);
    return;
  }
  /* AMX in CPUID: the OS may still refuse; either way the outcome must say so. */
  if (st == FA_OK)
    check(strncmp(info.kernel, "cpu.flash.amx.fwd.bf16.", 23) == 0 &&
              strstr(line, "amx: in use") != NULL,
          "FA_CPU_ISA=amx with AMX: the AMX forward ran (test_cpu_bf16dp --isa amx checks its "
          "numbers)",
          info.kernel);
  else
    check(st == FA_ERR_UNSUPPORTED && strstr(msg, "FA_CPU_ISA=amx") != NULL,
          "FA_CPU_ISA=amx with AMX in CPUID but not usable: refused with the reason", msg);
}

static void wanted(void) {
  static const struct {
    const char *isa;
    int want;
  } rule[] = {{NULL, 1},   {"", 1},        {"amx", 1},  {"avx512", 0}, {"avx512bf16", 0},
              {"avx2", 0}, {"generic", 0}, {"neon", 0}, {"AMX", 0},    {"amx ", 0}};
  for (size_t i = 0; i < sizeof rule / sizeof rule[0]; ++i) {
    char what[96];
    snprintf(what, sizeof what, "cpu_amx_wanted(%s%s%s) = %d", rule[i].isa ? "\"" : "",
             rule[i].isa ? rule[i].isa : "NULL", rule[i].isa ? "\"" : "", rule[i].want);
    check(cpu_amx_wanted(rule[i].isa) == rule[i].want, what, NULL);
  }
}

int main(void) {
  setenv("FA_CPU_ISA", "amx", 1); /* before the plugin chooses (once per process) */
  decisions();
  wanted();
  this_machine();
  through_the_api();
  printf("cpu_amx_detect: %d failed\n", fails);
  return fails ? 1 : 0;
}
