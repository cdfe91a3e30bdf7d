/*
 * api.c: the public entry points. Each call: validate every argument (core/validate.c), choose a
 * backend through the plugins' decide() (the same path for fa_plan, the workspace queries and the
 * call itself), then run. Everything that can fail before computing fails before any output is
 * written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "internal.h"
#include "strbuf.h"

void fa_params_init(fa_params *params) {
  if (!params) return;
  memset(params, 0, sizeof *params);
  params->struct_size = sizeof *params;
}

void fa_run_info_init(fa_run_info *info) {
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

void fa_backend_desc_init(fa_backend_desc *desc) {
  if (!desc) return;
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
}

const char *fa_backend_name(int32_t id) {
  if (id == FA_BACKEND_AUTO) return "auto";
  const fa_backend_def *def = fa_backend_def_of(id);
  return def ? def->name : NULL;
}

fa_status fa_backend_from_name(const char *name, int32_t *id) {
  fa_core_clear_error();
  if (!id) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "id: NULL pointer");
  char names[128] = "auto";
  for (int32_t i = FA_BACKEND_AUTO; i < FA_BACKEND_COUNT_; ++i) {
    if (name && strcmp(name, fa_backend_name(i)) == 0) {
      *id = i;
      return FA_OK;
    }
    if (i > FA_BACKEND_AUTO) {
      size_t used = strlen(names);
      snprintf(names + used, sizeof names - used, ", %s", fa_backend_name(i));
    }
  }
  return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "name: '%s' is not a backend (%s)",
                           name ? name : "(null)", names);
}

const char *fa_version(int *major, int *minor, int *patch) {
  if (major) *major = FA_VERSION_MAJOR;
  if (minor) *minor = FA_VERSION_MINOR;
  if (patch) *patch = FA_VERSION_PATCH;
  return FA_VERSION_STRING;
}

typedef struct choice {
  const fa_backend_slot *slot;
  fa_decision decision;
  int32_t fell_back;
  char rejected[FA_REASON_LEN];
} choice;

void fa_note_rejected(char *list, size_t size, const char *name, const char *why) {
  size_t used = strlen(list);
  if (used + 1 < size) snprintf(list + used, size - used, "%s%s: %s", used ? "; " : "", name, why);
}

int fa_slot_usable(const fa_backend_slot *s, fa_device_kind memory, char *why, size_t n,
                   int *refused) {
  if (!s->plugin) {
    snprintf(why, n, "unavailable: %s", s->reason);
    return 0;
  }
  if (s->owns != memory) {
    snprintf(why, n, "cannot use %s memory (where the tensors live)", fa_device_kind_name(memory));
    *refused = 1;
    return 0;
  }
  return 1;
}

/* Picks the backend and kernel. With a named backend it is tried first; without strict, AUTO's
 * order (core/backends.c) follows, among the backends that own the tensors' memory. With strict,
 * only the first candidate is tried: no fallback at all. */
static fa_status choose(const fa_request *req, choice *c) {
  memset(c, 0, sizeof *c);
  const fa_params *p = req->params;
  int32_t order[FA_BACKEND_COUNT_];
  const int n = fa_backend_candidates(p->backend, req->device.kind, p->strict, order);

  int any_refused = 0;
  for (int i = 0; i < n; ++i) {
    const fa_backend_slot *s = fa_registry_slot(order[i]);
    char why[FA_REASON_LEN];
    if (fa_slot_usable(s, req->device.kind, why, sizeof why, &any_refused)) {
      s->plugin->decide(req, &c->decision);
      if (c->decision.supported) {
        c->slot = s;
        c->fell_back = i > 0;
        return FA_OK;
      }
      snprintf(why, sizeof why, "%s", c->decision.reason);
      any_refused = 1;
    }
    fa_note_rejected(c->rejected, sizeof c->rejected, s->name, why);
  }
  fa_status st = any_refused ? FA_ERR_UNSUPPORTED : FA_ERR_BACKEND_UNAVAILABLE;
  if (n == 0)
    return fa_core_set_error(FA_ERR_BACKEND_UNAVAILABLE, "no backend computes on %s memory",
                             fa_device_kind_name(req->device.kind));
  return fa_core_set_error(st, "%sno backend can run this request: %s", p->strict ? "strict: " : "",
                           c->rejected);
}

