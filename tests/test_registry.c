/*
 * test_registry.c: plugin discovery and loading (core/registry.c), seen through the public API.
 *
 * Usage: test_registry DIR_WRONG_ABI DIR_NO_ENTRY
 *   DIR_WRONG_ABI holds libfa_opencl.so built for another plugin ABI (fake_plugin_wrong_abi.c),
 *   DIR_NO_ENTRY holds libfa_hip.so without the entry symbol (fake_plugin_no_entry.c).
 *
 * The registry loads once per process, so the order below matters:
 *   1. forked children, before this process touches the library, check that plugins in the
 *      current directory are never loaded (FA_PLUGIN_PATH unset, or set to relative entries);
 *   2. 8 threads make the process's first library calls at once (the lazy load races) and must
 *      all see the same table;
 *   3. that table is checked: cpu available, the fake plugins refused with the right reasons,
 *      and calls that name an unavailable backend fail cleanly.
 */
#define _XOPEN_SOURCE 700 /* realpath, pthread barriers */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flash_attn.h"
#include "core/plugin.h"
#include "harness.h"

enum { MAX_BACKENDS = 16 };

/* The whole table as one value, so answers from different threads can be compared. */
typedef struct table {
  fa_status status;
  int32_t count;
  fa_backend_desc d[MAX_BACKENDS];
} table;

static void read_table(table *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < MAX_BACKENDS; ++i) fa_backend_desc_init(&t->d[i]);
  t->status = fa_backend_info(t->d, MAX_BACKENDS, &t->count);
}

static const fa_backend_desc *find(const table *t, int32_t id) {
  int32_t n = t->count < MAX_BACKENDS ? t->count : MAX_BACKENDS;
  for (int32_t i = 0; i < n; ++i)
    if (t->d[i].id == id) return &t->d[i];
  return NULL;
}

/* Field-wise equality: the bytes after each string's terminator are not part of the answer. */
static int desc_equal(const fa_backend_desc *a, const fa_backend_desc *b) {
  return a->id == b->id && a->available == b->available && a->device_count == b->device_count &&
         !strcmp(a->name, b->name) && !strcmp(a->reason, b->reason) &&
         !strcmp(a->plugin_path, b->plugin_path) && !strcmp(a->devices, b->devices) &&
         !strcmp(a->arch, b->arch) && !strcmp(a->kernel_families, b->kernel_families) &&
         !strcmp(a->dtypes, b->dtypes) && !strcmp(a->features, b->features) &&
         !strcmp(a->unsupported, b->unsupported);
}

static int starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---------------------------------------------------------------------------------------------
 * 1. The current directory is never searched (each scenario in a fresh child process)
 * ------------------------------------------------------------------------------------------- */

/* Runs in a child: chdir to cwd with FA_PLUGIN_PATH set to plugin_path (NULL: unset), then checks
   that backend id was not loaded from a file under forbidden_dir. Exit status 0 = pass. */
static int child_check(const char *cwd, const char *plugin_path, int32_t id,
                       const char *forbidden_dir) {
  if (plugin_path)
    setenv("FA_PLUGIN_PATH", plugin_path, 1);
  else
    unsetenv("FA_PLUGIN_PATH");
  if (chdir(cwd) != 0) {
    printf("  child: chdir %s: %s\n", cwd, strerror(errno));
    return 2;
  }
  table t;
  read_table(&t);
  const fa_backend_desc *d = find(&t, id);
  if (t.status != FA_OK || !d) {
    printf("  child: fa_backend_info failed: %s\n", fa_last_error());
    return 1;
  }
  /* The fake plugin would either be reported as the path tried or leave its failure (ABI version /
     missing entry) in the reason; the real build's reason ("not built: ...") is what must show. */
  int bad = starts_with(d->plugin_path, forbidden_dir) || strstr(d->reason, "ABI") ||
            strstr(d->reason, FA_PLUGIN_ENTRY_SYMBOL) || strstr(d->reason, forbidden_dir);
  if (bad)
    printf(
        "  child (cwd %s, FA_PLUGIN_PATH %s): %s was looked up in the current directory: "
        "path '%s', reason '%s'\n",
        cwd, plugin_path ? plugin_path : "(unset)", d->name, d->plugin_path, d->reason);
  fflush(stdout);
  return bad ? 1 : 0;
}

