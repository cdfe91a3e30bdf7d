/*
 * fa_info.c: `fa-info` prints what the library knows about its backends, as fa_backend_info()
 * reports it: the first thing to run when a backend is not used, because the reason is there.
 *
 * Usage: fa-info
 * Exit status: 0 when at least one backend is available, 1 when none is, 2 on an API error.
 */
#include <stdio.h>
#include <string.h>

#include "flash_attn.h"

enum { MAX_BACKENDS = 16 };

/* Prints a list the library joins with `sep`: short items (feature names) wrapped to the terminal
   width, long ones (each unsupported feature with its reason) one per line, so neither turns into
   one unreadable line. */
static void print_list(const char *label, const char *list, char sep, int one_per_line) {
  const int indent = 23, width = 100;
  printf("    %-18s ", label);
  if (!list[0]) {
    printf("-\n");
    return;
  }
  int col = indent;
  const char *p = list;
  while (*p) {
    while (*p == ' ') ++p;
    const char *end = strchr(p, sep);
    int len = end ? (int)(end - p) : (int)strlen(p);
    if (col > indent && (one_per_line || col + len + 2 > width)) {
      printf("\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      printf(" ");
      col += 1;
    }
    printf("%.*s%s", len, p, end && !one_per_line ? "," : "");
    col += len + 1;
    p = end ? end + 1 : p + len;
  }
  printf("\n");
}

int main(int argc, char **argv) {
  (void)argv;
  if (argc > 1) {
    printf(
        "usage: fa-info\nPrints the library version and every backend it knows: whether it is\n"
        "available (or exactly why not), its plugin, devices, kernels, dtypes and features.\n");
    return 0;
  }
  int major, minor, patch;
  const char *version = fa_version(&major, &minor, &patch);
  printf("flashattn-c %s (header %d.%d.%d)\n", version, FA_VERSION_MAJOR, FA_VERSION_MINOR,
         FA_VERSION_PATCH);
  if (major != FA_VERSION_MAJOR || minor != FA_VERSION_MINOR)
    printf("note: this tool was built against header %d.%d but runs with library %d.%d\n",
           FA_VERSION_MAJOR, FA_VERSION_MINOR, major, minor);

  fa_backend_desc descs[MAX_BACKENDS];
  for (int i = 0; i < MAX_BACKENDS; ++i) fa_backend_desc_init(&descs[i]);
  int32_t count = 0;
  fa_status st = fa_backend_info(descs, MAX_BACKENDS, &count);
  if (st != FA_OK) {
    fprintf(stderr, "fa-info: fa_backend_info failed: %s: %s\n", fa_status_string(st),
            fa_last_error());
    return 2;
  }
  if (count > MAX_BACKENDS) count = MAX_BACKENDS;

  int available = 0;
  printf("\n%d backends:\n", (int)count);
  for (int32_t i = 0; i < count; ++i) {
    const fa_backend_desc *d = &descs[i];
    available += d->available != 0;
    printf("\n  %s: %s", d->name, d->available ? "available\n" : "unavailable: ");
    if (!d->available) printf("%s\n", d->reason[0] ? d->reason : "(no reason given)");
    printf("    %-18s %s\n", "plugin", d->plugin_path[0] ? d->plugin_path : "-");
    /* A plugin that loaded but found no device still knows its devices' facts: show them. */
    if (d->available || d->device_count > 0 || d->devices[0] || d->arch[0]) {
      printf("    %-18s %d%s%s\n", "devices", (int)d->device_count, d->devices[0] ? ": " : "",
             d->devices);
      printf("    %-18s %s\n", "arch", d->arch[0] ? d->arch : "-");
      printf("    %-18s %s\n", "kernel families", d->kernel_families[0] ? d->kernel_families : "-");
      printf("    %-18s %s\n", "dtypes", d->dtypes[0] ? d->dtypes : "-");
    }
    if (d->available) {
      print_list("features", d->features, ',', 0);
      print_list("unsupported", d->unsupported, ';', 1);
    }
  }
  printf("\n%d of %d backends available.", available, (int)count);
  if (!available) printf(" Set FA_PLUGIN_PATH to the directory holding libfa_<name>.so?");
  printf("\n");
  return available ? 0 : 1;
}
