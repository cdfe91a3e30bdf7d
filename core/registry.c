/*
 * registry.c: plugin discovery and loading.
 *
 * Each backend is a shared object libfa_<name>.so. The registry looks, in order, in the
 * directories of FA_PLUGIN_PATH (absolute paths only), in FA_PLUGIN_SUBDIR below the directory of
 * libflashattn.so itself (the install tree, lib/flashattn/plugins) and beside it (the build tree),
 * never in the current directory. The library's own directory comes from dladdr when the library
 * is loaded and is made absolute with realpath then: a library opened by a relative path (dlopen,
 * LD_LIBRARY_PATH) has a relative name in dladdr's answer, which a later chdir would point
 * elsewhere. The first file found is the one tried; if it fails (dlopen error, no entry symbol,
 * another ABI, probe says unavailable) the backend is unavailable with that reason, rather than
 * silently trying a different file. Loading happens once per process (pthread_once), on the first
 * call that needs a backend; afterwards the slots are read-only.
 */
#define _GNU_SOURCE /* dladdr, realpath */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_config.h"
#include "internal.h"

/* Indexed by backend id; filled from core/backends.c's table when the plugins are loaded. */
static fa_backend_slot slots[FA_BACKEND_COUNT_];

/* The absolute directory of libflashattn.so, resolved when the library is loaded; "" when it could
   not be, with the reason in self_dir_why. */
static char self_dir[512];
static char self_dir_why[256];

__attribute__((constructor)) static void find_self_dir(void) {
  Dl_info info;
  if (!dladdr((void *)&fa_registry_slot, &info) || !info.dli_fname) {
    snprintf(self_dir_why, sizeof self_dir_why, "dladdr does not know libflashattn's file");
    return;
  }
  const char *slash = strrchr(info.dli_fname, '/');
  if (!slash) {
    snprintf(self_dir_why, sizeof self_dir_why,
             "dladdr names libflashattn's file '%s' without a directory", info.dli_fname);
    return;
  }
  char dir[PATH_MAX];
  int n = snprintf(dir, sizeof dir, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
  if (n == 0) snprintf(dir, sizeof dir, "/"); /* the library is in the root directory */
  char abs[PATH_MAX];
  if (!realpath(dir, abs)) {
    snprintf(self_dir_why, sizeof self_dir_why, "libflashattn's directory '%s' cannot be resolved",
             dir);
    return;
  }
  if (strlen(abs) >= sizeof self_dir) {
    snprintf(self_dir_why, sizeof self_dir_why, "libflashattn's directory is longer than %zu bytes",
             sizeof self_dir - 1);
    return;
  }
  snprintf(self_dir, sizeof self_dir, "%s", abs);
}

#define MAX_DIRS 16
typedef struct search_dirs {
  int count;
  char dir[MAX_DIRS][512];
  int from_env[MAX_DIRS];     /* an FA_PLUGIN_PATH entry: its plugin files are checked too */
  char refused[MAX_DIRS][96]; /* why an FA_PLUGIN_PATH directory may not provide code, or "" */
  char ignored[512];          /* FA_PLUGIN_PATH entries refused and why, for the reason text */
} search_dirs;

static void add_dir(search_dirs *d, const char *dir, size_t len, int from_env,
                    const char *refused) {
  if (d->count >= MAX_DIRS || len == 0 || len >= sizeof d->dir[0]) return;
  memcpy(d->dir[d->count], dir, len);
  d->dir[d->count][len] = '\0';
  d->from_env[d->count] = from_env;
  snprintf(d->refused[d->count], sizeof d->refused[0], "%s", refused ? refused : "");
  d->count++;
}

static void note_ignored(search_dirs *d, const char *entry, size_t len, const char *why) {
  size_t used = strlen(d->ignored);
  snprintf(d->ignored + used, sizeof d->ignored - used, "%s'%.*s' (%s)", used ? ", " : "", (int)len,
           entry, why);
}

/*
 * Why a directory or file of FA_PLUGIN_PATH may not provide code, or NULL: anyone may write it
 * (another user could put a library there or replace one), or its owner is neither root nor the
 * user running this process. A path that does not exist is not refused: there is nothing in it.
 */
static const char *untrusted(const char *path, char *buf, size_t n) {
  struct stat st;
  if (stat(path, &st) != 0) return NULL;
  if (st.st_mode & S_IWOTH) return "world-writable";
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    snprintf(buf, n, "owned by uid %u, neither root nor this user (uid %u)", (unsigned)st.st_uid,
             (unsigned)geteuid());
    return buf;
  }
  return NULL;
}

