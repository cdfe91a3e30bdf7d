/*
 * cuda_internal.h: what the CUDA plugin's files share: the probe's per-device facts (read once,
 * without creating a context on any device), the decision's payload, decide and run, and the
 * sizing both of them compute alike.
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

/* The kernel family a decision runs. */
enum { CUDA_FA2 = 2, CUDA_FA3 = 3 };

/* What decide() records for run() in the decision's payload. */
typedef struct cuda_choice {
  int32_t family;      /* CUDA_FA2 or CUDA_FA3 */
  int32_t fa3_config;  /* the fa3 forward's configuration (fa3_fwd_config_id), else -1 */
  int32_t grid;        /* fa3: the persistent grid's blocks (cuda_fa3_grid) */
  fa2_tile_config fa2; /* fa2: the tiles of the size class that runs */
  int32_t seqs;        /* 1: the forward over sequences (cuda_seqs.c, fa2_fwd_splitkv.cuh) */
  int32_t splits;      /* seqs: key pieces */
  int32_t pack;        /* seqs: query heads a tile packs */
  int32_t bulk;        /* seqs: the decoding kernel's bulk-copy form (sm_90) */
} cuda_choice;
FA_DECISION_PAYLOAD_FITS(cuda_choice);

/* The forward over sequences (cuda_seqs.c): whether a request takes it (varlen, seqused_k, paged
   K/V, num_splits > 1, fa_forward_kvcache, and a dense forward with num_splits 0 where split-KV
   pays: decoding), its decision, and its run. */
int cuda_seqs_wanted(const fa_request *req, const cuda_device_info *dev);
void cuda_seqs_decide(const fa_request *req, const cuda_device_info *dev, fa_decision *out);
fa_status cuda_seqs_run(const fa_request *req, const fa_decision *decision, const cuda_choice *ch,
                        void *workspace);
/* fa3's forward over sequences (cuda_decide.c), asked by cuda_seqs_decide first: 1 where it
   decided (fa3's SEQS configuration, or refused: kernel_family fa3 where fa3 cannot), 0 where
   fa2's forward over sequences decides. fa3 takes forward calls of packed or used-key sequences
   of 128 rows and more (fa2 splits shorter ones' keys), or any it can where asked by name. */
int cuda_fa3_seqs_decide(const fa_request *req, const cuda_device_info *dev, fa_decision *out);
/* 1 (refused with the reason) where the kernels cannot read a request's cu_seqlens_q/k or
   seqused_k (not contiguous) or its packed rows exceed int32; both passes ask it. */
int cuda_seqs_refuse_index(const fa_request *req, fa_decision *out);

/* The FP8 forward (cuda_fp8.c): the decision for a request whose q, k and v are FP8 (fa3's FP8
   configuration on sm_90, else refused with the reason); its workspace in bytes for the
   configuration decided (alignment room, the tile counter's slot, Vᵀ). */
void cuda_fp8_decide(const fa_request *req, const cuda_device_info *dev, fa_decision *out);
size_t cuda_fp8_workspace_bytes(const fa_request *req, int config);
/* The FP8 kernel's arguments of a request decided with FP8 configuration `config`: x->fp8
   (descales, Vᵀ in the workspace after the tile counter), x->tile_counter, x->a.p.bf16 (out's
   dtype). workspace: cuda_fp8_workspace_bytes of it, as given (unaligned). */
struct fa3_fwd_args;
void cuda_fp8_args_of(const fa_request *req, int config, void *workspace, struct fa3_fwd_args *x);

/* "f16", "bf16", or NULL for a dtype the kernels do not take. */
const char *cuda_dtype_name(fa_dtype dt);

/* params.check_indices (cuda_check_indices.c): the request's index tensors read back and checked
   by the core's rule; FA_OK when none is given. */
fa_status cuda_check_indices(const fa_request *req);

/* Shared by the run paths (cuda_plugin.c): a CUDA error as the call's status and message; the
   caller's workspace or one from the stream-ordered pool, and its return; a workspace pointer
   aligned to CUDA_WORKSPACE_ALIGN. */
fa_status cuda_failure(int cuda_error, const char *what);
/* Makes device id current for a call's work, *previous the device that was (cuda_device_leave
   restores it); FA_OK or the CUDA error as the call's status. */
