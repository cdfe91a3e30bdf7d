/*
 * internal.h: declarations shared by the core library's own files (not installed, not for plugins).
 */
#ifndef FA_CORE_INTERNAL_H
#define FA_CORE_INTERNAL_H

#include "plugin.h"

/* error.c */
void fa_core_clear_error(void);

/* api.c: an fa_run_info the caller passes (NULL allowed) is one of this version's size. */
fa_status fa_check_run_info(const fa_run_info *info);

/* host_scratch.c: the workspace of a host call without params.workspace: the calling thread's
   kept block when it is free and large enough (grown to need), else a block of the call's own
   (*owned, also the return value). NULL when no memory could be had. Given back by
   fa_host_scratch_give with the same two pointers. fa_host_scratch_release frees every kept
   block no call holds (fa_release). */
void *fa_host_scratch_take(size_t need, void **owned);
void fa_host_scratch_give(void *block, void *owned);
void fa_host_scratch_release(void);

/* validate.c: every argument checked once. On success *req is filled (pointing into *params_out,
 * which holds the caller's params resolved to this version's struct). */
typedef struct fa_call_args {
  const fa_tensor *q, *k, *v, *out, *lse;
  const fa_tensor *dout, *dq, *dk, *dv;
  const fa_kvcache_args *kv; /* FA_OP_KVCACHE only; k and v are then the caches */
} fa_call_args;

fa_status fa_validate(fa_op op, const fa_params *user_params, const fa_call_args *args,
                      fa_params *params_out, fa_kvcache_args *kv_out, fa_request *req);

/* api.c: fa_forward and fa_backward of a block of a longer sequence (fa_positions, plugin.h): the
   ring's block calls. pos NULL is the public call. */
fa_status fa_forward_at(const fa_params *params, const fa_positions *pos, const fa_tensor *q,
                        const fa_tensor *k, const fa_tensor *v, fa_tensor *out, fa_tensor *lse,
                        fa_run_info *info);
fa_status fa_backward_at(const fa_params *params, const fa_positions *pos, const fa_tensor *q,
                         const fa_tensor *k, const fa_tensor *v, const fa_tensor *out,
                         const fa_tensor *lse, const fa_tensor *dout, fa_tensor *dq, fa_tensor *dk,
                         fa_tensor *dv, fa_run_info *info);

/* api.c: the bytes of workspace the call of fa_forward_at / fa_backward_at with these arguments
   needs (fa_forward_workspace_size at positions pos). */
fa_status fa_workspace_size_at(fa_op op, const fa_params *params, const fa_positions *pos,
                               const fa_call_args *args, size_t *bytes);

/* backends.c: the one table of the backends the library knows, in AUTO's order. */
typedef struct fa_backend_def {
  int32_t id;               /* fa_backend_id */
  const char *name;         /* fa_backend_name; the plugin is libfa_<name>.so */
  fa_device_kind owns;      /* the memory this backend computes on */
  const char *build_reason; /* why this build lacks it (core/build_config.h), "" when built */
} fa_backend_def;

int fa_backend_def_count(void);
/* The i-th backend in AUTO's order (0 <= i < fa_backend_def_count()), else NULL. */
const fa_backend_def *fa_backend_def_at(int i);
/* The backend of an id, or NULL (FA_BACKEND_AUTO and unknown ids). */
const fa_backend_def *fa_backend_def_of(int32_t id);
/* Whether some backend computes on this fa_device_kind. */
int fa_device_kind_known(int32_t kind);
/* The backends a call tries, in order: `backend` first unless AUTO, then AUTO's order among those
   that own `memory`; with strict only the first. Returns how many were written to order. */
int fa_backend_candidates(int32_t backend, fa_device_kind memory, int32_t strict,
                          int32_t order[FA_BACKEND_COUNT_]);

/* registry.c: the backends' plugins, loaded lazily and once. */
typedef struct fa_backend_slot {
  int32_t id;
  const char *name;
  fa_device_kind owns;     /* the memory this backend computes on */
  const fa_plugin *plugin; /* NULL when unavailable */
  fa_plugin_probe probe;
  char reason[FA_REASON_LEN]; /* why unavailable ("" when available) */
  char path[512];
  char features[512];
  char unsupported[2048];
} fa_backend_slot;

/* The slot of a backend id (FA_BACKEND_CPU..), loading all plugins on first use; NULL if the id
 * is not a backend. Slots live for the whole process and are read-only after loading. */
const fa_backend_slot *fa_registry_slot(int32_t id);

/* Where plugin `file` (libfa_<name>.so) is, searched as the backends' plugins are: 1 with its path;
 * 0 with the reason (refused as untrusted, with path set; or not found, then build_reason when
 * non-empty, else where it was looked for). For the transports (core/transports.c). */
int fa_plugin_locate(const char *file, const char *build_reason, char *path, size_t path_len,
                     char *reason, size_t reason_len);

/* api.c: whether a candidate backend's plugin is loaded and computes on `memory`; else why not,
   with *refused set when it is loaded (a refusal, not an unavailable backend). */
int fa_slot_usable(const fa_backend_slot *s, fa_device_kind memory, char *why, size_t n,
                   int *refused);
/* api.c: the backend list of a run report, "name: why; name: why". */
void fa_note_rejected(char *list, size_t size, const char *name, const char *why);

/* api.c: the run report of a call that ran (or would run) decision d on backend s; NULL info: none.
   Fields of a newer header this version does not know stay zero. */
void fa_fill_run_info(fa_run_info *info, const fa_backend_slot *s, fa_device device,
                      const fa_decision *d, int32_t fell_back, const char *rejected);

/* features.c: fills slot->features / slot->unsupported by asking the plugin's decide(). */
void fa_features_probe(fa_backend_slot *slot);

#endif /* FA_CORE_INTERNAL_H */
