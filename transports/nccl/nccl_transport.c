/*
 * nccl_transport.c: the ring's NCCL transport (core/transport.h), libfa_nccl.so, for tensors in
 * CUDA device memory.
 *
 * fa_ring_args.comm is the address of the caller's ncclComm_t; params.stream is the caller's
 * cudaStream_t (NULL: the legacy default stream of the communicator's device). A ring call does not
 * split or duplicate the communicator (ncclCommSplit is collective and costs milliseconds per
 * call): it issues its NCCL operations on the caller's communicator, in the same order on every
 * rank (the agreement's all-reduce, then the exchanges in ring order). NCCL matches point-to-point
 * messages by their order between two ranks, so the channel is not needed as a tag. As for every
 * user of an NCCL communicator, the caller must therefore not issue other operations on that
 * communicator from another thread, or on another stream from another thread, while a ring call
 * runs; operations it enqueued before the call, or enqueues after it, are fine (NCCL runs the
 * operations of a communicator in the order they were issued).
 *
 * Streams and events. Each ring call (open to close) creates a communication stream of its own on
 * the communicator's device (non-blocking, the device's highest priority, so that NCCL's kernels
 * are scheduled beside the compute on the caller's stream). exchange_start records an event on the
 * caller's stream and makes the communication stream wait for it (the data to send, and the last
 * readers of the receive buffer, are work already enqueued there), then issues ncclSend and
 * ncclRecv in one group on the communication stream and records a "done" event after them;
 * exchange_wait makes the caller's stream wait for that event, without blocking the host. Pending
 * exchanges come from a small pool of events owned by the call (the forward keeps one exchange in
 * flight, the backward one K/V and one dK/dV exchange). allreduce_max, the ranks' agreement before
 * the ring starts, blocks the host until the reduction is done. close does not block the host
 * either: it orders the caller's stream after everything enqueued on the communication stream (so
 * buffers freed in the caller's stream order are never in use by an exchange, even one an error
 * path did not wait for) and releases the stream, the events and the device buffer in stream order.
 *
 * Errors: NCCL failures are FA_ERR_BACKEND_FAILURE with ncclGetErrorString (and ncclGetLastError's
 * detail), CUDA failures likewise with cudaGetErrorString. A nonblocking communicator
 * (ncclConfig_t.blocking = 0) is polled while it answers ncclInProgress. A communicator in an
 * asynchronous error (ncclCommGetAsyncError) is reported at open, at the agreement and at every
 * exchange_start; when a peer fails in the middle of a ring, this rank's NCCL kernels wait for it,
 * as for any NCCL use: ncclCommAbort is the caller's recourse.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/transport.h"
#include "nccl_lib.h"

/* libnccl's functions, set by the probe; the core opens no ring on a transport whose probe
   failed. */
static const nccl_lib *nccl;

/* The agreement's values: 1 + 2 * FACTS int64s in core/ring.c; the buffer grows if ever needed. */
#define VALUES_MIN 64

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define HAVE_NCCL_IN_PROGRESS 1
#else
#define HAVE_NCCL_IN_PROGRESS 0
#endif

/* One exchange's completion, recycled within a ring call. */
typedef struct nccl_exchange {
  cudaEvent_t done; /* recorded on the communication stream after the group */
  int busy;         /* handed out by exchange_start, not yet back from exchange_wait */
  struct nccl_exchange *next;
} nccl_exchange;

typedef struct nccl_ring_comm {
  ncclComm_t comm;     /* the caller's, not owned */
  cudaStream_t user;   /* params.stream (NULL: the legacy default stream) */
  cudaStream_t stream; /* the communication stream, owned */
  cudaEvent_t ready;   /* the caller's stream's progress, recorded before each exchange */
  int device;          /* ncclCommCuDevice */
  int pools;           /* the device has stream-ordered allocation (cudaMallocAsync) */
  int64_t *values;     /* device buffer of allreduce_max */
  int32_t capacity;    /* its length in int64 */
  nccl_exchange *exchanges;
} nccl_ring_comm;

/* --- errors --- */

static fa_status cuda_failed(const char *what, cudaError_t e) {
  return fa_core_set_error(FA_ERR_BACKEND_FAILURE, "nccl transport: %s failed: %s (%s)", what,
                           cudaGetErrorString(e), cudaGetErrorName(e));
}

static fa_status nccl_failed(ncclComm_t comm, const char *what, ncclResult_t rc) {
  const char *detail = nccl->GetLastError ? nccl->GetLastError(comm) : NULL;
  return fa_core_set_error(FA_ERR_BACKEND_FAILURE, "nccl transport: %s failed: %s%s%s", what,
                           nccl->GetErrorString(rc), detail && detail[0] ? ": " : "",
                           detail && detail[0] ? detail : "");
}