fa_status cuda_device_enter(int id, int *previous);
void cuda_device_leave(int id, int previous);
/* cuda_quantize.c: the plugin's fa_quantize. */
fa_status cuda_quantize(const fa_quantize_request *req, char *kernel);
/* cuda_buffer_ops.c: the plugin's buffer_op (the ring's steps over CUDA device memory). */
fa_status cuda_buffer_op(const fa_buffer_op *op);
fa_status cuda_workspace_take(void *given, size_t bytes, void *stream, void **ws);
int cuda_workspace_give_back(void *given, void *ws, void *stream, int e);
void *cuda_workspace_aligned(void *ws);
/* The fa3 forward's dynamic-schedule counter pair kept for (device, stream) and zeroed in that
   stream's order (cuda_stream_counters.c), or NULL where none is kept: the stream is capturing a
   graph, CUDA_STREAM_COUNTERS streams of the device have one, the call was given a workspace
   and the device's slab does not exist yet (such a call allocates nothing), or an error
   (cleared). The device must be current. A pair returned is held until cuda_stream_counter_drop
   (after the launch); cuda_stream_counters_free (fa_release) frees them all once none is held. */
#define CUDA_STREAM_COUNTERS 256
int32_t *cuda_stream_counter_hold(int device, void *stream, int given_workspace);
void cuda_stream_counter_drop(void);
void cuda_stream_counters_free(void);

void cuda_probe(fa_plugin_probe *out);
/* Whether environment variable `name` is set to exactly "1" (the plugin's opt-ins and test
   knobs, docs/backends.md). */
int cuda_env_is_one(const char *name);
void cuda_decide(const fa_request *req, fa_decision *out);
fa_status cuda_run(const fa_request *req, const fa_decision *decision, void *workspace);
void cuda_release(void);

/* The grid of fa3's persistent kernels on a device: its SM count, or FA_CUDA_FA3_GRID=N's smaller
   N (a test knob: small cases then make every block loop over many tiles). */
int32_t cuda_fa3_grid(const cuda_device_info *dev);

/* Accepts a request for fa3 forward configuration `config` on dev (tiles tile_m x tile_n): the
   choice cuda_run reads, one piece of keys, deterministic (every output one block's, its key tiles
   in order), workspace_bytes as given. The kernel's name is the caller's. */
void cuda_fa3_fwd_accept(fa_decision *out, const cuda_device_info *dev, int config, int tile_m,
                         int tile_n, size_t workspace_bytes);

/* The kernels' view of a request's sizes, scale, softcap and mask (core/math/mask.h's form). */
cuda_problem cuda_problem_of(const fa_request *req);

/* A tensor's strides as the kernels take them: [batch, row, head] of a 4-D tensor; a packed
   [total, heads, dim] one has batch stride 0. */
void cuda_strides_of(const fa_tensor *t, cuda_strides *s);

/* The strides of the request's lse: [batch, heads_q, rows], or packed [heads_q, total_q] (batch
   stride 0) where req->lse_packed. */
void cuda_lse_strides_of(const fa_request *req, cuda_lse_strides *s);

/* The forward's arguments of a request: q, k, v, out and lse (NULL without data; packed
   [heads_q, total_q] where req->lse_packed) with their strides, and cuda_problem_of. */
void cuda_fwd_args_of(const fa_request *req, cuda_fwd_args *a);

/* An int32 index tensor's first element in device memory, or NULL for none. */
const int32_t *cuda_index_ptr(const fa_tensor *t);

/* The tables and mask of a request over sequences of their own lengths (cu_seqlens_q/k, seqused_k;
   NULL pointers where absent): what the kernels of common/seq_index.cuh read. total_k stays 0
   where the keys are paged (cu_seqlens_k does not index them then). */
void cuda_seq_index_of(const fa_request *req, cuda_seq_index *ix);

/* The deterministic backward's number of dQ accumulators for fa2 (cuda_sizing.c). */
int32_t cuda_bwd_dq_splits(const fa_request *req, int32_t tile_n, int32_t sm_count);

/* What decides the backward's workspace, filled alike by decide and run: a->p, the sequences'
   tables (a->seqs, a->ix) where the request has them, the padded head dim and query tile of cfg,
   the dQ accumulators (deterministic: cuda_bwd_dq_splits) and the balanced last wave
   (fa2_bwd_plan_tail over the device's sm_count SMs; none over sequences). */
void cuda_bwd_sizing(const fa_request *req, const fa2_tile_config *cfg, int32_t deterministic,
                     int32_t sm_count, cuda_bwd_args *a);
/* The same for fa3's backward (fa3_bwd_sizing; deterministic: fa3_sched_det_splits over `grid`
   one-block SMs, so that FA_CUDA_FA3_GRID's small grids give a split several key tiles). */
void cuda_fa3_bwd_sizing(const fa_request *req, int32_t deterministic, int32_t grid,
                         cuda_bwd_args *a);

#endif /* FA_CUDA_INTERNAL_H */