static void find_search_dirs(search_dirs *d) {
  memset(d, 0, sizeof *d);
  const char *env = getenv("FA_PLUGIN_PATH");
  while (env && *env) {
    const char *end = strchr(env, ':');
    size_t len = end ? (size_t)(end - env) : strlen(env);
    /* Relative entries (".", "", "lib") would resolve against the current directory. */
    if (len > 0 && env[0] == '/') {
      char dir[512], buf[128];
      snprintf(dir, sizeof dir, "%.*s", (int)len, env);
      /* A refused directory stays in the search order: a plugin there is refused by name (the
         caller meant it), never replaced by one found further down the path. */
      const char *why = untrusted(dir, buf, sizeof buf);
      if (why) note_ignored(d, env, len, why);
      add_dir(d, env, len, 1, why);
    } else if (len > 0) {
      note_ignored(d, env, len, "not absolute");
    }
    env = end ? end + 1 : NULL;
  }
  if (self_dir[0]) {
    char sub[512];
    int n = snprintf(sub, sizeof sub, "%s%s%s", self_dir, strcmp(self_dir, "/") ? "/" : "",
                     FA_PLUGIN_SUBDIR);
    if (n > 0 && (size_t)n < sizeof sub) add_dir(d, sub, (size_t)n, 0, NULL);
    add_dir(d, self_dir, strlen(self_dir), 0, NULL);
  }
}

static void load_from(fa_backend_slot *s, const char *path) {
  snprintf(s->path, sizeof s->path, "%s", path);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(s->reason, sizeof s->reason, "plugin %s failed to load: %s", path, dlerror());
    return;
  }
  fa_plugin_entry_fn entry;
  void *sym = dlsym(handle, FA_PLUGIN_ENTRY_SYMBOL);
  memcpy(&entry, &sym, sizeof entry); /* object pointer -> function pointer without UB warnings */
  if (!sym) {
    snprintf(s->reason, sizeof s->reason,
             "plugin %s has no %s symbol (missing entry point: not a flashattn plugin)", path,
             FA_PLUGIN_ENTRY_SYMBOL);
    dlclose(handle);
    return;
  }
  const fa_plugin *plugin = entry(FA_PLUGIN_ABI_VERSION);
  if (!plugin) {
    snprintf(s->reason, sizeof s->reason,
             "plugin %s refused plugin ABI version %u of this core (built for another version)",
             path, FA_PLUGIN_ABI_VERSION);
    dlclose(handle);
    return;
  }
  if (plugin->abi_version != FA_PLUGIN_ABI_VERSION || plugin->struct_size < sizeof(fa_plugin)) {
    snprintf(s->reason, sizeof s->reason,
             "plugin %s was built for plugin ABI version %u (table of %u bytes) but this core "
             "needs ABI version %u (%zu bytes)",
             path, plugin->abi_version, plugin->struct_size, FA_PLUGIN_ABI_VERSION,
             sizeof(fa_plugin));
    dlclose(handle);
    return;
  }
  if (plugin->backend_id != s->id || !plugin->probe || !plugin->decide || !plugin->run) {
    snprintf(s->reason, sizeof s->reason,
             "plugin %s is malformed (backend id %d, expected %d, or a NULL function)", path,
             (int)plugin->backend_id, (int)s->id);
    dlclose(handle);
    return;
  }
  plugin->probe(&s->probe);
  if (!s->probe.available) {
    snprintf(s->reason, sizeof s->reason, "%s",
             s->probe.reason[0] ? s->probe.reason : "the plugin reports no usable device");
    return; /* kept loaded: its probe's facts (devices, arch) are still reported */
  }
  s->plugin = plugin;
  s->reason[0] = '\0';
  fa_features_probe(s);
}

