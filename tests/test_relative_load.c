/*
 * test_relative_load.c: libflashattn.so opened with dlopen by the path given, relative to the
 * current directory or absolute, must find its CPU plugin beside itself; with --chdir DIR the
 * process changes directory after loading the library and before the first call that loads the
 * plugins, so a library that resolved its own location late would look in the wrong place.
 *
 * Usage: test_relative_load LIBRARY [--chdir DIR]
 * Exit status 0 when the cpu backend is available and its plugin path is absolute and in the
 * library's own directory (or its plugin subdirectory); 1 otherwise, with what was seen.
 */
#define _GNU_SOURCE /* realpath */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flash_attn.h"

typedef void (*desc_init_fn)(fa_backend_desc *);
typedef fa_status (*backend_info_fn)(fa_backend_desc *, int32_t, int32_t *);

/* dlsym's object pointer as a function pointer, without a cast between the two kinds. */
static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) fprintf(stderr, "FAIL: %s not exported: %s\n", name, dlerror());
  return p;
}

int main(int argc, char **argv) {
  if (argc != 2 && !(argc == 4 && !strcmp(argv[2], "--chdir"))) {
    fprintf(stderr, "usage: test_relative_load LIBRARY [--chdir DIR]\n");
    return 2;
  }
  const char *path = argv[1];
  unsetenv("FA_PLUGIN_PATH"); /* only the library's own location may provide the plugin */
  char lib_real[PATH_MAX];
  if (!realpath(path, lib_real)) {
    fprintf(stderr, "FAIL: %s does not exist (run from the directory it is relative to)\n", path);
    return 1;
  }
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "FAIL: dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  if (argc == 4 && chdir(argv[3]) != 0) {
    fprintf(stderr, "FAIL: chdir(%s)\n", argv[3]);
    return 1;
  }
  void *p_init = sym(lib, "fa_backend_desc_init"), *p_info = sym(lib, "fa_backend_info");
  if (!p_init || !p_info) return 1;
  desc_init_fn init;
  backend_info_fn info;
  memcpy(&init, &p_init, sizeof init);
  memcpy(&info, &p_info, sizeof info);

  fa_backend_desc d[8];
  for (int i = 0; i < 8; ++i) init(&d[i]);
  int32_t n = 0;
  if (info(d, 8, &n) != FA_OK) {
    fprintf(stderr, "FAIL: fa_backend_info failed\n");
    return 1;
  }
  const fa_backend_desc *cpu = NULL;
  for (int32_t i = 0; i < n && i < 8; ++i)
    if (d[i].id == FA_BACKEND_CPU) cpu = &d[i];
  if (!cpu) {
    fprintf(stderr, "FAIL: fa_backend_info lists no cpu backend\n");
    return 1;
  }
  printf("library %s (%s)\ncpu: %s%s\nplugin: %s\n", path, lib_real,
         cpu->available ? "available" : "unavailable: ", cpu->available ? "" : cpu->reason,
         cpu->plugin_path[0] ? cpu->plugin_path : "-");
  if (!cpu->available) {
    fprintf(stderr, "FAIL: the cpu plugin was not found beside %s\n", path);
    return 1;
  }
  /* The plugin path is absolute and lies in the library's (resolved) directory or below it. */
  char *slash = strrchr(lib_real, '/');
  *slash = '\0';
  char plugin_real[PATH_MAX];
  if (cpu->plugin_path[0] != '/' || !realpath(cpu->plugin_path, plugin_real) ||
      strncmp(plugin_real, lib_real, strlen(lib_real)) != 0 ||
      plugin_real[strlen(lib_real)] != '/') {
    fprintf(stderr, "FAIL: plugin path '%s' is not an absolute path under %s\n", cpu->plugin_path,
            lib_real);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
