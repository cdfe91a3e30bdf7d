/*
 * test_features.c: fa_backend_info's feature list for a backend whose passes differ in what they
 * run (tests/fake_plugin_limited.c, loaded as the hip backend from DIR):
 *
 *   test_features DIR
 *
 * The fake runs the forward up to head dim 256 and the backward up to 128, and packed sequences
 * in the forward only. fwd and bwd are claimed; hd256 and varlen must not be (a caller reading
 * "bwd" and "hd256" would expect a head-dim-256 backward, "bwd" and "varlen" a varlen backward),
 * and their entries in the unsupported list must carry the backward's reason.
 */
#define _DEFAULT_SOURCE /* realpath, setenv */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "flash_attn.h"
#include "tensor_util.h"

static int failures;

static void check(int ok, const char *what, const char *detail) {
  printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what, ok ? "" : ": ", ok ? "" : detail);
  failures += !ok;
}

/* Whether the comma-separated list holds name exactly. */
static int listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

int main(int argc, char **argv) {
  static char dir[PATH_MAX], file[PATH_MAX + 32];
  if (argc != 2 || !realpath(argv[1], dir)) {
    fprintf(stderr, "usage: %s DIR (holding the fake libfa_hip.so)\n", argv[0]);
    return 2;
  }
  /* The registry trusts only folders and files their owner alone may write. */
  snprintf(file, sizeof file, "%s/libfa_hip.so", dir);
  chmod(dir, 0755);
  chmod(file, 0755);
  setenv("FA_PLUGIN_PATH", dir, 1);

  fa_backend_desc hip;
  const fa_status st = tu_backend_desc(FA_BACKEND_HIP, &hip);
  if (st != FA_OK && st != FA_ERR_BACKEND_UNAVAILABLE) {
    printf("FAIL fa_backend_info: %s\n", fa_last_error());
    return 1;
  }
  if (st != FA_OK || !hip.available) {
    printf("FAIL the fake hip backend did not load: %s\n",
           st == FA_OK ? hip.reason : "(not listed)");
    return 1;
  }
  check(strstr(hip.plugin_path, dir) == hip.plugin_path, "the hip backend is the fake one",
        hip.plugin_path);
  check(listed(hip.features, "fwd") && listed(hip.features, "bwd"), "fwd and bwd are claimed",
        hip.features);
  check(!listed(hip.features, "hd256"), "hd256 is not claimed (the backward stops at 128)",
        hip.features);
  const char *entry = strstr(hip.unsupported, "hd256 (");
  check(entry && strstr(entry, "backward at head_dim 256"),
        "the unsupported list gives hd256 the backward's reason", hip.unsupported);
  check(!listed(hip.features, "hd512"), "hd512 is not claimed", hip.features);
  check(!listed(hip.features, "varlen"), "varlen is not claimed (the backward refuses it)",
        hip.features);
  entry = strstr(hip.unsupported, "varlen (");
  check(entry && strstr(entry, "backward has no packed sequences"),
        "the unsupported list gives varlen the backward's reason", hip.unsupported);
  printf("test_features: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