static void run_child(const char *name, const char *cwd, const char *plugin_path, int32_t id,
                      const char *forbidden_dir) {
  test_case_begin(name);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    test_fail("fork: %s", strerror(errno));
  } else if (pid == 0) {
    int rc = child_check(cwd, plugin_path, id, forbidden_dir);
    fflush(stdout); /* _exit skips stdio's flush */
    _exit(rc);
  } else {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
      test_fail("waitpid: %s", strerror(errno));
    else if (!WIFEXITED(status))
      test_fail("child died (signal %d)", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    else if (WEXITSTATUS(status) != 0)
      test_fail("child exit status %d", WEXITSTATUS(status));
  }
  test_case_end();
}

/* ---------------------------------------------------------------------------------------------
 * 1b. FA_PLUGIN_PATH entries anyone could write, or someone else owns, provide no code
 * ------------------------------------------------------------------------------------------- */

/* Child: with FA_PLUGIN_PATH = dir, backend id must be unavailable with a reason containing want
   and naming the plugin under dir, never having been loaded (no ABI complaint from the fake). */
static int child_refused(const char *dir, int32_t id, const char *want) {
  setenv("FA_PLUGIN_PATH", dir, 1);
  table t;
  read_table(&t);
  const fa_backend_desc *d = find(&t, id);
  if (t.status != FA_OK || !d) {
    printf("  child: fa_backend_info failed: %s\n", fa_last_error());
    return 1;
  }
  int ok = !d->available && strstr(d->reason, want) && strstr(d->reason, dir) &&
           !strstr(d->reason, "ABI version");
  if (!ok) printf("  child: %s: available %d, reason '%s'\n", d->name, d->available, d->reason);
  fflush(stdout);
  return ok ? 0 : 1;
}

static void run_refused(const char *name, const char *dir, int32_t id, const char *want) {
  test_case_begin(name);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    test_fail("fork: %s", strerror(errno));
  } else if (pid == 0) {
    int rc = child_refused(dir, id, want);
    fflush(stdout);
    _exit(rc);
  } else {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      test_fail("child failed (status %d)", status);
  }
  test_case_end();
}

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
  int ok = in && out;
  char buf[65536];
  size_t n;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
  if (in) fclose(in);
  if (out && fclose(out) != 0) ok = 0;
  return ok;
}

/* A copy of the fake opencl plugin in a fresh directory, made untrusted three ways in turn. */
static void test_untrusted_paths(const char *dir_abi) {
  char dir[] = "/tmp/fa_registry_XXXXXX", src[PATH_MAX + 32], dst[sizeof dir + 32];
  if (!mkdtemp(dir)) {
    test_case_begin("untrusted FA_PLUGIN_PATH entries are refused");
    test_fail("mkdtemp: %s", strerror(errno));
    test_case_end();
    return;
  }
  snprintf(src, sizeof src, "%s/libfa_opencl.so", dir_abi);
  snprintf(dst, sizeof dst, "%s/libfa_opencl.so", dir);
  if (!copy_file(src, dst) || chmod(dst, 0644) != 0) {
    test_case_begin("untrusted FA_PLUGIN_PATH entries are refused");
    test_fail("copying %s: %s", src, strerror(errno));
    test_case_end();
  } else {
    chmod(dir, 0777);
    run_refused("a plugin in a world-writable FA_PLUGIN_PATH directory is refused", dir,
                FA_BACKEND_OPENCL, "its directory is world-writable");
    chmod(dir, 0755);
    chmod(dst, 0666);
    run_refused("a world-writable plugin file in FA_PLUGIN_PATH is refused", dir, FA_BACKEND_OPENCL,
                "refused: world-writable");
    chmod(dst, 0644);
    if (geteuid() == 0) {
      if (chown(dst, 65534, 65534) == 0)
        run_refused("a plugin owned by another user is refused", dir, FA_BACKEND_OPENCL,
                    "owned by uid 65534");
    } else {
      printf("skip a plugin owned by another user is refused (needs root to chown)\n");
    }
  }
  unlink(dst);
  rmdir(dir);
}

/* ---------------------------------------------------------------------------------------------
 * 2. The lazy load under a race: 8 threads make the first calls together
 * ------------------------------------------------------------------------------------------- */

enum { THREADS = 8 };
static pthread_barrier_t g_start;
static table g_tables[THREADS];

