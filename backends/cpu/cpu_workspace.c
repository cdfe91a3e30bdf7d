/*
 * cpu_workspace.c: the workspace layout, one definition for decide() (how many bytes) and run()
 * (where each thread's buffers are), so the two can never disagree.
 *
 * The run allocates nothing: the caller's (or the core's) workspace holds an alignment slack, the
 * shared arrays of the pass, and one scratch region per thread. decide() sizes it for
 * omp_get_max_threads() threads (never more than there are tasks); run() derives from the bytes it
 * got how many regions there are and never starts more threads than that, so a thread count
 * changed between decide() and run() (omp_set_num_threads) can only make the run use fewer.
 */
#include <limits.h>
#include <omp.h>

#include "cpu_internal.h"
#include "cpu_kv_share.h"

static size_t align_up(size_t bytes) { return (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN; }

float *cpu_scratch_take(char *base, size_t *offset, size_t floats) {
  size_t at = *offset;
  *offset = at + align_up(floats * sizeof(float));
  return base ? (float *)(void *)(base + at) : NULL;
}

int64_t cpu_parallel_tasks(const cpu_problem *pb, fa_op op) {
  int64_t query_tasks = pb->batch * pb->heads_q * pb->q_tiles;
  if (op != FA_OP_BACKWARD) return query_tasks / pb->pack * pb->splits;
  int64_t key_tasks = pb->batch * pb->heads_kv * pb->k_tiles;
  return query_tasks > key_tasks ? query_tasks : key_tasks;
}

/* A split forward's partial (m, l, O), one per chunk of every query tile. */
static size_t partial_bytes(const cpu_problem *pb) {
  if (pb->splits <= 1) return 0;
  return align_up((size_t)pb->batch * (size_t)(pb->heads_q / pb->pack) * (size_t)pb->q_tiles *
                  (size_t)pb->splits * cpu_split_partial_floats(pb) * sizeof(float));
}

/* The backward pass's D = rowsum(dO ∘ O), one float per query row of every head; the forward's
   partials, then its shared K/V tiles (cpu_kv_share.h). */
static size_t shared_bytes(const cpu_problem *pb, fa_op op) {
  if (op != FA_OP_BACKWARD)
    return partial_bytes(pb) + cpu_kv_share_bytes(pb, cpu_kv_share_budget());
  return align_up((size_t)pb->batch * (size_t)pb->heads_q * (size_t)pb->seqlen_q * sizeof(float));
}

static size_t thread_bytes(const cpu_problem *pb, fa_op op) {
  return op == FA_OP_BACKWARD ? cpu_backward_thread_bytes(pb) : cpu_forward_thread_bytes(pb);
}

size_t cpu_workspace_bytes(const cpu_problem *pb, fa_op op, int threads) {
  size_t total = shared_bytes(pb, op) + thread_bytes(pb, op) * (size_t)threads;
  /* The slack lets run() align a workspace handed over at any address. */
  return total ? total + CPU_ALIGN : 0;
}

fa_status cpu_workspace_split(const cpu_problem *pb, fa_op op, void *workspace, size_t bytes,
                              cpu_workspace *ws) {
  size_t shared = shared_bytes(pb, op);
  ws->shared = NULL;
  ws->kv_share = NULL;
  ws->threads_base = NULL;
  ws->thread_bytes = thread_bytes(pb, op);
  ws->threads = 0;
  if (bytes == 0 && shared == 0) return FA_OK;
  if (!workspace || bytes < CPU_ALIGN + shared)
    return fa_core_set_error(FA_ERR_INTERNAL,
                             "cpu: workspace of %zu bytes at %p is smaller than the %zu bytes "
                             "decide() asked for",
                             bytes, workspace, cpu_workspace_bytes(pb, op, 1));
  uintptr_t at = (uintptr_t)workspace;
  char *base = (char *)workspace + (CPU_ALIGN - at % CPU_ALIGN) % CPU_ALIGN;
  ws->shared = shared ? (float *)(void *)base : NULL;
  if (op != FA_OP_BACKWARD && shared > partial_bytes(pb)) /* the K/V tiles follow the partials */
    ws->kv_share = base + partial_bytes(pb);
  ws->threads_base = base + shared;
  size_t regions = ws->thread_bytes ? (bytes - CPU_ALIGN - shared) / ws->thread_bytes : 0;
  ws->threads = regions > INT_MAX ? INT_MAX : (int)regions;
  return FA_OK;
}

int cpu_team_size(const cpu_workspace *ws, int64_t tasks) {
  int64_t n = omp_get_max_threads();
  if (n > ws->threads) n = ws->threads;
  if (n > tasks) n = tasks;
  return n < 1 ? 0 : (int)n;
}