fa_status fa_check_run_info(const fa_run_info *info) {
  if (info && info->struct_size < sizeof(fa_run_info))
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "info.struct_size = %zu but fa_run_info has %zu bytes: initialise it "
                             "with fa_run_info_init()",
                             info->struct_size, sizeof(fa_run_info));
  return FA_OK;
}

void fa_fill_run_info(fa_run_info *info, const fa_backend_slot *s, fa_device device,
                      const fa_decision *d, int32_t fell_back, const char *rejected) {
  if (!info) return;
  size_t size = info->struct_size;
  memset(info, 0, size); /* fields of a newer header this version does not know stay zero */
  info->struct_size = size;
  info->backend = s->id;
  fa_str_copy(info->backend_name, sizeof info->backend_name, s->name);
  info->device = device;
  fa_str_copy(info->kernel, sizeof info->kernel, d->kernel);
  info->tile_m = d->tile_m;
  info->tile_n = d->tile_n;
  info->num_splits = d->num_splits;
  info->deterministic = d->deterministic;
  info->workspace_bytes = d->workspace_bytes;
  info->fell_back = fell_back;
  fa_str_copy(info->rejected, sizeof info->rejected, rejected);
}

/* Validation and choice, shared by the calls, the plans and the workspace queries. */
/* What one call holds while it is prepared and run: the caller's arguments resolved to this
   version's structs, the validated request, and the backend chosen. */
typedef struct prepared {
  fa_params params;
  fa_kvcache_args kv;
  fa_request req;
  choice c;
} prepared;

static fa_status prepare(fa_op op, const fa_params *params, const fa_call_args *args,
                         const fa_positions *pos, prepared *pr) {
  fa_core_clear_error();
  fa_status st = fa_validate(op, params, args, &pr->params, &pr->kv, &pr->req);
  if (st != FA_OK) return st;
  if (pos) pr->req.pos = *pos;
  return choose(&pr->req, &pr->c);
}

static const char *op_name(fa_op op) {
  switch (op) {
    case FA_OP_FORWARD:
      return "forward";
    case FA_OP_BACKWARD:
      return "backward";
    case FA_OP_KVCACHE:
      return "forward_kvcache";
  }
  return "unknown";
}

static fa_status execute(fa_op op, const fa_params *params, const fa_call_args *args,
                         const fa_positions *pos, fa_run_info *info) {
  prepared pr;
  fa_core_clear_error();
  fa_status st = fa_check_run_info(info);
  if (st != FA_OK) return st;
  st = prepare(op, params, args, pos, &pr);
  if (st != FA_OK) return st;
  const fa_params resolved = pr.params;
  const fa_request *req = &pr.req;
  const choice *c = &pr.c;

  size_t need = c->decision.workspace_bytes;
  void *workspace = NULL, *owned = NULL;
  int scratch = 0; /* workspace is host_scratch.c's */
  if (need > 0 && resolved.workspace) {
    if (resolved.workspace_size < need)
      return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                               "params.workspace_size = %zu but kernel %s needs %zu bytes (ask "
                               "fa_%s_workspace_size)",
                               resolved.workspace_size, c->decision.kernel, need, op_name(op));
    workspace = resolved.workspace;
  } else if (need > 0 && req->device.kind == FA_DEVICE_CPU) {
    /* The calling thread's kept block (host_scratch.c); device backends keep their own
       per-stream caches. */
    workspace = fa_host_scratch_take(need, &owned);
    scratch = 1;
    if (!workspace)
      return fa_core_set_error(FA_ERR_OUT_OF_MEMORY,
                               "workspace: could not allocate %zu bytes for %s", need,
                               c->decision.kernel);
  }
  st = c->slot->plugin->run(req, &c->decision, workspace);
  if (scratch) fa_host_scratch_give(workspace, owned);
  if (st != FA_OK) {
    if (!fa_last_error()[0])
      fa_core_set_error(st, "%s: kernel %s failed without a message", c->slot->name,
                        c->decision.kernel);
    return st;
  }
  fa_fill_run_info(info, c->slot, req->device, &c->decision, c->fell_back, c->rejected);
  return FA_OK;
}

