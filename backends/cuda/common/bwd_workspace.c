/*
 * bwd_workspace.c: the backward's device workspace, which both kernel families carve alike: D and
 * the LSE in log2 units (one float per padded query row), the fp32 dQ accumulator(s), fa2's
 * balanced last wave's sums and counters, the persistent grid's work counters; and the
 * preprocessing step that clears and fills it.
 */
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "attn_args.h"

/* a->tile_m: the backward's query tile (fa2_bwd_config), set by the caller. */
static int32_t padded_rows(const cuda_bwd_args *a) {
  const int32_t m = a->tile_m > 0 ? a->tile_m : 1;
  return (a->p.seqlen_q + m - 1) / m * m;
}

/* D or the log2 LSE, rounded up to 256 bytes so what follows stays aligned. */
static size_t dsum_bytes(const cuda_bwd_args *a) {
  size_t n = (size_t)cuda_bwd_split_rows(a) * sizeof(float);
  return (n + 255) & ~(size_t)255;
}

/* Padded like D to whole query tiles, and to the kernel's head dim, so the main kernel adds into
   it without bounds checks. */
static size_t dq_accum_bytes(const cuda_bwd_args *a) {
  return (size_t)a->dq_splits * (size_t)cuda_bwd_split_rows(a) * (size_t)a->head_dim_padded *
         sizeof(float);
}

/* The balanced last wave's dK/dV sums (fp32, both) and counters, one per cut tile. */
static size_t tail_acc_bytes(const cuda_bwd_args *a) {
  return (size_t)a->tail_tiles * 2 * (size_t)a->tile_n * (size_t)a->head_dim_padded * sizeof(float);
}
static size_t tail_count_bytes(const cuda_bwd_args *a) {
  return ((size_t)a->tail_tiles * sizeof(uint32_t) + 255) & ~(size_t)255;
}

static size_t sched_count_bytes(const cuda_bwd_args *a) {
  return ((size_t)(a->sched_counters > 0 ? a->sched_counters : 0) * sizeof(uint32_t) + 255) &
         ~(size_t)255;
}

size_t cuda_bwd_workspace_bytes(const cuda_bwd_args *a) {
  return 2 * dsum_bytes(a) + dq_accum_bytes(a) + tail_acc_bytes(a) + tail_count_bytes(a) +
         sched_count_bytes(a);
}

void cuda_bwd_carve(cuda_bwd_args *a, void *workspace) {
  a->seqlen_q_padded = padded_rows(a);
  a->ws_head = cuda_bwd_head_rows(a);
  char *ws = (char *)workspace;
  a->dsum = (float *)ws;
  a->lse_log2 = (float *)(ws + dsum_bytes(a));
  a->dq_accum = (float *)(ws + 2 * dsum_bytes(a));
  a->tail_acc = (float *)(ws + 2 * dsum_bytes(a) + dq_accum_bytes(a));
  a->tail_count = (uint32_t *)((char *)a->tail_acc + tail_acc_bytes(a));
  a->sched_count =
      a->sched_counters > 0 ? a->tail_count + tail_count_bytes(a) / sizeof(uint32_t) : NULL;
}

int cuda_bwd_prologue(const cuda_bwd_args *a) {
  /* The tail's sums and counters (adjacent) by a memset; the dQ accumulator by dot_do_o. */
  int e = 0;
  const size_t tail = tail_acc_bytes(a) + tail_count_bytes(a);
  if (tail > 0) e = (int)cudaMemsetAsync(a->tail_acc, 0, tail, (cudaStream_t)a->p.stream);
  if (e == 0) e = cuda_bwd_dot_do_o_launch(a);
  return e;
}