/* A nonblocking communicator answers ncclInProgress while an operation is still being enqueued or
   the communicator initialised: wait until it settles (NCCL's documented polling loop). */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t rc) {
#if HAVE_NCCL_IN_PROGRESS
  while (rc == ncclInProgress) {
    ncclResult_t state = ncclSuccess;
    if (nccl->CommGetAsyncError(comm, &state) != ncclSuccess) break;
    rc = state;
  }
#endif
  return rc;
}

static fa_status nccl_check(ncclComm_t comm, const char *what, ncclResult_t rc) {
  rc = settle(comm, rc);
  return rc == ncclSuccess ? FA_OK : nccl_failed(comm, what, rc);
}

/* The communicator's asynchronous error (host-side, cheap). */
static fa_status comm_healthy(ncclComm_t comm, const char *where) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t rc = nccl->CommGetAsyncError(comm, &state);
  if (rc != ncclSuccess) return nccl_failed(comm, "ncclCommGetAsyncError", rc);
  state = settle(comm, state);
  if (state == ncclSuccess) return FA_OK;
  return fa_core_set_error(FA_ERR_BACKEND_FAILURE,
                           "nccl transport: %s: the communicator reports an asynchronous error: %s "
                           "(the caller aborts it with ncclCommAbort)",
                           where, nccl->GetErrorString(state));
}

/* --- the communicator's device, current while the plugin calls CUDA (the legacy default stream
   and new streams, events and allocations belong to the current device) --- */

static cudaError_t enter_device(int device, int *prev) {
  cudaError_t e = cudaGetDevice(prev);
  if (e == cudaSuccess && *prev != device) e = cudaSetDevice(device);
  return e;
}

static void leave_device(int device, int prev) {
  if (prev != device) cudaSetDevice(prev);
}

/* --- the agreement's device buffer --- */

static void values_free(nccl_ring_comm *c) {
  if (!c->values) return;
  if (c->pools) {
    cudaFreeAsync(c->values, c->stream);
  } else {
    cudaStreamSynchronize(c->stream);
    cudaFree(c->values);
  }
  c->values = NULL;
  c->capacity = 0;
}

static fa_status values_alloc(nccl_ring_comm *c, int32_t count) {
  void *p = NULL;
  const size_t bytes = (size_t)count * sizeof(int64_t);
  cudaError_t e = c->pools ? cudaMallocAsync(&p, bytes, c->stream) : cudaMalloc(&p, bytes);
  if (e != cudaSuccess) return cuda_failed(c->pools ? "cudaMallocAsync" : "cudaMalloc", e);
  values_free(c);
  c->values = p;
  c->capacity = count;
  return FA_OK;
}

/* --- the table --- */

static void nccl_probe(fa_transport_probe *out) {
  out->available = 0;
  out->reason[0] = '\0';
  out->runtime[0] = '\0';
  /* The device first: without one, libnccl is not loaded at all (nccl_lib.h). */
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) {
    snprintf(out->reason, sizeof out->reason, "no CUDA device: %s (%s)", cudaGetErrorString(e),
             cudaGetErrorName(e));
    return;
  }
  if (devices <= 0) {
    snprintf(out->reason, sizeof out->reason, "no CUDA device (cudaGetDeviceCount reports 0)");
    return;
  }
  nccl = nccl_lib_load(out->reason, sizeof out->reason);
  if (!nccl) return;
  int code = 0;
  ncclResult_t rc = nccl->GetVersion(&code);
  if (rc != ncclSuccess) {
    snprintf(out->reason, sizeof out->reason, "ncclGetVersion failed: %s",
             nccl->GetErrorString(rc));
    nccl = NULL;
    return;
  }
  /* NCCL_VERSION_CODE: major*1000 + minor*100 + patch up to 2.8, major*10000 + minor*100 + patch
     from 2.9 on. */
  const int wide = code >= 20900;
  const int major = wide ? code / 10000 : code / 1000;
  const int minor = wide ? code % 10000 / 100 : code % 1000 / 100;
  snprintf(out->runtime, sizeof out->runtime, "NCCL %d.%d.%d (%.180s%s)", major, minor, code % 100,
           nccl->path, nccl->already_loaded ? ", the process's own" : "");
  out->available = 1;
}

