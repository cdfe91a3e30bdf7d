/*
 * transports.c: the transports a ring call can run on (core/transport.h), in one table, and
 * fa_transport_info. "self" (one rank) is built in; the others are plugins libfa_<name>.so found
 * where the backends' plugins are (fa_plugin_locate) and loaded once per process, each on the first
 * call that needs it. Each failure to load keeps its reason, word for word.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "build_config.h"
#include "ring.h"

/* --- self: a ring of one rank. Its only exchange is the backward's last shift of dk/dv, from the
   rank to itself. --- */

static void self_probe(fa_transport_probe *out) {
  out->available = 1;
  snprintf(out->runtime, sizeof out->runtime, "built in (one rank, no communication)");
}

static fa_status self_open(void *handle, void *stream, void **comm, int32_t *rank, int32_t *world,
                           int32_t *device) {
  if (handle)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "ring.comm must be NULL for the self transport (one rank)");
  *comm = NULL;
  *rank = 0;
  *world = 1;
  *device = -1; /* a ring of one moves nothing: any memory */
  return FA_OK;
}

static fa_status self_allreduce_max(void *comm, int64_t *values, int32_t count) { return FA_OK; }

static fa_status self_exchange_start(void *comm, int32_t channel, const void *send, int32_t to,
                                     void *recv, int32_t from, size_t bytes, void **pending) {
  memcpy(recv, send, bytes);
  *pending = NULL;
  return FA_OK;
}

static fa_status self_exchange_wait(void *comm, void *pending) { return FA_OK; }

static void self_close(void *comm) {}

static const fa_transport self_table = {FA_TRANSPORT_ABI_VERSION,
                                        (uint32_t)sizeof(fa_transport),
                                        FA_TRANSPORT_SELF,
                                        "self",
                                        self_probe,
                                        self_open,
                                        self_allreduce_max,
                                        self_exchange_start,
                                        self_exchange_wait,
                                        self_close};

/* --- the table --- */

typedef struct transport_def {
  int32_t kind;
  const char *name;
  fa_device_kind memory;
  const char *build_reason; /* "" when built (then its plugin is looked for) */
} transport_def;

static const transport_def defs[] = {
    {FA_TRANSPORT_SELF, "self", FA_DEVICE_CPU, ""},
    {FA_TRANSPORT_MPI, "mpi", FA_DEVICE_CPU, FA_BUILD_REASON_MPI},
    {FA_TRANSPORT_NCCL, "nccl", FA_DEVICE_CUDA, FA_BUILD_REASON_NCCL},
};
_Static_assert(sizeof defs / sizeof defs[0] == FA_TRANSPORT_COUNT_ - 1,
               "one table entry per fa_transport_kind but INVALID");

static fa_transport_slot slots[FA_TRANSPORT_COUNT_];

static void load_plugin(fa_transport_slot *s, const char *build_reason) {
  char file[64], path[sizeof s->path];
  snprintf(file, sizeof file, "libfa_%s.so", s->name);
  int found = fa_plugin_locate(file, build_reason, path, sizeof path, s->reason, sizeof s->reason);
  snprintf(s->path, sizeof s->path, "%s", path);
  if (!found) return;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(s->reason, sizeof s->reason, "plugin %s failed to load: %s", path, dlerror());
    return;
  }
  fa_transport_entry_fn entry;
  void *sym = dlsym(handle, FA_TRANSPORT_ENTRY_SYMBOL);
  memcpy(&entry, &sym, sizeof entry); /* object pointer -> function pointer without UB warnings */
  const fa_transport *t = sym ? entry(FA_TRANSPORT_ABI_VERSION) : NULL;
  if (!sym) {
    snprintf(s->reason, sizeof s->reason, "plugin %s has no %s symbol (not a flashattn transport)",
             path, FA_TRANSPORT_ENTRY_SYMBOL);
    dlclose(handle);
    return;
  }
  if (!t || t->abi_version != FA_TRANSPORT_ABI_VERSION || t->struct_size < sizeof(fa_transport)) {
    snprintf(s->reason, sizeof s->reason,
             "plugin %s was built for another transport ABI than this core's version %u", path,
             FA_TRANSPORT_ABI_VERSION);
    dlclose(handle);
    return;
  }
  if (t->kind != s->kind || !t->probe || !t->open || !t->allreduce_max || !t->exchange_start ||
      !t->exchange_wait || !t->close) {
    snprintf(s->reason, sizeof s->reason,
             "plugin %s is malformed (transport kind %d, expected %d, or a NULL function)", path,
             (int)t->kind, (int)s->kind);
    dlclose(handle);
    return;
  }
  t->probe(&s->probe);
  if (!s->probe.available) {
    snprintf(s->reason, sizeof s->reason, "%s",
             s->probe.reason[0] ? s->probe.reason : "the plugin reports it cannot run");
    return;
  }
  s->ops = t;
  s->reason[0] = '\0';
}

