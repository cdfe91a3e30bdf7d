/*
 * test_cpu_amx.h: what the CPU backend's AMX tests share (test_cpu_bf16dp.c --isa amx,
 * test_cpu_amx_bwd.c).
 */
#ifndef FA_TESTS_TEST_CPU_AMX_H
#define FA_TESTS_TEST_CPU_AMX_H

#include <stdio.h>
#include <string.h>

#include "flash_attn.h"

/* The CPU backend's device line into line (empty when fa_backend_info has no CPU backend). */
static inline void cpu_device_line(char *line, size_t n) {
  fa_backend_desc descs[8];
  int32_t count = 0;
  line[0] = '\0';
  for (int32_t i = 0; i < 8; ++i) fa_backend_desc_init(&descs[i]);
  if (fa_backend_info(descs, 8, &count) != FA_OK) return;
  for (int32_t i = 0; i < count && i < 8; ++i)
    if (descs[i].id == FA_BACKEND_CPU) snprintf(line, n, "%s", descs[i].devices);
}

/* Whether a device line says the CPU backend runs its AMX products (real AMX, or the test
   plugin's C model of it). */
static inline int cpu_line_says_amx(const char *line) {
  return strstr(line, "amx: in use") != NULL;
}

/* Prints the CPU backend's device line and says whether it has AMX running: with FA_CPU_ISA=amx
   set, anything else means every call is refused. */
static inline int cpu_amx_in_use(void) {
  char line[sizeof(((fa_backend_desc *)0)->devices)];
  cpu_device_line(line, sizeof line);
  printf("cpu: %s\n", line);
  return cpu_line_says_amx(line);
}

#endif /* FA_TESTS_TEST_CPU_AMX_H */
