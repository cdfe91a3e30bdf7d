/*
 * cuda_stream_counters.c: the fa3 forward's dynamic-schedule counter pair, one per (device,
 * stream), kept in device memory from call to call.
 *
 * A dynamic schedule's blocks take tiles from a counter that must read zero at launch. Taken from
 * the call's workspace it costs an allocation, a memset and a free on every call (host time the
 * causal forward paid over the unmasked one, bench/NOTES.md). Kept per stream, it is zeroed once
 * when first handed out (a memset on that stream) and then by the kernel itself: the last block
 * out clears it (fa3_sched_finish), so the next launch on the stream finds zeros in stream order.
 *
 * Streams are told apart by cudaStreamGetId, whose ids a context never reuses: a destroyed
 * stream's work still in flight never shares a counter with a stream created after it. A stream
 * that is capturing a graph gets none (a graph may be replayed on any stream, several at once):
 * such a call takes its counter from the workspace as before. A call given a workspace takes the
 * kept counter too (no memset per call), but never allocates the slab: a caller's workspace
 * promises a call that allocates nothing, so before the slab exists the workspace's counter
 * serves. fa_release frees the counters (cudaFree waits for the kernels using them); a call holds
 * them from its look-up through its launch (a read lock), so that fa_release on another thread
 * never frees one in between.
 */
#define _POSIX_C_SOURCE 200809L /* pthread_rwlock_t */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>

#include "cuda_internal.h"
#include "fa3_sm90/fa3_args.h"

typedef struct stream_counters {
  int32_t *slab; /* CUDA_STREAM_COUNTERS pairs of int32 on the device, allocated at first use */
  int32_t used;
  unsigned long long ids[CUDA_STREAM_COUNTERS];
} stream_counters;

static pthread_mutex_t counters_lock = PTHREAD_MUTEX_INITIALIZER;   /* the tables */
static pthread_rwlock_t counters_life = PTHREAD_RWLOCK_INITIALIZER; /* the slabs */
static stream_counters counters[CUDA_MAX_DEVICES];

int32_t *cuda_stream_counter_hold(int device, void *stream, int given_workspace) {
#if CUDART_VERSION < 12000 /* no cudaStreamGetId */
  (void)device;
  (void)stream;
  (void)given_workspace;
  return NULL;
#else
  const cudaStream_t s = (cudaStream_t)stream;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (device < 0 || device >= CUDA_MAX_DEVICES ||
      cudaStreamIsCapturing(s, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone ||
      cudaStreamGetId(s, &id) != cudaSuccess) {
    cudaGetLastError(); /* not the launch's error to report */
    return NULL;
  }
  pthread_rwlock_rdlock(&counters_life);
  pthread_mutex_lock(&counters_lock);
  stream_counters *c = &counters[device];
  int32_t *pair = NULL;
  for (int i = 0; i < c->used && !pair; ++i)
    if (c->ids[i] == id) pair = c->slab + 2 * i;
  if (!pair && c->used < CUDA_STREAM_COUNTERS) {
    if (!c->slab && !given_workspace &&
        cudaMalloc((void **)&c->slab, 2 * sizeof(int32_t) * CUDA_STREAM_COUNTERS) != cudaSuccess)
      c->slab = NULL;
    if (c->slab &&
        cudaMemsetAsync(c->slab + 2 * c->used, 0, FA3_TILE_COUNTER_BYTES, s) == cudaSuccess) {
      pair = c->slab + 2 * c->used;
      c->ids[c->used++] = id;
    }
  }
  pthread_mutex_unlock(&counters_lock);
  if (!pair) {
    pthread_rwlock_unlock(&counters_life);
    cudaGetLastError();
  }
  return pair;
#endif
}

void cuda_stream_counter_drop(void) { pthread_rwlock_unlock(&counters_life); }

void cuda_stream_counters_free(void) {
  pthread_rwlock_wrlock(&counters_life);
  for (int d = 0; d < CUDA_MAX_DEVICES; ++d) {
    if (counters[d].slab) cudaFree(counters[d].slab);
    counters[d].slab = NULL;
    counters[d].used = 0;
  }
  pthread_rwlock_unlock(&counters_life);
}