static void release(nccl_ring_comm *c) {
  int prev = c->device;
  const int entered = enter_device(c->device, &prev) == cudaSuccess;
  if (c->stream && c->ready) {
    /* Whatever the caller enqueues next (the ring's frees) waits for every exchange. */
    if (cudaEventRecord(c->ready, c->stream) == cudaSuccess)
      cudaStreamWaitEvent(c->user, c->ready, 0);
  }
  for (nccl_exchange *x = c->exchanges, *next; x; x = next) {
    next = x->next;
    cudaEventDestroy(x->done); /* released once recorded work completes */
    free(x);
  }
  values_free(c);
  if (c->ready) cudaEventDestroy(c->ready);
  if (c->stream) cudaStreamDestroy(c->stream); /* released once its work completes */
  if (entered) leave_device(c->device, prev);
  free(c);
}

static fa_status setup(nccl_ring_comm *c) {
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e != cudaSuccess) return cuda_failed("cudaDeviceGetStreamPriorityRange", e);
  e = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest);
  if (e != cudaSuccess) {
    c->stream = NULL;
    return cuda_failed("cudaStreamCreateWithPriority", e);
  }
  e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    c->ready = NULL;
    return cuda_failed("cudaEventCreateWithFlags", e);
  }
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, c->device) != cudaSuccess) {
    cudaGetLastError(); /* not fatal: plain cudaMalloc then */
    pools = 0;
  }
  c->pools = pools != 0;
  return values_alloc(c, VALUES_MIN);
}

static fa_status nccl_open(void *handle, void *stream, void **comm, int32_t *rank, int32_t *world,
                           int32_t *device_out) {
  if (!handle)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT,
                             "ring.comm: NULL, but the NCCL transport takes the address of an "
                             "ncclComm_t");
  ncclComm_t user = *(ncclComm_t *)handle;
  if (!user)
    return fa_core_set_error(FA_ERR_INVALID_ARGUMENT, "ring.comm: *comm is a NULL ncclComm_t");
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (stream && cudaStreamIsCapturing((cudaStream_t)stream, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone)
    return fa_core_set_error(FA_ERR_UNSUPPORTED,
                             "params.stream is capturing a CUDA graph: the NCCL ring cannot be "
                             "captured (its agreement waits for an all-reduce on the host); call "
                             "it outside the capture");
  fa_status st = comm_healthy(user, "ring.comm");
  if (st != FA_OK) return st;
  int r = 0, w = 0, device = 0;
  if ((st = nccl_check(user, "ncclCommUserRank", nccl->CommUserRank(user, &r))) != FA_OK ||
      (st = nccl_check(user, "ncclCommCount", nccl->CommCount(user, &w))) != FA_OK ||
      (st = nccl_check(user, "ncclCommCuDevice", nccl->CommCuDevice(user, &device))) != FA_OK)
    return st;
  nccl_ring_comm *c = calloc(1, sizeof *c);
  if (!c) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "nccl transport: no memory");
  c->comm = user;
  c->user = (cudaStream_t)stream;
  c->device = device;
  int prev = device;
  cudaError_t e = enter_device(device, &prev);
  if (e != cudaSuccess) {
    free(c);
    return cuda_failed("cudaSetDevice (the communicator's device)", e);
  }
  st = setup(c);
  leave_device(device, prev);
  if (st != FA_OK) {
    release(c);
    return st;
  }
  *rank = r;
  *world = w;
  *device_out = device;
  *comm = c;
  return FA_OK;
}

static fa_status allreduce_on_device(nccl_ring_comm *c, int64_t *values, int32_t count) {
  if (count > c->capacity) {
    fa_status st = values_alloc(c, count);
    if (st != FA_OK) return st;
  }
  const size_t bytes = (size_t)count * sizeof *values;
  cudaError_t e = cudaMemcpyAsync(c->values, values, bytes, cudaMemcpyHostToDevice, c->stream);
  if (e != cudaSuccess) return cuda_failed("cudaMemcpyAsync (to the device)", e);
  fa_status st = nccl_check(
      c->comm, "ncclAllReduce",
      nccl->AllReduce(c->values, c->values, (size_t)count, ncclInt64, ncclMax, c->comm, c->stream));
  if (st != FA_OK) return st;
  e = cudaMemcpyAsync(values, c->values, bytes, cudaMemcpyDeviceToHost, c->stream);
  if (e != cudaSuccess) return cuda_failed("cudaMemcpyAsync (to the host)", e);
  e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) return cuda_failed("cudaStreamSynchronize (the agreement)", e);
  return comm_healthy(c->comm, "the agreement's all-reduce");
}

static fa_status nccl_allreduce_max(void *comm, int64_t *values, int32_t count) {
  nccl_ring_comm *c = comm;
  if (count <= 0) return FA_OK;
  int prev = c->device;
  cudaError_t e = enter_device(c->device, &prev);
  if (e != cudaSuccess) return cuda_failed("cudaSetDevice (the communicator's device)", e);
  fa_status st = allreduce_on_device(c, values, count);
  leave_device(c->device, prev);
  return st;
}