/* Looks for `file` along dirs: 1 with its path when found and trusted; 0 with the reason when it is
   refused, or not found (then build_reason, if the build lacks it, else where it was looked for).
 */
static int locate(const search_dirs *dirs, const char *file, const char *build_reason, char *path,
                  size_t path_len, char *reason, size_t reason_len) {
  for (int i = 0; i < dirs->count; ++i) {
    char candidate[600];
    snprintf(candidate, sizeof candidate, "%s/%s", dirs->dir[i], file);
    if (access(candidate, F_OK) == 0) {
      char buf[128];
      const char *why = dirs->refused[i][0] ? dirs->refused[i]
                        : dirs->from_env[i] ? untrusted(candidate, buf, sizeof buf)
                                            : NULL;
      snprintf(path, path_len, "%s", candidate);
      if (why) {
        snprintf(reason, reason_len,
                 "plugin %s refused: %s%s (a plugin from FA_PLUGIN_PATH and its directory must "
                 "be owned by root or this user and not be world-writable)",
                 candidate, dirs->refused[i][0] ? "its directory is " : "", why);
        return 0;
      }
      return 1;
    }
  }
  char where[700] = "";
  for (int i = 0; i < dirs->count; ++i) {
    size_t used = strlen(where);
    snprintf(where + used, sizeof where - used, "%s%s", i ? ", " : "", dirs->dir[i]);
  }
  if (build_reason[0])
    snprintf(reason, reason_len, "%s", build_reason);
  else
    snprintf(reason, reason_len, "plugin %s not found (looked in: %s)%s%s", file,
             dirs->count ? where : "no directory",
             self_dir_why[0] ? "; not beside the library: " : "", self_dir_why);
  if (dirs->ignored[0]) {
    size_t used = strlen(reason);
    snprintf(reason + used, reason_len - used, "; FA_PLUGIN_PATH entries ignored: %s",
             dirs->ignored);
  }
  return 0;
}

int fa_plugin_locate(const char *file, const char *build_reason, char *path, size_t path_len,
                     char *reason, size_t reason_len) {
  search_dirs dirs;
  find_search_dirs(&dirs);
  path[0] = '\0';
  return locate(&dirs, file, build_reason, path, path_len, reason, reason_len);
}

static void load_slot(fa_backend_slot *s, const char *build_reason, const search_dirs *dirs) {
  char file[64];
  snprintf(file, sizeof file, "libfa_%s.so", s->name);
  char path[sizeof s->path];
  path[0] = '\0';
  if (locate(dirs, file, build_reason, path, sizeof path, s->reason, sizeof s->reason))
    load_from(s, path);
  else
    snprintf(s->path, sizeof s->path, "%s", path);
}

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load_all(void) {
  search_dirs dirs;
  find_search_dirs(&dirs);
  for (int32_t id = FA_BACKEND_CPU; id < FA_BACKEND_COUNT_; ++id) {
    const fa_backend_def *def = fa_backend_def_of(id);
    fa_backend_slot *s = &slots[id];
    s->id = id;
    s->name = def->name;
    s->owns = def->owns;
    load_slot(s, def->build_reason, &dirs);
  }
}

const fa_backend_slot *fa_registry_slot(int32_t id) {
  if (id <= FA_BACKEND_AUTO || id >= FA_BACKEND_COUNT_) return NULL;
  pthread_once(&load_once, load_all);
  return &slots[id];
}
