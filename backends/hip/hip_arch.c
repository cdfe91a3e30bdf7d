/* hip_arch.c: see hip_arch.h. */
#include "hip_arch.h"

#include <stdio.h>
#include <string.h>

void hip_arch_base(const char *gcn_arch_name, char *out, size_t n) {
  if (!n) return;
  size_t len = strcspn(gcn_arch_name ? gcn_arch_name : "", ":");
  if (len >= n) len = n - 1;
  memcpy(out, gcn_arch_name ? gcn_arch_name : "", len);
  out[len] = '\0';
}

int hip_arch_built(const char *base, const char *built) {
  size_t want = strlen(base);
  if (!want) return 0;
  for (const char *p = built; *p;) {
    size_t len = strcspn(p, ";, ");
    if (len == want && !strncmp(p, base, len)) return 1;
    p += len;
    while (*p == ';' || *p == ',' || *p == ' ') ++p;
  }
  return 0;
}

int hip_arch_refusal(const char *device_name, const char *base, const char *built, char *out,
                     size_t n) {
  if (hip_arch_built(base, built)) {
    if (n) out[0] = '\0';
    return 0;
  }
  snprintf(out, n,
           "%s is %s: architecture not built (this plugin carries code objects for {%s}; "
           "rebuild with FA_HIP_ARCHS including %s)",
           device_name, base[0] ? base : "an unknown architecture", built, base[0] ? base : "it");
  return 1;
}

int hip_arch_has_mfma(const char *base) {
  return !strcmp(base, "gfx90a") || !strcmp(base, "gfx940");
}

int hip_arch_has_wmma(const char *base) { return !strcmp(base, "gfx1100"); }
