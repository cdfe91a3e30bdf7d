/*
 * ring_case.h: one ring attention case as every rank of a ring test runs it (tests/test_ring.c on
 * the self transport, tests/test_ring_mpi.c under mpirun).
 *
 * Every rank draws the same whole-sequence inputs (the seed is the run's, mixed with the case's
 * name), takes its shard by the layout, runs fa_ring_forward then fa_ring_backward (on the ring's
 * own out and lse, as a caller would), and checks the rows it owns: against the float64 reference
 * by the suite's pass rule (tests/reference.h), and against fa_forward / fa_backward of one
 * process on the whole sequence, within the same tolerance.
 */
#ifndef FA_TESTS_RING_CASE_H
#define FA_TESTS_RING_CASE_H

#include <stdint.h>

#include "flash_attn.h"
#include "tensor_util.h"

/* What a case adds beyond its mask and shapes: the dropout and ALiBi that need the tokens' global
   positions, unequal local lengths and their alignment. */
typedef struct ring_extra {
  int64_t seqlen_k;     /* the local K/V shard's length; 0: the same as q's */
  int32_t causal_align; /* fa_causal_align */
  int alibi;            /* 0: none; 1: slopes [heads_q]; 2: slopes [batch, heads_q] */
  float dropout_p;
} ring_extra;

/* The extras both ring tests use: ALiBi per head, dropout, ALiBi per (batch, head) with dropout. */
extern const ring_extra ring_alibi_heads, ring_dropout, ring_alibi_batch_dropout;

typedef struct ring_case {
  const char *name;
  fa_dtype dtype;
  int causal;
  int32_t layout;                                                 /* fa_ring_layout */
  int64_t batch, seqlen, heads_q, heads_kv, head_dim, head_dim_v; /* seqlen: the local shard's */
  tu_layout_kind shards; /* how the local tensors are laid out in memory */
  int window;            /* non-zero: a sliding window of window_left/right keys (-1 unbounded) */
  int64_t window_left, window_right;
  const ring_extra *extra; /* NULL: none */
} ring_case;

/* Per output (out, lse, dq, dk, dv): the largest error against the float64 reference, the pass
   rule's tolerance, and the largest difference from the one-process result, on this rank. */
typedef struct ring_result {
  double err[5], tol[5], vs_one[5];
  long failures; /* failed checks on this rank (each printed, "[rank r] case: ...") */
} ring_result;

/* Runs c on this rank of the communicator in comm (rank and world as it says), with the case's
   layout, on host tensors. */
void ring_case_run(const ring_case *c, uint64_t seed, const fa_ring_args *comm, int rank, int world,
                   ring_result *res);
/* The same with every tensor of the ring and of the one-process calls in dev's memory (copies of
   the host tensors, gaps included, made with tools/device_mem.h; results copied back before they
   are checked); dev NULL: host. */
void ring_case_run_on(const ring_case *c, uint64_t seed, const fa_ring_args *comm, int rank,
                      int world, const fa_device *dev, ring_result *res);

/* The stream (params.stream) the ring calls of later cases run on; NULL (the default): the
   backend's default stream. The case synchronises the device around them (devmem_sync). */
void ring_case_set_stream(void *stream);

#endif /* FA_TESTS_RING_CASE_H */
