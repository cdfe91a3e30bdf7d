/*
 * hg_host.h: the generic kernels' host side, shared by the HIP plugin (kernels from hipcc, in a
 * HIP module) and the hip-generic-on-cuda test plugin (the same kernels from nvcc): the
 * decide-rules of the family, the argument block filled from a request, and the launch sequence.
 * Each plugin supplies its runtime as an hg_runtime.
 */
#ifndef FA_HIP_HG_HOST_H
#define FA_HIP_HG_HOST_H

#include "backends/hip/generic/hg_args.h"
#include "core/plugin.h"

/* The matrix kernels (hg_*_mfma_*) a target runs: none, CDNA's MFMA (kernel_family "mfma"),
   RDNA3's WMMA (kernel_family "wmma", the same kernel names compiled for gfx1100). */
#define HG_MATRIX_NONE 0
#define HG_MATRIX_MFMA 1
#define HG_MATRIX_WMMA 2

/* Where the kernels run, for decide's answers. */
typedef struct hg_target {
  const char *prefix; /* kernel names start with it: "hip.generic", "cuda.hipgen" */
  fa_device_kind kind;
  const char *device_name;
  int64_t smem_limit; /* shared memory (LDS) a block may use on the device */
  int32_t mfma;       /* HG_MATRIX_*: the matrix kernels it runs (MFMA: or their emulation) */
  int32_t all_tiles;  /* 1: every backward tile of HG_BWD_TILES (the test plugin); 0: those of
                         the HIP plugin's bundle */
} hg_target;

/* The device operations the launch sequence needs; each returns FA_OK or sets the error. */
typedef struct hg_runtime {
  void *ctx;
  /* Launches the kernel named `name` with HG_THREADS threads and `smem` dynamic bytes. */
  fa_status (*launch)(void *ctx, const char *name, unsigned gx, unsigned gy, unsigned gz,
                      size_t smem, void *stream, const hg_params *p);
  fa_status (*zero)(void *ctx, void *ptr, size_t bytes, void *stream);
  fa_status (*alloc)(void *ctx, void **ptr, size_t bytes, void *stream);
  fa_status (*release)(void *ctx, void *ptr, void *stream);
} hg_runtime;

/* The family's rules: supported or not with the reason naming the constraint; kernel name,
   tiles, workspace. Pure. params.kernel_family: NULL or "generic" for the generic kernels,
   "mfma" / "wmma" for the kernels whose products use CDNA's / RDNA3's matrix instructions (only
   where t->mfma says so; never chosen unasked: they have not run on AMD hardware). */
void hg_decide(const fa_request *req, const hg_target *t, fa_decision *out);

/* What hg_decide records in the decision's payload for hg_run: the kernels and their tile. */
typedef struct hg_choice {
  int32_t matrix;   /* HG_MATRIX_*: the matrix kernels (MFMA names, WMMA code on RDNA3) or none */
  int32_t hd_class; /* HG_HD_CLASS of the head dim: the kernels' register arrays */
  int32_t bn, bm;   /* forward: keys per step (bm unused); backward: keys per block, queries per
                       step */
  int32_t per_head; /* backward: one block per KV head walking its key tiles (deterministic) */
} hg_choice;
FA_DECISION_PAYLOAD_FITS(hg_choice);

/* Runs a request hg_decide accepted, as its payload says (workspace: the caller's or NULL). */
fa_status hg_run(const hg_runtime *rt, const fa_request *req, const fa_decision *decision,
                 void *workspace);

/* Dynamic shared memory (bytes) of the forward (forward = 1; bn keys per step, bm unused) or
   backward main kernel (bn keys per block, bm queries per step) at head dim d. */
size_t hg_smem(int forward, int mfma, int d, int bn, int bm);

/* The forward's keys per step (HG_FWD_TILE_N or HG_FWD_TILE_N_MAX) on a device whose blocks may
   use smem_limit bytes of shared memory (LDS): core/plan's choice for the head dim d, never more
   than fits. */
int hg_fwd_tile_n(int64_t smem_limit, int d, int mfma);

/* The backward's tile: bn keys per block, bm queries per step. */
typedef struct hg_tile {
  int bn, bm;
} hg_tile;

/* The backward's tile at head dim d on a device whose blocks may use smem_limit bytes of shared
   memory (LDS): core/plan's fa_plan_tiles_bwd for that budget (16-bit K, V, Q, dO rows and
   HG_BWD_SCORE_BYTES per score element), then the largest of the class's compiled tiles
   (HG_BWD_TILES; all_tiles as hg_target's) within the plan's Bc and Br whose exact layout fits;
   else the class's smallest, which decide refuses where it does not fit either. */
hg_tile hg_bwd_tiles(int64_t smem_limit, int d, int mfma, int all_tiles);

/* The kernel names the run looks up in the HIP plugin's bundle (loaded by name up front). */
#define HG_KERNEL_NAME_LEN 40
/* The HIP plugin's bundle: the generic kernels, D and dQ conversion, the forwards (3 classes x 2
   key tiles) and the backward main kernels of its tiles (HG_BWD_TILE_COUNT_AMD), for both
   dtypes; and with the MFMA forwards and backward main kernels. */
#define HG_KERNEL_COUNT (2 * (2 + 3 * 2 + HG_BWD_TILE_COUNT_AMD))
#define HG_KERNEL_COUNT_MFMA (HG_KERNEL_COUNT + 2 * (3 * 2 + HG_BWD_TILE_COUNT_AMD))
int hg_kernel_names(char names[][HG_KERNEL_NAME_LEN], int capacity, int with_mfma);

#endif /* FA_HIP_HG_HOST_H */