/* Each transport is loaded on the first call that names it (or lists them all), not with the
   others: a ring over MPI never loads the NCCL plugin and the CUDA runtime behind it. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int loaded[FA_TRANSPORT_COUNT_];

static void load_one(const transport_def *def) {
  fa_transport_slot *s = &slots[def->kind];
  s->kind = def->kind;
  s->name = def->name;
  s->memory = def->memory;
  if (def->kind == FA_TRANSPORT_SELF) {
    s->ops = &self_table;
    self_table.probe(&s->probe);
  } else {
    load_plugin(s, def->build_reason);
  }
}

const fa_transport_slot *fa_transport_slot_of(int32_t kind) {
  if (kind <= FA_TRANSPORT_INVALID || kind >= FA_TRANSPORT_COUNT_) return NULL;
  if (!loaded[kind]) {
    pthread_mutex_lock(&load_lock);
    if (!loaded[kind]) {
      for (size_t i = 0; i < sizeof defs / sizeof defs[0]; ++i)
        if (defs[i].kind == kind) load_one(&defs[i]);
      loaded[kind] = 1;
    }
    pthread_mutex_unlock(&load_lock);
  }
  return &slots[kind];
}

void fa_transport_desc_init(fa_transport_desc *desc) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
}

fa_status fa_transport_info(fa_transport_desc *out, int32_t capacity, int32_t *count) {
  fa_core_clear_error();
  if (!count) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "count: NULL pointer");
  if (capacity < 0)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "capacity = %d must be >= 0", (int)capacity);
  if (capacity > 0 && !out)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "out: NULL with capacity %d", (int)capacity);
  for (int32_t i = 0; i < capacity && i < FA_TRANSPORT_COUNT_ - 1; ++i)
    if (out[i].struct_size < sizeof(fa_transport_desc))
      return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                               "out[%d].struct_size = %zu but fa_transport_desc has %zu bytes: "
                               "initialise it with fa_transport_desc_init()",
                               (int)i, out[i].struct_size, sizeof(fa_transport_desc));
  *count = FA_TRANSPORT_COUNT_ - 1;
  for (int32_t i = 0; i < capacity && i < FA_TRANSPORT_COUNT_ - 1; ++i) {
    const fa_transport_slot *s = fa_transport_slot_of(defs[i].kind);
    fa_transport_desc *d = &out[i];
    size_t size = d->struct_size;
    memset(d, 0, size); /* fields of a newer header this version does not know stay zero */
    d->struct_size = size;
    d->kind = s->kind;
    snprintf(d->name, sizeof d->name, "%s", s->name);
    d->available = s->ops != NULL;
    snprintf(d->reason, sizeof d->reason, "%s", s->reason);
    snprintf(d->plugin_path, sizeof d->plugin_path, "%s", s->path);
    d->memory = s->memory;
    snprintf(d->runtime, sizeof d->runtime, "%s", s->probe.runtime);
  }
  return FA_OK;
}