/* An exchange's event: a free one of the pool, or a new one. */
static fa_status exchange_take(nccl_ring_comm *c, nccl_exchange **out) {
  nccl_exchange *x = c->exchanges;
  while (x && x->busy) x = x->next;
  if (!x) {
    x = calloc(1, sizeof *x);
    if (!x) return fa_core_set_error(FA_ERR_OUT_OF_MEMORY, "nccl transport: no memory");
    cudaError_t e = cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      free(x);
      return cuda_failed("cudaEventCreateWithFlags", e);
    }
    x->next = c->exchanges;
    c->exchanges = x;
  }
  x->busy = 1;
  *out = x;
  return FA_OK;
}

static fa_status exchange_issue(nccl_ring_comm *c, nccl_exchange *x, const void *send, int32_t to,
                                void *recv, int32_t from, size_t bytes) {
  /* After the caller's work so far: what produces send, what last reads recv. */
  cudaError_t e = cudaEventRecord(c->ready, c->user);
  if (e != cudaSuccess) return cuda_failed("cudaEventRecord (the caller's stream)", e);
  e = cudaStreamWaitEvent(c->stream, c->ready, 0);
  if (e != cudaSuccess) return cuda_failed("cudaStreamWaitEvent (the communication stream)", e);
  ncclResult_t rc = nccl->GroupStart();
  if (rc != ncclSuccess) return nccl_failed(c->comm, "ncclGroupStart", rc);
  /* NCCL counts are size_t: no limit below the message's size. */
  const ncclResult_t rs = nccl->Send(send, bytes, ncclInt8, to, c->comm, c->stream);
  const ncclResult_t rr =
      rs == ncclSuccess ? nccl->Recv(recv, bytes, ncclInt8, from, c->comm, c->stream) : ncclSuccess;
  const ncclResult_t re = settle(c->comm, nccl->GroupEnd()); /* closes the group in any case */
  if (rs != ncclSuccess) return nccl_failed(c->comm, "ncclSend", rs);
  if (rr != ncclSuccess) return nccl_failed(c->comm, "ncclRecv", rr);
  if (re != ncclSuccess) return nccl_failed(c->comm, "ncclGroupEnd", re);
  e = cudaEventRecord(x->done, c->stream);
  if (e != cudaSuccess) return cuda_failed("cudaEventRecord (the communication stream)", e);
  return FA_OK;
}

static fa_status nccl_exchange_start(void *comm, int32_t channel, const void *send, int32_t to,
                                     void *recv, int32_t from, size_t bytes, void **pending) {
  nccl_ring_comm *c = comm;
  (void)channel; /* NCCL matches a pair's messages by their order, the same on every rank */
  *pending = NULL;
  /* Every rank's message of an exchange has the same size (the ring's agreement): with none, no
     rank posts anything. */
  if (bytes == 0) return FA_OK;
  fa_status st = comm_healthy(c->comm, "exchange");
  if (st != FA_OK) return st;
  int prev = c->device;
  cudaError_t e = enter_device(c->device, &prev);
  if (e != cudaSuccess) return cuda_failed("cudaSetDevice (the communicator's device)", e);
  nccl_exchange *x = NULL;
  st = exchange_take(c, &x);
  if (st == FA_OK) st = exchange_issue(c, x, send, to, recv, from, bytes);
  leave_device(c->device, prev);
  if (st != FA_OK) {
    /* What did get enqueued is still waited for by close (it orders the caller's stream after the
       communication stream). */
    if (x) x->busy = 0;
    return st;
  }
  *pending = x;
  return FA_OK;
}

static fa_status nccl_exchange_wait(void *comm, void *pending) {
  nccl_ring_comm *c = comm;
  nccl_exchange *x = pending;
  if (!x) return FA_OK;
  x->busy = 0;
  int prev = c->device;
  cudaError_t e = enter_device(c->device, &prev);
  if (e != cudaSuccess) return cuda_failed("cudaSetDevice (the communicator's device)", e);
  /* The caller's stream, not the host, waits: the compute that reads recv follows the exchange. */
  e = cudaStreamWaitEvent(c->user, x->done, 0);
  leave_device(c->device, prev);
  return e == cudaSuccess ? FA_OK : cuda_failed("cudaStreamWaitEvent (the caller's stream)", e);
}

static void nccl_close(void *comm) {
  if (comm) release(comm);
}

FA_TRANSPORT_DEFINE(FA_TRANSPORT_NCCL, "nccl", nccl_probe, nccl_open, nccl_allreduce_max,
                    nccl_exchange_start, nccl_exchange_wait, nccl_close)