static void *racer(void *arg) {
  table *t = arg;
  pthread_barrier_wait(&g_start); /* all threads enter the library at (nearly) the same time */
  read_table(t);
  return NULL;
}

static void test_concurrent_first_calls(void) {
  test_case_begin("8 threads calling fa_backend_info as the process's first calls agree");
  pthread_t th[THREADS];
  pthread_barrier_init(&g_start, NULL, THREADS);
  int started = 0;
  for (int i = 0; i < THREADS; ++i) {
    if (pthread_create(&th[i], NULL, racer, &g_tables[i]) != 0) {
      test_fail("pthread_create %d failed", i);
      break;
    }
    ++started;
  }
  if (started < THREADS) {
    /* The barrier would never open; nothing more can be checked safely. */
    printf("test_registry: cannot start threads\n");
    exit(1);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g_start);
  for (int i = 0; i < THREADS; ++i) {
    if (g_tables[i].status != FA_OK) test_fail("thread %d: status %d", i, (int)g_tables[i].status);
    if (g_tables[i].count != g_tables[0].count)
      test_fail("thread %d saw %d backends, thread 0 saw %d", i, g_tables[i].count,
                g_tables[0].count);
    int32_t n = g_tables[0].count < MAX_BACKENDS ? g_tables[0].count : MAX_BACKENDS;
    for (int32_t b = 0; b < n; ++b)
      if (!desc_equal(&g_tables[i].d[b], &g_tables[0].d[b]))
        test_fail("thread %d's entry %d (%s) differs from thread 0's", i, b, g_tables[i].d[b].name);
  }
  test_case_end();
}

/* ---------------------------------------------------------------------------------------------
 * 3. The table itself
 * ------------------------------------------------------------------------------------------- */

static void print_desc(const fa_backend_desc *d) {
  printf("  %-7s %s%s  [%s]\n", d->name,
         d->available ? "available" : "unavailable: ", d->available ? "" : d->reason,
         d->plugin_path);
}

