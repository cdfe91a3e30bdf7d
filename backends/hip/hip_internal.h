/*
 * hip_internal.h: what the HIP plugin's files share: the probe's per-device facts (read once),
 * the decide-function and the run.
 */
#ifndef FA_HIP_INTERNAL_H
#define FA_HIP_INTERNAL_H

#include "core/plugin.h"

#define HIP_MAX_DEVICES 64

typedef struct hip_device_info {
  char name[96];
  char arch[32];     /* gcnArchName's processor, "gfx90a" */
  int32_t lds_bytes; /* shared memory (LDS) a block may use */
  int32_t wave_size; /* 64 on CDNA, 32 on RDNA */
  int32_t cu_count;
  int32_t usable; /* 0: reason says why */
  char reason[192];
} hip_device_info;

typedef struct hip_state {
  int32_t available; /* the runtime loads and at least one device is usable */
  char reason[FA_REASON_LEN];
  int32_t runtime_version;
  int32_t device_count;
  hip_device_info devices[HIP_MAX_DEVICES];
} hip_state;

/* Probes once per process (thread-safe); never fails hard. */
const hip_state *hip_state_get(void);

void hip_probe(fa_plugin_probe *out);
void hip_decide(const fa_request *req, fa_decision *out);
fa_status hip_run(const fa_request *req, const fa_decision *decision, void *workspace);

#endif /* FA_HIP_INTERNAL_H */
