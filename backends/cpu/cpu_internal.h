/*
 * cpu_internal.h: what the CPU plugin's files share: the problem as the kernels see it, the
 * workspace layout (one definition for decide() and run()), and the passes.
 */
#ifndef FA_CPU_INTERNAL_H
#define FA_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/mask.h"
#include "core/plugin.h"

/* Largest head dims and tiles the kernels take (decide() refuses larger head dims). */
#define CPU_MAX_HEAD_DIM 256
#define CPU_MAX_TILE_M 128
#define CPU_MAX_TILE_N 256

/* Scratch buffers start at this alignment (a cache line, and any vector width). */
#define CPU_ALIGN 64

/* A request reduced to what the passes use. */
typedef struct cpu_problem {
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  int64_t group; /* query heads per KV head: query head h reads KV head h / group */
  int d, dv;     /* head dims of q/k and of v */
  int tm, tn;    /* query rows and key rows per tile */
  int64_t q_tiles, k_tiles;
  float scale;
  fa_mask mask;
} cpu_problem;

void cpu_problem_init(cpu_problem *pb, const fa_request *req, int tile_m, int tile_n);

/* Rows [r0, r0 + rows) of a tile see the keys [c0, c0 + nc) through this mask: per row the
   visible columns [jlo, jhi) relative to c0 (for FA_TILE_PARTIAL tiles). */
void cpu_tile_row_bounds(const cpu_problem *pb, int64_t r0, int rows, int64_t c0, int nc, int *jlo,
                         int *jhi);

/* Carves a per-thread scratch region: advances *offset by the floats' bytes (aligned) and
   returns the buffer, or NULL when base is NULL (sizing only). */
float *cpu_scratch_take(char *base, size_t *offset, size_t floats);

/* Per-thread scratch bytes of each pass (each pass's one layout, also used for sizing). */
size_t cpu_forward_thread_bytes(const cpu_problem *pb);
size_t cpu_backward_thread_bytes(const cpu_problem *pb);

/* Independent tasks of the op's widest parallel loop: the most threads it can use. */
int64_t cpu_parallel_tasks(const cpu_problem *pb, fa_op op);

/* Workspace: [alignment slack][shared: D for the backward pass][one scratch region per thread].
   threads = number of per-thread regions. */
size_t cpu_workspace_bytes(const cpu_problem *pb, fa_op op, int threads);
/* Splits a workspace of `bytes` bytes: the shared region, the per-thread regions, how many. */
typedef struct cpu_workspace {
  float *shared;
  char *threads_base;
  size_t thread_bytes;
  int threads;
} cpu_workspace;
fa_status cpu_workspace_split(const cpu_problem *pb, fa_op op, void *workspace, size_t bytes,
                              cpu_workspace *ws);

/* Threads a parallel loop of `tasks` tasks uses with this workspace. */
int cpu_team_size(const cpu_workspace *ws, int64_t tasks);

fa_status cpu_forward(const fa_request *req, const cpu_problem *pb, const cpu_workspace *ws);
fa_status cpu_backward(const fa_request *req, const cpu_problem *pb, const cpu_workspace *ws);

/* The fast-memory budget for tiles (half the per-core L2), measured once. */
size_t cpu_fast_memory_bytes(void);

/* The plugin table's functions (fa_plugin in core/plugin.h). */
void cpu_probe(fa_plugin_probe *out);
void cpu_decide(const fa_request *req, fa_decision *out);

#endif /* FA_CPU_INTERNAL_H */