static void test_table(const table *t, const char *dir_abi, const char *dir_entry) {
  test_case_begin("fa_backend_info lists every backend once, by its name");
  if (t->status != FA_OK) test_fail("status %s: %s", fa_status_string(t->status), fa_last_error());
  if (t->count < FA_BACKEND_COUNT_ - 1) test_fail("count %d < %d", t->count, FA_BACKEND_COUNT_ - 1);
  for (int32_t id = FA_BACKEND_CPU; id < FA_BACKEND_COUNT_; ++id) {
    int seen = 0;
    for (int32_t i = 0; i < t->count && i < MAX_BACKENDS; ++i) seen += t->d[i].id == id;
    const fa_backend_desc *d = find(t, id);
    if (seen != 1) test_fail("backend id %d listed %d times", id, seen);
    if (d && (!fa_backend_name(id) || strcmp(d->name, fa_backend_name(id))))
      test_fail("id %d is named '%s', fa_backend_name says '%s'", id, d->name,
                fa_backend_name(id) ? fa_backend_name(id) : "(null)");
    if (d && !d->available && d->reason[0] == '\0')
      test_fail("%s unavailable without a reason", d->name);
    if (d) print_desc(d);
  }
  test_case_end();

  const fa_backend_desc *cpu = find(t, FA_BACKEND_CPU);
  test_case_begin(
      "cpu is available, loaded from beside libflashattn.so, with devices and features");
  if (!cpu || !cpu->available) {
    test_fail("cpu unavailable: %s", cpu ? cpu->reason : "(not listed)");
  } else {
    const char *file = strrchr(cpu->plugin_path, '/');
    if (!file || strcmp(file, "/libfa_cpu.so")) test_fail("plugin path '%s'", cpu->plugin_path);
    if (starts_with(cpu->plugin_path, dir_abi) || starts_with(cpu->plugin_path, dir_entry))
      test_fail("cpu loaded from a fake plugin directory: %s", cpu->plugin_path);
    if (cpu->device_count < 1 || !cpu->devices[0]) test_fail("no device described");
    if (!strstr(cpu->dtypes, "f32")) test_fail("dtypes '%s' lack f32", cpu->dtypes);
    if (!strstr(cpu->features, "fwd")) test_fail("features '%s' lack fwd", cpu->features);
  }
  test_case_end();

  const fa_backend_desc *ocl = find(t, FA_BACKEND_OPENCL);
  test_case_begin(
      "opencl (fake, another plugin ABI) is refused and the reason names the ABI version");
  if (!ocl) {
    test_fail("opencl not listed");
  } else {
    char want[64];
    snprintf(want, sizeof want, "%u", FA_PLUGIN_ABI_VERSION + 1u);
    if (ocl->available) test_fail("the wrong-ABI plugin was accepted");
    if (!strstr(ocl->reason, "ABI") || !strstr(ocl->reason, want))
      test_fail("reason does not mention the ABI version %s: '%s'", want, ocl->reason);
    if (!starts_with(ocl->plugin_path, dir_abi))
      test_fail("plugin path '%s' is not the fake one in %s", ocl->plugin_path, dir_abi);
  }
  test_case_end();

  const fa_backend_desc *hip = find(t, FA_BACKEND_HIP);
  test_case_begin("hip (fake, no entry symbol) is refused and the reason names the missing symbol");
  if (!hip) {
    test_fail("hip not listed");
  } else {
    if (hip->available) test_fail("a plugin without an entry point was accepted");
    if (!strstr(hip->reason, FA_PLUGIN_ENTRY_SYMBOL))
      test_fail("reason does not mention %s: '%s'", FA_PLUGIN_ENTRY_SYMBOL, hip->reason);
    if (!starts_with(hip->plugin_path, dir_entry))
      test_fail("plugin path '%s' is not the fake one in %s", hip->plugin_path, dir_entry);
  }
  test_case_end();

  const fa_backend_desc *cuda = find(t, FA_BACKEND_CUDA);
  test_case_begin("cuda is reported: available, or unavailable with a reason");
  if (!cuda)
    test_fail("cuda not listed");
  else if (!cuda->available && strlen(cuda->reason) < 8)
    test_fail("reason too short to explain anything: '%s'", cuda->reason);
  test_case_end();

  test_case_begin("fa_backend_info writes only `capacity` entries and still reports the count");
  fa_backend_desc two[2];
  fa_backend_desc_init(&two[0]);
  memset(&two[1], 0x5a, sizeof two[1]);
  int32_t count = -1;
  fa_status st = fa_backend_info(two, 1, &count);
  if (st != FA_OK) test_fail("capacity 1: %s (%s)", fa_status_string(st), fa_last_error());
  if (count != t->count) test_fail("capacity 1 reported count %d, full call %d", count, t->count);
  unsigned char pattern[sizeof two[1]];
  memset(pattern, 0x5a, sizeof pattern);
  if (memcmp(&two[1], pattern, sizeof pattern) != 0) test_fail("entry past capacity was written");
  if (st == FA_OK && !desc_equal(&two[0], &t->d[0]))
    test_fail("entry 0 differs from the full call's");
  test_case_end();
}

/* ---------------------------------------------------------------------------------------------
 * 4. Calls naming an unavailable backend
 * ------------------------------------------------------------------------------------------- */

enum { B = 1, S = 16, H = 2, D = 8 };

static void shape(fa_tensor *t, void *data, fa_dtype dt, int ndim, const int64_t *ext) {
  memset(t, 0, sizeof *t);
  t->data = data;
  t->device.kind = FA_DEVICE_CPU;
  t->dtype = dt;
  t->ndim = ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    t->shape[i] = ext[i];
    t->strides[i] = stride;
    stride *= ext[i];
  }
}

static void make_call(fa_tensor *tq, fa_tensor *tk, fa_tensor *tv, fa_tensor *to, fa_tensor *tl,
                      fa_device_kind kind) {
  static float q[B * S * H * D], k[B * S * H * D], v[B * S * H * D], out[B * S * H * D];
  static float lse[B * H * S];
  /* Non-zero inputs (a small deterministic pattern is enough: only dispatch is tested here). */
  for (int i = 0; i < B * S * H * D; ++i) {
    q[i] = (float)sin(0.37 * i + 0.1);
    k[i] = (float)cos(0.23 * i + 0.2);
    v[i] = (float)sin(0.11 * i + 0.3);
    out[i] = NAN;
  }
  for (int i = 0; i < B * H * S; ++i) lse[i] = NAN;
  int64_t e4[4] = {B, S, H, D}, e3[3] = {B, H, S};
  shape(tq, q, FA_F32, 4, e4);
  shape(tk, k, FA_F32, 4, e4);
  shape(tv, v, FA_F32, 4, e4);
  shape(to, out, FA_F32, 4, e4);
  shape(tl, lse, FA_F32, 3, e3);
  /* For device memory the pointers stand in for device handles: a refused call must not touch
     them, and these are host buffers that show whether anything was written. */
  fa_tensor *all[5] = {tq, tk, tv, to, tl};
  for (int i = 0; i < 5; ++i) all[i]->device.kind = kind;
}

