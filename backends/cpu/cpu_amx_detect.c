/*
 * cpu_amx_detect.c: whether AMX may run (see cpu_amx.h): the facts from CPUID and XGETBV, the
 * Linux permission request, and the decision with its reason.
 */
#if defined(__linux__)
#define _GNU_SOURCE /* syscall() */
#endif
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cpu_amx.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* XCR0 bits of the tile state (Intel SDM vol. 1, 13.1); also Linux's xfeature numbers. */
#define XFEATURE_XTILECFG 17
#define XFEATURE_XTILEDATA 18
#define XCR0_TILE ((1ull << XFEATURE_XTILECFG) | (1ull << XFEATURE_XTILEDATA))

/* arch_prctl codes of Linux's x86 ABI (arch/x86/include/uapi/asm/prctl.h, since 5.16), written
   here so the build does not depend on the installed kernel headers' age. */
#define FA_ARCH_GET_XCOMP_PERM 0x1022
#define FA_ARCH_REQ_XCOMP_PERM 0x1023

void cpu_amx_read_facts(cpu_amx_facts *f) {
  f->amx_tile = f->amx_bf16 = f->avx512bf16 = f->osxsave = 0;
  f->xcr0 = 0;
#if defined(__GNUC__) && defined(__x86_64__)
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) f->osxsave = (c >> 27) & 1;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f->amx_tile = (d >> 24) & 1;
    f->amx_bf16 = (d >> 22) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f->avx512bf16 = (a >> 5) & 1;
  if (f->osxsave) {
    /* XGETBV by its encoding: the intrinsic would need -mxsave for this file. */
    unsigned lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    f->xcr0 = (uint64_t)hi << 32 | lo;
  }
#endif
}

int cpu_amx_request_linux(void) {
#if defined(__linux__) && defined(__x86_64__)
  if (syscall(SYS_arch_prctl, FA_ARCH_REQ_XCOMP_PERM, (unsigned long)XFEATURE_XTILEDATA) != 0)
    return errno ? errno : EPERM;
  /* Granted means the permitted set now holds the tile data: confirm it rather than trust the
     return value alone. */
  unsigned long permitted = 0;
  if (syscall(SYS_arch_prctl, FA_ARCH_GET_XCOMP_PERM, &permitted) != 0)
    return errno ? errno : EPERM;
  return (permitted >> XFEATURE_XTILEDATA) & 1 ? 0 : EPERM;
#else
  return ENOSYS;
#endif
}

/* The errno values the kernel's xstate code gives for this request, in words. */
static const char *request_error(int err) {
  switch (err) {
    case EINVAL:
      return "EINVAL: the kernel does not offer the tile state (older than Linux 5.16, or AMX "
             "disabled)";
    case EOPNOTSUPP:
      return "EOPNOTSUPP: the kernel sees no AMX on this CPU";
    case ENOSPC:
      return "ENOSPC: a signal stack of this process is too small for the tile state";
    case EPERM:
      return "EPERM: not permitted";
    case ENOSYS:
      return "ENOSYS: no arch_prctl permission request on this OS";
    default:
      return "an unexpected error";
  }
}

int cpu_amx_wanted(const char *fa_cpu_isa) {
  return !fa_cpu_isa || !*fa_cpu_isa || strcmp(fa_cpu_isa, "amx") == 0;
}

cpu_amx_state cpu_amx_decide(const cpu_amx_facts *f, cpu_amx_request_fn request, char *why,
                             size_t n) {
  if (!f->amx_tile || !f->amx_bf16) {
    snprintf(why, n,
             "this CPU has no AMX-BF16 (CPUID 7.0 EDX: AMX-TILE bit 24 = %d, AMX-BF16 bit "
             "22 = %d)",
             f->amx_tile, f->amx_bf16);
    return CPU_AMX_NO;
  }
  if (!f->avx512bf16) {
    snprintf(why, n,
             "this CPU has AMX but no AVX512-BF16 (CPUID 7.1 EAX bit 5), which the AMX "
             "forward's bf16 conversion needs");
    return CPU_AMX_NO;
  }
  if (!f->osxsave || (f->xcr0 & XCR0_TILE) != XCR0_TILE) {
    snprintf(why, n, "the OS has not enabled the tile state (XCR0 bits 17-18 = %d%d%s)",
             (int)(f->xcr0 >> XFEATURE_XTILECFG & 1), (int)(f->xcr0 >> XFEATURE_XTILEDATA & 1),
             f->osxsave ? "" : ", no OSXSAVE");
    return CPU_AMX_NO;
  }
  if (!request) {
    snprintf(why, n, "present; not in use (the permission was not asked)");
    return CPU_AMX_PRESENT;
  }
  const int err = request();
  if (err != 0) {
    snprintf(why, n,
             "the OS refused the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM: "
             "errno %d, %s)",
             err, request_error(err));
    return CPU_AMX_NO;
  }
  snprintf(why, n, "tile data permitted (arch_prctl ARCH_REQ_XCOMP_PERM)");
  return CPU_AMX_READY;
}
