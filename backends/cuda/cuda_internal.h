/*
 * cuda_internal.h: what the CUDA plugin's files share: the probe's per-device facts (read once,
 * without creating a context on any device), the decide-function and the run.
 */
#ifndef FA_CUDA_INTERNAL_H
#define FA_CUDA_INTERNAL_H

#include "core/plugin.h"
#include "fa2_sm80/fa2_args.h"

#define CUDA_MAX_DEVICES 64
/* A workspace of any alignment is accepted: decide() asks for this much more, run() aligns. */
#define CUDA_WORKSPACE_ALIGN 256

typedef struct cuda_device_info {
  char name[96];
  int32_t cc_major, cc_minor;
  int32_t sm_count;
  int32_t smem_optin;   /* bytes of shared memory a block may opt in to (FA_CUDA_SMEM_LIMIT may
                           lower it, to test what a smaller device refuses) */
  int32_t smem_limited; /* 1: smem_optin was lowered by FA_CUDA_SMEM_LIMIT */
  int32_t as_sm80;      /* 1: a newer device run as sm_80 (FA_CUDA_AS_SM80, for testing the
                           sm_80 code from a PTX build on a newer GPU) */
  int32_t usable;       /* 0: reason says why */
  char reason[160];
} cuda_device_info;

typedef struct cuda_state {
  int32_t available; /* the runtime works and at least one device is usable */
  char reason[FA_REASON_LEN];
  int32_t driver_version, runtime_version;
  int32_t device_count;
  cuda_device_info devices[CUDA_MAX_DEVICES];
} cuda_state;

/* Probes once per process (thread-safe); never fails hard. */
const cuda_state *cuda_state_get(void);

void cuda_probe(fa_plugin_probe *out);
void cuda_decide(const fa_request *req, fa_decision *out);
fa_status cuda_run(const fa_request *req, const fa_decision *decision, void *workspace);
void cuda_release(void);

/* The deterministic backward's number of dQ accumulators for a request (see cuda_decide.c). */
int32_t cuda_bwd_dq_splits(const fa_request *req, int32_t tile_n, int32_t sm_count);

/* The grid of a persistent fa3 forward configuration on a device: its SM count, or (testing)
   FA_CUDA_FA3_GRID=N's smaller N, so that small cases make every block loop over many tiles
   (tests/gpu/h200_check.sh). Decide and run read it alike: the workspace depends on it. */
int32_t cuda_fa3_grid(const cuda_device_info *dev);

/* The kernels' view of a request's sizes, scale, softcap and mask (core/math/mask.h's form). */
fa2_problem cuda_problem_of(const fa_request *req);

/* What decides the backward's workspace, filled alike by decide and run: a->p, the padded head
   dim and query tile of cfg, the dQ accumulators (deterministic: cuda_bwd_dq_splits) and the
   balanced last wave (fa2_bwd_plan_tail over the device's sm_count SMs). */
void cuda_bwd_sizing(const fa_request *req, const fa2_tile_config *cfg, int32_t deterministic,
                     int32_t sm_count, fa2_bwd_args *a);
/* The same for fa3's backward (fa3_bwd_sizing; deterministic: core/schedule.h's
   fa_sched_det_splits over cuda_fa3_grid's SMs, one block each, so that FA_CUDA_FA3_GRID's small
   grids give a split several key tiles in tests). */
void cuda_fa3_bwd_sizing(const fa_request *req, int32_t deterministic, const cuda_device_info *dev,
                         fa2_bwd_args *a);

#endif /* FA_CUDA_INTERNAL_H */