static int outputs_written(const fa_tensor *to, const fa_tensor *tl) {
  const float *out = to->data, *lse = tl->data;
  int written = 0;
  for (int j = 0; j < B * S * H * D; ++j) written |= !isnan(out[j]);
  for (int j = 0; j < B * H * S; ++j) written |= !isnan(lse[j]);
  return written;
}

static void test_calls(void) {
  fa_tensor tq, tk, tv, to, tl;
  static const struct {
    int32_t id;
    fa_device_kind memory;
  } refused[] = {{FA_BACKEND_OPENCL, FA_DEVICE_OPENCL}, {FA_BACKEND_HIP, FA_DEVICE_HIP}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i) {
    const char *bname = fa_backend_name(refused[i].id);
    char name[160];
    snprintf(name, sizeof name,
             "backend = %s on its own memory: fa_forward, fa_plan_forward (strict or not) give "
             "FA_ERR_BACKEND_UNAVAILABLE with a message, outputs untouched",
             bname);
    test_case_begin(name);
    for (int strict = 0; strict <= 1; ++strict) {
      make_call(&tq, &tk, &tv, &to, &tl, refused[i].memory);
      fa_params p;
      fa_params_init(&p);
      p.backend = refused[i].id;
      p.strict = strict;
      fa_run_info info;
      fa_run_info_init(&info);
      fa_status st = fa_forward(&p, &tq, &tk, &tv, &to, &tl, &info);
      const char *msg = fa_last_error();
      if (st != FA_ERR_BACKEND_UNAVAILABLE)
        test_fail("strict %d: fa_forward returned %s (%s)", strict, fa_status_string(st), msg);
      if (!strstr(msg, bname))
        test_fail("strict %d: message does not name %s: '%s'", strict, bname, msg);
      if (strict == 0) printf("  message: %s\n", msg);
      if (outputs_written(&to, &tl))
        test_fail("strict %d: outputs written by a refused call", strict);
      fa_run_info plan;
      fa_run_info_init(&plan);
      st = fa_plan_forward(&p, &tq, &tk, &tv, &to, &tl, &plan);
      if (st != FA_ERR_BACKEND_UNAVAILABLE)
        test_fail("strict %d: fa_plan_forward returned %s (%s)", strict, fa_status_string(st),
                  fa_last_error());
    }
    test_case_end();
  }

  /* Host tensors with opencl named: strict refuses (the backend is unavailable and could not use
     host memory anyway); without strict the request falls back to cpu and the run report says
     what was passed over, as the run report promises (api/flash_attn.h, fa_run_info). */
  test_case_begin(
      "backend = opencl on host memory: strict refuses naming opencl; otherwise cpu runs "
      "and the report lists opencl as rejected");
  make_call(&tq, &tk, &tv, &to, &tl, FA_DEVICE_CPU);
  fa_params p;
  fa_params_init(&p);
  p.backend = FA_BACKEND_OPENCL;
  p.strict = 1;
  fa_run_info info;
  fa_run_info_init(&info);
  fa_status st = fa_forward(&p, &tq, &tk, &tv, &to, &tl, &info);
  if (st != FA_ERR_BACKEND_UNAVAILABLE && st != FA_ERR_UNSUPPORTED)
    test_fail("strict: fa_forward returned %s (%s)", fa_status_string(st), fa_last_error());
  else
    printf("  strict: %s: %s\n", fa_status_string(st), fa_last_error());
  if (!strstr(fa_last_error(), "opencl")) test_fail("strict: message does not name opencl");
  if (outputs_written(&to, &tl)) test_fail("strict: outputs written by a refused call");
  p.strict = 0;
  st = fa_forward(&p, &tq, &tk, &tv, &to, &tl, &info);
  if (st != FA_OK) {
    test_fail("non-strict: fa_forward returned %s (%s)", fa_status_string(st), fa_last_error());
  } else {
    if (info.backend != FA_BACKEND_CPU) test_fail("ran on %s", info.backend_name);
    if (!info.fell_back) test_fail("fell_back is 0 although opencl was asked for");
    if (!strstr(info.rejected, "opencl"))
      test_fail("rejected does not list opencl: '%s'", info.rejected);
    printf("  non-strict: ran %s, rejected: %s\n", info.kernel, info.rejected);
  }
  test_case_end();

  test_case_begin("AUTO still runs on cpu with the broken plugins present");
  make_call(&tq, &tk, &tv, &to, &tl, FA_DEVICE_CPU);
  fa_params_init(&p);
  fa_run_info_init(&info);
  st = fa_forward(&p, &tq, &tk, &tv, &to, &tl, &info);
  if (st != FA_OK) test_fail("fa_forward returned %s (%s)", fa_status_string(st), fa_last_error());
  if (st == FA_OK && info.backend != FA_BACKEND_CPU)
    test_fail("ran on %s (%d)", info.backend_name, info.backend);
  const float *out = to.data;
  int finite = 1;
  for (int j = 0; j < B * S * H * D; ++j) finite &= isfinite(out[j]) != 0;
  if (st == FA_OK && !finite) test_fail("non-finite output");
  if (st == FA_OK && info.fell_back) test_fail("AUTO on host memory reported a fallback");
  test_case_end();
}