static fa_status plan(fa_op op, const fa_params *params, const fa_call_args *args,
                      const fa_positions *pos, fa_run_info *info, size_t *bytes) {
  prepared pr;
  fa_core_clear_error();
  fa_status st = fa_check_run_info(info);
  if (st != FA_OK) return st;
  if (!info && !bytes) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "plan: NULL output");
  st = prepare(op, params, args, pos, &pr);
  if (st != FA_OK) return st;
  fa_fill_run_info(info, pr.c.slot, pr.req.device, &pr.c.decision, pr.c.fell_back, pr.c.rejected);
  if (bytes) *bytes = pr.c.decision.workspace_bytes;
  return FA_OK;
}

fa_status fa_forward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                     const fa_tensor *v, fa_tensor *out, fa_tensor *lse, fa_run_info *info) {
  return fa_forward_at(params, NULL, q, k, v, out, lse, info);
}

fa_status fa_backward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                      const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse,
                      const fa_tensor *dout, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv,
                      fa_run_info *info) {
  return fa_backward_at(params, NULL, q, k, v, out, lse, dout, dq, dk, dv, info);
}

fa_status fa_forward_at(const fa_params *params, const fa_positions *pos, const fa_tensor *q,
                        const fa_tensor *k, const fa_tensor *v, fa_tensor *out, fa_tensor *lse,
                        fa_run_info *info) {
  fa_call_args a = {q, k, v, out, lse, NULL, NULL, NULL, NULL, NULL};
  return execute(FA_OP_FORWARD, params, &a, pos, info);
}

fa_status fa_backward_at(const fa_params *params, const fa_positions *pos, const fa_tensor *q,
                         const fa_tensor *k, const fa_tensor *v, const fa_tensor *out,
                         const fa_tensor *lse, const fa_tensor *dout, fa_tensor *dq, fa_tensor *dk,
                         fa_tensor *dv, fa_run_info *info) {
  fa_call_args a = {q, k, v, out, lse, dout, dq, dk, dv, NULL};
  return execute(FA_OP_BACKWARD, params, &a, pos, info);
}

fa_status fa_workspace_size_at(fa_op op, const fa_params *params, const fa_positions *pos,
                               const fa_call_args *args, size_t *bytes) {
  return plan(op, params, args, pos, NULL, bytes);
}

fa_status fa_plan_forward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                          const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse,
                          fa_run_info *info) {
  fa_call_args a = {q, k, v, out, lse, NULL, NULL, NULL, NULL, NULL};
  if (!info) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "plan: NULL fa_run_info");
  return plan(FA_OP_FORWARD, params, &a, NULL, info, NULL);
}

fa_status fa_plan_backward(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                           const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse,
                           const fa_tensor *dout, const fa_tensor *dq, const fa_tensor *dk,
                           const fa_tensor *dv, fa_run_info *info) {
  fa_call_args a = {q, k, v, out, lse, dout, dq, dk, dv, NULL};
  if (!info) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "plan: NULL fa_run_info");
  return plan(FA_OP_BACKWARD, params, &a, NULL, info, NULL);
}

fa_status fa_forward_workspace_size(const fa_params *params, const fa_tensor *q, const fa_tensor *k,
                                    const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse,
                                    size_t *bytes) {
  fa_call_args a = {q, k, v, out, lse, NULL, NULL, NULL, NULL, NULL};
  if (!bytes) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "bytes: NULL pointer");
  return plan(FA_OP_FORWARD, params, &a, NULL, NULL, bytes);
}

