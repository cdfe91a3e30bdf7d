/*
 * test_cpu_amx.h: what the CPU backend's AMX tests share (test_cpu_bf16dp.c --isa amx,
 * test_cpu_amx_bwd.c).
 */
#ifndef FA_TESTS_TEST_CPU_AMX_H
#define FA_TESTS_TEST_CPU_AMX_H

#include <stdio.h>
#include <string.h>

#include "flash_attn.h"

/* Prints the CPU backend's device line and says whether it has AMX running (real AMX, or the test
   plugin's C model of it): with FA_CPU_ISA=amx set, anything else means every call is refused. */
static inline int cpu_amx_in_use(void) {
  fa_backend_desc descs[8];
  int32_t n = 0;
  for (int32_t i = 0; i < 8; ++i) fa_backend_desc_init(&descs[i]);
  if (fa_backend_info(descs, 8, &n) != FA_OK) return 0;
  for (int32_t i = 0; i < n && i < 8; ++i)
    if (descs[i].id == FA_BACKEND_CPU) {
      printf("cpu: %s\n", descs[i].devices);
      return strstr(descs[i].devices, "amx: in use") != NULL;
    }
  return 0;
}

#endif /* FA_TESTS_TEST_CPU_AMX_H */