/* The registry accepts only absolute FA_PLUGIN_PATH entries, so make the arguments absolute. */
static int absolute(const char *in, char *out) {
  if (!realpath(in, out)) {
    printf("test_registry: %s: %s\n", in, strerror(errno));
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  static char dir_abi[PATH_MAX], dir_entry[PATH_MAX], parent[PATH_MAX];
  if (argc != 3) {
    fprintf(stderr, "usage: %s DIR_WRONG_ABI DIR_NO_ENTRY\n", argv[0]);
    return 2;
  }
  if (!absolute(argv[1], dir_abi) || !absolute(argv[2], dir_entry)) return 2;
  /* The registry refuses FA_PLUGIN_PATH entries anyone may write: make the fake plugins' own
     folders and files trusted whatever the umask of the build was. */
  const char *dirs[2] = {dir_abi, dir_entry}, *files[2] = {"libfa_opencl.so", "libfa_hip.so"};
  for (int i = 0; i < 2; ++i) {
    char f[PATH_MAX + 32];
    snprintf(f, sizeof f, "%s/%s", dirs[i], files[i]);
    chmod(dirs[i], 0755);
    chmod(f, 0755);
  }
  snprintf(parent, sizeof parent, "%s", dir_abi);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) *slash = '\0';
  const char *base_abi = strrchr(dir_abi, '/') ? strrchr(dir_abi, '/') + 1 : dir_abi;
  char relative_path[PATH_MAX + 16];
  /* ".", an empty entry and a bare relative name: all would reach into the current directory. */
  snprintf(relative_path, sizeof relative_path, ".::%s", base_abi);

  /* 1. Before this process makes any library call. */
  run_child("a plugin in the current directory is not loaded (FA_PLUGIN_PATH unset; opencl)",
            dir_abi, NULL, FA_BACKEND_OPENCL, dir_abi);
  run_child("a plugin in the current directory is not loaded (FA_PLUGIN_PATH unset; hip)",
            dir_entry, NULL, FA_BACKEND_HIP, dir_entry);
  run_child("relative FA_PLUGIN_PATH entries ('.', '', a bare name) are not searched", dir_abi,
            relative_path, FA_BACKEND_OPENCL, dir_abi);
  run_child("relative FA_PLUGIN_PATH entries resolved from the parent directory are not searched",
            parent, relative_path, FA_BACKEND_OPENCL, dir_abi);

  test_untrusted_paths(dir_abi);

  /* 2. and 3. The real configuration: both fake directories on the path. */
  char path[2 * PATH_MAX + 2];
  snprintf(path, sizeof path, "%s:%s", dir_abi, dir_entry);
  setenv("FA_PLUGIN_PATH", path, 1);
  test_concurrent_first_calls();
  test_table(&g_tables[0], dir_abi, dir_entry);
  test_calls();

  return test_summary("test_registry");
}