fa_status fa_backward_workspace_size(const fa_params *params, const fa_tensor *q,
                                     const fa_tensor *k, const fa_tensor *v, const fa_tensor *out,
                                     const fa_tensor *lse, const fa_tensor *dout,
                                     const fa_tensor *dq, const fa_tensor *dk, const fa_tensor *dv,
                                     size_t *bytes) {
  fa_call_args a = {q, k, v, out, lse, dout, dq, dk, dv, NULL};
  if (!bytes) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "bytes: NULL pointer");
  return plan(FA_OP_BACKWARD, params, &a, NULL, NULL, bytes);
}

void fa_kvcache_args_init(fa_kvcache_args *args) {
  if (!args) return;
  memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
}

fa_status fa_forward_kvcache(const fa_params *params, const fa_tensor *q, fa_tensor *k_cache,
                             fa_tensor *v_cache, const fa_kvcache_args *kv, fa_tensor *out,
                             fa_tensor *lse, fa_run_info *info) {
  fa_call_args a = {q, k_cache, v_cache, out, lse, NULL, NULL, NULL, NULL, kv};
  return execute(FA_OP_KVCACHE, params, &a, NULL, info);
}

fa_status fa_plan_forward_kvcache(const fa_params *params, const fa_tensor *q,
                                  const fa_tensor *k_cache, const fa_tensor *v_cache,
                                  const fa_kvcache_args *kv, const fa_tensor *out,
                                  const fa_tensor *lse, fa_run_info *info) {
  fa_call_args a = {q, k_cache, v_cache, out, lse, NULL, NULL, NULL, NULL, kv};
  if (!info) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "plan: NULL fa_run_info");
  return plan(FA_OP_KVCACHE, params, &a, NULL, info, NULL);
}

fa_status fa_backend_info(fa_backend_desc *out, int32_t capacity, int32_t *count) {
  fa_core_clear_error();
  if (!count) return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "count: NULL pointer");
  if (capacity < 0 || (capacity > 0 && !out))
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "out/capacity: capacity = %d with out = %p",
                             (int)capacity, (void *)out);
  for (int32_t i = 0; i < capacity && i < FA_BACKEND_COUNT_ - 1; ++i)
    if (out[i].struct_size < sizeof(fa_backend_desc))
      return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                               "out[%d].struct_size = %zu but fa_backend_desc has %zu bytes: "
                               "initialise it with fa_backend_desc_init()",
                               (int)i, out[i].struct_size, sizeof(fa_backend_desc));
  *count = FA_BACKEND_COUNT_ - 1;
  for (int32_t id = FA_BACKEND_CPU; id < FA_BACKEND_COUNT_ && id - 1 < capacity; ++id) {
    const fa_backend_slot *s = fa_registry_slot(id);
    fa_backend_desc *d = &out[id - 1];
    size_t size = d->struct_size;
    memset(d, 0, size);
    d->struct_size = size;
    d->id = id;
    snprintf(d->name, sizeof d->name, "%s", s->name);
    d->available = s->plugin != NULL;
    snprintf(d->reason, sizeof d->reason, "%s", s->reason);
    snprintf(d->plugin_path, sizeof d->plugin_path, "%s", s->path);
    d->device_count = s->probe.device_count;
    snprintf(d->devices, sizeof d->devices, "%s", s->probe.devices);
    snprintf(d->arch, sizeof d->arch, "%s", s->probe.arch);
    snprintf(d->kernel_families, sizeof d->kernel_families, "%s", s->probe.kernel_families);
    snprintf(d->dtypes, sizeof d->dtypes, "%s", s->probe.dtypes);
    snprintf(d->features, sizeof d->features, "%s", s->features);
    snprintf(d->unsupported, sizeof d->unsupported, "%s", s->unsupported);
  }
  return FA_OK;
}

void fa_release(void) {
  fa_host_scratch_release();
  for (int32_t id = FA_BACKEND_CPU; id < FA_BACKEND_COUNT_; ++id) {
    const fa_backend_slot *s = fa_registry_slot(id);
    if (s->plugin && s->plugin->release) s->plugin->release();
  }
}
